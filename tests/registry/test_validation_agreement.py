"""One set of rules: the registry's torch-free checks (drafter_registry.validation) and the core's
full check (core.model.drafter_check.inspect_drafter) apply the format's rules (eagle3_format) to
what each reads, and give the same verdict for the same reason on the same checkpoints, in every
weight format. For pytorch_model.bin the registry cannot see tensors without torch: there the
tensor rules belong to the core alone, and the registry must never refuse what the core
accepts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save

from bench.harness.checkpoints import (
    DRAFT_VOCAB,
    VOCAB,
    drafter_config,
    drafter_tensors,
    write_target_config,
)
from core.model.drafter_check import inspect_drafter
from drafter_registry.errors import CheckpointError
from drafter_registry.validation import check_against_target, check_checkpoint

Config = dict[str, Any]
Tensors = dict[str, np.ndarray]
FORMATS = ("safetensors", "safetensors-sharded", "bin")


def _swap_t2d(t: Tensors) -> None:
    t["t2d"] = t["t2d"].copy()
    t["t2d"][[0, VOCAB - 1]] = [False, True]  # marks a target id no draft id maps to


def _full_vocab(c: Config, t: Tensors) -> None:
    c["draft_vocab_size"] = None  # SGLang: the target's vocabulary
    t["lm_head.weight"] = np.zeros((VOCAB, c["hidden_size"]), np.float32)
    t["d2t"], t["t2d"] = np.zeros(VOCAB, np.int64), np.ones(VOCAB, bool)


# name -> (edit of config and tensors, accepted?, is the rule about tensor values/keys?)
CASES: dict[str, tuple[Callable[[Config, Tensors], None], bool, bool]] = {
    "valid": (lambda c, t: None, True, False),
    "null target_hidden_size": (lambda c, t: c.update(target_hidden_size=None), True, False),
    "null draft_vocab_size": (_full_vocab, True, False),
    "both layer-id forms, agreeing": (
        lambda c, t: c.update(eagle_aux_hidden_state_layer_ids=[1, 3, 4],
                              eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 2, 3]}),
        True, False),
    "rope_parameters with yarn": (
        lambda c, t: c.update(rope_parameters={"rope_type": "yarn", "rope_theta": 1e6,
                                               "factor": 4.0}), True, False),
    "layer-id forms disagree": (
        lambda c, t: c.update(eagle_aux_hidden_state_layer_ids=[1, 3, 4],
                              eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}),
        False, False),
    "two layer ids": (
        lambda c, t: c.update(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2]}),
        False, False),
    "layers beyond the target": (lambda c, t: c.update(eagle_aux_hidden_state_layer_ids=[1, 3, 9]),
                                 False, False),
    "use_aux_hidden_state false": (
        lambda c, t: c.update(eagle_config={"use_aux_hidden_state": False}), False, False),
    "norm_before_residual true": (lambda c, t: c.update(norm_before_residual=True), False, False),
    "longrope": (lambda c, t: c.update(rope_scaling={"rope_type": "longrope", "factor": 2.0}),
                 False, False),
    "not an EAGLE-3 architecture": (lambda c, t: c.update(architectures=["Qwen2ForCausalLM"]),
                                    False, False),
    "zero draft_vocab_size": (lambda c, t: c.update(draft_vocab_size=0), False, False),
    "no intermediate_size": (lambda c, t: c.pop("intermediate_size"), False, False),
    "t2d disagrees with d2t": (lambda c, t: _swap_t2d(t), False, True),
    "d2t outside the vocabulary": (lambda c, t: t.update(d2t=np.full(DRAFT_VOCAB, VOCAB, np.int64)),
                                   False, True),
    "two draft ids on one target id": (lambda c, t: t.update(d2t=-np.arange(DRAFT_VOCAB)),
                                       False, True),
    "missing fc.weight": (lambda c, t: t.pop("fc.weight"), False, True),
    "unexpected tensor": (lambda c, t: t.update(extra=np.zeros(1, np.float32)), False, True),
    "q_proj of the wrong shape": (
        lambda c, t: t.update({"midlayer.self_attn.q_proj.weight": np.zeros((8, 32), np.float32)}),
        False, True),
    "t2d without d2t": (lambda c, t: (_full_vocab(c, t), t.pop("d2t")), False, True),
}


def write_checkpoint(root: Path, config: Config, tensors: Tensors, fmt: str) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(config))
    if fmt == "safetensors":
        (root / "model.safetensors").write_bytes(save(tensors))
    elif fmt == "safetensors-sharded":
        names = sorted(tensors)
        shards = {"model-00001-of-00002.safetensors": names[::2],
                  "model-00002-of-00002.safetensors": names[1::2]}
        for shard, keys in shards.items():
            (root / shard).write_bytes(save({k: tensors[k] for k in keys}))
        index = {"weight_map": {k: shard for shard, keys in shards.items() for k in keys}}
        (root / "model.safetensors.index.json").write_text(json.dumps(index))
    else:
        torch = pytest.importorskip("torch")
        torch.save({k: torch.from_numpy(v.copy()) for k, v in tensors.items()},
                   root / "pytorch_model.bin")
    return root


def registry_reason(drafter: Path, target: Path) -> str | None:
    """Why the registry refuses the drafter, None if it accepts it."""
    try:
        check_against_target(check_checkpoint(drafter), target)
    except CheckpointError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_registry_and_core_give_the_same_verdict(tmp_path: Path, case: str, fmt: str) -> None:
    edit, accepted, tensor_rule = CASES[case]
    config, tensors = drafter_config(), {}
    tensors = drafter_tensors(config)
    edit(config, tensors)
    drafter = write_checkpoint(tmp_path / "drafter", config, tensors, fmt)
    target = write_target_config(tmp_path / "target")
    core = inspect_drafter(drafter, target)
    assert core.compatible is accepted, core.reason
    if fmt == "bin" and tensor_rule:
        assert registry_reason(drafter, target) is None or not core.compatible
    else:
        assert registry_reason(drafter, target) == core.reason
    if accepted:
        assert core.format == fmt
