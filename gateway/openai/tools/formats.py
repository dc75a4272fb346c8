"""Tool-call wire formats, detected from the target's chat template, and rendering a
conversation with tools for each.

- `hermes` (Qwen2.5, Qwen3, Hermes): the template mentions `<tool_call>`. Tools go to the
  template (`apply_chat_template(tools=...)`); a call is `<tool_call>\\n{"name": ...,
  "arguments": {...}}\\n</tool_call>`, parallel calls one after another (newline-separated).
- `llama3_json` (Llama 3.1, 3.2): the template mentions `ipython`. Tools go to the template; a
  call is a bare JSON object `{"name": ..., "parameters": {...}}`, parallel calls joined by "; ".
- `generic`: any other template (the demo target's has no tool format). We describe the tools
  in a system message ourselves (merged into the conversation's first system message if any),
  with the hermes call format; in the history, an assistant's `tool_calls` become `<tool_call>`
  blocks of its content and a `tool` message becomes a user message
  `<tool_response>\\n...\\n</tool_response>`, so a template that knows only system/user/assistant
  renders any tool conversation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from gateway.openai.tools.spec import ToolRequest

FormatName = Literal["hermes", "llama3_json", "generic"]
OPEN, CLOSE = "<tool_call>", "</tool_call>"


@dataclass(frozen=True)
class ToolFormat:
    name: FormatName
    args_key: str  # the call object's key for the arguments
    open: str | None  # the tag around each call; None: bare JSON
    close: str | None
    separator: str  # between parallel calls
    templated: bool  # the chat template renders tools and tool messages itself


HERMES = ToolFormat("hermes", "arguments", OPEN, CLOSE, "\n", templated=True)
LLAMA3_JSON = ToolFormat("llama3_json", "parameters", None, None, "; ", templated=True)
GENERIC = ToolFormat("generic", "arguments", OPEN, CLOSE, "\n", templated=False)


def detect(chat_template: Any) -> ToolFormat:
    """The format a chat template speaks (a template may also be a dict of named templates)."""
    text = (json.dumps(chat_template) if isinstance(chat_template, (dict, list))
            else str(chat_template or ""))
    if OPEN in text:
        return HERMES
    if "ipython" in text:
        return LLAMA3_JSON
    return GENERIC


def call_text(fmt: ToolFormat, name: str, arguments: Any) -> str:
    """One call as the model writes it (JSON with ", " and ": ", as the grammar enforces)."""
    body = json.dumps({"name": name, fmt.args_key: arguments}, ensure_ascii=False)
    return f"{fmt.open}\n{body}\n{fmt.close}" if fmt.open else body


def render(
    fmt: ToolFormat, messages: list[dict[str, Any]], tools: ToolRequest | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The messages for the chat template and its `tools` argument (None: no tools shown)."""
    listed = [t.openai_dict() for t in tools.tools] if tools else None
    if fmt.templated:
        return messages, listed
    out = [_generic_message(m) for m in messages]
    if listed:
        out = _with_system(out, tools_prompt(listed))
    return out, None


def tools_prompt(listed: list[dict[str, Any]]) -> str:
    """Our description of the tools: their function objects, one JSON per line, and the call
    format (kept short: small targets have short contexts)."""
    lines = "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in listed)
    return (
        f"Tools (JSON Schema):\n<tools>\n{lines}\n</tools>\n"
        f'Call a tool with:\n{OPEN}\n{{"name": <name>, "arguments": <object>}}\n{CLOSE}\n'
        "Results come in <tool_response> blocks."
    )


def _generic_message(m: dict[str, Any]) -> dict[str, Any]:
    if m["role"] == "tool":
        return {"role": "user", "content": f"<tool_response>\n{m['content']}\n</tool_response>"}
    calls = m.get("tool_calls")
    if m["role"] == "assistant" and calls:
        blocks = [call_text(GENERIC, c["function"]["name"], c["function"]["arguments"])
                  for c in calls]
        content = "\n".join(([m["content"]] if m["content"] else []) + blocks)
        return {"role": "assistant", "content": content}
    return {"role": m["role"], "content": m["content"]}


def _with_system(messages: list[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    if messages and messages[0]["role"] == "system":
        first = messages[0]["content"]
        merged = f"{first}\n\n{prompt}" if first else prompt
        return [{"role": "system", "content": merged}, *messages[1:]]
    return [{"role": "system", "content": prompt}, *messages]
