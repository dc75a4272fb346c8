"""HedgeSpec engine: target + EAGLE-3 drafter pool, draft-tree speculative decoding,
lossless verification, counterfactual evaluation of every drafter and online learners.

`core` knows nothing of HTTP or SQL (see tests/test_architecture.py)."""
