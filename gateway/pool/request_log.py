"""A finished request's `request_logs` record, from its `request_finished` event.

The statistics part of the record is mapped from the event's `FinalStats` by one table,
`LOGGED_STATS` (record key <- `FinalStats` field); the fields it leaves out are listed in
`NOT_LOGGED` with why, and tests/gateway/live/test_stats_carried.py fails on a `FinalStats` field
that is in neither. A record key that is a `request_logs` column (`drafter_registry.request_log
.COLUMNS`) fills that column; the others land in the row's `extra` JSON, so logging another
statistic needs no migration.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from gateway.live.event_types import RequestFinished

# Record key (a column, or a key of `extra`) <- the `FinalStats` field it stores, in the order
# the record (and so `extra`) lists them.
LOGGED_STATS: Mapping[str, str] = MappingProxyType({
    "policy": "policy",
    "prompt_tokens": "prompt_tokens",
    "completion_tokens": "completion_tokens",
    "rounds": "rounds",
    "mat": "mean_acceptance_length",
    "regret_tokens": "regret_tokens",
    "regret_seconds": "regret_seconds",  # extra, as the rest
    "regret_time_ratio": "regret_time_ratio",
    "drafter_choices": "drafter_choices",
    "num_plain_steps": "num_plain_steps",
    "plain_step_indices": "plain_step_indices",  # between the rounds
})
# Record keys left out when empty, as when None (the others store an empty list).
OMITTED_WHEN_EMPTY = frozenset({"plain_step_indices"})

# The `FinalStats` fields a logged row does not keep, and why (the live feed carries them all).
_PER_ROUND = "per-round detail; a row keeps the request's totals"
_PHASES = "the phase times; a row keeps latency_ms"
NOT_LOGGED: Mapping[str, str] = MappingProxyType({
    "target_forwards": "rounds + num_plain_steps + the prefill pass",
    "num_draft_tokens": "Prometheus totals it per drafter (spec_decode_num_draft_tokens)",
    "num_accepted_draft_tokens": "Prometheus totals it per drafter",
    "acceptance_by_position": "Prometheus totals it per drafter and position",
    "accepted_per_round": _PER_ROUND,
    "regret": "regret_tokens or regret_seconds, whichever the learner minimised "
              "(drafter_registry.request_log.logged_regret reads it back)",
    "regret_unit": "which of regret_tokens and regret_seconds is set says it",
    "regret_curve": _PER_ROUND,
    "final_weights": "the learner's state, not an outcome of the request",
    "warm_start_requests": "Prometheus counts warm starts (learner_warm_starts)",
    "time_draft_s": _PHASES,
    "time_verify_s": _PHASES,
    "time_evaluate_s": _PHASES,
    "time_bookkeeping_s": _PHASES,
})


def request_log_record(event: RequestFinished, *, model: str | None) -> dict[str, Any]:
    """A `request_logs` record (`RequestLogWriter.write`'s input) from a finished request.

    Keys that are not columns land in the row's `extra` JSON. Without statistics (a request
    that ended before its first round) the token counts are left to the writer's zeros."""
    record: dict[str, Any] = {
        "request_id": event.request_id,
        "model": model,
        "status": "error" if event.error else "ok",
        "latency_ms": event.elapsed_s * 1000,
        "finish_reason": event.finish_reason,
        "error": event.error,
    }
    if event.stats is not None:
        for key, source in LOGGED_STATS.items():
            value = getattr(event.stats, source)
            if isinstance(value, tuple):
                value = list(value) or (None if key in OMITTED_WHEN_EMPTY else [])
            record[key] = value
    if event.ts is not None:
        record["created_at"] = event.ts - event.elapsed_s
    if event.prompt is not None:
        record["prompt"] = event.prompt  # dropped by the writer unless log_prompts is on
    return {k: v for k, v in record.items() if v is not None}
