"""Names that reach URLs and the file system: accepted forms and rejected escapes."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_registry.errors import InvalidIdentifier
from drafter_registry.identifiers import (
    slugify_drafter_id,
    validate_drafter_id,
    validate_repo_id,
    validate_revision,
    validate_subfolder,
)


@pytest.mark.parametrize("repo_id", [
    "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "aladinggit/hedgespec_eagle_drafters", "a/b",
    "Org.x/m_1",
])
def test_accepts_hub_repo_ids(repo_id: str) -> None:
    assert validate_repo_id(repo_id) == repo_id


@pytest.mark.parametrize("repo_id", [
    "gpt2", "a/b/c", "../etc", "a/..", "a/b..c", "a--b/c", "/a/b", "a/b/", "a/-b", "a/b.", "a b/c",
    "a/b\\c", "ä/b", "", "a/" + "x" * 97,
])
def test_rejects_bad_repo_ids(repo_id: str) -> None:
    with pytest.raises(InvalidIdentifier):
        validate_repo_id(repo_id)


@pytest.mark.parametrize("revision", ["main", "v1.0", "refs/pr/12", "a" * 40, "release-2024_01"])
def test_accepts_branches_tags_and_shas(revision: str) -> None:
    assert validate_revision(revision) == revision


@pytest.mark.parametrize("revision", [
    "", "../main", "main/..", "/main", "-rf", "a b", "main//x", "main/", "x.lock", "ma:in",
    "main\n",
])
def test_rejects_bad_revisions(revision: str) -> None:
    with pytest.raises(InvalidIdentifier):
        validate_revision(revision)


@pytest.mark.parametrize(("value", "expected"), [
    (None, None), ("", None), ("/", None), ("python", "python"), ("llama/python/", "llama/python"),
])
def test_normalises_subfolders(value: str | None, expected: str | None) -> None:
    assert validate_subfolder(value) == expected


@pytest.mark.parametrize("value", ["..", "../x", "a/../b", "/etc", "a\\b", "a//b", "./a", "a b"])
def test_rejects_escaping_subfolders(value: str) -> None:
    with pytest.raises(InvalidIdentifier):
        validate_subfolder(value)


@given(st.text(max_size=40))
def test_an_accepted_subfolder_never_escapes_the_repo(value: str) -> None:
    try:
        result = validate_subfolder(value)
    except InvalidIdentifier:
        return
    if result is not None:
        path = PurePosixPath(result)
        assert not path.is_absolute() and ".." not in path.parts and "\\" not in result


@pytest.mark.parametrize("drafter_id", ["python", "llama3.1-8b_sql", "x", "a" * 64])
def test_accepts_drafter_ids(drafter_id: str) -> None:
    assert validate_drafter_id(drafter_id) == drafter_id


@pytest.mark.parametrize("drafter_id",
                         ["", "Python", "-x", ".x", "a..b", "a/b", "a b", "a" * 65, "fixed:x"])
def test_rejects_drafter_ids(drafter_id: str) -> None:
    with pytest.raises(InvalidIdentifier):
        validate_drafter_id(drafter_id)


@given(st.text(max_size=100))
def test_slugs_are_always_valid_ids(name: str) -> None:
    assert validate_drafter_id(slugify_drafter_id(name))


def test_slug_examples() -> None:
    assert slugify_drafter_id("Llama 3.1 / Python!") == "llama-3.1-python"
    assert slugify_drafter_id("..") == "drafter"
