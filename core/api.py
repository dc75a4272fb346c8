"""The face of `core`: everything a front end (the gateway) may use, and nothing else.

The gateway imports `core` only through this module (tests/test_architecture.py), so core's
rooms can move and change behind it. What it holds:

- the engine: `SpecEngine` (its type), built by `engine_from_dirs` or `engine_from_pool_file`,
  and what it hands out: `RoundOutput`, `ServedFacts` (what a front end reports of it), the
  statistics (`RoundStats`, `StatsSnapshot`,
  `TokenLogprob`) and its typed refusals (`ContextLengthError`, `PolicyError`,
  `RequestError`, `DrafterLoadError`);
- the configuration (`EngineConfig`, `SamplingParams`, `GrammarSpec`, ... and the served
  defaults) and the model's sampling defaults check;
- the pool: the pool file (`load_pool_file`), its provisioned target (`ProvisionError`), the
  model-free drafter kinds, a drafter checkpoint's inspection against a target, the loaded
  EAGLE-3 drafter's type (`Eagle3Drafter`);
- text: a structured-output grammar's check (`grammar_text`) and the JSON layout
  (`JSON_OPTIONS`);
- the dtype `auto` means on a device.

Importing it loads no torch (tests/test_architecture.py checks): the gateway's modules that
only read data or format text stay light, and `hedgespec --help` stays fast. What needs torch
is imported when it is called (`engine_from_*`, `inspect_drafter`, `auto_dtype`);
`SpecEngine`, `Eagle3Drafter` and `DrafterInspection` are named here for annotations only
(`if TYPE_CHECKING:` in the importer).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from core.config import (
    CPU_EVAL_EVERY,
    LEARNER_NAMES,
    PROMPT_WINDOWS,
    ROUTER_PRIOR,
    EngineConfig,
    GrammarSpec,
    Penalties,
    SamplingParams,
    SelectorConfig,
    served_selector,
    served_tree,
)
from core.errors import ContextLengthError, DrafterLoadError, PolicyError, RequestError
from core.model.sampling_defaults import checked_sampling_defaults
from core.pool_file import PoolFile, PoolFileError, load_pool_file
from core.provision import ProvisionError
from core.round_output import RoundOutput
from core.served_facts import ServedFacts
from core.speculation.grammar_text import JSON_OPTIONS, grammar_text
from core.speculation.model_free.base import ModelFreeDrafter
from core.speculation.model_free.kinds import make_model_free, model_free_kinds
from core.stats import RoundStats, StatsSnapshot, TokenLogprob

if TYPE_CHECKING:  # annotations only: each of these modules imports torch
    from core.engine import SpecEngine as SpecEngine
    from core.model.drafter_check import DrafterInspection as DrafterInspection
    from core.model.eagle3 import Eagle3Drafter as Eagle3Drafter
    from eagle3_format.aux_layers import AuxLayers


def engine_from_dirs(target_dir: Path, drafters: list[tuple[str, Path]], config: EngineConfig,
                     model_name: str | None = None) -> SpecEngine:
    """The engine serving the target in `target_dir` with the EAGLE-3 drafters `(id, dir)`."""
    from core.engine import SpecEngine

    return SpecEngine.from_dirs(target_dir, drafters, config, model_name)


def engine_from_pool_file(pool_json: Path, config: EngineConfig,
                          model_name: str | None = None) -> SpecEngine:
    """The engine serving a pool file (core/pool_file.py); raises `PoolFileError` for a bad
    file before any weights load."""
    from core.engine import SpecEngine

    return SpecEngine.from_pool_file(pool_json, config, model_name)


def inspect_drafter(drafter_dir: str | Path, target_dir: str | Path,
                    subfolder: str | None = None,
                    aux_layers: AuxLayers | None = None) -> DrafterInspection:
    """A drafter checkpoint checked against a target (core/model/drafter_check.py)."""
    from core.model.drafter_check import inspect_drafter as inspect

    return inspect(drafter_dir, target_dir, subfolder, aux_layers)


def auto_dtype(device: str = "cpu") -> str:
    """The dtype name `auto` resolves to on `device` (core/model/precision.py)."""
    from core.model.precision import auto_dtype as choose

    return choose(device)


__all__ = [
    "CPU_EVAL_EVERY",
    "JSON_OPTIONS",
    "LEARNER_NAMES",
    "PROMPT_WINDOWS",
    "ROUTER_PRIOR",
    "ContextLengthError",
    "DrafterLoadError",
    "EngineConfig",
    "GrammarSpec",
    "ModelFreeDrafter",
    "Penalties",
    "PolicyError",
    "PoolFile",
    "PoolFileError",
    "ProvisionError",
    "RequestError",
    "RoundOutput",
    "RoundStats",
    "SamplingParams",
    "SelectorConfig",
    "ServedFacts",
    "StatsSnapshot",
    "TokenLogprob",
    "auto_dtype",
    "checked_sampling_defaults",
    "engine_from_dirs",
    "engine_from_pool_file",
    "grammar_text",
    "inspect_drafter",
    "load_pool_file",
    "make_model_free",
    "model_free_kinds",
    "served_selector",
    "served_tree",
]
