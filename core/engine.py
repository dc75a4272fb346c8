"""SpecEngine: runs requests round by round. One round of one request (DESIGN.md section 3):

  1. the request's learner picks drafter i_t            (policy)
  2. i_t grows a draft tree from the root               (draft)
  3. the target verifies the tree in one forward pass   (verify)
  4. lossless acceptance, KV compaction                 (verify)
  5. every drafter catches up on the verified pairs and yields γ; completed feedback windows
     update the learner                                  (evaluate)
     Only the counterfactual learners need step 5 for every drafter: under a fixed drafter,
     UCBSpec or EXP3Spec the chosen drafter alone catches up, lazily, when it drafts
     (`EngineConfig.evaluate_all` restores full evaluation for their regret statistics).

`step()` runs one step (core/batching/scheduler.py; round, step and pass are defined in
core/__init__.py): every running request (up to `max_running`) gets a round, their trees
verified in one target pass, while prompts are prefilled in chunks beside them. With batching
off (EngineConfig.batching) a step holds the next request alone, in round-robin order, through
the same code. Either way every stream makes progress. The engine is not thread-safe: one
worker thread owns it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path

from core.batching.head_rows import HeadRows
from core.batching.scheduler import BatchScheduler
from core.config import LEARNER_NAMES, EngineConfig, SamplingParams
from core.decoding.request import Policy, RequestState, arm_prior, parse_policy
from core.errors import ContextLengthError, DrafterLoadError, PolicyError, RequestError
from core.model.eagle3 import Eagle3Drafter, load_drafter
from core.model.static_shapes import StaticShapes
from core.model.target import Target, TargetLoadError
from core.pool_file import PoolFile, load_pool_file
from core.round_output import RoundOutput
from core.selection.arm_costs import StepCosts
from core.selection.learner_sessions import LearnerSessions
from core.selection.learners import NormalHedge
from core.selection.router import PromptRouter
from core.served_facts import ServedFacts
from core.speculation.drafter_pool import Member, PoolSnapshot
from core.speculation.grammar import GrammarCompiler, GrammarTrail
from core.speculation.model_free.base import ModelFreeDrafter
from core.speculation.model_free.kinds import make_model_free
from core.stats import RoundStats, StatsSnapshot
from eagle3_format.target_fit import compatibility_problems

# Share of the router's probabilities in the prior of policy normalhedge_router; the rest is
# uniform. Half keeps every drafter at 1/(2N) or more while a confident route still starts the
# learner with more than half its weight on the routed drafter.
ROUTER_PRIOR_MIX = 0.5

log = logging.getLogger(__name__)


class SpecEngine:
    def __init__(self, target: Target, drafters: Mapping[str, Member], config: EngineConfig,
                 model_name: str | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.target = target
        self.deterministic = _use_numerics(target, config.deterministic)
        # What every in-place measurement reads (the time loss's round costs, the phase times
        # in the statistics). A test of a choice made from measured time
        # passes a modelled clock, so the choice follows the costs it models on any CPU.
        self.clock = clock
        self.config = config
        self.tokenizer = target.tokenizer
        self.model_name = model_name or "target"
        self.snapshot = PoolSnapshot({})
        for did, d in drafters.items():
            if isinstance(d, Eagle3Drafter):
                self._check(did, d)
        self.snapshot = PoolSnapshot(dict(drafters))
        limit = target.max_positions - config.tree.depth - 2
        self.max_context = min(config.max_context, limit)
        self._requests: dict[str, RequestState] = {}
        self.sessions = LearnerSessions(config.selector.max_sessions)
        self._order: list[str] = []
        self._next = 0
        # Which LM-head rows a verified tree gets up front (a rule by device).
        self.head_rows = HeadRows(config.verify_logits, config.device, target.packed_head)
        # What rounds cost per arm and batch size, measured in place (the "time" loss).
        self.costs = StepCosts()
        self._batch = BatchScheduler(target, config, self.head_rows, clock, self.costs)
        self._grammars: GrammarCompiler | None = None
        # The static baseline policy `router` (core/selection/router.py), when the pool ships one.
        self.router: PromptRouter | None = None
        self.pool_sampling: dict[str, float] = {}  # the pool file's sampling defaults

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def from_dirs(cls, target_dir: Path, drafters: list[tuple[str, Path]], config: EngineConfig,
                  model_name: str | None = None) -> SpecEngine:
        aux = _aux_from_drafters([p for _, p in drafters])
        # Compiled on a GPU: static shapes, so that CUDA graphs carry the passes.
        static = (StaticShapes.for_engine(config.max_context, config.max_running)
                  if config.compile and config.device.startswith("cuda") else None)
        target = Target.load(target_dir, device=config.device, dtype=config.dtype, aux_layers=aux,
                             device_map=config.device_map, compile_model=config.compile,
                             static_shapes=static)
        engine = cls(target, {}, config, model_name or Path(target_dir).name)
        for did, path in drafters:
            engine.add_drafter(did, path)
        return engine

    @classmethod
    def from_pool_file(cls, pool_json: Path, config: EngineConfig,
                       model_name: str | None = None) -> SpecEngine:
        """The engine serving a pool file (core/pool_file.py); raises `PoolFileError` for a bad
        file before any weights load."""
        return cls.from_pool(load_pool_file(pool_json), config, model_name)

    @classmethod
    def from_pool(cls, pool: PoolFile, config: EngineConfig,
                  model_name: str | None = None) -> SpecEngine:
        """The pool's target (a provisioned one converted first, core/provision/), its drafters
        in the file's order, EAGLE-3 and model-free interleaved as listed, its router and its
        sampling defaults. The served model id: `model_name`, else the file's, else the target
        directory's name."""
        target_dir = pool.target.directory()
        drafters = [(d.id, d.path) for d in pool.eagle3 if d.path is not None]
        engine = cls.from_dirs(target_dir, drafters, config,
                               model_name or pool.model_name or target_dir.name)
        free = {d.id: make_model_free(d.kind, d.params) for d in pool.drafters if d.model_free}
        members = {**engine.snapshot.members, **free}
        engine.snapshot = PoolSnapshot({d.id: members[d.id] for d in pool.drafters},
                                       engine.snapshot.groups)
        engine.configure_from_pool(pool)
        return engine

    def configure_from_pool(self, pool: PoolFile) -> None:
        """What a pool file adds to its target and drafters: the prompt router of policy
        `router`, and sampling defaults over the target's (`"generation_config"`, checked when
        the file was read)."""
        if pool.router is not None:
            self.load_router(pool.router)
        if pool.generation_config is not None:
            self.pool_sampling = {k: float(v) for k, v in pool.generation_config.items()}

    @property
    def sampling_defaults(self) -> dict[str, float]:
        """What a request that leaves temperature, top_p or top_k out is sampled with: the
        target's generation_config.json, then the pool file's (core/model/sampling_defaults.py)."""
        return {**self.target.sampling_defaults, **self.pool_sampling}

    def load_router(self, path: Path) -> None:
        """The prompt router of policy `router` (core/selection/router.py)."""
        self.router = PromptRouter.load(path)

    def load_drafter(self, path: Path, subfolder: str | None = None) -> Eagle3Drafter:
        dtype = self.target.dtype
        return load_drafter(path, subfolder=subfolder,
                            embed_tokens=self.target.model.get_input_embeddings(),
                            dtype=dtype, device=self.target.device)

    def _check(self, drafter_id: str, d: Eagle3Drafter) -> None:
        cfg = {"hidden_size": self.target.hidden_size, "vocab_size": self.target.vocab_size,
               "num_hidden_layers": self.target.num_layers}
        problems = compatibility_problems(d.cfg, cfg, self.target.aux_layers)
        if problems:
            raise DrafterLoadError(f"drafter {drafter_id!r} is incompatible: "
                                   + "; ".join(problems))

    # -- pool ----------------------------------------------------------------------------------
    def drafter_ids(self) -> list[str]:
        return list(self.snapshot.ids)

    def add_drafter(self, drafter_id: str, path: Path, subfolder: str | None = None) -> None:
        """Load, check and add a drafter; requests already running keep their snapshot."""
        drafter = self.load_drafter(Path(path), subfolder)
        self.add_loaded_drafter(drafter_id, drafter)

    def add_loaded_drafter(self, drafter_id: str, drafter: Eagle3Drafter) -> None:
        self._check(drafter_id, drafter)
        self.snapshot = self.snapshot.with_drafter(drafter_id, drafter)

    def add_model_free(self, drafter_id: str, drafter: ModelFreeDrafter) -> None:
        """Add a drafter with no weights (core/speculation/model_free/); running requests keep their
        snapshot."""
        self.snapshot = self.snapshot.with_drafter(drafter_id, drafter)

    def drafter_kind(self, drafter_id: str) -> str:
        """"eagle3", or a model-free drafter's kind ("ngram", "suffix")."""
        return self.snapshot.kind(drafter_id)

    def remove_drafter(self, drafter_id: str) -> None:
        if drafter_id in self.snapshot.ids:
            self.snapshot = self.snapshot.without(drafter_id)

    def runtime_pool(self) -> SpecEngine:
        """What changes this pool while the engine serves (a front end's registry sync, on the
        thread that owns the engine): the engine itself, through `drafter_ids`, `load_drafter`,
        `add_loaded_drafter`, `add_model_free` and `remove_drafter`. The capability is declared,
        not probed: an engine whose pool is fixed at load answers None."""
        return self

    def facts(self) -> ServedFacts:
        """What a front end reports about this engine (core/served_facts.py), read on the
        thread that owns it."""
        return ServedFacts(
            has_router=self.router is not None,
            sampling_defaults=dict(self.sampling_defaults),
            drafter_kinds={i: self.drafter_kind(i) for i in self.snapshot.ids},
            aux_layers=tuple(self.target.aux_layers),
            deterministic=self.deterministic,
        )

    def head_setting(self) -> str:
        """Which rows verification's LM head computes, in words: "visited" or "all"
        (core/batching/head_rows.py; a front end reports it)."""
        return self.head_rows.describe()

    # -- requests --------------------------------------------------------------------------------
    def check_request(self, prompt_ids: list[int], params: SamplingParams,
                      policy: str = "auto") -> Policy:
        """The one validation of a request: raises ContextLengthError, PolicyError or another
        RequestError when the engine cannot serve it, else returns its resolved policy (a
        routed one without its drafter yet). Front ends call it to refuse a request before
        they answer; `add_request` calls it again against the pool of that moment."""
        if not prompt_ids:
            raise RequestError("prompt must contain at least one token")
        if params.max_new_tokens < 1:
            raise RequestError("max_new_tokens must be >= 1")
        if len(prompt_ids) + params.max_new_tokens > self.max_context:
            raise ContextLengthError(max_context=self.max_context, prompt_tokens=len(prompt_ids),
                                     max_new_tokens=params.max_new_tokens)
        if any(not 0 <= t < self.target.vocab_size for t in prompt_ids):
            raise RequestError("prompt contains token ids outside the vocabulary")
        return parse_policy(policy, self.config.selector.policy, self.snapshot.ids,
                            self.router is not None)

    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
                    policy: str = "auto", session: str | None = None) -> None:
        """Queue a request. With `session`, a learner policy starts from the learner state the
        session's last finished request ended with (core/selection/learner_sessions.py)."""
        if request_id in self._requests:
            raise ValueError(f"duplicate request id {request_id!r}")
        resolved = self.check_request(prompt_ids, params, policy)
        if resolved.routed:
            resolved = replace(resolved, name=self._route(prompt_ids))
        if resolved.router_prior:
            resolved = replace(resolved, prior=self._router_prior(prompt_ids))
        state = RequestState.create(request_id, list(prompt_ids), params, resolved, self.snapshot,
                                    self.config, eos_ids=self.target.eos_token_ids,
                                    costs=self.costs)
        if session is not None and resolved.kind == "learner" and state.learner is not None:
            state.session = session
            warm = self.sessions.take(session, resolved.name, state.arm_ids)
            if warm is not None:
                assert state.arms is not None
                state.arms.learner, state.stats.warm_start_requests = warm.learner, warm.requests
                prior = arm_prior(resolved.prior, state.plain_arm)
                if prior is not None and isinstance(warm.learner, NormalHedge):
                    warm.learner.set_prior(prior)  # this prompt's, not the first's
        if params.grammar is not None:
            state.matcher = self.grammar_compiler().matcher(params.grammar)
            state.grammar_trail = GrammarTrail(state.matcher, state.token_ids, len(prompt_ids))
        self._requests[request_id] = state
        self._order.append(request_id)

    def _route(self, prompt_ids: list[int]) -> str:
        """The router's pick for this prompt; a label the pool no longer serves falls back to
        the pool's first drafter (the generalist in the shipped pool)."""
        assert self.router is not None  # check_request resolves `router` only with one
        did = self.router.route(prompt_ids)
        return did if did in self.snapshot.ids else self.snapshot.ids[0]

    def _router_prior(self, prompt_ids: list[int]) -> tuple[float, ...]:
        """The learner's prior over this request's pool: the router's probabilities, mixed
        half and half with uniform so that every drafter keeps at least 1/(2N) (a wrong route
        then costs the learner at most ln 2 in its regret bound's log term); a drafter the
        router has no label for gets the uniform half only."""
        assert self.router is not None  # check_request resolves the policy only with one
        probs = self.router.probabilities([prompt_ids])[0]
        by_label = dict(zip(self.router.labels, probs.tolist(), strict=True))
        ids = self.snapshot.ids
        routed = [by_label.get(d, 0.0) for d in ids]
        total = sum(routed) or 1.0
        return tuple(ROUTER_PRIOR_MIX * r / total + (1.0 - ROUTER_PRIOR_MIX) / len(ids)
                     for r in routed)

    def grammar_compiler(self) -> GrammarCompiler:
        """The target tokenizer in the grammar engine's form, built on first use."""
        if self._grammars is None:
            if self.tokenizer is None:
                raise ValueError("structured outputs need the target's tokenizer")
            self._grammars = GrammarCompiler(self.tokenizer, self.target.vocab_size,
                                             self.target.eos_token_ids)
        return self._grammars

    def abort(self, request_id: str) -> None:
        if self._requests.pop(request_id, None) is not None:
            self._order.remove(request_id)
        self._batch.release(request_id)

    def forget_costs(self) -> None:
        """The in-place measurements (the time loss's cost model, the start levels' savings)
        start over: a warm-up's steps pay lazy set-up (first calls, allocations) that is not
        what the load costs. Left in, the server's four-token warm-up on "Hello" ended its try
        of the awake level with a loss, and no request started awake at one stream for the
        next 16 starts (bench/results/time_loss_gateway.md, 2026-12-06 03:27: every round plain
        at one stream, where drafting every round ran 1.31x plain decoding)."""
        self.costs.reset()

    def has_unfinished(self) -> bool:
        return bool(self._requests)

    def num_active(self) -> int:
        return len(self._requests)

    def step(self) -> list[RoundOutput]:
        """One step: the running requests' rounds (the first `max_running` by arrival) verified
        in one target pass beside prompt chunks; with batching off, a step of the next request
        alone, in round-robin order (what bench/batching/batching_bench.py compares batching
        with)."""
        if self.config.batching:
            return self._step_batched([self._requests[rid]
                                       for rid in self._order[: self.config.max_running]])
        if not self._order:
            return []
        self._next %= len(self._order)
        state = self._requests[self._order[self._next]]
        outs = self._step_batched([state])
        if not any(o.finished for o in outs):
            self._next += 1  # a finished request left the order: the next one moved up
        return outs

    def _step_batched(self, states: list[RequestState]) -> list[RoundOutput]:
        outs = []
        for result in self._batch.step(states):
            state = result.state
            if result.error is not None:
                out = RoundOutput(state.request_id, result.tokens, state.take_logprobs(), True,
                                  "error", result.round, state.stats.snapshot(),
                                  f"{type(result.error).__name__}: {result.error}")
            else:
                out = self._round_output(state, result.tokens, result.round)
            if out.finished:
                self._finish(state, out)
            outs.append(out)
        return outs

    def _finish(self, state: RequestState, out: RoundOutput) -> None:
        """Drop a finished request; keep its learner for the session's next request unless the
        request failed (its last round may have left the learner half-updated)."""
        self.abort(state.request_id)
        if state.lookups is not None and out.error is None:
            state.lookups.finish(state.token_ids, state.prompt_len)  # cross-request caches
        if state.session is not None and state.learner is not None and out.error is None:
            self.sessions.put(state.session, state.policy.name, state.arm_ids, state.learner,
                              state.stats.warm_start_requests + 1)

    def _round_output(self, state: RequestState, tokens: list[int],
                      rstats: RoundStats | None) -> RoundOutput:
        logprobs = state.take_logprobs()
        prompt_lps, state.prompt_logprobs = state.prompt_logprobs, None
        return RoundOutput(state.request_id, tokens, logprobs, state.finished, state.finish_reason,
                           rstats, state.stats.snapshot(), prompt_logprobs=prompt_lps)

    # -- convenience -----------------------------------------------------------------------------
    def generate(self, prompt_ids: list[int], params: SamplingParams, policy: str = "auto",
                 request_id: str | None = None,
                 session: str | None = None) -> Iterator[RoundOutput]:
        """Run one request to completion (no other requests interleaved)."""
        rid = request_id or f"gen-{time.monotonic_ns()}"
        self.add_request(rid, prompt_ids, params, policy, session)
        state = self._requests[rid]
        while True:  # steps of this request alone (a prompt chunk that leaves more yields nothing)
            outs = self._step_batched([state])
            yield from outs
            if any(o.finished for o in outs):
                return

    def generate_ids(self, prompt_ids: list[int], params: SamplingParams, policy: str = "auto",
                     session: str | None = None) -> tuple[list[int], StatsSnapshot]:
        ids: list[int] = []
        stats = None
        for out in self.generate(prompt_ids, params, policy, session=session):
            ids.extend(out.token_ids)
            stats = out.stats
        assert stats is not None
        return ids, stats


def _aux_from_drafters(paths: list[Path]) -> tuple[int, int, int] | None:
    """Honour the aux layers a drafter checkpoint records (all drafters must agree)."""
    from core.model.eagle3 import read_config

    for p in paths:
        try:
            cfg = read_config(p)
        except DrafterLoadError:
            continue
        if cfg.aux_layers is not None:
            return cfg.aux_layers
    return None


__all__ = ["LEARNER_NAMES", "ContextLengthError", "PolicyError", "RequestError", "RoundOutput",
           "SpecEngine"]


def _use_numerics(target: Target, mode: str) -> bool:
    """Whether `target` runs canonical numerics (EngineConfig.deterministic): "auto" where it
    can, "on" or a TargetLoadError saying why not, "off" the library's kernels."""
    if mode == "off":
        return False
    problem = target.use_canonical_numerics()
    if problem is None:
        return True
    if mode == "on":
        raise TargetLoadError(problem)
    log.warning("deterministic numerics off: %s", problem)
    return False
