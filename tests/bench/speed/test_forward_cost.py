"""The forward-cost benchmark: every pass runs on the same context (the cache is cropped back
after each), sizes are interleaved, and the report's break-even arithmetic is c(T)/c(1)."""

from __future__ import annotations

import torch

from bench.harness.tiny_models import tiny_target
from bench.speed.forward_cost import GemmCost, PassCost, gemm_costs, pass_costs, render
from core.model.target import Target

META = {"machine": "m", "target": "t", "threads": 2, "context": 12,
        "repeats": 2, "default_tree_tokens": 21, "gemm_shape": "[rows, 8] x [8, 16]"}


def test_every_size_runs_on_the_same_context() -> None:
    target = Target(tiny_target(), None, (1, 2, 3))
    seen: list[tuple[int, int]] = []  # (cache length before the pass, new tokens)
    forward = target.forward

    def spy(cache, ids, positions, *a, **kw):  # type: ignore[no-untyped-def]
        seen.append((cache.get_seq_length(), ids.numel()))
        return forward(cache, ids, positions, *a, **kw)

    target.forward = spy  # type: ignore[method-assign]
    context = torch.arange(12) % 60
    costs = pass_costs(target, context, (1, 4, 16), repeats=2)
    assert seen == [(0, 12)] + [(12, 1), (12, 4), (12, 16)] * 2
    assert [c.tokens for c in costs] == [1, 4, 16]
    assert all(c.ms > 0 for c in costs)


def test_gemm_costs_count_flops_of_the_product() -> None:
    weight = torch.randn(16, 8)
    costs = gemm_costs(weight, (1, 4), repeats=3)
    for c in costs:
        assert c.gflops == 2 * c.rows * 16 * 8 / c.us / 1e3


def test_report_gives_break_even_and_one_and_a_half_x_mat() -> None:
    passes = [PassCost(1, 80.0), PassCost(4, 140.0), PassCost(21, 240.0)]
    gemms = [GemmCost(1, 100.0, 17.6), GemmCost(21, 900.0, 41.3)]
    text = render({"bfloat16": (passes, gemms)}, META)
    assert "| 1 | 80.0 | 1.00 | 1.00 | 1.50 |" in text
    assert "| 4 | 140.0 | 1.75 | 1.75 | 2.62 |" in text
    assert "| 21 | 240.0 | 3.00 | 3.00 | 4.50 |" in text
    assert "| 21 | 900 | 41.3 | 43 |" in text
    assert "verifies 21 tokens" in text
    assert "## bfloat16" in text
