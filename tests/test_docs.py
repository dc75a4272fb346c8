"""README.md and docs/*.md stay true to the repository: every relative link reaches a file and,
with an anchor, a heading of it; every repository path they name in backticks exists; every
`python -m` module they name imports from a file that exists; the README's configuration table
names every `hedgespec serve` flag and every setting. (The README's SDK snippet runs in
tests/test_readme.py; docs/deploy.md's arithmetic in tests/deploy/test_docs.py.)"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from gateway.cli.commands import build_parser
from gateway.config import Settings

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Top-level folders whose paths the documents name; a name under one of them must exist.
ROOMS = ("core", "gateway", "bench", "tests", "docs", "demo", "drafter_registry", "migrations",
         "eagle3_format", "admin_ui", "deploy", "pools")
PATH = re.compile(r"`((?:" + "|".join(ROOMS) + r")/[\w./-]*\w)[`:,)\s]")
LINK = re.compile(r"\]\(([^)\s]+)\)")
MODULE = re.compile(r"python -m ((?:bench|demo)(?:\.\w+)+)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    return {slug(m) for m in re.findall(r"^#+ (.+)$", doc.read_text(), flags=re.M)}


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_links_reach_a_file_and_a_heading(doc: Path) -> None:
    broken = []
    for target in LINK.findall(doc.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in anchors(dest)):
            broken.append(target)
    assert broken == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_named_paths_exist(doc: Path) -> None:
    named = set(PATH.findall(doc.read_text() + "\n"))
    missing = sorted(p for p in named if not (ROOT / p).exists()
                     and not (ROOT / p.split(".")[0]).with_suffix(".py").exists())
    assert missing == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_named_modules_exist(doc: Path) -> None:
    missing = sorted(m for m in set(MODULE.findall(doc.read_text()))
                     if not (ROOT / m.replace(".", "/")).with_suffix(".py").exists()
                     and not (ROOT / m.replace(".", "/") / "__main__.py").exists())
    assert missing == []


def serve_flags() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    serve = sub.choices["serve"]
    return {flag for action in serve._actions for flag in action.option_strings
            if flag.startswith("--") and flag != "--help"}


def config_table() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split("## Configuration", 1)[1].split("\n## ", 1)[0]


def test_configuration_table_names_every_serve_flag() -> None:
    table = config_table()
    assert sorted(f for f in serve_flags() if f"`{f}" not in table) == []


def test_configuration_table_names_every_setting() -> None:
    """Each setting is in the table by its flag or by its environment variable."""
    table = config_table()
    missing = [name for name in Settings.model_fields
               if f"HEDGESPEC_{name.upper()}" not in table
               and f"`--{name.replace('_', '-')}" not in table]
    assert missing == []
