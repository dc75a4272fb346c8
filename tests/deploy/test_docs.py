"""docs/deploy.md (the README's "Deploy on a GPU server" section) stays true to the files: the
paths it names exist, the variables it names are read by someone, the compose profile is the one
in docker-compose.yml, and its memory arithmetic matches the real drafter module."""

from __future__ import annotations

import re
from typing import Any

from tests.deploy.conftest import (
    DEPLOY_DOC,
    ENTRYPOINT_VARIABLES,
    PENDING_SETTINGS,
    REPO_ROOT,
    settings_variables,
)

# Llama-3.1-8B-Instruct and its EAGLE-3 drafter (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B config).
LLAMA_8B = {"layers": 32, "kv_heads": 8, "head_dim": 128}
DRAFTER_8B = {
    "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256, "draft_vocab_size": 32000,
    "target_hidden_size": 4096,
}  # fmt: skip
BF16 = 2


def test_named_paths_exist() -> None:
    text = DEPLOY_DOC.read_text()
    paths = set(
        re.findall(
            r"`((?:deploy|gateway|core|pools|docs)/[\w./-]+|[\w.-]+\.(?:yml|yaml|md|example))`",
            text,
        )
    )
    paths |= {"Dockerfile", "docker-compose.yml", ".env.example"}
    # Bare manifest names are the ones in deploy/k8s, where the text is talking about them.
    missing = [
        p for p in sorted(paths)
        if not (REPO_ROOT / p).exists() and not (REPO_ROOT / "deploy" / "k8s" / p).exists()
    ]  # fmt: skip
    assert missing == []


def test_named_variables_are_read_by_the_gateway_or_the_entry_point() -> None:
    names = set(re.findall(r"\bHEDGESPEC_[A-Z0-9_]+", DEPLOY_DOC.read_text()))
    known = settings_variables() | PENDING_SETTINGS | ENTRYPOINT_VARIABLES
    assert names - known == set()


def test_commands_use_the_compose_profile(compose: dict[str, Any]) -> None:
    profiles = {p for s in compose["services"].values() for p in s.get("profiles", [])}
    used = set(re.findall(r"--profile (\w+)", DEPLOY_DOC.read_text()))
    assert used and used <= profiles


def test_memory_arithmetic_matches_the_drafter_module() -> None:
    import torch

    from core.model.eagle3 import Eagle3Config, Eagle3Drafter

    with torch.device("meta"):  # shapes only, no memory
        drafter = Eagle3Drafter(Eagle3Config(**DRAFTER_8B))
    params = sum(p.numel() for p in drafter.parameters())
    assert 0.42e9 < params < 0.43e9
    text = DEPLOY_DOC.read_text()
    assert f"≈ {params * BF16 / 1e9:.2f} GB" in text  # 0.85 GB

    kv = 2 * LLAMA_8B["layers"] * LLAMA_8B["kv_heads"] * LLAMA_8B["head_dim"] * BF16
    assert f"{kv // 1024} KiB per token" in text
    drafter_kv = 2 * DRAFTER_8B["num_key_value_heads"] * DRAFTER_8B["head_dim"] * BF16
    assert f"{drafter_kv // 1024} KiB per token per drafter" in text
