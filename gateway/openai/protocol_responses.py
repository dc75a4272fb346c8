"""`/v1/responses` request model (field names exactly as OpenAI's `ResponseCreateParams`) and
its input items.

Input: a string (one user message) or a list of items: messages (`role` user, system,
developer or assistant; `content` a string or `input_text` / `output_text` parts; `type`
"message" may be left out, as the SDK's `EasyInputMessage` does), `function_call` items (the
model's earlier calls: `call_id`, `name`, `arguments`) and `function_call_output` items
(`call_id`, `output`). Each is normalised to the stored item shape that
`GET /v1/responses/{id}/input_items` lists (with an id: the client's, else a new one) and turned
into the chat messages the chat template renders, so the Responses API runs the chat path:
same template, tool formats, grammar and tool parsing. Other item types (images, files,
reasoning, item references, built-in tool calls) are refused with a 400 naming the item.

Tools are Responses function tools (`{"type": "function", "name", "description", "parameters",
"strict"}`), validated by the chat path's `parse_tools`; built-in tools (web search, file
search, computer use, code interpreter, MCP, ...) are refused with a 400 naming the tool.
`text.format` (`text`, `json_object`, `json_schema` with `name`, `schema`, `strict`) is the
chat path's `response_format` grammar (enforced whether or not `strict` is set).

Refused when set, because they would change the output or promise what this server does not
do: `background`, `conversation`, `prompt` (stored prompt templates), `truncation: "auto"`,
`max_tool_calls`, `top_logprobs` / `include` entries other than
`reasoning.encrypted_content` (no reasoning items are produced, so that one is a no-op), and
`n` > 1. Accepted and ignored, as on the chat route: any unknown field, `reasoning` (the
served models do not reason), `service_tier`, `prompt_cache_key`, `safety_identifier`,
`stream_options`. Extensions: `hedgespec`, vLLM's `priority`, and the chat route's sampling
extensions (`seed`, `top_k`, penalties, `logit_bias`, `stop`, `ignore_eos`).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator

from core.api import GrammarSpec
from gateway.errors import invalid_request
from gateway.openai.protocol import ChatMessage, SamplingFields, response_format_grammar
from gateway.openai.tools.spec import (
    Tool,
    ToolChoice,
    ToolRequest,
    parse_tool_choice,
    parse_tools,
    tool_request,
)

MAX_METADATA_KEYS = 16
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512
# `include` values that ask for nothing this server produces (no reasoning items).
HARMLESS_INCLUDES = frozenset({"reasoning.encrypted_content"})
INPUT_TYPES = ("message", "function_call", "function_call_output")
TEXT_PARTS = {"input_text", "output_text", "text"}
ROLES = ("user", "system", "developer", "assistant")


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where} must be a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{where} must be valid Unicode text") from None
    return value


def _content_text(content: Any, where: str) -> str:
    """A message's content (a string or text parts) as one string."""
    if isinstance(content, str):
        return _text(content, where)
    if not isinstance(content, list):
        raise ValueError(f"{where} must be a string or a list of content parts")
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in TEXT_PARTS:
            texts.append(_text(part.get("text"), f"{where}[{j}].text"))
        elif kind == "refusal":
            texts.append(_text(part.get("refusal"), f"{where}[{j}].refusal"))
        else:
            raise ValueError(f"{where}[{j}]: only text content is supported, got "
                             f"{kind if kind is not None else type(part).__name__!r}")
    return "".join(texts)


def _message(i: int, item: dict[str, Any]) -> dict[str, Any]:
    role = item.get("role")
    if role not in ROLES:
        raise ValueError(f"input[{i}].role must be one of {', '.join(ROLES)}")
    text = _content_text(item.get("content"), f"input[{i}].content")
    if role == "assistant":
        part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
        prefix = "msg"
    else:
        part = {"type": "input_text", "text": text}
        prefix = "msg"
    return {"id": str(item.get("id") or new_id(prefix)), "type": "message", "role": role,
            "status": "completed", "content": [part]}


def _function_call(i: int, item: dict[str, Any]) -> dict[str, Any]:
    call_id = _text(item.get("call_id"), f"input[{i}].call_id")
    name = _text(item.get("name"), f"input[{i}].name")
    arguments = _text(item.get("arguments", "{}"), f"input[{i}].arguments")
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        raise ValueError(f"input[{i}].arguments must be a JSON object") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"input[{i}].arguments must be a JSON object")
    return {"id": str(item.get("id") or new_id("fc")), "type": "function_call",
            "call_id": call_id, "name": name, "arguments": arguments, "status": "completed"}


def _function_call_output(i: int, item: dict[str, Any]) -> dict[str, Any]:
    call_id = _text(item.get("call_id"), f"input[{i}].call_id")
    output = _content_text(item.get("output"), f"input[{i}].output")
    return {"id": str(item.get("id") or new_id("fco")), "type": "function_call_output",
            "call_id": call_id, "output": output, "status": "completed"}


def parse_input(value: Any) -> list[dict[str, Any]]:
    """`input` as stored items; ValueError names the offending item."""
    if isinstance(value, str):
        return [{"id": new_id("msg"), "type": "message", "role": "user", "status": "completed",
                 "content": [{"type": "input_text", "text": _text(value, "input")}]}]
    if not isinstance(value, list):
        raise ValueError("must be a string or a list of input items")
    items = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise ValueError(f"input[{i}] must be an object")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            items.append(_message(i, item))
        elif kind == "function_call":
            items.append(_function_call(i, item))
        elif kind == "function_call_output":
            items.append(_function_call_output(i, item))
        elif kind == "item_reference":
            raise ValueError(f"input[{i}]: item references are not supported; send the item "
                             "itself, or continue a stored response with previous_response_id")
        else:
            raise ValueError(f"input[{i}]: unsupported input item type {kind!r}; this server "
                             f"accepts {', '.join(INPUT_TYPES)}")
    return items


def chat_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored items as chat messages (the OpenAI chat wire form): function calls join the
    assistant message they follow (a response's text and calls are one assistant turn), and
    each call output is a `tool` message."""
    out: list[dict[str, Any]] = []
    in_turn = False  # the last message is an assistant turn calls may join
    for item in items:
        kind = item["type"]
        if kind == "message":
            out.append({"role": item["role"], "content": item["content"][0]["text"]})
            in_turn = item["role"] == "assistant"
        elif kind == "function_call":
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            if in_turn:
                out[-1].setdefault("tool_calls", []).append(call)
                if not out[-1]["content"]:
                    out[-1]["content"] = None
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
            in_turn = True
        else:
            out.append({"role": "tool", "tool_call_id": item["call_id"],
                        "content": item["output"]})
            in_turn = False
    return out


def validated_messages(messages: list[dict[str, Any]]) -> list[ChatMessage]:
    """The chat path's own message validation (roles, tool calls' JSON arguments)."""
    out = []
    for i, message in enumerate(messages):
        try:
            out.append(ChatMessage.model_validate(message))
        except ValidationError as e:
            first = e.errors()[0]
            msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
            raise invalid_request(f"Invalid conversation message {i}: {msg}",
                                  param="input") from None
    return out


def _function_tools(value: Any) -> tuple[list[dict[str, Any]], tuple[Tool, ...]]:
    """Responses function tools, echoed as given and parsed by the chat path."""
    if value is None:
        return [], ()
    if not isinstance(value, list):
        raise ValueError("must be a list of tools")
    echoed, as_chat = [], []
    for i, tool in enumerate(value):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise ValueError(f"tools[{i}]: the built-in tool {kind!r} is not supported by this "
                             "server; only function tools ({\"type\": \"function\", \"name\", "
                             "\"parameters\"}) are")
        function = {k: tool[k] for k in ("name", "description", "parameters") if k in tool}
        as_chat.append({"type": "function", "function": function})
        echoed.append({"type": "function", "name": tool.get("name"),
                       "description": tool.get("description"),
                       "parameters": tool.get("parameters"),
                       "strict": tool.get("strict", True)})
    return echoed, parse_tools(as_chat)


def _tool_choice(value: Any) -> ToolChoice:
    if value is None or isinstance(value, str):
        return parse_tool_choice(value)
    if isinstance(value, dict) and value.get("type") == "function":
        if not isinstance(value.get("name"), str):
            raise ValueError('a function tool_choice needs a "name"')
        return ToolChoice("named", value["name"])
    kind = value.get("type") if isinstance(value, dict) else type(value).__name__
    raise ValueError(f'must be "none", "auto", "required" or {{"type": "function", "name": ...}}; '
                     f"{kind!r} is not supported")


def text_format_grammar(value: dict[str, Any]) -> GrammarSpec | None:
    """`text.format` as the chat path's `response_format` grammar."""
    kind = value.get("type", "text")
    if kind != "json_schema":
        return response_format_grammar({"type": kind})
    spec = {k: value[k] for k in ("name", "schema", "strict", "description") if k in value}
    return response_format_grammar({"type": "json_schema", "json_schema": spec})


class ResponsesRequest(SamplingFields):
    input: Any
    instructions: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    tools: Any = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = True
    text: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = True
    previous_response_id: str | None = Field(default=None, min_length=1, max_length=64)
    # OpenAI fields refused when set (see the module docstring)
    background: bool | None = None
    conversation: Any = None
    prompt: Any = None
    truncation: str | None = None
    max_tool_calls: int | None = None
    top_logprobs: int | None = None
    include: list[str] | None = None

    # The function tools, parsed once from `tools`. Per-job state (the response's id, owner,
    # conversation and learner session) is the serving class's `ResponseContext`, not kept here.
    _tools: tuple[Tool, ...] = PrivateAttr(default=())

    @field_validator("input", mode="after")
    @classmethod
    def _check_input(cls, value: Any) -> list[dict[str, Any]]:
        return parse_input(value)

    @field_validator("tools", mode="after")
    @classmethod
    def _check_tools(cls, value: Any) -> list[dict[str, Any]]:
        echoed, _ = _function_tools(value)  # parses (and refuses) the tools
        return echoed

    @model_validator(mode="after")
    def _parse_tools_once(self) -> ResponsesRequest:
        self._tools = _function_tools(self.tools)[1] if self.tools else ()
        return self

    @field_validator("tool_choice", mode="after")
    @classmethod
    def _check_tool_choice(cls, value: Any) -> Any:
        _tool_choice(value)
        return value

    @field_validator("text", mode="after")
    @classmethod
    def _check_text(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        fmt = (value or {}).get("format")
        if fmt is not None:
            if not isinstance(fmt, dict):
                raise ValueError("text.format must be an object")
            text_format_grammar(fmt)  # raises ValueError with the reason
        return value

    @field_validator("metadata", mode="after")
    @classmethod
    def _check_metadata(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        if len(value) > MAX_METADATA_KEYS:
            raise ValueError(f"at most {MAX_METADATA_KEYS} keys")
        for key, item in value.items():
            if len(key) > MAX_METADATA_KEY or len(item) > MAX_METADATA_VALUE:
                raise ValueError(f"keys are at most {MAX_METADATA_KEY} characters and values "
                                 f"at most {MAX_METADATA_VALUE}")
        return value

    def check(self) -> None:
        """Cross-field rules and refused fields, raised with the offending `param` named."""
        refused = {
            "background": self.background, "conversation": self.conversation,
            "prompt": self.prompt, "max_tool_calls": self.max_tool_calls,
            "top_logprobs": self.top_logprobs or None,
        }
        for param, value in refused.items():
            if value:
                raise invalid_request(f"{param} is not supported by this server; omit it",
                                      param=param)
        if self.truncation not in (None, "disabled"):
            raise invalid_request('truncation "auto" is not supported by this server; omit it '
                                  "or set it to \"disabled\"", param="truncation")
        unknown = sorted(set(self.include or []) - HARMLESS_INCLUDES)
        if unknown:
            raise invalid_request(f"include values {unknown} are not supported by this server",
                                  param="include")
        if self.n != 1:
            raise invalid_request("n must be 1 for the Responses API", param="n")
        try:
            self.tool_request  # noqa: B018  (raises on a tool_choice the tools cannot meet)
        except ValueError as e:
            raise invalid_request(str(e), param="tool_choice") from None

    @property
    def items(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.input
        return items

    @property
    def function_tools(self) -> tuple[Tool, ...]:
        return self._tools

    @property
    def parsed_tool_choice(self) -> ToolChoice:
        return _tool_choice(self.tool_choice)

    @property
    def tool_request(self) -> ToolRequest | None:
        return tool_request(self.function_tools, self.parsed_tool_choice,
                            self.parallel_tool_calls is not False)

    @property
    def text_format(self) -> dict[str, Any]:
        fmt = (self.text or {}).get("format")
        return dict(fmt) if isinstance(fmt, dict) else {"type": "text"}

    @property
    def grammar(self) -> GrammarSpec | None:
        return text_format_grammar(self.text_format)

    @property
    def max_new_tokens(self) -> int | None:
        return self.max_output_tokens

    @property
    def num_logprobs(self) -> int | None:
        return None

    @property
    def include_usage(self) -> bool:
        return False
