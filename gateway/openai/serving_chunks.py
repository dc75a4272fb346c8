"""The chat and completions answer (`OpenAIServingChunks`, on the serving base): the body with
its `choices`, `usage` and `metrics`, and the stream of chunks each endpoint frames, ended by
`[DONE]`. `OpenAIServingChat` and `OpenAIServingCompletion` build their job and say what one
choice's body entry and stream chunks hold. These endpoints keep no per-job context (None).
"""

from __future__ import annotations

import abc
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from gateway.errors import APIError
from gateway.openai.framing import DONE_FRAME, sse_frame
from gateway.openai.jobs import Choice, Delta, Job
from gateway.openai.serving import OpenAIServing, RequestT
from gateway.openai.text import usage

log = logging.getLogger(__name__)


class OpenAIServingChunks(OpenAIServing[RequestT, None]):
    """Answers the `choices` body, or streams its chunks; subclasses frame each choice."""

    id_prefix: ClassVar[str]  # of the response id
    object_name: ClassVar[str]  # `object` of the body
    chunk_object_name: ClassVar[str]  # `object` of a stream chunk

    async def _open(self, req: RequestT, scope: str) -> None:
        return None

    def _job_id(self, ctx: None) -> str:
        return f"{self.id_prefix}-{uuid.uuid4().hex}"

    # ---- what each endpoint says -------------------------------------------------------------

    @abc.abstractmethod
    def _final_choice(self, job: Job, c: Choice) -> dict[str, Any]: ...

    @abc.abstractmethod
    def _opening_chunks(self, job: Job) -> list[dict[str, Any]]: ...

    @abc.abstractmethod
    def _content_chunk(self, job: Job, delta: Delta) -> dict[str, Any]: ...

    @abc.abstractmethod
    def _finish_chunk(self, job: Job, c: Choice) -> dict[str, Any]: ...

    def _delta_chunks(self, job: Job, delta: Delta) -> list[dict[str, Any]]:
        """The chunks one round of one choice streams (none when it added nothing)."""
        if delta.text or delta.logprobs or delta.prompt_logprobs:
            return [self._content_chunk(job, delta)]
        return []

    # ---- the body ------------------------------------------------------------------------------

    async def _complete(self, job: Job, ctx: None) -> dict[str, Any]:
        await self._collect(job, ctx)
        return self._body(job)

    def _body(self, job: Job) -> dict[str, Any]:
        """The finished job's response body (the chat and completions shape)."""
        return {
            **self._head(job, chunk=False),
            "choices": [self._final_choice(job, c) for c in job.choices],
            "usage": usage(job.prompt_tokens, job.completion_tokens),
            "metrics": self._metrics(job),
        }

    def _head(self, job: Job, *, chunk: bool) -> dict[str, Any]:
        """The five keys every body and stream chunk starts with."""
        return {
            "id": job.id,
            "object": self.chunk_object_name if chunk else self.object_name,
            "created": job.created,
            "model": job.model,
            "system_fingerprint": job.fingerprint,
        }

    # ---- the stream ----------------------------------------------------------------------------

    async def _stream(self, job: Job, ctx: None) -> AsyncIterator[bytes]:
        """SSE frames; an error after the 200 is sent in-band, then `[DONE]` (vLLM, SGLang)."""
        ok = False
        try:
            for chunk in self._opening_chunks(job):
                yield sse_frame(chunk)
            last: dict[str, Any] | None = None  # held back: the last one carries `metrics`
            async with contextlib.aclosing(self._deltas(job)) as deltas:
                async for delta in deltas:
                    for chunk in self._delta_chunks(job, delta):
                        yield sse_frame(chunk)
                    if delta.finished:
                        if last is not None:
                            yield sse_frame(last)
                        last = self._finish_chunk(job, delta.choice)
            for chunk in self._closing_chunks(job, last):
                yield sse_frame(chunk)
            ok = True
        except APIError as err:
            yield sse_frame(err.body())
        except Exception:
            log.exception("stream %s failed", job.id)
            yield sse_frame(APIError("Internal server error.", type="server_error").body())
        finally:
            self._observe(job, ctx, ok)
        yield DONE_FRAME

    def _chunk(self, job: Job, choices: list[dict[str, Any]]) -> dict[str, Any]:
        chunk = {**self._head(job, chunk=True), "choices": choices}
        if job.request.include_usage:
            chunk["usage"] = None  # per spec: null on every chunk but the trailing one
        return chunk

    def _closing_chunks(self, job: Job, last: dict[str, Any] | None) -> list[dict[str, Any]]:
        """The last finish chunk carries `metrics`, or the trailing usage chunk does."""
        chunks = [last] if last is not None else []
        if job.request.include_usage:
            usage_chunk = self._chunk(job, [])
            usage_chunk["usage"] = usage(job.prompt_tokens, job.completion_tokens)
            chunks.append(usage_chunk)
        if chunks:
            chunks[-1]["metrics"] = self._metrics(job)
        return chunks
