"""The live feed's vocabulary: one frozen dataclass per event type, read by attribute.

The engine worker builds these from the engine's statistics snapshots (`gateway.live.events`),
the bus stamps `seq` and `ts`, and every consumer (the aggregator, request traces, the request
log) reads typed fields, so a renamed or missing field fails mypy instead of reading as None.
`to_json()` is the wire form the admin page's script reads from `/admin/api/live`; it keeps the
keys, their order and their values of the dicts the feed carried before it was typed.

Wire forms (`seq` and `ts` appear once the bus has stamped an event):

  request_started   type, request_id, policy, drafters, drafter_kinds, prompt_tokens,
                    max_tokens, temperature, top_p, top_k, warm_start_requests, seq, ts
  round             type, request_id, round, policy, drafter, drafted, accepted, committed,
                    completion_tokens, mean_acceptance_length, tokens_per_s, weights,
                    batch_rows, plain, regret, regret_unit, feedback_windows, seq, ts
  request_finished  type, request_id, finish_reason, error, elapsed_s, stats (`FinalStats`, or
                    null when the request was aborted), prompt (only with log_prompts), seq, ts
  dropped           type, count, ts (a subscriber lost `count` events before the next one)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


def _stamp(seq: int | None, ts: float | None) -> dict[str, Any]:
    """The bus's stamp as the wire carries it: absent until the event was published."""
    out: dict[str, Any] = {}
    if seq is not None:
        out["seq"] = seq
    if ts is not None:
        out["ts"] = ts
    return out


@dataclass(frozen=True)
class RequestStarted:
    """Published before a request's first round."""

    request_id: str
    policy: str
    drafters: tuple[str, ...]
    drafter_kinds: Mapping[str, str]  # drafter id -> kind (`eagle3`, `ngram`, ...)
    prompt_tokens: int
    max_tokens: int
    temperature: float  # what it samples with, the served defaults included
    top_p: float
    top_k: int
    warm_start_requests: int  # > 0: the learner continued a session's earlier requests
    seq: int | None = None
    ts: float | None = None  # unix seconds

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "request_started",
            "request_id": self.request_id,
            "policy": self.policy,
            "drafters": list(self.drafters),
            "drafter_kinds": dict(self.drafter_kinds),
            "prompt_tokens": self.prompt_tokens,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "warm_start_requests": self.warm_start_requests,
            **_stamp(self.seq, self.ts),
        }


@dataclass(frozen=True)
class RoundCompleted:
    """One round of one request: speculative, or plain (`plain`; core/__init__.py defines
    round, step and pass)."""

    request_id: str
    round: int  # the round's index among the request's rounds, plain ones included
    policy: str
    drafter: str | None  # None for a plain round
    drafted: int
    accepted: int
    committed: int
    completion_tokens: int
    mean_acceptance_length: float
    tokens_per_s: float
    weights: Mapping[str, float]
    batch_rows: int  # requests verified in the same target pass
    plain: bool  # nothing drafted (core.stats.RoundStats.plain)
    # The latest point of the regret curve only: subscribers build the curve, and the full one
    # rides on request_finished, so a long request does not cost O(rounds²) to stream. The
    # regret is the one the request's learner minimises, in its unit (core/stats.py): "s"
    # under the time loss, "tokens" under the acceptance losses.
    regret: float | None
    regret_unit: str
    feedback_windows: int
    seq: int | None = None
    ts: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "round",
            "request_id": self.request_id,
            "round": self.round,
            "policy": self.policy,
            "drafter": self.drafter,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "committed": self.committed,
            "completion_tokens": self.completion_tokens,
            "mean_acceptance_length": self.mean_acceptance_length,
            "tokens_per_s": self.tokens_per_s,
            "weights": dict(self.weights),
            "batch_rows": self.batch_rows,
            "plain": self.plain,
            "regret": self.regret,
            "regret_unit": self.regret_unit,
            "feedback_windows": self.feedback_windows,
            **_stamp(self.seq, self.ts),
        }


@dataclass(frozen=True)
class FinalStats:
    """A finished request's full statistics, as `request_finished` carries them (the admin page
    and the request log read these). `mean_acceptance_length` and `num_spec_steps` are vLLM's
    names, and vLLM's per-request "spec step" is a speculative round here, so its siblings keep
    its word: `num_plain_steps` counts the plain rounds and `plain_step_indices` are their round
    indices, to interleave with `drafter_choices`.

    Each field carries one attribute of the engine's `core.stats.StatsSnapshot` (the statistics'
    one declaration), named in `gateway.live.events.FINAL_STATS_SOURCE`, which builds it; the
    snapshot's fields the wire leaves out are listed there too, with why. The wire form is the
    fields in this order (`to_json`), so a field added here reaches the admin page as it is."""

    policy: str
    prompt_tokens: int
    completion_tokens: int
    rounds: int  # speculative rounds (`num_spec_steps` on the wire too)
    target_forwards: int
    mean_acceptance_length: float
    num_plain_steps: int
    plain_step_indices: tuple[int, ...]
    num_draft_tokens: int
    num_accepted_draft_tokens: int
    acceptance_by_position: tuple[int, ...]
    accepted_per_round: tuple[int, ...]
    drafter_choices: tuple[str | None, ...]
    regret_tokens: float | None
    # The learner's regret in its unit (RoundCompleted's) and after each window; under the time
    # loss also in seconds and as a time-per-token ratio to the best arm's.
    regret: float | None
    regret_unit: str
    regret_curve: tuple[float, ...]
    regret_seconds: float | None
    regret_time_ratio: float | None
    final_weights: Mapping[str, float]
    warm_start_requests: int
    time_draft_s: float
    time_verify_s: float
    time_evaluate_s: float
    time_bookkeeping_s: float

    def to_json(self) -> dict[str, Any]:
        """The fields in order, plus vLLM's `num_spec_steps` (the same count as `rounds`) after
        `mean_acceptance_length`, where the wire has always carried it."""
        out: dict[str, Any] = {}
        for f in fields(self):
            out[f.name] = _wire(getattr(self, f.name))
            if f.name == "mean_acceptance_length":
                out["num_spec_steps"] = self.rounds
        return out


def _wire(value: Any) -> Any:
    """A field as JSON holds it: tuples as lists, mappings as objects."""
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


@dataclass(frozen=True)
class RequestFinished:
    """Published once per request, however it ended (finished, aborted, failed)."""

    request_id: str
    finish_reason: str | None  # None: aborted (client gone, deadline, stop string)
    error: str | None
    elapsed_s: float
    stats: FinalStats | None  # None when it ended before its first round
    prompt: str | None = None  # set only with log_prompts on: the request log stores it
    seq: int | None = None
    ts: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": "request_finished",
            "request_id": self.request_id,
            "finish_reason": self.finish_reason,
            "error": self.error,
            "elapsed_s": self.elapsed_s,
            "stats": self.stats.to_json() if self.stats is not None else None,
        }
        if self.prompt is not None:
            out["prompt"] = self.prompt
        return {**out, **_stamp(self.seq, self.ts)}


@dataclass(frozen=True)
class EventsDropped:
    """Told to a subscriber that fell behind, before the events that survived."""

    count: int
    ts: float

    def to_json(self) -> dict[str, Any]:
        return {"type": "dropped", "count": self.count, "ts": self.ts}


# What the engine worker publishes, and what a subscriber receives (the bus adds the drops).
PublishedEvent = RequestStarted | RoundCompleted | RequestFinished
FeedEvent = RequestStarted | RoundCompleted | RequestFinished | EventsDropped
