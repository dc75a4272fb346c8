"""Pool members behind one interface (DESIGN.md section 3.1): a `MemberGroup` is the members of
one kind in a pool snapshot, the EAGLE-3 drafters (eagle3_members.py, over the stacked groups:
their catch-up and drafting stay batched across members and requests) or the model-free ones
(model_free/members.py); pool_members.py holds a snapshot's groups. A request's round asks the
group of its chosen member for the tree, and the evaluation asks every group for its members'
evidence; neither cares which kind answers.

Two words are defined here, once:

- *Evidence* at a verified position m: each member's candidates for the token after m, best
  first, with their log q (what its tree would hold at that level), scored against the target's
  side at m (`TargetSide`: its argmax under greedy, p̃_m and the realised token when sampling;
  core/selection/counterfactual.Evidence). It is what the counterfactual evaluation turns into
  γ, ÂL and each member's loss. An EAGLE-3 drafter's comes from its catch-up top-k, a
  model-free member's from the guess its lookup recorded at m (and, for a tree member, the
  tree it would have drafted from m, judged exactly: `MemberEvidence.trees`).
- *Asleep*: a member that cannot draft from a round's root is asleep that round: a model-free
  member with no guess there, or a member the request stops feeding (`fed` members: the
  EAGLE-3 drafters, which need a catch-up on every verified pair; core/selection/arm_policy.py
  decides when). The learner chooses among the awake members (sleeping experts,
  core/selection/learners.py), and a window a member could not finish has it asleep
  (FeedbackQueue.asleep_from); with no evidence (`Evidence.none`) an asleep member is scored on
  nothing.

A request hands its members what it commits (`record`), and pauses and resumes them
(`pause`, `resume`: core/decoding/request.py decides when, as its arm policy says) through the
same interface: the groups keep their own state (MemberStates) in step.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt
from torch import Tensor

from core.config import EngineConfig, TreeConfig
from core.selection.counterfactual import Evidence, evidence_greedy, evidence_sampling
from core.selection.feedback import RankTree
from core.speculation.drafter_pool import Candidates, DrafterState, PoolSnapshot
from core.speculation.drafting import AllowedFn
from core.speculation.model_free.base import OutputGrammar
from core.speculation.model_free.lookups import RequestLookups
from core.speculation.tree import DraftTree


@dataclass(frozen=True)
class TargetSide:
    """The target's side of M positions: its argmax (greedy), or p̃ [M, V] and the realised
    next tokens [M] (sampling)."""

    argmax: npt.NDArray[np.int64] | None
    probs: npt.NDArray[np.float64] | None
    realised: npt.NDArray[np.int64] | None

    def evidence(self, ids: npt.NDArray[np.int64], logp: npt.NDArray[np.float64]) -> Evidence:
        """Candidates ids [N, M, k] with their log q scored against this side."""
        if self.argmax is not None:
            return evidence_greedy(self.argmax, ids, logp)
        assert self.probs is not None
        realised = (self.realised if self.realised is not None
                    else np.zeros(ids.shape[1], dtype=np.int64))
        return evidence_sampling(self.probs, ids, logp, realised)


@dataclass(frozen=True)
class MemberStates:
    """One request's state of its pool's members, each group reading its own: the EAGLE-3
    drafters' caches, the model-free members' lookups, and the EAGLE-3 catch-ups' top-k that
    cover the positions being scored (none: no catch-up ran for them)."""

    drafters: DrafterState | None
    lookups: RequestLookups | None
    topk: tuple[Candidates, ...] = ()
    # The evaluation is due: a member group that sleeps is then scored on no evidence.
    due: bool = True


@dataclass(frozen=True)
class VerifiedPairs:
    """What a request hands its members as it commits: T verified (feature, token) pairs, the
    target's features [T, 3Ht] at T positions and the token after each [T] (what fed members
    catch up on), and every token committed so far (what the lookups index)."""

    features: Tensor
    tokens: Tensor
    committed: Sequence[int]


@dataclass(frozen=True)
class MemberStart:
    """What a request's members start from once its first token is committed."""

    tokens: Sequence[int]  # the prompt and the first token
    record_from: int  # the first position whose guesses an evaluation reads
    record: bool  # an evaluation reads guesses (full evaluation)
    paused: bool  # the request's pool sleeps: nothing recorded until it resumes
    grammar: OutputGrammar | None  # the grammar the request's output follows


@dataclass(frozen=True)
class MemberEvidence:
    """A group's members (snapshot indices), their evidence at the positions asked for, and the
    trees its tree members would draft from each of those positions."""

    indices: list[int]
    evidence: Evidence
    trees: dict[int, list[RankTree]]


@dataclass(frozen=True)
class DraftOrder:
    """One request's row to draft: the chosen member and what drafting reads of the request."""

    chosen: int  # snapshot index
    snapshot: PoolSnapshot
    states: MemberStates
    root: int  # the last committed token
    position: int  # the root's position (committed tokens in the target cache)
    remaining: int  # tokens the request may still commit: no deeper tree can pay
    allowed: AllowedFn | None  # the request's grammar (None: none)


class MemberGroup(ABC):
    """The pool members of one kind, by snapshot index (see the module docstring)."""

    # How its rounds are priced (core/selection/arm_costs.py: NEURAL or FREE).
    cost_kind: ClassVar[str]
    # Its members read the target's features and must catch up on every verified pair to
    # draft: a request can stop feeding them (they are then asleep).
    fed: ClassVar[bool]

    def __init__(self, indices: list[int]) -> None:
        self.indices = indices

    @abstractmethod
    def nodes(self, index: int, tree: TreeConfig) -> int:
        """The most draft nodes a round of member `index` verifies (its tree's size)."""

    @abstractmethod
    def depth(self, index: int, tree: TreeConfig) -> int:
        """The most levels member `index` drafts."""

    def prepare(self, orders: Sequence[DraftOrder], config: EngineConfig) -> None:
        """What must run before the orders' trees are drafted (a catch-up), batched over
        them. Nothing by default."""
        return None

    def start(self, states: MemberStates, start: MemberStart) -> MemberStates:
        """The request's member states with this group's started, once its first token is
        committed. Unchanged by default: a group whose state starts with the prompt's first
        chunk (the EAGLE-3 drafters' caches, core/decoding/request_round.start_drafters)."""
        return states

    @abstractmethod
    def record(self, states: MemberStates, pairs: VerifiedPairs) -> None:
        """Take the pairs the request verified (nothing runs for fed members: they catch up
        when they draft or are evaluated); a paused group may leave them to `resume`."""

    def catch_up(self, states: MemberStates, snapshot: PoolSnapshot, top_k: int,
                 scored: int) -> Candidates | None:
        """Catch the members up now on every pair they took (the prompt's, where they are sure
        to run), with their top-k over the last `scored` pairs when an evaluation reads them
        (DrafterState.sync). Nothing by default."""
        return None

    @abstractmethod
    def pause(self, states: MemberStates) -> bool:
        """The request stops feeding its members (fed ones) or recording their guesses (a
        sleeping pool); True when they were not paused already."""

    @abstractmethod
    def paused(self, states: MemberStates) -> bool:
        """Whether the request has paused this group (`pause`) and not resumed it."""

    @abstractmethod
    def resume(self, states: MemberStates, committed: Sequence[int]) -> None:
        """End a pause, given every committed token: a fed group restarts from the pairs it
        kept (its catch-up comes with the next sync), a lookup indexes what was committed
        meanwhile and records again from the root."""

    @abstractmethod
    def batch_key(self, order: DraftOrder) -> object:
        """Orders with the same key draft together (`draft`)."""

    @abstractmethod
    def draft(self, orders: Sequence[DraftOrder], config: EngineConfig) -> list[DraftTree]:
        """The trees of orders that share a batch key, from their roots."""

    @abstractmethod
    def awake(self, states: MemberStates) -> dict[int, bool] | None:
        """Whether each member can draft from the request's root; None: every one can."""

    @abstractmethod
    def ready(self, states: MemberStates) -> bool:
        """Whether its evidence at the positions being scored is known (an evaluation waits
        for every group's)."""

    @abstractmethod
    def evidence(self, states: MemberStates, start: int, positions: int,
                 target: TargetSide) -> MemberEvidence:
        """Its members' evidence at positions start..start+positions-1 (once `ready`)."""
