"""The target LM: load a local Hugging Face causal LM, run a draft tree in one forward pass on
top of the KV cache, capture the three EAGLE-3 auxiliary hidden states, compact the cache.

Supported families: Llama, Qwen2, Qwen3, Mistral (any decoder-only model whose transformers
implementation accepts a 4D additive attention mask and explicit position ids). Never
`trust_remote_code`: a checkpoint that needs custom code is refused.

Sliding-window attention (Mistral's `sliding_window`, Qwen2's `use_sliding_window`): transformers
uses a 4D mask as given, so the window is applied here, in the mask. The KV cache keeps every
committed entry (full cache layers, no sliding layers): a sliding layer drops entries older than
the window and counts positions in `cumulative_length`, which compacting the cache to the
accepted path cannot keep consistent. The price is a cache of the full context instead of the
window, at most max_context / sliding_window times more (none below the window).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

from core.model import canonical
from core.model.kv_cache import SlotCache
from core.model.lean_decoder import LeanDecoder, Masks, Projection
from core.model.sampling_defaults import read_generation_config
from core.model.static_shapes import StaticShapes
from eagle3_format.aux_layers import AuxLayers, default_aux_layers

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")
# From this many new tokens in a row (long prefill chunks), a CPU pass attends row by row
# (LeanDecoder: attend_rows, where the measurements are).
ROW_ATTENTION_TOKENS = 96
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class TargetLoadError(ValueError):
    """The target directory cannot be served."""


def served_aux_layers(num_layers: int) -> AuxLayers:
    """The layers a target serves when neither the engine config nor a drafter names any:
    EAGLE-3's default where it names three distinct layers of the target. Toy targets (below 7
    layers), where it repeats a layer, get three distinct ones spread over 1..L-1 instead
    (DESIGN.md section 2); drafters trained on them record those layers in their config."""
    eagle3 = default_aux_layers(num_layers)
    if len(set(eagle3)) == 3 and all(0 <= i < num_layers for i in eagle3):
        return eagle3
    if num_layers >= 4:
        low, mid = 1, num_layers // 2
        high = max(mid + 1, num_layers - 2)
        return (low, mid, min(high, num_layers - 1))
    picks = list(range(num_layers)) + [num_layers - 1] * 3
    return (picks[0], picks[1], picks[2])


@dataclass(eq=False)
class TargetOutput:
    """One forward's outputs per new token. Logits are computed on demand, row by row:
    verification reads only the nodes its acceptance walk visits (about MAT of a 20-node tree),
    and on a CPU the LM head (49,152 x 576 for SmolLM2) is a fifth of a tree pass's work."""

    hidden: Tensor  # [T, H] the decoder's final (normed) hidden states, model dtype
    features: Tensor  # [T, 3H] fused (low, mid, high) inputs of the aux decoder layers
    head: Callable[[Tensor], Tensor]  # hidden rows [R, H] -> float32 logits [R, V]
    _rows: dict[int, Tensor] = field(default_factory=dict, repr=False)
    _all: Tensor | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return int(self.hidden.shape[0])

    @property
    def logits(self) -> Tensor:
        """[T, V] float32, every row (prompt log-probabilities, the last row of a prefill)."""
        if self._all is None:
            self._all = (torch.stack([self._rows[n] for n in range(len(self))])
                         if len(self._rows) == len(self) else self.head(self.hidden))
            self._rows.clear()
        return self._all

    def rows(self, nodes: Sequence[int]) -> Tensor:
        """[len(nodes), V] float32 logits of the given rows, each computed once."""
        if self._all is not None:
            return self._all[list(nodes)]
        self.compute([n for n in nodes if n not in self._rows])
        return torch.stack([self._rows[n] for n in nodes])

    def compute(self, nodes: Sequence[int]) -> None:
        """Compute (and keep) the logits of `nodes` in one head call."""
        fill_rows([self], [list(nodes)])


def fill_rows(outs: Sequence[TargetOutput], nodes: Sequence[Sequence[int]]) -> None:
    """Compute the logits of rows `nodes[b]` of `outs[b]` for every b in one head call (the
    head's weights are read once for the batch: a 1-row call costs nearly as much as 20 rows
    on a CPU, the weight read dominating)."""
    want = [(o, sorted({n for n in ns if n not in o._rows and o._all is None}))
            for o, ns in zip(outs, nodes, strict=True)]
    want = [(o, ns) for o, ns in want if ns]
    if not want:
        return
    logits = want[0][0].head(torch.cat([o.hidden[ns] for o, ns in want]))
    at = 0
    for o, ns in want:
        for n in ns:
            o._rows[n] = logits[at]
            at += 1


def resolve_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}: use one of {sorted(DTYPES)}")
    return DTYPES[name]


class Target:
    """A causal LM plus the bookkeeping speculative decoding needs. Not thread-safe."""

    def __init__(self, model: Any, tokenizer: Any,
                 aux_layers: tuple[int, int, int] | None = None, *, lean: bool = True) -> None:
        self.model = model
        self.tokenizer = tokenizer
        cfg = model.config
        self.num_layers = int(cfg.num_hidden_layers)
        self.hidden_size = int(cfg.hidden_size)
        self.vocab_size = int(cfg.vocab_size)
        self.aux_layers: AuxLayers = (aux_layers if aux_layers
                                      else served_aux_layers(self.num_layers))
        if any(not 0 <= i < self.num_layers for i in self.aux_layers):
            raise TargetLoadError(f"aux layers {self.aux_layers} outside 0..{self.num_layers - 1}")
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.forward_count = 0  # every target forward pass (prefill, verification, plain step)
        # The decoder stack and the LM head run separately: logits only for the rows asked for
        # (TargetOutput.rows).
        self.decoder = model.get_decoder()
        self.lm_head = model.get_output_embeddings()
        # transformers renamed `past_key_values` to `cache` (5.2x); accept either release.
        params = inspect.signature(self.decoder.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        self.decoder_layers = self.decoder.layers
        # Inputs of the aux decoder layers, written by pre-hooks registered once, for good: only
        # 3 of the L+1 hidden states are kept (output_hidden_states would hold all of them for
        # long prompts), and a compiled forward (compile_model) sees the same hooks every call.
        self._captured: dict[int, Tensor] = {}
        for idx in set(self.aux_layers):
            self.decoder_layers[idx].register_forward_pre_hook(_store_input(self._captured, idx),
                                                               with_kwargs=True)
        self.max_positions = int(getattr(cfg, "max_position_embeddings", 0) or 1 << 30)
        # The batched passes (forward_rows) run the lean forward where the family has one and
        # the model sits on one device (core/model/lean_decoder.py); else the module.
        on_one_device = len({p.device for p in model.parameters()}) == 1
        self.lean = LeanDecoder.of(model) if lean and on_one_device else None
        self.sliding_window, self._mixed_windows = attention_windows(cfg)
        self.deterministic = False  # canonical attention order (use_canonical_numerics)
        # What a request that leaves them out samples with (core/model/sampling_defaults.py).
        self.sampling_defaults: dict[str, float] = {}
        # The compiled lean forward: dynamic shapes, and under static shapes the captured one
        # that only bucketed passes run (another shape would recompile it).
        self._lean_compiled: Callable[..., tuple[Tensor, list[Tensor]]] | None = None
        self._lean_captured: Callable[..., tuple[Tensor, list[Tensor]]] | None = None
        # Bucketed static shapes for captured passes (core/model/static_shapes.py), or None.
        self.static: StaticShapes | None = None

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        device: str = "cpu",
        dtype: str | torch.dtype = "float32",
        aux_layers: tuple[int, int, int] | None = None,
        device_map: str | None = None,
        compile_model: bool = False,
        static_shapes: StaticShapes | None = None,
    ) -> Target:
        path = Path(path)
        model_type = _model_type(path)
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise TargetLoadError(f"model_type {model_type!r} not supported "
                                  f"(use {SUPPORTED_MODEL_TYPES})")
        if compile_model and device_map:
            raise TargetLoadError("compile is not supported together with device_map "
                                  "(not measured)")
        kwargs: dict[str, Any] = {"dtype": resolve_dtype(dtype), "trust_remote_code": False}
        if device_map:  # spread a target that does not fit one GPU over the box's GPUs
            kwargs["device_map"] = device_map
        model: Any = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True,
                                                          **kwargs)
        if not device_map:
            model = model.to(device)
        model.eval().requires_grad_(False)
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True,
                                                  trust_remote_code=False)
        target = cls(model, tokenizer, aux_layers)
        target.sampling_defaults = read_generation_config(path)
        if compile_model:
            target.compile_model(static_shapes)
        return target

    def use_canonical_numerics(self) -> str | None:
        """Batched passes attend in each query's canonical key order (core/model/canonical.py)
        and pad linear calls to their probed row floors, or compute them in fixed-size calls
        where no cheap floor holds (canonical.RowPadding): a token's logits are bit-identical
        whatever tree, batch and padding verify it, in bf16 as in fp32. Returns None once on,
        else why it cannot be here (then nothing changed): it needs the lean forward on a CPU
        and a C++ compiler."""
        if self.lean is None or self.device.type != "cpu":
            return ("deterministic numerics need a lean-forward family (llama, qwen2, qwen3, "
                    "mistral) on a CPU; the GPU path is not written yet")
        problem = canonical.available()
        if problem is not None:
            return problem
        padding: dict[tuple[int, int], canonical.RowPadding] = {}
        for name, _, proj in self.lean.projections():
            shape = (int(proj.weight.shape[0]), int(proj.weight.shape[1]))
            if shape not in padding:
                rule = _row_padding(proj, shape, self.dtype)
                if rule is None:
                    return (f"the {name} projection {shape} is row-invariant at no floor of "
                            f"{canonical.FLOORS} rows and no call size of {canonical.CHUNKS} "
                            "on this machine")
                padding[shape] = rule
        self.lean.set_padding(padding)
        self.deterministic = True
        return None

    def compile_model(self, static: StaticShapes | None = None) -> None:
        """torch.compile the decoder's forward: the lean forward where the family has one (its
        weights unpacked: inductor lowers no oneDNN-packed tensor), else the module's, aux-layer
        hooks included. With `static` (a GPU; core/model/static_shapes.py) the lean forward
        runs in bucketed shapes and compiles with CUDA graphs ("reduce-overhead"), one graph a
        bucket; without, with dynamic shapes (every round has a new context length: no
        recompilation per round). Measured on an H200 with a Llama-3.1-8B-shaped target
        (bench/results/gpu_check.md, the module's forward): 1-token decode and 61-token
        verification 2.2-3x faster. On this project's CPU compiling loses (plain decoding 23
        against 30-39 tokens/s eager: bench/results/engine_profile.md). The first prefill,
        decode and verification shapes pay the compilation (about a minute each at 8B), so a
        server warms up before it reports ready."""
        self.decoder.forward = torch.compile(self.decoder.forward, dynamic=True)
        if self.lean is None:
            return
        self.lean.unpack()
        self.static = static
        self._lean_compiled = torch.compile(self.lean, dynamic=True)
        if static is not None:
            self._lean_captured = torch.compile(self.lean, mode="reduce-overhead", dynamic=False)

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        ids: set[int] = set()
        gen_cfg = getattr(self.model, "generation_config", None)
        tok_eos = getattr(self.tokenizer, "eos_token_id", None)
        for src in (self.model.config.eos_token_id, getattr(gen_cfg, "eos_token_id", None),
                    tok_eos):
            if isinstance(src, int):
                ids.add(src)
            elif isinstance(src, (list, tuple)):
                ids.update(int(i) for i in src)
        return tuple(sorted(ids))

    def new_cache(self) -> DynamicCache:
        # No config: every layer is a full DynamicLayer, whatever the model's sliding window
        # (see the module docstring); compact_cache relies on it.
        return DynamicCache()

    @torch.no_grad()
    def forward(
        self, cache: DynamicCache, input_ids: Tensor, positions: Tensor,
        tree_mask: Tensor | None = None, *, last_logits_only: bool = False, tail: int = 1,
    ) -> TargetOutput:
        """Run T new tokens on top of `cache` (which grows by T).

        input_ids/positions: [T]; tree_mask: [T, T] bool (node i may attend node j), None =
        causal. The committed prefix in the cache is visible to every new token.
        `last_logits_only` (prefill) computes only the last row's logits and keeps the hidden
        states of the last `tail` rows (what core/decoding/prompt_feedback.py reads), not the
        prompt's.
        """
        n, t = cache.get_seq_length(), input_ids.numel()
        if tree_mask is None:
            tree_mask = torch.ones(t, t, dtype=torch.bool, device=self.device).tril()
        mask = self._attention_mask(n, tree_mask.to(self.device), positions.to(self.device))
        captured = self._captured
        captured.clear()
        hidden = self._decode(ids=input_ids.view(1, t), pos=positions.view(1, t), mask=mask,
                              cache=cache)
        # .to(device): with device_map="auto" the layers may sit on other GPUs
        feats = torch.cat([captured[i][0].to(self.device) for i in self.aux_layers], dim=-1)
        captured.clear()  # hold no activations between passes
        out = TargetOutput(hidden[0, -max(1, tail):] if last_logits_only else hidden[0], feats,
                           self.head)
        if last_logits_only:
            out.compute([len(out) - 1])
        return out

    def _decode(self, *, ids: Tensor, pos: Tensor, mask: Any, cache: Any) -> Tensor:
        """The decoder stack over [B, T] new tokens on top of `cache`: final hidden [B, T, H]."""
        out = self.decoder(input_ids=ids.to(self.device), position_ids=pos.to(self.device),
                           attention_mask=mask, use_cache=True, **{self._cache_kwarg: cache})
        self.forward_count += 1
        return cast(Tensor, out.last_hidden_state)

    def _decode_rows(self, ids: Tensor, pos: Tensor, mask: Any, cache: SlotCache,
                     real: Tensor | None = None,
                     spans: list[tuple[int, int]] | None = None) -> tuple[Tensor, list[Tensor]]:
        """Final hidden [B, T, H] and the aux layers' inputs of a batched pass (`real`: the
        lean forward's packed tokens, `spans`: rows that attend apart, LeanDecoder.__call__)."""
        if self.lean is not None:
            self.forward_count += 1
            static = cache.static_pass
            run = ((self._lean_captured if static else None) or self._lean_compiled
                   or self.lean)
            return run(ids.to(self.device), pos.to(self.device), mask, cache, self.aux_layers,
                       None if real is None else real.to(self.device), spans)
        captured = self._captured
        captured.clear()
        hidden = self._decode(ids=ids, pos=pos, mask=mask, cache=cache).to(self.device)
        aux = [captured[i] for i in self.aux_layers]
        captured.clear()  # hold no activations between passes
        return hidden, aux

    @property
    def packed_head(self) -> bool:
        """Whether the LM head streams its weights packed (the lean forward, bf16 on a CPU):
        then a call costs about the same for 1 row as for 16 (core/batching/head_rows.py)."""
        return self.lean is not None and self.lean.head.packed is not None

    def head(self, hidden: Tensor) -> Tensor:
        """float32 logits [R, V] of final hidden states [R, H] (the model's LM head)."""
        if self.lean is not None:
            return self.lean.head(hidden.to(self.device)).float()
        weight = self.lm_head.weight
        return cast(Tensor, self.lm_head(hidden.to(weight.device))).to(self.device).float()

    def new_slot_cache(self) -> SlotCache:
        """The batched cache of core/model/kv_cache.py (one slot per running request), its
        storage allocated at full size up front under static shapes."""
        cache = SlotCache(self.num_layers)
        if self.static is not None:
            cfg = self.model.config
            heads = int(cfg.num_attention_heads)
            head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
            cache.allocate(self.static.slots, self.static.capacity,
                           int(cfg.num_key_value_heads), head_dim, self.dtype, self.device)
        return cache

    @torch.no_grad()
    def forward_rows(
        self, cache: SlotCache, slots: list[int], tokens: list[Tensor], positions: list[Tensor],
        tree_masks: list[Tensor | None], *, last_logits_only: bool = False, tail: int = 1,
    ) -> list[TargetOutput]:
        """One forward pass over several requests, row b = slot `slots[b]`: its T_b new tokens
        (a draft tree, or a causal prompt chunk when its tree mask is None) on top of its
        committed prefix, padded to the longest row. The new entries are written past each
        row's length; the caller keeps them (SlotCache.keep / extend). Returns row b's logits
        and features [T_b, ...]; `last_logits_only` (prefill chunks) computes each row's last
        logits only, keeping the hidden states of its last `tail` tokens."""
        t_max = max(x.numel() for x in tokens)
        bucket = self._static_bucket(cache, slots, t_max)
        if bucket is None:
            rows, starts = len(slots), cache.begin(slots, t_max)
            kv_len = max(starts) + t_max
        else:
            assert self.static is not None  # a bucket exists only under static shapes
            (rows, t_max), kv_len = bucket, self.static.capacity
            starts = cache.begin_static(slots, rows, kv_len, self.device)
        ids = torch.zeros(rows, t_max, dtype=torch.long)
        pos = torch.zeros(rows, t_max, dtype=torch.long)
        for b, (tok, p) in enumerate(zip(tokens, positions, strict=True)):
            t = tok.numel()
            # padding repeats the last position
            ids[b, :t], pos[b, :t], pos[b, t:] = tok.cpu(), p.cpu(), int(p[-1])
        real = None
        if bucket is None and sum(x.numel() for x in tokens) < rows * t_max:
            real = torch.cat([b * t_max + torch.arange(x.numel()) for b, x in enumerate(tokens)])
        spans = None
        if self.deterministic:
            mask: Masks = self._canonical_order(starts, [x.numel() for x in tokens], tree_masks,
                                                pos)
        else:
            # a causal chunk's mask is built here only: canonical numerics read no mask
            masks = [torch.ones(x.numel(), x.numel(), dtype=torch.bool).tril() if m is None
                     else m for x, m in zip(tokens, tree_masks, strict=True)]
            pad_tree = torch.ones(1, 1, dtype=torch.bool)  # a padding row: one token seeing itself
            starts_all = starts + [0] * (rows - len(slots))
            mask = self._rows_mask(starts_all, masks + [pad_tree] * (rows - len(slots)), pos,
                                   kv_len)
            if bucket is None and self.device.type == "cpu" and t_max >= ROW_ATTENTION_TOKENS:
                spans = [(x.numel(), s + x.numel()) for x, s in zip(tokens, starts, strict=True)]
        hidden, aux = self._decode_rows(ids, pos, mask, cache, real, spans)
        feats = torch.cat([x.to(self.device) for x in aux], dim=-1)
        keep = max(1, tail)
        outs = [TargetOutput(hidden[b, max(0, x.numel() - keep) : x.numel()] if last_logits_only
                             else hidden[b, : x.numel()], feats[b, : x.numel()], self.head)
                for b, x in enumerate(tokens)]
        if last_logits_only:  # every row's last logits in one head call
            fill_rows(outs, [[len(o) - 1] for o in outs])
        return outs

    def _static_bucket(self, cache: SlotCache, slots: list[int],
                       tokens: int) -> tuple[int, int] | None:
        """The static-shape bucket of a pass (core/model/static_shapes.py), or None: static
        shapes off, the rows not the last running slots in order (their padding takes the free
        slots after them), or no bucket fits."""
        if self.static is None or self.lean is None:
            return None
        if slots != list(range(slots[0], slots[0] + len(slots))) or slots[-1] + 1 != cache.used:
            return None
        longest = max(cache.lengths[s] for s in slots)
        return self.static.bucket(slots[0], len(slots), tokens, longest)

    def _canonical_order(self, starts: list[int], counts: list[int],
                         trees: list[Tensor | None], positions: Tensor) -> Masks:
        full = canonical.canonical_order(starts, counts, trees, positions)
        if self.sliding_window is None:
            return full
        windowed = canonical.canonical_order(starts, counts, trees, positions,
                                             self.sliding_window)
        return ({"full_attention": full, "sliding_attention": windowed} if self._mixed_windows
                else windowed)

    def _rows_mask(self, starts: list[int], trees: list[Tensor], positions: Tensor,
                   kv_len: int) -> Tensor | dict[str, Tensor]:
        full = rows_mask(starts, trees, positions, kv_len, self.dtype, device=self.device)
        if self.sliding_window is None:
            return full
        windowed = rows_mask(starts, trees, positions, kv_len, self.dtype, self.sliding_window,
                             device=self.device)
        return ({"full_attention": full, "sliding_attention": windowed} if self._mixed_windows
                else windowed)

    def features_dtype(self) -> torch.dtype:
        return self.dtype

    def _attention_mask(self, past: int, tree_mask: Tensor,
                        positions: Tensor) -> Tensor | dict[str, Tensor]:
        """The additive mask(s) for one forward; models with both full and sliding layers
        (Qwen2 with max_window_layers) take one per layer type, as transformers' own masks."""
        full = additive_mask(past, tree_mask, self.dtype)
        if self.sliding_window is None:
            return full
        windowed = additive_mask(past, tree_mask, self.dtype, positions=positions,
                                 sliding_window=self.sliding_window)
        return ({"full_attention": full, "sliding_attention": windowed} if self._mixed_windows
                else windowed)


CHEAP_FLOOR = 16  # rows a one-row call may be padded to at little cost (memory-bound calls)


def _row_padding(proj: Projection, shape: tuple[int, int],
                 dtype: torch.dtype) -> canonical.RowPadding | None:
    """The cheapest padding that makes `proj` row-invariant (None where none does): a floor
    of at most CHEAP_FLOOR rows, else fixed-size calls, else any floor. Why chunks before a
    high floor: a floor of 64 makes each one-row decode call compute 64 rows (the LM head
    3.6 ms against 1.4 ms a call on a 2-core AMX Xeon), a chunk of 16 computes 16 (2.1 ms); a
    long call (a prefill) is split into chunks and pays more instead. Measured end to end on
    that machine (bench/results/deterministic.md): plain decoding 0.93x / 1.07x / 1.13x the
    library's kernels at 1 / 4 / 16 streams with chunks, 0.73x / 0.88x / 1.06x with the
    floors of 64."""
    floor = canonical.row_floor(shape, dtype, lambda f: dataclasses.replace(proj, floor=f))
    if floor is not None and floor <= CHEAP_FLOOR:
        return canonical.RowPadding(floor=floor)
    chunk = canonical.row_chunk(shape, dtype, lambda c: dataclasses.replace(proj, chunk=c))
    if chunk is not None:
        return canonical.RowPadding(chunk=chunk)
    return None if floor is None else canonical.RowPadding(floor=floor)


def _store_input(captured: dict[int, Tensor], idx: int) -> Any:
    """A forward pre-hook that keeps decoder layer `idx`'s input hidden states."""
    def hook(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        captured[idx] = args[0] if args else kwargs["hidden_states"]
    return hook


def additive_mask(
    past: int, tree_mask: Tensor, dtype: torch.dtype, *, positions: Tensor | None = None,
    sliding_window: int | None = None,
) -> Tensor:
    """[1,1,T,past+T] additive mask: full view of the past, `tree_mask` over the new tokens.

    With `sliding_window` W, a query at position p also sees only keys at positions > p - W
    (transformers' sliding_window_overlay); the past key j sits at position j (the cache holds
    the committed prefix only), new token i at `positions[i]` [T].
    """
    t = tree_mask.shape[0]
    allowed = torch.cat([torch.ones(t, past, dtype=torch.bool, device=tree_mask.device), tree_mask],
                        dim=1)
    if sliding_window is not None:
        if positions is None:
            raise ValueError("a sliding window needs the positions of the new tokens")
        q_pos = positions.to(tree_mask.device).long()
        k_pos = torch.cat([torch.arange(past, device=tree_mask.device), q_pos])
        allowed &= k_pos[None, :] > q_pos[:, None] - sliding_window
    mask = torch.zeros(t, past + t, dtype=dtype, device=tree_mask.device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min if dtype != torch.float32
                            else -math.inf)[None, None]


def rows_mask(starts: list[int], trees: list[Tensor], positions: Tensor, kv_len: int,
              dtype: torch.dtype, sliding_window: int | None = None,
              device: torch.device | str = "cpu") -> Tensor:
    """[B,1,T,kv_len] additive mask of a batched forward (Target.forward_rows): row b's query i
    (i < T_b) sees the row's committed keys (< starts[b]) and the new keys its tree mask [T_b,
    T_b] allows, which sit at starts[b]..starts[b]+T_b-1; a padding query sees only its own key
    (a fully masked row would make SDPA return NaN). positions [B, T]: the new tokens'
    positions; committed key j sits at position j; with `sliding_window` W a query at p also
    sees only keys at positions > p - W."""
    b, t = positions.shape
    positions = positions.to(device)
    allowed = torch.zeros(b, t, kv_len, dtype=torch.bool, device=device)
    k_pos = torch.arange(kv_len, device=device).repeat(b, 1)
    for row, (start, tree) in enumerate(zip(starts, trees, strict=True)):
        n = tree.shape[0]
        allowed[row, :n, :start] = True
        allowed[row, :n, start : start + n] = tree.to(device)
        pad = torch.arange(n, t, device=device)
        allowed[row, pad, start + pad] = True
        k_pos[row, start : start + t] = positions[row]
    if sliding_window is not None:
        allowed &= k_pos[:, None, :] > positions[:, :, None] - sliding_window
    mask = torch.zeros(b, t, kv_len, dtype=dtype, device=device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min if dtype != torch.float32
                            else -math.inf)[:, None]


def attention_windows(config: Any) -> tuple[int | None, bool]:
    """(sliding window or None, whether full-attention layers exist beside sliding ones).

    transformers marks sliding layers in `layer_types` (Qwen2/3); Mistral has no layer_types
    and slides every layer when `sliding_window` is set.
    """
    window = getattr(config, "sliding_window", None)
    if not window:
        return None, False
    kinds = set(getattr(config, "layer_types", None) or ["sliding_attention"])
    if "sliding_attention" not in kinds:
        return None, False
    return int(window), bool(kinds - {"sliding_attention"})


def compact_cache(cache: DynamicCache, committed: int, keep: Tensor) -> None:
    """Keep the first `committed` entries plus the new entries at offsets `keep` (accepted path)."""
    for layer in cache.layers:
        layer = cast(Any, layer)
        if layer.keys.shape[-2] != getattr(layer, "cumulative_length", layer.keys.shape[-2]):
            # A sliding layer that already dropped old entries: the offsets no longer hold.
            raise ValueError("compact_cache needs a cache that keeps every entry "
                             "(Target.new_cache)")
        idx = torch.cat([torch.arange(committed, device=layer.keys.device),
                         committed + keep.to(layer.keys.device)])
        layer.keys = layer.keys.index_select(-2, idx)
        layer.values = layer.values.index_select(-2, idx)
        if hasattr(layer, "cumulative_length"):  # sliding layers report this as their length
            layer.cumulative_length = layer.keys.shape[-2]


def _model_type(path: Path) -> str:
    try:
        raw = json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TargetLoadError(f"cannot read target config {path / 'config.json'}: {exc}") from exc
    if raw.get("auto_map"):
        raise TargetLoadError("target requires remote code (auto_map); "
                              "refused: no trust_remote_code")
    return str(raw.get("model_type", ""))
