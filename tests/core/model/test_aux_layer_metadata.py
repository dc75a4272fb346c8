"""Feature-layer metadata in drafter configs: what we save is read as the same target layers by
vLLM and by SGLang (their rules reimplemented below from their sources), we read every form
they accept, and a drafter that names no layers is held to EAGLE-3's default ones."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from bench.harness.tiny_models import random_drafter, tiny_target
from core.model.eagle3 import read_config, save_drafter
from eagle3_format.config import Eagle3Config
from eagle3_format.errors import DrafterConfigError
from eagle3_format.target_fit import compatibility_problems

IDS = "eagle_aux_hidden_state_layer_ids"


def engine_default(num_layers: int) -> tuple[int, ...]:
    return (2, num_layers // 2, num_layers - 3)


def vllm_capture(cfg: dict[str, Any], num_layers: int, *, nested_fallback: bool) -> tuple[int, ...]:
    """vLLM: the GPU model runner takes the draft config's top-level ids first; runners of the
    v1 worker before `eagle3_utils` fall back to `eagle_config`'s ids, later ones do not. Ids are
    used as is: Llama's aux capture appends `hidden_states + residual` before running layer id,
    i.e. the input of decoder layer id. No ids: the model's default (2, L//2, L-3)."""
    ids = cfg.get(IDS)
    if not ids and nested_fallback and isinstance(cfg.get("eagle_config"), dict):
        ids = cfg["eagle_config"].get(IDS)
    return tuple(ids) if ids else engine_default(num_layers)


def sglang_capture(cfg: dict[str, Any], num_layers: int) -> tuple[int, ...]:
    """SGLang: the model runner reads only `eagle_config[...ids]` (anything missing: None);
    `set_eagle3_layers_to_capture` adds 1 ("the ith layer takes the output of the (i-1)th") and
    captures the residual stream entering layer i. None: [2, L//2, L-3]."""
    try:
        ids = cfg["eagle_config"][IDS]
    except (KeyError, TypeError):
        ids = None
    return tuple(i + 1 for i in ids) if ids is not None else engine_default(num_layers)


@pytest.mark.parametrize(("num_layers", "aux"),
                         [(4, (1, 2, 3)), (32, (2, 16, 29)), (32, (1, 15, 28)), (6, (1, 3, 4))])
def test_saved_config_means_the_same_layers_in_vllm_and_sglang(tmp_path: Path, num_layers: int,
                                                                aux: tuple[int, int, int]) -> None:
    drafter = random_drafter(tiny_target())
    drafter.cfg = replace(drafter.cfg, aux_layers=aux)
    save_drafter(drafter, tmp_path, dtype=torch.float32)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert read_config(tmp_path).aux_layers == aux
    assert sglang_capture(saved, num_layers) == aux
    assert vllm_capture(saved, num_layers, nested_fallback=True) == aux
    assert vllm_capture(saved, num_layers, nested_fallback=False) == aux


def _cfg(**keys: Any) -> dict[str, Any]:
    return {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4, "vocab_size": 64,
            **keys}


@pytest.mark.parametrize("raw", [
    _cfg(**{IDS: [2, 16, 29]}),  # vLLM / speculators: top level, inputs of layers
    _cfg(eagle_config={IDS: [1, 15, 28]}),  # SGLang / SpecForge: nested, outputs of layers
    _cfg(**{IDS: [2, 16, 29]}, eagle_config={IDS: [1, 15, 28], "use_aux_hidden_state": True}),
])
def test_every_form_the_engines_accept_is_read(raw: dict[str, Any]) -> None:
    assert Eagle3Config.from_dict(raw).aux_layers == (2, 16, 29)
    # the engine that reads that form captures the same layers
    reader = (sglang_capture(raw, 32) if IDS not in raw
              else vllm_capture(raw, 32, nested_fallback=False))
    assert reader == (2, 16, 29)


@pytest.mark.parametrize(("raw", "needle"), [
    (_cfg(**{IDS: [1, 15, 28]}, eagle_config={IDS: [1, 15, 28]}), "different layers"),
    (_cfg(eagle_config={IDS: [1, 15]}), "fuses 3"),
    (_cfg(**{IDS: [-1, 2, 3]}), "below the embedding"),
])
def test_ambiguous_or_malformed_layer_ids_are_refused(raw: dict[str, Any], needle: str) -> None:
    with pytest.raises(DrafterConfigError, match=needle):
        Eagle3Config.from_dict(raw)


def test_a_drafter_naming_no_layers_must_be_served_on_the_default_ones() -> None:
    cfg = Eagle3Config.from_dict(_cfg())
    target = {"hidden_size": 32, "vocab_size": 64, "num_hidden_layers": 32}
    assert cfg.aux_layers is None
    assert compatibility_problems(cfg, target, (2, 16, 29)) == []
    problems = compatibility_problems(cfg, target, (1, 15, 28))
    assert problems and "default aux layers [2, 16, 29]" in problems[0]
    # a 6-layer target: engines serve (2, 3, 3); distinct layers are not what it was trained on
    small = {**target, "num_hidden_layers": 6}
    assert compatibility_problems(cfg, small, (1, 3, 4))
