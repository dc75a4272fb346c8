"""Response bodies in exact OpenAI shapes (chat, completions, their stream chunks, models),
plus the `metrics.speculative_decoding` extension and the SSE frame encoder.

Shapes follow openai-openapi (`CreateChatCompletionResponse`, `CreateChatCompletionStream
Response`, `CreateCompletionResponse`, `ChatCompletionTokenLogprob`); tests validate every body
against the `openai` SDK's own pydantic types.
"""

from __future__ import annotations

import json
from typing import Any

from core.stats import TokenLogprob
from gateway.openai.text import TokenText

DONE_FRAME = b"data: [DONE]\n\n"
SPEC_KEYS = (
    "mean_acceptance_length",
    "draft_acceptance_rate",
    "num_spec_steps",
    "num_draft_tokens",
    "num_accepted_draft_tokens",
    "acceptance_by_position",
    "policy",
    "drafter_choices",
    "regret_tokens",
    "final_weights",
    "warm_start_requests",
)


# Line breaks to Python's str.splitlines (and so to httpx's iter_lines) that JSON leaves raw in
# strings: escaped (as Go's encoding/json does for U+2028/9), so generated text containing them
# cannot cut a `data:` line in two for clients that split lines that way.
_SPLITLINES_ONLY = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_ESCAPE_SPLITLINES = str.maketrans(_SPLITLINES_ONLY)


def sse_frame(payload: dict[str, Any]) -> bytes:
    """One SSE event, exactly `data: {json}\\n\\n` (JSON never contains a raw newline)."""
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return b"data: " + body.translate(_ESCAPE_SPLITLINES).encode("utf-8") + b"\n\n"


# ---- logprobs ---------------------------------------------------------------------------------


def chat_logprob(token_text: TokenText, lp: TokenLogprob) -> dict[str, Any]:
    token, raw = token_text(lp.token_id)
    return {
        "token": token,
        "logprob": _finite(lp.logprob),
        "bytes": raw,
        "top_logprobs": [
            {"token": t, "logprob": _finite(v), "bytes": b}
            for t, b, v in ((*token_text(tid), v) for tid, v in lp.top)
        ],
    }


def completion_logprobs(
    token_text: TokenText, lps: list[TokenLogprob], offsets: list[int]
) -> dict[str, Any]:
    tokens, token_lps, tops = [], [], []
    for lp in lps:
        token = token_text(lp.token_id)[0]
        tokens.append(token)
        token_lps.append(_finite(lp.logprob))
        top = {token_text(tid)[0]: _finite(v) for tid, v in lp.top}
        top.setdefault(token, _finite(lp.logprob))
        tops.append(top)
    return _completion_logprobs(tokens, token_lps, tops, offsets)


def prompt_logprobs(
    token_text: TokenText, prompt_ids: list[int], lps: list[TokenLogprob | None]
) -> dict[str, Any]:
    """Completions `echo` + `logprobs`: the prompt tokens' entries. The first token has null
    logprob and top_logprobs (nothing predicts it), as OpenAI reports it; text offsets are
    cumulative token-string lengths from 0 (as vLLM counts them)."""
    tokens: list[str] = []
    token_lps: list[float | None] = []
    tops: list[dict[str, float] | None] = []
    offsets: list[int] = []
    at = 0
    for tid, lp in zip(prompt_ids, lps, strict=True):
        token = token_text(tid)[0]
        tokens.append(token)
        offsets.append(at)
        at += len(token)
        if lp is None:
            token_lps.append(None)
            tops.append(None)
            continue
        top = {token_text(t)[0]: _finite(v) for t, v in lp.top}
        top.setdefault(token, _finite(lp.logprob))
        token_lps.append(_finite(lp.logprob))
        tops.append(top)
    return _completion_logprobs(tokens, token_lps, tops, offsets)


def join_logprobs(first: dict[str, Any], then: dict[str, Any]) -> dict[str, Any]:
    """Two completions `logprobs` objects, one after the other (the prompt's, then the output's)."""
    return {key: list(first[key]) + list(then[key]) for key in first}


def _finite(value: float) -> float:
    # OpenAI documents -9999.0 for "very unlikely"; JSON has no -inf.
    return value if value > -9999.0 else -9999.0


# ---- speculative-decoding metrics ---------------------------------------------------------------


def spec_metrics(stats: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """`metrics.speculative_decoding`: one choice's stats, or the aggregate of n choices.

    With n > 1 the counts and `regret_tokens` are summed, `mean_acceptance_length` is recomputed
    over all rounds, `acceptance_by_position` is summed per depth, `drafter_choices` lists the
    rounds of every choice in choice order, `final_weights` is the mean distribution and
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


def _one(s: dict[str, Any]) -> dict[str, Any]:
    drafted = int(s.get("num_draft_tokens", 0))
    accepted = int(s.get("num_accepted_draft_tokens", 0))
    out = {k: s.get(k) for k in SPEC_KEYS if k != "draft_acceptance_rate"}
    out["draft_acceptance_rate"] = accepted / drafted if drafted else 0.0
    return {k: out[k] for k in SPEC_KEYS}


def _aggregate(stats: list[dict[str, Any]]) -> dict[str, Any]:
    steps = sum(int(s.get("num_spec_steps", 0)) for s in stats)
    tokens = sum(
        float(s.get("mean_acceptance_length", 0.0)) * int(s.get("num_spec_steps", 0)) for s in stats
    )
    drafted = sum(int(s.get("num_draft_tokens", 0)) for s in stats)
    accepted = sum(int(s.get("num_accepted_draft_tokens", 0)) for s in stats)
    by_pos = _sum_positions([list(s.get("acceptance_by_position") or []) for s in stats])
    weights: dict[str, float] = {}
    for s in stats:
        for d, w in (s.get("final_weights") or {}).items():
            weights[d] = weights.get(d, 0.0) + float(w) / len(stats)
    return {
        "mean_acceptance_length": tokens / steps if steps else 0.0,
        "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
        "num_spec_steps": steps,
        "num_draft_tokens": drafted,
        "num_accepted_draft_tokens": accepted,
        "acceptance_by_position": by_pos,
        "policy": stats[0].get("policy"),
        "drafter_choices": [d for s in stats for d in (s.get("drafter_choices") or [])],
        "regret_tokens": sum(float(s.get("regret_tokens", 0.0)) for s in stats),
        "final_weights": weights,
        "warm_start_requests": max(int(s.get("warm_start_requests") or 0) for s in stats),
    }


def _sum_positions(lists: list[list[int]]) -> list[int]:
    depth = max((len(values) for values in lists), default=0)
    return [sum(int(v[k]) for v in lists if k < len(v)) for k in range(depth)]


# ---- bodies -----------------------------------------------------------------------------------


def envelope(*, id: str, object: str, created: int, model: str, fingerprint: str) -> dict[str, Any]:
    return {
        "id": id,
        "object": object,
        "created": created,
        "model": model,
        "system_fingerprint": fingerprint,
    }


def chat_choice(
    index: int, text: str, finish_reason: str | None, logprobs: list[dict[str, Any]] | None,
    tool_calls: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if tool_calls:
        # OpenAI: content is null when the answer is only calls
        message.update(content=text or None, tool_calls=tool_calls)
    return {
        "index": index,
        "message": message,
        "logprobs": {"content": logprobs, "refusal": None} if logprobs is not None else None,
        "finish_reason": finish_reason,
    }


def chat_delta_choice(
    index: int,
    delta: dict[str, Any],
    finish_reason: str | None = None,
    logprobs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "index": index,
        "delta": delta,
        "logprobs": {"content": logprobs, "refusal": None} if logprobs is not None else None,
        "finish_reason": finish_reason,
    }


def tool_call_deltas(index: int, call: dict[str, Any]) -> list[dict[str, Any]]:
    """One complete call as stream deltas: id, type and name first, then the arguments."""
    fn = call["function"]
    head = {"index": index, "id": call["id"], "type": "function",
            "function": {"name": fn["name"], "arguments": ""}}  # fmt: skip
    args = {"index": index, "function": {"arguments": fn["arguments"]}}
    return [{"tool_calls": [head]}, {"tool_calls": [args]}]


def completion_choice(
    index: int, text: str, finish_reason: str | None, logprobs: dict[str, Any] | None
) -> dict[str, Any]:
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}


def model_card(
    model_id: str, *, created: int, max_context: int, drafters: list[str], tool_format: str
) -> dict[str, Any]:
    """`capabilities` is ours: the tool-call format the target gets (gateway/openai/tools/formats.py)
    and structured outputs, which every target supports."""
    return {
        "id": model_id,
        "object": "model",
        "created": created,
        "owned_by": "hedgespec",
        "max_model_len": max_context,
        "spec": {"method": "eagle3", "drafters": drafters},
        "capabilities": {"tool_calling": tool_format, "structured_outputs": True},
    }


def _completion_logprobs(
    tokens: list[str], token_lps: list[Any], tops: list[Any], offsets: list[int]
) -> dict[str, Any]:
    """The completions API's `logprobs` object (parallel lists, one entry per token)."""
    return {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": tops,
            "text_offset": offsets}
