"""Tool calling end to end: a real `hedgespec serve` on the tiny random pool (whose template has
no tool format, so it gets the generic one), the official `openai` SDK and LangChain. Forced
calls (`required`, a named tool) must validate against the tool's parameters, speculation must
not change greedy output, streamed calls must add up to the same calls, and bad fields get
OpenAI-shaped 400s naming the `param`. Formats and parsing are unit-tested in test_tools.py,
the grammar in test_tool_grammar.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import httpx
import jsonschema
import openai
import pytest
from langchain_core.messages import AIMessage
from langchain_openai import ChatOpenAI
from openai import OpenAI
from pydantic import BaseModel, Field
from transformers import AutoTokenizer

from bench.harness.server import ServerProcess
from tests.gateway.conftest import API_KEY

pytestmark = pytest.mark.timeout(180)
MODEL = "tiny-target"
# Small: the tiny tokenizer spends a token per one or two characters of JSON, in a 505-token
# context. Strings are bounded so that a random target's forced call ends.
WEATHER_PARAMS: dict[str, Any] = {
    "properties": {"city": {"type": "string", "maxLength": 6}, "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"],
}
TIME_PARAMS: dict[str, Any] = {"properties": {"tz": {"enum": ["UTC", "CET"]}}, "required": ["tz"]}
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_PARAMS}},
    {"type": "function", "function": {"name": "get_time", "parameters": TIME_PARAMS}},
]  # fmt: skip
PARAMS = {"get_weather": WEATHER_PARAMS, "get_time": TIME_PARAMS}
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]
BAD_SCHEMA = {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}
NAMED = {"type": "function", "function": {"name": "get_time"}}


def calls_of(message: Any) -> list[tuple[str, str]]:
    return [(c.function.name, c.function.arguments) for c in message.tool_calls or []]


def greedy(client: OpenAI, policy: str = "none", **fields: Any) -> Any:
    resp = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, max_tokens=80, temperature=0,  # type: ignore[arg-type]
        extra_body={"hedgespec": {"policy": policy}}, **fields,
    )  # fmt: skip
    return resp.choices[0]


def assert_valid_calls(calls: list[tuple[str, str]]) -> None:
    assert calls
    for name, arguments in calls:
        jsonschema.validate(json.loads(arguments), PARAMS[name])


@pytest.mark.parametrize("parallel", [False, True])
def test_required_calls_validate_and_speculation_does_not_change_them(client: OpenAI,
                                                                      parallel: bool) -> None:
    plain = greedy(client, tool_choice="required", parallel_tool_calls=parallel)
    assert plain.finish_reason == "tool_calls"
    calls = calls_of(plain.message)
    assert_valid_calls(calls)
    if not parallel:
        assert len(calls) == 1
    assert plain.message.content is None
    ids = [c.id for c in plain.message.tool_calls]
    assert all(i.startswith("call_") for i in ids) and len(set(ids)) == len(ids)
    for policy in ("auto", "fixed:alpha"):
        again = greedy(client, policy, tool_choice="required", parallel_tool_calls=parallel)
        assert (calls_of(again.message), again.finish_reason) == (calls, "tool_calls"), policy


def test_named_tool_is_called_once(client: OpenAI) -> None:
    choice = greedy(client, tool_choice=NAMED)
    assert choice.finish_reason == "tool_calls"
    calls = calls_of(choice.message)
    assert len(calls) == 1 and calls[0][0] == "get_time"
    assert_valid_calls(calls)
    assert calls_of(greedy(client, "auto", tool_choice=NAMED).message) == calls


def test_auto_and_none_answer_in_text_here(client: OpenAI) -> None:
    """The random target writes no call on its own: `auto` parses none, and the text is the
    same under speculation; `none` hides the tools, so its prompt (and text) differ."""
    auto = greedy(client, tool_choice="auto")
    assert auto.message.tool_calls is None and auto.finish_reason in ("stop", "length")
    assert greedy(client, "auto").message.content == auto.message.content  # "auto" is the default
    none = greedy(client, tool_choice="none")
    assert none.message.tool_calls is None and none.message.content != auto.message.content


@pytest.mark.parametrize("tool_choice", ["required", NAMED])
def test_streamed_calls_add_up_to_the_same_calls(client: OpenAI, tool_choice: Any) -> None:
    stream = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, max_tokens=80, temperature=0,  # type: ignore[arg-type]
        tool_choice=tool_choice, stream=True,
    )  # fmt: skip
    calls: dict[int, dict[str, str]] = {}
    content, reasons = [], []
    for chunk in stream:
        for choice in chunk.choices:
            content.append(choice.delta.content or "")
            reasons.append(choice.finish_reason)
            for tc in choice.delta.tool_calls or []:
                entry = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                if tc.id:
                    assert not entry["id"] and tc.type == "function"
                    entry["id"] = tc.id
                if tc.function and tc.function.name:
                    entry["name"] += tc.function.name
                if tc.function and tc.function.arguments:
                    entry["arguments"] += tc.function.arguments
    streamed = [(calls[i]["name"], calls[i]["arguments"]) for i in sorted(calls)]
    assert (sorted(calls) == list(range(len(calls)))
            and all(c["id"].startswith("call_") for c in calls.values()))
    assert reasons[-1] == "tool_calls" and "".join(content) == ""
    assert streamed == calls_of(greedy(client, "auto", tool_choice=tool_choice).message)


def test_history_with_calls_and_results_is_accepted(client: OpenAI) -> None:
    history = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "c"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"},
    ]  # fmt: skip
    resp = client.chat.completions.create(
        model=MODEL, messages=history, tools=TOOLS[:1], max_tokens=8)  # type: ignore[arg-type]
    assert resp.choices[0].finish_reason in ("stop", "length", "tool_calls")
    # the tools and history rendered
    assert resp.usage is not None and resp.usage.prompt_tokens > 100


def test_model_card_names_the_tool_format(server: ServerProcess) -> None:
    card = httpx.get(f"{server.base_url}/v1/models",
                     headers={"Authorization": f"Bearer {API_KEY}"}).json()
    assert card["data"][0]["capabilities"] == {"tool_calling": "generic",
                                               "structured_outputs": True}


class Weather(BaseModel):
    city: str = Field(max_length=4)
    unit: Literal["c", "f"]


def test_langchain_bind_tools_and_structured_output(server: ServerProcess) -> None:
    llm = ChatOpenAI(model=MODEL, base_url=f"{server.base_url}/v1", api_key=API_KEY,  # type: ignore[arg-type]
                     temperature=0, max_tokens=80, max_retries=0)
    reply = llm.bind_tools(TOOLS, tool_choice="get_weather").invoke("Weather in Paris?")
    assert isinstance(reply, AIMessage) and [c["name"] for c in reply.tool_calls] == ["get_weather"]
    jsonschema.validate(reply.tool_calls[0]["args"], WEATHER_PARAMS)
    forced = llm.bind_tools(TOOLS[1:], tool_choice="any").invoke("What time is it?")  # "required"
    assert isinstance(forced, AIMessage) and forced.tool_calls
    assert all(c["name"] == "get_time" for c in forced.tool_calls)
    weather = llm.with_structured_output(Weather, method="function_calling").invoke("Weather?")
    # (None would mean no call parsed: LangChain forces the tool by name)
    assert isinstance(weather, Weather) and weather.unit in ("c", "f")


@pytest.mark.parametrize(
    ("fields", "param", "message"),
    [
        ({"tools": [{"type": "function"}]}, "tools", "tools[0].function must be an object"),
        ({"tools": [{"type": "function", "function": {"name": "x", "parameters": BAD_SCHEMA}}]},
         "tools", "parameters"),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice", "must be"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
         "tool_choice", "not in tools"),
        ({"tool_choice": "required"}, "tool_choice", "needs tools"),
        ({"functions": [{"name": "f"}]}, "functions", "deprecated"),
    ],
)
def test_bad_tool_fields_are_400s(client: OpenAI, fields: dict[str, Any], param: str,
                                  message: str) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, **fields)  # type: ignore[call-overload]
    body = err.value.body
    assert isinstance(body, dict) and body["param"] == param and message in body["message"]






def test_a_forced_call_cut_by_max_tokens_is_dropped_after_complete_ones(
        client: OpenAI, pool_file: Path) -> None:
    """With EOS banned, a `required` answer goes on calling until `max_tokens` (what the
    context leaves) cuts the next call short: the answer is the complete calls, with no call
    syntax as content; cut inside the first call, the raw text is all there is and is kept."""
    eos = AutoTokenizer.from_pretrained(pool_file.parent / MODEL).eos_token_id
    def forced(max_tokens: int) -> Any:
        return client.chat.completions.create(
            model=MODEL, messages=MESSAGES, tools=TOOLS, max_tokens=max_tokens, temperature=0,  # type: ignore[arg-type]
            tool_choice="required", logit_bias={str(eos): -100},
            extra_body={"hedgespec": {"policy": "none"}}).choices[0]  # fmt: skip
    cut = forced(100)
    assert cut.finish_reason == "length" and cut.message.content is None
    assert_valid_calls(calls_of(cut.message))
    early = forced(30)
    assert early.message.tool_calls is None and early.message.content.startswith("<tool_call>")
