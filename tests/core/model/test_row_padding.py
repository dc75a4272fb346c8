"""Row padding of the lean forward's linears (core/model/lean_decoder.Projection, chosen by
core/model/canonical.row_floor / row_chunk): a row's result must not depend on how many rows
share the call. A floor pads small calls; where the library changes its reduction with the
row count at every size (oneDNN's AMX kernels), fixed-size calls (`chunk`) are what is left."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from core.model import canonical
from core.model.lean_decoder import Projection, pack
from core.model.target import _row_padding

SHAPE = (96, 64)


@dataclasses.dataclass(frozen=True)
class RowCountLinear(Projection):
    """A linear whose result moves with the number of rows in its call, at every count: what
    no floor can make invariant (a stand-in for a kernel that re-blocks at every size)."""

    def _linear(self, flat: Tensor) -> Tensor:
        return F.linear(flat, self.weight) + 1e-3 * flat.shape[0]


@dataclasses.dataclass(frozen=True)
class RowByRowLinear(Projection):
    """A linear that computes each row in its own call: invariant at any row count."""

    def _linear(self, flat: Tensor) -> Tensor:
        return torch.cat([F.linear(row[None], self.weight) for row in flat])


def weight(dtype: torch.dtype = torch.float32) -> Tensor:
    return (torch.randn(*SHAPE, generator=torch.Generator().manual_seed(1)) * 0.1).to(dtype)


def test_a_chunked_projection_computes_every_call_at_its_chunk_size() -> None:
    w = weight()
    proj = Projection(w, chunk=16)
    x = torch.randn(2, 37, SHAPE[1], generator=torch.Generator().manual_seed(2))
    flat = torch.cat([x.reshape(-1, SHAPE[1]), torch.zeros(96 - 74, SHAPE[1])])
    expected = torch.cat([F.linear(part, w) for part in flat.split(16)])[:74]
    assert torch.equal(proj(x), expected.view(2, 37, SHAPE[0]))
    assert torch.equal(proj(x[0, :3]), F.linear(torch.cat([x[0, :3], torch.zeros(13, 64)]), w)[:3])


def test_fixed_size_calls_make_invariant_what_no_floor_can() -> None:
    proj = RowCountLinear(weight())
    shape = SHAPE
    assert canonical.row_floor(shape, torch.float32,
                               lambda f: dataclasses.replace(proj, floor=f)) is None
    assert canonical.row_chunk(shape, torch.float32,
                               lambda c: dataclasses.replace(proj, chunk=c)) == canonical.CHUNKS[0]
    # the target's choice: a floor where a cheap one holds, else fixed-size calls
    assert _row_padding(proj, shape, torch.float32) == canonical.RowPadding(chunk=16)
    assert _row_padding(RowByRowLinear(weight()), shape, torch.float32) == \
        canonical.RowPadding(floor=1)


@pytest.mark.parametrize("shape", [SHAPE, (960, 576)])  # (960, 576): SmolLM2's qkv
def test_chunked_bf16_projection_is_row_invariant_on_this_machine(shape: tuple[int, int]) -> None:
    # the library's own kernel (oneDNN's packed bf16 GEMM where the CPU has one) at two threads,
    # as a default server runs on two cores (the suite pins one): oneDNN splits a call's rows
    # over its threads, and with AMX no floor made SmolLM2's qkv invariant; every call of one
    # size computes a row the same
    w = (torch.randn(*shape, generator=torch.Generator().manual_seed(1)) * 0.1).to(torch.bfloat16)
    proj = pack(Projection(w))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for chunk in canonical.CHUNKS:
            chunked = dataclasses.replace(proj, chunk=chunk)
            assert canonical.row_invariant(shape, torch.bfloat16, chunked), chunk
    finally:
        torch.set_num_threads(threads)
