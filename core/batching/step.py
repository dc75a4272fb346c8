"""One step's rounds: a round for each running request, verified in one target pass (DESIGN.md
section 3, per request, with the passes shared; a step of one request is the round-robin
engine's):

  1. each request's learner picks its drafter            (per row)
  2. the requests that chose the same drafter grow their
     trees together                                      (core/speculation/drafting.grow_trees)
  3. one target forward verifies every tree              (Target.forward_rows, slot cache)
  4. lossless acceptance per row; every row's KV
     compacted at once                                   (request_round.verify_tree, SlotCache.keep)
  5. the evaluation phase over requests x drafters: catch-ups of the same drafters batched
     across requests (drafter_pool.sync_many), then γ and the learner update per row

Each row's arithmetic is the per-request round's (core/decoding/request_round.py supplies the
pieces), so greedy output stays plain greedy decoding and sampling stays lossless whatever
the batch.

Failures: a shared pass that raises (a drafter's batch, the target pass, a catch-up batch) is
retried row by row before anything is committed, so only the request that caused it fails;
per-row pieces fail their row only. A row that fails after committing still returns its tokens.
A row's phase times (RoundStats.draft_s, ...) are the batch's wall times: what the request
waited for; summed over requests they exceed the step's wall time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from core.config import EngineConfig
from core.decoding.request import RequestState
from core.decoding.request_round import (
    Verified,
    commit_verified,
    draft_order,
    hybrid_tree,
    learn_from,
    logit_rows,
    record_pairs,
    round_stats,
    verify_tree,
)
from core.model.kv_cache import SlotCache
from core.model.target import Target, TargetOutput, fill_rows
from core.selection.arm_costs import FREE, NEURAL, PLAIN, PlannedRow, StepCosts, StepSample
from core.speculation.drafter_pool import Candidates, PoolSnapshot
from core.speculation.eagle3_members import Eagle3Members
from core.speculation.members import DraftOrder, MemberGroup, MemberStates
from core.speculation.tree import DraftTree, chain_tree
from core.stats import RoundStats

log = logging.getLogger(__name__)


@dataclass
class RowResult:
    """What a step did for one request: committed tokens, its round, or why it failed."""

    state: RequestState
    tokens: list[int] = field(default_factory=list)
    round: RoundStats | None = None
    error: Exception | None = None


@dataclass
class _Row:
    state: RequestState
    slot: int
    weights: dict[str, float] = field(default_factory=dict)
    chosen: int | None = None
    n: int = 0  # committed tokens in the target cache; the root is next
    tree: DraftTree | None = None
    out: TargetOutput | None = None
    v: Verified | None = None
    committed: list[int] | None = None
    cur: Candidates | None = None
    due: bool = False  # the request's evaluation runs this step
    awake: bool = False  # it drafts or its pool evaluates this step (shares the step's saving)
    restart: bool = False  # its sleeping EAGLE-3 drafters restart this step
    error: Exception | None = None


def batched_round(target: Target, cache: SlotCache, rows: list[tuple[RequestState, int]],
                  config: EngineConfig, visited: bool = True, speculate: bool = True,
                  clock: Callable[[], float] = time.perf_counter,
                  costs: StepCosts | None = None) -> list[RowResult]:
    """One round for each (request, slot) row; the requests must be prefilled and unfinished.
    `visited`: the LM head computes the roots' rows up front and the walks the rest (else
    every node's row in one call; core/batching/head_rows.py chooses). `speculate` False (the
    cost model's plain probe steps): no row drafts; each commits one token and the learners
    still learn from it. `clock` times the phases (SpecEngine.clock);
    `costs` gets the step's measurement (core/selection/arm_costs.py)."""
    work = [_Row(state, slot) for state, slot in rows]
    t0 = clock()
    _each(work, lambda r: _select(r, cache, speculate, len(work)))
    if costs is not None:
        _check_step(_live(work), costs)
    drafting = _draft(_live(work), config, clock)
    t1 = clock()
    _batched(_live(work), lambda rs: _forward(target, cache, rs))
    th = clock()
    _batched(_live(work), lambda rs: _head(rs, visited))
    _each(_live(work), _verify)
    head_s = clock() - th
    live = _live(work)
    cache.keep([r.slot for r in live], [r.v.path for r in live if r.v is not None])
    _each(live, _commit)
    t2 = clock()
    _evaluate(_live(work), config)
    t3 = clock()
    rows_in_pass = sum(r.out is not None for r in work)
    if costs is not None:
        _measure(costs, work, drafting, (t1 - t0, t2 - t1, t3 - t2))
        _credit_awake(costs, work, t3 - t0)
    return [_result(r, (t1 - t0, t2 - t1, t3 - t2), head_s, rows_in_pass) for r in work]


@dataclass
class _Drafting:
    """Where a step's drafting time went, by the members' cost kind (MemberGroup.cost_kind):
    rows drafted and seconds."""

    rows: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, kind: str, rows: int, seconds: float) -> None:
        self.rows[kind] = self.rows.get(kind, 0) + rows
        self.seconds[kind] = self.seconds.get(kind, 0.0) + seconds


def _measure(costs: StepCosts, work: list[_Row], drafting: _Drafting,
             times: tuple[float, float, float]) -> None:
    """The step's sample for the arms' cost model (core/selection/arm_costs.py)."""
    trees = [(r, r.tree) for r in work if r.out is not None and r.tree is not None]
    if not trees:
        return
    draft_s, verify_s, evaluate_s = times
    rows, seconds = drafting.rows, drafting.seconds
    costs.record(StepSample(
        # the rows the pass computes: each tree's own (the padding to the widest costs next
        # to nothing: core/selection/arm_costs.py)
        requests=len(trees), rows=sum(int(t.tokens.numel()) for _, t in trees),
        verify_s=verify_s, neural_rows=rows.get(NEURAL, 0), neural_s=seconds.get(NEURAL, 0.0),
        free_rows=rows.get(FREE, 0), free_s=seconds.get(FREE, 0.0), evaluate_s=evaluate_s,
        other_s=max(draft_s - seconds.get(FREE, 0.0) - seconds.get(NEURAL, 0.0), 0.0),
        awake=sum(r.awake and r.state.evaluate for r, _ in trees)))
    for r, tree in trees:
        # a model-free member's tree is as large as its lookups find: the cost model learns it
        if r.chosen is not None and r.state.members.cost_kind(r.chosen) == FREE:
            costs.record_drafted(r.state.snapshot.ids[r.chosen], tree.num_drafted)


def _credit_awake(costs: StepCosts, work: list[_Row], wall_s: float) -> None:
    """The step's saving against plain decoding, shared by its awake rows
    (ArmPolicy.awake_saving_s): its committed tokens at plain decoding's time per token at this
    step size (StepCosts.plain_token_s: the steps where every pool slept) less the step's
    measured time, drafting, padding and evaluation included. A step with no awake row
    measures that time per token instead. Measured, not modelled: the cost model prices an
    arm's round well (at two streams on two cores, 87 ms modelled for 86 ms measured) but a
    request's saving summed from it priced a drafting round's tokens at a plain row padded to
    its neighbours' trees: the two-stream starts awake reported savings of 0.2-0.9 s a request
    while their passes ran 0.85x plain decoding."""
    done = [(r, r.committed) for r in work if r.committed is not None]
    sharers = [r for r, _ in done if r.awake]
    if not sharers:
        if done:
            costs.note_asleep_step(len(done), wall_s)
        return
    per_token = costs.plain_token_s(len(done))
    if per_token is None:
        return
    saving = sum(len(committed) for _, committed in done) * per_token - wall_s
    for r in sharers:
        if r.state.arms is not None:
            r.state.arms.awake_saving_s += saving / len(sharers)


def _select(r: _Row, cache: SlotCache, speculate: bool, requests: int) -> None:
    r.n = len(r.state.token_ids) - 1
    if cache.lengths[r.slot] != r.n:
        raise RuntimeError(f"slot {r.slot} holds {cache.lengths[r.slot]} entries, "
                           f"the request {r.n}")
    r.weights = r.state.weights()
    if r.state.arms is not None:
        r.state.arms.step_requests = requests
    if speculate:
        r.chosen = r.state.select()
    r.awake = r.chosen is not None or (r.state.evaluate and not r.state.asleep)


def _check_step(rows: list[_Row], costs: StepCosts) -> None:
    """Under the time loss the step drafts only where that commits tokens faster than the
    same requests decoding plain (core/selection/arm_costs.CostModel.step_pays): on a CPU a step
    that drafts for any request pays the drafting and evaluation passes, so one request choosing
    plain decoding alone saves little. Otherwise the rows whose learners have plain decoding as an
    arm decode plain (a seeded sampled one too: its text does not depend on the trees,
    core/speculation/sampling.PositionNoise); their learners still learn, and the round counts
    as the plain arm's. A request alone in its step is not judged:
    its learner's plain arm weighs the same costs, and a second judge with a shorter memory
    overruled it (measured: slower at one stream)."""
    judged = [r for r in rows if r.state.plain_arm and r.chosen is not None]
    if len(rows) < 2 or not judged or costs.step_pays([_planned(r) for r in rows]):
        return
    for r in judged:
        r.chosen = None


def _planned(r: _Row) -> PlannedRow:
    """The row's part of the step as chosen (plain decoding for a request with no learner)."""
    if r.state.arms is None:  # no learner: nothing evaluated
        return PlannedRow(1.0, PLAIN, 1.0, awake=False)
    return r.state.arms.planned(r.chosen)


def _draft(rows: list[_Row], config: EngineConfig, clock: Callable[[], float]) -> _Drafting:
    """Plain rows get the chain of their root; the others draft with their chosen member's
    group (core/speculation/members.py): its catch-up batched over the group's rows, then one
    batch per batch key (an EAGLE-3 drafter's rows together, a lookup's alone). Times each
    cost kind's drafting."""
    spec = [r for r in rows if r.chosen is not None and r.state.dstate is not None]
    for r in rows:
        if r not in spec:
            r.tree = chain_tree([r.state.token_ids[-1]])
    by_kind: dict[type[MemberGroup], list[_Row]] = {}
    for r in spec:
        by_kind.setdefault(type(_group(r)), []).append(r)
    drafting = _Drafting()
    for kind_rows in by_kind.values():
        t0 = clock()
        _draft_kind(kind_rows, config)
        drafting.add(_group(kind_rows[0]).cost_kind, len(kind_rows), clock() - t0)
    return drafting


def _draft_kind(rows: list[_Row], config: EngineConfig) -> None:
    """Rows whose chosen members are of one kind (their groups may be of several snapshots:
    each order names its own)."""
    _batched(rows, lambda rs: _group(rs[0]).prepare([_order(r) for r in rs], config))
    batches: dict[object, list[_Row]] = {}
    for r in _live(rows):
        batches.setdefault(_group(r).batch_key(_order(r)), []).append(r)
    for batch in batches.values():
        _batched(batch, lambda rs: _grow(rs, config))


def _group(r: _Row) -> MemberGroup:
    assert r.chosen is not None
    return r.state.members.group_of(r.chosen)


def _order(r: _Row) -> DraftOrder:
    assert r.chosen is not None
    return draft_order(r.state, r.chosen)


def _grow(rows: list[_Row], config: EngineConfig) -> None:
    trees = _group(rows[0]).draft([_order(r) for r in rows], config)
    for r, tree in zip(rows, trees, strict=True):
        r.tree = hybrid_tree(r.state, tree, r.chosen, config)  # type: ignore[arg-type]


def _forward(target: Target, cache: SlotCache, rows: list[_Row]) -> None:
    trees = [r.tree for r in rows if r.tree is not None]
    outs = target.forward_rows(cache, [r.slot for r in rows], [t.tokens for t in trees],
                               [r.n + t.depths for r, t in zip(rows, trees, strict=True)],
                               [t.mask for t in trees])
    for r, out in zip(rows, outs, strict=True):
        r.out = out


def _head(rows: list[_Row], visited: bool) -> None:
    """The rows' first logits in one LM-head call: every row's root (the walks compute the
    nodes they visit further), or every node."""
    pairs = [(r.out, r.tree) for r in rows if r.out is not None and r.tree is not None]
    fill_rows([out for out, _ in pairs], [logit_rows(tree, visited) for _, tree in pairs])


def _verify(r: _Row) -> None:
    assert r.tree is not None and r.out is not None
    r.v = verify_tree(r.state, r.tree, r.out)


def _commit(r: _Row) -> None:
    assert r.v is not None
    r.committed = commit_verified(r.state, r.v)


def _evaluate(rows: list[_Row], config: EngineConfig) -> None:
    """Record every row's verified pairs; catch every drafter of the fully evaluated rows up
    (batched over requests and drafters); then γ and the learner per row (a pool asleep
    records pairs but evaluates nothing)."""
    feeding: list[_Row] = []
    for r in rows:
        try:
            if r.v is not None and record_pairs(r.state, r.v):
                feeding.append(r)
        except Exception as exc:
            _fail(r, exc)
    for r in feeding:
        r.due = r.state.evaluation_due()
    _batched([r for r in feeding if r.due and not r.state.drafters_asleep],
             lambda rs: _sync_all(rs, config))
    _each(_live(feeding), lambda r: _learn(r, config))
    waking = [r for r in _live(feeding) if r.state.wake_due()]
    _each(waking, _wake)
    _batched([r for r in waking if r.restart], lambda rs: _restart(rs, config))


def _learn(r: _Row, config: EngineConfig) -> None:
    assert r.v is not None
    learn_from(r.state, r.v, r.chosen, r.n, config, r.cur, r.due)


def _wake(r: _Row) -> None:
    """A probe: the request's pool evaluates again (RequestState.wake); its sleeping EAGLE-3
    drafters restart from their last verified pairs unless plain decoding dominates them
    (`restart`: their catch-up follows, batched over requests)."""
    r.restart = r.state.wake()


def _restart(rows: list[_Row], config: EngineConfig) -> None:
    """The woken drafters' catch-up on the pairs they restart from, batched over requests;
    only the last pair's top-k is needed: the next evaluation's first root."""
    curs = Eagle3Members.catch_up_requests(_member_states(rows), config.tree.top_k, scored=1)
    for r, cur in zip(rows, curs, strict=True):
        r.state.pending = cur


def _sync_all(rows: list[_Row], config: EngineConfig) -> None:
    curs = Eagle3Members.catch_up_requests(_member_states(rows), config.tree.top_k)
    for r, cur in zip(rows, curs, strict=True):
        r.cur = cur


def _member_states(rows: list[_Row]) -> list[tuple[MemberStates, PoolSnapshot]]:
    return [(r.state.member_states(), r.state.snapshot) for r in rows]


def _result(r: _Row, times: tuple[float, float, float], head_s: float,
            rows_in_pass: int) -> RowResult:
    if r.committed is None:
        return RowResult(r.state, [], None, r.error)
    assert r.v is not None
    rs = round_stats(r.state, r.v, r.chosen, r.weights, len(r.committed), times, head_s)
    return RowResult(r.state, r.committed, replace(rs, batch_rows=rows_in_pass), r.error)


def with_bookkeeping(result: RowResult, wall_s: float) -> RowResult:
    """The step's wall time not spent drafting, verifying or evaluating, as the round's
    bookkeeping."""
    rs = result.round
    if rs is None:
        return result
    rest = max(wall_s - rs.draft_s - rs.verify_s - rs.evaluate_s, 0.0)
    result.state.stats.time_bookkeeping_s += rest
    return replace(result, round=replace(rs, bookkeeping_s=rest))


# -- failure isolation -----------------------------------------------------------------------------
def _live(rows: list[_Row]) -> list[_Row]:
    return [r for r in rows if r.error is None]


def _fail(r: _Row, exc: Exception) -> None:
    log.exception("round of request %s failed", r.state.request_id, exc_info=exc)
    r.error = exc


def _each(rows: list[_Row], fn: Callable[[_Row], object]) -> None:
    """fn on each row; an exception fails that row only."""
    for r in rows:
        try:
            fn(r)
        except Exception as exc:
            _fail(r, exc)


def _batched(rows: list[_Row], fn: Callable[[list[_Row]], None]) -> None:
    """fn over every row at once; if it raises, over each row alone, so that the failure lands
    on the rows that cause it (every shared pass is safe to rerun: nothing is committed yet)."""
    if not rows:
        return
    try:
        fn(rows)
    except Exception as exc:
        if len(rows) == 1:
            _fail(rows[0], exc)
            return
        log.warning("a batched pass over %d requests failed; retrying them one by one", len(rows))
        _each(rows, lambda r: fn([r]))
