"""The admin pool API against a real `hedgespec serve` and the fake Hub: auth, hot add from the
Hub then use with `fixed:<id>`, disable/enable, remove, retry, every failure case (the serving
pool untouched), the audit log and the request log; on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.harness.fakehub import FakeHub
from bench.harness.server import ServerProcess
from bench.harness.tiny_pool import DRAFTER_IDS
from core.speculation.model_free.ngram import NGRAM_DEFAULTS
from tests.gateway_registry.conftest import (
    ADMIN,
    API_KEY,
    HUB_REPO,
    Admin,
    chat,
    start_server,
    wait_for,
)

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def server(pool_file: Path, hub: FakeHub, database_url: str,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(pool_file, tmp_path_factory.mktemp("admin-api"), database_url=database_url,
                        hub=hub)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def admin(server: ServerProcess) -> Admin:
    return Admin(server)


def hf(name: str, subfolder: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "source": "hf", "repo_id": HUB_REPO, "revision": "v1",
            "subfolder": subfolder, **extra}


def speculative(resp: httpx.Response) -> dict[str, Any]:
    assert resp.status_code == 200, resp.text
    return dict(resp.json()["metrics"]["speculative_decoding"])


# ---- auth -------------------------------------------------------------------------------------

ROUTES = [
    ("GET", "/admin/api/drafters", None),
    ("POST", "/admin/api/drafters", hf("x", "gamma")),
    ("GET", "/admin/api/drafters/alpha", None),
    ("PATCH", "/admin/api/drafters/alpha", {"enabled": False}),
    ("DELETE", "/admin/api/drafters/alpha", None),
    ("POST", "/admin/api/drafters/alpha/retry", None),
    ("GET", "/admin/api/events", None),
    ("GET", "/admin/api/pool", None),
]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
def test_admin_api_needs_the_admin_key(server: ServerProcess, admin: Admin, method: str,
                                       path: str, body: Any) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {API_KEY}"}):
        resp = httpx.request(method, server.base_url + path, json=body, headers=headers)
        assert resp.status_code == 401, (method, path, headers, resp.text)
        assert resp.json()["error"]["code"] == "invalid_api_key"
    # Nothing happened: the served drafter is still there and enabled.
    assert admin.drafters()["alpha"]["status"] == "ready"


# ---- the served pool --------------------------------------------------------------------------


def test_the_served_pool_is_registered_ready_and_serving(admin: Admin) -> None:
    rows = admin.drafters()
    for drafter_id in DRAFTER_IDS:
        row = rows[drafter_id]
        assert (row["source"], row["status"], row["enabled"], row["serving"]) == (
            "local", "ready", True, True)
        assert row["local_path"].endswith(f"drafters/{drafter_id}")
    pool = admin.http.get("/pool").json()
    assert pool["in_sync"] and set(DRAFTER_IDS) <= set(pool["serving"])


# ---- hot add from the Hub, use, remove --------------------------------------------------------


def test_add_from_the_hub_until_ready_then_use_it(server: ServerProcess, admin: Admin,
                                                  hub: FakeHub) -> None:
    created = admin.add(**hf("Gamma", "gamma", domain="test"))
    assert created["id"] == "gamma" and created["status"] == "pending"
    assert created["enabled"] is True and created["serving"] is False
    ready = admin.wait_status("gamma", "ready", "failed")
    assert ready["status"] == "ready", ready["error"]
    assert ready["commit_sha"] == hub.repos[HUB_REPO].refs["v1"]
    assert ready["bytes_total"] > 0 and ready["bytes_done"] == ready["bytes_total"]
    assert ready["progress"] == 1.0 and ready["inspection"]["compatible"] is True
    # `ready` means usable at once on the replica that validated it: no waiting for a sync.
    assert ready["serving"] is True
    metrics = speculative(chat(server, "fixed:gamma", max_tokens=12))
    assert metrics["drafter_choices"] and set(metrics["drafter_choices"]) == {"gamma"}
    auto = speculative(chat(server, "auto"))
    assert "gamma" in auto["final_weights"]  # the learner sees the new drafter too


def test_remove_takes_it_out_for_new_requests(server: ServerProcess, admin: Admin) -> None:
    admin.add(**hf("Delta", "delta"))
    assert admin.wait_status("delta", "ready", "failed")["status"] == "ready"
    speculative(chat(server, "fixed:delta"))
    resp = admin.http.delete("/drafters/delta")
    assert resp.status_code == 200 and resp.json() == {"id": "delta", "object": "drafter",
                                                        "deleted": True}
    assert admin.http.get("/drafters/delta").status_code == 404
    admin.wait_serving("delta", present=False)
    refused = chat(server, "fixed:delta")
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "hedgespec.policy"
    assert refused.json()["error"]["code"] == "invalid_policy"
    speculative(chat(server, "auto"))  # the rest of the pool serves on


def test_disable_then_enable(server: ServerProcess, admin: Admin) -> None:
    resp = admin.http.patch("/drafters/beta", json={"enabled": False})
    assert resp.status_code == 200, resp.text
    assert (resp.json()["status"], resp.json()["enabled"]) == ("disabled", False)
    admin.wait_serving("beta", present=False)
    assert chat(server, "fixed:beta").json()["error"]["param"] == "hedgespec.policy"
    resp = admin.http.patch("/drafters/beta", json={"enabled": True})
    assert (resp.json()["status"], resp.json()["enabled"]) == ("ready", True)
    admin.wait_serving("beta", present=True)
    assert set(speculative(chat(server, "fixed:beta"))["drafter_choices"]) == {"beta"}


def test_disable_during_the_download_stops_it_and_enable_fetches_again(
    server: ServerProcess, admin: Admin, hub: FakeHub, hub_files: dict[str, bytes]
) -> None:
    weights = "zeta/model.safetensors"
    size = len(hub_files[weights])
    others = sum(len(b) for p, b in hub_files.items() if p.startswith("zeta/") and p != weights)
    base = hub.bytes_served[weights]  # the Hub outlives one backend's run
    hub.throttle_bps = size / 4
    try:
        admin.add(**hf("Zeta", "zeta"))
        admin.wait_status("zeta", "downloading")
        # Weight bytes on disk (bytes_done also counts the small files), so there is something
        # to resume from.
        wait_for(lambda: admin.drafters()["zeta"]["bytes_done"] > others, 30, lambda: "no progress")
        resp = admin.http.patch("/drafters/zeta", json={"enabled": False})
        assert resp.json()["status"] == "disabled"
        assert hub.bytes_served[weights] - base < size
        # The download notices at its next progress write and stops; the throttle stays on
        # until then, or the rest of the file could be pushed into socket buffers meanwhile.
        wait_for(lambda: admin.http.get("/events", params={"target": "zeta"}).json()["count"] >= 3,
                 60, lambda: "no events")
    finally:
        hub.throttle_bps = None
    assert admin.drafters()["zeta"]["status"] == "disabled"  # the operator's change holds
    before_enable = hub.bytes_served[weights]
    resp = admin.http.patch("/drafters/zeta", json={"enabled": True})
    assert resp.json()["status"] == "pending"  # never validated: fetched again
    row = admin.wait_status("zeta", "ready", "failed")
    assert row["status"] == "ready" and row["serving"], row["error"]
    # Resumed from the bytes already on disk rather than from zero.
    assert hub.bytes_served[weights] - before_enable < size


def test_a_relative_local_path_is_stored_absolute(admin: Admin, server: ServerProcess) -> None:
    created = admin.add(id="relative", name="Relative", source="local", path="drafters/x")
    assert created["local_path"] == str(server.log_path.parent.resolve() / "drafters" / "x")
    assert admin.wait_status("relative", "failed")["error"]
    assert admin.http.delete("/drafters/relative").status_code == 200


def test_bad_requests_get_openai_shaped_errors(admin: Admin) -> None:
    cases = [
        ("POST", "/drafters", {"name": "x", "source": "hf", "repo_id": "not a repo"}, 400,
         "repo_id"),
        ("POST", "/drafters", {"name": "x", "source": "hf"}, 400, None),
        ("POST", "/drafters", {"name": "x", "source": "ftp", "repo_id": "a/b"}, 400, "source"),
        ("POST", "/drafters", {"name": "x", "source": "hf", "repo_id": "a/b", "mystery": 1}, 400,
         "mystery"),
        ("POST", "/drafters", {"name": "x", "source": "hf", "repo_id": "a/b", "subfolder": "../up"},
         400, "subfolder"),
        ("POST", "/drafters", {"id": "alpha", "name": "Other", "source": "local", "path": "/x"},
         409, None),
        ("PATCH", "/drafters/alpha", {"enabled": "no"}, 400, "enabled"),
        ("PATCH", "/drafters/alpha", {"status": "ready"}, 400, "status"),
        ("PATCH", "/drafters/missing", {"enabled": False}, 404, None),
        ("GET", "/drafters/missing", None, 404, None),
        ("DELETE", "/drafters/missing", None, 404, None),
        ("POST", "/drafters/missing/retry", None, 404, None),
        ("POST", "/drafters/alpha/retry", None, 409, None),  # ready: nothing to retry
        ("GET", "/events?limit=0", None, 400, "limit"),
    ]  # fmt: skip
    for method, path, body, status, param in cases:
        resp = admin.http.request(method, path, json=body)
        assert resp.status_code == status, (method, path, body, resp.text)
        error = resp.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"]
        if param is not None:
            assert error["param"] == param, (path, body, error)
    assert admin.drafters()["alpha"]["status"] == "ready"


# ---- model-free drafters ----------------------------------------------------------------------


def test_a_model_free_drafter_is_added_ready_serving_used_and_removed(
    server: ServerProcess, admin: Admin
) -> None:
    resp = admin.http.post("/drafters", json={"id": "lookup", "kind": "ngram",
                                              "params": {"max_n": 4, "max_depth": 6}})
    assert resp.status_code == 201, resp.text  # nothing to fetch: created, ready, serving
    created = resp.json()
    assert {k: created[k] for k in ("id", "name", "kind", "params", "source", "status",
                                    "serving", "enabled", "local_path", "repo_id")} == {
        "id": "lookup", "name": "lookup", "kind": "ngram",
        "params": {**NGRAM_DEFAULTS, "max_n": 4, "max_depth": 6},  # stored whole
        "source": "none", "status": "ready", "serving": True, "enabled": True,
        "local_path": None, "repo_id": None}  # fmt: skip
    assert admin.drafters()["lookup"]["kind"] == "ngram"
    assert admin.drafters()["alpha"]["kind"] == "eagle3"
    card = httpx.get(f"{server.base_url}/v1/models",
                     headers={"Authorization": f"Bearer {API_KEY}"}).json()["data"][0]
    assert "lookup" in card["spec"]["drafters"]
    assert card["spec"]["drafter_kinds"]["lookup"] == "ngram"
    assert card["spec"]["drafter_kinds"]["alpha"] == "eagle3"
    metrics = speculative(chat(server, "fixed:lookup", max_tokens=12,
                               prompt="one two three one two three one two three one two"))
    assert metrics["drafter_choices"] and set(metrics["drafter_choices"]) == {"lookup"}
    text = httpx.get(f"{server.base_url}/metrics").text
    assert 'hedgespec_spec_decode_num_drafts_total{drafter="lookup",kind="ngram"}' in text
    overview = httpx.get(f"{server.base_url}/admin/api/overview", headers=ADMIN).json()
    assert overview["drafter_kinds"]["lookup"] == "ngram"

    assert admin.http.delete("/drafters/lookup").status_code == 200
    admin.wait_serving("lookup", present=False)
    refused = chat(server, "fixed:lookup")
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "hedgespec.policy"
    actions = [(e["action"], (e["detail"] or {}).get("kind")) for e in reversed(
        admin.http.get("/events", params={"target": "lookup"}).json()["data"])]
    assert actions == [("drafter.create", "ngram"), ("drafter.delete", "ngram")]


def test_bad_model_free_drafters_get_400s_and_write_nothing(admin: Admin) -> None:
    cases = [
        ({"id": "m1", "kind": "nope"}, "kind", "unknown drafter kind 'nope'"),
        ({"id": "m2", "kind": "ngram", "params": {"mystery": 1}}, "params",
         "unknown ngram parameter(s) ['mystery']"),
        ({"id": "m3", "kind": "ngram", "params": {"max_n": "four"}}, "params",
         "must be an integer"),
        ({"id": "m4", "kind": "ngram", "params": {"max_n": 4.5}}, "params", "must be an integer"),
        ({"id": "m5", "kind": "ngram", "params": {"max_n": True}}, "params", "must be an integer"),
        ({"id": "m6", "kind": "ngram", "params": {"max_n": 99}}, "params", "max_n"),  # range
        ({"id": "m7", "kind": "ngram", "params": {"min_n": 3, "max_n": 2}}, "params", "min_n"),
        ({"id": "m8", "kind": "ngram", "params": {"max_n": [4]}}, "params", "must be a number"),
        ({"id": "m9", "kind": "Not A Kind"}, "kind", "invalid drafter kind"),
        ({"id": "m10", "kind": "ngram", "source": "hf", "repo_id": "a/b"}, None, "no weights"),
        ({"name": "x", "source": "hf", "repo_id": "a/b", "params": {"max_n": 4}}, "params",
         "params are for model-free drafters"),
        ({"id": "alpha", "kind": "ngram"}, None, "already taken"),  # 409, below
    ]  # fmt: skip
    before = admin.drafters()
    for body, param, words in cases:
        resp = admin.http.post("/drafters", json=body)
        assert resp.status_code == (409 if body.get("id") == "alpha" else 400), (body, resp.text)
        error = resp.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert words in error["message"], (body, error)
        if param is not None:
            assert error["param"] == param, (body, error)
    after = admin.drafters()
    assert after.keys() == before.keys() and after["alpha"]["kind"] == "eagle3"


# ---- failures are contained -------------------------------------------------------------------

FAILURES = {
    # id: (request body, words the readable error must contain)
    "unknown-repo": ({"name": "Unknown repo", "source": "hf", "repo_id": "hedgespec-test/nope"},
                     "repository 'hedgespec-test/nope' not found"),
    "bad-revision": (hf("Bad revision", "gamma", revision="no-such-branch"), "revision not found"),
    "missing-folder": (hf("Missing folder", "chemistry"), "not found in the repository"),
    "no-weights": (hf("No weights", "noweights"), "no weights in"),
    "corrupt": (hf("Corrupt", "corrupt"), "is corrupt"),
    "truncated": (hf("Truncated", "short"), "truncated"),
    "too-wide": (hf("Too wide", "wide"), "hidden size 32"),
    "other-vocab": (hf("Other vocabulary", "vocab"), "vocab"),
    "no-dir": ({"name": "No directory", "source": "local", "path": "/nonexistent/hedgespec"},
               "not found"),
}  # fmt: skip


@pytest.fixture(scope="module")
def failed(server: ServerProcess, admin: Admin) -> dict[str, dict[str, Any]]:
    """Every failing drafter submitted at once, with the pool it left behind."""
    before = admin.serving()
    for drafter_id, (body, _) in FAILURES.items():
        assert admin.add(id=drafter_id, **body)["id"] == drafter_id
    rows = {i: admin.wait_status(i, "failed", "ready") for i in FAILURES}
    rows["_pool"] = {"before": before, "after": admin.serving()}
    return rows


@pytest.mark.parametrize("drafter_id", sorted(FAILURES))
def test_failures_end_failed_with_a_readable_error(failed: dict[str, dict[str, Any]],
                                                   drafter_id: str) -> None:
    row = failed[drafter_id]
    assert row["status"] == "failed" and row["serving"] is False
    expected = FAILURES[drafter_id][1]
    assert expected.lower() in row["error"].lower(), row["error"]
    assert "Traceback" not in row["error"] and len(row["error"]) < 1000


def test_failures_leave_the_serving_pool_untouched(server: ServerProcess,
                                                   failed: dict[str, dict[str, Any]]) -> None:
    pool = failed["_pool"]
    assert pool["after"] == pool["before"] and not pool["after"] & set(FAILURES)
    for drafter_id in DRAFTER_IDS:
        assert set(speculative(chat(server, f"fixed:{drafter_id}"))["drafter_choices"]) == {
            drafter_id}


def test_retry_after_the_hub_is_fixed(admin: Admin, hub: FakeHub,
                                      hub_files: dict[str, bytes]) -> None:
    folder = f"late-{uuid.uuid4().hex[:8]}"  # the Hub outlives one backend's run
    admin.add(id="late", **hf("Published late", folder, revision="main"))
    first = admin.wait_status("late", "failed", "ready")
    assert first["status"] == "failed" and "not found" in first["error"]
    # The author pushes the missing sub-folder on main.
    hub.add_repo(HUB_REPO, {**hub_files, **{f"{folder}/{k.split('/')[1]}": v for k, v in
                                            hub_files.items() if k.startswith("epsilon/")}})
    resp = admin.http.post("/drafters/late/retry")
    assert resp.status_code == 202 and resp.json()["status"] == "pending"
    assert resp.json()["error"] is None
    ready = admin.wait_status("late", "ready", "failed")
    assert ready["status"] == "ready", ready["error"]
    assert ready["commit_sha"] == hub.repos[HUB_REPO].refs["main"]


# ---- audit and request logs -------------------------------------------------------------------


def test_the_audit_log_lists_the_actions(admin: Admin) -> None:
    admin.add(**hf("Audited", "epsilon"))
    admin.wait_status("audited", "ready", "failed")
    assert admin.http.patch("/drafters/audited", json={"enabled": False}).status_code == 200
    assert admin.http.delete("/drafters/audited").status_code == 200
    resp = admin.http.get("/events", params={"target": "audited"})
    assert resp.status_code == 200
    events = resp.json()["data"]
    actions = [(e["actor"], e["action"], (e["detail"] or {}).get("to")) for e in reversed(events)]
    assert actions[0] == ("admin-api", "drafter.create", None)
    assert ("fetcher", "drafter.status", "ready") in actions
    assert ("admin-api", "drafter.status", "disabled") in actions
    assert actions[-1] == ("admin-api", "drafter.delete", None)
    ids = [e["id"] for e in events]
    assert ids == sorted(ids, reverse=True)  # newest first
    # The replica records what it changed in its engine.
    syncs = admin.http.get("/events", params={"limit": 1000}).json()["data"]
    assert any(e["action"] == "pool.sync" and "audited" in (e["detail"] or {}).get("added", [])
               for e in syncs)
    page = admin.http.get("/events", params={"limit": 2, "before_id": ids[0]}).json()["data"]
    assert [e["id"] for e in page] == ids[1:3]


def test_finished_requests_land_in_the_request_log(server: ServerProcess) -> None:
    resp = chat(server, "fixed:alpha", max_tokens=6)
    metrics = speculative(resp)
    engine_id = f"{resp.json()['id']}-0"  # the engine request of choice 0

    def logged() -> Any:
        body = httpx.get(f"{server.base_url}/admin/api/requests", headers=ADMIN).json()
        assert body["source"] == "database"
        # matched by id: other tests' fixed:alpha requests may have the same rounds
        return [r for r in body["data"] if r["request_id"] == engine_id] or None

    rows = wait_for(logged, 60, lambda: "the request never reached the request log")
    assert rows[0]["status"] == "finished" and rows[0]["completion_tokens"] == 6
    assert rows[0]["policy"] == "fixed:alpha"
    assert rows[0]["drafter_per_round"] == metrics["drafter_choices"]
    assert rows[0]["prompt"] is None  # prompt text is stored only when the operator opts in


def test_prompt_text_is_logged_when_the_operator_opts_in(pool_file: Path, tmp_path: Path) -> None:
    server = start_server(pool_file, tmp_path / "srv",
                          database_url=f"sqlite:///{tmp_path / 'r.db'}",
                          env={"HEDGESPEC_LOG_PROMPTS": "true"})
    try:
        marker = f"prompt-{uuid.uuid4().hex[:8]}"
        assert chat(server, "fixed:alpha", max_tokens=3, prompt=f"Say {marker}").status_code == 200

        def logged() -> Any:
            body = httpx.get(f"{server.base_url}/admin/api/requests", headers=ADMIN).json()
            return [r for r in body["data"] if r["prompt"] and marker in r["prompt"]] or None

        rows = wait_for(logged, 60, lambda: "the prompt never reached the request log")
        assert rows[0]["status"] == "finished" and rows[0]["completion_tokens"] == 3
    finally:
        server.stop()
