"""`hedgespec serve` with its default `--speculation auto` (the rest of the suite pins
"always"): concurrent streams get the same greedy text as a server that drafts every step,
each response says how many of its steps were plain, and /metrics agrees with the responses."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI

from bench.harness.server import ServerProcess
from tests.gateway.conftest import API_KEY

pytestmark = pytest.mark.timeout(240)
STREAMS = 4


@pytest.fixture(scope="module")
def gated_server(pool_file: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[ServerProcess]:
    proc = ServerProcess.start(pool_file, tmp_path_factory.mktemp("plain"),
                               "--api-key", API_KEY, "--speculation", "auto")
    yield proc
    proc.stop()


def completions(base_url: str) -> list[Any]:
    async def run_all() -> list[Any]:
        client = AsyncOpenAI(base_url=f"{base_url}/v1", api_key=API_KEY, max_retries=0)
        try:
            return list(await asyncio.gather(*(client.completions.create(
                model="tiny-target", prompt=f"Stream {i}", max_tokens=48, temperature=0,
                extra_body={"ignore_eos": True}) for i in range(STREAMS))))
        finally:
            await client.close()

    return asyncio.run(run_all())


def metric(base_url: str, name: str) -> float:
    text = httpx.get(f"{base_url}/metrics", headers={"Authorization": f"Bearer {API_KEY}"}).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#"))


def test_the_gate_changes_steps_not_text_and_metrics_count_its_plain_steps(
    gated_server: ServerProcess, server: ServerProcess,
) -> None:
    gated = completions(gated_server.base_url)
    drafting = completions(server.base_url)
    assert [r.choices[0].text for r in gated] == [r.choices[0].text for r in drafting]
    specs = [r.model_extra["metrics"]["speculative_decoding"] for r in gated]
    # a batch size's measurement alternates blocks of steps, speculative ones first, so every
    # stream of these 47 steps saw both, whatever the timing decides afterwards
    for spec in specs:
        assert spec["num_spec_steps"] >= 1 and spec["num_plain_steps"] >= 1
        assert spec["num_spec_steps"] == len(spec["drafter_choices"])
    for r in drafting:
        assert r.model_extra["metrics"]["speculative_decoding"]["num_plain_steps"] == 0
    url = gated_server.base_url
    assert metric(url, "hedgespec_plain_rounds_total") == sum(s["num_plain_steps"] for s in specs)
    settings = [metric(url, f'hedgespec_speculation_setting{{setting="{s}"}}')
                for s in ("speculative", "plain", "measuring")]
    assert sorted(settings) == [0.0, 0.0, 1.0], settings
