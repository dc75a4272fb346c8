"""One prefill and one speculative round of one request (the algorithm of DESIGN.md section 3)."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import torch
from torch import Tensor

from core.config import EngineConfig
from core.counterfactual import evidence_greedy, evidence_sampling
from core.drafter_pool import DrafterState
from core.drafting import grow_tree
from core.grammar import apply_mask
from core.penalties import apply_penalties, path_counts, token_counts
from core.request import RequestState
from core.sampling import log_probs, process_logits
from core.stats import RoundStats, TokenLogprob
from core.target import Target, TargetOutput, compact_cache
from core.tree import DraftTree, chain_tree
from core.verify import verify_greedy, verify_sampling


def prefill(target: Target, state: RequestState, config: EngineConfig) -> list[int]:
    """Prompt forward (counted as the prefill pass), first token, drafters' first catch-up."""
    ids = torch.tensor(state.token_ids, dtype=torch.long)
    want_prompt = state.params.prompt_logprobs is not None
    out = target.forward(state.cache, ids, torch.arange(ids.numel()), last_logits_only=not want_prompt)
    state.stats.target_forwards += 1
    if want_prompt:
        state.prompt_logprobs = prompt_logprobs(out.logits, state.token_ids, state.params.prompt_logprobs or 0)
    raw = out.logits[-1:]
    last = _penalised(raw, state, chain_tree(state.token_ids[-1:]))
    if state.params.greedy:
        tok = int(last[0].argmax())
    else:
        probs = _processed(last, state).cpu()  # the request's generator lives on the CPU
        tok = int(torch.multinomial(probs[0], 1, generator=state.generator).item())
    state.prefilled = True
    committed = state.commit([tok], _maybe_logprobs(state, raw, [tok]))
    state.stats.prefill_tokens = len(committed)
    state.stats.completion_tokens += len(committed)
    if state.learner is not None and not state.finished:
        fixed = state.learner.fixed_index
        state.dstate = DrafterState(state.snapshot, full=state.evaluate,
                                    drafters=None if fixed is None else [fixed])
        state.dstate.record(out.features, torch.cat([ids[1:], torch.tensor([tok])]))
        if state.evaluate:  # the first γ (at the first root) needs every drafter's prediction now
            state.pending = state.dstate.sync(state.snapshot, config.tree.top_k)
    return committed


def speculative_round(target: Target, state: RequestState, config: EngineConfig) -> tuple[list[int], RoundStats]:
    t0 = time.perf_counter()
    weights = state.weights()
    chosen = state.select(argmax=config.selector.select == "argmax")
    n = len(state.token_ids) - 1  # committed tokens in the target KV cache; the root is next
    tree = _draft(state, chosen, n, config)
    t1 = time.perf_counter()
    out = target.forward(state.cache, tree.tokens, n + tree.depths, tree.mask)
    raw = out.logits
    # From here on (verification and the counterfactual evaluation) out.logits are the
    # penalised target's: each node scored with its own path's counts.
    out = replace(out, logits=_penalised(raw, state, tree))
    probs = None if state.params.greedy else _processed(out.logits, state).cpu()
    if probs is None:
        path, bonus = verify_greedy(tree, out.logits)
    else:
        path, bonus = verify_sampling(tree, probs, state.generator)
    compact_cache(state.cache, n, torch.tensor(path))
    new = [int(t) for t in tree.tokens[path[1:]].tolist()] + [bonus]
    committed = state.commit(new, _maybe_logprobs(state, raw[path], new))
    t2 = time.perf_counter()
    if state.dstate is not None and not state.finished:
        _evaluate(state, out, path, new, probs, chosen, n, config)
    t3 = time.perf_counter()
    drafter = state.snapshot.ids[chosen] if chosen is not None else None
    rs = RoundStats(
        round_index=state.stats.rounds, drafter=drafter, drafted=tree.num_drafted, accepted=len(path) - 1,
        committed=len(committed), draft_s=t1 - t0, verify_s=t2 - t1, evaluate_s=t3 - t2,
        bookkeeping_s=0.0, weights=weights,
    )
    state.stats.record_round(rs)
    state.stats.weights = state.weights()
    return committed, rs


def _draft(state: RequestState, chosen: int | None, n: int, config: EngineConfig) -> DraftTree:
    root = state.token_ids[-1]
    if chosen is None or state.dstate is None:
        return chain_tree([root])
    drafter = state.snapshot.drafters[state.snapshot.ids[chosen]]
    # Lazy catch-up: the chosen drafter consumes the pairs it missed (a no-op under full
    # evaluation, where every drafter caught up in the last evaluation phase).
    state.dstate.sync(state.snapshot, config.tree.top_k, [chosen])
    kv = state.dstate.drafter_kv(chosen)
    allowed = state.matcher.masks_after if state.matcher is not None and config.mask_drafts else None
    return grow_tree(drafter, kv, state.dstate.h_last(chosen), root, n, config.tree, allowed)


def _evaluate(state: RequestState, out: TargetOutput, path: list[int], new: list[int], probs: Tensor | None,
              chosen: int | None, n: int, config: EngineConfig) -> None:
    """Evaluation phase, no target call. The L+1 verified (feature, token) pairs are recorded;
    under full evaluation every drafter catches up on them (one batched pass per group), which
    yields γ_d(m) for m = n..n+L and the learner update. Bandits and fixed drafters only need
    the chosen drafter's realised length: their drafters catch up lazily when they draft."""
    assert state.dstate is not None
    steps = len(new)
    state.dstate.record(out.features[path], torch.tensor(new))
    if state.evaluate:
        _counterfactual(state, out, path, new, probs, chosen, n, config)
    if state.learner is not None and not state.learner.full_information and chosen is not None:
        state.learner.update_bandit(chosen, float(steps), config.tree.depth + 1)


def _counterfactual(state: RequestState, out: TargetOutput, path: list[int], new: list[int],
                    probs: Tensor | None, chosen: int | None, n: int, config: EngineConfig) -> None:
    """Every drafter catches up; the evidence at m = n..n+L (each drafter's top-k at m against
    the target's p̃_m and the realised x_{m+1}) joins the feedback queue, and the losses that
    became known update the learner."""
    assert state.dstate is not None and state.feedback is not None and state.pending is not None
    steps = len(path)
    prev = state.pending  # top-k at position n, from the previous catch-up
    cur = state.dstate.sync(state.snapshot, config.tree.top_k)
    assert cur is not None and cur.indices == prev.indices == list(range(len(state.snapshot)))
    state.pending = cur
    # [N, L+1, k]: the distribution at m comes from the pair ending at m (the previous pass for n)
    ids = torch.cat([prev.topk_ids[:, -1:], cur.topk_ids[:, : steps - 1]], dim=1).cpu().numpy()
    logp = torch.cat([prev.topk_logp[:, -1:], cur.topk_logp[:, : steps - 1]], dim=1).cpu().numpy()
    if probs is None:  # greedy: the realised tokens are the target's argmax
        evidence = evidence_greedy(out.logits[path].argmax(dim=-1).cpu().numpy(), ids, logp)
    else:
        evidence = evidence_sampling(probs[path].cpu().numpy().astype(np.float64), ids, logp, np.array(new))
    state.feedback.open_window(n, chosen, steps)
    if config.selector.feedback == "position":
        for m in range(n + 1, n + steps):
            state.feedback.open_window(m, None, None)
    state.feedback.add_evidence(n, evidence)
    state.learn()


def _penalised(logits: Tensor, state: RequestState, tree: DraftTree) -> Tensor:
    """logits [N+1, V] at the tree nodes -> the penalised (core/penalties.py) and
    grammar-masked (core/grammar.py) target's logits, each node over its own path: the
    committed output plus the draft tokens from the root down to it."""
    pen = state.params.penalties
    if pen.active:
        vocab = logits.shape[-1]
        output = token_counts(state.token_ids[state.prompt_len :], vocab, logits.device)
        prompt_seen = token_counts(state.token_ids[: state.prompt_len], vocab, logits.device) > 0
        logits = apply_penalties(logits, path_counts(output, tree.tokens, tree.mask), prompt_seen, pen)
    if state.matcher is not None:
        logits = apply_mask(logits, state.matcher.tree_masks(tree.tokens, tree.parents))
    return logits


def _processed(logits: Tensor, state: RequestState) -> Tensor:
    p = state.params
    return process_logits(logits, p.temperature, p.top_p, p.top_k)


def _maybe_logprobs(state: RequestState, logits: Tensor, tokens: list[int]) -> list[TokenLogprob] | None:
    """Target log-probabilities of `tokens`, row j of `logits` being the distribution of token j.
    These are the raw model's, before penalties and temperature (vLLM's default
    `logprobs_mode`, raw_logprobs), so they do not depend on how the request samples."""
    k = state.params.logprobs
    if k is None:
        return None
    return _token_logprobs(log_probs(logits), tokens, k)


# Rows of the prompt's [P, V] logits turned into log-probabilities at a time: bounds the
# float32 temporaries of a long echoed prompt (2048 x 49k floats is 400 MB per copy).
PROMPT_LOGPROB_ROWS = 256


def prompt_logprobs(logits: Tensor, prompt: list[int], k: int) -> list[TokenLogprob | None]:
    """Raw target log-probabilities of every prompt token (completions `echo`): None for the
    first, which nothing predicts (as OpenAI reports it); row j of `logits` [P, V] predicts
    prompt token j + 1."""
    out: list[TokenLogprob | None] = [None]
    for start in range(0, len(prompt) - 1, PROMPT_LOGPROB_ROWS):
        rows = logits[start : min(start + PROMPT_LOGPROB_ROWS, len(prompt) - 1)]
        out.extend(_token_logprobs(log_probs(rows), prompt[start + 1 : start + 1 + rows.shape[0]], k))
    return out


def _token_logprobs(lp: Tensor, tokens: list[int], k: int) -> list[TokenLogprob]:
    out = []
    for j, tok in enumerate(tokens):
        top: tuple[tuple[int, float], ...] = ()
        if k > 0:
            vals, idx = torch.topk(lp[j], min(k, lp.shape[-1]))
            top = tuple((int(i), float(v)) for i, v in zip(idx.tolist(), vals.tolist(), strict=False))
        out.append(TokenLogprob(tok, float(lp[j, tok]), top))
    return out
