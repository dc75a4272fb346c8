"""The OpenAI Agents SDK (`openai-agents`) runs unchanged against `hedgespec serve`: an agent
with a function tool and a structured final output (`output_type`), through the SDK's Responses
model class and through its Chat Completions model class.

The tiny random target writes gibberish, so the run is steered only through what a client may
send: `tool_choice="required"` on the first turn (the tool grammar forces a valid call; the SDK
then resets the choice to "auto"), and on the turn after the tool's output, "auto" with the
output schema is one grammar that allows either another call or the answer in the schema; a
`logit_bias` against the tokens that start the call tag (`<`; the random target would
otherwise pick a branch by chance) makes it the answer. An agent's turn (instructions, the
tool's description, the history) outgrows the tiny target's 512 positions, so these tests serve
a copy of the pool whose target config allows 1024 (its random weights are the same).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.items import ToolCallItem, ToolCallOutputItem
from openai import AsyncOpenAI
from pydantic import BaseModel
from transformers import AutoTokenizer

from bench.harness.server import ServerProcess
from tests.gateway.conftest import API_KEY

pytestmark = pytest.mark.timeout(180)
MODEL = "tiny-target"
CALLS: list[str] = []


class Report(BaseModel):
    city: Literal["paris", "rome"]
    sunny: bool


@function_tool
def get_weather(city: Literal["paris", "rome"]) -> str:
    """The weather in a city."""
    CALLS.append(city)
    return "sunny"


@pytest.fixture(scope="module")
def long_server(pool_file: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("long-pool")
    shutil.copytree(pool_file.parent, root, dirs_exist_ok=True)
    config_path = root / MODEL / "config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "max_position_embeddings": 1024}))
    proc = ServerProcess.start(root / "pool.json", tmp_path_factory.mktemp("long-server"),
                               "--api-key", API_KEY)
    yield proc
    proc.stop()


def no_call_tag_bias(pool_file: Path) -> dict[str, int]:
    """-100 on every ordinary token that starts with `<` (the call tag's first character)."""
    tok = AutoTokenizer.from_pretrained(pool_file.parent / MODEL)
    special = set(tok.all_special_ids)
    return {str(i): -100 for i in range(len(tok))
            if i not in special and tok.decode([i]).startswith("<")}


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
def test_agent_with_a_function_tool_and_a_structured_output(
        long_server: ServerProcess, pool_file: Path, api: str) -> None:
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=f"{long_server.base_url}/v1", api_key=API_KEY, max_retries=0)
    model = (OpenAIResponsesModel(model=MODEL, openai_client=client) if api == "responses"
             else OpenAIChatCompletionsModel(model=MODEL, openai_client=client))
    agent = Agent(
        name="weather", instructions="Report the weather.", model=model,
        tools=[get_weather], output_type=Report,
        model_settings=ModelSettings(tool_choice="required", temperature=0,
                                     extra_body={"logit_bias": no_call_tag_bias(pool_file)}),
    )  # fmt: skip
    CALLS.clear()
    result = Runner.run_sync(agent, "Weather in Paris?", max_turns=4)
    assert isinstance(result.final_output, Report)
    assert len(CALLS) == 1 and CALLS[0] in ("paris", "rome")
    kinds = [type(item) for item in result.new_items]
    assert ToolCallItem in kinds and ToolCallOutputItem in kinds
