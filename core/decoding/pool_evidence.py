"""A pool's evidence at verified positions: the EAGLE drafters' (from their catch-up top-k)
and the model-free members' (from their recorded guesses, core/speculation/model_free/evidence.py),
scored against the same target side and interleaved in pool order."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from core.decoding.request import RequestState
from core.selection.counterfactual import Evidence, evidence_greedy, evidence_sampling
from core.selection.feedback import RankTree
from core.speculation.model_free.evidence import model_free_evidence


@dataclass(frozen=True)
class PoolEvidence:
    """Every member's evidence at some positions, and the model-free trees rooted there."""

    evidence: Evidence
    trees: dict[int, list[RankTree]]


@dataclass(frozen=True)
class TargetSide:
    """The target's side of M positions: its argmax (greedy), or p̃ [M, V] and the realised
    next tokens [M] (sampling)."""

    argmax: npt.NDArray[np.int64] | None
    probs: npt.NDArray[np.float64] | None
    realised: npt.NDArray[np.int64] | None

    def evidence(self, ids: npt.NDArray[np.int64], logp: npt.NDArray[np.float64]) -> Evidence:
        if self.argmax is not None:
            return evidence_greedy(self.argmax, ids, logp)
        assert self.probs is not None and self.realised is not None
        return evidence_sampling(self.probs, ids, logp, self.realised)


def with_model_free(state: RequestState, parts: list[tuple[list[int], Evidence]], start: int,
                    positions: int, target: TargetSide) -> PoolEvidence:
    """`parts` (the EAGLE drafters' indices and evidence at start..start+positions-1) with the
    model-free members' evidence at the same positions, in pool order, and the trees the
    model-free tree members would draft from each position."""
    lookups = state.lookups
    trees: dict[int, list[RankTree]] = {}
    if lookups is not None and lookups.lookups:
        lookups.skip(start)  # guesses no window reads (prompt positions left unscored)
        taken = lookups.take(start + positions)
        assert taken.first == start and all(len(g) == positions
                                            for g in taken.guesses.values()), \
            (taken.first, start, positions)
        k = max([e.logp.shape[2] for _, e in parts] + [d.top_k for d in lookups.drafters.values()])
        free = model_free_evidence(taken.guesses, k, target.argmax, target.probs,
                                   target.realised if target.realised is not None
                                   else np.zeros(positions, dtype=np.int64))
        parts = [*parts, (list(taken.guesses), free)]
        trees = taken.trees
    return PoolEvidence(Evidence.interleave(parts), trees)
