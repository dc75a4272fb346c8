"""`RoundOutput`: what `SpecEngine.step()` hands out per round, as plain data.

It lives apart from the engine so that a front end can read and build outputs (its worker
thread, its tests' engine doubles) without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.stats import RoundStats, StatsSnapshot, TokenLogprob


@dataclass(frozen=True)
class RoundOutput:
    """What one round of one request produced; `stats` is a snapshot, so the output may be
    handed to another thread while the engine runs the request's next round."""

    request_id: str
    token_ids: list[int]
    logprobs: list[TokenLogprob] | None
    finished: bool
    finish_reason: str | None
    round: RoundStats | None
    stats: StatsSnapshot
    error: str | None = None  # set with finish_reason "error": this request's round failed
    # The prompt's logprobs (first entry None), on the prefill's output only
    # (params.prompt_logprobs).
    prompt_logprobs: list[TokenLogprob | None] | None = None
