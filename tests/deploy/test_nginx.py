"""deploy/nginx.conf, the scale profile's load balancer: it balances over exactly the compose
replicas, streams server-sent events unbuffered, outlives the gateway's own deadlines, and never
retries a generation. When nginx is installed it is also syntax-checked and run in front of a
real gateway started by the entry point."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.deploy.conftest import API_KEY, NGINX_CONF, Server

UPSTREAMS = ("hedgespec_api", "hedgespec_admin")


def _directives(text: str) -> str:
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


def _upstream_servers(text: str, name: str) -> list[str]:
    block = re.search(rf"upstream {name}\s*\{{(.*?)\}}", text, re.S)
    assert block, f"no upstream {name}"
    return re.findall(r"^\s*server\s+(\S+)", block.group(1), re.M)


def _seconds(value: str) -> float:
    number, unit = re.fullmatch(r"(\d+)(ms|s|m|h)?", value).groups()  # type: ignore[union-attr]
    return float(number) * {"ms": 0.001, "s": 1, None: 1, "m": 60, "h": 3600}[unit]


@pytest.fixture(scope="module")
def conf() -> str:
    text = _directives(NGINX_CONF.read_text())
    assert text.count("{") == text.count("}")
    return text


def test_balances_over_exactly_the_compose_replicas(conf: str, compose: dict[str, Any]) -> None:
    replicas = {
        name for name, s in compose["services"].items() if "build" in s and "deploy" in s
    }  # fmt: skip
    assert len(replicas) >= 2
    for upstream in UPSTREAMS:
        servers = _upstream_servers(conf, upstream)
        assert {s.split(":")[0] for s in servers} == replicas, upstream
        assert all(s.endswith(":8000") for s in servers), upstream
    assert "least_conn;" in conf.split("upstream hedgespec_admin")[0]


def test_streams_unbuffered_and_outlives_the_gateway_deadlines(conf: str) -> None:
    from gateway.config import Settings

    settings = Settings(_env_file=None)
    assert re.search(r"^\s*proxy_buffering off;", conf, re.M)
    assert re.search(r"^\s*proxy_http_version 1\.1;", conf, re.M)
    for directive in ("proxy_read_timeout", "proxy_send_timeout"):
        value = re.search(rf"{directive} (\S+);", conf)
        assert value and _seconds(value.group(1)) > settings.request_timeout_s, directive
    body = re.search(r"client_max_body_size (\d+)([km]?);", conf)
    assert body
    limit = int(body.group(1)) * {"": 1, "k": 1024, "m": 1 << 20}[body.group(2)]
    assert limit > settings.max_body_bytes  # the gateway answers 413 itself, in OpenAI's shape


def test_never_retries_a_generation(conf: str) -> None:
    retry = re.search(r"proxy_next_upstream ([^;]+);", conf)
    assert retry and "non_idempotent" not in retry.group(1)


def test_lb_health_is_what_compose_probes(conf: str, compose: dict[str, Any]) -> None:
    probe = " ".join(compose["services"]["nginx"]["healthcheck"]["test"])
    path = re.search(r"http://127\.0\.0\.1(/\S+)", probe)
    assert path and f"location = {path.group(1)}" in conf


# ---- with a real nginx ------------------------------------------------------------------------

NGINX = shutil.which("nginx") or (
    "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None
)  # fmt: skip
needs_nginx = pytest.mark.skipif(NGINX is None, reason="nginx not installed")


def _prefix(tmp_path: Path, upstreams: list[str], port: int) -> Path:
    """A self-contained nginx prefix: our server config included as compose mounts it, the
    replica names swapped for loopback addresses, listening on an unprivileged port."""
    conf = NGINX_CONF.read_text().replace("listen 80;", f"listen 127.0.0.1:{port};")
    names = sorted({s.split(":")[0] for s in _upstream_servers(conf, UPSTREAMS[0])})
    for name, address in zip(names, upstreams, strict=True):
        conf = re.sub(rf"server {re.escape(name)}:8000\b", f"server {address}", conf)
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "default.conf").write_text(conf)
    temp = " ".join(
        f"{kind}_temp_path {tmp_path / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )  # fmt: skip
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path / 'nginx.pid'};\nerror_log {tmp_path / 'error.log'};\n"
        "daemon off;\nevents {}\n"
        f"http {{ access_log off; {temp} include {tmp_path / 'conf.d'}/*.conf; }}\n"
    )
    return tmp_path / "nginx.conf"


@needs_nginx
def test_nginx_accepts_the_config(tmp_path: Path) -> None:
    assert NGINX is not None
    config = _prefix(tmp_path, ["127.0.0.1:1", "127.0.0.2:1"], 18080)
    result = subprocess.run(
        [NGINX, "-t", "-p", str(tmp_path), "-c", str(config)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def balancer(pool: Path, tmp_path: Path) -> Iterator[tuple[str, Server]]:
    """nginx in front of one real gateway; the second upstream is down, as after a crash."""
    assert NGINX is not None
    gateway_dir, nginx_dir = tmp_path / "gateway", tmp_path / "nginx"
    gateway_dir.mkdir()
    nginx_dir.mkdir()
    db = f"sqlite:///{gateway_dir / 'registry.db'}"
    with Server.start(pool, gateway_dir, database_url=db) as server:
        port = _free_port()
        dead = f"127.0.0.1:{_free_port()}"
        config = _prefix(nginx_dir, [f"127.0.0.1:{server.port}", dead], port)
        proc = subprocess.Popen(
            [NGINX, "-p", str(nginx_dir), "-c", str(config)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 10
            while True:
                try:
                    httpx.get(f"{base}/lb-health", timeout=1)
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline and proc.poll() is None, "nginx down"
                    time.sleep(0.1)
            server.wait_ready()
            yield base, server
        finally:
            proc.terminate()
            proc.wait(timeout=10)


@needs_nginx
def test_streams_a_completion_through_the_balancer(balancer: tuple[str, Server]) -> None:
    base, _ = balancer
    assert httpx.get(f"{base}/lb-health", timeout=5).text == "ok\n"
    assert httpx.get(f"{base}/metrics", timeout=5).status_code == 404
    headers = {"Authorization": f"Bearer {API_KEY}"}
    # Several requests: least_conn must route around the dead upstream without a client error.
    for _ in range(4):
        assert httpx.get(f"{base}/v1/models", headers=headers, timeout=10).status_code == 200
    model = httpx.get(f"{base}/v1/models", headers=headers, timeout=10).json()["data"][0]["id"]
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Hello"}],
        "max_tokens": 8,
        "stream": True,
    }
    events = []
    with httpx.stream(
        "POST", f"{base}/v1/chat/completions", json=body, headers=headers, timeout=60
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(line[len("data: ") :])
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks and all(c["object"] == "chat.completion.chunk" for c in chunks)
