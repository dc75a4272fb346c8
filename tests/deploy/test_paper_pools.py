"""The paper's three pools are selectable by name: .env.example has one block per pool whose target
is the seed file's, `HEDGESPEC_SEED_POOL` takes the bare name, and docker-compose.yml's defaults
are the active block's."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.deploy.conftest import (
    DEPLOY_DOC,
    ENV_EXAMPLE,
    REPO_ROOT,
    commented_block,
    parse_env_file,
)

POOLS = {"llama31_8b_hedgespec": "meta-llama/Llama-3.1-8B-Instruct",
         "qwen3_8b_hedgespec": "Qwen/Qwen3-8B", "qwen3_32b_hedgespec": "Qwen/Qwen3-32B"}


def blocks() -> dict[str, dict[str, str]]:
    active, _ = parse_env_file(ENV_EXAMPLE)
    return {"llama31_8b_hedgespec": active,
            "qwen3_8b_hedgespec": commented_block(ENV_EXAMPLE, "Qwen3-8B"),
            "qwen3_32b_hedgespec": commented_block(ENV_EXAMPLE, "Qwen3-32B")}


@pytest.mark.parametrize("name", list(POOLS))
def test_each_env_block_serves_its_seed_pools_target(name: str) -> None:
    block = blocks()[name]
    seed = json.loads((REPO_ROOT / block["HEDGESPEC_SEED_POOL"]).read_text())
    assert block["HEDGESPEC_SEED_POOL"] == f"pools/{name}.json"
    assert seed["target"] == block["HEDGESPEC_TARGET"] == block["HEDGESPEC_MODEL_NAME"] == (
        POOLS[name])
    assert block["HEDGESPEC_DTYPE"] == "bfloat16"


@pytest.mark.parametrize("name", list(POOLS))
def test_the_seed_pool_setting_takes_the_name(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.config import Settings

    monkeypatch.setenv("HEDGESPEC_SEED_POOL", name)
    assert Settings(_env_file=None).seed_pool == REPO_ROOT / "pools" / f"{name}.json"  # type: ignore[call-arg]
    assert name in DEPLOY_DOC.read_text()


def test_compose_defaults_to_the_active_block(compose: dict[str, Any]) -> None:
    env = compose["x-gateway"]["environment"]
    active = blocks()["llama31_8b_hedgespec"]
    assert env["HEDGESPEC_SEED_POOL"] == "${HEDGESPEC_SEED_POOL:-llama31_8b_hedgespec}"
    for key in ("HEDGESPEC_TARGET", "HEDGESPEC_MODEL_NAME"):
        assert env[key] == f"${{{key}:-{active[key]}}}"
