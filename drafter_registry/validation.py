"""Cheap, torch-free checks of an EAGLE-3 drafter directory, run before the full load.

They catch what a download can get wrong (truncated or corrupt files, a missing config, an
unreadable archive) and what the configs alone reveal (hidden size or vocabulary that do not fit
the served target), in milliseconds and without reading the weights. The authoritative check that
loads the tensors is `core.eagle3.inspect_drafter`, which the gateway runs next.

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

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX_FILE = "model.safetensors.index.json"
TORCH_BIN_FILE = "pytorch_model.bin"
# Preference order when a directory holds several formats.
WEIGHT_FILES = (SAFETENSORS_FILE, SAFETENSORS_INDEX_FILE, TORCH_BIN_FILE)

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
    hidden_size: int
    vocab_size: int
    draft_vocab_size: int
    target_hidden_size: int
    architectures: tuple[str, ...]
    tensors: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "weights_format": self.weights_format,
            "weight_files": list(self.weight_files),
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "draft_vocab_size": self.draft_vocab_size,
            "target_hidden_size": self.target_hidden_size,
            "architectures": list(self.architectures),
            "num_tensors": len(self.tensors) or None,
        }


def check_checkpoint(path: str | Path) -> CheckpointSummary:
    """Check a drafter directory; raise `CheckpointError` with a readable reason."""
    root = Path(path)
    if not root.is_dir():
        raise CheckpointError(f"drafter directory not found: {root}")
    config = read_drafter_config(root / CONFIG_FILE)
    weights_format, files, tensors = _check_weights(root)
    hidden = _positive_int(config, "hidden_size")
    vocab = _positive_int(config, "vocab_size")
    draft_vocab = _positive_int(config, "draft_vocab_size", default=vocab)
    if draft_vocab > vocab:
        raise CheckpointError(f"draft_vocab_size {draft_vocab} exceeds vocab_size {vocab}")
    summary = CheckpointSummary(
        path=root,
        weights_format=weights_format,
        weight_files=files,
        hidden_size=hidden,
        vocab_size=vocab,
        draft_vocab_size=draft_vocab,
        target_hidden_size=_positive_int(config, "target_hidden_size", default=hidden),
        architectures=tuple(config.get("architectures") or ()),
        tensors=tensors,
    )
    _check_tensor_shapes(summary)
    return summary


def check_against_target(summary: CheckpointSummary, target_dir: str | Path) -> None:
    """Raise `CheckpointError` if the drafter's configured sizes cannot fit the target's."""
    target = _read_json_object(Path(target_dir) / CONFIG_FILE, what="target config")
    t_hidden = _positive_int(target, "hidden_size")
    t_vocab = _positive_int(target, "vocab_size")
    problems = []
    if summary.target_hidden_size != t_hidden:
        problems.append(f"hidden size {summary.target_hidden_size} != target hidden size {t_hidden}")
    if summary.vocab_size != t_vocab:
        problems.append(f"vocab size {summary.vocab_size} != target vocab size {t_vocab}")
    if problems:
        raise CheckpointError("incompatible with target: " + "; ".join(problems))


def read_drafter_config(path: Path) -> dict[str, Any]:
    config = _read_json_object(path, what="drafter config")
    architectures = config.get("architectures")
    if architectures is not None and (
        not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures)
    ):
        raise CheckpointError(f"{path.name}: 'architectures' must be a list of strings")
    return config


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
                f"{path.name} is truncated or corrupt: header of {header_len} bytes in a {size}-byte file"
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
    if (root / SAFETENSORS_FILE).is_file():
        header = read_safetensors_header(root / SAFETENSORS_FILE)
        return "safetensors", (SAFETENSORS_FILE,), {k: v[1] for k, v in header.items()}
    if (root / SAFETENSORS_INDEX_FILE).is_file():
        shards = shard_names(_read_json_object(root / SAFETENSORS_INDEX_FILE, what="weight index"))
        tensors: dict[str, tuple[int, ...]] = {}
        for shard in shards:
            if not (root / shard).is_file():
                raise CheckpointError(f"shard {shard} listed in {SAFETENSORS_INDEX_FILE} is missing")
            tensors.update({k: v[1] for k, v in read_safetensors_header(root / shard).items()})
        return "safetensors-sharded", (SAFETENSORS_INDEX_FILE, *shards), tensors
    if (root / TORCH_BIN_FILE).is_file():
        check_torch_archive(root / TORCH_BIN_FILE)
        return "bin", (TORCH_BIN_FILE,), {}
    raise CheckpointError(f"no weights in {root.name}: expected one of {', '.join(WEIGHT_FILES)}")


def shard_names(index: dict[str, Any]) -> tuple[str, ...]:
    """Shard file names of a safetensors index; each must be a plain file name."""
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{SAFETENSORS_INDEX_FILE} has no weight_map")
    names = sorted({str(v) for v in weight_map.values()})
    for name in names:
        if "/" in name or "\\" in name or name.startswith(".") or not name.endswith(".safetensors"):
            raise CheckpointError(f"{SAFETENSORS_INDEX_FILE} names an invalid shard {name!r}")
    return tuple(names)


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
        raise CheckpointError(f"{file}: tensor {name!r} byte range does not match {dtype}{list(shape)}")
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
        raise CheckpointError(f"{file} is corrupt: {data_bytes - position} trailing bytes after the tensors")


def _check_tensor_shapes(summary: CheckpointSummary) -> None:
    """Shapes the config implies for the EAGLE-3 tensors that are present."""
    h, th, v, dv = (summary.hidden_size, summary.target_hidden_size,
                    summary.vocab_size, summary.draft_vocab_size)
    expected = {
        "fc.weight": (h, 3 * th),
        "lm_head.weight": (dv, h),
        "d2t": (dv,),
        "t2d": (v,),
        "norm.weight": (h,),
    }
    problems = [
        f"{name} is {list(summary.tensors[name])}, config implies {list(shape)}"
        for name, shape in expected.items()
        if name in summary.tensors and summary.tensors[name] != shape
    ]
    if problems:
        raise CheckpointError("weights do not match config.json: " + "; ".join(problems))


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


def _positive_int(config: dict[str, Any], key: str, *, default: int | None = None) -> int:
    value = config.get(key, default)
    if value is None:
        raise CheckpointError(f"config.json lacks {key!r}")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CheckpointError(f"config.json has a bad {key!r}: {value!r}")
    return value
