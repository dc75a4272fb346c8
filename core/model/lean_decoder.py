"""A lean decoder forward for the supported families (Llama, Qwen2, Qwen3, Mistral), written
straight onto the slot cache; the Hugging Face module stays the fallback for anything else.

Why not the Hugging Face module: on a CPU, a 135M model's decode step is bound by per-call
cost, not by FLOPs or bandwidth (bench/results/engine_profile.md). The module makes 7 linear
calls a layer and about 40 other dispatches (cache update through `Cache.update`, mask and
kwargs plumbing, hooks for the aux layers); this forward makes 4 linear calls a layer (q/k/v
fused, gate/up fused), writes the new keys and values into the slot cache in place and takes
the aux layers' inputs as it passes them. The fused weights are the module's own storage: the
module's q/k/v and gate/up parameters become views into the fused tensors, so nothing is held
twice and the fallback (`Target.forward` over a DynamicCache) reads the same numbers.

The arithmetic is the module's, operation for operation (RMSNorm in float32, rotary from the
model's own rotary embedding, SDPA with the same additive mask), so both forwards agree in
fp32 to rounding; every linear call is batch-invariant on the CPU kernels measured here (a
row's result does not depend on how many rows share the call:
tests/core/model/test_lean_decoder.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from core.model.canonical import CanonicalOrder, RowPadding, attend_canonical
from core.model.kv_cache import SlotCache, SlotLayer

# A pass's attention masks (additive), or its canonical key orders (deterministic numerics);
# per window kind ("full_attention", "sliding_attention") where the layers differ
Masks = Tensor | CanonicalOrder | dict[str, Tensor] | dict[str, CanonicalOrder]

LEAN_FAMILIES = ("llama", "qwen2", "qwen3", "mistral")


@dataclass(frozen=True)
class Projection:
    """A linear layer's weight [N, K] (the module's storage) and bias, plus the same weight in
    oneDNN's blocked layout where that is faster (bf16 on a CPU: `pack`)."""

    weight: Tensor
    bias: Tensor | None = None
    packed: Tensor | None = None
    # Calls of fewer rows are padded to this many (core/model/canonical.row_floor): where the
    # library picks another reduction order for few rows, every row then takes the same one.
    floor: int = 1
    # Where no floor makes the library's result row-invariant (oneDNN's AMX kernels pick their
    # blocking from the row count at every size): every call computes exactly this many rows,
    # padded, a long input in several calls (core/model/canonical.row_chunk). 0: no chunking.
    chunk: int = 0

    def __call__(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, x.shape[-1])
        rows = flat.shape[0]
        size = max(rows, self.floor)
        if self.chunk:
            size = -(-rows // self.chunk) * self.chunk
        if size > rows:
            flat = torch.cat([flat, flat.new_zeros(size - rows, flat.shape[1])])
        if self.chunk and size > self.chunk:
            y = torch.cat([self._linear(part) for part in flat.split(self.chunk)])
        else:
            y = self._linear(flat)
        return y[:rows].view(*x.shape[:-1], y.shape[-1])

    def _linear(self, flat: Tensor) -> Tensor:
        if self.packed is None:
            return F.linear(flat, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(flat, self.packed, self.bias, "none", [], "")


def pack(proj: Projection) -> Projection:
    """`proj` with its weight also in oneDNN's blocked layout, on a CPU in bf16. Measured on
    this project's 2-core AVX512-BF16 machine (bench/results/engine_profile.md): a decode
    pass's linear layers stream their weights at 19.3 GB/s packed against 14.9 GB/s through
    `F.linear` at one row a call (18.9 against 11.8 at 8 rows), with bit-identical results
    (the same oneDNN kernel: batch-invariant either way). The price is a second copy of the
    decoder's linear weights in memory (the module keeps its own for the fallback forward)."""
    w = proj.weight
    native = w.device.type == "cpu" and w.dtype == torch.bfloat16
    if not native or not torch.backends.mkldnn.is_available():
        return proj
    return Projection(w, proj.bias, torch.ops.mkldnn._reorder_linear_weight(w))


@dataclass(frozen=True)
class LeanLayer:
    """One decoder layer's weights, q/k/v and gate/up fused (views of the module's storage)."""

    input_norm: Tensor
    qkv: Projection
    q_norm: Tensor | None  # Qwen3's per-head RMSNorm of queries and keys
    k_norm: Tensor | None
    o: Projection
    post_norm: Tensor
    gate_up: Projection
    down: Projection
    sliding: bool


class LeanDecoder:
    """The decoder stack over [B, T] new tokens on top of a SlotCache (Target.forward_rows)."""

    def __init__(self, model: Any, layers: list[LeanLayer]) -> None:
        cfg = model.config
        self.decoder = model.get_decoder()
        self.embed = self.decoder.embed_tokens.weight
        self.final_norm = self.decoder.norm.weight
        self.rotary = self.decoder.rotary_emb
        head = model.get_output_embeddings()
        self.head = pack(Projection(head.weight, getattr(head, "bias", None)))
        self.layers = layers
        self.eps = float(cfg.rms_norm_eps)
        self.heads = int(cfg.num_attention_heads)
        self.kv_heads = int(cfg.num_key_value_heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads)
        self.scale = self.head_dim ** -0.5
        self.calls = 0

    @classmethod
    def of(cls, model: Any) -> LeanDecoder | None:
        """The lean forward of `model`, or None where its structure is not the one written here
        (another family, another activation, a layer this forward does not know)."""
        cfg = model.config
        if getattr(cfg, "model_type", "") not in LEAN_FAMILIES or cfg.hidden_act != "silu":
            return None
        try:
            kinds = layer_kinds(cfg)
            layers = [_fuse(layer, kinds[i]) for i, layer in enumerate(model.get_decoder().layers)]
        except (AttributeError, TypeError, ValueError):
            return None
        return cls(model, layers)

    def projections(self) -> list[tuple[str, int, Projection]]:
        """Every linear of the forward as (name, layer, projection); the LM head's layer -1."""
        named = [(name, i, getattr(w, name)) for i, w in enumerate(self.layers)
                 for name in ("qkv", "o", "gate_up", "down")]
        return [*named, ("head", -1, self.head)]

    def set_padding(self, padding: dict[tuple[int, int], RowPadding]) -> None:
        """Each projection's row floor and chunk by its weight's shape (N, K)."""
        def pad(p: Projection) -> Projection:
            rule = padding[(int(p.weight.shape[0]), int(p.weight.shape[1]))]
            return dataclasses.replace(p, floor=rule.floor, chunk=rule.chunk)
        self.layers = [dataclasses.replace(w, qkv=pad(w.qkv), o=pad(w.o),
                                           gate_up=pad(w.gate_up), down=pad(w.down))
                       for w in self.layers]
        self.head = pad(self.head)

    def unpack(self) -> None:
        """Drop the packed layouts (the dense weights stay): what torch.compile is given, its
        inductor lowering takes no oneDNN-packed tensor (an opaque layout)."""
        plain = lambda p: dataclasses.replace(p, packed=None)  # noqa: E731
        self.layers = [dataclasses.replace(w, qkv=plain(w.qkv), o=plain(w.o),
                                           gate_up=plain(w.gate_up), down=plain(w.down))
                       for w in self.layers]
        self.head = plain(self.head)

    def __call__(self, ids: Tensor, positions: Tensor, mask: Masks,
                 cache: SlotCache, aux_layers: tuple[int, ...],
                 real: Tensor | None = None,
                 spans: list[tuple[int, int]] | None = None) -> tuple[Tensor, list[Tensor]]:
        """Final normed hidden [B, T, H] and the inputs of `aux_layers` [B, T, H] each.

        `real`: the flat indices (into B x T) of the tokens that are not padding, where there
        is padding. The per-token work (linear layers, norms, the MLP) then runs on those
        tokens only, and only attention on the padded [B, T] layout: a prefill pass over 8
        prompts of 67-217 tokens computed 1.7x the GEMM rows it needed padded. Each linear is
        batch-invariant, so a token's result is the same packed or padded.

        `spans`: each row's (new tokens, keys it attends to), where each row should attend on
        its own (`attend_rows`: long prefill chunks on a CPU).

        `mask` is the additive mask, or under deterministic numerics each query's canonical key
        order (core/model/canonical.py), per window kind where the layers differ."""
        self.calls += 1
        b, t = ids.shape
        flat = ids.reshape(-1)
        h = F.embedding(flat if real is None else flat[real], self.embed)  # [N, H]
        cos, sin = self.rotary(h, position_ids=positions)
        cos, sin = cos[:, None], sin[:, None]  # [B, 1, T, hd]: broadcast over heads
        captured = [h] * len(aux_layers)  # each aux layer's input, in aux_layers' order
        for i, layer in enumerate(self.layers):
            for j, at in enumerate(aux_layers):
                if at == i:
                    captured[j] = h
            m = mask if isinstance(mask, Tensor | CanonicalOrder) else mask[
                "sliding_attention" if layer.sliding else "full_attention"]
            h = self._layer(layer, h, cos, sin, m, _slot_layer(cache, i), (b, t, real), spans)
        hidden = rms_norm(h, self.final_norm, self.eps)
        return (_padded(hidden, b, t, real),
                [_padded(x, b, t, real) for x in captured])

    def _layer(self, w: LeanLayer, h: Tensor, cos: Tensor, sin: Tensor,
               mask: Tensor | CanonicalOrder,
               kv: SlotLayer, layout: tuple[int, int, Tensor | None],
               spans: list[tuple[int, int]] | None) -> Tensor:
        """One decoder layer over the tokens h [N, H] (`layout`: B, T and the real tokens'
        indices; `spans`: see __call__)."""
        b, t, real = layout
        qkv = _padded(w.qkv(rms_norm(h, w.input_norm, self.eps)), b, t, real)
        nq, nk = self.heads * self.head_dim, self.kv_heads * self.head_dim
        qk = qkv[..., : nq + nk].view(b, t, self.heads + self.kv_heads, self.head_dim)
        v = qkv[..., nq + nk :].view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        if w.q_norm is not None and w.k_norm is not None:
            qk = torch.cat([rms_norm(qk[:, :, : self.heads], w.q_norm, self.eps),
                            rms_norm(qk[:, :, self.heads :], w.k_norm, self.eps)], dim=2)
        # queries and keys rotated in one go: the same elementwise arithmetic, half the calls
        qk = rotate(qk.transpose(1, 2), cos, sin)
        q, k = qk[:, : self.heads], qk[:, self.heads :]
        if isinstance(mask, CanonicalOrder):
            keys, values, rows = kv.write(k, v)
            a = attend_canonical(q, keys, values, rows, mask, self.scale)
        else:
            keys, values = kv.update(k, v)
            a = (attend(q, keys, values, mask, self.scale) if spans is None
                 else attend_rows(q, keys, values, mask, self.scale, spans))
        a = a.transpose(1, 2).reshape(b * t, nq)
        h = h + w.o(a if real is None else a[real])
        gate, up = w.gate_up(rms_norm(h, w.post_norm, self.eps)).chunk(2, dim=-1)
        return h + w.down(F.silu(gate) * up)


def _padded(x: Tensor, b: int, t: int, real: Tensor | None) -> Tensor:
    """Tokens [N, D] laid out as [B, T, D], padding zero (a zero key and value: a padding
    query sees only its own key, Target.forward_rows's mask, so nothing reads them)."""
    if real is None:
        return x.view(b, t, x.shape[-1])
    out = x.new_zeros(b * t, x.shape[-1])
    out[real] = x
    return out.view(b, t, x.shape[-1])


def attend(q: Tensor, keys: Tensor, values: Tensor, mask: Tensor, scale: float) -> Tensor:
    """Grouped-query attention of q [B, heads, T, hd] over keys/values [B, kv_heads, S, hd]
    with an additive mask [B, 1, T, S]. Several rows on a CPU: two batched matmuls with the
    query heads of a group stacked, softmax in float32, as transformers' eager attention. One
    row, or a GPU: SDPA. Measured on this project's CPU (a microbenchmark of this function
    against SDPA, 2026-12-06; the profile's attention column: engine_profile.md): at
    8 rows of one token over 300 keys SDPA's CPU kernel takes 650 us a layer and this 300 us,
    at 16 rows 3.5 ms and 0.36 ms (the kernel splits its work into a task per row, head and
    query block); a prefill pass of 8 prompts (1,003 tokens) spends 370 ms in SDPA against
    270 ms here; at one row SDPA is ~40 us faster."""
    if q.shape[0] == 1 or q.device.type != "cpu":
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=scale,
                                              enable_gqa=keys.shape[1] != q.shape[1])
    b, heads, t, hd = q.shape
    kv_heads, s = keys.shape[1], keys.shape[2]
    group = heads // kv_heads
    grouped = q.reshape(b, kv_heads, group * t, hd)
    # transformers' eager attention: scores in the model's dtype, softmax in float32. Keys on
    # the left: the cache's keys are read in place (keys transposed on the right were copied
    # whole every layer; bit-identical scores either way, the same dot products)
    scores = torch.matmul(keys, grouped.transpose(-1, -2)).transpose(-1, -2)
    scores = scores.reshape(b, kv_heads, group, t, s)
    scores = torch.add(mask[:, :, None], scores, alpha=scale)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(probs.view(b, kv_heads, group * t, s), values).view(b, heads, t, hd)


def attend_rows(q: Tensor, keys: Tensor, values: Tensor, mask: Tensor, scale: float,
                spans: list[tuple[int, int]]) -> Tensor:
    """`attend` row by row, each row's SDPA over its own `spans[b]` = (new tokens, keys): no
    work on the padding. Measured on this project's CPU (a microbenchmark against `attend`,
    2026-12-07): 8 prompts of 52-224 tokens, 3.7 ms a layer against 18 ms batched (the batched
    form pads every row to the longest and takes its float32 softmax over the padding); from
    about 100 new tokens a row, rows apart win (4 rows of 128: 4.2 against 7.2 ms; 8 rows of
    64: 3.5 against 2.6 ms; one token a row: 1.2 against 0.26 ms at 8 rows). Padding queries
    come out zero (nothing reads them: the next layer takes the real tokens only)."""
    out = q.new_empty(q.shape)
    gqa = keys.shape[1] != q.shape[1]
    for b, (t, s) in enumerate(spans):
        out[b, :, t:] = 0
        out[b, :, :t] = F.scaled_dot_product_attention(
            q[b : b + 1, :, :t], keys[b : b + 1, :, :s], values[b : b + 1, :, :s],
            attn_mask=mask[b : b + 1, :, :t, :s], scale=scale, enable_gqa=gqa)[0]
    return out


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """The families' RMSNorm as transformers computes it: statistics in float32, the weight
    applied in the input's dtype."""
    return weight * F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding, transformers' rotate-half convention ([B, heads, T, hd])."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def layer_kinds(cfg: Any) -> list[bool]:
    """Per layer, whether it attends through a sliding window (Target.attention_windows's
    reading of the config: `layer_types` where given, else every layer when a window is set)."""
    n = int(cfg.num_hidden_layers)
    if not getattr(cfg, "sliding_window", None):
        return [False] * n
    kinds = getattr(cfg, "layer_types", None) or ["sliding_attention"] * n
    return [kind == "sliding_attention" for kind in kinds]


def _fuse(layer: Any, sliding: bool) -> LeanLayer:
    attn, mlp = layer.self_attn, layer.mlp
    qkv = _fuse_linears([attn.q_proj, attn.k_proj, attn.v_proj])
    gate_up = _fuse_linears([mlp.gate_proj, mlp.up_proj])
    q_norm, k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
    return LeanLayer(
        input_norm=layer.input_layernorm.weight, qkv=pack(qkv),
        q_norm=None if q_norm is None else q_norm.weight,
        k_norm=None if k_norm is None else k_norm.weight,
        o=pack(Projection(attn.o_proj.weight, attn.o_proj.bias)),
        post_norm=layer.post_attention_layernorm.weight, gate_up=pack(gate_up),
        down=pack(Projection(mlp.down_proj.weight, mlp.down_proj.bias)), sliding=sliding)


def _fuse_linears(linears: list[Any]) -> Projection:
    """One weight (and bias) for linears over the same input, stacked by output rows; each
    module's parameters become views of it, so the fallback path reads the same storage."""
    if len({lin.weight.shape[1] for lin in linears}) != 1:
        raise ValueError("fused linears must share their input width")
    weight = torch.cat([lin.weight.detach() for lin in linears]).contiguous()
    biases = [lin.bias for lin in linears]
    if any(b is not None for b in biases) and not all(b is not None for b in biases):
        raise ValueError("fused linears must all have a bias or none")
    bias = (torch.cat([b.detach() for b in biases]).contiguous() if biases[0] is not None
            else None)
    at = 0
    for lin in linears:
        rows = lin.weight.shape[0]
        lin.weight = torch.nn.Parameter(weight[at : at + rows], requires_grad=False)
        if bias is not None:
            lin.bias = torch.nn.Parameter(bias[at : at + rows], requires_grad=False)
        at += rows
    return Projection(weight, bias)


def _slot_layer(cache: SlotCache, index: int) -> SlotLayer:
    layer = cache.layers[index]
    if not isinstance(layer, SlotLayer):
        raise TypeError("the lean forward writes a SlotCache")
    return layer
