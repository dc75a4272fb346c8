"""Discovery of the drafters of a multi-drafter Hub repository, against the fake hub serving the
HedgeSpec paper's layout (`<target>/model/<domain>/`: three targets, seven domains each, one
broken drafter, one folder that is no drafter), and the three seed pools that use it."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from bench.harness.checkpoints import drafter_files
from bench.harness.fakehub import FakeHub
from drafter_registry import crud
from drafter_registry.db import pool_version
from drafter_registry.discovery import discover_and_register, discover_folders, domain_for
from drafter_registry.errors import HubError, HubNotFound, NothingDiscovered
from drafter_registry.fetcher import FetchSettings, fetch_drafter
from drafter_registry.schemas import DiscoverSpec
from drafter_registry.seed import import_seed_pool, load_seed_pool

POOLS = Path(__file__).resolve().parents[2] / "pools"
REPO = "aladinggit/hedgespec_eagle_drafters"
TARGETS = {"lm318": "llama31_8b_hedgespec", "qw38": "qwen3_8b_hedgespec",
           "qw332": "qwen3_32b_hedgespec"}
# The paper's seven datasets; the folder spellings are our guess at the layout, which is the
# point: discovery must work whatever they are.
FOLDERS = ["python", "math", "biology", "chemistry", "MedQA", "CNN_DM", "SQL"]
IDS = {"python": "python", "math": "math", "biology": "biology", "chemistry": "chemistry",
       "MedQA": "medqa", "CNN_DM": "cnn_dm", "SQL": "sql"}
DOMAINS = {"python": "python", "math": "math", "biology": "biology", "chemistry": "chemistry",
           "medqa": "medical", "cnn_dm": "news", "sql": "sql"}
BROKEN = "qw38/model/math_v0"  # an EAGLE-3 folder whose config.json was cut short
NOT_A_DRAFTER = "lm318/model/figures"  # plots next to the drafters
GENERALISTS = {"yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "Tengyunw/qwen3_8b_eagle3",
               "AngelSlim/Qwen3-32B_eagle3"}


def paper_layout() -> dict[str, bytes]:
    files: dict[str, bytes] = {"README.md": b"# HedgeSpec drafters\n"}
    seed = 0
    for target in TARGETS:
        for folder in FOLDERS:
            seed += 1
            files.update(drafter_files(f"{target}/model/{folder}", seed=seed))
    broken = drafter_files(BROKEN, seed=99)
    broken[f"{BROKEN}/config.json"] = broken[f"{BROKEN}/config.json"][:40]
    files.update(broken)
    files[f"{NOT_A_DRAFTER}/acceptance.png"] = b"\x89PNG not really"
    files[f"{NOT_A_DRAFTER}/results.json"] = b'{"mat": 3.1}'
    return files


@pytest.fixture
def hub(fake_hub: FakeHub) -> FakeHub:
    fake_hub.add_repo(REPO, paper_layout(), tags=("v1",))
    return fake_hub


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Fail any connection that leaves this machine: only the fake hub may be reached."""
    refused: list[Any] = []
    connect = socket.socket.connect

    def guarded(self: socket.socket, address: Any) -> Any:
        host = address[0] if isinstance(address, tuple) else str(address)
        if self.family in (socket.AF_INET, socket.AF_INET6) and host not in (
                "127.0.0.1", "::1", "localhost"):
            refused.append(address)
            raise OSError(f"test refused a network connection to {address}")
        return connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    yield refused
    assert refused == [], f"connections beyond the fake hub: {refused}"


def discover(session: Session, hub: FakeHub, cache: Path, *, dry_run: bool = False,
             **spec: Any) -> Any:
    return discover_and_register(
        session, DiscoverSpec(repo_id=REPO, **spec), actor="test", cache_dir=cache,
        endpoint=hub.url, dry_run=dry_run)


def rows(session: Session) -> dict[str, Any]:
    return {d.id: d for d in crud.list_drafters(session)}


def test_discovery_adds_exactly_the_valid_drafters(session: Session, hub: FakeHub,
                                                    hub_cache: Path) -> None:
    report = discover(session, hub, hub_cache, prefix="lm318/model/")
    assert report.commit_sha == hub.repos[REPO].refs["main"] and report.prefix == "lm318/model"
    assert {r.action for r in report.results} == {"created"}  # the figures folder is no drafter
    found = rows(session)
    assert set(found) == set(IDS.values())
    for folder, drafter_id in IDS.items():
        row = found[drafter_id]
        assert (row.source, row.repo_id, row.revision, row.subfolder, row.status) == (
            "hf", REPO, "main", f"lm318/model/{folder}", "pending")
        assert row.domain == DOMAINS[drafter_id]
        assert folder in row.name  # the folder name stays visible
    assert found["medqa"].tags == ["medqa"] and found["cnn_dm"].tags == ["cnn_dm"]
    assert found["python"].tags == []  # the folder name is the domain already
    event = crud.list_events(session, limit=1)[0]
    assert event.action == "pool.discover" and event.detail is not None
    assert event.detail["results"] == {i: "created" for i in IDS.values()}
    # Only the listing and the configs were fetched: no weights.
    assert not [p for _, p in hub.requests if p.endswith(".safetensors")]


def test_a_broken_drafter_is_reported_and_not_registered(session: Session, hub: FakeHub,
                                                         hub_cache: Path) -> None:
    report = discover(session, hub, hub_cache, prefix="qw38/model")
    skipped = [r for r in report.results if r.action == "skipped"]
    assert [(r.subfolder, r.drafter_id) for r in skipped] == [(BROKEN, None)]
    assert "not valid JSON" in str(skipped[0].detail)
    assert set(rows(session)) == set(IDS.values())
    assert all(r.subfolder.startswith("qw38/model/") for r in rows(session).values())


def test_discovered_drafters_are_validated_before_they_serve(
    session: Session, session_factory: Any, hub: FakeHub, hub_cache: Path
) -> None:
    """A folder whose weights turn out broken is registered, then fails its validation alone."""
    hub.faults["lm318/model/SQL/model.safetensors"] = "corrupt"
    discover(session, hub, hub_cache, prefix="lm318/model")
    settings = FetchSettings(cache_dir=hub_cache, endpoint=hub.url)
    assert fetch_drafter(session_factory, drafter_id="python", settings=settings) == "ready"
    assert fetch_drafter(session_factory, drafter_id="sql", settings=settings) == "failed"
    session.expire_all()
    assert "corrupt" in str(crud.get_drafter(session, drafter_id="sql").error)  # type: ignore[union-attr]


def test_the_dry_run_adds_nothing(session: Session, hub: FakeHub, hub_cache: Path) -> None:
    version = pool_version(session)
    events = len(crud.list_events(session))
    report = discover(session, hub, hub_cache, prefix="qw332/model/", dry_run=True)
    assert report.dry_run
    assert sorted(r.drafter_id for r in report.results if r.action == "would_create") == sorted(
        IDS.values())
    assert crud.count_drafters(session) == 0 and pool_version(session) == version
    assert len(crud.list_events(session)) == events
    # After the real run, the dry run tells which are registered already.
    discover(session, hub, hub_cache, prefix="qw332/model/")
    again = discover(session, hub, hub_cache, prefix="qw332/model/", dry_run=True)
    assert {r.action for r in again.results} == {"unchanged"}


def test_a_later_revision_with_a_new_folder_adds_only_it(session: Session, hub: FakeHub,
                                                          hub_cache: Path) -> None:
    first = discover(session, hub, hub_cache, prefix="lm318/model")
    files = {**paper_layout(), **drafter_files("lm318/model/Law", seed=500)}
    newer = hub.add_repo(REPO, files)  # main moves on
    assert newer != first.commit_sha
    version = pool_version(session)
    report = discover(session, hub, hub_cache, prefix="lm318/model")
    assert report.commit_sha == newer
    actions = {r.drafter_id: r.action for r in report.results}
    assert actions == {**{i: "unchanged" for i in IDS.values()}, "law": "created"}
    law = rows(session)["law"]
    assert (law.subfolder, law.domain) == ("lm318/model/Law", "law")
    assert pool_version(session) > version


def test_the_prefix_is_the_repository_root_when_empty(session: Session, hub: FakeHub,
                                                        hub_cache: Path) -> None:
    discovery = discover_folders(repo_id=REPO, prefix=None, revision="v1", cache_dir=hub_cache,
                                 endpoint=hub.url)
    assert len(discovery.drafters) == 21 and [f.subfolder for f in discovery.folders
                                              if not f.is_drafter] == [BROKEN]
    # Same folder names under three targets: ids from the relative paths stay unique.
    report = discover(session, hub, hub_cache, prefix="", revision="v1", id_prefix="paper-")
    assert "paper-lm318-model-medqa" in rows(session) and len(report.created) == 21


def test_operator_choices_domain_overrides_and_id_prefix(session: Session, hub: FakeHub,
                                                         hub_cache: Path) -> None:
    discover(session, hub, hub_cache, prefix="qw38/model", id_prefix="qw38-",
             domains={"CNN_DM": "summarization"}, tags=["hedgespec"], target_model="Qwen/Qwen3-8B",
             name_prefix="Qwen3-8B")
    found = rows(session)
    assert set(found) == {f"qw38-{i}" for i in IDS.values()}
    news = found["qw38-cnn_dm"]
    assert (news.domain, news.tags, news.name, news.target_model) == (
        "summarization", ["cnn_dm", "hedgespec"], "Qwen3-8B CNN_DM", "Qwen/Qwen3-8B")
    # The domain stays editable like any other drafter's.
    crud.update_drafter(session, drafter_id="qw38-sql", changes={"domain": "databases"},
                        actor="admin")
    assert rows(session)["qw38-sql"].domain == "databases"


def test_an_id_registered_elsewhere_is_a_conflict_left_alone(session: Session, hub: FakeHub,
                                                             hub_cache: Path) -> None:
    crud.create_drafter(session, drafter_id="python", name="Mine", source="hf",
                        repo_id="me/mine", actor="admin")
    report = discover(session, hub, hub_cache, prefix="lm318/model")
    python = next(r for r in report.results if r.drafter_id == "python")
    assert python.action == "conflict" and "me/mine" in str(python.detail)
    assert rows(session)["python"].repo_id == "me/mine"
    assert len(report.created) == 6


@pytest.mark.parametrize(("spec", "error", "message"), [
    ({"repo_id": "aladinggit/nothing-here", "prefix": "lm318/model"}, HubNotFound, "not found"),
    ({"repo_id": REPO, "prefix": "lm318/model", "revision": "v9"}, HubNotFound,
     "revision not found"),
    ({"repo_id": REPO, "prefix": "lm318/models"}, NothingDiscovered,
     "no folder 'lm318/models'.*lm318/model/MedQA"),
    ({"repo_id": REPO, "prefix": NOT_A_DRAFTER}, NothingDiscovered, "no folder with a config"),
    ({"repo_id": REPO, "prefix": BROKEN}, NothingDiscovered, "not valid JSON"),
])
def test_errors_are_clear_and_write_nothing(session: Session, hub: FakeHub, hub_cache: Path,
                                            spec: dict[str, str], error: type[Exception],
                                            message: str) -> None:
    with pytest.raises(error, match=message):
        discover_and_register(session, DiscoverSpec(**spec), actor="test", cache_dir=hub_cache,
                              endpoint=hub.url)
    assert crud.count_drafters(session) == 0 and crud.list_events(session) == []


def test_configs_that_are_not_eagle3_drafters_are_skipped(hub: FakeHub, hub_cache: Path) -> None:
    target = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32,
              "hidden_size": 4096, "vocab_size": 128256}
    files = {**drafter_files("m/good", seed=1), **drafter_files("m/target", seed=2),
             **drafter_files("m/gpt", seed=3), "m/noweights/config.json": b"{}"}
    files["m/target/config.json"] = json.dumps(target).encode()
    files["m/gpt/config.json"] = json.dumps({"architectures": ["GPT2LMHeadModel"]}).encode()
    hub.add_repo("org/mixed", files)
    found = discover_folders(repo_id="org/mixed", prefix="m", revision="main",
                             cache_dir=hub_cache, endpoint=hub.url)
    reasons = {f.folder: f.reason for f in found.folders}
    assert reasons["good"] is None
    assert "full model's config (32 layers)" in str(reasons["target"])
    assert "not an EAGLE-3 drafter" in str(reasons["gpt"])
    assert "no weights" in str(reasons["noweights"])


def test_offline_mode_is_honoured_like_downloads(hub: FakeHub, hub_cache: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(HubError, match=r"HF_HUB_OFFLINE is set: .* cannot be fetched"):
        discover_folders(repo_id=REPO, prefix="lm318/model", revision="main", cache_dir=hub_cache,
                         endpoint=hub.url)


def test_a_private_repository_needs_the_token(hub: FakeHub, hub_cache: Path) -> None:
    hub.add_repo("org/private", drafter_files("x/py", seed=1), token="s3cret")
    with pytest.raises(HubNotFound, match="private"):
        discover_folders(repo_id="org/private", prefix="x", revision="main", cache_dir=hub_cache,
                         endpoint=hub.url)
    found = discover_folders(repo_id="org/private", prefix="x", revision="main",
                             cache_dir=hub_cache, endpoint=hub.url, token="s3cret")
    assert [f.folder for f in found.drafters] == ["py"]


@pytest.mark.parametrize(("folder", "domain"), [
    ("MedQA", "medical"), ("CNN_DM", "news"), ("cnn-dailymail", "news"), ("SQL", "sql"),
    ("Python", "python"), ("GSM8K", "math"), ("llama3.1-8b-instruct_chemistry", "chemistry"),
    ("Biology", "biology"), ("Law", "law"), ("a/b/MedQA", "medical"),
])
def test_domains_from_folder_names(folder: str, domain: str) -> None:
    assert domain_for(folder) == domain


# ---- the seed pools ---------------------------------------------------------------------------


@pytest.mark.parametrize("target_folder", list(TARGETS))
def test_every_seed_pool_imports_the_papers_drafters_by_discovery(
    session: Session, hub: FakeHub, hub_cache: Path, target_folder: str
) -> None:
    path = POOLS / f"{TARGETS[target_folder]}.json"
    text = path.read_text()
    assert "subfolder" not in text, "a seed pool names a guessed sub-folder"
    pool = load_seed_pool(path)
    settings = FetchSettings(cache_dir=hub_cache, endpoint=hub.url)
    results = import_seed_pool(session, pool, actor="seed", base_dir=path.parent, hub=settings)
    assert {r.action for r in results} - {"skipped"} == {"created"}, results
    assert [r.subfolder for r in results if r.action == "skipped"] == (
        [BROKEN] if BROKEN.startswith(target_folder + "/") else [])
    found = rows(session)
    assert set(found) == {"generalist", *IDS.values()}
    generalist = found.pop("generalist")
    assert generalist.repo_id in GENERALISTS and generalist.subfolder is None
    assert {(d.repo_id, d.subfolder) for d in found.values()} == {
        (REPO, f"{target_folder}/model/{folder}") for folder in FOLDERS}
    assert {d.target_model for d in [generalist, *found.values()]} == {pool.target}
    assert {d.domain for d in found.values()} == set(DOMAINS.values())
    assert {p for _, p in hub.requests} >= {f"/api/models/{REPO}/revision/main"}
    again = import_seed_pool(session, pool, actor="seed", base_dir=path.parent, hub=settings)
    assert {r.action for r in again} - {"skipped"} == {"unchanged"}


def test_the_three_seed_pools_name_their_targets() -> None:
    targets = {load_seed_pool(POOLS / f"{name}.json").target for name in TARGETS.values()}
    assert targets == {"meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B", "Qwen/Qwen3-32B"}


def test_a_seed_pool_imports_the_rest_when_the_hub_fails(session: Session, hub: FakeHub,
                                                         hub_cache: Path) -> None:
    pool = load_seed_pool(POOLS / "qwen3_8b_hedgespec.json")
    results = import_seed_pool(session, pool, actor="seed", base_dir=POOLS,
                               hub=FetchSettings(cache_dir=hub_cache, endpoint=hub.url + "/nope"))
    actions = {r.drafter_id: r.action for r in results}
    assert actions["generalist"] == "created"
    error = next(r for r in results if r.action == "error")
    assert error.drafter_id == f"discover:{REPO}/qw38/model" and error.detail
    assert set(rows(session)) == {"generalist"}
    no_hub = import_seed_pool(session, pool, actor="seed", base_dir=POOLS)
    assert [r.action for r in no_hub] == ["unchanged", "error"]
