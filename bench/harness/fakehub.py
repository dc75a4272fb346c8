"""A fake Hugging Face Hub on loopback, speaking the endpoints `huggingface_hub` really calls.

Endpoints (as read from huggingface_hub 2.4: `HfApi.model_info`, `HfApi.list_repo_tree`,
`get_hf_file_metadata`, `hf_hub_download`, `http_get`):

- `GET /api/models/{repo}` and `/api/models/{repo}/revision/{rev}`: model info with `sha` and
  `siblings` (sizes, blob ids and LFS info with `?blobs=True`).
- `GET /api/models/{repo}/tree/{rev}[/{path}]`: one directory level (or all with `recursive`).
- `HEAD|GET /{repo}/resolve/{rev}/{path}`: the file, with `X-Repo-Commit` and `ETag` (git blob
  sha1). LFS files (weights) answer like the real Hub: a 302 to a CDN on another host name
  (`localhost` instead of `127.0.0.1`), carrying `X-Linked-Etag` (sha256) and `X-Linked-Size`.
- `HEAD|GET /cdn/{repo}/{commit}/{path}`: the CDN, with `Range` support (resume).

Errors carry the `X-Error-Code` header the client maps to exceptions (`RepoNotFound`,
`RevisionNotFound`, `EntryNotFound`). Faults can be injected per file (`hub.faults[path]`):
`"truncate_once"` (close the first body half way), `"short"` (send and declare fewer bytes than
the file has), `"corrupt"` (flip bytes, same length), `"missing"` (listed but 404 on download),
`"status:<code>"` (an HTTP error), and `hub.throttle_bps` slows bodies down (progress and kill
tests). `hub.bytes_served[path]` counts body bytes actually sent.

Usage: `with FakeHub() as hub: sha = hub.add_repo("org/drafters", {"py/config.json": b"{}"})`,
then point a client at `hub.url` (`endpoint=` argument or `HF_ENDPOINT` in a subprocess).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, quote, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
CHUNK = 16 * 1024


@dataclass(frozen=True)
class Blob:
    data: bytes
    git_oid: str  # sha1 of "blob <size>\0" + data, as git computes it
    sha256: str
    lfs: bool

    @classmethod
    def of(cls, path: str, data: bytes) -> Blob:
        git = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        return cls(data, git, hashlib.sha256(data).hexdigest(), path.endswith(LFS_SUFFIXES))

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.git_oid


@dataclass
class Repo:
    commits: dict[str, dict[str, Blob]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    token: str | None = None  # private repo: requests need `Authorization: Bearer <token>`

    def resolve(self, revision: str) -> str | None:
        if revision in self.refs:
            return self.refs[revision]
        return revision if revision in self.commits else None


class HubError(Exception):
    def __init__(self, status: int, code: str | None, message: str, commit: str | None = None):
        super().__init__(message)
        self.status, self.code, self.commit = status, code, commit


class FakeHub:
    def __init__(self, *, lfs_redirect: bool = True) -> None:
        self.repos: dict[str, Repo] = {}
        self.faults: dict[str, str] = {}
        self.throttle_bps: float | None = None
        self.lfs_redirect = lfs_redirect
        self.bytes_served: Counter[str] = Counter()
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._fired: set[str] = set()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- content ---------------------------------------------------------------------------

    def add_repo(
        self,
        repo_id: str,
        files: Mapping[str, bytes],
        *,
        branch: str = "main",
        tags: tuple[str, ...] = (),
        token: str | None = None,
    ) -> str:
        """Add a commit with exactly `files` on `branch` (creating the repo); returns its sha."""
        repo = self.repos.setdefault(repo_id, Repo(token=token))
        blobs = {path: Blob.of(path, data) for path, data in files.items()}
        manifest = json.dumps({p: b.git_oid for p, b in sorted(blobs.items())}).encode()
        sha = hashlib.sha1(repo_id.encode() + manifest
                           + str(len(repo.commits)).encode()).hexdigest()
        repo.commits[sha] = blobs
        for ref in (branch, *tags):
            repo.refs[ref] = sha
        return sha

    def add_directory(self, repo_id: str, root: Path, **kwargs: Any) -> str:
        files = {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
                 if p.is_file()}
        return self.add_repo(repo_id, files, **kwargs)

    # --- server ----------------------------------------------------------------------------

    @property
    def port(self) -> int:
        assert self._server is not None, "FakeHub is not started"
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def cdn_url(self) -> str:
        # Another host name for the same socket: the client treats it as a foreign CDN.
        return f"http://localhost:{self.port}"

    def start(self) -> FakeHub:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="fakehub", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- lookups used by the handler -------------------------------------------------------

    def lookup(self, repo_id: str, revision: str, auth: str | None) -> tuple[Repo, str]:
        repo = self.repos.get(repo_id)
        if repo is None or (repo.token is not None and auth != f"Bearer {repo.token}"):
            status = 401 if repo is not None else 404
            raise HubError(status, "RepoNotFound", f"Repository {repo_id} not found")
        commit = repo.resolve(revision)
        if commit is None:
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return repo, commit

    def fault(self, path: str) -> str | None:
        kind = self.faults.get(path)
        with self._lock:
            if kind == "truncate_once":
                if path in self._fired:
                    return None
                self._fired.add(path)
        return kind

    def count(self, path: str, n: int) -> None:
        with self._lock:
            self.bytes_served[path] += n


def _tree_entries(blobs: dict[str, Blob], folder: str, recursive: bool) -> list[dict[str, Any]]:
    prefix = f"{folder}/" if folder else ""
    entries: dict[str, dict[str, Any]] = {}
    for path, blob in sorted(blobs.items()):
        if not path.startswith(prefix):
            continue
        rest = path[len(prefix):]
        # Folders below `folder`: only the first level, or every level when recursive.
        levels = rest.split("/")[:-1] if recursive else rest.split("/")[:1] if "/" in rest else []
        for depth in range(1, len(levels) + 1):
            sub = prefix + "/".join(levels[:depth])
            entries[sub] = {"type": "directory", "oid": hashlib.sha1(sub.encode()).hexdigest(),
                            "path": sub}
        if "/" in rest and not recursive:
            continue
        entry: dict[str, Any] = {"type": "file", "oid": blob.git_oid, "size": len(blob.data),
                                 "path": path}
        if blob.lfs:
            entry["lfs"] = {"oid": blob.sha256, "size": len(blob.data), "pointerSize": 134}
        entries[path] = entry
    return list(entries.values())


class _HubHandler(BaseHTTPRequestHandler):
    """Serves one `FakeHub`; `_handler_for` binds `hub` in a subclass per server."""

    hub: ClassVar[FakeHub]
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:
        self._dispatch(body=True)

    def do_HEAD(self) -> None:
        self._dispatch(body=False)

    def _dispatch(self, *, body: bool) -> None:
        split = urlsplit(self.path)
        self.hub.requests.append((self.command, split.path))
        parts = split.path.strip("/").split("/")
        try:
            if parts[:2] == ["api", "models"] and len(parts) >= 4:
                self._api(parts[2] + "/" + parts[3], parts[4:], parse_qs(split.query))
            elif parts[0] == "cdn" and len(parts) >= 5:
                self._cdn(parts[1] + "/" + parts[2], parts[3], unquote("/".join(parts[4:])), body)
            elif len(parts) >= 5 and parts[2] == "resolve":
                self._resolve(parts[0] + "/" + parts[1], unquote(parts[3]),
                              unquote("/".join(parts[4:])), body)
            else:
                raise HubError(404, None, f"no route for {split.path}")
        except HubError as exc:
            self._error(exc, body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away (killed download)

    # --- /api/models ---------------------------------------------------------------

    def _api(self, repo_id: str, rest: list[str], query: dict[str, list[str]]) -> None:
        auth = self.headers.get("Authorization")
        if not rest or rest[0] == "revision":
            revision = unquote(rest[1]) if len(rest) > 1 else "main"
            repo, commit = self.hub.lookup(repo_id, revision, auth)
            self._json(self._model_info(repo_id, repo, commit, "blobs" in query))
        elif rest[0] == "tree" and len(rest) >= 2:
            repo, commit = self.hub.lookup(repo_id, unquote(rest[1]), auth)
            folder = unquote("/".join(rest[2:])).strip("/")
            recursive = query.get("recursive", ["False"])[0].lower() == "true"
            entries = _tree_entries(repo.commits[commit], folder, recursive)
            if folder and not entries:
                raise HubError(404, "EntryNotFound", f"{folder} does not exist", commit)
            self._json(entries)
        else:
            raise HubError(404, None, "unknown api route")

    def _model_info(self, repo_id: str, repo: Repo, commit: str, blobs: bool) -> dict[str, Any]:
        siblings = []
        for path, blob in sorted(repo.commits[commit].items()):
            sibling: dict[str, Any] = {"rfilename": path}
            if blobs:
                sibling.update(size=len(blob.data), blobId=blob.git_oid)
                if blob.lfs:
                    sibling["lfs"] = {"size": len(blob.data), "sha256": blob.sha256,
                                      "pointerSize": 134}
            siblings.append(sibling)
        return {"_id": commit[:24], "id": repo_id, "modelId": repo_id, "sha": commit,
                "private": repo.token is not None, "tags": [], "downloads": 0, "likes": 0,
                "lastModified": "2025-01-01T00:00:00.000Z", "siblings": siblings}

    # --- /resolve and the CDN ------------------------------------------------------

    def _resolve(self, repo_id: str, revision: str, path: str, body: bool) -> None:
        repo, commit = self.hub.lookup(repo_id, revision, self.headers.get("Authorization"))
        blob = repo.commits[commit].get(path)
        fault = self.hub.faults.get(path)
        if blob is None or fault == "missing":
            raise HubError(404, "EntryNotFound", f"{path} not found", commit)
        if fault and fault.startswith("status:"):
            raise HubError(int(fault.split(":")[1]), None, "injected failure", commit)
        headers = {"X-Repo-Commit": commit, "ETag": f'"{blob.git_oid}"'}
        if blob.lfs:
            headers.update({"X-Linked-Etag": f'"{blob.sha256}"',
                            "X-Linked-Size": str(len(blob.data))})
        if blob.lfs and self.hub.lfs_redirect:
            location = f"{self.hub.cdn_url}/cdn/{repo_id}/{commit}/{quote(path)}"
            self._send(302, {**headers, "Location": location, "Content-Length": "0"})
            return
        self._file(path, blob, {**headers, "ETag": f'"{blob.etag}"'}, body)

    def _cdn(self, repo_id: str, commit: str, path: str, body: bool) -> None:
        blob = self.hub.repos.get(repo_id, Repo()).commits.get(commit, {}).get(path)
        if blob is None:
            raise HubError(404, None, "no such object")
        self._file(path, blob, {"ETag": f'"{blob.sha256}"'}, body)

    def _file(self, path: str, blob: Blob, headers: dict[str, str], body: bool) -> None:
        data, status = blob.data, 200
        fault = self.hub.fault(path) if body else None  # HEAD always tells the truth
        if fault == "corrupt":
            data = bytes(b ^ 0xFF for b in data[:64]) + data[64:]
        if fault == "short":
            data = data[: len(data) // 2]
        start = _range_start(self.headers.get("Range"))
        if start:
            if start >= len(data):
                raise HubError(416, None, "range not satisfiable")
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            data, status = data[start:], 206
        headers.update({"Content-Length": str(len(data)), "Accept-Ranges": "bytes",
                        "Content-Type": "application/octet-stream"})
        self._send(status, headers)
        if body:
            self._body(path, data[: len(data) // 2] if fault == "truncate_once" else data)
            if fault == "truncate_once":
                self.close_connection = True

    def _body(self, path: str, data: bytes) -> None:
        rate = self.hub.throttle_bps
        for offset in range(0, len(data), CHUNK):
            chunk = data[offset: offset + CHUNK]
            self.wfile.write(chunk)
            self.wfile.flush()
            self.hub.count(path, len(chunk))
            if rate:
                time.sleep(len(chunk) / rate)

    # --- plumbing ------------------------------------------------------------------

    def _send(self, status: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()

    def _json(self, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self._send(200, {"Content-Type": "application/json", "Content-Length": str(len(data))})
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, exc: HubError, body: bool) -> None:
        data = json.dumps({"error": str(exc)}).encode()
        headers = {"Content-Type": "application/json", "Content-Length": str(len(data)),
                   "X-Error-Message": str(exc)}
        if exc.code:
            headers["X-Error-Code"] = exc.code
        if exc.commit:
            headers["X-Repo-Commit"] = exc.commit
        self._send(exc.status, headers)
        if body:
            self.wfile.write(data)


def _handler_for(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    """A request handler class serving `hub` (the server makes one instance per connection)."""
    return type("Handler", (_HubHandler,), {"hub": hub})


def _range_start(header: str | None) -> int:
    """Start of a `bytes=N-` range (the only form a resuming client sends)."""
    if not header or not header.startswith("bytes="):
        return 0
    return int(header[len("bytes="):].split("-")[0] or 0)
