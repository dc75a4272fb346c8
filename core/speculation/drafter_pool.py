"""N drafters as one unit. Drafters whose shapes match are stacked into one group and run as a
single batched pass (stacked weights, a batched matmul over the drafter axis) for the catch-up /
evaluation phase; each drafter's own module is a view into the stacked tensors, so stacking
costs no extra memory. A `PoolSnapshot` is immutable: requests keep the snapshot they started
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

from core.model.eagle3 import Eagle3Drafter, apply_rope, attention, rms_norm, rope_cos_sin
from core.model.kv_buffer import KVBuffer
from core.speculation.model_free.base import ModelFreeDrafter

KV = tuple[Tensor, Tensor]
# A pool member: an EAGLE-3 drafter or a drafter with no weights.
Member = Eagle3Drafter | ModelFreeDrafter

# Module parameters that are stacked, with their path inside Eagle3Drafter.
_PARAMS = {
    "fc": "fc.weight",
    "w_hidden_norm": "midlayer.hidden_norm",
    "w_input_norm": "midlayer.input_layernorm",
    "w_post_norm": "midlayer.post_attention_layernorm",
    "wq": "midlayer.self_attn.q_proj.weight",
    "wk": "midlayer.self_attn.k_proj.weight",
    "wv": "midlayer.self_attn.v_proj.weight",
    "wo": "midlayer.self_attn.o_proj.weight",
    "w_gate": "midlayer.mlp.gate_proj.weight",
    "w_up": "midlayer.mlp.up_proj.weight",
    "w_down": "midlayer.mlp.down_proj.weight",
    "w_norm": "norm",
    "lm_head": "lm_head.weight",
}


def _get(module: torch.nn.Module, path: str) -> torch.nn.Parameter:
    obj: object = module
    for part in path.split("."):
        obj = getattr(obj, part)
    assert isinstance(obj, torch.nn.Parameter)
    return obj


def group_key(d: Eagle3Drafter) -> tuple[object, ...]:
    c = d.cfg
    own = id(d) if d.own_embed is not None else None  # own embedding tables are not stacked
    return (c.hidden_size, c.target_hidden_size, c.intermediate_size, c.num_attention_heads,
            c.num_key_value_heads, c.head_dim, c.draft_vocab_size, c.vocab_size, c.rope,
            c.rms_norm_eps, own, d.fc.weight.dtype, d.fc.weight.device)


@dataclass
class CatchUp:
    """Result of one catch-up pass of a group. topk_ids are target-vocab ids."""

    kv: KV  # [n, nkv, S+T, hd] views of the unit's buffer
    h_last: Tensor  # [n, H] pre-norm output of the last pair
    topk_ids: Tensor  # [n, T, k] target-vocab ids of each pair's top-k, best first
    topk_logp: Tensor  # [n, T, k] their log q (log-softmax over the draft vocabulary)


@dataclass
class CatchUpJob:
    """T new (feature, token) pairs for one cache of the group's drafters (one request's unit)."""

    kv: KVBuffer  # [n, nkv, S, hd]; the T new entries are appended in place
    features: Tensor  # [T, 3Ht]
    tokens: Tensor  # [T]
    positions: Tensor  # [T]
    # The last `scored` pairs get their top-k (None: all of them); the others get id -1 and
    # log q -inf. A prompt's catch-up needs the top-k of its tail only (the prompt windows and
    # the first root), and the draft LM head (and its top-k) is a large share of a pair's cost.
    scored: int | None = None
    # [T, V] what a grammar allowed after each pair's position (target vocabulary): the top-k
    # come from those tokens, as the drafter's grammar-masked tree does. None: no grammar.
    allowed: Tensor | None = None


class AllowedTrail(Protocol):
    """The grammar's allowed sets at committed positions (core/speculation/grammar.GrammarTrail)."""

    def masks(self, start: int, end: int) -> Tensor | None: ...

    def trim(self, floor: int) -> None: ...


class StackedGroup:
    """Shape-compatible drafters with stacked weights [n, ...]."""

    def __init__(self, drafters: list[Eagle3Drafter]) -> None:
        self.drafters = drafters
        self.cfg = drafters[0].cfg
        self.w: dict[str, Tensor] = {}
        with torch.no_grad():
            for name, path in _PARAMS.items():
                stacked = torch.stack([_get(d, path).detach() for d in drafters]).contiguous()
                self.w[name] = stacked
                for i, d in enumerate(drafters):  # module params become views: no copy kept
                    _get(d, path).data = stacked[i]
            self.d2t = torch.stack([d.d2t for d in drafters])

    def __len__(self) -> int:
        return len(self.drafters)

    def empty_kv(self, rows: slice | None = None) -> KVBuffer:
        c, n, w = self.cfg, len(self.drafters), self.w["fc"]
        count = n if rows is None else len(range(n)[rows])
        return KVBuffer.empty(count, c.num_key_value_heads, c.head_dim, w.dtype, w.device)

    @torch.no_grad()
    def catch_up(self, kv: KV | KVBuffer, features: Tensor, tokens: Tensor, positions: Tensor,
                 top_k: int, rows: slice | None = None) -> CatchUp:
        """Every drafter (or the `rows` slice of the group: a view, no weight copy) consumes the
        same T new (feature, token) pairs. features [T, 3Ht]; kv holds exactly those rows."""
        buf = kv if isinstance(kv, KVBuffer) else KVBuffer.of(kv, tokens.numel())
        return self.catch_up_many([CatchUpJob(buf, features, tokens, positions)], top_k, rows)[0]

    @torch.no_grad()
    def catch_up_many(self, jobs: Sequence[CatchUpJob], top_k: int,
                      rows: slice | None = None) -> list[CatchUp]:
        """Several caches (one per request) catch up in one pass: the dense layers run once over
        every job's pairs packed side by side (no padding), attention per job over its own
        cache, whose new entries are written in place."""
        c = self.cfg
        w = self.w if rows is None else {name: v[rows] for name, v in self.w.items()}
        d2t = self.d2t if rows is None else self.d2t[rows]
        n, dev = w["fc"].shape[0], w["fc"].device
        features = torch.cat([j.features for j in jobs]).to(dev, w["fc"].dtype)
        tokens = torch.cat([j.tokens for j in jobs]).to(dev)
        positions = torch.cat([j.positions for j in jobs]).to(dev)
        t = tokens.numel()
        g = _project(features.expand(n, t, -1), w["fc"])  # [n,T,H]
        e = self.drafters[0].embed(tokens.view(1, t)).expand(n, t, -1)
        x = torch.cat([rms_norm(e, w["w_input_norm"][:, None], c.rms_norm_eps),
                       rms_norm(g, w["w_hidden_norm"][:, None], c.rms_norm_eps)], dim=-1)
        q = _project(x, w["wq"]).view(n, t, c.num_attention_heads, c.head_dim).transpose(1, 2)
        k = _project(x, w["wk"]).view(n, t, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        v = _project(x, w["wv"]).view(n, t, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        cos, sin = rope_cos_sin(positions.view(1, t), c.head_dim, c.rope, q.dtype)
        q, k = apply_rope(q, cos[:, None], sin[:, None]), apply_rope(k, cos[:, None], sin[:, None])
        o = _attend_jobs(jobs, q, k, v).transpose(1, 2).reshape(n, t, -1)
        h = g + _project(o, w["wo"])
        y = rms_norm(h, w["w_post_norm"][:, None], c.rms_norm_eps)
        act = torch.nn.functional.silu(_project(y, w["w_gate"])) * _project(y, w["w_up"])
        h = h + _project(act, w["w_down"])
        scored = _scored_rows(jobs)
        hs = h if scored is None else h[:, scored.to(dev)]
        logits = _project(rms_norm(hs, w["w_norm"][:, None], c.rms_norm_eps), w["lm_head"])
        lse = torch.logsumexp(logits.float(), dim=-1, keepdim=True)  # over the whole vocabulary,
        allowed = _allowed_rows(jobs, scored, d2t)  # as the masked tree's scores are
        if allowed is not None:
            logits = logits.masked_fill(~allowed, float("-inf"))
        top = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1)  # [n,T,k]
        logp = top.values.float() - lse
        draft_ids = top.indices
        target_ids = draft_ids + torch.gather(d2t, 1, draft_ids.view(n, -1)).view_as(draft_ids)
        if allowed is not None:  # fewer than k allowed: the rest are no candidates
            target_ids = target_ids.masked_fill(~torch.isfinite(logp), -1)
        if scored is not None:
            target_ids, logp = _unscored_filled(target_ids, logp, scored, t)
        return _split(jobs, h, target_ids, logp)


def _scored_rows(jobs: Sequence[CatchUpJob]) -> Tensor | None:
    """The packed positions whose top-k the jobs need (None: every position)."""
    if all(j.scored is None for j in jobs):
        return None
    rows: list[int] = []
    start = 0
    for j in jobs:
        t = j.tokens.numel()
        keep = t if j.scored is None else min(max(j.scored, 0), t)
        rows.extend(range(start + t - keep, start + t))
        start += t
    return torch.tensor(rows, dtype=torch.long)


def _allowed_rows(jobs: Sequence[CatchUpJob], scored: Tensor | None,
                  d2t: Tensor) -> Tensor | None:
    """[n, T_scored, Vd] what each job's grammar allows at its scored positions, in each
    drafter's own vocabulary (None when no job has a grammar)."""
    if all(j.allowed is None for j in jobs):
        return None
    vocab = next(j.allowed for j in jobs if j.allowed is not None).shape[-1]  # type: ignore[union-attr]
    packed = torch.cat([j.allowed if j.allowed is not None
                        else torch.ones(j.tokens.numel(), vocab, dtype=torch.bool)
                        for j in jobs]).to(d2t.device)
    if scored is not None:
        packed = packed[scored.to(d2t.device)]
    targets = torch.arange(d2t.shape[1], device=d2t.device) + d2t  # [n, Vd] target ids
    return packed[:, targets].permute(1, 0, 2)  # [n, T_scored, Vd]


def _unscored_filled(ids: Tensor, logp: Tensor, scored: Tensor,
                     t: int) -> tuple[Tensor, Tensor]:
    """[n, T, k] from the scored positions' top-k; id -1 and log q -inf elsewhere."""
    n, _, k = ids.shape
    full_ids = torch.full((n, t, k), -1, dtype=ids.dtype, device=ids.device)
    full_logp = torch.full((n, t, k), float("-inf"), dtype=logp.dtype, device=logp.device)
    full_ids[:, scored.to(ids.device)] = ids
    full_logp[:, scored.to(logp.device)] = logp
    return full_ids, full_logp


def _project(x: Tensor, w: Tensor) -> Tensor:
    """x [n,T,C] through each drafter's own weight w [n,Q,C] -> [n,T,Q]. One drafter (a lazy
    catch-up, or a draft copy) takes the plain linear kernel: on a CPU in bf16, the batched
    einsum/bmm path is ~6x slower than `linear` for these skinny shapes (measured: 620 vs 92 us
    for [3,1152] x [1152,576]); several drafters take one batched matmul."""
    if w.shape[0] == 1:
        return torch.nn.functional.linear(x[0], w[0])[None]
    return torch.matmul(x, w.transpose(1, 2))


def _attend_jobs(jobs: Sequence[CatchUpJob], q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """q [n,nh,T,hd], k/v [n,nkv,T,hd] over the packed pairs -> attention output [n,nh,T,hd]:
    each job's queries see its own cache plus its new pairs, causally."""
    outs, start = [], 0
    for job in jobs:
        end = start + job.tokens.numel()
        job.kv.append(k[:, :, start:end], v[:, :, start:end])
        keys, values = job.kv.view()
        outs.append(attention(q[:, :, start:end], keys, values, None))
        start = end
    return torch.cat(outs, dim=2)


def _split(jobs: Sequence[CatchUpJob], h: Tensor, ids: Tensor, logp: Tensor) -> list[CatchUp]:
    out, start = [], 0
    for job in jobs:
        end = start + job.tokens.numel()
        out.append(CatchUp(job.kv.view(), h[:, end - 1], ids[:, start:end], logp[:, start:end]))
        start = end
    return out


class PoolSnapshot:
    """An immutable, ordered set of drafters: EAGLE-3 drafters grouped for batched evaluation,
    and model-free drafters (core/speculation/model_free/), which need no group. `ids` lists every
    member in pool order (the learner's expert order); `drafters` holds the EAGLE-3 ones, `free` the
    model-free ones. A snapshot made from another (`with_drafter`, `without`) keeps every group
    whose members did not change: a pool change restacks only the group it touches, instead of
    holding a second copy of every drafter's weights while requests on the old snapshot finish."""

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
        # snapshot indices of the EAGLE-3 drafters and of the model-free ones
        self.neural = [i for i, did in enumerate(self.ids) if did in self.drafters]
        self.model_free = [i for i, did in enumerate(self.ids) if did in self.free]

    def __len__(self) -> int:
        return len(self.ids)

    def index(self, drafter_id: str) -> int:
        return self.ids.index(drafter_id)

    def kind(self, drafter_id: str) -> str:
        """"eagle3" or the model-free drafter's kind."""
        free = self.free.get(drafter_id)
        return free.kind if free is not None else "eagle3"

    def depth(self, index: int, tree_depth: int) -> int:
        """Levels member `index` drafts at most: the engine's tree depth for an EAGLE-3
        drafter, its own max_depth for a model-free one."""
        free = self.free.get(self.ids[index])
        return free.max_depth if free is not None else tree_depth

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
    order = torch.tensor(sorted(range(len(indices)), key=indices.__getitem__), device=device)
    return Candidates(indices=sorted(indices),
                      topk_ids=torch.cat([ids for _, ids, _ in parts])[order],
                      topk_logp=torch.cat([lp for _, _, lp in parts])[order])


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
