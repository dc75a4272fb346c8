"""What every generation endpoint shares (vLLM's `OpenAIServing`): open the request's per-job
context, validate and tokenize the request into a job, submit its engine requests, turn their
rounds into deltas, release them, and observe the job in the metrics. Two kinds of endpoint
derive from it: the chat and completions chunk layer (`serving_chunks.py`: the `choices` body
and its SSE chunks), and the Responses API (`serving_responses.py`: the `Response` object and
its typed stream events, with a per-response context for storage and cancel).

One request is one call: `create` returns the body, or a `JobStream` of SSE frames, and raises
every refusal (the protocol's or the engine's 400, 429, 503) before either, so a streaming
client gets it as a plain HTTP error. The engine judges the prompt's length and the policy.

Vocabulary: a *job* is one HTTP request; it has n *choices* (n per prompt for completions),
each one engine request with its own seed (`seed + choice index` when a seed is given). A
choice is *done* when it will produce no more text (EOS, max tokens, or a stop string found
here) and *acked* once the engine has released it; a stop string makes the gateway abort the
engine request at once, and the job ends when every choice is acked, so the engine's memory
is free before the response completes. A job's *context* is what an endpoint keeps about one
request beyond the job (None for chat and completions): created by `_open`, passed to every
hook that needs it, never stored on the request model.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from core.api import GrammarSpec, Penalties, SamplingParams, grammar_text
from gateway.errors import invalid_request, model_not_found
from gateway.metrics import GatewayMetrics
from gateway.openai.framing import spec_metrics
from gateway.openai.jobs import Choice, Delta, Job
from gateway.openai.protocol import SamplingFields
from gateway.openai.sampling import sampling, served_defaults
from gateway.openai.serving_models import OpenAIServingModels
from gateway.openai.text import IncrementalDetokenizer, StopMatcher, TokenText
from gateway.openai.tools import formats
from gateway.openai.tools.grammar import special_token_id, tool_grammar
from gateway.openai.tools.parse import ToolParser
from gateway.openai.tools.spec import ToolRequest
from gateway.runner import EngineInfo, RequestSpec, Update

log = logging.getLogger(__name__)
RequestT = TypeVar("RequestT", bound=SamplingFields)
ContextT = TypeVar("ContextT")
SEED_MODULUS = 2**63
# Prompts longer than this are tokenized on a thread, so one huge prompt cannot stall every
# other stream's frames on the event loop; short ones skip the thread hop (TTFT).
OFFLOAD_CHARS = 16_384


@dataclass(frozen=True)
class JobStream:
    """A streaming job's SSE frames, and how to free its engine requests when the frames are
    never read to the end (the client left before the first one)."""

    frames: AsyncIterator[bytes]
    release: Callable[[], None]


class OpenAIServing(abc.ABC, Generic[RequestT, ContextT]):
    """Runs one endpoint's requests on the engine runner; subclasses build, answer and frame."""

    endpoint: ClassVar[str]  # the metrics label
    prompt_param: ClassVar[str]  # the request field holding the prompt (a 400's `param`)

    def __init__(self, models: OpenAIServingModels, metrics: GatewayMetrics | None) -> None:
        self.models = models
        self.runner = models.runner
        self.settings = models.settings
        self.metrics = metrics
        self._token_text: TokenText | None = None

    async def create(
        self, req: RequestT, *, arrival: float, scope: str = ""
    ) -> dict[str, Any] | JobStream:
        """The response body, or the stream to send; `scope` keys learner sessions (per API key)."""
        ctx = await self._open(req, scope)
        if self._prompt_chars(req) > OFFLOAD_CHARS:
            job = await asyncio.to_thread(self._build, req, ctx, arrival, scope)
        else:
            job = self._build(req, ctx, arrival, scope)
        await self._submit(job, ctx)
        if req.stream:
            return JobStream(self._stream(job, ctx), functools.partial(self._drop, job, ctx))
        return await self._complete(job, ctx)

    # ---- what each endpoint says -------------------------------------------------------------

    @abc.abstractmethod
    async def _open(self, req: RequestT, scope: str) -> ContextT:
        """The job's context, before anything is built (a refusal raises here)."""

    @abc.abstractmethod
    def _job_id(self, ctx: ContextT) -> str: ...

    @abc.abstractmethod
    def _prompt_chars(self, req: RequestT) -> int: ...

    @abc.abstractmethod
    def _add_choices(self, job: Job, req: RequestT, info: EngineInfo, ctx: ContextT) -> None:
        """Tokenize the prompt(s) and add the job's choices (`_add_choice`)."""

    @abc.abstractmethod
    async def _complete(self, job: Job, ctx: ContextT) -> dict[str, Any]:
        """Run the job to its end and answer the body."""

    @abc.abstractmethod
    def _stream(self, job: Job, ctx: ContextT) -> AsyncIterator[bytes]:
        """Run the job, answering its SSE frames as they come."""

    def _session(self, req: RequestT, ctx: ContextT) -> str | None:
        """The learner session the client names (before it is scoped to the API key)."""
        return req.session

    # ---- building the job ----------------------------------------------------------------------

    def _build(self, req: RequestT, ctx: ContextT, arrival: float, scope: str) -> Job:
        info = self.models.engine_info()
        req.check()
        if req.model != self.models.served_name(info):
            raise model_not_found(req.model)
        if req.n > self.settings.max_n:
            raise invalid_request(f"n must be at most {self.settings.max_n}", param="n")
        check_logit_bias(req.penalties, info)
        session = self._session(req, ctx)
        job = Job(
            id=self._job_id(ctx),
            created=int(time.time()),
            model=self.models.served_name(info),
            fingerprint=info.fingerprint,
            request=req,
            token_text=self._tokens(),
            arrival=arrival,
            # Sessions live per API key: one client cannot steer or read another's learner.
            session=f"{scope}/{session}" if session is not None else None,
            sampling_defaults=served_defaults(info.sampling_defaults, self.settings),
        )
        self._add_choices(job, req, info, ctx)
        return job

    def _max_new_tokens(self, req: SamplingFields, prompt_len: int, info: EngineInfo) -> int:
        """What the request asks for, or the room the context leaves; the engine checks that
        it fits (its refusal is the 400 naming `prompt_param`)."""
        requested: int | None = getattr(req, "max_new_tokens", None)
        return requested if requested is not None else max(info.max_context - prompt_len, 1)

    def _add_choice(
        self, job: Job, prompt_ids: list[int], max_new: int, *, index: int, prefix: str = "",
        prompt_text: str | None = None, grammar: GrammarSpec | None = None,
        prompt_logprobs: int | None = None,
    ) -> Choice:
        req = job.request
        request_id = f"{job.id}-{index}"
        temperature, top_p, top_k = sampling(req, job.sampling_defaults)
        params = SamplingParams(
            max_new_tokens=max_new,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            seed=None if req.seed is None else (req.seed + index) % SEED_MODULUS,
            ignore_eos=req.ignore_eos,
            logprobs=job.logprobs,
            prompt_logprobs=prompt_logprobs,
            penalties=req.penalties,
            grammar=grammar,
        )
        job.specs.append(RequestSpec(request_id, list(prompt_ids), params, req.policy, prompt_text,
                                     job.session, self.prompt_param,
                                     req.priority))  # fmt: skip
        choice = Choice(
            index, request_id, IncrementalDetokenizer(self._tokenizer()),
            StopMatcher(req.stop_strings),
            prefix=prefix, prompt_ids=list(prompt_ids) if job.echo_logprobs else [],
        )  # fmt: skip
        job.choices.append(choice)
        return choice

    def _tool_grammar(self, fmt: formats.ToolFormat, tools: ToolRequest,
                      answer: GrammarSpec | None = None) -> GrammarSpec | None:
        """`required` or a named tool as a grammar, or "auto" with a structured answer format
        (checked here: a 400, not an engine error)."""
        grammar = tool_grammar(fmt, tools, self._tokenizer(), answer)
        if grammar is not None:
            try:
                grammar_text(grammar)
            except ValueError as e:
                raise invalid_request(f"cannot enforce a call of these tools: {e}",
                                      param="tools") from None
        return grammar

    def _parse_tools(self, choice: Choice, fmt: formats.ToolFormat, tools: ToolRequest) -> None:
        """The choice's text is parsed for calls; tags that are special tokens are kept in it."""
        tokenizer = self._tokenizer()
        tags = [special_token_id(tokenizer, t) for t in (fmt.open, fmt.close) if t]
        keep = frozenset(t for t in tags if t is not None)
        if keep:
            choice.detok = IncrementalDetokenizer(tokenizer, keep)
        choice.tools = ToolParser(fmt, frozenset(t.name for t in tools.tools), tools.parallel,
                                  forced=bool(tools.forced))

    def _tokenizer(self) -> Any:
        return self.runner.tokenizer

    def _tokens(self) -> TokenText:
        if self._token_text is None:
            self._token_text = TokenText(self._tokenizer())
        return self._token_text

    def _logged_prompt(self, prompt_ids: list[int]) -> str | None:
        """The prompt text for the request log: decoded once per prompt, and only when the
        operator logs prompts."""
        return self._tokenizer().decode(prompt_ids) if self.settings.log_prompts else None

    # ---- running -----------------------------------------------------------------------------

    async def _submit(self, job: Job, ctx: ContextT) -> None:
        """Hand every choice to the engine worker; a refusal raises here, before any byte."""
        try:
            await self.runner.submit(job.specs, job.sink)
        except asyncio.CancelledError:  # the client left while the worker checked the job
            self.release(job)
            raise

    def release(self, job: Job) -> None:
        """Abort whatever the engine still runs for this job (idempotent)."""
        for choice in job.choices:
            if not choice.acked:
                self.runner.abort(choice.request_id)

    def _drop(self, job: Job, ctx: ContextT) -> None:
        """The stream's frames will not be read (further): free the job."""
        self.release(job)

    async def _deltas(self, job: Job) -> AsyncGenerator[Delta, None]:
        by_id = {c.request_id: c for c in job.choices}
        try:
            while not all(c.acked for c in job.choices):
                update = await job.sink.get()
                if update.error is not None:
                    raise update.error
                delta = self._consume(job, by_id[update.request_id], update)
                if delta is not None:
                    yield delta
        finally:
            self.release(job)

    def _consume(self, job: Job, choice: Choice, update: Update) -> Delta | None:
        if update.token_ids and job.first_token_at is None:
            job.first_token_at = time.monotonic()
        delta = choice.consume(update)
        if delta is not None and delta.finished and not choice.acked:
            self.runner.abort(choice.request_id)  # a stop string: free the engine now
        return delta

    async def _collect(self, job: Job, ctx: ContextT) -> None:
        """Run the job to its end, gathering each choice's text and logprobs."""
        ok = False
        try:
            async with contextlib.aclosing(self._deltas(job)) as deltas:
                async for delta in deltas:
                    c = delta.choice
                    c.text.append(delta.text)
                    c.logprobs.extend(delta.logprobs)
                    c.offsets.extend(delta.offsets)
            ok = True
        finally:
            self._observe(job, ctx, ok)

    def _metrics(self, job: Job) -> dict[str, Any]:
        """The answer's `metrics` object (ours): the choices' speculative decoding statistics."""
        return {"speculative_decoding": spec_metrics([c.stats for c in job.choices])}

    # ---- metrics -----------------------------------------------------------------------------

    def _observe(self, job: Job, ctx: ContextT, ok: bool) -> None:
        if self.metrics is None:
            return
        now = time.monotonic()
        self.metrics.latency.labels(self.endpoint).observe(now - job.arrival)
        if job.first_token_at is not None:
            self.metrics.ttft.labels(self.endpoint).observe(job.first_token_at - job.arrival)
        self.metrics.prompt_tokens.inc(job.prompt_tokens)
        self.metrics.generation_tokens.inc(job.completion_tokens)
        for c in job.choices:
            reason = c.finish_reason if ok and c.finish_reason else "abort"
            self.metrics.requests.labels(self.endpoint, reason).inc()


def check_logit_bias(penalties: Penalties, info: EngineInfo) -> None:
    """`logit_bias` ids must be the target's (the protocol checked their form and range)."""
    bad = [t for t, _ in penalties.logit_bias if t >= info.vocab_size]
    if bad:
        raise invalid_request(
            f"logit_bias token ids must be in [0, {info.vocab_size}), got {bad[:5]}",
            param="logit_bias",
        )
