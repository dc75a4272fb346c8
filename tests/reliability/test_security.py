"""Security (issue 9, item 4): keys on every route, keys never logged or returned, audited admin
actions, no remote code and no unsafe unpickling, validated repo ids and paths, CORS off by
default, a rate limit per key.

Public routes are a short whitelist below, each with its reason; every other route the app has
(enumerated from its own route table, so a route added later is covered without editing this
file) must refuse a request without its key, with a wrong key and with the other kind of key.
"""

from __future__ import annotations

import ast
import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from bench.harness.server import ServerProcess
from bench.reliability import scenarios as R
from tests.reliability.judge import assert_openai_error
from tests.reliability.routes import RouteInfo, app_routes, build_app

pytestmark = pytest.mark.timeout(300)
REPO_ROOT = Path(__file__).resolve().parents[2]

# path -> why it needs no key. Everything else must be /v1/* (client key) or /admin/api/*
# (admin key).
PUBLIC = {
    "/health": "liveness probe: orchestrators call it without credentials; says only 'ok'",
    "/ready": "readiness probe: same; reports model and drafter ids, no request data",
    "/metrics": "Prometheus scrape (vLLM does the same): aggregate counters, no request content; "
                "the shipped nginx config does not expose it (deploy/nginx.conf)",
    "/openapi.json": "the API schema: the same as the published source, no data or secrets",
    "/docs": "Swagger UI page over /openapi.json (its requests carry the user's own key)",
    "/docs/oauth2-redirect": "part of the Swagger UI page",
    "/redoc": "ReDoc page over /openapi.json",
    "/admin": "redirect to the static admin page",
    "/admin/": "the static admin page: HTML and JS with no data; it asks for the admin key and "
               "every call it makes goes to /admin/api/*",
    "/admin/static/{name:path}": "the admin page's static files (no traversal, see below)",
}
CLIENT_PREFIX, ADMIN_PREFIX = "/v1/", "/admin/api/"


def _body_for(method: str) -> dict[str, object]:
    # Valid JSON: a malformed body is answered 400 by FastAPI's parser before any dependency
    # runs (see test_malformed_json_is_refused_before_auth_without_reaching_a_handler).
    return {"json": {}} if method in ("POST", "PUT", "PATCH") else {}


def _routes(tmp_path: Path, **keys: object) -> tuple[TestClient, list[RouteInfo]]:
    app = build_app(tmp_path, **keys)
    return TestClient(app), app_routes(app)


def test_every_route_is_public_by_decision_or_needs_its_key(tmp_path: Path) -> None:
    http, routes = _routes(tmp_path, api_keys=["sk-client"], admin_key="sk-admin")
    assert {r.path for r in routes} >= set(PUBLIC), "stale whitelist entry"
    checked = 0
    for route in routes:
        if route.path in PUBLIC:
            continue
        if route.path.startswith(CLIENT_PREFIX):
            right, other = "sk-client", "sk-admin"
        elif route.path.startswith(ADMIN_PREFIX):
            right, other = "sk-admin", "sk-client"
        else:
            raise AssertionError(f"{route.path} is neither /v1, /admin/api nor whitelisted")
        for method in route.methods - {"HEAD"}:
            url = route.url()
            for presented in (None, "sk-wrong", other, right + "x", right[:-1]):
                resp = http.request(method, url, headers=R.auth(presented), **_body_for(method))  # type: ignore[arg-type]
                assert resp.status_code == 401, (method, url, presented, resp.status_code)
                assert resp.json()["error"]["code"] == "invalid_api_key"
                assert resp.headers["www-authenticate"] == "Bearer"
                checked += 1
    assert checked >= 5 * 15  # 15 protected method-routes today; more later is fine


def test_admin_api_is_never_open(tmp_path: Path) -> None:
    """No admin key configured: every /admin/api route is 403, whatever is presented."""
    http, routes = _routes(tmp_path)
    admin = [r for r in routes if r.path.startswith(ADMIN_PREFIX)]
    assert admin
    for route in admin:
        for method in route.methods - {"HEAD"}:
            for presented in (None, "anything", ""):
                resp = http.request(method, route.url(), headers=R.auth(presented),
                                    **_body_for(method))  # type: ignore[arg-type]
                assert resp.status_code == 403, (method, route.path)
                assert resp.json()["error"]["code"] == "admin_disabled"


def test_malformed_json_is_refused_before_auth_without_reaching_a_handler(tmp_path: Path) -> None:
    """FastAPI parses the JSON body before it runs dependencies, so an unauthenticated malformed
    body gets the parser's 400 rather than 401. Nothing is revealed (the generic parse message)
    and no handler runs; the per-address rate limit bounds what such clients can cost."""
    http, _ = _routes(tmp_path, api_keys=["sk-client"], admin_key="sk-admin")
    for path in ("/v1/chat/completions", "/admin/api/drafters"):
        resp = http.post(path, content=b"{bad", headers={"Content-Type": "application/json"})
        assert resp.status_code == 400
        assert resp.json()["error"]["message"] in (  # generic: nothing about the server
            "There was an error parsing the body", "The request body is not valid JSON.")


def test_static_files_do_not_traverse(tmp_path: Path) -> None:
    http, _ = _routes(tmp_path)
    for name in ("../app.py", "..%2fapp.py", "%2e%2e/%2e%2e/gateway/app.py", "/etc/passwd",
                 "....//....//etc/passwd", "..\\app.py"):
        resp = http.get(f"/admin/static/{name}")
        assert resp.status_code == 404, name
        assert b"import" not in resp.content and b"root:" not in resp.content


def test_cors_is_off_by_default(tmp_path: Path) -> None:
    http, _ = _routes(tmp_path, api_keys=["sk-client"], admin_key="sk-admin")
    preflight = {"Origin": "https://evil.example", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization"}
    for path in ("/v1/chat/completions", "/admin/api/drafters", "/health"):
        for resp in (http.options(path, headers=preflight),
                     http.get(path, headers={"Origin": "https://evil.example"})):
            assert not any(h.startswith("access-control-")
                           for h in resp.headers), (path, resp.headers)


# ---- a real server: keys never logged or returned, audited admin actions -------------------------

WRONG = "sk-reliability-client-typo"  # a presented wrong key is a secret too (a typo of a real one)


@pytest.fixture(scope="module")
def server(pool_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = R.start_server(pool_file, tmp_path_factory.mktemp("secure"), *R.KEY_FLAGS,
                          "--log-level", "debug",
                          settings={"HEDGESPEC_POOL_SYNC_INTERVAL_S": "0.2"})
    yield proc
    proc.stop()
    _assert_no_secret("server log", proc.log())  # nor after everything the module ran


def _secrets() -> list[str]:
    return [*R.KEYS, WRONG]


def _assert_no_secret(where: str, data: bytes | str) -> None:
    text = data if isinstance(data, str) else data.decode("utf-8", "replace")
    for secret in _secrets():
        assert secret not in text, f"{where} contains a key"


def test_keys_are_never_returned(server: ServerProcess) -> None:
    client, admin = R.auth(R.API_KEY), R.auth(R.ADMIN_KEY)
    calls: list[tuple[str, str, dict[str, str], object]] = [
        ("GET", "/health", {}, None), ("GET", "/ready", {}, None), ("GET", "/metrics", {}, None),
        ("GET", "/openapi.json", {}, None), ("GET", "/docs", {}, None),
        ("GET", "/admin/", {}, None),
        ("GET", "/v1/models", client, None), ("GET", f"/v1/models/{R.MODEL}", client, None),
        ("POST", "/v1/chat/completions", client, R.chat_body(4, stream=False)),
        ("POST", "/v1/chat/completions", client, R.chat_body(4)),
        ("POST", "/v1/completions", client,
         {"model": R.MODEL, "prompt": R.API_KEY, "max_tokens": 2}),
        ("GET", "/v1/models", R.auth(WRONG), None), ("GET", "/v1/models", {}, None),
        ("GET", "/admin/api/drafters", R.auth(WRONG), None),
        ("GET", "/admin/api/drafters", admin, None), ("GET", "/admin/api/pool", admin, None),
        ("GET", "/admin/api/events", admin, None), ("GET", "/admin/api/overview", admin, None),
        ("GET", "/admin/api/requests", admin, None),
    ]
    with httpx.Client(base_url=server.base_url, timeout=30) as http:
        for method, path, headers, body in calls:
            resp = http.request(method, path, headers=headers, json=body)
            assert resp.status_code < 500, (path, resp.text)
            where = f"{method} {path} -> {resp.status_code}"
            if path == "/v1/completions":  # the prompt *is* the key text here: only headers
                _assert_no_secret(where, str(resp.headers))
                continue
            _assert_no_secret(where, resp.content)
            _assert_no_secret(where + " headers", str(resp.headers))


def test_admin_actions_are_audited(server: ServerProcess, pool_file: Path, tmp_path: Path) -> None:
    drafter = tmp_path / "audited"
    shutil.copytree(pool_file.parent / "drafters" / "alpha", drafter)
    with httpx.Client(base_url=server.base_url, timeout=30, headers=R.auth(R.ADMIN_KEY)) as http:
        created = http.post("/admin/api/drafters", json={"id": "audited", "name": "Audited",
                                                         "source": "local", "path": str(drafter)})
        assert created.status_code == 202, created.text
        R.wait_for(lambda: (R.drafter_state(http, "audited") or {}).get("status") == "ready",
                   60, "audited ready")
        for patch in ({"enabled": False}, {"enabled": True}, {"domain": "code", "tags": ["x"]}):
            assert http.patch("/admin/api/drafters/audited", json=patch).status_code == 200
        assert http.post("/admin/api/drafters/audited/retry").status_code == 409  # ready: no retry
        assert http.delete("/admin/api/drafters/audited").status_code == 200
        events = http.get("/admin/api/events", params={"target": "audited", "limit": 100}).json()
    mine = [e for e in events["data"] if e["actor"] == "admin-api"]
    actions = [e["action"] for e in reversed(mine)]
    assert actions[0] == "drafter.create" and actions[-1] == "drafter.delete", actions
    transitions = [(e["detail"]["from"], e["detail"]["to"]) for e in reversed(mine)
                   if e["action"] == "drafter.status"]
    assert (("ready", "disabled") in transitions
            and ("disabled", "ready") in transitions), transitions
    assert "drafter.update" in actions
    assert all(e["at"] and e["id"] for e in mine)
    _assert_no_secret("audit log", json.dumps(events))


def test_repo_ids_and_paths_are_validated(server: ServerProcess) -> None:
    bad = [
        ({"source": "hf", "repo_id": "../../etc"}, "repo_id"),
        ({"source": "hf", "repo_id": "org/name/extra"}, "repo_id"),
        ({"source": "hf", "repo_id": "https://evil.example/x"}, "repo_id"),
        ({"source": "hf", "repo_id": "org/d", "revision": "../main"}, "revision"),
        ({"source": "hf", "repo_id": "org/d", "subfolder": "../up"}, "subfolder"),
        ({"source": "hf", "repo_id": "org/d", "subfolder": "/abs"}, "subfolder"),
        ({"source": "hf", "repo_id": "org/d", "id": "../x"}, "id"),
        ({"source": "local", "path": "/tmp/a\x00b"}, "path"),
        ({"source": "local", "path": ""}, "path"),
    ]
    with httpx.Client(base_url=server.base_url, timeout=30, headers=R.auth(R.ADMIN_KEY)) as http:
        for i, (fields, param) in enumerate(bad):
            resp = http.post("/admin/api/drafters", json={"name": f"bad-{i}", **fields})
            assert resp.status_code == 400, (fields, resp.text)
            assert resp.json()["error"]["param"] == param, (fields, resp.json())
        # An operator may point at any directory; one that is no drafter ends `failed`, unserved.
        resp = http.post("/admin/api/drafters", json={"id": "not-a-drafter", "name": "etc",
                                                      "source": "local", "path": "/etc"})
        assert resp.status_code == 202
        state = R.wait_for(lambda: (s := R.drafter_state(http, "not-a-drafter")) and
                           s["status"] == "failed" and s, 60, "not-a-drafter failed")
        assert not state["serving"] and state["error"]


def _present_every_key(base_url: str) -> None:
    """Every key and the wrong one, on client and admin routes; a generation (request log) and
    an admin action (audit log), so each place a key could be written is reached."""
    with httpx.Client(base_url=base_url, timeout=30) as http:
        for key in _secrets():
            for path in ("/v1/models", "/admin/api/drafters"):
                assert http.get(path, headers=R.auth(key)).status_code in (200, 401)
        reply = http.post("/v1/chat/completions", json=R.chat_body(2, stream=False),
                          headers=R.auth(R.API_KEY))
        assert reply.status_code == 200, reply.text
        created = http.post("/admin/api/drafters", headers=R.auth(R.ADMIN_KEY),
                            json={"id": "logged", "name": "x", "source": "local", "path": "/etc"})
        assert created.status_code == 202, created.text


def test_keys_are_never_logged(pool_file: Path, tmp_path: Path) -> None:
    """A server of its own, at log level debug, is presented every key: its log and its
    database hold none. (Keys passed as --api-key flags are visible in the process list, like
    any argument: use HEDGESPEC_API_KEYS / .env on shared hosts; see the report.)"""
    proc = R.start_server(pool_file, tmp_path / "logged", *R.KEY_FLAGS, "--log-level", "debug")
    try:
        _present_every_key(proc.base_url)
    finally:
        proc.stop()
    log = proc.log()
    assert "DEBUG" in log and "/v1/models" in log, "the log did not record the requests"
    _assert_no_secret("server log", log)
    databases = list(proc.log_path.parent.glob("registry.db*"))
    assert databases, "no registry database to inspect"
    for db in databases:
        _assert_no_secret(db.name, db.read_bytes())


# ---- the code itself: no remote code, no unsafe unpickling ---------------------------------------

RUNTIME_PACKAGES = ("core", "gateway", "drafter_registry", "demo", "bench", "migrations", "deploy")


def _python_files() -> list[Path]:
    files = [p for pkg in RUNTIME_PACKAGES for p in sorted((REPO_ROOT / pkg).rglob("*.py"))]
    assert len(files) > 30
    return files


def unsafe_calls(tree: ast.AST) -> list[str]:
    """trust_remote_code that is not literally False, torch.load without weights_only=True,
    numpy loads with allow_pickle=True, and pickle-family loaders."""
    problems = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.keyword) and node.arg == "trust_remote_code"
                and not (isinstance(node.value, ast.Constant) and node.value.value is False)):
                problems.append(f"line {node.value.lineno}: "
                                f"trust_remote_code={ast.unparse(node.value)}")
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "trust_remote_code" and not (
                    isinstance(value, ast.Constant) and value.value is False
                ):
                    problems.append(f"line {key.lineno}: {{'trust_remote_code': "
                                    f"{ast.unparse(value)}}}")
        if (isinstance(node, ast.ImportFrom)
            and node.module in ("torch", "pickle", "dill", "joblib")):
            for alias in node.names:
                if alias.name in ("load", "loads", "Unpickler"):
                    problems.append(f"line {node.lineno}: from {node.module} import {alias.name}")
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in ("pickle", "dill", "joblib", "cloudpickle"):
                    problems.append(f"line {node.lineno}: import {alias.name}")
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = ast.unparse(node.func.value)
        kwargs = {k.arg: k.value for k in node.keywords}
        if node.func.attr == "load" and owner == "torch":
            value = kwargs.get("weights_only")
            if not (isinstance(value, ast.Constant) and value.value is True):
                problems.append(f"line {node.lineno}: torch.load without weights_only=True")
        if node.func.attr in ("load", "loads") and owner in ("np", "numpy"):
            value = kwargs.get("allow_pickle")
            if value is not None and not (isinstance(value, ast.Constant) and value.value is False):
                problems.append(f"line {node.lineno}: numpy load with allow_pickle")
    return problems


def test_no_remote_code_and_no_unsafe_unpickling() -> None:
    found = {}
    for path in _python_files():
        problems = unsafe_calls(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        if problems:
            found[str(path.relative_to(REPO_ROOT))] = problems
    assert found == {}


def test_the_checker_catches_what_comments_cannot_hide() -> None:
    bad = ast.parse(
        "import torch\nfrom transformers import AutoModel\n"
        "# torch.load(f, weights_only=True)\n"
        "x = torch.load(f)\ny = torch.load(f, weights_only=False)\n"
        "m = AutoModel.from_pretrained(p, trust_remote_code=True)\n"
        "n = AutoModel.from_pretrained(p, trust_remote_code=flag)\n"
        "kw = {'trust_remote_code': True}\nimport pickle\nfrom torch import load\n"
    )
    assert len(unsafe_calls(bad)) == 7
    good = ast.parse("torch.load(f, map_location='cpu', weights_only=True)\n"
                     "AutoModel.from_pretrained(p, trust_remote_code=False)\n")
    assert unsafe_calls(good) == []


# ---- rate limit per key on a real server ---------------------------------------------------------


def until_refused(request: Callable[[], httpx.Response], limit: int = 50
                  ) -> tuple[list[httpx.Response], float]:
    """Requests back to back until the first 429 (at most `limit`), and the seconds they took."""
    responses: list[httpx.Response] = []
    started = time.monotonic()
    while len(responses) < limit and (not responses or responses[-1].status_code != 429):
        responses.append(request())
    return responses, time.monotonic() - started


def test_rate_limit_per_key(pool_file: Path, tmp_path: Path) -> None:
    proc = R.start_server(pool_file, tmp_path / "rate", *R.KEY_FLAGS, "--no-warmup",
                          settings={"HEDGESPEC_RATE_LIMIT_RPS": "1",
                                    "HEDGESPEC_RATE_LIMIT_BURST": "4"})
    try:
        with httpx.Client(base_url=proc.base_url, timeout=10) as http:
            first, elapsed = until_refused(lambda: http.get("/v1/models",
                                                            headers=R.auth(R.API_KEY)))
            statuses = [r.status_code for r in first]
            # The burst passes; then no more than the bucket refilled (1 per second) over the
            # time these requests took, measured here, however slow the machine.
            assert statuses[:4] == [200] * 4 and statuses[-1] == 429, statuses
            assert statuses.count(200) <= 4 + elapsed, (statuses, elapsed)
            refused = [r for r in first if r.status_code == 429]
            for resp in refused:
                assert assert_openai_error(resp.content)["code"] == "rate_limit_exceeded"
                assert int(resp.headers["retry-after"]) >= 1
            # The other key has its own bucket; waiting Retry-After is enough to be served.
            assert http.get("/v1/models", headers=R.auth(R.SECOND_KEY)).status_code == 200
            time.sleep(max(int(r.headers["retry-after"]) for r in refused))
            assert http.get("/v1/models", headers=R.auth(R.API_KEY)).status_code == 200
            # Wrong keys share their address's bucket: inventing keys does not buy requests.
            made_up = iter(range(1000))
            wrong, elapsed = until_refused(lambda: http.get(
                "/v1/models", headers=R.auth(f"sk-made-up-{next(made_up)}")))
            codes = [r.status_code for r in wrong]
            assert codes[-1] == 429 and codes.count(401) <= 4 + elapsed, (codes, elapsed)
            assert http.get("/health").status_code == 200  # probes are never limited
        assert R.server_counters(proc.base_url)["rejected_rate_limited"] >= 2
    finally:
        proc.stop()
