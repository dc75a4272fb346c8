"""What benchmarks and tests both run against, built on the spot and never downloaded.

    tiny_models   random Llama/Qwen3/Mistral targets and EAGLE-3 drafters, a bigram target with a
                  drafter that copies it, and engines over them
    tiny_pool     a tiny local pool on disk (tokenizer, target, two drafters, pool.json)
    server        a real `hedgespec serve` child process on a free loopback port
    fakehub       a fake Hugging Face Hub on loopback, with injectable faults
    postgres      throw-away PostgreSQL databases on a given server
    checkpoints   hand-made EAGLE-3-shaped checkpoint files (numpy)

Tests import these from here; nothing under `bench/` imports `tests` (tests/test_architecture.py).
"""
