"""The real huggingface_hub download code against the fake hub: layout, pinning, progress,
resume, and one readable `HubError` per failure."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from huggingface_hub import try_to_load_from_cache

from bench.harness.checkpoints import drafter_files
from bench.harness.fakehub import Blob, FakeHub
from drafter_registry.errors import DownloadCancelled, HubError
from drafter_registry.hub import DownloadResult, download_drafter
from drafter_registry.validation import check_checkpoint

REPO = "org/drafters"


def fetch(hub: FakeHub, cache: Path, *, repo: str = REPO, revision: str | None = "main",
          subfolder: str | None = "python", **kw: object) -> DownloadResult:
    return download_drafter(repo_id=repo, revision=revision, subfolder=subfolder, cache_dir=cache,
                            endpoint=hub.url, **kw)  # type: ignore[arg-type]


@pytest.fixture
def repo_files() -> dict[str, bytes]:
    files = {**drafter_files("python", seed=1), **drafter_files("math", seed=2)}
    files.update({"python/modeling_eagle.py": b"import os; os.system('echo pwned')",
                  "README.md": b"# drafters"})
    return files


def test_downloads_one_subfolder_into_the_hf_cache(fake_hub: FakeHub, hub_cache: Path,
                                                   repo_files: dict[str, bytes]) -> None:
    sha = fake_hub.add_repo(REPO, repo_files)
    result = fetch(fake_hub, hub_cache)
    assert result.commit_sha == sha
    assert (result.local_path == hub_cache.resolve() / "models--org--drafters" / "snapshots" / sha
            / "python")
    assert (sorted(p.name for p in result.local_path.iterdir())
            == ["config.json", "model.safetensors"])
    for name in ("config.json", "model.safetensors"):
        assert (result.local_path / name).read_bytes() == repo_files[f"python/{name}"]
    assert result.bytes_total == result.bytes_transferred == sum(
        len(repo_files[f"python/{n}"]) for n in ("config.json", "model.safetensors"))
    # No remote code, nothing outside the sub-folder was requested.
    assert not any(".py" in path or "math/" in path or "README" in path
                   for _, path in fake_hub.requests)
    # The standard cache API sees the files: other HF tools can reuse this cache.
    cached = try_to_load_from_cache(REPO, "python/model.safetensors", cache_dir=hub_cache,
                                    revision=sha)
    assert cached == str(result.local_path / "model.safetensors")
    check_checkpoint(result.local_path)


def test_a_second_download_is_served_from_the_cache(fake_hub: FakeHub, hub_cache: Path,
                                                    repo_files: dict[str, bytes]) -> None:
    fake_hub.add_repo(REPO, repo_files)
    first = fetch(fake_hub, hub_cache)
    fake_hub.requests.clear()
    again = fetch(fake_hub, hub_cache)
    assert again.local_path == first.local_path and again.bytes_transferred == 0
    assert all(method == "GET" and path.startswith("/api/") for method, path in fake_hub.requests)


def test_revisions_pin_a_commit(fake_hub: FakeHub, hub_cache: Path) -> None:
    old = fake_hub.add_repo(REPO, drafter_files("python", seed=1), tags=("v1",))
    new = fake_hub.add_repo(REPO, drafter_files("python", seed=2))
    assert fetch(fake_hub, hub_cache, revision="v1").commit_sha == old
    assert fetch(fake_hub, hub_cache, revision=old).commit_sha == old
    latest = fetch(fake_hub, hub_cache)
    assert latest.commit_sha == new
    weights = (latest.local_path / "model.safetensors").read_bytes()
    assert weights == drafter_files("python", seed=2)["python/model.safetensors"]


def test_repo_root_sharded_and_bin_layouts(fake_hub: FakeHub, hub_cache: Path) -> None:
    root_files = drafter_files(seed=3)
    fake_hub.add_repo("org/root", root_files)
    assert fetch(fake_hub, hub_cache, repo="org/root", subfolder=None).files == (
        "config.json", "model.safetensors")
    bin_files = {"d/config.json": root_files["config.json"],
                 "d/pytorch_model.bin": b"PK-not-checked-here"}
    fake_hub.add_repo("org/bin", bin_files)
    assert (fetch(fake_hub, hub_cache, repo="org/bin", subfolder="d").files
            == ("d/config.json", "d/pytorch_model.bin"))
    index = (b'{"weight_map": {"fc.weight": "model-1.safetensors", "norm.weight": '
             b'"model-2.safetensors"}}')
    sharded = {"s/config.json": b"{}", "s/model.safetensors.index.json": index,
               "s/model-1.safetensors": b"one", "s/model-2.safetensors": b"two",
               "s/model-3.safetensors": b"x"}
    fake_hub.add_repo("org/sharded", sharded)
    result = fetch(fake_hub, hub_cache, repo="org/sharded", subfolder="s")
    assert result.files == ("s/config.json", "s/model.safetensors.index.json",
                            "s/model-1.safetensors", "s/model-2.safetensors")


def test_reports_byte_progress(fake_hub: FakeHub, hub_cache: Path) -> None:
    fake_hub.add_repo(REPO, drafter_files("python", pad_to=200_000))
    fake_hub.throttle_bps = 1_000_000
    seen: list[tuple[int, int]] = []
    result = fetch(fake_hub, hub_cache, progress=lambda done, total: seen.append((done, total)),
                   progress_interval_s=0.02)
    done = [d for d, _ in seen]
    assert done == sorted(done) and done[-1] == result.bytes_total
    assert {t for _, t in seen} == {result.bytes_total}
    assert sum(0 < d < result.bytes_total for d in done) >= 3  # intermediate updates


def test_a_progress_callback_can_cancel(fake_hub: FakeHub, hub_cache: Path) -> None:
    files = drafter_files("python", pad_to=200_000)
    fake_hub.add_repo(REPO, files)
    fake_hub.throttle_bps = 1_000_000

    def cancel(done: int, total: int) -> None:
        if done > 50_000:
            raise DownloadCancelled("stop")

    with pytest.raises(DownloadCancelled):
        fetch(fake_hub, hub_cache, progress=cancel, progress_interval_s=0.0)
    fake_hub.throttle_bps = None
    resumed = fetch(fake_hub, hub_cache)  # picks up the partial blob
    assert 0 < resumed.bytes_transferred < resumed.bytes_total


def test_an_interrupted_transfer_resumes_with_a_range_request(fake_hub: FakeHub,
                                                              hub_cache: Path) -> None:
    files = drafter_files("python", pad_to=100_000)
    fake_hub.add_repo(REPO, files)
    fake_hub.faults["python/model.safetensors"] = "truncate_once"
    result = fetch(fake_hub, hub_cache)
    size = len(files["python/model.safetensors"])
    assert ((result.local_path / "model.safetensors").read_bytes()
            == files["python/model.safetensors"])
    assert fake_hub.bytes_served["python/model.safetensors"] == size  # half, then the other half


def write_lfs_incomplete(cache: Path, data: bytes) -> Path:
    blobs = cache / "models--org--drafters" / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    return blobs / f"{Blob.of('model.safetensors', data).sha256}.incomplete"


def test_disk_errors_fail_readably(fake_hub: FakeHub, hub_cache: Path) -> None:
    files = drafter_files("python")
    fake_hub.add_repo(REPO, files)
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    # Route the blob's bytes into /dev/full: every write fails with ENOSPC, as on a full disk.
    write_lfs_incomplete(hub_cache, files["python/model.safetensors"]).symlink_to("/dev/full")
    with pytest.raises(HubError, match=r"disk error.*No space left on device"):
        fetch(fake_hub, hub_cache)
    blocked = hub_cache.parent / "a-file"
    blocked.write_text("not a directory")
    with pytest.raises(HubError, match=r"disk error|download of"):
        fetch(fake_hub, blocked / "cache")


@pytest.mark.parametrize(("kwargs", "fault", "message"), [
    ({"repo": "org/nope"}, None, "repository 'org/nope' not found"),
    ({"revision": "v9"}, None, "revision not found: org/drafters@v9"),
    ({"subfolder": "chemistry"}, None, "not found in the repository: org/drafters@main/chemistry"),
    ({"subfolder": "onlyconfig"}, None, "no weights in org/drafters@main/onlyconfig"),
    ({"subfolder": "noconfig"}, None, "no config.json in org/drafters@main/noconfig"),
    ({}, ("python/model.safetensors", "missing"), "python/model.safetensors is listed but cannot"),
    ({}, ("python/model.safetensors", "corrupt"), "model.safetensors is corrupt"),
    ({}, ("python/config.json", "corrupt"), "config.json is corrupt"),
    ({}, ("python/model.safetensors", "short"), "was truncated"),
    ({}, ("python/model.safetensors", "status:500"), "hub error"),
    ({"repo": "org/private"}, None, "not found .*set a token"),
    ({"subfolder": "../python"}, None, "invalid subfolder"),
    ({"revision": "main; rm -rf /"}, None, "invalid revision"),
])
def test_failures_become_one_readable_hub_error(fake_hub: FakeHub, hub_cache: Path,
                                                kwargs: dict[str, str],
                                                fault: tuple[str, str] | None,
                                                message: str) -> None:
    files = {**drafter_files("python"), "onlyconfig/config.json": b"{}",
             "noconfig/model.safetensors": b"x"}
    fake_hub.add_repo(REPO, files)
    fake_hub.add_repo("org/private", drafter_files("python"), token="secret")
    if fault:
        fake_hub.faults[fault[0]] = fault[1]
    with pytest.raises(HubError, match=message):
        fetch(fake_hub, hub_cache, **kwargs)
    snapshots = hub_cache / "models--org--drafters" / "snapshots"
    assert (not any(p.name == "model.safetensors" for p in snapshots.rglob("*"))
            if snapshots.exists() else True)


def test_a_token_opens_a_private_repo(fake_hub: FakeHub, hub_cache: Path) -> None:
    files = drafter_files("python")
    fake_hub.add_repo("org/private", files, token="secret")
    result = fetch(fake_hub, hub_cache, repo="org/private", token="secret")
    digest = hashlib.sha256((result.local_path / "model.safetensors").read_bytes()).hexdigest()
    assert digest == hashlib.sha256(files["python/model.safetensors"]).hexdigest()
