"""The Responses API end to end: a real `hedgespec serve` on the tiny random pool and the
official `openai` SDK (create, stream and its final-response accumulation, parse, function
calling with a tool output round trip, stored state: retrieve, input items, delete,
`previous_response_id`), every body and event validated against the SDK's own types. The
random target writes gibberish, so outputs that must end or parse are grammar-constrained
(`text.format` json_schema, `tool_choice` "required"), as in the chat tool and structured
output tests."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from openai import OpenAI
from openai.types.responses import Response, ResponseItem, ResponseStreamEvent
from pydantic import BaseModel, Field, TypeAdapter

pytestmark = pytest.mark.timeout(180)
MODEL = "tiny-target"
CITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "pattern": "^[a-z]{1,6}$"},
                   "size": {"enum": ["small", "large"]}},
    "required": ["city", "size"],
    "additionalProperties": False,
}  # fmt: skip
CITY_FORMAT = {"format": {"type": "json_schema", "name": "city", "schema": CITY_SCHEMA,
                          "strict": True}}  # fmt: skip
WEATHER_PARAMS: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "pattern": "^[a-z]{1,6}$"},
                   "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "name": "get_weather", "parameters": WEATHER_PARAMS, "strict": True},
]  # fmt: skip
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
ITEMS: TypeAdapter[Any] = TypeAdapter(ResponseItem)


class City(BaseModel):
    city: str = Field(max_length=6)
    size: str = Field(pattern="^(small|large)$")


def raw_events(http: httpx.Client, **body: Any) -> list[tuple[str, dict[str, Any]]]:
    """(SSE event name, data) of a streamed response, each frame checked to be exact."""
    with http.stream("POST", "/v1/responses", json={"model": MODEL, "stream": True, **body}) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = r.read().decode()
    frames = [f for f in raw.split("\n\n") if f.strip() and not f.startswith(":")]
    out = []
    for frame in frames:
        event_line, data_line = frame.split("\n")
        name = event_line.removeprefix("event: ")
        data = json.loads(data_line.removeprefix("data: "))
        assert data["type"] == name
        EVENTS.validate_python(data)
        out.append((name, data))
    assert [d["sequence_number"] for _, d in out] == list(range(len(out)))
    return out


def test_create_has_the_openai_shape_and_reports_length_as_incomplete(client: OpenAI) -> None:
    resp = client.responses.create(
        model=MODEL, input="Tell me about speculative decoding.", instructions="Be brief.",
        max_output_tokens=8, temperature=0, metadata={"run": "1"}, user="u-1",
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    body = resp.model_dump()
    Response.model_validate(body)
    assert resp.object == "response" and resp.id.startswith("resp_") and resp.model == MODEL
    assert resp.status == "incomplete"
    assert resp.incomplete_details is not None
    assert resp.incomplete_details.reason == "max_output_tokens"
    assert resp.usage is not None and resp.usage.output_tokens == 8
    assert resp.usage.total_tokens == resp.usage.input_tokens + 8
    (message,) = resp.output
    assert message.type == "message" and message.role == "assistant"
    assert message.content[0].type == "output_text" and resp.output_text
    assert resp.metadata == {"run": "1"} and resp.user == "u-1"
    assert resp.instructions == "Be brief." and resp.store is True
    spec = body["metrics"]["speculative_decoding"]
    assert spec["num_spec_steps"] == len(spec["drafter_choices"]) >= 1


def test_stream_events_in_order_and_the_sdk_accumulates_the_final_response(
        client: OpenAI, http: httpx.Client) -> None:
    fields: dict[str, Any] = dict(input="Describe a city as JSON.", max_output_tokens=120,
                                  temperature=0, text=CITY_FORMAT)
    events = raw_events(http, **fields)
    names = [n for n, _ in events]
    assert names == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * names.count("response.output_text.delta"),
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed",
    ]
    created, final = events[0][1]["response"], events[-1][1]["response"]
    assert created["status"] == "in_progress" and created["output"] == []
    assert final["id"] == created["id"] and final["status"] == "completed"
    text = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
    jsonschema.validate(json.loads(text), CITY_SCHEMA)
    assert final["output"][0]["content"][0]["text"] == text
    assert final["metrics"]["speculative_decoding"]["num_spec_steps"] >= 1
    # the SDK's helper, unchanged; greedy: the same text as the body and as the raw stream
    with client.responses.stream(model=MODEL, **fields) as stream:
        seen = [e.type for e in stream]
        accumulated = stream.get_final_response()
    assert seen[0] == "response.created" and seen[-1] == "response.completed"
    assert accumulated.output_text == text
    assert client.responses.create(model=MODEL, **fields).output_text == text


def test_stream_cut_by_max_output_tokens_ends_incomplete(http: httpx.Client) -> None:
    events = raw_events(http, input="Hello", max_output_tokens=5, ignore_eos=True)
    name, last = events[-1]
    assert name == "response.incomplete" and last["response"]["status"] == "incomplete"
    assert last["response"]["usage"]["output_tokens"] == 5


def test_parse_returns_the_pydantic_object(client: OpenAI) -> None:
    parsed = client.responses.parse(model=MODEL, input="Describe a city.", text_format=City,
                                    max_output_tokens=120, temperature=0)
    assert isinstance(parsed.output_parsed, City)


def test_function_call_and_tool_output_round_trip(client: OpenAI, http: httpx.Client) -> None:
    question = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.responses.create(model=MODEL, input=question, tools=TOOLS,  # type: ignore[arg-type]
                                    tool_choice="required", parallel_tool_calls=False,
                                    temperature=0, max_output_tokens=120)  # fmt: skip
    Response.model_validate(first.model_dump())
    assert first.status == "completed"
    (call,) = first.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert call.call_id.startswith("call_") and call.id is not None
    jsonschema.validate(json.loads(call.arguments), WEATHER_PARAMS)
    # streamed: the call as one item, its arguments as delta + done, the same call (greedy)
    events = raw_events(http, input=question, tools=TOOLS, tool_choice="required",
                        parallel_tool_calls=False, temperature=0, max_output_tokens=120)
    names = [n for n, _ in events]
    assert names == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.function_call_arguments.delta",
                     "response.function_call_arguments.done", "response.output_item.done",
                     "response.completed"]  # fmt: skip
    assert events[4][1]["arguments"] == call.arguments
    # the round trip: the call and its output go back as input items (without the tools, whose
    # description fills most of the tiny target's 506-token context)
    follow = [*question, *[item.model_dump(exclude_none=True) for item in first.output],
              {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21"}]
    second = client.responses.create(model=MODEL, input=follow, text=CITY_FORMAT,  # type: ignore[arg-type]
                                     temperature=0, max_output_tokens=100, store=False)  # fmt: skip
    assert second.status == "completed"
    jsonschema.validate(json.loads(second.output_text), CITY_SCHEMA)
    plain = client.responses.create(model=MODEL, input=question, max_output_tokens=2)
    assert second.usage is not None and plain.usage is not None
    # the call and its output were rendered into the prompt
    assert second.usage.input_tokens > plain.usage.input_tokens + len(call.arguments) // 4


def test_previous_response_id_retrieve_input_items_and_delete(client: OpenAI) -> None:
    first = client.responses.create(model=MODEL, input="Hello there.", max_output_tokens=6,
                                    temperature=0)
    second = client.responses.create(model=MODEL, input="And then?", max_output_tokens=6,
                                     temperature=0, previous_response_id=first.id)
    assert second.previous_response_id == first.id
    assert first.usage is not None and second.usage is not None
    # the whole conversation was rendered: the first input and output come first
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    # the conversation's learner session carried over: the learner had seen the first request
    spec = second.model_dump()["metrics"]["speculative_decoding"]
    assert spec["warm_start_requests"] >= 1
    got = client.responses.retrieve(first.id)
    assert got.model_dump() == first.model_dump()
    items = client.responses.input_items.list(second.id)
    (item,) = items.data
    ITEMS.validate_python(item.model_dump())
    assert item.type == "message" and item.content[0].text == "And then?"  # type: ignore[union-attr]
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.create(model=MODEL, input="x", previous_response_id=first.id,
                                max_output_tokens=2)
    assert err.value.body["param"] == "previous_response_id"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(first.id)


def test_input_items_pagination(client: OpenAI) -> None:
    texts = ["one", "two", "three"]
    resp = client.responses.create(model=MODEL, max_output_tokens=2,
                                   input=[{"role": "user", "content": t} for t in texts])
    page = client.responses.input_items.list(resp.id, limit=2, order="asc")
    assert [i.content[0].text for i in page.data] == ["one", "two"]  # type: ignore[union-attr]
    assert page.has_more
    rest = client.responses.input_items.list(resp.id, after=page.data[-1].id, order="asc")
    assert [i.content[0].text for i in rest.data] == ["three"]  # type: ignore[union-attr]
    newest = client.responses.input_items.list(resp.id)
    assert newest.data[0].content[0].text == "three"  # type: ignore[union-attr]


def test_stored_responses_are_private_to_their_api_key(client: OpenAI, other: OpenAI) -> None:
    mine = client.responses.create(model=MODEL, input="secret", max_output_tokens=2)
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.input_items.list(mine.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.create(model=MODEL, input="x", previous_response_id=mine.id,
                               max_output_tokens=2)
    with pytest.raises(openai.NotFoundError):
        other.responses.delete(mine.id)
    assert client.responses.retrieve(mine.id).id == mine.id  # still there for its owner


def test_store_false_keeps_nothing(client: OpenAI) -> None:
    resp = client.responses.create(model=MODEL, input="hi", max_output_tokens=2, store=False)
    assert resp.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(resp.id)


@pytest.mark.parametrize(
    ("fields", "status", "param", "message"),
    [
        ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, 400, "input",
         "unsupported input item type"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, 400, "input",
         "item references"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
         400, "input", "only text"),
        ({"input": [{"role": "robot", "content": "x"}]}, 400, "input", "role"),
        ({"input": [{"type": "function_call", "call_id": "c", "name": "f",
                     "arguments": "[1]"}]}, 400, "input", "JSON object"),
        ({"input": 7}, 400, "input", "string or a list"),
        ({"input": "x", "tools": [{"type": "web_search_preview"}]}, 400, "tools", "built-in"),
        ({"input": "x", "tools": TOOLS, "tool_choice": {"type": "file_search"}}, 400,
         "tool_choice", "not supported"),
        ({"input": "x", "tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}},
         400, "tool_choice", "not in tools"),
        ({"input": "x", "text": {"format": {"type": "xml"}}}, 400, "text", "text, json_object"),
        ({"input": "x", "background": True}, 400, "background", "not supported"),
        ({"input": "x", "truncation": "auto"}, 400, "truncation", "not supported"),
        ({"input": "x", "include": ["message.output_text.logprobs"]}, 400, "include",
         "not supported"),
        ({"input": "x", "previous_response_id": "resp_missing"}, 404, "previous_response_id",
         "not found"),
        ({"input": "x", "model": "other-model"}, 404, "model", "does not exist"),
    ],
)
def test_bad_requests_are_openai_shaped_4xx(http: httpx.Client, fields: dict[str, Any],
                                            status: int, param: str, message: str) -> None:
    resp = http.post("/v1/responses", json={"model": MODEL, "max_output_tokens": 2, **fields})
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert error["param"] == param and message in error["message"], error
    assert set(error) == {"message", "type", "param", "code"}


def test_unknown_fields_are_ignored(http: httpx.Client) -> None:
    resp = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "max_output_tokens": 2,
                                            "no_such_field": 1, "reasoning": {"effort": None},
                                            "service_tier": "auto"})  # fmt: skip
    assert resp.status_code == 200 and resp.json()["status"] in ("completed", "incomplete")


def test_unknown_response_ids_are_404s(http: httpx.Client) -> None:
    for method, path in (("GET", "/v1/responses/resp_nope"),
                         ("GET", "/v1/responses/resp_nope/input_items"),
                         ("DELETE", "/v1/responses/resp_nope")):
        resp = http.request(method, path)
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found"


def _metric(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#"))


def test_a_stream_the_client_leaves_frees_its_request(http: httpx.Client) -> None:
    name = 'hedgespec_requests_total{endpoint="responses",finish_reason="abort"}'
    before = _metric(http.get("/metrics").text, name)
    body = {"model": MODEL, "input": "Hello", "max_output_tokens": 400, "stream": True,
            "ignore_eos": True}
    with http.stream("POST", "/v1/responses", json=body) as resp:
        lines = resp.iter_lines()
        assert next(lines) == "event: response.created"
        next(lines)  # read a little, then hang up
    deadline = time.monotonic() + 60
    while http.get("/ready").json()["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert http.get("/ready").json()["in_flight"] == 0
    assert _metric(http.get("/metrics").text, name) == before + 1
