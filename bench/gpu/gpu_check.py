"""GPU figures that only a GPU gives (issues 8 and 57), in one short script (< 8 minutes,
nothing downloaded): first plain decoding through the engine's batched pass at 8B (1 and 8
rows, eager and compiled) in milliseconds a step against the memory-bandwidth floor, and the
demo pool's default engine (served tree and time loss) against plain decoding; then, on
randomly initialised Llama-3.1-8B-shaped target and EAGLE-3 drafters, the time of
a target verification pass (60-token tree on a 512-token context), of one drafter tree step, of
the batched evaluation (catch-up) of 8 and 32 drafters, and of the learner update; then the
engine end to end on CUDA (a constructed target with an exactly-copying drafter vs plain), and
the demo pool's tokens/s per method when demo/pool exists (tables and plots in OUT/gpu_demo/),
batched rounds against round-robin at 1 and 16 concurrent streams on the 8B-shaped target
(issue 16's GPU goal: 16 streams >= 6x one stream's aggregate),
and whether torch.compile / CUDA graphs pay (bench/gpu/gpu_compile.py in a child process under
--compile-timeout). The JSON is rewritten after every section, so a run stopped at its limit keeps
what it measured. Compare: the HedgeSpec paper's Table 2 (A100): target forward 75.7 ms, drafter
forward 2.5 ms, NormalHedge update 0.41 ms.

    python -m bench.gpu.gpu_check [--out bench/results] [--small] [--skip SECTIONS]
    (--small: tiny shapes, CPU ok)
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]  # the repository (bench/gpu/ is two levels down)
sys.path.insert(0, str(ROOT))

from core.config import SamplingParams, TreeConfig  # noqa: E402
from core.model.eagle3 import Eagle3Config, Eagle3Drafter  # noqa: E402
from core.model.target import Target  # noqa: E402
from core.selection.learners import make_learner  # noqa: E402
from core.speculation.drafter_pool import PoolSnapshot  # noqa: E402

LLAMA8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192)
SMALL = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)


def timed(fn: Any, device: torch.device, reps: int = 10) -> float:
    """Median milliseconds of fn() after two warm-up calls."""
    fn(), fn()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(1000 * (time.perf_counter() - t0))
    return float(np.median(times))


def random_models(shape: dict[str, int], device: torch.device,
                  dtype: torch.dtype) -> tuple[Any, Target, Eagle3Drafter]:
    """A randomly initialised Llama of `shape` (the HF model and its Target wrapper) and an
    EAGLE-3 drafter shaped for it: timing needs the shapes, not trained weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(**cast(dict[str, Any], shape))
    torch.set_default_dtype(dtype)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).eval().requires_grad_(False)
    torch.set_default_dtype(torch.float32)
    layers = shape["num_hidden_layers"]
    target = Target(model, None, (2, layers // 2, layers - 3))
    dcfg = Eagle3Config.for_target(cfg, draft_vocab_size=min(32000, shape["vocab_size"]),
                                   aux_layers=target.aux_layers)
    with torch.device(device):
        drafter = (Eagle3Drafter(dcfg, model.get_input_embeddings())
                   .to(dtype).eval().requires_grad_(False))
    return model, target, drafter


def component_times(shape: dict[str, int], device: torch.device, dtype: torch.dtype,
                    ctx: int) -> dict[str, float]:
    _, target, drafter = random_models(shape, device, dtype)
    out = target_times(target, shape["vocab_size"], device, ctx)
    out.update(drafter_times(drafter, shape, device, dtype, ctx))
    out.update(learner_times())
    return out


def target_times(target: Target, vocab: int, device: torch.device, ctx: int) -> dict[str, float]:
    from core.speculation.tree import tree_from_parents

    prompt = torch.randint(0, vocab, (ctx,))
    # 10 wide, 6 deep
    parents = torch.tensor([-1] + [(i - 1) // 10 if i > 10 else 0 for i in range(1, 61)])
    tree = tree_from_parents(torch.randint(0, vocab, (61,)), parents)
    cache0 = target.new_cache()
    target.forward(cache0, prompt, torch.arange(ctx))

    def base_cache() -> Any:  # a fresh copy of the 512-token context cache
        c = target.new_cache()
        for i, layer in enumerate(cache0.layers):
            lay = cast(Any, layer)
            c.update(lay.keys, lay.values, i)
        return c

    return {
        "target_verify_61_tokens_ms": timed(
            # .logits: every node's, as verification computes them on a GPU (verify_logits)
            lambda: target.forward(base_cache(), tree.tokens, ctx + tree.depths,
                                   tree.mask).logits, device),
        "target_decode_1_token_ms": timed(
            lambda: target.forward(base_cache(), tree.tokens[:1], torch.tensor([ctx])).logits,
            device),
    }


def device_bandwidth(device: torch.device) -> float:
    """Bytes/s the device reads its memory at: a 1 GiB copy (read + write) on a GPU, a 512 MiB
    reduction (read only) on a CPU; median of 5."""
    def run() -> None:
        if device.type == "cuda":
            dst.copy_(src)
        else:
            src.max()

    src = torch.ones((1 << 29) // 2 if device.type != "cuda" else 1 << 29, dtype=torch.bfloat16,
                     device=device)
    dst = torch.empty_like(src) if device.type == "cuda" else src
    ms = timed(run, device, 5)
    moved = src.numel() * src.element_size() * (2 if device.type == "cuda" else 1)
    return moved / (ms / 1e3)


def plain_decode(shape: dict[str, int], device: torch.device, dtype: torch.dtype,
                 ctx: int) -> dict[str, float]:
    """Plain decoding through the engine's batched pass (Target.forward_rows on the slot
    cache: the lean forward, core/model/lean_decoder.py), 1 and 8 rows on a `ctx`-token
    context, milliseconds a step, against the memory-bandwidth floor (the weights read once at
    the device's measured bandwidth), and a 16-token tree's verification pass; eager, then on
    a GPU compiled with dynamic shapes and captured in CUDA graphs with static shapes
    (core/model/static_shapes.py)."""
    from core.model.static_shapes import StaticShapes

    _, target, _ = random_models(shape, device, dtype)
    weight_bytes = sum(p.numel() * p.element_size() for p in target.model.parameters())
    bandwidth = device_bandwidth(device)
    floor = weight_bytes / bandwidth * 1e3
    out = {"weights_gb": weight_bytes / 1e9, "bandwidth_gb_s": bandwidth / 1e9,
           "floor_ms": floor, "lean_forward": float(target.lean is not None)}
    # compiled on a GPU only: on a CPU it loses (bench/results/engine_profile.md)
    for label in ("eager", "compiled", "captured") if device.type == "cuda" else ("eager",):
        if label == "compiled":
            target.compile_model()
        if label == "captured":
            target.compile_model(StaticShapes(capacity=ctx + 128, slots=8))
        for rows in (1, 8):
            ms = _decode_step_ms(target, rows, ctx, shape["vocab_size"], device)
            out[f"{label}_{rows}_rows_ms_per_step"] = ms
            out[f"{label}_{rows}_rows_x_floor"] = ms / floor
            out[f"{label}_{rows}_rows_verify_16_ms"] = _decode_step_ms(
                target, rows, ctx, shape["vocab_size"], device, tree=16)
    return out


def _decode_step_ms(target: Target, rows: int, ctx: int, vocab: int, device: torch.device,
                    tree: int = 0) -> float:
    """Milliseconds of a plain step (one token a row, its logits, kept in the cache), or with
    `tree` of a verification pass over a `tree`-token chain a row (its logits, not kept)."""
    from core.model.target import fill_rows

    cache = target.new_slot_cache()
    slots = [cache.acquire() for _ in range(rows)]
    prompt = torch.randint(0, vocab, (ctx,))
    target.forward_rows(cache, slots, [prompt] * rows, [torch.arange(ctx)] * rows,
                        [None] * rows, last_logits_only=True)
    for slot in slots:
        cache.extend(slot, ctx)
    at = [ctx]
    n = max(tree, 1)

    def step() -> None:
        tokens = torch.randint(0, vocab, (n,))
        pos = torch.arange(at[0], at[0] + n)
        outs = target.forward_rows(cache, slots, [tokens] * rows, [pos] * rows, [None] * rows)
        fill_rows(outs, [list(range(n))] * rows)
        if not tree:
            cache.keep(slots, [[0]] * rows)
            at[0] += 1

    return timed(step, device, 20)


def served_default_vs_plain(device: torch.device, tokens: int) -> dict[str, float]:
    """The demo pool's engine as `hedgespec serve` runs it on `device` (served tree and
    selector: the time loss, policy auto) against plain decoding (policy none), one stream,
    held-out prompts, tokens/s; a fresh engine per mode (the suffix member learns answers)."""
    pool = ROOT / "demo" / "pool" / "pool.json"
    if not pool.exists():
        return {"skipped": 1.0}
    from bench.prompts import load_prompts
    from core.config import EngineConfig, served_selector, served_tree
    from core.engine import SpecEngine
    from core.model.precision import auto_dtype

    out: dict[str, float] = {}
    for label, policy in (("plain", "none"), ("default", "auto")):
        config = EngineConfig(device=str(device), dtype=auto_dtype(str(device)),
                              tree=served_tree(str(device)),
                              selector=served_selector(str(device)))
        engine = SpecEngine.from_pool_file(pool, config)
        prompts = [p.ids for p in load_prompts(pool, engine.target.tokenizer, 2, 384)]
        engine.generate_ids(prompts[-1], SamplingParams(max_new_tokens=8), policy)  # warm-up
        engine.forget_costs()
        start, count = time.perf_counter(), 0
        for ids in prompts[:8]:
            got, _ = engine.generate_ids(ids, SamplingParams(max_new_tokens=tokens,
                                                             ignore_eos=True), policy)
            count += len(got)
        out[f"{label}_tokens_per_s"] = count / (time.perf_counter() - start)
    out["default_x_plain"] = out["default_tokens_per_s"] / out["plain_tokens_per_s"]
    return out


def drafter_times(drafter: Eagle3Drafter, shape: dict[str, int], device: torch.device,
                  dtype: torch.dtype, ctx: int) -> dict[str, float]:
    c, h = drafter.cfg, shape["hidden_size"]
    kv = (torch.randn(1, c.num_key_value_heads, ctx, c.head_dim, device=device, dtype=dtype),) * 2
    hid = torch.randn(1, 10, h, device=device, dtype=dtype)
    toks = torch.randint(0, shape["vocab_size"], (1, 10), device=device)
    pos = torch.full((1, 10), ctx, device=device)
    out = {"drafter_tree_step_10_nodes_ms":
           timed(lambda: drafter.logits(drafter(hid, toks, pos, kv)[0]), device)}
    for n in (8, 32):
        group = PoolSnapshot({f"d{i}": drafter for i in range(n)}).groups[0]
        kvn = (torch.randn(n, c.num_key_value_heads, ctx, c.head_dim, device=device,
                           dtype=dtype),) * 2
        feats = torch.randn(8, 3 * h, device=device, dtype=dtype)
        toks8 = torch.randint(0, shape["vocab_size"], (8,))
        out[f"batched_eval_{n}_drafters_8_pairs_ms"] = timed(
            lambda g=group, k=kvn, f=feats, t=toks8: g.catch_up(
                k, f, t, torch.arange(ctx, ctx + 8), 10),
            device)
    return out


def learner_times() -> dict[str, float]:
    out = {}
    for n in (8, 32):
        learner = make_learner("normalhedge", n)
        losses = np.random.default_rng(0).random((256, n))
        it = iter(range(10**9))
        out[f"normalhedge_update_{n}_ms"] = timed(
            lambda lr=learner, ls=losses, i=it: lr.update(ls[next(i) % 256]),
            torch.device("cpu"), 200)
    return out


def engine_tokens_per_s(device: torch.device) -> dict[str, float]:
    from bench.harness.tiny_models import bigram_target, copy_drafter, make_engine

    model, perm = bigram_target(vocab=256, layers=6)
    drafter = copy_drafter(model, perm)
    target: Any = model.to(device)
    drafter = drafter.to(device)
    drafter.set_shared_embedding(target.get_input_embeddings())
    engine = make_engine(target, {"copy": drafter}, TreeConfig(top_k=4, depth=6, total_tokens=24))
    res = {}
    for label, policy in (("plain", "none"), ("copy_drafter", "fixed:copy"),
                          ("hedgespec", "normalhedge")):
        params = SamplingParams(max_new_tokens=128, ignore_eos=True)
        engine.generate_ids([1, 2, 3], params, policy)
        t0 = time.perf_counter()
        ids, st = engine.generate_ids([1, 2, 3], params, policy)
        res[f"{label}_tokens_per_s"] = len(ids) / (time.perf_counter() - t0)
        res[f"{label}_mat"] = st.mean_acceptance_length
    return res


def batching_streams(shape: dict[str, int], device: torch.device, dtype: torch.dtype,
                     tokens: int, prompt_len: int) -> dict[str, float]:
    """Aggregate tokens/s of 1 and 16 streams started together, batched and round-robin, on the
    random target with a random drafter (its drafts are rejected, so every round commits
    one token and the figure is the verification pass's throughput: the worst case for
    speculation, and what a batch of trees costs on this device)."""
    from dataclasses import replace

    from bench.batching.batching_bench import run_streams
    from core.config import EngineConfig, SelectorConfig
    from core.engine import SpecEngine

    model, target, drafter = random_models(shape, device, dtype)
    cfg = EngineConfig(tree=TreeConfig(top_k=4, depth=4, total_tokens=20), device=str(device),
                       selector=SelectorConfig(policy="normalhedge"), max_running=16)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, shape["vocab_size"], (prompt_len,), generator=gen).tolist()
               for _ in range(16)]
    out: dict[str, float] = {}
    for mode in ("batched", "round_robin"):
        engine = SpecEngine(target, {"d0": drafter},
                            replace(cfg, batching=mode == "batched"))
        run_streams(engine, prompts[:2], 4, "normalhedge")  # warm-up
        engine.forget_costs()  # it measured lazy set-up, not the load
        for n in (1, 16):
            runs, wall = run_streams(engine, prompts[:n], tokens, "normalhedge")
            out[f"{mode}_{n}_streams_tokens_per_s"] = sum(r.tokens for r in runs) / wall
    one = out["batched_1_streams_tokens_per_s"]
    out["batched_16_over_1_stream"] = out["batched_16_streams_tokens_per_s"] / one
    out["batched_over_round_robin_16_streams"] = (out["batched_16_streams_tokens_per_s"]
                                                  / out["round_robin_16_streams_tokens_per_s"])
    del model
    return out


def demo_pool(device: torch.device, results_dir: Path) -> dict[str, Any]:
    pool = ROOT / "demo" / "pool" / "pool.json"
    if not pool.exists():
        return {"skipped": "demo/pool/pool.json not present"}
    from bench.learner.hedgespec_run import main as bench_main

    out = results_dir / "gpu_demo"
    bench_main(["--pool", str(pool), "--quick", "--out", str(out), "--pool-sizes", "8,32",
                "--threads", "4", "--device", str(device)])
    full = json.loads((out / "hedgespec.json").read_text())
    keep = ("mat", "tokens_per_s", "speedup_vs_plain", "eval_share")
    return {"methods": {m: {k: v for k, v in s.items() if k in keep}
                        for m, s in full["methods"].items()},
            "pool_size": full["pool_size"], "targets": full["targets"], "config": full["config"]}


def compile_check(small: bool, timeout_s: float) -> dict[str, Any]:
    """bench/gpu/gpu_compile.py in a child process under a time limit (compilation can take
    minutes): every figure it printed before the limit is kept."""
    cmd = [sys.executable, "-m", "bench.gpu.gpu_compile"] + (["--small"] if small else [])
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
        stdout, tail = proc.stdout, proc.stderr[-1500:] if proc.returncode else ""
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        tail = f"stopped after {timeout_s:.0f} s"
    out: dict[str, Any] = {}
    for line in stdout.splitlines():
        try:
            out.update(json.loads(line))
        except json.JSONDecodeError:
            continue
    if tail:
        out["stderr_tail"] = tail
    return out


SECTIONS = ("plain_decode", "served_default", "components", "engine_constructed", "batching",
            "demo_pool", "compile")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--skip", default="",
                    help="comma-separated sections to skip: " + ",".join(SECTIONS))
    ap.add_argument("--compile-timeout", type=float, default=240.0,
                    help="seconds for the compile section")
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() and not args.small else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    info = {"device": (torch.cuda.get_device_name(0) if device.type == "cuda"
                       else platform.processor() or "cpu"),
            "torch": torch.__version__, "dtype": str(dtype),
            "shape": "small" if args.small else "llama-3.1-8b"}
    results: dict[str, Any] = {"info": info}
    sections = (("plain_decode",
                 lambda: plain_decode(SMALL if args.small else LLAMA8B, device, dtype,
                                      64 if args.small else 512)),
                ("served_default", lambda: served_default_vs_plain(device,
                                                                    16 if args.small else 96)),
                ("components",
                 lambda: component_times(SMALL if args.small else LLAMA8B, device, dtype,
                                         64 if args.small else 512)),
                ("engine_constructed", lambda: engine_tokens_per_s(device)),
                ("batching", lambda: batching_streams(SMALL if args.small else LLAMA8B, device,
                                                      dtype, 8 if args.small else 64,
                                                      16 if args.small else 128)),
                ("demo_pool", lambda: demo_pool(device, args.out)),
                ("compile", lambda: compile_check(args.small, args.compile_timeout)))
    args.out.mkdir(parents=True, exist_ok=True)
    out_name = "gpu_check_small.json" if args.small else "gpu_check.json"
    for name, fn in sections:
        if name in args.skip.split(","):
            continue
        t0 = time.perf_counter()
        try:
            results[name] = fn()
        except Exception:  # keep going: one failed section must not lose the others' figures
            results[name] = {"error": traceback.format_exc(limit=3)}
        results[name + "_s"] = round(time.perf_counter() - t0, 1)
        print(json.dumps({name: results[name]}, indent=1, default=str), flush=True)
        # written after every section: a run stopped at its time limit keeps what it measured
        (args.out / out_name).write_text(json.dumps(results, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
