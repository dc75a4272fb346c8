"""N drafters as one unit. Drafters whose shapes match are stacked into one group and run as a
single batched pass (stacked weights, einsum over the drafter axis) for the catch-up /
evaluation phase; each drafter's own module is a view into the stacked tensors, so stacking
costs no extra memory. A `PoolSnapshot` is immutable: requests keep the snapshot they started
with while operators add or remove drafters (the engine swaps in a new snapshot).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from core.eagle3 import Eagle3Drafter, apply_rope, attention, rms_norm, rope_cos_sin

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
            c.num_key_value_heads, c.head_dim, c.draft_vocab_size, c.vocab_size, c.rope_theta,
            c.rms_norm_eps, own, d.fc.weight.dtype, d.fc.weight.device)


@dataclass
class CatchUp:
    """Result of one catch-up pass of a group. topk_ids are target-vocab ids."""

    kv: KV  # [n, nkv, S+T, hd]
    h_last: Tensor  # [n, H] pre-norm output of the last pair
    topk_ids: Tensor  # [n, T, k]


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

    def empty_kv(self) -> KV:
        c, n, w = self.cfg, len(self.drafters), self.w["fc"]
        shape = (n, c.num_key_value_heads, 0, c.head_dim)
        return torch.zeros(shape, dtype=w.dtype, device=w.device), torch.zeros(shape, dtype=w.dtype, device=w.device)

    @torch.no_grad()
    def catch_up(self, kv: KV, features: Tensor, tokens: Tensor, positions: Tensor, top_k: int) -> CatchUp:
        """Every drafter consumes the same T new (feature, token) pairs. features [T, 3Ht]."""
        c, n, t, w = self.cfg, len(self.drafters), tokens.numel(), self.w
        tokens, positions = tokens.to(w["fc"].device), positions.to(w["fc"].device)
        g = torch.einsum("td,nhd->nth", features.to(w["fc"].dtype), w["fc"])  # [n,T,H]
        e = self.drafters[0].embed(tokens.view(1, t)).expand(n, t, -1)
        x = torch.cat([rms_norm(e, w["w_input_norm"][:, None], c.rms_norm_eps),
                       rms_norm(g, w["w_hidden_norm"][:, None], c.rms_norm_eps)], dim=-1)
        q = torch.einsum("ntc,nqc->ntq", x, w["wq"]).view(n, t, c.num_attention_heads, c.head_dim).transpose(1, 2)
        k = torch.einsum("ntc,nqc->ntq", x, w["wk"]).view(n, t, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        v = torch.einsum("ntc,nqc->ntq", x, w["wv"]).view(n, t, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        cos, sin = rope_cos_sin(positions.view(1, t), c.head_dim, c.rope_theta, q.dtype)
        q, k = apply_rope(q, cos[:, None], sin[:, None]), apply_rope(k, cos[:, None], sin[:, None])
        k, v = torch.cat([kv[0], k], dim=2), torch.cat([kv[1], v], dim=2)
        o = attention(q, k, v, None).transpose(1, 2).reshape(n, t, -1)
        h = g + torch.einsum("ntq,nhq->nth", o, w["wo"])
        y = rms_norm(h, w["w_post_norm"][:, None], c.rms_norm_eps)
        act = torch.nn.functional.silu(torch.einsum("nth,nih->nti", y, w["w_gate"]))
        act = act * torch.einsum("nth,nih->nti", y, w["w_up"])
        h = h + torch.einsum("nti,nhi->nth", act, w["w_down"])
        logits = torch.einsum("nth,nvh->ntv", rms_norm(h, w["w_norm"][:, None], c.rms_norm_eps), w["lm_head"])
        draft_ids = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).indices  # [n,T,k]
        target_ids = draft_ids + torch.gather(self.d2t, 1, draft_ids.view(n, -1)).view_as(draft_ids)
        return CatchUp(kv=(k, v), h_last=h[:, -1], topk_ids=target_ids)


class PoolSnapshot:
    """An immutable, ordered set of drafters grouped for batched evaluation."""

    def __init__(self, drafters: dict[str, Eagle3Drafter]) -> None:
        self.ids: tuple[str, ...] = tuple(drafters)
        self.drafters = dict(drafters)
        buckets: dict[tuple[object, ...], list[str]] = {}
        for did, d in drafters.items():
            buckets.setdefault(group_key(d), []).append(did)
        self.groups = [StackedGroup([drafters[i] for i in members]) for members in buckets.values()]
        # global index of each group member, in snapshot order
        self.members = [[self.ids.index(i) for i in members] for members in buckets.values()]
        self.locate = {idx: (g, j) for g, mem in enumerate(self.members) for j, idx in enumerate(mem)}

    def __len__(self) -> int:
        return len(self.ids)

    def index(self, drafter_id: str) -> int:
        return self.ids.index(drafter_id)

    def with_drafter(self, drafter_id: str, drafter: Eagle3Drafter) -> PoolSnapshot:
        return PoolSnapshot({**self.drafters, drafter_id: drafter})

    def without(self, drafter_id: str) -> PoolSnapshot:
        return PoolSnapshot({k: v for k, v in self.drafters.items() if k != drafter_id})


@dataclass
class DrafterState:
    """Per-request drafter caches for one snapshot: one stacked KV per group, plus each
    drafter's last pre-norm output (the level-1 input) and pending top-k (γ at the next root)."""

    kv: list[KV]
    h_last: Tensor  # [N, H] (groups share H in practice; stored per drafter)
    pending_topk: Tensor  # [N, k]

    @staticmethod
    def start(snapshot: PoolSnapshot, features: Tensor, tokens: Tensor, positions: Tensor,
              top_k: int) -> tuple[DrafterState, Tensor]:
        kvs = [g.empty_kv() for g in snapshot.groups]
        state = DrafterState(kv=kvs, h_last=torch.empty(0), pending_topk=torch.empty(0, dtype=torch.long))
        topk = state.advance(snapshot, features, tokens, positions, top_k)
        return state, topk

    def advance(self, snapshot: PoolSnapshot, features: Tensor, tokens: Tensor, positions: Tensor,
                top_k: int) -> Tensor:
        """Catch every drafter up on T pairs; returns topk ids [N, T, k] in snapshot order and
        updates the caches, h_last and pending_topk (= topk[:, -1])."""
        n, t = len(snapshot), tokens.numel()
        outs = [g.catch_up(kv, features, tokens, positions, top_k) for g, kv in zip(snapshot.groups, self.kv, strict=False)]
        self.kv = [o.kv for o in outs]
        first = outs[0]
        k = first.topk_ids.shape[-1]
        topk = torch.empty(n, t, k, dtype=torch.long, device=first.topk_ids.device)
        h_last = torch.empty(n, first.h_last.shape[-1], dtype=first.h_last.dtype, device=first.h_last.device)
        for members, out in zip(snapshot.members, outs, strict=False):
            idx = torch.tensor(members, device=topk.device)
            topk[idx] = out.topk_ids
            h_last[idx] = out.h_last
        self.h_last = h_last
        self.pending_topk = topk[:, -1]
        return topk

    def drafter_kv(self, snapshot: PoolSnapshot, index: int) -> KV:
        g, j = snapshot.locate[index]
        k, v = self.kv[g]
        return k[j : j + 1], v[j : j + 1]
