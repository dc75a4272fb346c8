"""Property-based fuzzing of every public endpoint of a real server (issue 9, item 1).

Hypothesis generates request bodies that are valid-ish (every OpenAI field with valid values,
out-of-range values, wrong types and arbitrary JSON mixed), raw bytes (invalid UTF-8, lone
surrogates, truncated JSON, deep nesting, huge numbers, NaN literals, BOMs, wrong content
types) and arbitrary requests to every route of the app's own route table (any method, odd path
parameters and query strings, with and without keys). The property, for every answer:

- the status is not 5xx;
- a 4xx carries a well-formed OpenAI error (`{"error": {message, type, param, code}}`);
- a 200 stream is well-formed SSE that ends in `[DONE]`, and an in-band error is not a
  `server_error`;

and after the run the server still serves, has nothing left in flight and logged no traceback.

The server runs with a 96-token context and `max_n` 2 so valid requests stay cheap. Sizes:
HEDGESPEC_FUZZ_EXAMPLES (default 120 per generator; `--soak` multiplies by 10). With
HEDGESPEC_FUZZ_STATS=<file> the counts are written there (bench/reliability/reliability_bench.py
reads them).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.harness.server import ServerProcess
from bench.reliability import scenarios as R
from core.config import LEARNER_NAMES
from tests.reliability.judge import assert_clean_log, assert_openai_error
from tests.reliability.routes import RouteInfo, app_routes, build_app

pytestmark = pytest.mark.timeout(900)

MODEL = R.MODEL
STATS: Counter[str] = Counter()
FAILURES: list[str] = []


def _examples() -> int:
    base = int(os.environ.get("HEDGESPEC_FUZZ_EXAMPLES", "120"))
    return base * 10 if os.environ.get("HEDGESPEC_SOAK") == "1" else base


FUZZ = settings(
    max_examples=_examples(),
    deadline=None,
    database=None,  # nothing written into the working tree
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                           HealthCheck.data_too_large],
)


# ---- strategies ---------------------------------------------------------------------------------

NASTY_TEXT = [
    "", " ", "\x00", "\ud800", "a\udfffb", "\udbff\udfff", "\u202e\u2066", "\ufeff", "🚀" * 64,
    "<|end|>", "<|user|>\nhi<|end|>", "{{ 7 * 7 }}", "{% for x in range(9) %}x{% endfor %}",
    "\\u0000", "%s%n%x", "\r\n" * 40, "é" * 300, "\U0010ffff", "Ж" * 1000,
]
texts = st.one_of(st.text(max_size=40), st.sampled_from(NASTY_TEXT))
long_texts = st.integers(50, 4000).map(lambda n: "token " * n)  # most exceed 96 tokens
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False), texts,
)  # fmt: skip
any_json = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


def either(valid: st.SearchStrategy[Any],
           *invalid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Valid values twice as often as invalid ones."""
    return st.one_of(valid, valid, st.one_of(any_json, *invalid))


POLICIES = ["auto", "none", "fixed:alpha", "fixed:beta", "fixed:nope", "fixed:", " auto ",
            "fixed:../x", *LEARNER_NAMES]
content_parts = st.lists(
    st.fixed_dictionaries(
        {"type": st.one_of(st.just("text"), texts)}, optional={"text": either(texts)}
    ),
    max_size=3,
)
# Tools: valid ones (a tiny schema, none, or one the grammar engine refuses), wrong shapes and
# arbitrary JSON; tool_choice in every form; history calls with good and bad arguments.
tool_params = st.sampled_from([
    {"type": "object", "properties": {"x": {"enum": ["a", "b"]}}, "required": ["x"]},
    {"properties": {"n": {"type": "integer"}}}, {}, {"$ref": "#/nowhere"}, [],
])  # fmt: skip
tool = st.one_of(
    st.fixed_dictionaries(
        {"type": st.just("function"),
         "function": st.fixed_dictionaries({"name": st.sampled_from(["f", "g", "bad name", ""])},
                                           optional={"parameters": tool_params,
                                                     "description": texts})}),
    any_json,
)  # fmt: skip
tool_choices = st.one_of(
    st.sampled_from(["none", "auto", "required", "sometimes"]),
    st.fixed_dictionaries({"type": st.just("function"),
                           "function": st.fixed_dictionaries(
                               {"name": st.sampled_from(["f", "g", "h"])})}),
    any_json,
)  # fmt: skip
history_call = st.fixed_dictionaries(
    {"id": texts, "type": st.just("function"),
     "function": st.fixed_dictionaries({"name": st.sampled_from(["f", "g"]),
                                        "arguments": st.sampled_from(
                                            ['{"x": "a"}', "", "[1", "{}", "7"])})},
)  # fmt: skip
message = st.fixed_dictionaries(
    {"role": either(st.sampled_from(["system", "developer", "user", "assistant", "tool"]), texts)},
    optional={"content": either(st.one_of(texts, long_texts), content_parts), "name": texts,
              "tool_calls": either(st.lists(history_call, max_size=2),
                                   st.lists(any_json, max_size=1)),
              "tool_call_id": either(texts)},
)  # fmt: skip
small_tokens = either(st.integers(1, 8), st.integers(-5, 0), st.integers(10**5, 10**30),
                      st.floats(-1e6, 1e6))
sampling = {
    "max_tokens": small_tokens,
    "n": either(st.integers(1, 2), st.integers(-3, 0), st.integers(3, 10**20)),
    "temperature": either(st.floats(0, 2), st.sampled_from([1e-300, 5e-324, 1e-8, 2.0000001]),
                          st.floats(-1e9, 1e9)),
    "top_p": either(st.floats(0, 1), st.sampled_from([1e-300, 5e-324]), st.floats(-5, 5)),
    "top_k": either(st.integers(0, 500), st.integers(-5, -1), st.integers(10**9, 10**30)),
    "seed": either(st.integers(-(2**63), 2**63 - 1), st.integers(2**63, 2**90)),
    "stop": either(texts, st.lists(texts, max_size=6)),
    "stream": either(st.booleans()),
    "stream_options": either(st.fixed_dictionaries(
        {}, optional={"include_usage": either(st.booleans())})),
    "hedgespec": either(st.fixed_dictionaries(
        {}, optional={"policy": either(st.sampled_from(POLICIES), texts)})),
    "ignore_eos": either(st.booleans()),
    "user": either(texts),
    "presence_penalty": either(st.just(0), st.floats(-2, 2)),
    "frequency_penalty": either(st.just(0), st.floats(-2, 2)),
    "logit_bias": either(st.just({}), st.dictionaries(texts, st.floats(-100, 100), max_size=2)),
}
chat_bodies = st.fixed_dictionaries(
    {"model": either(st.just(MODEL), texts), "messages": either(st.lists(message, max_size=4))},
    optional={
        **sampling,
        "max_completion_tokens": small_tokens,
        "logprobs": either(st.booleans()),
        "top_logprobs": either(st.integers(-2, 25)),
        "response_format": either(st.fixed_dictionaries(
            {"type": st.sampled_from(["text", "json_object", "x"])})),
        "tools": either(st.just([]), st.lists(tool, max_size=2)),
        "tool_choice": either(tool_choices),
        "parallel_tool_calls": either(st.booleans()),
        "functions": either(st.just([]), st.lists(any_json, max_size=1)),
        "unknown_field_xyz": any_json,
    },
)
completion_bodies = st.fixed_dictionaries(
    {
        "model": either(st.just(MODEL), texts),
        "prompt": either(
            st.one_of(texts, long_texts, st.lists(texts, max_size=3)),
            st.lists(st.integers(-10, 500), max_size=20),
            st.lists(st.lists(st.integers(-1, 400), max_size=10), max_size=3),
        ),
    },
    optional={
        **sampling,
        "echo": either(st.booleans()),
        "logprobs": either(st.integers(0, 5), st.integers(-3, 10)),
        "best_of": either(st.integers(1, 3)),
        "suffix": either(st.just(""), texts),
    },
)

# Only valid values, so the generation path itself is fuzzed (stop strings across chunks, n,
# logprobs, streaming with usage, every policy, sampling at the edges of the valid ranges).
valid_texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
valid_chat_bodies = st.fixed_dictionaries(
    {"model": st.just(MODEL),
     "messages": st.lists(st.fixed_dictionaries({
         "role": st.sampled_from(["system", "developer", "user", "assistant", "tool"]),
         "content": st.one_of(valid_texts, st.sampled_from(NASTY_TEXT[5:]).filter(
             lambda t: "\ud800" not in t and "\udfff" not in t and "\udbff" not in t)),
         "tool_call_id": st.just("call_1")}),  # a tool message must name its call
         min_size=1, max_size=3),
     "max_tokens": st.integers(1, 12)},
    optional={
        "n": st.integers(1, 2),
        "temperature": st.one_of(st.just(0), st.floats(0, 2)),
        "top_p": st.floats(1e-9, 1).filter(lambda x: x > 0),
        "top_k": st.integers(0, 400),
        "seed": st.integers(-(2**63), 2**63 - 1),
        "stop": st.one_of(valid_texts.filter(bool), st.lists(valid_texts.filter(bool), max_size=4)),
        "stream": st.booleans(),
        "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
        "logprobs": st.booleans(),
        "hedgespec": st.fixed_dictionaries({"policy": st.sampled_from(
            ["auto", "none", "fixed:alpha", "fixed:beta", *LEARNER_NAMES])}),
        "ignore_eos": st.booleans(),
        "user": valid_texts,
    },
)  # fmt: skip


def encode(body: Any, style: str) -> bytes:
    """JSON bytes: ASCII-escaped (lone surrogates as \\ud800 escapes), or raw UTF-8 where
    surrogates become invalid (CESU-style) byte sequences."""
    if style == "ascii":
        return json.dumps(body).encode()
    return json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")


VALID_CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@st.composite
def raw_bodies(draw: st.DrawFn) -> bytes:
    valid = json.dumps(VALID_CHAT).encode()
    kind = draw(st.sampled_from([
        "binary", "truncated", "deep_list", "deep_object", "huge_number", "literal", "bom",
        "trailing", "invalid_utf8_string", "duplicate_keys", "scalar", "empty",
    ]))  # fmt: skip
    if kind == "binary":
        return draw(st.binary(max_size=200))
    if kind == "truncated":
        return valid[: draw(st.integers(0, len(valid) - 1))]
    if kind == "deep_list":
        depth = draw(st.integers(100, 200_000))
        return b"[" * depth + b"]" * draw(st.sampled_from([depth, 0]))
    if kind == "deep_object":
        depth = draw(st.integers(100, 50_000))
        return b'{"a":' * depth + b"1" + b"}" * depth
    field = draw(st.sampled_from(["max_tokens", "n", "temperature", "top_p", "seed", "top_k"]))
    if kind == "huge_number":
        digits = b"9" * draw(st.integers(20, 20_000))
        return (valid[:-1] + b',"' + field.encode() + b'":' + draw(st.sampled_from([b"", b"-"]))
                + digits + b"}")
    if kind == "literal":
        lit = draw(st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-0", b"1e-999"]))
        return valid[:-1] + b',"' + field.encode() + b'":' + lit + b"}"
    if kind == "bom":
        return b"\xef\xbb\xbf" + valid
    if kind == "trailing":
        return valid + draw(st.binary(min_size=1, max_size=20))
    if kind == "invalid_utf8_string":
        junk = draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
                                     b"\xc0\xaf"]))
        return (b'{"model":"' + MODEL.encode() + b'","messages":[{"role":"user","content":"a'
                + junk + b'b"}],"max_tokens":2}')
    if kind == "duplicate_keys":
        return valid[:-1] + b',"max_tokens":-1,"max_tokens":3}'
    if kind == "scalar":
        return draw(st.sampled_from([b"null", b"[]", b'"str"', b"0", b"true", b"{}"]))
    return b""


CONTENT_TYPES = ["application/json", "application/json", "text/plain", None,
                 "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                 "application/json; charset=utf-16", "application/json; charset=latin-1"]


# ---- the server and the property -----------------------------------------------------------------


@pytest.fixture(scope="module")
def server(pool_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = R.start_server(pool_file, tmp_path_factory.mktemp("fuzz"), *R.KEY_FLAGS,
                          "--max-context", "96", "--request-timeout", "20",
                          settings={"HEDGESPEC_MAX_N": "2"})
    yield proc
    proc.stop()
    stats_path = os.environ.get("HEDGESPEC_FUZZ_STATS")
    if stats_path:
        Path(stats_path).write_text(json.dumps({
            "requests": sum(v for k, v in STATS.items() if k.isdigit()),
            "statuses": {k: v for k, v in sorted(STATS.items()) if k.isdigit()},
            "status_5xx": sum(v for k, v in STATS.items() if k.isdigit() and int(k) >= 500),
            "in_band_errors": STATS["in_band_error"],
            "failures": FAILURES[:20],
        }, indent=2))


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        yield client


STREAM_READ_S = 30.0  # a generation stream must end by then; the admin live stream never ends


def _read(resp: httpx.Response) -> tuple[bytes, bool]:
    """The body, and whether it ended (an endless event stream is cut after STREAM_READ_S,
    or at its first frames for the admin live stream)."""
    if not resp.headers.get("content-type", "").startswith("text/event-stream"):
        return resp.read(), True
    endless = resp.request.url.path.startswith("/admin/")
    deadline = time.monotonic() + (2.0 if endless else STREAM_READ_S)
    data = b""
    for chunk in resp.iter_raw():
        data += chunk
        if time.monotonic() > deadline or (endless and b"\n\n" in data):
            return data, False
    return data, True


def check(resp: httpx.Response, method: str = "POST") -> bytes:
    """The property every answer must have (reads the body, streamed or not); returns it."""
    status = resp.status_code
    STATS[str(status)] += 1
    body, ended = _read(resp)
    where = f"{method} {resp.request.url.path} -> {status}"
    if status >= 500:
        FAILURES.append(f"{where}: {body[:300]!r}")
    assert status < 500, f"{where}: {body[:500]!r}"
    if method == "HEAD" or status < 400:
        if status == 200 and resp.headers.get("content-type", "").startswith("text/event-stream"):
            check_stream(body, where, ended=ended,
                         generation=resp.request.url.path.startswith("/v1/"))
        return body
    assert_openai_error(body, where)
    return body


def check_stream(body: bytes, where: str, *, ended: bool, generation: bool) -> None:
    """SSE: every event's data is JSON; a generation stream ends in `[DONE]`, and an in-band
    error in it is a client-side one."""
    text = body.decode("utf-8")  # every frame must be valid UTF-8
    events = [e for e in text.split("\n\n") if e.strip()]
    if not ended:
        assert not generation, f"{where}: a generation stream did not end in {STREAM_READ_S} s"
        events = events[:-1]  # the last one may be cut
    if generation:
        assert events and events[-1] == "data: [DONE]", f"{where}: stream ends {text[-200:]!r}"
        events = events[:-1]
    for event in events:
        data = [line[6:] for line in event.split("\n") if line.startswith("data: ")]
        if not data:
            assert all(line.startswith((":", "event:", "id:", "retry:"))
                       for line in event.split("\n")), event
            continue
        chunk = json.loads("\n".join(data))
        if generation and isinstance(chunk, dict) and "error" in chunk:
            STATS["in_band_error"] += 1
            assert chunk["error"]["type"] != "server_error", f"{where}: {chunk}"
            assert_openai_error(json.dumps(chunk).encode(), where)


def send(http: httpx.Client, method: str, path: str, content: bytes | None,
         content_type: str | None, key: str | None,
         params: dict[str, str] | None = None) -> tuple[int, bytes]:
    """One request, checked by `check`; returns its status and body."""
    headers = R.auth(key)
    if content_type is not None:
        headers["Content-Type"] = content_type
    request = http.build_request(method, path, content=content, headers=headers, params=params)
    resp = http.send(request, stream=True)
    try:
        return resp.status_code, check(resp, method)
    finally:
        resp.close()


# ---- the fuzzers ---------------------------------------------------------------------------------


@FUZZ
@given(body=chat_bodies, style=st.sampled_from(["ascii", "utf8"]))
def test_chat_completions(http: httpx.Client, body: dict[str, Any], style: str) -> None:
    send(http, "POST", "/v1/chat/completions", encode(body, style), "application/json", R.API_KEY)


@FUZZ
@given(body=valid_chat_bodies, top_logprobs=st.integers(0, 20))
def test_valid_chat_completions(http: httpx.Client, body: dict[str, Any],
                                top_logprobs: int) -> None:
    if body.get("logprobs"):
        body["top_logprobs"] = top_logprobs
    status, answer = send(http, "POST", "/v1/chat/completions", encode(body, "utf8"),
                          "application/json", R.API_KEY)
    assert_valid_body_served(status, answer)


def assert_valid_body_served(status: int, answer: bytes) -> None:
    """A valid body is served (200); the one refusal a valid body can earn is a prompt plus
    max_tokens over the server's 96-token context (the nasty texts are long in tokens)."""
    if status == 200:
        return
    err = assert_openai_error(answer, f"valid body -> {status}")
    assert (status, err["code"]) == (400, "context_length_exceeded"), (status, err)


@FUZZ
@given(body=completion_bodies, style=st.sampled_from(["ascii", "utf8"]))
def test_completions(http: httpx.Client, body: dict[str, Any], style: str) -> None:
    send(http, "POST", "/v1/completions", encode(body, style), "application/json", R.API_KEY)


@FUZZ
@given(
    raw=raw_bodies(), path=st.sampled_from(["/v1/chat/completions", "/v1/completions",
                                            "/admin/api/drafters"]),
    content_type=st.sampled_from(CONTENT_TYPES),
)  # fmt: skip
def test_raw_bodies(http: httpx.Client, raw: bytes, path: str, content_type: str | None) -> None:
    key = R.ADMIN_KEY if path.startswith("/admin") else R.API_KEY
    send(http, "POST", path, raw, content_type, key)


ROUTES = app_routes(build_app(Path("/nonexistent"), api_keys=[R.API_KEY], admin_key=R.ADMIN_KEY))
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]
path_values = st.one_of(
    st.sampled_from(["alpha", "beta", MODEL, "..", "%2e%2e", "a/../../etc/passwd", "index.html",
                     "x" * 3000, "%00", "%ff%fe", "%ED%A0%80", "hot-0", ""]),
    st.text(min_size=1, max_size=30).map(lambda s: quote(s, safe="")),
)
drafter_bodies = st.fixed_dictionaries({}, optional={
    "name": either(texts), "source": either(st.sampled_from(["hf", "local"]), texts),
    "repo_id": either(st.sampled_from(["org/drafter", "a/b", "../../etc", "a" * 200, "org/d--x"]),
                      texts),
    "revision": either(st.sampled_from(["main", "../x", "a" * 40]), texts),
    "subfolder": either(st.sampled_from(["py", "/abs", "../up", "a/./b"]), texts),
    "path": either(st.sampled_from(["/nonexistent", "/etc", "relative/dir", "/proc/self"]), texts),
    "id": either(st.sampled_from(["fz-1", "..", "A", "x" * 65]), texts),
    "enabled": any_json, "domain": either(texts), "tags": either(st.lists(texts, max_size=3)),
})


@FUZZ
@given(
    route=st.sampled_from(ROUTES), method=st.sampled_from(METHODS), values=st.data(),
    key=st.sampled_from(["right", "right", "right", "none", "wrong", "other"]),
    params=st.dictionaries(st.sampled_from(["limit", "target", "before_id", "x", "stream"]),
                           st.one_of(st.text(max_size=12), st.integers(-5, 2000).map(str)),
                           max_size=3),
    body=st.one_of(st.none(), any_json, drafter_bodies),
)  # fmt: skip
def test_every_route(http: httpx.Client, route: RouteInfo, method: str, values: st.DataObject,
                     key: str, params: dict[str, str], body: Any) -> None:
    path = route.url(**{p: values.draw(path_values, label=p) for p in route.params})
    admin = route.path.startswith("/admin")
    right = R.ADMIN_KEY if admin else R.API_KEY
    chosen = {"right": right, "none": None, "wrong": "sk-wrong",
              "other": R.API_KEY if admin else R.ADMIN_KEY}[key]
    content = None if body is None or method in ("GET", "HEAD") else json.dumps(body).encode()
    send(http, method, path, content, "application/json" if content else None, chosen, params)


# ---- explicit edges ------------------------------------------------------------------------------


def test_oversize_bodies_are_413_whether_declared_or_streamed(http: httpx.Client) -> None:
    big = (b'{"model":"tiny-target","messages":[{"role":"user","content":"' + b"a" * (2 << 20)
           + b'"}]}')
    status, answer = send(http, "POST", "/v1/chat/completions", big, "application/json", R.API_KEY)
    assert status == 413 and assert_openai_error(answer)["code"] == "request_too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        for i in range(0, len(big), 1 << 16):
            yield big[i : i + (1 << 16)]

    resp = http.post("/v1/chat/completions", content=chunks(),
                     headers={**R.auth(R.API_KEY), "Content-Type": "application/json"})
    assert resp.status_code == 413
    assert assert_openai_error(resp.content)["code"] == "request_too_large"


MALFORMED_HTTP = [
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{}",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
    b"99999999999999999999\r\n\r\n{}",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",  # smuggling-shaped: both lengths
    b"GET /health HTTP/1.1\r\nHost: x\r\nX-Bad: a\x00b\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n",
    b"GARBAGE\r\n\r\n",
    b"GET /%ff%fe%00 HTTP/1.1\r\nHost: x\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
]


@pytest.mark.parametrize("raw", MALFORMED_HTTP, ids=range(len(MALFORMED_HTTP)))
def test_malformed_http_is_refused_and_harmless(server: ServerProcess, raw: bytes) -> None:
    """Broken HTTP never reaches the app: uvicorn's parser answers a plain 4xx (or closes the
    connection), and the server keeps serving."""
    import socket

    host, port = server.base_url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        try:
            sock.sendall(raw)
            sock.shutdown(socket.SHUT_WR)
            answer = sock.recv(4096)
        except (ConnectionResetError, BrokenPipeError):
            answer = b""
    if answer:
        status = int(answer.split(b" ", 2)[1])
        assert (400 <= status < 500
                or (status == 200 and raw.startswith(b"GET /health"))), answer[:200]
    assert httpx.get(f"{server.base_url}/health", timeout=10).status_code == 200


def test_the_server_survived_and_left_nothing_behind(server: ServerProcess,
                                                     http: httpx.Client) -> None:
    assert http.get("/health").status_code == 200
    ok = http.post("/v1/chat/completions", json=VALID_CHAT, headers=R.auth(R.API_KEY))
    assert ok.status_code == 200 and ok.json()["choices"][0]["finish_reason"] in ("length", "stop")
    R.wait_idle(server.base_url)
    assert FAILURES == []
    assert_clean_log(server.log())


# ---- what the fuzzer found (regressions) ---------------------------------------------------------

FOUND = [  # (body bytes, expected status)
    # Lone surrogates, escaped and as CESU-8 bytes, reached the tokenizer: 500.
    (b'{"model":"tiny-target","messages":[{"role":"user","content":"\\ud800"}],'
     b'"max_tokens":2}', 400),
    (b'{"model":"tiny-target","messages":[{"role":"user","content":"a\xed\xa0\x80b"}],'
     b'"max_tokens":2}', 400),
    (b'{"model":"tiny-target","messages":[{"role":"user","content":[{"type":"text",'
     b'"text":"\\udfff"}]}]}', 400),
    # Error messages that echo input with a lone surrogate could not be encoded: 500.
    (b'{"model":"a\\udfffb","messages":[{"role":"user","content":"hi"}]}', 404),
    (b'{"model":"tiny-target","messages":[{"role":"user","content":"hi"}],'
     b'"logit_bias":{"\\ud800":"x"}}', 400),
    # Sampling parameters that overflowed float32 made NaN probabilities and failed the engine
    # round, answering 500 to every request running in it.
    (b'{"model":"tiny-target","messages":[{"role":"user","content":"hi"}],"max_tokens":2,'
     b'"temperature":1e-300}', 200),
    (b'{"model":"tiny-target","messages":[{"role":"user","content":"hi"}],"max_tokens":2,'
     b'"top_p":1.9e-225}', 200),
]
FOUND_COMPLETIONS = [
    (b'{"model":"tiny-target","prompt":"\\ud800x","max_tokens":2}', 400),
    (b'{"model":"tiny-target","prompt":["ok","\\udbff"],"max_tokens":2}', 400),
    (b'{"model":"tiny-target","prompt":"0","top_p":1.9e-225,"max_tokens":2}', 200),
]


@pytest.mark.parametrize(("path", "raw", "expected"), [
    *(("/v1/chat/completions", raw, status) for raw, status in FOUND),
    *(("/v1/completions", raw, status) for raw, status in FOUND_COMPLETIONS),
])  # fmt: skip
def test_found_by_fuzzing(http: httpx.Client, path: str, raw: bytes, expected: int) -> None:
    resp = http.post(path, content=raw,
                     headers={**R.auth(R.API_KEY), "Content-Type": "application/json"})
    assert resp.status_code == expected, resp.text
    if expected >= 400:
        assert_openai_error(resp.content, f"{path} -> {resp.status_code}")
