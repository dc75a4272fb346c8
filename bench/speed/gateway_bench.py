"""Gateway overhead: the same prompts through `hedgespec serve` (HTTP + SSE) and through the
engine in-process, plus 16 concurrent streams.

    python -m bench.speed.gateway_bench [--pool POOL_JSON] [--quick]
                                        [--out bench/results/gateway.md]

What is compared, so the ratio measures the gateway alone:
- identical prompt token ids (`/v1/completions` with a token-id prompt), greedy decoding,
  `ignore_eos` with a fixed `max_tokens`, the same policy, tree settings and loss (the
  acceptance loss, drafting every round: `--loss length` on the server), the same torch
  thread count on both sides;
- `logprobs=0` on both sides, so every round yields an SSE chunk even when the detokenizer
  holds back an incomplete UTF-8 sequence (TTFT is then the first round, not the first
  printable character);
- runs are interleaved (in-process, gateway, in-process, ...) and medians are reported, because
  the CPU box may be shared.

Metrics: tokens/s = completion tokens / (last token time − request start); TTFT = first token
time − request start (client side for the gateway: HTTP, validation, tokenization, queueing,
SSE framing included). Concurrency: 16 streams started together; aggregate tokens/s = all
tokens / wall time, and the spread of per-stream rates.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from bench.machine import repo_path
from bench.paths import REPO, RESULTS

DEMO_POOL = REPO / "demo" / "pool" / "pool.json"
PROMPTS = [
    "Write a SQL query that lists the ten most recent orders.",
    "Explain how the mitochondria produce energy.",
    "def fibonacci(n):",
    "Summarise today's news about interest rates.",
    "What is 17 times 23? Show the steps.",
    "Describe the structure of benzene.",
    "A patient presents with a persistent cough and fever.",
    "Translate 'good morning' into French and German.",
]


@dataclass
class Run:
    ttft_s: float
    total_s: float
    tokens: int

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.total_s if self.total_s > 0 else 0.0


# ---- in-process ---------------------------------------------------------------------------------


def run_in_process(engine: Any, prompt_ids: list[int], max_tokens: int, policy: str) -> Run:
    from core.config import SamplingParams

    params = SamplingParams(max_new_tokens=max_tokens, ignore_eos=True, logprobs=0)
    start = time.perf_counter()
    first = None
    tokens = 0
    for out in engine.generate(prompt_ids, params, policy):
        if out.token_ids and first is None:
            first = time.perf_counter()
        tokens += len(out.token_ids)
    end = time.perf_counter()
    return Run((first or end) - start, end - start, tokens)


# ---- through the gateway -------------------------------------------------------------------------


def completion_body(
    prompt_ids: list[int], max_tokens: int, policy: str, model: str
) -> dict[str, Any]:
    return {
        "model": model,
        "prompt": prompt_ids,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "logprobs": 0,
        "stream": True,
        "hedgespec": {"policy": policy},
    }


def _chunk_tokens(line: str) -> int:
    """Tokens carried by one SSE line (counted from its logprobs)."""
    if not line.startswith("data: ") or line == "data: [DONE]":
        return 0
    chunk = json.loads(line[6:])
    if "error" in chunk:
        raise RuntimeError(chunk["error"]["message"])
    return sum(len((c.get("logprobs") or {}).get("tokens") or []) for c in chunk["choices"])


class _StreamClock:
    """Times one streamed completion: first content token (TTFT), last token, token count."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.first: float | None = None
        self.last: float | None = None
        self.tokens = 0

    def line(self, line: str) -> None:
        n = _chunk_tokens(line)
        if n:
            now = time.perf_counter()
            self.first = self.first or now
            self.last = now
            self.tokens += n

    def run(self) -> Run:
        end = self.last or time.perf_counter()
        return Run((self.first or end) - self.start, end - self.start, self.tokens)


def run_gateway(http: httpx.Client, body: dict[str, Any]) -> Run:
    clock = _StreamClock()
    with http.stream("POST", "/v1/completions", json=body) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            clock.line(line)
    return clock.run()


async def run_gateway_async(http: httpx.AsyncClient, body: dict[str, Any]) -> Run:
    clock = _StreamClock()
    async with http.stream("POST", "/v1/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            clock.line(line)
    return clock.run()


async def run_concurrent(base_url: str, bodies: list[dict[str, Any]]) -> tuple[list[Run], float]:
    limits = httpx.Limits(max_connections=len(bodies) + 4)
    async with httpx.AsyncClient(base_url=base_url, timeout=600, limits=limits) as http:
        start = time.perf_counter()
        runs = await asyncio.gather(*(run_gateway_async(http, b) for b in bodies))
        wall = time.perf_counter() - start
    return list(runs), wall


def server_cpu_s(http: httpx.Client) -> float:
    """The server process's CPU seconds so far, from its own /metrics."""
    for line in http.get("/metrics").text.splitlines():
        if line.startswith("process_cpu_seconds_total "):
            return float(line.split()[1])
    raise RuntimeError("process_cpu_seconds_total missing from /metrics")


# ---- server process ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_server(pool: Path, workdir: Path, threads: int, dtype: str,
                 loss: str = "length") -> tuple[subprocess.Popen[bytes], str]:
    """A server on a free port, its learners minimising `loss` (`--loss`). What these benchmarks
    compare is drafting (policies, schedulers), so by default the acceptance loss, which drafts
    every round (the served default, the time loss, may decode plain instead)."""
    log_path = workdir / "server.log"
    url = f"http://127.0.0.1:{free_port()}"
    args = [
        sys.executable, "-m", "gateway", "serve", "--pool", str(pool),
        "--port", url.rsplit(":", 1)[1],
        "--database-url", f"sqlite:///{workdir / 'registry.db'}",
        "--torch-threads", str(threads), "--log-level", "warning", "--dtype", dtype,
        "--loss", loss,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    with log_path.open("wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(log_path.read_text())
        try:
            if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise TimeoutError(log_path.read_text())


# ---- report -------------------------------------------------------------------------------------


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def summarise(
    pairs: list[tuple[Run, Run]], single: list[Run], concurrent: list[Run], wall: float
) -> dict[str, float]:
    local_tps = median([a.tokens_per_s for a, _ in pairs])
    gw_tps = median([b.tokens_per_s for _, b in pairs])
    rates = [r.tokens_per_s for r in concurrent]
    single_tps = median([r.tokens_per_s for r in single])
    return {
        "tps_in_process": local_tps,
        "tps_gateway": gw_tps,
        "tps_ratio": median([b.tokens_per_s / a.tokens_per_s for a, b in pairs]),
        "ttft_in_process_ms": 1e3 * median([a.ttft_s for a, _ in pairs]),
        "ttft_gateway_ms": 1e3 * median([b.ttft_s for _, b in pairs]),
        "ttft_added_ms": 1e3 * median([b.ttft_s - a.ttft_s for a, b in pairs]),
        "single_stream_tps": single_tps,
        "aggregate_tps_16": sum(r.tokens for r in concurrent) / wall,
        "aggregate_vs_single": (sum(r.tokens for r in concurrent) / wall) / single_tps,
        "stream_tps_min": min(rates),
        "stream_tps_max": max(rates),
        "stream_tps_mean": statistics.mean(rates),
        "stream_tps_cv": statistics.pstdev(rates) / statistics.mean(rates),
        "ttft_16_max_ms": 1e3 * max(r.ttft_s for r in concurrent),
    }


def _pass(cond: bool) -> str:
    return "PASS" if cond else "MISS"


def _setup_lines(meta: dict[str, Any]) -> list[str]:
    return [
        "# Gateway benchmark",
        "",
        f"Generated by `python -m bench.speed.gateway_bench{' --quick' if meta['quick'] else ''}` "
        f"on {meta['date']}. Method: see the module docstring of `bench/speed/gateway_bench.py`.",
        "",
        "## Setup",
        "",
        f"- pool: `{meta['pool']}` (model `{meta['model']}`, drafters {meta['drafters']})",
        f"- machine: {meta['machine']}, {meta['cpus']} CPUs, load average at start "
        f"{meta['load']}; torch threads {meta['threads']} and dtype {meta.get('dtype', 'float32')} "
        "on both sides",
        f"- {meta['prompts']} prompts × {meta['repeats']} interleaved repeats, "
        f"{meta['max_tokens']} tokens each, greedy, policy `{meta['policy']}`, tree {meta['tree']}",
    ]


def _one_stream_lines(s: dict[str, float]) -> list[str]:
    return [
        "",
        "## Gateway vs in-process (one stream)",
        "",
        "| metric | in-process | gateway | result | target |",
        "|---|---|---|---|---|",
        f"| tokens/s (median) | {s['tps_in_process']:.1f} | {s['tps_gateway']:.1f} "
        f"| ratio {s['tps_ratio']:.3f} | ≥ 0.95 {_pass(s['tps_ratio'] >= 0.95)} |",
        f"| time to first token (median) | {s['ttft_in_process_ms']:.1f} ms "
        f"| {s['ttft_gateway_ms']:.1f} ms | {s['ttft_added_ms']:+.1f} ms "
        f"| ≤ 10 ms {_pass(s['ttft_added_ms'] <= 10)} |",
        f"| CPU per token (whole process) | {s['cpu_ms_per_token_in_process']:.2f} ms "
        f"| {s['cpu_ms_per_token_gateway']:.2f} ms | ratio {s['cpu_ratio']:.3f} | |",
        "",
        "Wall-clock ratios are sensitive to other load on the machine; the CPU-time ratio "
        "(in-process CPU per token / gateway server CPU per token, from the server's own "
        "`process_cpu_seconds_total`) is the throughput ratio to expect when the CPU is the "
        "bottleneck, and is much less sensitive to that noise.",
    ]


def _concurrent_lines(s: dict[str, float]) -> list[str]:
    return [
        "",
        "## 16 concurrent streams",
        "",
        "| metric | value |",
        "|---|---|",
        f"| one stream alone, tokens/s | {s['single_stream_tps']:.1f} |",
        f"| 16 streams, aggregate tokens/s | {s['aggregate_tps_16']:.1f} "
        f"({s['aggregate_vs_single']:.2f} × one stream) |",
        f"| per-stream tokens/s min / mean / max | {s['stream_tps_min']:.2f} / "
        f"{s['stream_tps_mean']:.2f} / {s['stream_tps_max']:.2f} |",
        f"| per-stream spread (coefficient of variation) | {s['stream_tps_cv']:.3f} |",
        f"| slowest time to first token among the 16 | {s['ttft_16_max_ms']:.0f} ms |",
        "",
        "The gateway's engine batches the running requests (one step = one round for each, every "
        "tree verified in one target pass; `bench/results/batching.md` compares it with "
        "round-robin), "
        "so the aggregate exceeds one stream's rate; on two CPU cores a pass of 16 trees is "
        "compute-bound, so each stream slows. A small spread means the streams are served "
        "fairly.",
    ]


def _per_run_lines(pairs: list[tuple[Run, Run]]) -> list[str]:
    lines = [
        "",
        "## Per-run detail (in-process vs gateway)",
        "",
        "| run | tokens | in-process tok/s | gateway tok/s | ratio | in-process TTFT ms | gateway "
        "TTFT ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, (a, b) in enumerate(pairs):
        lines.append(
            f"| {i} | {b.tokens} | {a.tokens_per_s:.1f} | {b.tokens_per_s:.1f} "
            f"| {b.tokens_per_s / a.tokens_per_s:.3f} | {1e3 * a.ttft_s:.1f} | "
            f"{1e3 * b.ttft_s:.1f} |"
        )
    return lines


def render(summary: dict[str, float], meta: dict[str, Any], pairs: list[tuple[Run, Run]]) -> str:
    lines = [*_setup_lines(meta), *_one_stream_lines(summary), *_concurrent_lines(summary),
             *_per_run_lines(pairs)]
    return "\n".join(lines) + "\n"


# ---- main ----------------------------------------------------------------------------------------


def resolve_pool(arg: Path | None, workdir: Path) -> Path:
    if arg is not None:
        return arg
    if DEMO_POOL.is_file():
        return DEMO_POOL
    # No demo pool built yet: a random pool shaped like the demo target (hidden 256, 6 layers;
    # timings only, its drafters are random so about one token per round).
    from bench.harness.tiny_pool import build_pool

    return build_pool(workdir / "random-pool", hidden=256, layers=6)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool", type=Path)
    parser.add_argument("--quick", action="store_true", help="fewer prompts and tokens")
    parser.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    parser.add_argument("--policy", default="auto")
    parser.add_argument("--dtype", default="auto",
                        help="both sides; auto = what `hedgespec serve` picks here")
    parser.add_argument("--out", type=Path, default=RESULTS / "gateway.md")
    return parser.parse_args(argv)


@dataclass
class Measured:
    """Everything one benchmark run measured, in-process and through the gateway."""

    model: str
    pairs: list[tuple[Run, Run]]  # (in-process, gateway) per prompt and repeat
    cpu_local: float  # CPU seconds of this process over the in-process runs of `pairs`
    cpu_gateway: float  # CPU seconds of the server over the gateway runs of `pairs`
    single: list[Run]
    concurrent: list[Run]
    wall: float  # of the concurrent runs


def interleaved_pairs(
    http: httpx.Client, engine: Any, prompt_ids: list[list[int]], bodies: list[dict[str, Any]],
    repeats: int, max_tokens: int, policy: str,
) -> tuple[list[tuple[Run, Run]], float, float]:
    """Each prompt in-process then through the gateway, `repeats` times; with each side's CPU
    seconds."""
    pairs = []
    cpu_local = cpu_gateway = 0.0
    for _ in range(repeats):
        for ids, body in zip(prompt_ids, bodies, strict=True):
            before = time.process_time()
            local = run_in_process(engine, ids, max_tokens, policy)
            cpu_local += time.process_time() - before
            before = server_cpu_s(http)
            pairs.append((local, run_gateway(http, body)))
            cpu_gateway += server_cpu_s(http) - before
    return pairs, cpu_local, cpu_gateway


def measure(engine: Any, url: str, prompt_ids: list[list[int]], max_tokens: int, policy: str,
            repeats: int) -> Measured:
    """Warm both sides, run the interleaved pairs, one stream alone twice, then 16 at once."""
    with httpx.Client(base_url=url, timeout=600) as http:
        model = http.get("/v1/models").json()["data"][0]["id"]
        bodies = [completion_body(p, max_tokens, policy, model) for p in prompt_ids]
        run_gateway(http, bodies[0])  # warm both sides
        run_in_process(engine, prompt_ids[0], max_tokens, policy)
        pairs, cpu_local, cpu_gateway = interleaved_pairs(
            http, engine, prompt_ids, bodies, repeats, max_tokens, policy)
        single = [run_gateway(http, bodies[0]) for _ in range(2)]
    concurrent_bodies = [bodies[i % len(bodies)] for i in range(16)]
    concurrent, wall = asyncio.run(run_concurrent(url, concurrent_bodies))
    return Measured(model, pairs, cpu_local, cpu_gateway, single, concurrent, wall)


def run_meta(args: argparse.Namespace, pool: Path, model: str, engine: Any, load: tuple[float, ...],
             dtype: str, sizes: tuple[int, int, int], tree: Any) -> dict[str, Any]:
    """The report's setup section: what ran where."""
    n_prompts, repeats, max_tokens = sizes
    return {
        "quick": args.quick,
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "pool": repo_path(pool) if args.pool or pool == DEMO_POOL else "random demo-shaped pool",
        "model": model,
        "drafters": engine.drafter_ids(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load": ", ".join(f"{x:.1f}" for x in load),
        "threads": args.threads,
        "dtype": dtype,
        "prompts": n_prompts,
        "repeats": repeats,
        "max_tokens": max_tokens,
        "policy": args.policy,
        "tree": tree,
    }


def summary_with_cpu(m: Measured) -> dict[str, float]:
    summary = summarise(m.pairs, m.single, m.concurrent, m.wall)
    tokens = sum(b.tokens for _, b in m.pairs)
    summary["cpu_ms_per_token_in_process"] = 1e3 * m.cpu_local / tokens
    summary["cpu_ms_per_token_gateway"] = 1e3 * m.cpu_gateway / tokens
    summary["cpu_ratio"] = m.cpu_local / m.cpu_gateway
    return summary


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)

    import torch

    from core.config import EngineConfig, served_selector, served_tree
    from core.engine import SpecEngine
    from core.model.precision import auto_dtype

    torch.set_num_threads(args.threads)
    sizes = (4, 2, 32) if args.quick else (8, 3, 64)
    n_prompts, repeats, max_tokens = sizes
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        pool = resolve_pool(args.pool, workdir)
        load = os.getloadavg()
        dtype = auto_dtype() if args.dtype == "auto" else args.dtype  # the same on both sides
        # As the server (start_server's default `--loss length`): the acceptance loss drafts
        # every round on both sides, so both run the same rounds and the ratio is the gateway's.
        config = EngineConfig(dtype=dtype, tree=served_tree("cpu"),
                              selector=replace(served_selector("cpu"), loss="length"))
        engine = SpecEngine.from_pool_file(pool, config)
        tok = engine.tokenizer
        prompt_ids = [list(tok(p)["input_ids"]) for p in PROMPTS[:n_prompts]]
        proc, url = start_server(pool, workdir, args.threads, dtype)
        try:
            measured = measure(engine, url, prompt_ids, max_tokens, args.policy, repeats)
        finally:
            proc.terminate()
            proc.wait(60)
        meta = run_meta(args, pool, measured.model, engine, load, dtype, sizes, config.tree)
    summary = summary_with_cpu(measured)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(summary, meta, measured.pairs))
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
