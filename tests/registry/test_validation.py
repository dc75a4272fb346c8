"""Torch-free checkpoint checks: good files pass, truncated/corrupt/mismatched ones fail
readably."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from safetensors.numpy import save

from bench.harness.checkpoints import (
    drafter_config,
    drafter_files,
    drafter_tensors,
    write_files,
    write_target_config,
)
from drafter_registry.errors import CheckpointError
from drafter_registry.validation import (
    check_against_target,
    check_checkpoint,
    read_safetensors_header,
)


@pytest.fixture
def drafter_dir(tmp_path: Path) -> Path:
    return write_files(tmp_path / "drafter", drafter_files())


def test_a_well_formed_drafter_passes(drafter_dir: Path, tmp_path: Path) -> None:
    summary = check_checkpoint(drafter_dir)
    assert (summary.weights_format, summary.config.hidden_size, summary.config.vocab_size,
            summary.config.draft_vocab_size) == ("safetensors", 16, 64, 32)
    assert summary.tensors["fc.weight"] == (16, 48)
    check_against_target(summary, write_target_config(tmp_path / "target"))


def test_header_offsets_are_read_like_the_safetensors_library(drafter_dir: Path) -> None:
    header = read_safetensors_header(drafter_dir / "model.safetensors")
    tensors = drafter_tensors(drafter_config())
    assert {k: (v[0], v[1]) for k, v in header.items()} == {
        k: ({"float32": "F32", "int64": "I64", "bool": "BOOL"}[str(t.dtype)], t.shape)
        for k, t in tensors.items()}


@pytest.mark.parametrize("keep", [4, 100, -1])
def test_a_truncated_weight_file_is_detected(drafter_dir: Path, keep: int) -> None:
    weights = drafter_dir / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:keep])
    with pytest.raises(CheckpointError, match="truncated"):
        check_checkpoint(drafter_dir)


def test_trailing_garbage_and_a_corrupt_header_are_detected(drafter_dir: Path) -> None:
    weights = drafter_dir / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data + b"\0\0\0\0")
    with pytest.raises(CheckpointError, match="trailing"):
        check_checkpoint(drafter_dir)
    (header_len,) = struct.unpack("<Q", data[:8])
    weights.write_bytes(data[:8] + b"\xff" * header_len + data[8 + header_len:])
    with pytest.raises(CheckpointError, match="corrupt safetensors header"):
        check_checkpoint(drafter_dir)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda c: c.pop("hidden_size"), "lacks 'hidden_size'"),
    (lambda c: c.update(vocab_size=-1), "bad 'vocab_size'"),
    (lambda c: c.update(draft_vocab_size=1000), "exceeds vocab_size"),
    (lambda c: c.update(architectures="Llama"), "list of strings"),
    (lambda c: c.update(hidden_size=8), "fc.weight is"),
])
def test_config_problems(drafter_dir: Path, edit: object, message: str) -> None:
    config = json.loads((drafter_dir / "config.json").read_text())
    edit(config)  # type: ignore[operator]
    (drafter_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=message):
        check_checkpoint(drafter_dir)


def test_missing_files(tmp_path: Path, drafter_dir: Path) -> None:
    with pytest.raises(CheckpointError, match="not found"):
        check_checkpoint(tmp_path / "nowhere")
    (drafter_dir / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no weights"):
        check_checkpoint(drafter_dir)
    (drafter_dir / "config.json").unlink()
    with pytest.raises(CheckpointError, match="missing"):
        check_checkpoint(drafter_dir)
    (drafter_dir / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="unreadable"):
        check_checkpoint(drafter_dir)


def test_lm_head_rows_must_match_the_draft_vocabulary(tmp_path: Path) -> None:
    config = drafter_config()
    root = write_files(tmp_path / "d", {
        "config.json": json.dumps(config).encode(),
        "model.safetensors": save(drafter_tensors(config, extra_rows=3))})
    with pytest.raises(CheckpointError, match=r"lm_head.weight is \[35, 16\]"):
        check_checkpoint(root)


@pytest.mark.parametrize(("target", "message"), [
    ({"hidden": 32}, "hidden size 16 != target hidden size 32"),
    ({"vocab": 128}, "vocab size 64 != target vocab size 128"),
])
def test_incompatible_targets(drafter_dir: Path, tmp_path: Path, target: dict[str, int],
                              message: str) -> None:
    summary = check_checkpoint(drafter_dir)
    with pytest.raises(CheckpointError, match=message):
        check_against_target(summary, write_target_config(tmp_path / "target", **target))


def test_sharded_safetensors(tmp_path: Path) -> None:
    config = drafter_config()
    tensors = drafter_tensors(config)
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[:5],
              "model-00002-of-00002.safetensors": names[5:]}
    files = {"config.json": json.dumps(config).encode(),
             "model.safetensors.index.json": json.dumps(
                 {"weight_map": {n: s for s, ns in shards.items() for n in ns}}).encode()}
    files.update({s: save({n: tensors[n] for n in ns}) for s, ns in shards.items()})
    root = write_files(tmp_path / "d", files)
    summary = check_checkpoint(root)
    assert summary.weights_format == "safetensors-sharded" and len(summary.tensors) == len(tensors)
    (root / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="missing"):
        check_checkpoint(root)


def test_pytorch_bin_archives(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    root = write_files(tmp_path / "d", {"config.json": json.dumps(drafter_config()).encode()})
    state = {k: torch.from_numpy(v) for k, v in drafter_tensors(drafter_config()).items()}
    torch.save(state, root / "pytorch_model.bin")
    assert check_checkpoint(root).weights_format == "bin"
    data = (root / "pytorch_model.bin").read_bytes()
    (root / "pytorch_model.bin").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"not a torch\.save zip archive"):
        check_checkpoint(root)
    middle = len(data) // 2  # inside a stored tensor: only the CRC check can see it
    (root / "pytorch_model.bin").write_bytes(data[:middle] + bytes([data[middle] ^ 0xFF])
                                             + data[middle + 1:])
    with pytest.raises(CheckpointError, match=r"CRC|corrupt"):
        check_checkpoint(root)
