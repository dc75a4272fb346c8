"""The CPU-defaults benchmark picks the fastest setting and reports every row it measured."""

from __future__ import annotations

from bench.speed.cpu_defaults import Measured, Setting, best, render


def row(dtype: str, threads: int, tree: tuple[int, int, int], policy: str,
        wall_s: float) -> Measured:
    return Measured(Setting(dtype, threads, tree, policy), tokens=100, rounds=50, wall_s=wall_s)


def test_best_is_the_highest_tokens_per_second_of_a_policy() -> None:
    rows = [row("float32", 1, (4, 5, 20), "fixed:generalist", 10.0),
            row("bfloat16", 2, (4, 5, 20), "fixed:generalist", 4.0),
            row("bfloat16", 2, (4, 5, 20), "none", 1.0)]
    assert best(rows, "fixed:generalist").setting.dtype == "bfloat16"
    assert best(rows, "none").tokens_per_s == 100.0


def report(second: list[Measured]) -> str:
    """The report of a precision sweep (plain 20 tokens/s, generalist 25) and `second`."""
    first = [row("bfloat16", 2, (4, 5, 20), "none", 5.0),
             row("bfloat16", 2, (4, 5, 20), "fixed:generalist", 4.0)]
    return render(first, second, {"machine": "m", "prompts": 7, "max_new": 48, "chosen": "c",
                                  "repeats": 2})


def test_the_report_shows_speed_up_over_plain_and_every_tree() -> None:
    text = report([row("bfloat16", 2, (2, 4, 8), "fixed:generalist", 3.0),
                   row("bfloat16", 2, (4, 6, 24), "fixed:generalist", 6.0)])
    assert "| bfloat16 | 2 | fixed:generalist | 25.00 | 2.00 | 1.25x |" in text
    assert "| 2 | 4 | 8 | 33.33 | 2.00 | 1.67x |" in text
    assert "| 4 | 6 | 24 | 16.67 | 2.00 | 0.83x |" in text
    assert "fastest of 2 passes" in text
    assert "Best tree (2, 4, 8)" in text


def test_the_tree_table_uses_the_plain_run_measured_beside_it() -> None:
    text = report([row("bfloat16", 2, (2, 4, 8), "none", 2.5),
                   row("bfloat16", 2, (2, 4, 8), "fixed:generalist", 2.0)])
    assert "| 2 | 4 | 8 | 50.00 | 2.00 | 1.25x |" in text  # 50 / 40, not 50 / 20
    assert "Plain decoding measured beside the trees: 40.00" in text


def test_each_setting_keeps_its_fastest_pass_with_passes_interleaved(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Greedy passes commit the same tokens; only the wall time differs, and the fastest pass
    is the one least disturbed by other load. Pass 1 of every setting runs before pass 2."""
    import bench.speed.cpu_defaults as cd

    order: list[str] = []

    class Engine:
        def __init__(self, name: str) -> None:
            self.name = name

        def generate_ids(self, ids, params, policy):  # type: ignore[no-untyped-def]
            if params.max_new_tokens > 4:  # not the warm-up
                order.append(self.name)
            return [1, 2], type("Stats", (), {"rounds": 1})()

    # a: 2 s then 1 s; b: 1 s then 3 s (one perf_counter pair per pass)
    clock = iter([0.0, 2.0, 10.0, 11.0, 20.0, 21.0, 30.0, 33.0])
    monkeypatch.setattr(cd.time, "perf_counter", lambda: next(clock))
    jobs = [(Engine("a"), Setting("bfloat16", 1, (2, 4, 8), "none")),
            (Engine("b"), Setting("bfloat16", 1, (2, 4, 8), "fixed:generalist"))]
    a, b = cd.measure(jobs, [type("Prompt", (), {"ids": [1]})()], 8, repeats=2)
    assert order == ["a", "b", "a", "b"]
    assert (a.wall_s, b.wall_s) == (1.0, 1.0) and a.tokens == 2


def test_a_trees_only_sampling_report_names_its_policy_and_skips_the_precision_table() -> None:
    second = [row("bfloat16", 2, (3, 4, 12), "none", 5.0),
              row("bfloat16", 2, (3, 4, 12), "normalhedge", 4.0),
              row("bfloat16", 2, (8, 6, 48), "normalhedge", 8.0)]
    second[2] = Measured(second[2].setting, tokens=150, rounds=50, wall_s=8.0)  # MAT 3, slower
    text = render([], second, {"machine": "m", "prompts": 7, "max_new": 48, "repeats": 2,
                               "policy": "normalhedge", "temperature": 1.0, "chosen": None,
                               "flags": " --trees-only --temperature 1 --policy normalhedge"})
    assert text.startswith("# Draft trees when sampling on a CPU (normalhedge)")
    assert "temperature 1, prompt i seed i" in text and "Precision and threads" not in text
    assert "| 3 | 4 | 12 | 25.00 | 2.00 | 1.25x |" in text
    assert ("Best tree (3, 4, 12): 25.00 tokens/s, MAT 2.00. Highest MAT: 3.00 with (8, 6, 48)."
            in text)
    assert "Chosen:" not in text
