"""A Response's `output` items and its typed stream events (`serving_responses.py` serves
them): one state machine (`OutputItems`) builds the items for both the body and the stream, so a
streamed response accumulates to exactly the body (the SDK's `responses.stream` checks the item
identities). Text opens a `message` item with one `output_text` part; a tool call closes it and
is one `function_call` item with its arguments in one delta.
"""

from __future__ import annotations

import copy
from typing import Any

from gateway.openai.framing import sse_frame
from gateway.openai.protocol_responses import new_id
from gateway.openai.tools.parse import ToolCall

Event = tuple[str, dict[str, Any]]  # (event type, payload without `type` and `sequence_number`)


class OutputItems:
    """The response's `output` as it grows, and the stream events each step emits."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self._open: int | None = None  # index of the message item taking text

    def text(self, delta: str) -> list[Event]:
        if not delta:
            return []
        events = self._open_message() if self._open is None else []
        assert self._open is not None
        item = self.items[self._open]
        item["content"][0]["text"] += delta
        events.append(("response.output_text.delta",
                       {**self._where(self._open), "content_index": 0, "delta": delta,
                        "logprobs": []}))  # fmt: skip
        return events

    def call(self, call: ToolCall) -> list[Event]:
        events = self.close_text("completed")
        item = {"id": new_id("fc"), "type": "function_call", "status": "in_progress",
                "call_id": call.id, "name": call.name, "arguments": ""}  # fmt: skip
        self.items.append(item)
        index = len(self.items) - 1
        where = self._where(index)
        events.append(("response.output_item.added",
                       {"output_index": index, "item": copy.deepcopy(item)}))
        events.append(("response.function_call_arguments.delta", {**where,
                                                                   "delta": call.arguments}))
        item.update(arguments=call.arguments, status="completed")
        events.append(("response.function_call_arguments.done",
                       {**where, "name": call.name, "arguments": call.arguments}))
        events.append(("response.output_item.done",
                       {"output_index": index, "item": copy.deepcopy(item)}))
        return events

    def close_text(self, status: str) -> list[Event]:
        if self._open is None:
            return []
        index, self._open = self._open, None
        item = self.items[index]
        item["status"] = status
        part = item["content"][0]
        where = {**self._where(index), "content_index": 0}
        return [
            ("response.output_text.done", {**where, "text": part["text"], "logprobs": []}),
            ("response.content_part.done", {**where, "part": copy.deepcopy(part)}),
            ("response.output_item.done", {"output_index": index, "item": copy.deepcopy(item)}),
        ]

    def finish(self, status: str) -> list[Event]:
        """Close the open message; an answer with no output at all is one empty message."""
        events = [] if self.items else self._open_message()
        return events + self.close_text(status)

    def _open_message(self) -> list[Event]:
        item: dict[str, Any] = {"id": new_id("msg"), "type": "message", "role": "assistant",
                                "status": "in_progress", "content": []}
        self.items.append(item)
        self._open = index = len(self.items) - 1
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        events: list[Event] = [("response.output_item.added",
                                {"output_index": index, "item": copy.deepcopy(item)})]
        item["content"].append(part)
        events.append(("response.content_part.added",
                       {**self._where(index), "content_index": 0, "part": copy.deepcopy(part)}))
        return events

    def _where(self, index: int) -> dict[str, Any]:
        return {"item_id": self.items[index]["id"], "output_index": index}


def typed_frame(kind: str, payload: dict[str, Any]) -> bytes:
    """One Responses SSE event: `event: <type>` then its `data:` line."""
    return f"event: {kind}\n".encode() + sse_frame(payload)
