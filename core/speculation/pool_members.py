"""A pool snapshot's members grouped by kind (core/speculation/members.py): what a request's
learner, feedback queue and rounds read of each member (its cost kind, tree size and depth,
whether it is fed) and the group that drafts its trees and states its evidence."""

from __future__ import annotations

from core.config import TreeConfig
from core.speculation.drafter_pool import PoolSnapshot
from core.speculation.eagle3_members import Eagle3Members
from core.speculation.members import MemberGroup
from core.speculation.model_free.members import ModelFreeMembers


class PoolMembers:
    """The member groups of one snapshot, in pool order of their first member."""

    def __init__(self, snapshot: PoolSnapshot) -> None:
        ids = snapshot.ids
        self.eagle3 = Eagle3Members([i for i, did in enumerate(ids) if did in snapshot.drafters])
        self.model_free = ModelFreeMembers(
            {i: snapshot.free[did] for i, did in enumerate(ids) if did in snapshot.free})
        self.groups: list[MemberGroup] = [g for g in (self.eagle3, self.model_free) if g.indices]
        self._group_of = {i: g for g in self.groups for i in g.indices}
        # snapshot indices of the members a request feeds (MemberGroup.fed)
        self.fed = [i for g in self.groups if g.fed for i in g.indices]

    def __len__(self) -> int:
        return len(self._group_of)

    def group_of(self, index: int) -> MemberGroup:
        return self._group_of[index]

    def cost_kind(self, index: int) -> str:
        return self._group_of[index].cost_kind

    def depth(self, index: int, tree: TreeConfig) -> int:
        """Levels member `index` drafts at most (MemberGroup.depth)."""
        return self._group_of[index].depth(index, tree)

    def nodes(self, index: int, tree: TreeConfig) -> int:
        """Draft nodes a round of member `index` verifies at most (MemberGroup.nodes)."""
        return self._group_of[index].nodes(index, tree)
