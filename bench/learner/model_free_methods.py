"""The names the model-free benchmark (model_free_bench.py) measures under and its report
(model_free_report.py) writes up: the two workloads and the three HedgeSpec pools."""

from __future__ import annotations

WORKLOADS = ("held_out", "copy_heavy")
EAGLE_ONLY, WHOLE_POOL, HYBRID = "hedgespec_eagle", "hedgespec_all", "hedgespec_hybrid"
