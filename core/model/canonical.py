"""Deterministic verification numerics: attention in each query's canonical order.

A speculative server verifies a request's tokens in trees of any size, beside any neighbours,
padded to the widest of them; plain decoding computes the same tokens one at a time. In bf16
every library attention picks its reduction order from the call's shapes, so the logits of a
token differ in their last bits between those passes and near-tied argmaxes flip: the same
request gives different text alone and under load, streamed and not, under one policy and
another (issue 60). The linear layers, norms and the LM head of the lean forward are already
row-invariant on the CPU (tests/core/model/test_lean_decoder.py); attention is what is not.

`attend_canonical` (kernels/canonical_attention.cpp) computes each query from its visible keys
walked in position order, a fixed sequence of float operations per (query head, key list):
the committed keys of its row from `lo` to `hi`, then its tree path's keys. A tree node at depth
d therefore computes exactly what plain decoding computes for the same token at the same
position, whatever the tree, the batch and the padding. `CanonicalOrder` is that description
for a pass, built once per pass (and per window kind) from the rows' starts, trees and
positions.

The kernel is compiled on first use with the system C++ compiler against the installed torch
(about 7 s, cached under ~/.cache/hedgespec/kernels or `HEDGESPEC_KERNEL_CACHE`, keyed by its
source, torch's version and the CPU's flags): no wheel to ship per platform, `-march=native`
for the machine it runs on. Where it cannot be built `available()` says why: `--deterministic
auto` (the default) then serves with the library's kernels and logs the reason, `on` refuses
to start with it.

Measured (bench/results/deterministic.md, and the peer benchmark's run): not a cost. The
kernel reads each row's keys in place (no gather of the rows, no [B, T, S] mask built per
pass), and at one query a row it is faster than the batched matmul pair it replaces.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch
from filelock import FileLock
from torch import Tensor

from core.config import cache_dir

SOURCE = Path(__file__).with_name("kernels") / "canonical_attention.cpp"
FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fopenmp", "-std=c++20", "-shared",
         "-fPIC", "-w")


@dataclass(frozen=True)
class CanonicalOrder:
    """Each query's visible keys, in position order: committed keys lo..hi-1 of its row, then
    `path[:path_len]` (cache indices of the pass's new keys). int32, [B, T] and [B, T, P]."""

    lo: Tensor
    hi: Tensor
    path: Tensor
    path_len: Tensor


def canonical_order(starts: list[int], counts: list[int], trees: list[Tensor | None],
                    positions: Tensor, window: int | None = None) -> CanonicalOrder:
    """The order of a batched pass (Target.forward_rows's layout): row b's counts[b] new tokens
    sit at cache entries starts[b].. in the order given; `trees[b]` [T_b, T_b] says which of
    them each sees (its ancestors and itself, a parent before its child), None for a causal
    chunk.
    positions [B, T]: the new tokens' positions; with `window` W a query at p sees only keys
    at positions > p - W. Padding queries see nothing."""
    b, t = positions.shape
    lo = torch.zeros(b, t, dtype=torch.int32)
    hi = torch.zeros(b, t, dtype=torch.int32)
    allowed = torch.zeros(b, t, t, dtype=torch.bool)
    for row, (start, n, tree) in enumerate(zip(starts, counts, trees, strict=True)):
        if tree is None:  # a causal chunk: its own keys follow the committed ones in place
            hi[row, :n] = start + torch.arange(1, n + 1, dtype=torch.int32)
        else:
            hi[row, :n] = start
            allowed[row, :n, :n] = tree.cpu()
        if window is not None:
            lo[row, :n] = (positions[row, :n] - window + 1).clamp(min=0).to(torch.int32)
    if window is not None:  # the tree's own keys outside the window
        allowed &= positions[:, None, :] > positions[:, :, None] - window
    path_len = allowed.sum(-1, dtype=torch.int32)
    # the allowed keys first, in index order (a parent sits before its child: position order)
    order = torch.argsort((~allowed).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    path = order + torch.tensor(starts, dtype=torch.int32)[:, None, None]
    width = max(1, int(path_len.max()))
    return CanonicalOrder(lo, hi, path[..., :width].contiguous(), path_len)


def attend_canonical(q: Tensor, keys: Tensor, values: Tensor, rows: Tensor,
                     order: CanonicalOrder, scale: float) -> Tensor:
    """Attention of q [B, heads, T, hd] over keys/values [slots, kv_heads, S, hd] (entries
    contiguous in hd), row b of the pass at slot rows[b] (int32), in `order`: bit-identical
    per query whatever shares the call."""
    _load()
    return torch.ops.hedgespec.canonical_attend(q.contiguous(), keys, values, rows, order.lo,
                                                order.hi, order.path, order.path_len, scale)


FLOORS = (1, 8, 16, 32, 64)
CHUNKS = (16, 32, 64)
PROBE_ROWS = (2, 3, 5, 7, 8, 9, 12, 16, 17, 24, 31, 32, 33, 48, 64, 65, 100, 128, 129, 200, 256,
              300, 512)


@dataclass(frozen=True)
class RowPadding:
    """How a linear's calls are padded so that a row's result does not depend on how many rows
    share the call (core/model/lean_decoder.Projection): to at least `floor` rows, or, with
    `chunk`, to a multiple of it, computed `chunk` rows a call."""

    floor: int = 1
    chunk: int = 0


def row_floor(shape: tuple[int, int], dtype: torch.dtype,
              floor_of: Callable[[int], Callable[[Tensor], Tensor]]) -> int | None:
    """The smallest row count from which `linear`'s result for a row does not depend on how many
    rows share the call, probed on random rows: None where no floor in FLOORS holds.

    Why a probe and not a rule: the library's kernel choice is its own. oneDNN's bf16 GEMM on
    this project's CPU (AVX512-BF16) is row-invariant at every row count for inputs up to 1024
    wide, but from 1152 wide (SmolLM2's MLP down projection, 1536) it reduces differently below
    6-16 rows than above (measured 2026-12-07); every count from 8 up agrees. `floor_of(f)` is
    the linear [N, K] = `shape` padded to f rows. Calls as wide as an LM head probe fewer rows
    (at most 2^23 outputs a call: about a second at load)."""
    return next((f for f in FLOORS if row_invariant(shape, dtype, floor_of(f))), None)


def row_chunk(shape: tuple[int, int], dtype: torch.dtype,
              chunk_of: Callable[[int], Callable[[Tensor], Tensor]]) -> int | None:
    """The smallest call size that makes the linear row-invariant when every call computes
    exactly that many rows (`chunk_of(c)`: the linear with RowPadding(chunk=c)), None where none
    of CHUNKS does. Where no floor works: on a CPU with AMX (measured 2026-12-08 on a 2-core
    Xeon with AMX-BF16) oneDNN picks its bf16 GEMM's blocking from the row count at every size,
    so SmolLM2's qkv projection (960 x 576) was invariant at no floor, but every call of one
    fixed size computes a row the same wherever it sits in the call."""
    return next((c for c in CHUNKS if row_invariant(shape, dtype, chunk_of(c))), None)


def row_invariant(shape: tuple[int, int], dtype: torch.dtype,
                  linear: Callable[[Tensor], Tensor]) -> bool:
    """Whether `linear` (of weight `shape`) computes each of many random rows bit-identically
    alone and in calls of every row count in PROBE_ROWS."""
    outputs, width = shape
    # the bf16 output rounding hides most reduction-order differences (a row differs in a
    # few of its outputs, if any): many rows, each compared whole
    counts = [m for m in PROBE_ROWS if m * outputs <= 1 << 23 or m <= 16]
    rows = min(64, max(counts))
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(max(counts), width, generator=gen).to(dtype)
    alone = torch.cat([linear(x[i : i + 1]) for i in range(rows)])
    return all(torch.equal(linear(x[:m])[: min(m, rows)], alone[: min(m, rows)])
               for m in counts)


def available() -> str | None:
    """None where the kernel builds and loads here, else why not (the server's message)."""
    try:
        _load()
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        return f"the canonical attention kernel could not be built: {exc}"
    return None


@cache
def _load() -> None:
    library = _build()
    torch.ops.load_library(str(library))


def _build() -> Path:
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise RuntimeError("no C++ compiler (g++) on PATH")
    from torch.utils import cpp_extension

    includes = [f"-I{p}" for p in cpp_extension.include_paths()]
    libs = cpp_extension.library_paths()
    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    key = hashlib.sha256(SOURCE.read_bytes() + torch.__version__.encode()
                         + " ".join(FLAGS).encode() + _cpu_flags().encode()).hexdigest()[:16]
    out = cache_dir("HEDGESPEC_KERNEL_CACHE", "kernels") / f"canonical_attention-{key}.so"
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock"):
        if not out.exists():
            tmp = out.with_suffix(f".{os.getpid()}.tmp")
            cmd = [compiler, *FLAGS, abi, *includes, str(SOURCE), "-o", str(tmp),
                   *[f"-L{p}" for p in libs], "-lc10", "-ltorch_cpu",
                   *[f"-Wl,-rpath,{p}" for p in libs]]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"{compiler} failed: {done.stderr.strip()[-2000:]}")
            tmp.replace(out)
    return out


def _cpu_flags() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    return next((line for line in text.splitlines() if line.startswith("flags")), "")
