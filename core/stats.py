"""Per-round and per-request statistics, exposed by the engine for the gateway and admin page.

`StatsSnapshot` declares a request's statistics once; it is the frozen copy every `RoundOutput`
carries, so what crosses to another thread (the gateway's event loop) can never change under its
reader. `RequestStats` is the running tally a request's rounds update on the engine thread, the
same fields in mutable form.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class TokenLogprob:
    """Target log-probability of one committed token, plus the `top` most likely alternatives."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class RoundStats:
    """One round of one request (its rows of one verification pass; core/__init__.py defines
    round, step and pass): speculative, or plain (`plain`)."""

    round_index: int  # the request's rounds before this one, plain ones included
    drafter: str | None  # None in plain mode
    drafted: int  # draft tokens sent to the target (tree nodes, root excluded)
    accepted: int  # draft tokens accepted (bonus excluded)
    committed: int  # tokens committed this round (accepted + bonus, after stop truncation)
    draft_s: float
    verify_s: float
    evaluate_s: float
    bookkeeping_s: float
    weights: dict[str, float] = field(default_factory=dict)  # learner distribution used this round
    # Requests whose trees this round's target pass verified together (1: round-robin, plain).
    batch_rows: int = 1
    # Of verify_s: the LM head and the acceptance walk (what bench/speed/verify_logits.py compares).
    head_s: float = 0.0
    # A plain round of a request that speculates: nothing drafted (the time loss chose its
    # plain arm or the step's cost check did, a probe step of the cost model, or no drafter
    # was awake).
    # Not a speculative round: outside `rounds` and MAT.
    plain: bool = False


@dataclass(frozen=True)
class StatsSnapshot:
    """The statistics of one request, declared once: this field list is the one the engine's
    running tally (`RequestStats`) mirrors and the gateway's wire event and request-log row are
    derived from (`gateway.live.events.FINAL_STATS_SOURCE`, `gateway.pool.request_log`), with a
    test that fails when a field added here reaches neither and is not listed as left off.

    Frozen, with sequences as tuples and mappings as read-only views: every `RoundOutput`
    carries one, the state at the end of its round, to another thread. `regret_curve[t]` is the
    cumulative regret in tokens against the best single drafter in hindsight after the t-th
    completed feedback window, computed from the ÂL estimates of every drafter (chosen drafter
    included). The properties below derive the reported measures (MAT, regrets) from the fields.
    """

    policy: str
    drafter_ids: tuple[str, ...]
    prompt_tokens: int
    completion_tokens: int
    prefill_tokens: int  # the first token, sampled from the prefill pass (not a round)
    rounds: int
    target_forwards: int  # prefill included
    num_draft_tokens: int
    num_accepted_draft_tokens: int
    accepted_per_round: tuple[int, ...]
    drafter_per_round: tuple[str | None, ...]
    accepted_by_position: tuple[int, ...]  # count accepted at depth k+1
    weights: Mapping[str, float]
    est_len_sum: Mapping[str, float]  # Σ_t ÂL_d(t) per drafter
    chosen_est_len_sum: float  # Σ_t ÂL_{i_t}(t)
    regret_curve: tuple[float, ...]
    estimates: tuple[tuple[float, int], ...]  # (ÂL chosen, realised)
    # Under the time loss (core/selection/arm_costs.py) the regret is the learner's own, in net
    # seconds: per arm Σ_t s_a(t), each window's net seconds (its time less its tokens at the
    # request's running best time per token λ_t; an asleep arm charged the learner's expected
    # net seconds over the awake ones, as its loss is), and the learner's Σ_t ⟨p_t, s_t⟩ and
    # Σ_t ⟨p_t, ÂL_t⟩ under the weights p_t it updated with (what NormalHedge's regret is
    # measured against). The token regret above is then not computed: it scores the rounds
    # played, plain rounds the step check forced included, against ÂL, not the loss minimised.
    time_loss: bool
    arm_seconds: Mapping[str, float]
    learner_seconds: float
    learner_tokens: float
    time_per_token: float | None  # λ after the last window (seconds a token)
    # The regret in seconds after each window the learner updated on.
    regret_seconds_curve: tuple[float, ...]
    time_draft_s: float
    time_verify_s: float
    time_evaluate_s: float
    time_bookkeeping_s: float
    # Finished requests of the same session whose learner this request started from (0: cold).
    warm_start_requests: int
    # Plain rounds (RoundStats.plain; `rounds` counts the speculative ones), and their tokens.
    plain_rounds: int
    plain_tokens: int
    # The round index (RoundStats.round_index: speculative and plain rounds counted together)
    # of each plain round, so a per-round view can interleave them with `drafter_per_round`.
    plain_round_indices: tuple[int, ...]
    # Rounds run while the request's EAGLE-3 drafters slept (core/selection/arm_policy.py), and
    # how often they were woken to be scored again.
    asleep_rounds: int
    wakes: int

    @property
    def mean_acceptance_length(self) -> float:
        """MAT: tokens committed per verification pass, bonus included (vLLM's name for it),
        over the request's speculative rounds (not its plain rounds)."""
        spec = self.completion_tokens - self.prefill_tokens - self.plain_tokens
        return spec / self.rounds if self.rounds else 0.0

    @property
    def draft_acceptance_rate(self) -> float:
        """Accepted draft tokens over drafted ones (0 when nothing was drafted)."""
        drafted = self.num_draft_tokens
        return self.num_accepted_draft_tokens / drafted if drafted else 0.0

    @property
    def regret_tokens(self) -> float | None:
        """Under the acceptance losses: regret against the best drafter in hindsight, in
        tokens; None under the time loss (its regret is `regret_seconds`) and where no feedback
        window was scored (policies fixed, router, the bandits and none do not evaluate every
        drafter, so their regret is not computed, which 0.0 would misreport as none)."""
        return self.regret_curve[-1] if self.regret_curve else None

    @property
    def regret_seconds(self) -> float | None:
        """Under the time loss: the learner's regret as it minimises it, in net seconds (its
        expected net seconds under its weights less the best single arm's in hindsight, plain
        decoding among the arms; RequestStats.record_time_window); None where no window was
        costed. A learner that kept all its weight on the best arm throughout reports 0."""
        return self.regret_seconds_curve[-1] if self.regret_seconds_curve else None

    @property
    def regret_time_ratio(self) -> float | None:
        """The learner's time per token over the best arm's: 1 + regret_seconds / (λ x the
        tokens its weights expected), λ the best arm's running time per token (at a fixed λ the
        best arm's net seconds are 0 and the learner's are Σ⟨p, c⟩ - λ·Σ⟨p, ÂL⟩)."""
        regret, rate = self.regret_seconds, self.time_per_token
        if regret is None or rate is None or rate <= 0.0 or self.learner_tokens <= 0.0:
            return None
        return 1.0 + regret / (rate * self.learner_tokens)

    @property
    def regret(self) -> float | None:
        """The regret the request's learner minimised, in `regret_unit`."""
        return self.regret_seconds if self.time_loss else self.regret_tokens

    @property
    def regret_unit(self) -> str:
        return "s" if self.time_loss else "tokens"

    @property
    def regret_points(self) -> tuple[float, ...]:
        """`regret` after each feedback window."""
        return self.regret_seconds_curve if self.time_loss else self.regret_curve


@dataclass
class RequestStats:
    """The running tally of one request's statistics, updated by its rounds on the engine
    thread: `StatsSnapshot`'s fields (their meaning is documented there), field for field and
    in its order, with lists and dicts where the snapshot holds tuples and mappings, and the
    zero each starts from (tests/core/test_stats_snapshot.py pins the mirror). It is a second
    class because the engine's rounds assign typed fields in place, which a frozen dataclass
    forbids to its subclasses as well, so the snapshot cannot simply be this class frozen."""

    policy: str
    drafter_ids: tuple[str, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prefill_tokens: int = 0
    rounds: int = 0
    target_forwards: int = 0
    num_draft_tokens: int = 0
    num_accepted_draft_tokens: int = 0
    accepted_per_round: list[int] = field(default_factory=list)
    drafter_per_round: list[str | None] = field(default_factory=list)
    accepted_by_position: list[int] = field(default_factory=list)
    weights: dict[str, float] = field(default_factory=dict)
    est_len_sum: dict[str, float] = field(default_factory=dict)
    chosen_est_len_sum: float = 0.0
    regret_curve: list[float] = field(default_factory=list)
    estimates: list[tuple[float, int]] = field(default_factory=list)
    time_loss: bool = False
    arm_seconds: dict[str, float] = field(default_factory=dict)
    learner_seconds: float = 0.0
    learner_tokens: float = 0.0
    time_per_token: float | None = None
    regret_seconds_curve: list[float] = field(default_factory=list)
    time_draft_s: float = 0.0
    time_verify_s: float = 0.0
    time_evaluate_s: float = 0.0
    time_bookkeeping_s: float = 0.0
    warm_start_requests: int = 0
    plain_rounds: int = 0
    plain_tokens: int = 0
    plain_round_indices: list[int] = field(default_factory=list)
    asleep_rounds: int = 0
    wakes: int = 0

    def record_round(self, rs: RoundStats) -> None:
        self.target_forwards += 1
        self.completion_tokens += rs.committed
        self.time_draft_s += rs.draft_s
        self.time_verify_s += rs.verify_s
        self.time_evaluate_s += rs.evaluate_s
        self.time_bookkeeping_s += rs.bookkeeping_s
        if rs.plain:
            self.plain_round_indices.append(rs.round_index)
            self.plain_rounds += 1
            self.plain_tokens += rs.committed
            return
        self.rounds += 1
        self.num_draft_tokens += rs.drafted
        self.num_accepted_draft_tokens += rs.accepted
        self.accepted_per_round.append(rs.accepted)
        self.drafter_per_round.append(rs.drafter)
        while len(self.accepted_by_position) < rs.accepted:
            self.accepted_by_position.append(0)
        for k in range(rs.accepted):
            self.accepted_by_position[k] += 1

    def record_window(self, est: dict[str, float], chosen: str | None, realised: int) -> None:
        """Add one completed feedback window: ÂL_d for every drafter, and the chosen one's (a
        chosen arm that is not a drafter, plain decoding, commits 1 token); the token regret
        under the acceptance losses."""
        for d, v in est.items():
            self.est_len_sum[d] = self.est_len_sum.get(d, 0.0) + v
        if chosen is not None and chosen in est:
            self.chosen_est_len_sum += est[chosen]
            self.estimates.append((est[chosen], realised))
        elif chosen is not None:
            self.chosen_est_len_sum += 1.0
        if not self.time_loss:
            best = max(self.est_len_sum.values()) if self.est_len_sum else 0.0
            self.regret_curve.append(best - self.chosen_est_len_sum)

    def record_time_window(self, arms: tuple[str, ...], weights: FloatArray, net: FloatArray,
                           est_len: FloatArray, rate: float) -> None:
        """One window the learner updated on under the time loss: its weights p over `arms`,
        each arm's net seconds (asleep arms already charged the learner's expectation) and ÂL,
        and the rate λ they were valued at."""
        for a, v in zip(arms, net, strict=True):
            self.arm_seconds[a] = self.arm_seconds.get(a, 0.0) + float(v)
        self.learner_seconds += float(weights @ net)
        self.learner_tokens += float(weights @ est_len)
        self.time_per_token = rate
        self.regret_seconds_curve.append(self.learner_seconds - min(self.arm_seconds.values()))

    def snapshot(self) -> StatsSnapshot:
        """An immutable copy: sequences as tuples, mappings as read-only views of copies."""
        return StatsSnapshot(**{f.name: _frozen(getattr(self, f.name)) for f in fields(self)})



def _frozen(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, dict):
        return MappingProxyType(dict(value))
    return value
