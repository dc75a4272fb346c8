"""`hedgespec serve --device-map auto`, the documented multi-GPU path, serves on a CPU box too
(it needs `accelerate`, a real dependency)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.harness.server import ServerProcess
from bench.harness.tiny_pool import MODEL_NAME
from tests.gateway.conftest import API_KEY


@pytest.fixture(scope="module")
def mapped_server(pool_file: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess.start(pool_file, tmp_path_factory.mktemp("device-map"),
                               "--device-map", "auto", "--api-key", API_KEY)
    yield proc
    proc.stop()


def test_device_map_auto_serves_a_chat_completion(mapped_server: ServerProcess) -> None:
    response = httpx.post(
        f"{mapped_server.base_url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {API_KEY}"},
        json={"model": MODEL_NAME, "max_tokens": 8,
              "messages": [{"role": "user", "content": "hello"}]},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["usage"]["completion_tokens"] >= 1
    assert "requires `accelerate`" not in mapped_server.log()
