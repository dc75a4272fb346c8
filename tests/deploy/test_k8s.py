"""deploy/k8s: schema validity (kubernetes-validate, when installed) and the properties that
make replicas safe: one GPU each, probes on /health and /ready, a shared registry, no secrets."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.deploy.conftest import K8S_DIR, PENDING_SETTINGS, settings_variables

# Oldest Kubernetes minor we claim to support (its schema must accept the manifests too).
OLDEST_K8S = "1.29.0"


def _one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def _gateway_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    pod = _one(objects, "Deployment", "hedgespec-gateway")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return container


def test_manifests_match_the_kubernetes_schemas(k8s_objects: list[dict[str, Any]]) -> None:
    validate = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate not installed"
    )
    resources = [o for o in k8s_objects if o["kind"] != "Kustomization"]
    assert len(resources) >= 8
    for version in (validate.latest_version(), OLDEST_K8S):
        for obj in resources:
            body = {k: v for k, v in obj.items() if k != "__file__"}
            validate.validate(body, version, strict=True)  # raises on any unknown field


def test_kustomization_applies_everything_but_the_secret_example(
    k8s_objects: list[dict[str, Any]],
) -> None:
    kustomization = _one(k8s_objects, "Kustomization")
    listed = set(kustomization["resources"])
    files = {p.name for p in K8S_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == files - {"secret.example.yaml"}
    namespace = _one(k8s_objects, "Namespace")["metadata"]["name"]
    assert kustomization["namespace"] == namespace


def test_gateway_replicas_each_get_one_gpu_and_probes(k8s_objects: list[dict[str, Any]]) -> None:
    deployment = _one(k8s_objects, "Deployment", "hedgespec-gateway")
    assert deployment["spec"]["replicas"] >= 2
    # No surge: a rollout pod waiting for a GPU that its predecessor still holds would hang.
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0
    container = _gateway_container(k8s_objects)
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    http = {p["name"]: p["containerPort"] for p in container["ports"]}["http"]
    assert http == 8000
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert container["startupProbe"]["httpGet"]["path"] == "/health"
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["port"] in ("http", 8000)


def test_gateway_runs_unprivileged_and_drains(k8s_objects: list[dict[str, Any]]) -> None:
    from gateway.config import Settings

    pod = _one(k8s_objects, "Deployment", "hedgespec-gateway")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001  # the Dockerfile's numeric USER
    assert pod["terminationGracePeriodSeconds"] >= Settings(_env_file=None).drain_timeout_s + 5
    container = _gateway_container(k8s_objects)
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    if container["securityContext"].get("readOnlyRootFilesystem"):
        mounted = {m["mountPath"] for m in container["volumeMounts"]}
        assert "/tmp" in mounted


def test_replicas_share_the_hf_cache_and_the_registry(k8s_objects: list[dict[str, Any]]) -> None:
    container = _gateway_container(k8s_objects)
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["hf-cache"] == env["HF_HOME"]
    pod = _one(k8s_objects, "Deployment", "hedgespec-gateway")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "hf-cache")
    claim = _one(k8s_objects, "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]

    sources = {next(iter(s.values()))["name"] for s in container["envFrom"]}
    assert sources == {"hedgespec-config", "hedgespec-secrets"}
    secret = _one(k8s_objects, "Secret", "hedgespec-secrets")
    url = secret["stringData"]["HEDGESPEC_DATABASE_URL"]
    service = _one(k8s_objects, "Service", "hedgespec-postgres")["metadata"]["name"]
    assert re.fullmatch(rf"postgresql\+psycopg://hedgespec:[^@]+@{service}:5432/hedgespec", url)


def test_postgres_is_persistent_and_probed(k8s_objects: list[dict[str, Any]]) -> None:
    statefulset = _one(k8s_objects, "StatefulSet", "hedgespec-postgres")
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    assert "pg_isready" in container["readinessProbe"]["exec"]["command"]
    claims = {t["metadata"]["name"] for t in statefulset["spec"]["volumeClaimTemplates"]}
    assert {m["name"] for m in container["volumeMounts"]} <= claims
    env = {e["name"]: e for e in container["env"]}
    assert "secretKeyRef" in env["POSTGRES_PASSWORD"]["valueFrom"]


def test_secret_example_holds_only_placeholders(k8s_objects: list[dict[str, Any]]) -> None:
    data = _one(k8s_objects, "Secret", "hedgespec-secrets")["stringData"]
    for key in ("HEDGESPEC_API_KEYS", "HEDGESPEC_ADMIN_KEY", "POSTGRES_PASSWORD"):
        assert "change-me" in data[key], key  # the entry point refuses these at start
    assert data["HF_TOKEN"] in ("", None)


def test_configured_variables_are_gateway_settings(k8s_objects: list[dict[str, Any]]) -> None:
    known = settings_variables() | PENDING_SETTINGS
    config = _one(k8s_objects, "ConfigMap", "hedgespec-config")["data"]
    secret = _one(k8s_objects, "Secret", "hedgespec-secrets")["stringData"]
    names = {n for n in (*config, *secret) if n.startswith("HEDGESPEC_")}
    assert names - known == set(), "not read by gateway/config.py"
    assert config["HEDGESPEC_TREE_DEPTH"] == "8"
