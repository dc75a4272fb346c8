"""Build the tiny demo pool: a small Llama target plus EAGLE-3 drafters trained on CPU.

The pool is the same shape as a real HedgeSpec deployment (one target, one generalist drafter,
seven domain specialists, all in the official EAGLE-3 checkpoint format), only small enough to
build on two CPU cores in under 45 minutes and to ship in the repository. Entry points:
`demo.pipeline.build` (used by `hedgespec demo build`) and `python -m demo.pipeline`.
"""
