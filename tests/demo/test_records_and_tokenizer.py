"""Record caps, the chat format and the tokenizer's chat template agree."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoTokenizer

from demo.records import ELLIPSIS, END, cap_prompt, cap_response, chat_text, user_turn
from demo.tokenizer import save_tokenizer, train_tokenizer

TEXTS = [chat_text(f"question {i}: what is {i} + {i}?", f"It is {2 * i}.") for i in range(200)]


def test_cap_prompt_keeps_head_and_tail() -> None:
    prompt = "Summarize: " + " ".join(f"w{i}" for i in range(1000)) + " Question: why?"
    capped = cap_prompt(prompt, 300)
    assert len(capped) <= 300
    assert capped.startswith("Summarize: w0 ")
    assert capped.endswith("Question: why?")
    assert ELLIPSIS in capped
    assert cap_prompt("short", 300) == "short"


def test_cap_response_cuts_at_whitespace() -> None:
    assert cap_response("alpha beta gamma delta", 12) == "alpha beta"


def test_chat_template_matches_training_format(tmp_path: Path) -> None:
    save_tokenizer(train_tokenizer(TEXTS, 300), tmp_path)
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    messages = [{"role": "user", "content": "hi there"}]
    rendered = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rendered == user_turn("hi there")
    full = tok.apply_chat_template(
        [*messages, {"role": "assistant", "content": "hello"}], tokenize=False
    )
    assert full == chat_text("hi there", "hello")
    assert tok.eos_token == END
    ids = tok(chat_text("hi there", "hello"))["input_ids"]
    assert ids[-1] == tok.eos_token_id
    assert tok.decode(ids) == chat_text("hi there", "hello")


def test_system_message_is_folded_into_the_user_turn(tmp_path: Path) -> None:
    save_tokenizer(train_tokenizer(TEXTS, 300), tmp_path)
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    rendered = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rendered == user_turn("Be brief.\n\nhi")


def test_tokenizer_training_is_deterministic() -> None:
    a, b = train_tokenizer(TEXTS, 300), train_tokenizer(TEXTS, 300)
    assert a.get_vocab() == b.get_vocab()
