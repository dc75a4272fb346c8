"""Where the served target comes from: a local directory, or a Hugging Face repo id
(`--target meta-llama/Llama-3.1-8B-Instruct`) fetched into `hf_cache_dir` on start."""

from __future__ import annotations

import logging
from pathlib import Path

from gateway.config import Settings

log = logging.getLogger(__name__)


def _hub_id(settings: Settings) -> str | None:
    from drafter_registry.target_hub import is_hub_id

    if settings.target is None:
        return None
    raw = str(settings.target)
    return raw if is_hub_id(raw) else None


def _token(settings: Settings) -> str | None:
    return settings.hf_token.get_secret_value() if settings.hf_token else None


def target_dir_for_engine(settings: Settings) -> Path | None:
    """The directory the engine loads; downloads a Hub target first (blocking: worker thread)."""
    repo_id = _hub_id(settings)
    if repo_id is None:
        return Path(settings.target).expanduser() if settings.target is not None else None
    from drafter_registry.target_hub import download_target

    log.info("downloading target %s into %s", repo_id, settings.hf_cache_dir)
    return download_target(repo_id, cache_dir=settings.hf_cache_dir, token=_token(settings))


def target_dir_for_validation(settings: Settings) -> Path | None:
    """A directory holding the target's config.json (enough to check drafters), without waiting
    for the weights of a Hub target."""
    repo_id = _hub_id(settings)
    if repo_id is None:
        return Path(settings.target).expanduser().resolve() if settings.target is not None else None
    from drafter_registry.target_hub import target_config_dir

    return target_config_dir(repo_id, cache_dir=settings.hf_cache_dir, token=_token(settings))
