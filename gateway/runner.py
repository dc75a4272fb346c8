"""The one engine worker thread: the only place that calls the (non-thread-safe) engine.

Cancellation design (the one async/sync boundary, style rule 10):

    event loop (HTTP handlers)                 worker thread (owns the engine)
    ---------------------------                ------------------------------
    await submit(specs) ── commands deque ──▶  engine.check_request → waiting (or refused)
        (returns or raises) ◀── call_soon_threadsafe ──┘
                                               admit: waiting → engine.add_request
    abort(request_id)   ── commands deque ──▶  engine.abort (frees KV caches)
    sink: asyncio.Queue ◀── call_soon_threadsafe ── Update per round (tokens, stats snapshot)

- Fairness: `engine.step()` is one batched step (core/batching/scheduler.py): every running request
  gets one round, their trees verified in one target pass, and waiting prompts are prefilled in
  chunks within the step's token budget (`max_step_tokens`), so no stream waits on another's
  prefill. With batching off (`HEDGESPEC_BATCHING=false`) a step is one round of the next
  request in round-robin order.
- Admission: at most `max_running` requests are in the engine; up to `max_queue` more wait,
  admitted by `priority` (vLLM's field: lower first; arrival order among equals; default 0).
  Beyond that `submit` raises 429 at once rather than building an unbounded queue
  (TGI's semaphore behaviour).
- Validation: the engine is the one judge of a request (context length, policy). `submit`
  returns only once the worker has asked it (`engine.check_request`, between two rounds), and
  raises its typed refusal translated into an OpenAI 400 (`engine_error`), so a streaming
  client still gets a plain HTTP 400, not an error inside a 200 event stream.
- Deadlines are checked between rounds; an expired request is aborted and told why.
- A client that goes away calls `abort`; the request is removed before the next round.
- `stop()` drains: new work gets 503, in-flight requests run to completion until the drain
  timeout, then the rest are aborted with an error so no client hangs.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from core.api import (
    ContextLengthError,
    ModelFreeDrafter,
    PolicyError,
    RoundOutput,
    RoundStats,
    SamplingParams,
    ServedFacts,
    StatsSnapshot,
    TokenLogprob,
)
from gateway.errors import (
    APIError,
    context_length_exceeded,
    invalid_request,
    not_ready,
    overloaded,
    request_timeout,
)
from gateway.live.events import EventBus, finished_event, round_event, started_event
from gateway.metrics import GatewayMetrics

if TYPE_CHECKING:  # the drafter's module imports torch: the app loads it only with the engine
    from core.api import Eagle3Drafter

log = logging.getLogger(__name__)
T = TypeVar("T")


class RuntimePool(Protocol):
    """The pool of an engine that changes it while serving (`SpecEngine`): what the pool sync
    (gateway/pool/sync.py) edits, on the worker thread through `EngineRunner.call`. Requests
    already running keep the pool they started with."""

    def drafter_ids(self) -> list[str]: ...
    def load_drafter(self, path: Path) -> Eagle3Drafter: ...
    def add_loaded_drafter(self, drafter_id: str, drafter: Eagle3Drafter) -> None: ...
    def add_model_free(self, drafter_id: str, drafter: ModelFreeDrafter) -> None: ...
    def remove_drafter(self, drafter_id: str) -> None: ...


class Engine(Protocol):
    """The subset of `core.api.SpecEngine` the gateway relies on."""

    tokenizer: Any
    model_name: str
    max_context: int

    def facts(self) -> ServedFacts: ...  # router, sampling defaults, drafter kinds, layers
    def head_setting(self) -> str: ...  # verification's LM-head rows, for /metrics
    def runtime_pool(self) -> RuntimePool | None: ...  # None: the pool is fixed at load
    def drafter_ids(self) -> list[str]: ...
    def check_request(self, prompt_ids: list[int], params: SamplingParams,
                      policy: str = ...) -> object: ...
    def add_request(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams, policy: str = ...,
        session: str | None = ...,
    ) -> None: ...
    def step(self) -> list[RoundOutput]: ...
    def abort(self, request_id: str) -> None: ...
    def has_unfinished(self) -> bool: ...
    def num_active(self) -> int: ...
    def forget_costs(self) -> None: ...


@dataclass(frozen=True)
class RequestSpec:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    policy: str = "auto"
    prompt_text: str | None = None  # only when the operator logs prompts (request log)
    session: str | None = None  # learner session key (scoped to the API key by the caller)
    prompt_param: str = "prompt"  # the request field the prompt came from (a 400's `param`)
    priority: int = 0  # vLLM's: lower is admitted first when the batch is full


@dataclass(frozen=True)
class Update:
    """What one engine round produced for one request, as the event loop sees it.

    `stats` is the engine's immutable snapshot of the request's statistics, on the update
    that finishes it; no live engine object ever crosses the thread boundary.
    """

    request_id: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None
    finished: bool = False
    finish_reason: str | None = None
    stats: StatsSnapshot | None = None
    error: APIError | None = None
    # The prompt's logprobs (first entry None) on the prefill's update, when asked for (echo).
    prompt_logprobs: list[TokenLogprob | None] | None = None


@dataclass(frozen=True)
class EngineInfo:
    """A snapshot of engine facts the event loop may read without touching the engine."""

    model_name: str
    max_context: int
    drafter_ids: tuple[str, ...]
    vocab_size: int
    fingerprint: str
    has_router: bool = False  # the pool ships a prompt router: policy "router" is served
    # id -> "eagle3" or a model-free kind ("ngram", "suffix"), for every drafter in the pool
    drafter_kinds: Mapping[str, str] = field(default_factory=dict)
    # The model's sampling defaults for requests that leave them out
    # (core/model/sampling_defaults.py)
    sampling_defaults: Mapping[str, float] = field(default_factory=dict)


@dataclass
class _Tracked:
    spec: RequestSpec
    sink: asyncio.Queue[Update]
    loop: asyncio.AbstractEventLoop
    deadline: float
    submitted_at: float
    started_at: float = 0.0
    events_started: bool = False
    last_stats: StatsSnapshot | None = None  # rides on an abort's acknowledgement


def fingerprint(engine: Engine, config: Any) -> str:
    """`system_fingerprint`: stable for a given model, pool and engine configuration."""
    raw = f"{engine.model_name}|{sorted(engine.drafter_ids())}|{config!r}"
    return "fp_" + hashlib.sha256(raw.encode()).hexdigest()[:12]


class EngineRunner:
    """Owns the worker thread; every public method is safe to call from the event loop."""

    def __init__(
        self,
        load_engine: Callable[[], Engine],
        *,
        max_running: int,
        max_queue: int,
        request_timeout_s: float,
        metrics: GatewayMetrics | None = None,
        events: EventBus | None = None,
        config_repr: str = "",
        warmup: bool = True,
    ) -> None:
        self._load_engine = load_engine
        self.max_running = max_running
        self.max_queue = max_queue
        self.request_timeout_s = request_timeout_s
        self.metrics = metrics
        self.events = events
        self._config_repr = config_repr
        self._warmup_enabled = warmup
        self._engine: Engine | None = None
        self.info: EngineInfo | None = None
        self._kinds_seen: dict[str, str] = {}  # every drafter's kind since start (worker thread)
        self.tokenizer: Any = None  # the engine's tokenizer, set once loaded (thread-safe reads)
        self.started_at = time.time()
        self.load_error: str | None = None
        self._lock = threading.Lock()
        self._commands: collections.deque[tuple[str, Any]] = collections.deque()
        self._wakeup = threading.Event()
        self._ready = threading.Event()
        self._draining = False
        self._stopping = False
        self._in_flight = 0  # submitted and not yet finished/aborted (guarded by _lock)
        self._waiting: collections.deque[_Tracked] = collections.deque()
        self._running: dict[str, _Tracked] = {}
        self._thread = threading.Thread(target=self._main, name="engine-worker", daemon=True)

    # ---- lifecycle (event loop side) ---------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and not self._draining

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def wait_ready(self, timeout_s: float) -> bool:
        return await asyncio.to_thread(self._ready.wait, timeout_s)

    async def stop(self, drain_timeout_s: float) -> None:
        """Refuse new work, let in-flight requests finish (up to the timeout), then stop."""
        self._draining = True
        deadline = time.monotonic() + drain_timeout_s
        while self._in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        self._stopping = True
        self._wakeup.set()
        if self._thread.is_alive():
            await asyncio.to_thread(self._thread.join, 30.0)

    # ---- requests (event loop side) ----------------------------------------------------------

    async def submit(self, specs: list[RequestSpec], sink: asyncio.Queue[Update]) -> None:
        """Queue all of `specs` (the n choices of one HTTP request) or none of them.

        Returns once the engine has accepted them (checked between two rounds); raises 503 or
        429 at once, or the engine's refusal as a 400 (`engine_error`). A caller cancelled
        while it waits must `abort` the specs: they may have been queued meanwhile."""
        self.check_ready()
        loop = asyncio.get_running_loop()
        checked: asyncio.Future[None] = loop.create_future()
        now = time.monotonic()
        with self._lock:
            if self._in_flight + len(specs) > self.max_running + self.max_queue:
                if self.metrics:
                    self.metrics.rejected.labels(reason="overloaded").inc()
                raise overloaded()
            self._in_flight += len(specs)
            batch = [_Tracked(spec, sink, loop, now + self.request_timeout_s, now)
                     for spec in specs]
            self._commands.append(("add", (batch, checked)))
        self._wakeup.set()
        await checked

    def abort(self, request_id: str) -> None:
        """Stop a request (client gone, stop string found); a no-op when already finished."""
        with self._lock:
            self._commands.append(("abort", request_id))
        self._wakeup.set()

    def call(self, fn: Callable[[Engine], T]) -> concurrent.futures.Future[T]:
        """Run `fn(engine)` on the worker thread between rounds (pool changes, inspection)."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            self._commands.append(("call", (fn, future)))
        self._wakeup.set()
        return future

    @property
    def known_kinds(self) -> dict[str, str]:
        """Every drafter's kind since start, those removed since included (the live page colours
        a finished request's rounds by kind)."""
        return dict(self._kinds_seen)

    def check_ready(self) -> None:
        if self.load_error is not None:
            raise not_ready(f"the engine failed to load: {self.load_error}")
        if self._draining:
            raise not_ready("the server is shutting down")
        if not self._ready.is_set():
            raise not_ready("the engine is still loading")

    # ---- worker thread -----------------------------------------------------------------------

    def _main(self) -> None:
        try:
            engine = self._load_engine()
            self._engine = engine
            self.tokenizer = engine.tokenizer
            self.info = self._snapshot(engine)
            if self.metrics:
                self.metrics.deterministic.set(float(engine.facts().deterministic))
            if self._warmup_enabled:
                self._warmup(engine)
        except Exception as exc:
            log.exception("engine failed to load")
            self.load_error = f"{type(exc).__name__}: {exc}"
            return
        self._ready.set()
        log.info("engine ready: model %s, drafters %s, model sampling defaults %s",
                 self.info.model_name, self.info.drafter_ids,
                 dict(self.info.sampling_defaults) or "none")
        while True:
            self._apply_commands(engine)
            self._expire(engine)
            self._admit(engine)
            if self._stopping:
                self._apply_commands(engine)  # answer a submit that raced the stop
                self._abort_all(engine, not_ready("the server shut down"))
                return
            if engine.has_unfinished():
                self._step(engine)
            else:
                self._wakeup.wait(timeout=0.1)
                self._wakeup.clear()

    def _snapshot(self, engine: Engine) -> EngineInfo:
        facts = engine.facts()
        return EngineInfo(
            model_name=engine.model_name,
            max_context=int(engine.max_context),
            drafter_ids=tuple(engine.drafter_ids()),
            vocab_size=len(engine.tokenizer),
            fingerprint=fingerprint(engine, self._config_repr),
            has_router=facts.has_router,
            sampling_defaults=dict(facts.sampling_defaults),
            drafter_kinds=self._drafter_kinds(facts),
        )

    def _drafter_kinds(self, facts: ServedFacts) -> dict[str, str]:
        """Kinds of the pool's drafters; remembered after a drafter leaves, so rounds of
        requests still running on it keep their `kind` label in /metrics."""
        kinds = dict(facts.drafter_kinds)
        self._kinds_seen.update(kinds)
        return kinds

    def _warmup(self, engine: Engine) -> None:
        """A short speculative and a short plain greedy request, so the first client does not pay
        for lazy setup, nor (with --compile) for compiling the prefill, tree and 1-token shapes."""
        ids = list(engine.tokenizer("Hello")["input_ids"]) or [0]
        for request_id, policy in (("warmup", "auto"), ("warmup-plain", "none")):
            engine.add_request(request_id, ids, SamplingParams(max_new_tokens=4, ignore_eos=True),
                               policy)
            started = time.monotonic()
            while engine.has_unfinished() and time.monotonic() - started < 600:
                engine.step()
            engine.abort(request_id)
        engine.forget_costs()  # the warm-up measured lazy set-up, not the load

    def _apply_commands(self, engine: Engine) -> None:
        while True:
            with self._lock:
                if not self._commands:
                    return
                kind, arg = self._commands.popleft()
            if kind == "add":
                self._check(engine, *arg)
            elif kind == "abort":
                self._abort(engine, arg, None)
            else:
                self._run_call(engine, *arg)

    def _check(self, engine: Engine, batch: list[_Tracked], checked: asyncio.Future[None]) -> None:
        """Queue a request's choices if the engine accepts every one, else refuse them all."""
        for tracked in batch:
            spec = tracked.spec
            try:
                engine.check_request(spec.prompt_ids, spec.params, spec.policy)
            except Exception as exc:
                with self._lock:
                    self._in_flight -= len(batch)
                _settle(tracked.loop, checked, engine_error(exc, spec.prompt_param))
                return
        self._waiting.extend(batch)
        _settle(batch[0].loop, checked, None)

    def _run_call(self, engine: Engine, fn: Callable[[Engine], Any], future: Any) -> None:
        try:
            future.set_result(fn(engine))
        except Exception as exc:
            future.set_exception(exc)
        self.info = self._snapshot(engine)

    def _expire(self, engine: Engine) -> None:
        now = time.monotonic()
        expired = [t for t in (*self._waiting, *self._running.values()) if t.deadline <= now]
        for tracked in expired:
            self._abort(engine, tracked.spec.request_id, request_timeout(self.request_timeout_s))

    def _admit(self, engine: Engine) -> None:
        while self._waiting and len(self._running) < self.max_running:
            tracked = self._next_waiting()
            spec = tracked.spec
            try:
                engine.add_request(
                    spec.request_id, spec.prompt_ids, spec.params, spec.policy, session=spec.session
                )
            except Exception as exc:  # the pool changed while it waited (fixed:<a removed drafter>)
                error = engine_error(exc, spec.prompt_param)
                self._finish(tracked, Update(spec.request_id, finished=True, error=error))
                continue
            tracked.started_at = time.monotonic()
            self._running[spec.request_id] = tracked
            if self.metrics:
                self.metrics.queue_time.observe(tracked.started_at - tracked.submitted_at)
        self._observe_load()

    def _next_waiting(self) -> _Tracked:
        """The waiting request admitted next: the lowest `priority` value first (vLLM's
        convention), in arrival order among equals."""
        best = min(self._waiting, key=lambda t: t.spec.priority)
        self._waiting.remove(best)
        return best

    def _step(self, engine: Engine) -> None:
        try:
            outputs = engine.step()
        except Exception:
            # A bug in a round must not kill the worker or leave clients hanging: fail the
            # requests that were running (one of them triggered it) and keep serving.
            log.exception("engine step failed")
            err = APIError("The engine failed while generating.", status=500, type="server_error")
            self._abort_all(engine, err)
            return
        if self.metrics:
            self.metrics.observe_step([o.round for o in outputs if o.round is not None])
            self.metrics.observe_head_setting(engine.head_setting())
        for out in outputs:
            self._deliver(out)

    def _deliver(self, out: RoundOutput) -> None:
        tracked = self._running.get(out.request_id)
        if tracked is None:
            return  # aborted while its round ran
        tracked.last_stats = out.stats
        if out.error:  # the engine isolated a failed round to this request
            log.error("request %s failed in the engine: %s", out.request_id, out.error)
            err = APIError("The engine failed while generating.", status=500, type="server_error")
            self._end(tracked, Update(out.request_id, finished=True, stats=out.stats, error=err))
            return
        if out.round is not None:
            self._record_round(tracked, out.round, out.stats)
        update = Update(
            out.request_id,
            list(out.token_ids),
            out.logprobs,
            out.finished,
            out.finish_reason,
            out.stats if out.finished else None,
            prompt_logprobs=out.prompt_logprobs,
        )
        if out.finished:
            self._end(tracked, update)
        else:
            _put(tracked, update)

    def _end(self, tracked: _Tracked, update: Update) -> None:
        """The engine finished this running request: its last update, events and gauges."""
        del self._running[update.request_id]
        self._finish(tracked, update)
        self._publish_finished(tracked, update)
        self._observe_load()

    def _abort(self, engine: Engine, request_id: str, error: APIError | None) -> None:
        tracked = self._running.pop(request_id, None)
        if tracked is not None:
            engine.abort(request_id)
        else:
            tracked = next((t for t in self._waiting if t.spec.request_id == request_id), None)
            if tracked is None:
                return
            self._waiting.remove(tracked)
        # Stats so far ride on the abort acknowledgement: a request ended by a stop string
        # still reports its speculative-decoding metrics.
        update = Update(request_id, finished=True, stats=tracked.last_stats, error=error)
        self._finish(tracked, update)
        self._publish_finished(tracked, update)
        self._observe_load()

    def _abort_all(self, engine: Engine, error: APIError) -> None:
        for request_id in [*self._running, *(t.spec.request_id for t in self._waiting)]:
            self._abort(engine, request_id, error)

    def _finish(self, tracked: _Tracked, update: Update) -> None:
        with self._lock:
            self._in_flight -= 1
        _put(tracked, update)

    # ---- observability (worker thread) -------------------------------------------------------

    def _observe_load(self) -> None:
        if self.metrics:
            self.metrics.running.set(len(self._running))
            self.metrics.waiting.set(len(self._waiting))

    def _record_round(self, tracked: _Tracked, rs: RoundStats, stats: StatsSnapshot) -> None:
        if self.metrics:
            kind = self._kinds_seen.get(rs.drafter, "eagle3") if rs.drafter else None
            self.metrics.observe_round(rs, policy=stats.policy, kind=kind)
        if self.events is not None and self.events.has_subscribers:
            spec = tracked.spec
            if not tracked.events_started:
                tracked.events_started = True
                self.events.publish(started_event(spec.request_id, stats, spec.params,
                                                  self._kinds_seen))
            elapsed = time.monotonic() - tracked.started_at
            self.events.publish(round_event(spec.request_id, rs, stats, elapsed))

    def _publish_finished(self, tracked: _Tracked, update: Update) -> None:
        if self.metrics and update.stats is not None:
            self.metrics.observe_request_stats(update.stats)
        if self.events is not None and self.events.has_subscribers:
            self.events.publish(
                finished_event(
                    tracked.spec.request_id,
                    finish_reason=update.finish_reason,
                    error=update.error.message if update.error else None,
                    elapsed_s=time.monotonic() - tracked.submitted_at,
                    stats=update.stats,
                    prompt=tracked.spec.prompt_text,
                )
            )


def _put(tracked: _Tracked, update: Update) -> None:
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens any more
        tracked.loop.call_soon_threadsafe(tracked.sink.put_nowait, update)


def _settle(loop: asyncio.AbstractEventLoop, future: asyncio.Future[None],
            error: APIError | None) -> None:
    """Answer a waiting `submit` from the worker thread."""

    def settle() -> None:
        if future.done():  # the caller stopped waiting
            return
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)

    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
        loop.call_soon_threadsafe(settle)


def engine_error(exc: Exception, prompt_param: str) -> APIError:
    """The engine's refusal of a request as the OpenAI error that names the field at fault."""
    if isinstance(exc, ContextLengthError):
        return context_length_exceeded(
            max_context=exc.max_context,
            prompt_tokens=exc.prompt_tokens,
            max_tokens=exc.max_new_tokens,
            param=prompt_param,
        )
    if isinstance(exc, PolicyError):
        return invalid_request(str(exc), param="hedgespec.policy", code="invalid_policy")
    if isinstance(exc, ValueError):  # the engine's other RequestErrors, a bad grammar
        return invalid_request(str(exc), code="invalid_value")
    log.error("the engine could not check a request", exc_info=exc)
    return APIError("The engine failed while checking the request.", status=500,
                    type="server_error")
