"""The reliability suites' own verdicts (tests/reliability/judge.py) refuse what they must."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.reliability.judge import (
    assert_clean_log,
    assert_openai_error,
    assert_storm_left_nothing,
)

GOOD = {"error": {"message": "m", "type": "invalid_request_error", "param": None, "code": "x"}}


def _with(**error: object) -> bytes:
    return json.dumps({"error": {**GOOD["error"], **error}}).encode()


def test_a_well_formed_error_passes_and_is_returned() -> None:
    assert assert_openai_error(json.dumps(GOOD).encode()) == GOOD["error"]


@pytest.mark.parametrize("body", [
    b"not json", b"[]", json.dumps({"detail": "x"}).encode(),
    json.dumps({**GOOD, "extra": 1}).encode(),
    json.dumps({"error": {"message": "m", "type": "t", "code": None}}).encode(),  # no param
    _with(message=""), _with(message=None), _with(type=3), _with(param=1), _with(code=404),
])  # fmt: skip
def test_a_malformed_error_is_refused(body: bytes) -> None:
    with pytest.raises(AssertionError):
        assert_openai_error(body)


@pytest.mark.parametrize("line", [
    "Traceback (most recent call last):",
    "ERROR:    Exception in ASGI application",
    "2026-01-01 00:00:00,000 ERROR gateway.runner: engine step failed",
])  # fmt: skip
def test_a_log_with_a_bug_mark_is_refused(line: str) -> None:
    assert_clean_log("2026-01-01 00:00:00,000 INFO gateway.app: ready\n")
    with pytest.raises(AssertionError):
        assert_clean_log(f"ok\n{line}\nok\n")


def _storm(**last_round: Any) -> dict[str, Any]:
    quiet = {"in_flight": 0, "running": 0, "waiting": 0, "queued": 0, "active_traces": 0,
             "live_streams": 0, "threads": 20, "fds": 30}  # fmt: skip
    return {"before": {"threads": 20, "fds": 30}, "rounds": [quiet, {**quiet, **last_round}]}


def test_a_quiet_storm_passes() -> None:
    assert_storm_left_nothing(_storm(threads=24, fds=32))  # within the slack


@pytest.mark.parametrize("left", [
    {"in_flight": 1}, {"running": 1}, {"waiting": 2}, {"queued": 1}, {"active_traces": 1},
    {"live_streams": 1}, {"in_flight": None}, {"threads": 25}, {"fds": 33},
])  # fmt: skip
def test_a_storm_that_left_something_is_refused(left: dict[str, Any]) -> None:
    with pytest.raises(AssertionError):
        assert_storm_left_nothing(_storm(**left))


def test_a_storm_without_rounds_is_refused() -> None:
    with pytest.raises(AssertionError):
        assert_storm_left_nothing({"before": {"threads": 1, "fds": 1}, "rounds": []})
