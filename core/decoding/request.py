"""Per-request state: committed tokens, drafter caches, learner, feedback queue, statistics,
RNGs, and the stop rules that decide what a round may commit. Its target KV cache is a slot of
the scheduler's (core/batching/scheduler.py)."""

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
from core.selection.arm_costs import (
    FREE,
    NEURAL,
    PLAIN,
    PlannedRow,
    Start,
    StepCosts,
    TimePerToken,
    time_losses,
)
from core.selection.feedback import FeedbackQueue, Window, WindowLoss
from core.selection.learners import Learner, make_learner
from core.speculation.drafter_pool import Candidates, DrafterState, PoolSnapshot
from core.speculation.grammar import GrammarTrail, TokenMatcher
from core.speculation.model_free.evidence import RequestLookups
from core.speculation.sampling import PositionNoise
from core.stats import RequestStats, TokenLogprob

ROUTER = "router"
# Weight of a new window in a member's running ÂL (RequestState.expected): about the last ten.
EXPECTED_DECAY = 0.1
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


# Sleeping drafters. Under the time loss a request whose learner would give its EAGLE-3 drafters
# less than SLEEP_SHARE against plain decoding stops feeding them (DrafterState.sleep): asleep
# experts (core/selection/learners.py), their regrets frozen, while it decodes plain or with a
# model-free member. Every PROBE_ROUNDS rounds they restart from the last WAKE_PAIRS verified
# pairs and are scored for at least PROBE_LENGTH rounds, so the learner sees them again. Why:
# on a CPU one pair through the demo pool's eight drafters costs about a third of a target row,
# so at 8 and 16 streams feeding them every pair cost a quarter of plain decoding's rate while the
# learner decoded plain (bench/results/time_loss_held_out.md); asleep, that cost falls to
# (WAKE_PAIRS + eval_every) / PROBE_ROUNDS of it.
# When the learner would give each drafter less than SLEEP_SHARE against plain decoding, the
# whole pool sleeps (`asleep`): no arm is drawn, the model-free members neither index nor
# record (the probe indexes what was committed meanwhile) and no window opens, so a round costs
# what plain decoding's does but for keeping the last verified pairs; the same probes wake it.
# A request starts awake, with its EAGLE-3 drafters asleep or with its whole pool asleep,
# whichever saved most for the last requests that started there at its step size
# (StepCosts.start, core/selection/arm_costs.Start). Why: at 16 streams on two cores the
# evaluation's bookkeeping (windows, lookups' guesses) cost about 2.5 ms a request-round, half
# of a plain row's 4.5 ms; even the speculation gate (retired since), 98% plain, ran at 0.72x
# plain decoding.
SLEEP_SHARE = 0.05
PROBE_ROUNDS = 64
# Rounds after a wake before the learner may put the drafters back to sleep: long enough for
# the windows rooted at the wake to complete (the pool's deepest window, 8 plain rounds) and
# reach the learner.
PROBE_LENGTH = 16


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
    # The grammar of a structured output (core/speculation/grammar.py).
    matcher: TokenMatcher | None = None
    # What that grammar allowed at each committed position, for the evaluation's catch-up.
    grammar_trail: GrammarTrail | None = None
    # The model-free members' lookups over this request's tokens
    # (core/speculation/model_free/evidence.py).
    lookups: RequestLookups | None = None
    # Plain decoding is the learner's last arm and its loss is time per token (loss "time"):
    # the engine's measured round costs (core/selection/arm_costs.py) and the size of the request's
    # last step (what its costs are looked up at).
    plain_arm: bool = False
    costs: StepCosts | None = None
    step_requests: int = 1
    start_requests: int = 1  # the step size when it was prefilled
    # How it started (awake, its model-free members alone, asleep): what being awake saved it
    # tells the next requests at that level whether to start there (a request that started
    # asleep only learns at its probes: StepCosts.note_end).
    start: Start = Start.AWAKE
    # The tree rows each member drafts per round (nodes + root), for the time loss.
    tree_rows: tuple[float, ...] = ()
    # The most tokens a round can commit (the deepest member's tree + the bonus): ÂL's bound.
    round_max: int = 2
    # A running ÂL per member (EXPECTED_DECAY), for the step check (core/selection/arm_costs.py).
    expected: npt.NDArray[np.float64] | None = None
    # The whole pool asleep (SLEEP_SHARE): rounds run plain and nothing is evaluated.
    asleep: bool = False
    # Rounds since the EAGLE-3 drafters (or the pool) fell asleep, and since the request started
    # or they last woke: no sleep before PROBE_LENGTH (at the start the learner's regrets are
    # its exploration's noise, and a sleep then lasts PROBE_ROUNDS: at one stream the EAGLE-3
    # specialists slept after the first evaluations and 68% of rounds ran plain, 1.15x plain
    # decoding where the suffix member alone ran 1.77x).
    asleep_rounds: int = 0
    awake_rounds: int = 0
    # Under the time loss, what starting awake earned this request against plain decoding
    # (StepCosts.note_end): its share of each step's saving while it was awake (the step's
    # tokens at plain decoding's bare time per token less its measured time,
    # core/batching/step._credit_awake), and the measured seconds of the drafters' catch-up on
    # the prompt and its windows (core/batching/scheduler.py).
    awake_saving_s: float = 0.0
    awake_cost_s: float = 0.0
    # The arms' running time per token and the best of them, the rate the time loss values a
    # round's tokens at (core/selection/arm_costs.TimePerToken).
    time_per_token: TimePerToken = field(default_factory=TimePerToken)

    @staticmethod
    def create(request_id: str, prompt: list[int], params: SamplingParams, policy: Policy,
               snapshot: PoolSnapshot, config: EngineConfig,
               eos_ids: tuple[int, ...] = (), costs: StepCosts | None = None) -> RequestState:
        seed = params.seed if params.seed is not None else int(torch.randint(0, 2**62, ()).item())
        n = len(snapshot)
        learner = feedback = None
        plain = uses_plain_arm(policy, config)
        if policy.kind != "none" and n:
            fixed = snapshot.index(policy.name) if policy.kind == "fixed" else None
            name = "fixed" if policy.kind == "fixed" else policy.name
            learner = make_learner(name, n + plain, max_len=max_len(snapshot, config),
                                   fixed_index=fixed, prior=arm_prior(policy.prior, plain))
            if learner.counterfactual or config.evaluate_all:
                feedback = _feedback_queue(snapshot, config)
        stats = RequestStats(policy=policy.label, drafter_ids=snapshot.ids if learner else (),
                             prompt_tokens=len(prompt), time_loss=plain and learner is not None)
        return RequestState(request_id, params, policy, snapshot, list(prompt), len(prompt),
                            stats, PositionNoise(seed), np.random.default_rng(seed + 1),
                            frozenset(eos_ids),
                            learner, feedback, evaluate=feedback is not None,
                            eval_every=config.selector.eval_every,
                            plain_arm=plain and learner is not None,
                            costs=costs if costs is not None else StepCosts(),
                            tree_rows=_tree_rows(snapshot, config),
                            round_max=max_len(snapshot, config) if n else 2)

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
        if self.learner is None or self.asleep:  # asleep: plain decoding is the only arm
            return None
        awake = self.awake()
        if self.plain_arm:  # plain decoding is always awake
            awake = np.append(np.ones(len(self.snapshot), dtype=bool) if awake is None else awake,
                              True)
        if awake is not None and not awake.any():
            return None
        arm = self.learner.select(self.rng, awake=awake)
        return None if arm == len(self.snapshot) else arm

    def awake(self) -> npt.NDArray[np.bool_] | None:
        """Which members can draft from the root; None when all can: a model-free member with
        no guess there sleeps, and so do the EAGLE-3 drafters while they are not fed."""
        if self.asleep:
            return np.zeros(len(self.snapshot), dtype=bool)
        free = self.lookups is not None and bool(self.lookups.lookups)
        if not free and not self.drafters_asleep:
            return None
        mask = np.ones(len(self.snapshot), dtype=bool)
        if self.lookups is not None:
            for i, up in self.lookups.awake().items():
                mask[i] = up
        if self.drafters_asleep:
            mask[self.snapshot.neural] = False
        return mask

    @property
    def drafters_asleep(self) -> bool:
        return self.dstate is not None and self.dstate.asleep

    def should_sleep(self) -> bool:
        """Whether the EAGLE-3 drafters go to sleep at this evaluation: under the time loss,
        when the learner would give them less than SLEEP_SHARE of its weight in a round where
        no model-free member has a guess (they and plain decoding awake). Their share of the
        whole distribution is no test: a learner that favours a lookup falls back on them
        wherever the lookup has nothing to propose (measured: with that test the one-stream
        rounds ran plain there, 35% of them, at 0.77x the tokens/s)."""
        if (not self.plain_arm or self.learner is None or self.dstate is None
                or not self.dstate.full or self.dstate.asleep or not self.snapshot.neural):
            return False
        if self.drafters_dominated():
            return True
        if self.awake_rounds < PROBE_LENGTH:
            return False
        return self._share_against_plain(self.snapshot.neural) < SLEEP_SHARE

    def pool_should_sleep(self) -> bool:
        """Whether the whole pool goes to sleep at this evaluation: under the time loss, when
        the learner would give each drafter less than SLEEP_SHARE against plain decoding in a
        round where only the two are awake. Not their share of the whole distribution: a
        lookup is awake only where it has a guess, so plain decoding, always awake, gathers
        regret over more windows; judged on the whole distribution the pool slept at one
        stream where the suffix member ran 1.74x plain decoding (69% of rounds plain, 1.28x)."""
        if not self.plain_arm or self.learner is None or self.asleep:
            return False
        return self.awake_rounds >= PROBE_LENGTH and self.leaves_pool()

    def leaves_pool(self) -> bool:
        """The learner's verdict behind `pool_should_sleep`: under SLEEP_SHARE against plain
        decoding for every member not already asleep."""
        sleeping = set(self.snapshot.neural) if self.drafters_asleep else set()
        # EAGLE-3 drafters already asleep do not count
        return all(self._share_against_plain([i]) < SLEEP_SHARE
                   for i in set(range(len(self.snapshot))) - sleeping)

    def _share_against_plain(self, members: list[int]) -> float:
        """The weight the learner gives `members` in a round where only they and plain
        decoding are awake."""
        assert self.learner is not None
        awake = np.zeros(len(self.snapshot) + 1, dtype=bool)
        awake[members] = True
        awake[-1] = True  # plain decoding
        return float(self.learner.awake_distribution(awake)[members].sum())

    def sleep(self) -> None:
        """The EAGLE-3 drafters stop being fed."""
        assert self.dstate is not None
        if not self.dstate.asleep:
            self.dstate.sleep()
            self.asleep_rounds = 0
        self.pending = None

    def sleep_pool(self) -> None:
        """Every member sleeps: the EAGLE-3 drafters are not fed, the lookups record nothing
        and no window opens until a probe wakes them (the queue holds none by now)."""
        if self.dstate is not None and self.dstate.full and self.snapshot.neural:
            self.sleep()
        if self.lookups is not None:
            self.lookups.pause()
        self.asleep, self.asleep_rounds = True, 0

    def wake_due(self) -> bool:
        """Asleep for PROBE_ROUNDS rounds with no round waiting to be scored; the EAGLE-3
        drafters alone only once plain decoding no longer dominates them."""
        if self.asleep_rounds < PROBE_ROUNDS or self.deferred:
            return False
        return self.asleep or (self.drafters_asleep and not self.drafters_dominated())

    def wake(self) -> bool:
        """End a sleep (a probe): the pool records and opens windows again from the next
        root; True when the EAGLE-3 drafters are to restart too (not dominated)."""
        if self.asleep:
            self.asleep = False
            if self.lookups is not None:  # the tokens committed asleep, then record again
                self.lookups.sync(self.token_ids)
                self.lookups.resume()
            if self.feedback is not None:
                self.feedback.restart()
        self.asleep_rounds, self.awake_rounds = 0, 0
        self.stats.wakes += 1
        return self.drafters_asleep and not self.drafters_dominated()

    def drafters_dominated(self) -> bool:
        """Under the time loss, whether every EAGLE-3 drafter is dominated by plain decoding at
        the request's step size (CostModel.dominated): none can be the best arm in hindsight,
        so feeding them buys nothing. On two cores this holds from about 4 streams on (a
        13-row tree costs more than 5 plain rows' worth there), where the drafters then sleep
        from the prompt on (no prompt catch-up) until the load falls."""
        model = self.costs.model(self.step_requests) if self.costs is not None else None
        if not self.plain_arm or model is None or not self.snapshot.neural:
            return False
        assert self.feedback is not None
        rows = self._arm_rows()
        return all(model.dominated(rows[i], NEURAL, float(self.feedback.depths[i] + 1))
                   for i in self.snapshot.neural)

    def weights(self) -> dict[str, float]:
        if self.learner is None:
            return {}
        return {d: float(w)
                for d, w in zip(self.snapshot.ids, self.learner.distribution(), strict=False)}

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
        if (self.finished and self.plain_arm and self.costs is not None
                and self.start is not Start.ASLEEP
                and self.costs.model(self.start_requests) is not None):  # its rounds costed
            self.costs.note_end(self.start_requests, self.start,
                                self.awake_saving_s - self.awake_cost_s)
        return out

    def learn(self) -> None:
        """Apply the loss vectors that became known, in order (counterfactual learners), then
        record the completed windows' ÂL estimates for the statistics."""
        assert self.feedback is not None
        for w in self.feedback.pop_losses():
            self.track(w)
            arms = self.arm_losses(w)
            if self.learner is not None and self.learner.counterfactual and arms.awake.any():
                self._record_time_regret(self.learner, arms)
                self.learner.update(self.learner.sleeping_losses(arms.loss, arms.awake))
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

    def arm_losses(self, w: WindowLoss) -> WindowLoss:
        """A window's losses over the learner's arms: as the queue judged them, or under the
        time loss with plain decoding appended (ÂL 1, always awake) and every arm's loss its
        net seconds at the costs of the step its round ran in, rescaled to [0, 1]
        (core/selection/arm_costs.py)."""
        if not self.plain_arm:
            return w
        est, awake = np.append(w.est_len, 1.0), np.append(w.awake, True)
        # the costs of the step the window's round ran in; a position window (the prompt's)
        # has none: the latest step's
        costs = w.costs if w.costs is not None else self.arm_costs()
        top = self.round_max
        if costs is None:  # unmeasured: the length loss, every arm at one cost
            return WindowLoss((top - est) / (top - 1), awake, est)
        rate = self.time_per_token.add(costs, est, awake)
        loss, net = time_losses(est, costs, top, rate)
        return WindowLoss(loss, awake, est, net, rate)

    def track(self, w: WindowLoss) -> None:
        """Keep a running ÂL per drafter over the windows it was awake for (a drafter drafts
        only when awake): what the step check expects its round to commit."""
        if self.expected is None:
            self.expected = np.full(len(self.snapshot), np.nan)
        first = np.isnan(self.expected) & w.awake
        self.expected[first] = w.est_len[first]
        later = ~first & w.awake
        self.expected[later] += EXPECTED_DECAY * (w.est_len[later] - self.expected[later])

    def planned(self, chosen: int | None) -> PlannedRow:
        """This request's part of the next step if it drafts with `chosen` (None: plain)."""
        if chosen is None:
            return PlannedRow(1.0, PLAIN, 1.0)
        known = self.expected is not None and not np.isnan(self.expected[chosen])
        expected = float(self.expected[chosen]) if known else None  # type: ignore[index]
        return PlannedRow(self._arm_rows()[chosen], self._arm_kinds()[chosen], expected)

    def arm_costs(self) -> npt.NDArray[np.float64] | None:
        """Each arm's measured cost of one round at the request's step size (seconds; plain
        last), or None before the engine has measured that size."""
        model = self.costs.model(self.step_requests) if self.costs is not None else None
        if model is None:
            return None
        costs = [model.arm_cost(r, k) for r, k in zip(self._arm_rows(), self._arm_kinds(),
                                                         strict=True)]
        return np.array(costs + [model.arm_cost(1.0, PLAIN)])

    def _arm_kinds(self) -> list[str]:
        return [FREE if i in self.snapshot.model_free else NEURAL
                for i in range(len(self.snapshot))]

    def _arm_rows(self) -> list[float]:
        """Rows each member's round verifies: the tree's, or for a model-free member (whose
        trees end where its guesses do) the mean it has drafted on this engine."""
        costs = self.costs or StepCosts()
        return [costs.mean_nodes(d, r - 1) + 1 if i in self.snapshot.model_free else r
                for i, (d, r) in enumerate(zip(self.snapshot.ids, self.tree_rows, strict=True))]

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


def _tree_rows(snapshot: PoolSnapshot, config: EngineConfig) -> tuple[float, ...]:
    """Rows each member's round verifies at most: its tree's nodes plus the root."""
    return tuple(float(snapshot.free[d].total_tokens + 1 if d in snapshot.free
                       else config.tree.total_tokens + 1) for d in snapshot.ids)


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
