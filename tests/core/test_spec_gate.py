"""`speculation="auto"` measures speculative against plain steps per batch size and keeps the
faster (core/batching/spec_gate.py): the choice follows what a verified row costs, the tokens do not
depend on it, and a full-information learner keeps learning while drafting is off."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from bench.harness.tiny_models import bigram_setup, make_engine, random_drafter, tiny_target
from core.batching.spec_gate import SpecGate
from core.config import EngineConfig, SamplingParams, TreeConfig
from core.decoding.request import PLAIN_EVAL_STRETCH
from core.engine import RoundOutput, SpecEngine
from tests.modelled_clock import ModelledClock

TREE = TreeConfig(top_k=3, depth=4, total_tokens=12)


def measure(gate: SpecGate, spec: tuple[int, float], plain: tuple[int, float],
            requests: int = 1) -> list[bool]:
    """Feed the gate steps of the given (tokens, seconds) until it chooses; the settings run."""
    seen = []
    for _ in range(4 * gate.probe_steps + 4 * gate.block):
        if gate.describe(requests) != "measuring":
            break
        seen.append(gate.speculate(requests))
        gate.record(seen[-1], *(spec if seen[-1] else plain), requests)
    return seen


def test_it_alternates_in_blocks_then_keeps_the_faster_setting() -> None:
    gate = SpecGate("auto", block=2, probe_steps=4)
    seen = measure(gate, spec=(8, 0.2), plain=(4, 0.05))  # 40 against 80 tokens/s
    assert seen == [True, True, False, False] * 2
    assert gate.describe() == "plain" and not gate.speculate()
    assert gate.rates() == {"speculative": pytest.approx(40.0), "plain": pytest.approx(80.0)}
    gate = SpecGate("auto", block=2, probe_steps=4)
    measure(gate, spec=(8, 0.05), plain=(4, 0.05))
    assert gate.describe() == "speculative" and gate.speculate()


def test_probe_steps_are_whole_blocks() -> None:
    """Each block holds every request's evaluation round once (block = eval_every), so each
    setting must get whole blocks or one of them would pay more evaluations."""
    assert SpecGate("auto", block=4, probe_steps=6).probe_steps == 8
    assert SpecGate("auto", block=0).block == 1


def test_a_tie_or_a_small_lead_keeps_speculating() -> None:
    gate = SpecGate("auto", probe_steps=3)
    measure(gate, spec=(10, 0.104), plain=(10, 0.1))  # plain 4% faster: within the margin
    assert gate.describe() == "speculative"
    gate = SpecGate("auto", probe_steps=3)
    measure(gate, spec=(10, 0.11), plain=(10, 0.1))  # plain 10% faster
    assert gate.describe() == "plain"


def test_a_stalled_step_does_not_decide() -> None:
    gate = SpecGate("auto", probe_steps=5)
    stalls = iter([0.05, 0.05, 2.0, 0.05, 0.05])  # speculative: one 2 s stall (GC, a swap)
    for _ in range(10):
        s = gate.speculate()
        gate.record(s, 10 if s else 4, next(stalls) if s else 0.05, 1)
    assert gate.describe() == "speculative"  # 200 against 80 tokens/s, the stall left out


def test_it_measures_again_after_reprobe_every_steps() -> None:
    gate = SpecGate("auto", probe_steps=2, reprobe_every=5)
    measure(gate, spec=(10, 0.05), plain=(4, 0.05))
    assert gate.describe() == "speculative"
    for _ in range(5):
        gate.record(gate.speculate(), 1, 0.05, 1)  # the traffic changed: the drafts miss
    assert gate.describe() == "measuring"
    measure(gate, spec=(5, 0.1), plain=(4, 0.05))
    assert gate.describe() == "plain"


def test_each_batch_size_is_chosen_on_its_own_and_always_never_measures() -> None:
    gate = SpecGate("auto", probe_steps=2)
    measure(gate, spec=(10, 0.05), plain=(1, 0.04), requests=1)
    measure(gate, spec=(30, 0.5), plain=(8, 0.06), requests=8)
    assert gate.describe(1) == "speculative" and gate.describe(8) == "plain"
    assert gate.speculate(9) is False and gate.speculate(1) is True
    assert gate.describe(4) == "measuring"
    always = SpecGate("always", probe_steps=1)
    for _ in range(4):
        always.record(False, 100, 0.001, 1)  # whatever the measurements say
        assert always.speculate() and always.describe() == "speculative"
    gate.record(True, 5, 0.0, 1)  # an empty step is not a measurement
    with pytest.raises(ValueError, match="speculation"):
        EngineConfig(speculation="never")


# -- in the engine -------------------------------------------------------------------------------

def engine_with(mode: str) -> SpecEngine:
    """On a modelled clock: the gate sees only the pass costs a test gives `slowed_rows`."""
    _, base = bigram_setup(TREE, randoms=2)
    return SpecEngine(base.target, dict(base.snapshot.drafters),
                      replace(base.config, speculation=mode, batching=True),
                      clock=ModelledClock())


def slowed_rows(engine: SpecEngine, per_call_s: float, per_row_s: float) -> None:
    """Make the target's batched pass cost `per_call_s` plus `per_row_s` a token row on the
    engine's modelled clock (nothing else advances it): the compute-bound pass of a large batch
    (rows dear) or the memory-bound one of a small one, whatever this CPU's own speed."""
    forward_rows, clock = engine.target.forward_rows, engine.clock
    assert isinstance(clock, ModelledClock)

    def slow(cache: Any, slots: list[int], tokens: list[Any], *args: Any, **kw: Any) -> Any:
        clock.advance(per_call_s + per_row_s * sum(int(t.numel()) for t in tokens))
        return forward_rows(cache, slots, tokens, *args, **kw)

    engine.target.forward_rows = slow  # type: ignore[method-assign]


def run(engine: SpecEngine, streams: int = 4,
        tokens: int = 48) -> dict[str, list[RoundOutput]]:
    params = SamplingParams(max_new_tokens=tokens, ignore_eos=True)
    for i in range(streams):
        engine.add_request(f"r{i}", [3, 1, 4, 1 + i, 5], params, "normalhedge")
    outs: dict[str, list[RoundOutput]] = {f"r{i}": [] for i in range(streams)}
    while engine.has_unfinished():
        for out in engine.step():
            outs[out.request_id].append(out)
    return outs


def ids(outs: dict[str, list[RoundOutput]]) -> dict[str, list[int]]:
    return {rid: [t for o in os for t in o.token_ids] for rid, os in outs.items()}


def test_the_engine_decodes_plain_where_verified_rows_are_dear_with_the_same_tokens() -> None:
    engine = engine_with("auto")
    engine.gate.probe_steps = 3
    slowed_rows(engine, per_call_s=0.0, per_row_s=0.002)  # 13 rows a request against 1
    outs = run(engine)
    assert engine.gate.describe(4) == "plain", engine.gate.rates(4)
    assert ids(outs) == ids(run(engine_with("always")))  # greedy: the gate changes no token
    last = outs["r0"][-1].stats
    assert last.plain_rounds > 0 and last.rounds >= 3
    assert last.target_forwards == last.rounds + last.plain_rounds + 1  # + the prefill pass
    spec_tokens = last.completion_tokens - last.prefill_tokens - last.plain_tokens
    assert last.mean_acceptance_length == spec_tokens / last.rounds > 2.0  # spec rounds only
    assert len(last.drafter_per_round) == last.rounds
    gated = [o.round for o in outs["r0"] if o.round is not None and o.round.plain]
    assert all(r.drafted == 0 and r.drafter is None and r.committed == 1 for r in gated)
    # every step has its own index (the live page drops a repeated index as a re-delivery)
    indices = [o.round.round_index for o in outs["r0"] if o.round is not None]
    assert indices == list(range(len(indices)))
    # the statistics name the plain steps by the same index, for the live page to interleave
    assert list(last.plain_round_indices) == [r.round_index for r in gated]


def test_a_seeded_sampled_request_keeps_drafting_and_its_sample() -> None:
    """Its random stream is consumed differently by plain steps than by verified trees, so it
    drafts even when the gate turns drafting off for the others: the same seed gives the same
    sample whatever the gate chose."""
    def run_mixed(mode: str) -> dict[str, list[RoundOutput]]:
        # a random target: its distributions are flat, so a sample depends on the random stream
        target = tiny_target(vocab=64, seed=2)
        base = make_engine(target, {f"d{i}": random_drafter(target, seed=i) for i in range(2)},
                           TREE)
        engine = SpecEngine(base.target, dict(base.snapshot.drafters),
                            replace(base.config, speculation=mode), clock=ModelledClock())
        engine.gate.probe_steps = 3
        slowed_rows(engine, per_call_s=0.0, per_row_s=0.002)
        greedy = SamplingParams(max_new_tokens=48, ignore_eos=True)
        seeded = SamplingParams(max_new_tokens=48, ignore_eos=True, temperature=1.0, seed=7)
        for i in range(3):
            engine.add_request(f"g{i}", [3, 1, 4, 1 + i, 5], greedy, "normalhedge")
        engine.add_request("s", [2, 7, 1, 8], seeded, "normalhedge")
        outs: dict[str, list[RoundOutput]] = {}
        while engine.has_unfinished():
            for out in engine.step():
                outs.setdefault(out.request_id, []).append(out)
        return outs

    gated, always = run_mixed("auto"), run_mixed("always")
    assert gated["g0"][-1].stats.plain_rounds > 0  # the gate did turn drafting off
    assert gated["s"][-1].stats.plain_rounds == 0
    assert ids(gated)["s"] == ids(always)["s"]


def test_the_learner_keeps_learning_while_drafting_is_off() -> None:
    """NormalHedge scores every drafter on the verified tokens of plain steps too: the weight of
    the drafter that copies the target keeps growing after drafting stopped."""
    engine = engine_with("auto")
    engine.gate.probe_steps = 3
    slowed_rows(engine, per_call_s=0.0, per_row_s=0.002)
    gated = [o.round for o in run(engine, streams=4, tokens=64)["r0"]
             if o.round is not None and o.round.plain]
    assert len(gated) > 20
    assert gated[-1].weights["copy"] > gated[0].weights["copy"] + 0.05, (
        gated[0].weights, gated[-1].weights)


def test_the_engine_keeps_speculating_where_a_pass_costs_the_same_whatever_its_rows() -> None:
    engine = engine_with("auto")
    engine.gate.probe_steps = 3
    slowed_rows(engine, per_call_s=0.01, per_row_s=0.0)  # memory-bound: a pass is a pass
    outs = run(engine)
    assert engine.gate.describe(4) == "speculative", engine.gate.rates(4)
    last = outs["r0"][-1].stats
    # only the probes' plain steps: 3 at four requests a step, at most 3 more once the first
    # requests finished and fewer remained (a batch size of its own)
    assert 3 <= last.plain_rounds <= 6 and last.rounds > last.plain_rounds


def test_plain_steps_score_the_drafters_less_often(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the gate's plain choice the drafters catch up every PLAIN_EVAL_STRETCH x eval_every
    rounds (here every 4th), not every round: a catch-up costs about the same for 1 pair or 4."""
    import core.batching.step as batch_rounds

    engine = engine_with("auto")
    engine.gate.probe_steps = 3
    slowed_rows(engine, per_call_s=0.0, per_row_s=0.002)
    catch_ups: list[str] = []
    sync_all = batch_rounds._sync_all

    def counted(rows: list[Any], config: EngineConfig) -> None:
        catch_ups.append(engine.gate.describe(4))
        sync_all(rows, config)

    monkeypatch.setattr(batch_rounds, "_sync_all", counted)
    steps = 0
    params = SamplingParams(max_new_tokens=64, ignore_eos=True)
    for i in range(4):
        engine.add_request(f"r{i}", [3, 1, 4, 1 + i, 5], params, "normalhedge")
    while engine.has_unfinished():
        steps += engine.gate.describe(4) == "plain"
        engine.step()
    plain_catch_ups = catch_ups.count("plain")
    assert PLAIN_EVAL_STRETCH == 4  # eval_every is 1 here
    assert steps > 20 and 1 <= plain_catch_ups <= steps // 4 + 1, (
        steps, plain_catch_ups)
