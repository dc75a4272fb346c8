"""Model-free drafters by kind name, built from the parameters a registry row stores."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from core.speculation.model_free.base import ModelFreeDrafter
from core.speculation.model_free.forced import GRAMMAR_DEFAULTS, GrammarDrafter
from core.speculation.model_free.ngram import NGRAM_DEFAULTS, NgramDrafter
from core.speculation.model_free.suffix import SUFFIX_DEFAULTS, SuffixDrafter

# kind -> (its defaults, its constructor); every parameter is an int.
KINDS: dict[str, tuple[dict[str, int], Callable[..., ModelFreeDrafter]]] = {
    "ngram": (NGRAM_DEFAULTS, NgramDrafter),
    "suffix": (SUFFIX_DEFAULTS, SuffixDrafter),
    "grammar": (GRAMMAR_DEFAULTS, GrammarDrafter),
}


def model_free_kinds() -> tuple[str, ...]:
    return tuple(KINDS)


def make_model_free(kind: str, params: Mapping[str, object] | None = None) -> ModelFreeDrafter:
    """The drafter of `kind` with `params` over its defaults. Raises ValueError naming the
    problem (an unknown kind or parameter, a value that is not an integer or out of range)."""
    if kind not in KINDS:
        raise ValueError(f"unknown drafter kind {kind!r}; model-free kinds: {list(KINDS)}")
    defaults, build = KINDS[kind]
    given = dict(params or {})
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise ValueError(f"unknown {kind} parameter(s) {unknown}; expected {sorted(defaults)}")
    values: dict[str, int] = dict(defaults)
    for name, value in given.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{kind} parameter {name!r} must be an integer, got {value!r}")
        values[name] = value
    return build(**values)
