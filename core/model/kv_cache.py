"""The target's KV cache for a batch of requests: one preallocated row ("slot") per request.

Layout (chosen for the batched verification pass, core/batching/step.py): per layer, keys and
values [slots, nkv, capacity, hd], each slot holding its request's committed prefix at entries
0..length-1. A forward over rows R writes each row's T new entries at length..length+T-1 in
place and attends over the first max(length)+T entries of those rows; the 4D mask
(Target.forward_rows) hides other rows' padding, so rows of different lengths share one pass.
After verification `keep` moves each row's accepted entries down next to its prefix: O(accepted)
per row, where concatenating the tree onto a DynamicCache and `index_select`-compacting it
copied the whole context twice per round.

Why padded rows and not a flat (packed) layout: packing every request's tree into one sequence
makes each query score every request's keys (masked), B times the attention work of the
padded layout at B rows, and needs the caches concatenated each pass; padding costs only the
gap to the longest row. Slots stay contiguous (a released slot takes the last one's contents),
so the common batch, every running request, is a view of the storage, not a gather (a batch
that skips a slot, e.g. a request still prefilling, gathers its rows for that pass).

Memory: slots x the longest context so far (the storage grows, never shrinks, while requests
run; core/batching/scheduler.py drops it when the engine goes idle). A paged layout would hold only
each request's own pages; it needs an attention kernel over pages, which transformers' SDPA
path does not have.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from transformers.cache_utils import Cache, CacheLayerMixin

GROWTH = 1.5
ALIGN = 64  # capacity grows in multiples of this many entries


@dataclass
class _Batch:
    """What the forward in progress reads and writes."""

    rows: slice | Tensor = field(default_factory=lambda: slice(0, 0))
    starts: Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))
    kv_len: int = 0
    slots: int = 0  # slots the storage must hold
    capacity: int = 0  # entries per slot the storage must hold
    # Static shapes (core/model/static_shapes.py): rows padded to a bucket, written with tensor
    # indices (`row_index`, `starts` on the storage's device), the key length the capacity.
    static: bool = False
    row_index: Tensor | None = None
    # The pass's write positions as flat indices into a layer's storage viewed [-1, hd] (every
    # layer's storage has the same shape), computed by the first layer and reused by the rest:
    # one index_copy_ a tensor instead of building 2-D indices in each of the 30 layers.
    flat: Tensor | None = None
    flat_shape: tuple[int, ...] = ()
    rows_int32: Tensor | None = None  # the rows as indices (SlotLayer.write), once a pass


class SlotLayer(CacheLayerMixin):
    """One decoder layer's storage [slots, nkv, capacity, hd]."""

    is_sliding = False
    is_compileable = False

    def __init__(self, batch: _Batch) -> None:
        super().__init__()
        self.batch = batch

    def lazy_initialization(self, key_states: Tensor, value_states: Tensor) -> None:
        shape = (0, key_states.shape[1], 0, key_states.shape[3])
        self.keys = key_states.new_zeros(shape)
        self.values = value_states.new_zeros(shape)
        self.is_initialized = True

    def update(self, key_states: Tensor, value_states: Tensor, *args: Any,
               **kwargs: Any) -> tuple[Tensor, Tensor]:
        self._write(key_states, value_states)
        assert self.keys is not None and self.values is not None
        bt = self.batch
        return self.keys[bt.rows, :, : bt.kv_len], self.values[bt.rows, :, : bt.kv_len]

    def write(self, key_states: Tensor, value_states: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Write the pass's new entries and return the whole storage with the pass's rows'
        indices into it (int32 [B]): for a reader that takes rows in place (the canonical
        attention kernel), where `update`'s slice gathers the rows whenever they skip a slot."""
        self._write(key_states, value_states)
        assert self.keys is not None and self.values is not None
        bt = self.batch
        if bt.rows_int32 is None:
            bt.rows_int32 = _row_index(bt.rows, key_states.shape[0], self.keys.device).to(
                torch.int32)
        return self.keys, self.values, bt.rows_int32

    def _write(self, key_states: Tensor, value_states: Tensor) -> None:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self._fit()
        assert self.keys is not None and self.values is not None
        bt = self.batch
        t = key_states.shape[2]
        if bt.static:  # no host value: one graph for every pass of the bucket
            assert bt.row_index is not None
            cols = bt.starts[:, None] + torch.arange(t, device=self.keys.device)
            self.keys[bt.row_index[:, None], :, cols] = key_states.transpose(1, 2)
            self.values[bt.row_index[:, None], :, cols] = value_states.transpose(1, 2)
            return
        if isinstance(bt.rows, slice) and key_states.shape[0] == 1:
            s = int(bt.starts[0])
            self.keys[bt.rows, :, s : s + t] = key_states
            self.values[bt.rows, :, s : s + t] = value_states
            return
        flat, hd = self._flat_index(key_states.shape[0], t), self.keys.shape[-1]
        self.keys.view(-1, hd).index_copy_(0, flat, key_states.reshape(-1, hd))
        self.values.view(-1, hd).index_copy_(0, flat, value_states.reshape(-1, hd))

    def _flat_index(self, count: int, t: int) -> Tensor:
        """Where the pass's [count, nkv, t] new entries go in the storage viewed [-1, hd]."""
        assert self.keys is not None
        bt, shape, device = self.batch, tuple(self.keys.shape), self.keys.device
        if bt.flat is None or bt.flat_shape != shape:
            _, nkv, cap, _ = shape
            rows = _row_index(bt.rows, count, device)
            cols = bt.starts.to(device)[:, None] + torch.arange(t, device=device)  # [B, T]
            heads = torch.arange(nkv, device=device)[None, :, None]
            bt.flat = ((rows[:, None, None] * nkv + heads) * cap + cols[:, None, :]).reshape(-1)
            bt.flat_shape = shape
        return bt.flat

    def _fit(self) -> None:
        """Grow the storage to what the batch needs (zeros: padding never holds NaN)."""
        assert self.keys is not None and self.values is not None
        slots, cap = self.keys.shape[0], self.keys.shape[2]
        if slots >= self.batch.slots and cap >= self.batch.capacity:
            return
        shape = (max(slots, self.batch.slots), self.keys.shape[1], max(cap, self.batch.capacity),
                 self.keys.shape[3])
        keys, values = self.keys.new_zeros(shape), self.values.new_zeros(shape)
        keys[:slots, :, :cap], values[:slots, :, :cap] = self.keys, self.values
        self.keys, self.values = keys, values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.batch.kv_len, 0

    def get_seq_length(self) -> int:
        return max(self.batch.kv_len, 0)

    def get_max_length(self) -> int:
        return -1


class SlotCache(Cache):
    """Slots 0..used-1 are held by requests; `lengths[s]` = committed entries of slot s."""

    def __init__(self, num_layers: int) -> None:
        self._batch = _Batch()
        super().__init__(layers=[SlotLayer(self._batch) for _ in range(num_layers)])
        self.lengths: list[int] = []

    @property
    def used(self) -> int:
        return len(self.lengths)

    def acquire(self) -> int:
        self.lengths.append(0)
        return len(self.lengths) - 1

    def release(self, slot: int) -> int | None:
        """Free `slot`; the last slot's request moves into it (returns that old slot index)."""
        last = len(self.lengths) - 1
        moved = None
        if slot != last:
            n = self.lengths[last]
            for keys, values in self._storage() if n else []:  # n = 0: maybe not in the storage yet
                keys[slot, :, :n] = keys[last, :, :n]
                values[slot, :, :n] = values[last, :, :n]
            self.lengths[slot], moved = n, last
        self.lengths.pop()
        return moved

    def allocate(self, slots: int, capacity: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device) -> None:
        """Allocate every layer's storage now, at its final size (static shapes: a captured
        graph keeps the storage's addresses, so it must never be reallocated)."""
        bt = self._batch
        bt.slots, bt.capacity = max(bt.slots, slots), max(bt.capacity, capacity)
        for layer in self.layers:
            assert isinstance(layer, SlotLayer)
            shape = (bt.slots, kv_heads, bt.capacity, head_dim)
            layer.keys = torch.zeros(shape, dtype=dtype, device=device)
            layer.values = torch.zeros(shape, dtype=dtype, device=device)
            layer.is_initialized = True
            if device.type == "cuda":  # CUDA graphs write the storage in place, not a copy
                torch._dynamo.mark_static_address(layer.keys)
                torch._dynamo.mark_static_address(layer.values)

    @property
    def static_pass(self) -> bool:
        """Whether the forward begun last runs in static shapes (begin_static)."""
        return self._batch.static

    def begin_static(self, slots: list[int], rows: int, kv_len: int,
                     device: torch.device) -> list[int]:
        """A forward in static shapes (core/model/static_shapes.py) over the contiguous `slots`
        padded to `rows` with the free slots after them, reading `kv_len` (the capacity)
        entries per row; returns each real row's start."""
        starts = [self.lengths[s] for s in slots]
        bt = self._batch
        bt.rows = slice(slots[0], slots[0] + rows)
        bt.row_index = torch.arange(slots[0], slots[0] + rows, device=device)
        bt.starts = torch.tensor(starts + [0] * (rows - len(slots)), device=device)
        bt.kv_len, bt.static, bt.rows_int32 = kv_len, True, None
        return starts

    def begin(self, slots: list[int], new_tokens: int) -> list[int]:
        """Set up a forward of `new_tokens` (padded) tokens per row over `slots`; returns
        each row's start (its committed length)."""
        starts = [self.lengths[s] for s in slots]
        bt = self._batch
        bt.static, bt.flat, bt.rows_int32 = False, None, None
        contiguous = slots == list(range(slots[0], slots[0] + len(slots)))
        bt.rows = slice(slots[0], slots[0] + len(slots)) if contiguous else torch.tensor(slots)
        bt.starts = torch.tensor(starts, dtype=torch.long)
        bt.kv_len = max(starts) + new_tokens
        bt.slots = max(bt.slots, self.used)
        if bt.kv_len > bt.capacity:
            bt.capacity = -(-max(bt.kv_len, int(bt.capacity * GROWTH)) // ALIGN) * ALIGN
        return starts

    def keep(self, slots: list[int], offsets: list[list[int]]) -> None:
        """After a forward begun on `slots`: keep each row's new entries at `offsets` (ascending:
        the accepted path), moved down to follow its committed prefix."""
        rows, src, dst = [], [], []
        for slot, offs in zip(slots, offsets, strict=True):
            start = self.lengths[slot]
            rows += [slot] * len(offs)
            src += [start + o for o in offs]
            dst += list(range(start, start + len(offs)))
            self.lengths[slot] = start + len(offs)
        if src == dst:
            return
        index = torch.tensor([rows, src, dst])
        for keys, values in self._storage():
            r, s, d = index.to(keys.device)
            keys[r, :, d] = keys[r, :, s]
            values[r, :, d] = values[r, :, s]

    def extend(self, slot: int, count: int) -> None:
        """After a prefill chunk: its `count` entries are all committed, in place."""
        self.lengths[slot] += count

    def memory_bytes(self) -> int:
        return sum(x.numel() * x.element_size() for kv in self._storage() for x in kv)

    def _storage(self) -> list[tuple[Tensor, Tensor]]:
        """(keys, values) of every layer that holds storage yet."""
        return [(layer.keys, layer.values) for layer in self.layers
                if isinstance(layer, SlotLayer) and layer.keys is not None
                and layer.values is not None]


def _row_index(rows: slice | Tensor, count: int, device: torch.device) -> Tensor:
    if isinstance(rows, slice):
        return torch.arange(rows.start, rows.start + count, device=device)
    return rows.to(device)
