"""A request's statistics are declared once (`core.stats.StatsSnapshot`); the wire event
(`FinalStats`) and the request-log record are mapped from it by one table each. A statistic
added to the declaration, or to the wire event, must be carried on or listed as left off (with
why): these tests fail otherwise, so nothing is dropped by forgetting a hand-written list."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from core.stats import RequestStats, RoundStats, StatsSnapshot
from drafter_registry.request_log import COLUMNS
from gateway.live.event_types import FinalStats
from gateway.live.events import FINAL_STATS_SOURCE, LEFT_OFF_THE_WIRE, final_stats
from gateway.pool.request_log import LOGGED_STATS, NOT_LOGGED, OMITTED_WHEN_EMPTY


def field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def unaccounted(declared: Iterable[str], carried: Iterable[str],
                left_off: Mapping[str, str]) -> list[str]:
    """The declared fields that are neither carried nor left off with a reason."""
    accounted = set(carried) | {name for name, why in left_off.items() if why.strip()}
    return [name for name in declared if name not in accounted]


def test_every_declared_statistic_reaches_the_wire_or_is_left_off_with_a_reason() -> None:
    assert unaccounted(field_names(StatsSnapshot), FINAL_STATS_SOURCE.values(),
                       LEFT_OFF_THE_WIRE) == []  # fmt: skip
    # The exclusions name real fields, and none is both carried and left off (a derived measure
    # such as regret_points counts as carrying no field by name: its fields say so).
    assert set(LEFT_OFF_THE_WIRE) <= set(field_names(StatsSnapshot))
    assert not set(LEFT_OFF_THE_WIRE) & set(FINAL_STATS_SOURCE.values())


def test_the_wire_event_is_built_from_its_table_alone() -> None:
    # One table entry per FinalStats field, in the wire's order, each naming a snapshot
    # attribute (a declared field or a measure derived from the fields).
    assert list(FINAL_STATS_SOURCE) == field_names(FinalStats)
    snapshot_fields = set(field_names(StatsSnapshot))
    for source in FINAL_STATS_SOURCE.values():
        assert source in snapshot_fields or isinstance(getattr(StatsSnapshot, source), property)
    stats = RequestStats(policy="normalhedge", drafter_ids=("a",), prompt_tokens=3)
    stats.record_round(RoundStats(round_index=0, drafter="a", drafted=4, accepted=2,
                                  committed=3, draft_s=0.1, verify_s=0.2, evaluate_s=0.0,
                                  bookkeeping_s=0.0, weights={"a": 1.0}))  # fmt: skip
    stats.record_window({"a": 2.0}, "a", 3)
    snap = stats.snapshot()
    final = final_stats(snap)
    for name, source in FINAL_STATS_SOURCE.items():
        value = getattr(final, name)
        assert value == (dict(getattr(snap, source)) if isinstance(value, dict)
                         else getattr(snap, source)), name


def test_every_wire_statistic_is_logged_or_left_out_with_a_reason() -> None:
    assert unaccounted(field_names(FinalStats), LOGGED_STATS.values(), NOT_LOGGED) == []
    assert set(NOT_LOGGED) <= set(field_names(FinalStats))
    assert not set(NOT_LOGGED) & set(LOGGED_STATS.values())
    assert set(LOGGED_STATS.values()) <= set(field_names(FinalStats))
    assert set(LOGGED_STATS) >= OMITTED_WHEN_EMPTY
    # The stored schema is unchanged: what the statistics fill as columns already exists.
    assert {"policy", "prompt_tokens", "completion_tokens", "rounds", "mat", "regret_tokens",
            "drafter_choices"} == set(LOGGED_STATS) & COLUMNS  # fmt: skip


def test_a_statistic_added_but_not_carried_is_caught() -> None:
    # The declaration grows a field that no table carries or leaves off ...
    grown = dataclasses.make_dataclass("Grown", [("new_stat", int, 0)], bases=(StatsSnapshot,),
                                       frozen=True)  # fmt: skip
    assert unaccounted(field_names(grown), FINAL_STATS_SOURCE.values(),
                       LEFT_OFF_THE_WIRE) == ["new_stat"]  # fmt: skip
    # ... or is left off without a reason; the same for the wire event and the log.
    assert unaccounted(["a", "b"], ["a"], {"b": " "}) == ["b"]
    wider = dataclasses.make_dataclass("Wider", [("new_stat", int, 0)], bases=(FinalStats,),
                                       frozen=True)  # fmt: skip
    assert unaccounted(field_names(wider), LOGGED_STATS.values(), NOT_LOGGED) == ["new_stat"]
