"""The full check of an EAGLE-3 drafter against a target, tensors loaded: what `hedgespec drafter
inspect` prints and what the gateway runs after the registry's torch-free checks. Its rules are
the format's (eagle3_format/), which the engine's pool admission applies too."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.model.eagle3 import (
    DrafterLoadError,
    check_state_dict,
    read_config,
    read_weights,
    resolve_dir,
    weight_file,
)
from eagle3_format.aux_layers import AuxLayers
from eagle3_format.errors import DrafterConfigError
from eagle3_format.target_fit import check_fits_target
from eagle3_format.weights import CONFIG_FILE, WEIGHT_FORMATS


def read_target_config(target_dir: str | Path) -> dict[str, Any]:
    path = Path(target_dir) / CONFIG_FILE
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DrafterLoadError(f"cannot read target config {path}: {exc}", readable=False) from exc
    if not isinstance(raw, dict) or "hidden_size" not in raw or "vocab_size" not in raw:
        raise DrafterLoadError(f"{path} is not a causal LM config", readable=False)
    return raw


@dataclass(frozen=True)
class DrafterInspection:
    """What `inspect_drafter` found. The facts are None where the check stopped before reading
    them; `to_json()` is what `hedgespec drafter inspect` prints and the registry stores."""

    compatible: bool
    reason: str | None  # why not compatible
    readable: bool = True  # False: the files could not be read (CLI exit 2)
    architecture: str | None = None
    hidden_size: int | None = None
    draft_vocab_size: int | None = None
    target_vocab_size: int | None = None
    num_parameters: int | None = None
    format: str | None = None  # a `WEIGHT_FORMATS` value

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def inspect_drafter(
    drafter_dir: str | Path,
    target_dir: str | Path,
    subfolder: str | None = None,
    aux_layers: AuxLayers | None = None,
) -> DrafterInspection:
    """Never raises."""
    # The facts read so far, kept when a later step fails (the report names what it saw).
    found = DrafterInspection(compatible=False, reason=None)
    try:
        root = resolve_dir(drafter_dir, subfolder)
        target_cfg = read_target_config(target_dir)
        found = dataclasses.replace(found, target_vocab_size=int(target_cfg["vocab_size"]))
        cfg = read_config(root)
        found = dataclasses.replace(
            found,
            architecture=(cfg.architectures or ["unknown"])[0],
            hidden_size=cfg.hidden_size,
            draft_vocab_size=cfg.draft_vocab_size,
        )
        found = dataclasses.replace(found, format=WEIGHT_FORMATS[weight_file(root).name])
        sd = read_weights(root)
        found = dataclasses.replace(found, num_parameters=int(
            sum(t.numel() for k, t in sd.items() if k not in ("d2t", "t2d"))))
        check_state_dict(cfg, sd)
        try:
            check_fits_target(cfg, target_cfg, aux_layers)
        except DrafterConfigError as exc:
            raise DrafterLoadError(str(exc)) from exc
    except DrafterLoadError as exc:
        return dataclasses.replace(found, reason=str(exc), readable=exc.readable)
    return dataclasses.replace(found, compatible=True)
