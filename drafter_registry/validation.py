"""Cheap, torch-free checks of an EAGLE-3 drafter directory, run before the full load.

They catch what a download can get wrong (truncated or corrupt files, a missing config, an
unreadable archive) and what the configs alone reveal (hidden size or vocabulary that do not fit
the served target), in milliseconds and without reading the weights (only d2t and t2d, a few
hundred kilobytes, are read from safetensors files). The authoritative check that loads the
tensors is `core.model.drafter_check.inspect_drafter`, which the gateway runs next.

One set of rules: the format's, stated once in `eagle3_format` (torch-free, the one part of
`core` this package may import: tests/test_architecture.py). This module reads the files without
torch and hands the format what it saw. For `pytorch_model.bin` the tensors cannot be seen
without torch, so the tensor rules are left to the core check (never the other way round: what
the core accepts is never refused here; tests/registry/test_validation_agreement.py runs both on
the same checkpoints).

Formats: `model.safetensors`; `model.safetensors.index.json` with its shards; `pytorch_model.bin`
(the zip archive `torch.save` writes). A safetensors file is 8 bytes of little-endian header
length, a JSON header mapping tensor names to dtype, shape and `[begin, end)` byte offsets into
the data section, then the data section; see https://github.com/huggingface/safetensors.
"""

from __future__ import annotations

import json
import math
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drafter_registry.errors import CheckpointError
from eagle3_format.config import Eagle3Config
from eagle3_format.errors import DrafterConfigError
from eagle3_format.target_fit import check_fits_target
from eagle3_format.weights import (
    CONFIG_FILE,
    SAFETENSORS_FILE,
    SAFETENSORS_INDEX_FILE,
    TORCH_BIN_FILE,
    WEIGHT_FILES,
    WEIGHT_FORMATS,
    check_tensors,
    check_vocab_mapping,
    no_weights,
    preferred_weight_file,
    shard_names,
)

INT_DTYPES = {"I64": "q", "I32": "i", "I16": "h", "I8": "b", "U8": "B", "BOOL": "?"}
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors library's own limit
DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}


@dataclass(frozen=True)
class CheckpointSummary:
    """What the cheap checks learned; `tensors` maps names to shapes (safetensors only)."""

    path: Path
    weights_format: str  # "safetensors" | "safetensors-sharded" | "bin"
    weight_files: tuple[str, ...]
    config: Eagle3Config
    tensors: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "weights_format": self.weights_format,
            "weight_files": list(self.weight_files),
            "hidden_size": self.config.hidden_size,
            "vocab_size": self.config.vocab_size,
            "draft_vocab_size": self.config.draft_vocab_size,
            "target_hidden_size": self.config.target_hidden_size,
            "architectures": list(self.config.architectures),
            "num_tensors": len(self.tensors) or None,
        }


def check_checkpoint(path: str | Path) -> CheckpointSummary:
    """Check a drafter directory; raise `CheckpointError` with a readable reason."""
    root = Path(path)
    if not root.is_dir():
        raise CheckpointError(f"drafter directory not found: {root}")
    raw = _read_json_object(root / CONFIG_FILE, what="drafter config")
    try:
        weights_format, files, tensors = _check_weights(root)
        config = Eagle3Config.from_dict(raw)
        if tensors:  # safetensors: names and shapes are in the headers
            check_tensors(config, tensors)
            if "d2t" in tensors:  # with t2d, and both of the right shapes (check_tensors)
                d2t, t2d = (read_int_tensor(_file_holding(root, files, name), name)
                            for name in ("d2t", "t2d"))
                check_vocab_mapping(d2t, t2d, config.vocab_size)
    except DrafterConfigError as exc:
        raise CheckpointError(str(exc)) from exc
    return CheckpointSummary(path=root, weights_format=weights_format, weight_files=files,
                             config=config, tensors=tensors)


def check_against_target(summary: CheckpointSummary, target_dir: str | Path) -> None:
    """Raise `CheckpointError` if the drafter's sizes or feature layers do not fit the target's
    (the layers it is served with are unknown here: the gateway's full check compares them)."""
    target = _read_json_object(Path(target_dir) / CONFIG_FILE, what="target config")
    try:
        check_fits_target(summary.config, target)
    except DrafterConfigError as exc:
        raise CheckpointError(str(exc)) from exc


def read_safetensors_header(path: Path) -> dict[str, tuple[str, tuple[int, ...], int, int]]:
    """Tensor name -> (dtype, shape, begin, end); checks the file holds every declared byte."""
    size = path.stat().st_size
    with path.open("rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise CheckpointError(f"{path.name} is truncated: {size} bytes, no safetensors header")
        (header_len,) = struct.unpack("<Q", prefix)
        if header_len > MAX_HEADER_BYTES or 8 + header_len > size:
            raise CheckpointError(
                f"{path.name} is truncated or corrupt: header of {header_len} bytes in a "
                f"{size}-byte file"
            )
        try:
            header = json.loads(f.read(header_len))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"{path.name} has a corrupt safetensors header: {exc}") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path.name} has a corrupt safetensors header: not a JSON object")
    tensors = {name: _tensor_entry(path.name, name, spec)
               for name, spec in header.items() if name != "__metadata__"}
    _check_layout(path.name, tensors, data_bytes=size - 8 - header_len)
    return tensors


def check_torch_archive(path: Path) -> None:
    """A `torch.save` file is a zip archive with a `data.pkl` record; reading the central
    directory and CRC-checking every member detects truncation and corruption."""
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path.name} is not a torch.save zip archive (truncated or corrupt)")
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            if not any(n.endswith("data.pkl") for n in names):
                raise CheckpointError(f"{path.name} has no data.pkl: not a torch.save archive")
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise CheckpointError(f"{path.name} is corrupt: {exc}") from None
    if bad is not None:
        raise CheckpointError(f"{path.name} is corrupt: member {bad!r} fails its CRC check")


# --- helpers -----------------------------------------------------------------------------------


def _check_weights(root: Path) -> tuple[str, tuple[str, ...], dict[str, tuple[int, ...]]]:
    """(format, files, tensor shapes) of the weight file the format prefers (WEIGHT_FILES)."""
    name = preferred_weight_file(n for n in WEIGHT_FILES if (root / n).is_file())
    if name is None:
        raise CheckpointError(no_weights(root.name))
    if name == SAFETENSORS_FILE:
        header = read_safetensors_header(root / name)
        return WEIGHT_FORMATS[name], (name,), {k: v[1] for k, v in header.items()}
    if name == SAFETENSORS_INDEX_FILE:
        shards = shard_names(_read_json_object(root / name, what="weight index"))
        tensors: dict[str, tuple[int, ...]] = {}
        for shard in shards:
            if not (root / shard).is_file():
                raise CheckpointError(f"shard {shard} listed in {name} is missing")
            tensors.update({k: v[1] for k, v in read_safetensors_header(root / shard).items()})
        return WEIGHT_FORMATS[name], (name, *shards), tensors
    check_torch_archive(root / TORCH_BIN_FILE)
    return WEIGHT_FORMATS[TORCH_BIN_FILE], (TORCH_BIN_FILE,), {}


def _tensor_entry(file: str, name: str, spec: Any) -> tuple[str, tuple[int, ...], int, int]:
    try:
        dtype, shape, (begin, end) = spec["dtype"], tuple(spec["shape"]), spec["data_offsets"]
    except (TypeError, KeyError, ValueError):
        raise CheckpointError(f"{file}: tensor {name!r} has a malformed header entry") from None
    if dtype not in DTYPE_BYTES or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise CheckpointError(f"{file}: tensor {name!r} has dtype {dtype!r} / shape {list(shape)}")
    if not (isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end):
        raise CheckpointError(f"{file}: tensor {name!r} has offsets [{begin}, {end})")
    if end - begin != math.prod(shape) * DTYPE_BYTES[dtype]:
        raise CheckpointError(f"{file}: tensor {name!r} byte range does not match "
                              f"{dtype}{list(shape)}")
    return dtype, shape, begin, end


def _check_layout(file: str, tensors: dict[str, tuple[str, tuple[int, ...], int, int]], *,
                  data_bytes: int) -> None:
    # Tensors tile the data section without gaps or overlaps, as the format requires.
    position = 0
    for name, (_, _, begin, end) in sorted(tensors.items(), key=lambda kv: kv[1][2]):
        if begin != position:
            raise CheckpointError(f"{file}: tensor {name!r} starts at {begin}, expected {position}")
        position = end
    if position > data_bytes:
        raise CheckpointError(
            f"{file} is truncated: tensors need {position} data bytes, the file has {data_bytes}"
        )
    if position < data_bytes:
        raise CheckpointError(f"{file} is corrupt: {data_bytes - position} trailing bytes after "
                              "the tensors")


def _file_holding(root: Path, files: tuple[str, ...], name: str) -> Path:
    for file in files:
        if file.endswith(".safetensors") and name in read_safetensors_header(root / file):
            return root / file
    raise CheckpointError(f"no weight file holds {name}")


def read_int_tensor(path: Path, name: str) -> list[int]:
    """The values of one integer/bool tensor of a safetensors file (little-endian, flattened)."""
    dtype, shape, begin, end = read_safetensors_header(path)[name]
    if dtype not in INT_DTYPES:
        raise CheckpointError(f"{path.name}: tensor {name!r} has dtype {dtype}, expected an "
                              "integer type")
    with path.open("rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        f.seek(8 + header_len + begin)
        data = f.read(end - begin)
    return [int(x) for x in struct.unpack(f"<{math.prod(shape)}{INT_DTYPES[dtype]}", data)]


def _read_json_object(path: Path, *, what: str) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{what} {path.name} is missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{what} {path.name} is unreadable: {exc}") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{what} {path.name} is not a JSON object")
    return raw

