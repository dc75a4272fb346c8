"""Hot add and remove while the gateway streams: several cycles of add-from-the-Hub, use, remove
under continuous streaming load, with zero failed requests; a request in flight keeps the pool
it started with even when its drafter is removed under it. The same for model-free (`ngram`)
drafters added and removed through the admin API."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.harness.fakehub import FakeHub
from bench.harness.server import ServerProcess
from tests.gateway_registry.conftest import (
    API_KEY,
    HUB_REPO,
    MODEL_NAME,
    Admin,
    chat,
    start_server,
)

pytestmark = pytest.mark.timeout(600)
PROMPTS = ["Tell me about speculative decoding.", "SELECT name FROM users;",
           "What is 12 times 7?", "Describe the mitochondria."]


@pytest.fixture(scope="module")
def server(pool_file: Path, hub: FakeHub,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The tiny pool plus a model-free drafter in the pool file (the load's learners see it)."""
    workdir = tmp_path_factory.mktemp("hot-swap")
    spec = json.loads(pool_file.read_text())
    spec["drafters"].append({"id": "served-lookup", "name": "Served lookup", "kind": "ngram",
                             "params": {"max_n": 3}})
    pool = pool_file.parent / "pool-with-lookup.json"  # beside it: the same relative paths
    pool.write_text(json.dumps(spec))
    proc = start_server(pool, workdir, database_url=f"sqlite:///{workdir / 'registry.db'}",
                        hub=hub)
    yield proc
    proc.stop()


def stream(server: ServerProcess, prompt: str, policy: str, max_tokens: int,
           on_first_token: threading.Event | None = None) -> dict[str, Any]:
    """One streaming chat completion, read frame by frame; raises on any sign of failure."""
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}, "hedgespec": {"policy": policy}}
    finish, metrics, text = None, None, []
    with httpx.stream("POST", f"{server.base_url}/v1/chat/completions", json=body, timeout=120,
                      headers={"Authorization": f"Bearer {API_KEY}"}) as resp:
        if resp.status_code != 200:
            raise AssertionError(f"HTTP {resp.status_code}: {resp.read().decode()}")
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line.removeprefix("data: "))
            if "error" in chunk:
                raise AssertionError(f"error in stream: {chunk['error']}")
            for choice in chunk.get("choices", []):
                text.append(choice["delta"].get("content") or "")
                finish = choice.get("finish_reason") or finish
                if on_first_token is not None and text:
                    on_first_token.set()
            metrics = chunk.get("metrics") or metrics
    if finish != "length" or metrics is None:
        raise AssertionError(f"stream ended without finish_reason/metrics: {finish}, {metrics}")
    return {"text": "".join(text), "spec": metrics["speculative_decoding"],
            "ended_at": time.monotonic()}


def long_request(server: ServerProcess, drafter_id: str, first_token: threading.Event,
                 result: dict[str, Any], max_tokens: int = 150) -> None:
    try:
        result["ok"] = stream(server, PROMPTS[0], f"fixed:{drafter_id}", max_tokens, first_token)
    except BaseException as exc:  # reported by the test, never lost in a thread
        result["error"] = f"{type(exc).__name__}: {exc}"


class Load:
    """Streaming requests on threads, back to back, until stopped."""

    def __init__(self, server: ServerProcess, workers: int = 3) -> None:
        self.done: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(server, PROMPTS[i % 4]),
                                          daemon=True) for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def _run(self, server: ServerProcess, prompt: str) -> None:
        while not self._stop.is_set():
            try:
                self.done.append(stream(server, prompt, "auto", 24))
            except BaseException as exc:  # reported by stop(), never lost in a thread
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(120)


def test_add_use_and_remove_under_streaming_load(server: ServerProcess, admin_of: Admin) -> None:
    admin = admin_of
    load = Load(server)
    try:
        for cycle, folder in enumerate(("gamma", "delta", "epsilon")):
            drafter_id = f"hot-{cycle}"
            admin.add(id=drafter_id, name=f"Hot {cycle}", source="hf", repo_id=HUB_REPO,
                      revision="main", subfolder=folder)
            row = admin.wait_status(drafter_id, "ready", "failed")
            assert row["status"] == "ready", row["error"]
            # A learner started now, while the load runs, has the new drafter in its pool.
            probe = chat(server, "normalhedge")
            assert probe.status_code == 200, probe.text
            weights = probe.json()["metrics"]["speculative_decoding"]["final_weights"]
            assert {"alpha", "beta", drafter_id} <= set(weights), weights

            # A long request on the new drafter is in flight when the drafter is removed.
            first_token = threading.Event()
            result: dict[str, Any] = {}
            thread = threading.Thread(target=long_request, daemon=True,
                                      args=(server, drafter_id, first_token, result))
            thread.start()
            assert first_token.wait(60), result
            assert admin.http.delete(f"/drafters/{drafter_id}").status_code == 200
            admin.wait_serving(drafter_id, present=False)
            removed_at = time.monotonic()
            refused = chat(server, f"fixed:{drafter_id}")
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"]["param"] == "hedgespec.policy"
            thread.join(120)
            assert "error" not in result, result["error"]
            spec = result["ok"]["spec"]
            assert result["ok"]["ended_at"] > removed_at, "the request ended before the removal"
            assert set(spec["drafter_choices"]) == {drafter_id}
            assert spec["num_spec_steps"] == len(spec["drafter_choices"])
    finally:
        load.stop()
    assert not load.errors, load.errors[:3]
    assert len(load.done) >= 3
    # The background requests were served by learners over the base pool throughout (whether
    # one of them also started inside a hot drafter's window depends on the machine's speed;
    # the probe above checks that case deterministically).
    seen = {d for r in load.done for d in r["spec"]["final_weights"]}
    assert {"alpha", "beta"} <= seen


@pytest.fixture(scope="module")
def admin_of(server: ServerProcess) -> Admin:
    return Admin(server)


def test_model_free_drafters_come_and_go_under_streaming_load(server: ServerProcess,
                                                              admin_of: Admin) -> None:
    """One cycle (the EAGLE test above runs three): add an ngram drafter, use it, remove it
    while a request on it streams."""
    admin = admin_of
    # The pool file's model-free entry is a registry row like the served EAGLE drafters.
    served = admin.drafters()["served-lookup"]
    assert (served["kind"], served["source"], served["status"], served["name"]) == (
        "ngram", "none", "ready", "Served lookup")
    assert served["params"]["max_n"] == 3 and "served-lookup" in admin.serving()
    load = Load(server)
    try:
        resp = admin.http.post("/drafters", json={"id": "lookup", "kind": "ngram",
                                                  "params": {"max_n": 4}})
        assert resp.status_code == 201, resp.text
        assert resp.json()["serving"] is True  # served here when the answer leaves
        probe = chat(server, "normalhedge")
        assert probe.status_code == 200, probe.text
        weights = probe.json()["metrics"]["speculative_decoding"]["final_weights"]
        assert {"alpha", "beta", "served-lookup", "lookup"} <= set(weights), weights

        first_token = threading.Event()
        result: dict[str, Any] = {}
        thread = threading.Thread(target=long_request, daemon=True,
                                  args=(server, "lookup", first_token, result, 400))
        thread.start()
        assert first_token.wait(60), result
        assert admin.http.delete("/drafters/lookup").status_code == 200
        admin.wait_serving("lookup", present=False)
        removed_at = time.monotonic()
        refused = chat(server, "fixed:lookup")
        assert refused.status_code == 400, refused.text
        thread.join(120)
        assert "error" not in result, result["error"]
        assert result["ok"]["ended_at"] > removed_at, "the request ended before the removal"
        assert set(result["ok"]["spec"]["drafter_choices"]) == {"lookup"}
    finally:
        load.stop()
    assert not load.errors, load.errors[:3]
    assert load.done
