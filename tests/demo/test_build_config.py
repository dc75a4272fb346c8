"""Build settings: EAGLE-3's feature layers and command-line overrides."""

from __future__ import annotations

import pytest

from demo.build_config import FULL, with_overrides
from demo.pipeline import eagle3_aux_layers


def test_feature_layers_are_eagle3s_for_smollm2() -> None:
    assert eagle3_aux_layers(30) == (2, 15, 27)  # inputs of decoder layers 2, L//2, L-3
    assert eagle3_aux_layers(32) == (2, 16, 29)  # Llama-3.1-8B, as EAGLE-3 trains it
    with pytest.raises(ValueError, match="at least 8 layers"):
        eagle3_aux_layers(4)


def test_overrides_parse_json_and_nest() -> None:
    cfg = with_overrides(FULL,
                         ["specialist.epochs=7", "report.temperatures=[0.0, 0.7]", "device=cuda"])
    assert cfg.specialist.epochs == 7
    assert cfg.report.temperatures == (0.0, 0.7)
    assert cfg.device == "cuda"
    with pytest.raises(ValueError, match="unknown build setting"):
        with_overrides(FULL, ["target.nope=1"])


def test_the_shipped_pool_fits_its_size_budget_by_shape() -> None:
    """Eight drafters of the default shape stay under the 100 MB the repository allows."""
    d, h = FULL.drafter, 576  # SmolLM2's hidden size
    params = (3 * h * h + 2 * h * (h + 2 * 192) + h * h  # fc, q/k/v over [emb; hidden], o
              + 3 * h * d.intermediate_size + d.draft_vocab_size * h)
    assert 8 * 2 * params < 100e6


def test_a_specialist_can_have_its_own_epochs() -> None:
    cfg = with_overrides(FULL, ['specialist_epochs={"medical": 5}', "specialist.epochs=2"])
    assert cfg.specialist_schedule("medical").epochs == 5.0
    assert cfg.specialist_schedule("sql").epochs == 2.0
    assert cfg.specialist_schedule("medical").lr == cfg.specialist.lr
    with pytest.raises(ValueError, match="names no domain cooking"):
        with_overrides(FULL, ['specialist_epochs={"cooking": 5}'])
