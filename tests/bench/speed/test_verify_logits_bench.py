"""The verify-logits benchmark's report: ratios against plain and against 'all' in the same
run, head rows per pass, and whether both settings committed the same tokens."""

from __future__ import annotations

from bench.speed.verify_logits import Cell, render

META = {"machine": "m", "dtype": "float32", "threads": 2, "prompts": 7, "max_new": 48,
        "repeats": 2, "tree": (4, 5, 20)}


def cell(method: str, mode: str, wall_s: float, head_rows: int,
         outputs: tuple[tuple[int, ...], ...] = ((1, 2),)) -> Cell:
    return Cell(method, mode, tokens=100, rounds=50, head_rows=head_rows, wall_s=wall_s,
                outputs=outputs)


def test_rows_show_both_ratios_head_rows_and_token_identity() -> None:
    cells = [cell("plain", "all", 10.0, 50), cell("plain", "visited", 10.0, 50),
             cell("generalist", "all", 20.0, 1050), cell("generalist", "visited", 16.0, 100),
             cell("hedgespec", "all", 20.0, 1050),
             cell("hedgespec", "visited", 16.0, 100, outputs=((1, 3),))]
    text = render(cells, META)
    assert "| generalist | all | 5.00 | 2.00 | 21.0 | 0.50 | 1.00 | True |" in text
    assert "| generalist | visited | 6.25 | 2.00 | 2.0 | 0.62 | 1.25 | True |" in text
    assert "| hedgespec | visited | 6.25 | 2.00 | 2.0 | 0.62 | 1.25 | False |" in text
    assert "fastest of 2 passes" in text


def test_a_batched_run_says_so() -> None:
    cells = [cell("plain", "all", 10.0, 50), cell("plain", "visited", 10.0, 50)]
    text = render(cells, {**META, "streams": 8})
    assert "8 requests at a time in batched steps" in text
    assert "batched steps" not in render(cells, META)  # one stream: no such sentence
