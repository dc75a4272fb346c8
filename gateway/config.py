"""The gateway's one settings object.

Every knob comes from, in order of precedence: keyword arguments (the CLI passes its flags
this way), `HEDGESPEC_*` environment variables, a `.env` file in the working directory, and the
defaults below; an engine knob left None takes core.config's default, so each engine default
(and the measurement behind it) lives there only. Nothing is read at import time: `create_app`
builds `Settings()` once.

List settings (`HEDGESPEC_API_KEYS`, `HEDGESPEC_CORS_ORIGINS`, `HEDGESPEC_DRAFTERS`) accept
either a JSON list or a comma-separated string, because `k1,k2` is what operators type.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from core.api import (
    LEARNER_NAMES,
    ROUTER_PRIOR,
    EngineConfig,
    auto_dtype,
    checked_sampling_defaults,
    served_selector,
    served_tree,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
SEED_POOLS_DIR = REPO_ROOT / "pools"  # the shipped seed pools, selectable by name
DEFAULT_DATABASE_URL = f"sqlite:///{REPO_ROOT / 'var' / 'hedgespec.db'}"


def _default_hf_cache() -> Path:
    """huggingface_hub's own cache (HF_HUB_CACHE, else HF_HOME/hub), read when Settings is built."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def _split_list(value: Any) -> Any:
    """Accept `a,b` or `["a","b"]` for list settings coming from the environment."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [item.strip() for item in text.split(",") if item.strip()]
    return value


class Settings(BaseSettings):
    """Runtime configuration of `hedgespec serve`."""

    model_config = SettingsConfigDict(
        env_prefix="HEDGESPEC_", env_file=".env", env_ignore_empty=True, extra="ignore"
    )

    # --- HTTP -------------------------------------------------------------------------------
    host: str = "127.0.0.1"  # loopback unless the operator exposes the server
    port: int = Field(default=8000, ge=0, le=65535)  # vLLM's port; 0 picks a free one
    log_level: str = "info"  # the server's logging level (uvicorn's and the gateway's)
    # Browser origins allowed to call the API (CORS); none by default: SDKs and curl need none.
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Request bodies past this are refused with 413 before they are parsed: a bound on the
    # memory one request takes (1 MiB is far more text than any served context admits).
    max_body_bytes: int = Field(default=1 << 20, ge=1024)
    # Keep-alive comment frames on idle SSE streams, so proxies do not cut a stream waiting in
    # the queue or prefilling; 0 disables.
    sse_ping_s: float = Field(default=15.0, ge=0.0)

    # --- security (SecretStr keeps keys out of reprs and logs) -----------------------------
    # Keys accepted on /v1/* (DESIGN §4); none: /v1/* is open, as a local vLLM is.
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(default_factory=list)
    # The separate key of /admin/* (DESIGN §4); none: the admin page and API answer 403.
    admin_key: SecretStr | None = None
    # Per-client token bucket for /v1/* (gateway/http/ratelimit.py): sustained requests per second
    # per API key (per client address without one); None = no limit. Burst default: ceil(rps).
    rate_limit_rps: float | None = Field(default=None, gt=0)
    rate_limit_burst: int | None = Field(default=None, ge=1)

    # --- model pool ---------------------------------------------------------------------------
    # pool.json; ignored when `target` is set. No default: like `vllm serve MODEL`, the server
    # serves what it is told (`make serve` and the image name the shipped demo pool).
    pool: Path | None = None
    target: Path | None = None  # a target directory, served with `drafters`
    drafters: Annotated[list[str], NoDecode] = Field(default_factory=list)  # "id=path"
    model_name: str | None = None  # served model id; default: the engine's name
    # The drafter registry and request logs (SQLAlchemy URL; SQLite under var/ by default,
    # Postgres for several replicas).
    database_url: str = DEFAULT_DATABASE_URL

    # --- drafter registry (see gateway/pool/registry.py) ------------------------------------
    # Downloads land in the standard HF cache layout, so `HF_HOME` moves them as usual.
    hf_cache_dir: Path = Field(default_factory=_default_hf_cache)
    # For gated or private drafter repos; `HF_TOKEN` is honoured too, as huggingface_hub does.
    hf_token: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("hedgespec_hf_token", "hf_token")
    )
    # A HedgeSpec-style pool JSON whose drafters are registered (idempotently) on every start,
    # or the name of a shipped one (`qwen3_32b_hedgespec` = pools/qwen3_32b_hedgespec.json).
    # Only drafters come from it: the target is always the one loaded from `pool`/`target`.
    seed_pool: Path | None = None
    pool_sync_interval_s: float = Field(default=1.0, gt=0, le=60)  # registry -> engine polling
    log_prompts: bool = False  # store prompt text in request_logs (off: statistics only)
    request_log_retention_days: float = Field(default=7.0, ge=0)  # 0 keeps logs forever
    # Stored /v1/responses responses (`store`, the default) are purged after this many days, as
    # OpenAI keeps them for 30; 0 keeps them until deleted.
    responses_retention_days: float = Field(default=30.0, ge=0)

    # --- engine ------------------------------------------------------------------------------
    # Each knob below maps onto one field of core.config (named in its comment), where its
    # default and the measurement behind it live: None (the default here) keeps the core's
    # default, the served one for the device where core has one (served_tree,
    # served_selector). `engine_config` applies them.
    device: str | None = None  # EngineConfig.device: the torch device
    # "auto": bf16 where the device computes it natively (a CPU with AVX512-BF16/AMX, a GPU),
    # else fp32 (core/model/precision.py; measured in bench/results/cpu_defaults.md). Greedy output
    # is token-identical to plain decoding in float32 only (EngineConfig.dtype's default).
    dtype: str = "auto"
    device_map: str | None = None  # "auto": spread a target too big for one GPU over all GPUs
    compile: bool | None = None  # EngineConfig.compile: torch.compile the target (a GPU)
    max_context: int | None = Field(default=None, ge=16)  # EngineConfig.max_context
    # The draft tree (core.config.TreeConfig; None: served_tree(device), measured there).
    tree_top_k: int | None = Field(default=None, ge=1)
    tree_depth: int | None = Field(default=None, ge=1)
    # Drafted nodes, root not counted: EAGLE's total_token - 1.
    tree_total_tokens: int | None = Field(default=None, ge=1)
    # What `hedgespec.policy: auto` means (SelectorConfig.policy): a learner name,
    # normalhedge_router, none or fixed:<id>.
    default_policy: str | None = None
    # Counterfactual evaluation every n-th round (SelectorConfig.eval_every; None:
    # core.config.default_eval_every(device)).
    eval_every: int | None = Field(default=None, ge=1, le=64)
    # The prompt's last positions scored as learner feedback before the first round
    # (SelectorConfig.prompt_windows; None: core.config.PROMPT_WINDOWS, 0: off).
    prompt_windows: int | None = Field(default=None, ge=0, le=4096)
    # What a counterfactual learner minimises (SelectorConfig.loss; None: served_selector's
    # "time", each arm's measured cost per committed token with plain decoding as an arm,
    # core/selection/arm_costs.py): or the paper's acceptance losses "length" / "prob", which
    # draft every round.
    loss: Literal["length", "prob", "time"] | None = None
    # Hybrid trees (EngineConfig.hybrid): the id of a model-free member of the pool whose tree
    # is grafted at the root of every EAGLE-3 tree the learner chooses (on the demo pool,
    # "lookup": bench/results/model_free.md). None: off.
    hybrid: str | None = Field(default=None, min_length=1)
    # Rows of a verified tree the LM head computes up front (EngineConfig.verify_logits):
    # "auto" is "all", except "visited" on a CPU whose LM head is not packed
    # (core/batching/head_rows.py);
    # "visited" or "all" pins one.
    verify_logits: Literal["auto", "visited", "all"] | None = None
    # Canonical numerics (EngineConfig.deterministic): auto (on where the target can: greedy
    # output independent of policy, streaming, concurrency and history, in bf16 too), on
    # (refuse to start where it cannot), off (the library's kernels).
    deterministic: Literal["auto", "on", "off"] | None = None
    # What a request that leaves temperature / top_p / top_k out samples with: "auto" takes the
    # model's defaults (its generation_config.json, then the pool file's "generation_config"),
    # as vLLM does; "openai" the OpenAI API's (temperature 1, no top_p or top_k cut).
    generation_config: Literal["auto", "openai"] = "auto"
    # The operator's defaults over either, e.g. {"temperature": 0.7} (vLLM's
    # --override-generation-config); keys temperature, top_p, top_k.
    override_generation_config: dict[str, float] = Field(default_factory=dict)
    # Learner sessions (`hedgespec.session`) kept between requests, least recently used
    # forgotten first (SelectorConfig.max_sessions); 0 turns sessions off (every request
    # starts a fresh learner).
    max_sessions: int | None = Field(default=None, ge=0, le=1_000_000)
    # Intra-op threads for torch; None keeps torch's default (all cores). On a shared CPU box,
    # oversubscribed BLAS threads can make every round ~100x slower: set 1-2 there.
    torch_threads: int | None = Field(default=None, ge=1)

    # --- scheduling ----------------------------------------------------------------------------
    # Requests in the engine at once, one batched step (EngineConfig.max_running).
    max_running: int | None = Field(default=None, ge=1)
    # Tokens one engine step runs through the target: the round's trees, then prompt chunks
    # (EngineConfig.max_step_tokens); bounds a step's latency, so a long prompt never freezes
    # the streams.
    max_step_tokens: int | None = Field(default=None, ge=16)
    # False: the round-robin engine (one request's round per step), to compare
    # (EngineConfig.batching, bench/batching/batching_bench.py).
    batching: bool | None = None
    # Admitted requests waiting for a running slot; one more is answered 429 (DESIGN §4's
    # bounded queue: back-pressure instead of unbounded latency).
    max_queue: int = Field(default=64, ge=0)
    # The most choices one request may ask for (OpenAI `n`; prompts x `n` for completions):
    # each choice is a request of its own in the engine, so this caps what one client's
    # request can take of the running slots and the queue.
    max_n: int = Field(default=16, ge=1)
    # A request's deadline from admission (DESIGN §4: deadlines are enforced); past it the
    # engine aborts the request at its next round and the client gets a timeout error.
    request_timeout_s: float = Field(default=600.0, gt=0)
    # On shutdown, running requests get this long to finish before they are aborted.
    drain_timeout_s: float = Field(default=30.0, ge=0)
    # A short speculative and a short plain request before the server reports ready, so the
    # first client pays neither lazy setup nor (with `compile`) compilation (`--no-warmup`).
    warmup: bool = True

    @field_validator("api_keys", "cors_origins", "drafters", mode="before")
    @classmethod
    def _parse_list(cls, value: Any) -> Any:
        return _split_list(value)

    @field_validator("seed_pool", mode="before")
    @classmethod
    def _seed_pool_by_name(cls, value: Any) -> Any:
        """A bare name (no `/`, no `.json`) that is not a file names a shipped seed pool."""
        if isinstance(value, str) and value and "/" not in value and not value.endswith(".json"):
            shipped = SEED_POOLS_DIR / f"{value}.json"
            if not Path(value).exists() and shipped.is_file():
                return shipped
        return value

    @field_validator("override_generation_config", mode="before")
    @classmethod
    def _parse_sampling(cls, value: Any) -> Any:
        if isinstance(value, str):  # the CLI flag; the environment variable is parsed as JSON
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise ValueError(f"not JSON: {exc}") from exc
        return checked_sampling_defaults(value, "override_generation_config")

    @field_validator("default_policy")
    @classmethod
    def _check_policy(cls, value: str | None) -> str | None:
        named = (*LEARNER_NAMES, ROUTER_PRIOR, "none")
        if value is not None and value not in named and not value.startswith("fixed:"):
            raise ValueError(f"default_policy must be one of {named} or fixed:<id>")
        return value

    def drafter_dirs(self) -> list[tuple[str, Path]]:
        """`drafters` as (id, path) pairs; `id=path`, or a bare path whose name is the id."""
        pairs = []
        for item in self.drafters:
            drafter_id, sep, path = item.partition("=")
            if not sep:
                path, drafter_id = drafter_id, Path(drafter_id).name
            pairs.append((drafter_id.strip(), Path(path.strip())))
        return pairs

    def engine_config(self) -> EngineConfig:
        """Frozen engine configuration: the knobs given here over the core's defaults (the
        served tree and selector for the device, then EngineConfig's own)."""
        device = self.device or EngineConfig.device
        tree = replace(served_tree(device), **_given(
            top_k=self.tree_top_k, depth=self.tree_depth, total_tokens=self.tree_total_tokens))
        selector = replace(served_selector(device), **_given(
            policy=self.default_policy, loss=self.loss, eval_every=self.eval_every,
            prompt_windows=self.prompt_windows, max_sessions=self.max_sessions))
        return EngineConfig(
            device=device,
            dtype=auto_dtype(device) if self.dtype == "auto" else self.dtype,
            tree=tree,
            selector=selector,
            **_given(device_map=self.device_map, compile=self.compile,
                     max_context=self.max_context, batching=self.batching,
                     max_running=self.max_running, max_step_tokens=self.max_step_tokens,
                     verify_logits=self.verify_logits, hybrid=self.hybrid,
                     deterministic=self.deterministic),
        )


def _given(**knobs: Any) -> dict[str, Any]:
    """The knobs an operator set; a None one keeps the core's default."""
    return {name: value for name, value in knobs.items() if value is not None}
