"""Write the pool layout the gateway serves: `drafters/<id>/`, `pool.json`,
`eval_prompts.jsonl` (the names are a contract with the gateway's default configuration).

`pool.json` is a pool file written by the product's own writer (core/pool_file.py). The target
is not written: it names it as `{"provision": "smollm2-135m-instruct"}`, which the engine
converts into its target cache on first use (core/provision/smollm2.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from core.model.eagle3 import Eagle3Drafter, save_drafter
from core.pool_file import PoolDrafter, PoolFile, ProvisionedTarget, write_pool_file
from core.provision import smollm2
from demo.build_config import BuildConfig
from demo.domains import DOMAINS, eval_path
from demo.records import cap_prompt, load_records, write_jsonl

GENERALIST = "generalist"
MODEL_NAME = "SmolLM2-135M-Instruct"
OUTPUTS = ("target", "drafters", "pool.json", "eval_prompts.jsonl", "report.json", "REPORT.md")
# Sampling for requests that leave it out (the pool file's "generation_config"): the model card's
# own usage example samples with temperature 0.2 and top_p 0.9. The checkpoint carries none,
# and at the OpenAI default (temperature 1) this 135M model loses the thread within a sentence.
RECOMMENDED_SAMPLING = {"temperature": 0.2, "top_p": 0.9}


# Drafters with no weights the demo pool serves beside its EAGLE-3 drafters, at their kinds'
# defaults (core/speculation/model_free/): they need no training, so a build only lists them.
MODEL_FREE_MEMBERS = (PoolDrafter("lookup", kind="ngram"), PoolDrafter("suffix", kind="suffix"))


def write_pool_files(
    out_dir: Path, pool: dict[str, Eagle3Drafter], cfg: BuildConfig, data_dir: Path
) -> None:
    """Replace the build outputs in `out_dir` (other files there are left alone)."""
    _clear(out_dir)
    out_dir = out_dir.absolute()
    entries = []
    for drafter_id, drafter in pool.items():
        path = out_dir / "drafters" / drafter_id
        save_drafter(drafter, path, dtype=torch.float16)
        domain = "all" if drafter_id == GENERALIST else drafter_id
        entries.append(PoolDrafter(drafter_id, path=path, domain=domain))
    write_pool_file(PoolFile(out_dir / "pool.json", ProvisionedTarget(smollm2.NAME),
                             (*entries, *MODEL_FREE_MEMBERS), model_name=MODEL_NAME,
                             generation_config=RECOMMENDED_SAMPLING))
    write_jsonl(out_dir / "eval_prompts.jsonl", eval_prompt_rows(cfg, data_dir))


def eval_prompt_rows(cfg: BuildConfig, data_dir: Path) -> list[dict[str, str]]:
    """The first held-out prompts of every domain, capped as the training prompts were."""
    return [
        {"id": r.id, "domain": d, "prompt": cap_prompt(r.prompt, cfg.rollouts.prompt_chars)}
        for d in DOMAINS
        for r in load_records(eval_path(d, data_dir), d)[: cfg.eval_prompts_per_domain]
    ]


def _clear(out_dir: Path) -> None:
    for name in OUTPUTS:
        path = out_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    out_dir.mkdir(parents=True, exist_ok=True)


def pool_bytes(out_dir: Path) -> int:
    """Bytes of every file the build wrote under `out_dir`."""
    return sum(p.stat().st_size for name in OUTPUTS for p in _files(out_dir / name))


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return [p for p in path.rglob("*") if p.is_file()]
    return [path] if path.exists() else []
