"""The full check of an EAGLE-3 drafter against a target, tensors loaded: what `hedgespec drafter
inspect` prints and what the gateway runs after the registry's torch-free checks. Its rules are
the format's (core/eagle3_format/), which the engine's pool admission applies too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.eagle3 import (
    DrafterLoadError,
    check_state_dict,
    read_config,
    read_weights,
    resolve_dir,
    weight_file,
)
from core.eagle3_format.aux_layers import AuxLayers
from core.eagle3_format.errors import DrafterConfigError
from core.eagle3_format.target_fit import check_fits_target
from core.eagle3_format.weights import CONFIG_FILE, WEIGHT_FORMATS


def read_target_config(target_dir: str | Path) -> dict[str, Any]:
    path = Path(target_dir) / CONFIG_FILE
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DrafterLoadError(f"cannot read target config {path}: {exc}", readable=False) from exc
    if not isinstance(raw, dict) or "hidden_size" not in raw or "vocab_size" not in raw:
        raise DrafterLoadError(f"{path} is not a causal LM config", readable=False)
    return raw


def inspect_drafter(
    drafter_dir: str | Path,
    target_dir: str | Path,
    subfolder: str | None = None,
    aux_layers: AuxLayers | None = None,
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
        report["format"] = WEIGHT_FORMATS[file.name]
        sd = read_weights(root)
        report["num_parameters"] = int(sum(t.numel() for k, t in sd.items()
                                           if k not in ("d2t", "t2d")))
        check_state_dict(cfg, sd)
        try:
            check_fits_target(cfg, target_cfg, aux_layers)
        except DrafterConfigError as exc:
            raise DrafterLoadError(str(exc)) from exc
        report["compatible"] = True
    except DrafterLoadError as exc:
        report["reason"] = str(exc)
        report["readable"] = exc.readable
    return report
