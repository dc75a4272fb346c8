"""`hedgespec serve`: start the OpenAI-compatible server.

Flags override settings one by one (`SERVE_FLAGS`); a flag left unset falls through to
`HEDGESPEC_*`, `.env` and the defaults of `gateway.config.Settings`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

# CLI flag -> Settings field. Flags left unset fall through to HEDGESPEC_* / .env / defaults.
SERVE_FLAGS: dict[str, str] = {
    "host": "host",
    "port": "port",
    "pool": "pool",
    "target": "target",
    "seed_pool": "seed_pool",
    "drafter": "drafters",
    "model_name": "model_name",
    "database_url": "database_url",
    "api_key": "api_keys",
    "admin_key": "admin_key",
    "cors_origin": "cors_origins",
    "policy": "default_policy",
    "max_sessions": "max_sessions",
    "responses_retention_days": "responses_retention_days",
    "eval_every": "eval_every",
    "prompt_windows": "prompt_windows",
    "loss": "loss",
    "hybrid": "hybrid",
    "verify_logits": "verify_logits",
    "deterministic": "deterministic",
    "generation_config": "generation_config",
    "override_generation_config": "override_generation_config",
    "device": "device",
    "device_map": "device_map",
    "compile": "compile",
    "dtype": "dtype",
    "max_context": "max_context",
    "max_running": "max_running",
    "max_queue": "max_queue",
    "max_step_tokens": "max_step_tokens",
    "rate_limit_rps": "rate_limit_rps",
    "rate_limit_burst": "rate_limit_burst",
    "request_timeout": "request_timeout_s",
    "drain_timeout": "drain_timeout_s",
    "log_level": "log_level",
    "torch_threads": "torch_threads",
}


def register(sub: Any) -> None:
    # The engine defaults the help states are read from core.config (through core.api), where
    # they live with the measurements behind them (core.api imports nothing heavy).
    from core.api import (
        CPU_EVAL_EVERY,
        PROMPT_WINDOWS,
        EngineConfig,
        SelectorConfig,
    )

    p = sub.add_parser("serve", help="start the OpenAI-compatible server")
    p.add_argument("--host", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--pool", type=Path,
                   help="pool.json to serve (the shipped demo pool: demo/pool/pool.json)")
    p.add_argument("--target", type=Path,
                   help="a target model directory or Hub repo id (instead of --pool)")
    p.add_argument("--drafter", action="append", metavar="ID=PATH", help="drafter for --target")
    p.add_argument("--model-name", help="served model id (default: the target's name)")
    p.add_argument("--database-url", help="registry database URL (default: var/hedgespec.db)")
    p.add_argument("--api-key", action="append", help="accepted client key (repeatable)")
    p.add_argument("--admin-key", help="key for /admin/*")
    p.add_argument("--cors-origin", action="append", help="allowed CORS origin (repeatable)")
    p.add_argument("--policy", help="what `auto` means: a learner name, normalhedge_router "
                   "(NormalHedge with the pool's prompt router as its prior; plain "
                   "normalhedge on a pool without a router), none or fixed:<id> "
                   f"(default {SelectorConfig.policy})")
    p.add_argument("--max-sessions", type=int,
                   help="learner sessions kept between requests "
                        f"(default {SelectorConfig.max_sessions}; 0: off)")
    p.add_argument("--responses-retention-days", type=float,
                   help="days a stored /v1/responses response is kept (default 30; 0: forever)")
    p.add_argument("--eval-every", type=int,
                   help="score every drafter every n-th round (delayed feedback, cheaper "
                        f"rounds; default {CPU_EVAL_EVERY} on a CPU, else 1)")
    p.add_argument("--prompt-windows", type=int,
                   help="the prompt's last positions scored as learner feedback before the "
                        f"first round (default {PROMPT_WINDOWS}; 0: the learner starts uniform)")
    p.add_argument("--loss", choices=("time", "length", "prob"),
                   help="what the learner minimises: time (default: measured time per token, "
                        "plain decoding one of its arms, so a request speculates only where it "
                        "pays), or length or prob (the paper's acceptance losses, drafting "
                        "every round)")
    p.add_argument("--hybrid", metavar="ID",
                   help="graft this model-free member's tree (e.g. lookup) at the root of every "
                        "EAGLE-3 tree the learner chooses (default: off)")
    p.add_argument("--verify-logits", choices=("auto", "visited", "all"),
                   help="LM-head rows of a verified tree: auto (visited on a CPU, all on an "
                        "accelerator, as measured in bench/results/verify_logits.md), visited "
                        f"or all; default {EngineConfig.verify_logits}")
    p.add_argument("--deterministic", choices=("auto", "on", "off"),
                   help="canonical numerics: a token's logits bit-identical whatever tree, "
                        "batch and padding verify it (greedy output independent of policy, "
                        "streaming and load, in bf16 too): auto (default: on where it can, a "
                        "lean-forward family on a CPU with a C++ compiler), on, off")
    p.add_argument("--generation-config", choices=("auto", "openai"),
                   help="sampling of a request that leaves temperature/top_p/top_k out: auto "
                        "(default): the model's (generation_config.json, the pool file's "
                        "generation_config); openai: temperature 1, no top_p/top_k")
    p.add_argument("--override-generation-config", metavar="JSON",
                   help="sampling defaults over either, e.g. '{\"temperature\": 0.7}'")
    p.add_argument("--device", help=f"torch device (default {EngineConfig.device})")
    p.add_argument("--dtype", help="auto (default: bf16 where native, else fp32), float32, "
                                   "bfloat16 or float16")
    p.add_argument("--device-map", help="'auto' spreads a large target over every GPU")
    p.add_argument("--compile", action="store_true", default=None,
                   help="torch.compile the target (GPU: 2-3x faster passes; minutes of warm-up)")
    p.add_argument("--seed-pool", type=Path,
                   help="seed pool JSON imported into the registry on start")
    p.add_argument("--max-context", type=int,
                   help=f"context window cap in tokens (default {EngineConfig.max_context})")
    p.add_argument("--max-running", type=int,
                   help="requests in the engine at once, one batched step for all "
                        f"(default {EngineConfig.max_running})")
    p.add_argument("--max-step-tokens", type=int,
                   help="tokens one step may verify or prefill "
                        f"(default {EngineConfig.max_step_tokens}; prompt chunks)")
    p.add_argument("--no-batching", action="store_true",
                   help="one request's round per step, round-robin (for comparison)")
    p.add_argument("--max-queue", type=int, help="requests waiting before 429")
    p.add_argument("--rate-limit-rps", type=float,
                   help="per-API-key requests per second (default off)")
    p.add_argument("--rate-limit-burst", type=int, help="per-API-key burst (default: ceil(rps))")
    p.add_argument("--request-timeout", type=float, help="per-request deadline, seconds")
    p.add_argument("--drain-timeout", type=float, help="graceful shutdown budget, seconds")
    p.add_argument("--log-level", help="debug, info, warning, error")
    p.add_argument("--torch-threads", type=int, help="torch intra-op threads (default: all)")
    p.add_argument("--no-warmup", action="store_true", help="skip the warm-up generation")
    p.set_defaults(handler=serve)


def serve_settings(args: argparse.Namespace) -> Any:
    from gateway.config import Settings

    overrides = {
        field: getattr(args, flag)
        for flag, field in SERVE_FLAGS.items()
        if getattr(args, flag, None) is not None
    }
    if getattr(args, "no_warmup", False):
        overrides["warmup"] = False
    if getattr(args, "no_batching", False):
        overrides["batching"] = False
    return Settings(**overrides)


def serve(args: argparse.Namespace) -> int:
    import logging

    import uvicorn
    from pydantic import ValidationError

    from gateway.app import create_app

    try:
        settings = serve_settings(args)
    except ValidationError as exc:
        print(f"hedgespec serve: invalid settings:\n{exc}", file=sys.stderr)
        return 2
    problem = _missing_model(settings)
    if problem:
        print(f"hedgespec serve: {problem}", file=sys.stderr)
        return 2
    problem = _provision_target(settings)
    if problem:
        print(f"hedgespec serve: {problem}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        timeout_graceful_shutdown=int(settings.drain_timeout_s) + 5,
        lifespan="on",
    )
    uvicorn.Server(config).run()
    return 0


def _missing_model(settings: Any) -> str | None:
    if settings.target is not None:
        from drafter_registry.target_hub import is_hub_id

        if not Path(settings.target).is_dir() and not is_hub_id(str(settings.target)):
            return f"target not found: {settings.target} is neither a directory nor a Hub repo id"
        return None
    if settings.pool is None:
        return ("no model to serve: pass --pool FILE or --target DIR (HEDGESPEC_POOL, "
                "HEDGESPEC_TARGET); `make serve` serves the shipped demo pool")
    if not Path(settings.pool).is_file():
        return f"pool file not found: {settings.pool}"
    return None


def _provision_target(settings: Any) -> str | None:
    """Check the pool file and convert its provisioned target (the demo's SmolLM2) before the
    server starts, with a progress bar: the first start takes ~30 s and 540 MB in the target
    cache. A bad pool file stops the command here, with the file and field named."""
    if settings.target is not None or settings.pool is None:
        return None
    from core.api import PoolFileError, ProvisionError, load_pool_file

    try:
        load_pool_file(settings.pool).target.directory(provision=True)
    except (PoolFileError, ProvisionError) as exc:
        return str(exc)
    return None
