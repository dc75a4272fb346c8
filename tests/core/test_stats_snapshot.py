"""What crosses from the engine to another thread: every `RoundOutput` carries an immutable
snapshot of its request's statistics, which the engine's later rounds leave alone."""

from __future__ import annotations

import dataclasses

import pytest

from bench.harness.tiny_models import make_engine, random_drafter, tiny_target
from core.config import SamplingParams, TreeConfig
from core.stats import RequestStats, StatsSnapshot


def test_each_round_hands_out_a_frozen_snapshot_that_later_rounds_leave_alone() -> None:
    target = tiny_target(vocab=64, seed=2)
    engine = make_engine(target, {"d0": random_drafter(target, seed=0)},
                         TreeConfig(top_k=2, depth=2, total_tokens=4))  # fmt: skip
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    outs = list(engine.generate([1, 2, 3], params, "normalhedge"))
    first, last = outs[1].stats, outs[-1].stats  # outs[0] is the prefill
    assert isinstance(first, StatsSnapshot) and first is not last
    assert (first.rounds, first.drafter_per_round) == (1, ("d0",))
    assert last.rounds == len(outs) - 1 and len(last.accepted_per_round) == last.rounds
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.rounds = 0  # type: ignore[misc]
    with pytest.raises(TypeError):
        first.weights["d0"] = 0.0  # type: ignore[index]
    assert isinstance(first.accepted_per_round, tuple)
    assert (last.mean_acceptance_length
            == (last.completion_tokens - last.prefill_tokens) / last.rounds)


# ---- the tally mirrors the one declaration ----------------------------------------------------


def _snapshot_type(annotation: str) -> str:
    """The snapshot's type for a tally field's: a list is held as a tuple, a dict as a mapping."""
    if annotation.startswith("list["):
        return f"tuple[{annotation[len('list['):-1]}, ...]"
    if annotation.startswith("dict["):
        return f"Mapping[{annotation[len('dict['):-1]}]"
    return annotation


def mirror_of(snapshot: type) -> list[tuple[str, str]]:
    return [(f.name, str(f.type)) for f in dataclasses.fields(snapshot)]


def tally_as_snapshot(tally: type) -> list[tuple[str, str]]:
    return [(f.name, _snapshot_type(str(f.type))) for f in dataclasses.fields(tally)]


def test_the_running_tally_has_the_declared_fields_in_order_and_frozen_types() -> None:
    assert tally_as_snapshot(RequestStats) == mirror_of(StatsSnapshot)
    # Every field but the policy starts from a zero, so a request's tally needs only its policy.
    fresh = RequestStats("normalhedge").snapshot()
    assert fresh.rounds == 0 and fresh.accepted_per_round == () and dict(fresh.weights) == {}


def test_a_field_declared_but_not_tallied_is_caught() -> None:
    grown = dataclasses.make_dataclass("Grown", [("new_stat", int, 0)], bases=(StatsSnapshot,),
                                       frozen=True)  # fmt: skip
    assert tally_as_snapshot(RequestStats) != mirror_of(grown)
    assert _snapshot_type("list[str | None]") == "tuple[str | None, ...]"
    assert _snapshot_type("dict[str, float]") == "Mapping[str, float]"
