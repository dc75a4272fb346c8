"""Download an EAGLE-3 drafter from the Hugging Face Hub into the standard HF cache.

Steps, all through the public `huggingface_hub` API:

1. `HfApi.model_info` resolves `revision` to a commit sha (everything after is pinned to it).
2. `HfApi.list_repo_tree` lists the sub-folder; only `config.json` and one weight format are
   taken (`model.safetensors`, or `model.safetensors.index.json` + its shards, or
   `pytorch_model.bin`). Nothing else is fetched, in particular no `*.py`: no remote code.
3. Each file's blob is fetched into `<cache>/models--owner--name/blobs/<etag>` through a stable
   `<etag>.incomplete` file with an HTTP Range request, checked against its size and hash, then
   `hf_hub_download` links it into `snapshots/<sha>/...` as usual.

Why step 3 stages the blob itself: since huggingface_hub 1.x, `hf_hub_download` writes to a
process-unique temporary file and deletes it on failure, so a download killed half way (crash,
restart, `kill -9`) starts again from byte 0; and its `http_get` hands data to the file in
10 MB pieces, which makes byte progress coarse. Streaming into a fixed name with the library's
own HTTP session (`get_session`, same proxies, headers and TLS settings) resumes from the bytes
already on disk and reports progress as bytes arrive. The check after the transfer compares the
sha256 (LFS files, whose ETag is the sha256) or the git blob sha1 (small files) with the ETag, so
a corrupt transfer fails instead of being served.

Every failure is raised as one `HubError` with a readable message (unknown or private repo, bad
revision, missing file, truncated or corrupt transfer, network or disk error).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from filelock import FileLock
from huggingface_hub import HfApi, constants, get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import repo_folder_name
from huggingface_hub.hf_api import RepoFile
from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

from drafter_registry.errors import HubError, HubNotFound, InvalidIdentifier
from drafter_registry.identifiers import validate_repo_id, validate_revision, validate_subfolder
from eagle3_format.weights import (
    CONFIG_FILE,
    SAFETENSORS_INDEX_FILE,
    no_weights,
    preferred_weight_file,
    shard_names,
)

ProgressCallback = Callable[[int, int], None]
"""`progress(bytes_done, bytes_total)`; may raise (e.g. `DownloadCancelled`) to stop the
download."""

SHA256_HEX_LEN, GIT_SHA1_HEX_LEN = 64, 40
MAX_STALLED_ATTEMPTS = 5  # consecutive network failures without a single new byte


@dataclass(frozen=True)
class DownloadResult:
    local_path: Path  # snapshot directory holding config.json and the weights
    commit_sha: str
    bytes_total: int  # size of the selected files
    files: tuple[str, ...]  # repo-relative paths
    bytes_transferred: int  # fetched by this call; less than bytes_total when resumed or cached


def download_drafter(
    *,
    repo_id: str,
    revision: str | None,
    subfolder: str | None,
    cache_dir: str | Path,
    progress: ProgressCallback | None = None,
    token: str | None = None,
    endpoint: str | None = None,
    progress_interval_s: float = 0.25,
) -> DownloadResult:
    """Download one drafter (config + weights) and return where it lies.

    `endpoint` defaults to `HF_ENDPOINT` (read by huggingface_hub at import), else huggingface.co.
    `progress` is called from this thread at most every `progress_interval_s` and at the end.
    """
    try:
        repo_id = validate_repo_id(repo_id)
        revision = validate_revision(revision or "main")
        subfolder = validate_subfolder(subfolder)
    except InvalidIdentifier as exc:
        raise HubError(str(exc)) from None
    where = f"{repo_id}@{revision}" + (f"/{subfolder}" if subfolder else "")
    cache = Path(cache_dir).expanduser().resolve()
    api = HfApi(endpoint=endpoint, token=token)
    with _hub_errors(where, endpoint=api.endpoint):
        cache.mkdir(parents=True, exist_ok=True)
        commit = _resolve_commit(api, repo_id, revision)
        remote = _select_files(api, repo_id=repo_id, commit=commit, subfolder=subfolder,
                               cache=cache, where=where, token=token)
        fetch = _Fetch(repo_id=repo_id, commit=commit, cache=cache, token=token,
                       endpoint=api.endpoint,
                       tracker=_Tracker(remote, progress, progress_interval_s))
        _check_free_space(cache, fetch.missing_bytes(remote))
        for file in remote:
            fetch.file(file)
        fetch.tracker.finish()
    local_path = cache / repo_folder_name(repo_id=repo_id, repo_type="model") / "snapshots" / commit
    return DownloadResult(
        local_path=local_path / subfolder if subfolder else local_path,
        commit_sha=commit,
        bytes_total=sum(f.size for f in remote),
        files=tuple(f.path for f in remote),
        bytes_transferred=fetch.tracker.transferred,
    )


# --- resolving what to fetch -------------------------------------------------------------------


def _resolve_commit(api: HfApi, repo_id: str, revision: str) -> str:
    sha = api.model_info(repo_id, revision=revision).sha
    if not sha:
        raise HubError(f"the hub did not resolve {repo_id}@{revision} to a commit")
    return sha


def _select_files(
    api: HfApi, *, repo_id: str, commit: str, subfolder: str | None, cache: Path, where: str,
    token: str | None,
) -> list[RepoFile]:
    entries = api.list_repo_tree(repo_id, path_in_repo=subfolder, revision=commit)
    files = {Path(e.path).name: e for e in entries if isinstance(e, RepoFile)}
    if CONFIG_FILE not in files:
        raise HubError(f"no {CONFIG_FILE} in {where}: not a drafter checkpoint")
    name = preferred_weight_file(files)
    if name is None:
        raise HubError(no_weights(where))
    if name == SAFETENSORS_INDEX_FILE:
        index = files[SAFETENSORS_INDEX_FILE]
        index_path = hf_hub_download(repo_id, index.path, revision=commit, cache_dir=cache,
                                     token=token, endpoint=api.endpoint)
        try:
            shards = shard_names(json.loads(Path(index_path).read_text(encoding="utf-8")))
        except ValueError as exc:  # not JSON, or a shard rule broken (DrafterConfigError)
            raise HubError(f"unusable {SAFETENSORS_INDEX_FILE} in {where}: {exc}") from None
        missing = [s for s in shards if s not in files]
        if missing:
            raise HubError(f"shards {missing} listed in {SAFETENSORS_INDEX_FILE} are missing from "
                           f"{where}")
        return [files[CONFIG_FILE], index, *(files[s] for s in shards)]
    return [files[CONFIG_FILE], files[name]]


def _check_free_space(cache: Path, needed: int) -> None:
    free = shutil.disk_usage(cache).free
    if needed > free:
        raise HubError(f"not enough disk space in {cache}: need {needed} bytes, {free} free")


# --- fetching one file -------------------------------------------------------------------------


class _Tracker:
    """Byte progress over all files: completed files plus the position in the current one."""

    def __init__(self, files: list[RepoFile], callback: ProgressCallback | None, interval: float):
        self.total = sum(f.size for f in files)
        self.completed = 0
        self.transferred = 0
        self._callback, self._interval, self._last = callback, interval, float("-inf")
        self._reported = -1

    def at(self, position: int, *, force: bool = False) -> None:
        done = min(self.completed + position, self.total)
        now = time.monotonic()
        if self._callback is None or (done == self._reported and not force):
            return
        if force or now - self._last >= self._interval:
            self._last, self._reported = now, done
            self._callback(done, self.total)

    def file_done(self, size: int) -> None:
        self.completed += size
        self.at(0)

    def finish(self) -> None:
        self.at(0, force=True)


@dataclass
class _Fetch:
    repo_id: str
    commit: str
    cache: Path
    token: str | None
    endpoint: str
    tracker: _Tracker

    @property
    def storage(self) -> Path:
        return self.cache / repo_folder_name(repo_id=self.repo_id, repo_type="model")

    def missing_bytes(self, files: list[RepoFile]) -> int:
        pointers = self.storage / "snapshots" / self.commit
        return sum(f.size for f in files if not (pointers / f.path).exists())

    def file(self, remote: RepoFile) -> None:
        if (self.storage / "snapshots" / self.commit / remote.path).exists():
            self.tracker.file_done(remote.size)  # already in the cache at this commit
            return
        url = hf_hub_url(self.repo_id, remote.path, revision=self.commit, endpoint=self.endpoint)
        try:
            meta = get_hf_file_metadata(url, token=self.token, endpoint=self.endpoint)
        except EntryNotFoundError:
            raise HubError(f"{remote.path} is listed but cannot be downloaded (not "
                           "found)") from None
        if not meta.etag:
            raise HubError(f"the hub sent no ETag for {remote.path}")
        blob = self.storage / "blobs" / meta.etag
        if not blob.exists():
            self._stage(blob, location=meta.location, size=meta.size, name=remote.path)
        hf_hub_download(self.repo_id, remote.path, revision=self.commit, cache_dir=self.cache,
                        token=self.token, endpoint=self.endpoint)
        self.tracker.file_done(remote.size)

    def _stage(self, blob: Path, *, location: str, size: int | None, name: str) -> None:
        """Fetch `blob` through `<blob>.incomplete`, resuming from whatever a previous try left."""
        blob.parent.mkdir(parents=True, exist_ok=True)
        locks = self.cache / ".locks" / self.storage.name
        locks.mkdir(parents=True, exist_ok=True)
        incomplete = blob.with_name(blob.name + ".incomplete")
        with FileLock(str(locks / f"{blob.name}.resume.lock")):
            if blob.exists():  # another process finished it while we waited
                return
            _transfer(location, incomplete, size=size, headers=self._headers(location),
                      tracker=self.tracker, name=name)
            _verify_blob(incomplete, etag=blob.name, name=name)
            os.replace(incomplete, blob)

    def _headers(self, location: str) -> dict[str, str]:
        headers = build_hf_headers(token=self.token)
        if _origin(location) != _origin(self.endpoint):
            headers.pop("authorization", None)  # never send the token to a CDN
        return headers


def _transfer(url: str, incomplete: Path, *, size: int | None, headers: dict[str, str],
              tracker: _Tracker, name: str) -> None:
    """GET `url` into `incomplete` from its current length on (HTTP Range), retrying transient
    network errors; each retry resumes where the last one stopped."""
    failures = 0
    while True:
        start = incomplete.stat().st_size if incomplete.exists() else 0
        if size is not None and start > size:
            incomplete.unlink()  # not the file we expect: start over
            continue
        if size is not None and start == size:
            return
        try:
            _get_range(url, incomplete, start=start, headers=headers, tracker=tracker)
        except TRANSPORT_ERRORS:
            grew = incomplete.exists() and incomplete.stat().st_size > start
            failures = 0 if grew else failures + 1
            if failures >= MAX_STALLED_ATTEMPTS:
                raise
            time.sleep(min(0.2 * 2**failures, 5.0))
            continue
        received = incomplete.stat().st_size
        if size is not None and received != size:
            incomplete.unlink()
            raise HubError(f"download of {name} was truncated: received {received} of {size} bytes")
        return


def _get_range(url: str, incomplete: Path, *, start: int, headers: dict[str, str],
               tracker: _Tracker) -> None:
    request_headers = {**headers, "Accept-Encoding": "identity"}
    if start:
        request_headers["Range"] = f"bytes={start}-"
    with get_session().stream("GET", url, headers=request_headers, follow_redirects=True,
                              timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT) as response:
        hf_raise_for_status(response)
        # A server that ignores Range answers 200 with the whole file: start over.
        mode = "ab" if start and response.status_code == 206 else "wb"
        with incomplete.open(mode) as f:
            tracker.at(f.tell(), force=True)
            # Network-sized chunks, written at once: progress stays live and a killed process
            # leaves on disk (almost) everything it received.
            for chunk in response.iter_raw():
                f.write(chunk)
                tracker.transferred += len(chunk)
                tracker.at(f.tell())


def _verify_blob(path: Path, *, etag: str, name: str) -> None:
    """Compare the bytes with the ETag: sha256 for LFS files, git's blob sha1 otherwise."""
    if len(etag) == SHA256_HEX_LEN:
        digest = hashlib.sha256()
    elif len(etag) == GIT_SHA1_HEX_LEN:
        digest = hashlib.sha1(usedforsecurity=False)
        digest.update(b"blob %d\0" % path.stat().st_size)
    else:
        return  # an ETag we cannot interpret; size was checked by http_get
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    if digest.hexdigest() != etag.lower():
        path.unlink(missing_ok=True)  # never resume from corrupt bytes
        raise HubError(f"{name} is corrupt: its content does not match the hub's checksum {etag}")


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


# --- error mapping -----------------------------------------------------------------------------


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Network errors of whichever HTTP client this huggingface_hub version uses."""
    found: list[type[BaseException]] = []
    for module, name in (("httpx2", "RequestError"), ("httpx", "RequestError"),
                         ("requests", "RequestException")):
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


TRANSPORT_ERRORS = _transport_errors()


@contextmanager
def _hub_errors(where: str, *, endpoint: str) -> Iterator[None]:
    try:
        yield
    except HubError:
        raise
    except GatedRepoError:
        raise HubError(f"{where}: the repository is gated; accept its terms and set a "
                       "token") from None
    except RepositoryNotFoundError:
        raise HubNotFound(
            f"repository {where.split('@')[0]!r} not found on {endpoint} (or private: set a token)"
        ) from None
    except RevisionNotFoundError:
        raise HubNotFound(f"revision not found: {where}") from None
    except OfflineModeIsEnabled:
        raise HubError(f"HF_HUB_OFFLINE is set: {where} cannot be fetched from {endpoint} "
                       "(unset it, or use drafters already on disk with source 'local')") from None
    except LocalEntryNotFoundError as exc:
        raise HubError(f"cannot reach the hub at {endpoint} for {where}: {_cause(exc)}") from None
    except EntryNotFoundError:
        raise HubNotFound(f"not found in the repository: {where}") from None
    except HfHubHTTPError as exc:
        raise HubError(f"hub error for {where}: {_first_line(exc)}") from None
    except TRANSPORT_ERRORS as exc:
        raise HubError(f"cannot reach the hub at {endpoint} for {where}: {exc}") from None
    except OSError as exc:
        raise HubError(_describe_os_error(exc, where)) from None


def _describe_os_error(exc: OSError, where: str) -> str:
    text = _first_line(exc)
    if "Consistency check failed" in text:
        return f"download of {where} was truncated: {text}"
    if exc.strerror:
        return f"disk error while downloading {where}: {exc.strerror} ({exc.filename or 'cache'})"
    return f"download of {where} failed: {text}"


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__
    return _first_line(cause) if cause is not None else _first_line(exc)
