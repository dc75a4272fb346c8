"""Request models and error mapping: OpenAI field rules, `param` naming, error shapes."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from gateway.errors import APIError, loc_to_param, validation_error
from gateway.openai.protocol import ChatCompletionRequest, CompletionRequest

MSG = [{"role": "user", "content": "hi"}]


def chat(**kw: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "m", "messages": MSG, **kw})


def error_for(model: Any, body: dict[str, Any]) -> APIError:
    with pytest.raises(ValidationError) as err:
        model.model_validate(body)
    errors = [{**e, "loc": ("body", *e["loc"])} for e in err.value.errors()]
    return validation_error(RequestValidationError(errors))


@pytest.mark.parametrize(
    ("loc", "param"),
    [
        (("body", "messages", 0, "content"), "messages[0].content"),
        (("body", "hedgespec", "policy"), "hedgespec.policy"),
        (("body",), None),
        (("query", "limit"), "limit"),
    ],
)
def test_loc_to_param(loc: tuple[Any, ...], param: str | None) -> None:
    assert loc_to_param(loc) == param


def test_unknown_fields_are_kept_aside_and_ignored() -> None:
    req = chat(future_field=1, reasoning_effort="low")
    assert req.model_extra == {"future_field": 1, "reasoning_effort": "low"}


def test_content_parts_flatten_to_text_and_images_are_refused() -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    req = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "developer", "content": parts}]}
    )
    assert req.messages[0].template_dict() == {"role": "system", "content": "ab"}
    err = error_for(
        ChatCompletionRequest,
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
    )
    assert err.param == "messages[0].content" and "image_url" in err.message


def test_stop_accepts_a_string_or_up_to_four() -> None:
    assert chat(stop="x").stop_strings == ["x"]
    assert chat(stop=None).stop_strings == []
    assert (
        error_for(ChatCompletionRequest, {"model": "m", "messages": MSG, "stop": [""]}).param
        == "stop"
    )


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    assert chat(max_tokens=5, max_completion_tokens=7).max_new_tokens == 7
    assert chat(max_tokens=5).max_new_tokens == 5


def test_logprob_settings_map_to_engine_counts() -> None:
    assert chat().num_logprobs is None
    assert chat(logprobs=True).num_logprobs == 0
    assert chat(logprobs=True, top_logprobs=3).num_logprobs == 3
    with pytest.raises(APIError) as err:
        chat(top_logprobs=3).check()
    assert err.value.param == "top_logprobs"


def test_include_usage_only_counts_when_streaming() -> None:
    assert not chat(stream_options={"include_usage": True}).include_usage
    assert chat(stream=True, stream_options={"include_usage": True}).include_usage


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [("a", ["a"]), (["a", "b"], ["a", "b"]), ([1, 2], [[1, 2]]), ([[1], [2, 3]], [[1], [2, 3]])],
)
def test_completion_prompt_forms(prompt: Any, expected: list[Any]) -> None:
    assert CompletionRequest.model_validate({"model": "m", "prompt": prompt}).prompts == expected


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("suffix", "x"), ("presence_penalty", 2.5), ("frequency_penalty", -3.0),
        ("repetition_penalty", 0.0), ("logit_bias", {"x": 2.0}), ("logit_bias", {"1": 100.5}),
        ("prompt", []),
    ],
)
def test_unsupported_values_are_refused_with_their_param(field: str, value: Any) -> None:
    body = {"model": "m", "prompt": "p", field: value}
    assert error_for(CompletionRequest, body).param == field


def test_best_of_other_than_n_is_refused() -> None:
    req = CompletionRequest.model_validate({"model": "m", "prompt": "p", "best_of": 3})
    with pytest.raises(APIError) as err:
        req.check()
    assert err.value.param == "best_of"


def test_missing_field_error_shape() -> None:
    err = error_for(ChatCompletionRequest, {"messages": MSG})
    assert err.body() == {
        "error": {
            "message": "Missing required parameter: 'model'.",
            "type": "invalid_request_error",
            "param": "model",
            "code": "missing_required_parameter",
        }
    }


@pytest.mark.parametrize(
    ("message", "needs"),
    [
        ({"role": "user", "content": None}, "a user message needs content"),
        ({"role": "system"}, "a system message needs content"),
        ({"role": "assistant", "content": None}, "content or tool_calls"),
        ({"role": "tool", "content": "sunny"}, "tool_call_id"),
    ],
)
def test_each_role_has_its_required_fields(message: dict[str, Any], needs: str) -> None:
    err = error_for(ChatCompletionRequest, {"model": "m", "messages": [*MSG, message]})
    assert err.param == "messages[1]" and needs in err.message


def test_an_assistant_call_without_content_renders_as_empty_text() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    req = chat(messages=[*MSG, {"role": "assistant", "content": None, "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": "c1", "content": "ok"}])
    assert req.messages[1].template_dict()["content"] == ""
    assert req.messages[2].template_dict()["tool_call_id"] == "c1"


def test_only_text_output_is_accepted() -> None:
    assert chat(modalities=["text"]).modalities == ["text"]
    err = error_for(ChatCompletionRequest, {"model": "m", "messages": MSG,
                                            "modalities": ["text", "audio"]})
    assert err.param == "modalities" and "only text output" in err.message
