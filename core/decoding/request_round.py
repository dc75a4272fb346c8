"""The pieces of one request's round (the algorithm of DESIGN.md section 3) that a step
(core/batching/step.py) runs for each of its rows: the first token after the prefill, the
drafters' and lookups' start, what drafting a member's tree reads of the request (its member
group drafts it: core/speculation/members.py) and the hybrid tree, verification, commit, the
drafters' catch-up and the learner's update from the counterfactual evidence, and the round's
statistics."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from core.config import EngineConfig
from core.decoding.node_logits import NodeLogits, penalise
from core.decoding.pool_evidence import evidence_ready, pool_evidence
from core.decoding.request import DeferredRound, RequestState, max_len
from core.model.target import TargetOutput
from core.selection.arm_costs import Start
from core.speculation.drafter_pool import Candidates, DrafterState
from core.speculation.members import DraftOrder, MemberStart, TargetSide, VerifiedPairs
from core.speculation.model_free.base import OutputGrammar
from core.speculation.sampling import log_probs, process_logits
from core.speculation.tree import DraftTree, chain_tree, merge_trees
from core.speculation.verify import verify_greedy, verify_sampling
from core.stats import RoundStats, TokenLogprob


def first_token(state: RequestState, raw: Tensor) -> int:
    """The first generated token from the prompt's last logits raw [1, V]."""
    last = penalise(raw, state, chain_tree(state.token_ids[-1:]), [0])
    if state.params.greedy:
        return int(last[0].argmax())
    return state.noise.sample(_processed(last, state)[0], len(state.token_ids))


def commit_first(state: RequestState, tok: int, raw: Tensor) -> list[int]:
    state.prefilled = True
    committed = state.commit([tok], _maybe_logprobs(state, raw, [tok]))
    state.stats.prefill_tokens = len(committed)
    state.stats.completion_tokens += len(committed)
    return committed


def start_drafters(state: RequestState) -> None:
    """The request's drafter caches: every drafter under full evaluation, else lazily caught up.
    Under the time loss a request starts with every member awake, its model-free members alone
    (the EAGLE-3 drafters asleep, with no prompt catch-up) or its pool asleep, as the last
    requests at this step size fared at each level (StepCosts.start); never with the EAGLE-3
    drafters awake where plain decoding dominates them (ArmPolicy.drafters_dominated)."""
    arms = state.arms
    assert arms is not None
    fixed = arms.learner.fixed_index
    state.dstate = DrafterState(state.snapshot, full=state.evaluate,
                                drafters=None if fixed is None else [fixed])
    if state.grammar_trail is not None:
        state.dstate.grammar = state.grammar_trail
    if not state.evaluate or not state.plain_arm:
        return
    # What the learner saves a request does not always pay for its evaluation and prompt
    # catch-up (on two cores from about 4 streams on; at one stream a lookup's rounds save
    # several times what they cost, the eight EAGLE-3 drafters' catch-up on a long prompt not).
    start = arms.choose_start()
    if start is Start.ASLEEP:
        state.sleep_pool()
    elif start is Start.MODEL_FREE and state.members.fed:
        state.sleep()


def start_lookups(state: RequestState, config: EngineConfig) -> None:
    """The members that start once the first token is committed (MemberGroup.start: the
    model-free members' lookups over the prompt and first token); under full evaluation they
    record their guesses from the prompt windows' first position on
    (core/decoding/prompt_feedback.py reads those, the rounds the rest)."""
    if state.learner is None:
        return
    first_root = len(state.token_ids) - 1
    record_from = first_root - config.selector.prompt_windows if state.evaluate else first_root
    grammar = (OutputGrammar(state.matcher, len(state.token_ids))
               if state.matcher is not None else None)
    state.start_members(MemberStart(state.token_ids, record_from, record=state.evaluate,
                                    paused=state.asleep, grammar=grammar))


def logit_rows(tree: DraftTree, visited: bool) -> list[int]:
    """The nodes whose logits to compute right after the tree pass, in one head call: only the
    root (`visited`: the walk computes the rest as it goes), or every node."""
    return [0] if visited else list(range(tree.tokens.numel()))


@dataclass
class Verified:
    """One request's verified tree."""

    tree: DraftTree
    out: TargetOutput  # features of every node
    rows: NodeLogits  # the target's distributions at the nodes (those of the path computed)
    path: list[int]  # accepted nodes, the root first
    bonus: int

    @property
    def sampled(self) -> bool:
        return not self.rows.greedy

    @property
    def new(self) -> list[int]:
        """The accepted draft tokens plus the bonus token."""
        return [int(t) for t in self.tree.tokens[self.path[1:]].tolist()] + [self.bonus]


def verify_tree(state: RequestState, tree: DraftTree, out: TargetOutput) -> Verified:
    """Lossless acceptance of `tree` against the target pass `out` (core/speculation/verify.py).
    From here on (verification and the counterfactual evaluation) the logits are the penalised
    target's: each node scored with its own path's counts. The walk reads only the nodes it visits,
    so only their logits are computed (core/decoding/node_logits.py)."""
    rows = NodeLogits(out, state, tree)
    if state.params.greedy:
        path, bonus = verify_greedy(tree, rows)
    else:
        path, bonus = verify_sampling(tree, rows, state.noise, len(state.token_ids))
    return Verified(tree, out, rows, path, bonus)


def commit_verified(state: RequestState, v: Verified) -> list[int]:
    new = v.new
    raw = v.rows.raw(v.path) if state.params.logprobs is not None else None
    return state.commit(new, _maybe_logprobs(state, raw, new))


def record_pairs(state: RequestState, v: Verified) -> bool:
    """Hand the L+1 verified (feature, token) pairs to the members (MemberGroup.record: nothing
    runs yet); False when the request has no members to feed (plain decoding, or finished)."""
    if state.dstate is None or state.finished:
        return False
    state.feed(VerifiedPairs(v.out.features[v.path], torch.tensor(v.new), state.token_ids))
    return True


def learn_from(state: RequestState, v: Verified, chosen: int | None, n: int, config: EngineConfig,
               cur: Candidates | None, due: bool = False) -> None:
    """Evaluation phase, no target call. Under full evaluation every drafter has caught up on
    the recorded pairs (`cur`, one batched pass per group), which yields γ_d(m) for m = n..n+L
    and the learner update. Bandits and fixed drafters only need the chosen drafter's realised
    length: their drafters catch up lazily when they draft. `due`: this round's evaluation was
    due (with the EAGLE-3 drafters asleep, no catch-up ran: `cur` is None)."""
    if state.evaluate:
        _counterfactual(state, v, chosen, n, cur, due)
    if state.learner is not None and not state.learner.full_information and chosen is not None:
        state.learner.update_bandit(chosen, float(len(v.new)), max_len(state.members, config))


def round_stats(state: RequestState, v: Verified, chosen: int | None, weights: dict[str, float],
                committed: int, times: tuple[float, float, float],
                head_s: float = 0.0) -> RoundStats:
    """Record the round in the request's statistics. times = (draft, verify, evaluate) seconds;
    head_s: the part of verify spent on the LM head and the acceptance walk."""
    drafter = state.snapshot.ids[chosen] if chosen is not None else None
    rs = RoundStats(
        round_index=state.stats.rounds + state.stats.plain_rounds, drafter=drafter,
        drafted=v.tree.num_drafted, accepted=len(v.path) - 1, committed=committed,
        draft_s=times[0], verify_s=times[1],
        evaluate_s=times[2], bookkeeping_s=0.0, weights=weights, head_s=head_s,
        # Nothing drafted is a plain round whatever the policy (core/__init__.py): `none`, a
        # learner's plain arm, a cost-model probe, a fixed drafter that had no guess.
        plain=chosen is None,
    )
    state.stats.record_round(rs)
    state.stats.weights = state.weights()
    return rs


def hybrid_tree(state: RequestState, tree: DraftTree, chosen: int,
                config: EngineConfig) -> DraftTree:
    """A fed member's (EAGLE-3) tree with the `config.hybrid` member's tree grafted at its root
    when that member is a lookup's with a guess there (EngineConfig.hybrid); the tree itself
    otherwise."""
    snapshot = state.snapshot
    graft = snapshot.index(config.hybrid) if config.hybrid in snapshot.ids else None
    if graft is None or state.lookups is None:
        return tree
    group = state.members.group_of(graft)
    if group.fed or not state.members.group_of(chosen).fed:
        return tree
    return merge_trees(tree, group.draft([draft_order(state, graft)], config)[0])


def draft_order(state: RequestState, chosen: int) -> DraftOrder:
    """What drafting member `chosen`'s tree reads of the request: its root, the grammar its
    output follows, and the tokens it may still commit (no deeper tree can pay)."""
    allowed = state.matcher.masks_after if state.matcher is not None else None
    remaining = max(1, state.params.max_new_tokens - state.generated)
    return DraftOrder(chosen, state.snapshot, state.member_states(), state.token_ids[-1],
                      len(state.token_ids) - 1, remaining, allowed)


def _counterfactual(state: RequestState, v: Verified, chosen: int | None, n: int,
                    cur: Candidates | None, due: bool) -> None:
    """The round's windows open now; its evidence (each drafter's top-k at m = n..n+L against
    the target's p̃_m and the realised x_{m+1}) is scored when every drafter has caught up:
    this round (`cur`, the drafters' top-k over every pair since the last evaluation), or a
    later one (SelectorConfig.eval_every), then the losses that became known update the
    learner."""
    assert state.dstate is not None and state.feedback is not None
    arms = state.arms
    assert arms is not None
    arms.count_round(state.drafters_asleep)
    if arms.pool_asleep:  # the whole pool: nothing to score
        state.stats.asleep_rounds += 1
        return
    steps = len(v.path)
    # A round run plain (nothing chosen) scores the drafters at its root like any position; it
    # is a round of the plain arm under the time loss, else it has no acceptance to report.
    plain_round = chosen is None and state.plain_arm
    costs = arms.arm_costs() if arms.plain_arm else None  # this step's (size)
    state.feedback.open_window(n, chosen, steps if chosen is not None or plain_round else None,
                               costs)
    state.deferred.append(_target_side(v, n))
    state.stats.asleep_rounds += state.drafters_asleep
    # The distribution at the first root comes from the previous catch-up (`pending`), the
    # others from this one's pairs ending at them.
    topk = tuple(c for c in (state.pending, cur) if c is not None) if cur is not None else ()
    states = state.member_states(topk, due)
    if not evidence_ready(state, states):
        return
    rounds, state.deferred = state.deferred, []
    state.pending = cur
    pairs = sum(len(r.new) for r in rounds)
    start = rounds[0].start
    if rounds[0].target_probs is None:  # greedy: the realised tokens are the target's argmax
        argmax = torch.cat([r.target_argmax for r in rounds]).cpu().numpy()  # type: ignore[misc]
        target = TargetSide(argmax, None, None)
    else:
        probs = torch.cat([r.target_probs for r in rounds])  # type: ignore[misc]
        new = np.array([t for r in rounds for t in r.new])
        target = TargetSide(None, probs.cpu().numpy().astype(np.float64), new)
    pool_sleeping = arms.pool_should_sleep(state.drafters_asleep)
    sleeping = pool_sleeping or arms.should_sleep(state.drafters_fed)
    assert cur is None or cur.topk_ids.shape[1] == pairs, (cur.topk_ids.shape, pairs)
    pool = pool_evidence(state, states, start, pairs, target)
    state.feedback.add_evidence(start, pool.evidence, pool.trees)
    _mark_asleep(state, start + pairs, pool_sleeping, sleeping)
    state.learn()
    if pool_sleeping:
        state.sleep_pool()
    elif sleeping and state.members.fed:
        state.sleep()


def _mark_asleep(state: RequestState, end: int, pool: bool, fed: bool) -> None:
    """The windows that the members going to sleep (all of them, or the fed ones) could not
    finish (their evidence ends at `end`) have them asleep: a member of depth D sees no window
    rooted past end - D through."""
    assert state.feedback is not None
    going = [i for i in range(len(state.snapshot)) if pool or (fed and i in state.members.fed)]
    for depth in sorted({int(state.feedback.depths[i]) for i in going}):
        members = [i for i in going if int(state.feedback.depths[i]) == depth]
        state.feedback.asleep_from(members, end - depth + 1)


def _target_side(v: Verified, n: int) -> DeferredRound:
    if not v.sampled:
        return DeferredRound(n, v.rows.penalised(v.path).argmax(dim=-1), None, tuple(v.new))
    return DeferredRound(n, None, v.rows.probs(v.path), tuple(v.new))


def _processed(logits: Tensor, state: RequestState) -> Tensor:
    p = state.params
    return process_logits(logits, p.temperature, p.top_p, p.top_k)


def _maybe_logprobs(state: RequestState, logits: Tensor | None,
                    tokens: list[int]) -> list[TokenLogprob] | None:
    """Target log-probabilities of `tokens`, row j of `logits` being the distribution of token j.
    These are the raw model's, before penalties and temperature (vLLM's default
    `logprobs_mode`, raw_logprobs), so they do not depend on how the request samples."""
    k = state.params.logprobs
    if k is None or logits is None:
        return None
    return _token_logprobs(log_probs(logits), tokens, k)


# Rows of the prompt's [P, V] logits turned into log-probabilities at a time: bounds the
# float32 temporaries of a long echoed prompt (2048 x 49k floats is 400 MB per copy).
PROMPT_LOGPROB_ROWS = 256


def prompt_logprobs(logits: Tensor, prompt: list[int], k: int,
                    start: int = 0) -> list[TokenLogprob | None]:
    """Raw target log-probabilities of the prompt tokens (completions `echo`) that the rows of
    `logits` [T, V] predict: row j is position start + j and predicts prompt token start + j + 1.
    From the first chunk (start 0) the list opens with None for the first token, which nothing
    predicts (as OpenAI reports it)."""
    out: list[TokenLogprob | None] = [None] if start == 0 else []
    rows_used = min(logits.shape[0], len(prompt) - 1 - start)
    for lo in range(0, rows_used, PROMPT_LOGPROB_ROWS):
        rows = logits[lo : min(lo + PROMPT_LOGPROB_ROWS, rows_used)]
        first = start + lo + 1
        out.extend(_token_logprobs(log_probs(rows), prompt[first : first + rows.shape[0]], k))
    return out


def _token_logprobs(lp: Tensor, tokens: list[int], k: int) -> list[TokenLogprob]:
    out = []
    for j, tok in enumerate(tokens):
        top: tuple[tuple[int, float], ...] = ()
        if k > 0:
            vals, idx = torch.topk(lp[j], min(k, lp.shape[-1]))
            top = tuple((int(i), float(v))
                        for i, v in zip(idx.tolist(), vals.tolist(), strict=False))
        out.append(TokenLogprob(tok, float(lp[j, tok]), top))
    return out
