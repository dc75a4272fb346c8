"""The EAGLE-3 drafter: module, and load/save of the official checkpoint format.

The format (files, config.json, tensor names and shapes, d2t/t2d) is stated, torch-free, in
eagle3_format/; this module is its torch side: the drafter module, reading and writing the
tensors, and applying those rules to what it reads.

Aux layer convention: inside `core` an aux layer index `idx` means "the input of decoder layer
idx" (= Hugging Face `output_hidden_states[idx]`); config.json carries the layers in each
engine's own convention (eagle3_format/aux_layers.py).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.errors import DrafterLoadError
from core.model.rope import rope_cos_sin
from eagle3_format.config import Eagle3Config
from eagle3_format.errors import DrafterConfigError
from eagle3_format.weights import (
    CONFIG_FILE,
    SAFETENSORS_INDEX_FILE,
    WEIGHT_FILES,
    check_tensors,
    check_vocab_mapping,
    no_weights,
    preferred_weight_file,
    shard_names,
)


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """RMSNorm computed in fp32 (as Llama), returned in x's dtype."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class _Attention(nn.Module):
    def __init__(self, cfg: Eagle3Config) -> None:
        super().__init__()
        h2, q, kv = (2 * cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim,
                     cfg.num_key_value_heads * cfg.head_dim)
        self.q_proj = nn.Linear(h2, q, bias=False)
        self.k_proj = nn.Linear(h2, kv, bias=False)
        self.v_proj = nn.Linear(h2, kv, bias=False)
        self.o_proj = nn.Linear(q, cfg.hidden_size, bias=False)


class _MLP(nn.Module):
    def __init__(self, cfg: Eagle3Config) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class _MidLayer(nn.Module):
    def __init__(self, cfg: Eagle3Config) -> None:
        super().__init__()
        self.hidden_norm = nn.Parameter(torch.ones(cfg.hidden_size))
        self.input_layernorm = nn.Parameter(torch.ones(cfg.hidden_size))
        self.post_attention_layernorm = nn.Parameter(torch.ones(cfg.hidden_size))
        self.self_attn = _Attention(cfg)
        self.mlp = _MLP(cfg)


KV = tuple[Tensor, Tensor]
# attend(q, k, v) -> attention output; see Eagle3Drafter.step
Attend = Callable[[Tensor, Tensor, Tensor], Tensor]


class Eagle3Drafter(nn.Module):
    """One EAGLE-3 decoder layer over [embedding(token) ; hidden], hidden = fc(3 target features)
    at step 0 or the drafter's own pre-norm output at later steps."""

    d2t: Tensor
    t2d: Tensor

    def __init__(self, cfg: Eagle3Config, embed_tokens: nn.Embedding | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.fc = nn.Linear(3 * cfg.target_hidden_size, cfg.hidden_size, bias=False)
        self.midlayer = _MidLayer(cfg)
        self.norm = nn.Parameter(torch.ones(cfg.hidden_size))
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(cfg.vocab_size, dtype=torch.bool))
        self.own_embed: nn.Embedding | None = None
        # The shared target embedding is held outside the module's parameters so that it is
        # never saved with the drafter nor trained; a checkpoint with its own table owns it.
        self._shared_embed = [embed_tokens] if embed_tokens is not None else []

    # -- vocabulary ------------------------------------------------------------------------
    def set_vocab_mapping(self, d2t: Tensor, t2d: Tensor) -> None:
        self.d2t.copy_(d2t.to(torch.long))
        self.t2d.copy_(t2d.to(torch.bool))

    def draft_to_target(self, draft_ids: Tensor) -> Tensor:
        return draft_ids + self.d2t[draft_ids]

    def set_shared_embedding(self, embed_tokens: nn.Embedding) -> None:
        self._shared_embed = [embed_tokens]

    def embed(self, input_ids: Tensor) -> Tensor:
        table = (self.own_embed if self.own_embed is not None
                 else next(iter(self._shared_embed), None))
        if table is None:
            raise RuntimeError("drafter has no embedding: pass the target's embed_tokens")
        return table(input_ids).to(self.fc.weight.dtype)

    # -- forward ---------------------------------------------------------------------------
    def forward(
        self,
        hidden: Tensor,
        input_ids: Tensor,
        position_ids: Tensor,
        past_kv: KV | None = None,
        attn_mask: Tensor | None = None,
    ) -> tuple[Tensor, KV]:
        """hidden [B,T,3Ht] (fc applied) or [B,T,H]; returns pre-norm h [B,T,H] and the full KV."""
        full: list[KV] = []

        def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            if past_kv is not None:
                k, v = torch.cat([past_kv[0], k], dim=2), torch.cat([past_kv[1], v], dim=2)
            full.append((k, v))
            return attention(q, k, v, attn_mask)

        return self.step(hidden, input_ids, position_ids, attend), full[0]

    def step(self, hidden: Tensor, input_ids: Tensor, position_ids: Tensor,
             attend: Attend) -> Tensor:
        """One pass whose attention the caller supplies (it owns the KV cache): `attend` gets
        the new tokens' q [B,nh,T,hd] and k/v [B,nkv,T,hd], RoPE applied, and returns the
        attention output [B,nh,T,hd]. Returns the pre-norm h [B,T,H]."""
        cfg, layer = self.cfg, self.midlayer
        if hidden.shape[-1] != cfg.hidden_size:
            hidden = self.fc(hidden)
        x = torch.cat(
            [
                rms_norm(self.embed(input_ids), layer.input_layernorm, cfg.rms_norm_eps),
                rms_norm(hidden, layer.hidden_norm, cfg.rms_norm_eps),
            ],
            dim=-1,
        )
        h = hidden + self._attend(x, position_ids, attend)
        return h + layer.mlp(rms_norm(h, layer.post_attention_layernorm, cfg.rms_norm_eps))

    def _attend(self, x: Tensor, position_ids: Tensor, attend: Attend) -> Tensor:
        cfg, a = self.cfg, self.midlayer.self_attn
        b, t, _ = x.shape
        q = a.q_proj(x).view(b, t, cfg.num_attention_heads, cfg.head_dim).transpose(1, 2)
        k = a.k_proj(x).view(b, t, cfg.num_key_value_heads, cfg.head_dim).transpose(1, 2)
        v = a.v_proj(x).view(b, t, cfg.num_key_value_heads, cfg.head_dim).transpose(1, 2)
        cos, sin = rope_cos_sin(position_ids, cfg.head_dim, cfg.rope, q.dtype)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # [B,1,T,hd]
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = attend(q, k, v)
        out = out.transpose(1, 2).reshape(b, t, cfg.num_attention_heads * cfg.head_dim)
        return a.o_proj(out)

    def logits(self, h: Tensor) -> Tensor:
        """Draft-vocabulary logits lm_head(norm(h))."""
        return self.lm_head(rms_norm(h, self.norm, self.cfg.rms_norm_eps))


def attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None) -> Tensor:
    """GQA attention; with no mask the T new queries are causal over themselves and see all of
    the S past keys. q [B,nh,T,hd], k/v [B,nkv,S+T,hd]; attn_mask additive or bool (True =
    attend). SDPA's enable_gqa shares each K/V head among its query heads without the copy
    `repeat_interleave` made of the whole cache at every call."""
    if attn_mask is None:
        t, total = q.shape[2], k.shape[2]
        attn_mask = causal_mask(t, total, q.device, q.dtype)
    elif attn_mask.dtype != torch.bool:
        attn_mask = attn_mask.to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                          enable_gqa=q.shape[1] != k.shape[1])


def causal_mask(t: int, total: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    """Additive mask [1,1,t,total]: query i sees keys <= total - t + i."""
    past = total - t
    allowed = torch.ones(t, total, dtype=torch.bool, device=device).tril(diagonal=past)
    return (torch.zeros(t, total, dtype=dtype, device=device)
            .masked_fill(~allowed, -math.inf)[None, None])


def build_vocab_mapping(token_counts: Tensor, draft_vocab_size: int) -> tuple[Tensor, Tensor]:
    """Official d2t/t2d from target-token frequencies: the Vd most frequent ids, sorted
    ascending; d2t[i] = used[i] - i (offset); t2d = membership mask. Zero-count ids fill
    up (lowest ids first) when fewer than Vd distinct tokens occur, as SpecForge does."""
    vocab = token_counts.numel()
    if not 0 < draft_vocab_size <= vocab:
        raise ValueError(f"draft_vocab_size {draft_vocab_size} not in [1, {vocab}]")
    # Stable ordering: by count descending, ties by lower id first.
    order = sorted(range(vocab), key=lambda i: (-int(token_counts[i]), i))
    used = torch.tensor(sorted(order[:draft_vocab_size]), dtype=torch.long)
    d2t = used - torch.arange(draft_vocab_size, dtype=torch.long)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[used] = True
    return d2t, t2d


# -- checkpoint I/O -----------------------------------------------------------------------


def _state_dict_for_save(drafter: Eagle3Drafter) -> dict[str, Tensor]:
    layer = drafter.midlayer
    sd: dict[str, Tensor] = {
        "fc.weight": drafter.fc.weight,
        "midlayer.hidden_norm.weight": layer.hidden_norm,
        "midlayer.input_layernorm.weight": layer.input_layernorm,
        "midlayer.post_attention_layernorm.weight": layer.post_attention_layernorm,
        "norm.weight": drafter.norm,
        "lm_head.weight": drafter.lm_head.weight,
    }
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        sd[f"midlayer.self_attn.{name}.weight"] = getattr(layer.self_attn, name).weight
    for name in ("gate_proj", "up_proj", "down_proj"):
        sd[f"midlayer.mlp.{name}.weight"] = getattr(layer.mlp, name).weight
    if drafter.own_embed is not None:
        sd["embed_tokens.weight"] = drafter.own_embed.weight
    return sd


def save_drafter(
    drafter: Eagle3Drafter, out_dir: str | Path, *, dtype: torch.dtype = torch.float16,
    fmt: str = "safetensors"
) -> Path:
    """Write config.json + model.safetensors (or pytorch_model.bin) in the official format."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu", dtype).contiguous()
               for k, v in _state_dict_for_save(drafter).items()}
    tensors["d2t"] = drafter.d2t.detach().cpu().clone()
    tensors["t2d"] = drafter.t2d.detach().cpu().clone()
    cfg = drafter.cfg.to_dict()
    cfg["torch_dtype"] = str(dtype).removeprefix("torch.")
    (out / CONFIG_FILE).write_text(json.dumps(cfg, indent=2) + "\n")
    if fmt == "safetensors":
        from safetensors.torch import save_file

        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    elif fmt == "bin":
        torch.save(tensors, out / "pytorch_model.bin")
    else:
        raise ValueError(f"unknown format {fmt!r}: use 'safetensors' or 'bin'")
    return out


def resolve_dir(path: str | Path, subfolder: str | None = None) -> Path:
    root = Path(path)
    if subfolder:
        if Path(subfolder).is_absolute() or ".." in Path(subfolder).parts:
            raise DrafterLoadError(f"invalid subfolder {subfolder!r}", readable=False)
        root = root / subfolder
    if not root.is_dir():
        raise DrafterLoadError(f"drafter directory not found: {root}", readable=False)
    return root


def read_config(path: str | Path, subfolder: str | None = None) -> Eagle3Config:
    root = resolve_dir(path, subfolder)
    try:
        raw = json.loads((root / CONFIG_FILE).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DrafterLoadError(f"cannot read {root / CONFIG_FILE}: {exc}",
                               readable=False) from exc
    if not isinstance(raw, dict):
        raise DrafterLoadError(f"{CONFIG_FILE} is not a JSON object", readable=False)
    try:
        return Eagle3Config.from_dict(raw)
    except DrafterConfigError as exc:
        raise DrafterLoadError(str(exc)) from exc


def weight_file(root: Path) -> Path:
    name = preferred_weight_file(n for n in WEIGHT_FILES if (root / n).is_file())
    if name is None:
        raise DrafterLoadError(no_weights(str(root)), readable=False)
    return root / name


def read_weights(root: Path) -> dict[str, Tensor]:
    file = weight_file(root)
    try:
        if file.name == SAFETENSORS_INDEX_FILE:
            return _read_sharded(root, file)
        if file.suffix == ".safetensors":
            from safetensors.torch import load_file

            return dict(load_file(str(file)))
        loaded = torch.load(file, map_location="cpu", weights_only=True)
    except DrafterLoadError:
        raise
    except Exception as exc:  # any decoding failure of a corrupt file is "unreadable"
        raise DrafterLoadError(f"cannot read weights {file.name}: {exc}", readable=False) from exc
    if not isinstance(loaded, dict):
        raise DrafterLoadError(f"{file.name} does not hold a state dict", readable=False)
    return dict(loaded)


def _read_sharded(root: Path, index_file: Path) -> dict[str, Tensor]:
    """The shards a `model.safetensors.index.json` names, merged; every tensor of its
    weight_map must be found in the shard it names."""
    from safetensors.torch import load_file

    index = json.loads(index_file.read_text())
    try:
        shards = shard_names(index)
    except DrafterConfigError as exc:
        raise DrafterLoadError(str(exc), readable=False) from exc
    sd: dict[str, Tensor] = {}
    for shard in shards:
        if not (root / shard).is_file():
            raise DrafterLoadError(f"shard {shard} listed in {SAFETENSORS_INDEX_FILE} is missing",
                                   readable=False)
        tensors = load_file(str(root / shard))
        lost = [k for k, v in index["weight_map"].items() if v == shard and k not in tensors]
        if lost:
            raise DrafterLoadError(f"shard {shard} lacks {lost} that "
                                   f"{SAFETENSORS_INDEX_FILE} puts there", readable=False)
        sd.update(tensors)
    return sd


def check_state_dict(cfg: Eagle3Config, sd: dict[str, Tensor]) -> None:
    """Raise one DrafterLoadError naming what breaks the format's tensor rules
    (eagle3_format/weights.py)."""
    try:
        check_tensors(cfg, {k: tuple(t.shape) for k, t in sd.items()})
        if "d2t" in sd:  # with t2d, and both of the right shapes (check_tensors)
            check_vocab_mapping(sd["d2t"].tolist(), sd["t2d"].tolist(), cfg.vocab_size)
    except DrafterConfigError as exc:
        raise DrafterLoadError(str(exc)) from exc


def load_drafter(
    path: str | Path,
    *,
    subfolder: str | None = None,
    embed_tokens: nn.Embedding | None = None,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> Eagle3Drafter:
    """Load an official-format checkpoint; the target embedding is shared when absent."""
    root = resolve_dir(path, subfolder)
    cfg = read_config(root)
    sd = read_weights(root)
    check_state_dict(cfg, sd)
    drafter = Eagle3Drafter(cfg, embed_tokens)
    with torch.no_grad():
        for key, value in _state_dict_for_save(drafter).items():
            if key in sd:
                value.copy_(sd[key].to(value.dtype))
        if "embed_tokens.weight" in sd:
            drafter.own_embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
            drafter.own_embed.weight.copy_(sd["embed_tokens.weight"].float())
            drafter.own_embed.weight.requires_grad_(False)
        if "d2t" in sd:
            drafter.set_vocab_mapping(sd["d2t"], sd["t2d"])
        else:  # full vocabulary: identity mapping
            drafter.t2d.fill_(True)
    # Without an embedding the caller attaches the target's later (set_shared_embedding).
    return drafter.to(device=device, dtype=dtype).eval().requires_grad_(False)

