"""Build settings: EAGLE-3's feature layers and command-line overrides."""

from __future__ import annotations

import pytest

from demo.build_config import FULL, PAPER_REGIME, QUICK, BuildConfig, with_overrides
from demo.domains import DATA_DIR, DOMAINS
from demo.pipeline import eagle3_aux_layers, prompt_jobs


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


def test_a_domain_can_answer_more_prompts_greedily() -> None:
    """domain_greedy raises one domain's greedy count; the first ranks stay the same prompts
    (the seeded order is a prefix), so the rollouts already made are reused, and the other
    domains are untouched."""
    base = with_overrides(QUICK, ["rollouts.greedy_per_domain=4"])
    more = with_overrides(base, ['rollouts.domain_greedy={"medical": 9}'])

    def greedy(cfg: BuildConfig, domain: str) -> list[str]:
        return [j.record.id for j in prompt_jobs(cfg, 0, DATA_DIR)
                if j.record.domain == domain and j.temperature == 0.0]

    assert len(greedy(more, "medical")) == 9
    assert greedy(more, "medical")[:4] == greedy(base, "medical")
    assert all(greedy(more, d) == greedy(base, d) for d in DOMAINS if d != "medical")
    with pytest.raises(ValueError, match=r"rollouts\.domain_greedy names no domain cooking"):
        with_overrides(FULL, ['rollouts.domain_greedy={"cooking": 5}'])


def test_the_full_build_answers_every_medical_prompt() -> None:
    assert FULL.rollouts.domain_greedy == {"medical": 2000}
    assert with_overrides(FULL, PAPER_REGIME).rollouts.domain_greedy == {}
    assert QUICK.rollouts.domain_greedy == {}
