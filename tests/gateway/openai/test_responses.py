"""Pure response pieces: byte-exact SSE frames, logprob shapes, spec-metrics aggregation."""

from __future__ import annotations

import numpy as np
import pytest

from bench.harness.tiny_pool import train_tokenizer
from core.stats import RequestStats, RoundStats, StatsSnapshot, TokenLogprob
from gateway.openai.framing import DONE_FRAME, spec_metrics, sse_frame
from gateway.openai.serving_chat import chat_logprob
from gateway.openai.text import TokenText


def test_sse_frame_is_exactly_one_data_line() -> None:
    assert sse_frame({"a": "é\nb"}) == 'data: {"a":"é\\nb"}\n\n'.encode()
    assert DONE_FRAME == b"data: [DONE]\n\n"


def test_chat_logprob_shape_and_minus_infinity() -> None:
    tok = train_tokenizer()
    entry = chat_logprob(TokenText(tok), TokenLogprob(65, float("-inf"), ((66, -0.5),)))
    assert entry["logprob"] == -9999.0
    assert entry["bytes"] == list(entry["token"].encode())
    assert entry["top_logprobs"][0]["logprob"] == -0.5


def stats(drafter: str, accepted: list[int]) -> StatsSnapshot:
    s = RequestStats(policy="normalhedge", drafter_ids=("a", "b"))
    s.weights = {"a": 0.25, "b": 0.75} if drafter == "a" else {"a": 0.75, "b": 0.25}
    for i, acc in enumerate(accepted):
        s.record_round(RoundStats(i, drafter, 4, acc, acc + 1, 0, 0, 0, 0))
    return s.snapshot()


def test_one_choice_reports_its_own_stats() -> None:
    spec = spec_metrics([stats("a", [2, 0])])
    assert spec is not None
    assert spec["num_spec_steps"] == 2 and spec["num_accepted_draft_tokens"] == 2
    assert spec["draft_acceptance_rate"] == 0.25 and spec["acceptance_by_position"] == [1, 1]
    assert "per_choice" not in spec


def test_n_choices_aggregate_with_stable_types() -> None:
    spec = spec_metrics([stats("a", [2, 0]), stats("b", [1])])
    assert spec is not None
    assert spec["num_spec_steps"] == 3 and spec["num_draft_tokens"] == 12
    assert spec["mean_acceptance_length"] == 6 / 3  # (3 + 1) + 2 tokens over 3 rounds
    assert spec["acceptance_by_position"] == [2, 1]
    assert spec["drafter_choices"] == ["a", "a", "b"]
    assert spec["final_weights"] == {"a": 0.5, "b": 0.5}
    assert len(spec["per_choice"]) == 2
    assert spec_metrics([None]) is None


def test_regret_is_null_where_no_drafter_was_scored_and_summed_where_it_was() -> None:
    """Issue 40, defect C: a fixed or bandit policy's regret is not computed (null on the wire,
    not 0.0); with n > 1 the choices that computed it are summed."""
    unscored = stats("a", [2, 0])
    assert spec_metrics([unscored])["regret_tokens"] is None  # type: ignore[index]
    assert spec_metrics([unscored, stats("b", [1])])["regret_tokens"] is None  # type: ignore[index]
    scored = RequestStats(policy="normalhedge", drafter_ids=("a", "b"))
    scored.record_window({"a": 3.0, "b": 1.0}, "b", 1)
    spec = spec_metrics([unscored, scored.snapshot()])
    assert spec is not None and spec["regret_tokens"] == 2.0


def test_regret_in_seconds_is_null_without_the_time_loss_and_summed_over_choices() -> None:
    from core.decoding.request import PLAIN_ARM

    plain = RequestStats(policy="normalhedge", drafter_ids=("a",))
    plain.record_window({"a": 2.0}, "a", 2)  # the length loss: no window costed
    assert spec_metrics([plain.snapshot()])["regret_seconds"] is None  # type: ignore[index]
    timed = RequestStats(policy="normalhedge", drafter_ids=("a",), time_loss=True)
    timed.record_time_window(("a", PLAIN_ARM), np.array([1.0, 0.0]), np.array([0.02, 0.0]),
                             np.array([1.0, 1.0]), 0.01)
    spec = spec_metrics([plain.snapshot(), timed.snapshot(), timed.snapshot()])
    assert spec is not None and spec["regret_seconds"] == pytest.approx(0.04)
    assert spec["per_choice"][1]["regret_seconds"] == pytest.approx(0.02)
    assert spec["per_choice"][1]["regret_tokens"] is None
    assert spec["regret_time_ratio"] == pytest.approx(1 + 0.02 / 0.01)
