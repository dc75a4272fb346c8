"""What one batched engine step runs (EngineConfig.batching), and where each request's target
KV cache lives (its slot in core/kv_cache.SlotCache).

A step takes the running requests (the engine passes the first `max_running` by arrival):
  1. one batched round (core/batch_rounds.py) for the prefilled ones, at most
     max_step_tokens // (total_tokens + 1) of them (the budget holds their trees; when it
     cannot hold every request, the rows taken rotate from step to step);
  2. prompt chunks (core/prefill.py) for the others, in arrival order, with the budget the
     trees left, but at least a quarter of it, so a prompt always advances.
Target forward passes = steps that ran a round + prefill chunks. A request joins the round
of the step after its prefill completes; finished and aborted ones free their slot
(`release`) and are gone from the next step.
"""

from __future__ import annotations

import logging
import time

from core.batch_rounds import RowResult, batched_round, with_bookkeeping
from core.config import EngineConfig
from core.prefill import prefill_chunk
from core.request import RequestState
from core.target import Target

log = logging.getLogger(__name__)


class BatchScheduler:
    def __init__(self, target: Target, config: EngineConfig) -> None:
        self.target, self.config = target, config
        self.cache = target.new_slot_cache()
        self._slot: dict[str, int] = {}
        self._owner: list[str] = []  # request id of each slot
        self._turn = 0
        self.round_passes = 0  # steps that ran a batched round (one target pass each)
        self.prefill_passes = 0  # prompt chunks (one target pass each)

    def step(self, states: list[RequestState]) -> list[RowResult]:
        """One step over the running requests; results for those that committed or failed."""
        t0 = time.perf_counter()
        for s in states:
            self._hold(s)
        ready = [s for s in states if s.prefilled and not s.finished]
        rows = self._rows(ready)
        results = batched_round(self.target, self.cache, rows, self.config) if rows else []
        self.round_passes += bool(rows)
        wall = time.perf_counter() - t0
        results = [with_bookkeeping(r, wall) for r in results]
        budget = self.config.max_step_tokens
        left = max(budget - len(rows) * self._tree_tokens, budget // 4, 1)
        return results + self._prefill([s for s in states if not s.prefilled], left)

    def release(self, request_id: str) -> None:
        """Free the request's slot (the last slot's request moves into it)."""
        slot = self._slot.pop(request_id, None)
        if slot is None:
            return
        moved = self.cache.release(slot)
        last = self._owner.pop()
        if moved is not None:
            self._owner[slot] = last
            self._slot[last] = slot
        if not self._owner:
            self.cache = self.target.new_slot_cache()  # idle: give the storage back

    def slot_of(self, request_id: str) -> int | None:
        return self._slot.get(request_id)

    @property
    def _tree_tokens(self) -> int:
        return self.config.tree.total_tokens + 1

    def _hold(self, state: RequestState) -> None:
        if state.request_id not in self._slot:
            self._slot[state.request_id] = self.cache.acquire()
            self._owner.append(state.request_id)

    def _rows(self, ready: list[RequestState]) -> list[tuple[RequestState, int]]:
        """The rows of this step's round, in slot order (contiguous slots batch as a view)."""
        cap = max(1, self.config.max_step_tokens // self._tree_tokens)
        if len(ready) > cap:
            start = self._turn % len(ready)
            ready = (ready[start:] + ready[:start])[:cap]
            self._turn += cap
        return sorted(((s, self._slot[s.request_id]) for s in ready), key=lambda r: r[1])

    def _prefill(self, waiting: list[RequestState], budget: int) -> list[RowResult]:
        out: list[RowResult] = []
        for state in waiting:
            if budget <= 0:
                break
            try:
                used, committed = prefill_chunk(self.target, self.cache,
                                                self._slot[state.request_id], state,
                                                self.config, budget)
            except Exception as exc:  # one prompt's failure must not take the others down
                log.exception("prefill of request %s failed", state.request_id)
                out.append(RowResult(state, [], None, exc))
                continue
            self.prefill_passes += 1
            budget -= used
            if committed is not None:
                out.append(RowResult(state, committed))
        return out
