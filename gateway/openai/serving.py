"""One generation request end to end (vLLM's `serving_chat` role): validate and tokenize, submit
n engine requests, turn their rounds into text and logprobs, and build the OpenAI body or
the SSE frames.

Vocabulary: a *job* is one HTTP request; it has n *choices* (n per prompt for completions),
each one engine request with its own seed (`seed + choice index` when a seed is given). A
choice is *done* when it will produce no more text (EOS, max tokens, or a stop string found
here) and *acked* once the engine has released it; a stop string makes the gateway abort the
engine request at once, and the job ends when every choice is acked, so the engine's memory
is free before the response completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from core.config import LEARNER_NAMES, GrammarSpec, Penalties, SamplingParams
from core.grammar import grammar_text
from core.request import ROUTER
from gateway.config import Settings
from gateway.http.errors import APIError, context_length_exceeded, invalid_request, model_not_found
from gateway.http.metrics import GatewayMetrics
from gateway.openai import framing as R
from gateway.openai.jobs import Choice, Delta, Job
from gateway.openai.protocol import ChatCompletionRequest, CompletionRequest, SamplingFields
from gateway.openai.text import (
    IncrementalDetokenizer,
    StopMatcher,
    TokenText,
    encode_prompt,
    render_chat,
)
from gateway.openai.tools import formats
from gateway.openai.tools.grammar import special_token_id, tool_grammar
from gateway.openai.tools.parse import ToolCall, ToolParser
from gateway.openai.tools.spec import ToolRequest
from gateway.runner import EngineInfo, EngineRunner, RequestSpec, Update

log = logging.getLogger(__name__)
SEED_MODULUS = 2**63
# Temperatures below this sample as greedy (vLLM's _SAMPLING_EPS): logits / 1e-300 overflow
# to inf and the softmax to NaN, which failed the engine round (a 500 for every request in it).
GREEDY_BELOW_TEMPERATURE = 1e-5
# So does a top_p below this: it keeps only the most likely token anyway (its probability is at
# least 1/vocab), and below float32's smallest value (~1e-45) it became 0 and dropped every token.
GREEDY_BELOW_TOP_P = 1e-8
# Prompts longer than this are tokenized on a thread, so one huge prompt cannot stall every
# other stream's frames on the event loop; short ones skip the thread hop (TTFT).
OFFLOAD_CHARS = 16_384


class Serving:
    """Builds jobs from validated requests and runs them on the engine runner."""

    def __init__(
        self, runner: EngineRunner, settings: Settings, metrics: GatewayMetrics | None
    ) -> None:
        self.runner = runner
        self.settings = settings
        self.metrics = metrics
        self._token_text: TokenText | None = None

    # ---- engine facts ------------------------------------------------------------------------

    def engine_info(self) -> EngineInfo:
        self.runner.check_ready()
        assert self.runner.info is not None
        return self.runner.info

    def served_model(self, info: EngineInfo) -> str:
        return self.settings.model_name or info.model_name

    def models(self) -> dict[str, Any]:
        info = self.engine_info()
        return {"object": "list", "data": [self._card(info)]}

    def model(self, model_id: str) -> dict[str, Any]:
        info = self.engine_info()
        if model_id != self.served_model(info):
            raise model_not_found(model_id)
        return self._card(info)

    def _card(self, info: EngineInfo) -> dict[str, Any]:
        return R.model_card(
            self.served_model(info),
            created=int(self.runner.started_at),
            max_context=info.max_context,
            drafters=list(info.drafter_ids),
            tool_format=self._tool_format().name,
        )

    def _tool_format(self) -> formats.ToolFormat:
        return formats.detect(getattr(self._tokenizer(), "chat_template", None))

    def _tokenizer(self) -> Any:
        return self.runner.tokenizer

    def _tokens(self) -> TokenText:
        if self._token_text is None:
            self._token_text = TokenText(self._tokenizer())
        return self._token_text

    # ---- validation --------------------------------------------------------------------------

    def _check_common(self, req: SamplingFields, info: EngineInfo) -> None:
        req.check()
        if req.model != self.served_model(info):
            raise model_not_found(req.model)
        if req.n > self.settings.max_n:
            raise invalid_request(f"n must be at most {self.settings.max_n}", param="n")
        check_policy(req.policy, info)
        check_logit_bias(req.penalties, info)

    def _max_new_tokens(
        self, req: SamplingFields, prompt_len: int, info: EngineInfo, param: str
    ) -> int:
        requested: int | None = getattr(req, "max_new_tokens", None)
        room = info.max_context - prompt_len
        max_new = requested if requested is not None else room
        if max_new < 1 or prompt_len + max_new > info.max_context:
            raise context_length_exceeded(
                max_context=info.max_context,
                prompt_tokens=prompt_len,
                max_tokens=max(requested or 1, 1),
                param=param,
            )
        return max_new

    # ---- job construction --------------------------------------------------------------------

    async def prepare(self, req: SamplingFields, arrival: float, scope: str = "") -> Job:
        """Validate and tokenize `req` into a job (off the event loop when the prompt is big)."""
        if isinstance(req, ChatCompletionRequest):
            chars = sum(len(str(m.content)) for m in req.messages)
            build: Any = self.prepare_chat
        else:
            assert isinstance(req, CompletionRequest)
            chars = sum(len(p) for p in req.prompts)
            build = self.prepare_completion
        if chars > OFFLOAD_CHARS:
            job: Job = await asyncio.to_thread(build, req, arrival, scope)
        else:
            job = build(req, arrival, scope)
        return job

    def prepare_chat(self, req: ChatCompletionRequest, arrival: float, scope: str = "") -> Job:
        info = self.engine_info()
        self._check_common(req, info)
        tools, fmt = req.tool_request, self._tool_format()
        messages, listed = formats.render(fmt, [m.template_dict() for m in req.messages], tools)
        prompt_ids = render_chat(self._tokenizer(), messages, listed)
        max_new = self._max_new_tokens(req, len(prompt_ids), info, "messages")
        grammar = self._tool_grammar(fmt, tools) if tools else req.grammar
        job = self._new_job("chat", "chatcmpl", req, info, arrival, scope)
        text = self._logged_prompt(prompt_ids)
        for i in range(req.n):
            self._add_choice(job, prompt_ids, max_new, index=i, prompt_text=text, grammar=grammar)
            if tools:
                self._parse_tools(job.choices[-1], fmt, tools)
        job.prompt_tokens = len(prompt_ids)
        return job

    def _tool_grammar(self, fmt: formats.ToolFormat, tools: ToolRequest) -> GrammarSpec | None:
        """`required` or a named tool as a grammar (checked here: a 400, not an engine error)."""
        grammar = tool_grammar(fmt, tools, self._tokenizer())
        if grammar is not None:
            try:
                grammar_text(grammar)
            except ValueError as e:
                raise invalid_request(f"cannot enforce a call of these tools: {e}", param="tools") from None
        return grammar

    def _parse_tools(self, choice: Choice, fmt: formats.ToolFormat, tools: ToolRequest) -> None:
        """The choice's text is parsed for calls; tags that are special tokens are kept in it."""
        tokenizer = self._tokenizer()
        tags = [special_token_id(tokenizer, t) for t in (fmt.open, fmt.close) if t]
        keep = frozenset(t for t in tags if t is not None)
        if keep:
            choice.detok = IncrementalDetokenizer(tokenizer, keep)
        choice.tools = ToolParser(fmt, frozenset(t.name for t in tools.tools), tools.parallel)

    def prepare_completion(self, req: CompletionRequest, arrival: float, scope: str = "") -> Job:
        info = self.engine_info()
        self._check_common(req, info)
        prompts = req.prompts
        if len(prompts) * req.n > self.settings.max_n:
            raise invalid_request(
                f"number of prompts × n must be at most {self.settings.max_n}", param="prompt"
            )
        job = self._new_job("completion", "cmpl", req, info, arrival, scope)
        for p, prompt in enumerate(prompts):
            ids = encode_prompt(self._tokenizer(), prompt, param="prompt")
            max_new = self._max_new_tokens(req, len(ids), info, "prompt")
            prefix = self._echo_text(prompt) if req.echo else ""
            text = self._logged_prompt(ids)
            for j in range(req.n):
                self._add_choice(job, ids, max_new, index=p * req.n + j, prefix=prefix, prompt_text=text)
            job.prompt_tokens += len(ids)
        return job

    def _echo_text(self, prompt: str | list[int]) -> str:
        if isinstance(prompt, str):
            return prompt
        return str(self._tokenizer().decode(prompt, skip_special_tokens=False))

    def _new_job(
        self, kind: str, prefix: str, req: SamplingFields, info: EngineInfo, arrival: float,
        scope: str,
    ) -> Job:
        return Job(
            kind=kind,
            id=f"{prefix}-{uuid.uuid4().hex}",
            created=int(time.time()),
            model=self.served_model(info),
            fingerprint=info.fingerprint,
            request=req,
            choices=[],
            specs=[],
            prompt_tokens=0,
            token_text=self._tokens(),
            arrival=arrival,
            # Sessions live per API key: one client cannot steer or read another's learner.
            session=f"{scope}/{req.session}" if req.session is not None else None,
        )

    def _logged_prompt(self, prompt_ids: list[int]) -> str | None:
        """The prompt text for the request log: decoded once per prompt, and only when the
        operator logs prompts."""
        return self._tokenizer().decode(prompt_ids) if self.settings.log_prompts else None

    def _add_choice(
        self, job: Job, prompt_ids: list[int], max_new: int, *, index: int, prefix: str = "",
        prompt_text: str | None = None, grammar: GrammarSpec | None = None,
    ) -> None:
        req = job.request
        request_id = f"{job.id}-{index}"
        params = SamplingParams(
            max_new_tokens=max_new,
            temperature=_temperature(req.temperature, req.top_p),
            top_p=1.0 if req.top_p is None else req.top_p,
            top_k=req.top_k or 0,
            seed=None if req.seed is None else (req.seed + index) % SEED_MODULUS,
            ignore_eos=req.ignore_eos,
            logprobs=job.request_logprobs,
            prompt_logprobs=getattr(req, "num_prompt_logprobs", None),
            penalties=req.penalties,
            grammar=grammar,
        )
        tokenizer = self._tokenizer()
        job.specs.append(
            RequestSpec(request_id, list(prompt_ids), params, req.policy, prompt_text, job.session)
        )
        job.choices.append(
            Choice(
                index, request_id, IncrementalDetokenizer(tokenizer), StopMatcher(req.stop_strings),
                prefix=prefix, prompt_ids=list(prompt_ids) if job.echo_logprobs else [],
            )
        )  # fmt: skip

    # ---- running -----------------------------------------------------------------------------

    def start(self, job: Job) -> None:
        """Submit every choice (raises 429/503 before any response byte is sent)."""
        self.runner.submit(job.specs, job.sink)

    def release(self, job: Job) -> None:
        """Abort whatever the engine still runs for this job (idempotent)."""
        for choice in job.choices:
            if not choice.acked:
                self.runner.abort(choice.request_id)

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

    # ---- non-streaming -----------------------------------------------------------------------

    async def complete(self, job: Job) -> dict[str, Any]:
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
            self._observe(job, ok)
        body = job.envelope(chunk=False)
        body["choices"] = [self._final_choice(job, c) for c in job.choices]
        body["usage"] = job.usage()
        body["metrics"] = job.spec_metrics()
        return body

    def _final_choice(self, job: Job, c: Choice) -> dict[str, Any]:
        text = c.prefix + "".join(c.text)
        if job.kind == "chat":
            lps = [R.chat_logprob(job.token_text, lp) for lp in c.logprobs]
            calls = None
            if c.tools is not None:  # the same parser as streaming, fed the whole text
                events = c.tools.feed(text) + c.tools.finish()
                text = "".join(e for e in events if isinstance(e, str))
                calls = [call.openai_dict() for call in c.tools.calls] or None
            return R.chat_choice(
                c.index, text, _finish_reason(c), lps if job.wants_logprobs else None,
                tool_calls=calls,
            )  # fmt: skip
        comp_lps = (
            R.completion_logprobs(job.token_text, c.logprobs, c.offsets)
            if job.wants_logprobs
            else None
        )
        if comp_lps is not None and job.echo_logprobs:
            comp_lps = R.join_logprobs(self._echoed_logprobs(job, c), comp_lps)
        return R.completion_choice(c.index, text, c.finish_reason, comp_lps)

    def _echoed_logprobs(self, job: Job, c: Choice) -> dict[str, Any]:
        """The prompt part of `echo` + `logprobs` (the engine sends it with the prefill)."""
        if c.prompt_logprobs is None:  # an engine that sent none (an aborted prefill)
            raise APIError("The engine returned no prompt logprobs.", status=500, type="server_error")
        return R.prompt_logprobs(job.token_text, c.prompt_ids, c.prompt_logprobs)

    # ---- streaming ---------------------------------------------------------------------------

    async def stream(self, job: Job) -> AsyncIterator[bytes]:
        """SSE frames; an error after the 200 is sent in-band, then `[DONE]` (vLLM, SGLang)."""
        ok = False
        try:
            for frame in self._opening_frames(job):
                yield frame
            last: dict[str, Any] | None = None
            async with contextlib.aclosing(self._deltas(job)) as deltas:
                async for delta in deltas:
                    if delta.choice.tools is not None:
                        for chunk in self._tool_chunks(job, delta):
                            yield R.sse_frame(chunk)
                    elif delta.text or delta.logprobs or delta.prompt_logprobs:
                        yield R.sse_frame(self._content_chunk(job, delta))
                    if delta.finished:
                        if last is not None:
                            yield R.sse_frame(last)
                        last = self._finish_chunk(job, delta.choice)
            for chunk in self._closing_chunks(job, last):
                yield R.sse_frame(chunk)
            ok = True
        except APIError as err:
            yield R.sse_frame(err.body())
        except Exception:
            log.exception("stream %s failed", job.id)
            yield R.sse_frame(APIError("Internal server error.", type="server_error").body())
        finally:
            self._observe(job, ok)
        yield R.DONE_FRAME

    def _chunk(self, job: Job, choices: list[dict[str, Any]]) -> dict[str, Any]:
        chunk = job.envelope(chunk=True)
        chunk["choices"] = choices
        if job.request.include_usage:
            chunk["usage"] = None  # per spec: null on every chunk but the trailing one
        return chunk

    def _opening_frames(self, job: Job) -> list[bytes]:
        if job.kind == "chat":
            delta = {"role": "assistant", "content": ""}
            return [
                R.sse_frame(self._chunk(job, [R.chat_delta_choice(c.index, delta)]))
                for c in job.choices
            ]
        return [
            R.sse_frame(self._chunk(job, [R.completion_choice(c.index, c.prefix, None, None)]))
            for c in job.choices
            if c.prefix and not job.echo_logprobs  # else it goes out with the prompt's logprobs
        ]

    def _content_chunk(self, job: Job, delta: Delta) -> dict[str, Any]:
        index = delta.choice.index
        if job.kind == "chat":
            lps = [R.chat_logprob(job.token_text, lp) for lp in delta.logprobs]
            choice = R.chat_delta_choice(
                index, {"content": delta.text}, logprobs=lps if job.wants_logprobs else None
            )
        else:
            comp = R.completion_logprobs(job.token_text, delta.logprobs, delta.offsets)
            text = delta.text
            if delta.prompt_logprobs and job.echo_logprobs:
                # echo + logprobs: the prompt text goes out with its logprobs in the first chunk
                text = delta.choice.prefix + text
                comp = R.join_logprobs(self._echoed_logprobs(job, delta.choice), comp)
            choice = R.completion_choice(
                index, text, None, comp if job.wants_logprobs else None
            )
        return self._chunk(job, [choice])

    def _tool_chunks(self, job: Job, delta: Delta) -> list[dict[str, Any]]:
        """A tool-parsed choice's round: its content (what is surely not a call) with the
        round's logprobs, then each call completed in it, as OpenAI streams calls: the id and
        name with empty arguments, then the arguments."""
        parser = delta.choice.tools
        assert parser is not None
        events = parser.feed(delta.text) + (parser.finish() if delta.finished else [])
        text = "".join(e for e in events if isinstance(e, str))
        chunks = []
        if text or delta.logprobs:
            chunks.append(self._content_chunk(job, Delta(delta.choice, text, delta.logprobs, [], False)))
        for call in (e for e in events if isinstance(e, ToolCall)):
            chunks += [self._chunk(job, [R.chat_delta_choice(delta.choice.index, d)])
                       for d in R.tool_call_deltas(parser.calls.index(call), call.openai_dict())]  # fmt: skip
        return chunks

    def _finish_chunk(self, job: Job, c: Choice) -> dict[str, Any]:
        if job.kind == "chat":
            return self._chunk(job, [R.chat_delta_choice(c.index, {}, _finish_reason(c))])
        return self._chunk(job, [R.completion_choice(c.index, "", c.finish_reason, None)])

    def _closing_chunks(self, job: Job, last: dict[str, Any] | None) -> list[dict[str, Any]]:
        """The last finish chunk carries `metrics`, or the trailing usage chunk does."""
        chunks = [last] if last is not None else []
        if job.request.include_usage:
            usage_chunk = self._chunk(job, [])
            usage_chunk["usage"] = job.usage()
            chunks.append(usage_chunk)
        if chunks:
            chunks[-1]["metrics"] = job.spec_metrics()
        return chunks

    # ---- metrics -----------------------------------------------------------------------------

    def _observe(self, job: Job, ok: bool) -> None:
        if self.metrics is None:
            return
        endpoint = job.kind
        now = time.monotonic()
        self.metrics.latency.labels(endpoint).observe(now - job.arrival)
        if job.first_token_at is not None:
            self.metrics.ttft.labels(endpoint).observe(job.first_token_at - job.arrival)
        self.metrics.prompt_tokens.inc(job.prompt_tokens)
        self.metrics.generation_tokens.inc(sum(c.completion_tokens for c in job.choices))
        for c in job.choices:
            reason = c.finish_reason if ok and c.finish_reason else "abort"
            self.metrics.requests.labels(endpoint, reason).inc()


def _finish_reason(c: Choice) -> str | None:
    """OpenAI's "tool_calls" when a choice that ended on its own made calls."""
    if c.tools is not None and c.tools.calls and c.finish_reason == "stop":
        return "tool_calls"
    return c.finish_reason


def _temperature(temperature: float | None, top_p: float | None) -> float:
    """OpenAI's default is 1; a temperature or top_p too small to compute with means greedy (0)."""
    if top_p is not None and top_p < GREEDY_BELOW_TOP_P:
        return 0.0
    if temperature is None:
        return 1.0
    return 0.0 if temperature < GREEDY_BELOW_TEMPERATURE else temperature


def check_logit_bias(penalties: Penalties, info: EngineInfo) -> None:
    """`logit_bias` ids must be the target's (the protocol checked their form and range)."""
    bad = [t for t, _ in penalties.logit_bias if t >= info.vocab_size]
    if bad:
        raise invalid_request(
            f"logit_bias token ids must be in [0, {info.vocab_size}), got {bad[:5]}",
            param="logit_bias",
        )


def check_policy(policy: str, info: EngineInfo) -> None:
    """`auto`, `none`, a learner name, or `fixed:<drafter id>` of a served drafter."""
    policy = policy.strip()  # as the engine's parser does
    if policy in ("auto", "none") or policy in LEARNER_NAMES:
        return
    if policy == ROUTER:
        if info.has_router:
            return
        raise invalid_request(
            "policy 'router' needs a prompt router and this pool has none "
            "(python -m demo.router --pool <pool.json> trains one)",
            param="hedgespec.policy",
            code="invalid_policy",
        )
    if policy.startswith("fixed:"):
        if policy.removeprefix("fixed:") in info.drafter_ids:
            return
        raise invalid_request(
            f"unknown drafter in policy {policy!r}; served drafters: {list(info.drafter_ids)}",
            param="hedgespec.policy",
            code="invalid_policy",
        )
    raise invalid_request(
        f"unknown policy {policy!r}: use auto, none, fixed:<drafter id>, router or one of "
        f"{list(LEARNER_NAMES)}",
        param="hedgespec.policy",
        code="invalid_policy",
    )
