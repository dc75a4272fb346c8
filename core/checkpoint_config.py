"""The config.json rules of an EAGLE-3 drafter that do not need tensors (torch-free, pure).

`drafter_registry.validation` applies the same rules before a download is admitted; it may not
import `core` (DESIGN.md section 1), so tests/registry/test_validation_agreement.py runs both on
the same checkpoints and requires the same verdict.

Feature layers. Engines read the three target layers a drafter was trained on from two places,
in two conventions (reimplemented from their sources in tests/core/test_aux_layer_metadata.py):
  top-level `eagle_aux_hidden_state_layer_ids`      vLLM reads it first, as "input of decoder
                                                    layer id" (its aux capture appends the
                                                    residual stream before layer id);
  `eagle_config.eagle_aux_hidden_state_layer_ids`   SGLang reads only this one and adds 1: "output
                                                    of decoder layer id" (SpecForge writes it);
                                                    older vLLM falls back to it, taken as is.
Neither present: every engine captures EAGLE-3's default inputs of layers 2, L//2, L-3.
Inside `core` an aux layer index always means "input of decoder layer idx". We read both forms
(they must agree when both are present) and write both, each in its reader's convention, so
that vLLM and SGLang capture the same tensors we do.
"""

from __future__ import annotations

from typing import Any

AuxLayers = tuple[int, int, int]
TOP_LEVEL_IDS = "eagle_aux_hidden_state_layer_ids"


class DrafterConfigError(ValueError):
    """config.json breaks a rule (the message says which)."""


def positive_int(raw: dict[str, Any], key: str, default: int | None = None) -> int:
    """A positive integer field; absent or null means `default` (SGLang reads a null
    draft_vocab_size as the target's vocabulary, a null target_hidden_size as hidden_size)."""
    value = raw.get(key)
    if value is None:
        value = default
    if value is None:
        raise DrafterConfigError(f"config.json lacks {key!r}")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise DrafterConfigError(f"config.json has a bad {key!r}: {value!r}")
    return value


def eagle3_default_layers(num_layers: int) -> AuxLayers:
    """The layers every engine captures for a drafter whose config names none (EAGLE, vLLM,
    SGLang; SpecForge's default [1, L//2-1, L-4] in output-of-layer ids is the same)."""
    return (2, num_layers // 2, num_layers - 3)


def aux_layers_from_config(raw: dict[str, Any]) -> AuxLayers | None:
    """The trained feature layers as inputs of decoder layers, or None when the config names
    none (then eagle3_default_layers applies)."""
    eagle = raw.get("eagle_config")
    if eagle is not None and not isinstance(eagle, dict):
        raise DrafterConfigError("config.json: 'eagle_config' must be a JSON object")
    top = _ids(raw.get(TOP_LEVEL_IDS), TOP_LEVEL_IDS, shift=0)
    nested = _ids((eagle or {}).get(TOP_LEVEL_IDS), f"eagle_config.{TOP_LEVEL_IDS}", shift=1)
    if top is not None and nested is not None and top != nested:
        raise DrafterConfigError(
            f"config.json names two sets of feature layers: {TOP_LEVEL_IDS} (vLLM: inputs of "
            f"layers {list(top)}) and eagle_config.{TOP_LEVEL_IDS} (SGLang: inputs of layers "
            f"{list(nested)}); vLLM and SGLang would run this drafter on different layers"
        )
    return top if top is not None else nested


def _ids(value: Any, name: str, *, shift: int) -> AuxLayers | None:
    if value is None or value == []:  # engines treat an empty list as absent
        return None
    if (not isinstance(value, list)
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in value)):
        raise DrafterConfigError(f"config.json: {name} must be a list of integers, got {value!r}")
    if len(value) != 3:
        raise DrafterConfigError(f"config.json: {name} has {len(value)} layers; "
                                 "an EAGLE-3 drafter fuses 3")
    layers = tuple(i + shift for i in value)
    if min(layers) < 0:
        raise DrafterConfigError(f"config.json: {name} {value} names a layer below the embedding")
    return layers  # type: ignore[return-value]


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
