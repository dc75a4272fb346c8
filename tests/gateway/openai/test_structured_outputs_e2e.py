"""Structured outputs end to end: a real `hedgespec serve` on the tiny random pool, the official
`openai` SDK (create, stream, parse) and LangChain's `with_structured_output`. Every output must
validate against its schema, speculation must not change greedy output, and bad formats get
OpenAI-shaped 400s. Losslessness itself is pinned in tests/core/speculation/test_grammar.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
from langchain_openai import ChatOpenAI
from openai import OpenAI
from pydantic import BaseModel, Field

from bench.harness.server import ServerProcess
from tests.gateway.conftest import API_KEY

pytestmark = pytest.mark.timeout(180)
MODEL = "tiny-target"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 8},
        "population": {"type": "integer", "minimum": 0, "maximum": 9999},
        "capital": {"type": "boolean"},
        "size": {"enum": ["small", "large"]},
    },
    "required": ["city", "population", "capital", "size"],
    "additionalProperties": False,
}
MESSAGES = [{"role": "user", "content": "Describe a city as JSON."}]


class City(BaseModel):
    city: str = Field(max_length=8)
    population: int = Field(ge=0, le=9999)
    capital: bool


def schema_format(schema: dict[str, Any] = SCHEMA) -> dict[str, Any]:
    return {"type": "json_schema",
            "json_schema": {"name": "city", "schema": schema, "strict": True}}


def greedy_json(client: OpenAI, policy: str, **fields: Any) -> tuple[str, str | None]:
    resp = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=150, temperature=0,
        extra_body={"hedgespec": {"policy": policy}}, **fields,
    )  # fmt: skip
    return resp.choices[0].message.content or "", resp.choices[0].finish_reason


def test_json_schema_output_validates_and_speculation_does_not_change_it(client: OpenAI) -> None:
    plain, reason = greedy_json(client, "none", response_format=schema_format())
    assert reason == "stop"
    jsonschema.validate(json.loads(plain), SCHEMA)
    free, _ = greedy_json(client, "none")
    assert free != plain, "the random target does not write this JSON unconstrained"
    for policy in ("auto", "fixed:alpha", "exp3spec"):
        assert (greedy_json(client, policy, response_format=schema_format())
                == (plain, "stop")), policy


def test_sampled_outputs_validate_under_every_seed(client: OpenAI) -> None:
    for seed in range(4):
        resp = client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=150, temperature=1.0, seed=seed, n=2,
            response_format=schema_format(),
        )  # fmt: skip
        for choice in resp.choices:
            assert choice.finish_reason == "stop"
            jsonschema.validate(json.loads(choice.message.content or ""), SCHEMA)


def test_json_object_gives_a_json_object(client: OpenAI) -> None:
    text, reason = greedy_json(client, "auto", response_format={"type": "json_object"})
    assert reason == "stop" and isinstance(json.loads(text), dict)


def test_streamed_json_schema_output_validates(client: OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=150, temperature=0, stream=True,
        response_format=schema_format(),
    )  # fmt: skip
    parts, reasons = [], []
    for chunk in stream:
        for choice in chunk.choices:
            parts.append(choice.delta.content or "")
            reasons.append(choice.finish_reason)
    text = "".join(parts)
    jsonschema.validate(json.loads(text), SCHEMA)
    assert reasons[-1] == "stop"
    assert (text, "stop") == greedy_json(client, "auto", response_format=schema_format())


def test_sdk_parse_returns_the_pydantic_object(client: OpenAI) -> None:
    resp = client.chat.completions.parse(model=MODEL, messages=MESSAGES, max_tokens=150,  # type: ignore[arg-type]
                                         temperature=0, response_format=City)
    parsed = resp.choices[0].message.parsed
    assert isinstance(parsed, City) and 0 <= parsed.population <= 9999


def test_langchain_with_structured_output(server: ServerProcess) -> None:
    llm = ChatOpenAI(model=MODEL, base_url=f"{server.base_url}/v1", api_key=API_KEY,  # type: ignore[arg-type]
                     temperature=0, max_tokens=150, max_retries=0)
    city = llm.with_structured_output(City, method="json_schema").invoke("Describe a city.")
    assert isinstance(city, City)


@pytest.mark.parametrize(
    ("response_format", "message"),
    [
        ({"type": "xml"}, "must be text, json_object or json_schema"),
        ({"type": "json_schema"}, "needs a json_schema object with a name"),
        ({"type": "json_schema", "json_schema": {"name": "x", "schema": []}},
         "must be a JSON Schema object"),
        (schema_format({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}),
         "unsupported json schema"),
    ],
)
def test_bad_response_formats_are_400s(client: OpenAI, response_format: dict[str, Any],
                                       message: str) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8,  # type: ignore[arg-type]
                                       response_format=response_format)
    assert message in str(err.value)


@pytest.fixture(scope="module")
def forced_server(pool_file: Path, tmp_path_factory: pytest.TempPathFactory,
                  ) -> Iterator[ServerProcess]:
    """The tiny pool served with a `grammar` member (grammar fast-forward) beside its EAGLE-3
    drafters, from a pool file of its own."""
    pool = json.loads(pool_file.read_text())
    pool["target"] = str(pool_file.parent / pool["target"])
    for entry in pool["drafters"]:
        entry["path"] = str(pool_file.parent / entry["path"])
    pool["drafters"].append({"id": "forced", "kind": "grammar"})
    path = tmp_path_factory.mktemp("forced-pool") / "pool.json"
    path.write_text(json.dumps(pool))
    server = ServerProcess.start(path, tmp_path_factory.mktemp("forced-server"),
                                 "--api-key", API_KEY)
    yield server
    server.stop()


def test_a_grammar_member_drafts_the_text_the_schema_forces(forced_server: ServerProcess) -> None:
    """Its rounds show in metrics.speculative_decoding, commit more than one token each on
    average (a key and its quotes), and leave the greedy output the plain one."""
    client = OpenAI(base_url=f"{forced_server.base_url}/v1", api_key=API_KEY, max_retries=0)
    plain, _ = greedy_json(client, "none", response_format=schema_format())
    resp = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=150, temperature=0,
        response_format=schema_format(), extra_body={"hedgespec": {"policy": "fixed:forced"}},
    )  # fmt: skip
    assert resp.choices[0].message.content == plain
    spec = resp.model_extra["metrics"]["speculative_decoding"]  # type: ignore[index]
    assert spec["drafter_choices"].count("forced") >= 3, spec["drafter_choices"]
    assert spec["num_accepted_draft_tokens"] > spec["drafter_choices"].count("forced"), spec
    models = client.models.list().data[0].model_extra or {}
    assert "'forced': 'grammar'" in str(models), models
