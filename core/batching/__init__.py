"""One engine step over the running requests: the scheduler (slots of the target's KV cache,
which requests get a round, prompt chunks beside them), the step itself (`step.py`: the rounds
of every request in one verification pass, failures isolated per request), chunked prefill,
and the self-tuners that measure per batch size in place (`spec_gate.py`: speculate or not;
`head_rows.py`: which LM-head rows; both on `ab_trial.py`).

May import: every room below it (core's base, `core.model`, `core.selection`,
`core.speculation`, `core.decoding`); never the engine (tests/test_architecture.py)."""
