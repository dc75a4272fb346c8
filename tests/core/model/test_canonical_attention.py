"""The canonical attention kernel (core/model/canonical.py): it computes attention (fp32 equal
to SDPA over the same mask), and a query's result is bit-identical whatever shares its pass:
the tree around it, the rows beside it, their lengths, the pass's padding."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from core.model import canonical
from core.model.canonical import attend_canonical, canonical_order
from core.model.lean_decoder import Projection, pack
from core.model.precision import cpu_has_native_bf16
from core.model.target import rows_mask

pytestmark = pytest.mark.skipif(canonical.available() is not None,
                                reason=f"{canonical.available()}")

HEADS, KV_HEADS, DIM = 6, 2, 16


def tree_mask(parents: list[int]) -> torch.Tensor:
    """Ancestor-or-self mask of a tree given each node's parent (-1: the root)."""
    n = len(parents)
    mask = torch.eye(n, dtype=torch.bool)
    for i, p in enumerate(parents):
        while p >= 0:
            mask[i, p] = True
            p = parents[p]
    return mask


def cache(rows: int, length: int, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randn(rows, KV_HEADS, length, DIM, generator=gen).to(dtype)
    values = torch.randn(rows, KV_HEADS, length, DIM, generator=gen).to(dtype)
    return keys, values


def queries(rows: int, t: int, dtype: torch.dtype, seed: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(rows, HEADS, t, DIM, generator=gen).to(dtype)


@pytest.mark.parametrize("window", [None, 5])
def test_equals_sdpa_under_the_rows_mask_in_fp32(window: int | None) -> None:
    starts = [7, 3, 12]
    trees = [tree_mask([-1, 0, 0, 1, 2]), None, tree_mask([-1, 0, 1])]
    counts = [5, 4, 3]
    t = max(counts)
    positions = torch.zeros(3, t, dtype=torch.long)
    masks = []
    for b, (start, tree, n) in enumerate(zip(starts, trees, counts, strict=True)):
        depth = (tree.sum(-1) - 1) if tree is not None else torch.arange(n)
        positions[b, :n], positions[b, n:] = start + depth, start + depth[-1]
        masks.append(torch.ones(n, n, dtype=torch.bool).tril() if tree is None else tree)
    kv_len = max(starts) + t
    keys, values = cache(3, kv_len, torch.float32)
    q = queries(3, t, torch.float32)
    mask = rows_mask(starts, masks, positions, kv_len, torch.float32, window)
    want = F.scaled_dot_product_attention(q, keys.repeat_interleave(3, 1),
                                          values.repeat_interleave(3, 1), attn_mask=mask,
                                          scale=0.25)
    order = canonical_order(starts, counts, trees, positions, window)
    got = attend_canonical(q, keys, values, torch.arange(3, dtype=torch.int32), order, 0.25)
    for b, n in enumerate(counts):
        torch.testing.assert_close(got[b, :, :n], want[b, :, :n], rtol=1e-5, atol=1e-5)
        assert torch.all(got[b, :, n:] == 0)  # padding queries


def plain_decode(q_row: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                 start: int) -> torch.Tensor:
    """A query at position `start` alone in its pass, its keys 0..start contiguous."""
    order = canonical_order([start], [1], [torch.ones(1, 1, dtype=torch.bool)],
                            torch.tensor([[start]]))
    return attend_canonical(q_row, keys, values, torch.zeros(1, dtype=torch.int32), order, 0.25)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_a_tree_node_computes_what_plain_decoding_computes(dtype: torch.dtype) -> None:
    # node 4's path is 0 -> 2 -> 4: in the tree its keys sit at 20, 22, 24 among masked
    # siblings, in plain decoding at 20, 21, 22 with nothing between
    start, parents = 20, [-1, 0, 0, 1, 2, 2]
    keys, values = cache(1, 40, dtype)
    q = queries(1, len(parents), dtype)
    tree = tree_mask(parents)
    depth = tree.sum(-1) - 1
    order = canonical_order([start], [len(parents)], [tree], (start + depth)[None])
    in_tree = attend_canonical(q, keys, values, torch.zeros(1, dtype=torch.int32), order, 0.25)
    flat_k, flat_v = keys.clone(), values.clone()
    flat_k[:, :, start : start + 3] = keys[:, :, [start, start + 2, start + 4]]
    flat_v[:, :, start : start + 3] = values[:, :, [start, start + 2, start + 4]]
    alone = plain_decode(q[:, :, 4:5].contiguous(), flat_k, flat_v, start + 2)
    assert torch.equal(in_tree[:, :, 4:5], alone)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_a_row_is_unchanged_by_its_neighbours_and_the_padding(dtype: torch.dtype) -> None:
    keys, values = cache(4, 300, dtype)
    q = queries(4, 9, dtype)
    tree = tree_mask([-1, 0, 0, 1, 1, 2, 3, 4, 5])
    depth = tree.sum(-1) - 1

    def row0(rows: int, count: int, others: list[int]) -> torch.Tensor:
        starts = [100, *others][:rows]
        trees = [tree[:count, :count]] + [None] * (rows - 1)
        counts = [count] + [9] * (rows - 1)
        positions = torch.stack([100 + depth] + [s + torch.arange(9) for s in starts[1:]])
        order = canonical_order(starts, counts, trees, positions)
        slots = torch.arange(rows, dtype=torch.int32)
        out = attend_canonical(q[:rows].contiguous(), keys, values, slots, order, 0.25)
        return out[0, :, :count]

    alone = row0(1, 9, [])
    assert torch.equal(row0(4, 9, [250, 7, 180]), alone)
    assert torch.equal(row0(3, 9, [20, 290]), alone)
    assert torch.equal(row0(2, 5, [200]), alone[:, :5])  # a smaller tree of the same nodes


def test_a_prompt_chunk_computes_what_one_token_at_a_time_computes() -> None:
    keys, values = cache(1, 64, torch.bfloat16)
    q = queries(1, 24, torch.bfloat16)
    order = canonical_order([10], [24], [None], (10 + torch.arange(24))[None])
    chunk = attend_canonical(q, keys, values, torch.zeros(1, dtype=torch.int32), order, 0.25)
    for i in (0, 7, 23):
        assert torch.equal(chunk[:, :, i : i + 1],
                           plain_decode(q[:, :, i : i + 1].contiguous(), keys, values, 10 + i))


@pytest.mark.skipif(not cpu_has_native_bf16(), reason="oneDNN's packed bf16 GEMM runs on CPUs "
                    "with native bf16 only (AVX512-BF16 or AMX)")
def test_row_floor_makes_a_wide_projection_row_invariant() -> None:
    # SmolLM2's MLP down projection shape: oneDNN reduces 1536-wide inputs differently below
    # 8 rows than above on this machine kind; the probed floor pads calls past that
    shape = (576, 1536)
    gen = torch.Generator().manual_seed(3)
    proj = pack(Projection((torch.randn(*shape, generator=gen) * 0.05).to(torch.bfloat16)))
    floor = canonical.row_floor(shape, torch.bfloat16,
                                lambda f: dataclasses.replace(proj, floor=f))
    assert floor is not None
    padded = dataclasses.replace(proj, floor=floor)
    x = torch.randn(200, shape[1], generator=gen).to(torch.bfloat16)
    alone = torch.cat([padded(x[i : i + 1]) for i in range(48)])
    for rows in (3, 8, 17, 48, 130, 200):
        assert torch.equal(padded(x[:rows])[: min(rows, 48)], alone[: min(rows, 48)]), rows
