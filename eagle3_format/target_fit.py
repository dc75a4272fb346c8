"""Whether a drafter fits a target: sizes, and the feature layers it was trained on.

The target is described by its config.json dict (or the same keys from a loaded model) and,
when known, the aux layers it is served with; the registry does not know those before a model
is loaded, the engine does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eagle3_format.aux_layers import AuxLayers, default_aux_layers
from eagle3_format.config import Eagle3Config, positive_int
from eagle3_format.errors import DrafterConfigError

TARGET_CONFIG = "the target's config.json"


def compatibility_problems(cfg: Eagle3Config, target: Mapping[str, Any],
                           aux_layers: AuxLayers | None = None) -> list[str]:
    """Every mismatch between a drafter and a target (`hidden_size`, `vocab_size`,
    `num_hidden_layers`); `aux_layers` are the layers the target is served with, if known."""
    problems = []
    t_hidden = positive_int(target, "hidden_size", where=TARGET_CONFIG)
    t_vocab = positive_int(target, "vocab_size", where=TARGET_CONFIG)
    if cfg.target_hidden_size != t_hidden:
        problems.append(f"hidden size {cfg.target_hidden_size} != target hidden size {t_hidden}")
    if cfg.vocab_size != t_vocab:
        problems.append(f"vocab size {cfg.vocab_size} != target vocab size {t_vocab}")
    layers = int(target.get("num_hidden_layers") or 0)
    # A config that names no layers was trained on EAGLE-3's default, which every engine serves it
    # with; a pool served on other layers would feed it features it has never seen.
    named = cfg.aux_layers is not None
    trained = tuple(cfg.aux_layers) if cfg.aux_layers is not None else default_aux_layers(layers)
    what = (f"aux layers {list(trained)}" if named
            else f"EAGLE-3's default aux layers {list(trained)} (config names none)")
    if any(not 0 <= i < max(layers, 1) for i in trained):
        problems.append(f"{what} outside the target's {layers} layers")
    elif aux_layers is not None and trained != tuple(aux_layers):
        problems.append(f"{what} != served aux layers {list(aux_layers)}")
    return problems


def check_fits_target(cfg: Eagle3Config, target: Mapping[str, Any],
                      aux_layers: AuxLayers | None = None) -> None:
    """Raise one error naming every mismatch (compatibility_problems)."""
    problems = compatibility_problems(cfg, target, aux_layers)
    if problems:
        raise DrafterConfigError("incompatible with target: " + "; ".join(problems))
