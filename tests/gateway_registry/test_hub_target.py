"""A target named by Hugging Face repo id (deployments: `--target meta-llama/...`) is fetched
from the hub into the HF cache on start and served; drafters are validated against it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.harness.fakehub import FakeHub
from bench.harness.tiny_pool import MODEL_NAME
from drafter_registry.target_hub import TARGET_FILES, download_target, is_hub_id
from tests.gateway_registry.conftest import API_KEY, start_server

TARGET_REPO = "hedgespec-test/tiny-target"


@pytest.fixture(scope="module")
def target_hub(pool_file: Path) -> Iterator[FakeHub]:
    root = pool_file.parent / MODEL_NAME
    files = {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()}
    files["modeling_evil.py"] = b"raise SystemExit('remote code must never be fetched')\n"
    with FakeHub() as hub:
        hub.add_repo(TARGET_REPO, files)
        yield hub


def test_hub_ids_and_local_paths_are_told_apart(tmp_path: Path) -> None:
    assert is_hub_id("meta-llama/Llama-3.1-8B-Instruct")
    assert (not is_hub_id(str(tmp_path)) and not is_hub_id("../etc/passwd")
            and not is_hub_id("plain"))


def test_download_fetches_weights_and_tokenizer_but_no_code(target_hub: FakeHub,
                                                            tmp_path: Path) -> None:
    path = download_target(TARGET_REPO, cache_dir=tmp_path, endpoint=target_hub.url)
    names = {p.name for p in path.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names
    assert "modeling_evil.py" not in names and "*.py" not in TARGET_FILES


def test_server_serves_a_target_named_by_repo_id(target_hub: FakeHub, tmp_path: Path) -> None:
    server = start_server(tmp_path / "unused-pool.json", tmp_path,
                          database_url=f"sqlite:///{tmp_path / 'r.db'}",
                          hub=target_hub, env={"HEDGESPEC_TARGET": TARGET_REPO})
    try:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        models = httpx.get(f"{server.base_url}/v1/models", headers=headers).json()
        assert [m["id"] for m in models["data"]] == [TARGET_REPO]
        body = {"model": TARGET_REPO, "prompt": "hello", "max_tokens": 4}
        r = httpx.post(f"{server.base_url}/v1/completions", json=body, headers=headers, timeout=60)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
        assert list((tmp_path / "hf-home").rglob("model.safetensors"))
    finally:
        server.stop()
