"""The session benchmark's arithmetic: MAT pooled over rounds (first token excluded, as the
engine counts it), per position in each domain's session, and the identical-output check."""

from __future__ import annotations

from typing import Any

import pytest

from bench.learner.session_bench import METHODS, render, summarize


def row(method: str, domain: str, prompt: str, tokens: int, rounds: int, turn: int = 0,
        ids: list[int] | None = None) -> dict[str, Any]:
    return {"method": method, "domain": domain, "prompt": prompt, "turn": turn,
            "ids": ids or [1, 2],
            "tokens": tokens, "rounds": rounds, "wall_s": 1.0, "mat": 0.0,
            "warm_start_requests": 0, "chose_specialist": 0.5}


def test_mat_is_pooled_per_method_and_per_position_in_the_session() -> None:
    rows = []
    for method in METHODS:
        extra = 10 if method == "session" else 0
        rows += [row(method, "math", "m1", 31, 10), row(method, "code", "c1", 21, 10),
                 row(method, "math", "m2", 31 + extra, 10, turn=1),
                 row(method, "code", "c2", 11, 10, turn=1)]
    s = summarize(rows, per_domain=2)
    assert s["per-request"]["mat"] == pytest.approx((30 + 20 + 30 + 10) / 40)
    assert s["per-request"]["mat_by_turn"] == pytest.approx([2.5, 2.0])
    assert s["session"]["mat_by_turn"] == pytest.approx([2.5, 2.5])
    assert s["identical_outputs"] == 4 and s["prompts"] == 4
    meta = {"command": "x", "date": "d", "machine": "m", "pool": "p", "per_domain": 2,
            "max_new_tokens": 32}
    assert "| session | 2.500 | 1.111x |" in render(s, meta)


def test_a_differing_output_is_counted() -> None:
    rows = [row(m, "math", "m1", 3, 1) for m in METHODS]
    rows[1]["ids"] = [9, 9]
    assert summarize(rows, per_domain=1)["identical_outputs"] == 0
