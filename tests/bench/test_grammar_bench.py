"""The structured-outputs benchmark's report (the measurement itself runs in bench/)."""

from __future__ import annotations

from bench.grammar_bench import SCHEMA, _valid, markdown


def test_the_report_compares_each_method_with_plain_decoding_of_the_same_output_kind() -> None:
    rows = {"plain / free text": {"mat": 1.0, "tokens_per_s": 20.0},
            "plain / JSON schema": {"mat": 1.0, "tokens_per_s": 10.0},
            "generalist / JSON schema": {"mat": 2.0, "tokens_per_s": 10.0},
            "hedgespec / JSON schema": {"mat": 2.5, "tokens_per_s": 25.0}}
    r = {"rows": rows, "mask": {"median_us": 12.0, "p90_us": 40.0, "positions": 100},
         "valid_json": "5/6", "same_output_masked_or_not": True,
         "config": {"pool": "p", "prompts": 6, "max_new_tokens": 64, "threads": 2,
                    "dtype": "bfloat16", "tree": {"total_tokens": 20}, "vocab": 49152}}
    text = markdown(r)
    assert "| hedgespec / JSON schema | 2.50 | 25.0 | 2.50 |" in text
    assert "median 12 us, p90 40 us per position over 100 positions" in text
    # the masks' share of a round, from this run: 20 x 12 us = 0.24 ms of a 200 ms round
    assert "20 nodes x 12 us is 0.2 ms, 0.1% of this run's 200 ms round" in text


def test_only_json_objects_count_as_valid() -> None:
    assert _valid('{"a": 1}') and not _valid('{"a": 1') and not _valid("[1]")
    assert set(SCHEMA["required"]) == set(SCHEMA["properties"])


def test_a_low_precision_mismatch_is_explained_and_a_float32_one_is_not() -> None:
    rows = {"plain / free text": {"mat": 1.0, "tokens_per_s": 20.0},
            "plain / JSON schema": {"mat": 1.0, "tokens_per_s": 10.0},
            "generalist / JSON schema": {"mat": 2.0, "tokens_per_s": 10.0}}
    r = {"rows": rows, "mask": {"median_us": 12.0, "p90_us": 40.0, "positions": 100},
         "valid_json": "5/6", "same_output_masked_or_not": False,
         "config": {"pool": "p", "prompts": 6, "max_new_tokens": 64, "threads": 2,
                    "dtype": "bfloat16", "tree": {"total_tokens": 20}, "vocab": 49152}}
    assert "identical: False (bfloat16: the two draft different trees" in markdown(r)
    r["config"]["dtype"] = "float32"  # there a mismatch is a bug: reported bare
    assert "masking identical: False.\n" in markdown(r)
