"""Suite-wide settings. The test models are tiny: one intra-op thread is faster than two and
keeps tests from fighting each other (and a concurrent build) for the machine's two cores."""

from __future__ import annotations

import os

import pytest
import torch

torch.set_num_threads(1)

# The server's default dtype is `auto` (bf16 on a CPU with native bf16). The suite pins fp32,
# where greedy speculative output is token-identical to plain decoding; tests of `auto` itself
# pass the dtype explicitly. Servers started by the tests inherit it (bench/harness/server.py).
os.environ.setdefault("HEDGESPEC_DTYPE", "float32")
# The server's default `--loss time` decodes plain where drafting measures slower, which the
# tiny test pools often do: the suite's servers run the paper's acceptance loss, which drafts
# every round, so that what it asserts about drafts does not depend on timing; tests of the
# time loss pass `--loss time` explicitly.
os.environ.setdefault("HEDGESPEC_LOSS", "length")
# HEDGESPEC_* variables the suite sets itself and its isolation fixtures keep.
SUITE_ENV = ("HEDGESPEC_DTYPE", "HEDGESPEC_LOSS")


def pytest_addoption(parser: pytest.Parser) -> None:
    # Here, not in tests/reliability/conftest.py (which acts on it): pytest only takes options
    # from the conftest files it loads first, so `pytest --soak` from the root would be refused.
    parser.addoption(
        "--soak", action="store_true", default=False,
        help="also run the long reliability soak tests (marked `soak`); or HEDGESPEC_SOAK=1",
    )  # fmt: skip
