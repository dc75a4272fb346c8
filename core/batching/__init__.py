"""One engine step over the running requests: the scheduler (slots of the target's KV cache,
which requests get a round, prompt chunks beside them), the step itself (`step.py`: the rounds
of every request in one verification pass, failures isolated per request), chunked prefill
and the verification head's rows (`head_rows.py`, a rule by device). Whether a request
speculates is its learner's choice (the time loss's plain arm, core/selection/arm_costs.py).

May import: every room below it (core's base, `core.model`, `core.selection`,
`core.speculation`, `core.decoding`); never the engine (tests/test_architecture.py)."""
