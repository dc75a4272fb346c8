"""The admin page's data endpoints: auth (401 without the key, 403 when admin is disabled), the
static page, the live aggregator's folding and bounds, and the SSE stream end to end against a
real `hedgespec serve` process."""

from __future__ import annotations

import dataclasses
import json
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from bench.harness.server import ServerProcess
from gateway.app import create_app
from gateway.config import Settings
from gateway.http.routes import admin_live
from gateway.http.routes.admin_live import dumps
from gateway.live.aggregator import (
    BUCKET_S,
    HISTORY_SIZE,
    LISTENER_BUFFER,
    MAX_ACTIVE,
    LiveAggregator,
    Load,
)
from gateway.live.event_types import (
    EventsDropped,
    FinalStats,
    RequestFinished,
    RequestStarted,
    RoundCompleted,
)
from gateway.live.traces import MAX_ROUNDS
from tests.admin_ui.conftest import (
    ADMIN_KEY,
    DRAFTER_IDS,
    openai_client,
    running_server,
    stream_chat,
)

pytestmark = pytest.mark.timeout(180)
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
# Code that parses strings as HTML; the page builds DOM nodes and sets textContent instead.
UNSAFE_SINKS = re.compile(
    r"\.(inner|outer)HTML\s*[+]?=|insertAdjacentHTML\(|document\.write|eval\("
)
DATA_ROUTES = ["/admin/api/live", "/admin/api/overview", "/admin/api/requests"]


# ---- the aggregator, in isolation ---------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def aggregator(in_flight: int = 0, clock: Clock | None = None) -> LiveAggregator:
    return LiveAggregator(lambda: Load(in_flight, 4, 8), clock=clock or Clock())


def round_event(
    rid: str, index: int, drafter: str | None, accepted: int, plain: bool = False
) -> RoundCompleted:
    return RoundCompleted(
        request_id=rid, round=index, policy="normalhedge", drafter=drafter, drafted=6,
        accepted=accepted, committed=accepted + 1, completion_tokens=2 * (index + 1),
        mean_acceptance_length=1.5, tokens_per_s=10.0, weights={"a": 0.75, "b": 0.25},
        batch_rows=1, plain=plain, regret=0.1 * index, regret_unit="tokens", feedback_windows=index,
        ts=1_000.0,
    )  # fmt: skip


def started(rid: str, warm_start_requests: int = 0) -> RequestStarted:
    return RequestStarted(
        request_id=rid, policy="normalhedge", drafters=("a", "b"),
        drafter_kinds={"a": "eagle3", "b": "eagle3"}, prompt_tokens=5, max_tokens=16,
        temperature=0.2, top_p=0.9, top_k=0, warm_start_requests=warm_start_requests,
        ts=1_000.0,
    )  # fmt: skip


def final_stats(**fields: Any) -> FinalStats:
    """A finished request's statistics: `fields` over those of a request that ran no step."""
    empty: dict[str, Any] = {
        "policy": "normalhedge", "prompt_tokens": 0, "completion_tokens": 0, "rounds": 0,
        "target_forwards": 0, "mean_acceptance_length": 0.0, "num_plain_steps": 0,
        "plain_step_indices": (), "num_draft_tokens": 0, "num_accepted_draft_tokens": 0,
        "acceptance_by_position": (), "accepted_per_round": (), "drafter_choices": (),
        "regret_tokens": None, "regret": None, "regret_unit": "tokens", "regret_curve": (),
        "regret_seconds": None, "regret_time_ratio": None, "final_weights": {},
        "warm_start_requests": 0, "time_draft_s": 0.0, "time_verify_s": 0.0,
        "time_evaluate_s": 0.0, "time_bookkeeping_s": 0.0,
    }  # fmt: skip
    return FinalStats(**{**empty, **fields})


def finished(rid: str, **fields: Any) -> RequestFinished:
    event = RequestFinished(request_id=rid, finish_reason="length", error=None, elapsed_s=1.0,
                            stats=None, ts=1_001.0)  # fmt: skip
    return dataclasses.replace(event, **fields)


def test_rounds_fold_into_a_trace_and_per_drafter_usage() -> None:
    agg = aggregator(in_flight=6)
    agg.apply(started("r1"))
    for i, (drafter, accepted) in enumerate([("a", 3), ("b", 0), ("a", 1), ("a", 2)]):
        agg.apply(round_event("r1", i, drafter, accepted))
    agg.apply(round_event("r1", 2, "a", 1))  # a duplicate after a resync: ignored
    trace = agg.active["r1"].public()
    assert trace["drafter_per_round"] == ["a", "b", "a", "a"]
    assert trace["accepted_per_round"] == [3, 0, 1, 2]
    assert trace["committed_per_round"] == [4, 1, 2, 3] and trace["rounds"] == 4
    assert trace["regret_curve"] == [[1, 0.1], [2, 0.2], [3, pytest.approx(0.3)]]
    assert trace["weights"] == {"a": 0.75, "b": 0.25} and trace["drafters"] == ["a", "b"]
    assert (trace["temperature"], trace["top_p"], trace["top_k"]) == (0.2, 0.9, 0)

    view = agg.overview()
    assert view["totals"]["rounds"] == 4 and view["totals"]["tokens"] == 10
    assert view["totals"]["mat"] == pytest.approx(10 / 4)
    usage = {d["id"]: d for d in view["per_drafter"]}
    assert usage["a"]["rounds"] == 3 and usage["a"]["share"] == pytest.approx(0.75)
    assert usage["a"]["mean_accepted"] == pytest.approx(2.0) and usage["a"]["mat"] == 3.0
    assert usage["b"]["mean_accepted"] == 0.0 and usage["b"]["recent_share"] == 0.25
    assert view["load"] == {
        "in_flight": 6, "running": 4, "queued": 2, "max_running": 4, "max_queue": 8,
        "live_streams": 0,
    }  # fmt: skip


def test_a_snapshot_is_not_changed_by_rounds_that_arrive_after_it() -> None:
    # /live builds its first snapshot at once but serializes it later, after an await.
    agg = aggregator()
    agg.apply(started("r1"))
    agg.apply(round_event("r1", 0, "a", 2))
    snapshot = agg.live_snapshot(["a", "b"])
    agg.apply(round_event("r1", 1, "b", 0))
    (trace,) = snapshot["active"]
    assert trace["rounds"] == 1 and trace["drafter_per_round"] == ["a"]
    assert trace["accepted_per_round"] == [2] and trace["committed_per_round"] == [3]
    assert trace["regret_curve"] == [] and trace["weights"] == {"a": 0.75, "b": 0.25}


def test_a_trace_says_whether_its_learner_continued_a_session() -> None:
    agg = aggregator()
    agg.apply(started("r1", warm_start_requests=2))
    agg.apply(started("r2"))  # a cold start
    assert agg.active["r1"].public()["warm_start_requests"] == 2
    assert agg.active["r2"].public()["warm_start_requests"] == 0
    agg.apply(finished("r1", stats=final_stats(warm_start_requests=2)))
    assert agg.history[0].public()["warm_start_requests"] == 2
    agg.apply(finished("r3"))  # ended before it started: unknown, not cold
    assert agg.history[0].public()["warm_start_requests"] is None


def test_under_the_time_loss_a_trace_carries_the_regret_in_seconds() -> None:
    agg = aggregator()
    timed = dataclasses.replace(round_event("r1", 0, "a", 1), regret=-0.002, regret_unit="s",
                                feedback_windows=1)
    agg.apply(timed)
    trace = agg.active["r1"].public()
    assert (trace["regret"], trace["regret_unit"]) == (-0.002, "s")
    assert trace["regret_curve"] == [[1, -0.002]]
    stats = final_stats(regret=0.004, regret_unit="s", regret_curve=(-0.002, 0.004),
                        regret_seconds=0.004, regret_time_ratio=1.01)
    agg.apply(finished("r1", stats=stats))
    done = agg.history[0].public()
    assert (done["regret"], done["regret_unit"]) == (0.004, "s")
    assert done["regret_curve"] == [[1, -0.002], [2, 0.004]]


def test_finished_stats_are_authoritative_and_history_is_newest_first() -> None:
    agg = aggregator()
    agg.apply(round_event("r1", 0, "a", 1))
    stats = final_stats(
        policy="normalhedge", completion_tokens=9, prompt_tokens=5, rounds=3,
        mean_acceptance_length=2.0, regret_tokens=0.5, regret=0.5, final_weights={"a": 1.0},
        drafter_choices=("a", "b", "a"), accepted_per_round=(1, 2, 3), regret_curve=(0.0, 0.5),
    )  # fmt: skip
    agg.apply(finished("r1", stats=stats))
    agg.apply(finished("r2", finish_reason=None, error="The request exceeded the deadline."))
    agg.apply(finished("r3", finish_reason=None))
    assert not agg.active
    r3, r2, r1 = (t.public() for t in agg.history)
    assert r1["status"] == "finished" and r1["drafter_per_round"] == ["a", "b", "a"]
    assert r1["committed_per_round"] == [2, 3, 4] and r1["regret_curve"] == [[1, 0.0], [2, 0.5]]
    assert r1["weights"] == {"a": 1.0} and r1["mean_acceptance_length"] == 2.0
    assert (r1["regret"], r1["regret_unit"]) == (0.5, "tokens")
    assert r2["status"] == "failed" and "deadline" in r2["error"]
    assert r3["status"] == "aborted"
    totals = agg.overview()["totals"]
    assert totals["requests_finished"] == 3 and totals["requests_failed"] == 1
    assert [r["request_id"] for r in agg.recent_requests(2)] == ["r3", "r2"]


def test_plain_steps_sit_between_rounds_and_stay_out_of_mat() -> None:
    agg = aggregator()
    agg.apply(started("r1"))
    # steps 0 and 3 speculative, 1 and 2 decoded plain by the speculation gate
    agg.apply(round_event("r1", 0, "a", 2))
    for i in (1, 2):
        agg.apply(round_event("r1", i, None, 0, plain=True))
    agg.apply(round_event("r1", 3, "b", 1))
    trace = agg.active["r1"].public()
    assert trace["drafter_per_round"] == ["a", None, None, "b"]
    assert trace["plain_per_round"] == [False, True, True, False]
    assert trace["plain_rounds"] == 2 and trace["rounds"] == 4
    view = agg.overview()
    assert view["totals"]["rounds"] == 2 and view["totals"]["plain_rounds"] == 2
    assert view["totals"]["tokens"] == 3 + 1 + 1 + 2
    assert view["totals"]["mat"] == pytest.approx((3 + 2) / 2)  # plain steps do not dilute it
    assert view["recent"]["mat"] == pytest.approx(2.5) and view["recent"]["plain_rounds"] == 2
    assert {d["id"]: d["rounds"] for d in view["per_drafter"]} == {"a": 1, "b": 1}

    # The final statistics list speculative rounds only; their plain steps go back in place.
    stats = final_stats(
        rounds=2, num_plain_steps=3, plain_step_indices=(1, 2, 4), drafter_choices=("a", "b"),
        accepted_per_round=(2, 1),
    )  # fmt: skip
    agg.apply(round_event("r1", 4, None, 0, plain=True))
    agg.apply(finished("r1", stats=stats))
    done = agg.history[0].public()
    assert done["drafter_per_round"] == ["a", None, None, "b", None]
    assert done["plain_per_round"] == [False, True, True, False, True]
    assert done["accepted_per_round"] == [2, 0, 0, 1, 0]
    assert done["committed_per_round"] == [3, 1, 1, 2, 1]
    assert done["plain_rounds"] == 3 and done["rounds"] == 5 and done["first_round"] == 0

    # A request whose round events were missed is rebuilt from its statistics alone.
    agg.apply(finished("r2", stats=dataclasses.replace(stats, plain_step_indices=(0, 1, 2))))
    late = agg.history[0].public()
    assert late["plain_per_round"] == [True, True, True, False, False]
    assert late["drafter_per_round"] == [None, None, None, "a", "b"]
    # Indices that cannot be interleaved leave the rounds' lists as they were.
    agg.apply(round_event("r3", 0, "a", 1))
    agg.apply(finished("r3", stats=dataclasses.replace(stats, plain_step_indices=(1, 9))))
    assert agg.history[0].public()["drafter_per_round"] == ["a"]


def test_state_is_bounded() -> None:
    clock = Clock()
    agg = aggregator(clock=clock)
    for i in range(HISTORY_SIZE + 50):
        agg.apply(finished(f"done-{i}"))
    assert (
        len(agg.history) == HISTORY_SIZE
        and agg.history[0].request_id == f"done-{HISTORY_SIZE + 49}"
    )
    for i in range(MAX_ACTIVE + 10):
        agg.apply(round_event(f"run-{i}", 0, "a", 1))
    assert len(agg.active) == MAX_ACTIVE and "run-0" not in agg.active
    for i in range(1, MAX_ROUNDS + 20):
        agg.apply(round_event(f"run-{MAX_ACTIVE + 9}", i, "b", 0))
    trace = agg.active[f"run-{MAX_ACTIVE + 9}"].public()
    assert len(trace["drafter_per_round"]) == MAX_ROUNDS and trace["rounds"] == MAX_ROUNDS + 20
    assert len(trace["plain_per_round"]) == len(trace["committed_per_round"]) == MAX_ROUNDS
    assert trace["first_round"] == 20
    # A trace whose request_finished was lost is evicted once it is older than the deadline.
    clock.now += agg.stale_after_s + 1
    agg.tick()
    assert not agg.active


def test_time_buckets_give_mat_tokens_per_s_and_queue_depth() -> None:
    clock = Clock()
    agg = aggregator(in_flight=7, clock=clock)
    for i in range(4):
        agg.apply(round_event("r", i, "a", 2))  # 3 tokens per round
    clock.now += BUCKET_S
    agg.tick()
    agg.tick()  # an idle bucket: MAT unknown, throughput zero
    series = agg.overview()["series"]
    assert series["mat"] == [3.0, None] and series["rounds"] == [4, 0]
    assert series["tokens_per_s"] == [12 / BUCKET_S, 0.0]
    assert series["queue_depth"] == [3, 3] and series["in_flight"] == [7, 7]


def test_listeners_get_every_event_and_a_lost_count_when_they_fall_behind() -> None:
    agg = aggregator()
    listener = agg.listen()
    agg.apply(started("r"))
    agg.apply(round_event("r", 0, "a", 1))
    agg.apply(EventsDropped(count=2, ts=1_000.0))  # the bus's: counted, and passed on
    events, lost = listener.drain()
    assert [e.to_json()["type"] for e in events] == ["request_started", "round", "dropped"]
    assert lost == 0 and agg.overview()["totals"]["events_dropped"] == 2
    for i in range(LISTENER_BUFFER + 5):
        agg.apply(round_event("r", i + 1, "a", 1))
    events, lost = listener.drain()
    assert len(events) == LISTENER_BUFFER and lost == 5
    agg.unlisten(listener)
    assert listener.closed and not agg.listeners


def test_json_has_no_nan() -> None:
    text = dumps({"x": float("nan"), "y": [float("inf"), 1.5], "z": "<b>"})
    assert json.loads(text) == {"x": None, "y": [None, 1.5], "z": "<b>"}


# ---- the app in process (no engine: it fails to load fast) ---------------------------------------


@pytest.fixture(scope="module")
def app_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    tmp = tmp_path_factory.mktemp("admin-app")
    settings = Settings(
        pool=tmp / "missing.json", database_url=f"sqlite:///{tmp / 'r.db'}",
        admin_key=ADMIN_KEY, api_keys=["client-key"], warmup=False,
    )  # fmt: skip
    with TestClient(create_app(settings)) as client:
        client.app.state.runner._thread.join(10)  # type: ignore[attr-defined]
        yield client


@pytest.mark.parametrize("path", DATA_ROUTES)
def test_data_routes_need_the_admin_key(app_client: TestClient, path: str) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer client-key"}):
        resp = app_client.get(path, headers=headers)
        assert resp.status_code == 401, (path, headers)
        assert resp.json()["error"]["code"] == "invalid_api_key"
        assert resp.headers["www-authenticate"] == "Bearer"


def test_admin_is_disabled_without_an_admin_key(tmp_path: Path) -> None:
    settings = Settings(
        pool=tmp_path / "missing.json", database_url=f"sqlite:///{tmp_path / 'r.db'}",
        warmup=False,
    )  # fmt: skip
    with TestClient(create_app(settings)) as client:
        # Nobody may read live data, so none is collected (no event bus subscriber at all).
        assert getattr(client.app.state, "admin_live", None) is None  # type: ignore[attr-defined]
        assert not client.app.state.events.has_subscribers  # type: ignore[attr-defined]
        for path in DATA_ROUTES:
            resp = client.get(path, headers=ADMIN)
            assert resp.status_code == 403 and resp.json()["error"]["code"] == "admin_disabled"
        assert client.get("/admin/").status_code == 200  # the page itself holds no data


def test_page_and_static_files_are_served_with_a_strict_policy(app_client: TestClient) -> None:
    redirect = app_client.get("/admin", follow_redirects=False)
    assert redirect.status_code == 307 and redirect.headers["location"] == "admin/"
    page = app_client.get("/admin/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
    assert 'src="static/app.js"' in page.text and "http" not in page.text.split("<body>")[0]
    script = app_client.get("/admin/static/app.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith(
        "text/javascript"
    )
    assert app_client.get("/admin/static/style.css").headers["content-type"].startswith("text/css")
    for bad in ["../gateway/app.py", "%2e%2e/pyproject.toml", "nothing.js", "index.py",
                "%00", "a%00.js", "%2e%2e", "x" * 5000 + ".js"]:  # a NUL, a name too long
        assert app_client.get(f"/admin/static/{bad}").status_code == 404, bad


def test_ui_loads_nothing_from_outside(app_client: TestClient) -> None:
    """Air-gapped: no CDN, no absolute URL in any shipped file, no innerHTML with data."""
    for path in sorted(admin_live.ADMIN_UI_DIR.iterdir()):
        if path.suffix not in {".html", ".js", ".css"}:
            continue
        text = path.read_text()
        assert "http://" not in text and "https://" not in text, path.name
        assert not UNSAFE_SINKS.search(text), (path.name, UNSAFE_SINKS.search(text))


def test_overview_and_requests_answer_with_the_key(app_client: TestClient) -> None:
    view = app_client.get("/admin/api/overview", headers=ADMIN)
    assert view.status_code == 200 and view.headers["cache-control"] == "no-store"
    body = view.json()
    assert body["ready"] is False and body["model"] is None
    assert body["load"]["max_running"] == 16 and body["series"]["bucket_s"] == 2.0
    history = app_client.get("/admin/api/requests", headers=ADMIN).json()
    # "database" when the registry's request log is wired, "memory" otherwise: empty either way
    assert (history["data"] == [] and history["count"] == 0
            and history["source"] in ("memory", "database"))
    assert app_client.get("/admin/api/requests?limit=0", headers=ADMIN).status_code == 400


def test_requests_come_from_the_database_when_request_logging_is_on(
    app_client: TestClient,
) -> None:
    from drafter_registry.db import make_session_factory
    from drafter_registry.request_log import RequestLogWriter
    from gateway.pool.request_log import request_log_record

    app = app_client.app
    writer = RequestLogWriter(make_session_factory(app.state.registry.engine))  # type: ignore[attr-defined]
    try:
        writer.write({"request_id": "logged-1", "policy": "normalhedge", "rounds": 3, "mat": 2.5,
                      "completion_tokens": 7, "drafter_choices": ["a", "b", "a"],
                      "latency_ms": 1500.0})  # fmt: skip
        assert writer.flush()
        app.state.request_log = writer  # type: ignore[attr-defined]
        # steps 1 and 3 decoded plain by the speculation gate (the row's `extra` keeps them)
        stats = final_stats(rounds=2, drafter_choices=("a", "b"), num_plain_steps=2,
                            plain_step_indices=(1, 3))  # fmt: skip
        event = finished("logged-2", stats=stats, ts=None)  # not stamped: logged as of now
        writer.write(request_log_record(event, model="m"))
        assert writer.flush()
        body = app_client.get("/admin/api/requests", headers=ADMIN).json()
    finally:
        app.state.request_log = None  # type: ignore[attr-defined]
        writer.close()
    assert body["source"] == "database" and body["count"] == 2
    gated, row = body["data"]
    assert row["request_id"] == "logged-1" and row["drafter_per_round"] == ["a", "b", "a"]
    assert row["mean_acceptance_length"] == 2.5 and row["elapsed_s"] == 1.5
    assert row["plain_rounds"] == 0 and row["rounds"] == 3
    assert gated["drafter_per_round"] == ["a", None, "b", None]
    assert gated["plain_per_round"] == [False, True, False, True]
    assert gated["rounds"] == 4 and gated["plain_rounds"] == 2 and gated["first_round"] == 0


# ---- the live stream against a real server -------------------------------------------------------


@pytest.fixture(scope="module")
def server(pool_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(pool_file, tmp_path_factory.mktemp("admin-api-server")) as proc:
        yield proc


class LiveReader:
    """Reads `/admin/api/live` on a thread, collecting (event name, data) pairs."""

    def __init__(self, base_url: str, headers: dict[str, str]) -> None:
        self.frames: list[tuple[str, Any]] = []
        self.status: int | None = None
        self.opened = threading.Event()
        self.ended = threading.Event()
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(base_url, headers), daemon=True)
        self._thread.start()

    def _run(self, base_url: str, headers: dict[str, str]) -> None:
        try:
            self._read(base_url, headers)
        except httpx.HTTPError as exc:  # the server went away mid-stream
            self.error = exc
        finally:
            self.ended.set()

    def _read(self, base_url: str, headers: dict[str, str]) -> None:
        with httpx.stream("GET", f"{base_url}/admin/api/live", headers=headers, timeout=60) as r:
            self.status = r.status_code
            self.opened.set()
            name = "message"
            for line in r.iter_lines():
                if self._stop.is_set():
                    return
                if line.startswith("event:"):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("data:"):
                    self.frames.append((name, json.loads(line.split(":", 1)[1])))

    def events(self) -> list[dict[str, Any]]:
        return [e for name, data in self.frames if name == "events" for e in data]

    def wait_for(self, predicate: Any, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate(self):
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out; frames: {self.frames[-3:]}")

    def stop(self) -> None:
        self._stop.set()


def test_live_stream_refuses_without_the_key(server: ServerProcess) -> None:
    resp = httpx.get(f"{server.base_url}/admin/api/live", timeout=10)
    assert resp.status_code == 401 and resp.json()["error"]["code"] == "invalid_api_key"


def test_live_stream_sends_a_snapshot_then_every_round(server: ServerProcess) -> None:
    reader = LiveReader(server.base_url, ADMIN)
    assert reader.opened.wait(10) and reader.status == 200
    reader.wait_for(lambda r: r.frames, 10)
    name, snapshot = reader.frames[0]
    assert name == "snapshot" and snapshot["type"] == "snapshot"
    assert snapshot["drafters"] == list(DRAFTER_IDS) and "active" in snapshot

    result = stream_chat(openai_client(server), "Hello there", max_tokens=24)
    spec = result["metrics"]["speculative_decoding"]
    reader.wait_for(lambda r: any(e["type"] == "request_finished" for e in r.events()))
    events = reader.events()
    (rid,) = {e["request_id"] for e in events if e["type"] == "request_started"}
    rounds = [e for e in events if e["type"] == "round" and e["request_id"] == rid]
    assert [e["round"] for e in rounds] == list(range(len(rounds)))
    assert [e["drafter"] for e in rounds] == spec["drafter_choices"]
    assert all(set(e["weights"]) == set(DRAFTER_IDS) for e in rounds)
    (done,) = [e for e in events if e["type"] == "request_finished"]
    assert done["request_id"] == rid and done["finish_reason"] == "length"
    assert done["stats"]["mean_acceptance_length"] == pytest.approx(spec["mean_acceptance_length"])
    reader.stop()

    # The request log is written off the hot path in batches (about 1 s): poll for the row.
    deadline = time.monotonic() + 15
    while True:
        history = httpx.get(f"{server.base_url}/admin/api/requests", headers=ADMIN).json()
        if ((history["data"] and history["data"][0]["request_id"] == rid)
            or time.monotonic() > deadline):
            break
        time.sleep(0.2)
    assert history["data"][0]["request_id"] == rid
    assert history["data"][0]["drafter_per_round"] == spec["drafter_choices"]
    view = httpx.get(f"{server.base_url}/admin/api/overview", headers=ADMIN).json()
    assert view["model"] == "tiny-target" and view["ready"] is True
    assert view["totals"]["requests_finished"] >= 1 and view["totals"]["rounds"] >= len(rounds)
    assert {d["id"] for d in view["per_drafter"]} <= set(DRAFTER_IDS)


def test_a_new_stream_sees_a_running_request_in_its_snapshot(server: ServerProcess) -> None:
    client = openai_client(server)
    worker = threading.Thread(target=stream_chat, args=(client, "Count slowly", 400), daemon=True)
    worker.start()
    deadline = time.monotonic() + 60
    snapshot: dict[str, Any] = {}
    # Until a snapshot catches it after its first round: one taken between its start and that
    # round (a prefill, long on a slow machine) shows it running with no round yet.
    while time.monotonic() < deadline and not any(a["rounds"] for a in snapshot.get("active", [])):
        with httpx.stream("GET", f"{server.base_url}/admin/api/live", headers=ADMIN) as r:
            for line in r.iter_lines():
                if line.startswith("data:"):
                    snapshot = json.loads(line.split(":", 1)[1])
                    break
        time.sleep(0.05)
    worker.join(120)
    (active,) = snapshot["active"]
    assert active["status"] == "running" and active["rounds"] >= 1
    assert len(active["drafter_per_round"]) == active["rounds"] - active["first_round"]


def test_shutdown_is_not_held_up_by_an_open_live_stream(pool_file: Path, tmp_path: Path) -> None:
    with running_server(pool_file, tmp_path / "srv", "--drain-timeout", "2") as proc:
        reader = LiveReader(proc.base_url, ADMIN)
        assert reader.opened.wait(10)
        proc.proc.send_signal(signal.SIGTERM)
        proc.proc.wait(60)
        # Held up, uvicorn would wait out its graceful-shutdown timeout (the drain timeout + 5 s),
        # then cancel the stream and say so: the log tells, whatever this machine's speed.
        assert "timeout graceful shutdown exceeded" not in proc.log(), proc.log()
        assert reader.ended.wait(30)
