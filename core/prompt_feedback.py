"""Counterfactual feedback from the prompt's tail, before the first round
(SelectorConfig.prompt_windows).

A per-request learner starts uniform and its first losses arrive only after a few rounds (a
window needs K verified positions, and on a CPU the evaluation runs every 4th round), so a
short request spends a large share of its rounds on drafters picked at random. The prompt
itself is text the target has just read: at its last W positions the prefill already holds
the target's hidden states (its next-token distribution is one LM-head row each) and every
drafter's top-k (the drafters caught up on the prompt in the same step). Scoring those W
positions exactly as verified positions are scored (core/counterfactual.py) gives each drafter
W windows of evidence on the request's own domain before it drafts a single token, at the
cost of W head rows and no target pass.

Prompt windows are position windows (no round, not in the statistics): they only feed the
learner. The target side follows the request's decoding: the argmax under greedy, p̃ (raw
logits with temperature, top-k, top-p) when sampling, the realised next token being the
prompt's own. A window whose K positions reach past the prompt completes with the first
evaluated rounds, as any window does.
"""

from __future__ import annotations

import numpy as np

from core.config import EngineConfig
from core.counterfactual import evidence_greedy, evidence_sampling
from core.request import RequestState
from core.sampling import process_logits
from core.target import TargetOutput


def prompt_tail(config: EngineConfig) -> int:
    """Hidden rows a prompt's last pass keeps: the last (first token) plus the windows'."""
    return config.selector.prompt_windows + 1


def learn_from_prompt(state: RequestState, out: TargetOutput, chunk_start: int,
                      config: EngineConfig) -> None:
    """After the prompt's last pass and the drafters' catch-up on it (state.pending holds
    their top-k at the chunk's positions): open one window at each of the prompt's last W
    positions, add their evidence and let the learner take the losses already known."""
    w = config.selector.prompt_windows
    cands = state.pending
    if (w == 0 or not state.evaluate or state.feedback is None or cands is None
            or state.finished):
        return
    first_root = len(state.token_ids) - 1  # the first generated token's position
    first_row = first_root - len(out)  # position of out's row 0
    lo = max(chunk_start + 1, first_row, first_root - w)
    if lo >= first_root:
        return
    # The distribution at position m: target row m; the drafters' pair ending at m, which is
    # the chunk's pair m - chunk_start - 1.
    raw = out.rows(list(range(lo - first_row, first_root - first_row)))
    pairs = slice(lo - chunk_start - 1, first_root - chunk_start - 1)
    ids = cands.topk_ids[:, pairs].cpu().numpy()
    logp = cands.topk_logp[:, pairs].cpu().numpy()
    p = state.params
    if p.greedy:
        evidence = evidence_greedy(raw.argmax(dim=-1).cpu().numpy(), ids, logp)
    else:
        probs = process_logits(raw, p.temperature, p.top_p, p.top_k)
        realised = np.array(state.token_ids[lo + 1 : first_root + 1])
        evidence = evidence_sampling(probs.cpu().numpy().astype(np.float64), ids, logp,
                                     realised)
    for m in range(lo, first_root):
        state.feedback.open_window(m, None, None)
    state.feedback.add_evidence(lo, evidence)
    state.learn()
