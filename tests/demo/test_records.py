"""Record caps keep what matters of long prompts and responses."""

from __future__ import annotations

from demo.records import ELLIPSIS, cap_prompt, cap_response


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
