"""The canonical-numerics benchmark's report: each level's medians, their ratio, the noise and
the outputs that differed from the same prompts decoded alone, per mode."""

from __future__ import annotations

from bench.speed.deterministic import Burst, render

META = {"date": "d", "machine": "m", "max_tokens": 96, "repeats": 3}


def test_a_level_shows_both_medians_their_ratio_and_the_differing_outputs() -> None:
    bursts = [Burst("canonical", 8, rate, 0) for rate in (180.0, 200.0, 190.0)]
    bursts += [Burst("library", 8, rate, differ) for rate, differ in ((150.0, 3), (160.0, 1),
                                                                      (140.0, 0))]
    text = render(bursts, [8], META)
    assert "| 8 | 190.0 (±6%) | 150.0 (±7%) | 1.27x | 0 / 4 of 12 |" in text
    assert "3 repeats" in text and "96 tokens a request" in text
