"""`POST /v1/responses/{id}/cancel` end to end on a real `hedgespec serve` (the tiny random
pool) with the official `openai` SDK: a stored response still generating (a long
`max_output_tokens` with `ignore_eos`) is cancelled by id from a second client; its stream ends
with `response.incomplete` carrying status `cancelled`, its waiting body call returns status
`cancelled`, the engine slot is freed, and the stored row says `cancelled` with the output
produced so far. Another key, an unknown id or a `store: false` response: 404; an ended
response: 400."""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from bench.harness.server import ServerProcess
from tests.gateway.conftest import ADMIN_KEY

pytestmark = pytest.mark.timeout(180)
MODEL = "tiny-target"
LONG: dict[str, Any] = {"model": MODEL, "input": "Hello", "max_output_tokens": 400,
                        "ignore_eos": True}  # fmt: skip
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def _frames(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event name, data) of a Responses SSE stream, each checked against the SDK's types."""
    name = ""
    for line in lines:
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            data = json.loads(line.removeprefix("data: "))
            assert data["type"] == name
            EVENTS.validate_python(data)
            yield name, data


def _wait_idle(http: httpx.Client) -> None:
    deadline = time.monotonic() + 30
    while http.get("/ready").json()["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert http.get("/ready").json()["in_flight"] == 0


def _started_response_id(server: ServerProcess, start: Any) -> tuple[str, Any]:
    """Run `start()` on a thread and read the id of the response it starts from the admin
    live stream (a body call tells its id only when it ends)."""
    pool = concurrent.futures.ThreadPoolExecutor(1)
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with httpx.stream("GET", f"{server.base_url}/admin/api/live", headers=headers,
                      timeout=60) as live:  # fmt: skip
        assert live.status_code == 200
        future = pool.submit(start)
        name = ""
        for line in live.iter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: ") and name == "events":
                for event in json.loads(line.removeprefix("data: ")):
                    rid = event.get("request_id", "")
                    if event["type"] == "round" and rid.startswith("resp_"):
                        pool.shutdown(wait=False)
                        return rid.rsplit("-", 1)[0], future
            assert not future.done(), future.result()
    raise AssertionError("the live stream ended")


def test_cancel_a_stream_ends_it_cancelled_and_frees_the_engine(
        http: httpx.Client, client: OpenAI) -> None:
    with http.stream("POST", "/v1/responses", json={**LONG, "stream": True}) as resp:
        assert resp.status_code == 200
        frames = _frames(resp.iter_lines())
        name, created = next(frames)
        assert name == "response.created"
        response_id = created["response"]["id"]
        seen = [next(frames)]
        while not any(n == "response.output_text.delta" for n, _ in seen):
            seen.append(next(frames))  # it is generating
        cancelled = client.responses.cancel(response_id)
        seen += list(frames)
    Response.model_validate(cancelled.model_dump())
    assert cancelled.id == response_id and cancelled.status == "cancelled"
    name, last = seen[-1]
    assert name == "response.incomplete"
    final = last["response"]
    assert final["status"] == "cancelled" and final["id"] == response_id
    assert Response.model_validate(final).output == cancelled.output
    text = "".join(d["delta"] for n, d in seen if n == "response.output_text.delta")
    assert final["output"][0]["content"][0]["text"] == text and text
    assert final["output"][0]["status"] == "incomplete"
    assert 0 < final["usage"]["output_tokens"] < 400
    _wait_idle(http)
    got = client.responses.retrieve(response_id)
    assert got.status == "cancelled" and got.output == cancelled.output
    # cancelling it again answers the same cancelled response
    assert client.responses.cancel(response_id).status == "cancelled"


def test_cancel_a_body_request_returns_cancelled_to_its_waiting_call(
        server: ServerProcess, client: OpenAI, http: httpx.Client) -> None:
    response_id, waiting = _started_response_id(
        server, lambda: client.responses.create(model=MODEL, input="Hello", max_output_tokens=400,
                                                extra_body={"ignore_eos": True}))
    cancelled = client.responses.cancel(response_id)
    assert cancelled.id == response_id and cancelled.status == "cancelled"
    body = waiting.result(timeout=60)
    Response.model_validate(body.model_dump())
    assert body.id == response_id and body.status == "cancelled"
    assert body.usage is not None and body.usage.output_tokens < 400
    assert body.output == cancelled.output
    _wait_idle(http)
    assert client.responses.retrieve(response_id).status == "cancelled"


def test_another_keys_in_flight_response_is_a_404(http: httpx.Client, other: OpenAI,
                                                   client: OpenAI) -> None:
    with http.stream("POST", "/v1/responses", json={**LONG, "stream": True}) as resp:
        frames = _frames(resp.iter_lines())
        response_id = next(frames)[1]["response"]["id"]
        with pytest.raises(openai.NotFoundError) as err:
            other.responses.cancel(response_id)
        assert err.value.body["code"] == "not_found"  # type: ignore[index]
        names = [n for n, _ in frames]
    assert names[-1] == "response.incomplete"  # it ran on to its max_output_tokens
    assert client.responses.retrieve(response_id).status == "incomplete"


def test_a_store_false_response_cannot_be_cancelled(http: httpx.Client,
                                                     client: OpenAI) -> None:
    with http.stream("POST", "/v1/responses",
                     json={**LONG, "stream": True, "store": False}) as resp:
        frames = _frames(resp.iter_lines())
        response_id = next(frames)[1]["response"]["id"]
        with pytest.raises(openai.NotFoundError):
            client.responses.cancel(response_id)
    _wait_idle(http)


def test_cancelling_an_ended_response_is_a_400(client: OpenAI, http: httpx.Client) -> None:
    done = client.responses.create(model=MODEL, input="hi", max_output_tokens=2)
    resp = http.post(f"/v1/responses/{done.id}/cancel")
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["message"] == f"Cannot cancel a {done.status} response."
    assert client.responses.retrieve(done.id).status == done.status  # unchanged


@pytest.mark.parametrize("response_id", ["resp_nope", "x" * 5000, "r%C3%A9sp", "%00", "-1"])
def test_unknown_ids_are_404s(http: httpx.Client, response_id: str) -> None:
    resp = http.post(f"/v1/responses/{response_id}/cancel")
    assert resp.status_code == 404, resp.text
    assert resp.json()["error"]["code"] == "not_found"
