"""Does torch.compile or a CUDA graph pay for our forward passes? (issue 8, item 3)

Measured side by side in one process, on the same randomly initialised Llama-3.1-8B-shaped target
and EAGLE-3 drafter as bench/gpu/gpu_check.py: the target's 1-token decode and 61-token tree
verification on a 512-token DynamicCache, and one 10-node drafter tree step, each eager, under
`torch.compile(dynamic=True)` of the whole forward (the engine's --compile: every round has a new
context length), of each decoder layer alone, and, for the drafter, under
`mode="reduce-overhead"` at one fixed shape (CUDA graphs: the floor that static KV buffers would
give). The first call's time is reported as the compile cost; logits and captured aux-layer
features are compared with eager ones.

Each figure is printed as one JSON line as soon as it exists, so a caller that runs this under a
timeout (bench/gpu/gpu_check.py does) keeps every figure measured before the limit.

    python -m bench.gpu.gpu_compile [--small]      (--small: tiny shapes on CPU, for a smoke run)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any, cast

import torch

ROOT = Path(__file__).resolve().parents[2]  # the repository (bench/gpu/ is two levels down)
sys.path.insert(0, str(ROOT))

from bench.gpu.gpu_check import LLAMA8B, SMALL, random_models, timed  # noqa: E402
from core.model.eagle3 import Eagle3Drafter  # noqa: E402
from core.model.target import Target, additive_mask  # noqa: E402
from core.speculation.tree import tree_from_parents  # noqa: E402


def emit(key: str, value: Any) -> None:
    print(json.dumps({key: value}), flush=True)


def first_call_s(fn: Any, device: torch.device) -> float:
    """Seconds of the first call (tracing + compilation for a compiled fn)."""
    t0 = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def measure(name: str, fn: Any, device: torch.device) -> None:
    try:
        emit(f"{name}_first_call_s", round(first_call_s(fn, device), 2))
        emit(f"{name}_ms", timed(fn, device))
    except Exception:  # one failing variant must not hide the others
        emit(f"{name}_error", traceback.format_exc(limit=4)[-1500:])


def target_calls(model: Any, target: Target, vocab: int, device: torch.device,
                 ctx: int) -> dict[str, Any]:
    """Zero-argument calls of model.forward for a decode step and a 61-node verification on a
    fresh copy of a ctx-token cache (what Target.forward does, minus the aux-layer hooks)."""
    prompt = torch.randint(0, vocab, (ctx,))
    parents = torch.tensor([-1] + [(i - 1) // 10 if i > 10 else 0 for i in range(1, 61)])
    tree = tree_from_parents(torch.randint(0, vocab, (61,)), parents)
    cache0 = target.new_cache()
    target.forward(cache0, prompt, torch.arange(ctx))

    def fresh_cache() -> Any:
        c = target.new_cache()
        for i, layer in enumerate(cache0.layers):
            lay = cast(Any, layer)
            c.update(lay.keys.clone(), lay.values.clone(), i)
        return c

    def call(fwd: Any, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> Any:
        t = tokens.numel()
        am = additive_mask(ctx, mask.to(device), target.dtype)
        ids, pos = tokens.view(1, t).to(device), positions.view(1, t).to(device)
        kwarg = target._cache_kwarg
        return lambda: fwd(input_ids=ids, position_ids=pos, attention_mask=am, use_cache=True,
                           **{kwarg: fresh_cache()}).logits

    causal1 = torch.ones(1, 1, dtype=torch.bool)
    return {
        "decode": lambda fwd: call(fwd, tree.tokens[:1], torch.tensor([ctx]), causal1),
        "verify": lambda fwd: call(fwd, tree.tokens, ctx + tree.depths, tree.mask),
    }


def drafter_call(drafter: Eagle3Drafter, fwd: Any, shape: dict[str, int], device: torch.device,
                 dtype: torch.dtype, ctx: int) -> Any:
    c, h = drafter.cfg, shape["hidden_size"]
    kv = (torch.randn(1, c.num_key_value_heads, ctx, c.head_dim, device=device, dtype=dtype),) * 2
    hid = torch.randn(1, 10, h, device=device, dtype=dtype)
    toks = torch.randint(0, shape["vocab_size"], (1, 10), device=device)
    pos = torch.full((1, 10), ctx, device=device)
    return lambda: fwd(hid, toks, pos, kv)


def drafter_step(drafter: Eagle3Drafter) -> Any:
    def step(hid: torch.Tensor, toks: torch.Tensor, pos: torch.Tensor, kv: Any) -> torch.Tensor:
        return drafter.logits(drafter(hid, toks, pos, kv)[0])
    return step


def demo_engine(device: torch.device) -> None:
    """The shipped demo pool end to end, eager vs Target.compile_model: tokens/s of plain
    decoding and of HedgeSpec over one held-out prompt per domain (greedy, 48 tokens, ignore_eos
    so both modes produce the same token count), after a warm-up that pays the compilation."""
    from bench.prompts import load_prompts
    from core.config import EngineConfig, SamplingParams
    from core.engine import SpecEngine

    pool = ROOT / "demo" / "pool" / "pool.json"
    if not pool.exists():
        emit("demo_skipped", "demo/pool/pool.json not present")
        return
    params = SamplingParams(max_new_tokens=48, ignore_eos=True)
    outputs: dict[bool, list[list[int]]] = {}
    for compiled in (False, True):
        tag = "compiled" if compiled else "eager"
        config = EngineConfig(device=str(device), compile=compiled, max_context=4096)
        engine = SpecEngine.from_pool_file(pool, config)
        prompts = load_prompts(pool, engine.tokenizer, 1, 160)
        t0 = time.perf_counter()
        for policy in ("none", "normalhedge"):  # prefill, 1-token and tree shapes all traced
            engine.generate_ids(prompts[0].ids, SamplingParams(max_new_tokens=12, ignore_eos=True),
                                policy)
        emit(f"demo_{tag}_warmup_s", round(time.perf_counter() - t0, 2))
        for policy, label in (("none", "plain"), ("normalhedge", "hedgespec")):
            t0, tokens = time.perf_counter(), 0
            outs: list[list[int]] = []
            for p in prompts:
                ids, _ = engine.generate_ids(p.ids, params, policy)
                tokens, outs = tokens + len(ids), outs + [ids]
            emit(f"demo_{tag}_{label}_tokens_per_s", round(tokens / (time.perf_counter() - t0), 1))
            if label == "plain":
                outputs[compiled] = outs
        del engine
        torch._dynamo.reset()
    same = sum(a == b for a, b in zip(outputs[False], outputs[True], strict=True))
    emit("demo_compiled_same_greedy_outputs", f"{same}/{len(outputs[False])}")


def drafter_variants(drafter: Eagle3Drafter, shape: dict[str, int], device: torch.device,
                     dtype: torch.dtype, ctx: int) -> None:
    step = drafter_step(drafter)
    measure("drafter_step_eager", drafter_call(drafter, step, shape, device, dtype, ctx), device)
    compiled = torch.compile(step, dynamic=True)
    measure("drafter_step_compiled", drafter_call(drafter, compiled, shape, device, dtype, ctx),
            device)
    if device.type == "cuda":
        graphed = torch.compile(step, mode="reduce-overhead", dynamic=False)
        measure("drafter_step_cudagraph", drafter_call(drafter, graphed, shape, device, dtype, ctx),
                device)


def layer_variant(model: Any, calls: dict[str, Any], device: torch.device) -> None:
    """Per decoder layer (hooks would stay outside the compiled code): measured on the H200 to
    gain nothing, which is why Target.compile_model compiles the whole forward instead."""
    layers = model.get_decoder().layers
    for layer in layers:
        layer.forward = torch.compile(layer.forward, dynamic=True)
    for kind in ("decode", "verify"):
        measure(f"target_{kind}_layers_compiled", calls[kind](model.forward), device)
    for layer in layers:
        del layer.forward  # back to the eager method


def whole_variant(model: Any, target: Target, calls: dict[str, Any], other_ctx: dict[str, Any],
                  device: torch.device) -> None:
    """The whole forward compiled, Target's aux-layer hooks inside (Target.compile_model); the
    captured features and logits are compared with eager ones."""
    compiled = torch.compile(model.forward, dynamic=True)
    for kind in ("decode", "verify"):
        measure(f"target_{kind}_compiled", calls[kind](compiled), device)
    # another context length (every round has one): a first call near 0 s = no recompilation
    measure("target_verify_compiled_other_context", other_ctx["verify"](compiled), device)
    try:
        feats = []
        for fwd in (model.forward, compiled):
            calls["verify"](fwd)()
            feats.append(torch.cat([target._captured[i].float() for i in target.aux_layers], -1))
        emit("target_verify_compiled_max_abs_feature_diff",
             float((feats[0] - feats[1]).abs().max()))
    except Exception:
        emit("target_verify_features_error", traceback.format_exc(limit=4)[-1500:])
    compare(calls["verify"](model.forward), calls["verify"](compiled), "target_verify_compiled")


def compare(eager_fn: Any, compiled_fn: Any, name: str) -> None:
    """Same logits? (the greedy-equality tolerance a compiled target needs)"""
    try:
        eager, comp = eager_fn().float(), compiled_fn().float()
        emit(f"{name}_max_abs_logit_diff", float((eager - comp).abs().max()))
        emit(f"{name}_argmax_agreement",
             float((eager.argmax(-1) == comp.argmax(-1)).float().mean()))
    except Exception:
        emit(f"{name}_compare_error", traceback.format_exc(limit=4)[-1500:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--parts", default="demo,whole,drafter,layers",
                    help="which variants: demo (the demo pool end to end), whole, drafter, layers")
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() and not args.small else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    shape, ctx = (SMALL, 64) if args.small else (LLAMA8B, 512)
    torch.set_grad_enabled(False)
    try:
        if "demo" in args.parts.split(","):
            demo_engine(device)
    except Exception:
        emit("demo_error", traceback.format_exc(limit=4)[-1500:])
    model, target, drafter = random_models(shape, device, dtype)
    emit("attn_implementation", str(getattr(model.config, "_attn_implementation", "?")))

    parts = set(args.parts.split(","))
    calls = target_calls(model, target, shape["vocab_size"], device, ctx)
    for kind in ("decode", "verify"):
        measure(f"target_{kind}_eager", calls[kind](model.forward), device)
    if "whole" in parts:  # the engine's --compile: first, it is the figure that matters
        other = target_calls(model, target, shape["vocab_size"], device, ctx + 37)
        whole_variant(model, target, calls, other, device)
    if "drafter" in parts:
        drafter_variants(drafter, shape, device, dtype, ctx)
    if "layers" in parts:
        layer_variant(model, calls, device)
    emit("done", True)


if __name__ == "__main__":
    main()
