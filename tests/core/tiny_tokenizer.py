"""A character-level byte-level-BPE tokenizer the tests build in milliseconds, so grammar
tests run on tiny random targets whose vocabulary is exactly these characters."""

from __future__ import annotations

import string

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

EOS = "<eos>"
JSON_CHARS = string.ascii_letters + string.digits + ' {}[]":,.-_'


def byte_chars() -> dict[int, str]:
    """GPT-2's byte -> printable character map (what byte-level BPE vocabularies spell)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    extra = (b for b in range(256) if b not in printable)
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + i) for i, b in enumerate(extra)}}


def char_tokenizer(chars: str = JSON_CHARS) -> PreTrainedTokenizerFast:
    """Token 0 is EOS, token i >= 1 is chars[i - 1]; no merges."""
    byte_char = byte_chars()
    vocab = {EOS: 0}
    for c in chars:
        vocab.setdefault(byte_char[ord(c)], len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([EOS])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS)
