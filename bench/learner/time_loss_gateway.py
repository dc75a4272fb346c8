"""The served default (the time loss) through the HTTP server against plain decoding, each
fixed arm of the shipped pool alone and HedgeSpec's acceptance loss: bursts of concurrent
streaming completions, every mode on its own `hedgespec serve`, side by side in one run
(issue 58's targets: the default at least plain decoding and at least the best single fixed
arm at 1-16 streams, within the stated noise).

    python -m bench.learner.time_loss_gateway [--levels 1,2,4,8,16] [--max-tokens 48] [--repeats 3]
                                      [--warmup 2] [--modes plain,time,...] [--seed 0]
                                      [--threads 2] [--dtype auto] [--quick]
                                      [--out bench/results]

Modes, one server each (a server's suffix member remembers every answer it served, so no
server sees a prompt twice): `plain` (policy `none`), `time` (NormalHedge under the time loss,
plain decoding one more arm of each request's learner: the served default, `--loss time`),
`length` (NormalHedge under the acceptance loss: it drafts every round), and each fixed arm
alone, drafting every round: `lookup`, `suffix` (the model-free members) and `generalist` (the
pool's general EAGLE-3 drafter). The servers run at once (an idle one costs nothing).

Method. Each burst starts N streams together (the next N held-out prompts, domains
interleaved, chat-formatted token ids, greedy, `ignore_eos`, a fixed token count), the same N
for every mode of a repeat; the modes alternate burst by burst in an order drawn afresh every
repeat (`--seed`). A level runs `--repeats` bursts per mode, more at low concurrency so that
every mode serves at least MIN_PROMPTS prompts (level_repeats), and each mode keeps its median
burst (the slower middle one of an even count). Like for like: before a level is measured
every server runs the same `--warmup` bursts of that size (the same prompts, not measured), so
that each has fitted that batch size (the time loss's cost model,
core/selection/arm_costs.py) as a server that has been up has. A ratio between two modes is
the median of their per-repeat ratios (a repeat's modes served the same prompts, so the
prompts' own spread, 1-5x at one stream, cancels); a target is met where that median is at
least 1, within noise where some repeat's ratio is, missed where none is. A mode's run-to-run
spread (max/min - 1 over its bursts, prompts included) is reported beside. The time server's
plain-round share is the increase of its hedgespec_plain_rounds_total over its measured
bursts, against that plus the increase of its hedgespec_spec_decode_num_drafts_total.
Aggregate tokens/s = all tokens / (last token - start). Writes
bench/results/time_loss_gateway.{md,json,png}. Run it on an idle machine.
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

from bench.paths import RESULTS
from bench.plotting import save_axes
from bench.prompts import DEFAULT_POOL, load_prompts
from bench.speed.gateway_bench import completion_body, run_concurrent, start_server

# mode: (its server, the server's --loss, the requests' policy). One server a mode: a server's
# suffix member remembers every answer it served, so a mode that followed another on the same
# server, or a burst that repeated a prompt, would find the answer it is asked for.
MODES = {"plain": ("plain", "length", "none"), "time": ("time", "time", "normalhedge"),
         "length": ("length", "length", "normalhedge"),
         "lookup": ("lookup", "length", "fixed:lookup"),
         "suffix": ("suffix", "length", "fixed:suffix"),
         "generalist": ("generalist", "length", "fixed:generalist")}
FIXED = ("lookup", "suffix", "generalist")  # the single arms the default is held against
PER_DOMAIN = 30  # every held-out prompt of the demo pool
MIN_PROMPTS = 8  # measured prompts per mode at every level (level_repeats)
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
    """One level: each mode's median burst and noise, the time mode against plain decoding,
    the acceptance loss and the best fixed arm run (the median of the per-repeat ratios: a
    repeat's modes served the same prompts, so the prompts' own spread cancels), and the time
    server's plain-round share over its measured bursts."""
    best = {m: statistics.median_low(b) for m, b in bursts.items()}
    noise = {m: _noise(b) for m, b in bursts.items()}
    fixed = [m for m in FIXED if m in best]
    top = max(fixed, key=best.__getitem__) if fixed else None
    rounds = plain_rounds + spec_rounds
    row: dict[str, Any] = {
        "streams": n,
        **{f"{m}_tps": v for m, v in best.items()},
        "best_fixed": top,
        "time_plain_rounds": plain_rounds, "time_spec_rounds": spec_rounds,
        "time_plain_share": plain_rounds / rounds if rounds else None,
        **{f"{m}_bursts": b for m, b in bursts.items()},
        **{f"{m}_noise": v for m, v in noise.items()},
    }
    for key, other in (("plain", "plain"), ("length", "length"), ("best_fixed", top)):
        if "time" in best and other in best:
            ratios = paired_ratios(bursts["time"], bursts[other])
            row[f"time_x_{key}_repeats"] = ratios
            row[f"time_x_{key}"] = statistics.median(ratios) if ratios else None
            row[f"time_x_{key}_verdict"] = verdict(ratios)
    return row


def paired_ratios(a: list[float], b: list[float]) -> list[float]:
    """a's burst over b's, repeat by repeat (the same prompts)."""
    return [x / y for x, y in zip(a, b, strict=True) if y > 0]


def verdict(ratios: list[float]) -> str:
    """"met" where the median of the per-repeat ratios is at least 1, "within noise" where it
    is not but some repeat's is, "missed" where every repeat's ratio is below 1."""
    if not ratios:
        return "-"
    if statistics.median(ratios) >= 1.0:
        return "met"
    return "within noise" if max(ratios) >= 1.0 else "missed"


def level_repeats(n: int, repeats: int) -> int:
    """Bursts per mode at n streams: `repeats`, and at low concurrency enough that every mode
    serves at least MIN_PROMPTS prompts (one prompt's speed-up spans 1-5x on its own)."""
    return max(repeats, -(-MIN_PROMPTS // n))


def _fresh(prompts: list[list[int]]) -> Any:
    """The next n prompts of the list at each call, cycling (a default run takes 155 of the
    210 held-out prompts)."""
    taken = [0]

    def take(n: int) -> list[list[int]]:
        start = taken[0]
        taken[0] += n
        return [prompts[(start + i) % len(prompts)] for i in range(n)]

    return take


def measure(urls: dict[str, str], modes: list[str], prompts: list[list[int]],
            levels: list[int], max_tokens: int, repeats: int, warmup: int, model: str,
            seed: int) -> list[dict[str, Any]]:
    for url in urls.values():  # each server's first request (shapes, in-place timings)
        burst(url, prompts[:1], 4, "normalhedge", model)
    rows = []
    fresh = _fresh(prompts)
    rng = random.Random(seed)
    for n in levels:
        for _ in range(warmup):  # the same warm-up on every server: like for like
            group = fresh(n)
            for mode in modes:
                server, _, policy = MODES[mode]
                burst(urls[server], group, max_tokens, policy, model)
        bursts: dict[str, list[float]] = {m: [] for m in modes}
        plain = spec = 0.0
        for _ in range(level_repeats(n, repeats)):
            group = fresh(n)  # the same prompts for every mode, each on its own server
            for mode in rng.sample(modes, len(modes)):
                server, _, policy = MODES[mode]
                before = rounds(urls[server])
                tps = burst(urls[server], group, max_tokens, policy, model)
                if mode == "time":
                    after = rounds(urls[server])
                    plain += after[0] - before[0]
                    spec += after[1] - before[1]
                bursts[mode].append(tps)
                print(f"  {n} streams {mode:<10} {tps:6.1f} tokens/s", flush=True)
        rows.append(level_row(n, bursts, plain, spec))
    return rows


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    modes = [m for m in MODES if rows and f"{m}_tps" in rows[0]]
    lines = [
        "# The served default through the HTTP server, against plain decoding and each arm", "",
        f"`{meta['command']}` on {meta['machine']}, {meta['date']}; {meta['dtype']}, "
        f"{meta['threads']} torch thread(s) per server, the served CPU defaults but the loss; "
        f"{meta['max_tokens']} tokens a stream, median of {meta['repeats']} or more bursts per "
        f"mode (at least {MIN_PROMPTS} prompts a mode at each level; order drawn afresh each "
        f"repeat, seed {meta.get('seed', 0)}), "
        f"{meta['warmup']} warm-up bursts on every server before each level. Each mode on its "
        "own server, no prompt served twice by a server. `time` is the served default. "
        "Method: the module docstring.", "",
        "| streams | " + " | ".join(f"{m} tokens/s" for m in modes)
        + " | time x plain | time x best fixed arm | time: plain rounds (of all rounds) |",
        "|---|" + "---|" * (len(modes) + 3),
    ]
    for r in rows:
        best = (f"{_f(r.get('time_x_best_fixed'))} ({r['best_fixed']})"
                if r.get("best_fixed") else "-")
        lines.append(
            f"| {r['streams']} | " + " | ".join(f"{r[f'{m}_tps']:.1f}" for m in modes)
            + f" | {_f(r.get('time_x_plain'))} | {best} | {_pct(r['time_plain_share'])} "
            f"({r['time_plain_rounds']:.0f} of "
            f"{r['time_plain_rounds'] + r['time_spec_rounds']:.0f}) |")
    lines += ["", "Targets (issue 58: the default at least plain decoding and the best fixed arm, "
              "within the noise; each ratio the median of the per-repeat ratios, the repeats' "
              "own in brackets):", ""]
    for r in rows:
        for key, label in (("plain", "plain decoding"), ("best_fixed", "the best fixed arm")):
            if f"time_x_{key}" in r:
                each = ", ".join(_f(x) for x in r.get(f"time_x_{key}_repeats", []))
                lines.append(f"- {r['streams']} stream(s), x {label}: "
                             f"{_f(r[f'time_x_{key}'])} [{each}] "
                             f"{r[f'time_x_{key}_verdict']}")
    lines += ["", "Run-to-run spread: each mode's bursts at a level (different prompts), "
              "max/min - 1.", "",
              "| streams | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
    for r in rows:
        lines.append(f"| {r['streams']} | "
                     + " | ".join(_pct(r[f"{m}_noise"]) for m in modes) + " |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """Tokens/s per level, one bar per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = [m for m in MODES if rows and f"{m}_tps" in rows[0]]
    fig, ax = plt.subplots(figsize=(8.0, 4.0))
    width = 0.8 / len(modes)
    for i, mode in enumerate(modes):
        xs = [k + (i - (len(modes) - 1) / 2) * width for k in range(len(rows))]
        ax.bar(xs, [r[f"{mode}_tps"] for r in rows], width, label=mode)
    ax.set_xticks(range(len(rows)), [str(r["streams"]) for r in rows])
    save_axes(fig, ax, path, xlabel="concurrent streams", ylabel="aggregate tokens/s",
              title=title)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.learner.time_loss_gateway",
                                 description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--pool", type=Path, default=DEFAULT_POOL)
    ap.add_argument("--levels", default="1,2,4,8,16")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3, help="bursts per mode (median kept)")
    ap.add_argument("--seed", type=int, default=0, help="seeds the modes' order each repeat")
    ap.add_argument("--warmup", type=int, default=2,
                    help="warm-up bursts on every server before each level")
    ap.add_argument("--modes", default=",".join(MODES),
                    help=f"comma-separated, of {', '.join(MODES)} (time and plain at least)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--quick", action="store_true",
                    help="levels 1,2, 8 tokens, 1 burst per mode, 1 warm-up: a smoke test")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.quick:
        args.levels, args.max_tokens, args.repeats, args.warmup = "1,2", 8, 1, 1
    modes = args.modes.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown or not {"time", "plain"} <= set(modes):
        ap.error(f"--modes: {unknown or modes}: of {', '.join(MODES)}, time and plain at least")
    args.modes = [m for m in MODES if m in modes]
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
            for server, loss, _ in (MODES[m] for m in args.modes):
                (Path(tmp) / server).mkdir()
                proc, urls[server] = start_server(args.pool, Path(tmp) / server, args.threads,
                                                  dtype, loss=loss)
                procs.append(proc)
            rows = measure(urls, args.modes, prompts, [int(x) for x in args.levels.split(",")],
                           args.max_tokens, args.repeats, args.warmup, model, args.seed)
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(60)
    meta = {"command": ("python -m bench.learner.time_loss_gateway"
                        + (" --quick" if args.quick else "")),
            "date": time.strftime("%Y-%m-%d %H:%M"), "machine": describe_machine(),
            "dtype": dtype, "threads": args.threads, "max_tokens": args.max_tokens,
            "repeats": args.repeats, "seed": args.seed, "warmup": args.warmup,
            "levels": args.levels, "modes": args.modes}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "time_loss_gateway.json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (args.out / "time_loss_gateway.md").write_text(render(rows, meta))
    plot(rows, args.out / "time_loss_gateway.png",
         f"The served default against plain decoding and each arm ({dtype}, CPU)")
    print(render(rows, meta))


if __name__ == "__main__":
    main()
