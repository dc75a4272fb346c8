"""Fixtures of the registry-in-the-gateway tests: the tiny local pool, a fake Hugging Face Hub
publishing drafters (good, incompatible, broken) in hub layout, databases on SQLite and, when
`HEDGESPEC_TEST_POSTGRES_URL` is set, PostgreSQL, and real `hedgespec serve` processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from bench.harness.fakehub import FakeHub
from bench.harness.postgres import POSTGRES_ENV, fresh_postgres_database, url_string
from bench.harness.server import ServerProcess
from bench.harness.tiny_pool import AUX_LAYERS, MODEL_NAME, build_drafter, build_pool
from core.model.eagle3 import Eagle3Config, Eagle3Drafter, build_vocab_mapping, save_drafter
from tests.gateway.conftest import ADMIN_KEY, API_KEY

BACKENDS = [
    "sqlite",
    pytest.param("postgresql", marks=[
        pytest.mark.postgres,
        pytest.mark.skipif(not os.environ.get(POSTGRES_ENV), reason=f"{POSTGRES_ENV} is not set"),
    ]),
]  # fmt: skip
HUB_REPO = "hedgespec-test/drafters"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
SYNC_INTERVAL_S = "0.3"

__all__ = ["ADMIN", "ADMIN_KEY", "API_KEY", "MODEL_NAME"]


# ---- models -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def pool_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_pool(tmp_path_factory.mktemp("pool"))


def _incompatible_drafter(out: Path, *, hidden: int, vocab: int) -> Path:
    """An EAGLE-3 drafter for a Llama target of another width or vocabulary."""
    torch.manual_seed(7)
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512)  # fmt: skip
    target = LlamaForCausalLM(config)
    cfg = Eagle3Config.for_target(target.config, draft_vocab_size=64, aux_layers=AUX_LAYERS)
    drafter = Eagle3Drafter(cfg, target.get_input_embeddings())
    drafter.set_vocab_mapping(*build_vocab_mapping(torch.ones(vocab), 64))
    save_drafter(drafter, out, dtype=torch.float32)
    return out


@pytest.fixture(scope="session")
def hub_files(pool_file: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Repo files in hub layout, one drafter per sub-folder (as the HedgeSpec paper's repo)."""
    root = tmp_path_factory.mktemp("hub-drafters")
    target = LlamaForCausalLM.from_pretrained(str(pool_file.parent / MODEL_NAME))
    # Every sub-folder has its own weights: the HF cache shares blobs by content, so a broken
    # copy of another drafter's file would be served from the cache instead of the fake Hub.
    for i, name in enumerate(("gamma", "delta", "epsilon", "zeta", "corrupt", "short")):
        build_drafter(root / name, target, seed=200 + i)
    _incompatible_drafter(root / "wide", hidden=32, vocab=len_vocab(pool_file))
    _incompatible_drafter(root / "vocab", hidden=64, vocab=len_vocab(pool_file) + 100)
    files = {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    files["noweights/config.json"] = files["gamma/config.json"]
    return files


def len_vocab(pool_file: Path) -> int:
    config = json.loads((pool_file.parent / MODEL_NAME / "config.json").read_text())
    return int(config["vocab_size"])


@pytest.fixture(scope="module")
def hub(hub_files: dict[str, bytes]) -> Iterator[FakeHub]:
    """`main` and tag `v1` hold every drafter; some files are served broken on purpose."""
    with FakeHub() as fake:
        fake.add_repo(HUB_REPO, hub_files, tags=("v1",))
        fake.faults["corrupt/model.safetensors"] = "corrupt"  # flipped bytes, same length
        fake.faults["short/model.safetensors"] = "short"  # fewer bytes than declared
        yield fake


# ---- databases --------------------------------------------------------------------------------


def postgres_database() -> Iterator[str]:
    """A fresh PostgreSQL database on the test server, dropped afterwards."""
    with fresh_postgres_database(os.environ[POSTGRES_ENV], prefix="hedgespec_gw") as url:
        yield url_string(url)


@pytest.fixture(scope="module", params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[str]:
    """One empty registry database per module and backend (servers migrate it on start)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('db') / 'registry.db'}"
    else:
        yield from postgres_database()


# ---- servers ----------------------------------------------------------------------------------


def start_server(pool: Path, workdir: Path, *, database_url: str, hub: FakeHub | None = None,
                 env: dict[str, str] | None = None, timeout_s: float = 120,
                 wait: bool = True) -> ServerProcess:
    """`python -m gateway serve` on a free loopback port, with its own HF cache and the fake
    Hub as `HF_ENDPOINT`; HEDGESPEC_* comes only from `env` (never the developer's)."""
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "server.log"
    args = [
        sys.executable, "-m", "gateway", "serve", "--pool", str(pool), "--port", "0",
        "--database-url", database_url, "--api-key", API_KEY, "--admin-key", ADMIN_KEY,
    ]  # fmt: skip
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HEDGESPEC_", "HF_"))}
    child = {
        **base, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
        "HF_HOME": str(workdir / "hf-home"), "HF_HUB_DISABLE_TELEMETRY": "1",
        "HEDGESPEC_POOL_SYNC_INTERVAL_S": SYNC_INTERVAL_S, "HEDGESPEC_TORCH_THREADS": "1",
        "HEDGESPEC_DTYPE": "float32", "HEDGESPEC_LOSS": "length",
        **({"HF_ENDPOINT": hub.url} if hub is not None else {}),
        **(env or {}),
    }  # fmt: skip
    with log_path.open("wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, env=child)
    server = ServerProcess(proc, log_path)
    if wait:  # else the caller starts several at once and calls `_wait_ready` itself
        server._wait_ready(timeout_s)
    return server


class Admin:
    """The admin pool API of one server, with polling helpers."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.http = httpx.Client(base_url=f"{server.base_url}/admin/api", headers=ADMIN, timeout=30)

    def drafters(self) -> dict[str, dict[str, Any]]:
        resp = self.http.get("/drafters")
        assert resp.status_code == 200, resp.text
        return {d["id"]: d for d in resp.json()["data"]}

    def add(self, **body: Any) -> dict[str, Any]:
        resp = self.http.post("/drafters", json=body)
        assert resp.status_code == 202, resp.text
        return dict(resp.json())

    def serving(self) -> set[str]:
        resp = self.http.get("/pool")
        assert resp.status_code == 200, resp.text
        return set(resp.json()["serving"])

    def wait_status(self, drafter_id: str, *statuses: str, timeout_s: float = 90) -> dict[str, Any]:
        return wait_for(lambda: _status_in(self.drafters().get(drafter_id), statuses),
                        timeout_s, lambda: f"{drafter_id} never reached {statuses}: "
                        f"{self.drafters().get(drafter_id)}\n{self.server.log()[-3000:]}")

    def wait_serving(self, drafter_id: str, present: bool = True, timeout_s: float = 30) -> None:
        wait_for(lambda: (drafter_id in self.serving()) == present or None, timeout_s,
                 lambda: f"{drafter_id} serving != {present}: {sorted(self.serving())}")


def _status_in(row: dict[str, Any] | None, statuses: tuple[str, ...]) -> dict[str, Any] | None:
    return row if row is not None and row["status"] in statuses else None


def wait_for(probe: Callable[[], Any], timeout_s: float, message: Callable[[], str]) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(message())


def chat(server: ServerProcess, policy: str, *, max_tokens: int = 8, stream: bool = False,
         prompt: str = "Speculative decoding drafts tokens.") -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {API_KEY}"},
        json={"model": MODEL_NAME, "messages": [{"role": "user", "content": prompt}],
              "max_tokens": max_tokens, "ignore_eos": True, "stream": stream,
              "hedgespec": {"policy": policy}},
        timeout=120,
    )
