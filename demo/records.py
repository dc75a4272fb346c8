"""Prompt/response records: loading, length caps and the demo chat format."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

USER = "<|user|>"
ASSISTANT = "<|assistant|>"
SYSTEM = "<|system|>"
END = "<|end|>"
PAD = "<|pad|>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, END, USER, ASSISTANT, SYSTEM)

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


def user_turn(prompt: str) -> str:
    """The rendered prompt up to and including the assistant header (generation prompt)."""
    return f"{USER}\n{prompt}\n{ASSISTANT}\n"


def chat_text(prompt: str, response: str) -> str:
    """One rendered conversation, exactly as the tokenizer's chat template renders it."""
    return f"{user_turn(prompt)}{response}{END}"


# Jinja chat template equivalent to `chat_text`. A system message is folded into the first user
# turn because the demo target never saw a system role in training.
CHAT_TEMPLATE = (
    r"{%- set ns = namespace(system='') -%}"
    r"{%- for m in messages -%}"
    r"{%- if m['role'] == 'system' -%}{%- set ns.system = ns.system + m['content'] + '\n\n' -%}"
    r"{%- elif m['role'] == 'user' -%}"
    r"{{ '<|user|>\n' + ns.system + m['content'] + '\n' }}{%- set ns.system = '' -%}"
    r"{%- elif m['role'] == 'assistant' -%}{{ '<|assistant|>\n' + m['content'] + '<|end|>' }}"
    r"{%- endif -%}"
    r"{%- endfor -%}"
    r"{%- if add_generation_prompt -%}{{ '<|assistant|>\n' }}{%- endif -%}"
)
