"""Train the static router baseline (core/selection/router.py) on the domains' training prompts and
add it to a pool: `python -m demo.router [--pool demo/pool/pool.json]` writes `router.npz` next to
pool.json and names it there (`"router": "router.npz"`), so policy `router` can be served.

The router sees prompts exactly as the engine does (the user message in the target's chat
template, demo/rollouts.encode_prompt) and never the held-out `eval/` prompts. Its labels are the
seven specialists; the generalist is what it falls back to for a label the pool lacks.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from core.pool_file import load_pool_file, write_pool_file
from core.provision import smollm2
from core.selection.router import PromptRouter
from demo.domains import DATA_DIR, DOMAINS, corpus_path
from demo.prompt_picks import pick
from demo.records import load_records
from demo.rollouts import encode_prompt

POOL_JSON = Path(__file__).resolve().parent / "pool" / "pool.json"
ROUTER_FILE = "router.npz"
PROMPT_CHARS = 600  # as the rollouts (demo/build_config.RolloutSpec)


def training_set(tokenizer: PreTrainedTokenizerBase, per_domain: int, seed: int,
                 data_dir: Path = DATA_DIR) -> tuple[list[list[int]], list[str]]:
    prompts: list[list[int]] = []
    labels: list[str] = []
    for domain in DOMAINS:
        for r in pick(load_records(corpus_path(domain, data_dir), domain), per_domain, seed + 7):
            prompts.append(encode_prompt(tokenizer, r.prompt, PROMPT_CHARS))
            labels.append(domain)
    return prompts, labels


def train_router(tokenizer: PreTrainedTokenizerBase, per_domain: int = 300, seed: int = 0,
                 data_dir: Path = DATA_DIR) -> PromptRouter:
    prompts, labels = training_set(tokenizer, per_domain, seed, data_dir)
    return PromptRouter.fit(prompts, labels, seed=seed)


def add_to_pool(router: PromptRouter, pool_json: Path) -> Path:
    pool = load_pool_file(pool_json)
    path = pool.path.parent / ROUTER_FILE
    router.save(path)
    write_pool_file(replace(pool, router=path))
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m demo.router", description=__doc__.split("\n")[0])
    ap.add_argument("--pool", type=Path, default=POOL_JSON)
    ap.add_argument("--per-domain", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    tokenizer = AutoTokenizer.from_pretrained(str(smollm2.provision()))
    t0 = time.perf_counter()
    router = train_router(tokenizer, args.per_domain, args.seed)
    path = add_to_pool(router, args.pool)
    print(f"router over {len(router.vocab)} token features, {len(router.labels)} labels, "
          f"trained in {time.perf_counter() - t0:.0f}s -> {path} "
          f"({path.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
