"""`/v1/completions` (vLLM's `OpenAIServingCompletion`): text or token-id prompts, `echo`, and
the completions shapes (`CreateCompletionResponse` and its parallel-list `logprobs`)."""

from __future__ import annotations

from typing import Any

from core.api import TokenLogprob
from gateway.errors import APIError, invalid_request
from gateway.openai.framing import finite
from gateway.openai.jobs import Choice, Delta, Job
from gateway.openai.protocol import CompletionRequest
from gateway.openai.serving_chunks import OpenAIServingChunks
from gateway.openai.text import TokenText, encode_prompt
from gateway.runner import EngineInfo


class OpenAIServingCompletion(OpenAIServingChunks[CompletionRequest]):
    endpoint = "completion"
    id_prefix = "cmpl"
    prompt_param = "prompt"
    object_name = "text_completion"
    chunk_object_name = "text_completion"

    def _prompt_chars(self, req: CompletionRequest) -> int:
        return sum(len(p) for p in req.prompts)

    def _add_choices(self, job: Job, req: CompletionRequest, info: EngineInfo,
                     ctx: None) -> None:
        prompts = req.prompts
        if len(prompts) * req.n > self.settings.max_n:
            raise invalid_request(
                f"number of prompts × n must be at most {self.settings.max_n}", param="prompt"
            )
        job.echo_logprobs = bool(req.echo) and job.logprobs is not None
        for p, prompt in enumerate(prompts):
            ids = encode_prompt(self._tokenizer(), prompt, param="prompt")
            max_new = self._max_new_tokens(req, len(ids), info)
            prefix = self._echo_text(prompt) if req.echo else ""
            text = self._logged_prompt(ids)
            for j in range(req.n):
                self._add_choice(job, ids, max_new, index=p * req.n + j, prefix=prefix,
                                 prompt_text=text,
                                 prompt_logprobs=req.num_prompt_logprobs)  # fmt: skip
            job.prompt_tokens += len(ids)

    def _echo_text(self, prompt: str | list[int]) -> str:
        if isinstance(prompt, str):
            return prompt
        return str(self._tokenizer().decode(prompt, skip_special_tokens=False))

    # ---- the body ------------------------------------------------------------------------------

    def _final_choice(self, job: Job, c: Choice) -> dict[str, Any]:
        lps = (completion_logprobs(job.token_text, c.logprobs, c.offsets)
               if job.logprobs is not None else None)
        if lps is not None and job.echo_logprobs:
            lps = join_logprobs(self._echoed_logprobs(job, c), lps)
        return _choice(c.index, c.prefix + "".join(c.text), c.finish_reason, lps)

    def _echoed_logprobs(self, job: Job, c: Choice) -> dict[str, Any]:
        """The prompt part of `echo` + `logprobs` (the engine sends it with the prefill)."""
        if c.prompt_logprobs is None:  # an engine that sent none (an aborted prefill)
            raise APIError("The engine returned no prompt logprobs.", status=500,
                           type="server_error")
        return prompt_logprobs(job.token_text, c.prompt_ids, c.prompt_logprobs)

    # ---- the stream ----------------------------------------------------------------------------

    def _opening_chunks(self, job: Job) -> list[dict[str, Any]]:
        """`echo` opens with the prompt text (with `logprobs` it goes out with the prompt's)."""
        return [self._chunk(job, [_choice(c.index, c.prefix, None, None)])
                for c in job.choices if c.prefix and not job.echo_logprobs]  # fmt: skip

    def _content_chunk(self, job: Job, delta: Delta) -> dict[str, Any]:
        lps = completion_logprobs(job.token_text, delta.logprobs, delta.offsets)
        text = delta.text
        if delta.prompt_logprobs and job.echo_logprobs:
            # echo + logprobs: the prompt text goes out with its logprobs in the first chunk
            text = delta.choice.prefix + text
            lps = join_logprobs(self._echoed_logprobs(job, delta.choice), lps)
        choice = _choice(delta.choice.index, text, None, lps if job.logprobs is not None else None)
        return self._chunk(job, [choice])

    def _finish_chunk(self, job: Job, c: Choice) -> dict[str, Any]:
        return self._chunk(job, [_choice(c.index, "", c.finish_reason, None)])


def _choice(
    index: int, text: str, finish_reason: str | None, logprobs: dict[str, Any] | None
) -> dict[str, Any]:
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}


def completion_logprobs(
    token_text: TokenText, lps: list[TokenLogprob], offsets: list[int]
) -> dict[str, Any]:
    tokens, token_lps, tops = [], [], []
    for lp in lps:
        token = token_text(lp.token_id)[0]
        tokens.append(token)
        token_lps.append(finite(lp.logprob))
        top = {token_text(tid)[0]: finite(v) for tid, v in lp.top}
        top.setdefault(token, finite(lp.logprob))
        tops.append(top)
    return _logprobs(tokens, token_lps, tops, offsets)


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
        top = {token_text(t)[0]: finite(v) for t, v in lp.top}
        top.setdefault(token, finite(lp.logprob))
        token_lps.append(finite(lp.logprob))
        tops.append(top)
    return _logprobs(tokens, token_lps, tops, offsets)


def join_logprobs(first: dict[str, Any], then: dict[str, Any]) -> dict[str, Any]:
    """Two completions `logprobs` objects, one after the other (the prompt's, then the output's)."""
    return {key: list(first[key]) + list(then[key]) for key in first}


def _logprobs(
    tokens: list[str], token_lps: list[Any], tops: list[Any], offsets: list[int]
) -> dict[str, Any]:
    """The completions API's `logprobs` object (parallel lists, one entry per token)."""
    return {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": tops,
            "text_offset": offsets}
