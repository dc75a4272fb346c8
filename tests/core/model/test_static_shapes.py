"""Static shapes for captured passes (core/model/static_shapes.py): a bucketed pass over the
whole preallocated cache computes what the dynamic pass computes, and the lean forward in
static shapes is one graph (what CUDA graphs need; checked here with fullgraph=True on CPU)."""

from __future__ import annotations

import torch

from bench.harness.tiny_models import AUX, tiny_target
from core.model.kv_cache import SlotCache
from core.model.static_shapes import StaticShapes
from core.model.target import Target, TargetOutput

CAPACITY = 96


def _targets() -> tuple[Target, Target]:
    model = tiny_target("llama")
    dynamic, static = Target(model, None, AUX), Target(model, None, AUX)
    static.static = StaticShapes(capacity=CAPACITY, slots=4)
    return dynamic, static


def _run(target: Target) -> tuple[list[TargetOutput], list[bool]]:
    """Three requests: prefill, a step with a tree on one row and single tokens on the others,
    a plain step; every output and whether each pass ran in static shapes."""
    cache = target.new_slot_cache()
    slots = [cache.acquire() for _ in range(3)]
    prompts = [torch.tensor([1, 7, 2, 9, 4]), torch.tensor([2, 5]), torch.tensor([8, 8, 3])]
    outs, static = [], []
    outs += target.forward_rows(cache, slots, prompts, [torch.arange(len(p)) for p in prompts],
                                [None] * 3)
    static.append(cache.static_pass)
    for s, p in zip(slots, prompts, strict=True):
        cache.extend(s, len(p))
    tree = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)  # root, 2 children
    outs += target.forward_rows(cache, slots, [torch.tensor([3, 4, 5]), torch.tensor([6]),
                                               torch.tensor([7])],
                                [torch.tensor([5, 6, 6]), torch.tensor([2]), torch.tensor([3])],
                                [tree, None, None])
    static.append(cache.static_pass)
    cache.keep(slots, [[0, 2], [0], [0]])
    outs += target.forward_rows(cache, slots, [torch.tensor([9])] * 3,
                                [torch.tensor([7]), torch.tensor([3]), torch.tensor([4])],
                                [None] * 3)
    static.append(cache.static_pass)
    return outs, static


def test_static_passes_compute_what_dynamic_passes_compute() -> None:
    dynamic, static = _targets()
    want, was_static = _run(dynamic)
    got, is_static = _run(static)
    assert was_static == [False] * 3 and is_static == [True] * 3
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a.hidden, b.hidden, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(a.features, b.features, rtol=1e-5, atol=1e-5)
        assert torch.equal(a.logits.argmax(-1), b.logits.argmax(-1))


def test_a_pass_that_fits_no_bucket_runs_dynamic() -> None:
    _, target = _targets()
    cache = target.new_slot_cache()
    first, second = cache.acquire(), cache.acquire()
    # the first slot alone is not the tail of the running slots: its padding would write the
    # second's entries, so it runs in dynamic shapes
    target.forward_rows(cache, [first], [torch.tensor([1, 2])], [torch.arange(2)], [None])
    assert not cache.static_pass
    target.forward_rows(cache, [first, second], [torch.arange(65) % 64] * 2, [torch.arange(65)] * 2,
                        [None] * 2)  # 65 tokens: past the largest token bucket
    assert not cache.static_pass
    target.forward_rows(cache, [first, second], [torch.tensor([1])] * 2,
                        [torch.tensor([0])] * 2, [None] * 2)
    assert cache.static_pass


def test_the_static_lean_forward_is_one_graph() -> None:
    _, target = _targets()
    assert target.lean is not None
    target._lean_captured = torch.compile(target.lean, fullgraph=True, dynamic=False)
    cache = target.new_slot_cache()
    slot = cache.acquire()
    eager = target.lean(torch.tensor([[1, 2, 3, 4]]), torch.arange(4)[None],
                        target._rows_mask([0], [torch.ones(4, 4, dtype=torch.bool).tril()],
                                          torch.arange(4)[None], CAPACITY),
                        _begun(cache, slot), target.aux_layers)[0]
    out = target.forward_rows(cache, [slot], [torch.tensor([1, 2, 3])], [torch.arange(3)],
                              [None])[0]  # padded to the 4-token bucket, through the graph
    assert cache.static_pass
    torch.testing.assert_close(out.hidden, eager[0, :3], rtol=1e-5, atol=1e-5)


def _begun(cache: SlotCache, slot: int) -> SlotCache:
    cache.begin_static([slot], 1, CAPACITY, torch.device("cpu"))
    return cache
