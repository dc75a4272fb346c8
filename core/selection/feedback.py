"""Censoring-aware delayed feedback for one request (DESIGN.md §3, step 6).

A round rooted at position s is judged on positions s, ..., s+K-1, but the trajectory is
verified chunk by chunk: unless the chosen drafter accepted everything, those positions are
only known after later rounds. Applying a truncated window instead biases the learner toward
the drafter it already plays (HedgeSpec §4, "censoring"), so each window waits in a FIFO
queue until its loss is known, and losses are handed to the learner in order (Joulani et al.
2013, the stochastic-setting queue; reference notes 2.3 and 2.5).

Windows. One window is opened per round start. (The paper indexes its loss by token position,
every position a potential round start; a window per verified position measured the same MAT,
1.83, with a learner update per position instead of per round, bench/results/hedgespec.md, and
was dropped.) Windows without a round (the prompt windows of core/decoding/prompt_feedback.py) feed
the learner only; the statistics keep one window per real round. What is stored per position is the
`Evidence` of the catch-up, so that a window's γ can depend on the window (the "tree" estimator
ranks candidates by their cumulative score from the window's root).

Completion. A window is complete when its K positions are known, or earlier when its
unknown positions can no longer change ÂL or either loss. Under "topk" (γ per position,
ÂL = 1 + Σ_k Π_{j≤k} γ_j) that is as soon as every drafter has an exact zero γ inside the
known part. Under "tree" a γ depends on the whole window (more positions raise the
total_tokens cut, which can only lower a γ, but can turn an earlier non-zero γ into zero), so
only a zero at the window's first level is final: every drafter's ÂL is then 1. Both hold for
greedy and sampled decoding alike (when sampling, a zero comes from candidates with no
target mass, e.g. under top-p or top-k truncation).

The "prob" loss 1 - γ_d(s) under the "topk" estimator needs γ(s) only: its loss goes to the
learner as soon as position s is known, while the window stays queued until complete so that
the statistics still get its final ÂL. Under the "tree" estimator γ(s) depends on the whole
window (the cut), so the prob loss waits like the length loss.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import get_args

import numpy as np
import numpy.typing as npt

from core.config import LossName
from core.selection.counterfactual import (
    ESTIMATORS,
    BoolArray,
    Evidence,
    FloatArray,
    IntArray,
    KeptOverride,
    TotalTokens,
    length_loss,
    prob_loss,
    window_estimates,
)


@dataclass(frozen=True, eq=False)
class Window:
    """One feedback window: the counterfactual verdict on the round rooted at `start`."""

    start: int  # absolute position s of the round's root
    chosen: int | None  # drafter chosen for that round (None in plain mode or a position window)
    realised: int | None  # tokens committed that round (accepted + bonus); None: not a round
    gammas: FloatArray  # [N, K] γ used; zero where unknown (early close or censored)
    est_len: FloatArray  # [N] ÂL
    loss: FloatArray  # [N] loss in [0, 1] per the queue's loss
    # True only for windows that close() returned before they were complete: their unknown
    # positions were taken as γ = 0, which biases ÂL downward (fine for statistics, a biased
    # signal for a learner that outlives the request).
    censored: bool = False

    @property
    def is_round(self) -> bool:
        return self.realised is not None


# A model-free tree in the coordinates of its guesses
# (core/speculation/model_free/trees.rank_tree): for each kept node's path of candidate ranks
# (rank r = the r-th candidate of the guess after the path so far; () = the root), the ranks of its
# kept children. The evaluation walks it along the realised tokens' ranks (`walk_tree`).
RankTree = dict[tuple[int, ...], frozenset[int]]


def walk_tree(tree: RankTree, path_rank: IntArray, known: int, width: int) -> BoolArray:
    """[K, width] the children `tree` keeps under the realised path at each of the first
    `known` levels (the path leaves the tree where its token's rank is not kept)."""
    mask = np.zeros((path_rank.shape[0], width), dtype=bool)
    path: tuple[int, ...] = ()
    for j in range(known):
        kids = tree.get(path, frozenset())
        for r in kids:
            if r < width:
                mask[j, r] = True
        r = int(path_rank[j])
        if r not in kids:
            break
        path = (*path, r)
    return mask


@dataclass(frozen=True)
class WindowLoss:
    """One window's loss vector for the learner, and which drafters were awake for it (had a
    candidate at its root): an asleep drafter's entry is to be replaced by the learner's own
    expected loss over the awake ones (Learner.sleeping_losses)."""

    loss: FloatArray  # [N]
    awake: BoolArray  # [N]
    est_len: FloatArray  # [N] ÂL (what the "time" loss divides a round's cost by)
    # Under the time loss: each arm's net seconds (core/selection/arm_costs.time_losses) and the
    # rate λ they were valued at, what the regret in seconds sums (core/stats.py).
    net: FloatArray | None = None
    rate: float | None = None
    # The arms' round costs at the step the window's round ran in (open_window's `costs`).
    costs: FloatArray | None = None


@dataclass(frozen=True)
class _Verdict:
    """A window judged on its `known` leading positions (unknown ones count as γ = 0)."""

    gammas: FloatArray  # [N, K]
    est_len: FloatArray  # [N] ÂL
    known: int
    awake: BoolArray  # [N] a candidate at the window's first position (all True if unknown)


@dataclass
class _Pending:
    start: int
    chosen: int | None
    realised: int | None
    learned: bool = False  # its loss was handed out by pop_losses
    asleep: tuple[int, ...] = ()  # drafters asleep for this window (asleep_from)
    costs: FloatArray | None = None  # the arms' round costs at the window's step (time loss)
    verdict: _Verdict | None = None  # once every position is known (`_verdict`)


class FeedbackQueue:
    """Holds the evidence and open windows of one request; see the module docstring."""

    def __init__(self, num_drafters: int, depth: int, loss: str = "length",
                 estimator: str = "topk", total_tokens: TotalTokens | None = None,
                 depths: Sequence[int] | None = None) -> None:
        """`depth` K: the window's levels (the deepest tree of the pool); `depths` and
        `total_tokens`, one per drafter where their trees differ (model-free drafters draft
        chains of their own length): a drafter is credited only with the levels it drafts."""
        if num_drafters < 1 or depth < 1:
            raise ValueError("num_drafters and depth must be >= 1")
        if loss not in get_args(LossName):
            raise ValueError(f"unknown loss {loss!r}; expected one of {get_args(LossName)}")
        if estimator not in ESTIMATORS:
            raise ValueError(f"unknown estimator {estimator!r}; expected one of {ESTIMATORS}")
        self.num_drafters = num_drafters
        self.depth = depth
        self.loss = loss
        self.estimator = estimator
        self.total_tokens = total_tokens if total_tokens is not None else 1 << 30
        self.depths = np.full(num_drafters, depth) if depths is None else np.asarray(depths)
        if self.depths.shape != (num_drafters,) or (self.depths > depth).any():
            raise ValueError(f"depths must be {num_drafters} values <= the window depth {depth}")
        self._pending: deque[_Pending] = deque()
        self._evidence: Evidence | None = None  # positions from self._base on
        # Model-free tree members: the tree each would draft from every held position (None
        # where none was recorded: that window falls back to the tree model).
        self._trees: dict[int, list[RankTree | None]] = {}
        self._base: int | None = None  # absolute position of the first held position
        self._last_start: int | None = None

    @property
    def next_position(self) -> int | None:
        """The position the next add_* call must start at (None before the first)."""
        return None if self._base is None else self._base + self.buffered_positions

    @property
    def buffered_positions(self) -> int:
        """Number of positions currently held (bounded by what open windows need)."""
        return 0 if self._evidence is None else self._evidence.positions

    @property
    def open_windows(self) -> int:
        return len(self._pending)

    def open_window(self, start: int, chosen: int | None, realised: int | None,
                    costs: FloatArray | None = None) -> None:
        """Register the window rooted at `start` (a verified round, or with realised=None a
        position window that only feeds the learner); `costs`: what each arm's round cost at
        the step the round ran in (the time loss; handed back with the window's loss, which is
        known only rounds later, when the step's size and neighbours may have changed)."""
        if self._last_start is not None and start <= self._last_start:
            raise ValueError(f"window starts must increase: {start} after {self._last_start}")
        if self._base is not None and start < self._base:
            raise ValueError(f"γ for position {start} is no longer held (from {self._base})")
        if chosen is not None and not 0 <= chosen < self.num_drafters:
            raise ValueError(f"chosen drafter {chosen} out of range")
        self._pending.append(_Pending(start, chosen, realised, costs=costs))
        self._last_start = start
        self._trim()

    def add_gammas(self, start: int, gammas: npt.ArrayLike) -> None:
        """Append positions known only by their γ ([N, M]); see Evidence.from_gammas."""
        g = np.asarray(gammas, dtype=np.float64)
        if g.ndim != 2 or g.shape[0] != self.num_drafters:
            raise ValueError(f"expected gammas [{self.num_drafters}, M], got {g.shape}")
        if not np.all((g >= 0.0) & (g <= 1.0)):
            raise ValueError("γ must lie in [0, 1]")
        self.add_evidence(start, Evidence.from_gammas(g))

    def add_evidence(self, start: int, evidence: Evidence,
                     trees: Mapping[int, Sequence[RankTree]] | None = None) -> None:
        """Append the evidence of positions start .. start+M-1; contiguous, in order. `trees`:
        for model-free drafters that draft trees, the tree each would draft from every one of
        these positions (core/speculation/model_free/trees.rank_tree): their windows are then
        judged on that tree, exactly, instead of on the tree model."""
        if evidence.logp.shape[0] != self.num_drafters:
            raise ValueError(f"expected evidence for {self.num_drafters} drafters, "
                             f"got {evidence.logp.shape}")
        expected = self.next_position
        if expected is None:
            if self._pending and start > self._pending[0].start:
                raise ValueError(f"γ starts at {start}, after open window {self._pending[0].start}")
            self._base = start
        elif start != expected:
            raise ValueError(f"γ must arrive contiguously: "
                             f"expected position {expected}, got {start}")
        held = self._evidence
        if held is not None:  # candidate slots padded to the wider (asleep drafters carry one)
            k = max(held.logp.shape[2], evidence.logp.shape[2])
            held, evidence = held.widened(k), evidence.widened(k)
        before = self.buffered_positions
        self._evidence = evidence if held is None else Evidence.concat([held, evidence])
        for d in set(self._trees) | set(trees or {}):
            given = (trees or {}).get(d)
            held_trees = self._trees.setdefault(d, [None] * before)
            held_trees.extend(given if given is not None else [None] * evidence.positions)
        self._trim()

    def asleep_from(self, drafters: list[int], position: int) -> None:
        """`drafters` are fed no more pairs: the open windows rooted at `position` or later (the
        first whose levels they would not see to the end) have them asleep instead of judging
        them on a window cut short (γ = 0 past the cut would bias their ÂL down). Later
        positions carry no candidate of theirs (Evidence.none), so later windows have them
        asleep anyway."""
        for pending in self._pending:
            if pending.start >= position:  # with those already asleep for it
                pending.asleep = tuple(sorted({*pending.asleep, *drafters}))

    def restart(self) -> None:
        """Forget the held evidence: the next positions need not follow it (a request whose
        drafters slept, core/selection/arm_policy.py). No window may be open."""
        if self._pending:
            raise ValueError(f"{len(self._pending)} windows still open")
        self._evidence, self._base, self._trees = None, None, {}

    def pop_losses(self) -> list[WindowLoss]:
        """Loss vectors ([N] each, with the awake set) that became known, in window order;
        each exactly once."""
        out: list[WindowLoss] = []
        for pending in self._pending:
            if pending.learned:
                continue
            verdict = self._verdict(pending)
            if not self._loss_ready(verdict):
                break  # FIFO: a later window never overtakes an earlier one
            out.append(WindowLoss(self._loss(verdict), verdict.awake, verdict.est_len,
                                  costs=pending.costs))
            pending.learned = True
        return out

    def pop_completed(self) -> list[Window]:
        """Completed windows in FIFO order. A window whose loss pop_losses did not hand out
        yet is marked as handed out: its loss is in the Window."""
        done: list[Window] = []
        while self._pending:
            verdict = self._verdict(self._pending[0])
            if not self._is_complete(verdict):
                break
            done.append(self._window(self._pending.popleft(), verdict, censored=False))
        self._trim()
        return done

    def close(self) -> list[Window]:
        """End of request: every remaining window, judged with γ = 0 where unknown.

        Incomplete windows are censored-truncated and flagged `censored=True`. A window none
        of whose positions was scored (deferred evaluation, SelectorConfig.eval_every) has no
        verdict at all and is dropped: judging it would enter ÂL 1 for every drafter into the
        statistics and the calibration. The queue holds no window afterwards.
        """
        done: list[Window] = []
        while self._pending:
            verdict = self._verdict(self._pending[0])
            pending = self._pending.popleft()
            if verdict.known == 0:
                continue
            censored = not self._is_complete(verdict)
            done.append(self._window(pending, verdict, censored=censored))
        self._trim()
        return done

    def _is_complete(self, v: _Verdict) -> bool:
        if v.known == 0:
            return False
        # Every awake member is judged on its own levels only: a window is final once the
        # deepest of them is known. Waiting for the queue's depth instead held a window whose
        # deeper members had gone to sleep forever (no evidence arrives while the pool
        # sleeps), and with it every later one (FIFO).
        if v.known >= int(self.depths[v.awake].max(initial=0)):
            return True
        if self.estimator == "tree":  # only a first-level zero is final (module docstring)
            return bool((v.gammas[:, 0] == 0.0).all())
        # Every drafter's running product is already zero: the unknown tail cannot matter.
        return bool((v.gammas[:, :v.known] == 0.0).any(axis=1).all())

    def _loss_ready(self, v: _Verdict) -> bool:
        if self.loss == "prob" and self.estimator == "topk":
            return v.known > 0
        return self._is_complete(v)

    def _loss(self, v: _Verdict) -> FloatArray:
        """The acceptance loss; under "time" the length loss (statistics: the time loss needs
        the round costs, which the request maps ÂL to, core/selection/arm_costs.py)."""
        if self.loss in ("length", "time"):
            return length_loss(v.est_len, self.depth)
        return prob_loss(v.gammas[:, 0])

    def _window(self, pending: _Pending, v: _Verdict, *, censored: bool) -> Window:
        pending.learned = True
        return Window(pending.start, pending.chosen, pending.realised, v.gammas, v.est_len,
                      self._loss(v), censored=censored)

    def _verdict(self, pending: _Pending) -> _Verdict:
        """γ ([N, K], zero where unknown) and ÂL of the window, judged on its known leading
        positions; the drafters asleep for it (`asleep_from`) as drafters with no candidate.
        A window whose every position is known is judged once (nothing can change it: its
        positions are held and `asleep_from` marks only windows it could not finish)."""
        if pending.verdict is not None:
            return pending.verdict
        v = self._judged(pending.start)
        if pending.asleep:
            off = list(pending.asleep)
            gammas, est, awake = v.gammas.copy(), v.est_len.copy(), v.awake.copy()
            gammas[off], est[off], awake[off] = 0.0, 1.0, False
            v = _Verdict(gammas, est, v.known, awake)
        if v.known == self.depth:
            pending.verdict = v
        return v

    def _judged(self, start: int) -> _Verdict:
        n = self.num_drafters
        if self._base is None or self._evidence is None:
            return _Verdict(np.zeros((n, self.depth)), np.ones(n), 0, np.ones(n, dtype=bool))
        lo = start - self._base
        known = max(0, min(self.depth, self._evidence.positions - lo))
        window = self._evidence.slice(lo, lo + known).padded(self.depth).truncated(self.depths)
        exact = self._exact_trees(window, lo, known)
        gammas, est_len = window_estimates(window, self.estimator, self.total_tokens, exact)
        gammas[:, known:] = 0.0
        awake = window.awake[:, 0] if known else np.ones(n, dtype=bool)
        return _Verdict(gammas, est_len, known, awake)

    def _exact_trees(self, window: Evidence, lo: int, known: int) -> KeptOverride:
        """The kept children along the realised path of each recorded tree rooted at the
        window's first position ([K, k] per drafter)."""
        out: KeptOverride = {}
        for d, trees in self._trees.items():
            tree = trees[lo] if lo < len(trees) else None
            if tree is not None and known:
                out[d] = walk_tree(tree, window.path_rank[d], known, window.logp.shape[2])
        return out

    def _trim(self) -> None:
        """Drop positions no open or future window can need: windows start strictly after the
        last opened one, so nothing before the oldest open start (or last start + 1) is needed."""
        if self._base is None or self._evidence is None:
            return
        if self._pending:
            floor = self._pending[0].start
        elif self._last_start is not None:
            floor = self._last_start + 1
        else:
            return  # no window opened yet: positions may belong to a window about to be opened
        drop = max(0, min(floor - self._base, self._evidence.positions))
        if drop:
            self._evidence = self._evidence.slice(drop, self._evidence.positions)
            self._trees = {d: t[drop:] for d, t in self._trees.items()}
            self._base += drop
