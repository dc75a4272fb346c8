"""Cheap, torch-free checks of an EAGLE-3 drafter directory, run before the full load.

They catch what a download can get wrong (truncated or corrupt files, a missing config, an
unreadable archive) and what the configs alone reveal (hidden size or vocabulary that do not fit
the served target), in milliseconds and without reading the weights (only d2t and t2d, a few
hundred kilobytes, are read from safetensors files). The authoritative check that loads the
tensors is `core.eagle3.inspect_drafter`, which the gateway runs next.

One set of rules: these are the rules of `core.checkpoint_config`, `core.rope` and
`core.eagle3.check_state_dict`, restated here because this package may not import `core`
(DESIGN.md section 1); tests/registry/test_validation_agreement.py runs both on the same
checkpoints and requires the same verdict. For `pytorch_model.bin` the tensors cannot be seen
without torch, so the tensor rules are left to the core check (never the other way round: what
the core accepts is never refused here).

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

ARCHITECTURES = ("LlamaForCausalLM", "LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")
AUX_IDS = "eagle_aux_hidden_state_layer_ids"
LAYER_KEYS = tuple(f"midlayer.{name}.weight" for name in (
    "hidden_norm", "input_layernorm", "post_attention_layernorm", "self_attn.q_proj",
    "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
    "mlp.down_proj",
))
REQUIRED_TENSORS = ("fc.weight", *LAYER_KEYS, "norm.weight", "lm_head.weight")
OPTIONAL_TENSORS = ("d2t", "t2d", "embed_tokens.weight")
# RoPE types the engine runs and the scaling keys each one needs (core/rope.py).
ROPE_TYPES = {"default": (), "linear": ("factor",), "dynamic": ("factor",), "yarn": (),
              "llama3": ("factor", "low_freq_factor", "high_freq_factor")}
INT_DTYPES = {"I64": "q", "I32": "i", "I16": "h", "I8": "b", "U8": "B", "BOOL": "?"}

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
    # Feature layers as inputs of decoder layers (None: the config names none).
    aux_layers: tuple[int, ...] | None = None

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
    _check_drafter_flags(config)
    _check_rope(config)
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
        aux_layers=aux_layers_from_config(config),
    )
    _check_tensor_shapes(summary, _layer_shapes(config, hidden))
    if "d2t" in tensors and "t2d" in tensors:
        _check_vocab_mapping(root, files, summary)
    return summary


def check_against_target(summary: CheckpointSummary, target_dir: str | Path) -> None:
    """Raise `CheckpointError` if the drafter's configured sizes cannot fit the target's."""
    target = _read_json_object(Path(target_dir) / CONFIG_FILE, what="target config")
    t_hidden = _positive_int(target, "hidden_size")
    t_vocab = _positive_int(target, "vocab_size")
    problems = []
    if summary.target_hidden_size != t_hidden:
        problems.append(f"hidden size {summary.target_hidden_size} != target hidden size "
                        f"{t_hidden}")
    if summary.vocab_size != t_vocab:
        problems.append(f"vocab size {summary.vocab_size} != target vocab size {t_vocab}")
    layers = target.get("num_hidden_layers") or 0
    # No named layers: trained on EAGLE-3's default inputs of layers 2, L//2, L-3 (every engine).
    trained = summary.aux_layers or (2, layers // 2, layers - 3)
    if any(not 0 <= i < max(layers, 1) for i in trained):
        problems.append(f"aux layers {list(trained)} outside the target's {layers} layers")
    if (summary.tensors and "embed_tokens.weight" not in summary.tensors
        and summary.target_hidden_size != summary.hidden_size):
        problems.append("drafter width differs from the target but ships no embed_tokens")
    if problems:
        raise CheckpointError("incompatible with target: " + "; ".join(problems))


def read_drafter_config(path: Path) -> dict[str, Any]:
    config = _read_json_object(path, what="drafter config")
    architectures = config.get("architectures")
    if architectures is not None and (
        not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures)
    ):
        raise CheckpointError(f"{path.name}: 'architectures' must be a list of strings")
    if architectures and not set(architectures) & set(ARCHITECTURES):
        raise CheckpointError(f"architecture {architectures} is not an EAGLE-3 drafter (expected "
                              f"one of {list(ARCHITECTURES)})")
    return config


def aux_layers_from_config(config: dict[str, Any]) -> tuple[int, ...] | None:
    """The trained feature layers as inputs of decoder layers: top-level ids as vLLM reads them
    (as is), `eagle_config` ids as SGLang reads them (+ 1); both present must agree."""
    eagle = config.get("eagle_config")
    if eagle is not None and not isinstance(eagle, dict):
        raise CheckpointError("config.json: 'eagle_config' must be a JSON object")
    top = _layer_ids(config.get(AUX_IDS), AUX_IDS, shift=0)
    nested = _layer_ids((eagle or {}).get(AUX_IDS), f"eagle_config.{AUX_IDS}", shift=1)
    if top is not None and nested is not None and top != nested:
        raise CheckpointError(
            f"config.json names two sets of feature layers ({AUX_IDS}: inputs of layers "
            f"{list(top)} in vLLM, eagle_config: {list(nested)} in SGLang): the engines would run "
            "it on different layers"
        )
    return top if top is not None else nested


def _layer_ids(value: Any, name: str, *, shift: int) -> tuple[int, ...] | None:
    if value is None or value == []:
        return None
    if (not isinstance(value, list)
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in value)):
        raise CheckpointError(f"config.json: {name} must be a list of integers, got {value!r}")
    if len(value) != 3:
        raise CheckpointError(f"config.json: {name} has {len(value)} layers; an EAGLE-3 drafter "
                              "fuses 3")
    if min(value) + shift < 0:
        raise CheckpointError(f"config.json: {name} {value} names a layer below the embedding")
    return tuple(i + shift for i in value)


def _check_drafter_flags(config: dict[str, Any]) -> None:
    eagle = config.get("eagle_config")
    eagle = eagle if isinstance(eagle, dict) else {}
    if eagle.get("use_aux_hidden_state", config.get("use_aux_hidden_state", True)) is False:
        raise CheckpointError("config.json: use_aux_hidden_state is false; only 3-layer EAGLE-3 "
                              "features are supported")
    if config.get("norm_before_residual") is True:
        raise CheckpointError("config.json: norm_before_residual is true; only the EAGLE-3 layer "
                              "without it is supported")


def _check_rope(config: dict[str, Any]) -> None:
    """RoPE in either form (rope_scaling wins over rope_parameters, as in transformers)."""
    params = config.get("rope_scaling") or config.get("rope_parameters") or {}
    if not isinstance(params, dict):
        raise CheckpointError(f"config.json: rope parameters must be a JSON object, got {params!r}")
    rope_type = str(params.get("rope_type") or params.get("type") or "default")
    if rope_type not in ROPE_TYPES:
        raise CheckpointError(f"config.json: rope_type {rope_type!r} is not supported (use one of "
                              f"{list(ROPE_TYPES)})")
    if (params.get("partial_rotary_factor") or config.get("partial_rotary_factor") or 1.0) != 1.0:
        raise CheckpointError("config.json: partial_rotary_factor != 1 is not supported for an "
                              "EAGLE-3 drafter")
    missing = [k for k in ROPE_TYPES[rope_type] if params.get(k) is None]
    if missing:
        raise CheckpointError(f"config.json: rope_type {rope_type!r} needs {missing}")


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
    if (root / SAFETENSORS_FILE).is_file():
        header = read_safetensors_header(root / SAFETENSORS_FILE)
        return "safetensors", (SAFETENSORS_FILE,), {k: v[1] for k, v in header.items()}
    if (root / SAFETENSORS_INDEX_FILE).is_file():
        shards = shard_names(_read_json_object(root / SAFETENSORS_INDEX_FILE, what="weight index"))
        tensors: dict[str, tuple[int, ...]] = {}
        for shard in shards:
            if not (root / shard).is_file():
                raise CheckpointError(f"shard {shard} listed in {SAFETENSORS_INDEX_FILE} is "
                                      "missing")
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


def _layer_shapes(config: dict[str, Any], hidden: int) -> dict[str, tuple[int, ...]]:
    """Shapes of the decoder layer's tensors implied by the config (as core's expected_shapes)."""
    heads = _positive_int(config, "num_attention_heads")
    kv_heads = _positive_int(config, "num_key_value_heads", default=heads)
    head_dim = _positive_int(config, "head_dim", default=hidden // heads)
    inter = _positive_int(config, "intermediate_size")
    q, kv = heads * head_dim, kv_heads * head_dim
    return {
        "midlayer.hidden_norm.weight": (hidden,),
        "midlayer.input_layernorm.weight": (hidden,),
        "midlayer.post_attention_layernorm.weight": (hidden,),
        "midlayer.self_attn.q_proj.weight": (q, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": (kv, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": (kv, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": (hidden, q),
        "midlayer.mlp.gate_proj.weight": (inter, hidden),
        "midlayer.mlp.up_proj.weight": (inter, hidden),
        "midlayer.mlp.down_proj.weight": (hidden, inter),
    }


def _check_tensor_shapes(summary: CheckpointSummary,
                         layer_shapes: dict[str, tuple[int, ...]]) -> None:
    """Keys and shapes the config implies for the EAGLE-3 tensors (safetensors: names known)."""
    h, th, v, dv = (summary.hidden_size, summary.target_hidden_size,
                    summary.vocab_size, summary.draft_vocab_size)
    expected = {
        "fc.weight": (h, 3 * th),
        **layer_shapes,
        "lm_head.weight": (dv, h),
        "d2t": (dv,),
        "t2d": (v,),
        "norm.weight": (h,),
        "embed_tokens.weight": (v, h),
    }
    problems = []
    if summary.tensors:
        needed = [*REQUIRED_TENSORS, *(("d2t", "t2d") if dv != v else ())]
        missing = [k for k in needed if k not in summary.tensors]
        extra = [k for k in summary.tensors
                 if k not in REQUIRED_TENSORS and k not in OPTIONAL_TENSORS]
        if missing:
            problems.append(f"missing tensors {missing}")
        if extra:
            problems.append(f"unexpected tensors {extra}")
        if ("d2t" in summary.tensors) != ("t2d" in summary.tensors):
            problems.append("d2t and t2d come together (one is missing)")
    problems += [
        f"{name} is {list(summary.tensors[name])}, config implies {list(shape)}"
        for name, shape in expected.items()
        if name in summary.tensors and summary.tensors[name] != shape
    ]
    if problems:
        raise CheckpointError("weights do not match config.json: " + "; ".join(problems))


def _check_vocab_mapping(root: Path, files: tuple[str, ...], summary: CheckpointSummary) -> None:
    """d2t maps each draft id to a distinct target id (target = draft + d2t[draft]) and t2d marks
    exactly those ids; read from the safetensors bytes (two small tensors)."""
    d2t, t2d = (read_int_tensor(_file_holding(root, files, name), name) for name in ("d2t", "t2d"))
    ids = [i + offset for i, offset in enumerate(d2t)]
    if ids and (min(ids) < 0 or max(ids) >= summary.vocab_size):
        raise CheckpointError("d2t maps draft ids outside the target vocabulary")
    if len(set(ids)) != len(ids):
        raise CheckpointError("d2t maps two draft ids to one target id")
    if {i for i, flag in enumerate(t2d) if flag} != set(ids):
        raise CheckpointError("t2d does not mark exactly the target ids that d2t maps to")


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


def _positive_int(config: dict[str, Any], key: str, *, default: int | None = None) -> int:
    """Absent or null means `default` (SGLang reads a null draft_vocab_size as the target's
    vocabulary, a null target_hidden_size as hidden_size)."""
    value = config.get(key)
    if value is None:
        value = default
    if value is None:
        raise CheckpointError(f"config.json lacks {key!r}")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CheckpointError(f"config.json has a bad {key!r}: {value!r}")
    return value
