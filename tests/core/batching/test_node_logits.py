"""Verification can compute the target's logits only at the nodes its walk visits
(EngineConfig.verify_logits = "visited", one of the two settings a CPU measures): one LM-head
row per accepted node plus the bonus row, instead of one per tree node, with the same committed
tokens, logprobs and learner evidence as computing every node."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from bench.harness.tiny_models import (
    bigram_setup,
    hf_greedy,
    make_engine,
    random_drafter,
    tiny_target,
)
from core.batching.head_rows import HeadRows
from core.config import EngineConfig, SamplingParams, TreeConfig
from core.engine import SpecEngine

TREE = TreeConfig(top_k=3, depth=4, total_tokens=12)


def with_mode(engine: SpecEngine, mode: str) -> SpecEngine:
    cfg = replace(engine.config, verify_logits=mode)
    return SpecEngine(engine.target, dict(engine.snapshot.drafters), cfg)


def counted(engine: SpecEngine) -> list[int]:
    """Rows each LM-head call of the engine's target computes."""
    calls: list[int] = []
    head = engine.target.head

    def spy(hidden: torch.Tensor) -> torch.Tensor:
        calls.append(int(hidden.shape[0]))
        return head(hidden)

    engine.target.head = spy  # type: ignore[method-assign]
    return calls


def test_auto_is_visited_on_a_cpu_and_all_on_a_gpu() -> None:
    assert HeadRows("auto", "cpu").visited() and not HeadRows("auto", "cuda").visited()
    assert HeadRows("visited").visited() and not HeadRows("all").visited()
    with pytest.raises(ValueError, match="verify_logits"):
        EngineConfig(verify_logits="some")


def test_the_head_runs_on_the_path_only_with_the_same_tokens() -> None:
    _, base = bigram_setup(TREE, randoms=2)
    prompt, params = [3, 1, 4, 1, 5], SamplingParams(max_new_tokens=40, ignore_eos=True)
    runs = {}
    for mode in ("all", "visited"):
        engine = with_mode(base, mode)
        calls = counted(engine)
        ids, stats = engine.generate_ids(prompt, params, "fixed:copy")
        runs[mode] = (ids, stats, sum(calls))
    (ids_all, st_all, rows_all), (ids_vis, st_vis, rows_vis) = runs["all"], runs["visited"]
    assert ids_vis == ids_all and st_vis.accepted_per_round == st_all.accepted_per_round
    nodes = TREE.total_tokens + 1
    assert rows_all == 1 + st_all.rounds * nodes  # the prefill's last row, then every node
    # the prefill's row, then per round the accepted nodes and the node the bonus comes from
    assert rows_vis == 1 + sum(a + 1 for a in st_vis.accepted_per_round)
    assert rows_vis < rows_all


def test_visited_rows_keep_greedy_lossless_with_penalties_logprobs_and_hedgespec() -> None:
    target = tiny_target("llama")
    drafters = {f"d{i}": random_drafter(target, seed=i) for i in range(3)}
    engine = make_engine(target, drafters, TREE)
    assert engine.head_rows.visited()  # greedy identity below holds under both settings
    prompt = [5, 9, 2, 7]
    ids, _ = engine.generate_ids(prompt, SamplingParams(max_new_tokens=24, ignore_eos=True))
    assert ids == hf_greedy(target, prompt, 24)
    params = SamplingParams(max_new_tokens=16, ignore_eos=True, logprobs=2)
    outs = {mode: [o for o in with_mode(engine, mode).generate(prompt, params)]
            for mode in ("all", "visited")}
    lps = {mode: [lp for o in outs[mode] for lp in (o.logprobs or [])] for mode in outs}
    assert [lp.token_id for lp in lps["visited"]] == [lp.token_id for lp in lps["all"]]
    for a, b in zip(lps["visited"], lps["all"], strict=True):
        assert a.logprob == pytest.approx(b.logprob, abs=1e-5)


def test_sampling_with_visited_rows_draws_what_all_rows_draw() -> None:
    """Same seed, same walk: the rows the walk reads are the same numbers either way."""
    _, base = bigram_setup(TREE, randoms=2)
    params = SamplingParams(max_new_tokens=30, ignore_eos=True, temperature=0.8, seed=7)
    got = {mode: with_mode(base, mode).generate_ids([2, 7, 1], params, "normalhedge")[0]
           for mode in ("all", "visited")}
    assert got["visited"] == got["all"]
