"""Retrain some specialists of a built pool with the build's recipe, in place.

    python -m demo.retrain --pool demo/pool --drafters medical news [--quick] [--set K=V]
        [--rollouts FILE] [--seed 0] [--workers 2]

A full build takes about two hours on two cores; when the recipe changes for a few domains
(e.g. more epochs for one specialist, `specialist_epochs`), only those drafters need training.
Each named specialist is trained exactly as the build's specialist stage trains it: a copy of
the pool's generalist fine-tuned on all of its domain's rollouts, with the config's schedule
for that domain and the build's seed. Its files are replaced, its rows are measured again in
every table of the report (`demo.report_update`, in each table's own dtype) and the run is
recorded under `build.retrained`, which `REPORT.md` shows.

Nothing is generated: the rollouts are the build's (the committed file for a full build),
whatever precision made them (each records its own), so a machine computing in another dtype
still finds them. Features are computed in this machine's dtype.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path
from typing import Any, cast

import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerBase

from core.model.eagle3 import Eagle3Drafter, load_drafter, save_drafter
from core.model.precision import cpu_has_native_bf16
from demo.build_config import FULL, QUICK, BuildConfig, with_overrides
from demo.build_info import log_summary, rollout_counts
from demo.domains import DATA_DIR, DOMAINS, ROLLOUTS_FILE
from demo.features import TargetFeatures
from demo.pipeline import eagle3_aux_layers, load_target, prompt_jobs, specialist_seed
from demo.pool_files import GENERALIST
from demo.report import resolved_dtype, write_report
from demo.report_update import remeasure
from demo.rollouts import Rollout, load_rollouts
from demo.stage_cache import rollout_key
from demo.train_drafters import TrainLog, clone_drafter, train_drafter


def tables_of(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [report, *report.get("sampling", {}).values()]


def check_request(report: dict[str, Any], drafters: list[str], cfg: BuildConfig) -> None:
    """Refuse before hours of training what could not be finished: an unknown or non-specialist
    drafter, or a table whose rows this machine cannot measure in the table's own dtype."""
    specialists = [d for d in report["drafters"] if d in DOMAINS]
    bad = [d for d in drafters if d not in specialists]
    if bad:
        raise SystemExit(f"not a specialist of this pool: {', '.join(bad)} "
                         f"(specialists: {', '.join(specialists)})")
    if report["build"]["config"].get("specialist_init", "generalist") != "generalist":
        raise SystemExit("retrain fine-tunes from the generalist; this pool's specialists were "
                         "trained from scratch: rebuild it")
    here = resolved_dtype(cfg.report.dtype)
    for table in tables_of(report):
        m = table["measurement"]
        if m["dtype"] != here:
            raise SystemExit(f"the table at temperature {m['temperature']} is {m['dtype']} but "
                             f"this machine measures {here}: re-measure it first with "
                             f"python -m demo.report_update --temperatures {m['temperature']}")


def domain_rollouts(
    cfg: BuildConfig, seed: int, rollouts_file: Path, tokenizer: PreTrainedTokenizerBase,
    domain: str,
) -> list[Rollout]:
    """The build's rollouts of one domain, as the build's specialist stage reads them."""
    jobs = [j for j in prompt_jobs(cfg, seed, DATA_DIR) if j.record.domain == domain]
    key = rollout_key(cfg, seed, DATA_DIR)
    found = load_rollouts(rollouts_file, key, jobs, tokenizer, cfg.rollouts.prompt_chars)
    if found is None:
        raise SystemExit(f"{rollouts_file} lacks {domain}'s rollouts for this config: "
                         "run the full build instead (it generates the missing ones)")
    return found


def train_one(
    model: LlamaForCausalLM, generalist: Eagle3Drafter, own: list[Rollout], cfg: BuildConfig,
    seed: int, domain: str,
) -> tuple[Eagle3Drafter, TrainLog]:
    features = TargetFeatures(model, eagle3_aux_layers(model.config.num_hidden_layers))
    features.compute(own)
    specialist = clone_drafter(generalist, model)
    log = train_drafter(specialist, features, own, cfg.drafter, cfg.specialist_schedule(domain),
                        seed=specialist_seed(seed, domain), desc=domain)
    return specialist, log


def data_summary(own: list[Rollout]) -> dict[str, Any]:
    """What one specialist learnt from: rollouts by temperature and generated tokens."""
    return {"sequences": len(own), **rollout_counts(own),
            "response_tokens": sum(len(r.response_ids) for r in own)}


def record(report: dict[str, Any], logs: dict[str, TrainLog], data: dict[str, Any],
           cfg: BuildConfig, dtype: str, seconds: float) -> dict[str, Any]:
    """The report with the new training logs and a `build.retrained` entry."""
    build = dict(report["build"])
    build["drafters"] = {**build["drafters"], **{d: log_summary(log) for d, log in logs.items()}}
    entry = {"date": datetime.date.today().isoformat(), "drafters": list(logs),
             "epochs": {d: cfg.specialist_schedule(d).epochs for d in logs},
             "lr": cfg.specialist.lr, "rollouts": data, "features_dtype": dtype,
             "native_bf16": cpu_has_native_bf16(), "threads": cfg.threads,
             "seconds": round(seconds)}
    build["retrained"] = [*build.get("retrained", []), entry]
    return {**report, "build": build}


def retrain(pool_dir: Path, drafters: list[str], cfg: BuildConfig, seed: int,
            rollouts_file: Path, workers: int) -> dict[str, Any]:
    report = json.loads((pool_dir / "report.json").read_text())
    check_request(report, drafters, cfg)
    start = time.perf_counter()
    torch.set_num_threads(cfg.threads)
    model, tokenizer = load_target(cfg)
    embed = cast(torch.nn.Embedding, model.get_input_embeddings())
    generalist = load_drafter(pool_dir / "drafters" / GENERALIST, embed_tokens=embed,
                              dtype=torch.float32, device=model.device)
    logs: dict[str, TrainLog] = {}
    data: dict[str, Any] = {}
    for domain in drafters:
        own = domain_rollouts(cfg, seed, rollouts_file, tokenizer, domain)
        data[domain] = data_summary(own)
        specialist, logs[domain] = train_one(model, generalist, own, cfg, seed, domain)
        save_drafter(specialist, pool_dir / "drafters" / domain, dtype=torch.float16)
    dtype = str(model.dtype).removeprefix("torch.")
    seconds = time.perf_counter() - start
    write_report(record(report, logs, data, cfg, dtype, seconds), pool_dir)
    temperatures = [float(t["measurement"]["temperature"]) for t in tables_of(report)]
    # remeasure reads the recorded report back and writes report.json and REPORT.md
    return remeasure(pool_dir, temperatures, cfg.report.dtype, workers, rows=drafters)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Retrain some specialists of a built pool "
                                                 "with the build's recipe.")
    parser.add_argument("--pool", type=Path, required=True, help="the built pool's directory")
    parser.add_argument("--drafters", nargs="+", required=True, help="specialists to retrain")
    parser.add_argument("--quick", action="store_true", help="the quick build's config")
    parser.add_argument("--seed", type=int, default=0, help="the build's seed")
    parser.add_argument("--rollouts", type=Path, default=ROLLOUTS_FILE,
                        help="the build's rollouts file (default: the committed one)")
    parser.add_argument("--workers", type=int, default=2, help="processes measuring the rows")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a build setting, as for hedgespec demo build")
    args = parser.parse_args(argv)
    cfg = with_overrides(QUICK if args.quick else FULL, args.set)
    report = retrain(args.pool, args.drafters, cfg, args.seed, args.rollouts, args.workers)
    for table in tables_of(report):
        checks = table["checks"]
        print(f"temperature {table['measurement']['temperature']}: in-domain gains "
              f"{checks['specialist_gain_in_domain']}, oracle {checks['oracle_over_generalist']}")


if __name__ == "__main__":
    main()
