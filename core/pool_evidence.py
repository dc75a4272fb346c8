"""A pool's evidence at verified positions: the EAGLE drafters' (from their catch-up top-k)
and the model-free members' (from their recorded guesses, core/model_free/evidence.py),
scored against the same target side and interleaved in pool order."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from core.counterfactual import Evidence, evidence_greedy, evidence_sampling
from core.model_free.evidence import model_free_evidence
from core.request import RequestState


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
                    positions: int, target: TargetSide) -> Evidence:
    """`parts` (the EAGLE drafters' indices and evidence at start..start+positions-1) with the
    model-free members' evidence at the same positions, in pool order."""
    lookups = state.lookups
    if lookups is not None and lookups.lookups:
        lookups.skip(start)  # guesses no window reads (prompt positions left unscored)
        first, guesses = lookups.take(start + positions)
        assert first == start and all(len(g) == positions for g in guesses.values()), \
            (first, start, positions, [len(g) for g in guesses.values()])
        k = max([e.logp.shape[2] for _, e in parts] + [d.top_k for d in lookups.drafters.values()])
        free = model_free_evidence(guesses, k, target.argmax, target.probs,
                                   target.realised if target.realised is not None
                                   else np.zeros(positions, dtype=np.int64))
        parts = [*parts, (list(guesses), free)]
    return Evidence.interleave(parts)
