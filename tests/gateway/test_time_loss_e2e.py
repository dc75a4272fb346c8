"""`hedgespec serve` with its default `--loss time` (the rest of the suite pins the acceptance
loss, which drafts every round): each request's learner decides whether to draft, so
concurrent streams get the same greedy text as a server that drafts every round, each response
says how many of its rounds were plain, and /metrics agrees with the responses."""

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
def time_server(pool_file: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[ServerProcess]:
    proc = ServerProcess.start(pool_file, tmp_path_factory.mktemp("time"),
                               "--api-key", API_KEY, "--loss", "time")
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


def test_the_learner_changes_rounds_not_text_and_metrics_count_its_plain_rounds(
    time_server: ServerProcess, server: ServerProcess,
) -> None:
    timed = completions(time_server.base_url)
    drafting = completions(server.base_url)
    assert [r.choices[0].text for r in timed] == [r.choices[0].text for r in drafting]
    specs = [r.model_extra["metrics"]["speculative_decoding"] for r in timed]
    # the cost model's first steps at a batch size alternate drafting and plain, and the
    # learners choose between them afterwards: both kinds of round are there
    assert sum(s["num_spec_steps"] for s in specs) >= 1
    assert sum(s["num_plain_steps"] for s in specs) >= 1
    for spec in specs:
        assert spec["num_spec_steps"] == len(spec["drafter_choices"])
        assert spec["num_spec_steps"] + spec["num_plain_steps"] <= 47  # a round per token at most
    for r in drafting:
        assert r.model_extra["metrics"]["speculative_decoding"]["num_plain_steps"] == 0
    url = time_server.base_url
    assert metric(url, "hedgespec_plain_rounds_total") == sum(s["num_plain_steps"] for s in specs)
