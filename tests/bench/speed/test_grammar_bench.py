"""The structured-outputs benchmark's report (the measurement itself runs in bench/)."""

from __future__ import annotations

from typing import Any

from bench.speed.grammar_bench import SCHEMA, _valid, markdown


def result(same: bool = True, dtype: str = "bfloat16") -> dict[str, Any]:
    """A run's result: plain 20 / 10 tokens/s (free text / schema), the generalist and
    HedgeSpec under the schema."""
    rows = {"plain / free text": {"mat": 1.0, "tokens_per_s": 20.0},
            "plain / JSON schema": {"mat": 1.0, "tokens_per_s": 10.0},
            "generalist / JSON schema": {"mat": 2.0, "tokens_per_s": 10.0},
            "hedgespec / JSON schema": {"mat": 2.5, "tokens_per_s": 25.0}}
    return {"rows": rows, "mask": {"median_us": 12.0, "p90_us": 40.0, "positions": 100},
            "valid_json": "5/6", "same_output_masked_or_not": same,
            "config": {"pool": "p", "prompts": 6, "max_new_tokens": 64, "threads": 2,
                       "dtype": dtype, "tree": {"total_tokens": 20}, "vocab": 49152}}


def test_the_report_compares_each_method_with_plain_decoding_of_the_same_output_kind() -> None:
    text = markdown(result())
    assert "| hedgespec / JSON schema | 2.50 | 25.0 | 2.50 |" in text
    assert "median 12 us, p90 40 us per position over 100 positions" in text
    # the masks' share of a round, from this run: 20 x 12 us = 0.24 ms of a 200 ms round
    assert "20 nodes x 12 us is 0.2 ms, 0.1% of this run's 200 ms round" in text


def test_only_json_objects_count_as_valid() -> None:
    assert _valid('{"a": 1}') and not _valid('{"a": 1') and not _valid("[1]")
    assert set(SCHEMA["required"]) == set(SCHEMA["properties"])


def test_a_low_precision_mismatch_is_explained_and_a_float32_one_is_not() -> None:
    assert "identical: False (bfloat16: the two draft different trees" in markdown(result(False))
    # in float32 a mismatch is a bug: reported bare
    assert "masking identical: False.\n" in markdown(result(False, "float32"))
    assert "masking identical: True.\n" in markdown(result(True))
