"""The paper's training regime in the build: the generalist's general-chat prompts, its data
mixture, and specialists trained from scratch on their own domain's vocabulary."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from demo import pipeline
from demo.build_config import FULL, PAPER_REGIME, QUICK, with_overrides
from demo.domains import DATA_DIR, DOMAINS, corpus_path, eval_path
from demo.general_chat import GENERAL, TEMPLATES, TOPICS, general_records
from demo.records import load_records, read_jsonl
from demo.rollouts import Rollout
from tests.demo.test_train_drafters import AUX, SPEC, V, tiny_target


def test_general_prompts_are_distinct_and_outside_every_dataset() -> None:
    records = general_records()
    assert len(records) == len(TOPICS) * len(TEMPLATES) == 320
    assert len({r.id for r in records}) == len({r.prompt for r in records}) == len(records)
    assert {r.domain for r in records} == {GENERAL}
    used = {r.prompt for d in DOMAINS for path in (corpus_path(d), eval_path(d))
            for r in load_records(path, d)}
    used |= {row["prompt"] for path in (DATA_DIR / "ood").glob("*.jsonl")
             for row in read_jsonl(path)}
    assert not used & {r.prompt for r in records}


def test_a_general_prompt_id_changes_with_its_text() -> None:
    """A stored rollout is found by record id, so an edited prompt must not keep its id."""
    before = general_records()
    assert before[0].id.startswith("general-00-0-")
    import demo.general_chat as gc

    original = gc.TEMPLATES
    try:
        gc.TEMPLATES = ("Tell me about {t}.", *original[1:])
        after = general_records()
    finally:
        gc.TEMPLATES = original
    assert after[0].id != before[0].id and after[0].prompt != before[0].prompt
    assert after[1] == before[1]  # an untouched prompt keeps its id (and its stored rollout)


def test_the_full_build_asks_for_general_chat_greedy_and_sampled_first() -> None:
    all_jobs = pipeline.prompt_jobs(FULL, 0, DATA_DIR)
    jobs = [j for j in all_jobs if j.record.domain == GENERAL]
    assert all_jobs[: len(jobs)] == jobs  # the chunk order: general chat first
    greedy = [j for j in jobs if j.temperature == 0.0]
    sampled = [j for j in jobs if j.temperature == 1.0]
    assert len(greedy) == FULL.rollouts.general_greedy == 320
    assert [j.rank for j in sampled] == list(range(0, 320, 4))
    none = with_overrides(FULL, ["rollouts.general_sampled_every=0"])
    assert all(j.temperature == 0.0 for j in pipeline.prompt_jobs(none, 0, DATA_DIR)
               if j.record.domain == GENERAL)
    no_chat = with_overrides(FULL, ["rollouts.general_greedy=0"])
    assert not any(j.record.domain == GENERAL for j in pipeline.prompt_jobs(no_chat, 0, DATA_DIR))


def test_the_committed_rollouts_serve_the_scratch_regime() -> None:
    """The scratch-specialist experiment's smaller build also skips generation."""
    from demo.domains import ROLLOUTS_FILE
    from demo.rollouts import stored_responses
    from demo.stage_cache import rollout_key

    paper = with_overrides(FULL, PAPER_REGIME)
    stored = stored_responses(ROLLOUTS_FILE, rollout_key(paper, 0, DATA_DIR))
    jobs = pipeline.prompt_jobs(paper, 0, DATA_DIR)
    assert len(jobs) == 1520 and all((j.record.id, j.temperature) in stored for j in jobs)


def _rollout(domain: str, rank: int, token: int) -> Rollout:
    return Rollout(domain, f"{domain}-{rank}", 0.0, (1, 2), (token,) * 6, rank)


def test_the_generalist_sees_all_general_chat_and_a_small_share_of_every_domain() -> None:
    rollouts = [_rollout(GENERAL, k, 3) for k in range(12)]
    rollouts += [_rollout(d, k, 4) for d in DOMAINS for k in range(5)]
    cfg = with_overrides(QUICK, ["rollouts.generalist_per_domain=2"])
    mixture = pipeline.generalist_mixture(rollouts, cfg)
    assert sum(r.domain == GENERAL for r in mixture) == 12
    assert sorted((r.domain, r.rank) for r in mixture if r.domain != GENERAL) == sorted(
        (d, k) for d in DOMAINS for k in range(2))


@pytest.fixture(scope="module")
def tiny() -> tuple[torch.nn.Module, object]:
    target = tiny_target()
    counts = torch.ones(V, dtype=torch.long)
    counts[:32] = 100  # the generalist's vocabulary: ids 0-31
    return target, pipeline.new_drafter(target, counts, SPEC, AUX, 0)


def test_a_scratch_specialist_gets_its_own_domains_vocabulary(tiny: tuple) -> None:
    target, generalist = tiny
    own = [Rollout("sql", f"s{i}", 0.0, (1,), tuple(range(40, 64)), i) for i in range(3)]
    cfg = replace(QUICK, drafter=SPEC, specialist_init="scratch")
    specialist = pipeline.initial_specialist(target, generalist, own, cfg, AUX, 5)
    t2d = specialist.t2d.bool()
    assert t2d[40:64].all()  # every token the domain generated can be proposed
    assert not torch.equal(t2d, generalist.t2d.bool())
    assert not torch.equal(specialist.fc.weight, generalist.fc.weight)  # fresh weights


def test_a_fine_tuned_specialist_starts_as_the_generalist(tiny: tuple) -> None:
    target, generalist = tiny
    cfg = replace(QUICK, drafter=SPEC, specialist_init="generalist")
    specialist = pipeline.initial_specialist(target, generalist, [], cfg, AUX, 5)
    for key, value in generalist.state_dict().items():
        assert torch.equal(value, specialist.state_dict()[key]), key
    with pytest.raises(ValueError, match="specialist_init"):
        pipeline.initial_specialist(target, generalist, [], replace(cfg, specialist_init="x"),
                                    AUX, 5)
