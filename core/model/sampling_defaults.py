"""Sampling defaults a model ships: what a request that leaves `temperature`, `top_p` or `top_k`
out is sampled with (vLLM applies a model's `generation_config.json` the same way).

A Hugging Face directory's `generation_config.json` carries them for many instruct models
(Llama 3.1: temperature 0.6, top_p 0.9); a pool file may state them too (`"generation_config"`
in pool.json), e.g. the values a model card recommends when the checkpoint has none.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SAMPLING_KEYS = ("temperature", "top_p", "top_k")
log = logging.getLogger(__name__)


def checked_sampling_defaults(raw: Mapping[str, Any], source: str, *,
                              strict: bool = True) -> dict[str, float]:
    """The sampling keys of `raw`, checked against the ranges a request may ask for (those of
    the OpenAI API, and vLLM's `top_k`). `strict` (a pool file, an operator's override): any
    other key or a bad value raises ValueError naming `source`. Not strict (a checkpoint's
    generation_config.json, which holds token ids and more): other keys are ignored, and a bad
    value is logged and left out, so an odd checkpoint file never stops a model from serving."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"{source}: expected an object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(SAMPLING_KEYS))
    if strict and unknown:
        raise ValueError(f"{source}: unknown sampling keys {unknown} (known: {SAMPLING_KEYS})")
    out: dict[str, float] = {}
    for key in SAMPLING_KEYS:
        value = raw.get(key)
        if value is None:
            continue
        problem = _problem(key, value)
        if problem is None:
            out[key] = float(value)
        elif strict:
            raise ValueError(f"{source}: {problem}")
        else:
            log.warning("%s: %s; ignored", source, problem)
    return out


def _problem(key: str, value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return f"{key} must be a number, got {value!r}"
    if not _in_range(key, float(value)):
        return f"{key}={value} is out of range ({_RANGES[key]})"
    return None


_RANGES = {"temperature": "0 to 2", "top_p": "above 0, at most 1", "top_k": "a whole number >= 0"}


def _in_range(key: str, value: float) -> bool:
    if key == "temperature":
        return 0.0 <= value <= 2.0
    if key == "top_p":
        return 0.0 < value <= 1.0
    return value >= 0 and value == int(value)


def read_generation_config(model_dir: Path) -> dict[str, float]:
    """The sampling defaults in `model_dir/generation_config.json` (none when it has none)."""
    path = Path(model_dir) / "generation_config.json"
    if not path.is_file():
        return {}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: unreadable ({exc})") from exc
    return checked_sampling_defaults(raw, str(path), strict=False)
