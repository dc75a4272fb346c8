"""The served-sampling benchmark's report: per setting, each method's MAT over verification
rounds, tokens/s and ratio to plain decoding of the same setting, and the sampling in words."""

from __future__ import annotations

from pathlib import Path

from bench.learner.served_sampling_report import Cell, plot, render

META = {"machine": "m", "dtype": "bfloat16", "threads": 2, "prompts": 14, "max_new": 48,
        "repeats": 2, "tree": [3, 4, 12],
        "settings": {"greedy": {"temperature": 0.0},
                     "model default": {"temperature": 0.2, "top_p": 0.9}}}
CELLS = [
    Cell("greedy", "plain", tokens=100, spec_tokens=0, rounds=0, wall_s=5.0),
    Cell("greedy", "hedgespec", tokens=100, spec_tokens=90, rounds=50, wall_s=4.0),
    Cell("model default", "plain", tokens=100, spec_tokens=0, rounds=0, wall_s=10.0),
    Cell("model default", "generalist", tokens=100, spec_tokens=93, rounds=31, wall_s=8.0),
]


def test_each_setting_is_compared_with_its_own_plain_decoding() -> None:
    text = render(CELLS, META)
    assert "| greedy | temperature 0 | hedgespec | 1.80 | 25.00 | 1.25x | 100 |" in text
    assert ("| model default | temperature 0.2, top_p 0.9 | generalist | 3.00 | 12.50 | 1.25x "
            "| 100 |") in text
    assert "| greedy | temperature 0 | plain | 1.00 | 20.00 | 1.00x | 100 |" in text
    assert "generalist" not in text.split("model default")[0]  # no row for a missing cell


def test_the_figure_is_written(tmp_path: Path) -> None:
    plot(CELLS, tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 5_000
