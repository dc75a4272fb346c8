"""The grammar that forces tool calls: `tool_choice` "required" (one or more calls of any tool,
exactly one when `parallel_tool_calls` is false) or a named tool (exactly one call of it); and,
for "auto" with a structured answer format (chat `response_format`, Responses `text.format`),
the choice between them: either calls of any tool, or an answer that follows the format's JSON
schema (what OpenAI's models do with tools and a JSON schema; the OpenAI Agents SDK sends both).

A Lark grammar for llguidance with the call object embedded as a JSON schema (`%json`): an
anyOf over the tools of `{"name": {"const": name}, <args key>: <parameters>}`, written with
", " and ": " like core/speculation/grammar.py's JSON (see `arguments_schema` for the two defaults
it adds). A tag such as `<tool_call>` that the tokenizer holds
as a *special* token must be that token (`<[id]>` in llguidance's Lark), since no byte
spelling produces it; otherwise it is a string literal (whatever tokens spell it).
"""

from __future__ import annotations

import json
from typing import Any

from core.api import JSON_OPTIONS, GrammarSpec
from gateway.openai.tools.formats import ToolFormat
from gateway.openai.tools.spec import Tool, ToolRequest


def tool_grammar(fmt: ToolFormat, tools: ToolRequest, tokenizer: Any,
                 answer: GrammarSpec | None = None) -> GrammarSpec | None:
    """None for "auto" without an `answer` format (free text, parsed afterwards). With one
    (a JSON-schema grammar), "auto" is calls of any tool or an answer in that schema; a forced
    call ignores it (the call is the whole output, as OpenAI's)."""
    forced = tools.forced
    if not forced and answer is None:
        return None
    if not forced:
        assert answer is not None and answer.kind == "json_schema"
        schema = json.loads(answer.source)
        schema.setdefault("x-guidance", dict(JSON_OPTIONS))
        calls = _calls_grammar(fmt, tools.tools, not tools.parallel, tokenizer, rule="calls")
        answer_rule = f"answer: %json {json.dumps(schema, ensure_ascii=False)}\n"
        return GrammarSpec("lark", f"start: calls | answer\n{calls}{answer_rule}")
    return GrammarSpec("lark", _calls_grammar(fmt, forced, tools.single_call, tokenizer))


def _calls_grammar(fmt: ToolFormat, tools: tuple[Tool, ...], single: bool, tokenizer: Any,
                   *, rule: str = "start") -> str:
    schema = json.dumps(call_schema(fmt, tools), ensure_ascii=False)
    call = f"%json {schema}"
    if fmt.open and fmt.close:
        call = (f'{lark_tag(fmt.open, tokenizer)} "\\n" {call} "\\n" '
                f'{lark_tag(fmt.close, tokenizer)}')
    repeat = "" if single else f" ({json.dumps(fmt.separator)} call)*"
    return f"{rule}: call{repeat}\ncall: {call}\n"


def call_schema(fmt: ToolFormat, tools: tuple[Tool, ...]) -> dict[str, Any]:
    options = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, fmt.args_key: arguments_schema(t)},
            "required": ["name", fmt.args_key],
            "additionalProperties": False,
        }
        for t in tools
    ]
    return {"anyOf": options, "x-guidance": dict(JSON_OPTIONS)}


def arguments_schema(tool: Tool) -> dict[str, Any]:
    """The tool's parameters as the forced arguments: an object even where the schema leaves
    the type open (a bare `properties` schema also admits `true`), and only the declared
    properties unless the schema says otherwise, as OpenAI's strict function calling has it
    (free extra keys let a small model ramble on until `max_tokens`)."""
    params = dict(tool.parameters or {})
    params.setdefault("type", "object")
    if "properties" in params:
        params.setdefault("additionalProperties", False)
    return params


def special_token_id(tokenizer: Any, text: str) -> int | None:
    """The id of `text` when the tokenizer holds it as one special added token."""
    for token_id, added in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items():
        if added.content == text and added.special:
            return int(token_id)
    return None


def lark_tag(text: str, tokenizer: Any) -> str:
    token_id = special_token_id(tokenizer, text)
    return f"<[{token_id}]>" if token_id is not None else json.dumps(text)
