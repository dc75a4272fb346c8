"""Censoring-aware delayed feedback for one request (DESIGN.md §3, step 6).

A round rooted at position s is judged on γ_d(s), ..., γ_d(s+K-1), but the trajectory is
verified chunk by chunk: unless the chosen drafter accepted everything, those positions are
only known after later rounds. Applying a truncated window instead biases the learner toward
the drafter it already plays (HedgeSpec §4, "censoring"), so each window waits in a FIFO
queue until it is complete, and completed windows are handed to the learner in order
(Joulani et al. 2013, the stochastic-setting queue; reference notes 2.3 and 2.5).

One window is opened per round start. A window is complete when its K positions are known,
or, with `greedy=True`, as soon as every drafter has an exact zero γ inside the known part:
the running product Π γ is then zero for all of them and the unknown positions cannot change
ÂL or either loss. An exact zero means the same thing when sampling, so the shortcut is valid
there too. Both losses use the same completion rule so that every window also carries a
final ÂL for the statistics, even though the "prob" loss only needs γ(s).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import get_args

import numpy as np
import numpy.typing as npt

from core.config import LossName
from core.counterfactual import FloatArray, estimate_length, length_loss, prob_loss


@dataclass(frozen=True, eq=False)
class Window:
    """One feedback window: the counterfactual verdict on the round rooted at `start`."""

    start: int  # absolute position s of the round's root
    chosen: int | None  # drafter chosen for that round (None in plain mode)
    realised: int  # tokens committed that round (accepted + bonus)
    gammas: FloatArray  # [N, K] γ used; zero where unknown (early close or censored)
    est_len: FloatArray  # [N] ÂL
    loss: FloatArray  # [N] loss in [0, 1] per the queue's loss
    # True only for windows that close() returned before they were complete: their unknown
    # positions were taken as γ = 0, which biases ÂL downward (fine for statistics, a biased
    # signal for a learner that outlives the request).
    censored: bool = False


@dataclass(frozen=True)
class _Pending:
    start: int
    chosen: int | None
    realised: int


class FeedbackQueue:
    """Holds γ history and open windows of one request; see the module docstring."""

    def __init__(self, num_drafters: int, depth: int, loss: str = "length",
                 greedy: bool = True) -> None:
        if num_drafters < 1 or depth < 1:
            raise ValueError("num_drafters and depth must be >= 1")
        if loss not in get_args(LossName):
            raise ValueError(f"unknown loss {loss!r}; expected one of {get_args(LossName)}")
        self.num_drafters = num_drafters
        self.depth = depth
        self.loss = loss
        self.greedy = greedy
        self._pending: deque[_Pending] = deque()
        self._gammas: FloatArray = np.zeros((num_drafters, 0))  # [N, positions held]
        self._base: int | None = None  # absolute position of self._gammas[:, 0]
        self._last_start: int | None = None

    @property
    def next_position(self) -> int | None:
        """The position the next add_gammas call must start at (None before the first)."""
        return None if self._base is None else self._base + self._gammas.shape[1]

    @property
    def buffered_positions(self) -> int:
        """Number of γ positions currently held (bounded by what open windows need)."""
        return int(self._gammas.shape[1])

    @property
    def open_windows(self) -> int:
        return len(self._pending)

    def open_window(self, start: int, chosen: int | None, realised: int) -> None:
        """Register the round rooted at `start`, once it has been verified."""
        if self._last_start is not None and start <= self._last_start:
            raise ValueError(f"window starts must increase: {start} after {self._last_start}")
        if self._base is not None and start < self._base:
            raise ValueError(f"γ for position {start} is no longer held (from {self._base})")
        if chosen is not None and not 0 <= chosen < self.num_drafters:
            raise ValueError(f"chosen drafter {chosen} out of range")
        self._pending.append(_Pending(start, chosen, realised))
        self._last_start = start
        self._trim()

    def add_gammas(self, start: int, gammas: npt.ArrayLike) -> None:
        """Append γ for positions start .. start+M-1. gammas: [N, M]; contiguous, in order."""
        g = np.asarray(gammas, dtype=np.float64)
        if g.ndim != 2 or g.shape[0] != self.num_drafters:
            raise ValueError(f"expected gammas [{self.num_drafters}, M], got {g.shape}")
        if not np.all((g >= 0.0) & (g <= 1.0)):
            raise ValueError("γ must lie in [0, 1]")
        expected = self.next_position
        if expected is None:
            if self._pending and start > self._pending[0].start:
                raise ValueError(f"γ starts at {start}, after open window {self._pending[0].start}")
            self._base = start
        elif start != expected:
            raise ValueError(f"γ must arrive contiguously: expected position {expected}, got {start}")
        self._gammas = np.concatenate([self._gammas, g], axis=1)
        self._trim()

    def pop_completed(self) -> list[Window]:
        """Completed windows in FIFO order (a later window never overtakes an earlier one)."""
        done: list[Window] = []
        while self._pending:
            gammas, known = self._window_gammas(self._pending[0].start)
            if not self._is_complete(gammas, known):
                break
            done.append(self._window(self._pending.popleft(), gammas, censored=False))
        self._trim()
        return done

    def close(self) -> list[Window]:
        """End of request: every remaining window, judged with γ = 0 where unknown.

        Incomplete windows are censored-truncated and flagged `censored=True`. The queue
        holds no window afterwards.
        """
        done: list[Window] = []
        while self._pending:
            gammas, known = self._window_gammas(self._pending[0].start)
            censored = not self._is_complete(gammas, known)
            done.append(self._window(self._pending.popleft(), gammas, censored=censored))
        self._trim()
        return done

    def _is_complete(self, gammas: FloatArray, known: int) -> bool:
        if known == self.depth:
            return True
        # Every drafter's running product is already zero: the unknown tail cannot matter.
        return self.greedy and known > 0 and bool((gammas[:, :known] == 0.0).any(axis=1).all())

    def _window(self, pending: _Pending, gammas: FloatArray, *, censored: bool) -> Window:
        est = estimate_length(gammas)  # [N]
        loss = length_loss(est, self.depth) if self.loss == "length" else prob_loss(gammas[:, 0])
        return Window(pending.start, pending.chosen, pending.realised, gammas, est, loss,
                      censored=censored)

    def _window_gammas(self, start: int) -> tuple[FloatArray, int]:
        """γ of the window rooted at `start` ([N, K], zero where unknown) and how many of its
        leading positions are known."""
        window = np.zeros((self.num_drafters, self.depth))
        if self._base is None:
            return window, 0
        lo = start - self._base
        known = max(0, min(self.depth, self._gammas.shape[1] - lo))
        window[:, :known] = self._gammas[:, lo:lo + known]
        return window, known

    def _trim(self) -> None:
        """Drop γ no open or future window can need: windows start strictly after the last
        opened one, so nothing before the oldest open start (or last start + 1) is needed."""
        if self._base is None:
            return
        if self._pending:
            floor = self._pending[0].start
        elif self._last_start is not None:
            floor = self._last_start + 1
        else:
            return  # no window opened yet: γ may belong to a window about to be opened
        drop = max(0, min(floor - self._base, self._gammas.shape[1]))
        if drop:
            self._gammas = self._gammas[:, drop:]
            self._base += drop
