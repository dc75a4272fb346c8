"""The EAGLE-3 drafters of a pool as a member group (core/speculation/members.py), over the
drafter pool (drafter_pool.py): their catch-up and drafting stay batched across members and
requests, and their evidence is their catch-up top-k."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from core.config import EngineConfig, TreeConfig
from core.selection.arm_costs import NEURAL
from core.selection.counterfactual import Evidence
from core.speculation.drafter_pool import Candidates, DrafterState, PoolSnapshot, sync_many
from core.speculation.drafting import DraftRow, grow_trees, tree_scratch
from core.speculation.members import (
    DraftOrder,
    MemberEvidence,
    MemberGroup,
    MemberStates,
    TargetSide,
    VerifiedPairs,
)
from core.speculation.tree import DraftTree


class Eagle3Members(MemberGroup):
    """The EAGLE-3 drafters of a pool as a member group (core/speculation/members.py): they
    draft after a catch-up on the pairs they missed (batched over requests, `sync_many`), the
    requests that chose one drafter together (`grow_trees`); their evidence is their catch-up
    top-k. A request stops feeding them while they do not pay (DrafterState.sleep): they are
    then all asleep."""

    cost_kind = NEURAL
    fed = True

    def nodes(self, index: int, tree: TreeConfig) -> int:
        return tree.total_tokens

    def depth(self, index: int, tree: TreeConfig) -> int:
        return tree.depth

    def prepare(self, orders: Sequence[DraftOrder], config: EngineConfig) -> None:
        """The chosen drafters catch up (lazy policies; draft copies under deferred evaluation),
        one pass per stacked group and rows whatever the request."""
        sync_many([(_drafter_state(o), o.snapshot, [o.chosen]) for o in orders],
                  config.tree.top_k)

    def record(self, states: MemberStates, pairs: VerifiedPairs) -> None:
        """Held for the next catch-up (asleep: only the last WAKE_PAIRS, what `resume`
        restarts from)."""
        _drafters(states).record(pairs.features, pairs.tokens)

    def catch_up(self, states: MemberStates, snapshot: PoolSnapshot, top_k: int,
                 scored: int) -> Candidates | None:
        drafters = _drafters(states)
        if drafters.asleep:
            return None  # they catch up on the pairs they kept once resumed
        return drafters.sync(snapshot, top_k, scored=scored)

    def pause(self, states: MemberStates) -> bool:
        drafters = _drafters(states)
        if drafters.asleep:
            return False
        drafters.sleep()
        return True

    def paused(self, states: MemberStates) -> bool:
        return states.drafters is not None and states.drafters.asleep

    def resume(self, states: MemberStates, committed: Sequence[int]) -> None:
        _drafters(states).wake()

    @staticmethod
    def catch_up_requests(requests: Sequence[tuple[MemberStates, PoolSnapshot]], top_k: int,
                          scored: int | None = None) -> list[Candidates | None]:
        """Every drafter of each request caught up on the pairs it took, batched over the
        requests (one pass per stacked group: core/batching/step.py's evaluation and wakes);
        each request's top-k over its last `scored` pairs (None: all of them)."""
        return sync_many([(_drafters(states), snapshot, None) for states, snapshot in requests],
                         top_k, scored=scored)

    def batch_key(self, order: DraftOrder) -> object:
        return id(order.snapshot.drafters[order.snapshot.ids[order.chosen]])

    def draft(self, orders: Sequence[DraftOrder], config: EngineConfig) -> list[DraftTree]:
        first = orders[0]
        drafter = first.snapshot.drafters[first.snapshot.ids[first.chosen]]
        return grow_trees(drafter, [_draft_row(o, config) for o in orders], config.tree)

    def awake(self, states: MemberStates) -> dict[int, bool] | None:
        if states.drafters is None or not states.drafters.asleep:
            return None
        return dict.fromkeys(self.indices, False)

    def ready(self, states: MemberStates) -> bool:
        """A catch-up covered the positions, or the drafters sleep through a due evaluation
        (scored on no evidence)."""
        asleep = states.drafters is not None and states.drafters.asleep
        return bool(states.topk) or (asleep and states.due)

    def evidence(self, states: MemberStates, start: int, positions: int,
                 target: TargetSide) -> MemberEvidence:
        if not states.topk:  # asleep: no catch-up ran
            return MemberEvidence(self.indices, Evidence.none(len(self.indices), positions), {})
        ids, logp = topk_at(states.topk, start, positions)
        assert all(c.indices == self.indices for c in states.topk)
        return MemberEvidence(self.indices, target.evidence(ids.cpu().numpy(),
                                                            logp.cpu().numpy()), {})


def topk_at(parts: Sequence[Candidates], start: int, positions: int) -> tuple[Tensor, Tensor]:
    """The catch-ups' top-k ids and log q [n, positions, k] at positions start.. (each from
    the part that holds it; together the parts must cover them)."""
    end = start + positions
    ids, logp = [], []
    at = start
    for c in parts:
        lo, hi = max(at, c.first), min(end, c.first + c.topk_ids.shape[1])
        if lo >= hi:
            continue
        assert lo == at, ("the catch-ups leave a gap", at, lo)
        ids.append(c.topk_ids[:, lo - c.first : hi - c.first])
        logp.append(c.topk_logp[:, lo - c.first : hi - c.first])
        at = hi
    assert at == end, ("the catch-ups do not cover the positions", start, end, at)
    if len(ids) == 1:
        return ids[0], logp[0]
    return torch.cat(ids, dim=1), torch.cat(logp, dim=1)


def _drafter_state(order: DraftOrder) -> DrafterState:
    return _drafters(order.states)


def _drafters(states: MemberStates) -> DrafterState:
    drafters = states.drafters
    assert drafters is not None, "the EAGLE-3 drafters live in the request's caches"
    return drafters


def _draft_row(order: DraftOrder, config: EngineConfig) -> DraftRow:
    """The chosen drafter's input for the request's tree (caught up beforehand)."""
    state = _drafter_state(order)
    keys, values, length = state.draft_cache(order.chosen, tree_scratch(config.tree))
    allowed = order.allowed if config.mask_drafts else None
    return DraftRow(keys, values, length, state.h_last(order.chosen), order.root,
                    order.position, allowed)
