"""The gateway's one settings object.

Every knob comes from, in order of precedence: keyword arguments (the CLI passes its flags
this way), `HEDGESPEC_*` environment variables, a `.env` file in the working directory, and the
defaults below. Nothing is read at import time: `create_app` builds `Settings()` once.

List settings (`HEDGESPEC_API_KEYS`, `HEDGESPEC_CORS_ORIGINS`, `HEDGESPEC_DRAFTERS`) accept
either a JSON list or a comma-separated string, because `k1,k2` is what operators type.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from core.config import (
    LEARNER_NAMES,
    PROMPT_WINDOWS,
    ROUTER_PRIOR,
    EngineConfig,
    SelectorConfig,
    TreeConfig,
    default_eval_every,
    served_tree,
)
from core.precision import auto_dtype
from core.sampling_defaults import checked_sampling_defaults

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_POOL = REPO_ROOT / "demo" / "pool" / "pool.json"
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
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    log_level: str = "info"
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    max_body_bytes: int = Field(default=1 << 20, ge=1024)
    sse_ping_s: float = Field(default=15.0, ge=0.0)  # keep-alive comment frames; 0 disables

    # --- security (SecretStr keeps keys out of reprs and logs) -----------------------------
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(default_factory=list)
    admin_key: SecretStr | None = None
    # Per-client token bucket for /v1/* (gateway/http/ratelimit.py): sustained requests per second
    # per API key (per client address without one); None = no limit. Burst default: ceil(rps).
    rate_limit_rps: float | None = Field(default=None, gt=0)
    rate_limit_burst: int | None = Field(default=None, ge=1)

    # --- model pool ---------------------------------------------------------------------------
    pool: Path | None = DEFAULT_POOL  # pool.json; ignored when `target` is set
    target: Path | None = None  # a target directory, served with `drafters`
    drafters: Annotated[list[str], NoDecode] = Field(default_factory=list)  # "id=path"
    model_name: str | None = None  # served model id; default: the engine's name
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
    device: str = "cpu"
    # "auto": bf16 where the device computes it natively (a CPU with AVX512-BF16/AMX, a GPU),
    # else fp32 (core/precision.py; measured in bench/results/cpu_defaults.md). Greedy output
    # is token-identical to plain decoding in float32 only.
    dtype: str = "auto"
    device_map: str | None = None  # "auto": spread a target too big for one GPU over all GPUs
    compile: bool = False  # torch.compile the target (GPU; see bench/results/gpu_check.md)
    max_context: int | None = Field(default=None, ge=16)
    tree_top_k: int | None = Field(default=None, ge=1)
    tree_depth: int | None = Field(default=None, ge=1)
    # Drafted nodes, root not counted: EAGLE's total_token - 1 (core.config.TreeConfig).
    tree_total_tokens: int | None = Field(default=None, ge=1)
    default_policy: str = "normalhedge"  # what `hedgespec.policy: auto` means
    # Counterfactual evaluation every n-th round (core.config.SelectorConfig.eval_every);
    # None: 4 on a CPU, 1 elsewhere (core.config.default_eval_every).
    eval_every: int | None = Field(default=None, ge=1, le=64)
    # The prompt's last positions scored as learner feedback before the first round
    # (core.config.SelectorConfig.prompt_windows); None: core.config.PROMPT_WINDOWS, 0: off.
    prompt_windows: int | None = Field(default=None, ge=0, le=4096)
    # What a counterfactual learner minimises (core.config.SelectorConfig.loss): the paper's
    # acceptance losses "length" (default) / "prob", or "time", each arm's measured cost per
    # committed token with plain decoding as an arm (core/arm_costs.py; slower than "length"
    # on the demo pool at 1-2 streams, bench/results/time_loss_held_out.md).
    loss: Literal["length", "prob", "time"] = "length"
    # Hybrid trees (core.config.EngineConfig.hybrid): the id of a model-free member of the pool
    # whose tree is grafted at the root of every EAGLE-3 tree the learner chooses (on the demo
    # pool, "lookup": bench/results/model_free.md). None: off.
    hybrid: str | None = Field(default=None, min_length=1)
    # Rows of a verified tree the LM head computes up front (core.config.EngineConfig
    # .verify_logits): "auto" measures both on a CPU and keeps the faster (core/head_rows.py),
    # "visited" or "all" pins one (reproducible benchmarks).
    verify_logits: Literal["auto", "visited", "all"] = "auto"
    # Whether batched steps draft (core.config.EngineConfig.speculation): "auto" measures, per
    # batch size, speculative against plain steps and keeps the faster (core/spec_gate.py);
    # "always" drafts every step (benchmarks that compare policies).
    speculation: Literal["auto", "always"] = "auto"
    # What a request that leaves temperature / top_p / top_k out samples with: "auto" takes the
    # model's defaults (its generation_config.json, then the pool file's "generation_config"),
    # as vLLM does; "openai" the OpenAI API's (temperature 1, no top_p or top_k cut).
    generation_config: Literal["auto", "openai"] = "auto"
    # The operator's defaults over either, e.g. {"temperature": 0.7} (vLLM's
    # --override-generation-config); keys temperature, top_p, top_k.
    override_generation_config: dict[str, float] = Field(default_factory=dict)
    # Learner sessions (`hedgespec.session`) kept between requests, least recently used
    # forgotten first; 0 turns sessions off (every request starts a fresh learner).
    max_sessions: int = Field(default=4096, ge=0, le=1_000_000)
    # Intra-op threads for torch; None keeps torch's default (all cores). On a shared CPU box,
    # oversubscribed BLAS threads can make every round ~100x slower: set 1-2 there.
    torch_threads: int | None = Field(default=None, ge=1)

    # --- scheduling ----------------------------------------------------------------------------
    max_running: int = Field(default=16, ge=1)  # requests in the engine at once (one batched step)
    # Tokens one engine step runs through the target: the round's trees, then prompt chunks
    # (core/scheduler.py); bounds a step's latency, so a long prompt never freezes the streams.
    max_step_tokens: int = Field(default=512, ge=16)
    # Off: the round-robin engine (one request's round per step), to compare (bench/batching.py).
    batching: bool = True
    max_queue: int = Field(default=64, ge=0)  # admitted requests waiting for a running slot
    max_n: int = Field(default=16, ge=1)
    request_timeout_s: float = Field(default=600.0, gt=0)
    drain_timeout_s: float = Field(default=30.0, ge=0)
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
    def _check_policy(cls, value: str) -> str:
        named = (*LEARNER_NAMES, ROUTER_PRIOR, "none")
        if value not in named and not value.startswith("fixed:"):
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
        """Frozen engine configuration; unset knobs keep the core's measured defaults."""
        tree_defaults = served_tree(self.device)
        tree = TreeConfig(
            top_k=self.tree_top_k or tree_defaults.top_k,
            depth=self.tree_depth or tree_defaults.depth,
            total_tokens=self.tree_total_tokens or tree_defaults.total_tokens,
        )
        extra: dict[str, Any] = {}
        if self.max_context is not None:
            extra["max_context"] = self.max_context
        if self.device_map is not None:
            extra["device_map"] = self.device_map
        return EngineConfig(
            compile=self.compile,
            device=self.device,
            dtype=auto_dtype(self.device) if self.dtype == "auto" else self.dtype,
            tree=tree,
            selector=SelectorConfig(policy=self.default_policy, max_sessions=self.max_sessions,
                                    eval_every=self.eval_every
                                    or default_eval_every(self.device),
                                    prompt_windows=PROMPT_WINDOWS if self.prompt_windows is None
                                    else self.prompt_windows, loss=self.loss),
            batching=self.batching,
            max_running=self.max_running,
            max_step_tokens=self.max_step_tokens,
            verify_logits=self.verify_logits,
            speculation=self.speculation,
            hybrid=self.hybrid,
            **extra,
        )
