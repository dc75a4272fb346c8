"""On a CPU, `verify_logits="auto"` measures both head settings in place and keeps the faster
(core/batching/head_rows.py): the choice follows what the head costs on the machine, and the tokens
do not depend on it."""

from __future__ import annotations

from dataclasses import replace

import torch

from bench.harness.tiny_models import bigram_setup
from core.batching.head_rows import HeadRows, bucket
from core.config import SamplingParams, TreeConfig
from core.engine import SpecEngine
from tests.modelled_clock import ModelledClock

TREE = TreeConfig(top_k=3, depth=4, total_tokens=12)


def probe(rows: HeadRows, visited_s: float, all_s: float, requests: int = 1) -> None:
    """Feed the chooser rounds costing the given seconds per request until it chooses."""
    for _ in range(4 * rows.probe_rounds):
        if rows.describe(requests) != "measuring":
            return
        v = rows.visited(requests)
        rows.record(v, (visited_s if v else all_s) * requests, requests)


def test_it_alternates_then_keeps_the_cheaper_setting() -> None:
    rows = HeadRows("auto", "cpu", probe_rounds=3)
    seen = []
    for _ in range(6):
        seen.append(rows.visited())
        rows.record(seen[-1], 0.004 if seen[-1] else 0.002, 1)
    assert seen == [True, False, True, False, True, False]
    assert rows.chosen is False and not rows.visited() and rows.describe() == "all"
    assert rows.medians_ms() == {"visited": 4.0, "all": 2.0}
    rows = HeadRows("auto", "cpu", probe_rounds=3)
    probe(rows, visited_s=0.002, all_s=0.005, requests=4)
    assert rows.chosen is True and rows.visited()


def test_a_slow_round_does_not_decide_and_the_cost_is_per_request() -> None:
    rows = HeadRows("auto", "cpu", probe_rounds=5)
    costs = iter([0.002, 0.003, 0.5, 0.002, 0.003])  # visited: one stall (a page fault, GC)
    for _ in range(10):
        v = rows.visited()
        rows.record(v, next(costs) if v else 0.004, 1)
    assert rows.chosen is True  # median 2.5 ms against 4 ms, the 500 ms outlier ignored


def test_it_measures_again_after_reprobe_every_rounds() -> None:
    rows = HeadRows("auto", "cpu", probe_rounds=2, reprobe_every=5)
    probe(rows, visited_s=0.001, all_s=0.003)
    assert rows.chosen is True
    for _ in range(5):
        rows.record(rows.visited(), 0.009, 1)  # the load changed: visited got slow
    assert rows.chosen is None and rows.describe() == "measuring"
    probe(rows, visited_s=0.009, all_s=0.003)
    assert rows.chosen is False


def test_fixed_settings_and_accelerators_are_never_measured() -> None:
    for mode, device, visited in (("visited", "cpu", True), ("all", "cpu", False),
                                  ("auto", "cuda", False), ("auto", "cuda:1", False)):
        rows = HeadRows(mode, device, probe_rounds=1)
        for _ in range(4):
            rows.record(not visited, 0.0, 1)  # whatever the measurements say
            assert rows.visited() is visited and rows.chosen is None


def test_each_batch_size_is_measured_and_chosen_on_its_own() -> None:
    """One request a round favours one call over every node here, eight favour the walks: the
    choice made for one size does not carry over to the other."""
    assert [bucket(n) for n in (1, 2, 3, 4, 7, 8, 15, 16, 64)] == [1, 2, 2, 4, 4, 8, 8, 16, 16]
    rows = HeadRows("auto", "cpu", probe_rounds=3)
    probe(rows, visited_s=0.004, all_s=0.002, requests=1)
    assert rows.visited(1) is False and rows.describe() == "all"
    assert rows.visited(8) is True and rows.describe() == "measuring"  # 8 starts unmeasured
    probe(rows, visited_s=0.002, all_s=0.004, requests=8)
    assert rows.visited(9) is True and rows.describe() == "visited"
    assert rows.medians_ms(8) == {"visited": 2.0, "all": 4.0}
    assert rows.visited(1) is False  # the single-request choice stands


def test_rounds_without_requests_are_not_measured() -> None:
    rows = HeadRows("auto", "cpu", probe_rounds=1)
    rows.record(True, 0.001, 0)
    assert rows.medians_ms() == {}


def slowed_head(engine: SpecEngine, per_call_s: float, per_row_s: float) -> None:
    """Make the target's LM head cost `per_call_s` a call plus `per_row_s` a row on the
    engine's modelled clock (nothing else advances it), whatever this CPU's own speed."""
    head, clock = engine.target.head, engine.clock
    assert isinstance(clock, ModelledClock)

    def slow(hidden: torch.Tensor) -> torch.Tensor:
        clock.advance(per_call_s + per_row_s * int(hidden.shape[0]))
        return head(hidden)

    engine.target.head = slow  # type: ignore[method-assign]


def engine_with(mode: str) -> SpecEngine:
    _, base = bigram_setup(TREE, randoms=1)
    return SpecEngine(base.target, dict(base.snapshot.drafters),
                      replace(base.config, verify_logits=mode),
                      clock=ModelledClock())


def generate(engine: SpecEngine) -> list[int]:
    params = SamplingParams(max_new_tokens=40, ignore_eos=True)
    return engine.generate_ids([3, 1, 4, 1, 5], params, "fixed:copy")[0]


def run_auto(per_call_s: float, per_row_s: float) -> tuple[SpecEngine, list[int]]:
    engine = engine_with("auto")
    engine.head_rows.probe_rounds = 3
    slowed_head(engine, per_call_s, per_row_s)
    return engine, generate(engine)


def test_the_engine_keeps_all_rows_where_each_head_call_is_dear() -> None:
    """The copy drafter's paths are long (about 4 head calls a round when visiting), so one
    call for every node is cheaper when a call costs 10 ms whatever its rows."""
    engine, ids = run_auto(per_call_s=0.01, per_row_s=0.0)
    assert engine.head_rows.chosen is False, engine.head_rows.medians_ms()
    assert len(ids) == 40


def test_the_engine_keeps_visited_rows_where_each_row_is_dear() -> None:
    """13 rows a round against about 4: visiting wins when a row costs 2 ms."""
    engine, ids = run_auto(per_call_s=0.0, per_row_s=0.002)
    assert engine.head_rows.chosen is True, engine.head_rows.medians_ms()
    assert ids == generate(engine_with("all"))  # the setting changes the time, not the tokens


def test_describe_names_the_setting_of_a_given_batch_size() -> None:
    rows = HeadRows("auto", "cpu", probe_rounds=2)
    probe(rows, visited_s=0.001, all_s=0.003, requests=1)
    probe(rows, visited_s=0.003, all_s=0.001, requests=8)
    assert rows.describe(1) == "visited" and rows.describe(8) == "all"
    assert rows.describe(4) == "measuring"
    assert HeadRows("visited").describe(8) == "visited"
