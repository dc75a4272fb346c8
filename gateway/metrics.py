"""Prometheus metrics, one `CollectorRegistry` per app (tests and replicas never share state).

Counters mirror vLLM's speculative-decoding semantics (`vllm/v1/spec_decode/metrics.py`) with
a `drafter` label, so the usual PromQL carries over per drafter:

  acceptance rate        rate(hedgespec_spec_decode_num_accepted_tokens_total[5m])
                         / rate(hedgespec_spec_decode_num_draft_tokens_total[5m])
  mean acceptance length 1 + rate(..._num_accepted_tokens_total) / rate(..._num_drafts_total)
  per-position rate      rate(..._num_accepted_tokens_per_pos_total) / rate(..._num_drafts_total)

Plain rounds (policy `none`) are counted under `drafter="none"` with zero draft tokens.

Every per-drafter series also carries `kind`: `eagle3`, or a model-free drafter's kind
(`ngram`, `suffix`), `none` for plain rounds, so `sum by (kind)` compares the families.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from core.api import RoundStats, StatsSnapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20)
LENGTH_BUCKETS = (1, 1.5, 2, 2.5, 3, 3.5, 4, 5, 6, 8, 10)
# Regret can be negative (a learner that switches drafters can beat the best single one), but
# Prometheus drops `_sum` from a histogram with negative buckets: the histogram observes
# max(0, regret) (its le="0" bucket counts the requests at or below zero) and a gauge keeps the
# signed sum, so mean regret = signed sum / count.
HEAD_SETTINGS = ("visited", "all")  # Engine.head_setting() (core/batching/head_rows.py)
REGRET_BUCKETS = (0, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500)
RATIO_BUCKETS = (0.9, 1.0, 1.02, 1.05, 1.1, 1.2, 1.5, 2, 3)


class GatewayMetrics:
    """Every metric the gateway exports; methods are safe to call from any thread."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self._round_metrics()
        self._learner_metrics()
        self._request_metrics()
        self._queue_metrics()

    def _round_metrics(self) -> None:
        """Per-round speculative-decoding counters, labelled by drafter (vLLM's semantics)."""
        r, d = self.registry, ["drafter", "kind"]
        self.num_drafts = Counter(
            "hedgespec_spec_decode_num_drafts",
            "Speculative rounds (one target pass each).",
            d,
            registry=r,
        )
        self.num_draft_tokens = Counter(
            "hedgespec_spec_decode_num_draft_tokens",
            "Draft tokens sent to verification.",
            d,
            registry=r,
        )
        self.num_accepted_tokens = Counter(
            "hedgespec_spec_decode_num_accepted_tokens", "Draft tokens accepted.", d, registry=r
        )
        self.accepted_per_pos = Counter(
            "hedgespec_spec_decode_num_accepted_tokens_per_pos",
            "Accepted draft tokens by depth (position 0 = first draft token).",
            ["drafter", "kind", "position"],
            registry=r,
        )
        self.drafter_selected = Counter(
            "hedgespec_drafter_selected",
            "Rounds in which a policy selected a drafter.",
            ["drafter", "kind", "policy"],
            registry=r,
        )

    def _learner_metrics(self) -> None:
        """Per-request outcomes of the drafter-selection policy, labelled by policy."""
        r = self.registry
        self.acceptance_length = Histogram(
            "hedgespec_request_mean_acceptance_length",
            "Per-request mean tokens committed per target pass.",
            ["policy"],
            buckets=LENGTH_BUCKETS,
            registry=r,
        )
        self.warm_starts = Counter(
            "hedgespec_learner_warm_starts",
            "Requests whose learner continued their session's (hedgespec.session).",
            ["policy"],
            registry=r,
        )
        self.regret = Histogram(
            "hedgespec_request_regret_tokens",
            "Per-request regret in tokens against the best single drafter in hindsight, under "
            "the acceptance losses (the time loss's regret is in seconds).",
            ["policy"],
            buckets=REGRET_BUCKETS,
            registry=r,
        )
        self.regret_signed = Gauge(
            "hedgespec_request_regret_tokens_signed_sum",
            "Sum of per-request regret in tokens, negative regret included.",
            ["policy"],
            registry=r,
        )
        self.regret_seconds = Gauge(
            "hedgespec_request_regret_seconds_signed_sum",
            "Sum of per-request regret in seconds under the time loss, as the learner "
            "minimises it: its expected net seconds under its weights less the best single "
            "arm's (plain decoding included) in hindsight; negative regret included.",
            ["policy"],
            registry=r,
        )
        self.regret_ratio = Histogram(
            "hedgespec_request_regret_time_ratio",
            "Per-request time per token of the learner's weights over the best single arm's "
            "in hindsight, under the time loss (1 = no regret).",
            ["policy"],
            buckets=RATIO_BUCKETS,
            registry=r,
        )

    def _request_metrics(self) -> None:
        r = self.registry
        self.requests = Counter(
            "hedgespec_requests",
            "Finished HTTP generation requests.",
            ["endpoint", "finish_reason"],
            registry=r,
        )
        self.rejected = Counter(
            "hedgespec_requests_rejected",
            "Requests refused before generation.",
            ["reason"],
            registry=r,
        )
        self.prompt_tokens = Counter(
            "hedgespec_prompt_tokens", "Prompt tokens processed.", registry=r
        )
        self.generation_tokens = Counter(
            "hedgespec_generation_tokens", "Completion tokens generated.", registry=r
        )
        self.latency = Histogram(
            "hedgespec_e2e_request_latency_seconds",
            "Request latency as the client sees it.",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "hedgespec_time_to_first_token_seconds",
            "Time from request arrival to first token.",
            ["endpoint"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )

    def _queue_metrics(self) -> None:
        """Admission: time waiting for a running slot, and how many run and wait now."""
        r = self.registry
        self.queue_time = Histogram(
            "hedgespec_request_queue_time_seconds",
            "Time waiting for a running slot.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.running = Gauge(
            "hedgespec_num_requests_running", "Requests interleaved in the engine.", registry=r
        )
        self.waiting = Gauge(
            "hedgespec_num_requests_waiting", "Requests waiting for a running slot.", registry=r
        )
        self.head_setting = Gauge(
            "hedgespec_verify_head_setting",
            "1 on the rows verification's LM head computes up front: 'visited' (the root, then "
            "each node the walk reaches; a CPU's default) or 'all' (every node; an "
            "accelerator's), core/batching/head_rows.py.",
            ["setting"],
            registry=r,
        )
        self.deterministic = Gauge(
            "hedgespec_deterministic_numerics",
            "1 where the engine verifies with canonical numerics (--deterministic: a token's "
            "logits bit-identical whatever tree, batch and padding verify it), 0 where it uses "
            "the library's kernels (off, or auto where they cannot run: the server logs why).",
            registry=r,
        )
        self.plain_rounds = Counter(
            "hedgespec_plain_rounds_total",
            "Plain rounds: nothing drafted (policy none, the time loss chose plain decoding, a "
            "cost-model probe, or no drafter had a guess).",
            registry=r,
        )
        self.batch_rows = Histogram(
            "hedgespec_batch_rows",
            "Requests whose trees one engine step verified in one target pass (rows per step).",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
            registry=r,
        )

    def observe_head_setting(self, setting: str) -> None:
        """1 on the LM-head setting verification uses now, 0 on the others."""
        _one_hot(self.head_setting, HEAD_SETTINGS, setting)

    def observe_step(self, outputs: Sequence[RoundStats]) -> None:
        """One engine step's rounds: the rows its verification pass held (none: a prefill-only
        step, not observed)."""
        if outputs:
            self.batch_rows.observe(max(rs.batch_rows for rs in outputs))

    def observe_round(self, rs: RoundStats, *, policy: str, kind: str | None = None) -> None:
        """`kind`: the drafter's (`eagle3` when not given); plain rounds are kind `none`."""
        if rs.plain:  # not a speculative round (vLLM's num_drafts counts those)
            self.plain_rounds.inc()
            return
        drafter = rs.drafter or "none"
        kind = "none" if rs.drafter is None else kind or "eagle3"
        self.num_drafts.labels(drafter, kind).inc()
        self.num_draft_tokens.labels(drafter, kind).inc(rs.drafted)
        self.num_accepted_tokens.labels(drafter, kind).inc(rs.accepted)
        for position in range(rs.accepted):
            self.accepted_per_pos.labels(drafter, kind, str(position)).inc()
        if rs.drafter is not None:
            self.drafter_selected.labels(drafter, kind, policy).inc()

    def observe_request_stats(self, stats: StatsSnapshot) -> None:
        policy = stats.policy
        if stats.rounds:
            self.acceptance_length.labels(policy).observe(stats.mean_acceptance_length)
        elif stats.plain_rounds:  # decoded fully plain: one token per target pass
            self.acceptance_length.labels(policy).observe(1.0)
        regret = stats.regret_tokens
        if regret is not None:  # not computed for policies that score no drafter
            self.regret.labels(policy).observe(max(0.0, regret))
            self.regret_signed.labels(policy).inc(regret)
        if stats.regret_seconds is not None:
            self.regret_seconds.labels(policy).inc(stats.regret_seconds)
        if stats.regret_time_ratio is not None:
            self.regret_ratio.labels(policy).observe(stats.regret_time_ratio)
        if stats.warm_start_requests:
            self.warm_starts.labels(policy).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _one_hot(gauge: Gauge, names: Sequence[str], setting: str) -> None:
    for name in names:
        gauge.labels(name).set(float(name == setting))
