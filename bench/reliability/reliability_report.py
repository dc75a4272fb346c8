"""The reliability report: verdicts per claim and the Markdown write-up of one
`python -m bench.reliability.reliability_bench` run (its results dict, as also saved to
`reliability.json`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from bench.reliability.scenarios import FD_SLACK, THREAD_SLACK, storm_leaks

LOAD_RUNS = (("load_below_limit",), ("load_above_limit",), ("hot_pool", "load"),
             ("database_outage", "load"), ("soak", "load"))


def _at(results: dict[str, Any], *path: str) -> dict[str, Any]:
    node: Any = results
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def totals(r: dict[str, Any]) -> dict[str, int]:
    """Requests tried, failed, 5xx and lost over every scenario of a run."""
    loads = [_at(r, *path) for path in LOAD_RUNS]
    fuzz, storm, hot = _at(r, "fuzz"), _at(r, "disconnect_storm"), _at(r, "hot_pool")
    rate = _at(r, "rate_limit")
    pinned = sum(hot.get("pinned_streams", {}).values())
    return {
        "requests": sum(x.get("requests", 0) for x in loads) + fuzz.get("requests", 0)
        + storm.get("dropped_total", 0) + pinned + len(rate.get("first_key_statuses", [])) + 2,
        "errors": sum(x.get("errors", 0) for x in loads)
        + (pinned - hot.get("pinned_streams", {}).get("ok", 0)),
        "status_5xx": sum(x.get("status_5xx", 0) for x in loads) + fuzz.get("status_5xx", 0),
        "lost": sum(x.get("lost", 0) for x in loads),
        "rejected_429": sum(x.get("rejected_429", 0) for x in loads),
        "clients_dropped": storm.get("dropped_total", 0),
        "hot_cycles": hot.get("cycles", 0),
        "corrupt_files": len(_at(r, "corrupt_drafters").get("statuses", {})),
    }


# ---- report -------------------------------------------------------------------------------------

RSS_BOUND = 64 * 2**20


def _mib(n: float | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:.1f} MiB"


def _s(value: Any) -> str:
    if value is None:
        return "n/a"
    return f"{value * 1000:.0f} ms" if value < 10 else f"{value:.1f} s"


def _row(name: str, s: dict[str, Any]) -> str:
    if not s:
        return f"| {name} | not run |||||||||"
    if "failed" in s:
        return f"| {name} | FAILED: {s['failed']} |||||||||"
    codes = ", ".join(f"{k}: {v}" for k, v in s.get("rejected_codes", {}).items()) or "-"
    return (f"| {name} | {s['clients']} | {s['requests']} | {s['ok']} | {s['rejected_429']} "
            f"({codes}) | {s['errors']} | {s['status_5xx']} | {_s(s['latency_p50_s'])} / "
            f"{_s(s['latency_p99_s'])} | {_s(s['ttft_p50_s'])} / {_s(s['ttft_p99_s'])} | "
            f"{s['tokens_per_s']} |")


Verdict = tuple[str, bool, str]


def _below_limit_verdict(r: dict[str, Any]) -> Verdict:
    below = _at(r, "load_below_limit")
    return ("zero errors below the queue limit",
            bool(below) and below.get("errors") == 0 and below.get("rejected_429") == 0
            and below.get("ok", 0) > 0,
            f"{below.get('requests')} requests, {below.get('errors')} errors, "
            f"{below.get('rejected_429')} 429s")


def _above_limit_verdict(r: dict[str, Any]) -> Verdict:
    above = _at(r, "load_above_limit")
    return ("clean 429s above it, nothing else",
            bool(above) and above.get("errors") == 0 and above.get("rejected_429", 0) > 0,
            f"{above.get('requests')} requests: {above.get('ok')} ok, "
            f"{above.get('rejected_429')} clean 429s, {above.get('errors')} errors")


def _storm_verdict(r: dict[str, Any]) -> Verdict:
    storm = _at(r, "disconnect_storm")
    rounds, before = storm.get("rounds", []), storm.get("before", {})
    leaks = storm_leaks(storm) if rounds else [storm.get("failed", "not run")]
    return ("disconnect storms leave no request, trace, stream, thread or fd behind", not leaks,
            f"{storm.get('dropped_total')} dropped clients; threads {before.get('threads')} -> "
            f"{[x['threads'] for x in rounds]}, fds {before.get('fds')} -> "
            f"{[x['fds'] for x in rounds]}" + (f"; {leaks[:3]}" if leaks else ""))


def _hot_pool_verdict(r: dict[str, Any]) -> Verdict:
    hot = _at(r, "hot_pool")
    hot_load = hot.get("load", {})
    pinned = hot.get("pinned_streams", {})
    return ("hot add/remove cycles under load: zero failed requests",
            bool(hot_load) and hot.get("cycles", 0) >= 1 and hot_load.get("errors") == 0
            and hot_load.get("rejected_429") == 0 and set(pinned) == {"ok"},
            f"{hot.get('cycles')} cycles; {hot_load.get('requests')} background requests, "
            f"{hot_load.get('errors')} errors; streams pinned to the removed drafter: {pinned}")


def _database_outage_verdict(r: dict[str, Any]) -> Verdict:
    db = _at(r, "database_outage")
    return ("database outage: generation stays up, admin 503, recovery",
            bool(db.get("held")),
            db.get("skipped") or db.get("failed") or
            f"{db.get('load', {}).get('requests')} requests during the run, "
            f"{db.get('load', {}).get('errors')} errors; admin {db.get('admin_during')} "
            f"{db.get('admin_codes_during')}, back in {db.get('admin_recovery_s')} s; "
            f"new drafter {db.get('recovered_drafter')}")


def _replica_verdict(r: dict[str, Any]) -> Verdict:
    rep = _at(r, "replica_convergence")
    return (f"replicas converge within {rep.get('claim_s', 5.0):g} s of a pool change",
            bool(rep.get("held")), rep.get("failed") or
            f"{rep.get('changes')} adds and removes on {rep.get('backend')}: add p50 "
            f"{_s(rep.get('add_p50_s'))} (max {_s(rep.get('add_max_s'))}), remove p50 "
            f"{_s(rep.get('remove_p50_s'))} (max {_s(rep.get('remove_max_s'))})")


def _download_crash_verdict(r: dict[str, Any]) -> Verdict:
    crash = _at(r, "download_crash")
    return ("kill -9 during a download: registry consistent, download resumed",
            bool(crash.get("held")), crash.get("failed") or
            f"killed at {crash.get('killed_at_bytes')} of {crash.get('file_bytes')} B; on disk: "
            f"integrity {crash.get('integrity')}, status {crash.get('status_on_disk')}; after "
            f"restart {crash.get('final_status')}, {crash.get('bytes_after_restart')} B re-sent")


def _corrupt_verdict(r: dict[str, Any]) -> Verdict:
    corrupt = _at(r, "corrupt_drafters")
    return ("corrupt drafter files end in `failed`, payload not executed",
            bool(corrupt.get("held")), corrupt.get("failed") or
            f"{len(corrupt.get('statuses', {}))} files: "
            f"{sorted(set(corrupt.get('statuses', {}).values()))}, payload executed: "
            f"{corrupt.get('payload_executed')}")


def _rate_limit_verdict(r: dict[str, Any]) -> Verdict:
    rate = _at(r, "rate_limit")
    return ("rate limit per key", bool(rate) and rate.get("well_formed_429", False)
            and 429 in rate.get("first_key_statuses", []) and rate.get("second_key_status") == 200
            and rate.get("after_retry_after") == 200,
            f"key A {rate.get('first_key_statuses')}, key B {rate.get('second_key_status')}, "
            f"A after Retry-After {rate.get('after_retry_after')}")


def _fuzz_verdict(r: dict[str, Any]) -> Verdict:
    fuzz = _at(r, "fuzz")
    return ("fuzzing: 4xx or valid answers only, zero 5xx",
            fuzz.get("pytest_exit") == 0 and fuzz.get("status_5xx", 1) == 0,
            f"{fuzz.get('requests')} requests, {fuzz.get('status_5xx')} 5xx "
            f"({' '.join(fuzz.get('pytest_summary', []))})")


def _log_verdict(r: dict[str, Any]) -> Verdict:
    problems = r.get("log_problems") or []
    return ("no traceback in the server logs", not problems, f"{len(problems)} lines")


def _overall_verdict(r: dict[str, Any]) -> Verdict:
    t = r.get("totals", {})
    return ("zero 5xx and zero lost requests overall",
            t.get("status_5xx") == 0 and t.get("lost") == 0,
            f"{t.get('requests')} requests tried, {t.get('status_5xx')} 5xx, {t.get('lost')} lost")


def _memory_verdict(r: dict[str, Any]) -> Verdict:
    rss_growth = (r.get("rss_end") or 0) - (r.get("rss_start") or 0)
    return (f"bounded memory (RSS growth < {_mib(RSS_BOUND)})",
            bool(r.get("rss_end")) and rss_growth < RSS_BOUND,
            f"{_mib(r.get('rss_start'))} at start -> {_mib(r.get('rss_end'))} after load and "
            "storms")


def _soak_verdict(r: dict[str, Any]) -> Verdict | None:
    if "soak" not in r:
        return None
    s = _at(r, "soak")
    return (f"soak: RSS flat after warm-up (growth < {_mib(RSS_BOUND)})",
            bool(s.get("load")) and s.get("rss_growth_bytes", RSS_BOUND) < RSS_BOUND
            and s["load"].get("errors") == 0,
            s.get("failed") or f"{_mib(s.get('rss_after_warmup'))} -> {_mib(s.get('rss_end'))} "
            f"(max {_mib(s.get('rss_max'))}) over {s.get('duration_s')} s, "
            f"{s.get('load', {}).get('requests')} requests")


# One check per claim, in the order of the summary table; a check returns None when its
# scenario is optional and was not run.
VERDICT_CHECKS: tuple[Callable[[dict[str, Any]], Verdict | None], ...] = (
    _below_limit_verdict, _above_limit_verdict, _storm_verdict, _hot_pool_verdict,
    _database_outage_verdict, _replica_verdict, _download_crash_verdict, _corrupt_verdict,
    _rate_limit_verdict, _fuzz_verdict, _log_verdict, _overall_verdict, _memory_verdict,
    _soak_verdict,
)


def verdicts(r: dict[str, Any]) -> list[tuple[str, bool, str]]:
    """(claim, holds, evidence) for the report's summary table."""
    return [v for check in VERDICT_CHECKS if (v := check(r)) is not None]


def _header(r: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    t = r.get("totals", {})
    return [
        "# Reliability report (issue 9)",
        "",
        f"Regenerate with `{meta['command']}` ({meta['wall_s']:.0f} s on this machine; `--soak` "
        "adds a long constant-load run and a 10x fuzz budget). Every server is a real `hedgespec "
        "serve` on 127.0.0.1 serving the tiny random test pool (4-layer Llama target, hidden 64, "
        "two EAGLE-3 drafters) on CPU; clients are closed-loop `httpx` streams (`max_tokens` 16). "
        f"Generated {meta['date']} on {meta['machine']}. CI runs the same scenarios at smaller "
        "sizes: `pytest tests/reliability` (soak: `--soak`).",
        "",
        f"**Totals:** {t.get('requests')} requests tried, {t.get('errors')} failed, "
        f"{t.get('status_5xx')} 5xx, {t.get('lost')} lost, {t.get('rejected_429')} clean 429s; "
        f"faults injected and survived: {t.get('clients_dropped')} dropped clients, "
        f"{t.get('hot_cycles')} hot add/remove cycles, {t.get('corrupt_files')} corrupt drafters, "
        "1 kill -9 mid-download, "
        + ("1 database outage" if _at(r, "database_outage").get("held") else "no database outage")
        + f", {_at(r, 'fuzz').get('requests')} fuzzed requests.",
    ]


def _verdict_section(r: dict[str, Any]) -> list[str]:
    lines = ["", "## Verdicts", "", "| claim | holds | evidence |", "|---|---|---|"]
    for claim, ok, evidence in verdicts(r):
        lines.append(f"| {claim} | {'yes' if ok else '**NO**'} | {evidence} |")
    return lines


def _load_section(r: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "## Load",
        "",
        "`--max-running 2 --max-queue 14` (capacity 16): 8 clients stay below it (6 of them "
        "queued at any time), 32 exceed it. Latency is end to end (request sent to `[DONE]`), "
        "TTFT to the first content chunk, tokens/s is all completion tokens over the wall time.",
        "",
        "| run | clients | requests | ok | 429 (codes) | errors | 5xx | latency p50 / p99 | TTFT "
        "p50 / p99 | tokens/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
        _row("below capacity", _at(r, "load_below_limit")),
        _row("above capacity", _at(r, "load_above_limit")),
        _row(f"during {_at(r, 'hot_pool').get('cycles', 0)} hot add/remove cycles",
             _at(r, "hot_pool", "load")),
        _row("during a database outage", _at(r, "database_outage", "load")),
    ]
    if "soak" in r:
        lines.append(_row(f"soak ({_at(r, 'soak').get('duration_s')} s)", _at(r, "soak", "load")))
    lines += [
        "",
        f"Server memory: RSS {_mib(r.get('rss_start'))} when ready, {_mib(r.get('rss_end'))} after "
        f"the load runs and storms (bound: growth < {_mib(RSS_BOUND)}). Server-side counters: "
        f"`{json.dumps(r.get('limits_counters', {}))}`.",
    ]
    return lines


def _storm_section(r: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "## Disconnect storms",
        "",
        "Waves of clients that drop before the response headers, right after them, mid-stream "
        "(FIN, and RST), during non-streaming generation, and admin live streams. After each round "
        "the server must report nothing in flight, running or waiting, no live request trace and "
        "no open admin stream; threads and open file descriptors must stay at the warmed-up level "
        f"(slack {THREAD_SLACK} threads, {FD_SLACK} fds).",
        "",
        "| round | dropped clients | settle | in flight | running | waiting | live traces | admin "
        "streams | threads | fds | RSS |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    storm = _at(r, "disconnect_storm")
    before = storm.get("before")
    if before:
        lines.append(f"| warmed up | - | - | - | - | - | - | - | {before['threads']} | "
                     f"{before['fds']} | {_mib(before['rss_bytes'])} |")
    for i, x in enumerate(storm.get("rounds", []), 1):
        lines.append(f"| {i} | {x['clients']} | {x['settle_s']} s | {x['in_flight']:.0f} | "
                     f"{x['running']:.0f} | {x['waiting']:.0f} | {x.get('active_traces', '-')} | "
                     f"{x.get('live_streams', '-')} | {x['threads']} | {x['fds']} | "
                     f"{_mib(x['rss_bytes'])} |")
    return lines


def _hot_pool_fault(hot: dict[str, Any]) -> str:
    return (
        f"- **Hot pool** ({hot.get('cycles')} cycles): register a local drafter, wait until this "
        "replica serves it, open a stream pinned to it (`fixed:<id>`), delete the drafter while "
        "that stream runs, wait until the engine dropped it; 3 clients stream meanwhile (policies "
        f"auto, fixed:alpha, normalhedge). Add p50 {_s(hot.get('add_p50_s'))} (max "
        f"{_s(hot.get('add_max_s'))}), remove p50 {_s(hot.get('remove_p50_s'))} (includes the "
        f"pinned stream). Pinned streams: {hot.get('pinned_streams')}.")


def _database_fault(db: dict[str, Any]) -> str:
    return (
        f"- **Database outage** (PostgreSQL behind a loopback TCP proxy cut for "
        f"{db.get('outage_s', 'n/a')} s: connections reset, new ones refused): admin API "
        f"{db.get('admin_during')} {db.get('admin_codes_during')} (slowest answer "
        f"{db.get('admin_slowest_s')} s), `/health` {db.get('health_during')}, a generation "
        f"{db.get('generation_during')}, `/ready` {db.get('ready_during')} during the outage; "
        f"admin back {db.get('admin_recovery_s')} s after the database returned, a drafter "
        f"registered then {db.get('recovered_drafter')}; request-log rows dropped while down: "
        f"{db.get('request_logs_dropped')}." + (f" ({db['skipped']})" if "skipped" in db else ""))


def _replica_fault(rep: dict[str, Any]) -> str:
    return (
        f"- **Replica convergence** (two replicas on one {rep.get('backend')} registry, each "
        f"polling it every {rep.get('sync_interval_s')} s, the default): {rep.get('changes')} "
        "times a drafter registered through replica a, timed from a's `ready` until replica b "
        "serves it, then deleted through b, timed until a stops serving it. Add p50 "
        f"{_s(rep.get('add_p50_s'))} (max {_s(rep.get('add_max_s'))}); remove p50 "
        f"{_s(rep.get('remove_p50_s'))} (max {_s(rep.get('remove_max_s'))}). CI checks the same "
        "paths for correctness in `tests/gateway_registry/test_replicas.py`.")


def _download_crash_fault(crash: dict[str, Any]) -> str:
    return (
        f"- **kill -9 during a download** (fake Hub on loopback, weights throttled to "
        f"{crash.get('throttle_bps')} B/s): killed at {crash.get('killed_at_bytes')} of "
        f"{crash.get('file_bytes')} B; the database on disk: integrity `{crash.get('integrity')}`, "
        f"{crash.get('foreign_key_violations')} foreign-key violations, drafter "
        f"`{crash.get('status_on_disk')}` (audit trail {crash.get('audit_statuses_on_disk')}), "
        f"partial file kept; after the restart it resumed by itself to {crash.get('final_status')} "
        f"with {crash.get('bytes_after_restart')} B sent again, and served a `fixed:remote` "
        f"request ({crash.get('generation_with_it')}). Byte-level resume of the downloader: "
        "`tests/registry/test_hub_resume.py`.")


def _corrupt_fault(corrupt: dict[str, Any]) -> list[str]:
    return [
        "- **Corrupt drafter files**, registered through the admin API:",
        "",
        "| file | status | error |",
        "|---|---|---|",
        *[f"| {k} | {v} | {corrupt.get('errors', {}).get(k, '')} |"
          for k, v in corrupt.get("statuses", {}).items()],
        "",
        f"  The pickle payload was executed: {corrupt.get('payload_executed')}; generation "
        f"afterwards: {corrupt.get('generation_after')}. Transfer-level corruption (checksum "
        "mismatches, truncated downloads): `tests/registry/test_fetcher.py`.",
    ]


def _faults_section(r: dict[str, Any]) -> list[str]:
    return [
        "",
        "## Faults",
        "",
        _hot_pool_fault(_at(r, "hot_pool")),
        _database_fault(_at(r, "database_outage")),
        _replica_fault(_at(r, "replica_convergence")),
        _download_crash_fault(_at(r, "download_crash")),
        *_corrupt_fault(_at(r, "corrupt_drafters")),
        f"- **Rate limit** (1 request/s, burst 5, per key): `{json.dumps(_at(r, 'rate_limit'))}`.",
    ]


def _fuzz_section(r: dict[str, Any]) -> list[str]:
    fuzz = _at(r, "fuzz")
    return [
        "",
        "## Fuzzing",
        "",
        f"`tests/reliability/test_fuzz.py` (Hypothesis; every route of the app's route table, "
        f"valid-ish, valid and raw bodies): {fuzz.get('requests')} requests, statuses "
        f"`{json.dumps(fuzz.get('statuses', {}))}`, "
        f"{fuzz.get('in_band_errors')} in-band stream errors, "
        f"{fuzz.get('status_5xx')} 5xx.",
    ]


def _notes_section(r: dict[str, Any]) -> list[str]:
    db = _at(r, "database_outage")
    lines = ["", "## Notes", ""]
    if db.get("ready_during") == 503:
        lines.append("- `/ready` answered 503 while the database was down although generation "
                     "worked: a readiness probe on `/ready` (deploy/k8s/gateway.yaml) takes every "
                     "replica sharing that database out of service at once.")
    if db.get("request_logs_dropped"):
        lines.append(f"- {db['request_logs_dropped']} request-log rows (admin statistics) were "
                     "dropped while the database was down; generation was unaffected.")
    lines += [
        "- Unauthenticated requests with a malformed JSON body get FastAPI's generic 400 before "
        "the key check (401 for any well-formed body); no handler runs "
        "(tests/reliability/test_security.py).",
        "- Broken HTTP (bad lengths, NUL or oversize headers) never reaches the app: uvicorn "
        "answers a plain-text 400 or closes the connection (test_fuzz.py).",
        "- The rate limiter keys anonymous clients by address: behind a proxy, uvicorn must "
        "trust its `X-Forwarded-For` (`FORWARDED_ALLOW_IPS`) or every client shares one bucket.",
    ]
    return lines


def _soak_section(r: dict[str, Any]) -> list[str]:
    if "soak" not in r:
        return []
    s = _at(r, "soak")
    return ["", "## Soak", "", "RSS samples (seconds: MiB): " + ", ".join(
        f"{t_:.0f}: {rss / 2**20:.0f}" for t_, rss in s.get("rss_samples", []))]


def _log_problems_section(r: dict[str, Any]) -> list[str]:
    problems = r.get("log_problems") or []
    if not problems:
        return []
    return ["", "## Server log problems", "", *[f"    {p}" for p in problems[:20]]]


def render(r: dict[str, Any], meta: dict[str, Any]) -> str:
    """The Markdown report of one run (`results`, as saved in `reliability.json`)."""
    sections = (_header(r, meta), _verdict_section(r), _load_section(r), _storm_section(r),
                _faults_section(r), _fuzz_section(r), _notes_section(r), _soak_section(r),
                _log_problems_section(r))
    return "\n".join(line for section in sections for line in section) + "\n"
