"""The README's promises hold: its openai-SDK snippet works unchanged against `hedgespec serve`
on the shipped demo pool, and `make serve` serves that pool."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.harness.server import ServerProcess
from demo.domains import DEMO_POOL
from gateway.config import Settings

ROOT = Path(__file__).resolve().parents[1]


def readme_snippet() -> str:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has no python example"
    return blocks[0]


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    assert DEMO_POOL.is_file(), "the shipped demo pool is missing (demo/pool/pool.json)"
    server = ServerProcess.start(DEMO_POOL, tmp_path_factory.mktemp("readme"),
                                 "--torch-threads", "1")
    yield server
    server.stop()


def test_make_serve_serves_the_shipped_demo_pool() -> None:
    """The server has no default model; the quick start's `make serve` names the demo pool."""
    assert Settings(_env_file=None).pool is None  # type: ignore[call-arg]
    makefile = (ROOT / "Makefile").read_text()
    (demo_pool,) = re.findall(r"^DEMO_POOL := (\S+)$", makefile, flags=re.M)
    assert ROOT / demo_pool == DEMO_POOL
    assert "\thedgespec serve --pool $(DEMO_POOL)\n" in makefile.replace("$(BIN)/", "")
    assert ("make serve" in (ROOT / "README.md").read_text()
            and "make test" in (ROOT / "README.md").read_text())


def test_readme_sdk_example_runs_unchanged(demo_server: ServerProcess) -> None:
    code = readme_snippet()
    assert "http://127.0.0.1:8000/v1" in code
    code = code.replace("http://127.0.0.1:8000/v1", f"{demo_server.base_url}/v1")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})  # the README's own example, run as written
    printed = out.getvalue()
    assert "speculative_decoding" in printed and "mean_acceptance_length" in printed
    assert "drafter_choices" in printed and "regret_tokens" in printed
