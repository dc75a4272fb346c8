"""What a round costs, measured in place, and each arm's time per committed token: the
learner's "time" loss (SelectorConfig.loss; DESIGN.md section 3.1).

The arms of a request's learner are its pool's drafters and plain decoding. An arm a, chosen
for one request's round in a step of b requests, costs

    c_a(b) = α_b / b + β_b · rows_a + draft_a(b) + e(b) + o(b)    seconds,

where the step's target pass is modelled as α_b + β_b · R for the R rows it computes (α:
reading the weights and the step's fixed overhead, shared by its b requests; β: each row's
arithmetic) and an arm's round adds its tree's rows_a (nodes + root: 1 for plain decoding).
R counts each request's own rows, not b x the widest tree: the lean forward runs the linear
layers on the real tokens only and the canonical attention kernel skips the padding queries
(measured on two cores, 8 rows over 250 committed tokens each: 35.2 ms all plain, 44.7 ms
with one 6-node chain, 43.1 ms with every row 2 wide, 54.6 ms with one 14-node tree; padded
to b x 14 the last would be 112 rows: 8 rows 13 wide took 142-147 ms), so an arm's cost is
its own whatever its neighbours draft. draft_a is the drafting of its kind per request (an
EAGLE drafter's passes, a model-free lookup's CPU time, nothing for plain), e(b) the
counterfactual evaluation per awake request-round (every drafter catches up whatever was
chosen, so the same for every arm; the requests whose pools slept pay none and are not
counted) and o(b) the rest of a step per request.
Its time per committed token over a request is Σ c_a / Σ ÂL_a (ÂL_plain = 1).

The loss. A round's net seconds s_a = c_a - λ·ÂL_a: its time less its tokens valued at the
request's running best time per token λ = min_a Σ c_a / Σ ÂL_a over the windows so far
(`TimePerToken`; Dinkelbach's linearisation of a ratio at its optimum). For a fixed λ the sum
over a request is Σ s_a = Σ ÂL_a · (r_a - λ), r_a = Σ c_a / Σ ÂL_a the arm's time per token;
at λ = min_a r_a the best arm's sum is 0 and every other arm's is positive, so the arm with
the least Σ s_a is the arm of least time per token, whatever the arms' token counts
(`time_losses`). Valued at plain decoding's time per token instead (λ = c_plain, this module
until issue 58) the sum ranks arms by net seconds saved against plain, which favours an arm
that commits more tokens at a worse rate: with lookup 54 ms a round at ÂL 2.2 (24.5 ms a
token) against suffix 75 ms at ÂL 2.9 (25.9 ms a token) and plain 40 ms, suffix saves more
seconds (41 against 34 ms a round) and took the weight. The per-round ratio c_a/ÂL_a,
averaged, would be wrong as well: a drafter whose ÂL alternates 1 and 4 has a mean ratio near
plain's while committing 2.5 tokens a round (Jensen). ℓ_a rescales s_a to [0, 1] by its
bounds over ÂL in [1, K + 1]: m = min c - λ·(K + 1), M = max c - λ.

The bound. NormalHedge's guarantee holds for any losses in [0, 1], so each request's regret
against its best arm is O(sqrt(T ln N)) in loss units over its T windows, at most
max_t (M_t - m_t) times that in net seconds at the rates λ_t used. λ_t converges to the best
arm's time per token as the windows accumulate (a ratio of running sums), and at a fixed λ a
regret of R net seconds over Σ ÂL tokens at the learner's choices is a time per token at most
λ + R / Σ ÂL: the learner's time per token approaches the best arm's at O(sqrt(ln N / T)).

Measurement. Each step's phases (core/batching/step.py) are
recorded per batch-size bucket (`bucket`); α_b and β_b by least squares of the
verification time on R over the bucket's last WINDOW steps (steps over three times their fit
refit without), the other terms as ratios of sums over them. β needs steps of different sizes:
so the first PROBE_STEPS steps of a bucket alternate speculative and plain, and after that
every PROBE_EVERY-th step is plain (what measuring costs when speculation pays: a thirty-second
of the steps commit one token instead of MAT). Until a bucket has steps whose rows differ by
MIN_SPREAD, `model` returns None and the learner's loss falls back to 1/ÂL (time per token
with every arm costing the same, which ranks drafters as the acceptance loss does).

Where to start. e(b) is paid whichever arm the learner picks, so its loss cannot weigh it; only
sleeping saves it (core/selection/arm_policy.py). A request that started awake ends with what that
earned it, measured: its share of each step it was awake in of the step's committed tokens
at plain decoding's time per token (`plain_token_s`: the steps of that size where every pool
slept; before there are any, c⁰_plain, `bare_cost`) less the step's measured seconds
(core/batching/step._credit_awake), less its prompt catch-up's measured seconds. `start`
keeps the last ENDINGS of those per step size and level (`Start`: all awake, the model-free
members alone) and starts the next request at the level whose mean is highest, asleep where
none is positive.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import IntEnum

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

# The tuning constants below, swept one at a time against these values in process at one and two
# streams with a control engine (bench/results/arm_costs_sweep.md, 2026-12-08, 12 held-out
# prompts a pass, two passes): every alternative of WINDOW (64, 256), PROBE_STEPS (4, 16),
# PROBE_EVERY (16, 64), MIN_SPREAD (1.25, 2), ENDINGS (4, 16), PROBE_REQUESTS (4, 16) and
# MAX_PROBE_GAP (32, 128) read 0.96-1.07x these, inside the control's own 0.94-1.08x: none
# earns a change (ENDINGS 16, 1.01x at one stream, 1.06x at two, is the closest), so they stay.
# STALL and MAX_BUCKET are not tuning: an outlier rule and the largest bucket.
WINDOW = 128  # steps per bucket the fit reads (the load drifts)
PROBE_STEPS = 8  # a bucket's first steps, every second one plain
PROBE_EVERY = 32  # then one plain step in this many
STALL = 3.0  # a step slower than STALL x its fit is a stall (a page fault, GC): left out
# A bucket's rows per step must vary this much before β is trusted: one 6-node chain among 8
# plain rows is 13 rows against 8 (1.6x), what a loaded server's drafting steps mostly are.
MIN_SPREAD = 1.5
NEURAL, FREE, PLAIN = "neural", "free", "plain"  # how an arm drafts
MAX_BUCKET = 16
ENDINGS = 8
PROBE_REQUESTS = 8  # starts between two tries of a level, at first
MAX_PROBE_GAP = 64  # the most, after tries that lost
ASLEEP_DECAY = 0.1  # weight of an all-asleep step in its size's running mean wall time


class Start(IntEnum):
    """How a request under the time loss starts (StepCosts.start): every member awake; the
    model-free members alone awake (the EAGLE-3 drafters asleep from the prompt on, with no
    prompt catch-up: on two cores it cost the copy-heavy prompts about 130 ms a request at one
    stream, where a lookup alone ran 1.5x plain decoding); or the whole pool asleep
    (ArmPolicy.pool_asleep). Each level is an arm of a small learner per step size: the requests
    that started there report what being awake saved them (their share of their steps'
    tokens at plain decoding's time per token less the steps' measured time, less their
    prompt catch-up), and a request starts at the level whose last ENDINGS saved most on
    average, asleep (which saves nothing) where none saved. A level is tried once before that
    (one request at a time, not every request that starts before the first ends), and then
    again every PROBE_REQUESTS starts, a gap that doubles with each ending there that lost, up
    to MAX_PROBE_GAP (a loss there is the price of a try: at four streams on two cores a try
    with every member awake cost about a second of a seven-second pass, so one start in eight
    kept the requests 15% behind plain decoding), and is reset by one that saved: the load, the
    workload and the pool change, and a request that starts asleep only learns at its probes
    (and is not counted)."""

    AWAKE = 0
    MODEL_FREE = 1
    ASLEEP = 2


def bucket(requests: int) -> int:
    """The batch-size bucket a step is measured in: powers of two up to MAX_BUCKET. The costs
    change with the batch (the target pass is memory-bound at few rows, compute-bound at many);
    one bucket per size would spread the measurements thin."""
    return min(1 << (max(requests, 1).bit_length() - 1), MAX_BUCKET)


@dataclass(frozen=True)
class StepSample:
    """One step's round: its size and where its time went."""

    requests: int  # requests whose trees the pass verified
    rows: int  # rows the pass computed: each request's tree (nodes + root)
    verify_s: float  # the target pass, LM head and acceptance
    neural_rows: int = 0  # requests that drafted with an EAGLE drafter
    neural_s: float = 0.0  # their drafting (catch-up of the chosen drafter + tree growth)
    free_rows: int = 0  # requests that drafted with a model-free drafter
    free_s: float = 0.0
    evaluate_s: float = 0.0  # the evaluation phase (every drafter's catch-up, γ, learners)
    other_s: float = 0.0  # the rest of the step (selection, bookkeeping)
    # Requests whose pools were awake (a learner that evaluates): the evaluation is theirs,
    # not spread over the requests whose pools slept (issue 58, L).
    awake: int = 0


@dataclass(frozen=True)
class PlannedRow:
    """One request's part of the next step, as its learner chose: its tree's rows, how it
    drafts, and the tokens its learner expects it to commit (its ÂL; None: no estimate yet)."""

    rows: float
    kind: str
    expected: float | None
    awake: bool = True  # its pool awake: it pays the evaluation


@dataclass(frozen=True)
class CostModel:
    """The fitted terms of one bucket (seconds); `arm_cost` is c_a of the module docstring."""

    requests: int
    alpha: float
    beta: float
    neural: float  # drafting per request, EAGLE
    free: float  # drafting per request, model-free
    evaluate: float  # per awake request-round in steps that drafted
    evaluate_plain: float  # per awake request-round in plain steps (it runs less often there)
    other: float  # per request-round

    def arm_cost(self, rows: float, kind: str) -> float:
        evaluate = self.evaluate_plain if kind == PLAIN else self.evaluate
        return self.bare_cost(rows, kind) + evaluate

    def bare_cost(self, rows: float, kind: str) -> float:
        """c_a without the evaluation e(b): what the round costs a request whose pool sleeps
        (plain decoding) or would cost it with no learner to feed."""
        return (self.alpha / self.requests + self.beta * rows + self.drafting(kind)
                + self.other)

    def drafting(self, kind: str) -> float:
        """draft_a(b): the drafting per request of an arm of this kind."""
        return {NEURAL: self.neural, FREE: self.free, PLAIN: 0.0}[kind]

    def dominated(self, rows: float, kind: str, most_tokens: float) -> bool:
        """Whether an arm cannot beat plain decoding's time per token even if every round
        committed `most_tokens` (its tree's depth + 1): then its net seconds
        s_a = c_a - λ·ÂL_a >= c_a - λ·most_tokens > 0 = s_plain on every window, so its loss
        exceeds plain decoding's whatever it drafts and it is never the best arm in hindsight."""
        return self.arm_cost(rows, kind) > most_tokens * self.arm_cost(1.0, PLAIN)

    def step_pays(self, plan: Sequence[PlannedRow]) -> bool:
        """Whether the step as planned commits tokens at least as fast as the same requests
        decoding plain: the evaluation runs at its drafting steps' cost for every awake request
        of a step that drafts (the coupling per-request arm costs cannot see)."""
        b, awake = len(plan), sum(p.awake for p in plan)
        # A row with no estimate yet counts one token: its learner learns the drafters' value
        # from the evaluation of plain rounds (full information), not by drafting.
        drafting = sum(self.drafting(p.kind) for p in plan)
        spec_s = (self.alpha + self.beta * sum(p.rows for p in plan) + drafting
                  + awake * self.evaluate + b * self.other)
        plain_s = self.alpha + self.beta * b + awake * self.evaluate_plain + b * self.other
        tokens = sum(p.expected or 1.0 for p in plan)
        return tokens * plain_s >= b * spec_s


class StepCosts:
    """The engine's measurements (one per engine, shared by its requests)."""

    def __init__(self) -> None:
        # The module's constants, read when the engine is built (a sweep sets them then).
        self.window, self.probe_steps, self.probe_every = WINDOW, PROBE_STEPS, PROBE_EVERY
        self.reset()

    def reset(self) -> None:
        """Forget every measurement (SpecEngine.forget_costs: a server's warm-up)."""
        self._samples: dict[int, deque[StepSample]] = {}
        self._steps: dict[int, int] = {}  # steps recorded per bucket
        self._nodes: dict[str, tuple[float, int]] = {}  # drafter id -> (Σ nodes, rounds)
        # Each bucket's fit until its next sample: every window and every planned row of a step
        # reads it, and a fit walks the bucket's WINDOW samples.
        self._fitted: dict[int, CostModel | None] = {}
        # The last fit that could be made: kept while a bucket's steps are all plain (its
        # requests' pools asleep), whose rows cannot tell α from β.
        self._last_fit: dict[int, CostModel] = {}
        # Per bucket and level a request started at: what starting there saved each of the
        # last ENDINGS to end (seconds); and how many requests started per bucket (`start`).
        self._endings: dict[tuple[int, Start], deque[float]] = {}
        self._starts: dict[int, int] = {}
        # Per bucket and level: the start count of its last try, and the starts between tries.
        self._tried: dict[tuple[int, Start], int] = {}
        self._gap: dict[tuple[int, Start], int] = {}
        # Per step size (requests), the running mean wall time of the steps where no pool was
        # awake: plain decoding's own time per step, what an awake request's saving is
        # measured against (`plain_token_s`).
        self._asleep_wall: dict[int, float] = {}

    def speculate(self, requests: int) -> bool:
        """Whether the next step over `requests` requests may draft (False: a plain probe)."""
        n = self._steps.get(bucket(requests), 0)
        if n < self.probe_steps:
            return n % 2 == 0
        return n % self.probe_every != 0

    def record(self, sample: StepSample) -> None:
        if sample.requests < 1 or sample.verify_s <= 0.0:
            return
        b = bucket(sample.requests)
        self._samples.setdefault(b, deque(maxlen=self.window)).append(sample)
        self._steps[b] = self._steps.get(b, 0) + 1
        self._fitted.pop(b, None)

    def record_drafted(self, drafter_id: str, nodes: int) -> None:
        """A round drafted `nodes` nodes with `drafter_id` (a model-free tree's size varies)."""
        total, count = self._nodes.get(drafter_id, (0.0, 0))
        self._nodes[drafter_id] = (total + nodes, count + 1)

    def mean_nodes(self, drafter_id: str, default: float) -> float:
        total, count = self._nodes.get(drafter_id, (0.0, 0))
        return total / count if count else default

    def model(self, requests: int) -> CostModel | None:
        """The bucket's fitted terms for a step of `requests`, or None until they can be told
        apart."""
        b = bucket(requests)
        if b not in self._fitted:
            self._fitted[b] = _fit(list(self._samples.get(b, ())))
            if self._fitted[b] is not None:
                self._last_fit[b] = self._fitted[b]  # type: ignore[assignment]
        fitted = self._fitted[b] or self._last_fit.get(b)
        return None if fitted is None else replace(fitted, requests=max(1, requests))

    def note_asleep_step(self, requests: int, wall_s: float) -> None:
        """A step of `requests` rows where no pool was awake took `wall_s` (a stall, over
        STALL x the running mean, is left out)."""
        prev = self._asleep_wall.get(requests)
        if prev is None:
            self._asleep_wall[requests] = wall_s
        elif wall_s <= STALL * prev:
            self._asleep_wall[requests] = prev + ASLEEP_DECAY * (wall_s - prev)

    def plain_token_s(self, requests: int) -> float | None:
        """Plain decoding's seconds per token in a step of `requests` rows: measured on the
        steps where every pool slept, else the cost model's bare plain cost (CostModel.
        bare_cost), None before either. Measured first: the fit of the pass, a line through
        steps of every width, read 2-3 ms (4-6%) under the all-asleep steps' wall at 2-8 streams
        on two cores, and every awake request's saving would carry that bias."""
        wall = self._asleep_wall.get(requests)
        if wall is not None:
            return wall / requests
        model = self.model(requests)
        return None if model is None else model.bare_cost(1.0, PLAIN)

    def note_end(self, started_at: int, start: Start, saving_s: float) -> None:
        """A request under the time loss that started at this step size and level (awake or
        its model-free members alone) ended; what being awake saved it against plain decoding
        with its pool asleep (seconds, negative when it cost; ArmPolicy.awake_saving_s -
        awake_cost_s). Keyed by where it started: where it ends depends on when the others
        finish."""
        key = (bucket(started_at), start)
        self._endings.setdefault(key, deque(maxlen=ENDINGS)).append(saving_s)
        gap = self._gap.get(key, PROBE_REQUESTS)
        self._gap[key] = min(2 * gap, MAX_PROBE_GAP) if saving_s < 0.0 else PROBE_REQUESTS

    def start(self, requests: int, levels: Sequence[Start]) -> Start:
        """The level a request starting at this step size starts at, of the `levels` its pool
        has (most awake first, Start.ASLEEP last, which saves 0 by definition): the one whose
        last ENDINGS requests saved most on average, asleep where none saved; but the most
        awake level due a try (`_due`) instead, so that each memory follows the load, the
        workload and the pool."""
        b = bucket(requests)
        n = self._starts[b] = self._starts.get(b, 0) + 1
        awake = list(levels[:-1])
        ends = {level: self._endings.get((b, level), ()) for level in awake}
        known = [level for level in awake if ends[level]]
        best = max(known, key=lambda level: sum(ends[level]) / len(ends[level]), default=None)
        chosen = best if best is not None and sum(ends[best]) > 0.0 else levels[-1]
        due = [level for level in awake if level != chosen and self._due(b, level, n)]
        if due:
            chosen = due[0]
        if chosen in awake:
            self._tried[(b, chosen)] = n
        return chosen

    def _due(self, b: int, level: Start, n: int) -> bool:
        """Whether `level` is due a try at the n-th start in bucket b: never tried, or its gap
        since the last try has passed (PROBE_REQUESTS starts after a try with no ending yet)."""
        last = self._tried.get((b, level))
        return last is None or n - last >= self._gap.get((b, level), PROBE_REQUESTS)

    def step_pays(self, plan: Sequence[PlannedRow]) -> bool:
        """Whether the step may draft as planned (True until the bucket is measured)."""
        model = self.model(len(plan)) if plan else None
        return model is None or model.step_pays(plan)


def _fit(samples: list[StepSample]) -> CostModel | None:
    """A bucket's terms from its samples (`requests` 1: StepCosts.model sets the step's)."""
    rows = [s.rows for s in samples]
    if not samples or max(rows) < MIN_SPREAD * min(rows):
        return None
    alpha, beta = fit_pass(samples)
    plain = [s for s in samples if s.rows == s.requests]
    drafted = [s for s in samples if s.rows > s.requests]
    return CostModel(
        requests=1, alpha=alpha, beta=beta,
        neural=_per(sum(s.neural_s for s in samples), sum(s.neural_rows for s in samples)),
        free=_per(sum(s.free_s for s in samples), sum(s.free_rows for s in samples)),
        evaluate=_evaluate_per_request(drafted or samples),
        evaluate_plain=_evaluate_per_request(plain or samples),
        other=_per(sum(s.other_s for s in samples), sum(s.requests for s in samples)))


def fit_pass(samples: Sequence[StepSample]) -> tuple[float, float]:
    """α, β ≥ 0 of verify_s ≈ α + β·rows, refit once without the stalls."""
    alpha, beta = _least_squares(samples)
    kept = [s for s in samples if s.verify_s <= STALL * (alpha + beta * s.rows)]
    return _least_squares(kept) if len(kept) >= 2 else (alpha, beta)


def _least_squares(samples: Sequence[StepSample]) -> tuple[float, float]:
    x = np.array([s.rows for s in samples], dtype=np.float64)
    y = np.array([s.verify_s for s in samples], dtype=np.float64)
    var = float(((x - x.mean()) ** 2).sum())
    beta = float(((x - x.mean()) * (y - y.mean())).sum() / var) if var > 0 else 0.0
    beta = max(beta, 0.0)
    alpha = float(y.mean() - beta * x.mean())
    if alpha < 0.0:  # the rows explain everything: a line through the origin
        return 0.0, float(y.sum() / x.sum())
    return alpha, beta


def _evaluate_per_request(samples: Sequence[StepSample]) -> float:
    """The evaluation's seconds per awake request-round (0 where none was awake)."""
    return _per(sum(s.evaluate_s for s in samples), sum(s.awake for s in samples))


def _per(seconds: float, count: int) -> float:
    return seconds / count if count else 0.0


class TimePerToken:
    """A request's running time per token per arm, Σ_t c_a(t) / Σ_t ÂL_a(t) over the windows
    in which the arm was scored (plain decoding, always scored, at ÂL 1), and the best of them:
    the rate λ at which `time_losses` values a round's tokens (module docstring, "The loss")."""

    def __init__(self) -> None:
        self._cost: FloatArray | None = None
        self._tokens: FloatArray | None = None
        self.rate: float | None = None  # λ after the last window; None before the first

    def add(self, costs: FloatArray, est_len: FloatArray, awake: npt.NDArray[np.bool_]) -> float:
        """Add one window's costs and ÂL ([A], plain last) for its awake arms; returns λ."""
        if self._cost is None or self._tokens is None or self._cost.shape != costs.shape:
            self._cost, self._tokens = np.zeros_like(costs), np.zeros_like(costs)
        self._cost += np.where(awake, costs, 0.0)
        self._tokens += np.where(awake, est_len, 0.0)
        scored = self._tokens > 0.0
        self.rate = float(np.min(self._cost[scored] / self._tokens[scored]))
        return self.rate

    def per_arm(self) -> FloatArray | None:
        """Each arm's time per token so far ([A]; inf where it was never scored)."""
        if self._cost is None or self._tokens is None:
            return None
        scored = self._tokens > 0.0
        return np.where(scored, self._cost / np.where(scored, self._tokens, 1.0), np.inf)


def time_losses(est_len: FloatArray, costs: FloatArray, max_len: float,
                rate: float | None = None) -> tuple[FloatArray, FloatArray]:
    """The arms' losses and net seconds from their ÂL and round costs c (both [A], plain
    decoding last with ÂL 1); `max_len` bounds every ÂL (the deepest tree + the bonus); `rate`
    is λ, the request's running best time per token (TimePerToken.rate; None: plain decoding's
    c, the only rate known before a window is scored).

    Net seconds s_a = c_a - λ·ÂL_a (module docstring, "The loss"); ℓ_a = (s_a - m) / (M - m)
    in [0, 1] with m = min c - λ·max_len and M = max c - λ, the bounds of s over every ÂL in
    [1, max_len]."""
    lam = float(costs[-1]) if rate is None else rate
    net = costs - lam * est_len
    lo, hi = float(costs.min()) - lam * max_len, float(costs.max()) - lam
    return (net - lo) / (hi - lo), net
