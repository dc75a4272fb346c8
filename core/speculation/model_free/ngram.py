"""Prompt lookup (`ngram`): the next token is the one that followed the most recent earlier
occurrence of the sequence's last n tokens, for the largest n in [min_n, max_n] that occurs.
Iterated, this proposes the text that followed a match as a chain, as vLLM's ngram proposer
and transformers' `prompt_lookup_num_tokens` do; unlike them the chain re-matches after every
token (core/speculation/model_free/base.py says why: the evaluation is then exact).

The index maps each n-gram to the position of the token that followed its latest occurrence,
so a guess costs max_n - min_n + 1 dict lookups and extending by a token as many inserts.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.speculation.model_free.base import Guess, Lookup, ModelFreeDrafter, OutputGrammar

NGRAM_DEFAULTS = {"min_n": 1, "max_n": 3, "max_depth": 8}


class NgramDrafter(ModelFreeDrafter):
    kind = "ngram"

    def __init__(self, min_n: int = 1, max_n: int = 3, max_depth: int = 8) -> None:
        super().__init__(max_depth)
        if not 1 <= min_n <= max_n:
            raise ValueError("ngram needs 1 <= min_n <= max_n")
        if max_n > 16:
            raise ValueError("ngram max_n must be <= 16")
        self.min_n, self.max_n = min_n, max_n

    def start(self, tokens: Sequence[int], grammar: OutputGrammar | None = None) -> NgramLookup:
        lookup = NgramLookup(self.min_n, self.max_n)
        lookup.extend(tokens)
        return lookup

    @property
    def params(self) -> dict[str, int]:
        return {"min_n": self.min_n, "max_n": self.max_n, "max_depth": self.max_depth}


class NgramLookup(Lookup):
    def __init__(self, min_n: int, max_n: int) -> None:
        self.min_n, self.max_n = min_n, max_n
        self.tokens: list[int] = []
        # n-gram -> position of the token that followed its latest occurrence
        self._next: dict[tuple[int, ...], int] = {}

    def extend(self, tokens: Sequence[int]) -> None:
        for tok in tokens:
            p = len(self.tokens)
            for n in range(self.min_n, min(self.max_n, p) + 1):
                self._next[tuple(self.tokens[p - n : p])] = p
            self.tokens.append(int(tok))

    def guess(self, tail: Sequence[int] = ()) -> Guess:
        seq_len = len(self.tokens) + len(tail)
        for n in range(min(self.max_n, seq_len - 1), self.min_n - 1, -1):
            key = tuple(self._at(i, tail) for i in range(seq_len - n, seq_len))
            nxt = self._in_tail(key, tail)
            if nxt is None and key in self._next:
                nxt = self.tokens[self._next[key]]
            if nxt is not None:
                return Guess((nxt,), (0.0,))
        return Guess()

    def _at(self, i: int, tail: Sequence[int]) -> int:
        base = len(self.tokens)
        return self.tokens[i] if i < base else int(tail[i - base])

    def _in_tail(self, key: tuple[int, ...], tail: Sequence[int]) -> int | None:
        """The token after the latest occurrence of `key` whose follower lies in the tail
        (those occurrences are more recent than any the index holds)."""
        base, n = len(self.tokens), len(key)
        for p in range(base + len(tail) - 1, base - 1, -1):  # p: the follower's position
            if p - n >= 0 and all(self._at(p - n + i, tail) == key[i] for i in range(n)):
                return self._at(p, tail)
        return None
