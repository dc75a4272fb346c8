"""A seeded sampled request gives the same text whatever else happens (issue 58, deliverable
5): alone, again after other requests taught the suffix member their answers, among other
streams in one batch, under any policy, and the same text as plain sampling with that seed.
Sampling draws with noise keyed by output position (core/speculation/sampling.PositionNoise)
over logits that canonical numerics make bit-identical (core/model/canonical.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from bench.harness.tiny_models import make_engine, random_drafter, tiny_target
from core.config import SamplingParams, TreeConfig
from core.engine import SpecEngine
from core.model import canonical
from core.speculation.model_free.kinds import make_model_free

pytestmark = pytest.mark.skipif(canonical.available() is not None,
                                reason=f"{canonical.available()}")

PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]
SEEDED = SamplingParams(max_new_tokens=32, temperature=0.8, top_p=0.95, seed=7, ignore_eos=True)


def engine() -> SpecEngine:
    target = tiny_target(vocab=32, hidden=64)
    eng = make_engine(target, {f"d{i}": random_drafter(target, draft_vocab=24, seed=i)
                               for i in range(2)}, TreeConfig(top_k=3, depth=4, total_tokens=10))
    eng.add_model_free("suffix", make_model_free("suffix"))
    eng.add_model_free("lookup", make_model_free("ngram"))
    return eng


def among_others(eng: SpecEngine, policy: str, others: int = 4) -> list[int]:
    gen = torch.Generator().manual_seed(11)
    eng.add_request("seeded", PROMPT, SEEDED, policy)
    for i in range(others):
        prompt = torch.randint(0, 32, (5 + 3 * i,), generator=gen).tolist()
        params = SamplingParams(max_new_tokens=24 + 5 * i, temperature=1.0, ignore_eos=True)
        eng.add_request(f"other{i}", prompt, params, ("normalhedge", "fixed:suffix")[i % 2])
    out: list[int] = []
    while eng.has_unfinished():
        for o in eng.step():
            if o.request_id == "seeded":
                out += o.token_ids
    return out


def test_a_seeded_request_gives_the_same_text_alone_again_and_among_other_streams() -> None:
    eng = engine()
    alone, _ = eng.generate_ids(PROMPT, SEEDED, policy="normalhedge")
    assert among_others(eng, "normalhedge") == alone
    again, _ = eng.generate_ids(PROMPT, SEEDED, policy="normalhedge")  # the suffix member
    assert again == alone  # now remembers this very answer: other trees, the same text
    for policy in ("none", "fixed:suffix", "fixed:lookup", "fixed:d1", "ucbspec"):
        assert eng.generate_ids(PROMPT, SEEDED, policy=policy)[0] == alone, policy
    other_seed = dataclasses.replace(SEEDED, seed=8)
    assert eng.generate_ids(PROMPT, other_seed, policy="normalhedge")[0] != alone
