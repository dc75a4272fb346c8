"""Exceptions of the drafter registry, one module so the gateway maps them to HTTP in one place:

| exception | meaning | suggested HTTP status |
|---|---|---|
| `InvalidIdentifier`, `InvalidDrafter` | bad input (also `ValueError`) | 422 |
| `DrafterNotFound` | no drafter with that id | 404 |
| `DrafterConflict` | id or name already taken | 409 |
| `StatusConflict` | transition not allowed from the current status | 409 |
| `HubError` | a download failed; the message is meant for the operator | stored in `drafters.error` |
| `HubNotFound` | the repository or revision does not exist (or is private) | 404 |
| `NothingDiscovered` | a repository folder holds no usable drafter | 404 |
| `CheckpointError` | downloaded files are not a usable checkpoint | stored in `drafters.error` |
"""  # noqa: E501

from __future__ import annotations


class RegistryError(Exception):
    """Base class: every message is readable as is by an operator."""


class InvalidIdentifier(RegistryError, ValueError):
    """A drafter id, repo id, revision, sub-folder or tag that must not be used."""


class InvalidDrafter(RegistryError, ValueError):
    """A drafter specification whose fields do not fit together (e.g. `hf` without `repo_id`)."""


class DrafterNotFound(RegistryError, LookupError):
    def __init__(self, drafter_id: str) -> None:
        super().__init__(f"drafter {drafter_id!r} not found")
        self.drafter_id = drafter_id


class DrafterConflict(RegistryError):
    """The id or the name is already used by another drafter."""


class StatusConflict(RegistryError):
    """The drafter is not in a status that allows the requested change."""


class HubError(RegistryError):
    """Downloading from the Hugging Face Hub failed (unknown repo, bad revision, missing or corrupt
    file, network or disk error)."""


class HubNotFound(HubError, LookupError):
    """The repository, revision or path does not exist on the hub (or is private without a
    token)."""


class NothingDiscovered(RegistryError, LookupError):
    """Discovery found no usable drafter under the given repository folder."""


class DownloadCancelled(HubError):
    """The download was stopped on purpose (drafter disabled or deleted meanwhile)."""


class CheckpointError(RegistryError):
    """A drafter directory is not a readable EAGLE-3 checkpoint (missing, truncated or corrupt)."""
