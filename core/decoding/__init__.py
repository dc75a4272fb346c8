"""One request's decoding: its state (`request.py`: tokens, learner, feedback queue, stop
rules), the pieces of its round (`request_round.py`: the first token, verification, commit,
the drafters' catch-up and the learner's update), the target's distributions at the tree's
nodes (`node_logits.py`), and the evidence the evaluation scores, from the rounds
(`pool_evidence.py`) and from the prompt (`prompt_feedback.py`).

May import: core's base, `core.model`, `core.selection` and `core.speculation`; never
`core.batching` or the engine (tests/test_architecture.py)."""
