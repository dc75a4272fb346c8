"""Penalties and logit_bias stay lossless under speculative trees: every tree node is scored
with its own path's counts, so greedy output equals plain penalised greedy decoding and
sampling follows the penalised target law (with a control that root counts fail)."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch

import core.decoding.node_logits
import core.decoding.request_round
from bench.harness.tiny_models import make_engine, random_drafter, tiny_target
from core.config import Penalties, SamplingParams, TreeConfig
from core.speculation.penalties import apply_penalties, path_counts, token_counts
from core.speculation.sampling import process_logits
from core.speculation.tree import tree_from_parents
from tests.core.speculation.test_sampling_lossless import null_tv_quantile, tv

PEN = Penalties(presence=0.8, frequency=1.2, repetition=1.6, logit_bias=((2, 3.0), (5, -100.0)))


def naive_penalised(logits: torch.Tensor, prompt: list[int], output: list[int],
                    pen: Penalties) -> torch.Tensor:
    """Reference, token by token as vLLM's sampler describes it (no shared code with core)."""
    x = logits.float().clone()
    for tok, bias in pen.logit_bias:
        x[tok] += bias
    counts = Counter(output)
    for tok in range(x.numel()):
        if pen.repetition != 1.0 and (tok in prompt or tok in counts):
            x[tok] = x[tok] / pen.repetition if x[tok] > 0 else x[tok] * pen.repetition
        x[tok] -= pen.frequency * counts[tok] + pen.presence * (counts[tok] > 0)
    return x


def test_apply_penalties_matches_the_token_by_token_reference() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 8, generator=gen) * 3
    prompt, outputs = [1, 2, 2], [[], [3, 3, 1], [7, 0, 0, 0]]
    counts = torch.stack([token_counts(o, 8) for o in outputs])
    got = apply_penalties(logits, counts, token_counts(prompt, 8) > 0, PEN)
    for r, out in enumerate(outputs):
        torch.testing.assert_close(got[r], naive_penalised(logits[r], prompt, out, PEN))


def test_path_counts_add_each_nodes_own_draft_tokens() -> None:
    # root(5) -> a(0), b(1); a -> c(0); c -> d(2)
    tree = tree_from_parents(torch.tensor([5, 0, 1, 0, 2]), torch.tensor([-1, 0, 0, 1, 3]))
    base = token_counts([5, 1], 6)  # committed output, the root (5) among it
    got = path_counts(base, tree.tokens, tree.mask)
    paths = [[], [0], [1], [0, 0], [0, 0, 2]]
    expected = torch.stack([base + token_counts(p, 6) for p in paths])
    assert torch.equal(got, expected)


def plain_penalised_greedy(target: torch.nn.Module, prompt: list[int], n: int,
                           pen: Penalties) -> list[int]:
    """Non-speculative penalised greedy decoding: one full forward per token."""
    out: list[int] = []
    with torch.no_grad():
        for _ in range(n):
            logits = target(torch.tensor([prompt + out])).logits[0, -1]
            out.append(int(naive_penalised(logits, prompt, out, pen).argmax()))
    return out


def small_setup() -> tuple[torch.nn.Module, Any]:
    target = tiny_target(vocab=16, hidden=32, seed=3)
    drafters = {f"d{i}": random_drafter(target, draft_vocab=12, seed=20 + i, scale=0.6)
                for i in range(3)}
    return target, make_engine(target, drafters, TreeConfig(top_k=3, depth=4, total_tokens=12))


@pytest.mark.parametrize("policy", ["none", "fixed:d0", "normalhedge", "exp3spec"])
def test_penalised_greedy_equals_plain_penalised_greedy(policy: str) -> None:
    target, engine = small_setup()
    accepted = 0
    for seed, prompt in enumerate([[3, 1, 4, 1], [9], [2, 7, 1, 8, 2, 8], [0, 0, 5]]):
        params = SamplingParams(max_new_tokens=20, ignore_eos=True, penalties=PEN, seed=seed)
        ids, stats = engine.generate_ids(prompt, params, policy=policy)
        assert ids == plain_penalised_greedy(target, prompt, 20, PEN), f"{policy}: prompt {prompt}"
        assert stats.target_forwards == stats.rounds + stats.plain_rounds + 1
        accepted += sum(stats.accepted_per_round)
    if policy != "none":
        assert accepted > 0, "drafts must be accepted for the test to reach deeper tree nodes"


def exact_penalised_law(target: torch.nn.Module, prompt: list[int], temp: float,
                        pen: Penalties) -> dict:
    """The penalised target's law of the first three generated tokens."""
    vocab = target.config.vocab_size

    def probs(context: list[list[int]]) -> torch.Tensor:
        with torch.no_grad():
            logits = target(torch.tensor([prompt + c for c in context])).logits[:, -1]
        rows = [naive_penalised(logits[i], prompt, c, pen) for i, c in enumerate(context)]
        return process_logits(torch.stack(rows), temp)

    p1 = probs([[]])[0]
    p2 = probs([[a] for a in range(vocab)])
    p3 = (probs([[a, b] for a, b in itertools.product(range(vocab), repeat=2)])
          .view(vocab, vocab, vocab))
    law = p1[:, None, None] * p2[:, :, None] * p3
    return {k: float(law[k]) for k in itertools.product(range(vocab), repeat=3)}


def sample_first_three(n: int) -> tuple[Counter, dict, int]:
    target = tiny_target(vocab=8, hidden=32, seed=4)
    drafters = {f"d{i}": random_drafter(target, draft_vocab=6, seed=10 + i, scale=0.6)
                for i in range(2)}
    engine = make_engine(target, drafters, TreeConfig(top_k=3, depth=3, total_tokens=8))
    prompt, temp = [3, 1, 4], 0.9
    counts: Counter[tuple[int, ...]] = Counter()
    accepted = 0
    for seed in range(n):
        params = SamplingParams(max_new_tokens=3, temperature=temp, seed=seed, ignore_eos=True,
                                penalties=PEN)
        ids, stats = engine.generate_ids(prompt, params,
                                         policy=("normalhedge", "fixed:d1")[seed % 2])
        counts[tuple(ids)] += 1
        accepted += sum(stats.accepted_per_round)
    return counts, exact_penalised_law(target, prompt, temp, PEN), accepted


N_SEEDS = 2000


def repeat_z(counts: Counter, exact: dict, n: int) -> float:
    """z-score of the empirical P(x3 == x2) against the penalised law. x1 comes from the
    prefill and is the first round's root, so x3 is the first token scored at a drafted node
    (x2's): that node's own path must count x2, which the presence and frequency penalties
    then push down. Scoring it with the root's counts instead lets x2 repeat far more often."""
    p = sum(v for (_, b, c), v in exact.items() if b == c)
    emp = sum(k for (_, b, c), k in counts.items() if b == c) / n
    return (emp - p) / float(np.sqrt(p * (1 - p) / n))


Z_BOUND = 4.5  # a correct sampler exceeds it with probability ~1e-5


def test_penalised_sampling_follows_the_penalised_target_law() -> None:
    counts, exact, accepted = sample_first_three(N_SEEDS)
    assert accepted > N_SEEDS // 4, "drafts must be accepted often for the test to mean anything"
    assert tv(counts, exact, N_SEEDS) < 1.2 * null_tv_quantile(exact, N_SEEDS)
    assert abs(repeat_z(counts, exact, N_SEEDS)) < Z_BOUND


def test_the_bound_catches_root_counts_at_every_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """Control: scoring every node with the root's counts (the bug this design avoids)."""

    def root_counts(base: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return base.expand(mask.shape[0], base.numel()).clone()

    monkeypatch.setattr(core.decoding.node_logits, "path_counts", root_counts)
    # Half the seeds suffice: the bug's z grows as sqrt(n), ~13 at 1000 against the bound's 9.
    n = N_SEEDS // 2
    counts, exact, _ = sample_first_three(n)
    assert abs(repeat_z(counts, exact, n)) > 2 * Z_BOUND


def test_counterfactual_evidence_uses_the_penalised_target(monkeypatch: pytest.MonkeyPatch) -> None:
    """Greedy γ are indicators of the *penalised* argmax: the evidence's argmax tokens at the
    verified positions must be exactly the tokens greedy decoding committed."""
    seen: list[list[int]] = []
    real = core.decoding.request_round.TargetSide

    def spy(argmax: np.ndarray | None, probs: Any, realised: Any) -> Any:
        seen.append([int(t) for t in argmax])  # type: ignore[union-attr]
        return real(argmax, probs, realised)

    monkeypatch.setattr(core.decoding.request_round, "TargetSide", spy)
    _, engine = small_setup()
    ids: list[int] = []
    for out in engine.generate([2, 7, 1, 8],
                               SamplingParams(max_new_tokens=24, ignore_eos=True, penalties=PEN)):
        ids.extend(out.token_ids)
    assert seen, "the counterfactual evaluation must have run"
    # round r verifies the positions after committed token 1 + sum of earlier rounds' lengths
    flat = [t for rnd in seen for t in rnd]
    assert flat == ids[1 : 1 + len(flat)]


def test_prompt_logprobs_come_from_the_prefill() -> None:
    target, engine = small_setup()
    prompt = [3, 1, 4, 1, 5]
    outs = list(engine.generate(prompt, SamplingParams(max_new_tokens=2, prompt_logprobs=2,
                                                       ignore_eos=True)))
    lps = outs[0].prompt_logprobs
    assert lps is not None and len(lps) == len(prompt) and lps[0] is None
    assert all(o.prompt_logprobs is None for o in outs[1:])  # handed out once
    with torch.no_grad():
        ref = torch.log_softmax(target(torch.tensor([prompt])).logits[0].float(), dim=-1)
    for j in range(1, len(prompt)):
        entry = lps[j]
        assert entry is not None and entry.token_id == prompt[j]
        assert entry.logprob == pytest.approx(float(ref[j - 1, prompt[j]]), abs=1e-5)
        assert [t for t, _ in entry.top] == ref[j - 1].topk(2).indices.tolist()
