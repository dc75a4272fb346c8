"""Validation of the names that reach a file system or a URL: drafter ids, repo ids, revisions,
sub-folders and domain tags.

Every check is a pure function that returns the normalised value or raises `InvalidIdentifier`
with a message fit for an API error. The rules are deliberately stricter than the Hub's own
so that nothing an admin types can escape the download cache (`..`, absolute paths, backslashes)
or be read as a command-line option (leading `-`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from drafter_registry.errors import InvalidDrafter, InvalidIdentifier

DRAFTER_ID_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}", re.ASCII)
# One part of `owner/name`: the Hub allows letters, digits, `.`, `_`, `-`, at most 96 characters.
REPO_PART_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}", re.ASCII)
REVISION_RE = re.compile(r"[A-Za-z0-9._/-]{1,255}", re.ASCII)
SUBFOLDER_PART_RE = re.compile(r"[A-Za-z0-9._+=@-]{1,128}", re.ASCII)
DOMAIN_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}", re.ASCII)
COMMIT_SHA_RE = re.compile(r"[0-9a-f]{40}", re.ASCII)
# A drafter kind: `eagle3` or a model-free kind's name (which ones exist is the engine's list).
KIND_RE = re.compile(r"[a-z][a-z0-9_]{0,31}", re.ASCII)
PARAM_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,63}", re.ASCII)
MAX_PARAMS = 32

MAX_SUBFOLDER_DEPTH = 8
MAX_LOCAL_PATH_CHARS = 4096


def validate_drafter_id(value: str) -> str:
    """Drafter ids appear in `fixed:<id>` policies, URLs and metric labels."""
    if not DRAFTER_ID_RE.fullmatch(value) or ".." in value:
        raise InvalidIdentifier(
            f"invalid drafter id {value!r}: use 1-64 characters from a-z 0-9 . _ -,"
            " starting with a letter or digit, without '..'"
        )
    return value


def validate_repo_id(value: str) -> str:
    """`owner/name`, as on the Hub; no `..` or `--`, no trailing `.` or `-`."""
    parts = value.split("/")
    ok = len(parts) == 2 and all(
        REPO_PART_RE.fullmatch(p) and not p.endswith((".", "-")) for p in parts
    )
    if not ok or ".." in value or "--" in value:
        raise InvalidIdentifier(
            f"invalid repo id {value!r}: expected 'owner/name' with letters, digits, '.', '_', '-'"
        )
    return value


def validate_revision(value: str) -> str:
    """A branch, tag or commit sha. Slashes are allowed (`refs/pr/1`), traversal is not."""
    bad = (
        not REVISION_RE.fullmatch(value)
        or ".." in value
        or "//" in value
        or value.startswith(("/", "-", "."))
        or value.endswith(("/", ".", ".lock"))
    )
    if bad:
        raise InvalidIdentifier(
            f"invalid revision {value!r}: use a branch, tag or 40-hex commit sha"
            " (letters, digits, '.', '_', '-', '/'; no '..', no leading '/' or '-')"
        )
    return value


def validate_subfolder(value: str | None) -> str | None:
    """A relative POSIX path inside the repo; `None` or `""` means the repo root."""
    if value is None or value.strip("/") == "":
        return None
    trimmed = value.rstrip("/")
    parts = trimmed.split("/")
    bad = (
        "\\" in value
        or value.startswith("/")
        or len(parts) > MAX_SUBFOLDER_DEPTH
        or any(p in (".", "..") or not SUBFOLDER_PART_RE.fullmatch(p) for p in parts)
    )
    if bad:
        raise InvalidIdentifier(
            f"invalid subfolder {value!r}: expected a relative path like 'llama3_python'"
            " (no '..' segments, no leading '/', no backslashes)"
        )
    return trimmed


def validate_domain(value: str) -> str:
    """Domain tags (`python`, `medical`, ...) are lower-case labels."""
    lowered = value.strip().lower()
    if not DOMAIN_RE.fullmatch(lowered):
        raise InvalidIdentifier(f"invalid domain tag {value!r}: use 1-64 characters a-z 0-9 _ -")
    return lowered


def validate_local_path(value: str) -> str:
    """Local drafter directories are chosen by an operator; only reject what no path can be."""
    if not value.strip() or "\x00" in value or len(value) > MAX_LOCAL_PATH_CHARS:
        raise InvalidIdentifier("invalid local path: empty, too long or containing NUL")
    return value


def validate_kind(value: str) -> str:
    """`eagle3` or the name of a model-free kind (`ngram`, `suffix`); the gateway checks that
    the engine knows it."""
    if not isinstance(value, str) or not KIND_RE.fullmatch(value):
        raise InvalidIdentifier(
            f"invalid drafter kind {value!r}: use 1-32 characters a-z 0-9 _, starting with a letter"
        )
    return value


def validate_params(kind: str, params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A model-free drafter's parameters as a JSON object of named values (`{}` if none given);
    `None` for `eagle3`, which takes none. Their names and values are checked by the gateway
    against the engine's kinds; here only that they can be stored."""
    if kind == "eagle3":
        if params:
            raise InvalidDrafter("params are for model-free drafters; an eagle3 drafter takes none")
        return None
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise InvalidDrafter("params must be a JSON object of parameter names to values")
    if len(params) > MAX_PARAMS:
        raise InvalidDrafter(f"at most {MAX_PARAMS} params")
    for name, value in params.items():
        if not isinstance(name, str) or not PARAM_NAME_RE.fullmatch(name):
            raise InvalidIdentifier(f"invalid parameter name {name!r}: use a-z 0-9 _")
        if not isinstance(value, (bool, int, float, str)) or len(str(value)) > 256:
            raise InvalidDrafter(f"parameter {name!r} must be a number, got {value!r}")
    return dict(params)


def slugify_drafter_id(name: str) -> str:
    """A valid drafter id derived from a display name (`"Llama 3.1 Python"` ->
    `llama-3.1-python`)."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", name.strip().lower())
    slug = re.sub(r"\.{2,}", ".", slug).strip("-._")[:64].rstrip("-._")
    return slug or "drafter"


def validate_source_fields(
    *,
    source: str,
    repo_id: str | None,
    revision: str | None,
    subfolder: str | None,
    path: str | None,
    kind: str = "eagle3",
) -> None:
    """`hf` drafters name a repo and never a local path; `local` drafters the reverse; model-free
    drafters (any kind but `eagle3`) have source `none` and neither."""
    if kind != "eagle3" or source == "none":
        if kind == "eagle3":
            raise InvalidDrafter("source 'none' is for model-free drafters; an eagle3 drafter "
                                 "needs source 'hf' or 'local'")
        if source != "none":
            raise InvalidDrafter(f"a model-free drafter (kind {kind!r}) has no weights: its "
                                 "source is 'none'")
        if repo_id or revision or subfolder or path:
            raise InvalidDrafter(f"a model-free drafter (kind {kind!r}) takes params, not "
                                 "repo_id/revision/subfolder/path")
        return
    if source == "hf":
        if not repo_id:
            raise InvalidDrafter("source 'hf' requires repo_id")
        if path:
            raise InvalidDrafter("source 'hf' takes repo_id/revision/subfolder, not path")
    elif source == "local":
        if not path:
            raise InvalidDrafter("source 'local' requires path")
        if repo_id or revision or subfolder:
            raise InvalidDrafter("source 'local' takes path, not repo_id/revision/subfolder")
    else:
        raise InvalidDrafter(f"unknown source {source!r}: expected 'hf' or 'local' ('none' for "
                             "model-free drafters)")
