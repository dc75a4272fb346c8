"""OpenAI request models (field names exactly as in openai-openapi) and response shapes.

Unknown request fields are accepted and ignored (`extra="allow"`, as vLLM does) and logged at
debug level. Known OpenAI fields this server cannot honour (the deprecated `functions`,
`suffix`, `best_of > 1`) are refused with a 400 that names the parameter
when they carry a non-default value: silently ignoring a parameter that changes the output is
worse than an error (tgi#2914).

Penalties and `logit_bias` are OpenAI's ranges: penalties in [-2, 2], `logit_bias` maps token
id strings to biases in [-100, 100] (ids are checked against the vocabulary in serving).

Tool calling: `tools`, `tool_choice` and `parallel_tool_calls` are validated here into
`gateway.openai.tools.spec` data; assistant `tool_calls` and `tool` messages (`tool_call_id`) are
accepted in the history, with OpenAI's per-role rules (content required unless an assistant
message makes calls; a tool message names its call). `tools` with a non-text `response_format`
means "call tools, or answer in the format" (one grammar allows either); with a `tool_choice`
that forces a call, the call is the whole output and the format has nothing to apply to.
Output is text only (`modalities`).

Extensions, vLLM-compatible: `top_k`, `ignore_eos`, `repetition_penalty`, `priority`; ours: a
`hedgespec` object.

Responses are plain dicts built in `gateway/openai/serving.py`; their shapes are pinned by tests
against the `openai` SDK's own types.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from core.api import GrammarSpec, Penalties, grammar_text
from gateway.errors import invalid_request
from gateway.openai.tools.spec import (
    Tool,
    ToolChoice,
    ToolRequest,
    parse_tool_choice,
    parse_tools,
    tool_request,
)

log = logging.getLogger(__name__)

MAX_STOP_SEQUENCES = 4
MAX_CHAT_TOP_LOGPROBS = 20
MAX_COMPLETION_LOGPROBS = 5
INT64 = 2**63
MAX_LOGIT_BIAS = 100.0
# A repetition penalty r divides or multiplies logits; beyond this it only drives them to ±inf.
MAX_REPETITION_PENALTY = 10.0


class OpenAIBaseModel(BaseModel):
    """Accepts unknown fields (clients send newer or vendor fields) and ignores them."""

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="after")
    def _log_ignored(self) -> OpenAIBaseModel:
        if self.model_extra:
            log.debug("ignoring unknown fields %s", sorted(self.model_extra))
        return self


class StreamOptions(OpenAIBaseModel):
    include_usage: bool | None = False


class HedgeSpecOptions(OpenAIBaseModel):
    """Our request extension: the drafter policy (`auto`, `none`, `fixed:<drafter id>` or a
    learner name) and an optional session whose requests share one learner (per API key)."""

    policy: str = Field(default="auto", min_length=1, max_length=200)
    session: str | None = Field(default=None, min_length=1, max_length=200)


def _unicode(text: str) -> str:
    """Refuse lone surrogates: `"\\ud800"` (or CESU-8 bytes, which `json.loads` decodes with
    surrogatepass) is valid JSON but not Unicode text, and tokenizers raise on it (a 500)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (no unpaired surrogate code points)") from None
    return text


def _text_of(content: Any) -> str:
    """A message's `content` as plain text: a string, or a list of `{"type":"text"}` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return _unicode(content)
    if not isinstance(content, list):
        raise ValueError("must be a string or a list of content parts")
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text":
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise ValueError(f"only text content parts are supported, got {kind!r}")
        if not isinstance(part.get("text"), str):
            raise ValueError("a text content part needs a string `text`")
        texts.append(part["text"])
    return _unicode("".join(texts))


class ChatMessage(OpenAIBaseModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Any = None
    name: str | None = None
    tool_calls: list[Any] | None = None  # assistant: the calls it made
    tool_call_id: str | None = None  # tool: which call this is the result of

    @field_validator("content", mode="after")
    @classmethod
    def _flatten(cls, value: Any) -> str | None:
        return None if value is None else _text_of(value)

    @model_validator(mode="after")
    def _role_fields(self) -> ChatMessage:
        """OpenAI's per-role rules: content is required except on an assistant message that
        makes tool calls, and a tool message names the call it answers."""
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            needs = "content or tool_calls" if self.role == "assistant" else "content"
            raise ValueError(f"a {self.role} message needs {needs}")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id of the call it answers")
        return self

    @field_validator("tool_calls", mode="after")
    @classmethod
    def _check_calls(cls, value: list[Any] | None) -> list[Any] | None:
        return [_history_call(c) for c in value] if value else None

    def template_dict(self) -> dict[str, Any]:
        # Chat templates predate the `developer` role; it means `system` to them.
        role = "system" if self.role == "developer" else self.role
        out: dict[str, Any] = {"role": role, "content": self.content or ""}
        if self.tool_calls and role == "assistant":
            out["tool_calls"] = self.tool_calls
        if self.tool_call_id is not None and role == "tool":
            out["tool_call_id"] = self.tool_call_id
        return out


def _history_call(call: Any) -> dict[str, Any]:
    """An assistant message's tool call, with `arguments` as a dict (chat templates expect
    one; the OpenAI wire form is a JSON string)."""
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise ValueError('each tool call needs {"type": "function", "function": {"name", '
                         '"arguments"}}')
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            raise ValueError("tool call arguments must be a JSON object") from None
    if not isinstance(args, dict):
        raise ValueError("tool call arguments must be a JSON object")
    return {"id": str(call.get("id", "")), "type": "function",
            "function": {"name": fn["name"], "arguments": args}}  # fmt: skip


def _normalise_stop(value: Any) -> list[str] | None:
    if value is None:
        return None
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise ValueError("must be a string or a list of strings")
    if len(stops) > MAX_STOP_SEQUENCES:
        raise ValueError(f"at most {MAX_STOP_SEQUENCES} stop sequences are supported")
    if any(s == "" for s in stops):
        raise ValueError("stop sequences must not be empty")
    return stops or None


def _check_logit_bias(value: dict[str, float]) -> dict[str, float]:
    """Keys are token ids written as decimal strings; values are biases in [-100, 100]."""
    for key, bias in value.items():
        digits = key.strip()
        if not (digits.isascii() and digits.isdecimal()):
            raise ValueError(
                f"keys must be token ids (non-negative integers as strings), got {key!r}"
            )
        if not -MAX_LOGIT_BIAS <= bias <= MAX_LOGIT_BIAS:  # also refuses NaN
            raise ValueError(f"biases must be between -100 and 100, got {bias} for token {digits}")
    return value


class SamplingFields(OpenAIBaseModel):
    """Fields shared by chat and completions requests."""

    model: str
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=128)
    seed: int | None = Field(default=None, ge=-INT64, lt=INT64)
    stop: Any = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    # vLLM extension (Hugging Face semantics over prompt and output tokens); 1 = off
    repetition_penalty: float | None = Field(default=None, gt=0.0, le=MAX_REPETITION_PENALTY)
    logit_bias: dict[str, float] | None = None
    hedgespec: HedgeSpecOptions | None = None
    top_k: int | None = Field(default=None, ge=0)  # vLLM extension; 0 = off
    ignore_eos: bool = False  # vLLM extension; fixed-length generation for benchmarks
    # vLLM extension: when the batch is full, waiting requests with a lower value start first
    priority: int = Field(default=0, ge=-(2**31), lt=2**31)

    @field_validator("stop", mode="after")
    @classmethod
    def _check_stop(cls, value: Any) -> list[str] | None:
        return _normalise_stop(value)

    @field_validator("logit_bias", mode="after")
    @classmethod
    def _check_logit_bias(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        return None if value is None else _check_logit_bias(value)

    def check(self) -> None:
        """Cross-field rules, raised with the offending `param` named (overridden below)."""

    @property
    def stop_strings(self) -> list[str]:
        return list(self.stop or [])

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)

    @property
    def policy(self) -> str:
        return self.hedgespec.policy if self.hedgespec else "auto"

    @property
    def penalties(self) -> Penalties:
        """The engine's logits adjustments; `logit_bias` keys as ints (a repeated id, e.g. "7"
        and "07", keeps the last bias, as a JSON object's repeated key would)."""
        bias = {int(k): float(v) for k, v in (self.logit_bias or {}).items()}
        return Penalties(
            presence=self.presence_penalty or 0.0,
            frequency=self.frequency_penalty or 0.0,
            repetition=1.0 if self.repetition_penalty is None else self.repetition_penalty,
            logit_bias=tuple(sorted(bias.items())),
        )

    @property
    def session(self) -> str | None:
        return self.hedgespec.session if self.hedgespec else None


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool | None = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_CHAT_TOP_LOGPROBS)
    tools: Any = None  # validated into tuple[Tool, ...]
    tool_choice: Any = None  # validated into a ToolChoice
    parallel_tool_calls: bool = True
    functions: list[Any] | None = None
    response_format: dict[str, Any] | None = None
    modalities: list[str] | None = None

    @field_validator("tools", mode="after")
    @classmethod
    def _check_tools(cls, value: Any) -> tuple[Tool, ...]:
        if value is not None and not isinstance(value, list):
            raise ValueError("must be a list of tools")
        return parse_tools(value or [])

    @field_validator("tool_choice", mode="after")
    @classmethod
    def _check_tool_choice(cls, value: Any) -> ToolChoice:
        return parse_tool_choice(value)

    @field_validator("functions", mode="after")
    @classmethod
    def _no_functions(cls, value: list[Any] | None) -> list[Any] | None:
        if value:
            raise ValueError("the deprecated `functions` field is not supported; use `tools`")
        return value

    @field_validator("modalities", mode="after")
    @classmethod
    def _text_only(cls, value: list[str] | None) -> list[str] | None:
        if value and set(value) != {"text"}:
            raise ValueError(f"only text output is supported, got {value}")
        return value

    @field_validator("response_format", mode="after")
    @classmethod
    def _known_format(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value:
            response_format_grammar(value)  # raises ValueError with the reason
        return value

    @property
    def grammar(self) -> GrammarSpec | None:
        return response_format_grammar(self.response_format) if self.response_format else None

    @property
    def tool_request(self) -> ToolRequest | None:
        """What the tools ask of generation (None: no tools, or `tool_choice` "none")."""
        choice = self.tool_choice or ToolChoice("auto")
        return tool_request(self.tools or (), choice, self.parallel_tool_calls)

    def check(self) -> None:
        """Cross-field rules, raised with the offending `param` named."""
        if self.top_logprobs and not self.logprobs:
            raise invalid_request("top_logprobs requires logprobs to be true", param="top_logprobs")
        try:
            self.tool_request  # noqa: B018  (raises on a tool_choice the tools cannot meet)
        except ValueError as e:
            raise invalid_request(str(e), param="tool_choice") from None

    @property
    def max_new_tokens(self) -> int | None:
        # `max_tokens` is deprecated in chat in favour of `max_completion_tokens`.
        return self.max_completion_tokens or self.max_tokens

    @property
    def num_logprobs(self) -> int | None:
        """Engine `SamplingParams.logprobs`: None, or how many alternatives per token."""
        return (self.top_logprobs or 0) if self.logprobs else None


def response_format_grammar(value: dict[str, Any]) -> GrammarSpec | None:
    """OpenAI's `response_format` as the engine's grammar: `text` is none, `json_object` any
    JSON object, `json_schema` its `schema` (enforced whether or not `strict` is set: the
    grammar masks the target, so the output always conforms). ValueError says what is wrong."""
    kind = value.get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return GrammarSpec("json_schema", json.dumps({"type": "object"}))
    if kind != "json_schema":
        raise ValueError("response_format type must be text, json_object or json_schema, not "
                         f"{kind!r}")
    spec = value.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise ValueError("response_format json_schema needs a json_schema object with a name")
    schema = spec.get("schema", {})
    if not isinstance(schema, dict):
        raise ValueError("response_format json_schema.schema must be a JSON Schema object")
    grammar = GrammarSpec("json_schema", json.dumps(schema))
    grammar_text(grammar)  # refuse what the grammar engine cannot compile, before any work
    return grammar


PromptInput = list[str | list[int]]


def _normalise_prompt(value: Any) -> PromptInput:
    """str | list[str] | list[int] | list[list[int]] -> a list of prompts (text or ids)."""
    if isinstance(value, str):
        return [_unicode(value)]
    if not isinstance(value, list) or not value:
        raise ValueError("must be a non-empty string, list of strings, or list of token ids")
    if all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        return [list(value)]
    prompts: PromptInput = []
    for item in value:
        if isinstance(item, str):
            prompts.append(_unicode(item))
        elif isinstance(item, list) and item and all(isinstance(x, int) for x in item):
            prompts.append(list(item))
        else:
            raise ValueError("each prompt must be a string or a non-empty list of token ids")
    return prompts


class CompletionRequest(SamplingFields):
    prompt: Any
    max_tokens: int | None = Field(default=16, ge=1)
    logprobs: int | None = Field(default=None, ge=0, le=MAX_COMPLETION_LOGPROBS)
    echo: bool | None = False
    suffix: str | None = None
    best_of: int | None = Field(default=None, ge=1)

    @field_validator("prompt", mode="after")
    @classmethod
    def _check_prompt(cls, value: Any) -> PromptInput:
        return _normalise_prompt(value)

    @field_validator("suffix", mode="after")
    @classmethod
    def _no_suffix(cls, value: str | None) -> str | None:
        if value:
            raise ValueError("suffix (insertion) is not supported by this server; omit it")
        return value

    def check(self) -> None:
        """Cross-field rules, raised with the offending `param` named."""
        if self.best_of is not None and self.best_of != self.n:
            raise invalid_request(
                "best_of is not supported by this server; omit it or set it to n", param="best_of"
            )

    @property
    def prompts(self) -> PromptInput:
        return list(self.prompt)

    @property
    def max_new_tokens(self) -> int | None:
        return self.max_tokens

    @property
    def num_logprobs(self) -> int | None:
        return self.logprobs

    @property
    def num_prompt_logprobs(self) -> int | None:
        """`echo` with `logprobs`: the prompt tokens' logprobs too (engine `prompt_logprobs`)."""
        return self.logprobs if self.echo else None
