"""Structured outputs stay lossless under speculative trees: each tree node is masked with the
grammar state of its own path, so greedy output equals constrained plain greedy decoding, the
drafts only spend the tree on allowed tokens, and sampling follows the constrained target law
(with a control that masking every node like the root fails)."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Sequence

import jsonschema
import llguidance
import llguidance.hf
import numpy as np
import pytest
import torch

from bench.harness.tiny_models import AUX, make_engine, random_drafter, tiny_target
from core.config import LEARNER_NAMES, GrammarSpec, SamplingParams, TreeConfig
from core.engine import SpecEngine
from core.model.target import Target
from core.speculation.drafter_pool import DrafterState
from core.speculation.drafting import grow_tree
from core.speculation.grammar import GrammarCompiler, TokenMatcher, grammar_text
from core.speculation.sampling import process_logits
from tests.core.speculation.test_sampling_lossless import null_tv_quantile, tv
from tests.core.tiny_tokenizer import char_tokenizer

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 5},
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
        "ok": {"type": "boolean"},
        "tag": {"enum": ["red", "green"]},
    },
    "required": ["name", "n", "ok", "tag"],
    "additionalProperties": False,
}
JSON_SPEC = GrammarSpec("json_schema", json.dumps(SCHEMA))


def engine_with_tokenizer(tokenizer, seed: int = 3, drafters: int = 3,
                          tree: TreeConfig | None = None,
                          policy: str = "normalhedge") -> tuple[torch.nn.Module, SpecEngine]:
    target = tiny_target(vocab=len(tokenizer), hidden=32, seed=seed)
    pool = {f"d{i}": random_drafter(target,
                                    draft_vocab=len(tokenizer) - (4 if len(tokenizer) > 16 else 1),
                                    seed=20 + i, scale=0.6)
            for i in range(drafters)}
    engine = make_engine(target, pool, tree or TreeConfig(top_k=3, depth=4, total_tokens=12),
                         policy)
    engine.target = Target(target, tokenizer, AUX)
    engine.tokenizer = tokenizer
    return target, engine


def reference_matcher(tokenizer, spec: GrammarSpec) -> llguidance.LLMatcher:
    """llguidance used directly (no code shared with core/speculation/grammar.py's masking)."""
    return llguidance.LLMatcher(llguidance.hf.from_tokenizer(tokenizer, n_vocab=len(tokenizer)),
                                grammar_text(spec))


def allowed_now(m: llguidance.LLMatcher, vocab: int) -> torch.Tensor:
    return torch.frombuffer(bytearray(m.compute_logit_bias()), dtype=torch.uint8)[:vocab] > 0


def plain_constrained_greedy(target: torch.nn.Module, tokenizer, prompt: list[int], n: int,
                             spec: GrammarSpec) -> list[int]:
    m, out = reference_matcher(tokenizer, spec), []
    with torch.no_grad():
        for _ in range(n):
            logits = target(torch.tensor([prompt + out])).logits[0, -1]
            tok = int(logits.masked_fill(~allowed_now(m, logits.numel()), float("-inf")).argmax())
            if tok == tokenizer.eos_token_id:
                break
            out.append(tok)
            m.consume_token(tok)
    return out


def test_masks_after_a_path_equal_a_fresh_matcher_that_consumed_it() -> None:
    tok = char_tokenizer()
    matcher = GrammarCompiler(tok, len(tok), [0]).matcher(JSON_SPEC)
    matcher.commit(tok.encode('{"name'))
    paths = [[], tok.encode('"'), tok.encode('": "ab'), tok.encode('": "abcdef'), tok.encode("x")]
    got = matcher.masks_after(paths)
    for i, path in enumerate(paths[:3]):
        fresh = reference_matcher(tok, JSON_SPEC)
        assert fresh.consume_tokens(tok.encode('{"name') + path)
        assert torch.equal(got[i], allowed_now(fresh, len(tok))), f"path {i}"
    assert not got[3].any() and not got[4].any(), "paths the grammar rejects get empty rows"
    assert torch.equal(matcher.masks_after([[]])[0], got[0]), (
        "masks_after leaves the state as it was")


@pytest.mark.parametrize("policy", ["none", "fixed:d0", *LEARNER_NAMES])
def test_constrained_greedy_equals_plain_constrained_greedy(policy: str) -> None:
    tok = char_tokenizer()
    target, engine = engine_with_tokenizer(tok)
    accepted = 0
    for prompt in (tok.encode("Give JSON"), tok.encode("x"), tok.encode("name: 7")):
        params = SamplingParams(max_new_tokens=80, grammar=JSON_SPEC)
        outs = list(engine.generate(prompt, params, policy=policy))
        ids = [t for o in outs for t in o.token_ids]
        assert ids == plain_constrained_greedy(target, tok, prompt, 80, JSON_SPEC), (
            f"{policy}: {prompt}")
        jsonschema.validate(json.loads(tok.decode(ids)), SCHEMA)
        assert outs[-1].finish_reason == "stop", "the grammar ends the output with EOS"
        accepted += sum(outs[-1].stats.accepted_per_round)
    if policy != "none":
        assert accepted > 0, "drafts must be accepted for the test to reach deeper tree nodes"


PREFIX = '{"name": "ab", "n": '  # digits only next: a random drafter mostly proposes others


def draft_one_tree(engine: SpecEngine, tok, matcher: TokenMatcher | None):
    """A tree drafted by d0 after a committed prefix, with or without the grammar."""
    prompt = tok.encode("Give JSON")
    committed = tok.encode(PREFIX)
    drafter = engine.snapshot.drafters["d0"]
    out = engine.target.forward(engine.target.new_cache(), torch.tensor(prompt + committed),
                                torch.arange(len(prompt + committed)))
    state = DrafterState(engine.snapshot, full=False, drafters=[0])
    state.record(out.features, torch.tensor((prompt + committed)[1:] + [committed[-1]]))
    state.sync(engine.snapshot, 3, [0])
    allowed = matcher.masks_after if matcher is not None else None
    n = len(prompt + committed) - 1
    return grow_tree(drafter, state.drafter_kv(0), state.h_last(0), committed[-1], n,
                     TreeConfig(top_k=3, depth=4, total_tokens=12), allowed)


def test_draft_masking_spends_the_tree_on_allowed_tokens_only() -> None:
    tok = char_tokenizer()
    _, engine = engine_with_tokenizer(tok)
    matcher = engine.grammar_compiler().matcher(JSON_SPEC)
    matcher.commit(tok.encode(PREFIX))
    masked, free = draft_one_tree(engine, tok, matcher), draft_one_tree(engine, tok, None)

    def forbidden(tree) -> int:
        masks = matcher.tree_masks(tree.tokens, tree.parents)
        return sum(not masks[int(tree.parents[i]), int(tree.tokens[i])]
                   for i in range(1, tree.tokens.numel()))

    assert masked.num_drafted > 0 and forbidden(masked) == 0
    assert forbidden(free) > 0, "control: the unmasked drafter proposes forbidden tokens"


REGEX = GrammarSpec("regex", "[ab][bc][a-d]+")
SAMPLE_CHARS = "abcd"


def exact_constrained_law(target: torch.nn.Module, prompt: list[int], temp: float,
                          allowed: Sequence[torch.Tensor] | None = None) -> dict:
    """Law of the first three tokens of the masked target (`allowed`: each step's mask; by
    default REGEX's: [ab], then [bc], then [a-d])."""
    v = target.config.vocab_size
    allowed = allowed or [torch.tensor([0, 1, 1, 0, 0]), torch.tensor([0, 0, 1, 1, 0]),
                          torch.tensor([0, 1, 1, 1, 1])]

    def probs(context: list[list[int]], step: int) -> torch.Tensor:
        with torch.no_grad():
            logits = target(torch.tensor([prompt + c for c in context])).logits[:, -1]
        return process_logits(logits.masked_fill(allowed[step][None] == 0, float("-inf")), temp)

    p1 = probs([[]], 0)[0]
    p2 = probs([[a] for a in range(v)], 1)
    p3 = probs([[a, b] for a, b in itertools.product(range(v), repeat=2)], 2).view(v, v, v)
    law = p1[:, None, None] * p2[:, :, None] * p3
    return {k: float(law[k]) for k in itertools.product(range(v), repeat=3) if law[k] > 0}


def sample_first_three(n: int) -> tuple[Counter, dict, int]:
    tok = char_tokenizer(SAMPLE_CHARS)
    target, engine = engine_with_tokenizer(tok, seed=4, drafters=2,
                                           tree=TreeConfig(top_k=3, depth=3, total_tokens=8))
    prompt, temp = [1, 2, 3], 0.9
    counts: Counter[tuple[int, ...]] = Counter()
    accepted = 0
    for seed in range(n):
        params = SamplingParams(max_new_tokens=3, temperature=temp, seed=seed, grammar=REGEX)
        ids, stats = engine.generate_ids(prompt, params,
                                         policy=("normalhedge", "fixed:d1")[seed % 2])
        counts[tuple(ids)] += 1
        accepted += sum(stats.accepted_per_round)
    return counts, exact_constrained_law(target, prompt, temp), accepted


N_SEEDS = 2000


def test_constrained_sampling_follows_the_constrained_target_law() -> None:
    counts, exact, accepted = sample_first_three(N_SEEDS)
    assert accepted > N_SEEDS // 4, "drafts must be accepted often for the test to mean anything"
    assert tv(counts, exact, N_SEEDS) < 1.2 * null_tv_quantile(exact, N_SEEDS)


def third_in_ad_z(counts: Counter, exact: dict, n: int) -> float:
    """z-score of the empirical P(x3 in {a, d}) against the constrained law. x3 is the first
    token scored at a drafted node (x2's); masking that node with the root's state ([bc])
    instead of its own path's ([a-d]) all but forbids a and d."""
    p = sum(v for (_, _, c), v in exact.items() if c in (1, 4))
    emp = sum(k for (_, _, c), k in counts.items() if c in (1, 4)) / n
    return (emp - p) / float(np.sqrt(p * (1 - p) / n))


def test_control_masking_every_node_like_the_root_is_detected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def root_masks(self: TokenMatcher, tokens: torch.Tensor, parents: torch.Tensor,
                   nodes: Sequence[int]) -> torch.Tensor:
        return self.masks_after([[]]).expand(len(nodes), -1)

    monkeypatch.setattr(TokenMatcher, "node_masks", root_masks)
    counts, exact, _ = sample_first_three(600)
    assert abs(third_in_ad_z(counts, exact, 600)) > 4.5


def test_a_schema_the_grammar_engine_rejects_is_a_clear_value_error() -> None:
    with pytest.raises(ValueError, match="JSON schema is not valid JSON"):
        grammar_text(GrammarSpec("json_schema", "{not json"))
    with pytest.raises(ValueError, match="unsupported"):
        grammar_text(GrammarSpec("json_schema", json.dumps(
            {"type": "object", "properties": {"a": {"$ref": "#/nope"}}})))


def test_the_evaluation_scores_the_candidates_the_masked_tree_drafts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under a grammar a drafter's tree holds the best tokens the grammar allows, so its
    evaluation must judge those: in every greedy round, the drafter's first-level verdict
    (γ_1 = 1: the target's token is among its candidates at the root) is whether the round
    accepted a draft token. Scoring its unmasked top-k instead (issue 40, defect F) calls a
    forced token the masked tree drafted and the target took a miss."""
    from dataclasses import replace

    from tests.core.test_model_free_engine import windows_of

    tok = char_tokenizer()
    _, engine = engine_with_tokenizer(tok, policy="fixed:d0")
    engine.config = replace(engine.config, evaluate_all=True)
    index = engine.snapshot.index("d0")
    checked = forced = 0
    for prompt in (tok.encode("Give JSON"), tok.encode("x"), tok.encode("name: 7")):
        params = SamplingParams(max_new_tokens=80, grammar=JSON_SPEC)
        for w in windows_of(engine, prompt, params, "fixed:d0", monkeypatch):
            if w.is_round and not w.censored and w.chosen == index:
                assert (w.gammas[index, 0] == 1.0) == (w.realised >= 2), w.start
                checked += 1
                forced += w.realised >= 2
    assert checked >= 20 and forced >= 5, (checked, forced)
