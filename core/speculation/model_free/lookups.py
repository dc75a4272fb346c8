"""One request's model-free lookups: each member's `Lookup` kept current with the request's
tokens, and the guesses they record at verified positions (their side of the counterfactual
evidence).

Evidence. At every verified position m the request holds, for each model-free member, its
one-step guess after tokens[0..m] (recorded as each token is committed, before the next one
is indexed), and for a tree member (top_k > 1) the tree it would draft from there
(trees.rank_tree). Scored against the target's p̃_m and the realised token exactly as the
EAGLE drafters' catch-up top-k are (core/selection/counterfactual.py), these give every window
the same γ, ÂL and loss as a neural drafter's, with no target call: exact for a chain
(base.py), and the EAGLE drafters' tree model for a tree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from core.selection.feedback import RankTree
from core.speculation.model_free.base import Guess, Lookup, ModelFreeDrafter, OutputGrammar
from core.speculation.model_free.trees import rank_tree


@dataclass(frozen=True)
class Recorded:
    """The members' guesses (and trees, for tree members) at positions first, first+1, ..."""

    first: int
    guesses: dict[int, list[Guess]]
    trees: dict[int, list[RankTree]]


@dataclass
class RequestLookups:
    """Lookups of one request's model-free members (snapshot index -> drafter)."""

    drafters: dict[int, ModelFreeDrafter]
    lookups: dict[int, Lookup] = field(default_factory=dict)
    indexed: int = 0  # tokens every lookup holds
    # Guesses at positions first..first+len-1, one list per member, not yet scored.
    first: int = 0
    guesses: dict[int, list[Guess]] = field(default_factory=dict)
    record: bool = True  # False: no evaluation reads guesses (lazy policies)
    # Members that draft trees (top_k > 1): the tree each would draft from every recorded
    # position, judged exactly by the evaluation instead of through the tree model.
    trees: dict[int, list[RankTree]] = field(default_factory=dict)
    # The request's pool sleeps: committed tokens wait for `resume` to be indexed
    # (ModelFreeMembers.record).
    paused: bool = False

    @staticmethod
    def start(drafters: dict[int, ModelFreeDrafter], tokens: Sequence[int],
              record_from: int, record: bool = True,
              grammar: OutputGrammar | None = None) -> RequestLookups:
        """Lookups over `tokens`, with the guesses at positions record_from.. recorded (the
        prompt windows' positions, core/decoding/prompt_feedback.py) when `record`; `grammar`: the
        one the request's output follows, if any."""
        cut = max(1, min(record_from + 1, len(tokens)))
        out = RequestLookups(drafters, {i: d.start(tokens[:cut], grammar)
                                        for i, d in drafters.items()},
                             cut, cut - 1, {i: [] for i in drafters}, record,
                             {i: [] for i, d in drafters.items() if d.top_k > 1})
        out.sync(tokens)
        return out

    def sync(self, tokens: Sequence[int]) -> None:
        """Index the tokens committed since the last sync, recording each member's guess at
        every position before the token after it is indexed."""
        for tok in tokens[self.indexed :]:
            for i, lookup in self.lookups.items():
                if self.record:
                    self.guesses[i].append(lookup.guess())
                    if i in self.trees:
                        self.trees[i].append(rank_tree(self.drafters[i], lookup))
                lookup.extend([tok])
            self.indexed += 1
        if not self.record:
            self.first = self.indexed - 1

    def pause(self) -> None:
        """Stop recording guesses (the request's pool sleeps: what is committed meanwhile is
        indexed when its probe wakes the pool, ModelFreeMembers.resume)."""
        self.record, self.paused = False, True
        self.guesses = {i: [] for i in self.guesses}
        self.trees = {i: [] for i in self.trees}
        self.first = self.indexed - 1

    def resume(self) -> None:
        """Record again from the root on (the last indexed token's position)."""
        self.record, self.paused = True, False
        self.first = self.indexed - 1

    def awake(self) -> dict[int, bool]:
        """Whether each member has a guess at the root (the last indexed token)."""
        return {i: bool(lookup.guess()) for i, lookup in self.lookups.items()}

    def take(self, upto: int) -> Recorded:
        """What was recorded at positions first..upto-1 (dropped here)."""
        n = max(0, upto - self.first)
        taken = Recorded(self.first, {i: g[:n] for i, g in self.guesses.items()},
                         {i: t[:n] for i, t in self.trees.items()})
        self.guesses = {i: g[n:] for i, g in self.guesses.items()}
        self.trees = {i: t[n:] for i, t in self.trees.items()}
        self.first += n
        return taken

    def skip(self, upto: int) -> None:
        """Drop the guesses before position `upto` unscored."""
        self.take(upto)

    def finish(self, tokens: Sequence[int], prompt_len: int) -> None:
        """The request is done: members with a cross-request cache learn its tokens."""
        for d in self.drafters.values():
            d.observe(tokens, prompt_len)


def guess_arrays(guesses: Sequence[Sequence[Guess]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Guesses [n members][M positions] as top-k ids [n, M, k] (-1: none) and log-scores
    (-inf: none)."""
    n, m = len(guesses), len(guesses[0]) if guesses else 0
    ids = np.full((n, m, k), -1, dtype=np.int64)
    logp = np.full((n, m, k), -np.inf)
    for a, row in enumerate(guesses):
        for b, g in enumerate(row):
            w = min(k, len(g.ids))
            ids[a, b, :w] = g.ids[:w]
            logp[a, b, :w] = g.logp[:w]
    return ids, logp
