"""The fake hub answers huggingface_hub's own API calls the way the Hub does."""

from __future__ import annotations

from pathlib import Path

import pytest
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoFile, RepoFolder

from bench.harness.fakehub import FakeHub

FILES = {"a/config.json": b"{}", "a/model.safetensors": b"weights", "README.md": b"# r"}


def test_model_info_and_tree(fake_hub: FakeHub) -> None:
    sha = fake_hub.add_repo("org/r", FILES, tags=("v1",))
    api = HfApi(endpoint=fake_hub.url)
    info = api.model_info("org/r", revision="v1", files_metadata=True)
    assert info.sha == sha and {s.rfilename for s in info.siblings or []} == set(FILES)
    lfs = {s.rfilename: s.lfs for s in info.siblings or []}
    assert lfs["a/model.safetensors"] is not None and lfs["a/config.json"] is None
    top = list(api.list_repo_tree("org/r"))
    assert {(type(e), e.path) for e in top} == {(RepoFolder, "a"), (RepoFile, "README.md")}
    assert {e.path for e in api.list_repo_tree("org/r", recursive=True)} == {*FILES, "a"}
    assert [e.size for e in api.list_repo_tree("org/r", path_in_repo="a")
            if isinstance(e, RepoFile)] == [2, 7]


def test_downloads_through_the_cdn_redirect(fake_hub: FakeHub, tmp_path: Path) -> None:
    sha = fake_hub.add_repo("org/r", FILES)
    path = hf_hub_download("org/r", "a/model.safetensors", cache_dir=tmp_path,
                           endpoint=fake_hub.url)
    assert Path(path).read_bytes() == b"weights" and sha in path
    assert ("GET", f"/cdn/org/r/{sha}/a/model.safetensors") in fake_hub.requests


def test_errors_carry_the_codes_the_client_maps(fake_hub: FakeHub, tmp_path: Path) -> None:
    fake_hub.add_repo("org/r", FILES)
    api = HfApi(endpoint=fake_hub.url)
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("org/missing")
    with pytest.raises(RevisionNotFoundError):
        api.model_info("org/r", revision="nope")
    with pytest.raises(EntryNotFoundError):
        hf_hub_download("org/r", "a/nothing.bin", cache_dir=tmp_path, endpoint=fake_hub.url)
