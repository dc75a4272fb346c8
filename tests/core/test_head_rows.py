"""`verify_logits="auto"` is a rule by device (core/batching/head_rows.py): the visited rows on a
CPU, every node on an accelerator; a pinned setting holds on any device. The tokens do not
depend on it (tests/core/test_node_logits.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.harness.tiny_models import bigram_setup
from core.batching.head_rows import HeadRows
from core.config import TreeConfig
from core.engine import SpecEngine

TREE = TreeConfig(top_k=3, depth=4, total_tokens=12)


@pytest.mark.parametrize(("mode", "device", "visited"), [
    ("auto", "cpu", True), ("auto", "cuda", False), ("auto", "cuda:1", False),
    ("visited", "cuda", True), ("all", "cpu", False), ("visited", "cpu", True)])
def test_the_setting_by_device(mode: str, device: str, visited: bool) -> None:
    rows = HeadRows(mode, device)
    assert rows.visited() is visited
    assert rows.describe() == ("visited" if visited else "all")


def test_the_engine_and_its_scheduler_share_the_configured_setting() -> None:
    _, base = bigram_setup(TREE, randoms=1)
    for mode, visited in (("auto", True), ("all", False)):
        engine = SpecEngine(base.target, dict(base.snapshot.drafters),
                            replace(base.config, verify_logits=mode))
        assert engine.head_rows.visited() is visited
        assert engine._batch.head_rows is engine.head_rows
