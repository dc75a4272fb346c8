"""Frozen configuration objects for the engine.

Symbols used across `core` (defined once here):
  p      target distribution over the target vocabulary (after penalties and logit_bias,
         temperature, top-p and top-k: p̃)
  q_d    drafter d's one-step distribution over its draft vocabulary
  K      tree depth = number of draft levels below the root (max accepted draft tokens/round)
  γ_d    probability that the verifier accepts one of drafter d's candidates at a tree level
         (which candidates: SelectorConfig.estimator, core/selection/counterfactual.py)
  ÂL_d   HedgeSpec's acceptance-length estimate for drafter d, in [1, K+1]
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

LearnerName = Literal["normalhedge", "adanormalhedge", "hedge", "ucbspec", "exp3spec"]
LEARNER_NAMES: tuple[str, ...] = ("normalhedge", "adanormalhedge", "hedge", "ucbspec", "exp3spec")
# The full-information learners: they take every arm's counterfactual loss each window.
COUNTERFACTUAL_LEARNERS: tuple[str, ...] = ("normalhedge", "adanormalhedge", "hedge")
# The policy of NormalHedge started from the prompt router's probabilities as its prior
# (core/selection/learners.py, core/engine.py); served when the pool ships a router.
ROUTER_PRIOR = "normalhedge_router"
# The learner's loss: the paper's acceptance losses ("length": 1 - ÂL/(K+1); "prob": 1 - γ at
# the first level) or the measured time per committed token, with plain decoding as one more
# arm ("time", core/selection/arm_costs.py; counterfactual learners only, bandits keep "length").
LossName = Literal["length", "prob", "time"]
# Counterfactual candidate sets (core/selection/counterfactual.py): the unpruned top_k ("topk", the
# paper's estimator as usually read) or the children the drafter's own tree would keep.
EstimatorName = Literal["topk", "tree"]


@dataclass(frozen=True)
class TreeConfig:
    """EAGLE-2/3 dynamic draft tree. `top_k=1` gives a chain of `depth` tokens.

    depth = K, the number of draft levels below the root, the first level included.
    total_tokens = drafted nodes kept after reranking; the root is not counted, so the target
    verifies total_tokens + 1 tokens per round. EAGLE counts both differently: its `depth`
    counts the levels after the first, and its `total_token` counts the root (`cnets.py` keeps
    `total_tokens - 1` drafted nodes). EAGLE-3's GPU defaults top_k 10, depth 7, total_token 60
    are therefore top_k=10, depth=8, total_tokens=59 here.
    These field defaults are what an accelerator serves (HedgeSpec 1.39x plain on the demo
    pool with them, bench/results/gpu_check.md); a CPU serves CPU_TREE (served_tree). Operators
    set each field with HEDGESPEC_TREE_TOP_K / _DEPTH / _TOTAL_TOKENS (gateway/config.py).
    """

    top_k: int = 4  # candidates kept per expanded node
    depth: int = 5  # K
    total_tokens: int = 20  # drafted nodes verified per round, root not counted

    def __post_init__(self) -> None:
        if self.top_k < 1 or self.depth < 1 or self.total_tokens < 1:
            raise ValueError("TreeConfig fields must be >= 1")
        # More nodes than the tree can ever propose would only pretend to a larger tree.
        pool = candidate_pool_size(self.top_k, self.depth)
        if self.total_tokens > pool:
            object.__setattr__(self, "total_tokens", pool)


def candidate_pool_size(top_k: int, depth: int) -> int:
    """Candidates a dynamic tree reranks: top_k at level 1, then top_k children for each of
    the top_k expanded nodes at every later level (EAGLE's k + D·k², D = depth - 1 here)."""
    return top_k + (depth - 1) * top_k * top_k


@dataclass(frozen=True)
class Penalties:
    """Logits adjustments of one request (applied in core/speculation/penalties.py); the defaults
    change nothing. Set from the request body (gateway/openai/protocol.SamplingFields.penalties)."""

    presence: float = 0.0  # OpenAI `presence_penalty`
    frequency: float = 0.0  # OpenAI `frequency_penalty`
    repetition: float = 1.0  # vLLM's `repetition_penalty` (1 = off)
    logit_bias: tuple[tuple[int, float], ...] = ()  # OpenAI `logit_bias`: (token id, bias)

    @property
    def active(self) -> bool:
        return bool(self.presence or self.frequency or self.repetition != 1.0 or self.logit_bias)


GrammarKind = Literal["json_schema", "regex", "lark"]


@dataclass(frozen=True)
class GrammarSpec:
    """A constraint on the output (core/speculation/grammar.py): a JSON schema (as JSON text), a
    regular expression or a Lark grammar. The target distribution is masked to what it allows at
    every position, so the output always matches it and losslessness holds for the constrained
    target. Set by the gateway from `response_format` (a JSON schema or object) and from `tools`
    with `tool_choice` (a Lark grammar of the calls, gateway/openai/tools/grammar.py)."""

    kind: GrammarKind
    source: str  # the schema's JSON text, the expression or the grammar


@dataclass(frozen=True)
class SamplingParams:
    """Per-request decoding parameters. temperature == 0 means greedy.

    Every field is an OpenAI request parameter (or vLLM's extension of it) that the gateway
    sets per choice (gateway/openai/serving.py, `_add_choice`); a request that leaves
    temperature / top_p / top_k out gets the served model's defaults
    (core/model/sampling_defaults.py), not these. Stop strings are matched on the text by the
    gateway (gateway/openai/text.py).
    """

    max_new_tokens: int = 64  # `max_tokens` / `max_completion_tokens`; else the context's room
    temperature: float = 0.0  # `temperature`
    top_p: float = 1.0  # `top_p`
    top_k: int = 0  # vLLM's `top_k`; 0 = off
    seed: int | None = None  # `seed` (+ the choice index); None: a fresh one
    ignore_eos: bool = False  # vLLM's `ignore_eos` (benchmarks that need exact lengths)
    # `logprobs` / `top_logprobs`. None: no logprobs; 0: logprob of the chosen token only;
    # n > 0: also the n most likely.
    logprobs: int | None = None
    # The same for every prompt token but the first (completions `echo`), from the prefill.
    prompt_logprobs: int | None = None
    penalties: Penalties = field(default_factory=Penalties)
    grammar: GrammarSpec | None = None  # `response_format` / forced `tools`

    @property
    def greedy(self) -> bool:
        # Below 1e-5 the scaled logits overflow float32; such a temperature is greedy anyway.
        return self.temperature < 1e-5


@dataclass(frozen=True)
class SelectorConfig:
    """How drafters are chosen per round.

    The served selector is `served_selector(device)`; operators set its fields through
    gateway/config.Settings (`--policy`, `--loss`, `--eval-every`, `--prompt-windows`,
    `--max-sessions`).
    """

    # What `hedgespec.policy: auto` means: "none" (plain decoding), "fixed:<drafter id>", a
    # learner name from LEARNER_NAMES or ROUTER_PRIOR (the operator's `--policy`). NormalHedge
    # by DESIGN §3 step 7 (parameter-free); MAT 1.83 against UCBSpec's 1.56 and EXP3Spec's 1.54
    # on the demo pool, AdaNormalHedge level at 1.84 (bench/results/hedgespec.md).
    policy: str = "normalhedge"
    # The operator's `--loss` (LossName above). Served: "time" (served_selector), time per
    # committed token with plain decoding as an arm, by measurement against the speculation
    # gate it replaced (bench/results/time_loss_held_out.md, time_loss_copy_heavy.md). Here the
    # paper's acceptance loss, which drafts every round: what the benchmarks comparing
    # drafters and policies measure. "prob" is the paper's other named loss (DESIGN §3.1).
    loss: LossName = "length"
    # "tree" by measurement on the demo pool (bench/results/hedgespec.md, estimator variants):
    # mean |ÂL - realised| 0.15 vs 0.25 for "topk", slope of realised on ÂL 0.85 vs 0.69,
    # saturated windows 5% vs 11%, HedgeSpec MAT 1.83 vs 1.81. Set only by that benchmark's
    # variants, which re-measure the choice; "topk" is the paper's estimator as usually read.
    estimator: EstimatorName = "tree"
    # Counterfactual evaluation every n-th round: between evaluations only the chosen drafter
    # catches up (in its draft copy, to draft); the n-th round's stacked pass runs every
    # drafter over all the pairs since the last one, so every position is still scored and its
    # feedback arrives up to n - 1 rounds later (NormalHedge's delayed feedback). On hardware
    # where a catch-up costs the drafters' weight reads rather than their arithmetic (a CPU;
    # one pair or ten cost about the same), this divides the evaluation cost by about n. The
    # rounds still deferred when a request ends go unscored, as a request's last round always
    # does. Served: default_eval_every(device) (the operator's `--eval-every`).
    eval_every: int = 1
    # Sessions whose learner is kept between requests (`hedgespec.session`,
    # core/selection/learner_sessions.py); least recently used forgotten beyond, 0: off. A session's
    # learner reached MAT 1.837 against 1.797 for a fresh one per request
    # (bench/results/sessions.md).
    max_sessions: int = 4096
    # The prompt's last positions scored as feedback windows before the first round
    # (core/decoding/prompt_feedback.py; counterfactual learners only). 0: the learner starts
    # uniform. Served: PROMPT_WINDOWS (the operator's `--prompt-windows`).
    prompt_windows: int = 0
    # How that evidence reaches the learner: "prior" (NormalHedge's starting weights, regrets
    # left at zero) or "losses" (full-weight losses, the form before issue 40, which let a
    # prompt whose domain differs from the answer's lock the answer's best drafter out).
    # Set only by bench/learner/prompt_windows.py, which measures both side by side
    # (bench/results/prompt_windows.md: MAT 0.958x / 0.976x the oracle's held out, 0.946x /
    # 0.927x when the answer's domain differs from the prompt's): the trade behind "prior".
    prompt_evidence: Literal["prior", "losses"] = "prior"

    def __post_init__(self) -> None:
        if self.eval_every < 1:
            raise ValueError(f"eval_every must be >= 1, got {self.eval_every}")
        if self.prompt_windows < 0:
            raise ValueError(f"prompt_windows must be >= 0, got {self.prompt_windows}")


# What `eval_every` the server uses when none is given: on a CPU a round's catch-up costs the
# drafters' weight reads (memory-bound: one pair or ten cost about the same), so scoring every
# drafter every 4th round (the chosen one drafts from its draft copy in between) took the
# evaluation from 11.9% to 3.8% of a round on the previous demo pool (bf16) at equal MAT, and
# from 8.3% to 3.2% on the shipped one (fp32; MAT 1.84 vs 1.80)
# (bench/results/hedgespec.md, side by side); on an accelerator the evaluation is a small share
# of the round and the paper's every-round schedule stays.
CPU_EVAL_EVERY = 4


def default_eval_every(device: str) -> int:
    return CPU_EVAL_EVERY if str(device).startswith("cpu") else 1


# Prompt positions scored before the first round by default (core/decoding/prompt_feedback.py), by
# measurement with the evidence fed as losses (the form before issue 40) on the shipped pool
# (bench/results/prompt_windows.md of 2026-12-04, greedy, 21 requests of 48 tokens;
# the current file compares the forms at 48): HedgeSpec's MAT 0.898x the per-request
# oracle's with none, 0.965x with 16, 0.987x with 48, 0.992x with 96 (fp32, tree (4, 5, 20));
# in bf16 with CPU_TREE 0.900x, 0.962x, 0.964x and 0.979x (0.973x with 32, within the run's
# noise). Past 48 the gain no longer pays for the extra LM-head rows of the prefill (about 2 ms
# each on a two-core CPU).
PROMPT_WINDOWS = 48


# The tree `hedgespec serve` drafts on a CPU, by measurement (bench/results/cpu_defaults.md,
# the generalist's tokens/s on the shipped pool, greedy): (3, 4, 12) led the tree sweep on two
# two-core VMs, 9% ahead of (4, 5, 20) in bf16 with native bf16 (2 passes each) and 14% in fp32
# without it. In bf16 on a CPU a 13-token pass costs 1.26x a one-token pass and a 21-token pass
# 1.38x (bench/results/forward_cost.md), while these drafters' MAT grows only from 1.62 to
# 1.67 between 13 and 21 verified tokens: the extra nodes cost more than the tokens they add.
CPU_TREE = TreeConfig(top_k=3, depth=4, total_tokens=12)


def served_tree(device: str) -> TreeConfig:
    """The draft tree `hedgespec serve` uses on `device` unless told otherwise."""
    return CPU_TREE if str(device).startswith("cpu") else TreeConfig()


def served_selector(device: str) -> SelectorConfig:
    """The selector `hedgespec serve` runs on `device` (benchmarks compare against it): the
    time loss, so each request's learner decides whether to speculate at all."""
    return SelectorConfig(loss="time", eval_every=default_eval_every(device),
                          prompt_windows=PROMPT_WINDOWS)


@dataclass(frozen=True)
class EngineConfig:
    """One engine's configuration. `hedgespec serve` builds it from gateway/config.Settings,
    which sets every field but evaluate_all and mask_drafts (operator settings, `--<name>` /
    HEDGESPEC_<NAME>); benchmarks and tests build their own. A field Settings leaves unset
    keeps the default here or the served one above (served_tree, served_selector)."""

    device: str = "cpu"  # torch device of target and drafters (`--device`)
    # Weights' precision (`--dtype`); the server's "auto" picks bf16 where the device computes
    # it natively (core/model/precision.auto_dtype). float32 here: greedy output is token-identical
    # to plain decoding in float32 only, which the tests and benchmarks compare against.
    dtype: str = "float32"
    # "auto" spreads a target that does not fit one GPU over the box's GPUs (accelerate's
    # layer placement: capacity, not speed); drafters then live on the first layer's device.
    # `--device-map`.
    device_map: str | None = None
    # torch.compile the target's forward (Target.compile_model, `--compile`): 2.2-3x faster
    # target passes at 8B on a GPU, at the price of about a minute of compilation per shape at
    # start (bench/results/gpu_check.md).
    compile: bool = False
    # Canonical numerics (`--deterministic`, core/model/canonical.py): a token's logits
    # bit-identical whatever tree, batch and padding verify it, so greedy output in bf16 does
    # not depend on the policy, streaming, concurrency or earlier requests. "auto": on where
    # the target can (a lean-forward family on a CPU with a C++ compiler), "on": refuse to
    # start elsewhere, "off": the library's kernels. Not a cost beyond 10%: plain decoding ran
    # 0.93-1.13x the library's kernels at 1-16 streams on an AMX Xeon, 1.10-1.23x on an
    # AVX512-BF16 CPU (bench/results/deterministic.md, docs/architecture.md).
    deterministic: str = "auto"
    tree: TreeConfig = field(default_factory=TreeConfig)
    selector: SelectorConfig = field(default_factory=SelectorConfig)
    # Prompt + max_new_tokens a request may ask for (`--max-context`; capped by the target's
    # positions); a request past it is refused with a 400 naming both (ContextLengthError).
    max_context: int = 2048
    # Evaluate every drafter each round even under policies that learn nothing from it (a fixed
    # drafter, UCBSpec, EXP3Spec), for their ÂL and regret statistics. Off in the server: those
    # policies pay only the chosen drafter's catch-up, as in a plain EAGLE engine (honest
    # baselines). Set by the tests that hold the estimator to realised lengths under a fixed
    # drafter (tests/core/test_model_free_engine.py, test_deferred_evaluation.py, ...): a
    # fixed drafter makes the trajectory independent of the learner.
    evaluate_all: bool = False
    # With a grammar, draft only tokens it allows (core/speculation/drafting.grow_tree): the
    # generalist's MAT 2.03 masked against 1.50 unmasked on a JSON schema
    # (bench/results/grammar.md). Off only in that benchmark, to measure what the masking buys; in
    # float32 the output is the same either way.
    mask_drafts: bool = True
    # Batched steps (core/batching/scheduler.py): a step runs one round for each of up to
    # `max_running` requests, every tree verified in one target pass. False: a step holds one
    # request, in round-robin order, through the same code (`--no-batching`, kept to measure what
    # batching buys: batched
    # 2.32x round-robin's aggregate tokens/s at 8 streams, bench/results/batching.md).
    batching: bool = True
    # Requests in one batched step (`--max-running`; more wait in the gateway's queue). The
    # aggregate tokens/s still grew from 8 to 16 streams (45.2 to 57.2 in-process, 52.4 to
    # 54.3 through the gateway, bench/results/batching.md) while each stream's inter-token
    # latency about doubled.
    max_running: int = 16
    # Tokens a step runs through the target: the trees of the round (so at most
    # max_step_tokens // (total_tokens + 1) rows), then prompt chunks with what is left, at
    # least a quarter of it. It bounds a step's latency: a long prompt is prefilled over
    # several steps instead of freezing the running streams (`--max-step-tokens`; 512 fits
    # max_running's 16 trees of either served tree, 21 or 13 tokens each, beside a prompt chunk).
    max_step_tokens: int = 512
    # Target logits of a verified tree: "visited" runs the LM head on the root up front and on
    # each further node the acceptance walk reaches (about MAT one-row calls), "all" on every
    # node in one call (a GPU, where 60 rows cost what one does and each further call is a
    # launch and a sync, and a CPU through the lean forward's packed head). "auto": "all",
    # except "visited" on a CPU whose head is a plain F.linear (core/batching/head_rows.py,
    # bench/results/verify_logits.md). The
    # committed tokens are the same either way. `--verify-logits` pins one
    # (bench/speed/verify_logits.py measures both).
    verify_logits: str = "auto"
    # Hybrid trees: the id of a model-free member whose tree is grafted onto the root of every
    # EAGLE-3 tree the learner chooses, when it has a guess (core/speculation/tree.merge_trees). The
    # learner still scores each member on its own tree (`--hybrid`). None: off (measured
    # against the single-kind arms in bench/results/model_free.md).
    hybrid: str | None = None

    def __post_init__(self) -> None:
        if self.max_running < 1 or self.max_step_tokens < 1:
            raise ValueError("max_running and max_step_tokens must be >= 1")
        if self.verify_logits not in ("auto", "visited", "all"):
            raise ValueError("verify_logits must be 'auto', 'visited' or 'all'")
        if self.deterministic not in ("auto", "on", "off"):
            raise ValueError("deterministic must be 'auto', 'on' or 'off'")


def cache_dir(env: str, leaf: str) -> Path:
    """Where the engine keeps what it builds once: `env` when set, else
    `$XDG_CACHE_HOME/hedgespec/<leaf>` (~/.cache/...): the provisioned targets
    (core/provision/target_cache.py), the compiled kernels (core/model/canonical.py)."""
    explicit = os.environ.get(env)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "hedgespec" / leaf
