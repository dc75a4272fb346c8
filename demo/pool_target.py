"""Resolve the target a `pool.json` names: a directory beside it, or a provisioned model.

    "target": "target"                               # a directory relative to pool.json
    "target": {"provision": "smollm2-135m-instruct"}  # converted once into the target cache

Torch-free until a conversion actually runs, so the gateway can resolve paths at start-up.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PROVIDERS = ("smollm2-135m-instruct",)


class PoolTargetError(ValueError):
    """The pool file's `target` entry is malformed or names an unknown provider."""


def read_pool(pool_json: Path) -> dict[str, Any]:
    spec = json.loads(Path(pool_json).read_text(encoding="utf-8"))
    if not isinstance(spec, dict) or "target" not in spec:
        raise PoolTargetError(f"{pool_json}: a pool file is an object with a 'target'")
    return spec


def _provider(entry: Any) -> str | None:
    if isinstance(entry, str):
        return None
    if isinstance(entry, dict) and entry.get("provision") in PROVIDERS:
        return str(entry["provision"])
    raise PoolTargetError(f"unknown pool target {entry!r}: a path, or {{'provision': one of "
                          f"{PROVIDERS}}}")


def target_dir(pool_json: Path, *, provision: bool = True, progress: bool = True) -> Path:
    """The directory holding the pool's target; a provisioned one is converted first when
    `provision` (else its cache path is returned whether or not it exists yet)."""
    entry = read_pool(pool_json)["target"]
    if _provider(entry) is None:
        return (Path(pool_json).parent / entry).resolve()
    from demo import smollm2

    return smollm2.provision(progress=progress) if provision else smollm2.target_dir()


def is_provisioned_target(pool_json: Path) -> bool:
    return _provider(read_pool(pool_json)["target"]) is not None


def open_pool_engine(pool_json: Path, config: Any, model_name: str | None = None) -> Any:
    """A `core.engine.SpecEngine` serving the pool file (the target resolved as above)."""
    from core.engine import SpecEngine
    from core.model_free.kinds import make_model_free

    spec = read_pool(pool_json)
    base = Path(pool_json).parent
    entries = spec.get("drafters", [])
    # EAGLE-3 entries name weights (`path`); model-free ones a `kind` and its `params`
    # (`{"id": "lookup", "kind": "ngram", "params": {"max_n": 3}}`), as SpecEngine.from_pool_file
    # reads them. Model-free members join after the EAGLE-3 ones.
    drafters = [(d["id"], base / d["path"]) for d in entries
                if d.get("kind", "eagle3") == "eagle3"]
    name = model_name or spec.get("model_name")
    target = target_dir(pool_json)
    engine = SpecEngine.from_dirs(target, drafters, config, name or target.name)
    for d in entries:
        if d.get("kind", "eagle3") != "eagle3":
            engine.add_model_free(d["id"], make_model_free(d["kind"], d.get("params")))
    engine.configure_from_pool(spec, base)  # router (demo/router.py), sampling defaults
    return engine
