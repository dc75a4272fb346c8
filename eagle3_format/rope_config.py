"""Which RoPE a drafter's config.json asks for (the tables themselves: core/model/rope.py).

A drafter config states its RoPE in one of two forms, and engines read both:
  transformers < 5   top-level `rope_theta` and an optional `rope_scaling` dict whose type is under
                     `rope_type` (or the older `type`);
  transformers >= 5  one `rope_parameters` dict holding `rope_type`, `rope_theta` and the scaling
                     keys (what `PretrainedConfig.to_dict` writes now: no top-level rope_theta).
Precedence follows transformers (`RotaryEmbeddingConfigMixin.convert_rope_params_to_dict`): a
`rope_scaling` dict replaces `rope_parameters`; `rope_theta` inside the dict wins over the top-level
field; absent everywhere it is 10000 (EAGLE, vLLM and SGLang read drafters through LlamaConfig,
whose default that is). Types: default, linear, dynamic (NTK), yarn, llama3. Others (longrope, ...)
are refused rather than silently run as the default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eagle3_format.errors import DrafterConfigError

ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3")
DEFAULT_THETA = 10000.0
DEFAULT_MAX_POSITIONS = 2048  # LlamaConfig's default max_position_embeddings
# Keys of each type's scaling dict that core/model/rope.py reads (the rest of a dict is ignored).
_SCALING_KEYS = {
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale",
             "mscale_all_dim", "attention_factor", "truncate"),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}
# The scaling keys a type cannot run without (yarn derives its factor from the lengths).
_REQUIRED_KEYS = {"linear": ("factor",), "dynamic": ("factor",),
                  "llama3": ("factor", "low_freq_factor", "high_freq_factor")}


class RopeConfigError(DrafterConfigError):
    """config.json asks for a RoPE this drafter cannot run."""


@dataclass(frozen=True)
class RopeConfig:
    rope_type: str = "default"
    theta: float = DEFAULT_THETA
    max_position_embeddings: int = DEFAULT_MAX_POSITIONS
    # The type's scaling keys, as (name, value) pairs so that the config stays hashable.
    scaling: tuple[tuple[str, Any], ...] = ()

    def get(self, key: str, default: Any = None) -> Any:
        return dict(self.scaling).get(key, default)

    @classmethod
    def from_config(cls, raw: dict[str, Any]) -> RopeConfig:
        """Read either form (module docstring) from a config.json dict."""
        params = raw.get("rope_scaling") or raw.get("rope_parameters") or {}
        if not isinstance(params, dict):
            raise RopeConfigError(f"rope parameters must be a JSON object, got {params!r}")
        rope_type = str(params.get("rope_type") or params.get("type") or "default")
        if rope_type not in ROPE_TYPES:
            raise RopeConfigError(f"rope_type {rope_type!r} is not supported "
                                  f"(use one of {list(ROPE_TYPES)})")
        if float(params.get("partial_rotary_factor")
                 or raw.get("partial_rotary_factor") or 1.0) != 1.0:
            raise RopeConfigError("partial_rotary_factor != 1 is not supported "
                                  "for an EAGLE-3 drafter")
        theta = params.get("rope_theta") or raw.get("rope_theta") or DEFAULT_THETA
        max_positions = int(raw.get("max_position_embeddings") or DEFAULT_MAX_POSITIONS)
        scaling = {k: params[k] for k in _SCALING_KEYS[rope_type] if params.get(k) is not None}
        if rope_type in ("yarn", "llama3"):
            # transformers gives a top-level original_max_position_embeddings priority (Phi-3 style)
            original = raw.get("original_max_position_embeddings") or scaling.get(
                "original_max_position_embeddings", max_positions
            )
            scaling["original_max_position_embeddings"] = int(original)
        missing = [k for k in _REQUIRED_KEYS.get(rope_type, ()) if scaling.get(k) is None]
        if missing:
            raise RopeConfigError(f"rope_type {rope_type!r} needs {missing}")
        return cls(rope_type, float(theta), max_positions, tuple(sorted(scaling.items())))

    def to_config(self) -> dict[str, Any]:
        """The config.json keys for this RoPE, in both forms, so that transformers 4 and 5 (and
        the engines reading drafters through them) see the same RoPE."""
        out: dict[str, Any] = {
            "rope_theta": self.theta,
            "max_position_embeddings": self.max_position_embeddings,
            "rope_parameters": {"rope_type": self.rope_type, "rope_theta": self.theta,
                                **dict(self.scaling)},
        }
        if self.rope_type != "default":
            out["rope_scaling"] = {"rope_type": self.rope_type, **dict(self.scaling)}
        return out
