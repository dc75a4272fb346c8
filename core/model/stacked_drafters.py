"""EAGLE-3 drafters stacked for one batched pass. Drafters whose shapes match (`group_key`)
form a `StackedGroup`: their weights stacked along a leading drafter axis, each drafter's own
module parameters turned into views of the stacked tensors (stacking keeps no second copy), so
that a catch-up runs every drafter of the group as one batched matmul per layer. `catch_up_many`
packs several caches (one per request, `CatchUpJob`) side by side: the dense layers run once
over every job's pairs, attention per job over its own cache. The per-request caches, and when
a catch-up runs, are the drafter pool's (core/speculation/drafter_pool.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from core.model.eagle3 import Eagle3Drafter, apply_rope, attention, rms_norm
from core.model.kv_buffer import KVBuffer
from core.model.rope import rope_cos_sin

KV = tuple[Tensor, Tensor]

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
