"""Issue 60 as a user tries it: against a default server on the shipped demo pool in bf16, with
the official SDK at temperature 0, the text does not depend on the policy (every pool kind
fixed, the learners, plain decoding), on streaming, on earlier requests (the suffix member's
cross-request cache changes the trees after every request) or on concurrency."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import AsyncOpenAI, OpenAI

from bench.harness.server import ServerProcess
from core.model import canonical
from core.model.precision import cpu_has_native_bf16
from demo.domains import DEMO_POOL

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not cpu_has_native_bf16(),
                       reason="bf16 is emulated on this CPU (no AVX512-BF16 or AMX): a default "
                              "server serves float32 here"),
    pytest.mark.skipif(canonical.available() is not None, reason=f"{canonical.available()}"),
]

PROMPTS = ["Write a Python function that checks whether a number is prime.",
           "What are the early symptoms of iron deficiency?",
           "Summarize: The committee met on Tuesday. It approved the budget and delayed the "
           "vote on the new park until March."]
POLICIES = ["none", "auto", "normalhedge", "ucbspec", "fixed:generalist", "fixed:python",
            "fixed:lookup", "fixed:suffix"]
MAX_TOKENS = 40


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # one torch thread (the harness's): a two-thread server beside the suite's other worker
    # oversubscribed the two cores in CI (these tests 8 minutes, a neighbour's past its 10-minute
    # timeout). Two threads, as a default server runs on this machine kind, are what
    # tests/core/model/test_row_padding.py computes the chunked linears with.
    srv = ServerProcess.start(DEMO_POOL, Path(tmp_path_factory.mktemp("bf16")),
                              "--dtype", "bfloat16")
    yield srv
    srv.stop()


def ask(client: OpenAI, prompt: str, policy: str = "auto", stream: bool = False) -> str:
    body = dict(model=client.models.list().data[0].id, temperature=0, max_tokens=MAX_TOKENS,
                messages=[{"role": "user", "content": prompt}],
                extra_body={"hedgespec": {"policy": policy}, "ignore_eos": True})
    if not stream:
        return client.chat.completions.create(**body).choices[0].message.content or ""
    chunks = client.chat.completions.create(stream=True, **body)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


@pytest.fixture(scope="module")
def plain(server: ServerProcess) -> list[str]:
    client = OpenAI(base_url=f"{server.base_url}/v1", api_key="none")
    return [ask(client, p, "none") for p in PROMPTS]


def test_the_default_server_verifies_with_canonical_numerics(server: ServerProcess) -> None:
    # where the library's kernels are not row-invariant at any cheap floor (oneDNN's AMX GEMM
    # at two threads), the server must still turn them on (fixed-size calls), not fall back and
    # pass the tests below by luck: with the library's kernels 12 of 12 greedy outputs changed
    # under 4 streams there (bench/results/deterministic.md)
    metrics = httpx.get(f"{server.base_url}/metrics").text
    assert "hedgespec_deterministic_numerics 1.0" in metrics


def test_every_policy_gives_plain_decodings_text(server: ServerProcess, plain: list[str]) -> None:
    client = OpenAI(base_url=f"{server.base_url}/v1", api_key="none")
    for policy in POLICIES:
        assert [ask(client, p, policy) for p in PROMPTS] == plain, policy


def test_streamed_equals_non_streamed_after_other_requests(server: ServerProcess,
                                                           plain: list[str]) -> None:
    client = OpenAI(base_url=f"{server.base_url}/v1", api_key="none")
    for p, want in zip(PROMPTS, plain, strict=True):
        assert ask(client, p, stream=True) == want
        assert ask(client, p) == want


def test_alone_equals_among_eight_concurrent_streams(server: ServerProcess,
                                                     plain: list[str]) -> None:
    others = ["Name three rivers in Europe.", "def fibonacci(n):", "Explain TCP in one line.",
              "What is 17 times 23?", "Write a haiku about rain."]

    async def run() -> list[str]:
        client = AsyncOpenAI(base_url=f"{server.base_url}/v1", api_key="none")
        model = (await client.models.list()).data[0].id

        async def one(prompt: str) -> str:
            chunks = await client.chat.completions.create(
                model=model, temperature=0, max_tokens=MAX_TOKENS, stream=True,
                messages=[{"role": "user", "content": prompt}], extra_body={"ignore_eos": True})
            return "".join([c.choices[0].delta.content or "" async for c in chunks
                            if c.choices])

        return list(await asyncio.gather(*(one(p) for p in PROMPTS + others)))

    assert asyncio.run(run())[: len(PROMPTS)] == plain


def test_a_seeded_sample_is_the_same_alone_again_and_among_four_streams(
        server: ServerProcess) -> None:
    # issue 58, deliverable 5: `seed` 7 at temperature 0.8, as the user tried it
    prompt = "Write a short poem about the sea."
    seeded = dict(temperature=0.8, max_tokens=MAX_TOKENS, seed=7,
                  messages=[{"role": "user", "content": prompt}])

    async def run(policy: str, others: int) -> str:
        client = AsyncOpenAI(base_url=f"{server.base_url}/v1", api_key="none")
        model = (await client.models.list()).data[0].id

        async def one(body: dict) -> str:
            resp = await client.chat.completions.create(model=model, **body)
            return resp.choices[0].message.content or ""

        other = [dict(temperature=1.0, max_tokens=MAX_TOKENS,
                      messages=[{"role": "user", "content": f"Tell me a fact about {topic}."}])
                 for topic in ("owls", "Mars", "tea", "rivers")[:others]]
        texts = await asyncio.gather(
            one({**seeded, "extra_body": {"hedgespec": {"policy": policy}}}),
            *(one(b) for b in other))
        return texts[0]

    alone = asyncio.run(run("auto", 0))
    assert asyncio.run(run("auto", 0)) == alone
    assert asyncio.run(run("auto", 4)) == alone
    assert asyncio.run(run("none", 0)) == alone  # plain sampling with the same seed
