"""The networks and their caches: the target (Hugging Face model, served aux layers, LM head,
slot KV cache; its lean decoder forward for the supported families, lean_decoder.py, and the
bucketed static shapes that captured passes run in, static_shapes.py; canonical numerics,
canonical.py, with its C++ attention kernel in kernels/), EAGLE-3 drafters
(loading, the checkpoint's fit with the target, RoPE; shape-compatible drafters stacked into one
batched catch-up pass, stacked_drafters.py), the drafters' KV buffers, the precision a
CPU can run, and the target's sampling defaults.

May import: the standard library, torch, transformers, filelock, `eagle3_format` and core's base
(`core.config`, `core.errors`, `core.stats`); no other room of `core`
(tests/test_architecture.py)."""
