"""`ServedFacts`: what a front end reports about the engine it serves, as plain data.

One typed answer in place of attribute probes: whether policy `router` can be served, the
sampling defaults a request that leaves them out gets, each drafter's kind, the target's
feature layers that downloaded drafters are checked against, and whether its numerics are
canonical. Torch-free, so a front end and its engine doubles build and read it without the
engine's imports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ServedFacts:
    has_router: bool  # the pool ships a prompt router (policy `router` is served)
    sampling_defaults: Mapping[str, float]  # temperature / top_p / top_k a silent request gets
    drafter_kinds: Mapping[str, str]  # drafter id -> "eagle3" or a model-free kind
    aux_layers: tuple[int, ...] | None  # the target's EAGLE-3 feature layers (None: unknown)
    # Canonical numerics on (EngineConfig.deterministic): greedy output independent of the
    # policy, streaming, load and history in bf16 too.
    deterministic: bool = False
