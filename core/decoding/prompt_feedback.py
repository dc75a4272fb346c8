"""Counterfactual feedback from the prompt's tail, before the first round
(SelectorConfig.prompt_windows).

A per-request learner starts uniform and its first losses arrive only after a few rounds (a
window needs K verified positions, and on a CPU the evaluation runs every 4th round), so a
short request spends a large share of its rounds on drafters picked at random. The prompt
itself is text the target has just read: at its last W positions the prefill already holds
the target's hidden states (its next-token distribution is one LM-head row each) and every
drafter's top-k (the drafters caught up on the prompt in the same step). Scoring those W
positions exactly as verified positions are scored (core/selection/counterfactual.py) gives each
drafter W windows of evidence on the request's own domain before it drafts a single token, at the
cost of W head rows and no target pass.

The target side follows the request's decoding: the argmax under greedy, p̃ (raw logits with
temperature, top-k, top-p) when sampling, the realised next token being the prompt's own.

How the evidence reaches the learner (SelectorConfig.prompt_evidence):
  "prior" (default): the windows that lie wholly inside the prompt are judged apart; the
      distribution a fresh NormalHedge reaches on their losses, mixed with the learner's
      current prior (PROMPT_PRIOR_MIX of it: 0.9), becomes its prior (`prompt_prior`), its
      regrets untouched. The
      prompt is evidence about the request, not about the answer: a code snippet asked to be
      explained in prose favours the code drafter, whose drafts then miss. As losses, 40-odd
      prompt windows gave the code drafter regrets that NormalHedge's zero weight for negative
      regret turned into a lock-out of the answer's best drafter for many rounds. As a prior
      the regrets start at zero, so an expert whose regret turns negative gets no weight
      whatever its prior, and the answer's first windows move the weights at once; every π_i
      keeps at least a tenth of its former value, so a misleading prompt costs at most ln 10
      inside the root of the regret bound, sqrt(T · ln(1/π_i)). Learners with no prior (the others
      of LEARNER_NAMES) start as they would without prompt evidence.
  "losses": position windows in the request's feedback queue (no round, not in the
      statistics), their losses fed to the learner at full weight; a window whose K positions
      reach past the prompt completes with the first evaluated rounds.
Measured side by side on a workload whose prompt's domain differs from the answer's, and on
the held-out mix: bench/results/prompt_windows.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from core.config import EngineConfig
from core.decoding.pool_evidence import evidence_ready, pool_evidence
from core.decoding.request import RequestState
from core.model.target import TargetOutput
from core.selection.counterfactual import Evidence
from core.selection.feedback import FeedbackQueue, RankTree, WindowLoss
from core.selection.learners import NormalHedge
from core.speculation.members import TargetSide
from core.speculation.sampling import process_logits

# The share of the prompt's evidence in the new prior; the rest is the learner's prior before.
# By measurement (bench/results/prompt_windows.md, 14 prompts a workload, x the per-request
# oracle's MAT, held-out / mismatched): 0.9 gave 0.958 / 0.946, 0.5 gave 0.944 / 0.952, the
# losses form 0.976 / 0.927, no prompt evidence 0.928 / 0.916: 0.9 has the best mean and worst
# case (one request moves a row by about 0.01, so 0.9 and 0.5 are close).
PROMPT_PRIOR_MIX = 0.9


def prompt_tail(config: EngineConfig) -> int:
    """Hidden rows a prompt's last pass keeps: the last (first token) plus the windows'."""
    return config.selector.prompt_windows + 1


def learn_from_prompt(state: RequestState, out: TargetOutput, chunk_start: int,
                      config: EngineConfig) -> None:
    """After the prompt's last pass and the drafters' catch-up on it (state.pending holds
    their top-k at the chunk's positions): open one window at each of the prompt's last W
    positions, add their evidence and let the learner take the losses already known."""
    w = config.selector.prompt_windows
    states = state.member_states(() if state.pending is None else (state.pending,))
    if (w == 0 or not state.evaluate or state.feedback is None or state.finished
            or state.asleep or not evidence_ready(state, states)):
        return
    first_root = len(state.token_ids) - 1  # the first generated token's position
    first_row = first_root - len(out)  # position of out's row 0
    lo = max(chunk_start + 1, first_row, first_root - w)
    if lo >= first_root:
        return
    raw = out.rows(list(range(lo - first_row, first_root - first_row)))
    p = state.params
    if p.greedy:
        target = TargetSide(raw.argmax(dim=-1).cpu().numpy(), None, None)
    else:
        probs = process_logits(raw, p.temperature, p.top_p, p.top_k)
        target = TargetSide(None, probs.cpu().numpy().astype(np.float64),
                            np.array(state.token_ids[lo + 1 : first_root + 1]))
    # The distribution at position m: target row m; the drafters' pair ending at m.
    pool = pool_evidence(state, states, lo, first_root - lo, target)
    if config.selector.prompt_evidence == "losses":
        for m in range(lo, first_root):
            state.feedback.open_window(m, None, None)
        state.feedback.add_evidence(lo, pool.evidence, pool.trees)
        state.learn()
    elif state.arms is not None and isinstance(state.arms.learner, NormalHedge):
        arms, learner = state.arms, state.arms.learner
        windows = prompt_losses(pool.evidence, state.feedback, pool.trees)
        for window in windows:
            arms.track(window)
        losses = [arms.arm_losses(window) for window in windows]
        if losses:
            learner.set_prior(prompt_prior(losses, learner.prior))


def prompt_losses(evidence: Evidence, like: FeedbackQueue,
                  trees: Mapping[int, Sequence[RankTree]] | None = None) -> list[WindowLoss]:
    """The losses of the windows that lie wholly inside the evidence's positions, judged as
    `like` judges windows (its loss, estimator, depths and tree sizes)."""
    depth = like.depth
    queue = FeedbackQueue(like.num_drafters, depth, like.loss, like.estimator, like.total_tokens,
                          like.depths.tolist())
    for m in range(evidence.positions - depth + 1):
        queue.open_window(m, None, None)
    queue.add_evidence(0, evidence, trees)
    return queue.pop_losses()


def prompt_prior(losses: Sequence[npt.ArrayLike | WindowLoss],
                 prior: npt.ArrayLike) -> list[float]:
    """PROMPT_PRIOR_MIX x the distribution a fresh NormalHedge reaches on `losses` (a window's
    asleep drafters charged as core/selection/learners.py charges them), plus the rest x `prior`
    (every expert keeps at least (1 - PROMPT_PRIOR_MIX) of its prior)."""
    before = np.asarray(prior, dtype=np.float64)
    judge = NormalHedge(before.shape[0])
    for loss in losses:
        if not isinstance(loss, WindowLoss):
            judge.update(loss)
        elif loss.awake.any():
            judge.update(judge.sleeping_losses(loss.loss, loss.awake))
    mixed = PROMPT_PRIOR_MIX * judge.distribution() + (1.0 - PROMPT_PRIOR_MIX) * before
    return [float(x) for x in mixed / mixed.sum()]
