"""The state of one generation request: its choices, and how an engine round becomes text.

Vocabulary: a *job* is one HTTP request; it has n *choices* (n per prompt for completions),
each one engine request. A choice is *done* when it will produce no more text (EOS, max
tokens, or a stop string found here) and *acked* once the engine has released it (its
finished update, or the acknowledgement of an abort).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from core.api import StatsSnapshot, TokenLogprob
from gateway.openai.protocol import SamplingFields
from gateway.openai.text import IncrementalDetokenizer, StopMatcher, TokenText
from gateway.openai.tools.parse import ToolParser
from gateway.runner import RequestSpec, Update


@dataclass
class Choice:
    index: int
    request_id: str
    detok: IncrementalDetokenizer
    stop: StopMatcher
    prefix: str = ""  # completions `echo`: the prompt text
    prompt_ids: list[int] = field(default_factory=list)  # `echo` with `logprobs` only
    prompt_logprobs: list[TokenLogprob | None] | None = None  # from the prefill's update
    completion_tokens: int = 0
    text: list[str] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    done: bool = False
    acked: bool = False
    stats: StatsSnapshot | None = None  # the engine's, from the finished update
    tools: ToolParser | None = None  # chat with tools: the text is parsed for calls

    def consume(self, update: Update) -> Delta | None:
        """Detokenize one round, token by token, cutting at the first stop string."""
        if update.finished:
            self.acked = True
            self.stats = update.stats or self.stats
        if update.prompt_logprobs is not None:
            self.prompt_logprobs = update.prompt_logprobs
        if self.done:
            return None  # ended by a stop string; this is the engine's late round or its ack
        pieces: list[str] = []
        lps: list[TokenLogprob] = []
        offsets: list[int] = []
        for i, token_id in enumerate(update.token_ids):
            self.completion_tokens += 1
            offsets.append(len(self.prefix) + self.detok.text_len)
            if update.logprobs is not None and i < len(update.logprobs):
                lps.append(update.logprobs[i])
            text, stopped = self.stop.push(self.detok.push(token_id))
            pieces.append(text)
            if stopped:
                self._end("stop")
                break
        if update.finished and not self.done:
            text, stopped = self.stop.push(self.detok.flush())
            pieces.append(text if stopped else text + self.stop.flush())
            self._end("stop" if stopped else (update.finish_reason or "stop"))
        return Delta(self, "".join(pieces), lps, offsets, self.done,
                     prompt_logprobs=update.prompt_logprobs is not None)  # fmt: skip

    def _end(self, reason: str) -> None:
        self.done = True
        self.finish_reason = reason


@dataclass
class Delta:
    """What one engine round added to one choice."""

    choice: Choice
    text: str
    logprobs: list[TokenLogprob]
    offsets: list[int]
    finished: bool
    prompt_logprobs: bool = False  # this round carried the prompt's logprobs (the prefill)


@dataclass
class Job:
    """One HTTP request in flight: what the serving class built from it, and its progress.
    Plain data: the serving class that built it (chat or completions) frames its responses."""

    id: str
    created: int
    model: str
    fingerprint: str
    request: SamplingFields
    token_text: TokenText
    arrival: float
    session: str | None = None  # the engine's learner-session key: API key scope + client's id
    # What the request's missing temperature / top_p / top_k take (gateway/openai/sampling.py)
    sampling_defaults: dict[str, float] = field(default_factory=dict)
    choices: list[Choice] = field(default_factory=list)
    specs: list[RequestSpec] = field(default_factory=list)
    prompt_tokens: int = 0
    # Completions `echo` with `logprobs`: the prompt tokens' logprobs lead the choice's.
    echo_logprobs: bool = False
    sink: asyncio.Queue[Update] = field(default_factory=asyncio.Queue)
    first_token_at: float | None = None

    @property
    def logprobs(self) -> int | None:
        """Top alternatives per token when the request asked for logprobs, else None."""
        num: int | None = getattr(self.request, "num_logprobs", None)
        return num

    @property
    def completion_tokens(self) -> int:
        return sum(c.completion_tokens for c in self.choices)
