"""Where an engine step's milliseconds go: one plain step and one speculative round at 1 and 8
streams, in-process, on the shipped pool and its held-out prompts.

    python -m bench.speed.engine_profile [--streams 1,8] [--steps 24] [--dtype auto] [--threads 2]
                                   [--forward lean,module] [--out bench/results]

For each forward (`lean`: core/model/lean_decoder.py; `module`: the Hugging Face module, the
engine before it), mode (`plain`: policy none; `speculative`: policy auto, drafting every round
under the acceptance loss so that every step is a speculative round, with the served CPU tree
of 12 nodes) and stream count, the requests are prefilled, 4 steps warm up, and `--steps`
steps run under the torch profiler. Each step is split by the engine's own phase timers
(RoundStats: drafting, the target pass, the LM head and acceptance walk, evaluation, the rest
of the step), and the target pass by the profiler's ops: linear layers (oneDNN or aten
matmuls), attention (the canonical kernel; with `deterministic` off SDPA, the batched matmuls
and softmax), KV-cache writes (SlotLayer.update / write), other ops (norms, rotary,
residuals, activation, masks) and Python and dispatch (the pass's wall time not inside any
op). The HTTP and streaming path is the gateway's share, measured apart (bench/speed/peer.py
against these in-process figures).
The memory-bandwidth floor: this machine's read bandwidth over a buffer the size of the
target's weights, and the time to read those weights once.

Writes bench/results/engine_profile.{md,json}. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import bisect
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from bench.machine import describe_machine
from bench.paths import RESULTS
from bench.speed.gateway_bench import DEMO_POOL
from core.config import EngineConfig, SamplingParams, SelectorConfig, served_tree
from core.engine import SpecEngine
from core.model.kv_cache import SlotLayer
from core.model.precision import auto_dtype
from core.model.target import Target

FORWARD, KV_WRITE, HEAD = "profile:target_forward", "profile:kv_write", "profile:lm_head"
LINEAR_OPS = {"mkldnn::_linear_pointwise", "aten::linear", "aten::addmm", "aten::mm"}
ATTENTION_OPS = {"hedgespec::canonical_attend",  # canonical numerics (core/model/canonical.py)
                 "aten::bmm", "aten::_softmax", "aten::scaled_dot_product_attention",
                 "aten::_scaled_dot_product_flash_attention_for_cpu",
                 "aten::_scaled_dot_product_attention_math"}
WARMUP_STEPS = 4


@dataclass(frozen=True)
class StepProfile:
    """Milliseconds per step (and tokens per step) of one (forward, mode, streams) case."""

    forward_kind: str
    mode: str
    streams: int
    tokens: float
    step: float
    draft: float
    target_pass: float
    head_and_walk: float
    evaluate: float
    rest: float  # the step's wall time outside the round's phases (scheduler, outputs)
    linear: float
    attention: float
    kv_write: float
    other_ops: float
    python: float


@contextmanager
def labelled(owner: Any, name: str, label: str) -> Iterator[None]:
    """`owner.name` wrapped in a profiler range `label` for the duration."""
    original = getattr(owner, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with record_function(label):
            return original(*args, **kwargs)

    setattr(owner, name, wrapped)
    try:
        yield
    finally:
        setattr(owner, name, original)


def split_pass(events: Any) -> dict[str, float]:
    """Self CPU microseconds inside the target passes, by category."""
    forward, kv = _spans(events, FORWARD), _spans(events, KV_WRITE)
    out = {"linear": 0.0, "attention": 0.0, "kv_write": 0.0, "other_ops": 0.0, "python": 0.0}
    for e in events:
        if not _inside(e, forward):
            continue
        if e.name in (FORWARD, KV_WRITE):
            out["python"] += e.self_cpu_time_total  # the range's own time: no op ran
        elif _inside(e, kv):
            out["kv_write"] += e.self_cpu_time_total
        elif e.name in LINEAR_OPS:
            out["linear"] += e.self_cpu_time_total
        elif e.name in ATTENTION_OPS:
            out["attention"] += e.self_cpu_time_total
        else:
            out["other_ops"] += e.self_cpu_time_total
    return out


Spans = dict[int, tuple[list[float], list[float]]]


def _spans(events: Any, name: str) -> Spans:
    """Per thread, the sorted (starts, ends) of the ranges called `name` (they do not nest)."""
    by: dict[int, list[tuple[float, float]]] = {}
    for e in events:
        if e.name == name:
            by.setdefault(e.thread, []).append((e.time_range.start, e.time_range.end))
    return {t: ([s for s, _ in sorted(r)], [f for _, f in sorted(r)]) for t, r in by.items()}


def _inside(e: Any, spans: Spans) -> bool:
    starts, ends = spans.get(e.thread, ([], []))
    i = bisect.bisect_right(starts, e.time_range.start) - 1
    return i >= 0 and e.time_range.end <= ends[i]


def engine(forward_kind: str, dtype: str) -> SpecEngine:
    # The served tree; the acceptance loss (no plain arm): every speculative step drafts.
    # The module runs the library's kernels: canonical numerics need the lean forward.
    config = EngineConfig(dtype=dtype, tree=served_tree("cpu"),
                          selector=SelectorConfig(loss="length"),
                          deterministic="off" if forward_kind == "module" else "auto")
    eng = SpecEngine.from_pool_file(DEMO_POOL, config)
    if forward_kind == "module":
        eng.target.lean = None
    return eng


def profile_case(eng: SpecEngine, prompts: list[list[int]], mode: str, streams: int,
                 steps: int) -> StepProfile:
    policy = "none" if mode == "plain" else "auto"
    params = SamplingParams(max_new_tokens=WARMUP_STEPS * 8 + steps * 8 + 8, ignore_eos=True)
    tag = f"{mode}{streams}-{time.monotonic_ns()}"
    for i, p in enumerate(prompts[:streams]):
        eng.add_request(f"{tag}-{i}", p, params, policy=policy)
    prefilled: set[str] = set()
    while len(prefilled) < streams:  # prefill (chunked beside nothing else)
        prefilled |= {o.request_id for o in eng.step()}
    for _ in range(WARMUP_STEPS):
        eng.step()
    phases = {"draft": 0.0, "target_pass": 0.0, "head_and_walk": 0.0, "evaluate": 0.0,
              "rest": 0.0, "tokens": 0.0, "step": 0.0}
    with labelled(Target, "forward_rows", FORWARD), labelled(SlotLayer, "update", KV_WRITE), \
            labelled(SlotLayer, "write", KV_WRITE), \
            profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            t0 = time.perf_counter()
            outs = eng.step()
            wall = time.perf_counter() - t0
            _add_step(phases, outs, wall)
    for rid in [f"{tag}-{i}" for i in range(streams)]:
        eng.abort(rid)
    while eng.has_unfinished():
        eng.step()
    split = split_pass(prof.events())
    ms = {k: v / steps * 1e3 for k, v in phases.items() if k != "tokens"}
    return StepProfile(
        forward_kind="", mode=mode, streams=streams, tokens=phases["tokens"] / steps,
        **ms, **{k: v / steps / 1e3 for k, v in split.items()})


def _add_step(phases: dict[str, float], outs: list[Any], wall: float) -> None:
    rounds = [o.round for o in outs if o.round is not None]
    if not rounds:
        return
    r = rounds[0]  # a round's phase times are the batch's wall times (core/batching/step.py)
    verify = r.verify_s - r.head_s
    phases["draft"] += r.draft_s
    phases["target_pass"] += verify
    phases["head_and_walk"] += r.head_s
    phases["evaluate"] += r.evaluate_s
    phases["rest"] += max(wall - r.draft_s - r.verify_s - r.evaluate_s, 0.0)
    phases["tokens"] += sum(len(o.token_ids) for o in outs)
    phases["step"] += wall


def bandwidth_floor(weight_bytes: int) -> dict[str, float]:
    """Read bandwidth over a buffer of the weights' size (median of 5), and the floor it sets."""
    buf = torch.ones(weight_bytes // 2, dtype=torch.bfloat16)
    times = []
    for _ in range(6):
        t0 = time.perf_counter()
        buf.max()
        times.append(time.perf_counter() - t0)
    median = sorted(times[1:])[2]
    return {"read_gb_s": weight_bytes / median / 1e9, "floor_ms": median * 1e3,
            "weights_mb": weight_bytes / 1e6}


def weight_streaming(target: Target, rows: int) -> dict[str, float]:
    """GB/s at which one pass's linear layers stream their weights, `rows` rows a call: through
    F.linear on the dense weights and through oneDNN's packed layout (the lean forward's
    Projection), the same calls in the same order (median of 5 passes)."""
    lean = target.lean
    if lean is None:
        return {}
    projs = [p for w in lean.layers for p in (w.qkv, w.o, w.gate_up, w.down)] + [lean.head]
    inputs = [torch.randn(rows, p.weight.shape[1]).to(p.weight.dtype) for p in projs]
    total = sum(p.weight.numel() * p.weight.element_size() for p in projs)
    out = {}
    for label, call in (("dense", lambda p, x: torch.nn.functional.linear(x, p.weight)),
                        ("packed", lambda p, x: p(x))):
        times = []
        for _ in range(6):
            t0 = time.perf_counter()
            for p, x in zip(projs, inputs, strict=True):
                call(p, x)
            times.append(time.perf_counter() - t0)
        out[f"{label}_gb_s"] = total / sorted(times[1:])[2] / 1e9
    return out


COLUMNS: tuple[tuple[str, str], ...] = (
    ("step", "step ms"), ("tokens", "tokens/step"), ("draft", "drafting"),
    ("target_pass", "target pass"), ("linear", "· linear"), ("attention", "· attention"),
    ("kv_write", "· KV writes"), ("other_ops", "· other ops"), ("python", "· Python, dispatch"),
    ("head_and_walk", "LM head + walk"), ("evaluate", "evaluation"), ("rest", "rest of step"))


def render(rows: list[StepProfile], floor: dict[str, float], meta: dict[str, Any],
           streaming: dict[int, dict[str, float]]) -> str:
    head = "| forward | mode | streams | " + " | ".join(c[1] for c in COLUMNS) + " |"
    lines = ["# Where a step's milliseconds go (bench/speed/engine_profile.py)", "",
             f"{meta['date']}, {meta['machine']}, {meta['dtype']}, {meta['threads']} threads, "
             f"{meta['steps']} profiled steps a row (after {WARMUP_STEPS} warm-up steps), "
             "milliseconds per step. `·` rows split the target pass by the profiler's ops "
             "(the profiler's own cost included, ~5-10%).", "", head,
             "|---|---|---|" + "---|" * len(COLUMNS)]
    for r in rows:
        d = asdict(r)
        cells = [f"{d[k]:.2f}" if k == "tokens" else f"{d[k]:.1f}" for k, _ in COLUMNS]
        lines.append(f"| {r.forward_kind} | {r.mode} | {r.streams} | " + " | ".join(cells) + " |")
    lines += ["", f"Memory-bandwidth floor: reading {floor['weights_mb']:.0f} MB (the target's "
              f"weights) runs at {floor['read_gb_s']:.1f} GB/s here: {floor['floor_ms']:.1f} ms, "
              "the least one target pass can take.", ""]
    for n, rates in streaming.items():
        if rates:
            lines.append(f"Weight streaming at {n} row(s) a call (one pass's linear layers): "
                         f"F.linear on dense weights {rates['dense_gb_s']:.1f} GB/s, oneDNN's "
                         f"packed layout {rates['packed_gb_s']:.1f} GB/s.")
    return "\n".join([*lines, ""])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", default="1,8")
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--forward", default="lean,module")
    p.add_argument("--out", type=Path, default=RESULTS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from dataclasses import replace

    from bench.prompts import load_prompts

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    dtype = auto_dtype("cpu") if args.dtype == "auto" else args.dtype
    rows: list[StepProfile] = []
    weight_bytes = 0
    streaming: dict[int, dict[str, float]] = {}
    for kind in args.forward.split(","):
        for mode in ("plain", "speculative"):
            eng = engine(kind, dtype)
            weight_bytes = sum(p.numel() * p.element_size() for p in eng.target.model.parameters())
            prompts = [p.ids for p in load_prompts(DEMO_POOL, eng.target.tokenizer, 4, 384)]
            if kind == "lean" and not streaming:
                streaming = {n: weight_streaming(eng.target, n) for n in (1, 8)}
            for streams in (int(s) for s in args.streams.split(",")):
                row = replace(profile_case(eng, prompts, mode, streams, args.steps),
                              forward_kind=kind)
                print(row, flush=True)
                rows.append(row)
    floor = bandwidth_floor(weight_bytes)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": describe_machine(),
            "dtype": dtype, "threads": args.threads, "steps": args.steps}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "engine_profile.json").write_text(json.dumps(
        {"meta": meta, "floor": floor, "streaming": streaming, "rows": [asdict(r) for r in rows]},
        indent=1))
    text = render(rows, floor, meta, streaming)
    (args.out / "engine_profile.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
