"""Shared readers for the deployment files: they are checked statically here (no Docker engine
runs in CI), and the image's entry point is run outside Docker in test_entrypoint.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
DOCKERFILE = REPO_ROOT / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"
ENV_EXAMPLE = REPO_ROOT / ".env.example"
ENTRYPOINT = REPO_ROOT / "deploy" / "entrypoint.sh"
HEALTHCHECK = REPO_ROOT / "deploy" / "healthcheck.py"
NGINX_CONF = REPO_ROOT / "deploy" / "nginx.conf"
K8S_DIR = REPO_ROOT / "deploy" / "k8s"
DEPLOY_DOC = REPO_ROOT / "docs" / "deploy.md"

# Settings the deployment files name that gateway/config.py does not define yet. Each is only
# ever used commented out or documented as upcoming; see docs/deploy.md.
PENDING_SETTINGS = {"HEDGESPEC_DEVICE_MAP"}
# Variables read by deploy/entrypoint.sh itself, not by the gateway.
ENTRYPOINT_VARIABLES = {"HEDGESPEC_MIGRATE_ATTEMPTS", "HEDGESPEC_MIGRATE_DELAY_S"}

_ASSIGNMENT = re.compile(r"^\s*(#\s*)?([A-Z][A-Z0-9_]*)=(.*)$")


def settings_variables() -> set[str]:
    """Every HEDGESPEC_* variable the gateway's Settings class reads."""
    from gateway.config import Settings

    prefix = Settings.model_config.get("env_prefix", "")
    return {f"{prefix}{name}".upper() for name in Settings.model_fields}


def parse_env_file(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(active, commented) `NAME=value` assignments of a dotenv file, in file order."""
    active: dict[str, str] = {}
    commented: dict[str, str] = {}
    for line in path.read_text().splitlines():
        match = _ASSIGNMENT.match(line)
        if match:
            target = commented if match.group(1) else active
            target[match.group(2)] = match.group(3).strip()
    return active, commented


def commented_block(path: Path, heading: str) -> dict[str, str]:
    """The commented assignments that follow the `# --- <heading>` line, up to the next heading."""
    values: dict[str, str] = {}
    inside = False
    for line in path.read_text().splitlines():
        if line.startswith("# ---"):
            inside = heading.lower() in line.lower()
            continue
        match = _ASSIGNMENT.match(line)
        if inside and match and match.group(1):
            values[match.group(2)] = match.group(3).strip()
    return values


@pytest.fixture(scope="session")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="session")
def k8s_objects() -> list[dict[str, Any]]:
    objects = []
    for path in sorted(K8S_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                doc["__file__"] = path.name
                objects.append(doc)
    return objects
