"""The interface of a drafter with no weights.

A model-free drafter is a *one-step predictor*: given the tokens of a sequence, it names
candidates for the next token, best first, with log-scores (`Guess`). Its draft tree is that
predictor iterated along each branch (trees.py, `propose`): level j of the tree under a path
c_1..c_{j-1} is the guess after prefix + c_1..c_{j-1}, the `top_k` best nodes of a level
expanded and the `total_tokens` best kept. This is what makes the counterfactual evaluation
exact: when the verifier accepts c_1..c_{j-1}, the sequence is prefix + c_1..c_{j-1}, so the
drafter's level-j candidates are its one-step guess at the verified position, which the
evaluation computes from the verified tokens with no target call (as the EAGLE catch-up does
for a neural drafter). A request's lookups record the guess at every verified position
(lookups.py); a tree member (top_k > 1) records the whole tree it would draft from there too
(trees.rank_tree), which the evaluation walks along the realised tokens
(core/selection/feedback.py) instead of modelling it from the guesses.

A guess may be empty: the drafter has nothing to propose (no earlier match). A drafter with no
guess at a round's root is *asleep* for that round (core/speculation/members.py).

One `ModelFreeDrafter` is a pool member shared by every request (it holds its parameters and,
for `suffix`, the cache of recent responses); each request gets its own `Lookup` (the index
over that request's tokens). Neither touches torch: the work is a few dict lookups per token.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol


@dataclass(frozen=True)
class Guess:
    """Candidates for the next token, best first: target-vocabulary ids and log-scores
    (log of the share of the evidence each has; 0.0 for a single certain candidate)."""

    ids: tuple[int, ...] = ()
    logp: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.logp):
            raise ValueError("a guess needs one log-score per candidate")

    def __bool__(self) -> bool:
        return bool(self.ids)


class Lookup(ABC):
    """One request's index over its own tokens (prompt, then committed output)."""

    @abstractmethod
    def extend(self, tokens: Sequence[int]) -> None:
        """Append committed tokens to the indexed sequence."""

    @abstractmethod
    def guess(self, tail: Sequence[int] = ()) -> Guess:
        """Candidates for the token after the indexed sequence followed by `tail` (a
        hypothetical continuation: the draft path so far). Must not change the index."""


class Forcing(Protocol):
    """A grammar's state over a request's output (core/speculation/grammar.TokenMatcher is one):
    what a `grammar` drafter reads. Kept a protocol so the drafters stay free of torch."""

    def fork(self) -> Forcing:
        """An independent copy of the state."""
        ...

    def commit(self, tokens: Sequence[int]) -> None:
        """Advance over tokens the output committed."""
        ...

    def forced_after(self, path: Sequence[int]) -> tuple[int, ...]:
        """The tokens the grammar forces after the committed ones plus `path`."""
        ...


@dataclass(frozen=True)
class OutputGrammar:
    """The grammar a request's output follows, standing after the sequence's first `at`
    tokens (the prompt and whatever output it already consumed)."""

    matcher: Forcing
    at: int


# The deepest tree a model-free drafter may draft (a chain of 16 costs about what the CPU's
# 12-node EAGLE tree costs to verify; deeper ones rarely pay anywhere).
MAX_DEPTH = 16


class ModelFreeDrafter(ABC):
    """A pool member with no weights; see the module docstring."""

    kind: ClassVar[str]

    def __init__(self, max_depth: int, top_k: int = 1, total_tokens: int | None = None) -> None:
        """Its trees: at most `max_depth` levels, the `top_k` best nodes of a level expanded
        with up to `top_k` children each, `total_tokens` nodes kept (default: a chain's
        max_depth). A chain drafter (top_k 1) needs no more."""
        if not 1 <= max_depth <= MAX_DEPTH or top_k < 1:
            raise ValueError(f"max_depth must lie in [1, {MAX_DEPTH}] and top_k be >= 1")
        self.max_depth, self.top_k = max_depth, top_k
        self.total_tokens = total_tokens if total_tokens is not None else max_depth
        if self.total_tokens < 1:
            raise ValueError("total_tokens must be >= 1")

    @abstractmethod
    def start(self, tokens: Sequence[int], grammar: OutputGrammar | None = None) -> Lookup:
        """A request's lookup state, already indexing `tokens` (its prompt). `grammar`: the
        grammar its output follows, for a kind that drafts from it (others ignore it)."""

    def observe(self, tokens: Sequence[int], prompt_len: int) -> None:
        """A request finished with these tokens (prompt first): cross-request caches learn
        from it. No-op by default."""
        return None

    @property
    @abstractmethod
    def params(self) -> dict[str, int]:
        """The drafter's parameters, as a registry row stores them."""
