"""Text in and out of the engine: chat template, tokenization, incremental detokenization,
stop strings, token bytes for logprobs, usage.

Incremental detokenization uses the prefix/read-offset scheme of TGI and vLLM: the newest
tokens are decoded together with a few earlier ones so that tokenizers which merge spaces or
bytes across tokens decode correctly, and text ending in U+FFFD (an incomplete UTF-8
sequence) is held back until the next token completes it.

Stop strings (vllm#2577): text that could still be the start of a stop string is held back,
so a stop spanning token or chunk boundaries is found and never emitted.
"""

from __future__ import annotations

import logging
import re
from functools import lru_cache
from typing import Any, Protocol

from gateway.errors import invalid_request

log = logging.getLogger(__name__)

# Used only when the target's tokenizer has no chat template of its own.
FALLBACK_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


class Tokenizer(Protocol):
    """What the gateway needs from a Hugging Face tokenizer."""

    eos_token_id: Any
    chat_template: Any

    def __call__(self, text: str, **kwargs: Any) -> Any: ...
    def __len__(self) -> int: ...
    def decode(self, ids: list[int], **kwargs: Any) -> str: ...
    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...
    def convert_ids_to_tokens(self, ids: int) -> Any: ...


def render_chat(
    tokenizer: Tokenizer, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
) -> list[int]:
    """Prompt token ids for a conversation, with the generation prompt appended; `tools` go to
    the template (those that render tools read them; see gateway/openai/tools/formats.py)."""
    template = None if tokenizer.chat_template else FALLBACK_CHAT_TEMPLATE
    try:
        text = tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=True,
            chat_template=template,
        )  # fmt: skip
    except Exception as exc:  # jinja raises on conversations the template forbids
        raise invalid_request(f"cannot apply the chat template: {exc}", param="messages") from exc
    # The template already carries any BOS it wants; adding special tokens would double it.
    return list(tokenizer(str(text), add_special_tokens=False)["input_ids"])


def encode_prompt(tokenizer: Tokenizer, prompt: str | list[int], *, param: str) -> list[int]:
    """Completions prompt: text (special tokens added as the tokenizer does) or token ids."""
    if isinstance(prompt, str):
        ids = list(tokenizer(prompt)["input_ids"])
    else:
        vocab = len(tokenizer)
        bad = [t for t in prompt if not 0 <= t < vocab]
        if bad:
            raise invalid_request(f"token ids must be in [0, {vocab}), got {bad[:5]}", param=param)
        ids = list(prompt)
    if not ids:
        raise invalid_request("the prompt is empty after tokenization", param=param)
    return ids


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text deltas that never split a character."""

    def __init__(self, tokenizer: Tokenizer, keep: frozenset[int] = frozenset()) -> None:
        self._tok = tokenizer
        # Special tokens to show anyway (a tool-call tag that is a special token); the others
        # are dropped before decoding.
        self._keep = keep
        self._drop = frozenset(_special_ids(tokenizer)) - keep if keep else frozenset()
        # Fast tokenizers: call the Rust decoder directly. transformers' `decode` wrapper adds
        # ~15 µs of Python per call and we decode twice per token; the result is the same
        # because we never ask for its clean-up step.
        self._backend = getattr(tokenizer, "backend_tokenizer", None)
        self._ids: list[int] = []
        self._prefix = 0  # start of the context window re-decoded with new tokens
        self._read = 0  # tokens before this index have been emitted as text
        self.text_len = 0  # characters emitted so far

    def push(self, token_id: int) -> str:
        self._ids.append(token_id)
        before = self._decode(self._ids[self._prefix : self._read])
        after = self._decode(self._ids[self._prefix :])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""  # incomplete UTF-8 sequence (or nothing visible): wait for more
        self._prefix, self._read = self._read, len(self._ids)
        return self._emit(after[len(before) :])

    def flush(self) -> str:
        """At the end, whatever is still held (a genuinely invalid byte sequence shows as �)."""
        if self._read == len(self._ids):
            return ""
        before = self._decode(self._ids[self._prefix : self._read])
        after = self._decode(self._ids[self._prefix :])
        self._prefix = self._read = len(self._ids)
        return self._emit(after[len(before) :])

    def _emit(self, text: str) -> str:
        self.text_len += len(text)
        return text

    def _decode(self, ids: list[int]) -> str:
        skip = not self._keep
        if not skip:
            ids = [i for i in ids if i not in self._drop]
        if not ids:
            return ""
        if self._backend is not None:
            return str(self._backend.decode(ids, skip_special_tokens=skip))
        return self._tok.decode(ids, skip_special_tokens=skip, clean_up_tokenization_spaces=False)


def _special_ids(tokenizer: Any) -> set[int]:
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    ids = {int(i) for i, t in decoder.items() if getattr(t, "special", False)}
    return ids | set(getattr(tokenizer, "all_special_ids", []) or [])


class StopMatcher:
    """Finds stop strings in streamed text, holding back any tail that may begin one."""

    def __init__(self, stops: list[str]) -> None:
        self.stops = [s for s in stops if s]
        self._pending = ""
        self.matched: str | None = None

    def push(self, text: str) -> tuple[str, bool]:
        """Returns (text safe to emit, whether a stop string was found)."""
        if not self.stops:
            return text, False
        self._pending += text
        hit = self._earliest_stop()
        if hit is not None:
            index, stop = hit
            out, self._pending, self.matched = self._pending[:index], "", stop
            return out, True
        hold = self._held_suffix_len()
        cut = len(self._pending) - hold
        out, self._pending = self._pending[:cut], self._pending[cut:]
        return out, False

    def flush(self) -> str:
        out, self._pending = self._pending, ""
        return out

    def _earliest_stop(self) -> tuple[int, str] | None:
        """The stop that completes first (then the one starting first): generation would have
        stopped there, so the answer does not depend on how the text was chunked."""
        found = [(i + len(s), i, s) for s in self.stops if (i := self._pending.find(s)) >= 0]
        if not found:
            return None
        _, start, stop = min(found)
        return start, stop

    def _held_suffix_len(self) -> int:
        longest = min(len(self._pending), max(len(s) for s in self.stops) - 1)
        for k in range(longest, 0, -1):
            tail = self._pending[-k:]
            if any(s.startswith(tail) for s in self.stops):
                return k
        return 0


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode: the byte-level BPE alphabet back to bytes."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def is_byte_level(tokenizer: Any) -> bool:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return "ByteLevel" in type(getattr(backend, "decoder", None)).__name__


class TokenText:
    """Token id -> (display string, UTF-8 bytes) for logprobs, cached per tokenizer."""

    def __init__(self, tokenizer: Tokenizer, keep: frozenset[int] = frozenset()) -> None:
        self._tok = tokenizer
        # Special tokens to show anyway (a tool-call tag that is a special token); the others
        # are dropped before decoding.
        self._keep = keep
        self._drop = frozenset(_special_ids(tokenizer)) - keep if keep else frozenset()
        self._byte_level = is_byte_level(tokenizer)
        self._cache: dict[int, tuple[str, list[int]]] = {}

    def __call__(self, token_id: int) -> tuple[str, list[int]]:
        hit = self._cache.get(token_id)
        if hit is None:
            raw = self._bytes(token_id)
            hit = (raw.decode("utf-8", errors="replace"), list(raw))
            self._cache[token_id] = hit
        return hit

    def _bytes(self, token_id: int) -> bytes:
        piece = self._tok.convert_ids_to_tokens(token_id)
        if isinstance(piece, str):
            table = _byte_decoder()
            if self._byte_level and all(c in table for c in piece):
                return bytes(table[c] for c in piece)
            byte = _BYTE_TOKEN.match(piece)
            if byte:  # sentencepiece byte fallback
                return bytes([int(byte.group(1), 16)])
            if piece.startswith("▁"):
                return (" " + piece[1:]).encode("utf-8")
        return self._tok.decode([token_id]).encode("utf-8")


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
