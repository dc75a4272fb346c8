"""One request's model-free drafters: their lookups kept current with the request's tokens,
their draft trees, and their side of the counterfactual evidence.

Evidence. At every verified position m the request holds, for each model-free member, its
one-step guess after tokens[0..m] (recorded as each token is committed, before the next one
is indexed). Scored against the target's p̃_m and the realised token exactly as the EAGLE
drafters' catch-up top-k are (core/selection/counterfactual.py), these give every window the same γ,
ÂL and loss as a neural drafter's, with no target call: exact for a chain (base.py), and the
EAGLE drafters' tree model for a tree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from core.selection.counterfactual import Evidence, evidence_greedy, evidence_sampling
from core.selection.feedback import RankTree
from core.speculation.model_free.base import Guess, Lookup, ModelFreeDrafter, OutputGrammar
from core.speculation.tree import DraftTree, build_tree, select_candidates

# Target-vocabulary masks [len(paths), V] of what a grammar allows after each path of draft
# tokens (core/speculation/grammar.TokenMatcher.masks_after).
AllowedFn = Callable[[Sequence[Sequence[int]]], Tensor]


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
        """Stop recording guesses (the request's pool sleeps: it indexes what was committed
        meanwhile when its probe wakes the pool, RequestState.wake)."""
        self.record = False
        self.guesses = {i: [] for i in self.guesses}
        self.trees = {i: [] for i in self.trees}
        self.first = self.indexed - 1

    def resume(self) -> None:
        """Record again from the root on (the last indexed token's position)."""
        self.record = True
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


def model_free_evidence(guesses: dict[int, list[Guess]], k: int, target_argmax: np.ndarray | None,
                        target_probs: np.ndarray | None, realised: np.ndarray) -> Evidence:
    """The members' evidence at the guesses' positions: greedy when target_argmax is given,
    else against p̃ (target_probs [M, V]) and the realised tokens."""
    ids, logp = guess_arrays(list(guesses.values()), k)
    if target_argmax is not None:
        return evidence_greedy(target_argmax, ids, logp)
    assert target_probs is not None
    return evidence_sampling(target_probs, ids, logp, realised)


@dataclass
class _Grown:
    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)  # flat index of the parent, -1 the root
    scores: list[float] = field(default_factory=list)  # cumulative log-score
    ranks: list[tuple[int, ...]] = field(default_factory=list)  # rank path from the root
    selected: list[int] = field(default_factory=list)  # flat indices the tree keeps


def _grow(drafter: ModelFreeDrafter, lookup: Lookup, top_k: int, total_tokens: int,
          allowed: AllowedFn | None, max_depth: int | None) -> _Grown:
    """The candidates of the member's tree and the ones it keeps (see `propose`)."""
    g = _Grown()
    paths: list[tuple[int, ...]] = []
    frontier: list[int] = [-1]  # flat indices of the nodes to expand; -1 = the root
    depth = drafter.max_depth if max_depth is None else min(max_depth, drafter.max_depth)
    for _ in range(depth):
        grown: list[int] = []
        for node in frontier:
            path = paths[node] if node >= 0 else ()
            base = g.scores[node] if node >= 0 else 0.0
            ranks = g.ranks[node] if node >= 0 else ()
            for rank, tok, lp in _allowed(lookup.guess(path), path, top_k, allowed):
                g.tokens.append(tok)
                g.parents.append(node)
                g.scores.append(base + lp)
                g.ranks.append((*ranks, rank))
                paths.append((*path, tok))
                grown.append(len(g.tokens) - 1)
        frontier = sorted(grown, key=lambda j: -g.scores[j])[:top_k]
        if not frontier:
            break
    if g.tokens:
        g.selected = select_candidates(torch.tensor(g.scores, dtype=torch.float64),
                                       torch.tensor(g.parents, dtype=torch.long), total_tokens)
    return g


def propose(drafter: ModelFreeDrafter, lookup: Lookup, root: int, top_k: int,
            total_tokens: int, allowed: AllowedFn | None = None,
            max_depth: int | None = None) -> DraftTree:
    """The member's draft tree from the root: its guess iterated along each branch (base.py),
    grown as an EAGLE tree is (core/speculation/drafting.py): the top_k best nodes of a level by
    cumulative log-score get children, and the tree keeps the total_tokens best nodes.
    With `allowed` (a grammar), candidates it forbids are dropped; `max_depth` caps the
    drafter's own depth."""
    g = _grow(drafter, lookup, top_k, total_tokens, allowed, max_depth)
    return build_tree(root, torch.tensor(g.tokens, dtype=torch.long),
                      torch.tensor(g.parents, dtype=torch.long), g.selected)


def rank_tree(drafter: ModelFreeDrafter, lookup: Lookup) -> RankTree:
    """The tree `propose` would draft from the lookup's last token, as a RankTree: what the
    evaluation needs to judge it exactly (core/selection/feedback.py), with no tie or cut
    modelled."""
    g = _grow(drafter, lookup, drafter.top_k, drafter.total_tokens, None, None)
    kids: dict[tuple[int, ...], set[int]] = {}
    for flat in g.selected:
        kids.setdefault(g.ranks[flat][:-1], set()).add(g.ranks[flat][-1])
    return {path: frozenset(r) for path, r in kids.items()}


def _allowed(guess: Guess, path: tuple[int, ...], top_k: int,
             allowed: AllowedFn | None) -> list[tuple[int, int, float]]:
    """(rank, token, log-score) of the guess's first top_k candidates a grammar allows."""
    triples = [(r, t, lp) for r, (t, lp) in enumerate(zip(guess.ids, guess.logp, strict=True))]
    triples = triples[:top_k]
    if allowed is None or not triples:
        return triples
    mask = allowed([list(path)])[0]
    return [(r, t, lp) for r, t, lp in triples if bool(mask[t])]
