"""gateway/metrics.py: what one round and one finished request add to the exported series."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from core.stats import RequestStats, RoundStats, StatsSnapshot
from gateway.metrics import GatewayMetrics


def round_stats(drafter: str | None, drafted: int, accepted: int) -> RoundStats:
    return RoundStats(round_index=0, drafter=drafter, drafted=drafted, accepted=accepted,
                      committed=accepted + 1, draft_s=0.0, verify_s=0.0, evaluate_s=0.0,
                      bookkeeping_s=0.0)  # fmt: skip


def request_stats(policy: str, *, rounds: int = 0, tokens: int = 0, regret: float | None = None,
                  warm: int = 0) -> StatsSnapshot:
    """A finished request's snapshot: `tokens` committed over `rounds` (MAT tokens / rounds)."""
    curve = [] if regret is None else [regret]
    return RequestStats(policy, completion_tokens=tokens, rounds=rounds, regret_curve=curve,
                        warm_start_requests=warm).snapshot()


def value(m: GatewayMetrics, name: str, **labels: str) -> float:
    got = m.registry.get_sample_value(name, labels)
    return 0.0 if got is None else got


def test_a_round_counts_drafts_tokens_and_accepted_positions_per_drafter() -> None:
    m = GatewayMetrics()
    m.observe_round(round_stats("alpha", drafted=6, accepted=3), policy="normalhedge")
    m.observe_round(round_stats("alpha", drafted=6, accepted=1), policy="normalhedge")
    m.observe_round(round_stats("beta", drafted=4, accepted=0), policy="fixed")
    alpha = {"drafter": "alpha", "kind": "eagle3"}  # kind defaults to eagle3
    beta = {"drafter": "beta", "kind": "eagle3"}
    assert value(m, "hedgespec_spec_decode_num_drafts_total", **alpha) == 2
    assert value(m, "hedgespec_spec_decode_num_draft_tokens_total", **alpha) == 12
    assert value(m, "hedgespec_spec_decode_num_accepted_tokens_total", **alpha) == 4
    per_pos = "hedgespec_spec_decode_num_accepted_tokens_per_pos_total"
    assert [value(m, per_pos, **alpha, position=str(p)) for p in range(4)] == [2, 1, 1, 0]
    assert value(m, "hedgespec_spec_decode_num_drafts_total", **beta) == 1
    assert value(m, per_pos, **beta, position="0") == 0
    selected = "hedgespec_drafter_selected_total"
    assert value(m, selected, **alpha, policy="normalhedge") == 2
    assert value(m, selected, **beta, policy="fixed") == 1


def test_a_model_free_drafters_rounds_carry_its_kind() -> None:
    m = GatewayMetrics()
    m.observe_round(round_stats("lookup", drafted=5, accepted=2), policy="auto", kind="ngram")
    m.observe_round(round_stats("alpha", drafted=6, accepted=1), policy="auto", kind="eagle3")
    assert value(m, "hedgespec_spec_decode_num_drafts_total", drafter="lookup", kind="ngram") == 1
    assert value(m, "hedgespec_spec_decode_num_accepted_tokens_total", drafter="lookup",
                 kind="ngram") == 2
    per_pos = "hedgespec_spec_decode_num_accepted_tokens_per_pos_total"
    assert value(m, per_pos, drafter="lookup", kind="ngram", position="1") == 1
    assert value(m, "hedgespec_drafter_selected_total", drafter="lookup", kind="ngram",
                 policy="auto") == 1
    text = m.render().decode()
    tokens = "hedgespec_spec_decode_num_draft_tokens_total"
    assert f'{tokens}{{drafter="lookup",kind="ngram"}} 5.0' in text
    assert f'{tokens}{{drafter="alpha",kind="eagle3"}} 6.0' in text


def test_a_plain_round_counts_under_none_and_selects_no_drafter() -> None:
    m = GatewayMetrics()
    m.observe_round(round_stats(None, drafted=0, accepted=0), policy="none")
    plain = {"drafter": "none", "kind": "none"}
    assert value(m, "hedgespec_spec_decode_num_drafts_total", **plain) == 1
    assert value(m, "hedgespec_spec_decode_num_draft_tokens_total", **plain) == 0
    assert value(m, "hedgespec_drafter_selected_total", **plain, policy="none") == 0


def test_a_plain_round_is_no_draft() -> None:
    """vLLM's num_drafts counts speculative steps; a plain round counts as a plain one only."""
    m = GatewayMetrics()
    plain = replace(round_stats(None, drafted=0, accepted=0), plain=True)
    m.observe_round(plain, policy="normalhedge")
    m.observe_round(plain, policy="normalhedge")
    assert value(m, "hedgespec_plain_rounds_total") == 2
    assert value(m, "hedgespec_spec_decode_num_drafts_total", drafter="none", kind="none") == 0


def test_request_stats_feed_the_acceptance_and_regret_histograms() -> None:
    m = GatewayMetrics()
    m.observe_request_stats(request_stats("normalhedge", rounds=5, tokens=11, regret=1.5))
    length = "hedgespec_request_mean_acceptance_length"
    assert value(m, f"{length}_count", policy="normalhedge") == 1
    assert value(m, f"{length}_sum", policy="normalhedge") == 2.2
    assert value(m, f"{length}_bucket", policy="normalhedge", le="2.0") == 0
    assert value(m, f"{length}_bucket", policy="normalhedge", le="2.5") == 1
    regret = "hedgespec_request_regret_tokens"
    assert value(m, f"{regret}_count", policy="normalhedge") == 1
    assert value(m, f"{regret}_sum", policy="normalhedge") == 1.5
    assert value(m, f"{regret}_bucket", policy="normalhedge", le="1.0") == 0
    assert value(m, f"{regret}_bucket", policy="normalhedge", le="2.0") == 1


def test_negative_regret_lands_at_zero_and_the_signed_sum_keeps_it() -> None:
    m = GatewayMetrics()
    for regret in (-3.0, 1.0):
        m.observe_request_stats(request_stats("normalhedge", rounds=5, tokens=10, regret=regret))
    regret = "hedgespec_request_regret_tokens"
    assert value(m, f"{regret}_bucket", policy="normalhedge", le="0.0") == 1
    assert value(m, f"{regret}_sum", policy="normalhedge") == 1.0
    assert value(m, f"{regret}_signed_sum", policy="normalhedge") == -2.0


def test_a_request_without_spec_steps_observes_no_acceptance_length() -> None:
    m = GatewayMetrics()
    m.observe_request_stats(request_stats("none", tokens=1))
    assert value(m, "hedgespec_request_mean_acceptance_length_count", policy="none") == 0
    assert value(m, "hedgespec_request_regret_tokens_count", policy="none") == 0


def test_warm_starts_count_requests_that_continued_a_session() -> None:
    m = GatewayMetrics()
    m.observe_request_stats(request_stats("normalhedge", warm=2))
    m.observe_request_stats(request_stats("normalhedge", warm=0))
    assert value(m, "hedgespec_learner_warm_starts_total", policy="normalhedge") == 1


def test_each_app_has_its_own_registry() -> None:
    a, b = GatewayMetrics(), GatewayMetrics()
    a.rejected.labels("overloaded").inc()
    assert value(a, "hedgespec_requests_rejected_total", reason="overloaded") == 1
    assert value(b, "hedgespec_requests_rejected_total", reason="overloaded") == 0


def test_render_is_prometheus_text_with_the_vllm_style_names() -> None:
    m = GatewayMetrics()
    m.observe_round(round_stats("alpha", drafted=2, accepted=2), policy="auto")
    text = m.render().decode()
    assert ('hedgespec_spec_decode_num_accepted_tokens_total{drafter="alpha",kind="eagle3"} 2.0'
            in text)
    assert "# TYPE hedgespec_num_requests_running gauge" in text
    assert "process_cpu_seconds_total" in text  # the process collector is registered


def test_a_step_observes_the_rows_its_verification_pass_held() -> None:
    from dataclasses import replace

    m = GatewayMetrics()
    rows = [replace(round_stats("alpha", 4, 1), batch_rows=3) for _ in range(3)]
    m.observe_step(rows)
    m.observe_step([round_stats(None, 0, 0)])  # a round-robin or lone round: one row
    m.observe_step([])  # a prefill-only step verified nothing
    assert value(m, "hedgespec_batch_rows_count") == 2
    assert value(m, "hedgespec_batch_rows_sum") == 4
    assert value(m, "hedgespec_batch_rows_bucket", le="2.0") == 1


def test_the_head_setting_gauge_marks_the_current_setting_only() -> None:
    m = GatewayMetrics()
    m.observe_head_setting("all")
    m.observe_head_setting("visited")
    got = {s: value(m, "hedgespec_verify_head_setting", setting=s) for s in ("visited", "all")}
    assert got == {"visited": 1.0, "all": 0.0}


def test_a_policy_that_scores_no_drafter_has_no_regret_observed() -> None:
    """Issue 40, defect C: fixed, router, the bandits and none evaluate no drafter
    counterfactually; their regret is not computed, and 0.0 would read as "no regret"."""
    m = GatewayMetrics()
    m.observe_request_stats(request_stats("fixed", rounds=5, tokens=12))
    assert request_stats("fixed", rounds=5, tokens=12).regret_tokens is None
    assert value(m, "hedgespec_request_mean_acceptance_length_count", policy="fixed") == 1
    assert value(m, "hedgespec_request_regret_tokens_count", policy="fixed") == 0


def test_a_request_decoded_fully_plain_is_in_the_acceptance_histogram_at_one() -> None:
    """Issue 40, defect H: a request whose every step ran plain committed one token a pass."""
    m = GatewayMetrics()
    stats = RequestStats("normalhedge", completion_tokens=9, plain_rounds=8,
                         plain_tokens=8, prefill_tokens=1).snapshot()
    m.observe_request_stats(stats)
    length = "hedgespec_request_mean_acceptance_length"
    assert value(m, f"{length}_count", policy="normalhedge") == 1
    assert value(m, f"{length}_sum", policy="normalhedge") == 1.0


def test_regret_in_seconds_is_summed_where_the_time_loss_costed_windows() -> None:
    """The learner's expected net seconds under its weights less the best arm's, summed per
    policy; its time-per-token ratio in a histogram; no token regret under the time loss."""
    from core.decoding.request import PLAIN_ARM

    stats = RequestStats("normalhedge", time_loss=True)
    arms = ("a", PLAIN_ARM)
    stats.record_time_window(arms, np.array([0.5, 0.5]), np.array([-0.01, 0.004]),
                             np.array([2.0, 1.0]), 0.006)
    stats.record_time_window(arms, np.array([1.0, 0.0]), np.array([-0.002, 0.004]),
                             np.array([1.5, 1.0]), 0.006)
    stats.record_window({"a": 2.0}, "a", 2)
    snap = stats.snapshot()
    assert snap.regret_seconds == pytest.approx(-0.003 - 0.002 + 0.012)
    assert snap.regret_seconds_curve == pytest.approx((-0.003 + 0.01, 0.007))
    assert snap.regret_tokens is None  # the token figure is the acceptance losses' only
    assert snap.regret_time_ratio == pytest.approx(1 + 0.007 / (0.006 * (1.5 + 1.5)))
    m = GatewayMetrics()
    m.observe_request_stats(snap)
    assert value(m, "hedgespec_request_regret_seconds_signed_sum",
                 policy="normalhedge") == pytest.approx(0.007)
    assert value(m, "hedgespec_request_regret_time_ratio_count", policy="normalhedge") == 1
    assert value(m, "hedgespec_request_regret_tokens_count", policy="normalhedge") == 0
    assert request_stats("normalhedge", rounds=2, tokens=4, regret=1.0).regret_seconds is None
