"""One request's arm policy: its learner over the pool's members (and plain decoding, under
the time loss) and every decision taken from it (issue 58): which arm a round drafts with,
what a window's losses are, what the step check is told, whether the EAGLE-3 drafters or the
whole pool sleep or wake, and where a request starts. It holds the arms' state; the request
(core/decoding/request.py) holds the data (tokens, drafter caches, lookups, the feedback
queue) and carries out what the policy decides. The policy sees the members as arrays (their
kinds, tree rows and window depths, `Members`), never the pool.

Sleeping drafters. Under the time loss a request whose learner would give its EAGLE-3 drafters
less than SLEEP_SHARE against plain decoding stops feeding them: asleep experts
(core/selection/learners.py), their regrets frozen, while it decodes plain or with a model-free
member. Every PROBE_ROUNDS rounds they restart from the last verified pairs and are scored for
at least PROBE_LENGTH rounds, so the learner sees them again. Why: on a CPU one pair through
the demo pool's eight drafters costs about a third of a target row, so at 8 and 16 streams
feeding them every pair cost a quarter of plain decoding's rate while the learner decoded
plain (bench/results/time_loss_held_out.md). When the learner would give each member less than
SLEEP_SHARE against plain decoding, the whole pool sleeps: no arm is drawn, the model-free
members neither index nor record and no window opens, so a round costs what plain decoding's
does; the same probes wake it. A request starts awake, with its EAGLE-3 drafters asleep or
with its whole pool asleep, whichever saved most for the last requests that started there at
its step size (StepCosts.start, core/selection/arm_costs.Start). Why: at 16 streams on two cores
the evaluation's bookkeeping cost about 2.5 ms a request-round, half of a plain row's 4.5 ms.
Measured against a pool that never sleeps (2026-12-07, one stream, the served defaults, the
same 10 held-out prompts of 48 tokens, in process, one run each): each request ran slower
without the pool's sleep, by 2-31% (median 15%); it drafted rounds where the sleeping pool ran
plain (committing 2.2-2.5 tokens each) but paid more for them (37-48 ms against 28-31 ms a
plain round).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

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
from core.selection.feedback import WindowLoss
from core.selection.learners import Learner

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

# The three sleep constants, swept one at a time against these values in process at one and
# two streams (bench/results/arm_policy_sweep.md, 2026-12-07, 12 held-out prompts a pass, two
# passes, per-pass ratios): every alternative lost or was within noise at two streams
# (PROBE_ROUNDS 16 / 32: 0.83x / 0.90x; PROBE_LENGTH 8 / 32: 0.85x / 0.90x; SLEEP_SHARE
# 0.02 / 0.15: 1.00x / 0.96x); at one stream PROBE_LENGTH 32 and SLEEP_SHARE 0.15 read 1.06x and
# 1.04x (two passes each) but not at two streams (0.90x, 0.96x), so the values below stay. That
# sweep had no control engine; the later one of the cost model's constants
# (bench/results/arm_costs_sweep.md) showed why one is needed: run without it, 14 of its 16
# alternatives "lost" by 1-6% at one stream, and with it every one was inside the control's
# 0.94-1.08x, so the losses above within a few percent may be the engines' order, not the value.
SLEEP_SHARE = 0.05
PROBE_ROUNDS = 64
# Rounds after a wake before the learner may put the drafters back to sleep: long enough for
# the windows rooted at the wake to complete (the pool's deepest window, 8 plain rounds) and
# reach the learner.
PROBE_LENGTH = 16
# Weight of a new window in a member's running ÂL (ArmPolicy.expected): about the last ten.
# Swept (bench/results/arm_costs_sweep.md): 0.05 and 0.3 read 0.99-1.00x, inside the control's
# noise.
EXPECTED_DECAY = 0.1


@dataclass(frozen=True)
class Members:
    """What the policy knows of a request's pool, member by member in the pool's order."""

    ids: tuple[str, ...]
    kinds: tuple[str, ...]  # NEURAL (an EAGLE-3 drafter) or FREE (model-free)
    rows: tuple[float, ...]  # the most rows a round of its verifies (tree nodes + root)
    depths: tuple[int, ...]  # its window depth (its tree's)
    round_max: int  # the most tokens a round can commit (the deepest tree + the bonus)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def neural(self) -> list[int]:
        return [i for i, k in enumerate(self.kinds) if k == NEURAL]

    @property
    def free(self) -> list[int]:
        return [i for i, k in enumerate(self.kinds) if k == FREE]


@dataclass
class ArmPolicy:
    """A request's learner and the state its decisions read (module docstring)."""

    learner: Learner
    members: Members
    # Plain decoding is the learner's last arm and its loss is time per token (loss "time"),
    # priced by the engine's measured round costs (core/selection/arm_costs.py).
    plain_arm: bool = False
    costs: StepCosts = field(default_factory=StepCosts)
    step_requests: int = 1  # the size of the request's last step (what costs are read at)
    start_requests: int = 1  # the step size when it was prefilled
    # How it started (awake, its model-free members alone, asleep): what being awake saved it
    # tells the next requests at that level whether to start there (`note_end`).
    start: Start = Start.AWAKE
    # A running ÂL per member (EXPECTED_DECAY), for the step check (CostModel.step_pays).
    expected: FloatArray | None = None
    # The whole pool asleep (SLEEP_SHARE): rounds run plain and nothing is evaluated.
    pool_asleep: bool = False
    # Rounds since the EAGLE-3 drafters (or the pool) fell asleep, and since the request started
    # or they last woke: no sleep before PROBE_LENGTH (at the start the learner's regrets are
    # its exploration's noise, and a sleep then lasts PROBE_ROUNDS: at one stream the EAGLE-3
    # specialists slept after the first evaluations and 68% of rounds ran plain, 1.15x plain
    # decoding where the suffix member alone ran 1.77x).
    asleep_rounds: int = 0
    awake_rounds: int = 0
    # Under the time loss, what starting awake earned this request against plain decoding:
    # its share of each step's saving while it was awake (core/batching/step._credit_awake),
    # and the measured seconds of the drafters' catch-up on the prompt and its windows
    # (core/batching/scheduler.py).
    awake_saving_s: float = 0.0
    awake_cost_s: float = 0.0
    # The arms' running time per token and the best of them, the rate the time loss values a
    # round's tokens at (core/selection/arm_costs.TimePerToken).
    time_per_token: TimePerToken = field(default_factory=TimePerToken)

    # -- choosing -----------------------------------------------------------------------------
    def choose(self, rng: np.random.Generator, awake: BoolArray | None) -> int | None:
        """The round's member among those `awake` (None: all), or None for plain decoding:
        the pool asleep, no member awake, or the learner's plain arm."""
        if self.pool_asleep:
            return None
        n = len(self.members)
        if self.plain_arm:  # plain decoding is always awake
            awake = np.append(np.ones(n, dtype=bool) if awake is None else awake, True)
        if awake is not None and not awake.any():
            return None
        arm = self.learner.select(rng, awake=awake)
        return None if arm == n else arm

    def weights(self) -> dict[str, float]:
        """The learner's weight per member (plain decoding's left out)."""
        return {d: float(w) for d, w in zip(self.members.ids, self.learner.distribution(),
                                            strict=False)}

    def planned(self, chosen: int | None) -> PlannedRow:
        """The request's part of the next step if it drafts with `chosen` (None: plain)."""
        if chosen is None:
            return PlannedRow(1.0, PLAIN, 1.0, awake=not self.pool_asleep)
        known = self.expected is not None and not np.isnan(self.expected[chosen])
        expected = float(self.expected[chosen]) if known else None  # type: ignore[index]
        return PlannedRow(self.arm_rows()[chosen], self.members.kinds[chosen], expected)

    # -- costs and losses ---------------------------------------------------------------------
    def arm_costs(self) -> FloatArray | None:
        """Each arm's measured cost of one round at the request's step size (seconds; plain
        last), or None before the engine has measured that size."""
        model = self.costs.model(self.step_requests)
        if model is None:
            return None
        costs = [model.arm_cost(r, k)
                 for r, k in zip(self.arm_rows(), self.members.kinds, strict=True)]
        return np.array(costs + [model.arm_cost(1.0, PLAIN)])

    def arm_rows(self) -> list[float]:
        """Rows each member's round verifies: the tree's, or for a model-free member (whose
        trees end where its guesses do) the mean it has drafted on this engine."""
        m = self.members
        return [self.costs.mean_nodes(d, r - 1) + 1 if k == FREE else r
                for d, r, k in zip(m.ids, m.rows, m.kinds, strict=True)]

    def arm_losses(self, w: WindowLoss) -> WindowLoss:
        """A window's losses over the learner's arms: as the queue judged them, or under the
        time loss with plain decoding appended (ÂL 1, awake in every round's window, asleep in
        the prompt's) and every arm's loss its net seconds at the costs of the step its round
        ran in, rescaled to [0, 1]
        (core/selection/arm_costs.py)."""
        if not self.plain_arm:
            return w
        # A position window (the prompt's) has no step: the latest step's costs price it, and
        # plain decoding sleeps in it. The prompt's windows say how well each drafter fits the
        # request, not what decoding plain costs (measured, not inferred); with plain decoding
        # awake in its 41 windows a request began decoding with plain decoding far ahead
        # (where the lookup's guesses over a question's own text fail), and its pool slept
        # after 16 rounds where the lookup alone ran 1.3x the default (docs/learner.md).
        prompt = w.costs is None
        est, awake = np.append(w.est_len, 1.0), np.append(w.awake, not prompt)
        costs = self.arm_costs() if prompt else w.costs
        top = self.members.round_max
        if costs is None or not awake.any():  # unmeasured: the length loss, one cost each
            return WindowLoss((top - est) / (top - 1), awake, est)
        rate = self.time_per_token.add(costs, est, awake)
        loss, net = time_losses(est, costs, top, rate)
        return WindowLoss(loss, awake, est, net, rate)

    def track(self, w: WindowLoss) -> None:
        """Keep a running ÂL per member over the windows it was awake for (a member drafts
        only when awake): what the step check expects its round to commit."""
        if self.expected is None:
            self.expected = np.full(len(self.members), np.nan)
        first = np.isnan(self.expected) & w.awake
        self.expected[first] = w.est_len[first]
        later = ~first & w.awake
        self.expected[later] += EXPECTED_DECAY * (w.est_len[later] - self.expected[later])

    # -- sleeping -----------------------------------------------------------------------------
    def should_sleep(self, drafters_fed: bool) -> bool:
        """Whether the EAGLE-3 drafters go to sleep at this evaluation (`drafters_fed`: they
        are awake and every one is fed): under the time loss, when the learner would give them
        less than SLEEP_SHARE of its weight in a round where no model-free member has a guess
        (they and plain decoding awake). Their share of the whole distribution is no test: a
        learner that favours a lookup falls back on them wherever the lookup has nothing to
        propose (measured: with that test the one-stream rounds ran plain there, 35% of them,
        at 0.77x the tokens/s)."""
        if not self.plain_arm or not drafters_fed or not self.members.neural:
            return False
        if self.drafters_dominated():
            return True
        if self.awake_rounds < PROBE_LENGTH:
            return False
        return self._share_against_plain(self.members.neural) < SLEEP_SHARE

    def pool_should_sleep(self, drafters_asleep: bool) -> bool:
        """Whether the whole pool goes to sleep at this evaluation: under the time loss, when
        the learner would give each member not already asleep less than SLEEP_SHARE against
        plain decoding in a round where only the two are awake. Not their share of the whole
        distribution: a lookup is awake only where it has a guess, so plain decoding, always
        awake, gathers regret over more windows; judged on the whole distribution the pool
        slept at one stream where the suffix member ran 1.74x plain decoding (69% of rounds
        plain, 1.28x)."""
        if not self.plain_arm or self.pool_asleep or self.awake_rounds < PROBE_LENGTH:
            return False
        asleep = set(self.members.neural) if drafters_asleep else set()
        return all(self._share_against_plain([i]) < SLEEP_SHARE
                   for i in set(range(len(self.members))) - asleep)

    def _share_against_plain(self, members: list[int]) -> float:
        """The weight the learner gives `members` in a round where only they and plain
        decoding are awake."""
        awake = np.zeros(len(self.members) + 1, dtype=bool)
        awake[members] = True
        awake[-1] = True  # plain decoding
        return float(self.learner.awake_distribution(awake)[members].sum())

    def count_round(self, drafters_asleep: bool) -> None:
        """One more verified round, asleep (the pool, or the EAGLE-3 drafters) or awake."""
        if self.pool_asleep:
            self.asleep_rounds += 1
            return
        self.awake_rounds += 1
        self.asleep_rounds += drafters_asleep

    def fall_asleep(self, pool: bool) -> None:
        """The EAGLE-3 drafters (or, `pool`, every member) stop being fed from now."""
        self.pool_asleep = self.pool_asleep or pool
        self.asleep_rounds = 0

    def wake_due(self, drafters_asleep: bool, deferred: bool) -> bool:
        """Asleep for PROBE_ROUNDS rounds with no round waiting to be scored (`deferred`); the
        EAGLE-3 drafters alone only once plain decoding no longer dominates them."""
        if self.asleep_rounds < PROBE_ROUNDS or deferred:
            return False
        return self.pool_asleep or (drafters_asleep and not self.drafters_dominated())

    def wake(self) -> None:
        """A probe: the pool (if asleep) evaluates again from the next root."""
        self.pool_asleep = False
        self.asleep_rounds, self.awake_rounds = 0, 0

    def drafters_dominated(self) -> bool:
        """Under the time loss, whether every EAGLE-3 drafter is dominated by plain decoding at
        the request's step size (CostModel.dominated): none can be the best arm in hindsight,
        so feeding them buys nothing. On two cores this holds from about 4 streams on (a
        13-row tree costs more than 5 plain rows' worth there), where the drafters then sleep
        from the prompt on (no prompt catch-up) until the load falls."""
        model = self.costs.model(self.step_requests)
        neural = self.members.neural
        if not self.plain_arm or model is None or not neural:
            return False
        rows = self.arm_rows()
        return all(model.dominated(rows[i], NEURAL, float(self.members.depths[i] + 1))
                   for i in neural)

    # -- starting and ending ------------------------------------------------------------------
    def start_levels(self) -> list[Start]:
        """The levels a request can start at (Start): all awake only where an EAGLE-3 drafter
        may pay, the model-free members alone only where there are some, asleep always."""
        m = self.members
        levels = [] if not m.neural or self.drafters_dominated() else [Start.AWAKE]
        if m.free:
            levels.append(Start.MODEL_FREE)
        return [*levels, Start.ASLEEP]

    def choose_start(self) -> Start:
        """The level this request starts at (StepCosts.start), remembered for `note_end`."""
        self.start = self.costs.start(self.step_requests, self.start_levels())
        return self.start

    def note_end(self) -> None:
        """The request ended: what starting awake saved it tells the next starts at its level
        (a request that started asleep, or whose rounds were never costed, tells nothing)."""
        if (self.plain_arm and self.start is not Start.ASLEEP
                and self.costs.model(self.start_requests) is not None):
            self.costs.note_end(self.start_requests, self.start,
                                self.awake_saving_s - self.awake_cost_s)
