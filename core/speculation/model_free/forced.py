"""Grammar fast-forward (`grammar`): the tokens a request's grammar forces next, drafted as a
chain. Under structured outputs and tool calls a JSON schema fixes much of the text (keys,
quotes, separators, braces): after `{"` the schema's first key and its `":` are the only text
the grammar allows, and llguidance names its canonical tokens (`compute_ff_tokens`). The target,
masked by the same grammar, nearly always takes them (it may still split the same bytes into
other tokens, which the grammar allows too: verification decides, as for any draft).

It is a pool member, asleep (no guess) whenever the grammar forces nothing (free text inside a
string, a number, or a request without a grammar), chosen by the learner among the members
awake with it like any other. Measured against grafting the forced chain onto every draft:
bench/results/grammar.md. Its guess at a position is the grammar's first forced token there, so
its counterfactual evaluation is exact, like prompt lookup's (base.py).

A lookup owns a fork of the request's grammar state and advances it as output tokens commit; a
guess after a draft path consumes the path, asks for the forced tokens and rolls back (a few
microseconds a call). Positions before the fork's (the prompt) have no guess.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.speculation.model_free.base import Forcing, Guess, Lookup, ModelFreeDrafter, OutputGrammar

# A chain of 8, as prompt lookup's: the deepest member sets the bound K + 1 that every arm's
# loss is scaled by (core/decoding/request.max_len), so a deeper default would compress all the
# losses of a pool whose other members draft at most 8 (measured: HedgeSpec's MAT on free text fell
# from 1.86 to 1.65 with a depth-16 member that never woke). A longer forced text takes two rounds.
GRAMMAR_DEFAULTS = {"max_depth": 8}


class GrammarDrafter(ModelFreeDrafter):
    kind = "grammar"

    def __init__(self, max_depth: int = GRAMMAR_DEFAULTS["max_depth"]) -> None:
        super().__init__(max_depth)

    def start(self, tokens: Sequence[int], grammar: OutputGrammar | None = None) -> ForcedLookup:
        if grammar is None:
            return ForcedLookup(len(tokens), None, 0)
        return ForcedLookup(len(tokens), grammar.matcher.fork(), grammar.at)

    @property
    def params(self) -> dict[str, int]:
        return {"max_depth": self.max_depth}


class ForcedLookup(Lookup):
    """The grammar's forced tokens after the indexed sequence (see the module docstring)."""

    def __init__(self, indexed: int, matcher: Forcing | None, at: int) -> None:
        self.indexed, self.matcher, self.at = indexed, matcher, at
        # path -> the tokens forced after it, until the next commit (the round's awake check,
        # its tree and its evidence ask for the same paths).
        self._forced: dict[tuple[int, ...], tuple[int, ...]] = {}

    def extend(self, tokens: Sequence[int]) -> None:
        output = tokens[max(0, self.at - self.indexed):]
        self.indexed += len(tokens)
        if self.matcher is not None and output:
            self.matcher.commit([int(t) for t in output])
            self._forced.clear()

    def guess(self, tail: Sequence[int] = ()) -> Guess:
        if self.matcher is None or self.indexed < self.at:
            return Guess()
        forced = self._after(tuple(int(t) for t in tail))
        return Guess((forced[0],), (0.0,)) if forced else Guess()

    def _after(self, path: tuple[int, ...]) -> tuple[int, ...]:
        """The forced tokens after the committed ones plus `path`, asked of the grammar for
        each path (not read off an earlier path's list: the canonical tokens of the rest of a
        forced text need not continue that list, and the evidence must see what the tree saw)."""
        forced = self._forced.get(path)
        if forced is None:
            assert self.matcher is not None
            forced = self._forced[path] = self.matcher.forced_after(path)
        return forced
