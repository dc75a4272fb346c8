"""The grammar for `tool_choice` "required" and a named tool, run through an llguidance matcher
on a tiny tokenizer: it accepts valid calls (in each format) and rejects everything else."""

from __future__ import annotations

import copy
from typing import Any

import llguidance
import llguidance.hf
import pytest

from bench.harness.tiny_pool import train_tokenizer
from core.speculation.grammar import grammar_text
from gateway.openai.text import IncrementalDetokenizer
from gateway.openai.tools import formats
from gateway.openai.tools.grammar import tool_grammar
from gateway.openai.tools.spec import Tool, ToolChoice, ToolRequest

WEATHER = Tool("get_weather", None, {"type": "object", "properties": {"city": {"type": "string"}},
                                     "required": ["city"],
                                     "additionalProperties": False})  # fmt: skip
TIME = Tool("get_time", None, None)
A = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
B = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return train_tokenizer()


def tools(mode: str, parallel: bool = True) -> ToolRequest:
    name = "get_time" if mode == "named" else None
    return ToolRequest((WEATHER, TIME), ToolChoice(mode, name), parallel)  # type: ignore[arg-type]


def accepts(tokenizer: Any, fmt: formats.ToolFormat, req: ToolRequest, text: str) -> bool:
    """The grammar allows `text` token by token and is then complete."""
    spec = tool_grammar(fmt, req, tokenizer)
    assert spec is not None and spec.kind == "lark"
    env = llguidance.hf.from_tokenizer(tokenizer, n_vocab=len(tokenizer))
    matcher = llguidance.LLMatcher(env, grammar_text(spec), log_level=0)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if matcher.validate_tokens(ids) < len(ids):
        return False
    matcher.consume_tokens(ids)
    return bool(matcher.is_accepting())


@pytest.mark.parametrize("fmt", [formats.HERMES, formats.GENERIC])
def test_required_accepts_calls_of_any_tool(tokenizer: Any, fmt: formats.ToolFormat) -> None:
    req = tools("required")
    assert accepts(tokenizer, fmt, req, A) and accepts(tokenizer, fmt, req, B)
    assert accepts(tokenizer, fmt, req, A + "\n" + B)
    assert not accepts(tokenizer, fmt, req, "Sure, " + A)  # no free text
    # no unknown tool
    assert not accepts(tokenizer, fmt, req, A.replace("get_weather", "get_wether"))
    # arguments follow the schema
    assert not accepts(tokenizer, fmt, req, A.replace('"Paris"', "7"))
    # required argument
    assert not accepts(tokenizer, fmt, req, A.replace('{"city": "Paris"}', "{}"))
    assert not accepts(tokenizer, fmt, req, A.replace('": ', '":'))  # our JSON style only
    assert not accepts(tokenizer, fmt, req, "")


def test_single_call_without_parallel_calls(tokenizer: Any) -> None:
    req = tools("required", parallel=False)
    assert accepts(tokenizer, formats.HERMES, req, A)
    assert not accepts(tokenizer, formats.HERMES, req, A + "\n" + B)


def test_named_tool_only(tokenizer: Any) -> None:
    req = tools("named")
    assert accepts(tokenizer, formats.GENERIC, req, B)
    assert not accepts(tokenizer, formats.GENERIC, req, A)
    assert not accepts(tokenizer, formats.GENERIC, req, B + "\n" + B)


def test_llama3_json_calls(tokenizer: Any) -> None:
    fmt, req = formats.LLAMA3_JSON, tools("required")
    one = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
    assert accepts(tokenizer, fmt, req, one)
    assert accepts(tokenizer, fmt, req, one + '; {"name": "get_time", "parameters": {}}')
    assert not accepts(tokenizer, fmt, req, one.replace("parameters", "arguments"))
    assert not accepts(tokenizer, fmt, req, A)


def test_arguments_are_an_object_even_when_the_schema_leaves_the_type_open(tokenizer: Any) -> None:
    loose = Tool("f", None, {"properties": {"a": {"type": "integer"}}})
    req = ToolRequest((loose,), ToolChoice("required"), True)
    assert accepts(tokenizer, formats.HERMES, req,
                   '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>')
    assert not accepts(tokenizer, formats.HERMES, req,
                       '<tool_call>\n{"name": "f", "arguments": true}\n</tool_call>')
    # only the declared properties, unless the schema allows more
    assert not accepts(tokenizer, formats.HERMES, req,
                       '<tool_call>\n{"name": "f", "arguments": {"a": 1, "b": 2}}\n</tool_call>')
    open_ = Tool("f", None,
                 {"properties": {"a": {"type": "integer"}}, "additionalProperties": True})
    assert accepts(tokenizer, formats.HERMES, ToolRequest((open_,), ToolChoice("required"), True),
                   '<tool_call>\n{"name": "f", "arguments": {"a": 1, "b": 2}}\n'
                   '</tool_call>')  # fmt: skip


def test_no_grammar_for_auto(tokenizer: Any) -> None:
    assert tool_grammar(formats.HERMES, tools("auto"), tokenizer) is None


def test_special_token_tags_are_the_tokens(tokenizer: Any) -> None:
    special = copy.deepcopy(tokenizer)
    special.add_special_tokens({"additional_special_tokens": ["<tool_call>", "</tool_call>"]},
                               replace_extra_special_tokens=False)  # fmt: skip
    open_id, close_id = special.convert_tokens_to_ids(["<tool_call>", "</tool_call>"])
    spec = tool_grammar(formats.HERMES, tools("named"), special)
    assert spec is not None and f"<[{open_id}]>" in spec.source and f"<[{close_id}]>" in spec.source
    assert accepts(special, formats.HERMES, tools("named"), B)  # spelled with the special tokens
    # and the text keeps them, so the parser sees the tags (other special tokens still drop)
    detok = IncrementalDetokenizer(special, frozenset({open_id, close_id}))
    ids = special(B + "<|end|>", add_special_tokens=False)["input_ids"]
    assert "".join(detok.push(i) for i in ids) + detok.flush() == B
    assert ('"<tool_call>"'
            in (tool_grammar(formats.HERMES, tools("named"), tokenizer) or spec).source)
