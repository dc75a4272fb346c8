"""A real `hedgespec serve` child process on a free loopback port, for tests and benchmarks.

`ServerProcess.start(pool, workdir, *flags)` runs `python -m gateway serve --port 0` in `workdir`
(its registry database and log live there), waits until `/ready` answers 200 and records the
port uvicorn picked. The log goes to a file, never a pipe, so a chatty server cannot block.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
_LISTENING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")
# The only HEDGESPEC_* settings a child inherits (the test suite pins fp32 and the acceptance
# loss, which drafts every round, tests/conftest.py); the others come from its flags, so no
# developer setting leaks in.
PASSED_ENV = ("HEDGESPEC_DTYPE", "HEDGESPEC_LOSS")


@dataclass
class ServerProcess:
    """A `python -m gateway serve` child process; its log goes to a file, never a pipe."""

    proc: subprocess.Popen[bytes]
    log_path: Path
    base_url: str = ""

    @classmethod
    def start(cls, pool: Path, workdir: Path, *extra: str, timeout_s: float = 90) -> ServerProcess:
        workdir.mkdir(parents=True, exist_ok=True)
        log_path = workdir / "server.log"
        args = [
            sys.executable, "-m", "gateway", "serve",
            "--pool", str(pool),
            "--port", "0",
            "--database-url", f"sqlite:///{workdir / 'registry.db'}",
            *extra,
        ]  # fmt: skip
        # One BLAS thread: the test machine is shared, and oversubscribed threads make every
        # round 100x slower.
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        # Importable from the temporary working directory even without an editable install.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        env = {k: v for k, v in env.items()
               if not k.startswith("HEDGESPEC_") or k in PASSED_ENV}
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, env=env
            )
        server = cls(proc, log_path)
        server._wait_ready(timeout_s)
        return server

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            match = _LISTENING.search(self.log())
            if match and not self.base_url:
                self.base_url = f"http://127.0.0.1:{match.group(1)}"
            if self.base_url:
                try:
                    if httpx.get(f"{self.base_url}/ready", timeout=2).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"server not ready after {timeout_s} s:\n{self.log()}")

    def stop(self, timeout_s: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode
