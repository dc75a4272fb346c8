"""`hedgespec drafter add|list|enable|disable|remove|retry|import` against a registry database
with no server (SQLite and PostgreSQL): rows, audit events, output and exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.speculation.model_free.ngram import NGRAM_DEFAULTS
from drafter_registry import crud
from drafter_registry.db import make_engine, make_session_factory
from gateway.cli import main as hedgespec


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = hedgespec(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def drafter(database_url: str, drafter_id: str) -> Any:
    engine = make_engine(database_url)
    try:
        with make_session_factory(engine)() as session:
            return crud.get_drafter(session, drafter_id=drafter_id)
    finally:
        engine.dispose()


def events(database_url: str, target: str) -> list[tuple[str, str, Any]]:
    engine = make_engine(database_url)
    try:
        with make_session_factory(engine)() as session:
            rows = crud.list_events(session, target=target)
            return [(e.actor, e.action, (e.detail or {}).get("to")) for e in reversed(rows)]
    finally:
        engine.dispose()


def test_add_from_the_hub_with_revision_and_subfolder(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "drafter", "add", "--database-url", database_url,
                         "--repo-id", "aladinggit/hedgespec_eagle_drafters", "--revision", "v2",
                         "--subfolder", "llama3.1-8b-instruct_python", "--name", "Paper Python",
                         "--domain", "python", "--tag", "paper")
    assert code == 0, err
    body = json.loads(out)
    assert body["id"] == "paper-python" and body["status"] == "pending"
    assert (body["repo_id"], body["revision"], body["subfolder"]) == (
        "aladinggit/hedgespec_eagle_drafters", "v2", "llama3.1-8b-instruct_python")
    assert body["domain"] == "python" and body["tags"] == ["paper"] and body["enabled"] is True
    assert events(database_url, "paper-python") == [("cli", "drafter.create", None)]


def test_add_a_local_directory_records_an_absolute_path(
    database_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "my-drafter").mkdir()
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "drafter", "add", "--database-url", database_url,
                       "--path", "my-drafter")
    assert code == 0
    body = json.loads(out)
    assert body["id"] == "my-drafter" and body["source"] == "local"
    assert body["local_path"] == str(tmp_path / "my-drafter")


def test_invalid_or_conflicting_input_exits_nonzero_with_a_message(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "drafter", "add", "--database-url", database_url,
                       "--repo-id", "not a repo")
    assert code == 2 and "invalid repo id 'not a repo'" in err
    assert run(capsys, "drafter", "add", "--database-url", database_url, "--repo-id", "org/x",
               "--id", "taken")[0] == 0
    code, _, err = run(capsys, "drafter", "add", "--database-url", database_url,
                       "--repo-id", "org/y", "--id", "taken")
    assert code == 1 and "already taken" in err
    with pytest.raises(SystemExit) as exited:  # argparse: exactly one of --repo-id / --path
        hedgespec(["drafter", "add", "--database-url", database_url, "--repo-id", "a/b",
                   "--path", "/x"])
    assert exited.value.code == 2
    code, _, err = run(capsys, "drafter", "add", "--database-url", "nosuchdb://x", "--path", "/x")
    assert code == 2 and "hedgespec drafter add:" in err


def test_disable_enable_retry_and_remove(database_url: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "drafter", "add", "--database-url", database_url, "--repo-id", "org/d",
               "--id", "cycle")[0] == 0
    code, out, _ = run(capsys, "drafter", "disable", "--database-url", database_url, "cycle")
    assert code == 0 and json.loads(out)["status"] == "disabled"
    assert drafter(database_url, "cycle").status == "disabled"
    code, out, _ = run(capsys, "drafter", "enable", "--database-url", database_url, "cycle")
    # Never validated: enabling sends it back to be fetched, not straight to ready.
    assert code == 0 and json.loads(out)["status"] == "pending"
    code, _, err = run(capsys, "drafter", "retry", "--database-url", database_url, "cycle")
    assert code == 1 and "cannot move it to pending" in err  # only failed drafters are retried
    code, out, _ = run(capsys, "drafter", "remove", "--database-url", database_url, "cycle")
    assert code == 0 and json.loads(out) == {"id": "cycle", "deleted": True}
    assert drafter(database_url, "cycle") is None
    code, _, err = run(capsys, "drafter", "remove", "--database-url", database_url, "cycle")
    assert code == 1 and "drafter 'cycle' not found" in err
    assert [a for _, a, _ in events(database_url, "cycle")] == [
        "drafter.create", "drafter.status", "drafter.status", "drafter.delete"]


def test_list_as_a_table_and_as_json(database_url: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "drafter", "add", "--database-url", database_url, "--repo-id",
               "org/listed", "--subfolder", "py", "--id", "listed", "--domain", "python")[0] == 0
    code, out, _ = run(capsys, "drafter", "list", "--database-url", database_url)
    assert code == 0
    header, *lines = out.splitlines()
    assert header.split() == ["ID", "STATUS", "PROGRESS", "DOMAIN", "SOURCE"]
    assert any(line.split() == ["listed", "pending", "python", "org/listed@main/py"]
               for line in lines), out
    code, out, _ = run(capsys, "drafter", "list", "--database-url", database_url, "--json")
    body = json.loads(out)
    assert body["count"] == len(body["data"]) and body["pool_version"] > 0
    assert "listed" in {d["id"] for d in body["data"]}


def test_import_a_seed_pool_is_idempotent(database_url: str, capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    pool = tmp_path / "pool.json"  # HedgeSpec style, sub-folders named (no hub needed)
    pool.write_text(json.dumps({"target": "meta-llama/Llama-3.1-8B-Instruct", "drafters": [
        {"id": d, "name": f"HedgeSpec {d}", "domain": d, "source": "hf",
         "repo_id": "aladinggit/hedgespec_eagle_drafters", "subfolder": f"lm318/model/{d}"}
        for d in ("generalist", "python", "math", "biology", "chemistry", "medical", "news",
                  "sql")]}))
    code, out, err = run(capsys, "drafter", "import", "--database-url", database_url, str(pool))
    assert code == 0, err
    first = json.loads(out)
    assert first["target"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert {r["action"] for r in first["results"]} == {"created"} and len(first["results"]) == 8
    row = drafter(database_url, "python")
    assert (row.source, row.repo_id, row.status) == (
        "hf", "aladinggit/hedgespec_eagle_drafters", "pending")
    assert row.subfolder and row.target_model == "meta-llama/Llama-3.1-8B-Instruct"
    code, out, _ = run(capsys, "drafter", "import", "--database-url", database_url, str(pool))
    assert code == 0 and {r["action"] for r in json.loads(out)["results"]} == {"unchanged"}
    # A seed pool of local drafters under the same ids: registered from the Hub above, they
    # are reported as conflicts and never overridden.
    same_ids = tmp_path / "same-ids.json"
    same_ids.write_text(json.dumps({"target": "t", "drafters": [
        {"id": r["id"], "name": f"Local {r['id']}", "source": "local",
         "path": f"demo/pool/drafters/{r['id']}"} for r in first["results"]]}))
    code, out, _ = run(capsys, "drafter", "import", "--database-url", database_url,
                       str(same_ids))
    assert code == 0 and {r["action"] for r in json.loads(out)["results"]} == {"conflict"}
    assert drafter(database_url, "python").source == "hf"
    # Relative local paths resolve against --base-dir.
    local = tmp_path / "local.json"
    local.write_text(json.dumps({"target": "demo/pool/target", "drafters": [
        {"id": "seeded-local", "name": "Seeded local", "source": "local", "path": "d/sql"}]}))
    code, out, _ = run(capsys, "drafter", "import", "--database-url", database_url, str(local),
                       "--base-dir", str(tmp_path))
    assert code == 0 and json.loads(out)["results"][0]["action"] == "created"
    assert drafter(database_url, "seeded-local").local_path == str(tmp_path / "d" / "sql")
    bad = tmp_path / "bad.json"
    bad.write_text('{"drafters": []}')
    code, _, err = run(capsys, "drafter", "import", "--database-url", database_url, str(bad))
    assert code == 2 and "invalid seed pool" in err


def test_the_default_database_is_the_servers_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'from-env.db'}"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HEDGESPEC_DATABASE_URL", url)
    assert run(capsys, "drafter", "add", "--repo-id", "org/env", "--id", "env")[0] == 0
    assert drafter(url, "env").repo_id == "org/env"


def test_add_list_and_remove_a_model_free_drafter(database_url: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "drafter", "add", "--database-url", database_url, "--kind",
                         "ngram", "--param", "max_n=4", "--param", "max_depth=6", "--id", "lookup")
    assert code == 0, err
    body = json.loads(out)
    assert (body["id"], body["kind"], body["source"], body["status"]) == (
        "lookup", "ngram", "none", "ready")
    assert body["params"] == {**NGRAM_DEFAULTS, "max_n": 4, "max_depth": 6}  # all of them
    row = drafter(database_url, "lookup")
    assert (row.kind, row.params, row.local_path) == ("ngram", body["params"], None)
    code, out, _ = run(capsys, "drafter", "list", "--database-url", database_url)
    params = [f"{k}={v}" for k, v in sorted(body["params"].items())]
    assert any(line.split() == ["lookup", "ready", "100%", "ngram", *params]
               for line in out.splitlines()), out
    code, out, _ = run(capsys, "drafter", "disable", "--database-url", database_url, "lookup")
    assert code == 0 and json.loads(out)["status"] == "disabled"
    code, out, _ = run(capsys, "drafter", "enable", "--database-url", database_url, "lookup")
    assert code == 0 and json.loads(out)["status"] == "ready"  # nothing to fetch again
    code, out, _ = run(capsys, "drafter", "remove", "--database-url", database_url, "lookup")
    assert code == 0 and drafter(database_url, "lookup") is None
    assert [a for _, a, _ in events(database_url, "lookup")] == [
        "drafter.create", "drafter.status", "drafter.status", "drafter.delete"]


@pytest.mark.parametrize(("argv", "message"), [
    (["--kind", "ngram", "--param", "max_n=99"], "max_n"),  # out of range
    (["--kind", "ngram", "--param", "mystery=1"], "unknown ngram parameter(s) ['mystery']"),
    (["--kind", "ngram", "--param", "max_n=four"], "must be an integer, got 'four'"),
    (["--kind", "ngram", "--param", "max_n"], "--param takes NAME=INT"),
    (["--kind", "nope"], "unknown drafter kind 'nope'"),
    (["--kind", "ngram", "--repo-id", "a/b"], "has no weights: drop --repo-id"),
    (["--repo-id", "a/b", "--param", "max_n=3"], "--param is for model-free drafters"),
    ([], "one of --repo-id or --path is required"),
])  # fmt: skip
def test_bad_model_free_adds_exit_2_with_the_message(
    database_url: str, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, "drafter", "add", "--database-url", database_url, "--id",
                         "bad", *argv)
    assert code == 2 and message in err and out == "", err
    assert err.startswith("hedgespec drafter add: ")
    engine = make_engine(database_url)
    try:
        with make_session_factory(engine)() as session:
            assert crud.get_drafter(session, drafter_id="bad") is None
    finally:
        engine.dispose()


def test_import_checks_model_free_entries_against_the_engine(
    database_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pool = tmp_path / "pool.json"
    pool.write_text(json.dumps({"target": "t", "drafters": [
        {"id": "seeded-lookup", "kind": "ngram", "params": {"max_n": 5}},
        {"id": "seeded-bad", "kind": "ngram", "params": {"max_n": 0}}]}))
    code, out, err = run(capsys, "drafter", "import", "--database-url", database_url, str(pool))
    assert code == 2 and "seeded-bad" in err  # the rest of the file is imported
    results = {r["id"]: r["action"] for r in json.loads(out)["results"]}
    assert results == {"seeded-lookup": "created", "seeded-bad": "invalid"}
    assert drafter(database_url, "seeded-lookup").params == {**NGRAM_DEFAULTS, "max_n": 5}
    code, out, _ = run(capsys, "drafter", "import", "--database-url", database_url, str(pool))
    assert json.loads(out)["results"][0]["action"] == "unchanged"
