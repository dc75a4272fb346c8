"""Bucketed static shapes for the target's batched pass: what lets a captured forward (CUDA
graphs, torch.compile's "reduce-overhead") replay for every step that falls in a bucket.

A pass over B rows of at most T new tokens runs as Bp x Tp, the smallest buckets holding it,
over the whole preallocated KV storage (the key length is the slot capacity, the unused entries
masked), rows padded with one-token dummies that see only their own key. Every tensor the
forward sees then has a shape fixed by the bucket, and the KV writes are index writes with
tensor indices, so the forward is one graph with no host synchronisation (the test compiles it
with fullgraph=True). The price: attention over the capacity instead of the longest context
and padded rows; on a GPU a decode step of an 8B model is bound by launching ~500 kernels and
reading its weights, not by these (gpt-fast runs the same layout), which is what
bench/gpu/gpu_check.py measures when a GPU is lent. On a CPU the dynamic shapes stay: there is no
graph to replay, and the padding would cost real time.
"""

from __future__ import annotations

from dataclasses import dataclass

ROW_BUCKETS = (1, 2, 4, 8, 16, 32)
TOKEN_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class StaticShapes:
    """`capacity`: KV entries per slot (the longest context plus a pass's new tokens);
    `slots`: slots the storage holds (at least the largest row bucket used)."""

    capacity: int
    slots: int
    rows: tuple[int, ...] = ROW_BUCKETS
    tokens: tuple[int, ...] = TOKEN_BUCKETS

    @classmethod
    def for_engine(cls, max_context: int, max_running: int) -> StaticShapes:
        """Room for every running request's longest context plus the largest token bucket."""
        slots = next((b for b in ROW_BUCKETS if b >= max_running), max_running)
        return cls(capacity=max_context + TOKEN_BUCKETS[-1], slots=slots)

    def bucket(self, first_slot: int, rows: int, tokens: int,
               longest: int) -> tuple[int, int] | None:
        """(padded rows, padded tokens) of a pass over slots first_slot..first_slot+rows-1 whose
        longest committed context is `longest`, or None where it fits no bucket (it then runs
        with dynamic shapes)."""
        r = next((b for b in self.rows if b >= rows), None)
        t = next((b for b in self.tokens if b >= tokens), None)
        if r is None or t is None or first_slot + r > self.slots:
            return None
        if longest + t > self.capacity:
            return None
        return r, t
