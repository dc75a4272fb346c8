"""The vendor tool formats served live: the tiny pool with its chat template replaced by our
Qwen3-style (hermes) and Llama-3.1-style (llama3_json) templates (tests/gateway/tool_templates.py),
each behind a real `hedgespec serve`. Forced calls must come back as `tool_calls` that validate,
the model card must name the format, and speculation must not change greedy calls."""

from __future__ import annotations

import json
from collections.abc import Iterator

import jsonschema
import pytest
from openai import OpenAI
from transformers import AutoTokenizer

from bench.harness.server import ServerProcess
from bench.harness.tiny_pool import MODEL_NAME, build_pool
from tests.gateway.conftest import API_KEY
from tests.gateway.openai.test_tool_calling_e2e import MESSAGES, NAMED, PARAMS, TOOLS
from tests.gateway.tool_templates import LLAMA31_STYLE, QWEN3_STYLE

pytestmark = pytest.mark.timeout(240)
ONE_TOOL = [t for t in TOOLS if t["function"]["name"] == "get_time"]  # the vendor prompts are long
TEMPLATES = {"hermes": QWEN3_STYLE, "llama3_json": LLAMA31_STYLE}


@pytest.fixture(scope="module", params=sorted(TEMPLATES))
def served(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, OpenAI]]:
    fmt = request.param
    root = tmp_path_factory.mktemp(f"pool-{fmt}")
    pool = build_pool(root)
    tok = AutoTokenizer.from_pretrained(str(root / MODEL_NAME))
    tok.chat_template = TEMPLATES[fmt]
    tok.save_pretrained(str(root / MODEL_NAME))
    server = ServerProcess.start(pool, root / "server", "--api-key", API_KEY)
    yield fmt, OpenAI(base_url=f"{server.base_url}/v1", api_key=API_KEY, max_retries=0)
    server.stop()


def forced(client: OpenAI, policy: str,
           tool_choice: object) -> tuple[list[tuple[str, str]], str | None]:
    resp = client.chat.completions.create(
        model=MODEL_NAME, messages=MESSAGES, tools=ONE_TOOL, tool_choice=tool_choice,  # type: ignore[arg-type]
        max_tokens=120, temperature=0, parallel_tool_calls=False,
        extra_body={"hedgespec": {"policy": policy}},
    )  # fmt: skip
    choice = resp.choices[0]
    return [(c.function.name, c.function.arguments)
            for c in choice.message.tool_calls or []], choice.finish_reason


@pytest.mark.parametrize("tool_choice", ["required", NAMED], ids=["required", "named"])
def test_forced_calls_in_the_vendor_format_come_back_as_tool_calls(served: tuple[str, OpenAI],
                                                                   tool_choice: object) -> None:
    fmt, client = served
    card = client.models.list().data[0].model_dump()
    assert card["capabilities"]["tool_calling"] == fmt
    calls, reason = forced(client, "none", tool_choice)
    assert reason == "tool_calls" and len(calls) == 1
    name, arguments = calls[0]
    assert name == "get_time"
    jsonschema.validate(json.loads(arguments), PARAMS[name])
    assert forced(client, "auto", tool_choice) == (calls, reason), "speculation changed the call"

