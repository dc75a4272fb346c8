"""What the admin page shows about one request (`RequestTrace`), folded from its events.

A trace is built from `RequestStarted`, `RoundCompleted` and `RequestFinished` events (see
`gateway.live.event_types`): rounds append to bounded per-round lists (the newest `MAX_ROUNDS`), a
duplicate round re-delivered after a resync is ignored, and the final statistics of a finished
request replace what the rounds built, since they hold every round and the full regret curve.

The per-round lists hold plain rounds too: a plain round (`plain` on its round event,
`plain_step_indices` in the final statistics) sits between the speculative rounds
with no drafter, no accepted token and `plain_per_round` true, so the page draws it apart from
the drafters and the speculative statistics (MAT, `num_spec_steps`) are not diluted by it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gateway.live.event_types import FinalStats, RequestFinished, RequestStarted, RoundCompleted

MAX_ROUNDS = 4096  # rounds kept per trace; older rounds are dropped from the front


@dataclass
class RequestTrace:
    """What the page shows about one request, built from its events."""

    request_id: str
    policy: str | None = None
    drafters: list[str] = field(default_factory=list)
    prompt_tokens: int | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    warm_start_requests: int | None = None  # earlier requests of its session the learner saw
    started_at: float = 0.0
    updated_at: float = 0.0
    status: str = "running"  # running | finished | aborted | failed
    first_round: int = 0  # round index of drafter_per_round[0] (older rounds were dropped)
    last_round: int = -1
    drafter_per_round: list[str | None] = field(default_factory=list)
    accepted_per_round: list[int] = field(default_factory=list)
    committed_per_round: list[int] = field(default_factory=list)
    plain_per_round: list[bool] = field(default_factory=list)  # the gate ran this step plain
    plain_rounds: int = 0  # all of the request's plain steps (the lists keep the newest only)
    completion_tokens: int = 0
    mean_acceptance_length: float | None = None
    tokens_per_s: float | None = None
    weights: dict[str, float] = field(default_factory=dict)
    batch_rows: int | None = None  # requests that shared the last round's target pass
    # The learner's regret in its unit ("s" under the time loss, else "tokens") and its curve.
    regret: float | None = None
    regret_unit: str = "tokens"
    regret_curve: list[list[float]] = field(default_factory=list)  # [feedback window, regret]
    finish_reason: str | None = None
    error: str | None = None
    elapsed_s: float | None = None
    finished_at: float | None = None

    def apply_started(self, event: RequestStarted) -> None:
        self.policy = event.policy
        self.drafters = list(event.drafters)
        self.prompt_tokens = event.prompt_tokens
        self.max_tokens = event.max_tokens
        self.temperature = event.temperature
        self.top_p = event.top_p
        self.top_k = event.top_k
        self.warm_start_requests = event.warm_start_requests

    def apply_round(self, event: RoundCompleted) -> None:
        index = event.round
        if index <= self.last_round:
            return  # a duplicate (re-delivered after a resync)
        if not self.drafter_per_round:
            self.first_round = index
        self.last_round = index
        self.drafter_per_round.append(event.drafter)
        self.accepted_per_round.append(event.accepted)
        self.committed_per_round.append(event.committed)
        self.plain_per_round.append(event.plain)
        self.plain_rounds += event.plain
        overflow = len(self.drafter_per_round) - MAX_ROUNDS
        if overflow > 0:
            for steps in self._per_step_lists():
                del steps[:overflow]
            self.first_round += overflow
        self.policy = event.policy
        self.completion_tokens = event.completion_tokens
        self.mean_acceptance_length = event.mean_acceptance_length
        self.tokens_per_s = event.tokens_per_s
        self.weights = dict(event.weights)
        self.batch_rows = event.batch_rows
        windows = event.feedback_windows
        regret = event.regret
        self.regret_unit = event.regret_unit
        if (
            regret is not None
            and windows
            and (not self.regret_curve or windows > self.regret_curve[-1][0])
        ):
            self.regret_curve.append([windows, float(regret)])
            del self.regret_curve[:-MAX_ROUNDS]
        self.regret = regret

    def apply_finished(self, event: RequestFinished) -> None:
        self.finish_reason = event.finish_reason
        self.error = event.error
        self.elapsed_s = event.elapsed_s
        self.finished_at = event.ts if event.ts is not None else time.time()
        if self.error:
            self.status = "failed"
        elif self.finish_reason is None:
            self.status = "aborted"  # client gone, or ended by a stop string
        else:
            self.status = "finished"
        stats = event.stats
        if stats is None:
            return
        # The final statistics are authoritative: they hold every round and the full curve.
        self.policy = stats.policy
        self.completion_tokens = stats.completion_tokens or self.completion_tokens
        self.prompt_tokens = stats.prompt_tokens
        self.warm_start_requests = stats.warm_start_requests
        self.mean_acceptance_length = stats.mean_acceptance_length
        self.regret, self.regret_unit = stats.regret, stats.regret_unit
        self.weights = dict(stats.final_weights or self.weights)
        steps = _final_steps(stats)
        if steps is not None:
            self._replace_steps(steps)
        self.regret_curve = [[i + 1, float(v)]
                             for i, v in enumerate(stats.regret_curve)][-MAX_ROUNDS:]

    def _per_step_lists(self) -> tuple[list[Any], ...]:
        return (self.drafter_per_round, self.accepted_per_round, self.committed_per_round,
                self.plain_per_round)

    def _replace_steps(self, steps: list[tuple[str | None, int, bool]]) -> None:
        kept = steps[-MAX_ROUNDS:]
        first = len(steps) - len(kept)
        same_steps = first == self.first_round and len(self.committed_per_round) == len(kept)
        if not same_steps:
            # Committed tokens are not in the final stats; accepted + 1 bonus is exact except
            # for a stop-truncated last round.
            self.committed_per_round = [a + 1 for _, a, _ in kept]
        self.first_round = first
        self.last_round = max(self.last_round, len(steps) - 1)
        self.drafter_per_round = [d for d, _, _ in kept]
        self.accepted_per_round = [a for _, a, _ in kept]
        self.plain_per_round = [p for _, _, p in kept]
        self.plain_rounds = sum(p for _, _, p in steps)

    def public(self) -> dict[str, Any]:
        # Copies, not references: a snapshot is serialized later (after an await) while
        # rounds keep arriving, and must still describe one moment (rounds == len(choices)).
        return {
            "request_id": self.request_id,
            "policy": self.policy,
            "drafters": list(self.drafters),
            "prompt_tokens": self.prompt_tokens,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "warm_start_requests": self.warm_start_requests,
            "started_at": self.started_at,
            "updated_at": self.updated_at,
            "finished_at": self.finished_at,
            "status": self.status,
            "rounds": self.last_round + 1,
            "first_round": self.first_round,
            "drafter_per_round": list(self.drafter_per_round),
            "accepted_per_round": list(self.accepted_per_round),
            "committed_per_round": list(self.committed_per_round),
            "plain_per_round": list(self.plain_per_round),
            "plain_rounds": self.plain_rounds,
            "completion_tokens": self.completion_tokens,
            "mean_acceptance_length": self.mean_acceptance_length,
            "tokens_per_s": self.tokens_per_s,
            "weights": dict(self.weights),
            "batch_rows": self.batch_rows,
            "regret": self.regret,
            "regret_unit": self.regret_unit,
            "regret_curve": [list(p) for p in self.regret_curve],
            "finish_reason": self.finish_reason,
            "error": self.error,
            "elapsed_s": self.elapsed_s,
        }


def _final_steps(stats: FinalStats) -> list[tuple[str | None, int, bool]] | None:
    """Every step of a finished request as (drafter, accepted, plain), in order. None when the
    statistics cannot be interleaved (then the rounds' lists stay)."""
    choices, accepted = stats.drafter_choices, stats.accepted_per_round
    order = step_order(len(choices), stats.plain_step_indices)
    if order is None or len(choices) != len(accepted):
        return None
    return [(None, 0, True) if k is None else (choices[k], accepted[k], False) for k in order]


def step_order(rounds: int, plain_indices: Iterable[Any]) -> list[int | None] | None:
    """A request's steps in order: the index of the speculative round each one was, or None for
    a plain step (the statistics list the rounds, and the plain steps' step indices, apart).
    None when there is no step, or an index lies outside the request's steps."""
    plain = {int(i) for i in plain_indices}
    total = rounds + len(plain)
    if total == 0 or any(not 0 <= i < total for i in plain):
        return None
    spec = iter(range(rounds))
    return [None if i in plain else next(spec) for i in range(total)]
