"""Discovery: register every drafter of a multi-drafter Hub repository from a folder prefix.

Repositories such as `aladinggit/hedgespec_eagle_drafters` (the HedgeSpec paper's drafters)
keep one drafter per sub-folder, e.g. `lm318/model/<domain>/`. Instead of guessing folder
names, an operator names the repository and a folder prefix; discovery then

1. resolves the revision to a commit (`HfApi.model_info`) and lists the repository's files at
   that commit in one paginated call (`HfApi.list_repo_tree(recursive=True)`);
2. takes every folder under the prefix that holds a `config.json` as a candidate, fetches those
   configs (a few KB each, into the same HF cache the downloader uses) and keeps the folders
   whose config is an EAGLE-3 drafter's and that hold weights in a supported format;
3. turns each kept folder into a `DrafterCreate` (id and domain from the folder name) and
   registers it in status `pending`, exactly like `crud.create_drafter_from_spec`: the fetcher
   then downloads it and validates it against the served target before it serves.

Hub access goes through `drafter_registry.hub` (`_hub_errors`): the same endpoint (`HF_ENDPOINT`
or the explicit one), token and `HF_HUB_OFFLINE` rules as downloads, and the same readable
`HubError` messages. Folders that are not drafters are reported as `skipped` with the reason and
never registered; a repository, revision or prefix with nothing usable raises (`HubNotFound`,
`NothingDiscovered`) before anything is written. Registration is idempotent: a drafter whose id
is registered with the same source is `unchanged`, with another source a `conflict` left alone,
so discovering again after the repository gained a folder adds only that folder.

One code path: the CLI (`hedgespec drafter add --prefix`), the admin API
(`POST /admin/api/drafters/discover`) and seed pools (`{"discover": {...}}` entries) all call
`discover_and_register`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.hf_api import RepoFile
from sqlalchemy.orm import Session

from drafter_registry import crud
from drafter_registry.errors import DrafterConflict, HubError, InvalidIdentifier, NothingDiscovered
from drafter_registry.hub import _hub_errors
from drafter_registry.identifiers import (
    DOMAIN_RE,
    MAX_SUBFOLDER_DEPTH,
    slugify_drafter_id,
    validate_drafter_id,
)
from drafter_registry.models import Drafter
from drafter_registry.schemas import DiscoverSpec, DrafterCreate
from eagle3_format.config import config_json_problem
from eagle3_format.weights import CONFIG_FILE, no_weights, preferred_weight_file

MAX_CONFIG_BYTES = 1 << 20  # a drafter's config.json is a few KB
CONFIG_FETCH_THREADS = 8
Action = Literal["created", "would_create", "unchanged", "conflict", "skipped"]

# Folder names of the paper's datasets (and common spellings) -> domain tags. Keys are
# lower-case with everything but letters and digits removed ("CNN_DM" -> "cnndm").
DOMAIN_ALIASES = {
    "python": "python", "code": "python", "coding": "python", "humaneval": "python",
    "mbpp": "python",
    "math": "math", "gsm8k": "math", "mathinstruct": "math", "metamath": "math",
    "biology": "biology", "bio": "biology",
    "chemistry": "chemistry", "chem": "chemistry",
    "medical": "medical", "medqa": "medical", "medicalqa": "medical", "med": "medical",
    "medmcqa": "medical", "pubmedqa": "medical",
    "news": "news", "cnndm": "news", "cnndailymail": "news", "cnn": "news", "dailymail": "news",
    "sql": "sql", "spider": "sql", "texttosql": "sql", "text2sql": "sql", "bird": "sql",
    "general": "general", "generalist": "general", "sharegpt": "general", "ultrachat": "general",
}  # fmt: skip


@dataclass(frozen=True)
class FoundFolder:
    """A folder under the prefix that holds a `config.json`."""

    subfolder: str  # path in the repo ("lm318/model/MedQA"); "" for the repo root
    folder: str  # path relative to the prefix ("MedQA"); "" when the prefix itself is a drafter
    reason: str | None = None  # why it is not registered; None: a drafter

    @property
    def is_drafter(self) -> bool:
        return self.reason is None


@dataclass(frozen=True)
class Discovery:
    """What a repository folder holds at one commit."""

    repo_id: str
    revision: str
    commit_sha: str
    prefix: str | None
    folders: tuple[FoundFolder, ...]

    @property
    def drafters(self) -> list[FoundFolder]:
        return [f for f in self.folders if f.is_drafter]


@dataclass(frozen=True)
class DiscoveredDrafter:
    """One line of a discovery report: a drafter registered (or that would be), or a folder
    skipped with the reason."""

    subfolder: str
    folder: str
    action: Action
    drafter_id: str | None = None
    domain: str | None = None
    detail: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.drafter_id, "folder": self.folder, "subfolder": self.subfolder,
                "domain": self.domain, "action": self.action, "detail": self.detail}


@dataclass(frozen=True)
class DiscoveryReport:
    repo_id: str
    revision: str
    commit_sha: str
    prefix: str | None
    dry_run: bool
    results: list[DiscoveredDrafter] = field(default_factory=list)

    @property
    def created(self) -> list[str]:
        return [r.drafter_id for r in self.results if r.action == "created" and r.drafter_id]

    def as_dict(self) -> dict[str, Any]:
        return {"repo_id": self.repo_id, "revision": self.revision,
                "commit_sha": self.commit_sha, "prefix": self.prefix or "",
                "dry_run": self.dry_run, "results": [r.as_dict() for r in self.results]}


# --- the hub side ------------------------------------------------------------------------------


def discover_folders(
    *,
    repo_id: str,
    prefix: str | None,
    revision: str,
    cache_dir: str | Path,
    token: str | None = None,
    endpoint: str | None = None,
) -> Discovery:
    """List `repo_id@revision` and classify every folder under `prefix` holding a config.json.

    Raises `HubNotFound` (repository or revision), `HubError` (network, auth, offline) or
    `NothingDiscovered` (no usable drafter under the prefix, with what the repository holds).
    """
    api = HfApi(endpoint=endpoint, token=token)
    where = f"{repo_id}@{revision}" + (f"/{prefix}" if prefix else "")
    with _hub_errors(where, endpoint=api.endpoint):
        info = api.model_info(repo_id, revision=revision)
        commit = info.sha
        if not commit:
            raise HubError(f"the hub did not resolve {repo_id}@{revision} to a commit")
        files = [e.path for e in api.list_repo_tree(repo_id, revision=commit, recursive=True)
                 if isinstance(e, RepoFile)]
    by_folder = _files_by_folder(files)
    candidates = sorted(f for f, names in by_folder.items()
                        if CONFIG_FILE in names and _under(f, prefix))
    if not candidates:
        raise NothingDiscovered(_nothing_here(repo_id, revision, prefix, by_folder))

    def fetch(folder: str) -> FoundFolder:
        relative = folder[len(prefix):].lstrip("/") if prefix else folder
        reason = _folder_problem(folder, by_folder[folder])
        if reason is None:
            reason = _config_problem(_fetch_config(
                repo_id, folder, commit=commit, cache_dir=cache_dir, token=token,
                endpoint=api.endpoint))
        return FoundFolder(subfolder=folder, folder=relative, reason=reason)

    with ThreadPoolExecutor(max_workers=CONFIG_FETCH_THREADS,
                            thread_name_prefix="drafter-discover") as pool:
        found = tuple(pool.map(fetch, candidates))
    discovery = Discovery(repo_id=repo_id, revision=revision, commit_sha=commit, prefix=prefix,
                          folders=found)
    if not discovery.drafters:
        skipped = "; ".join(f"{f.subfolder or '/'}: {f.reason}" for f in found)
        raise NothingDiscovered(f"no usable EAGLE-3 drafter under {where}: {skipped}")
    return discovery


def _files_by_folder(paths: Iterable[str]) -> dict[str, set[str]]:
    folders: dict[str, set[str]] = {}
    for path in paths:
        parent, _, name = path.rpartition("/")
        folders.setdefault(parent, set()).add(name)
        while parent:  # every ancestor exists as a folder too (for the error message)
            parent = parent.rpartition("/")[0]
            folders.setdefault(parent, set())
    return folders


def _under(folder: str, prefix: str | None) -> bool:
    return not prefix or folder == prefix or folder.startswith(prefix + "/")


def _folder_problem(folder: str, names: set[str]) -> str | None:
    if folder.count("/") + 1 > MAX_SUBFOLDER_DEPTH:
        return f"nested deeper than {MAX_SUBFOLDER_DEPTH} folders"
    if preferred_weight_file(names) is None:
        return f"{CONFIG_FILE} but " + no_weights("it")
    return None


def _fetch_config(repo_id: str, folder: str, *, commit: str, cache_dir: str | Path,
                  token: str | None, endpoint: str) -> bytes | str:
    """The folder's config.json, or the reason it could not be read."""
    name = f"{folder}/{CONFIG_FILE}" if folder else CONFIG_FILE
    try:
        with _hub_errors(f"{repo_id}@{commit[:12]}/{name}", endpoint=endpoint):
            path = Path(hf_hub_download(repo_id, name, revision=commit, cache_dir=str(cache_dir),
                                        token=token, endpoint=endpoint))
            if path.stat().st_size > MAX_CONFIG_BYTES:
                return f"{CONFIG_FILE} is larger than {MAX_CONFIG_BYTES} bytes"
            return path.read_bytes()
    except HubError as exc:
        return f"{CONFIG_FILE} could not be fetched: {exc}"


def _config_problem(config: bytes | str) -> str | None:
    """None if `config` is an EAGLE-3 drafter's config.json, else why not (a str is already
    the reason it could not be fetched)."""
    return config if isinstance(config, str) else config_json_problem(config)


def _nothing_here(repo_id: str, revision: str, prefix: str | None,
                  by_folder: dict[str, set[str]]) -> str:
    where = f"{repo_id}@{revision}"
    elsewhere = sorted(f for f, names in by_folder.items() if CONFIG_FILE in names)
    top = sorted({f.split("/")[0] for f in by_folder if f})
    if prefix and prefix not in by_folder:
        message = f"no folder {prefix!r} in {where}"
    else:
        message = f"no folder with a {CONFIG_FILE} under {prefix or 'the root'} of {where}"
    if elsewhere:
        shown = ", ".join(f or "/" for f in elsewhere[:8])
        more = f" and {len(elsewhere) - 8} more" if len(elsewhere) > 8 else ""
        return f"{message}; folders with a {CONFIG_FILE}: {shown}{more}"
    return f"{message}; top-level folders: {', '.join(top) or 'none'}"


# --- from folders to drafter specs -------------------------------------------------------------


def domain_for(folder: str) -> str | None:
    """A domain tag for a drafter folder name (`MedQA` -> `medical`, `CNN_DM` -> `news`,
    `llama3.1-8b_python` -> `python`); unknown names give their own slug (`Law` -> `law`)."""
    name = PurePosixPath(folder).name.lower() if folder else ""
    squashed = re.sub(r"[^a-z0-9]", "", name)
    if squashed in DOMAIN_ALIASES:
        return DOMAIN_ALIASES[squashed]
    tokens = [t for t in re.split(r"[^a-z0-9]+", name) if t]
    pairs = [a + b for a, b in itertools.pairwise(tokens)]
    for token in reversed([*tokens, *pairs]):  # "llama3.1-8b-instruct_python": the last wins
        if token in DOMAIN_ALIASES:
            return DOMAIN_ALIASES[token]
    return folder_tag(folder)


def folder_tag(folder: str) -> str | None:
    """The folder name as a tag (`CNN_DM` -> `cnn_dm`), or None if nothing of it is usable."""
    slug = re.sub(r"[^a-z0-9_-]+", "-", PurePosixPath(folder).name.lower()).strip("-_")[:64]
    return slug if slug and DOMAIN_RE.fullmatch(slug) else None


def plan(discovery: Discovery, spec: DiscoverSpec) -> list[tuple[FoundFolder, DrafterCreate]]:
    """The drafter each discovered folder becomes (ids unique within the discovery)."""
    repo_name = discovery.repo_id.split("/")[1]
    taken: set[str] = set()
    planned = []
    for found in discovery.drafters:
        base_name = found.folder or PurePosixPath(found.subfolder).name or repo_name
        drafter_id = _unique(spec.id_prefix + slugify_drafter_id(
            (found.folder or base_name).replace("/", "-")), taken)
        domain = spec.domains.get(found.folder) or domain_for(base_name)
        tag = folder_tag(base_name)
        tags = sorted({*spec.tags, *([tag] if tag and tag != domain else [])})
        if spec.name_prefix:
            name = f"{spec.name_prefix} {found.folder or base_name}"
        else:
            name = f"{repo_name}/{found.subfolder}" if found.subfolder else repo_name
        planned.append((found, DrafterCreate(
            id=drafter_id, name=name[:128], source="hf", repo_id=discovery.repo_id,
            revision=discovery.revision, subfolder=found.subfolder or None, domain=domain,
            tags=tags, target_model=spec.target_model,
        )))
    return planned


def _unique(drafter_id: str, taken: set[str]) -> str:
    base = drafter_id[:64].rstrip("-._") or "drafter"
    candidate, suffix = base, 2
    while candidate in taken:
        candidate = f"{base[:58]}-{suffix}"
        suffix += 1
    try:
        validate_drafter_id(candidate)
    except InvalidIdentifier:
        candidate = _unique(slugify_drafter_id(candidate), taken)
    taken.add(candidate)
    return candidate


# --- registration ------------------------------------------------------------------------------


def register(
    session: Session,
    discovery: Discovery,
    spec: DiscoverSpec,
    *,
    actor: str,
    dry_run: bool = False,
) -> DiscoveryReport:
    """Register the discovered drafters as `pending` (nothing is written with `dry_run`)."""
    results: list[DiscoveredDrafter] = []
    for found, drafter in plan(discovery, spec):
        assert drafter.id is not None
        line = DiscoveredDrafter(subfolder=found.subfolder, folder=found.folder,
                                 drafter_id=drafter.id, domain=drafter.domain, action="created")
        existing = crud.get_drafter(session, drafter_id=drafter.id)
        if existing is not None:
            results.append(_compare(line, existing, drafter))
        elif dry_run:
            results.append(_replace(line, action="would_create"))
        else:
            try:
                crud.create_drafter_from_spec(session, spec=drafter, actor=actor)
                results.append(line)
            except DrafterConflict as exc:
                results.append(_replace(line, action="conflict", detail=str(exc)))
    results += [DiscoveredDrafter(subfolder=f.subfolder, folder=f.folder, action="skipped",
                                  detail=f.reason)
                for f in discovery.folders if not f.is_drafter]
    report = DiscoveryReport(repo_id=discovery.repo_id, revision=discovery.revision,
                             commit_sha=discovery.commit_sha, prefix=discovery.prefix,
                             dry_run=dry_run, results=results)
    if not dry_run:
        crud.record_event(session, actor=actor, action="pool.discover", target=None, detail={
            "repo_id": report.repo_id, "revision": report.revision, "commit": report.commit_sha,
            "prefix": report.prefix or "",
            "results": {r.drafter_id or r.subfolder: r.action for r in results},
        })
    return report


def discover_and_register(
    session: Session,
    spec: DiscoverSpec,
    *,
    actor: str,
    cache_dir: str | Path,
    token: str | None = None,
    endpoint: str | None = None,
    dry_run: bool = False,
) -> DiscoveryReport:
    """List the repository (`discover_folders`), then `register` what it holds."""
    discovery = discover_folders(repo_id=spec.repo_id, prefix=spec.prefix,
                                 revision=spec.revision, cache_dir=cache_dir, token=token,
                                 endpoint=endpoint)
    return register(session, discovery, spec, actor=actor, dry_run=dry_run)


def _compare(line: DiscoveredDrafter, existing: Drafter,
             wanted: DrafterCreate) -> DiscoveredDrafter:
    same = (existing.source, existing.repo_id, existing.revision, existing.subfolder) == (
        wanted.source, wanted.repo_id, wanted.revision, wanted.subfolder)
    if same:
        return _replace(line, action="unchanged")
    found = (f"{existing.repo_id}@{existing.revision}/{existing.subfolder or ''}"
             if existing.source == "hf" else f"local {existing.local_path}")
    return _replace(line, action="conflict", detail=f"id {existing.id!r} is registered as "
                    f"{found}; left as it is (remove it, or set an id_prefix)")


def _replace(line: DiscoveredDrafter, **changes: Any) -> DiscoveredDrafter:
    return DiscoveredDrafter(**{**line.__dict__, **changes})

