"""Sampling defaults a model ships (core/model/sampling_defaults.py): read from the target's
generation_config.json, overlaid by the pool file's, checked like a request's fields."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.harness.tiny_pool import MODEL_NAME, build_pool
from core.config import EngineConfig
from core.engine import SpecEngine
from core.model.sampling_defaults import checked_sampling_defaults, read_generation_config


def test_checked_defaults_keep_the_sampling_keys_in_range() -> None:
    assert checked_sampling_defaults({"temperature": 0.2, "top_p": 0.9}, "x") == {
        "temperature": 0.2, "top_p": 0.9}
    assert checked_sampling_defaults({"top_k": 40}, "x") == {"top_k": 40.0}
    for bad in ({"temperature": 2.5}, {"top_p": 0}, {"top_k": 1.5}, {"top_k": -1},
                {"temperature": "hot"}, {"temperature": True}, {"temperature": float("nan")},
                {"temprature": 0.2}):
        with pytest.raises(ValueError, match="pool"):
            checked_sampling_defaults(bad, "pool")
    with pytest.raises(ValueError, match="an object"):
        checked_sampling_defaults([0.2], "pool")  # type: ignore[arg-type]


def test_a_checkpoint_file_keeps_what_is_usable_and_never_fails(tmp_path: Path) -> None:
    assert read_generation_config(tmp_path) == {}  # no file: no defaults
    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 1, "do_sample": True, "temperature": 0.6, "top_p": 0.9,
         "top_k": 3.5}))  # an unusable top_k is left out, not fatal
    assert read_generation_config(tmp_path) == {"temperature": 0.6, "top_p": 0.9}


def test_the_engine_takes_the_targets_defaults_under_the_pool_files(tmp_path: Path) -> None:
    pool_json = build_pool(tmp_path)
    gen = tmp_path / MODEL_NAME / "generation_config.json"
    gen.write_text(json.dumps({**json.loads(gen.read_text()), "temperature": 0.6,
                               "top_p": 0.9, "top_k": 20}))
    spec = json.loads(pool_json.read_text())
    pool_json.write_text(json.dumps({**spec, "generation_config": {"top_p": 0.95}}))
    engine = SpecEngine.from_pool_file(pool_json, EngineConfig())
    assert engine.sampling_defaults == {"temperature": 0.6, "top_p": 0.95, "top_k": 20.0}
    pool_json.write_text(json.dumps({**spec, "generation_config": {"top_p": 2}}))
    with pytest.raises(ValueError, match="generation_config: top_p"):
        SpecEngine.from_pool_file(pool_json, EngineConfig())
