"""Selection benchmarks: HedgeSpec's learners, losses and estimators against fixed drafters,
routers and oracles (the paper's benchmark, the time loss, sessions, prompt windows,
robustness, model-free drafters, the served sampling defaults, the arm policy's constants)."""
