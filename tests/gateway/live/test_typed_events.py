"""The live feed is typed: consumers read dataclass fields, never an event dict by string key, and
the wire the admin page reads (`to_json()`) keeps its keys, their order and their values.

The guard parses every gateway module that reads the feed or the drafter check (any module of
`gateway/live/` or `gateway/pool/`, and any module importing either `gateway.live` or the
drafter check, `core.api.inspect_drafter`), and the CLI's registry commands (which read the
admin API's typed drafter rows), and fails on a read by a literal key: `x["key"]` or `x.get("key")`.
Writing a key (`body["model"] = ...`) is how the wire forms are built, and stays allowed.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from core.config import SamplingParams
from core.model.drafter_check import inspect_drafter
from core.stats import RequestStats, RoundStats
from drafter_registry.request_log import to_row
from gateway.live.event_types import FeedEvent, RequestFinished, RoundCompleted
from gateway.live.events import EventBus, finished_event, round_event, started_event
from gateway.pool.request_log import request_log_record

ROOT = Path(__file__).resolve().parents[3]
GATEWAY = ROOT / "gateway"
FEED_MODULES = ("gateway.live", "core.api.inspect_drafter")
ROW_READERS = ("gateway/cli/registry.py",)  # parse registry rows into `DrafterPublic` once
# (module, key): literal-key reads that are no engine or feed dict, with why.
ALLOWED = {
    # transformers' BatchEncoding, what a tokenizer returns: a library's API
    ("gateway/runner.py", "input_ids"),
    # the process environment, a mapping of strings by nature
    ("gateway/cli/registry.py", "HF_ENDPOINT"),
}


def _imports_feed(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        if any(n == m or n.startswith(f"{m}.") for n in names for m in FEED_MODULES):
            return True
    return False


def feed_readers() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(GATEWAY.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(), filename=rel)
        if (rel.startswith(("gateway/live/", "gateway/pool/")) or rel in ROW_READERS
                or _imports_feed(tree)):
            out[rel] = tree
    return out


def literal_key_reads(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, key) of every `x["key"]` read and `x.get("key", ...)` call (a decorator such as
    `@router.get("/path")` declares a route: no read)."""
    decorators = {id(d) for node in ast.walk(tree)
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for d in node.decorator_list}
    found = []
    for node in ast.walk(tree):
        if id(node) in decorators:
            continue
        if (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
            found.append((node.lineno, node.slice.value))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "get" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))
    return found


def test_no_feed_reader_reads_a_dict_by_a_literal_key() -> None:
    readers = feed_readers()
    # The guard must see the feed's consumers, or it passes by looking nowhere.
    for module in ("gateway/live/aggregator.py", "gateway/live/traces.py",
                   "gateway/pool/registry.py", "gateway/http/routes/admin_live.py",
                   "gateway/cli/drafter.py", "gateway/runner.py", *ROW_READERS):
        assert module in readers, module
    bad = [f"{rel}:{line} reads [{key!r}]"
           for rel, tree in readers.items()
           for line, key in literal_key_reads(tree) if (rel, key) not in ALLOWED]
    assert not bad, "read the typed field instead:\n" + "\n".join(bad)


def test_the_guard_finds_both_forms_of_read() -> None:
    tree = ast.parse('a = event["drafter"]\nb = stats.get("policy")\nbody["x"] = 1\n'
                     'c = d[key]\n@router.get("/live")\ndef live(): pass\n')
    assert literal_key_reads(tree) == [(1, "drafter"), (2, "policy")]


# ---- the wire the admin page reads ------------------------------------------------------------


def _publish_one_request() -> list[FeedEvent]:
    """A started event, a speculative round, a plain step and the end, through the bus."""
    stats = RequestStats(policy="normalhedge", drafter_ids=["a", "b"], prompt_tokens=5)
    params = SamplingParams(max_new_tokens=16, temperature=0.5, top_p=0.9, top_k=3)
    steps = [RoundStats(round_index=0, drafter="a", drafted=6, accepted=2, committed=3,
                        draft_s=0.01, verify_s=0.02, evaluate_s=0.004, bookkeeping_s=0.001,
                        weights={"a": 0.75, "b": 0.25}, batch_rows=2),
             RoundStats(round_index=1, drafter=None, drafted=0, accepted=0, committed=1,
                        draft_s=0.0, verify_s=0.01, evaluate_s=0.0, bookkeeping_s=0.001,
                        weights={"a": 0.75, "b": 0.25}, batch_rows=2, plain=True)]

    async def main() -> list[FeedEvent]:
        bus = EventBus()
        sub = bus.subscribe()
        for rs in steps:
            stats.record_round(rs)
            if rs.round_index == 0:
                stats.record_window({"a": 2.5, "b": 1.5}, "a", 3)
                bus.publish(started_event("r1", stats.snapshot(), params, {"b": "ngram"}))
            bus.publish(round_event("r1", rs, stats.snapshot(), 0.25 * (rs.round_index + 1)))
        bus.publish(finished_event("r1", finish_reason="length", error=None, elapsed_s=1.5,
                                   stats=stats.snapshot(), prompt="hi"))
        events = [await asyncio.wait_for(sub.__anext__(), 2) for _ in range(4)]
        await sub.aclose()
        return events

    return asyncio.run(main())


def _unstamped(wire: dict[str, Any]) -> dict[str, Any]:
    assert isinstance(wire.pop("ts"), float)
    return wire


def test_events_keep_the_wire_the_admin_page_reads() -> None:
    started, spec, plain, done = (e.to_json() for e in _publish_one_request())
    assert _unstamped(started) == {
        "type": "request_started", "request_id": "r1", "policy": "normalhedge",
        "drafters": ["a", "b"], "drafter_kinds": {"a": "eagle3", "b": "ngram"},
        "prompt_tokens": 5, "max_tokens": 16, "temperature": 0.5, "top_p": 0.9, "top_k": 3,
        "warm_start_requests": 0, "seq": 1,
    }  # fmt: skip
    round_keys = ["type", "request_id", "round", "policy", "drafter", "drafted", "accepted",
                  "committed", "completion_tokens", "mean_acceptance_length", "tokens_per_s",
                  "weights", "batch_rows", "plain", "regret", "regret_unit", "feedback_windows",
                  "seq", "ts"]  # fmt: skip
    assert list(spec) == list(plain) == round_keys
    assert _unstamped(plain) == {
        "type": "round", "request_id": "r1", "round": 1, "policy": "normalhedge",
        "drafter": None, "drafted": 0, "accepted": 0, "committed": 1, "completion_tokens": 4,
        "mean_acceptance_length": 3.0, "tokens_per_s": 8.0, "weights": {"a": 0.75, "b": 0.25},
        "batch_rows": 2, "plain": True, "regret": 0.0, "regret_unit": "tokens",
        "feedback_windows": 1, "seq": 3,
    }  # fmt: skip
    assert list(done) == ["type", "request_id", "finish_reason", "error", "elapsed_s", "stats",
                          "prompt", "seq", "ts"]
    assert done["stats"] == {
        "policy": "normalhedge", "prompt_tokens": 5, "completion_tokens": 4, "rounds": 1,
        "target_forwards": 2, "mean_acceptance_length": 3.0, "num_spec_steps": 1,
        "num_plain_steps": 1, "plain_step_indices": [1], "num_draft_tokens": 6,
        "num_accepted_draft_tokens": 2, "acceptance_by_position": [1, 1],
        "accepted_per_round": [2], "drafter_choices": ["a"], "regret_tokens": 0.0,
        "regret": 0.0, "regret_unit": "tokens", "regret_curve": [0.0], "regret_seconds": None,
        "regret_time_ratio": None, "final_weights": {}, "warm_start_requests": 0,
        "time_draft_s": 0.01, "time_verify_s": 0.03, "time_evaluate_s": 0.004,
        "time_bookkeeping_s": 0.002,
    }  # fmt: skip


def test_an_unpublished_event_has_no_stamp_and_no_prompt_unless_logged() -> None:
    event = RequestFinished(request_id="r", finish_reason=None, error="gone", elapsed_s=0.5,
                            stats=None)  # fmt: skip
    assert event.to_json() == {"type": "request_finished", "request_id": "r",
                               "finish_reason": None, "error": "gone", "elapsed_s": 0.5,
                               "stats": None}  # fmt: skip


def test_the_request_log_row_comes_from_the_typed_event() -> None:
    *_, done = _publish_one_request()
    assert isinstance(done, RequestFinished) and done.ts is not None
    row = to_row(request_log_record(done, model="m"), store_prompts=True)
    assert row["created_at"].timestamp() == pytest.approx(done.ts - 1.5, abs=1e-5)
    del row["created_at"]
    assert row == {
        "request_id": "r1", "model": "m", "status": "ok", "policy": "normalhedge",
        "prompt_tokens": 5, "completion_tokens": 4, "rounds": 1, "mat": 3.0,
        "regret_tokens": 0.0, "drafter_choices": ["a"], "latency_ms": 1500.0, "prompt": "hi",
        "extra": {"finish_reason": "length", "num_plain_steps": 1, "plain_step_indices": [1]},
    }  # fmt: skip
    aborted = RequestFinished(request_id="r2", finish_reason=None, error="boom", elapsed_s=0.5,
                              stats=None)  # fmt: skip
    row = to_row(request_log_record(aborted, model=None), store_prompts=False)
    del row["created_at"]
    assert row == {"request_id": "r2", "status": "error", "prompt_tokens": 0,
                   "completion_tokens": 0, "rounds": 0, "latency_ms": 500.0,
                   "extra": {"error": "boom"}}  # fmt: skip


def test_a_published_event_cannot_change_under_its_other_subscribers() -> None:
    spec = _publish_one_request()[1]
    assert isinstance(spec, RoundCompleted)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.accepted = 9  # type: ignore[misc]


def test_the_drafter_inspection_keeps_its_json(tmp_path: Path) -> None:
    report = inspect_drafter(tmp_path / "missing", tmp_path / "target")
    assert not report.compatible and not report.readable
    wire = report.to_json()
    assert list(wire) == ["compatible", "reason", "readable", "architecture", "hidden_size",
                          "draft_vocab_size", "target_vocab_size", "num_parameters", "format"]
    assert wire["reason"] == report.reason and wire["hidden_size"] is None
