"""`/v1/responses` (vLLM's `OpenAIServingResponses`): the Responses API on the serving base,
beside the chat and completions chunk layer. A request's input items (after the stored
conversation it continues, if any) become chat messages rendered by the chat template, with the
same tool formats, tool grammar, structured output grammar, stop strings and tool parsing as
chat; only the shapes differ: the `Response` object with `output` items (a `message` with
`output_text`, `function_call`s), and the typed stream events (`response.created`,
`response.in_progress`, `response.output_item.added`, `response.content_part.added`,
`response.output_text.delta` / `.done`, `response.function_call_arguments.delta` / `.done`,
`response.content_part.done`, `response.output_item.done`, then `response.completed`,
`response.incomplete` (cut by `max_output_tokens`) or `error` + `response.failed`), each with its
`sequence_number` and an SSE `event:` line, as OpenAI sends them; no `[DONE]`.

Output items are built by one state machine (`response_output.OutputItems`) for both the body
and the stream, so a streamed response accumulates to exactly the body. Text and calls are
emitted as the tool parser releases them: text that could still be a call is held, a call is
one `function_call` item with its arguments in one delta.

Per-job state is a `ResponseContext`, made by `_open` for each request and passed through
build, run, store and cancel: the response's id, its owner, its learner session, the
conversation it continues and the output so far.

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
from dataclasses import dataclass, field
from typing import Any

from gateway.errors import APIError, invalid_request
from gateway.metrics import GatewayMetrics
from gateway.openai.jobs import Choice, Delta, Job
from gateway.openai.protocol_responses import (
    ResponsesRequest,
    chat_messages,
    new_id,
    validated_messages,
)
from gateway.openai.response_output import Event, OutputItems, typed_frame
from gateway.openai.response_store import (
    MAX_ID_CHARS,
    ResponseStore,
    possible_id,
    response_not_found,
)
from gateway.openai.sampling import sampling
from gateway.openai.serving import OpenAIServing
from gateway.openai.serving_models import OpenAIServingModels
from gateway.openai.text import render_chat
from gateway.openai.tools import formats
from gateway.runner import EngineInfo

log = logging.getLogger(__name__)
# How long a cancel waits for the cancelled job to store its body (a stream whose client reads
# nothing may never get there); past it, the answer is built from the output so far.
CANCEL_WAIT_S = 10.0


@dataclass
class ResponseContext:
    """One response's state beyond its job: made by `_open`, passed through the job's life."""

    response_id: str
    owner: str  # the API key scope that creates it (and alone may read or cancel it)
    session: str | None  # the learner session: the client's, else the conversation's
    # The stored conversation it continues with this request's input, as chat messages (what
    # its stored response continues from).
    conversation: list[dict[str, Any]]
    out: OutputItems = field(default_factory=OutputItems)  # the output so far
    cancelled: bool = False


@dataclass
class InFlight:
    """A stored response still running: what a cancel needs to stop it and answer its body."""

    job: Job
    ctx: ResponseContext
    ended: asyncio.Future[dict[str, Any] | None]


class OpenAIServingResponses(OpenAIServing[ResponsesRequest, ResponseContext]):
    endpoint = "responses"
    prompt_param = "input"

    def __init__(self, models: OpenAIServingModels, metrics: GatewayMetrics | None,
                 store: ResponseStore) -> None:
        super().__init__(models, metrics)
        self.store = store
        # Stored responses still running, by id (event loop only; see the module docstring).
        self._in_flight: dict[str, InFlight] = {}

    async def _open(self, req: ResponsesRequest, scope: str) -> ResponseContext:
        """Load the conversation `previous_response_id` continues (404 when absent or another
        key's) and check the store can keep the response."""
        response_id = new_id("resp")
        history: list[dict[str, Any]] = []
        previous_session = None
        if req.previous_response_id is not None:
            previous = await self.store.load(req.previous_response_id, scope)
            if previous is None:
                raise response_not_found(req.previous_response_id, param="previous_response_id")
            history, previous_session = previous.history, previous.session
        if req.store:
            self.store.check_available()
        conversation_session = previous_session or (response_id if req.store else None)
        return ResponseContext(response_id, scope, req.session or conversation_session,
                               history + chat_messages(req.items))

    async def cancel(self, response_id: str, scope: str) -> dict[str, Any]:
        """Cancel the key's stored response while it runs: abort its engine requests and
        answer the body it ends with (status `cancelled`, the output so far). 404 as for
        retrieve; 400 when it has already ended (unless it ended cancelled: the same body)."""
        if not possible_id(response_id):
            raise response_not_found(response_id[:MAX_ID_CHARS])  # never one of ours
        entry = self._in_flight.get(response_id)
        if entry is not None and entry.ctx.owner == scope:
            body = await self._cancel_running(entry)
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

    async def _cancel_running(self, entry: InFlight) -> dict[str, Any] | None:
        """Stop the job unless it is ending anyway, and answer the body it ends with (None when
        it ended without one)."""
        job, ctx = entry.job, entry.ctx
        if not entry.ended.done() and not all(c.done for c in job.choices):
            ctx.cancelled = True
            self.release(job)  # as a client disconnect: freed at the engine's next round
        try:
            return await asyncio.wait_for(asyncio.shield(entry.ended), CANCEL_WAIT_S)
        except TimeoutError:
            return self._response(job, "cancelled", ctx.out.items) if ctx.cancelled else None

    async def _submit(self, job: Job, ctx: ResponseContext) -> None:
        """Admit the job; a stored response is then cancellable until it ends."""
        await super()._submit(job, ctx)
        req = job.request
        assert isinstance(req, ResponsesRequest)
        if req.store:
            ended: asyncio.Future[dict[str, Any] | None] = (
                asyncio.get_running_loop().create_future())
            self._in_flight[job.id] = InFlight(job, ctx, ended)

    def _drop(self, job: Job, ctx: ResponseContext) -> None:
        """Frames never read: forget the response once it is released."""
        self.release(job)
        self._forget(ctx.response_id)

    def _settle(self, job_id: str, body: dict[str, Any] | None) -> None:
        """The job's final body is stored (None: it ended without one): a cancel may answer."""
        entry = self._in_flight.get(job_id)
        if entry is not None and not entry.ended.done():
            entry.ended.set_result(body)

    def _forget(self, job_id: str) -> None:
        self._settle(job_id, None)
        self._in_flight.pop(job_id, None)

    def _final_status(self, job: Job, ctx: ResponseContext) -> str:
        return "cancelled" if ctx.cancelled else _status(job.choices[0])

    def _observe(self, job: Job, ctx: ResponseContext, ok: bool) -> None:
        """A cancelled job counts as aborted, as a disconnect does."""
        super()._observe(job, ctx, ok and not ctx.cancelled)

    def _job_id(self, ctx: ResponseContext) -> str:
        return ctx.response_id

    def _session(self, req: ResponsesRequest, ctx: ResponseContext) -> str | None:
        return ctx.session

    def _prompt_chars(self, req: ResponsesRequest) -> int:
        return len(req.instructions or "") + sum(
            len(str(item.get("content") or item.get("output") or item.get("arguments") or ""))
            for item in req.items)

    def _add_choices(self, job: Job, req: ResponsesRequest, info: EngineInfo,
                     ctx: ResponseContext) -> None:
        instructions = ([{"role": "system", "content": req.instructions}]
                        if req.instructions else [])
        messages = validated_messages(instructions + ctx.conversation)
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

    async def _complete(self, job: Job, ctx: ResponseContext) -> dict[str, Any]:
        out = ctx.out
        body: dict[str, Any] | None = None
        try:
            try:
                await self._collect(job, ctx)
            except APIError as err:
                body = self._failed(job, out, err)
                await self._store(job, ctx, body)
                raise
            c = job.choices[0]
            self._events(out, Delta(c, "".join(c.text), [], [], True))
            status = self._final_status(job, ctx)
            out.finish("completed" if status == "completed" else "incomplete")
            body = self._response(job, status, out.items)
            await self._store(job, ctx, body)
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

    async def _store(self, job: Job, ctx: ResponseContext, body: dict[str, Any]) -> None:
        """Keep the response (with `store`); a failed write is logged, never the client's."""
        req = job.request
        assert isinstance(req, ResponsesRequest)
        if not req.store:
            return
        history = ctx.conversation + _output_messages(body["output"])
        try:
            await self.store.save(
                response_id=job.id, owner=ctx.owner, status=body["status"],
                model=job.model, body=body, input_items=req.items, history=history,
                previous_response_id=req.previous_response_id, learner_session=ctx.session,
            )  # fmt: skip
        except Exception:
            log.exception("could not store response %s", job.id)

    # ---- the stream ----------------------------------------------------------------------------

    async def _stream(self, job: Job, ctx: ResponseContext) -> AsyncIterator[bytes]:
        counter = itertools.count()
        out = ctx.out
        ok = False

        def frame(kind: str, payload: dict[str, Any]) -> bytes:
            return typed_frame(kind, {"type": kind, "sequence_number": next(counter), **payload})

        try:
            start = self._response(job, "in_progress", [])
            yield frame("response.created", {"response": start})
            yield frame("response.in_progress", {"response": start})
            async with contextlib.aclosing(self._deltas(job)) as deltas:
                async for delta in deltas:
                    for kind, payload in self._events(out, delta):
                        yield frame(kind, payload)
            status = self._final_status(job, ctx)
            for kind, payload in out.finish("completed" if status == "completed"
                                            else "incomplete"):
                yield frame(kind, payload)
            final = self._response(job, status, out.items)
            ok = True
            await self._store(job, ctx, final)
            self._settle(job.id, final)
            # cancelled: `response.incomplete` (the SDK has no `response.cancelled` event)
            terminal = "response.completed" if status == "completed" else "response.incomplete"
            yield frame(terminal, {"response": final})
        except APIError as err:
            async for chunk in self._fail(job, ctx, err, frame):
                yield chunk
        except Exception:
            log.exception("stream %s failed", job.id)
            internal = APIError("Internal server error.", status=500, type="server_error")
            async for chunk in self._fail(job, ctx, internal, frame):
                yield chunk
        finally:
            self._observe(job, ctx, ok)
            self._forget(job.id)

    async def _fail(self, job: Job, ctx: ResponseContext, err: APIError,
                    frame: Callable[[str, dict[str, Any]], bytes]) -> AsyncIterator[bytes]:
        failed = self._failed(job, ctx.out, err)
        await self._store(job, ctx, failed)
        self._settle(job.id, failed)
        yield frame("error", {"code": err.code or err.type, "message": err.message,
                              "param": err.param})
        yield frame("response.failed", {"response": failed})


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
