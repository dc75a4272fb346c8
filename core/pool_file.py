"""The pool file (`pool.json`): the pool the engine serves, parsed and checked once.

    {"model_name": "SmolLM2-135M-Instruct",                   # optional: the served model id
     "target": "target",                                      # a model directory, or
     "target": {"provision": "smollm2-135m-instruct"},        # a model core/provision/ makes
     "generation_config": {"temperature": 0.2, "top_p": 0.9},  # optional sampling defaults
     "drafters": [
        {"id": "python", "name": "Python", "domain": "python", "path": "drafters/python"},
        {"id": "lookup", "kind": "ngram", "params": {"max_n": 3}}],  # model-free: no weights
     "router": "router.npz"}                                  # optional: policy `router`

An entry without `kind` is an EAGLE-3 drafter (`path`: its checkpoint folder); one with a
model-free `kind` has no path, and its `params` over the kind's defaults
(core/speculation/model_free/). `name` and `domain` are labels for the registry and the admin page.
Relative paths are relative to the pool file's folder; `_comment` keys (in the file, its target, its
generation_config and its drafter entries) are ignored. Everything is checked here, so a bad file
fails with one error naming the file and the field, before any weights load. `load_pool_file` reads
one and `write_pool_file` writes one (the demo build's writer, demo/pool_files.py), so the format
has one owner.

This is one of two dialects, on purpose. A *seed pool* (`pools/*.json`, `--seed-pool`,
`drafter_registry.seed`) lists registry rows to create: Hub drafters that exist here only once
the fetcher has downloaded and validated them against the served target, and a target that is a
label on those rows. A pool file is what serves at start with nothing fetched: local drafters,
a target directory or provisioned model, and what belongs to the served target (its router,
its sampling defaults, the model id). Merged, `--pool` would accept files it cannot serve; so
each loader names the other when handed the wrong one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core import provision as target_provision
from core.model.sampling_defaults import checked_sampling_defaults
from core.speculation.model_free.kinds import make_model_free, model_free_kinds

EAGLE3 = "eagle3"  # the kind of a drafter with weights
COMMENT = "_comment"
POOL_KEYS = ("model_name", "target", "generation_config", "drafters", "router")
DRAFTER_KEYS = ("id", "name", "kind", "domain", "path", "params")
SEED_POOL_KEYS = ("source", "repo_id", "revision", "subfolder", "discover")


class PoolFileError(ValueError):
    """A pool file that cannot be read or is malformed; the message names the file and field."""


@dataclass(frozen=True)
class TargetDir:
    """A Hugging Face model directory (absolute)."""

    path: Path

    def directory(self, *, provision: bool = True, progress: bool = True) -> Path:
        return self.path


@dataclass(frozen=True)
class ProvisionedTarget:
    """A model the engine converts once into its target cache (core/provision/)."""

    provider: str

    def directory(self, *, provision: bool = True, progress: bool = True) -> Path:
        """The converted directory; converted first when `provision` (about 30 s for SmolLM2,
        once per machine), else only where it lives, whether or not it exists yet."""
        if provision:
            return target_provision.provision(self.provider, progress=progress)
        return target_provision.provisioned_dir(self.provider)


PoolTarget = TargetDir | ProvisionedTarget


@dataclass(frozen=True)
class PoolDrafter:
    id: str
    kind: str = EAGLE3
    path: Path | None = None  # EAGLE-3 checkpoint folder (absolute); None for a model-free one
    params: Mapping[str, Any] | None = None  # a model-free kind's parameters, as written
    domain: str | None = None
    name: str | None = None

    @property
    def model_free(self) -> bool:
        return self.kind != EAGLE3


@dataclass(frozen=True)
class PoolFile:
    path: Path  # the file (absolute): relative paths in it were resolved against its folder
    target: PoolTarget
    drafters: tuple[PoolDrafter, ...] = ()
    model_name: str | None = None
    # Sampling defaults over the target's generation_config.json (core/model/sampling_defaults.py),
    # checked, with the values as written.
    generation_config: Mapping[str, float] | None = None
    router: Path | None = None  # the prompt router of policy `router` (core/selection/router.py)

    @property
    def eagle3(self) -> tuple[PoolDrafter, ...]:
        return tuple(d for d in self.drafters if not d.model_free)


def load_pool_file(path: str | Path) -> PoolFile:
    """Read and check a pool file; raise `PoolFileError` naming the file and the problem."""
    file = Path(path).absolute()
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PoolFileError(f"cannot read pool file {file}: {exc}") from None
    return parse_pool_file(raw, file)


def parse_pool_file(raw: Any, file: Path) -> PoolFile:
    """A pool file's JSON value, checked; `file` is where it lives (relative paths)."""
    file = Path(file).absolute()
    try:
        return _parse(raw, file)
    except PoolFileError as exc:
        raise PoolFileError(f"invalid pool file {file}: {exc}") from None


def write_pool_file(pool: PoolFile) -> None:
    """Write `pool` to `pool.path` (paths inside its folder relative, as the build lays them
    out; `_comment` keys are not kept)."""
    pool.path.write_text(json.dumps(pool_file_json(pool), indent=2) + "\n", encoding="utf-8")


def pool_file_json(pool: PoolFile) -> dict[str, Any]:
    """The JSON object of `pool`, in the order its fields are documented above."""
    base = pool.path.parent
    out: dict[str, Any] = {}
    if pool.model_name is not None:
        out["model_name"] = pool.model_name
    if isinstance(pool.target, ProvisionedTarget):
        out["target"] = {"provision": pool.target.provider}
    else:
        out["target"] = _relative(pool.target.path, base)
    if pool.generation_config is not None:
        out["generation_config"] = dict(pool.generation_config)
    out["drafters"] = [_drafter_json(d, base) for d in pool.drafters]
    if pool.router is not None:
        out["router"] = _relative(pool.router, base)
    return out


# -- parsing ---------------------------------------------------------------------------------
def _parse(raw: Any, file: Path) -> PoolFile:
    obj = _object(raw, "the file")
    if "drafters" in obj and isinstance(obj["drafters"], list) and any(
            isinstance(d, dict) and set(d) & set(SEED_POOL_KEYS) for d in obj["drafters"]):
        raise PoolFileError(
            "its drafters name Hub sources (source/repo_id/discover): that is a seed pool, "
            "which registers drafters for the fetcher (--seed-pool / HEDGESPEC_SEED_POOL); "
            "a pool file serves local drafters only")
    _known_keys(obj, POOL_KEYS, "the file")
    if "target" not in obj:
        raise PoolFileError("'target' is required (a model directory, or "
                            f"{{'provision': one of {list(target_provision.provider_names())}}})")
    base = file.parent
    drafters = tuple(_drafter(entry, i, base)
                     for i, entry in enumerate(_list(obj.get("drafters", []), "drafters")))
    ids = [d.id for d in drafters]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise PoolFileError(f"duplicate drafter ids {duplicates}")
    router = _optional_str(obj, "router", "the file")
    return PoolFile(
        path=file,
        target=_target(obj["target"], base),
        drafters=drafters,
        model_name=_optional_str(obj, "model_name", "the file"),
        generation_config=_generation_config(obj.get("generation_config")),
        router=base / router if router is not None else None,
    )


def _target(raw: Any, base: Path) -> PoolTarget:
    providers = list(target_provision.provider_names())
    if isinstance(raw, str) and raw:
        return TargetDir(base / raw)
    if isinstance(raw, dict):
        _known_keys(raw, ("provision",), "target")
        if raw.get("provision") in providers:
            return ProvisionedTarget(str(raw["provision"]))
    raise PoolFileError(f"target {raw!r}: expected a model directory (relative to the pool "
                        f"file), or {{'provision': one of {providers}}}")


def _drafter(raw: Any, index: int, base: Path) -> PoolDrafter:
    where = f"drafters[{index}]"
    obj = _object(raw, where)
    _known_keys(obj, DRAFTER_KEYS, where)
    drafter_id = _optional_str(obj, "id", where)
    if not drafter_id:
        raise PoolFileError(f"{where}: 'id' is required (a non-empty string)")
    where = f"drafter {drafter_id!r}"
    kind = _optional_str(obj, "kind", where) or EAGLE3
    path = _optional_str(obj, "path", where)
    params = obj.get("params")
    domain, name = _optional_str(obj, "domain", where), _optional_str(obj, "name", where)
    if kind == EAGLE3:
        if not path:
            raise PoolFileError(f"{where}: an EAGLE-3 drafter needs 'path' (its checkpoint "
                                "folder); a model-free one names its 'kind' "
                                f"(one of {list(model_free_kinds())})")
        if params is not None:
            raise PoolFileError(f"{where}: 'params' belong to a model-free kind, not EAGLE-3")
        return PoolDrafter(drafter_id, path=base / path, domain=domain, name=name)
    if path is not None:
        raise PoolFileError(f"{where}: a model-free {kind!r} drafter has no weights ('path')")
    given = dict(_object(params, f"{where}: params")) if params is not None else None
    try:  # the engine's own check of the kind and its parameters (cheap: no weights)
        make_model_free(kind, given)
    except (ValueError, TypeError) as exc:
        raise PoolFileError(f"{where}: {exc}") from None
    return PoolDrafter(drafter_id, kind=kind, params=given, domain=domain, name=name)


def _generation_config(raw: Any) -> dict[str, float] | None:
    if raw is None:
        return None
    if isinstance(raw, dict):
        raw = {k: v for k, v in raw.items() if k != COMMENT}
    try:
        checked = checked_sampling_defaults(raw, "generation_config")
    except ValueError as exc:
        raise PoolFileError(str(exc)) from None
    return {key: raw[key] for key in checked}  # as written: a top_k of 40 stays 40


def _object(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise PoolFileError(f"{where}: expected an object, got {type(raw).__name__}")
    return raw


def _list(raw: Any, where: str) -> list[Any]:
    if not isinstance(raw, list):
        raise PoolFileError(f"{where}: expected a list, got {type(raw).__name__}")
    return raw


def _known_keys(obj: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(obj) - set(known) - {COMMENT})
    if unknown:
        raise PoolFileError(f"{where}: unknown keys {unknown} (known: {list(known)})")


def _optional_str(obj: Mapping[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise PoolFileError(f"{where}: '{key}' must be a string, got {value!r}")
    return value


# -- writing ---------------------------------------------------------------------------------
def _drafter_json(d: PoolDrafter, base: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"id": d.id}
    if d.name is not None:
        out["name"] = d.name
    if d.model_free:
        out["kind"] = d.kind
    if d.domain is not None:
        out["domain"] = d.domain
    if d.path is not None:
        out["path"] = _relative(d.path, base)
    if d.params is not None:
        out["params"] = dict(d.params)
    return out


def _relative(path: Path, base: Path) -> str:
    try:
        return path.relative_to(base).as_posix()
    except ValueError:  # outside the pool's folder: kept absolute
        return str(path)
