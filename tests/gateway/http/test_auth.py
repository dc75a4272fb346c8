"""API keys: hashed constant-time matching, bearer parsing, admin routes never open."""

from __future__ import annotations

from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient
from pydantic import SecretStr

from gateway.errors import install_error_handlers
from gateway.http.auth import require_admin_key, require_api_key
from gateway.http.keys import KeySet


def test_keyset_matches_any_configured_key_and_hides_them() -> None:
    keys = KeySet([SecretStr("k1"), "k2", ""])
    assert keys.enabled and keys.accepts("k1") and keys.accepts("k2")
    assert not keys.accepts("k3") and not keys.accepts(None) and not keys.accepts("")
    assert "k1" not in repr(keys) and not KeySet([]).enabled


def app_with(api_keys: list[str], admin: list[str]) -> TestClient:
    app = FastAPI()
    app.state.api_keys, app.state.admin_keys = KeySet(api_keys), KeySet(admin)
    install_error_handlers(app)

    @app.get("/v1/x", dependencies=[Depends(require_api_key)])
    def client_route() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/admin/x", dependencies=[Depends(require_admin_key)])
    def admin_route() -> dict[str, bool]:
        return {"ok": True}

    return TestClient(app)


def test_client_keys() -> None:
    http = app_with(["good"], ["root"])
    assert http.get("/v1/x", headers={"Authorization": "Bearer good"}).status_code == 200
    assert http.get("/v1/x", headers={"Authorization": "bearer good"}).status_code == 200
    missing = http.get("/v1/x")
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert missing.json()["error"]["code"] == "invalid_api_key"
    assert http.get("/v1/x", headers={"Authorization": "Basic good"}).status_code == 401
    assert http.get("/v1/x", headers={"Authorization": "Bearer root"}).status_code == 401
    assert app_with([], []).get("/v1/x").status_code == 200  # no keys configured: open


def test_admin_key_is_separate_and_required() -> None:
    http = app_with(["good"], ["root"])
    assert http.get("/admin/x", headers={"Authorization": "Bearer root"}).status_code == 200
    assert http.get("/admin/x", headers={"Authorization": "Bearer good"}).status_code == 401
    disabled = app_with([], []).get("/admin/x")
    assert disabled.status_code == 403 and disabled.json()["error"]["code"] == "admin_disabled"
