"""Fixtures of the admin page tests: the tiny local pool, real `hedgespec serve` processes on
loopback ports, and headless Chromium (Debian's package) driven by Playwright.

Browser tests are marked `browser` and skip, with the reason, only when Chromium or the
Playwright package is missing; `.ci/run` installs both.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from bench.harness.server import ServerProcess
from bench.harness.tiny_pool import DRAFTER_IDS, MODEL_NAME, build_pool
from tests.gateway.conftest import ADMIN_KEY, API_KEY

CHROMIUM = Path(os.environ.get("HEDGESPEC_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REPO_ROOT = Path(__file__).resolve().parents[2]
# What the browser tests saw, for a person to look at after a run; outside the repository, so
# a test run leaves the tree as it found it (the README's pictures: bench/admin_screenshots.py).
SCREENSHOTS = Path(os.environ.get("HEDGESPEC_SCREENSHOTS",
                                  Path(tempfile.gettempdir()) / "hedgespec-admin-screenshots"))
XSS = "<img src=x onerror=window.__pwned=1>"
PROMPTS = [
    "Tell me about speculative decoding.",
    "Write a SQL query that counts users by name.",
    "What is 12 times 7?",
    "Describe the mitochondria.",
]

__all__ = ["ADMIN_KEY", "API_KEY", "DRAFTER_IDS", "MODEL_NAME", "XSS"]


@pytest.fixture(scope="session")
def pool_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_pool(tmp_path_factory.mktemp("pool"))


@pytest.fixture(scope="session")
def xss_pool_file(pool_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same models, with the second drafter registered under a hostile id."""
    spec = json.loads(pool_file.read_text())
    base = pool_file.parent
    spec["target"] = str(base / spec["target"])
    spec["drafters"] = [
        {**spec["drafters"][0], "path": str(base / spec["drafters"][0]["path"])},
        {**spec["drafters"][1], "id": XSS, "path": str(base / spec["drafters"][1]["path"])},
    ]
    path = tmp_path_factory.mktemp("xss-pool") / "pool.json"
    path.write_text(json.dumps(spec))
    return path


@contextmanager
def running_server(pool: Path, workdir: Path, *extra: str) -> Iterator[ServerProcess]:
    server = ServerProcess.start(
        pool, workdir, "--api-key", API_KEY, "--admin-key", ADMIN_KEY, *extra
    )
    try:
        yield server
    finally:
        server.stop()


def openai_client(server: ServerProcess) -> OpenAI:
    return OpenAI(base_url=f"{server.base_url}/v1", api_key=API_KEY, max_retries=0, timeout=120)


def stream_chat(client: OpenAI, prompt: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
    """One streaming chat completion: its id, text and final speculative metrics. The gateway's
    engine request id (what the admin page shows) is `<id>-<choice index>`."""
    stream = client.chat.completions.create(
        model=MODEL_NAME,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True, **extra},
    )
    text, metrics, completion_id = [], None, None
    for chunk in stream:
        completion_id = chunk.id
        if chunk.choices and chunk.choices[0].delta.content:
            text.append(chunk.choices[0].delta.content)
        extra_fields = chunk.model_extra or {}
        if extra_fields.get("metrics"):
            metrics = extra_fields["metrics"]
    return {"id": completion_id, "text": "".join(text), "metrics": metrics}


class Background:
    """Streaming requests on threads, so the test can watch the page while they run."""

    def __init__(self, client: OpenAI, prompts: list[str], max_tokens: int, **extra: Any):
        self.results: list[dict[str, Any]] = []
        self.errors: list[BaseException] = []
        self._threads = [
            threading.Thread(target=self._run, args=(client, p, max_tokens, extra), daemon=True)
            for p in prompts
        ]

    def _run(self, client: OpenAI, prompt: str, max_tokens: int, extra: dict[str, Any]) -> None:
        try:
            self.results.append(stream_chat(client, prompt, max_tokens, **extra))
        except BaseException as exc:  # reported by join(), not lost in a thread
            self.errors.append(exc)

    def __enter__(self) -> Background:
        for thread in self._threads:
            thread.start()
        return self

    def join(self, timeout_s: float = 120) -> list[dict[str, Any]]:
        for thread in self._threads:
            thread.join(timeout_s)
        if self.errors:
            raise self.errors[0]
        return self.results

    def __exit__(self, *exc: object) -> None:
        for thread in self._threads:
            thread.join(120)


# ---- the browser --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Module scope, not session: Playwright's sync API keeps an asyncio loop marked as running
    on this thread until it stops, which would break every later test that calls asyncio.run."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium; .ci/run does this)")
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install '.[dev]')"
    )
    with sync_api.sync_playwright() as pw:
        # `launch` gives every run a fresh throw-away profile; the flags keep Chromium off the
        # network (air-gapped CI) and out of the sandbox it cannot create as root.
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh context per test (empty sessionStorage), 1440x900; script errors collected in
    `page.js_errors`."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    def on_console(msg: Any) -> None:
        # HTTP error statuses are logged by Chromium as "Failed to load resource"; the tests
        # provoke them on purpose (401s, pool API errors), so only script errors count.
        if msg.type == "error" and not msg.text.startswith("Failed to load resource"):
            errors.append(msg.text)

    page.on("console", on_console)
    page.js_errors = errors
    try:
        yield page
    finally:
        context.close()


def sign_in(page: Any, base_url: str, key: str = ADMIN_KEY) -> None:
    page.goto(f"{base_url}/admin")
    page.fill("#admin-key", key)
    page.click("#signin-form button[type=submit]")
    page.wait_for_selector("#app:not([hidden])")
    page.wait_for_selector("#conn.conn-live")


def screenshot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / name
    page.screenshot(path=str(path), full_page=False)
    return path
