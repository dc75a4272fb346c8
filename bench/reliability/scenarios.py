"""The reliability benchmark's probes and load scenarios: requests and their outcomes, a
server's process and metrics seen from outside, load below and above the queue limits,
disconnect storms, the rate limit, hot pool changes under load, the soak, and a real
`hedgespec serve` to run them against. `reliability_bench.py` runs them for the report,
`reliability_faults.py` builds its fault scenarios on them, and the CI suites in
`tests/reliability/` call them with smaller sizes, so the report and CI measure the same things.
Every loop is bounded in count and time.

Vocabulary: a request is `ok` when it got a 200 and a complete stream (`[DONE]`, no in-band
error); `rejected` when it got a well-formed 429 (OpenAI error body and `Retry-After`);
anything else is a failure, and a failure is *lost* when the client got no well-formed answer
at all (a transport error, a 5xx, a stream cut without `[DONE]`).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.harness.environ import patched_environ

MODEL = "tiny-target"
API_KEY = "sk-reliability-client"
ADMIN_KEY = "sk-reliability-admin"
SECOND_KEY = "sk-reliability-second"
KEYS = (API_KEY, ADMIN_KEY, SECOND_KEY)
HOT_ID_PREFIX = "hot-"
# Offline by default: nothing in these runs may reach the real Hugging Face Hub.
OFFLINE_HF = {"HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}


def auth(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def chat_body(max_tokens: int = 16, *, policy: str = "auto", prompt: str = "Tell me a story.",
              stream: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": stream,
        "hedgespec": {"policy": policy},
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


# ---- the server process, seen from outside --------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    """RSS (bytes), thread count and open file descriptors of a live process (Linux /proc)."""
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name == "VmRSS":
                fields["rss_bytes"] = int(value.split()[0]) * 1024
            elif name == "Threads":
                fields["threads"] = int(value)
    fields["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return fields


def thread_names(pid: int) -> Counter[str]:
    """How many threads of each name (Linux truncates names to 15 characters)."""
    names: Counter[str] = Counter()
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/comm", encoding="utf-8", errors="replace") as comm:
                names[comm.read().strip()] += 1
        except OSError:
            continue  # the thread ended meanwhile
    return names


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {"name{labels}": value} (labels as exposed, comments dropped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            continue
    return out


def metric_sum(metrics: dict[str, float], name: str, **labels: str) -> float:
    """Sum of a metric's series whose labels include `labels`."""
    total = 0.0
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    for key, value in metrics.items():
        base = key.split("{", 1)[0]
        if base == name and all(w in key for w in wanted):
            total += value
    return total


def load_gauges(base_url: str) -> dict[str, float]:
    """What the server says it is working on: /ready's in_flight and the load gauges."""
    with httpx.Client(base_url=base_url, timeout=10) as http:
        ready = http.get("/ready")
        metrics = parse_metrics(http.get("/metrics").text)
    in_flight = ready.json().get("in_flight", -1) if ready.status_code == 200 else -1
    return {
        "in_flight": float(in_flight),
        "running": metric_sum(metrics, "hedgespec_num_requests_running"),
        "waiting": metric_sum(metrics, "hedgespec_num_requests_waiting"),
    }


def wait_idle(base_url: str, timeout_s: float = 30.0) -> dict[str, float]:
    """Poll until nothing is in flight, running or waiting; raises with the last gauges."""
    deadline = time.monotonic() + timeout_s
    gauges: dict[str, float] = {}
    while time.monotonic() < deadline:
        gauges = load_gauges(base_url)
        if gauges == {"in_flight": 0.0, "running": 0.0, "waiting": 0.0}:
            return gauges
        time.sleep(0.1)
    raise AssertionError(f"the server did not go idle within {timeout_s} s: {gauges}")


def admin_live_state(base_url: str, admin_key: str) -> dict[str, Any]:
    """The admin aggregator's view: active request traces and open live streams."""
    with httpx.Client(base_url=base_url, timeout=10, headers=auth(admin_key)) as http:
        overview = http.get("/admin/api/overview").json()
        with http.stream("GET", "/admin/api/live") as live:
            snapshot: dict[str, Any] = {}
            for line in sse_lines(live.iter_bytes()):
                if line.startswith("data: "):
                    snapshot = json.loads(line[6:])
                    break
    return {
        "active_traces": len(snapshot.get("active", [])),
        # Read before this probe opened its own live stream: other clients' streams only.
        "live_streams": overview["load"]["live_streams"],
        "running": overview["load"]["running"],
        "queued": overview["load"]["queued"],
    }


# ---- answers ----------------------------------------------------------------------------------

# SSE lines end in LF (or CRLF/CR) only. httpx's iter_lines follows str.splitlines and also
# splits on U+0085, U+2028 and U+2029, which JSON leaves unescaped inside strings: generated text
# containing them would cut a `data:` line in two. So streams are split here, on bytes.


def sse_lines(chunks: Iterator[bytes]) -> Iterator[str]:
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            yield line.removesuffix(b"\r").decode("utf-8")
    if buffer:
        yield buffer.removesuffix(b"\r").decode("utf-8")


async def asse_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            yield line.removesuffix(b"\r").decode("utf-8")
    if buffer:
        yield buffer.removesuffix(b"\r").decode("utf-8")



def error_shape_problem(status: int, body: bytes) -> str | None:
    """Why `body` is not a well-formed OpenAI error, or None when it is."""
    try:
        doc = json.loads(body)
    except ValueError:
        return f"{status}: body is not JSON: {body[:120]!r}"
    err = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(err, dict):
        return f"{status}: no error object: {body[:120]!r}"
    if set(err) != {"message", "type", "param", "code"}:
        return f"{status}: error keys {sorted(err)}"
    if not isinstance(err["message"], str) or not err["message"]:
        return f"{status}: empty or non-string message"
    if not isinstance(err["type"], str):
        return f"{status}: non-string type"
    for key in ("param", "code"):
        if err[key] is not None and not isinstance(err[key], str):
            return f"{status}: {key} is {type(err[key]).__name__}, not a string or null"
    return None


@dataclass
class Outcome:
    """One request as the client saw it."""

    kind: str  # ok | rejected | client_error | server_error | malformed | transport
    status: int  # 0: no HTTP answer
    latency_s: float
    ttft_s: float | None = None
    tokens: int = 0
    code: str | None = None  # the OpenAI error code, when there was one
    detail: str | None = None

    @property
    def lost(self) -> bool:
        return self.kind in ("server_error", "transport", "malformed")


def _rejection(status: int, body: bytes, headers: httpx.Headers, started: float) -> Outcome:
    latency = time.perf_counter() - started
    problem = error_shape_problem(status, body)
    code = None
    if problem is None:
        code = json.loads(body)["error"]["code"]
    if status >= 500:
        return Outcome("server_error", status, latency, code=code,
                       detail=problem or body[:200].decode(errors="replace"))
    if problem is not None:
        return Outcome("malformed", status, latency, detail=problem)
    if status == 429:
        if not headers.get("retry-after", "").isdigit():
            return Outcome("malformed", status, latency, code=code,
                           detail="429 without Retry-After")
        return Outcome("rejected", status, latency, code=code)
    return Outcome("client_error", status, latency, code=code,
                   detail=body[:200].decode(errors="replace"))


async def stream_request(http: httpx.AsyncClient, body: dict[str, Any], key: str | None,
                         path: str = "/v1/chat/completions") -> Outcome:
    """One streaming request, read to its end and checked frame by frame."""
    started = time.perf_counter()
    try:
        async with http.stream("POST", path, json=body, headers=auth(key)) as resp:
            if resp.status_code != 200:
                return _rejection(resp.status_code, await resp.aread(), resp.headers, started)
            ttft, tokens, done = None, 0, False
            async for line in asse_lines(resp.aiter_bytes()):
                if not line or line.startswith(":"):
                    continue  # frame separators and keep-alive comments
                if not line.startswith("data: "):
                    return Outcome("malformed", 200, time.perf_counter() - started,
                                   detail=f"not an SSE data line: {line[:80]!r}")
                data = line[6:]
                if data == "[DONE]":
                    done = True
                    continue
                chunk = json.loads(data)
                if "error" in chunk:
                    err = chunk["error"]
                    kind = "server_error" if err.get("type") == "server_error" else "client_error"
                    return Outcome(kind, 200, time.perf_counter() - started, ttft, tokens,
                                   code=err.get("code"), detail=err.get("message"))
                if ttft is None and any((c.get("delta") or {}).get("content") or c.get("text")
                                        for c in chunk.get("choices", [])):
                    ttft = time.perf_counter() - started
                if chunk.get("usage"):
                    tokens = int(chunk["usage"]["completion_tokens"])
            latency = time.perf_counter() - started
            if not done:
                return Outcome("malformed", 200, latency, ttft, tokens, detail="no [DONE]")
            return Outcome("ok", 200, latency, ttft, tokens)
    except (httpx.HTTPError, ValueError) as exc:
        return Outcome("transport", 0, time.perf_counter() - started,
                       detail=f"{type(exc).__name__}: {exc}")


# ---- load ---------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in [0, 100]); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class LoadResult:
    clients: int
    duration_s: float
    wall_s: float
    outcomes: list[Outcome] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        kinds = Counter(o.kind for o in self.outcomes)
        ok = [o for o in self.outcomes if o.kind == "ok"]
        latencies = [o.latency_s for o in ok]
        ttfts = [o.ttft_s for o in ok if o.ttft_s is not None]
        tokens = sum(o.tokens for o in ok)
        failures = [o for o in self.outcomes if o.kind not in ("ok", "rejected")]
        return {
            "clients": self.clients,
            "duration_s": self.duration_s,
            "wall_s": round(self.wall_s, 3),
            "requests": len(self.outcomes),
            "ok": kinds["ok"],
            "rejected_429": kinds["rejected"],
            "rejected_codes": dict(Counter(o.code for o in self.outcomes if o.kind == "rejected")),
            "errors": len(failures),
            "status_5xx": sum(1 for o in self.outcomes
                              if o.status >= 500 or o.kind == "server_error"),
            "lost": sum(1 for o in self.outcomes if o.lost),
            "kinds": dict(kinds),
            "failure_samples": [asdict(o) for o in failures[:5]],
            "latency_p50_s": _round(percentile(latencies, 50)),
            "latency_p99_s": _round(percentile(latencies, 99)),
            "ttft_p50_s": _round(percentile(ttfts, 50)),
            "ttft_p99_s": _round(percentile(ttfts, 99)),
            "completion_tokens": tokens,
            "tokens_per_s": round(tokens / self.wall_s, 1) if self.wall_s > 0 else None,
        }


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


async def run_load(base_url: str, *, clients: int, duration_s: float,
                   body: Callable[[int, int], dict[str, Any]] | dict[str, Any],
                   key: str | None = API_KEY, max_requests: int = 100_000,
                   timeout_s: float = 120.0, stop: asyncio.Event | None = None,
                   backoff_s: float = 0.05) -> LoadResult:
    """`clients` closed-loop streaming clients for `duration_s` (or until `stop`): each sends
    its next request when the previous one ended (after `backoff_s` when it was refused).
    `body(client, i)` may vary the requests. Bounded by `max_requests` in total."""
    make = body if callable(body) else (lambda _c, _i: dict(body))  # type: ignore[misc]
    result = LoadResult(clients, duration_s, 0.0)
    deadline = time.monotonic() + duration_s
    limits = httpx.Limits(max_connections=clients + 2, max_keepalive_connections=clients + 2)
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout_s, limits=limits) as http:

        async def client(c: int) -> None:
            i = 0
            while (time.monotonic() < deadline and len(result.outcomes) < max_requests
                   and not (stop is not None and stop.is_set())):
                outcome = await stream_request(http, make(c, i), key)
                result.outcomes.append(outcome)
                i += 1
                if outcome.kind != "ok":
                    await asyncio.sleep(backoff_s)

        started = time.perf_counter()
        await asyncio.gather(*(client(c) for c in range(clients)))
        result.wall_s = time.perf_counter() - started
    return result


def load_test(base_url: str, *, clients: int, duration_s: float, max_tokens: int = 16,
              key: str | None = API_KEY) -> dict[str, Any]:
    return asyncio.run(run_load(base_url, clients=clients, duration_s=duration_s,
                                body=chat_body(max_tokens), key=key)).summary()


# ---- disconnect storms ------------------------------------------------------------------------


STORM_MODES = ("before_headers", "after_headers", "mid_stream", "mid_stream_rst",
               "non_streaming", "admin_live")


async def _drop_one(host: str, port: int, mode: str, rng: random.Random, *, key: str,
                    admin_key: str | None, max_tokens: int) -> str:
    """One client that goes away at a chosen moment; returns what it did."""
    if mode == "admin_live" and not admin_key:
        mode = "mid_stream"
    stream = mode != "non_streaming"
    if mode == "admin_live":
        request = (f"GET /admin/api/live HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n"
                   f"Authorization: Bearer {admin_key}\r\nAccept: "
                   "text/event-stream\r\n\r\n").encode()
    else:
        payload = json.dumps(chat_body(max_tokens, stream=stream,
                                       policy=rng.choice(["auto", "none", "fixed:alpha"]))).encode()
        request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n"
                   f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(payload)}\r\n\r\n").encode() + payload
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(request)
        await writer.drain()
        if mode == "before_headers":
            await asyncio.sleep(rng.uniform(0, 0.05))
        elif mode == "non_streaming":
            await asyncio.sleep(rng.uniform(0.01, 0.3))  # mostly mid-generation
        else:
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)  # the headers
            if mode != "after_headers":
                for _ in range(rng.randint(1, 4)):  # a few reads: one or more SSE frames
                    if not await asyncio.wait_for(reader.read(1 << 16), 30):
                        break
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError,
            ConnectionError):
        pass  # it may have finished (or failed) first: the drop still happens below
    finally:
        if mode == "mid_stream_rst":
            writer.transport.abort()  # RST instead of FIN
        else:
            writer.close()
        with suppress(ConnectionError, OSError):
            await writer.wait_closed()
    return mode


async def run_storm(base_url: str, *, clients: int, key: str = API_KEY,
                    admin_key: str | None = ADMIN_KEY, seed: int = 0,
                    max_tokens: int = 200, waves: int = 1) -> dict[str, int]:
    """`waves` waves of `clients` concurrent clients that all disconnect early."""
    host, port = base_url.removeprefix("http://").rsplit(":", 1)
    rng = random.Random(seed)
    done: Counter[str] = Counter()
    for _ in range(waves):
        modes = [STORM_MODES[i % len(STORM_MODES)] for i in range(clients)]
        rng.shuffle(modes)
        for mode in await asyncio.gather(*(
            _drop_one(host, int(port), m, random.Random(rng.random()), key=key,
                      admin_key=admin_key, max_tokens=max_tokens) for m in modes
        )):
            done[mode] += 1
    return dict(done)


def disconnect_storm(base_url: str, pid: int, *, clients: int, waves: int, rounds: int = 2,
                     admin_key: str | None = ADMIN_KEY, seed: int = 0) -> dict[str, Any]:
    """Storms separated by idle checks. Nothing may stay behind after each: no request in
    flight, running or waiting, no live trace or admin stream, and threads, file descriptors
    and memory must not grow from one round to the next (a leak grows with every storm)."""
    wait_idle(base_url)
    # Warm-up: one storm of the same size, so thread pools that grow on demand and keep idle
    # workers (AnyIO's, for sync background tasks) are at their working size before measuring.
    asyncio.run(run_storm(base_url, clients=clients, waves=waves, admin_key=admin_key,
                          seed=seed + 99))
    wait_idle(base_url)
    time.sleep(0.5)
    before = proc_status(pid)
    rounds_out = []
    for r in range(rounds):
        modes = asyncio.run(run_storm(base_url, clients=clients, waves=waves, admin_key=admin_key,
                                      seed=seed + r))
        started = time.monotonic()
        gauges = wait_idle(base_url)
        settle_s = time.monotonic() - started
        time.sleep(0.5)  # let sockets finish closing on the server side
        state = admin_live_state(base_url, admin_key) if admin_key else {}
        stats = settled_status(pid, before)
        rounds_out.append({"clients": clients * waves, "modes": modes,
                           "settle_s": round(settle_s, 2), **gauges, **state, **stats})
    return {"before": before, "rounds": rounds_out,
            "dropped_total": sum(r["clients"] for r in rounds_out)}


THREAD_SLACK = 4  # idle pool workers may come and go between samples
FD_SLACK = 2  # a probe's own connection may still be closing
# AnyIO retires a worker thread after 10 s idle; a storm on a slow machine can grow its pool
# past the warm-up's size, so allow that long (and a little more) for the pool to shrink
# back. A leaked thread never exits and still fails the check.
SETTLE_S = 12.0


def settled_status(pid: int, before: dict[str, int], timeout_s: float = SETTLE_S) -> dict[str, Any]:
    """The process's figures once threads and fds are back within slack of `before`, or the
    last sample after `timeout_s` (then with the surplus threads by name, for the report)."""
    deadline = time.monotonic() + timeout_s
    while True:
        stats = proc_status(pid)
        if (stats["threads"] <= before["threads"] + THREAD_SLACK
                and stats["fds"] <= before["fds"] + FD_SLACK):
            return stats
        if time.monotonic() >= deadline:
            return {**stats, "thread_names": dict(thread_names(pid))}
        time.sleep(0.25)


def storm_leaks(storm: dict[str, Any]) -> list[str]:
    """What a disconnect storm left behind (empty: nothing)."""
    before, problems = storm["before"], []
    for i, r in enumerate(storm["rounds"], 1):
        for gauge in ("in_flight", "running", "waiting", "active_traces", "live_streams"):
            if r.get(gauge, 0) != 0:
                problems.append(f"round {i}: {gauge} = {r[gauge]} after the storm")
        if r["threads"] > before["threads"] + THREAD_SLACK:
            problems.append(f"round {i}: {r['threads']} threads (warmed up: {before['threads']})")
        if r["fds"] > before["fds"] + FD_SLACK:
            problems.append(f"round {i}: {r['fds']} open fds (warmed up: {before['fds']})")
    return problems


# ---- figures of a server run ----------------------------------------------------------------


def server_counters(base_url: str) -> dict[str, float]:
    """Finished and refused requests by the server's own count."""
    metrics = parse_metrics(httpx.get(f"{base_url}/metrics", timeout=10).text)
    return {
        "finished": metric_sum(metrics, "hedgespec_requests_total"),
        "aborted": metric_sum(metrics, "hedgespec_requests_total", finish_reason="abort"),
        "rejected_overloaded": metric_sum(metrics, "hedgespec_requests_rejected_total",
                                          reason="overloaded"),
        "rejected_rate_limited": metric_sum(metrics, "hedgespec_requests_rejected_total",
                                            reason="rate_limited"),
    }


_RECORD = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ (?P<level>[A-Z]+) (?P<logger>[\w.]+): ")


def server_log_problems(log: str, *, expected_from: tuple[str, ...] = ()) -> list[str]:
    """Lines of a server log that mean a bug: tracebacks and unhandled errors. A traceback
    logged by one of the `expected_from` loggers (a fault the scenario injected, e.g. the
    request-log writer while the database is down) is not one."""
    bad = ("Traceback (most recent call last)", "unhandled error", "Exception in ASGI application",
           "engine step failed")
    problems, last_logger = [], ""
    for line in log.splitlines():
        record = _RECORD.match(line)
        if record:
            last_logger = record.group("logger")
        elif line.startswith(("INFO:", "WARNING:", "ERROR:")):  # uvicorn's own format
            last_logger = "uvicorn"
        if not any(b in line for b in bad):
            continue
        if line.startswith("Traceback") and last_logger.startswith(expected_from or ("\0",)):
            continue
        problems.append(f"{line} (after a {last_logger or 'unknown'} record)")
    return problems


# ---- rate limit -------------------------------------------------------------------------------


def rate_limit_check(base_url: str, *, rps: float, burst: int) -> dict[str, Any]:
    """Two keys hammer a cheap /v1 route: each gets its burst, then 429s with Retry-After; the
    other key is not affected; waiting Retry-After is enough to be served again."""
    out: dict[str, Any] = {"rps": rps, "burst": burst}
    with httpx.Client(base_url=base_url, timeout=10) as http:
        first = [http.get("/v1/models", headers=auth(API_KEY)) for _ in range(burst + 3)]
        codes = [r.status_code for r in first]
        refused = [r for r in first if r.status_code == 429]
        out["first_key_statuses"] = codes
        out["second_key_status"] = http.get("/v1/models", headers=auth(SECOND_KEY)).status_code
        problems = [error_shape_problem(429, r.content) for r in refused]
        out["well_formed_429"] = all(p is None for p in problems) and all(
            r.headers.get("retry-after", "").isdigit()
            and r.json()["error"]["code"] == "rate_limit_exceeded" for r in refused)
        retry_after = max((int(r.headers["retry-after"]) for r in refused), default=0)
        time.sleep(retry_after)
        out["after_retry_after"] = http.get("/v1/models", headers=auth(API_KEY)).status_code
        out["retry_after_s"] = retry_after
    return out


# ---- hot pool changes under load ----------------------------------------------------------------


def _admin(base_url: str) -> httpx.Client:
    return httpx.Client(base_url=base_url, timeout=30, headers=auth(ADMIN_KEY))


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str,
             interval_s: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def drafter_state(http: httpx.Client, drafter_id: str) -> dict[str, Any] | None:
    resp = http.get(f"/admin/api/drafters/{drafter_id}")
    if resp.status_code == 404:
        return None
    resp.raise_for_status()
    data: dict[str, Any] = resp.json()
    return data


def serving_ids(http: httpx.Client) -> list[str]:
    ids: list[str] = http.get("/admin/api/pool").json()["serving"]
    return ids


def hot_cycle(http: httpx.Client, client_url: str, drafter_id: str, path: Path, *,
              pinned_tokens: int = 12, timeout_s: float = 60) -> dict[str, Any]:
    """Register a local drafter and wait until this replica serves it; open a stream pinned to
    it (`fixed:<id>`); remove the drafter while that stream runs and wait until it is gone
    from the engine. The pinned stream must still finish cleanly (a request keeps the pool
    snapshot it started with). Returns the seconds each half took and the stream's outcome."""
    started = time.monotonic()
    created = http.post("/admin/api/drafters", json={
        "id": drafter_id, "name": drafter_id, "source": "local", "path": str(path),
    })
    if created.status_code != 202:
        raise AssertionError(f"register {drafter_id}: {created.status_code} {created.text}")

    def ready() -> bool:
        state = drafter_state(http, drafter_id)
        if state is not None and state["status"] == "failed":
            raise AssertionError(f"{drafter_id} failed: {state.get('error')}")
        return bool(state and state["status"] == "ready" and state["serving"])

    wait_for(ready, timeout_s, f"{drafter_id} ready and serving")
    added = time.monotonic()
    body = chat_body(pinned_tokens, policy=f"fixed:{drafter_id}")
    pinned: Outcome
    with httpx.Client(base_url=client_url, timeout=timeout_s) as client, client.stream(
        "POST", "/v1/chat/completions", json=body, headers=auth(API_KEY)
    ) as resp:
        lines = sse_lines(resp.iter_bytes())
        first = next(lines, "") if resp.status_code == 200 else ""
        deleted = http.delete(f"/admin/api/drafters/{drafter_id}")  # while the stream runs
        if deleted.status_code != 200:
            raise AssertionError(f"delete {drafter_id}: {deleted.status_code} {deleted.text}")
        rest = [first, *lines] if resp.status_code == 200 else []
        pinned = _pinned_outcome(resp, rest, started=added)
    wait_for(lambda: drafter_id not in serving_ids(http), timeout_s, f"{drafter_id} removed")
    return {"add_s": added - started, "remove_s": time.monotonic() - added,
            "pinned": pinned.kind, "pinned_tokens": pinned.tokens,
            "pinned_detail": pinned.detail}


def _pinned_outcome(resp: httpx.Response, lines: list[str], *, started: float) -> Outcome:
    latency = time.perf_counter() - started
    if resp.status_code != 200:
        return Outcome("client_error" if resp.status_code < 500 else "server_error",
                       resp.status_code, latency, detail=resp.read().decode(errors="replace")[:200])
    data = [ln[6:] for ln in lines if ln.startswith("data: ")]
    if not data or data[-1] != "[DONE]":
        return Outcome("malformed", 200, latency, detail="no [DONE]")
    tokens = 0
    for item in data[:-1]:
        chunk = json.loads(item)
        if "error" in chunk:
            return Outcome("client_error", 200, latency, detail=chunk["error"].get("message"))
        if chunk.get("usage"):
            tokens = int(chunk["usage"]["completion_tokens"])
    return Outcome("ok", 200, latency, tokens=tokens)


def hot_pool_under_load(base_url: str, drafter_dir: Path, *, cycles: int, clients: int,
                        max_tokens: int = 24) -> dict[str, Any]:
    """`cycles` add/remove cycles of a drafter while `clients` stream without pause."""

    def body(c: int, i: int) -> dict[str, Any]:
        return chat_body(max_tokens, policy=("auto", "fixed:alpha", "normalhedge")[(c + i) % 3])

    async def main() -> tuple[LoadResult, list[dict[str, float]]]:
        stop = asyncio.Event()

        def cycle_all() -> list[dict[str, float]]:
            try:
                with _admin(base_url) as http:
                    return [hot_cycle(http, base_url, f"{HOT_ID_PREFIX}{i}", drafter_dir)
                            for i in range(cycles)]
            finally:
                stop.set()

        load_task = asyncio.create_task(run_load(base_url, clients=clients, duration_s=3600,
                                                 body=body, stop=stop))
        timings = await asyncio.to_thread(cycle_all)
        return await load_task, timings

    load, timings = asyncio.run(main())
    summary = load.summary()
    adds = [t["add_s"] for t in timings]
    removes = [t["remove_s"] for t in timings]
    pinned = Counter(t["pinned"] for t in timings)
    return {"cycles": len(timings), "load": summary,
            "pinned_streams": dict(pinned),
            "pinned_failures": [t["pinned_detail"] for t in timings if t["pinned"] != "ok"][:5],
            "pinned_tokens": sum(t["pinned_tokens"] for t in timings),
            "add_p50_s": _round(percentile(adds, 50)), "add_max_s": _round(max(adds, default=0)),
            "remove_p50_s": _round(percentile(removes, 50)),
            "remove_max_s": _round(max(removes, default=0))}


# ---- soak -------------------------------------------------------------------------------------


def soak(base_url: str, pid: int, *, duration_s: float, clients: int, sample_s: float = 5.0,
         warmup_fraction: float = 0.2) -> dict[str, Any]:
    """Constant load for `duration_s`, sampling the server's RSS; memory is compared between
    the end of the warm-up part and the end of the run."""
    samples: list[tuple[float, int]] = []

    async def main() -> LoadResult:
        stop = asyncio.Event()
        task = asyncio.create_task(run_load(base_url, clients=clients, duration_s=duration_s,
                                            body=chat_body(32), stop=stop))
        started = time.monotonic()
        while not task.done():
            samples.append((round(time.monotonic() - started, 1), proc_status(pid)["rss_bytes"]))
            await asyncio.wait({task}, timeout=sample_s)
        return await task

    load = asyncio.run(main())
    wait_idle(base_url)
    samples.append((round(duration_s, 1), proc_status(pid)["rss_bytes"]))
    warm = [rss for t, rss in samples if t >= duration_s * warmup_fraction]
    after_warmup = warm[0] if warm else samples[0][1]
    return {"duration_s": duration_s, "clients": clients, "load": load.summary(),
            "rss_samples": samples, "rss_after_warmup": after_warmup,
            "rss_end": samples[-1][1], "rss_max": max(r for _, r in samples),
            "rss_growth_bytes": samples[-1][1] - after_warmup}


# ---- a server to run them against ------------------------------------------------------------


def start_server(pool: Path, workdir: Path, *flags: str, settings: dict[str, str] | None = None,
                 environ: dict[str, str] | None = None, timeout_s: float = 120) -> Any:
    """A real `hedgespec serve` on a free loopback port (`bench.harness.server.ServerProcess`);
    `settings` without a CLI flag go to its `.env`, `environ` to its environment."""
    from bench.harness.server import ServerProcess

    workdir.mkdir(parents=True, exist_ok=True)
    env = {"HEDGESPEC_HF_CACHE_DIR": str(workdir / "hf-cache"), **(settings or {})}
    (workdir / ".env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    with patched_environ({**OFFLINE_HF, **(environ or {})}):
        return ServerProcess.start(pool, workdir, *flags, timeout_s=timeout_s)


KEY_FLAGS = ("--api-key", API_KEY, "--api-key", SECOND_KEY, "--admin-key", ADMIN_KEY)
