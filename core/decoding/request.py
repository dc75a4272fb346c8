"""Per-request state: committed tokens, drafter caches, lookups, feedback queue, statistics,
RNGs, and the stop rules that decide what a round may commit; it carries out what its arm
policy (core/selection/arm_policy.py: the learner and the decisions taken from it) decides.
Its target KV cache is a slot of the scheduler's (core/batching/scheduler.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from core.config import (
    COUNTERFACTUAL_LEARNERS,
    LEARNER_NAMES,
    ROUTER_PRIOR,
    EngineConfig,
    SamplingParams,
)
from core.errors import PolicyError
from core.selection.arm_costs import StepCosts
from core.selection.arm_policy import ArmPolicy, Members
from core.selection.feedback import FeedbackQueue, Window, WindowLoss
from core.selection.learners import Learner, make_learner
from core.speculation.drafter_pool import Candidates, DrafterState, PoolSnapshot
from core.speculation.grammar import GrammarTrail, TokenMatcher
from core.speculation.members import MemberStart, MemberStates, VerifiedPairs
from core.speculation.model_free.lookups import RequestLookups
from core.speculation.pool_members import PoolMembers
from core.speculation.sampling import PositionNoise
from core.stats import RequestStats, TokenLogprob

ROUTER = "router"
# The plain-decoding arm's name where arms are listed by id (learner sessions, statistics); not
# a valid drafter id (the registry's ids are slugs).
PLAIN_ARM = "<plain>"


@dataclass(frozen=True)
class Policy:
    kind: str  # "none" | "fixed" | "learner"
    name: str  # learner name or drafter id ("" for none)
    routed: bool = False  # a fixed drafter the prompt router chose (core/selection/router.py)
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
    stats: RequestStats
    noise: PositionNoise  # what sampling draws with, keyed by output position
    rng: np.random.Generator
    eos_ids: frozenset[int]
    # The learner and every decision taken from it (core/selection/arm_policy.py); None when
    # the request drafts nothing.
    arms: ArmPolicy | None = None
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
    # The grammar of a structured output (core/speculation/grammar.py).
    matcher: TokenMatcher | None = None
    # What that grammar allowed at each committed position, for the evaluation's catch-up.
    grammar_trail: GrammarTrail | None = None
    # The model-free members' lookups over this request's tokens
    # (core/speculation/model_free/lookups.py).
    lookups: RequestLookups | None = None
    # The snapshot's members by kind (core/speculation/pool_members.py).
    members: PoolMembers = field(init=False)

    def __post_init__(self) -> None:
        self.members = PoolMembers(self.snapshot)

    @staticmethod
    def create(request_id: str, prompt: list[int], params: SamplingParams, policy: Policy,
               snapshot: PoolSnapshot, config: EngineConfig,
               eos_ids: tuple[int, ...] = (), costs: StepCosts | None = None) -> RequestState:
        seed = params.seed if params.seed is not None else int(torch.randint(0, 2**62, ()).item())
        arms = feedback = None
        if policy.kind != "none" and len(snapshot):
            arms = _arm_policy(policy, snapshot, config, costs)
            if arms.learner.counterfactual or config.evaluate_all:
                feedback = _feedback_queue(snapshot, config)
        stats = RequestStats(policy=policy.label, drafter_ids=snapshot.ids if arms else (),
                             prompt_tokens=len(prompt),
                             time_loss=arms is not None and arms.plain_arm)
        return RequestState(request_id, params, policy, snapshot, list(prompt), len(prompt),
                            stats, PositionNoise(seed), np.random.default_rng(seed + 1),
                            frozenset(eos_ids), arms, feedback, evaluate=feedback is not None,
                            eval_every=config.selector.eval_every)

    @property
    def learner(self) -> Learner | None:
        return self.arms.learner if self.arms is not None else None

    @property
    def plain_arm(self) -> bool:
        """Plain decoding is the learner's last arm (the time loss)."""
        return self.arms is not None and self.arms.plain_arm

    @property
    def asleep(self) -> bool:
        """The whole pool sleeps: rounds run plain and nothing is evaluated."""
        return self.arms is not None and self.arms.pool_asleep

    @property
    def arm_ids(self) -> tuple[str, ...]:
        """The learner's arms by id, in its order: the pool's members, then plain decoding."""
        return arm_ids(self.snapshot.ids, self.plain_arm)

    def evaluation_due(self) -> bool:
        """This round's catch-up evaluates every drafter: every eval_every-th round, plain
        rounds too. A learner must see its drafters' losses as often when it decodes plain (the
        speculation gate's plain rounds, which issue 40 retired, scored them four times less
        often; under the time loss plain rounds then looked cheaper and the learner kept
        decoding plain: 26-50% of one- and two-stream rounds against 3-30% without,
        bench/results/time_loss_held_out.md)."""
        return self.evaluate and len(self.deferred) + 1 >= self.eval_every

    @property
    def generated(self) -> int:
        return len(self.token_ids) - self.prompt_len

    def select(self) -> int | None:
        """The round's drafter, among those awake (a model-free member with no guess at the
        root sleeps); None when the request drafts nothing or every member sleeps."""
        if self.arms is None:
            return None
        return self.arms.choose(self.rng, self.awake())

    def awake(self) -> npt.NDArray[np.bool_] | None:
        """Which members can draft from the root (MemberGroup.awake); None when all can."""
        if self.asleep:
            return np.zeros(len(self.snapshot), dtype=bool)
        states = self.member_states()
        groups = [g.awake(states) for g in self.members.groups]
        if all(up is None for up in groups):
            return None
        mask = np.ones(len(self.snapshot), dtype=bool)
        for up in groups:
            for i, on in (up or {}).items():
                mask[i] = on
        return mask

    def member_states(self, topk: tuple[Candidates, ...] = (), due: bool = True) -> MemberStates:
        """The request's state of its members, as their groups read it (`topk`: the EAGLE-3
        catch-ups covering the positions being scored)."""
        return MemberStates(self.dstate, self.lookups, topk, due)

    @property
    def drafters_asleep(self) -> bool:
        """The fed members (MemberGroup.fed: the EAGLE-3 drafters) are paused."""
        states = self.member_states()
        return any(g.paused(states) for g in self.members.groups if g.fed)

    @property
    def drafters_fed(self) -> bool:
        """Every fed member is awake and caught up on every pair (full evaluation)."""
        return self.dstate is not None and self.evaluate and not self.drafters_asleep

    def start_members(self, start: MemberStart) -> None:
        """Start the members that start once the first token is committed (MemberGroup.start:
        the model-free members' lookups)."""
        states = self.member_states()
        for group in self.members.groups:
            states = group.start(states, start)
        self.dstate, self.lookups = states.drafters, states.lookups

    def feed(self, pairs: VerifiedPairs) -> None:
        """Hand every member group the pairs just verified (MemberGroup.record)."""
        states = self.member_states()
        for group in self.members.groups:
            group.record(states, pairs)

    def sleep(self) -> None:
        """The fed members (MemberGroup.fed: the EAGLE-3 drafters) stop being fed."""
        assert self.arms is not None
        states = self.member_states()
        if any([g.pause(states) for g in self.members.groups if g.fed]):
            self.arms.fall_asleep(pool=False)
        self.pending = None

    def sleep_pool(self) -> None:
        """Every member sleeps: the fed ones are not fed (under full evaluation, the only one
        that puts them to sleep), the others record nothing, and no window opens until a probe
        wakes them (the queue holds none by now)."""
        assert self.arms is not None
        if self.evaluate and self.members.fed:
            self.sleep()
        states = self.member_states()
        for group in self.members.groups:
            if not group.fed:
                group.pause(states)
        self.arms.fall_asleep(pool=True)

    def wake_due(self) -> bool:
        return self.arms is not None and self.arms.wake_due(self.drafters_asleep,
                                                            bool(self.deferred))

    def wake(self) -> bool:
        """End a sleep (a probe): the pool records and opens windows again from the next
        root; the fed members (the EAGLE-3 drafters) restart too unless plain decoding
        dominates them: True then (their catch-up is the caller's, batched over requests)."""
        assert self.arms is not None
        states = self.member_states()
        if self.asleep:
            for group in self.members.groups:
                if not group.fed:
                    group.resume(states, self.token_ids)
            if self.feedback is not None:
                self.feedback.restart()
        self.arms.wake()
        self.stats.wakes += 1
        restart = self.drafters_asleep and not self.arms.drafters_dominated()
        if restart:
            for group in self.members.groups:
                if group.fed:
                    group.resume(states, self.token_ids)
        return restart

    def weights(self) -> dict[str, float]:
        return self.arms.weights() if self.arms is not None else {}

    def commit(self, tokens: list[int], logprobs: list[TokenLogprob] | None = None) -> list[int]:
        """Append tokens up to the first EOS token (excluded) or the token budget."""
        out: list[int] = []
        stops = frozenset() if self.params.ignore_eos else self.eos_ids
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
        if self.finished and self.arms is not None:
            self.arms.note_end()
        return out

    def learn(self) -> None:
        """Apply the loss vectors that became known, in order (counterfactual learners), then
        record the completed windows' ÂL estimates for the statistics."""
        assert self.feedback is not None and self.arms is not None
        learner = self.arms.learner
        for w in self.feedback.pop_losses():
            self.arms.track(w)
            arms = self.arms.arm_losses(w)
            if learner.counterfactual and arms.awake.any():
                self._record_time_regret(learner, arms)
                learner.update(learner.sleeping_losses(arms.loss, arms.awake))
        self.record(self.feedback.pop_completed())

    def _record_time_regret(self, learner: Learner, arms: WindowLoss) -> None:
        """The window's net seconds under the weights the learner updates with (an asleep arm
        charged the learner's expectation over the awake ones, as its loss is): the regret in
        seconds that the learner minimises (core/stats.RequestStats.record_time_window)."""
        if arms.net is None or arms.rate is None:
            return
        net = learner.sleeping_losses(arms.net, arms.awake)
        est = learner.sleeping_losses(arms.est_len, arms.awake)
        self.stats.record_time_window(self.arm_ids, learner.distribution(), net, est, arms.rate)

    def record(self, windows: list[Window]) -> None:
        """Statistics of one window per real round (position windows only feed the learner);
        under the time loss a plain round is the plain arm's."""
        for w in windows:
            if w.realised is None:
                continue
            chosen = self.snapshot.ids[w.chosen] if w.chosen is not None else PLAIN_ARM
            est = {d: float(v) for d, v in zip(self.snapshot.ids, w.est_len, strict=False)}
            self.stats.record_window(est, chosen, w.realised)

    def take_logprobs(self) -> list[TokenLogprob] | None:
        if self.params.logprobs is None:
            return None
        out, self._logprobs = self._logprobs, []
        return out


def _arm_policy(policy: Policy, snapshot: PoolSnapshot, config: EngineConfig,
                costs: StepCosts | None) -> ArmPolicy:
    """The request's learner over its pool's members (and plain decoding under the time loss)
    and the policy around it."""
    n = len(snapshot)
    members = PoolMembers(snapshot)
    plain = uses_plain_arm(policy, config)
    fixed = snapshot.index(policy.name) if policy.kind == "fixed" else None
    name = "fixed" if policy.kind == "fixed" else policy.name
    top = max_len(members, config)
    learner = make_learner(name, n + plain, max_len=top, fixed_index=fixed,
                           prior=arm_prior(policy.prior, plain))
    tree = config.tree
    arms = Members(
        ids=snapshot.ids,
        kinds=tuple(members.cost_kind(i) for i in range(n)),
        rows=_tree_rows(members, config),
        depths=tuple(members.depth(i, tree) for i in range(n)), round_max=top)
    return ArmPolicy(learner, arms, plain_arm=plain,
                     costs=costs if costs is not None else StepCosts())


def uses_plain_arm(policy: Policy, config: EngineConfig) -> bool:
    """Whether a request's learner has plain decoding as its last arm and time as its loss:
    under the time loss, with a learner that takes counterfactual losses (bandits cannot score
    an arm they did not play). A seeded sampled request too: its text does not depend on the
    arms chosen (sampling draws with noise keyed by output position, PositionNoise), so the
    machine's timing behind the time loss's choices cannot change it."""
    return (config.selector.loss == "time" and policy.kind == "learner"
            and policy.name in COUNTERFACTUAL_LEARNERS)


def arm_prior(prior: tuple[float, ...] | None,
              plain: bool) -> tuple[float, ...] | None:
    """A prior over the drafters extended to the plain arm (which gets the mean weight)."""
    if prior is None or not plain:
        return prior
    n = len(prior)
    return tuple(p * n / (n + 1) for p in prior) + (1.0 / (n + 1),)


def arm_ids(drafter_ids: tuple[str, ...], plain: bool) -> tuple[str, ...]:
    return drafter_ids + ((PLAIN_ARM,) if plain else ())


def _tree_rows(members: PoolMembers, config: EngineConfig) -> tuple[float, ...]:
    """Rows each member's round verifies at most: its tree's nodes plus the root."""
    return tuple(float(members.nodes(i, config.tree) + 1) for i in range(len(members)))


def max_len(members: PoolMembers, config: EngineConfig) -> int:
    """The most tokens a round can commit: the deepest member's tree plus the bonus token."""
    return max(members.depth(i, config.tree) for i in range(len(members))) + 1


def _feedback_queue(snapshot: PoolSnapshot, config: EngineConfig) -> FeedbackQueue:
    """Windows as deep as the pool's deepest tree; each member credited with its own depth
    and tree size (a model-free chain may be longer than the EAGLE tree)."""
    tree = config.tree
    members = PoolMembers(snapshot)
    depths = [members.depth(i, tree) for i in range(len(snapshot))]
    totals = np.array([members.nodes(i, tree) for i in range(len(snapshot))])
    return FeedbackQueue(len(snapshot), max(depths), loss=config.selector.loss,
                         estimator=config.selector.estimator, total_tokens=totals,
                         depths=depths)
