"""`/v1/responses` (vLLM's `OpenAIServingResponses`): the third serving class over the chat
path. A request's input items (after the stored conversation it continues, if any) become chat
messages rendered by the chat template, with the same tool formats, tool grammar, structured
output grammar, stop strings and tool parsing as chat; only the shapes differ: the `Response`
object with `output` items (a `message` with `output_text`, `function_call`s), and the typed
stream events (`response.created`, `response.in_progress`, `response.output_item.added`,
`response.content_part.added`, `response.output_text.delta` / `.done`,
`response.function_call_arguments.delta` / `.done`, `response.content_part.done`,
`response.output_item.done`, then `response.completed`, `response.incomplete` (cut by
`max_output_tokens`) or `error` + `response.failed`), each with its `sequence_number` and an
SSE `event:` line, as OpenAI sends them; no `[DONE]`.

Output items are built by one state machine (`OutputItems`) for both the body and the stream,
so a streamed response accumulates to exactly the body (the SDK's `responses.stream` checks the
item identities). Text and calls are emitted as the tool parser releases them: text that could
still be a call is held, a call is one `function_call` item with its arguments in one delta.

State: with `store` (the default) the response, its input items and the conversation through
its output are kept in the registry database (`gateway/openai/response_store.py`), readable
only with the API key that created it; `previous_response_id` continues that conversation
(instructions are not carried over, as OpenAI's) under the same learner session, so the
drafter choice carries over as it does for `hedgespec.session` (a conversation's session is its
first response's id unless the client names one). A stream stores its response just before the
terminal event, so a client can continue from it at once.

Cancel (`POST /v1/responses/{id}/cancel`): a stored response still in flight is in
`_in_flight` (event loop only; an entry lives from its admission by the engine to its end, so
the runner's admission limit bounds it) until its body or stream ends. Cancelling it by its
key aborts its engine requests as a client disconnect does (the slot is free at the next
round); the job then ends with status `cancelled` and the output produced so far, is stored
so, and a stream ends with `response.incomplete` carrying that response (the SDK defines no
`response.cancelled` event); the cancel call answers the same object. An ended response
cannot be cancelled (400); an absent one, another key's or a `store: false` one is a 404.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from gateway.errors import APIError, invalid_request
from gateway.metrics import GatewayMetrics
from gateway.openai.framing import sse_frame
from gateway.openai.jobs import Choice, Delta, Job
from gateway.openai.protocol_responses import (
    ResponsesRequest,
    chat_messages,
    new_id,
    validated_messages,
)
from gateway.openai.response_store import (
    MAX_ID_CHARS,
    ResponseStore,
    possible_id,
    response_not_found,
)
from gateway.openai.sampling import sampling
from gateway.openai.serving import JobStream, OpenAIServing
from gateway.openai.serving_models import OpenAIServingModels
from gateway.openai.text import render_chat
from gateway.openai.tools import formats
from gateway.openai.tools.parse import ToolCall
from gateway.runner import EngineInfo

log = logging.getLogger(__name__)
Event = tuple[str, dict[str, Any]]
# How long a cancel waits for the cancelled job to store its body (a stream whose client reads
# nothing may never get there); past it, the answer is built from the output so far.
CANCEL_WAIT_S = 10.0


@dataclass
class InFlight:
    """A stored response still running: what a cancel needs to stop it and answer its body."""

    job: Job
    owner: str
    ended: asyncio.Future[dict[str, Any] | None]
    out: OutputItems | None = None  # the output so far, once the body or stream builds it
    cancelled: bool = False


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


class OpenAIServingResponses(OpenAIServing[ResponsesRequest]):
    endpoint = "responses"
    id_prefix = "resp"
    prompt_param = "input"
    object_name = "response"
    chunk_object_name = "response"

    def __init__(self, models: OpenAIServingModels, metrics: GatewayMetrics | None,
                 store: ResponseStore) -> None:
        super().__init__(models, metrics)
        self.store = store
        # Stored responses still running, by id (event loop only; see the module docstring).
        self._in_flight: dict[str, InFlight] = {}

    async def create(self, req: ResponsesRequest, *, arrival: float,
                     scope: str = "") -> dict[str, Any] | Any:
        """Load the conversation `previous_response_id` continues (404 when absent or another
        key's), check the store can keep the response, then run as chat does."""
        req._response_id = new_id("resp")
        history: list[dict[str, Any]] = []
        previous_session = None
        if req.previous_response_id is not None:
            previous = await self.store.load(req.previous_response_id, scope)
            if previous is None:
                raise response_not_found(req.previous_response_id, param="previous_response_id")
            history, previous_session = previous.history, previous.session
        if req.store:
            self.store.check_available()
        req._conversation_session = previous_session or (req._response_id if req.store else None)
        req._owner, req._history = scope, history
        result = await super().create(req, arrival=arrival, scope=scope)
        if isinstance(result, JobStream):  # frames never read: forget it when it is released
            release, response_id = result.release, req._response_id

            def release_and_forget() -> None:
                release()
                self._forget(response_id)

            return JobStream(result.frames, release_and_forget)
        return result

    async def cancel(self, response_id: str, scope: str) -> dict[str, Any]:
        """Cancel the key's stored response while it runs: abort its engine requests and
        answer the body it ends with (status `cancelled`, the output so far). 404 as for
        retrieve; 400 when it has already ended (unless it ended cancelled: the same body)."""
        if not possible_id(response_id):
            raise response_not_found(response_id[:MAX_ID_CHARS])  # never one of ours
        entry = self._in_flight.get(response_id)
        if entry is not None and entry.owner == scope:
            job = entry.job
            if not entry.ended.done() and not all(c.done for c in job.choices):
                entry.cancelled = True
                self.release(job)  # as a client disconnect: freed at the engine's next round
            body: dict[str, Any] | None
            try:
                body = await asyncio.wait_for(asyncio.shield(entry.ended), CANCEL_WAIT_S)
            except TimeoutError:
                body = None
                if entry.cancelled:
                    output = entry.out.items if entry.out is not None else []
                    body = self._response(job, "cancelled", output)
            if body is not None:
                if body["status"] != "cancelled":
                    raise cannot_cancel(body["status"])
                return body
        record = await self.store.load(response_id, scope)
        if record is None:
            raise response_not_found(response_id)
        if record.status != "cancelled":
            raise cannot_cancel(record.status)
        return record.body

    async def _submit(self, job: Job) -> None:
        """Admit the job; a stored response is then cancellable until it ends."""
        await super()._submit(job)
        req = job.request
        assert isinstance(req, ResponsesRequest)
        if req.store:
            ended: asyncio.Future[dict[str, Any] | None] = (
                asyncio.get_running_loop().create_future())
            self._in_flight[job.id] = InFlight(job, req._owner, ended)

    def _track(self, job: Job, out: OutputItems) -> None:
        entry = self._in_flight.get(job.id)
        if entry is not None:
            entry.out = out

    def _cancelled(self, job: Job) -> bool:
        entry = self._in_flight.get(job.id)
        return entry is not None and entry.cancelled

    def _settle(self, job_id: str, body: dict[str, Any] | None) -> None:
        """The job's final body is stored (None: it ended without one): a cancel may answer."""
        entry = self._in_flight.get(job_id)
        if entry is not None and not entry.ended.done():
            entry.ended.set_result(body)

    def _forget(self, job_id: str) -> None:
        self._settle(job_id, None)
        self._in_flight.pop(job_id, None)

    def _final_status(self, job: Job) -> str:
        return "cancelled" if self._cancelled(job) else _status(job.choices[0])

    def _observe(self, job: Job, ok: bool) -> None:
        """A cancelled job counts as aborted, as a disconnect does."""
        super()._observe(job, ok and not self._cancelled(job))

    def _new_id(self, req: ResponsesRequest) -> str:
        return req._response_id or new_id("resp")

    def _prompt_chars(self, req: ResponsesRequest) -> int:
        return len(req.instructions or "") + sum(
            len(str(item.get("content") or item.get("output") or item.get("arguments") or ""))
            for item in req.items)

    def _add_choices(self, job: Job, req: ResponsesRequest, info: EngineInfo) -> None:
        conversation = req._history + chat_messages(req.items)
        req._conversation = conversation
        instructions = ([{"role": "system", "content": req.instructions}]
                        if req.instructions else [])
        messages = validated_messages(instructions + conversation)
        tools, fmt = req.tool_request, self.models.tool_format()
        rendered, listed = formats.render(fmt, [m.template_dict() for m in messages], tools)
        prompt_ids = render_chat(self._tokenizer(), rendered, listed)
        max_new = self._max_new_tokens(req, len(prompt_ids), info)
        grammar = self._tool_grammar(fmt, tools, req.grammar) if tools else req.grammar
        choice = self._add_choice(job, prompt_ids, max_new, index=0,
                                  prompt_text=self._logged_prompt(prompt_ids), grammar=grammar)
        if tools:
            self._parse_tools(choice, fmt, tools)
        job.prompt_tokens = len(prompt_ids)

    # ---- the body ------------------------------------------------------------------------------

    async def _complete(self, job: Job) -> dict[str, Any]:
        out = OutputItems()
        self._track(job, out)
        body: dict[str, Any] | None = None
        try:
            try:
                await self._collect(job)
            except APIError as err:
                body = self._failed(job, out, err)
                await self._store(job, body)
                raise
            c = job.choices[0]
            self._events(out, Delta(c, "".join(c.text), [], [], True))
            status = self._final_status(job)
            out.finish("completed" if status == "completed" else "incomplete")
            body = self._response(job, status, out.items)
            await self._store(job, body)
            return body
        finally:
            self._settle(job.id, body)
            self._forget(job.id)

    def _response(self, job: Job, status: str, output: list[dict[str, Any]],
                  error: dict[str, Any] | None = None) -> dict[str, Any]:
        """The `Response` object (`usage` and `metrics` once generation has ended)."""
        req = job.request
        assert isinstance(req, ResponsesRequest)
        temperature, top_p, _ = sampling(req, job.sampling_defaults)
        ended = status not in ("in_progress", "queued")
        body: dict[str, Any] = {
            "id": job.id,
            "object": "response",
            "created_at": job.created,
            "status": status,
            "background": False,
            "completed_at": int(time.time()) if status == "completed" else None,
            "error": error,
            "incomplete_details": ({"reason": "max_output_tokens"} if status == "incomplete"
                                   else None),
            "instructions": req.instructions,
            "max_output_tokens": req.max_output_tokens,
            "max_tool_calls": None,
            "metadata": req.metadata or {},
            "model": job.model,
            "output": copy.deepcopy(output),
            "parallel_tool_calls": req.parallel_tool_calls is not False,
            "previous_response_id": req.previous_response_id,
            "reasoning": None,
            "service_tier": "default",
            "store": bool(req.store),
            "temperature": temperature,
            "text": {"format": req.text_format},
            "tool_choice": req.tool_choice if req.tool_choice is not None else "auto",
            "tools": req.tools or [],
            "top_p": top_p,
            "truncation": "disabled",
            "usage": self._usage(job) if ended else None,
            "user": req.user,
        }
        if ended:
            body["metrics"] = self._metrics(job)
        return body

    def _usage(self, job: Job) -> dict[str, Any]:
        return {
            "input_tokens": job.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": job.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": job.prompt_tokens + job.completion_tokens,
        }

    def _failed(self, job: Job, out: OutputItems, err: APIError) -> dict[str, Any]:
        out.close_text("incomplete")
        error = {"code": err.code or err.type, "message": err.message}
        return self._response(job, "failed", out.items, error)

    def _events(self, out: OutputItems, delta: Delta) -> list[Event]:
        """One round of the choice as output events (through the tool parser with tools)."""
        c = delta.choice
        if c.tools is None:
            return out.text(delta.text)
        parsed = c.tools.feed(delta.text) + (c.tools.finish() if delta.finished else [])
        events: list[Event] = []
        for piece in parsed:
            events += out.text(piece) if isinstance(piece, str) else out.call(piece)
        return events

    async def _store(self, job: Job, body: dict[str, Any]) -> None:
        """Keep the response (with `store`); a failed write is logged, never the client's."""
        req = job.request
        assert isinstance(req, ResponsesRequest)
        if not req.store:
            return
        history = req._conversation + _output_messages(body["output"])
        try:
            await self.store.save(
                response_id=job.id, owner=req._owner, status=body["status"],
                model=job.model, body=body, input_items=req.items, history=history,
                previous_response_id=req.previous_response_id, learner_session=req.session,
            )  # fmt: skip
        except Exception:
            log.exception("could not store response %s", job.id)

    # ---- the stream ----------------------------------------------------------------------------

    async def _stream(self, job: Job) -> AsyncIterator[bytes]:
        counter = itertools.count()
        out = OutputItems()
        ok = False

        def frame(kind: str, payload: dict[str, Any]) -> bytes:
            return typed_frame(kind, {"type": kind, "sequence_number": next(counter), **payload})

        self._track(job, out)
        try:
            start = self._response(job, "in_progress", [])
            yield frame("response.created", {"response": start})
            yield frame("response.in_progress", {"response": start})
            async with contextlib.aclosing(self._deltas(job)) as deltas:
                async for delta in deltas:
                    for kind, payload in self._events(out, delta):
                        yield frame(kind, payload)
            status = self._final_status(job)
            for kind, payload in out.finish("completed" if status == "completed"
                                            else "incomplete"):
                yield frame(kind, payload)
            final = self._response(job, status, out.items)
            ok = True
            await self._store(job, final)
            self._settle(job.id, final)
            # cancelled: `response.incomplete` (the SDK has no `response.cancelled` event)
            terminal = "response.completed" if status == "completed" else "response.incomplete"
            yield frame(terminal, {"response": final})
        except APIError as err:
            async for chunk in self._fail(job, out, err, frame):
                yield chunk
        except Exception:
            log.exception("stream %s failed", job.id)
            internal = APIError("Internal server error.", status=500, type="server_error")
            async for chunk in self._fail(job, out, internal, frame):
                yield chunk
        finally:
            self._observe(job, ok)
            self._forget(job.id)

    async def _fail(self, job: Job, out: OutputItems, err: APIError,
                    frame: Callable[[str, dict[str, Any]], bytes]) -> AsyncIterator[bytes]:
        failed = self._failed(job, out, err)
        await self._store(job, failed)
        self._settle(job.id, failed)
        yield frame("error", {"code": err.code or err.type, "message": err.message,
                              "param": err.param})
        yield frame("response.failed", {"response": failed})

    # ---- unused chat/completions chunk hooks -------------------------------------------------

    def _final_choice(self, job: Job, c: Choice) -> dict[str, Any]:
        raise NotImplementedError  # the Response body is built by `_response`

    def _opening_chunks(self, job: Job) -> list[dict[str, Any]]:
        raise NotImplementedError  # the stream is `_stream`'s typed events

    def _content_chunk(self, job: Job, delta: Delta) -> dict[str, Any]:
        raise NotImplementedError

    def _finish_chunk(self, job: Job, c: Choice) -> dict[str, Any]:
        raise NotImplementedError


def cannot_cancel(status: str) -> APIError:
    """OpenAI's answer for cancelling a response that has already ended."""
    return invalid_request(f"Cannot cancel a {status} response.")


def _status(c: Choice) -> str:
    return "incomplete" if c.finish_reason == "length" else "completed"


def _output_messages(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A response's output items as the chat messages a continuation renders."""
    items = []
    for item in output:
        if item["type"] == "message":
            text = "".join(p.get("text", "") for p in item["content"])
            items.append({"id": item["id"], "type": "message", "role": "assistant",
                          "content": [{"type": "output_text", "text": text}]})
        else:
            items.append(item)
    return chat_messages(items)
