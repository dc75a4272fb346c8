"""A pool's evidence at verified positions: each member group's (core/speculation/members.py:
the EAGLE drafters' from their catch-up top-k, the model-free members' from their recorded
guesses), scored against the same target side and interleaved in pool order."""

from __future__ import annotations

from dataclasses import dataclass

from core.decoding.request import RequestState
from core.selection.counterfactual import Evidence
from core.selection.feedback import RankTree
from core.speculation.members import MemberStates, TargetSide


@dataclass(frozen=True)
class PoolEvidence:
    """Every member's evidence at some positions, and the model-free trees rooted there."""

    evidence: Evidence
    trees: dict[int, list[RankTree]]


def evidence_ready(state: RequestState, states: MemberStates) -> bool:
    """Whether every member group's evidence at the positions being scored is known."""
    return all(g.ready(states) for g in state.members.groups)


def pool_evidence(state: RequestState, states: MemberStates, start: int, positions: int,
                  target: TargetSide) -> PoolEvidence:
    """Every member's evidence at start..start+positions-1 in pool order, and the trees the
    tree members would draft from each position."""
    parts = [g.evidence(states, start, positions, target) for g in state.members.groups]
    trees = {i: t for p in parts for i, t in p.trees.items()}
    return PoolEvidence(Evidence.interleave([(p.indices, p.evidence) for p in parts]), trees)
