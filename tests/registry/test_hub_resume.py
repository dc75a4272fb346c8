"""Crash resume: kill -9 a download process half way through a throttled file, download again,
and get identical bytes with only the missing part transferred."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.harness.checkpoints import drafter_files
from bench.harness.fakehub import Blob, FakeHub
from drafter_registry.hub import download_drafter

REPO_ROOT = Path(__file__).resolve().parents[2]
WEIGHTS = "python/model.safetensors"

# The worker uses no `endpoint=` argument: HF_ENDPOINT in its environment selects the fake hub,
# as when the gateway runs with HF_ENDPOINT set.
WORKER = """
import json, sys
from drafter_registry.hub import download_drafter
download_drafter(repo_id="org/drafters", revision="main", subfolder="python", cache_dir=sys.argv[1],
                 progress=lambda done, total: print(json.dumps([done, total]), flush=True),
                 progress_interval_s=0.05)
print("finished", flush=True)
"""


def start_worker(hub: FakeHub, cache: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_TELEMETRY": "1",
           "HF_HUB_DISABLE_PROGRESS_BARS": "1", "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen([sys.executable, "-c", WORKER, str(cache)], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_bytes(worker: subprocess.Popen[str], threshold: int, timeout_s: float = 60.0) -> int:
    deadline = time.monotonic() + timeout_s
    assert worker.stdout is not None
    while time.monotonic() < deadline:
        line = worker.stdout.readline()
        if not line:
            break
        done, _total = json.loads(line)
        if done >= threshold:
            return int(done)
    raise AssertionError(f"worker never reached {threshold} bytes: "
                         f"{worker.stderr.read() if worker.stderr else ''}")


def settled_count(hub: FakeHub, path: str, quiet_s: float = 0.3) -> int:
    """Bytes served once the server noticed the dead client (it may still push a chunk or two
    into the closed socket right after the kill)."""
    last, since = -1, time.monotonic()
    while time.monotonic() - since < quiet_s:
        now = hub.bytes_served[path]
        if now != last:
            last, since = now, time.monotonic()
        time.sleep(0.02)
    return last


def test_a_killed_download_resumes_where_it_stopped(fake_hub: FakeHub, hub_cache: Path) -> None:
    files = drafter_files("python", pad_to=1_800_000)
    fake_hub.add_repo("org/drafters", files)
    weights = files[WEIGHTS]
    # ~0.5 s to the kill, then ~4 s more before the download could finish by itself: the kill
    # lands half way however slowly this process reads the progress and sends the signal.
    fake_hub.throttle_bps = 400_000
    kill_at = 200_000

    worker = start_worker(fake_hub, hub_cache)
    try:
        wait_for_bytes(worker, threshold=kill_at)
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        for stream in (worker.stdout, worker.stderr):
            if stream is not None:
                stream.close()
    assert worker.returncode == -signal.SIGKILL

    blobs = hub_cache / "models--org--drafters" / "blobs"
    partial = blobs / f"{Blob.of(WEIGHTS, weights).sha256}.incomplete"
    on_disk = partial.stat().st_size
    assert kill_at * 3 // 4 < on_disk < len(weights)
    assert partial.read_bytes() == weights[:on_disk]  # what survived the kill is a clean prefix

    fake_hub.throttle_bps = None
    served_before = settled_count(fake_hub, WEIGHTS)
    result = download_drafter(repo_id="org/drafters", revision="main", subfolder="python",
                              cache_dir=hub_cache, endpoint=fake_hub.url)

    final = (result.local_path / "model.safetensors").read_bytes()
    assert hashlib.sha256(final).digest() == hashlib.sha256(weights).digest()
    assert result.bytes_transferred == len(weights) - on_disk  # config.json was already complete
    assert fake_hub.bytes_served[WEIGHTS] - served_before == len(weights) - on_disk
    assert not partial.exists()
