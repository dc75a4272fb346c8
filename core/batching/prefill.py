"""Chunked prefill into the slot cache: a prompt runs through the target in chunks of at most
the step's leftover token budget (core/batching/scheduler.py), so a long prompt never freezes the
running streams for a whole prompt's forward. The chunks of one step share one target pass
(one row each, as the verification pass batches trees), so a burst of new requests costs one
pass per step instead of one per prompt: on a CPU a pass of few tokens is mostly fixed cost
(the weights are read once per pass), and that is what a burst's first tokens wait for.
Each chunk's drafters catch up chunk by chunk too (under full evaluation, and for a fixed
drafter), so no step pays a whole prompt's catch-up either. The last chunk samples the first
token exactly as the one-pass prefill does (core/decoding/request_round.prefill).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from core.config import EngineConfig
from core.decoding.prompt_feedback import learn_from_prompt, prompt_tail
from core.decoding.request import RequestState
from core.decoding.request_round import (
    commit_first,
    first_token,
    prompt_logprobs,
    start_drafters,
    start_lookups,
)
from core.model.kv_cache import SlotCache
from core.model.target import Target, TargetOutput
from core.speculation.members import VerifiedPairs


@dataclass(frozen=True)
class Chunk:
    """Prompt tokens start..end-1 of the request in `slot`."""

    slot: int
    state: RequestState
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def wants_prompt_logprobs(self) -> bool:
        return self.state.params.prompt_logprobs is not None


def plan_chunk(cache: SlotCache, slot: int, state: RequestState, budget: int,
               tail: int = 1) -> Chunk:
    """The request's next chunk: at most `budget` tokens (at least one), fewer at its end. A
    chunk never leaves fewer than `tail` tokens (prompt_tail: the prompt windows' positions and
    the first root) for the last one, so that the last pass holds the whole tail wherever the
    step's budget happened to cut: otherwise a 513-token prompt cut at 512 would get no prompt
    window, and the learner's start would depend on the load."""
    start = cache.lengths[slot]
    end = min(state.prompt_len, start + max(1, budget))
    cut = state.prompt_len - tail  # where the tail begins
    if start < cut < end < state.prompt_len:
        end = cut  # (a budget smaller than the tail splits it anyway)
    return Chunk(slot, state, start, end)


def forward_chunks(target: Target, cache: SlotCache, chunks: list[Chunk],
                   tail: int = 1) -> list[TargetOutput]:
    """One target pass over `chunks`, one row each; nothing is committed (a failed pass is safe
    to rerun). A chunk asking for prompt logprobs needs every row of its logits, so it runs
    alone; the others compute only their last row's logits (and keep the hidden states of
    their last `tail` tokens, core/decoding/prompt_feedback.py)."""
    full = any(c.wants_prompt_logprobs for c in chunks)
    if full and len(chunks) > 1:
        raise ValueError("a chunk that wants prompt logprobs runs in a pass of its own")
    return target.forward_rows(
        cache, [c.slot for c in chunks],
        [torch.tensor(c.state.token_ids[c.start : c.end], dtype=torch.long) for c in chunks],
        [torch.arange(c.start, c.end) for c in chunks], [None] * len(chunks),
        last_logits_only=not full, tail=tail)


def finish_chunk(cache: SlotCache, chunk: Chunk, out: TargetOutput,
                 config: EngineConfig) -> list[int] | None:
    """After the pass: commit the chunk's entries, feed its drafters, and at the prompt's end
    sample and commit the first token."""
    state, start, end = chunk.state, chunk.start, chunk.end
    cache.extend(chunk.slot, chunk.size)
    state.stats.target_forwards += 1
    if chunk.wants_prompt_logprobs:
        lps = prompt_logprobs(out.logits, state.token_ids, state.params.prompt_logprobs or 0, start)
        state.prompt_logprobs = (state.prompt_logprobs or []) + lps
    if state.learner is not None and state.dstate is None:
        start_drafters(state)
    if end < state.prompt_len:
        # a later chunk's catch-up replaces this one's top-k before anything reads it
        _feed(state, out.features, torch.tensor(state.token_ids[start + 1 : end + 1]), config,
              scored=0)
        return None
    last = out.rows([len(out) - 1])
    tok = first_token(state, last)
    committed = commit_first(state, tok, last)
    if not state.finished:
        _feed(state, out.features, torch.tensor(state.token_ids[start + 1 : end] + [tok]), config,
              scored=prompt_tail(config))
        start_lookups(state, config)
        learn_from_prompt(state, out, start, config)
    return committed


def _feed(state: RequestState, features: torch.Tensor, next_tokens: torch.Tensor,
          config: EngineConfig, scored: int) -> None:
    """Record the chunk's pairs; drafters that are sure to run catch up now (all of them
    under full evaluation, where the first γ needs every prediction at the first root; a
    fixed drafter). Bandits' drafters stay lazy: each catches up when it is first chosen.
    Only the last `scored` pairs get the drafters' top-k: the prompt windows and the first
    root read no other (core/decoding/prompt_feedback.py)."""
    if state.dstate is None:
        return
    state.feed(VerifiedPairs(features, next_tokens, state.token_ids))
    fixed = state.learner is not None and state.learner.fixed_index is not None
    if not state.evaluate and not fixed:
        return
    # asleep members catch up on nothing: they keep the pairs a wake restarts from
    states = state.member_states()
    tops = [g.catch_up(states, state.snapshot, config.tree.top_k,
                       scored if state.evaluate else 0)  # a fixed drafter's: unused
            for g in state.members.groups]
    if state.evaluate:
        state.pending = next((c for c in tops if c is not None), None)
