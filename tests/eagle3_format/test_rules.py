"""Rules of the checkpoint format (eagle3_format) that no reader's test pins already.

The others are pinned where a reader meets them: sizes, architectures, the refused variants and
the d2t/t2d mapping in tests/registry/test_validation_agreement.py (both readers, same reason)
and tests/registry/test_validation.py; missing, unexpected and misshapen tensors in
tests/core/model/test_eagle3.py; feature layers in
tests/core/model/test_aux_layer_metadata.py; RoPE in tests/core/model/test_rope.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from core.model.eagle3 import weight_file
from drafter_registry.errors import CheckpointError
from drafter_registry.validation import check_checkpoint
from eagle3_format.aux_layers import TOP_LEVEL_IDS
from eagle3_format.config import Eagle3Config, config_json_problem, identity_problem
from eagle3_format.errors import DrafterConfigError
from eagle3_format.rope_config import RopeConfig
from eagle3_format.target_fit import compatibility_problems
from eagle3_format.weights import (
    REQUIRED_TENSORS,
    WEIGHT_FILES,
    check_tensors,
    check_vocab_mapping,
    expected_shapes,
    no_weights,
    preferred_weight_file,
    shard_names,
)

BASE: dict[str, Any] = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
                        "vocab_size": 64}


def required_shapes(cfg: Eagle3Config) -> dict[str, tuple[int, ...]]:
    return {k: v for k, v in expected_shapes(cfg).items() if k in REQUIRED_TENSORS}


def test_absent_sizes_take_the_defaults_engines_give_them() -> None:
    cfg = Eagle3Config.from_dict(BASE)
    assert ((cfg.num_key_value_heads, cfg.head_dim, cfg.target_hidden_size, cfg.draft_vocab_size)
            == (4, 8, 32, 64))
    assert (cfg.rope, cfg.aux_layers, cfg.architectures) == (RopeConfig(), None, ())


@pytest.mark.parametrize(("edit", "needle"), [
    ({"num_attention_heads": True}, "bad 'num_attention_heads': True"),  # JSON true is no size
    ({"hidden_size": 32.0}, "bad 'hidden_size': 32.0"),
    ({"intermediate_size": "64"}, "bad 'intermediate_size': '64'"),
    ({"rms_norm_eps": "small"}, "missing or has a bad field"),
    ({"rope_scaling": "linear"}, "rope parameters must be a JSON object"),
    ({"eagle_config": [1, 2, 3]}, "'eagle_config' must be a JSON object"),
    ({TOP_LEVEL_IDS: [1.0, 2.0, 3.0]}, "must be a list of integers"),
    ({TOP_LEVEL_IDS: [True, 2, 3]}, "must be a list of integers"),
])
def test_malformed_fields_are_refused_by_name(edit: dict[str, Any], needle: str) -> None:
    with pytest.raises(DrafterConfigError, match=re.escape(needle)) as refused:
        Eagle3Config.from_dict({**BASE, **edit})
    assert str(refused.value).startswith("config.json")


def test_an_empty_layer_list_names_no_layers() -> None:
    raw = {**BASE, TOP_LEVEL_IDS: [], "eagle_config": {TOP_LEVEL_IDS: []}}
    assert Eagle3Config.from_dict(raw).aux_layers is None


def test_a_reduced_vocabulary_needs_its_mapping() -> None:
    reduced = Eagle3Config.from_dict({**BASE, "draft_vocab_size": 32})
    with pytest.raises(DrafterConfigError, match=re.escape("missing tensors ['d2t', 't2d']")):
        check_tensors(reduced, required_shapes(reduced))
    full = Eagle3Config.from_dict(BASE)  # the identity mapping needs no tensors
    check_tensors(full, required_shapes(full))


def test_a_drafter_of_another_width_than_its_target_ships_its_embedding() -> None:
    cfg = Eagle3Config.from_dict({**BASE, "target_hidden_size": 16})
    with pytest.raises(DrafterConfigError, match=re.escape("no embed_tokens.weight")):
        check_tensors(cfg, required_shapes(cfg))
    check_tensors(cfg, {**required_shapes(cfg), "embed_tokens.weight": (64, 32)})


def test_two_draft_ids_may_not_share_a_target_id() -> None:
    # t2d marks the one id both map to, so that no other rule refuses it
    with pytest.raises(DrafterConfigError, match="two draft ids to one target id"):
        check_vocab_mapping([0, -1], [1, 0, 0, 0], vocab_size=4)
    check_vocab_mapping([0, 1], [1, 0, 1, 0], vocab_size=4)


@pytest.mark.parametrize(("index", "needle"), [
    ({}, "no weight_map"),
    ({"weight_map": {}}, "no weight_map"),
    ([], "no weight_map"),
    ({"weight_map": {"fc.weight": "../model.safetensors"}}, "invalid shard"),
    ({"weight_map": {"fc.weight": "sub/model.safetensors"}}, "invalid shard"),
    ({"weight_map": {"fc.weight": "sub\\model.safetensors"}}, "invalid shard"),
    ({"weight_map": {"fc.weight": ".model.safetensors"}}, "invalid shard"),
    ({"weight_map": {"fc.weight": "model.bin"}}, "invalid shard"),
])
def test_an_index_names_plain_shard_files_in_the_directory(index: Any, needle: str) -> None:
    with pytest.raises(DrafterConfigError, match=needle):
        shard_names(index)


def test_shards_are_listed_once_in_order() -> None:
    index = {"weight_map": {"a": "m-2.safetensors", "b": "m-1.safetensors", "c": "m-1.safetensors"}}
    assert shard_names(index) == ("m-1.safetensors", "m-2.safetensors")


def test_both_readers_prefer_one_file_then_shards_then_a_pickle(tmp_path: Path) -> None:
    """Empty files: each reader names the one it chose when it fails to read it. A pickle comes
    last, as in transformers: safetensors are read without unpickling anything."""
    (tmp_path / "config.json").write_text(json.dumps(BASE))
    for name in WEIGHT_FILES:
        (tmp_path / name).write_bytes(b"")
    for name in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"):
        assert weight_file(tmp_path).name == name
        # the name itself, not a longer one it begins (model.safetensors.index.json)
        with pytest.raises(CheckpointError, match=re.escape(name) + r"(?![.\w])"):
            check_checkpoint(tmp_path)
        (tmp_path / name).unlink()


def test_a_target_config_without_sizes_is_named() -> None:
    needle = "the target's config.json lacks 'hidden_size'"
    with pytest.raises(DrafterConfigError, match=re.escape(needle)):
        compatibility_problems(Eagle3Config.from_dict(BASE), {"vocab_size": 64})


@pytest.mark.parametrize(("raw", "architectures", "problem"), [
    ({"draft_vocab_size": 32000}, (), None),
    ({}, ("LlamaForCausalLMEagle3",), None),
    ({"num_hidden_layers": 32}, ("LlamaForCausalLM",), "a full model's config (32 layers)"),
    ({}, (), "not an EAGLE-3 config"),
    ({"draft_vocab_size": 32000, "num_hidden_layers": 2}, (), "one decoder layer"),
])
def test_what_identifies_an_eagle3_drafters_config(raw: dict[str, Any],
                                                   architectures: tuple[str, ...],
                                                   problem: str | None) -> None:
    """The identity rules discovery applies to a repository's config.json (one home:
    eagle3_format/config.identity_problem)."""
    found = identity_problem(raw, architectures)
    assert found is None if problem is None else problem in (found or "")


@pytest.mark.parametrize(("text", "problem"), [
    (b'{"draft_vocab_size": 32000}', None),
    (b'{"architectures": ["LlamaForCausalLMEagle3"]}', None),
    (b"not json", "not valid JSON"),
    (b"[1, 2]", "not a JSON object"),
    (b'{"architectures": ["Qwen3ForCausalLM"]}', "is not an EAGLE-3 drafter"),
    (b'{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32}', "a full model's"),
])
def test_what_discovery_reads_from_a_folders_config(text: bytes, problem: str | None) -> None:
    """A folder's config.json as bytes, judged by the one rule discovery applies
    (eagle3_format/config.config_json_problem)."""
    found = config_json_problem(text)
    assert found is None if problem is None else problem in (found or "")


def test_one_rule_picks_a_folders_weight_file() -> None:
    """The loader, the registry's validation, discovery and the hub's file selection all ask
    eagle3_format/weights.preferred_weight_file."""
    assert preferred_weight_file(["pytorch_model.bin", "model.safetensors.index.json"]) \
        == "model.safetensors.index.json"
    assert preferred_weight_file(["config.json", *reversed(WEIGHT_FILES)]) == "model.safetensors"
    assert preferred_weight_file(["config.json", "README.md"]) is None
    assert "expected one of model.safetensors" in no_weights("x")
