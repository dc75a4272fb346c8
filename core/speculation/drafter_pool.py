"""N drafters as one unit. Drafters whose shapes match are stacked into one group
(core/model/stacked_drafters.py) and run as a single batched pass for the catch-up /
evaluation phase. A `PoolSnapshot` is immutable: requests keep the snapshot they started
with while operators add or remove drafters (the engine swaps in a new snapshot).

`DrafterState` keeps one request's drafter caches in one of two modes. Full evaluation (the
full-information learners) catches every group up on every verified pair, batched, because
the counterfactual γ needs every drafter's one-step prediction (every eval_every-th round, with
draft copies in between: see DrafterState). Lazy catch-up (fixed drafter,
bandits) advances a drafter only when it is about to draft, on the pairs it has missed since
it last drafted: those policies learn nothing from the other drafters, so evaluating them
would be pure cost (issue 14, "honest baselines").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import torch
from torch import Tensor

from core.model.eagle3 import Eagle3Drafter
from core.model.kv_buffer import KVBuffer
from core.model.stacked_drafters import KV, CatchUp, CatchUpJob, StackedGroup, group_key
from core.speculation.model_free.base import ModelFreeDrafter

# A pool member: an EAGLE-3 drafter or a drafter with no weights.
Member = Eagle3Drafter | ModelFreeDrafter


class AllowedTrail(Protocol):
    """The grammar's allowed sets at committed positions (core/speculation/grammar.GrammarTrail)."""

    def masks(self, start: int, end: int) -> Tensor | None: ...

    def trim(self, floor: int) -> None: ...


class PoolSnapshot:
    """An immutable, ordered set of drafters: EAGLE-3 drafters grouped for batched evaluation,
    and model-free drafters (core/speculation/model_free/), which need no group. `ids` lists every
    member in pool order (the learner's expert order); `drafters` holds the EAGLE-3 ones, `free` the
    model-free ones (core/speculation/pool_members.py groups them by kind behind one interface,
    for a request's rounds). A snapshot made from another
    (`with_drafter`, `without`) keeps every group whose members did not change: a pool change
    restacks only the group it touches, instead of holding a second copy of every drafter's
    weights while requests on the old snapshot finish."""

    def __init__(self, members: Mapping[str, Member],
                 reuse: Sequence[StackedGroup] = ()) -> None:
        self.ids: tuple[str, ...] = tuple(members)
        self.members: dict[str, Member] = dict(members)
        self.drafters = {i: d for i, d in members.items() if isinstance(d, Eagle3Drafter)}
        self.free = {i: d for i, d in members.items() if isinstance(d, ModelFreeDrafter)}
        buckets: dict[tuple[object, ...], list[str]] = {}
        for did, d in self.drafters.items():
            buckets.setdefault(group_key(d), []).append(did)
        prior = {tuple(id(d) for d in g.drafters): g for g in reuse}
        self.groups = [prior.get(tuple(id(self.drafters[i]) for i in group))
                       or StackedGroup([self.drafters[i] for i in group])
                       for group in buckets.values()]
        # global index of each group member, in snapshot order
        self.group_members = [[self.ids.index(i) for i in group] for group in buckets.values()]
        self.locate = {idx: (g, j) for g, mem in enumerate(self.group_members)
                       for j, idx in enumerate(mem)}

    def __len__(self) -> int:
        return len(self.ids)

    def index(self, drafter_id: str) -> int:
        return self.ids.index(drafter_id)

    def kind(self, drafter_id: str) -> str:
        """"eagle3" or the model-free drafter's kind."""
        free = self.free.get(drafter_id)
        return free.kind if free is not None else "eagle3"

    def with_drafter(self, drafter_id: str, drafter: Member) -> PoolSnapshot:
        return PoolSnapshot({**self.members, drafter_id: drafter}, self.groups)

    def without(self, drafter_id: str) -> PoolSnapshot:
        return PoolSnapshot({k: v for k, v in self.members.items() if k != drafter_id},
                            self.groups)


@dataclass
class _Unit:
    """Drafters of one group that always catch up together: the whole group (full evaluation),
    a single drafter (lazy catch-up), or a draft copy (below)."""

    group: int
    rows: slice  # rows of the group's stacked weights
    indices: list[int]  # snapshot index of each row
    kv: KVBuffer  # [rows, nkv, synced, hd] (+ scratch capacity)
    h_last: Tensor | None  # [rows, H] pre-norm output of the last consumed pair
    synced: int  # pairs consumed = absolute position of the next pair to consume
    # Pairs never consumed (skipped while the drafters slept, DrafterState.sleep): the cache
    # holds synced - skipped entries, each at its own absolute position (RoPE), with a gap.
    skipped: int = 0
    # Full evaluation: the top-k of every pair consumed since the last evaluation window was
    # taken ([rows, T, k] ids and log q per catch-up).
    window: list[tuple[Tensor, Tensor]] = field(default_factory=list)
    draft_copy: bool = False


@dataclass
class Candidates:
    """Each caught-up drafter's one-step top-k after every new pair, in snapshot order."""

    indices: list[int]  # snapshot indices of the rows below
    topk_ids: Tensor  # [n, T, k] target-vocab ids
    topk_logp: Tensor  # [n, T, k]
    # Position m of row 0: row t is the distribution at m + t (after the pair ending at it).
    first: int = 0


class DrafterState:
    """Per-request drafter caches for one snapshot (see the module docstring for the modes).

    Pairs are (target feature at position j, token j+1), j = 0, 1, ...: pair j predicts the
    token at j+2. Pairs not yet consumed by some drafter are held until it catches up.

    Under full evaluation every drafter catches up with its whole group, in the stacked pass
    that also yields the evaluation window. When evaluation is deferred
    (SelectorConfig.eval_every > 1) the groups lag between evaluations, and a drafter about to
    draft catches up alone in a *draft copy*: its group row's cache copied at the group's last
    sync, then advanced on the pairs since. The copy serves drafting only (windows come from
    the group pass, which re-reads those pairs for every drafter at once) and is dropped from
    use once its group has caught up past it.
    """

    def __init__(self, snapshot: PoolSnapshot, *, full: bool,
                 drafters: list[int] | None = None) -> None:
        self.full = full
        self.units: list[_Unit] = []
        wanted = set(range(len(snapshot)) if drafters is None else drafters)
        for g, (group, members) in enumerate(zip(snapshot.groups, snapshot.group_members,
                                                   strict=True)):
            spans = ([slice(0, len(members))] if full
                     else [slice(j, j + 1) for j in range(len(members))])
            for rows in spans:
                idx = members[rows]
                if full or idx[0] in wanted:
                    self.units.append(_Unit(g, rows, idx, group.empty_kv(rows), None, 0))
        self._unit_of = {i: u for u in self.units for i in u.indices}
        self._copies: dict[int, _Unit] = {}  # draft copies by snapshot index (full evaluation)
        self._features: Tensor | None = None  # [P, 3Ht] pairs from position self._base on
        self._tokens = torch.empty(0, dtype=torch.long)
        self._base = 0
        self.catch_up_pairs = 0  # drafter-pairs processed (one drafter consuming one pair = 1)
        self._asleep = False
        # The request's grammar, if any: catch-up top-k are drawn from what it allowed.
        self.grammar: AllowedTrail | None = None

    @property
    def held_pairs(self) -> int:
        return int(self._tokens.numel())

    def record(self, features: Tensor, tokens: Tensor) -> None:
        """Append the next verified pairs (features [T, 3Ht], tokens [T]); nothing runs. While
        the drafters sleep only the last WAKE_PAIRS are held (what `wake` restarts from)."""
        feats = features.detach()
        self._features = feats if self._features is None else torch.cat([self._features, feats])
        self._tokens = torch.cat([self._tokens, tokens.detach().cpu().long()])
        if self.asleep:
            self._drop(self.held_pairs - WAKE_PAIRS)

    @property
    def asleep(self) -> bool:
        return self._asleep

    def sleep(self) -> None:
        """Stop feeding the EAGLE drafters (full evaluation only): the verified pairs are no
        longer consumed, so a request that decodes plain or drafts with a model-free member
        stops paying a catch-up per pair (core/selection/arm_policy.py says when). The caches keep
        what they hold."""
        assert self.full, "only full evaluation has drafters to put to sleep"
        self._asleep = True
        self._copies.clear()
        self._drop(self.held_pairs - WAKE_PAIRS)

    def wake(self) -> None:
        """Resume from the last WAKE_PAIRS verified pairs: every unit skips the pairs before
        them (its cache keeps the pairs it consumed before sleeping, then a gap) and the next
        sync catches it up on those held pairs."""
        self._asleep = False
        self._copies.clear()
        for u in self.units:
            if u.synced < self._base:
                u.skipped += self._base - u.synced
                u.synced = self._base
                u.window = []

    def _drop(self, count: int) -> None:
        """Forget the oldest `count` held pairs."""
        if count > 0 and self._features is not None:
            self._features, self._tokens = self._features[count:], self._tokens[count:]
            self._base += count
            if self.grammar is not None:
                self.grammar.trim(self._base + 1)

    def sync(self, snapshot: PoolSnapshot, top_k: int, drafters: list[int] | None = None,
             scored: int | None = None) -> Candidates | None:
        """Catch the given drafters (all held ones when None) up on every pair they have not
        consumed. Under full evaluation, a sync of all drafters returns the evaluation window:
        every drafter's top-k over each pair its group consumed since the last window; a sync
        of some drafters (to draft) returns None. Lazy catch-up returns the top-k of the pairs
        just consumed when the drafters all consumed the same ones, else None. `scored`: only
        the last `scored` pairs get their top-k (CatchUpJob.scored)."""
        return sync_many([(self, snapshot, drafters)], top_k, scored)[0]

    def plan(self, drafters: list[int] | None = None,
             scored: int | None = None) -> list[tuple[_Unit, CatchUpJob]]:
        """The catch-ups `sync` would run for these drafters, not run yet."""
        assert not self.asleep, "wake the drafters before catching them up"
        end = self._base + self.held_pairs
        if drafters is None:
            units = self.units
        elif self.full:
            units = [self._draft_unit(i, end) for i in drafters]
        else:
            units = [u for u in self.units if any(i in u.indices for i in drafters)]
        return [(u, replace(self._job(u, end), scored=scored)) for u in units if u.synced < end]

    def _draft_unit(self, index: int, end: int) -> _Unit:
        """Full evaluation: the unit drafter `index` drafts from once caught up to `end`, its
        group when that has consumed every pair, else its draft copy (re-seeded from the
        group row when the group has caught up past it)."""
        group = self._unit_of[index]
        if group.synced >= end:
            return group
        copy = self._copies.get(index)
        if copy is None or copy.synced < group.synced:
            copy = self._copies[index] = self._seed_copy(group, index)
        return copy

    @staticmethod
    def _seed_copy(group: _Unit, index: int) -> _Unit:
        j = group.indices.index(index)
        keys, values = group.kv.view()
        kv = KVBuffer.of((keys[j : j + 1], values[j : j + 1]))  # a copy with room to grow
        rows = slice(group.rows.start + j, group.rows.start + j + 1)
        # No h_last: a copy is made only when its group lags, so it catches up at once.
        return _Unit(group.group, rows, [index], kv, None, group.synced, skipped=group.skipped,
                     draft_copy=True)

    def finish(self, done: list[tuple[_Unit, CatchUp]],
               everyone: bool = False) -> Candidates | None:
        """Record the catch-ups of `plan` once run (see `sync` for the result; `everyone`:
        the sync was for all drafters)."""
        for u, out in done:
            steps = out.topk_ids.shape[1]
            u.h_last, u.synced = out.h_last, u.synced + steps
            self.catch_up_pairs += len(u.indices) * steps
            if self.full and not u.draft_copy:
                u.window.append((out.topk_ids, out.topk_logp))
        self._trim()
        if self.full and everyone:
            # Every group now holds every pair, so each copy is behind its group and would be
            # re-seeded before its next use: free their caches now rather than at request end.
            self._copies.clear()
        if self.full:
            return self._take_window() if everyone and any(u.window for u in self.units) else None
        if not done or len({u.synced - o.topk_ids.shape[1] for u, o in done}) != 1:
            return None
        return _candidates([(u, o.topk_ids, o.topk_logp) for u, o in done])

    def _take_window(self) -> Candidates:
        parts = [(u, torch.cat([i for i, _ in u.window], dim=1),
                  torch.cat([lp for _, lp in u.window], dim=1)) for u in self.units]
        if len({ids.shape[1] for _, ids, _ in parts}) != 1:
            raise RuntimeError("drafters disagree on the evaluation window")
        for u in self.units:
            u.window = []
        return _candidates(parts)

    def _source(self, index: int) -> _Unit:
        """Where drafter `index`'s freshest cache is: its draft copy when ahead of the group."""
        group, copy = self._unit_of[index], self._copies.get(index)
        return copy if copy is not None and copy.synced > group.synced else group

    def drafter_kv(self, index: int) -> KV:
        u = self._source(index)
        j = u.indices.index(index)
        keys, values = u.kv.view()
        return keys[j : j + 1], values[j : j + 1]

    def draft_cache(self, index: int, scratch: int) -> tuple[Tensor, Tensor, int]:
        """The drafter's cache row as views [1, nkv, capacity, hd] with at least `scratch`
        free entries past its length (where a draft tree's K/V go), and that length."""
        u = self._source(index)
        j = u.indices.index(index)
        u.kv.reserve(scratch)
        return u.kv.keys[j : j + 1], u.kv.values[j : j + 1], u.kv.length

    def h_last(self, index: int) -> Tensor:
        u = self._source(index)
        assert u.h_last is not None, "the drafter has not caught up yet"
        return u.h_last[u.indices.index(index)]

    def synced(self, index: int) -> int:
        return self._source(index).synced

    def _job(self, u: _Unit, end: int) -> CatchUpJob:
        assert self._features is not None
        lo = u.synced - self._base
        # drops what a failed pass may have appended: a rerun is exact
        u.kv.length = u.synced - u.skipped
        # pair j's prefix ends at token j + 1: its top-k are for the token after position j + 1
        allowed = self.grammar.masks(u.synced + 1, end + 1) if self.grammar is not None else None
        return CatchUpJob(u.kv, self._features[lo:], self._tokens[lo:], torch.arange(u.synced, end),
                          allowed=allowed)

    def _trim(self) -> None:
        """Drop pairs every held drafter has consumed (draft copies are never behind their
        group)."""
        if self.asleep:
            return  # record() bounds the held pairs
        floor = min((u.synced for u in self.units), default=self._base + self.held_pairs)
        self._drop(floor - self._base)


def _candidates(parts: list[tuple[_Unit, Tensor, Tensor]]) -> Candidates:
    """Units' top-k rows stacked in snapshot order."""
    indices = [i for u, _, _ in parts for i in u.indices]
    device = parts[0][1].device
    # pair j (feature at position j, token j + 1) gives the distribution at position j + 1
    first = parts[0][0].synced - parts[0][1].shape[1] + 1
    order = torch.tensor(sorted(range(len(indices)), key=indices.__getitem__), device=device)
    return Candidates(indices=sorted(indices),
                      topk_ids=torch.cat([ids for _, ids, _ in parts])[order],
                      topk_logp=torch.cat([lp for _, _, lp in parts])[order], first=first)


# Verified pairs a sleeping request keeps for its drafters' restart (DrafterState.wake): the
# EAGLE-3 drafter reads the target's features, so a short recent window restores most of its
# prediction (a fresh restart costs these pairs through every drafter once).
WAKE_PAIRS = 16


SyncRequest = tuple[DrafterState, PoolSnapshot, "list[int] | None"]


def sync_many(requests: Sequence[SyncRequest], top_k: int,
              scored: int | None = None) -> list[Candidates | None]:
    """`DrafterState.sync` for several requests at once: catch-ups of the same stacked group
    and rows (the same drafters, whatever the request) run as one pass (catch_up_many)."""
    plans = [state.plan(drafters, scored) for state, _, drafters in requests]
    batches: dict[tuple[int, int, int],
                  tuple[StackedGroup, slice | None, list[tuple[int, int]]]] = {}
    for r, ((_, snapshot, _), plan) in enumerate(zip(requests, plans, strict=True)):
        for p, (u, _) in enumerate(plan):
            group = snapshot.groups[u.group]
            rows = None if len(u.indices) == len(group) else u.rows
            key = (id(group), u.rows.start, u.rows.stop)
            batches.setdefault(key, (group, rows, []))[2].append((r, p))
    done: list[list[tuple[_Unit, CatchUp]]] = [[] for _ in requests]
    for group, rows, members in batches.values():
        outs = group.catch_up_many([plans[r][p][1] for r, p in members], top_k, rows)
        for (r, p), out in zip(members, outs, strict=True):
            done[r].append((plans[r][p][0], out))
    return [state.finish(d, everyone=drafters is None)
            for (state, _, drafters), d in zip(requests, done, strict=True)]
