"""The model-free members of a pool as a member group (core/speculation/members.py): their
trees come from the request's lookups (trees.propose), their evidence from the guesses those
lookups recorded (lookups.py), and a member with no guess at the root is asleep."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from core.config import EngineConfig, TreeConfig
from core.selection.arm_costs import FREE
from core.selection.counterfactual import Evidence
from core.speculation.members import (
    DraftOrder,
    MemberEvidence,
    MemberGroup,
    MemberStart,
    MemberStates,
    TargetSide,
    VerifiedPairs,
)
from core.speculation.model_free.base import ModelFreeDrafter
from core.speculation.model_free.lookups import RequestLookups, guess_arrays
from core.speculation.model_free.trees import propose
from core.speculation.tree import DraftTree


class ModelFreeMembers(MemberGroup):
    """Model-free drafters by snapshot index."""

    cost_kind = FREE
    fed = False

    def __init__(self, drafters: dict[int, ModelFreeDrafter]) -> None:
        super().__init__(list(drafters))
        self.drafters = drafters

    def nodes(self, index: int, tree: TreeConfig) -> int:
        return self.drafters[index].total_tokens

    def depth(self, index: int, tree: TreeConfig) -> int:
        return self.drafters[index].max_depth

    def start(self, states: MemberStates, start: MemberStart) -> MemberStates:
        """The request's lookups over its tokens (RequestLookups.start), once; a sleeping
        pool's record nothing until they resume."""
        if states.lookups is not None or not self.drafters:
            return states
        lookups = RequestLookups.start(self.drafters, start.tokens, start.record_from,
                                       record=start.record and not start.paused,
                                       grammar=start.grammar)
        lookups.paused = start.paused
        return replace(states, lookups=lookups)

    def record(self, states: MemberStates, pairs: VerifiedPairs) -> None:
        """Index the committed tokens, recording the guesses at their positions; paused, the
        lookups index them when they resume (`resume`)."""
        lookups = states.lookups
        if lookups is not None and not lookups.paused:
            lookups.sync(pairs.committed)

    def pause(self, states: MemberStates) -> bool:
        if states.lookups is None:
            return False
        states.lookups.pause()
        return True

    def paused(self, states: MemberStates) -> bool:
        return states.lookups is not None and states.lookups.paused

    def resume(self, states: MemberStates, committed: Sequence[int]) -> None:
        """The tokens committed while paused are indexed, then guesses recorded again."""
        if states.lookups is not None:
            states.lookups.sync(committed)
            states.lookups.resume()

    def batch_key(self, order: DraftOrder) -> object:
        return id(order.states.lookups)  # a request's lookup drafts alone: no pass to share

    def draft(self, orders: Sequence[DraftOrder], config: EngineConfig) -> list[DraftTree]:
        """Each member's tree from the root (its lookup holds every committed token), no deeper
        than the tokens the request may still commit: that keeps a chain longer than the
        engine's tree inside the context SpecEngine.max_context leaves room for, and drafts
        nothing that could not be committed."""
        return [self._tree(o) for o in orders]

    def _tree(self, order: DraftOrder) -> DraftTree:
        lookups = order.states.lookups
        assert lookups is not None
        drafter = order.snapshot.free[order.snapshot.ids[order.chosen]]  # the order's pool
        return propose(drafter, lookups.lookups[order.chosen], order.root, drafter.top_k,
                       drafter.total_tokens, order.allowed, max_depth=order.remaining)

    def awake(self, states: MemberStates) -> dict[int, bool] | None:
        """A member is awake where its lookup has a guess at the root."""
        if states.lookups is None or not states.lookups.lookups:
            return None
        return states.lookups.awake()

    def ready(self, states: MemberStates) -> bool:
        return True  # the lookups recorded their guesses as the tokens were committed

    def evidence(self, states: MemberStates, start: int, positions: int,
                 target: TargetSide) -> MemberEvidence:
        """The guesses recorded at the positions (those before `start` dropped unscored: the
        prompt positions no window reads)."""
        lookups = states.lookups
        if lookups is None:  # never started (the request drafts nothing): no guess recorded
            return MemberEvidence(self.indices, Evidence.none(len(self.indices), positions), {})
        lookups.skip(start)
        taken = lookups.take(start + positions)
        assert taken.first == start and all(len(g) == positions
                                            for g in taken.guesses.values()), \
            (taken.first, start, positions)
        k = max(d.top_k for d in lookups.drafters.values())
        ids, logp = guess_arrays(list(taken.guesses.values()), k)
        return MemberEvidence(list(taken.guesses), target.evidence(ids, logp), taken.trees)
