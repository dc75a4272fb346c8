"""What a round drafts and how it is verified: draft trees (and their union for hybrid trees),
EAGLE-3 tree drafting, the drafter pool's per-request caches and catch-up, the pool's members
of each kind behind one interface (`members.py`: what a round and the evaluation ask of them),
the model-free drafter kinds (`model_free/`: n-gram lookup, suffix tree, grammar
fast-forward), lossless greedy and sampling verification, logit processing, penalties and the
grammar of structured outputs.

May import: core's base (`core.config`, `core.errors`, `core.stats`), `core.model` and
`core.selection`; never `core.decoding`, `core.batching` or the engine
(tests/test_architecture.py)."""
