"""Fetch a *target* model from the Hugging Face Hub into the local cache (deployments name the
target by repo id, e.g. `meta-llama/Llama-3.1-8B-Instruct`). Only configuration, tokenizer and
safetensors weights are fetched — never code (`*.py`): targets load without trust_remote_code.

`target_config_dir` fetches just `config.json` (seconds): enough to validate drafters against
the target while the weights are still downloading. `download_target` fetches the rest into the
same snapshot folder (huggingface_hub resumes and deduplicates blobs and locks concurrent
downloads of one file, so calling both from two threads is safe).
"""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import hf_hub_download, snapshot_download

from drafter_registry.errors import HubError, InvalidIdentifier
from drafter_registry.hub import _hub_errors
from drafter_registry.identifiers import validate_repo_id, validate_revision

TARGET_FILES = ("*.json", "*.safetensors", "tokenizer*", "*.model", "*.tiktoken", "*.txt")


def is_hub_id(value: str) -> bool:
    """True for `owner/name` that is not an existing local path."""
    if Path(value).expanduser().exists():
        return False
    try:
        validate_repo_id(value)
    except InvalidIdentifier:
        return False
    return "/" in value


def target_config_dir(repo_id: str, *, revision: str | None = None, cache_dir: str | Path,
                      token: str | None = None, endpoint: str | None = None) -> Path:
    """The local snapshot folder of the target, holding at least its config.json."""
    repo_id, revision = _checked(repo_id, revision)
    with _hub_errors(f"{repo_id}@{revision}", endpoint=endpoint or "the hub"):
        path = hf_hub_download(repo_id, "config.json", revision=revision, cache_dir=str(cache_dir),
                               token=token, endpoint=endpoint)
    return Path(path).parent


def download_target(repo_id: str, *, revision: str | None = None, cache_dir: str | Path,
                    token: str | None = None, endpoint: str | None = None) -> Path:
    """Download config, tokenizer and safetensors weights; returns the snapshot folder."""
    repo_id, revision = _checked(repo_id, revision)
    with _hub_errors(f"{repo_id}@{revision}", endpoint=endpoint or "the hub"):
        path = snapshot_download(repo_id, revision=revision, cache_dir=str(cache_dir), token=token,
                                 endpoint=endpoint, allow_patterns=list(TARGET_FILES))
    return Path(path)


def _checked(repo_id: str, revision: str | None) -> tuple[str, str]:
    try:
        return validate_repo_id(repo_id), validate_revision(revision or "main")
    except InvalidIdentifier as exc:
        raise HubError(str(exc)) from None
