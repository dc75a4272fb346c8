"""Admission control, deadlines and graceful shutdown on real server processes."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from bench.harness.server import ServerProcess
from tests.gateway.sse import json_frames, read_frames

pytestmark = pytest.mark.timeout(180)
HELLO = [{"role": "user", "content": "Write a long story."}]
LONG = {"model": "tiny-target", "messages": HELLO, "max_tokens": 400, "ignore_eos": True}


@pytest.fixture(scope="module")
def tight(pool_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One running slot, no waiting room, a 1.5 s deadline."""
    proc = ServerProcess.start(
        pool_file, tmp_path_factory.mktemp("tight"),
        "--max-running", "1", "--max-queue", "0", "--request-timeout", "1.5",
    )  # fmt: skip
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def full(pool_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One running slot, no waiting room and the default deadline: a request holds the slot
    until it ends or its client hangs up, however long the test takes to send the next."""
    proc = ServerProcess.start(
        pool_file, tmp_path_factory.mktemp("full"),
        "--max-running", "1", "--max-queue", "0", "--no-warmup",
    )  # fmt: skip
    yield proc
    proc.stop()


def _wait_idle(base_url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if httpx.get(f"{base_url}/ready").json()["in_flight"] == 0:
            return
        time.sleep(0.05)
    raise AssertionError("requests still in flight")


def test_full_queue_answers_429_with_retry_after(full: ServerProcess) -> None:
    # The occupant streams until the checks are done, then hangs up (the server aborts it): its
    # slot stays taken for as long as the checks take, on any machine.
    started, checked = threading.Event(), threading.Event()

    def occupy() -> None:
        with httpx.stream(
            "POST",
            f"{full.base_url}/v1/chat/completions",
            json={**LONG, "stream": True},
            timeout=60,
        ) as r:
            for _ in r.iter_lines():
                started.set()
                if checked.is_set():
                    return

    worker = threading.Thread(target=occupy)
    worker.start()
    try:
        assert started.wait(60)
        resp = httpx.post(
            f"{full.base_url}/v1/chat/completions", json={**LONG, "max_tokens": 2}, timeout=30
        )
        assert resp.status_code == 429 and resp.headers["retry-after"]
        assert resp.json()["error"]["code"] == "overloaded"
        client = openai.OpenAI(base_url=f"{full.base_url}/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="tiny-target", messages=HELLO, max_tokens=2)
    finally:
        checked.set()
        worker.join(60)
    _wait_idle(full.base_url)


def test_deadline_non_streaming_is_408(tight: ServerProcess) -> None:
    _wait_idle(tight.base_url)
    resp = httpx.post(f"{tight.base_url}/v1/chat/completions", json=LONG, timeout=30)
    assert resp.status_code == 408
    assert resp.json()["error"]["code"] == "request_timeout"
    _wait_idle(tight.base_url)


def test_deadline_mid_stream_is_an_in_band_error_then_done(tight: ServerProcess) -> None:
    _wait_idle(tight.base_url)
    with httpx.stream(
        "POST", f"{tight.base_url}/v1/chat/completions", json={**LONG, "stream": True}, timeout=30
    ) as r:
        assert r.status_code == 200
        chunks = json_frames(read_frames(r))
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1] == {
        "error": {
            "message": "The request exceeded the server's deadline of 1.5 s.",
            "type": "timeout_error", "param": None, "code": "request_timeout",
        }
    }  # fmt: skip
    client = openai.OpenAI(base_url=f"{tight.base_url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.APIError, match="deadline"):
        for _ in client.chat.completions.create(
            model="tiny-target", messages=HELLO, max_tokens=400, stream=True,
            extra_body={"ignore_eos": True},
        ):  # fmt: skip
            pass
    _wait_idle(tight.base_url)


def test_graceful_shutdown_drains_in_flight_stream(pool_file: Path, tmp_path: Path) -> None:
    proc = ServerProcess.start(pool_file, tmp_path / "drain")
    first = threading.Event()
    frames: list[str] = []

    def consume() -> None:
        body = {**LONG, "max_tokens": 200, "stream": True}
        with httpx.stream(
            "POST", f"{proc.base_url}/v1/chat/completions", json=body, timeout=60
        ) as r:
            for line in r.iter_lines():
                if line:
                    frames.append(line.removeprefix("data: "))
                    first.set()

    reader = threading.Thread(target=consume)
    reader.start()
    try:
        assert first.wait(20)
        # SIGTERM while streaming. uvicorn re-raises the signal after a clean shutdown, so the
        # exit status is -SIGTERM; the log says whether the shutdown was graceful.
        assert proc.stop(timeout_s=60) in (0, -15)
    finally:
        reader.join(60)
        proc.stop()
    assert frames[-1] == "[DONE]"
    assert '"finish_reason":"length"' in frames[-2]
    assert "Application shutdown complete" in proc.log()
