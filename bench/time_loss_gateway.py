"""The time loss through the HTTP server: bursts of concurrent streaming completions against a
`hedgespec serve --loss length` and a `--loss time` (the served default) on the shipped pool,
side by side in one run. The gateway successor of bench/speculation_gate_gateway.py, which
compared the speculation gate (retired; its last report, speculation_gate_gateway.md, is of
2026-12-04).

    python -m bench.time_loss_gateway [--levels 1,2,4,8,16] [--max-tokens 48] [--repeats 3]
                                      [--warmup 3] [--seed 0] [--threads 2] [--dtype auto]
                                      [--quick]
                                      [--out bench/results]

Method. Three servers run at once (an idle one costs nothing), one a mode: a server's suffix
member remembers every answer it served, so no server sees a prompt twice (a default run takes
155 of the 210 held-out prompts). Each burst starts N streams together (the next N
held-out prompts, domains interleaved, chat-formatted token ids, greedy, `ignore_eos`, a fixed
token count), the same N for every mode of a repeat. Modes: `plain` (policy `none`) and
`length` (NormalHedge, the acceptance loss: it drafts every round) on `--loss length` servers;
`time` (NormalHedge, the time loss: plain decoding an extra arm of each request's learner, the
served default) on a `--loss time` server. They alternate burst by burst, in an order drawn
afresh every repeat (`--seed`), and each keeps its median of `--repeats` bursts (the slower
middle one of an even count; not the fastest, which favours the mode that draws this VM's
occasional fast burst); a mode's run-to-run noise is max/min - 1 over its bursts at a level.
Before a level is measured the time server runs `--warmup` bursts of that size, so that its
cost model (core/selection/arm_costs.py) has fitted that batch size: what a server that has
been up has done. The time server's plain-round share is the increase of its
hedgespec_plain_rounds_total over its measured bursts, against that plus the increase of its
hedgespec_spec_decode_num_drafts_total.
Aggregate tokens/s = all tokens / (last token - start).
Writes bench/results/time_loss_gateway.{md,json,png}. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.gateway_bench import completion_body, run_concurrent, start_server
from bench.hedgespec_bench import DEFAULT_POOL, load_prompts
from bench.plotting import save_axes

RESULTS = Path(__file__).resolve().parent / "results"
# mode: (its server, the server's --loss, the requests' policy). One server a mode: a server's
# suffix member remembers every answer it served, so a mode that followed another on the same
# server, or a burst that repeated a prompt, would find the answer it is asked for.
MODES = {"plain": ("plain", "length", "none"), "length": ("length", "length", "normalhedge"),
         "time": ("time", "time", "normalhedge")}
PER_DOMAIN = 30  # every held-out prompt of the demo pool
PLAIN_ROUNDS = "hedgespec_plain_rounds_total"
SPEC_ROUNDS = "hedgespec_spec_decode_num_drafts_total"


def burst(url: str, prompts: list[list[int]], max_tokens: int, policy: str,
          model: str) -> float:
    """N streams started together; aggregate tokens/s."""
    bodies = [completion_body(p, max_tokens, policy, model) for p in prompts]
    runs, wall = asyncio.run(run_concurrent(url, bodies))
    return sum(r.tokens for r in runs) / wall


def counter(text: str, name: str) -> float:
    """A counter of a /metrics text, summed over its labels."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.split("{", 1)[0].split(" ", 1)[0] == name)


def rounds(url: str) -> tuple[float, float]:
    """The server's plain and speculative rounds so far."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return counter(text, PLAIN_ROUNDS), counter(text, SPEC_ROUNDS)


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def _noise(bursts: list[float]) -> float | None:
    """max/min - 1 over a mode's bursts (None with one burst)."""
    if len(bursts) < 2 or min(bursts) <= 0:
        return None
    return max(bursts) / min(bursts) - 1.0


def level_row(n: int, bursts: dict[str, list[float]], plain_rounds: float,
              spec_rounds: float) -> dict[str, Any]:
    """One level: each mode's median burst, the time mode against the others, the time server's
    plain-round share over its measured bursts, and each mode's noise."""
    best = {m: statistics.median_low(b) for m, b in bursts.items()}
    rounds = plain_rounds + spec_rounds
    return {
        "streams": n,
        **{f"{m}_tps": v for m, v in best.items()},
        "time_x_plain": _ratio(best["time"], best["plain"]),
        "time_x_length": _ratio(best["time"], best["length"]),
        "time_x_max_plain_length": _ratio(best["time"], max(best["plain"], best["length"])),
        "time_plain_rounds": plain_rounds, "time_spec_rounds": spec_rounds,
        "time_plain_share": plain_rounds / rounds if rounds else None,
        **{f"{m}_bursts": b for m, b in bursts.items()},
        **{f"{m}_noise": _noise(b) for m, b in bursts.items()},
    }


def _fresh(prompts: list[list[int]]) -> Any:
    """The next n prompts of the list at each call, cycling (a default run takes 155 of the
    210 held-out prompts)."""
    taken = [0]

    def take(n: int) -> list[list[int]]:
        start = taken[0]
        taken[0] += n
        return [prompts[(start + i) % len(prompts)] for i in range(n)]

    return take


def measure(urls: dict[str, str], prompts: list[list[int]], levels: list[int], max_tokens: int,
            repeats: int, warmup: int, model: str, seed: int) -> list[dict[str, Any]]:
    for url in urls.values():  # each server's first request (shapes, in-place timings)
        burst(url, prompts[:1], 4, "normalhedge", model)
    rows = []
    fresh = _fresh(prompts)
    rng = random.Random(seed)
    for n in levels:
        for _ in range(warmup):
            burst(urls["time"], fresh(n), max_tokens, "normalhedge", model)
        bursts: dict[str, list[float]] = {m: [] for m in MODES}
        plain = spec = 0.0
        for _ in range(repeats):
            group = fresh(n)  # the same prompts for every mode, each on its own server
            for mode in rng.sample(list(MODES), len(MODES)):
                server, _, policy = MODES[mode]
                before = rounds(urls[server])
                tps = burst(urls[server], group, max_tokens, policy, model)
                if mode == "time":
                    after = rounds(urls[server])
                    plain += after[0] - before[0]
                    spec += after[1] - before[1]
                bursts[mode].append(tps)
                print(f"  {n} streams {mode:<7} {tps:6.1f} tokens/s", flush=True)
        rows.append(level_row(n, bursts, plain, spec))
    return rows


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        "# The time loss through the HTTP server", "",
        f"`{meta['command']}` on {meta['machine']}, {meta['date']}; {meta['dtype']}, "
        f"{meta['threads']} torch thread(s) per server, the served CPU defaults but the loss; "
        f"{meta['max_tokens']} tokens a stream, median of {meta['repeats']} bursts per mode "
        f"(order drawn afresh each repeat, seed {meta.get('seed', 0)}), "
        f"{meta['warmup']} warm-up bursts on the time server before each level. Each mode on its "
        "own server (`plain` and `length` with `--loss length`, `time` with `--loss time`, the "
        "served default), no prompt served twice by a server. Method: the "
        "module docstring.", "",
        "| streams | plain tokens/s | length tokens/s | time tokens/s | time x plain "
        "| time x length | time x max(plain, length) | time: plain rounds (of all rounds) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['streams']} | {r['plain_tps']:.1f} | {r['length_tps']:.1f} "
            f"| {r['time_tps']:.1f} | {_f(r['time_x_plain'])} | {_f(r['time_x_length'])} "
            f"| {_f(r['time_x_max_plain_length'])} | {_pct(r['time_plain_share'])} "
            f"({r['time_plain_rounds']:.0f} of "
            f"{r['time_plain_rounds'] + r['time_spec_rounds']:.0f}) |")
    lines += ["", "Run-to-run noise: each mode's bursts at a level, max/min - 1.", "",
              "| streams | " + " | ".join(MODES) + " |", "|---|" + "---|" * len(MODES)]
    for r in rows:
        lines.append(f"| {r['streams']} | "
                     + " | ".join(_pct(r[f"{m}_noise"]) for m in MODES) + " |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """Tokens/s per level, one bar per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 4.0))
    width = 0.8 / len(MODES)
    for i, mode in enumerate(MODES):
        xs = [k + (i - (len(MODES) - 1) / 2) * width for k in range(len(rows))]
        ax.bar(xs, [r[f"{mode}_tps"] for r in rows], width, label=mode)
    ax.set_xticks(range(len(rows)), [str(r["streams"]) for r in rows])
    save_axes(fig, ax, path, xlabel="concurrent streams", ylabel="aggregate tokens/s",
              title=title)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.time_loss_gateway",
                                 description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--pool", type=Path, default=DEFAULT_POOL)
    ap.add_argument("--levels", default="1,2,4,8,16")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3, help="bursts per mode (median kept)")
    ap.add_argument("--seed", type=int, default=0, help="seeds the modes' order each repeat")
    ap.add_argument("--warmup", type=int, default=3,
                    help="warm-up bursts on the time server before each level")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--quick", action="store_true",
                    help="levels 1,2, 8 tokens, 1 burst per mode, 1 warm-up: a smoke test")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.quick:
        args.levels, args.max_tokens, args.repeats, args.warmup = "1,2", 8, 1, 1
    return args


def main(argv: list[str] | None = None) -> None:
    from transformers import AutoTokenizer

    from bench.machine import describe_machine
    from core.model.precision import auto_dtype
    from core.pool_file import load_pool_file

    args = parse_args(argv)
    dtype = auto_dtype() if args.dtype == "auto" else args.dtype
    pool = load_pool_file(args.pool)
    target = pool.target.directory()  # a provisioned target converted first, as the server does
    tokenizer = AutoTokenizer.from_pretrained(target)
    prompts = [p.ids for p in load_prompts(args.pool, tokenizer, PER_DOMAIN, 200)]
    model = pool.model_name or target.name  # the id the server serves (SpecEngine.from_pool)
    with tempfile.TemporaryDirectory() as tmp:
        procs: list[Any] = []
        urls: dict[str, str] = {}
        try:
            for server, loss, _ in MODES.values():
                (Path(tmp) / server).mkdir()
                proc, urls[server] = start_server(args.pool, Path(tmp) / server, args.threads,
                                                  dtype, loss=loss)
                procs.append(proc)
            rows = measure(urls, prompts, [int(x) for x in args.levels.split(",")],
                           args.max_tokens, args.repeats, args.warmup, model, args.seed)
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(60)
    meta = {"command": "python -m bench.time_loss_gateway" + (" --quick" if args.quick else ""),
            "date": time.strftime("%Y-%m-%d %H:%M"), "machine": describe_machine(),
            "dtype": dtype, "threads": args.threads, "max_tokens": args.max_tokens,
            "repeats": args.repeats, "seed": args.seed, "warmup": args.warmup,
            "levels": args.levels}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "time_loss_gateway.json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (args.out / "time_loss_gateway.md").write_text(render(rows, meta))
    plot(rows, args.out / "time_loss_gateway.png",
         f"The time loss through the HTTP server ({dtype}, CPU)")
    print(render(rows, meta))


if __name__ == "__main__":
    main()
