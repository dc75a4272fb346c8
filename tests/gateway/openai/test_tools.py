"""Tool calling without a server: request validation, format detection, rendering a tool
conversation in each format (tiny tokenizers carrying our Qwen3- and Llama-3.1-style
templates), and parsing calls back, whole and streamed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from bench.harness.tiny_pool import train_tokenizer
from gateway.openai.protocol import ChatCompletionRequest
from gateway.openai.text import render_chat
from gateway.openai.tools import formats
from gateway.openai.tools.parse import ToolCall, ToolParser
from tests.gateway.tool_templates import LLAMA31_STYLE, QWEN3_STYLE

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather now",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}  # fmt: skip
TIME = {"type": "function", "function": {"name": "get_time"}}
HISTORY = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
]  # fmt: skip
NAMES = frozenset({"get_weather", "get_time"})


def request(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "m", "messages": HISTORY,
                                                 "tools": [WEATHER, TIME], **fields})


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return train_tokenizer()


def prompt(tokenizer: Any, template: str | None, req: ChatCompletionRequest) -> tuple[str, str]:
    tok = tokenizer if template is None else _with_template(tokenizer, template)
    fmt = formats.detect(tok.chat_template)
    messages, listed = formats.render(fmt, [m.template_dict() for m in req.messages],
                                      req.tool_request)
    return fmt.name, tok.decode(render_chat(tok, messages, listed))


def _with_template(tokenizer: Any, template: str) -> Any:
    import copy

    tok = copy.copy(tokenizer)
    tok.chat_template = template
    return tok


# ---- request fields ---------------------------------------------------------------------------


def test_tool_request_modes() -> None:
    assert request().tool_request.choice.mode == "auto"  # type: ignore[union-attr]
    assert request(tool_choice="none").tool_request is None
    forced = request(tool_choice={"type": "function",
                                  "function": {"name": "get_time"}}).tool_request
    assert (forced is not None and [t.name for t in forced.forced] == ["get_time"]
            and forced.single_call)
    required = request(tool_choice="required", parallel_tool_calls=False).tool_request
    assert required is not None and len(required.forced) == 2 and required.single_call


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tools": [{"type": "function"}]}, "tools[0].function must be an object"),
        ({"tools": [{"type": "retrieval", "function": {"name": "x"}}]}, '"type": "function"'),
        ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "function.name must be"),
        ({"tools": [TIME, TIME]}, "must be unique"),
        ({"tools": [{"type": "function", "function": {"name": "x", "parameters": []}}]},
         "JSON Schema object"),
        ({"tool_choice": "sometimes"}, 'must be "none", "auto", "required"'),
        ({"functions": [{"name": "x"}]}, "deprecated"),
    ],
)
def test_bad_tool_fields(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("[", r"\[").replace("(", r"\(")):
        request(**fields)


def test_cross_field_rules_name_their_param() -> None:
    from gateway.errors import APIError

    for fields, param in [
        ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tools": [], "tool_choice": "required"}, "tool_choice"),
    ]:
        with pytest.raises(APIError) as err:
            request(**fields).check()
        assert err.value.param == param
    # tools with a JSON response_format are one request (call tools, or answer in that
    # format), as the OpenAI Agents SDK sends them: no longer a 400
    both = request(response_format={"type": "json_object"})
    both.check()
    assert both.tool_request is not None


def test_history_arguments_must_be_a_json_object() -> None:
    bad = [*HISTORY[:2],
           {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1"}}]}]
    with pytest.raises(ValidationError, match="JSON object"):
        ChatCompletionRequest.model_validate({"model": "m", "messages": bad})


# ---- formats and rendering --------------------------------------------------------------------


def test_detect() -> None:
    assert formats.detect(QWEN3_STYLE).name == "hermes"
    assert formats.detect(LLAMA31_STYLE).name == "llama3_json"
    assert formats.detect(None).name == "generic"
    assert formats.detect({"default": QWEN3_STYLE}).name == "hermes"


def test_hermes_template_gets_tools_and_dict_arguments(tokenizer: Any) -> None:
    name, text = prompt(tokenizer, QWEN3_STYLE, request())
    assert name == "hermes"
    assert json.dumps(WEATHER) in text and '"name": "get_time"' in text
    assert ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
            in text)
    assert "<tool_response>\n18 C\n</tool_response>" in text


def test_llama3_template_gets_tools_and_parameters(tokenizer: Any) -> None:
    name, text = prompt(tokenizer, LLAMA31_STYLE, request())
    assert name == "llama3_json"
    assert json.dumps(WEATHER) in text
    assert '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>' in text
    assert "<|start_header_id|>ipython<|end_header_id|>\n\n18 C" in text


def test_generic_format_describes_tools_in_the_system_message(tokenizer: Any) -> None:
    name, text = prompt(tokenizer, None, request())
    assert name == "generic"
    system = text.split("<|end|>")[0]
    assert (system.startswith("<|system|>\nBe brief.\n\n")
            and json.dumps(WEATHER["function"]) in system)
    assert '<tool_call>\n{"name": <name>, "arguments": <object>}\n</tool_call>' in system
    assert ('<|assistant|>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": '
            '"Paris"}}\n</tool_call>') in text
    assert "<|user|>\n<tool_response>\n18 C\n</tool_response>" in text
    assert "<|tool|>" not in text


def test_generic_prepends_a_system_message_and_none_shows_no_tools(tokenizer: Any) -> None:
    req = ChatCompletionRequest.model_validate({"model": "m", "messages": HISTORY[1:],
                                                "tools": [TIME]})
    assert prompt(tokenizer, None, req)[1].startswith("<|system|>\nTools (JSON Schema):\n<tools>")
    _, none = prompt(tokenizer, None, request(tool_choice="none"))
    assert "<tools>" not in none and "<tool_response>" in none  # the history still renders
    _, hermes_none = prompt(tokenizer, QWEN3_STYLE, request(tool_choice="none"))
    assert "# Tools" not in hermes_none


# ---- parsing ----------------------------------------------------------------------------------

CALL_A = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
CALL_B = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'


def parse_whole(fmt: formats.ToolFormat, text: str,
                parallel: bool = True) -> tuple[str, list[tuple[str, str]]]:
    p = ToolParser(fmt, NAMES, parallel)
    events = p.feed(text) + p.finish()
    return ("".join(e for e in events if isinstance(e, str)),
            [(c.name, c.arguments) for c in p.calls])


def parse_streamed(fmt: formats.ToolFormat, text: str,
                   step: int) -> tuple[str, list[tuple[str, str]]]:
    p = ToolParser(fmt, NAMES)
    events = [e for i in range(0, len(text), step) for e in p.feed(text[i : i + step])] + p.finish()
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert calls == p.calls
    return "".join(e for e in events if isinstance(e, str)), [(c.name, c.arguments) for c in calls]


@pytest.mark.parametrize("fmt", [formats.HERMES, formats.GENERIC])
def test_tagged_calls_parse_whole_and_streamed(fmt: formats.ToolFormat) -> None:
    text = f"Let me check.\n{CALL_A}\n{CALL_B}\n"
    expected = ("Let me check.", [("get_weather", '{"city": "Paris"}'), ("get_time", "{}")])
    assert parse_whole(fmt, text) == expected
    for step in (1, 2, 5, 1000):
        assert parse_streamed(fmt, text, step) == expected


def test_tagged_edge_cases() -> None:
    h = formats.HERMES
    assert parse_whole(h, "plain text, no calls\n") == ("plain text, no calls\n", [])
    bad = '<tool_call>\n{"name": "get_weather", "arguments": {"city": </tool_call>'
    assert parse_whole(h, bad) == (bad, [])  # unparsable stays content, verbatim
    unknown = '<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>'
    assert parse_whole(h, unknown) == (unknown, [])
    assert (parse_whole(h, CALL_A.removesuffix("</tool_call>"))
            == ("", [("get_weather", '{"city": "Paris"}')]))
    assert (parse_whole(h, CALL_A + "\n" + CALL_B, parallel=False)
            == ("", [("get_weather", '{"city": "Paris"}')]))
    string_args = ('<tool_call>\n{"name": "get_time", "arguments": "{\\"tz\\": '
                   '\\"UTC\\"}"}\n</tool_call>')
    assert parse_whole(h, string_args) == ("", [("get_time", '{"tz": "UTC"}')])


@pytest.mark.parametrize("cut", ["\n<tool", "\n<tool_call>\n{\"name\": \"get_"])
def test_a_forced_call_cut_short_after_complete_ones_is_not_content(cut: str) -> None:
    # tool_choice "required": the grammar allows more calls, max_tokens stops one midway
    for step in (1, 3, 1000):
        p = ToolParser(formats.HERMES, NAMES, forced=True)
        text = CALL_A + cut
        events = [e for i in range(0, len(text), step) for e in p.feed(text[i : i + step])]
        events += p.finish()
        assert [e for e in events if isinstance(e, str)] == []
        assert [(c.name, c.arguments) for c in p.calls] == [("get_weather", '{"city": "Paris"}')]
    # with nothing complete, the cut text is all there is and stays visible as content
    assert parse_whole(formats.HERMES, cut.lstrip()) == (cut.lstrip(), [])
    p = ToolParser(formats.HERMES, NAMES, forced=True)
    assert "".join(str(e) for e in p.feed(cut.lstrip()) + p.finish()) == cut.lstrip()


def test_stream_holds_back_only_a_possible_tag() -> None:
    p = ToolParser(formats.HERMES, NAMES)
    assert p.feed("Hi <tool") == ["Hi"]  # the blank is held too: a call may follow
    assert p.feed("box> done") == [" <toolbox> done"]
    assert p.finish() == []


def test_llama3_json_calls() -> None:
    f = formats.LLAMA3_JSON
    two = ('{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "get_time", '
           '"parameters": {}}')
    expected = ("", [("get_weather", '{"city": "Paris"}'), ("get_time", "{}")])
    assert parse_whole(f, two) == expected
    assert parse_streamed(f, two, 3) == expected
    assert parse_whole(f, "The answer is {x}.") == ("The answer is {x}.", [])
    assert parse_whole(f, '{"city": "Paris"}') == ('{"city": "Paris"}', [])
    assert parse_whole(f, '{"name": "get_time", "parameters": {}} and more') == (
        '{"name": "get_time", "parameters": {}} and more', [])  # fmt: skip
    assert parse_streamed(f, "Sunny today.", 2) == ("Sunny today.", [])


def test_call_ids_are_openai_shaped() -> None:
    call = ToolCall("f", "{}").openai_dict()
    assert (call["type"] == "function" and str(call["id"]).startswith("call_")
            and len(str(call["id"])) == 29)
