"""Chunked prefill into the slot cache: a prompt runs through the target in chunks of at most
the step's leftover token budget (core/scheduler.py), so a long prompt never freezes the
running streams for a whole prompt's forward. Each chunk is one prefill pass; the drafters
catch up chunk by chunk too (under full evaluation, and for a fixed drafter), so no step pays
a whole prompt's catch-up either. The last chunk samples the first token exactly as the
one-pass prefill does (core/rounds.prefill).
"""

from __future__ import annotations

import torch

from core.config import EngineConfig
from core.kv_cache import SlotCache
from core.request import RequestState
from core.rounds import commit_first, first_token, prompt_logprobs, start_drafters
from core.target import Target


def prefill_chunk(target: Target, cache: SlotCache, slot: int, state: RequestState,
                  config: EngineConfig, budget: int) -> tuple[int, list[int] | None]:
    """Run the next `budget` prompt tokens (fewer at the prompt's end) on top of the slot's
    cache. Returns (tokens run, the committed first token(s) once the prompt is done, else None)."""
    start = cache.lengths[slot]
    end = min(state.prompt_len, start + max(1, budget))
    ids = torch.tensor(state.token_ids[start:end], dtype=torch.long)
    want_prompt = state.params.prompt_logprobs is not None
    out = target.forward_rows(cache, [slot], [ids], [torch.arange(start, end)], [None],
                              last_logits_only=not want_prompt)[0]
    cache.extend(slot, end - start)
    state.stats.target_forwards += 1
    if want_prompt:
        lps = prompt_logprobs(out.logits, state.token_ids, state.params.prompt_logprobs or 0, start)
        state.prompt_logprobs = (state.prompt_logprobs or []) + lps
    if state.learner is not None and state.dstate is None:
        start_drafters(state)
    if end < state.prompt_len:
        _feed(state, out.features, torch.tensor(state.token_ids[start + 1 : end + 1]), config)
        return end - start, None
    tok = first_token(state, out.logits[-1:])
    committed = commit_first(state, tok, out.logits[-1:])
    if not state.finished:
        _feed(state, out.features, torch.tensor(state.token_ids[start + 1 : end] + [tok]), config)
    return end - start, committed


def _feed(state: RequestState, features: torch.Tensor, next_tokens: torch.Tensor,
          config: EngineConfig) -> None:
    """Record the chunk's pairs; drafters that are sure to run catch up now (all of them
    under full evaluation, where the first γ needs every prediction at the first root; a
    fixed drafter). Bandits' drafters stay lazy: each catches up when it is first chosen."""
    if state.dstate is None:
        return
    state.dstate.record(features, next_tokens)
    fixed = state.learner is not None and state.learner.fixed_index is not None
    if state.evaluate:
        state.pending = state.dstate.sync(state.snapshot, config.tree.top_k)
    elif fixed:
        state.dstate.sync(state.snapshot, config.tree.top_k)
