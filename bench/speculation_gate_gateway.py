"""The speculation gate through the HTTP server: bursts of concurrent streaming completions
against a `hedgespec serve --speculation always` and a `--speculation auto` (the default) on
the shipped pool, side by side in one run.

    python -m bench.speculation_gate_gateway [--levels 8,16] [--max-tokens 48] [--repeats 2]
                                             [--threads 2] [--dtype auto] [--quick]

Method. Both servers run at once (an idle one costs nothing); each burst starts N streams
together (held-out prompts of every domain, chat-formatted token ids, greedy, `ignore_eos`, a
fixed token count). Modes: plain decoding (policy `none`) and HedgeSpec on the `always`
server, HedgeSpec on the `auto` server; they alternate burst by burst and each keeps its
fastest of `--repeats` bursts. Before a level is measured the `auto` server runs warm-up
bursts of that size, so that its gate has chosen (what a server that has been up does).
Aggregate tokens/s = all tokens / (last token - start). Writes
bench/results/speculation_gate_gateway.{md,json}. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import httpx

from bench.gateway_bench import completion_body, run_concurrent, start_server
from bench.hedgespec_bench import DEFAULT_POOL, load_prompts

RESULTS = Path(__file__).resolve().parent / "results"
MODES = {"plain": ("always", "none"), "always": ("always", "normalhedge"),
         "auto": ("auto", "normalhedge")}  # mode: (server, policy)
WARMUP_BURSTS = 3


def burst(url: str, prompts: list[list[int]], max_tokens: int, policy: str,
          model: str) -> float:
    """N streams started together; aggregate tokens/s."""
    bodies = [completion_body(p, max_tokens, policy, model) for p in prompts]
    runs, wall = asyncio.run(run_concurrent(url, bodies))
    return sum(r.tokens for r in runs) / wall


def plain_steps(url: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    return sum(float(line.split()[1]) for line in text.splitlines()
               if line.startswith("hedgespec_plain_rounds_total "))


def measure(urls: dict[str, str], prompts: list[list[int]], levels: list[int],
            max_tokens: int, repeats: int, model: str) -> list[dict[str, Any]]:
    rows = []
    for n in levels:
        group = [prompts[i % len(prompts)] for i in range(n)]
        for _ in range(WARMUP_BURSTS):
            burst(urls["auto"], group, max_tokens, "normalhedge", model)
        best: dict[str, float] = {}
        gated = 0.0
        for r in range(repeats):
            for mode in (list(MODES) if r % 2 == 0 else list(MODES)[::-1]):
                server, policy = MODES[mode]
                before = plain_steps(urls[server])
                tps = burst(urls[server], group, max_tokens, policy, model)
                if mode == "auto":
                    gated += plain_steps(urls[server]) - before
                best[mode] = max(best.get(mode, 0.0), tps)
                print(f"  {n} streams {mode:<7} {tps:6.1f} tokens/s", flush=True)
        rows.append({"streams": n, **{f"{m}_tps": v for m, v in best.items()},
                     "always_x_plain": best["always"] / best["plain"],
                     "auto_x_plain": best["auto"] / best["plain"],
                     "auto_plain_steps": gated, "auto_request_steps_max": repeats * n * max_tokens})
    return rows


def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        "# Speculation gate through the HTTP server", "",
        f"`python -m bench.speculation_gate_gateway` on {meta['machine']}; {meta['dtype']}, "
        f"{meta['threads']} torch thread(s) per server, the served CPU defaults; "
        f"{meta['max_tokens']} tokens a stream, fastest of {meta['repeats']} bursts per mode. "
        "Method: the module docstring.", "",
        "| streams | plain tokens/s | always tokens/s | auto tokens/s | always x plain "
        "| auto x plain | auto: plain request-steps (of at most) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['streams']} | {r['plain_tps']:.1f} | {r['always_tps']:.1f} "
            f"| {r['auto_tps']:.1f} | {r['always_x_plain']:.2f} | {r['auto_x_plain']:.2f} "
            f"| {r['auto_plain_steps']:.0f} (of {r['auto_request_steps_max']}) |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    import os
    import platform

    from core.model.precision import auto_dtype, cpu_has_native_bf16
    from core.pool_file import load_pool_file

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", type=Path, default=DEFAULT_POOL)
    ap.add_argument("--levels", default="8,16")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--quick", action="store_true", help="2 streams, 8 tokens: a smoke test")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.quick:
        args.levels, args.max_tokens, args.repeats = "2", 8, 1
    from transformers import AutoTokenizer

    dtype = auto_dtype() if args.dtype == "auto" else args.dtype
    pool = load_pool_file(args.pool)
    target = pool.target.directory()  # a provisioned target converted first, as the server does
    tokenizer = AutoTokenizer.from_pretrained(target)
    prompts = [p.ids for p in load_prompts(args.pool, tokenizer, 3, 200)]
    model = pool.model_name or target.name  # the id the server serves (SpecEngine.from_pool)
    with tempfile.TemporaryDirectory() as tmp:
        procs, urls = [], {}
        try:
            for setting in ("always", "auto"):
                (Path(tmp) / setting).mkdir()
                proc, urls[setting] = start_server(args.pool, Path(tmp) / setting, args.threads,
                                                   dtype, speculation=setting)
                procs.append(proc)
            rows = measure(urls, prompts, [int(x) for x in args.levels.split(",")],
                           args.max_tokens, args.repeats, model)
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(60)
    meta = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores "
                       f"visible, native bf16: {cpu_has_native_bf16()}",
            "dtype": dtype, "threads": args.threads, "max_tokens": args.max_tokens,
            "repeats": args.repeats}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "speculation_gate_gateway.json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (args.out / "speculation_gate_gateway.md").write_text(render(rows, meta))
    print(render(rows, meta))


if __name__ == "__main__":
    main()
