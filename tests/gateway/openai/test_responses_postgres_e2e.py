"""Stored responses on PostgreSQL: a conversation continues with `previous_response_id` (the
whole conversation rendered, the learner session carried over), and an id this server could
never have minted (a NUL byte, which PostgreSQL refuses in text, or longer than the column)
is a 404 on every route, as on SQLite, never a 500 from the database."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import openai
import pytest

from bench.harness.postgres import POSTGRES_ENV, fresh_postgres_database, url_string
from bench.harness.server import ServerProcess
from tests.gateway.conftest import API_KEY

# Read at import: the suite's isolation fixtures clear HEDGESPEC_* variables around each test.
ADMIN_URL = os.environ.get(POSTGRES_ENV)
pytestmark = [pytest.mark.postgres, pytest.mark.timeout(240),
              pytest.mark.skipif(ADMIN_URL is None,
                                 reason=f"{POSTGRES_ENV} is not set (.ci/postgres.sh sets it)")]


def test_conversations_continue_and_impossible_ids_are_404s(pool_file: Path,
                                                            tmp_path: Path) -> None:
    assert ADMIN_URL is not None
    with fresh_postgres_database(ADMIN_URL) as url:
        proc = ServerProcess.start(pool_file, tmp_path / "pg", "--api-key", API_KEY,
                                   "--database-url", url_string(url))
        try:
            continue_a_conversation(openai.OpenAI(base_url=f"{proc.base_url}/v1",
                                                  api_key=API_KEY, max_retries=0))
            with httpx.Client(base_url=f"{proc.base_url}/v1", timeout=30,
                              headers={"Authorization": f"Bearer {API_KEY}"}) as http:
                for rid in ("resp_%00x", "resp_" + "a" * 80):
                    for method, path in (("GET", ""), ("DELETE", ""), ("GET", "/input_items"),
                                         ("POST", "/cancel")):
                        r = http.request(method, f"/responses/{rid}{path}")
                        assert r.status_code == 404, (method, path, r.text)
                        assert r.json()["error"]["code"] == "not_found", r.text
        finally:
            proc.stop()


def continue_a_conversation(client: openai.OpenAI) -> None:
    first = client.responses.create(model="tiny-target", input="Hello there.",
                                    max_output_tokens=6, temperature=0)
    second = client.responses.create(model="tiny-target", input="And then?",
                                     max_output_tokens=6, temperature=0,
                                     previous_response_id=first.id)
    assert first.usage is not None and second.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    spec = second.model_dump()["metrics"]["speculative_decoding"]
    assert spec["warm_start_requests"] >= 1
    assert client.responses.retrieve(first.id).model_dump() == first.model_dump()
    (item,) = client.responses.input_items.list(second.id).data
    assert item.type == "message" and item.content[0].text == "And then?"  # type: ignore[union-attr]
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
