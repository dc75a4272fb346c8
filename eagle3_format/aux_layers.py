"""The three target layers whose features an EAGLE-3 drafter fuses, as config.json names them.

Engines read them from two places, in two conventions (reimplemented from their sources in
tests/core/model/test_aux_layer_metadata.py):
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

from eagle3_format.errors import DrafterConfigError

AuxLayers = tuple[int, int, int]
TOP_LEVEL_IDS = "eagle_aux_hidden_state_layer_ids"


def default_aux_layers(num_layers: int) -> AuxLayers:
    """EAGLE-3's feature layers (inputs of decoder layers 2, L//2, L-3): what every engine
    captures for a drafter whose config names none (EAGLE, vLLM, SGLang; SpecForge's default
    [1, L//2-1, L-4] in output-of-layer ids is the same). Below 7 layers it repeats a layer."""
    return (2, num_layers // 2, num_layers - 3)


def aux_layers_from_config(raw: dict[str, Any]) -> AuxLayers | None:
    """The trained feature layers as inputs of decoder layers, or None when the config names
    none (then default_aux_layers applies)."""
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


def aux_layers_to_config(layers: AuxLayers) -> dict[str, Any]:
    """The config.json keys naming `layers`, each engine's field in its own convention, so that
    vLLM (top level first, as is) and SGLang (nested only, + 1) capture the same layers."""
    return {
        TOP_LEVEL_IDS: list(layers),
        "eagle_config": {
            TOP_LEVEL_IDS: [i - 1 for i in layers],
            "use_aux_hidden_state": True,
            "layer_id_convention": (
                "eagle_config ids: output of decoder layer id (SGLang/SpecForge); "
                "top-level ids: input of decoder layer id (vLLM)"
            ),
        },
    }


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
