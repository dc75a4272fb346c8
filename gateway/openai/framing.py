"""Response pieces chat and completions share: the SSE frame encoder, the finite logprob, and
the `metrics.speculative_decoding` extension. Each endpoint's own shapes are framed by its
serving class (`serving_chat.py`, `serving_completion.py`); tests validate every body against
the `openai` SDK's own pydantic types.
"""

from __future__ import annotations

import json
from typing import Any

from core.api import StatsSnapshot

DONE_FRAME = b"data: [DONE]\n\n"

# Line breaks to Python's str.splitlines (and so to httpx's iter_lines) that JSON leaves raw in
# strings: escaped (as Go's encoding/json does for U+2028/9), so generated text containing them
# cannot cut a `data:` line in two for clients that split lines that way.
_SPLITLINES_ONLY = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_ESCAPE_SPLITLINES = str.maketrans(_SPLITLINES_ONLY)


def sse_frame(payload: dict[str, Any]) -> bytes:
    """One SSE event, exactly `data: {json}\\n\\n` (JSON never contains a raw newline)."""
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return b"data: " + body.translate(_ESCAPE_SPLITLINES).encode("utf-8") + b"\n\n"


def finite(logprob: float) -> float:
    """OpenAI documents -9999.0 for "very unlikely"; JSON has no -inf."""
    return logprob if logprob > -9999.0 else -9999.0


# ---- speculative-decoding metrics ---------------------------------------------------------------


def spec_metrics(stats: list[StatsSnapshot | None]) -> dict[str, Any] | None:
    """`metrics.speculative_decoding`: one choice's stats, or the aggregate of n choices.

    The regret is the one the request's learner minimised (core/stats.py): under the time
    loss `regret_seconds` (its expected net seconds under its weights less the best arm's)
    and `regret_time_ratio` (its time per token over the best arm's), `regret_tokens` null;
    under the acceptance losses `regret_tokens`, the seconds null. With n > 1 the counts and
    regrets are summed (over the choices that computed them; null, as for one choice, where
    no drafter was scored counterfactually), `regret_time_ratio` is the choices' mean,
    `mean_acceptance_length` is recomputed over all rounds, `acceptance_by_position` is
    summed per depth, `drafter_choices` lists the rounds of every choice in choice order,
    `final_weights` is the mean distribution and
    `warm_start_requests` (how many earlier requests of the session the learner had seen) the
    largest over the choices; each choice's own object is under `per_choice` (vLLM returns
    null for n > 1 instead).
    """
    present = [s for s in stats if s is not None]
    if not present:
        return None
    if len(stats) == 1:
        return _one(present[0])
    per_choice = [_one(s) if s is not None else None for s in stats]
    return {**_aggregate(present), "per_choice": per_choice}


def _one(s: StatsSnapshot) -> dict[str, Any]:
    return {
        "mean_acceptance_length": s.mean_acceptance_length,
        "draft_acceptance_rate": s.draft_acceptance_rate,
        "num_spec_steps": s.rounds,
        "num_plain_steps": s.plain_rounds,
        "num_draft_tokens": s.num_draft_tokens,
        "num_accepted_draft_tokens": s.num_accepted_draft_tokens,
        "acceptance_by_position": list(s.accepted_by_position),
        "policy": s.policy,
        "drafter_choices": list(s.drafter_per_round),
        "regret_tokens": s.regret_tokens,
        "regret_seconds": s.regret_seconds,
        "regret_time_ratio": s.regret_time_ratio,
        "final_weights": dict(s.weights),
        "warm_start_requests": s.warm_start_requests,
    }


def _aggregate(stats: list[StatsSnapshot]) -> dict[str, Any]:
    steps = sum(s.rounds for s in stats)
    tokens = sum(s.mean_acceptance_length * s.rounds for s in stats)
    drafted = sum(s.num_draft_tokens for s in stats)
    accepted = sum(s.num_accepted_draft_tokens for s in stats)
    weights: dict[str, float] = {}
    for s in stats:
        for d, w in s.weights.items():
            weights[d] = weights.get(d, 0.0) + w / len(stats)
    return {
        "mean_acceptance_length": tokens / steps if steps else 0.0,
        "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
        "num_spec_steps": steps,
        "num_plain_steps": sum(s.plain_rounds for s in stats),
        "num_draft_tokens": drafted,
        "num_accepted_draft_tokens": accepted,
        "acceptance_by_position": _sum_positions([s.accepted_by_position for s in stats]),
        "policy": stats[0].policy,
        "drafter_choices": [d for s in stats for d in s.drafter_per_round],
        "regret_tokens": _sum_known([s.regret_tokens for s in stats]),
        "regret_seconds": _sum_known([s.regret_seconds for s in stats]),
        "regret_time_ratio": _mean_known([s.regret_time_ratio for s in stats]),
        "final_weights": weights,
        "warm_start_requests": max(s.warm_start_requests for s in stats),
    }


def _sum_known(values: list[float | None]) -> float | None:
    """The sum of the values that were computed; None when none was."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _mean_known(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _sum_positions(lists: list[tuple[int, ...]]) -> list[int]:
    depth = max((len(values) for values in lists), default=0)
    return [sum(v[k] for v in lists if k < len(v)) for k in range(depth)]
