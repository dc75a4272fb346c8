"""Incremental detokenization, stop strings and token bytes, on a real trained tokenizer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import PreTrainedTokenizerFast

from bench.harness.tiny_pool import train_tokenizer
from gateway.errors import APIError
from gateway.openai.text import (
    IncrementalDetokenizer,
    StopMatcher,
    TokenText,
    encode_prompt,
    render_chat,
)


@pytest.fixture(scope="module")
def tok() -> PreTrainedTokenizerFast:
    return train_tokenizer()


def stream_text(tok: PreTrainedTokenizerFast, ids: list[int]) -> list[str]:
    detok = IncrementalDetokenizer(tok)
    deltas = [detok.push(i) for i in ids]
    deltas.append(detok.flush())
    return deltas


def test_multibyte_character_is_never_split(tok: PreTrainedTokenizerFast) -> None:
    ids = tok("🚀é数", add_special_tokens=False)["input_ids"]
    assert len(ids) > 3  # several tokens carry parts of one character
    deltas = stream_text(tok, ids)
    assert "".join(deltas) == "🚀é数"
    assert all("\ufffd" not in d for d in deltas)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="ab é🚀数\n", min_size=1, max_size=30))
def test_deltas_concatenate_to_the_full_decode(tok: PreTrainedTokenizerFast, text: str) -> None:
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert "".join(stream_text(tok, ids)) == text


def test_invalid_bytes_are_flushed_at_the_end(tok: PreTrainedTokenizerFast) -> None:
    lone_lead_byte = tok.convert_tokens_to_ids("ð")  # 0xF0: a 4-byte sequence that never ends
    deltas = stream_text(tok, [tok("a")["input_ids"][0], lone_lead_byte])
    assert deltas[:2] == ["a", ""] and deltas[2] == "\ufffd"


def run_stop(stops: list[str], pieces: list[str]) -> tuple[str, bool]:
    matcher = StopMatcher(stops)
    out = []
    for piece in pieces:
        text, stopped = matcher.push(piece)
        out.append(text)
        if stopped:
            return "".join(out), True
    out.append(matcher.flush())
    return "".join(out), False


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text(alphabet="abc", max_size=4), min_size=1, max_size=12),
    st.lists(st.text(alphabet="abc", min_size=1, max_size=4), min_size=1, max_size=4),
)
def test_stop_matches_the_reference_for_any_chunking(pieces: list[str], stops: list[str]) -> None:
    # Oracle: read the text one character at a time and stop at the first character that
    # completes any stop string, cutting at the earliest start among those completed there.
    text = "".join(pieces)
    hits = [(i + len(s), i) for s in stops if (i := text.find(s)) >= 0]
    expected = (text[: min(hits)[1]], True) if hits else (text, False)
    assert run_stop(stops, pieces) == expected
    assert run_stop(stops, list(text)) == expected  # the chunking does not matter


def test_stop_holds_back_a_possible_prefix() -> None:
    matcher = StopMatcher(["<END>"])
    assert matcher.push("hello <E") == ("hello ", False)
    assert matcher.push("N") == ("", False)
    assert matcher.push("X") == ("<ENX", False)
    assert matcher.push("<EN") == ("", False)
    assert matcher.push("D> tail") == ("", True) and matcher.matched == "<END>"


def test_token_text_bytes_rebuild_the_text(tok: PreTrainedTokenizerFast) -> None:
    text = "Café 🚀 SELECT"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    token_text = TokenText(tok)
    raw = b"".join(bytes(token_text(i)[1]) for i in ids)
    assert raw.decode("utf-8") == text


def test_chat_template_and_fallback(tok: PreTrainedTokenizerFast) -> None:
    ids = render_chat(tok, [{"role": "user", "content": "hi"}])
    assert tok.decode(ids) == "<|user|>\nhi<|end|>\n<|assistant|>\n"
    bare = train_tokenizer()
    bare.chat_template = None
    text = bare.decode(render_chat(bare, [{"role": "system", "content": "s"}]))
    assert text == "<|system|>\ns\n<|assistant|>\n"


def test_token_id_prompts_are_range_checked(tok: PreTrainedTokenizerFast) -> None:
    assert encode_prompt(tok, [1, 2, 3], param="prompt") == [1, 2, 3]
    with pytest.raises(APIError) as err:
        encode_prompt(tok, [1, len(tok) + 5], param="prompt")
    assert err.value.status == 400 and err.value.param == "prompt"
