"""Drafter RoPE: both config forms (transformers 4's rope_theta/rope_scaling, transformers 5's
rope_parameters) and every supported rope type give the cos/sin of transformers' own Llama
rotary embedding, built from the same config.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from bench.harness.tiny_models import random_drafter, tiny_target
from core.model.eagle3 import DrafterLoadError, read_config, save_drafter
from core.model.rope import rope_cos_sin
from eagle3_format.config import Eagle3Config
from eagle3_format.rope_config import RopeConfig, RopeConfigError

HD = 16
BASE = {"hidden_size": 64, "num_attention_heads": 4, "head_dim": HD, "max_position_embeddings": 64}
SCALINGS: dict[str, dict[str, Any]] = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 3.0},
    "dynamic-legacy-key": {"type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16},
    "yarn-mscale": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                    "mscale": 0.7, "mscale_all_dim": 1.0, "beta_fast": 16.0, "beta_slow": 2.0},
    "yarn-untruncated": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                         "truncate": False, "attention_factor": 1.3},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
}
# Positions inside and beyond max_position_embeddings (dynamic NTK changes its base beyond it).
# Angles reach ~180 rad, where float32 resolves ~1e-5: hence ATOL (a wrong RoPE is off by > 1e-3).
ATOL = 3e-5
POSITIONS = {"short": torch.arange(40)[None], "long": torch.arange(150)[None] + 30}


def transformers_cos_sin(raw: dict[str, Any],
                         positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What transformers' Llama computes for a freshly loaded config.json `raw`."""
    rotary = LlamaRotaryEmbedding(LlamaConfig(**raw))
    return rotary(torch.zeros(1, dtype=torch.float32), positions)


def forms(theta: float, scaling: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The same RoPE as transformers 4 and transformers 5 write it."""
    old = {**BASE, "rope_theta": theta, **({"rope_scaling": dict(scaling)} if scaling else {})}
    rope_type = (scaling or {}).get("rope_type") or (scaling or {}).get("type") or "default"
    new = {**BASE,
           "rope_parameters": {**(scaling or {}), "rope_type": rope_type, "rope_theta": theta}}
    return {"rope_scaling": old, "rope_parameters": new}


@pytest.mark.parametrize("form", ["rope_scaling", "rope_parameters"])
@pytest.mark.parametrize("name", ["default", *SCALINGS])
@pytest.mark.parametrize("span", sorted(POSITIONS))
def test_cos_sin_match_transformers(form: str, name: str, span: str) -> None:
    raw = forms(50000.0, SCALINGS.get(name))[form]
    rope = RopeConfig.from_config(raw)
    assert (rope.theta == 50000.0
            and rope.rope_type == LlamaConfig(**raw).rope_parameters["rope_type"])
    want_cos, want_sin = transformers_cos_sin(raw, POSITIONS[span])
    cos, sin = rope_cos_sin(POSITIONS[span], HD, rope, torch.float32)
    torch.testing.assert_close(cos, want_cos, atol=ATOL, rtol=0)
    torch.testing.assert_close(sin, want_sin, atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", sorted(SCALINGS))
def test_every_scaling_changes_the_embedding(name: str) -> None:
    # Guards the comparison above: a scaled RoPE read as plain RoPE would be caught.
    raw = forms(50000.0, SCALINGS[name])["rope_parameters"]
    plain, _ = rope_cos_sin(POSITIONS["long"], HD, 50000.0, torch.float32)
    assert not torch.allclose(transformers_cos_sin(raw, POSITIONS["long"])[0], plain, atol=1e-3)


def test_a_config_saved_by_transformers_5_keeps_its_theta() -> None:
    # transformers >= 5 writes no top-level rope_theta: it used to load as 10000.
    saved = LlamaConfig(rope_theta=1e6, **BASE).to_dict()
    assert "rope_theta" not in saved
    assert RopeConfig.from_config(saved).theta == 1e6
    assert RopeConfig.from_config({}).theta == 10000.0  # EAGLE's default when nothing is said


def test_rope_scaling_wins_over_rope_parameters_and_inner_theta_over_top_level() -> None:
    raw = {**BASE, "rope_theta": 7.0,
           "rope_parameters": {"rope_type": "default", "rope_theta": 9.0},
           "rope_scaling": {"rope_type": "linear", "factor": 2.0}}
    rope = RopeConfig.from_config(raw)
    cfg = LlamaConfig(**raw).rope_parameters
    assert ((rope.rope_type, rope.theta, rope.get("factor"))
            == (cfg["rope_type"], cfg["rope_theta"], 2.0))
    rope = RopeConfig.from_config({"rope_theta": 7.0, "rope_parameters": {"rope_theta": 9.0}})
    assert (rope.theta
            == LlamaConfig(**{"rope_theta": 7.0, "rope_parameters": {"rope_theta": 9.0}})
            .rope_parameters["rope_theta"] == 9.0)


@pytest.mark.parametrize(("raw", "needle"), [
    ({"rope_scaling": {"rope_type": "longrope", "factor": 2.0}}, "not supported"),
    ({"rope_scaling": {"rope_type": "linear"}}, "needs"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
])
def test_unsupported_rope_is_refused(raw: dict[str, Any], needle: str) -> None:
    with pytest.raises(RopeConfigError, match=needle):
        RopeConfig.from_config(raw)


@pytest.mark.parametrize("name", ["default", "llama3", "yarn"])
def test_saved_drafter_config_reads_back_the_same_rope_here_and_in_transformers(tmp_path: Path,
                                                                                name: str) -> None:
    target = tiny_target()
    drafter = random_drafter(target)
    rope = RopeConfig.from_config(forms(1e6, SCALINGS.get(name))["rope_parameters"])
    drafter.cfg = Eagle3Config(**{**drafter.cfg.__dict__, "rope": rope})
    save_drafter(drafter, tmp_path, dtype=torch.float32)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert read_config(tmp_path).rope == rope
    head_dim = drafter.cfg.head_dim
    for transformers_view in ({k: v for k, v in raw.items() if k != "rope_parameters"}, raw):
        # what transformers 4 reads (no rope_parameters key) and what transformers 5 reads
        want, _ = LlamaRotaryEmbedding(LlamaConfig(**transformers_view))(torch.zeros(1),
                                                                         POSITIONS["long"])
        got, _ = rope_cos_sin(POSITIONS["long"], head_dim, rope, torch.float32)
        torch.testing.assert_close(got, want, atol=ATOL, rtol=0)


def test_loader_names_an_unsupported_rope(tmp_path: Path) -> None:
    target = tiny_target()
    save_drafter(random_drafter(target), tmp_path, dtype=torch.float32)
    raw = json.loads((tmp_path / "config.json").read_text())
    raw["rope_parameters"] = {"rope_type": "longrope", "rope_theta": 1e4}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(DrafterLoadError, match="longrope"):
        read_config(tmp_path)
