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
    text = render(first, second, {"machine": "m", "prompts": 7, "max_new": 48, "chosen": "c",
                                  "repeats": 2})
    assert "| bfloat16 | 2 | fixed:generalist | 25.00 | 2.00 | 1.25x |" in text
    assert "| 2 | 4 | 8 | 33.33 | 2.00 | 1.67x |" in text
    assert "| 4 | 6 | 24 | 16.67 | 2.00 | 0.83x |" in text
    assert "fastest of 2 passes" in text
    assert "Best tree (2, 4, 8)" in text


def test_a_setting_keeps_its_fastest_pass(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Greedy passes commit the same tokens; only the wall time differs, and the fastest pass
    is the one least disturbed by other load."""
    import bench.cpu_defaults as cd

    class Engine:
        def generate_ids(self, ids, params, policy):  # type: ignore[no-untyped-def]
            return [1, 2], type("Stats", (), {"rounds": 1})()

    clock = iter([10.0, 12.0, 20.0, 21.0])  # pass 1 takes 2 s, pass 2 takes 1 s
    monkeypatch.setattr(cd.time, "perf_counter", lambda: next(clock))
    prompts = [type("Prompt", (), {"ids": [1]})()] * 2
    m = cd.measure(Engine(), prompts, Setting("bfloat16", 1, (2, 4, 8), "none"), 8, repeats=2)
    assert m.wall_s == 1.0 and m.tokens == 4 and m.rounds == 2
