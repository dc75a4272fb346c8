"""Online learners that pick a drafter each round (DESIGN.md §3, step 7).

Experts/arms are drafter indices 0..N-1. Full-information learners (NormalHedge,
AdaNormalHedge, Hedge) receive a loss in [0, 1] for every drafter from the counterfactual
evaluation (`core.selection.feedback`); bandit learners (UCBSpec, EXP3Spec) only see the realised
accepted length of the drafter they played. Each learner ignores the other kind of feedback,
so the engine can feed both unconditionally.

Delayed feedback follows Joulani et al. 2013's queue: a loss vector is applied as if it were
the feedback of the round being played now, so the learner's instantaneous regret uses its
current distribution p, not the one played when the window opened (reference notes 2.3).

Sleeping experts. A model-free drafter (core/speculation/model_free/) often has nothing to propose
at a round's root; it is then *asleep* for that round. A learner chooses among the awake experts
only (`select(..., awake=)`: its distribution restricted to them), and a window's loss charges each
asleep expert the learner's own expected loss over the awake ones (`sleeping_losses`), so its regret
does not move: the standard reduction of sleeping experts to experts (Freund, Schapire, Singer,
Warmuth 1997, "Using and combining predictors that specialize"; Blum, Mansour 2007, §6). What
it guarantees depends on the learner run under it. NormalHedge (the served default) bounds each
expert's regret, which now sums only the rounds it was awake, by its own O(sqrt(T ln N) + ln² N)
with T every round (an asleep round adds 0 to the regret but counts in T); AdaNormalHedge's
sleeping form (Luo, Schapire 2015, §5) is O(sqrt(T_i ln N)) in the rounds T_i the expert was
awake, tighter for an expert asleep most of the time. The drafters the arm policy puts to sleep
(core/selection/arm_policy.py) are asleep experts of the same reduction: the bound covers each
over the windows it was scored in, not the rounds it slept.

References: Chaudhuri, Freund, Hsu 2009 (NormalHedge, arXiv 0903.2851); Luo, Schapire 2015
(AdaNormalHedge, arXiv 1502.05934); Hou et al. 2025 (BanditSpec, arXiv 2505.15141).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from core.selection.counterfactual import BoolArray, FloatArray

LEARNER_KINDS: tuple[str, ...] = (
    "normalhedge", "adanormalhedge", "hedge", "ucbspec", "exp3spec", "fixed",
)
# Losses come from float arithmetic on probabilities; tolerate rounding, reject real errors.
_SLACK = 1e-9


class Learner(ABC):
    """A distribution over N experts, updated from feedback and sampled once per round."""

    full_information: ClassVar[bool]
    # Whether the learner consumes the counterfactual losses, i.e. whether every drafter must
    # be evaluated each round for it (bandits and a fixed drafter do not: issue 14).
    counterfactual: ClassVar[bool]
    # Attributes holding one entry per expert (lists or arrays), in expert order: `permute`
    # reorders exactly these, so a subclass that adds per-expert state must list it here.
    _expert_state: ClassVar[tuple[str, ...]] = ()

    def __init__(self, num_experts: int) -> None:
        if num_experts < 1:
            raise ValueError("a learner needs at least one expert")
        self._n = num_experts

    @property
    def num_experts(self) -> int:
        return self._n

    @property
    def fixed_index(self) -> int | None:
        """The only expert this learner ever plays, if there is one."""
        return None

    @abstractmethod
    def distribution(self) -> FloatArray:
        """Probabilities over experts ([N], sums to 1) for the next round."""

    def select(self, rng: np.random.Generator, awake: BoolArray | None = None) -> int:
        """Sample an expert from `distribution()` (restricted to the `awake` experts when
        given; at least one must be)."""
        p = self.distribution() if awake is None else self.awake_distribution(awake)
        return sample_index(p, rng)

    def awake_distribution(self, awake: BoolArray) -> FloatArray:
        """The distribution restricted to the awake experts and renormalised; where it puts no
        mass on any of them (NormalHedge gives experts without positive regret none), the
        fallback is `_asleep_fallback` over the awake ones."""
        mask = np.asarray(awake, dtype=bool)
        if mask.shape != (self._n,) or not mask.any():
            raise ValueError(f"expected a mask over {self._n} experts with one awake")
        p = np.where(mask, self.distribution(), 0.0)
        if p.sum() <= 0.0:
            p = np.where(mask, self._asleep_fallback(), 0.0)
        return p / p.sum()

    def _asleep_fallback(self) -> FloatArray:
        return np.ones(self._n)

    def sleeping_losses(self, losses: npt.ArrayLike, awake: BoolArray) -> FloatArray:
        """`losses` with every asleep expert's entry replaced by the learner's expected loss
        over the awake ones, ℓ̂ = Σ_awake p_i ℓ_i / Σ_awake p_i (module docstring): the
        learner's loss on the round is then ℓ̂ and an asleep expert's regret r = ℓ̂ - ℓ̂ = 0."""
        ell = np.asarray(losses, dtype=np.float64)
        mask = np.asarray(awake, dtype=bool)
        if mask.all():
            return ell
        fill = float(self.awake_distribution(mask) @ np.where(mask, ell, 0.0))
        return np.where(mask, ell, fill)

    @abstractmethod
    def update(self, losses: npt.ArrayLike) -> None:
        """Full-information feedback: one loss in [0, 1] per expert ([N])."""

    @abstractmethod
    def update_bandit(self, arm: int, accepted_len: float, max_len: int) -> None:
        """Bandit feedback: tokens committed (bonus included, in [1, max_len]) by `arm`."""

    @abstractmethod
    def add_expert(self) -> None:
        """Append expert N (pool change between requests)."""

    @abstractmethod
    def remove_expert(self, index: int) -> None:
        """Drop expert `index`; later experts shift down by one."""

    def permute(self, order: Sequence[int]) -> None:
        """Reorder the experts: new expert j is old expert `order[j]`, with all its state.

        Used when a learner kept across requests meets a pool listed in another order; the
        learner then behaves exactly as one that had seen the same feedback in the new order.
        """
        if sorted(order) != list(range(self._n)):
            raise ValueError(f"{list(order)} is not a permutation of {self._n} experts")
        index = list(order)
        for name in self._expert_state:
            value = getattr(self, name)
            if isinstance(value, np.ndarray):
                setattr(self, name, value[np.asarray(index, dtype=np.intp)])
            else:
                setattr(self, name, [value[i] for i in index])

    def _shrink(self, index: int) -> None:
        """Validate a removal and decrement N; subclasses then drop their own state."""
        if not 0 <= index < self._n:
            raise IndexError(f"expert {index} out of range for {self._n} experts")
        if self._n == 1:
            raise ValueError("cannot remove the last expert")
        self._n -= 1


class FullInformationLearner(Learner):
    """Learns from a loss for every expert; bandit feedback is ignored."""

    full_information: ClassVar[bool] = True
    counterfactual: ClassVar[bool] = True

    def update_bandit(self, arm: int, accepted_len: float, max_len: int) -> None:
        return None


class BanditLearner(Learner):
    """Learns only from the played arm's accepted length; loss vectors are ignored."""

    full_information: ClassVar[bool] = False
    counterfactual: ClassVar[bool] = False

    def update(self, losses: npt.ArrayLike) -> None:
        return None

    def _check_feedback(self, arm: int, accepted_len: float, max_len: int) -> float:
        """Validate one observation; return the accepted length Y clipped to [1, max_len]."""
        if not 0 <= arm < self._n:
            raise IndexError(f"arm {arm} out of range for {self._n} arms")
        if max_len < 2:
            raise ValueError("max_len must be >= 2 (depth >= 1)")
        if not 1.0 - _SLACK <= accepted_len <= max_len + _SLACK:
            raise ValueError(f"accepted length {accepted_len} outside [1, {max_len}]")
        return min(max(float(accepted_len), 1.0), float(max_len))


def sample_index(p: FloatArray, rng: np.random.Generator) -> int:
    """Inverse-CDF draw from p ([N]); zero-probability entries are never returned."""
    cdf = np.cumsum(p)
    index = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
    return min(index, p.shape[0] - 1)


def check_losses(losses: npt.ArrayLike, n: int) -> list[float]:
    """Validate a loss vector ([N] in [0, 1], rounding tolerated); return it clipped.

    Plain floats: learners run on a handful of experts, where per-call numpy overhead would
    dominate the update.
    """
    arr = np.asarray(losses, dtype=np.float64)
    if arr.shape != (n,):
        raise ValueError(f"expected {n} losses, got shape {arr.shape}")
    values: list[float] = arr.tolist()
    # Comparisons written so that NaN fails them.
    if all(0.0 <= x <= 1.0 for x in values):
        return values
    if not all(-_SLACK <= x <= 1.0 + _SLACK for x in values):
        raise ValueError("losses must lie in [0, 1]")
    return [min(max(x, 0.0), 1.0) for x in values]


def check_prior(prior: Sequence[float] | None, n: int) -> list[float]:
    """A prior over n experts, normalised; uniform when None. Every expert needs positive
    mass: one with none could never gain weight, whatever its losses."""
    if prior is None:
        return [1.0 / n] * n
    values = [float(x) for x in prior]
    if len(values) != n:
        raise ValueError(f"expected a prior over {n} experts, got {len(values)}")
    if not all(math.isfinite(x) and x > 0.0 for x in values):
        raise ValueError(f"every expert needs a positive finite prior, got {values}")
    total = sum(values)
    return [x / total for x in values]


def softmax_log(log_w: FloatArray) -> FloatArray:
    """Normalise log-weights ([N], -inf allowed); uniform when every weight is zero."""
    top = log_w.max()
    if not np.isfinite(top):
        return np.full(log_w.shape[0], 1.0 / log_w.shape[0])
    w = np.exp(log_w - top)
    return w / w.sum()


def solve_normalhedge_scale(v: list[float], guess: float | None = None,
                            max_iter: int = 60, rtol: float = 1e-13,
                            prior: list[float] | None = None) -> float:
    """Solve Σ_i π_i exp(v_i·y) = e for y, given v_i ∈ [0, 1] with max_i v_i = 1 and a prior
    π (uniform 1/N when None).

    This is NormalHedge's equation Σ_i π_i exp([R_i]_+² / 2c) = e in the scale-free
    variable y = u_max / c, u_i = [R_i]_+² / 2, v_i = u_i / u_max. The reference bracket
    c ∈ [u_max/(1 + ln(1/π_top)), u_max] (π_top: the prior of an expert with v = 1; ln N when
    uniform) becomes y ∈ [1, 1 + ln(1/π_top)], and every exponent stays in that range: the
    sum cannot overflow however large R grows, so the log-sum-exp shift is built in.
    h(y) = log Σ π_i exp(v_i·y) is convex and increasing, so Newton steps from the
    right of the root approach it monotonically and quadratically; any step that leaves the
    shrinking bracket is replaced by a bisection step in log y (= bisection in log c). A warm
    start from the previous round's y makes a typical update 2-3 iterations.
    """
    n = len(v)
    pi = prior if prior is not None else [1.0 / n] * n
    top = max(p for p, vi in zip(pi, v, strict=True) if vi >= 1.0)
    lo, hi = 1.0, 1.0 - math.log(top)
    y = hi if guess is None else min(max(guess, lo), hi)
    for _ in range(max_iter):
        terms = [p * math.exp(vi * y) for p, vi in zip(pi, v, strict=True)]
        total = sum(terms)
        excess = math.log(total) - 1.0  # h(y) - 1 in the docstring's terms
        if excess > 0.0:
            hi = y
        else:
            lo = y
        slope = sum(vi * t for vi, t in zip(v, terms, strict=True)) / total  # h'(y) > 0
        nxt = y - excess / slope
        if not lo <= nxt <= hi:
            nxt = math.sqrt(lo * hi)
        if abs(nxt - y) <= rtol * y:
            return nxt
        y = nxt
    return y


class NormalHedge(FullInformationLearner):
    """NormalHedge (Chaudhuri, Freund, Hsu 2009), exact update, no learning rate.

    R_i = Σ_t (⟨p_t, ℓ_t⟩ - ℓ_{t,i}); p_i ∝ π_i · ([R_i]_+ / c) · exp([R_i]_+² / 2c), with c
    solving Σ_i π_i exp([R_i]_+² / 2c) = e; p = π while no expert has positive regret. The
    prior π is uniform unless given (the paper's setting); a prior puts weight where a side
    signal (the prompt router, core/selection/router.py) expects the best drafter, and the regret
    against expert i grows as sqrt(T · ln(1/π_i)) instead of sqrt(T · ln N), so a prior that
    keeps every π_i >= 1/(2N) costs at most ln 2 inside the root when it is wrong.
    State is plain Python floats (see `check_losses`): an update costs microseconds.
    """

    _expert_state = ("_regret", "_p", "_prior")

    def __init__(self, num_experts: int, prior: Sequence[float] | None = None) -> None:
        super().__init__(num_experts)
        self._regret = [0.0] * num_experts
        self._prior = check_prior(prior, num_experts)
        self._p = list(self._prior)
        self._y: float | None = None  # u_max / c of the last update; warm start of the solver

    @property
    def prior(self) -> FloatArray:
        return np.array(self._prior)

    @property
    def regrets(self) -> FloatArray:
        """Cumulative regret R_i of the learner against each expert ([N])."""
        return np.array(self._regret)

    @property
    def scale(self) -> float:
        """c of the current weights (0.0 while no expert has positive regret)."""
        top = max(self._regret)
        return top * top / (2.0 * self._y) if top > 0.0 and self._y else 0.0

    def distribution(self) -> FloatArray:
        return np.array(self._p)

    def _asleep_fallback(self) -> FloatArray:
        return np.array(self._prior)

    def update(self, losses: npt.ArrayLike) -> None:
        ell = check_losses(losses, self._n)
        learner_loss = sum(p * x for p, x in zip(self._p, ell, strict=True))
        self._regret = [r + learner_loss - x for r, x in zip(self._regret, ell, strict=True)]
        self._reweight()

    def set_prior(self, prior: Sequence[float]) -> None:
        """Replace π, keeping the regrets: a session's next request carries what the learner
        learned, with the side signal (the router's view) of its own prompt."""
        self._prior = check_prior(prior, self._n)
        self._y = None
        self._reweight()

    def add_expert(self) -> None:
        # A newcomer starts with zero regret: it gains weight only by beating the learner. Its
        # prior is the mean one (1/N when uniform), the others' shrink in proportion.
        self._n += 1
        self._regret.append(0.0)
        self._prior = [x * (self._n - 1) / self._n for x in self._prior] + [1.0 / self._n]
        self._reweight()

    def remove_expert(self, index: int) -> None:
        self._shrink(index)
        del self._regret[index]
        del self._prior[index]
        total = sum(self._prior)
        self._prior = [x / total for x in self._prior]
        self._reweight()

    def _reweight(self) -> None:
        top = max(self._regret)
        if top <= 0.0:
            self._p, self._y = list(self._prior), None
            return
        ratio = [r / top if r > 0.0 else 0.0 for r in self._regret]  # [R_i]_+ / max_j [R_j]_+
        v = [x * x for x in ratio]
        y = self._y = solve_normalhedge_scale(v, self._y, prior=self._prior)
        # log w_i = log π_i + log [R_i]_+ - log c + u_i/c
        #         = log π_i + log ratio_i + v_i·y + (terms equal for all i)
        w = [pi * x * math.exp(vi * y)
             for pi, x, vi in zip(self._prior, ratio, v, strict=True)]
        total = sum(w)
        self._p = [wi / total for wi in w]


class AdaNormalHedge(FullInformationLearner):
    """AdaNormalHedge (Luo, Schapire 2015) with a uniform prior.

    R_i = Σ_t r_{t,i}, C_i = Σ_t |r_{t,i}| with r_{t,i} = ⟨p_t, ℓ_t⟩ - ℓ_{t,i};
    p_i ∝ w(R_i, C_i) = ½ (Φ(R_i + 1, C_i + 1) - Φ(R_i - 1, C_i + 1)), Φ(R, C) = exp([R]_+²/3C).
    Φ's exponent grows linearly in t, so weights are formed in log space.
    """

    _expert_state = ("_regret", "_abs_regret", "_p")

    def __init__(self, num_experts: int) -> None:
        super().__init__(num_experts)
        self._regret = np.zeros(num_experts)
        self._abs_regret = np.zeros(num_experts)
        self._p = np.full(num_experts, 1.0 / num_experts)

    def distribution(self) -> FloatArray:
        return self._p.copy()

    def update(self, losses: npt.ArrayLike) -> None:
        ell = np.array(check_losses(losses, self._n))
        r = self._p @ ell - ell
        self._regret += r
        self._abs_regret += np.abs(r)
        self._reweight()

    def add_expert(self) -> None:
        self._n += 1
        self._regret = np.append(self._regret, 0.0)
        self._abs_regret = np.append(self._abs_regret, 0.0)
        self._reweight()

    def remove_expert(self, index: int) -> None:
        self._shrink(index)
        self._regret = np.delete(self._regret, index)
        self._abs_regret = np.delete(self._abs_regret, index)
        self._reweight()

    def _reweight(self) -> None:
        denom = 3.0 * (self._abs_regret + 1.0)
        upper = np.maximum(self._regret + 1.0, 0.0) ** 2 / denom
        lower = np.maximum(self._regret - 1.0, 0.0) ** 2 / denom
        # log(e^upper - e^lower) = upper + log(1 - e^(lower - upper)); -inf when R <= -1.
        with np.errstate(divide="ignore"):
            self._p = softmax_log(upper + np.log(-np.expm1(lower - upper)))


class Hedge(FullInformationLearner):
    """Exponential weights p_i ∝ exp(-η_t L_i) with the anytime rate η_t = eta / √t.

    L_i is expert i's cumulative loss and t the round about to be played (updates + 1). The
    usual bound is regret <= (ln N / eta + eta/4) √T, minimised by eta = 2√(ln N); the
    default eta = 2 is close to that for pools of 2-5 drafters.
    """

    _expert_state = ("_loss",)

    def __init__(self, num_experts: int, eta: float = 2.0) -> None:
        super().__init__(num_experts)
        if not eta > 0.0:
            raise ValueError("eta must be > 0")
        self.eta = eta
        self._loss = np.zeros(num_experts)
        self._learner_loss = 0.0  # Σ_t ⟨p_t, ℓ_t⟩, the starting point of a new expert
        self._updates = 0

    def distribution(self) -> FloatArray:
        rate = self.eta / math.sqrt(self._updates + 1)
        return softmax_log(-rate * self._loss)

    def update(self, losses: npt.ArrayLike) -> None:
        ell = np.array(check_losses(losses, self._n))
        self._learner_loss += float(self.distribution() @ ell)
        self._loss += ell
        self._updates += 1

    def add_expert(self) -> None:
        # Zero regret against the learner, as for NormalHedge; a zero loss would dominate.
        self._n += 1
        self._loss = np.append(self._loss, self._learner_loss)

    def remove_expert(self, index: int) -> None:
        self._shrink(index)
        self._loss = np.delete(self._loss, index)


class UCBSpec(BanditLearner):
    """UCBSpec (BanditSpec, Algorithm 4): play each arm once, then the highest upper bound

        UCB_i = μ̂_i + (L/2) · √( (1 + n_i)/n_i² · (1 + 2 ln(N t² √(1 + n_i) / δ)) ),

    with μ̂_i the mean accepted length (tokens, bonus included) of arm i's n_i pulls, t the
    number of rounds played and L = max_len - 1 the width of the reward range (sub-Gaussian
    σ = L/2). The grouping under the root is reconstructed (reference notes 2.8). Selection
    is deterministic; `select`'s rng is unused.
    """

    _expert_state = ("_pulls", "_sums")

    def __init__(self, num_experts: int, max_len: int = 8, delta: float = 0.05) -> None:
        super().__init__(num_experts)
        if max_len < 2 or not 0.0 < delta < 1.0:
            raise ValueError("need max_len >= 2 and 0 < delta < 1")
        self.max_len = max_len  # K + 1; refreshed by every observation
        self.delta = delta
        self._pulls = np.zeros(num_experts)
        self._sums = np.zeros(num_experts)

    @property
    def pulls(self) -> FloatArray:
        return self._pulls.copy()

    def upper_bounds(self) -> FloatArray:
        """UCB_i in tokens ([N]); +inf for arms never played."""
        n = self._pulls
        played = n > 0
        safe = np.where(played, n, 1.0)
        t = max(float(n.sum()), 1.0)
        log_term = np.log(self._n * t * t * np.sqrt(1.0 + safe) / self.delta)
        radius = 0.5 * (self.max_len - 1) * np.sqrt((1.0 + safe) / safe**2 * (1.0 + 2.0 * log_term))
        return np.where(played, self._sums / safe + radius, np.inf)

    def distribution(self) -> FloatArray:
        p = np.zeros(self._n)
        p[self._next_arm()] = 1.0
        return p

    def select(self, rng: np.random.Generator, awake: BoolArray | None = None) -> int:
        if awake is None:
            return self._next_arm()
        return int(np.argmax(np.where(awake, self.upper_bounds(), -np.inf)))

    def update_bandit(self, arm: int, accepted_len: float, max_len: int) -> None:
        y = self._check_feedback(arm, accepted_len, max_len)
        self.max_len = max_len
        self._pulls[arm] += 1.0
        self._sums[arm] += y

    def add_expert(self) -> None:
        self._n += 1  # never played: it is tried next
        self._pulls = np.append(self._pulls, 0.0)
        self._sums = np.append(self._sums, 0.0)

    def remove_expert(self, index: int) -> None:
        self._shrink(index)
        self._pulls = np.delete(self._pulls, index)
        self._sums = np.delete(self._sums, index)

    def _next_arm(self) -> int:
        # Unplayed arms have an infinite bound and argmax takes the first: round robin.
        return int(np.argmax(self.upper_bounds()))


class EXP3Spec(BanditLearner):
    """EXP3Spec (BanditSpec, Algorithm 5; anytime EXP3): p_i ∝ exp(-η_t Σ_s Ẑ_{i,s}),
    η_t = √(ln N / (t N)), with the importance-weighted loss of the played arm only,

        Ẑ_{i,t} = 1{i = I_t} · (max_len - Y_t) / ((max_len - 1) · p_{t,i}),

    i.e. BanditSpec's (L + 1 - Y)/(L p) with L = max_len - 1. The estimate is unbiased only
    because `select` draws the arm from p.
    """

    _expert_state = ("_estimates",)

    def __init__(self, num_experts: int) -> None:
        super().__init__(num_experts)
        self._estimates = np.zeros(num_experts)
        self._rounds = 0
        self._learner_loss = 0.0  # Σ_t normalised loss of the played arm
        self._played: FloatArray | None = None

    @property
    def loss_estimates(self) -> FloatArray:
        """Σ_s Ẑ_{i,s}, the importance-weighted cumulative loss of each arm ([N])."""
        return self._estimates.copy()

    def rate(self) -> float:
        t = self._rounds + 1
        return math.sqrt(math.log(self._n) / (t * self._n))

    def distribution(self) -> FloatArray:
        return softmax_log(-self.rate() * self._estimates)

    def select(self, rng: np.random.Generator, awake: BoolArray | None = None) -> int:
        p = self.distribution() if awake is None else self.awake_distribution(awake)
        self._played = p  # the importance weight needs the distribution the arm came from
        return sample_index(p, rng)

    def update_bandit(self, arm: int, accepted_len: float, max_len: int) -> None:
        y = self._check_feedback(arm, accepted_len, max_len)
        loss = (max_len - y) / (max_len - 1)
        # The distribution the arm was drawn from (select's; nothing has changed it since).
        played = self._played if self._played is not None else self.distribution()
        self._estimates[arm] += loss / played[arm]
        self._played = None
        self._learner_loss += loss
        self._rounds += 1

    def add_expert(self) -> None:
        # Estimated zero regret against the learner's own realised loss.
        self._n += 1
        self._estimates = np.append(self._estimates, self._learner_loss)

    def remove_expert(self, index: int) -> None:
        self._shrink(index)
        self._estimates = np.delete(self._estimates, index)


class Fixed(Learner):
    """Always expert `index` (`fixed:<drafter>`); consumes no feedback, so the engine evaluates
    no drafter for it (unless `EngineConfig.evaluate_all` asks for the regret statistics)."""

    full_information: ClassVar[bool] = True
    counterfactual: ClassVar[bool] = False

    def __init__(self, num_experts: int, index: int) -> None:
        super().__init__(num_experts)
        if not 0 <= index < num_experts:
            raise IndexError(f"fixed expert {index} out of range for {num_experts} experts")
        self.index = index

    @property
    def fixed_index(self) -> int | None:
        return self.index

    def distribution(self) -> FloatArray:
        p = np.zeros(self._n)
        p[self.index] = 1.0
        return p

    def select(self, rng: np.random.Generator, awake: BoolArray | None = None) -> int:
        return self.index  # asleep or not: the round then drafts nothing (a plain step)

    def update(self, losses: npt.ArrayLike) -> None:
        return None

    def update_bandit(self, arm: int, accepted_len: float, max_len: int) -> None:
        return None

    def add_expert(self) -> None:
        self._n += 1

    def permute(self, order: Sequence[int]) -> None:
        super().permute(order)
        self.index = list(order).index(self.index)

    def remove_expert(self, index: int) -> None:
        if index == self.index:
            raise ValueError("cannot remove the fixed expert")
        self._shrink(index)
        if index < self.index:
            self.index -= 1


def make_learner(name: str, num_experts: int, *, max_len: int = 8,
                 fixed_index: int | None = None, prior: Sequence[float] | None = None) -> Learner:
    """Build a learner by name (one of LEARNER_KINDS).

    max_len = K + 1 is UCBSpec's initial reward scale (each observation refreshes it);
    fixed_index is required by "fixed" and ignored otherwise; a prior over the experts is
    taken by NormalHedge only (others refuse one).
    """
    if prior is not None and name != "normalhedge":
        raise ValueError(f"learner {name!r} takes no prior (only normalhedge does)")
    if name == "normalhedge":
        return NormalHedge(num_experts, prior)
    if name == "adanormalhedge":
        return AdaNormalHedge(num_experts)
    if name == "hedge":
        return Hedge(num_experts)
    if name == "ucbspec":
        return UCBSpec(num_experts, max_len=max_len)
    if name == "exp3spec":
        return EXP3Spec(num_experts)
    if name == "fixed":
        if fixed_index is None:
            raise ValueError("the fixed learner needs fixed_index")
        return Fixed(num_experts, fixed_index)
    raise ValueError(f"unknown learner {name!r}; expected one of {LEARNER_KINDS}")
