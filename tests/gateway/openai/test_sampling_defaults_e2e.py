"""Sampling defaults through real servers: a request that leaves temperature out samples with
the pool's `generation_config`, or with OpenAI's default under `--generation-config openai`;
an explicit field always wins. Seeded, so equal settings give equal text."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.harness.server import ServerProcess
from gateway.config import Settings
from gateway.openai.sampling import served_defaults
from tests.gateway.conftest import API_KEY

pytestmark = pytest.mark.timeout(240)
PROMPT = "Tell me a story"


@pytest.fixture(scope="module")
def greedy_by_default(pool_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny pool, with a pool file that makes greedy decoding the default."""
    spec = json.loads(pool_file.read_text())
    base = pool_file.parent
    spec["target"] = str(base / spec["target"])
    spec["drafters"] = [{**d, "path": str(base / d["path"])} for d in spec["drafters"]]
    spec["generation_config"] = {"temperature": 0.0}
    path = tmp_path_factory.mktemp("greedy-pool") / "pool.json"
    path.write_text(json.dumps(spec))
    return path


def serve(pool: Path, workdir: Path, *flags: str) -> Iterator[ServerProcess]:
    proc = ServerProcess.start(pool, workdir, "--api-key", API_KEY, *flags)
    try:
        yield proc
    finally:
        proc.stop()


def text(server: ServerProcess, **fields: Any) -> str:
    body = {"model": "tiny-target", "prompt": PROMPT, "max_tokens": 24, "ignore_eos": True,
            **fields}
    resp = httpx.post(f"{server.base_url}/v1/completions", json=body, timeout=60,
                      headers={"Authorization": f"Bearer {API_KEY}"})
    assert resp.status_code == 200, resp.text
    return str(resp.json()["choices"][0]["text"])


def test_the_pool_files_default_applies_where_the_request_is_silent(
    greedy_by_default: Path, tmp_path: Path,
) -> None:
    for server in serve(greedy_by_default, tmp_path / "auto"):
        greedy, sampled = text(server, temperature=0), text(server, temperature=1, seed=7)
        assert greedy != sampled  # the tiny target's T=1 sample is not its greedy text
        assert text(server, seed=7) == greedy
    for server in serve(greedy_by_default, tmp_path / "openai", "--generation-config", "openai"):
        assert text(server, seed=7) == text(server, temperature=1, seed=7) != greedy


def test_the_operators_override_wins_over_the_models_defaults() -> None:
    model = {"temperature": 0.2, "top_p": 0.9}
    assert served_defaults(model, Settings()) == model
    assert served_defaults(model, Settings(generation_config="openai")) == {}
    override = Settings(override_generation_config='{"temperature": 0.7, "top_k": 5}')
    assert served_defaults(model, override) == {"temperature": 0.7, "top_p": 0.9, "top_k": 5}
