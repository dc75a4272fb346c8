"""Prompt/response records: loading and length caps."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ELLIPSIS = "\n[...]\n"


@dataclass(frozen=True)
class Record:
    id: str
    domain: str
    prompt: str
    response: str


def read_jsonl(path: Path) -> Iterator[dict]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def write_jsonl(path: Path, rows: Iterable[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def load_records(path: Path, domain: str) -> list[Record]:
    return [Record(r["id"], domain, r["prompt"], r["response"]) for r in read_jsonl(path)]


def _cut_left(text: str, n: int) -> str:
    """The first at most n characters, ending at a whitespace boundary when there is one."""
    if len(text) <= n:
        return text
    cut = text[:n]
    space = max(cut.rfind(" "), cut.rfind("\n"))
    return cut[:space] if space > n // 2 else cut


def _cut_right(text: str, n: int) -> str:
    """The last at most n characters, starting at a whitespace boundary when there is one."""
    if len(text) <= n:
        return text
    cut = text[-n:]
    space = min((i for i in (cut.find(" "), cut.find("\n")) if i >= 0), default=-1)
    return cut[space + 1 :] if 0 <= space < n // 2 else cut


def cap_prompt(prompt: str, max_chars: int) -> str:
    """Keep the head and the tail of a long prompt.

    Instructions sit at either end (news: "Summarize: <article>"; PubMedQA: contexts, then the
    question), so both ends are kept and the middle is replaced by a marker.
    """
    if len(prompt) <= max_chars:
        return prompt
    tail = max_chars // 4
    head = max_chars - tail - len(ELLIPSIS)
    return _cut_left(prompt, head) + ELLIPSIS + _cut_right(prompt, tail)


def cap_response(response: str, max_chars: int) -> str:
    return _cut_left(response, max_chars)
