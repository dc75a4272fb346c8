"""Benchmarks, grouped by what they measure; results land in bench/results/.

    speed/        what passes, steps, rounds and served requests cost; the CPU defaults
    learner/      HedgeSpec's selection against fixed drafters, routers and oracles
    batching/     batched rounds against round-robin
    reliability/  load, overload and faults against real servers
    gpu/          figures only a GPU gives
    harness/      what benchmarks and tests both run against

Shared by the groups: `paths` (the repository, results and data folders), `prompts` (the
held-out prompts every benchmark decodes), `machine`, `plotting`, `report_cli`; `cli` is the
`hedgespec bench` plugin.
"""
