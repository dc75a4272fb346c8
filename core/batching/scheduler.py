"""What one batched engine step runs (EngineConfig.batching), and where each request's target
KV cache lives (its slot in core/model/kv_cache.SlotCache).

A step takes the running requests (the engine passes the first `max_running` by arrival):
  1. one batched round (core/batching/step.py) for the prefilled ones (each speculative or
     plain, as its learner chooses; plain throughout in the cost model's probe steps), at most
     max_step_tokens // (total_tokens + 1) of them (the budget holds their trees; when it
     cannot hold every request, the rows taken rotate from step to step);
  2. prompt chunks (core/batching/prefill.py) for the others, in arrival order, with the budget the
     trees left, but at least a quarter of it, so a prompt always advances; the chunks share
     one target pass (a chunk that wants prompt logprobs takes a pass of its own).
Target forward passes = steps that ran a round + prefill passes. A request joins the round
of the step after its prefill completes; finished and aborted ones free their slot
(`release`) and are gone from the next step.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from core.batching.head_rows import HeadRows
from core.batching.prefill import Chunk, finish_chunk, forward_chunks, plan_chunk
from core.batching.step import RowResult, batched_round, with_bookkeeping
from core.config import EngineConfig
from core.decoding.prompt_feedback import prompt_tail
from core.decoding.request import RequestState
from core.model.target import Target
from core.selection.arm_costs import StepCosts

log = logging.getLogger(__name__)


class BatchScheduler:
    def __init__(self, target: Target, config: EngineConfig, head_rows: HeadRows | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 costs: StepCosts | None = None) -> None:
        self.target, self.config, self.clock = target, config, clock
        self.head_rows = head_rows or HeadRows(config.verify_logits, config.device,
                                                       target.packed_head)
        self.costs = costs or StepCosts()
        self.cache = target.new_slot_cache()
        self._slot: dict[str, int] = {}
        self._owner: list[str] = []  # request id of each slot
        self._turn = 0
        self.round_passes = 0  # steps that ran a batched round (one target pass each)
        self.prefill_passes = 0  # passes over prompt chunks

    def step(self, states: list[RequestState]) -> list[RowResult]:
        """One step over the running requests; results for those that committed or failed."""
        t0 = self.clock()
        for s in states:
            self._hold(s)
        ready = [s for s in states if s.prefilled and not s.finished]
        rows = self._rows(ready)
        visited = self.head_rows.visited()
        speculate = self._probe_allows(rows)
        results = (batched_round(self.target, self.cache, rows, self.config, visited, speculate,
                                 self.clock, self.costs) if rows else [])
        wall = self.clock() - t0
        self.round_passes += bool(rows)
        results = [with_bookkeeping(r, wall) for r in results]
        budget = self.config.max_step_tokens
        left = max(budget - len(rows) * self._tree_tokens, budget // 4, 1)
        waiting = [s for s in states if not s.prefilled]
        for s in waiting:  # the step size its first rounds will run at (its costs' bucket)
            if s.arms is not None:
                s.arms.step_requests = s.arms.start_requests = len(states)
        return results + self._prefill(waiting, left)

    def _probe_allows(self, rows: list[tuple[RequestState, int]]) -> bool:
        """False for the plain steps the time loss's cost model measures with (a step of
        requests that have plain decoding as an arm:
        core/selection/arm_costs.StepCosts.speculate)."""
        if not any(s.plain_arm for s, _ in rows):
            return True
        return self.costs.speculate(len(rows))

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
        """This step's chunks, in arrival order within `budget`, in as few passes as possible."""
        chunks: list[Chunk] = []
        for state in waiting:
            if budget <= 0:
                break
            chunks.append(plan_chunk(self.cache, self._slot[state.request_id], state, budget,
                                     prompt_tail(self.config)))
            budget -= chunks[-1].size
        shared = [c for c in chunks if not c.wants_prompt_logprobs]
        groups = ([shared] if shared else []) + [[c] for c in chunks if c.wants_prompt_logprobs]
        return [r for group in groups for r in self._run_chunks(group)]

    def _run_chunks(self, chunks: list[Chunk]) -> list[RowResult]:
        """One pass over the chunks; if it raises, one pass per chunk, so that only the prompt
        that causes a failure fails (one prompt's failure must not take the others down)."""
        try:
            outs = forward_chunks(self.target, self.cache, chunks, prompt_tail(self.config))
        except Exception as exc:
            if len(chunks) > 1:
                log.warning("a prefill pass over %d prompts failed; retrying them one by one",
                            len(chunks))
                return [r for c in chunks for r in self._run_chunks([c])]
            log.exception("prefill of request %s failed", chunks[0].state.request_id)
            return [RowResult(chunks[0].state, [], None, exc)]
        self.prefill_passes += 1
        out: list[RowResult] = []
        for chunk, target_out in zip(chunks, outs, strict=True):
            try:
                t0 = self.clock()
                committed = finish_chunk(self.cache, chunk, target_out, self.config)
                # The drafters' catch-up on the prompt and its windows: what a request that
                # starts awake pays beyond plain decoding (ArmPolicy.awake_cost_s).
                if chunk.state.arms is not None:
                    chunk.state.arms.awake_cost_s += self.clock() - t0
            except Exception as exc:
                log.exception("prefill of request %s failed", chunk.state.request_id)
                out.append(RowResult(chunk.state, [], None, exc))
                continue
            if committed is not None:
                out.append(RowResult(chunk.state, committed))
        return out
