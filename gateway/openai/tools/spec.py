"""The request side of tool calling as typed data, validated with readable ValueErrors.

`tools` is OpenAI's list of `{"type": "function", "function": {"name", "description",
"parameters"}}`; `tool_choice` is "none", "auto", "required" or `{"type": "function",
"function": {"name"}}` naming one of them; `parallel_tool_calls` allows several calls in one
answer (the default). The deprecated `functions` field is not supported.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from core.api import GrammarSpec, grammar_text

# OpenAI's rule for function names.
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_TOOLS = 128
Mode = Literal["none", "auto", "required", "named"]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str | None
    parameters: dict[str, Any] | None  # a JSON Schema object; None accepts any object

    def openai_dict(self) -> dict[str, Any]:
        """The tool as chat templates (and our generic system prompt) expect it."""
        function: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            function["description"] = self.description
        function["parameters"] = (self.parameters if self.parameters is not None
                                  else {"type": "object"})
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolChoice:
    mode: Mode
    name: str | None = None  # the named tool, for mode "named"


@dataclass(frozen=True)
class ToolRequest:
    """What generation must do about tools: render them, and maybe force a call."""

    tools: tuple[Tool, ...]
    choice: ToolChoice
    parallel: bool

    @property
    def forced(self) -> tuple[Tool, ...]:
        """The tools a grammar must restrict the output to calling (empty for "auto")."""
        if self.choice.mode == "required":
            return self.tools
        if self.choice.mode == "named":
            return tuple(t for t in self.tools if t.name == self.choice.name)
        return ()

    @property
    def single_call(self) -> bool:
        return self.choice.mode == "named" or not self.parallel


def parse_tools(value: list[Any]) -> tuple[Tool, ...]:
    """`tools` as typed data; ValueError names the offending entry."""
    if len(value) > MAX_TOOLS:
        raise ValueError(f"at most {MAX_TOOLS} tools are supported")
    tools = tuple(_tool(i, item) for i, item in enumerate(value))
    names = [t.name for t in tools]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"tool names must be unique, repeated: {dupes}")
    return tools


def _tool(i: int, item: Any) -> Tool:
    where = f"tools[{i}]"
    if not isinstance(item, dict) or item.get("type") != "function":
        raise ValueError(f'{where} must be an object with "type": "function"')
    fn = item.get("function")
    if not isinstance(fn, dict):
        raise ValueError(f"{where}.function must be an object with a name")
    name = fn.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"{where}.function.name must be 1-64 letters, digits, underscores or "
                         "dashes")
    description = fn.get("description")
    if description is not None and not isinstance(description, str):
        raise ValueError(f"{where}.function.description must be a string")
    params = fn.get("parameters")
    if params is not None:
        if not isinstance(params, dict):
            raise ValueError(f"{where}.function.parameters must be a JSON Schema object")
        try:  # refuse what the grammar engine cannot compile, before any work
            grammar_text(GrammarSpec("json_schema", json.dumps(params)))
        except ValueError as e:
            raise ValueError(f"{where}.function.parameters: {e}") from None
    return Tool(name, description, params)


def parse_tool_choice(value: Any) -> ToolChoice:
    if value is None:
        return ToolChoice("auto")
    if value in ("none", "auto", "required"):
        return ToolChoice(value)
    fn = (value.get("function") if isinstance(value, dict) and value.get("type") == "function"
          else None)
    if isinstance(fn, dict) and isinstance(fn.get("name"), str):
        return ToolChoice("named", fn["name"])
    raise ValueError('must be "none", "auto", "required" or {"type": "function", "function": '
                     '{"name": ...}}')


def tool_request(tools: tuple[Tool, ...], choice: ToolChoice, parallel: bool) -> ToolRequest | None:
    """None when nothing about tools applies (no tools, or `tool_choice` "none")."""
    if choice.mode == "named" and choice.name not in {t.name for t in tools}:
        raise ValueError(f"tool_choice names {choice.name!r}, which is not in tools")
    if choice.mode == "required" and not tools:
        raise ValueError('tool_choice "required" needs tools')
    if not tools or choice.mode == "none":
        return None
    return ToolRequest(tools, choice, parallel)
