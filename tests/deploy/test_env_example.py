""".env.example: the Llama-3.1-8B seed pool in bf16 with EAGLE-3's tree, a Qwen3-8B variant, and
only placeholder secrets; every HEDGESPEC_* name in it is one the gateway's Settings reads, and
the values load through the real Settings class into the intended engine configuration."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import pytest

from tests.deploy.conftest import (
    ENV_EXAMPLE,
    PENDING_SETTINGS,
    REPO_ROOT,
    commented_block,
    parse_env_file,
    settings_variables,
)

# EAGLE-3's GPU defaults: top_k 10, total_token 60, depth 7 in EAGLE's counting (total_token
# counts the root, depth the levels after the first), i.e. 59 drafted nodes over 8 draft levels
# in core.config.TreeConfig.
EAGLE3_TREE = {"top_k": 10, "depth": 8, "total_tokens": 59}
# What a model variant must set, so that switching blocks leaves nothing of the other model.
POOL_BLOCK = {
    "HEDGESPEC_TARGET", "HEDGESPEC_SEED_POOL", "HEDGESPEC_MODEL_NAME", "HEDGESPEC_DEVICE",
    "HEDGESPEC_DTYPE",
    "HEDGESPEC_TREE_TOP_K", "HEDGESPEC_TREE_DEPTH", "HEDGESPEC_TREE_TOTAL_TOKENS",
    "HEDGESPEC_MAX_CONTEXT",
}  # fmt: skip


def _settings(values: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Any:
    from gateway.config import Settings

    for name in list(os.environ):
        if name.startswith("HEDGESPEC_"):
            monkeypatch.delenv(name)
    for name, value in values.items():
        if name.startswith("HEDGESPEC_") and name not in PENDING_SETTINGS:
            monkeypatch.setenv(name, value)
    return Settings(_env_file=None)


def test_llama_pool_in_bf16_with_the_eagle3_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    active, _ = parse_env_file(ENV_EXAMPLE)
    pool = REPO_ROOT / active["HEDGESPEC_SEED_POOL"]
    seed = json.loads(pool.read_text())
    assert seed["target"] == active["HEDGESPEC_TARGET"] == "meta-llama/Llama-3.1-8B-Instruct"
    repos = {d.get("repo_id") or d["discover"]["repo_id"] for d in seed["drafters"]}
    assert {"yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "aladinggit/hedgespec_eagle_drafters"} <= repos

    settings = _settings(active, monkeypatch)
    assert settings.dtype == "bfloat16"
    assert settings.device == "cuda"
    tree = settings.engine_config().tree
    assert (tree.top_k, tree.depth, tree.total_tokens) == tuple(EAGLE3_TREE.values())
    assert settings.model_name == seed["target"]


def test_qwen3_variant_is_commented_and_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    active, _ = parse_env_file(ENV_EXAMPLE)
    qwen = commented_block(ENV_EXAMPLE, "Qwen3-8B")
    assert qwen, "no commented Qwen3-8B block"
    assert not any("qwen" in v.lower() for v in active.values()), "the Qwen3 variant is active"
    assert qwen["HEDGESPEC_MODEL_NAME"] == "Qwen/Qwen3-8B"
    # The variant replaces the pool block: same keys, so uncommenting it leaves nothing stale.
    assert set(qwen) >= POOL_BLOCK and set(active) >= POOL_BLOCK
    settings = _settings({**active, **qwen}, monkeypatch)
    tree = settings.engine_config().tree
    assert (tree.top_k, tree.depth, tree.total_tokens) == tuple(EAGLE3_TREE.values())
    assert settings.dtype == "bfloat16"
    assert qwen["HEDGESPEC_TARGET"] == "Qwen/Qwen3-8B"
    pool = REPO_ROOT / qwen["HEDGESPEC_SEED_POOL"]
    if pool.is_file():  # the seed file is maintained with the pools (see docs/deploy.md)
        assert json.loads(pool.read_text())["target"] == "Qwen/Qwen3-8B"


def test_secrets_are_placeholders_the_entry_point_refuses() -> None:
    active, _ = parse_env_file(ENV_EXAMPLE)
    for name in ("HEDGESPEC_API_KEYS", "HEDGESPEC_ADMIN_KEY", "POSTGRES_PASSWORD"):
        assert "change-me" in active[name], name
    assert active["HF_TOKEN"] == ""
    # Nothing that looks like a real credential anywhere, commented lines included.
    text = ENV_EXAMPLE.read_text()
    assert not re.search(r"hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9]{20,}|[0-9a-f]{32,}", text)


def test_every_gateway_variable_is_a_setting() -> None:
    active, commented = parse_env_file(ENV_EXAMPLE)
    known = settings_variables()
    active_unknown = {n for n in active if n.startswith("HEDGESPEC_")} - known
    assert active_unknown == set(), "not read by gateway/config.py"
    commented_unknown = {n for n in commented if n.startswith("HEDGESPEC_")} - known
    assert commented_unknown <= PENDING_SETTINGS
