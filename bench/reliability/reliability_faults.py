"""Fault-injection scenarios of the reliability benchmark: a database outage (a cuttable TCP
proxy in front of PostgreSQL), replica convergence, a crash during a download (the fake Hub of
`bench.harness.fakehub`) and hand-made corrupt checkpoints, built on the probes of
`scenarios.py`. `python -m bench.reliability.reliability_bench` runs them for the report and
tests/reliability/test_faults.py at CI size; each returns its figures
and a `held` verdict, and raises only on a harness problem.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import threading
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from sqlalchemy import create_engine, text

from bench.harness.postgres import fresh_postgres_database, url_string
from bench.reliability import scenarios as R
from gateway.config import Settings

if TYPE_CHECKING:
    from bench.harness.fakehub import FakeHub

# ---- a TCP proxy that can be cut -----------------------------------------------------------------


class TcpProxy:
    """Loopback TCP proxy to `upstream`. `cut()` resets every connection and refuses new ones
    (what clients see when a database host goes away); `restore()` listens again on the same
    port. Threads are daemons and every socket has a timeout, so nothing outlives a test."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port: int = probe.getsockname()[1]
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._up = threading.Event()
        self._acceptor: threading.Thread = threading.Thread()
        self.connections = 0

    def start(self) -> TcpProxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.settimeout(0.1)
        self._listener = listener
        self._up.set()
        self._acceptor = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        self._acceptor.start()
        return self

    def _accept(self, listener: socket.socket) -> None:
        while self._up.is_set() and self._listener is listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns.update((client, upstream))
                self.connections += 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(None)
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            self._drop(src)
            self._drop(dst)

    def _drop(self, sock: socket.socket) -> None:
        with self._lock:
            self._conns.discard(sock)
        with contextlib.suppress(OSError):
            # SO_LINGER 0: close with a RST, as a vanished host's peer would see
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                            b"\x01\x00\x00\x00\x00\x00\x00\x00")
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()

    def cut(self) -> None:
        self._up.clear()
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # stop listening now, not when accept returns
            self._acceptor.join(5)
            listener.close()
        with self._lock:
            conns = list(self._conns)
        for sock in conns:
            self._drop(sock)

    def restore(self) -> None:
        self.start()

    def close(self) -> None:
        self.cut()


def database_outage(pool: Path, workdir: Path, pg_admin_url: str, *, outage_s: float = 4.0,
                    clients: int = 2) -> dict[str, Any]:
    """A gateway on PostgreSQL behind a proxy that is cut for `outage_s` while clients stream.

    Holds when: every generation request during the outage succeeds; the admin API answers
    503 `registry_unavailable` (never hangs, never 500); `/health` stays 200; after the proxy
    is restored the admin API answers again and a drafter registered then is fetched,
    validated and served (pool sync and fetcher recovered)."""
    out: dict[str, Any] = {"outage_s": outage_s}
    drafter_dir = pool.parent / "drafters" / "beta"
    with fresh_postgres_database(pg_admin_url, prefix="hedgespec_rel") as db_url:
        proxy = TcpProxy((db_url.host or "127.0.0.1", int(db_url.port or 5432))).start()
        proxied = url_string(db_url.set(host="127.0.0.1", port=proxy.port))
        server = R.start_server(pool, workdir, *R.KEY_FLAGS, "--database-url", proxied,
                                settings={"HEDGESPEC_POOL_SYNC_INTERVAL_S": "0.2"})
        try:
            out.update(_outage_run(server.base_url, proxy, drafter_dir, outage_s, clients))
        finally:
            server.stop()
            proxy.close()
            # Expected while the database is down: the request-log writer and pool sync log
            # their failed attempts (with tracebacks) and retry.
            out["log_problems"] = R.server_log_problems(server.log(), expected_from=(
                "drafter_registry.request_log", "gateway.pool.sync", "gateway.pool.registry"))
            out["request_logs_dropped"] = sum(
                int(m) for m in re.findall(r"could not write (\d+) request logs", server.log()))
    load = out.get("load", {})
    out["held"] = (
        load.get("errors") == 0 and load.get("ok", 0) > 0 and load.get("rejected_429") == 0
        and set(out["admin_during"]) == {503}
        and out["admin_codes_during"] == ["registry_unavailable"]
        and out["health_during"] == 200 and out["generation_during"] == 200
        and out["ready_during"] == 200 and out["admin_after"] == 200
        and out["recovered_drafter"] == "ready+serving"
        and not out["log_problems"]
    )
    return out


class _BackgroundLoad:
    """Closed-loop streaming clients in a thread of their own until `finish()`, which returns
    their load summary (empty if the load never finished)."""

    def __init__(self, base_url: str, clients: int) -> None:
        self._base_url, self._clients = base_url, clients
        self._stop_now = False
        self._summary: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> _BackgroundLoad:
        self._thread.start()
        return self

    def _run(self) -> None:
        async def main() -> R.LoadResult:
            stop = asyncio.Event()
            task = asyncio.create_task(R.run_load(self._base_url, clients=self._clients,
                                                  duration_s=600, body=R.chat_body(16), stop=stop))
            while not self._stop_now:
                await asyncio.sleep(0.05)
            stop.set()
            return await task

        self._summary = asyncio.run(main()).summary()

    def finish(self) -> dict[str, Any]:
        self._stop_now = True
        self._thread.join(120)
        return self._summary


def _admin_during_outage(admin: httpx.Client, drafter_dir: Path, outage_s: float) -> dict[str, Any]:
    """Hit the admin API (two reads, one write) every 0.3 s for `outage_s`: statuses, error
    codes and the slowest round."""
    cut_at = time.monotonic()
    during, codes, slowest = [], set(), 0.0
    while time.monotonic() - cut_at < outage_s:
        started = time.monotonic()
        for method, path, body in (("GET", "/admin/api/drafters", None),
                                   ("GET", "/admin/api/pool", None),
                                   ("POST", "/admin/api/drafters",
                                    {"name": "during", "source": "local",
                                     "path": str(drafter_dir)})):
            resp = admin.request(method, path, json=body)
            during.append(resp.status_code)
            if resp.status_code >= 400:
                codes.add(resp.json()["error"]["code"])
        slowest = max(slowest, time.monotonic() - started)
        time.sleep(0.3)
    return {"admin_during": sorted(set(during)), "admin_codes_during": sorted(codes),
            "admin_slowest_s": round(slowest, 2)}


def _serving_during_outage(plain: httpx.Client) -> dict[str, Any]:
    """`/health`, `/ready` and one generation while the database is down."""
    return {
        "health_during": plain.get("/health").status_code,
        "ready_during": plain.get("/ready").status_code,
        "generation_during": plain.post(
            "/v1/chat/completions", json=R.chat_body(4, stream=False), headers=R.auth(R.API_KEY)
        ).status_code,
    }


def _recovery(admin: httpx.Client, plain: httpx.Client, proxy: TcpProxy,
              drafter_dir: Path) -> dict[str, Any]:
    """Restore the database, then time the admin API's return and serve a new drafter."""
    out: dict[str, Any] = {}
    proxy.restore()
    restored = time.monotonic()
    R.wait_for(lambda: admin.get("/admin/api/drafters").status_code == 200, 60,
               "the admin API after the database returned", interval_s=0.2)
    out["admin_after"] = 200
    out["admin_recovery_s"] = round(time.monotonic() - restored, 2)
    out["ready_after"] = R.wait_for(lambda: plain.get("/ready").status_code == 200 and 200, 30,
                                    "/ready after the database returned")
    created = admin.post("/admin/api/drafters", json={"id": "after-outage", "name": "after",
                                                      "source": "local", "path": str(drafter_dir)})
    out["register_after"] = created.status_code

    def served() -> bool:
        state = R.drafter_state(admin, "after-outage") or {}
        if state.get("status") == "failed":
            raise AssertionError(f"after-outage failed: {state.get('error')}")
        return state.get("status") == "ready" and bool(state.get("serving"))

    R.wait_for(served, 60, "a drafter registered after the outage to be served")
    out["recovered_drafter"] = "ready+serving"
    out["recovery_s"] = round(time.monotonic() - restored, 2)
    return out


def _outage_run(base_url: str, proxy: TcpProxy, drafter_dir: Path, outage_s: float,
                clients: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    load = _BackgroundLoad(base_url, clients).start()
    admin = httpx.Client(base_url=base_url, timeout=30, headers=R.auth(R.ADMIN_KEY))
    plain = httpx.Client(base_url=base_url, timeout=30)
    try:
        time.sleep(1.0)
        out["admin_before"] = admin.get("/admin/api/drafters").status_code
        proxy.cut()
        out.update(_admin_during_outage(admin, drafter_dir, outage_s))
        out.update(_serving_during_outage(plain))
        out.update(_recovery(admin, plain, proxy, drafter_dir))
    finally:
        summary = load.finish()
        admin.close()
        plain.close()
    out["load"] = summary
    return out


# ---- replica convergence -------------------------------------------------------------------------

def _has_status(http: httpx.Client, drafter_id: str, status: str) -> bool:
    return (R.drafter_state(http, drafter_id) or {}).get("status") == status


def _serves(http: httpx.Client, drafter_id: str, expected: bool) -> bool:
    return (drafter_id in R.serving_ids(http)) == expected


CONVERGE_CLAIM_S = 5.0  # issue 6: "converge on the same pool within a few seconds of a change"


def _shared_registry(stack: contextlib.ExitStack, database_url: str | None,
                     workdir: Path) -> tuple[str, str]:
    """(database URL, backend name) of the registry both replicas share."""
    if database_url:
        url = stack.enter_context(fresh_postgres_database(database_url, prefix="hedgespec_rel"))
        return url_string(url), "postgresql"
    workdir.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{workdir / 'registry.db'}", "sqlite"


def _time_one_change(a: httpx.Client, b: httpx.Client, drafter_id: str,
                     drafter_dir: Path) -> tuple[float, float]:
    """Register through a, time until b serves it; delete through b, time until a drops it."""
    created = a.post("/admin/api/drafters", json={
        "id": drafter_id, "name": drafter_id, "source": "local", "path": str(drafter_dir)})
    if created.status_code != 202:
        raise AssertionError(f"register {drafter_id}: {created.status_code} {created.text}")
    R.wait_for(partial(_has_status, a, drafter_id, "ready"),
               60, f"{drafter_id} ready", interval_s=0.02)
    ready_at = time.monotonic()
    R.wait_for(partial(_serves, b, drafter_id, True), 60,
               f"replica b serving {drafter_id}", interval_s=0.02)
    added = time.monotonic() - ready_at
    deleted = b.delete(f"/admin/api/drafters/{drafter_id}")
    if deleted.status_code != 200:
        raise AssertionError(f"delete {drafter_id}: {deleted.status_code} {deleted.text}")
    deleted_at = time.monotonic()
    R.wait_for(partial(_serves, a, drafter_id, False), 60,
               f"replica a dropping {drafter_id}", interval_s=0.02)
    return added, time.monotonic() - deleted_at


def replica_convergence(pool: Path, workdir: Path, database_url: str | None, *,
                        changes: int = 5) -> dict[str, Any]:
    """Two replicas on one registry database, each polling it at the default interval
    (`pool_sync_interval_s`). `changes` times: register a drafter through replica a and time
    until replica b serves it (counted from a's `ready`, so the fetch is not included), then
    delete it through b and time until a stops serving it. PostgreSQL when `database_url` is
    given (a fresh database on that server), else a shared SQLite file.

    Holds when every change reached the other replica within `CONVERGE_CLAIM_S`."""
    drafter_dir = pool.parent / "drafters" / "alpha"
    with contextlib.ExitStack() as stack:
        db_url, backend = _shared_registry(stack, database_url, workdir)
        servers = [R.start_server(pool, workdir / name, *R.KEY_FLAGS, "--database-url", db_url)
                   for name in ("a", "b")]
        for server in servers:
            stack.callback(server.stop)
        a, b = (stack.enter_context(R._admin(s.base_url)) for s in servers)
        adds, removes = [], []
        for i in range(changes):
            added, removed = _time_one_change(a, b, f"replicated-{i}", drafter_dir)
            adds.append(added)
            removes.append(removed)
    slowest = max(adds + removes, default=0.0)
    return {
        "backend": backend, "changes": changes,
        "sync_interval_s": Settings.model_fields["pool_sync_interval_s"].default,
        "add_p50_s": R._round(R.percentile(adds, 50), 3), "add_max_s": round(max(adds), 3),
        "remove_p50_s": R._round(R.percentile(removes, 50), 3),
        "remove_max_s": round(max(removes), 3),
        "claim_s": CONVERGE_CLAIM_S, "held": slowest < CONVERGE_CLAIM_S,
    }


# ---- kill -9 during a download -------------------------------------------------------------------

HUB_REPO = "org/tiny-drafters"
HUB_SUBFOLDER = "alpha"


def _kill_mid_download(pool: Path, workdir: Path, hub: FakeHub, environ: dict[str, str],
                       weights_path: str, kill_at_bytes: float) -> dict[str, Any]:
    """Start a server, register the Hub drafter, kill -9 the server once `kill_at_bytes` of
    the weights were sent; keeps its log as `server-killed.log`."""
    out: dict[str, Any] = {}
    server = R.start_server(pool, workdir, *R.KEY_FLAGS, environ=environ)
    try:
        with httpx.Client(base_url=server.base_url, timeout=30,
                          headers=R.auth(R.ADMIN_KEY)) as admin:
            created = admin.post("/admin/api/drafters", json={
                "id": "remote", "name": "remote", "source": "hf", "repo_id": HUB_REPO,
                "subfolder": HUB_SUBFOLDER})
            assert created.status_code == 202, created.text
            R.wait_for(lambda: hub.bytes_served[weights_path] >= kill_at_bytes, 60,
                       "the download to be under way", interval_s=0.01)
            out["status_before_kill"] = (R.drafter_state(admin, "remote") or {}).get("status")
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(30)
        out["exit_status"] = server.proc.returncode
        time.sleep(0.3)  # the hub notices the closed socket
        out["killed_at_bytes"] = hub.bytes_served[weights_path]
    finally:
        server.stop()
    shutil.copy(server.log_path, workdir / "server-killed.log")
    return out


def _resume_after_restart(pool: Path, workdir: Path, hub: FakeHub, environ: dict[str, str],
                          weights_path: str) -> dict[str, Any]:
    """Restart on the same database and cache: the drafter's status, whether it resumes to
    serving, a generation with it, and the bytes sent again."""
    out: dict[str, Any] = {}
    before_restart = hub.bytes_served[weights_path]
    restarted = R.start_server(pool, workdir, *R.KEY_FLAGS, environ=environ)
    try:
        with httpx.Client(base_url=restarted.base_url, timeout=30,
                          headers=R.auth(R.ADMIN_KEY)) as admin:
            out["status_after_restart"] = (R.drafter_state(admin, "remote") or {}).get("status")

            def done() -> str | None:
                state = R.drafter_state(admin, "remote") or {}
                if state.get("status") == "failed":
                    return f"failed: {state.get('error')}"
                return ("ready+serving" if state.get("status") == "ready" and state.get("serving")
                        else None)

            out["final_status"] = R.wait_for(done, 90, "the resumed drafter")
            reply = httpx.post(f"{restarted.base_url}/v1/chat/completions", timeout=60,
                               json=R.chat_body(4, stream=False, policy="fixed:remote"),
                               headers=R.auth(R.API_KEY))
            out["generation_with_it"] = reply.status_code
    finally:
        restarted.stop()
        out["log_problems"] = R.server_log_problems(restarted.log())
    out["bytes_after_restart"] = hub.bytes_served[weights_path] - before_restart
    return out


def download_crash(pool: Path, workdir: Path, *, throttle_bps: int = 60_000,
                   kill_fraction: float = 0.35) -> dict[str, Any]:
    """Register a Hub drafter, kill -9 the server when `kill_fraction` of its weights arrived,
    check the registry on disk, restart on the same database and cache.

    Holds when: the database passes SQLite's integrity check and shows the drafter
    `downloading` (not `ready`, not lost); the restarted server resumes it by itself to
    `ready` and serves it; and fewer bytes than the whole file were sent again (resumed, not
    restarted)."""
    from bench.harness.fakehub import FakeHub

    source = pool.parent / "drafters" / HUB_SUBFOLDER
    files = {f"{HUB_SUBFOLDER}/{p.name}": p.read_bytes() for p in source.iterdir() if p.is_file()}
    weights_path = f"{HUB_SUBFOLDER}/model.safetensors"
    size = len(files[weights_path])
    out: dict[str, Any] = {"file_bytes": size, "throttle_bps": throttle_bps}
    with FakeHub() as hub:
        hub.add_repo(HUB_REPO, files)
        hub.throttle_bps = throttle_bps
        environ = {"HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0", "HF_HUB_DISABLE_TELEMETRY": "1",
                   "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
        out.update(_kill_mid_download(pool, workdir, hub, environ, weights_path,
                                      size * kill_fraction))
        out.update(_inspect_registry(workdir / "registry.db", "remote"))
        out["partial_files"] = sorted(p.name for p in (workdir / "hf-cache").rglob("*.incomplete"))
        hub.throttle_bps = None
        out.update(_resume_after_restart(pool, workdir, hub, environ, weights_path))
    out["held"] = (
        out["integrity"] == "ok" and out["status_on_disk"] == "downloading"
        and out["final_status"] == "ready+serving" and out["generation_with_it"] == 200
        and 0 < out["bytes_after_restart"] < size and not out["log_problems"]
    )
    return out


def _inspect_registry(db_path: Path, drafter_id: str) -> dict[str, Any]:
    """The registry as a crash left it: integrity, the drafter's row and its audit trail."""
    engine = create_engine(f"sqlite:///{db_path}")
    try:
        with engine.connect() as connection:
            integrity = connection.execute(text("PRAGMA integrity_check")).scalar()
            fk = connection.execute(text("PRAGMA foreign_key_check")).fetchall()
            row = connection.execute(text("SELECT status, error FROM drafters WHERE id = :i"),
                                     {"i": drafter_id}).first()
            trail = connection.execute(text(
                "SELECT action, detail FROM audit_events WHERE target = :i ORDER BY id"),
                {"i": drafter_id}).fetchall()
    finally:
        engine.dispose()
    statuses = []
    for action, detail in trail:
        if action == "drafter.status":
            parsed = json.loads(detail) if isinstance(detail, str) else detail
            statuses.append(parsed.get("to"))
    return {"integrity": integrity, "foreign_key_violations": len(fk),
            "status_on_disk": row[0] if row else None, "audit_statuses_on_disk": statuses}


# ---- corrupt drafter files -----------------------------------------------------------------------


def make_corrupt_drafters(root: Path, good: Path, marker: Path) -> dict[str, Path]:
    """Directories that look like drafters and are not: each must end `failed`."""
    import torch
    from safetensors.torch import load_file, save_file

    weights = (good / "model.safetensors").read_bytes()
    config = (good / "config.json").read_text()
    cases: dict[str, Path] = {}

    def case(name: str, files: dict[str, bytes | str]) -> None:
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        for fname, data in files.items():
            (d / fname).write_bytes(data.encode() if isinstance(data, str) else data)
        cases[name] = d

    case("garbage-weights", {"config.json": config, "model.safetensors": os.urandom(len(weights))})
    case("truncated-weights",
         {"config.json": config, "model.safetensors": weights[: len(weights) // 2]})
    case("huge-header", {"config.json": config,
                         "model.safetensors": (2**40).to_bytes(8, "little") + b"{" * 64})
    case("bad-config", {"config.json": "{not json", "model.safetensors": weights})
    case("config-not-object", {"config.json": "[1, 2, 3]", "model.safetensors": weights})
    case("empty-dir", {})
    tensors = load_file(str(good / "model.safetensors"))
    name = next(k for k, v in tensors.items() if v.ndim == 2)
    tensors[name] = tensors[name][:, :-1].contiguous()
    case("wrong-shapes", {"config.json": config})
    save_file(tensors, str(cases["wrong-shapes"] / "model.safetensors"))

    from bench.harness.checkpoints import drafter_files  # a well-formed drafter of another target

    case("other-target", {k.split("/")[-1]: v for k, v in drafter_files().items()})

    class Payload:  # what a malicious pytorch_model.bin does when unpickled without weights_only
        def __reduce__(self) -> tuple[Any, tuple[str]]:
            return (os.system, (f"touch {marker}",))

    case("pickle-payload", {"config.json": config})
    torch.save({"fc.weight": Payload()}, cases["pickle-payload"] / "pytorch_model.bin")
    return cases


def corrupt_drafters(base_url: str, workdir: Path, good: Path, *,
                     timeout_s: float = 60) -> dict[str, Any]:
    """Register each corrupt directory through the admin API on a running server."""
    marker = workdir / "PWNED"
    cases = make_corrupt_drafters(workdir / "cases", good, marker)
    statuses: dict[str, str] = {}
    errors: dict[str, str] = {}
    with httpx.Client(base_url=base_url, timeout=30, headers=R.auth(R.ADMIN_KEY)) as admin:
        for name, path in cases.items():
            resp = admin.post("/admin/api/drafters",
                              json={"id": f"bad-{name}", "name": f"bad {name}", "source": "local",
                                    "path": str(path)})
            assert resp.status_code == 202, resp.text
        for name in cases:
            def final(name: str = name) -> dict[str, Any] | None:
                state = R.drafter_state(admin, f"bad-{name}") or {}
                return state if state.get("status") in ("failed", "ready") else None

            state = R.wait_for(final, timeout_s, f"bad-{name} to settle")
            statuses[name] = state["status"] + ("+serving" if state.get("serving") else "")
            errors[name] = str(state.get("error"))[:160]
        serving = R.serving_ids(admin)
    reply = httpx.post(f"{base_url}/v1/chat/completions", json=R.chat_body(4, stream=False),
                       headers=R.auth(R.API_KEY), timeout=60)
    out = {"statuses": statuses, "errors": errors, "payload_executed": marker.exists(),
           "serving_after": serving, "generation_after": reply.status_code}
    out["held"] = (all(s == "failed" for s in statuses.values()) and not marker.exists()
                   and reply.status_code == 200
                   and not any(s.startswith("bad-") for s in serving))
    return out
