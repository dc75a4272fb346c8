"""`verify_logits="auto"` is a rule by head (core/batching/head_rows.py): the visited rows on a
CPU whose head is a plain F.linear, every node on an accelerator or through a packed head; a
pinned setting holds on any device. The tokens do not depend on it
(tests/core/batching/test_node_logits.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from bench.harness.tiny_models import AUX, bigram_setup, tiny_target
from core.batching.head_rows import HeadRows
from core.config import TreeConfig
from core.engine import SpecEngine
from core.model.precision import cpu_has_native_bf16
from core.model.target import Target

TREE = TreeConfig(top_k=3, depth=4, total_tokens=12)


@pytest.mark.parametrize(("mode", "device", "packed", "visited"), [
    ("auto", "cpu", False, True), ("auto", "cpu", True, False), ("auto", "cuda", False, False),
    ("auto", "cuda:1", False, False), ("visited", "cuda", False, True),
    ("all", "cpu", False, False), ("visited", "cpu", True, True)])
def test_the_setting_by_device_and_head(mode: str, device: str, packed: bool,
                                        visited: bool) -> None:
    rows = HeadRows(mode, device, packed)
    assert rows.visited() is visited
    assert rows.describe() == ("visited" if visited else "all")


def test_the_engine_and_its_scheduler_share_the_configured_setting() -> None:
    _, base = bigram_setup(TREE, randoms=1)
    for mode, visited in (("auto", True), ("all", False)):
        engine = SpecEngine(base.target, dict(base.snapshot.drafters),
                            replace(base.config, verify_logits=mode))
        assert engine.head_rows.visited() is visited
        assert engine._batch.head_rows is engine.head_rows



@pytest.mark.skipif(not cpu_has_native_bf16(), reason="the head is packed for bf16 on CPUs with "
                    "native bf16 only (AVX512-BF16 or AMX)")
def test_a_packed_head_computes_every_node_under_auto() -> None:
    _, base = bigram_setup(TREE, randoms=1)
    for dtype, packed in ((torch.float32, False), (torch.bfloat16, True)):
        target = Target(tiny_target("llama").to(dtype), None, AUX)
        assert target.packed_head is packed
        engine = SpecEngine(target, {}, replace(base.config, verify_logits="auto"))
        assert engine.head_rows.visited() is not packed
