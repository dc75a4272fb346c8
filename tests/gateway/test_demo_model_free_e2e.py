"""The shipped demo pool serves its model-free drafters: a copy-heavy request through the
official `openai` SDK (a code edit that returns the whole function) gets lookup or suffix
rounds, reported in `metrics.speculative_decoding` and in the admin page's per-drafter usage
(`/admin/api/overview`, what the page draws)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from bench.harness.server import ServerProcess
from demo.domains import DEMO_POOL

pytestmark = pytest.mark.timeout(300)
ADMIN = "sk-admin-model-free"
FUNCTION = '''def moving_average(values, window):
    if window <= 0:
        raise ValueError("window must be positive")
    out = []
    total = 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        if i >= window - 1:
            out.append(total / window)
    return out
'''


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess.start(DEMO_POOL, tmp_path_factory.mktemp("demo-model-free"),
                                 "--torch-threads", "1", "--admin-key", ADMIN)
    yield server
    server.stop()


def test_a_copy_heavy_request_drafts_with_lookup_or_suffix(demo_server: ServerProcess) -> None:
    client = OpenAI(base_url=f"{demo_server.base_url}/v1", api_key="unused")
    stream = client.chat.completions.create(
        model="SmolLM2-135M-Instruct", max_tokens=96, stream=True, temperature=0,
        messages=[{"role": "user", "content": "Rename the function moving_average to "
                   f"rolling_mean and return the whole function:\n\n{FUNCTION}"}])
    chunks = list(stream)
    metrics = [c.metrics for c in chunks if getattr(c, "metrics", None)]  # type: ignore[attr-defined]
    spec = metrics[-1]["speculative_decoding"]
    model_free = [d for d in spec["drafter_choices"] if d in ("lookup", "suffix")]
    assert model_free, spec["drafter_choices"]
    assert set(spec["final_weights"]) >= {"lookup", "suffix"}
    overview = httpx.get(f"{demo_server.base_url}/admin/api/overview",
                         headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30).json()
    rounds = {row["id"]: row["rounds"] for row in overview["per_drafter"]}
    assert sum(rounds.get(d, 0) for d in ("lookup", "suffix")) == len(model_free)


def test_the_demo_pool_lists_its_model_free_drafters(demo_server: ServerProcess) -> None:
    models = httpx.get(f"{demo_server.base_url}/v1/models", timeout=30).json()
    text = str(models)
    assert "'lookup': 'ngram'" in text and "'suffix': 'suffix'" in text, text
    assert Path(DEMO_POOL).is_file()
