"""Raw SSE reading for tests that must see exact frames (the SDK hides framing)."""

from __future__ import annotations

import json
from typing import Any

import httpx


def read_frames(response: httpx.Response) -> list[str]:
    """Every event's bytes, split on the blank line, each checked to be exactly `data: ...`."""
    raw = response.read().decode("utf-8")
    assert raw.endswith("\n\n"), raw[-50:]
    frames = raw[:-2].split("\n\n")
    for frame in frames:
        assert frame.startswith("data: ") and "\n" not in frame, repr(frame)
    return [frame.removeprefix("data: ") for frame in frames]


def json_frames(frames: list[str]) -> list[dict[str, Any]]:
    assert frames[-1] == "[DONE]"
    return [json.loads(f) for f in frames[:-1]]
