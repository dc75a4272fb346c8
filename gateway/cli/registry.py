"""`hedgespec drafter add|list|enable|disable|remove|retry|import`: the registry from a shell.

These commands talk to the registry database directly (`--database-url`, default the server's
setting: `HEDGESPEC_DATABASE_URL`, `.env`, else var/hedgespec.db), so they work with or without a
running server. They only change rows: a running gateway notices within about a second (its pool
sync polls the pool version), downloads and validates new drafters in the background and updates
its serving pool; with no server running, the next `hedgespec serve` does it on start.

`add --kind ngram --param max_n=4 --id lookup` registers a model-free drafter (no weights): its
kind and parameters are checked against the engine's (`core.speculation.model_free.kinds`, through
`gateway.pool.model_free`) and stored with every parameter, defaults filled in; the row is
`ready` at once and a running server serves it at its next pool sync.

`add --repo-id R --prefix P` registers every drafter found under folder P of repository R
(`drafter_registry.discovery`: the repository's file list at `--revision`, one drafter per folder
holding an EAGLE-3 config.json and weights, id and domain from the folder name); `--dry-run`
prints what it would register and writes nothing. Discovery and seed imports with `discover`
entries reach the Hub as the server's downloads do: `HF_ENDPOINT`, the server's token setting
(`HEDGESPEC_HF_TOKEN` / `HF_TOKEN`) and cache directory, and `HF_HUB_OFFLINE`.

Output: `list` prints a table (`--json` for JSON); the other commands print the drafter (or the
import or discovery results) as JSON. Exit status: 0 done, 1 refused by the registry (unknown id,
taken id or name, a status that does not allow the change), 2 invalid input or unreadable file
(a model-free kind or parameter the engine refuses included; an import registers the rest),
3 the Hub could not be listed or held nothing to register (no such repository or revision, no
drafter under the prefix, network, offline mode; an import still registers the rest of its file).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drafter_registry.schemas import DrafterPublic

ACTOR = "cli"
# Column, width for `hedgespec drafter list` (its cells in this order).
COLUMNS = (("id", 20), ("status", 11), ("progress", 8), ("domain", 10), ("source", 0))


def register(drafter_sub: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--database-url", help="registry database (default: the server's setting)")

    add = drafter_sub.add_parser(
        "add", parents=[common],
        help="register a drafter (Hugging Face repo, local directory, or model-free kind)",
        description="Register a drafter as `pending`; a running server (or the next one to "
                    "start) downloads and validates it. A model-free drafter (--kind ngram) has "
                    "nothing to download: it is registered `ready`.",
    )
    add.add_argument("--kind", default="eagle3",
                     help="eagle3 (default: needs --repo-id or --path) or a model-free kind "
                          "(ngram, suffix, grammar), which takes --param instead")
    add.add_argument("--param", action="append", default=[], metavar="NAME=INT",
                     help="with a model-free --kind: one parameter, e.g. max_n=4 (repeatable; "
                          "the others keep their defaults)")
    where = add.add_mutually_exclusive_group()
    where.add_argument("--repo-id",
                       help="Hugging Face repo, e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
    where.add_argument("--path", type=Path, help="a local drafter directory")
    add.add_argument("--revision", help="branch, tag or commit (default main)")
    one = add.add_mutually_exclusive_group()
    one.add_argument("--subfolder", help="the drafter's sub-folder inside the repo")
    one.add_argument("--prefix",
                     help="discover: register every drafter in the folders under this one, "
                          "e.g. lm318/model/ ('' for the whole repo)")
    add.add_argument("--dry-run", action="store_true",
                     help="with --prefix: print what would be registered, change nothing")
    add.add_argument("--id-prefix", default="",
                     help="with --prefix: put this before every discovered id, e.g. qw38-")
    add.add_argument("--name-prefix", help="with --prefix: display names '<this> <folder>'")
    add.add_argument("--folder-domain", action="append", default=[], metavar="FOLDER=DOMAIN",
                     help="with --prefix: the domain of one folder, instead of the one mapped "
                          "from its name (repeatable)")
    add.add_argument("--name", help="display name (default: from the id, sub-folder or repo)")
    add.add_argument("--id", dest="drafter_id",
                     help="the id used in fixed:<id> (default: from the name)")
    add.add_argument("--domain", help="domain tag, e.g. python")
    add.add_argument("--tag", action="append", default=[], help="extra tag (repeatable)")
    add.set_defaults(handler=add_drafter)

    ls = drafter_sub.add_parser("list", parents=[common], help="list registered drafters")
    ls.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ls.set_defaults(handler=list_drafters)

    for name, handler, text in (
        ("enable", enable_drafter, "put a drafter back into the pool"),
        ("disable", disable_drafter, "take a drafter out of the pool (kept in the registry)"),
        ("remove", remove_drafter, "delete a drafter from the registry"),
        ("retry", retry_drafter, "fetch a failed drafter again"),
    ):
        p = drafter_sub.add_parser(name, parents=[common], help=text)
        p.add_argument("drafter_id", metavar="ID")
        p.set_defaults(handler=handler)

    imp = drafter_sub.add_parser(
        "import", parents=[common], help="register the drafters of a seed pool JSON",
        description="Idempotent: drafters already registered are left as they are.",
    )
    imp.add_argument("pool_file", type=Path, metavar="POOL.json")
    imp.add_argument("--base-dir", type=Path, default=None,
                     help="directory relative local paths are resolved against (default: cwd)")
    imp.set_defaults(handler=import_pool)


# ---- handlers ---------------------------------------------------------------------------------


def add_drafter(args: argparse.Namespace) -> int:
    from drafter_registry import crud

    if args.kind != "eagle3":
        return _add_model_free(args)
    if args.param:
        return _fail("add", "--param is for model-free drafters (--kind ngram, ...)", 2)
    if args.repo_id is None and args.path is None:
        return _fail("add", "one of --repo-id or --path is required (or a model-free --kind)", 2)
    if args.prefix is not None:
        return _discover(args)
    if args.dry_run or args.id_prefix or args.name_prefix or args.folder_domain:
        return _fail("add", "--dry-run, --id-prefix, --name-prefix and --folder-domain need "
                     "--prefix", 2)
    source = "hf" if args.repo_id else "local"
    name = args.name or args.drafter_id or _default_name(args)
    path = str(Path(args.path).expanduser().resolve()) if args.path else None
    return _run(args, "add", lambda s: _drafter_json(crud.create_drafter(
        s, actor=ACTOR, drafter_id=args.drafter_id, name=name, source=source,
        repo_id=args.repo_id, revision=args.revision, subfolder=args.subfolder, path=path,
        domain=args.domain, tags=args.tag,
    )))


def _add_model_free(args: argparse.Namespace) -> int:
    from drafter_registry import crud
    from gateway.pool.model_free import full_params

    unused = [flag for flag, value in (
        ("--repo-id", args.repo_id), ("--path", args.path), ("--revision", args.revision),
        ("--subfolder", args.subfolder), ("--prefix", args.prefix), ("--dry-run", args.dry_run),
        ("--id-prefix", args.id_prefix), ("--name-prefix", args.name_prefix),
        ("--folder-domain", args.folder_domain)) if value]
    if unused:
        return _fail("add", f"a model-free drafter (--kind {args.kind}) has no weights: "
                     f"drop {', '.join(unused)}", 2)
    try:
        params = full_params(args.kind, _parse_params(args.param))
    except ValueError as exc:
        return _fail("add", str(exc), 2)
    name = args.name or args.drafter_id or args.kind
    return _run(args, "add", lambda s: _drafter_json(crud.create_drafter(
        s, actor=ACTOR, drafter_id=args.drafter_id, name=name, kind=args.kind, params=params,
        domain=args.domain, tags=args.tag,
    )))


def _parse_params(items: list[str]) -> dict[str, object]:
    """`["max_n=4", ...]` -> `{"max_n": 4}`; a value that is not an integer stays a string (the
    engine's check names it)."""
    params: dict[str, object] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--param takes NAME=INT, got {item!r}")
        try:
            params[name.strip()] = int(value.strip())
        except ValueError:
            params[name.strip()] = value
    return params


def list_drafters(args: argparse.Namespace) -> int:
    from drafter_registry import crud
    from drafter_registry.db import pool_version

    def show(session: Any) -> None:
        rows = [_public(d) for d in crud.list_drafters(session)]
        if args.json:
            print(json.dumps({"data": [_json(r) for r in rows], "count": len(rows),
                              "pool_version": pool_version(session)}, indent=2))
        else:
            print(_table(rows))

    return _run(args, "list", show)


def enable_drafter(args: argparse.Namespace) -> int:
    return _set_enabled(args, True)


def disable_drafter(args: argparse.Namespace) -> int:
    return _set_enabled(args, False)


def remove_drafter(args: argparse.Namespace) -> int:
    from drafter_registry import crud

    def remove(session: Any) -> None:
        crud.delete_drafter(session, drafter_id=args.drafter_id, actor=ACTOR)
        print(json.dumps({"id": args.drafter_id, "deleted": True}))

    return _run(args, "remove", remove)


def retry_drafter(args: argparse.Namespace) -> int:
    from drafter_registry import crud

    return _run(args, "retry", lambda s: _drafter_json(
        crud.retry_drafter(s, drafter_id=args.drafter_id, actor=ACTOR)))


def import_pool(args: argparse.Namespace) -> int:
    from drafter_registry.seed import import_seed_pool, load_seed_pool
    from gateway.pool.model_free import full_params

    errors: list[str] = []
    invalid: list[str] = []  # model-free entries the engine's kinds refuse

    def run(session: Any) -> None:
        pool = load_seed_pool(args.pool_file)
        base = args.base_dir if args.base_dir is not None else Path.cwd()
        results = import_seed_pool(session, pool, actor=ACTOR, base_dir=base, hub=_hub_settings(),
                                   check_params=full_params)
        print(json.dumps({
            "target": pool.target,
            "results": [{"id": r.drafter_id, "action": r.action, "detail": r.detail,
                         **({"subfolder": r.subfolder} if r.subfolder else {})}
                        for r in results],
        }, indent=2))
        errors.extend(f"{r.drafter_id}: {r.detail}" for r in results if r.action == "error")
        invalid.extend(f"{r.drafter_id}: {r.detail}" for r in results if r.action == "invalid")

    code = _run(args, "import", run)
    if code == 0 and invalid:
        return _fail("import", "; ".join(invalid), 2)
    if code == 0 and errors:
        return _fail("import", "; ".join(errors), 3)
    return code


def _discover(args: argparse.Namespace) -> int:
    from drafter_registry.discovery import discover_and_register
    from drafter_registry.errors import HubError, NothingDiscovered
    from drafter_registry.schemas import DiscoverSpec

    if args.repo_id is None:
        return _fail("add", "--prefix needs --repo-id", 2)
    if args.drafter_id or args.name or args.domain:
        return _fail("add", "with --prefix, ids, names and domains come from the folder names: "
                     "use --id-prefix, --name-prefix and --folder-domain FOLDER=DOMAIN", 2)
    domains = dict(item.partition("=")[::2] for item in args.folder_domain)
    if any(not folder or not domain for folder, domain in domains.items()):
        return _fail("add", "--folder-domain takes FOLDER=DOMAIN", 2)

    def run(session: Any) -> None:
        spec = DiscoverSpec(repo_id=args.repo_id, prefix=args.prefix,
                            revision=args.revision or "main", id_prefix=args.id_prefix,
                            name_prefix=args.name_prefix, domains=domains, tags=args.tag)
        hub = _hub_settings()
        report = discover_and_register(session, spec, actor=ACTOR, cache_dir=hub.cache_dir,
                                       token=hub.token, endpoint=hub.endpoint,
                                       dry_run=args.dry_run)
        print(json.dumps(report.as_dict(), indent=2))

    try:
        return _run(args, "add", run)
    except (HubError, NothingDiscovered) as exc:
        return _fail("add", str(exc), 3)


def _hub_settings() -> Any:
    """Cache, token and endpoint as the server's downloader uses them."""
    import os

    from drafter_registry.fetcher import FetchSettings
    from gateway.config import Settings

    settings = Settings()
    return FetchSettings(
        cache_dir=Path(settings.hf_cache_dir).expanduser(),
        token=settings.hf_token.get_secret_value() if settings.hf_token else None,
        endpoint=os.environ.get("HF_ENDPOINT") or None,
    )


# ---- helpers ----------------------------------------------------------------------------------


def _set_enabled(args: argparse.Namespace, enabled: bool) -> int:
    from drafter_registry import crud

    return _run(args, "enable" if enabled else "disable", lambda s: _drafter_json(
        crud.set_enabled(s, drafter_id=args.drafter_id, enabled=enabled, actor=ACTOR)))


def _run(args: argparse.Namespace, command: str, action: Callable[[Any], Any]) -> int:
    """Open the database (migrated to head), run `action(session)`, map errors to exit codes."""
    from drafter_registry.errors import DrafterConflict, DrafterNotFound, StatusConflict

    try:
        with _session(args) as session:
            action(session)
    except (DrafterNotFound, DrafterConflict, StatusConflict) as exc:
        return _fail(command, str(exc), 1)
    except ValueError as exc:  # InvalidIdentifier, InvalidDrafter, bad settings
        return _fail(command, str(exc), 2)
    except Exception as exc:  # the database: unreachable, wrong URL, ...
        from sqlalchemy.exc import SQLAlchemyError

        if isinstance(exc, (SQLAlchemyError, OSError)):
            return _fail(command, f"registry database error: {type(exc).__name__}: {exc}", 2)
        raise
    return 0


@contextmanager
def _session(args: argparse.Namespace) -> Iterator[Any]:
    from drafter_registry.db import make_engine, make_session_factory, upgrade

    url = args.database_url or _default_database_url()
    upgrade(url)  # idempotent; a fresh database works the same as a served one
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session:
            yield session
    finally:
        engine.dispose()


def _default_database_url() -> str:
    from gateway.config import Settings

    return Settings().database_url


def _fail(command: str, message: str, code: int) -> int:
    print(f"hedgespec drafter {command}: {message}", file=sys.stderr)
    return code


def _default_name(args: argparse.Namespace) -> str:
    if args.subfolder:
        return str(args.subfolder).rstrip("/").split("/")[-1]
    if args.repo_id:
        return str(args.repo_id).split("/")[-1]
    return Path(args.path).expanduser().resolve().name


def _public(drafter: Any) -> DrafterPublic:
    """A registry row parsed once into the admin API's typed drafter; read by attribute after."""
    from drafter_registry.schemas import DrafterPublic

    return DrafterPublic.model_validate(drafter)


def _json(drafter: DrafterPublic) -> dict[str, Any]:
    """The admin API's JSON of a drafter (gateway.http.routes.admin), `enabled` included."""
    return {**drafter.model_dump(mode="json"), "enabled": drafter.status != "disabled"}


def _drafter_json(drafter: Any) -> None:
    print(json.dumps(_json(_public(drafter)), indent=2))


def _table(rows: list[DrafterPublic]) -> str:
    if not rows:
        return "no drafters registered"
    lines = ["  ".join(name.upper().ljust(width) for name, width in COLUMNS).rstrip()]
    for row in rows:
        progress = "" if row.progress is None else f"{row.progress:.0%}"
        cells = (row.id, row.status, progress, row.domain or "", _source(row))
        lines.append("  ".join(c.ljust(w) for c, (_, w) in zip(cells, COLUMNS, strict=True))
                     .rstrip())
        if row.error:
            lines.append(f"    error: {row.error}")
    return "\n".join(lines)


def _source(row: DrafterPublic) -> str:
    """Where a drafter comes from: its Hub repository, its kind and parameters (model-free), or
    its local directory."""
    if row.source == "hf":
        return f"{row.repo_id}@{row.revision}" + (f"/{row.subfolder}" if row.subfolder else "")
    if row.kind != "eagle3":
        return " ".join([row.kind, *(f"{k}={v}" for k, v in sorted((row.params or {}).items()))])
    return str(row.local_path)
