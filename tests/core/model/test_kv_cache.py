"""The batched target pass over the slot cache, batched drafting, the in-place drafter caches
(issue 16, items 1 and 3): every batched result equals the per-request computation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bench.harness.tiny_models import random_drafter, tiny_target
from core.config import TreeConfig
from core.model.eagle3 import attention
from core.model.kv_buffer import KVBuffer
from core.model.target import Target
from core.speculation.drafter_pool import DrafterState, PoolSnapshot, sync_many
from core.speculation.drafting import DraftRow, grow_tree, grow_trees, tree_scratch
from core.speculation.tree import DraftTree, tree_from_parents

# root -> 1, 2; 1 -> 3; 3 -> 4; 2 -> 5
TREE = tree_from_parents(torch.tensor([30, 11, 12, 13, 14, 15]), torch.tensor([-1, 0, 0, 1, 3, 2]))
CHAIN = tree_from_parents(torch.tensor([7, 9]), torch.tensor([-1, 0]))


def paths(tree: DraftTree) -> list[list[int]]:
    """Root-to-node paths of every node."""
    out = []
    for node in range(tree.tokens.numel()):
        path = [node]
        while int(tree.parents[path[0]]) >= 0:
            path.insert(0, int(tree.parents[path[0]]))
        out.append(path)
    return out


def prefilled(target: Target, prompts: list[torch.Tensor]):  # type: ignore[no-untyped-def]
    cache = target.new_slot_cache()
    slots = [cache.acquire() for _ in prompts]
    for slot, p in zip(slots, prompts, strict=True):
        target.forward_rows(cache, [slot], [p], [torch.arange(p.numel())], [None])
        cache.extend(slot, p.numel())
    return cache, slots


@pytest.mark.parametrize(("family", "window"), [("llama", 4096), ("qwen3", 4096), ("mistral", 5)])
def test_batched_trees_match_each_sequence_alone(family: str, window: int) -> None:
    """Rows of different lengths (a sliding window shorter than some of them), trees of
    different sizes; then each row keeps a different path and the next pass still matches."""
    model = tiny_target(family, sliding_window=window)
    target = Target(model, None, (1, 2, 3))
    prompts = [torch.tensor([5, 8, 13, 21]), torch.tensor([1, 2, 3, 4, 5, 6, 7, 9, 11]),
               torch.tensor([3])]
    cache, slots = prefilled(target, prompts)
    trees = [TREE, CHAIN, TREE]
    outs = target.forward_rows(cache, slots, [t.tokens for t in trees],
                               [p.numel() + t.depths for p, t in zip(prompts, trees, strict=True)],
                               [t.mask for t in trees])
    for p, t, out in zip(prompts, trees, outs, strict=True):
        for node, path in enumerate(paths(t)):
            ref = model(torch.cat([p, t.tokens[path]])[None]).logits[0, -1]
            torch.testing.assert_close(out.logits[node], ref, atol=1e-4, rtol=1e-4)
    kept = [[0, 1, 3], [0, 1], [0, 2]]
    cache.keep(slots, kept)
    seqs = [torch.cat([p, t.tokens[k]]) for p, t, k in zip(prompts, trees, kept, strict=True)]
    assert cache.lengths == [s.numel() for s in seqs]
    nxt = [torch.tensor([40, 41]), torch.tensor([42]), torch.tensor([43, 44, 45])]
    outs = target.forward_rows(cache, slots, nxt, [torch.arange(s.numel(), s.numel() + n.numel())
                                                   for s, n in zip(seqs, nxt, strict=True)],
                               [None] * 3)
    for s, n, out in zip(seqs, nxt, outs, strict=True):
        ref = model(torch.cat([s, n])[None]).logits[0, s.numel():]
        torch.testing.assert_close(out.logits, ref, atol=1e-4, rtol=1e-4)


def test_release_moves_the_last_slot_and_storage_grows_in_place() -> None:
    model = tiny_target()
    target = Target(model, None, (1, 2, 3))
    prompts = [torch.arange(1, 6), torch.arange(10, 13), torch.arange(20, 30)]
    cache, slots = prefilled(target, prompts)
    assert cache.release(slots[0]) == 2  # slot 2 moved into slot 0
    assert cache.lengths == [10, 3]
    rows = [prompts[2], prompts[1]]
    # grow past the first capacity: 100 more tokens in one chunk for slot 0
    extra = torch.randint(0, 64, (100,), generator=torch.Generator().manual_seed(0))
    target.forward_rows(cache, [0], [extra], [torch.arange(10, 110)], [None])
    cache.extend(0, 100)
    rows[0] = torch.cat([rows[0], extra])
    outs = target.forward_rows(cache, [0, 1], [torch.tensor([7]), torch.tensor([8, 9])],
                               [torch.tensor([110]), torch.tensor([3, 4])], [None, None])
    for seq, new, out in zip(rows, ([7], [8, 9]), outs, strict=True):
        ref = model(torch.cat([seq, torch.tensor(new)])[None]).logits[0, seq.numel():]
        torch.testing.assert_close(out.logits, ref, atol=1e-4, rtol=1e-4)


def test_a_non_contiguous_batch_gathers_its_rows() -> None:
    model = tiny_target()
    target = Target(model, None, (1, 2, 3))
    prompts = [torch.arange(1, 4), torch.arange(5, 12), torch.arange(13, 15)]
    cache, _ = prefilled(target, prompts)
    outs = target.forward_rows(cache, [0, 2], [CHAIN.tokens, TREE.tokens],
                               [3 + CHAIN.depths, 2 + TREE.depths], [CHAIN.mask, TREE.mask])
    for p, t, out in zip([prompts[0], prompts[2]], [CHAIN, TREE], outs, strict=True):
        for node, path in enumerate(paths(t)):
            ref = model(torch.cat([p, t.tokens[path]])[None]).logits[0, -1]
            torch.testing.assert_close(out.logits[node], ref, atol=1e-4, rtol=1e-4)


@pytest.fixture(scope="module")
def snap() -> PoolSnapshot:
    target = tiny_target()
    return PoolSnapshot({f"d{i}": random_drafter(target, seed=i) for i in range(3)})


def fed(snap: PoolSnapshot, seed: int, pairs: int) -> DrafterState:
    """A request's drafter state holding `pairs` random verified pairs, not caught up."""
    g = torch.Generator().manual_seed(seed)
    state = DrafterState(snap, full=True)
    state.record(torch.randn(pairs, 96, generator=g), torch.randint(0, 64, (pairs,), generator=g))
    return state


def test_batched_drafting_equals_one_tree_at_a_time(snap: PoolSnapshot) -> None:
    cfg = TreeConfig(top_k=3, depth=4, total_tokens=10)
    drafter = snap.drafters["d1"]
    states = [fed(snap, seed, pairs) for seed, pairs in ((1, 5), (2, 11), (3, 2))]
    sync_many([(s, snap, None) for s in states], 3)
    alone = [grow_tree(drafter, s.drafter_kv(1), s.h_last(1), 4 + i, s.synced(1), cfg)
             for i, s in enumerate(states)]
    rows = []
    for i, s in enumerate(states):
        keys, values, length = s.draft_cache(1, tree_scratch(cfg))
        rows.append(DraftRow(keys, values, length, s.h_last(1), 4 + i, s.synced(1)))
    batched = grow_trees(drafter, rows, cfg)
    for a, b in zip(alone, batched, strict=True):
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.parents, b.parents)
    assert len({repr(t.tokens.tolist()) for t in batched}) > 1, "the rows must really differ"


def test_catch_up_of_many_requests_equals_each_alone(snap: PoolSnapshot) -> None:
    together = [fed(snap, seed, pairs) for seed, pairs in ((5, 4), (6, 1), (7, 7))]
    apart = [fed(snap, seed, pairs) for seed, pairs in ((5, 4), (6, 1), (7, 7))]
    cands = sync_many([(s, snap, None) for s in together], 3)
    for s, c, a in zip(together, cands, apart, strict=True):
        ref = a.sync(snap, 3)
        assert c is not None and ref is not None
        torch.testing.assert_close(c.topk_logp, ref.topk_logp, atol=1e-5, rtol=1e-5)
        assert torch.equal(c.topk_ids, ref.topk_ids)
        torch.testing.assert_close(s.h_last(2), a.h_last(2), atol=1e-5, rtol=1e-5)


def test_drafter_caches_grow_in_place() -> None:
    """Appending within capacity writes into the same storage (no per-round concatenation)."""
    buf = KVBuffer.empty(2, 1, 4, torch.float32, torch.device("cpu"))
    ptr = buf.keys.data_ptr()
    for _ in range(10):
        buf.append(torch.ones(2, 1, 3, 4), torch.ones(2, 1, 3, 4))
    assert buf.length == 30 and buf.keys.data_ptr() == ptr
    # past capacity: doubles, keeps
    buf.append(torch.full((2, 1, 40, 4), 2.0), torch.zeros(2, 1, 40, 4))
    assert buf.capacity >= 70 and torch.equal(buf.view()[0][:, :, :30], torch.ones(2, 1, 30, 4))


def test_gqa_attention_shares_heads_like_repeat_interleave() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 6, 5, 8, generator=g), torch.randn(2, 2, 9, 8, generator=g),
               torch.randn(2, 2, 9, 8, generator=g))
    mask = torch.rand(5, 9, generator=g) > 0.3
    mask[:, 0] = True
    ref = F.scaled_dot_product_attention(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1),
                                         attn_mask=mask)
    torch.testing.assert_close(attention(q, k, v, mask), ref)
    torch.testing.assert_close(attention(q, k, v, None), F.scaled_dot_product_attention(
        q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1),
        attn_mask=torch.ones(5, 9, dtype=torch.bool).tril(diagonal=4)))


def test_a_pool_change_restacks_only_the_group_it_touches() -> None:
    target = tiny_target()
    snap = PoolSnapshot({"a": random_drafter(target, seed=1), "b": random_drafter(target, seed=2)})
    other = random_drafter(target, draft_vocab=20, seed=3)  # another shape: its own group
    grown = snap.with_drafter("c", other)
    assert grown.groups[0] is snap.groups[0] and len(grown.groups) == 2
    same_shape = grown.with_drafter("d", random_drafter(target, seed=4))
    assert same_shape.groups[1] is grown.groups[1] and same_shape.groups[0] is not grown.groups[0]
    assert same_shape.without("d").groups[1] is grown.groups[1]


def test_releasing_before_a_late_slot_ever_ran() -> None:
    """A slot acquired after the last pass (its prompt not started) may move on a release."""
    target = Target(tiny_target(), None, (1, 2, 3))
    cache, slots = prefilled(target, [torch.arange(1, 4), torch.arange(4, 6)])
    late = cache.acquire()
    assert cache.release(slots[0]) == late and cache.lengths == [0, 2]
