"""The CPU-defaults benchmark picks the fastest setting and reports every row it measured."""

from __future__ import annotations

from bench.cpu_defaults import Measured, Setting, best, render


def row(dtype: str, threads: int, tree: tuple[int, int, int], policy: str,
        wall_s: float) -> Measured:
    return Measured(Setting(dtype, threads, tree, policy), tokens=100, rounds=50, wall_s=wall_s)


def test_best_is_the_highest_tokens_per_second_of_a_policy() -> None:
    rows = [row("float32", 1, (4, 5, 20), "fixed:generalist", 10.0),
            row("bfloat16", 2, (4, 5, 20), "fixed:generalist", 4.0),
            row("bfloat16", 2, (4, 5, 20), "none", 1.0)]
    assert best(rows, "fixed:generalist").setting.dtype == "bfloat16"
    assert best(rows, "none").tokens_per_s == 100.0


def test_the_report_shows_speed_up_over_plain_and_every_tree() -> None:
    first = [row("bfloat16", 2, (4, 5, 20), "none", 5.0),
             row("bfloat16", 2, (4, 5, 20), "fixed:generalist", 4.0)]
    second = [row("bfloat16", 2, (2, 4, 8), "fixed:generalist", 3.0),
              row("bfloat16", 2, (4, 6, 24), "fixed:generalist", 6.0)]
    text = render(first, second, {"machine": "m", "prompts": 7, "max_new": 48, "chosen": "c"})
    assert "| bfloat16 | 2 | fixed:generalist | 25.00 | 2.00 | 1.25x |" in text
    assert "| 2 | 4 | 8 | 33.33 | 2.00 |" in text and "| 4 | 6 | 24 | 16.67 | 2.00 |" in text
    assert "Best tree (2, 4, 8)" in text
