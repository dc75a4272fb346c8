"""Build settings: distinct aux layers and command-line overrides."""

from __future__ import annotations

import pytest

from demo.build_config import FULL, QUICK, aux_layers_for, with_overrides


@pytest.mark.parametrize("layers", [4, 6, 8, 12, 32])
def test_aux_layers_are_distinct_low_mid_high(layers: int) -> None:
    low, mid, high = aux_layers_for(layers)
    assert 0 < low < mid < high < layers


def test_full_target_has_distinct_feature_layers() -> None:
    assert FULL.target.num_layers >= 6
    assert aux_layers_for(FULL.target.num_layers) == (1, 3, 4)  # 6 layers
    assert QUICK.target.num_layers >= 4


def test_overrides_parse_json_and_nest() -> None:
    cfg = with_overrides(FULL, ["specialist.steps=7", "rollouts.temperatures=[0.0, 0.7]", "device=cuda"])
    assert cfg.specialist.steps == 7
    assert cfg.rollouts.temperatures == (0.0, 0.7)
    assert cfg.device == "cuda"
    with pytest.raises(ValueError, match="unknown build setting"):
        with_overrides(FULL, ["target.nope=1"])
