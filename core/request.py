"""Per-request state: committed tokens, target KV cache, drafter caches, learner, feedback
queue, statistics, RNGs, and the stop rules that decide what a round may commit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from core.config import LEARNER_NAMES, ROUTER_PRIOR, EngineConfig, SamplingParams
from core.drafter_pool import Candidates, DrafterState, PoolSnapshot
from core.errors import PolicyError
from core.feedback import FeedbackQueue, Window
from core.grammar import TokenMatcher
from core.learners import Learner, make_learner
from core.model_free.evidence import RequestLookups
from core.spec_gate import GATED_EVAL_STRETCH
from core.stats import RequestStats, TokenLogprob

ROUTER = "router"


@dataclass(frozen=True)
class Policy:
    kind: str  # "none" | "fixed" | "learner"
    name: str  # learner name or drafter id ("" for none)
    routed: bool = False  # a fixed drafter the prompt router chose (core/router.py)
    # The learner's prior comes from the prompt router; the engine fills in `prior` (one
    # positive weight per drafter of the request's pool snapshot, in its order).
    router_prior: bool = False
    prior: tuple[float, ...] | None = None

    @property
    def label(self) -> str:
        if self.routed:
            return ROUTER
        if self.router_prior:
            return ROUTER_PRIOR
        return {"none": "none", "fixed": f"fixed:{self.name}"}.get(self.kind, self.name)


def parse_policy(policy: str, default: str, drafter_ids: tuple[str, ...],
                 has_router: bool = False) -> Policy:
    """auto -> server default; none; fixed:<drafter id>; a learner name; router (a drafter the
    prompt router picks, fixed for the request: the engine fills in its name);
    normalhedge_router (NormalHedge with the router's probabilities as its prior: the engine
    fills them in). An empty pool means plain decoding for auto, learners and the router
    policies (there is nothing to choose from).
    Raises PolicyError for anything else."""
    p = (policy or "auto").strip()
    if p == "auto":
        p = default if default != "auto" else "normalhedge"
        if p == ROUTER_PRIOR and not has_router:
            p = "normalhedge"  # a server default that needs a router: the pool has none
    if p == "none" or (p in (ROUTER, ROUTER_PRIOR) and not drafter_ids):
        return Policy("none", "")
    if p in (ROUTER, ROUTER_PRIOR) and not has_router:
        raise PolicyError(f"policy {p!r} needs a prompt router and this pool has none "
                          "(python -m demo.router --pool <pool.json> trains one)")
    if p == ROUTER:
        return Policy("fixed", "", routed=True)
    if p == ROUTER_PRIOR:
        return Policy("learner", "normalhedge", router_prior=True)
    if p.startswith("fixed:"):
        if p.removeprefix("fixed:") not in drafter_ids:
            raise PolicyError(f"unknown drafter in policy {p!r}; "
                              f"served drafters: {list(drafter_ids)}")
        return Policy("fixed", p.removeprefix("fixed:"))
    if p in LEARNER_NAMES:
        return Policy("learner", p) if drafter_ids else Policy("none", "")
    raise PolicyError(f"unknown policy {p!r}: use auto, none, fixed:<drafter id>, router, "
                      f"{ROUTER_PRIOR} or one of {list(LEARNER_NAMES)}")


@dataclass(frozen=True)
class DeferredRound:
    """The target's side of one verified round's evidence, kept until the drafters' side is
    computed: the realised tokens' argmax (greedy) or p̃ at each accepted node (sampling)."""

    start: int  # position of the round's root
    target_argmax: Tensor | None  # [L+1] under greedy
    target_probs: Tensor | None  # [L+1, V] when sampling
    new: tuple[int, ...]  # the L+1 verified tokens


@dataclass
class RequestState:
    request_id: str
    params: SamplingParams
    policy: Policy
    snapshot: PoolSnapshot
    token_ids: list[int]
    prompt_len: int
    cache: Any
    stats: RequestStats
    generator: torch.Generator
    rng: np.random.Generator
    eos_ids: frozenset[int]
    learner: Learner | None = None
    feedback: FeedbackQueue | None = None
    session: str | None = None  # the learner is kept for this session's next request
    dstate: DrafterState | None = None
    # Every drafter is evaluated each round (counterfactual learners, or evaluate_all); else
    # drafters catch up lazily and no γ is computed.
    evaluate: bool = False
    pending: Candidates | None = None  # every drafter's top-k at the next root (evaluate only)
    # Rounds verified since the last evaluation (SelectorConfig.eval_every): their start and the
    # target's side of the evidence, scored together by the next evaluation's catch-up.
    deferred: list[DeferredRound] = field(default_factory=list)
    eval_every: int = 1
    prefilled: bool = False
    finished: bool = False
    finish_reason: str | None = None
    _logprobs: list[TokenLogprob] = field(default_factory=list)
    # Set by the prefill when params.prompt_logprobs asks for it; handed out once.
    prompt_logprobs: list[TokenLogprob | None] | None = None
    matcher: TokenMatcher | None = None  # the grammar of a structured output (core/grammar.py)
    # The model-free members' lookups over this request's tokens (core/model_free/evidence.py).
    lookups: RequestLookups | None = None

    @staticmethod
    def create(request_id: str, prompt: list[int], params: SamplingParams, policy: Policy,
               snapshot: PoolSnapshot, config: EngineConfig, cache: Any = None,
               eos_ids: tuple[int, ...] = ()) -> RequestState:
        seed = params.seed if params.seed is not None else int(torch.randint(0, 2**62, ()).item())
        gen = torch.Generator().manual_seed(seed)
        n = len(snapshot)
        learner = feedback = None
        if policy.kind != "none" and n:
            sel = config.selector
            fixed = snapshot.index(policy.name) if policy.kind == "fixed" else None
            name = "fixed" if policy.kind == "fixed" else policy.name
            learner = make_learner(name, n, hedge_eta=sel.hedge_eta,
                                   max_len=max_len(snapshot, config), fixed_index=fixed,
                                   prior=policy.prior)
            if learner.counterfactual or config.evaluate_all:
                feedback = _feedback_queue(snapshot, config)
        stats = RequestStats(policy=policy.label, drafter_ids=snapshot.ids if learner else (),
                             prompt_tokens=len(prompt))
        return RequestState(request_id, params, policy, snapshot, list(prompt), len(prompt), cache,
                            stats, gen, np.random.default_rng(seed + 1), frozenset(eos_ids),
                            learner, feedback, evaluate=feedback is not None,
                            eval_every=config.selector.eval_every)

    def evaluation_due(self, gated: bool = False) -> bool:
        """This round's catch-up evaluates every drafter: every eval_every-th round, or every
        GATED_EVAL_STRETCH times as many in a round the speculation gate ran plain."""
        period = self.eval_every * (GATED_EVAL_STRETCH if gated else 1)
        return self.evaluate and len(self.deferred) + 1 >= period

    @property
    def generated(self) -> int:
        return len(self.token_ids) - self.prompt_len

    def select(self, argmax: bool) -> int | None:
        """The round's drafter, among those awake (a model-free member with no guess at the
        root sleeps); None when the request drafts nothing or every member sleeps."""
        if self.learner is None:
            return None
        awake = self.awake()
        if awake is not None and not awake.any():
            return None
        return self.learner.select(self.rng, argmax=argmax, awake=awake)

    def awake(self) -> npt.NDArray[np.bool_] | None:
        """Which members can draft from the root; None when all can (no model-free member)."""
        if self.lookups is None or not self.lookups.lookups:
            return None
        mask = np.ones(len(self.snapshot), dtype=bool)
        for i, up in self.lookups.awake().items():
            mask[i] = up
        return mask

    def weights(self) -> dict[str, float]:
        if self.learner is None:
            return {}
        return {d: float(w)
                for d, w in zip(self.snapshot.ids, self.learner.distribution(), strict=False)}

    def commit(self, tokens: list[int], logprobs: list[TokenLogprob] | None = None) -> list[int]:
        """Append tokens up to the first stop token (excluded) or the token budget."""
        out: list[int] = []
        stops = set(self.params.stop_token_ids) | (set() if self.params.ignore_eos
                                                   else set(self.eos_ids))
        for j, tok in enumerate(tokens):
            if tok in stops:
                self.finished, self.finish_reason = True, "stop"
                break
            out.append(tok)
            self.token_ids.append(tok)
            if logprobs is not None:
                self._logprobs.append(logprobs[j])
            if self.generated >= self.params.max_new_tokens:
                self.finished, self.finish_reason = True, "length"
                break
        if self.matcher is not None:
            self.matcher.commit(out)
        if self.finished and self.feedback is not None:
            self.record(self.feedback.close())  # statistics only: censored windows are biased low
        return out

    def learn(self) -> None:
        """Apply the loss vectors that became known, in order (counterfactual learners), then
        record the completed windows' ÂL estimates for the statistics."""
        assert self.feedback is not None
        for w in self.feedback.pop_losses():
            if self.learner is not None and self.learner.counterfactual and w.awake.any():
                self.learner.update(self.learner.sleeping_losses(w.loss, w.awake))
        self.record(self.feedback.pop_completed())

    def record(self, windows: list[Window]) -> None:
        """Statistics of one window per real round (position windows only feed the learner)."""
        for w in windows:
            if w.realised is None:
                continue
            chosen = self.snapshot.ids[w.chosen] if w.chosen is not None else None
            est = {d: float(v) for d, v in zip(self.snapshot.ids, w.est_len, strict=False)}
            self.stats.record_window(est, chosen, w.realised)

    def take_logprobs(self) -> list[TokenLogprob] | None:
        if self.params.logprobs is None:
            return None
        out, self._logprobs = self._logprobs, []
        return out


def max_len(snapshot: PoolSnapshot, config: EngineConfig) -> int:
    """The most tokens a round can commit: the deepest member's tree plus the bonus token."""
    return max(snapshot.depth(i, config.tree.depth) for i in range(len(snapshot))) + 1


def _feedback_queue(snapshot: PoolSnapshot, config: EngineConfig) -> FeedbackQueue:
    """Windows as deep as the pool's deepest tree; each member credited with its own depth
    and tree size (a model-free chain may be longer than the EAGLE tree)."""
    tree = config.tree
    depths = [snapshot.depth(i, tree.depth) for i in range(len(snapshot))]
    totals = np.array([snapshot.free[d].total_tokens if d in snapshot.free
                       else tree.total_tokens for d in snapshot.ids])
    return FeedbackQueue(len(snapshot), max(depths), loss=config.selector.loss,
                         estimator=config.selector.estimator, total_tokens=totals,
                         depths=depths)
