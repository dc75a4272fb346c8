"""POST /admin/api/drafters/discover against a real `hedgespec serve` and a fake Hub holding the
HedgeSpec paper's layout: the dry run adds nothing, discovery registers exactly the drafters,
which download and validate in the background (a corrupt one fails alone while the rest of the
pool keeps serving), and every error is OpenAI-shaped and changes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.harness.fakehub import FakeHub
from bench.harness.server import ServerProcess
from bench.harness.tiny_pool import DRAFTER_IDS
from tests.gateway_registry.conftest import API_KEY, Admin, chat, start_server

pytestmark = pytest.mark.timeout(600)
REPO = "aladinggit/hedgespec_eagle_drafters"
# Real tiny drafters for the served target, under the paper's folder names.
LAYOUT = {"python": "gamma", "SQL": "delta", "MedQA": "corrupt"}


@pytest.fixture(scope="module")
def paper_hub(hub_files: dict[str, bytes]) -> Iterator[FakeHub]:
    files = {f"lm318/model/{folder}/{name.split('/', 1)[1]}": data
             for folder, source in LAYOUT.items()
             for name, data in hub_files.items() if name.startswith(source + "/")}
    files["lm318/model/broken/config.json"] = b'{"architectures": ["LlamaForCausalLMEagle3"'
    files["lm318/model/broken/model.safetensors"] = hub_files["zeta/model.safetensors"]
    files["lm318/model/plots/mat.png"] = b"png"
    with FakeHub() as fake:
        fake.add_repo(REPO, files)
        fake.faults["lm318/model/MedQA/model.safetensors"] = "corrupt"
        yield fake


@pytest.fixture(scope="module")
def server(pool_file: Path, paper_hub: FakeHub, database_url: str,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(pool_file, tmp_path_factory.mktemp("discover-api"),
                        database_url=database_url, hub=paper_hub)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def admin(server: ServerProcess) -> Admin:
    return Admin(server)


def discover(admin: Admin, **body: Any) -> httpx.Response:
    return admin.http.post("/drafters/discover", json={"repo_id": REPO, **body})


def test_discover_needs_the_admin_key(server: ServerProcess) -> None:
    for headers in ({}, {"Authorization": f"Bearer {API_KEY}"}):
        resp = httpx.post(f"{server.base_url}/admin/api/drafters/discover", headers=headers,
                          json={"repo_id": REPO, "prefix": "lm318/model"})
        assert resp.status_code == 401, resp.text


def test_the_dry_run_lists_and_adds_nothing(admin: Admin) -> None:
    before = admin.drafters()
    resp = discover(admin, prefix="lm318/model/", dry_run=True)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["object"] == "drafter.discovery" and body["dry_run"] is True
    assert {r["subfolder"]: (r["id"], r["domain"], r["action"]) for r in body["results"]} == {
        "lm318/model/python": ("python", "python", "would_create"),
        "lm318/model/SQL": ("sql", "sql", "would_create"),
        "lm318/model/MedQA": ("medqa", "medical", "would_create"),
        "lm318/model/broken": (None, None, "skipped"),
    }
    assert admin.drafters() == before


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"repo_id": "aladinggit/missing", "prefix": "lm318/model"}, 404, "hub_not_found"),
    ({"prefix": "lm318/model", "revision": "v404"}, 404, "hub_not_found"),
    ({"prefix": "qw38/model"}, 404, "no_drafters_found"),
    ({"prefix": "lm318/model/plots"}, 404, "no_drafters_found"),
    ({"prefix": "../etc"}, 400, None),
    ({"prefix": "lm318/model", "dry_run": "yes"}, 400, None),
])
def test_errors_are_openai_shaped_and_change_nothing(admin: Admin, body: dict[str, Any],
                                                     status: int, code: str | None) -> None:
    before = admin.drafters()
    resp = admin.http.post("/drafters/discover", json={"repo_id": REPO, **body})
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert error["message"] and (code is None or error["code"] == code)
    assert admin.drafters() == before


def test_discovered_drafters_validate_and_serve_while_a_broken_one_fails_alone(
    server: ServerProcess, admin: Admin
) -> None:
    resp = discover(admin, prefix="lm318/model", name_prefix="Paper")
    assert resp.status_code == 202, resp.text
    actions = {r["id"]: r["action"] for r in resp.json()["results"] if r["id"]}
    assert actions == {"python": "created", "sql": "created", "medqa": "created"}
    for drafter_id in ("python", "sql"):
        row = admin.wait_status(drafter_id, "ready", "failed")
        assert row["status"] == "ready", row["error"]
        assert row["inspection"]["compatible"] is True and row["name"].startswith("Paper ")
    failed = admin.wait_status("medqa", "ready", "failed")
    assert failed["status"] == "failed" and "corrupt" in failed["error"]
    admin.wait_serving("python")
    serving = admin.serving()
    assert {"python", "sql", *DRAFTER_IDS} <= serving and "medqa" not in serving
    resp = chat(server, "fixed:python")
    assert resp.status_code == 200, resp.text
    assert set(resp.json()["metrics"]["speculative_decoding"]["drafter_choices"]) == {"python"}
    # Discovering again registers nothing new.
    again = discover(admin, prefix="lm318/model", name_prefix="Paper").json()["results"]
    assert {r["action"] for r in again if r["id"]} == {"unchanged"}
