"""`hedgespec drafter add --prefix` and `hedgespec drafter import` with a `discover` entry, against
the fake hub (as `HF_ENDPOINT`) and a registry database with no server: rows, output, exit codes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.harness.checkpoints import drafter_files
from bench.harness.fakehub import FakeHub
from tests.gateway_registry.test_cli_registry import drafter, run

REPO = "aladinggit/hedgespec_eagle_drafters"
POOLS = Path(__file__).resolve().parents[2] / "pools"
FOLDERS = ("python", "math", "biology", "chemistry", "MedQA", "CNN_DM", "SQL")


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """A fresh registry per test (the CLI migrates it), so every test starts empty."""
    return f"sqlite:///{tmp_path / 'registry.db'}"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeHub]:
    files: dict[str, bytes] = {}
    for t, target in enumerate(("lm318", "qw38", "qw332")):
        for i, folder in enumerate(FOLDERS):
            files.update(drafter_files(f"{target}/model/{folder}", seed=10 * t + i))
    files["lm318/model/broken/config.json"] = b'{"architectures": ["LlamaForCausalLMEagle3"'
    files["lm318/model/broken/model.safetensors"] = b"x" * 64
    files["lm318/model/plots/mat.png"] = b"png"
    with FakeHub() as fake:
        fake.add_repo(REPO, files)
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        monkeypatch.setenv("HEDGESPEC_HF_CACHE_DIR", str(tmp_path / "hf-cache"))
        yield fake


def test_add_with_a_prefix_dry_run_then_for_real(database_url: str, hub: FakeHub,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    args = ("drafter", "add", "--database-url", database_url, "--repo-id", REPO,
            "--prefix", "lm318/model/")
    code, out, err = run(capsys, *args, "--dry-run")
    assert code == 0, err
    body = json.loads(out)
    assert body["dry_run"] is True and body["prefix"] == "lm318/model"
    actions = {r["subfolder"]: r["action"] for r in body["results"]}
    assert actions == {**{f"lm318/model/{f}": "would_create" for f in FOLDERS},
                       "lm318/model/broken": "skipped"}
    assert drafter(database_url, "python") is None  # the dry run wrote nothing

    code, out, err = run(capsys, *args, "--folder-domain", "SQL=databases", "--tag", "paper")
    assert code == 0, err
    created = {r["id"]: r for r in json.loads(out)["results"] if r["action"] == "created"}
    assert set(created) == {"python", "math", "biology", "chemistry", "medqa", "cnn_dm", "sql"}
    medqa = drafter(database_url, "medqa")
    assert (medqa.subfolder, medqa.domain, medqa.status) == ("lm318/model/MedQA", "medical",
                                                             "pending")
    assert medqa.tags == ["medqa", "paper"]
    assert drafter(database_url, "sql").domain == "databases"
    code, out, _ = run(capsys, *args)
    assert code == 0 and {r["action"] for r in json.loads(out)["results"]} == {
        "unchanged", "skipped"}


@pytest.mark.parametrize(("extra", "code", "message"), [
    (("--repo-id", "org/missing", "--prefix", "m"), 3, "not found"),
    (("--repo-id", REPO, "--prefix", "lm318/model/plots"), 3, "no folder with a config.json"),
    (("--repo-id", REPO, "--prefix", "lm318", "--domain", "python"), 2, "--folder-domain"),
    (("--repo-id", REPO, "--subfolder", "lm318/model/python", "--dry-run"), 2, "need --prefix"),
    (("--path", ".", "--prefix", "x"), 2, "--prefix needs --repo-id"),
])
def test_add_with_a_prefix_refuses_clearly(database_url: str, hub: FakeHub, extra: tuple[str, ...],
                                           code: int, message: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    got, _, err = run(capsys, "drafter", "add", "--database-url", database_url, *extra)
    assert got == code and message in err, err


def test_import_the_shipped_seed_pools(database_url: str, hub: FakeHub,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "drafter", "import", "--database-url", database_url,
                         str(POOLS / "qwen3_32b_hedgespec.json"))
    assert code == 0, err
    results = {r["id"]: r for r in json.loads(out)["results"]}
    assert set(results) == {"generalist", "python", "math", "biology", "chemistry", "medqa",
                            "cnn_dm", "sql"}
    assert results["cnn_dm"]["subfolder"] == "qw332/model/CNN_DM"
    assert drafter(database_url, "cnn_dm").target_model == "Qwen/Qwen3-32B"


def test_import_reports_a_hub_it_cannot_list(database_url: str, hub: FakeHub, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HF_ENDPOINT", hub.url + "/down")
    code, out, err = run(capsys, "drafter", "import", "--database-url", database_url,
                         str(POOLS / "llama31_8b_hedgespec.json"))
    assert code == 3 and "discover:aladinggit/hedgespec_eagle_drafters/lm318/model" in err
    actions = {r["id"]: r["action"] for r in json.loads(out)["results"]}
    assert actions["generalist"] == "created"  # the rest of the file is imported
