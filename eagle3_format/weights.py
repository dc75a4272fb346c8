"""An EAGLE-3 drafter's weight files and tensors: names, the shapes config.json implies, and the
d2t/t2d vocabulary mapping.

Readers pass what they can see without this module knowing how: `core.model.eagle3` the loaded
tensors' shapes and values, `drafter_registry.validation` the safetensors headers and the two small
integer tensors (it cannot see inside a `pytorch_model.bin` without torch, and then leaves these
rules to the core's full check).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from eagle3_format.config import Eagle3Config
from eagle3_format.errors import DrafterConfigError

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX_FILE = "model.safetensors.index.json"
TORCH_BIN_FILE = "pytorch_model.bin"
# Preference order when a directory holds several formats, and each one's name in reports.
WEIGHT_FILES = (SAFETENSORS_FILE, SAFETENSORS_INDEX_FILE, TORCH_BIN_FILE)
WEIGHT_FORMATS = {SAFETENSORS_FILE: "safetensors", SAFETENSORS_INDEX_FILE: "safetensors-sharded",
                  TORCH_BIN_FILE: "bin"}

LAYER_TENSORS = tuple(f"midlayer.{name}.weight" for name in (
    "hidden_norm", "input_layernorm", "post_attention_layernorm", "self_attn.q_proj",
    "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
    "mlp.down_proj",
))
REQUIRED_TENSORS = ("fc.weight", *LAYER_TENSORS, "norm.weight", "lm_head.weight")
# d2t/t2d are required too when the draft vocabulary is smaller than the target's; without them
# the mapping is the identity. embed_tokens is required when the drafter's width differs from
# its target's (it cannot share the target's table).
OPTIONAL_TENSORS = ("d2t", "t2d", "embed_tokens.weight")

Shapes = Mapping[str, tuple[int, ...]]


def preferred_weight_file(names: Iterable[str]) -> str | None:
    """The weight file a drafter folder holding `names` is read from (WEIGHT_FILES' order), or
    None: the one rule the loader, the registry's validation and discovery apply."""
    present = set(names)
    return next((name for name in WEIGHT_FILES if name in present), None)


def no_weights(where: str) -> str:
    """Why a folder without any weight file is not a drafter."""
    return f"no weights in {where}: expected one of {', '.join(WEIGHT_FILES)}"


def shard_names(index: Any) -> tuple[str, ...]:
    """The shard files a `model.safetensors.index.json` names; each must be a plain
    `.safetensors` file name, so that an index cannot reach outside the drafter directory."""
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise DrafterConfigError(f"{SAFETENSORS_INDEX_FILE} has no weight_map")
    names = sorted({str(v) for v in weight_map.values()})
    for name in names:
        if "/" in name or "\\" in name or name.startswith(".") or not name.endswith(".safetensors"):
            raise DrafterConfigError(f"{SAFETENSORS_INDEX_FILE} names an invalid shard {name!r}")
    return tuple(names)


def expected_shapes(cfg: Eagle3Config) -> dict[str, tuple[int, ...]]:
    """The shape of every tensor the format knows, as `cfg` implies it."""
    h, ht, i = cfg.hidden_size, cfg.target_hidden_size, cfg.intermediate_size
    q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    return {
        "fc.weight": (h, 3 * ht),
        "midlayer.hidden_norm.weight": (h,),
        "midlayer.input_layernorm.weight": (h,),
        "midlayer.post_attention_layernorm.weight": (h,),
        "midlayer.self_attn.q_proj.weight": (q, 2 * h),
        "midlayer.self_attn.k_proj.weight": (kv, 2 * h),
        "midlayer.self_attn.v_proj.weight": (kv, 2 * h),
        "midlayer.self_attn.o_proj.weight": (h, q),
        "midlayer.mlp.gate_proj.weight": (i, h),
        "midlayer.mlp.up_proj.weight": (i, h),
        "midlayer.mlp.down_proj.weight": (h, i),
        "norm.weight": (h,),
        "lm_head.weight": (cfg.draft_vocab_size, h),
        "d2t": (cfg.draft_vocab_size,),
        "t2d": (cfg.vocab_size,),
        "embed_tokens.weight": (cfg.vocab_size, h),
    }


def check_tensors(cfg: Eagle3Config, shapes: Shapes) -> None:
    """Raise one error naming every missing, unexpected and misshapen tensor of a checkpoint
    whose tensor names and shapes are `shapes`."""
    needed = [*REQUIRED_TENSORS, *(("d2t", "t2d") if cfg.draft_vocab_size != cfg.vocab_size
                                   else ())]
    missing = [k for k in needed if k not in shapes]
    extra = [k for k in shapes if k not in REQUIRED_TENSORS and k not in OPTIONAL_TENSORS]
    problems = []
    if missing:
        problems.append(f"missing tensors {missing}")
    if extra:
        problems.append(f"unexpected tensors {extra}")
    if ("d2t" in shapes) != ("t2d" in shapes):
        problems.append("d2t and t2d come together (one is missing)")
    if cfg.target_hidden_size != cfg.hidden_size and "embed_tokens.weight" not in shapes:
        problems.append(f"no embed_tokens.weight, though the drafter's width {cfg.hidden_size} "
                        f"differs from its target's {cfg.target_hidden_size} (it cannot share "
                        "the target's embedding)")
    problems += [f"{name} is {list(shapes[name])}, config implies {list(want)}"
                 for name, want in expected_shapes(cfg).items()
                 if name in shapes and tuple(shapes[name]) != want]
    if problems:
        raise DrafterConfigError("weights do not match config.json: " + "; ".join(problems))


def check_vocab_mapping(d2t: Sequence[int], t2d: Sequence[int], vocab_size: int) -> None:
    """d2t must map each draft id into the target vocabulary (target id = draft id +
    d2t[draft id]), one target id each, and t2d must mark exactly those ids (the official pair;
    vLLM and SGLang read d2t, our evaluation reads t2d). Call it once check_tensors passed."""
    ids = [i + int(offset) for i, offset in enumerate(d2t)]
    if ids and (min(ids) < 0 or max(ids) >= vocab_size):
        raise DrafterConfigError("d2t maps draft ids outside the target vocabulary")
    if len(set(ids)) != len(ids):
        raise DrafterConfigError("d2t maps two draft ids to one target id")
    if {i for i, flag in enumerate(t2d) if flag} != set(ids):
        raise DrafterConfigError("t2d does not mark exactly the target ids that d2t maps to")
