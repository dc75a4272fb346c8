"""Compatibility of an EAGLE-3 drafter with a target: the check behind `hedgespec drafter inspect`,
registry validation and the engine's pool admission (one function, one answer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.checkpoint_config import eagle3_default_layers
from core.eagle3 import (
    SAFETENSORS_INDEX,
    DrafterLoadError,
    check_state_dict,
    read_config,
    read_weights,
    resolve_dir,
    weight_file,
)

# inspect_drafter's "format", named as drafter_registry.validation's weights_format
WEIGHT_FORMATS = {"model.safetensors": "safetensors", SAFETENSORS_INDEX: "safetensors-sharded"}


def read_target_config(target_dir: str | Path) -> dict[str, Any]:
    path = Path(target_dir) / "config.json"
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DrafterLoadError(f"cannot read target config {path}: {exc}", readable=False) from exc
    if not isinstance(raw, dict) or "hidden_size" not in raw or "vocab_size" not in raw:
        raise DrafterLoadError(f"{path} is not a causal LM config", readable=False)
    return raw


def default_aux_layers(num_layers: int) -> tuple[int, int, int]:
    """EAGLE-3's (2, L//2, L-3) (inputs of those decoder layers); for small targets where that
    repeats a layer, three distinct layers spread over 1..L-1 instead."""
    cand = (2, num_layers // 2, num_layers - 3)
    if len(set(cand)) == 3 and all(0 <= i < num_layers for i in cand):
        return cand
    if num_layers >= 4:
        low, mid = 1, num_layers // 2
        high = max(mid + 1, num_layers - 2)
        return (low, mid, min(high, num_layers - 1))
    picks = list(range(num_layers)) + [num_layers - 1] * 3
    return (picks[0], picks[1], picks[2])


def compatibility_problems(
    drafter_cfg: Any, target_cfg: dict[str, Any], aux_layers: tuple[int, int, int] | None = None
) -> list[str]:
    """Every mismatch between a drafter config (Eagle3Config) and a target config dict."""
    problems = []
    t_hidden, t_vocab = int(target_cfg["hidden_size"]), int(target_cfg["vocab_size"])
    if drafter_cfg.target_hidden_size != t_hidden:
        problems.append(f"hidden size {drafter_cfg.target_hidden_size} "
                        f"!= target hidden size {t_hidden}")
    if drafter_cfg.vocab_size != t_vocab:
        problems.append(f"vocab size {drafter_cfg.vocab_size} != target vocab size {t_vocab}")
    layers = int(target_cfg.get("num_hidden_layers", 0))
    # A config that names no layers was trained on EAGLE-3's default, which every engine serves it
    # with; a pool served on other layers would feed it features it has never seen.
    named = drafter_cfg.aux_layers is not None
    trained = tuple(drafter_cfg.aux_layers) if named else eagle3_default_layers(layers)
    what = (f"aux layers {list(trained)}" if named
            else f"EAGLE-3's default aux layers {list(trained)} (config names none)")
    if any(not 0 <= i < max(layers, 1) for i in trained):
        problems.append(f"{what} outside the target's {layers} layers")
    elif aux_layers is not None and trained != tuple(aux_layers):
        problems.append(f"{what} != served aux layers {list(aux_layers)}")
    return problems


def inspect_drafter(
    drafter_dir: str | Path,
    target_dir: str | Path,
    subfolder: str | None = None,
    aux_layers: tuple[int, int, int] | None = None,
) -> dict[str, Any]:
    """Never raises. `readable` False means the files could not be read (CLI exit 2)."""
    report: dict[str, Any] = {
        "compatible": False,
        "reason": None,
        "readable": True,
        "architecture": None,
        "hidden_size": None,
        "draft_vocab_size": None,
        "target_vocab_size": None,
        "num_parameters": None,
        "format": None,
    }
    try:
        root = resolve_dir(drafter_dir, subfolder)
        target_cfg = read_target_config(target_dir)
        report["target_vocab_size"] = int(target_cfg["vocab_size"])
        cfg = read_config(root)
        report.update(
            architecture=(cfg.architectures or ["unknown"])[0],
            hidden_size=cfg.hidden_size,
            draft_vocab_size=cfg.draft_vocab_size,
        )
        file = weight_file(root)
        report["format"] = WEIGHT_FORMATS.get(file.name, "bin")
        sd = read_weights(root)
        report["num_parameters"] = int(sum(t.numel() for k, t in sd.items()
                                           if k not in ("d2t", "t2d")))
        check_state_dict(cfg, sd)
        problems = compatibility_problems(cfg, target_cfg, aux_layers)
        if "embed_tokens.weight" not in sd and cfg.target_hidden_size != cfg.hidden_size:
            problems.append("drafter width differs from the target but ships no embed_tokens")
        if problems:
            raise DrafterLoadError("incompatible with target: " + "; ".join(problems))
        report["compatible"] = True
    except DrafterLoadError as exc:
        report["reason"] = str(exc)
        report["readable"] = exc.readable
    return report
