"""Stage timing for the build log and the report."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class StageTimer:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        print(f"== {name}", flush=True)
        yield
        self.seconds[name] = round(time.perf_counter() - start, 1)
        print(f"== {name}: {self.seconds[name]:.1f} s", flush=True)
