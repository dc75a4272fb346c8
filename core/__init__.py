"""HedgeSpec engine: target + EAGLE-3 drafter pool, draft-tree speculative decoding,
lossless verification, counterfactual evaluation of every drafter and online learners.

`core` knows nothing of HTTP or SQL (see tests/test_architecture.py). A front end imports it
through its face only, `core/api.py`, which loads no torch until the engine is built.

Vocabulary (code, statistics and wire use these words in these senses only):

  pass   one forward of the target: a verification pass (every round of a step, one batch) or
         a prefill pass (prompt chunks). `target_forwards` counts a request's passes.
  step   one call of `SpecEngine.step()`: at most one verification pass over the running
         requests' rounds, plus prefill passes beside it. With batching off a step holds one
         request (round-robin); it runs the same code.
  round  one request's share of a step's verification pass: its learner's choice, its tree
         (drafted, or only the root), its verified tokens and its evaluation. A speculative
         round verified a drafted tree; a plain round drafted nothing and commits one token
         (the time loss chose the plain arm or the step's cost check did, a probe step of the
         cost model, or no drafter was awake): `RoundStats.plain`, `RequestStats.plain_rounds`.
         `rounds` counts the speculative ones; MAT is over them.

On the wire, the fields named after vLLM's per-request metrics keep vLLM's word: its "spec
step" is a speculative round, so `num_spec_steps` counts speculative rounds and its siblings
`num_plain_steps` and `plain_step_indices` the plain ones.
"""
