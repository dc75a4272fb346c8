"""The reliability suites' own verdicts: what counts as a well-formed OpenAI error, a clean
server log and a storm that left nothing behind.

`bench/reliability/reliability_bench.py` drives the same scenarios and writes its own report
with its own checks; the tests do not borrow them, so a benchmark that grew lenient cannot make
a test pass (test and benchmark are two judges, not one). Each function here raises
`AssertionError` with the reason; tests/reliability/test_judge.py shows each one refusing what it
must refuse.
"""

from __future__ import annotations

import json
from typing import Any

ERROR_KEYS = frozenset({"message", "type", "param", "code"})


def assert_openai_error(body: bytes, where: str = "") -> dict[str, Any]:
    """`body` is exactly `{"error": {message, type, param, code}}`: a non-empty message, a
    string type, and a param and code that are strings or null. Returns the error object."""
    try:
        doc = json.loads(body)
    except ValueError:
        raise AssertionError(f"{where}: body is not JSON: {body[:200]!r}") from None
    assert isinstance(doc, dict) and set(doc) == {"error"}, f"{where}: not an error doc: {doc!r}"
    err = doc["error"]
    assert isinstance(err, dict) and set(err) == ERROR_KEYS, f"{where}: error is {err!r}"
    assert isinstance(err["message"], str) and err["message"], f"{where}: message {err!r}"
    assert isinstance(err["type"], str) and err["type"], f"{where}: type {err!r}"
    for key in ("param", "code"):
        assert err[key] is None or isinstance(err[key], str), f"{where}: {key} {err[key]!r}"
    return err


# What in a server log means a bug.
BUG_MARKS = ("Traceback (most recent call last)", "Exception in ASGI application",
             "unhandled error", "engine step failed")  # fmt: skip


def assert_clean_log(log: str) -> None:
    """No traceback, no unhandled ASGI error, no failed engine step anywhere in the log."""
    bad = [line for line in log.splitlines() if any(mark in line for mark in BUG_MARKS)]
    assert not bad, "server log:\n" + "\n".join(bad[:20])


LEFT_BEHIND = ("in_flight", "running", "waiting", "queued", "active_traces", "live_streams")
THREAD_SLACK, FD_SLACK = 4, 2  # idle pool workers come and go; a probe's socket may be closing


def assert_storm_left_nothing(storm: dict[str, Any]) -> None:
    """After each round of a disconnect storm: every gauge in LEFT_BEHIND is zero (a missing
    gauge is a failure, not a zero), and threads and fds are at their warmed-up level."""
    before, rounds = storm["before"], storm["rounds"]
    assert rounds, "the storm ran no rounds"
    for i, r in enumerate(rounds, 1):
        for gauge in LEFT_BEHIND:
            assert r.get(gauge) == 0, f"round {i}: {gauge} = {r.get(gauge)!r} after the storm"
        assert r["threads"] <= before["threads"] + THREAD_SLACK, (
            i, r["threads"], before, r.get("thread_names"))
        assert r["fds"] <= before["fds"] + FD_SLACK, (i, r["fds"], before)
