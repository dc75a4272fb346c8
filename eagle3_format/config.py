"""An EAGLE-3 drafter's config.json: the fields, their defaults and the variants refused.

`Eagle3Config.from_dict` is the one reading of a config.json; it raises `DrafterConfigError`
with a message that starts with "config.json". Sizes are positive integers; an absent or null
size means its default where engines give it one (SGLang reads a null draft_vocab_size as the
target's vocabulary, a null target_hidden_size as hidden_size), else the config is refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from eagle3_format.aux_layers import AuxLayers, aux_layers_from_config, aux_layers_to_config
from eagle3_format.errors import DrafterConfigError
from eagle3_format.rope_config import RopeConfig

ARCHITECTURES = ("LlamaForCausalLM", "LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")


def positive_int(raw: Mapping[str, Any], key: str, default: int | None = None, *,
                 where: str = "config.json") -> int:
    """A positive integer field of `where`; absent or null means `default`."""
    value = raw.get(key)
    if value is None:
        value = default
    if value is None:
        raise DrafterConfigError(f"{where} lacks {key!r}")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise DrafterConfigError(f"{where} has a bad {key!r}: {value!r}")
    return value


def check_architectures(raw: dict[str, Any]) -> tuple[str, ...]:
    """The declared architectures; absent or empty passes (many exports omit them), anything
    else must name an EAGLE-3 drafter."""
    names = raw.get("architectures")
    if names is None:
        return ()
    if not isinstance(names, list) or not all(isinstance(a, str) for a in names):
        raise DrafterConfigError("config.json: 'architectures' must be a list of strings")
    if names and not set(names) & set(ARCHITECTURES):
        raise DrafterConfigError(f"config.json: architecture {names} is not an EAGLE-3 drafter "
                                 f"(expected one of {list(ARCHITECTURES)})")
    return tuple(names)


def identity_problem(raw: dict[str, Any], architectures: tuple[str, ...]) -> str | None:
    """None if a config.json whose `architectures` passed `check_architectures` identifies an
    EAGLE-3 drafter, else why not: it must name an EAGLE architecture or carry a
    draft_vocab_size (a full model's config has neither), and have one decoder layer."""
    eagle_named = any("eagle" in a.lower() for a in architectures)
    if not eagle_named and "draft_vocab_size" not in raw:
        layers = raw.get("num_hidden_layers")
        what = f"a full model's config ({layers} layers)" if layers else "not an EAGLE-3 config"
        return f"config.json is {what}: no draft_vocab_size and no EAGLE-3 architecture"
    if raw.get("num_hidden_layers", 1) != 1:
        return (f"config.json has num_hidden_layers {raw.get('num_hidden_layers')}; an EAGLE-3 "
                "drafter has one decoder layer")
    return None


def config_json_problem(text: bytes) -> str | None:
    """None if `text`, a folder's config.json, identifies an EAGLE-3 drafter (a JSON object whose
    architectures and identity pass), else why not: how discovery tells drafters from other
    folders before anything else is fetched."""
    try:
        raw = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        return "config.json is not valid JSON"
    if not isinstance(raw, dict):
        return "config.json is not a JSON object"
    try:
        architectures = check_architectures(raw)
    except DrafterConfigError as exc:
        return str(exc)
    return identity_problem(raw, architectures)


def check_drafter_flags(raw: dict[str, Any]) -> None:
    """Variants of the EAGLE-3 layer that this engine does not run, refused rather than run
    as the plain layer (which would silently lose acceptance)."""
    eagle = raw.get("eagle_config")
    eagle = eagle if isinstance(eagle, dict) else {}
    use_aux = eagle.get("use_aux_hidden_state", raw.get("use_aux_hidden_state", True))
    if use_aux is False:
        # SGLang then feeds the target's last hidden state alone (EAGLE-1/2 style)
        raise DrafterConfigError("config.json: use_aux_hidden_state is false; "
                                 "only 3-layer EAGLE-3 features are supported")
    if raw.get("norm_before_residual") is True:
        # vLLM then adds the *normalised* hidden state to the residual; this engine adds it raw
        raise DrafterConfigError("config.json: norm_before_residual is true; "
                                 "only the EAGLE-3 layer without it is supported")


@dataclass(frozen=True)
class Eagle3Config:
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    draft_vocab_size: int
    target_hidden_size: int
    rms_norm_eps: float = 1e-5
    rope: RopeConfig = field(default_factory=RopeConfig)  # the drafter's own, never the target's
    aux_layers: AuxLayers | None = None  # input-of-layer convention (aux_layers.py)
    architectures: tuple[str, ...] = ("LlamaForCausalLMEagle3",)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def rope_theta(self) -> float:
        return self.rope.theta

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Eagle3Config:
        try:
            return cls._read(raw)
        except DrafterConfigError as exc:
            msg = str(exc)
            raise DrafterConfigError(msg if msg.startswith("config.json")
                                     else f"config.json: {msg}") from exc
        except (KeyError, TypeError, ValueError) as exc:
            raise DrafterConfigError(f"config.json is missing or has a bad field: {exc}") from exc

    @classmethod
    def _read(cls, raw: dict[str, Any]) -> Eagle3Config:
        architectures = check_architectures(raw)
        check_drafter_flags(raw)
        hidden = positive_int(raw, "hidden_size")
        heads = positive_int(raw, "num_attention_heads")
        vocab = positive_int(raw, "vocab_size")
        draft_vocab = positive_int(raw, "draft_vocab_size", vocab)
        if draft_vocab > vocab:
            raise DrafterConfigError(f"draft_vocab_size {draft_vocab} exceeds vocab_size {vocab}")
        return cls(
            hidden_size=hidden,
            intermediate_size=positive_int(raw, "intermediate_size"),
            num_attention_heads=heads,
            num_key_value_heads=positive_int(raw, "num_key_value_heads", heads),
            head_dim=positive_int(raw, "head_dim", hidden // heads),
            vocab_size=vocab,
            draft_vocab_size=draft_vocab,
            target_hidden_size=positive_int(raw, "target_hidden_size", hidden),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
            rope=RopeConfig.from_config(raw),
            aux_layers=aux_layers_from_config(raw),
            architectures=architectures,
            extra=dict(raw),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "architectures": list(self.architectures),
            "model_type": "llama",
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": 1,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            **self.rope.to_config(),
            "vocab_size": self.vocab_size,
            "draft_vocab_size": self.draft_vocab_size,
            "tie_word_embeddings": False,
            "bias": False,
        }
        if self.target_hidden_size != self.hidden_size:
            out["target_hidden_size"] = self.target_hidden_size
        if self.aux_layers is not None:
            out.update(aux_layers_to_config(self.aux_layers))
        return out

    @classmethod
    def for_target(
        cls,
        target_config: Any,
        *,
        draft_vocab_size: int,
        aux_layers: AuxLayers,
        intermediate_size: int | None = None,
    ) -> Eagle3Config:
        """A drafter shaped for `target_config` (a transformers PretrainedConfig)."""
        hidden = int(target_config.hidden_size)
        heads = int(target_config.num_attention_heads)
        return cls(
            hidden_size=hidden,
            intermediate_size=int(intermediate_size or target_config.intermediate_size),
            num_attention_heads=heads,
            num_key_value_heads=int(getattr(target_config, "num_key_value_heads", None) or heads),
            head_dim=int(getattr(target_config, "head_dim", None) or hidden // heads),
            vocab_size=int(target_config.vocab_size),
            draft_vocab_size=int(draft_vocab_size),
            target_hidden_size=hidden,
            rms_norm_eps=float(getattr(target_config, "rms_norm_eps", 1e-5)),
            aux_layers=tuple(aux_layers),  # type: ignore[arg-type]
        )
