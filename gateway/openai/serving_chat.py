"""`/v1/chat/completions` (vLLM's `OpenAIServingChat`): the chat template, tool calls, and the
chat shapes (`CreateChatCompletionResponse`, its stream chunks, `ChatCompletionTokenLogprob`).
"""

from __future__ import annotations

from typing import Any

from core.api import TokenLogprob
from gateway.openai.framing import finite
from gateway.openai.jobs import Choice, Delta, Job
from gateway.openai.protocol import ChatCompletionRequest
from gateway.openai.serving_chunks import OpenAIServingChunks
from gateway.openai.text import TokenText, render_chat
from gateway.openai.tools import formats
from gateway.openai.tools.parse import ToolCall
from gateway.runner import EngineInfo


class OpenAIServingChat(OpenAIServingChunks[ChatCompletionRequest]):
    endpoint = "chat"
    id_prefix = "chatcmpl"
    prompt_param = "messages"
    object_name = "chat.completion"
    chunk_object_name = "chat.completion.chunk"

    def _prompt_chars(self, req: ChatCompletionRequest) -> int:
        return sum(len(m.content or "") for m in req.messages)

    def _add_choices(self, job: Job, req: ChatCompletionRequest, info: EngineInfo,
                     ctx: None) -> None:
        tools, fmt = req.tool_request, self.models.tool_format()
        messages, listed = formats.render(fmt, [m.template_dict() for m in req.messages], tools)
        prompt_ids = render_chat(self._tokenizer(), messages, listed)
        max_new = self._max_new_tokens(req, len(prompt_ids), info)
        grammar = self._tool_grammar(fmt, tools, req.grammar) if tools else req.grammar
        text = self._logged_prompt(prompt_ids)
        for i in range(req.n):
            choice = self._add_choice(job, prompt_ids, max_new, index=i, prompt_text=text,
                                      grammar=grammar)  # fmt: skip
            if tools:
                self._parse_tools(choice, fmt, tools)
        job.prompt_tokens = len(prompt_ids)

    # ---- the body ------------------------------------------------------------------------------

    def _final_choice(self, job: Job, c: Choice) -> dict[str, Any]:
        text = c.prefix + "".join(c.text)
        calls = None
        if c.tools is not None:  # the same parser as streaming, fed the whole text
            events = c.tools.feed(text) + c.tools.finish()
            text = "".join(e for e in events if isinstance(e, str))
            calls = [call.openai_dict() for call in c.tools.calls] or None
        message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
        if calls:  # OpenAI: content is null when the answer is only calls
            message.update(content=text or None, tool_calls=calls)
        return {
            "index": c.index,
            "message": message,
            "logprobs": self._logprobs(job, c.logprobs),
            "finish_reason": _finish_reason(c),
        }

    def _logprobs(self, job: Job, lps: list[TokenLogprob]) -> dict[str, Any] | None:
        if job.logprobs is None:
            return None
        return {"content": [chat_logprob(job.token_text, lp) for lp in lps], "refusal": None}

    # ---- the stream ----------------------------------------------------------------------------

    def _opening_chunks(self, job: Job) -> list[dict[str, Any]]:
        """Each choice opens with the assistant's role."""
        return [self._delta(job, c.index, {"role": "assistant", "content": ""})
                for c in job.choices]

    def _delta_chunks(self, job: Job, delta: Delta) -> list[dict[str, Any]]:
        if delta.choice.tools is not None:
            return self._tool_chunks(job, delta)
        return super()._delta_chunks(job, delta)

    def _content_chunk(self, job: Job, delta: Delta) -> dict[str, Any]:
        return self._delta(job, delta.choice.index, {"content": delta.text},
                           logprobs=self._logprobs(job, delta.logprobs))  # fmt: skip

    def _tool_chunks(self, job: Job, delta: Delta) -> list[dict[str, Any]]:
        """A tool-parsed choice's round: its content (what is surely not a call) with the
        round's logprobs, then each call completed in it, as OpenAI streams calls: the id and
        name with empty arguments, then the arguments."""
        parser = delta.choice.tools
        assert parser is not None
        events = parser.feed(delta.text) + (parser.finish() if delta.finished else [])
        text = "".join(e for e in events if isinstance(e, str))
        chunks = []
        if text or delta.logprobs:
            chunks.append(self._content_chunk(job,
                                              Delta(delta.choice, text, delta.logprobs, [], False)))
        for call in (e for e in events if isinstance(e, ToolCall)):
            chunks += [self._delta(job, delta.choice.index, d)
                       for d in tool_call_deltas(parser.calls.index(call),
                                                 call.openai_dict())]  # fmt: skip
        return chunks

    def _finish_chunk(self, job: Job, c: Choice) -> dict[str, Any]:
        return self._delta(job, c.index, {}, _finish_reason(c))

    def _delta(
        self, job: Job, index: int, delta: dict[str, Any], finish_reason: str | None = None,
        logprobs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A stream chunk of one choice's `delta`."""
        choice = {"index": index, "delta": delta, "logprobs": logprobs,
                  "finish_reason": finish_reason}
        return self._chunk(job, [choice])


def _finish_reason(c: Choice) -> str | None:
    """OpenAI's "tool_calls" when a choice that ended on its own made calls."""
    if c.tools is not None and c.tools.calls and c.finish_reason == "stop":
        return "tool_calls"
    return c.finish_reason


def chat_logprob(token_text: TokenText, lp: TokenLogprob) -> dict[str, Any]:
    token, raw = token_text(lp.token_id)
    return {
        "token": token,
        "logprob": finite(lp.logprob),
        "bytes": raw,
        "top_logprobs": [
            {"token": t, "logprob": finite(v), "bytes": b}
            for t, b, v in ((*token_text(tid), v) for tid, v in lp.top)
        ],
    }


def tool_call_deltas(index: int, call: dict[str, Any]) -> list[dict[str, Any]]:
    """One complete call as stream deltas: id, type and name first, then the arguments."""
    fn = call["function"]
    head = {"index": index, "id": call["id"], "type": "function",
            "function": {"name": fn["name"], "arguments": ""}}  # fmt: skip
    args = {"index": index, "function": {"arguments": fn["arguments"]}}
    return [{"tool_calls": [head]}, {"tool_calls": [args]}]
