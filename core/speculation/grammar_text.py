"""The grammar of a structured-output request as llguidance text, without torch.

`grammar_text` checks and compiles a request's `GrammarSpec` to the grammar the matcher runs
(core/speculation/grammar.py); front ends call it to refuse a grammar before any work, and
`JSON_OPTIONS` is the JSON layout every JSON-schema grammar here uses. llguidance's Python
side needs no torch, so a front end that only checks grammars never loads it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import llguidance

from core.config import GrammarSpec

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions

# JSON as json.dumps writes it: ", " and ": " separators, no free whitespace. Free whitespace
# (llguidance's default) lets small models loop on newlines; the compact form ("," and ":")
# is further from how instruct models write JSON, which costs them quality.
JSON_OPTIONS: JsonCompileOptions = {"item_separator": ", ", "key_separator": ": ",
                                    "whitespace_flexible": False}


def grammar_text(spec: GrammarSpec) -> str:
    """The llguidance grammar for `spec`; ValueError with a readable reason if it is invalid."""
    if spec.kind == "json_schema":
        try:
            schema = json.loads(spec.source)
        except json.JSONDecodeError as e:
            raise ValueError(f"the JSON schema is not valid JSON: {e}") from None
        if not isinstance(schema, dict):
            raise ValueError("the JSON schema must be an object")
        text = llguidance.LLMatcher.grammar_from_json_schema(schema, overrides=JSON_OPTIONS)
    elif spec.kind == "regex":
        text = llguidance.LLMatcher.grammar_from_regex(spec.source)
    elif spec.kind == "lark":
        text = llguidance.LLMatcher.grammar_from_lark(spec.source)
    else:
        raise ValueError(f"unknown grammar kind {spec.kind!r}")
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(text)
    if is_error:
        raise ValueError(f"unsupported {spec.kind.replace('_', ' ')}: {messages[0]}")
    return text
