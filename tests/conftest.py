"""Suite-wide settings. The test models are tiny: one intra-op thread is faster than two and
keeps tests from fighting each other (and a concurrent build) for the machine's two cores."""

from __future__ import annotations

import torch

torch.set_num_threads(1)
