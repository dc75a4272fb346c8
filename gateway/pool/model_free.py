"""Model-free drafters (no weights: `ngram`, `suffix`, `grammar`) between the registry and the
engine.

The registry stores a model-free drafter's kind and parameters without knowing what they mean
(it cannot import the engine); this module is where they are checked against the engine's kinds
(`core.speculation.model_free.kinds`, pure Python, no torch) before a row is written, and built into
pool members when the pool sync loads a row. A row stores every parameter, defaults filled in
(`ModelFreeDrafter.params`), so what serves is what the registry shows, and two replicas with
different defaults never build different drafters from one row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from core.api import ModelFreeDrafter, make_model_free, model_free_kinds
from drafter_registry.models import EAGLE3_KIND as EAGLE3


class ModelFreeError(ValueError):
    """A model-free kind or parameter the engine refuses; `param` names the field at fault."""

    def __init__(self, message: str, *, param: str) -> None:
        super().__init__(message)
        self.param = param


def build(kind: str, params: Mapping[str, Any] | None) -> ModelFreeDrafter:
    """The pool member for `kind` with `params` over its defaults; raises `ModelFreeError` (a
    `ValueError`) naming the problem, with `param` "kind" or "params"."""
    if kind not in model_free_kinds():
        raise ModelFreeError(
            f"unknown drafter kind {kind!r}: expected {EAGLE3!r} or a model-free kind "
            f"({', '.join(repr(k) for k in model_free_kinds())})", param="kind")
    try:
        return make_model_free(kind, params)
    except ValueError as exc:
        raise ModelFreeError(str(exc), param="params") from None
    except TypeError as exc:  # a constructor refusing its arguments: a parameter problem too
        raise ModelFreeError(f"invalid {kind} params: {exc}", param="params") from None


def full_params(kind: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a registry row stores: every parameter of `kind`, defaults filled in; raises as
    `build`. The registry's seed import and the admin API and CLI call it before writing."""
    return dict(build(kind, params).params)


def model_free_key(kind: str, params: Mapping[str, Any] | None) -> str:
    """What identifies a model-free pool member across replicas (`gateway.pool.sync`): its kind
    and its parameters; new parameters under the same id replace the member."""
    return f"{kind}:{json.dumps(dict(params or {}), sort_keys=True, separators=(',', ':'))}"
