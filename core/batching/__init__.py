"""One engine step over the running requests: the scheduler (slots of the target's KV cache,
which requests get a round, prompt chunks beside them), the step itself (`step.py`: the rounds
of every request in one verification pass, failures isolated per request), chunked prefill,
the speculation gate that measures per batch size in place whether to speculate
(`spec_gate.py`, on `ab_trial.py`) and the verification head's rows (`head_rows.py`, a rule
by device).

May import: every room below it (core's base, `core.model`, `core.selection`,
`core.speculation`, `core.decoding`); never the engine (tests/test_architecture.py)."""
