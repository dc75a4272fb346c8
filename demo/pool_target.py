"""What `bench/` still imports from here, now read through the product's pool-file loader.

The pool file and its target are the product's (core/pool_file.py, core/provision/): serve one
with `SpecEngine.from_pool_file`, read one with `load_pool_file`. These three names remain only
because 17 modules of `bench/` import them; delete this file once they call the product.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.config import EngineConfig
from core.engine import SpecEngine
from core.pool_file import load_pool_file, pool_file_json


def read_pool(pool_json: Path) -> dict[str, Any]:
    """The pool file's JSON object, checked (`PoolFileError` names a bad one)."""
    return pool_file_json(load_pool_file(pool_json))


def target_dir(pool_json: Path, *, provision: bool = True, progress: bool = True) -> Path:
    return load_pool_file(pool_json).target.directory(provision=provision, progress=progress)


def open_pool_engine(pool_json: Path, config: EngineConfig,
                     model_name: str | None = None) -> SpecEngine:
    return SpecEngine.from_pool_file(pool_json, config, model_name)
