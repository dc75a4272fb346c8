"""Penalties, logit_bias and completions `echo` with `logprobs`, end to end: a real
`hedgespec serve` process and the official `openai` SDK. Losslessness itself is pinned at
the core level (tests/core/speculation/test_penalties.py); here speculative output must equal plain
decoding through the HTTP path, and bad values must get OpenAI-shaped 400s."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from openai import OpenAI
from openai.types import Completion

pytestmark = pytest.mark.timeout(120)
MODEL = "tiny-target"
PROMPT_IDS = [40, 17, 42, 99, 23, 61]
PENALISED: dict[str, Any] = dict(presence_penalty=1.5, frequency_penalty=2.0)


def greedy_tokens(client: OpenAI, policy: str, n: int = 24, **fields: Any) -> list[str]:
    """The generated tokens (as logprob token strings) of a greedy completion."""
    extra = {"hedgespec": {"policy": policy}, "ignore_eos": True, **fields.pop("extra_body", {})}
    resp = client.completions.create(
        model=MODEL, prompt=PROMPT_IDS, max_tokens=n, temperature=0, logprobs=0,
        extra_body=extra, **fields,
    )  # fmt: skip
    assert resp.choices[0].logprobs is not None and resp.choices[0].logprobs.tokens is not None
    return resp.choices[0].logprobs.tokens


@pytest.mark.parametrize(
    "fields",
    [
        PENALISED,
        {"extra_body": {"repetition_penalty": 1.8}},
        # a bias strong enough to win, and a penalty that makes it lose after a few repeats
        {"logit_bias": {"61": 10.0, "40": -100}, "frequency_penalty": 1.5},
    ],
    ids=["presence+frequency", "repetition", "logit_bias+frequency"],
)
def test_penalised_greedy_is_the_same_with_and_without_speculation(
    client: OpenAI, fields: dict[str, Any]
) -> None:
    plain = greedy_tokens(client, "none", **dict(fields))
    assert plain != greedy_tokens(client, "none"), "the field must change the output"
    for policy in ("auto", "fixed:alpha", "exp3spec"):
        assert greedy_tokens(client, policy, **dict(fields)) == plain, policy


def test_logit_bias_forces_and_bans_tokens(client: OpenAI) -> None:
    # The echoed prompt names a token's string (the prompt is token ids):
    # 266 is the merge " the", whose string is no other token's.
    echoed = client.completions.create(
        model=MODEL, prompt=[266], max_tokens=1, echo=True, logprobs=0, temperature=0
    )
    assert echoed.choices[0].logprobs is not None and echoed.choices[0].logprobs.tokens is not None
    token = echoed.choices[0].logprobs.tokens[0]
    assert token.isprintable() and "\ufffd" not in token
    assert greedy_tokens(client, "auto", n=8, logit_bias={"266": 100}) == [token] * 8
    # banned, even where the bias that forced it before is what the prompt prefers
    banned = greedy_tokens(client, "auto", n=24, logit_bias={"266": -100}, frequency_penalty=-2)
    assert token not in banned


def test_penalised_sampling_runs_with_n_and_streaming(client: OpenAI) -> None:
    body: dict[str, Any] = dict(
        model=MODEL, prompt="The quick", max_tokens=12, temperature=1.0, seed=7, n=2,
        logit_bias={"99": 3.0}, **PENALISED,
    )  # fmt: skip
    full = client.completions.create(**body)
    assert len(full.choices) == 2
    unpenalised = {k: v for k, v in body.items() if k not in ("logit_bias", *PENALISED)}
    plain = client.completions.create(**unpenalised)
    assert [c.text for c in plain.choices] != [c.text for c in full.choices]
    chunks = list(client.completions.create(**body, stream=True))
    for index in (0, 1):
        text = "".join(c.choices[0].text for c in chunks
                       if c.choices and c.choices[0].index == index)
        assert text == full.choices[index].text  # the same seed: the same penalised sample


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("logit_bias", {"abc": 1.0}),
        ("logit_bias", {"-3": 1.0}),
        ("logit_bias", {"1.5": 1.0}),
        ("logit_bias", {"5": 101}),
        ("logit_bias", {"5": -100.5}),
        ("logit_bias", {"9999999": 1.0}),  # beyond the vocabulary
        ("presence_penalty", 2.5),
        ("frequency_penalty", -2.01),
        ("repetition_penalty", 0),
        ("repetition_penalty", -1.0),
    ],
)
@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_bad_values_get_an_openai_400(
    client: OpenAI, endpoint: str, field: str, value: Any
) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        if endpoint == "chat":
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                extra_body={field: value},
            )  # fmt: skip
        else:
            client.completions.create(model=MODEL, prompt="hi", max_tokens=2,
                                      extra_body={field: value})
    error = err.value.body
    assert isinstance(error, dict) and error["type"] == "invalid_request_error"
    assert error["param"] == field and field in error["message"]


def test_suffix_is_refused_clearly(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=MODEL, prompt="def f(", suffix="return 1", max_tokens=4)
    error = err.value.body
    assert isinstance(error, dict) and error["param"] == "suffix"
    assert "suffix" in error["message"] and "not supported" in error["message"]


def test_echo_with_logprobs_reports_the_prompt_tokens(client: OpenAI) -> None:
    kwargs: dict[str, Any] = dict(model=MODEL, prompt="The quick brown", max_tokens=4,
                                  temperature=0)
    plain = client.completions.create(**kwargs, logprobs=2)
    resp = client.completions.create(**kwargs, logprobs=2, echo=True)
    # The SDK types token_logprobs as floats, but OpenAI sends null for the first prompt token
    # (nothing predicts it): everything else must validate.
    body = resp.model_dump()
    body["choices"][0]["logprobs"]["token_logprobs"][0] = 0.0
    body["choices"][0]["logprobs"]["top_logprobs"][0] = {}
    Completion.model_validate(body)
    choice, gen = resp.choices[0], plain.choices[0]
    assert choice.text == "The quick brown" + gen.text
    lp, gen_lp = choice.logprobs, gen.logprobs
    assert lp is not None and gen_lp is not None and lp.tokens and gen_lp.tokens
    assert lp.token_logprobs is not None and lp.top_logprobs is not None and lp.text_offset
    n_prompt = resp.usage.prompt_tokens if resp.usage else 0
    assert n_prompt > 1 and len(lp.tokens) == n_prompt + len(gen_lp.tokens)
    # OpenAI: nothing predicts the first prompt token
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(isinstance(v, float) for v in lp.token_logprobs[1:])
    assert all(t is not None and len(t) >= 2 for t in lp.top_logprobs[1:n_prompt])
    assert "".join(lp.tokens[:n_prompt]) == "The quick brown"
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    # the generated part is exactly what the request without echo reports
    assert lp.tokens[n_prompt:] == gen_lp.tokens
    assert lp.token_logprobs[n_prompt:] == pytest.approx(gen_lp.token_logprobs, abs=1e-4)
    assert [o - len("The quick brown") for o in lp.text_offset[n_prompt:]] == gen_lp.text_offset


def test_echoed_prompt_logprobs_are_the_targets(client: OpenAI) -> None:
    """A prompt token's logprob equals that of generating the same token after the same
    prefix (forced with logit_bias: logprobs report the raw target, before the bias)."""
    echoed = client.completions.create(
        model=MODEL, prompt=PROMPT_IDS, max_tokens=1, echo=True, logprobs=0, temperature=0
    )
    forced = client.completions.create(
        model=MODEL, prompt=PROMPT_IDS[:-1], max_tokens=1, logprobs=0, temperature=0,
        logit_bias={str(PROMPT_IDS[-1]): 100},
    )  # fmt: skip
    e, f = echoed.choices[0].logprobs, forced.choices[0].logprobs
    assert e is not None and f is not None and e.token_logprobs and f.token_logprobs and f.tokens
    assert e.tokens is not None and e.tokens[len(PROMPT_IDS) - 1] == f.tokens[0]
    assert e.token_logprobs[len(PROMPT_IDS) - 1] == pytest.approx(f.token_logprobs[0], abs=1e-4)
    assert f.token_logprobs[0] < -0.01  # raw: the +100 bias would make it ~0


def test_echo_with_logprobs_streams_the_prompt_first(client: OpenAI) -> None:
    kwargs: dict[str, Any] = dict(
        model=MODEL, prompt="The quick brown", max_tokens=5, temperature=0, logprobs=1, echo=True
    )
    full = client.completions.create(**kwargs)
    chunks = [c for c in client.completions.create(**kwargs, stream=True) if c.choices]
    assert chunks[0].choices[0].text.startswith("The quick brown")
    first = chunks[0].choices[0].logprobs
    assert first is not None and first.token_logprobs is not None
    assert first.token_logprobs[0] is None
    assert "".join(c.choices[0].text for c in chunks) == full.choices[0].text
    tokens = [t for c in chunks if c.choices[0].logprobs
              for t in c.choices[0].logprobs.tokens or []]
    assert full.choices[0].logprobs is not None and tokens == full.choices[0].logprobs.tokens
