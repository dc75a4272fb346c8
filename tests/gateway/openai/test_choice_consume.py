"""`Choice.consume` (gateway/openai/jobs.py): how one engine round becomes text for one choice, with
a scripted byte-level tokenizer (token ids are byte strings) and no model."""

from __future__ import annotations

from typing import Any

from core.stats import RequestStats, TokenLogprob
from gateway.openai.jobs import Choice
from gateway.openai.text import IncrementalDetokenizer, StopMatcher
from gateway.runner import Update

PIECES = {1: b"Hel", 2: b"lo", 3: b" wor", 4: b"ld", 5: b"!", 6: b"<", 7: b"END", 8: b">",
          9: b"\xc3", 10: b"\xa9"}  # 9 + 10 = UTF-8 of "é"  # fmt: skip


class ScriptedTokenizer:
    """Decodes ids by concatenating their bytes (invalid UTF-8 shows as U+FFFD)."""

    def decode(self, ids: list[int], **_: Any) -> str:
        return b"".join(PIECES[i] for i in ids).decode("utf-8", errors="replace")


def make_choice(stops: list[str] | None = None, prefix: str = "") -> Choice:
    return Choice(index=0, request_id="r-0", detok=IncrementalDetokenizer(ScriptedTokenizer()),
                  stop=StopMatcher(stops or []), prefix=prefix)  # type: ignore[arg-type]


def lp(token_id: int) -> TokenLogprob:
    return TokenLogprob(token_id, -0.5)


def test_a_round_becomes_its_text_and_token_offsets() -> None:
    choice = make_choice()
    delta = choice.consume(Update("r-0", [1, 2]))
    assert delta is not None
    assert (delta.text, delta.offsets, delta.finished) == ("Hello", [0, 3], False)
    delta = choice.consume(Update("r-0", [3]))
    assert delta is not None and (delta.text, delta.offsets) == (" wor", [5])
    assert choice.completion_tokens == 3 and not choice.done and not choice.acked


def test_offsets_count_the_echoed_prompt() -> None:
    delta = make_choice(prefix="Q: ").consume(Update("r-0", [1, 2]))
    assert delta is not None and delta.offsets == [3, 6]


def test_a_character_split_across_rounds_waits_for_its_second_byte() -> None:
    choice = make_choice()
    first = choice.consume(Update("r-0", [9]))
    assert first is not None and first.text == "" and first.offsets == [0]
    second = choice.consume(Update("r-0", [10]))
    assert second is not None and second.text == "é" and second.offsets == [0]


def test_a_stop_string_across_rounds_cuts_the_text_and_later_rounds() -> None:
    choice = make_choice(["<END>"])
    first = choice.consume(Update("r-0", [1, 6], logprobs=[lp(1), lp(6)]))
    assert first is not None and first.text == "Hel"  # "<" is held: it may begin the stop
    stopped = choice.consume(Update("r-0", [7, 8, 5], logprobs=[lp(7), lp(8), lp(5)]))
    assert stopped is not None and stopped.text == "" and stopped.finished
    assert [x.token_id for x in stopped.logprobs] == [7, 8]  # nothing after the stop token
    assert (choice.finish_reason, choice.completion_tokens) == ("stop", 4)
    assert choice.done and not choice.acked
    assert choice.consume(Update("r-0", [5])) is None  # the engine's late round
    stats = RequestStats("normalhedge", rounds=2).snapshot()
    assert choice.consume(Update("r-0", finished=True, finish_reason="length", stats=stats)) is None
    assert choice.acked and choice.stats is stats
    assert choice.finish_reason == "stop" and choice.completion_tokens == 4


def test_a_held_stop_prefix_is_released_when_the_request_finishes() -> None:
    choice = make_choice(["ld!"])
    delta = choice.consume(Update("r-0", [3, 4], finished=True, finish_reason="length"))
    assert delta is not None and delta.text == " world" and delta.finished
    assert (choice.finish_reason, choice.done, choice.acked) == ("length", True, True)


def test_a_stop_completed_by_the_final_flush_is_a_stop() -> None:
    choice = make_choice(["é"])
    delta = choice.consume(Update("r-0", [1, 9], finished=True, finish_reason="length"))
    # The lone first byte flushes as U+FFFD, which is no "é": the request ended by length.
    assert delta is not None and delta.text == "Hel\ufffd" and choice.finish_reason == "length"


def test_a_finish_without_a_reason_is_a_stop() -> None:
    choice = make_choice()
    delta = choice.consume(Update("r-0", [5], finished=True))
    assert delta is not None and delta.text == "!" and choice.finish_reason == "stop"


def test_logprobs_follow_the_tokens_they_belong_to() -> None:
    choice = make_choice()
    delta = choice.consume(Update("r-0", [1, 2, 5], logprobs=[lp(1), lp(2)]))
    assert delta is not None and [x.token_id for x in delta.logprobs] == [1, 2]
    delta = choice.consume(Update("r-0", [3]))
    assert delta is not None and delta.logprobs == []


def test_a_finished_update_without_stats_keeps_the_last_stats() -> None:
    choice = make_choice()
    choice.stats = stats = RequestStats("normalhedge", rounds=1).snapshot()
    choice.consume(Update("r-0", [], finished=True, finish_reason="abort"))
    assert choice.stats is stats and choice.finish_reason == "abort"
