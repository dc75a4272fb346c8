"""Suffix decoding (`suffix`, SuffixDecoding, arXiv 2411.04975): the next token is scored by
how often it followed the longest suffix of the sequence (up to max_n tokens) that occurred
before, in the request's own tokens (prompt, then committed output) or in a cache of recent
finished responses of the same target. Unlike `ngram` (the latest occurrence of a short
n-gram) it returns up to top_k candidates with logp = log(share of the occurrences), and its
cache lets a request draft text that an earlier request produced (agent loops, repeated
JSON, a re-asked question).

Index: each source keeps a trie over contexts read backwards (the root's child for token a is
the context "a", that node's child for b is "b a") whose nodes count their followers. One walk
from the root along the sequence's end, last token first, meets the context of every length
in turn, so a guess and each indexed token cost max_n dict steps. The longer match of the two
sources wins; at equal length their counts add, the request's own occurrences weighing
own_weight times a cache one: its prompt is the material the answer quotes or edits, while
up to max_cached_responses answers to other prompts pile up counts that would otherwise drown
a single in-request occurrence.

Cost (2-core CPU, Python 3.11, defaults): a guess over a 2,000-token request with 128 cached
responses takes about 5 µs (7-9 µs with an 8-token tail); indexing a token about 2-7 µs; memory
about 0.7 KB per indexed token, 0.9 KB per cached one. arctic-inference 0.3.0's C++
`SuffixDecodingCache` works without vLLM or CUDA (6-8 µs a speculation, 1.6 ms to index 2,000
tokens), but its setup.py imports torch, so `pip install` builds in an environment holding
torch and its CUDA wheels (2.7 GB, 153 s here), and it drafts from its own tree, with no
one-step guess over an unindexed tail (which the exact counterfactual evaluation needs).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

from core.speculation.model_free.base import Guess, Lookup, ModelFreeDrafter, OutputGrammar

# Chosen on replays of the demo target's greedy rollouts (200 per domain, chains of 8): max_n
# 3 to 8 agree within 0.02 MAT except on sql, where 6 is best (2.86, 2.79 at 8); own_weight 8
# beats 1 by up to 0.03; 128 cached answers add up to 0.08 MAT over 64, 256 under 0.01 more;
# the top 3 hold 64% of the next tokens of awake guesses, the top 1 57%, the top 4 65%.
SUFFIX_DEFAULTS = {
    "max_n": 6,
    "top_k": 3,
    "own_weight": 8,
    "max_cached_responses": 128,
    "max_depth": 8,
    # nodes a tree keeps: the CPU EAGLE tree's 12 (core/config.CPU_TREE), which verifies in
    # about 1.4x a one-token pass (bench/results/forward_cost.md)
    "total_tokens": 12,
}

# (name, lowest, highest) of each parameter but max_depth, which the base class checks
_RANGES = (
    ("max_n", 1, 32),
    ("top_k", 1, 16),
    ("own_weight", 1, 1000),
    ("max_cached_responses", 0, 4096),
    ("total_tokens", 1, 64),
)


class SuffixDrafter(ModelFreeDrafter):
    kind = "suffix"

    def __init__(
        self,
        max_n: int = 6,
        top_k: int = 3,
        own_weight: int = 8,
        max_cached_responses: int = 128,
        max_depth: int = 8,
        total_tokens: int = 12,
    ) -> None:
        values = {"max_n": max_n, "top_k": top_k, "own_weight": own_weight,
                  "max_cached_responses": max_cached_responses, "total_tokens": total_tokens}
        for name, low, high in _RANGES:
            if not low <= values[name] <= high:
                raise ValueError(f"suffix {name} must be in [{low}, {high}], got {values[name]}")
        super().__init__(max_depth, top_k, total_tokens)
        self.max_n, self.top_k, self.own_weight = max_n, top_k, own_weight
        self.max_cached_responses = max_cached_responses
        self.cache = ContextIndex(max_n)
        # the cached responses, oldest first: (tokens, index of the first output token)
        self._cached: deque[tuple[list[int], int]] = deque()

    def start(self, tokens: Sequence[int], grammar: OutputGrammar | None = None) -> SuffixLookup:
        lookup = SuffixLookup(self)
        lookup.extend(tokens)
        return lookup

    def observe(self, tokens: Sequence[int], prompt_len: int) -> None:
        """Cache the output, with up to max_n prompt tokens before it so that the contexts of
        its first tokens are whole; evict the oldest response past max_cached_responses."""
        if prompt_len < 0:
            raise ValueError(f"prompt_len must be >= 0, got {prompt_len}")
        if self.max_cached_responses == 0 or prompt_len >= len(tokens):
            return
        begin = max(0, prompt_len - self.max_n)
        seq, first = [int(t) for t in tokens[begin:]], prompt_len - begin
        for p in range(first, len(seq)):
            self.cache.add(seq, p)
        self._cached.append((seq, first))
        while len(self._cached) > self.max_cached_responses:
            old, old_first = self._cached.popleft()
            for p in range(old_first, len(old)):
                self.cache.remove(old, p)

    @property
    def cached_responses(self) -> int:
        return len(self._cached)

    @property
    def params(self) -> dict[str, int]:
        return {"max_n": self.max_n, "top_k": self.top_k, "own_weight": self.own_weight,
                "max_cached_responses": self.max_cached_responses, "max_depth": self.max_depth,
                "total_tokens": self.total_tokens}


# A node's followers: (token, count) while there is one, else {token: count}
Followers = tuple[int, int] | dict[int, int]


class ContextIndex:
    """Follower counts of the contexts of 1..max_n tokens of some sequences, as a trie over
    each context read backwards (see the module docstring). A node exists while some context
    it stands for has a counted follower, so a walk stops at the longest context that occurred.

    Most nodes (long contexts) have one follower: they hold it as a (token, count) pair and
    get a dict only at a second distinct follower, which halves the memory (about 0.7 KB per
    indexed token at max_n 6 instead of 1.1 KB)."""

    def __init__(self, max_n: int) -> None:
        self.max_n = max_n
        self._child: dict[tuple[int, int], int] = {}  # (node, token before its context) -> node
        self._follow: dict[int, Followers] = {}  # node -> the tokens after it, counted
        self._new_node = 1  # node 0 is the root, the empty context, which counts nothing

    def __len__(self) -> int:
        return len(self._follow)

    def add(self, seq: Sequence[int], p: int) -> None:
        """Count seq[p] as the follower of each context seq[p-n:p], n = 1..max_n."""
        node, nxt = 0, seq[p]
        for i in range(p - 1, max(p - self.max_n, 0) - 1, -1):
            key = (node, seq[i])
            node = self._child.get(key, 0)
            if node:
                self._follow[node] = _bumped(self._follow[node], nxt)
            else:
                node = self._child[key] = self._new_node
                self._new_node += 1
                self._follow[node] = (nxt, 1)

    def remove(self, seq: Sequence[int], p: int) -> None:
        """Undo add(seq, p), dropping the nodes left with no follower. Deepest first: a longer
        context's occurrences are a subset of the shorter one's, so a node's children are
        already gone when it empties."""
        edges, node, nxt = [], 0, seq[p]
        for i in range(p - 1, max(p - self.max_n, 0) - 1, -1):
            key = (node, seq[i])
            node = self._child[key]
            edges.append((key, node))
        for key, node in reversed(edges):
            left = _dropped(self._follow[node], nxt)
            if left is None:
                del self._follow[node], self._child[key]
            else:
                self._follow[node] = left

    def deepest(self, back: Sequence[int]) -> tuple[int, dict[int, int]]:
        """Given the sequence's last tokens, latest first: the length n <= max_n of the
        longest context (back[:n], reversed) that occurred, and its follower counts; (0, {})
        when none did."""
        node, n = 0, 0
        for tok in back[: self.max_n]:
            nxt = self._child.get((node, tok))
            if nxt is None:
                break
            node, n = nxt, n + 1
        return n, (_as_dict(self._follow[node]) if n else {})


def _bumped(follow: Followers, tok: int) -> Followers:
    if isinstance(follow, dict):
        follow[tok] = follow.get(tok, 0) + 1
        return follow
    only, count = follow
    return (tok, count + 1) if only == tok else {only: count, tok: 1}


def _dropped(follow: Followers, tok: int) -> Followers | None:
    """`follow` less one `tok`; None when nothing is left."""
    if isinstance(follow, tuple):
        return (follow[0], follow[1] - 1) if follow[1] > 1 else None
    follow[tok] -= 1
    if follow[tok] == 0:
        del follow[tok]
    return follow or None


def _as_dict(follow: Followers) -> dict[int, int]:
    return follow if isinstance(follow, dict) else {follow[0]: follow[1]}


class SuffixLookup(Lookup):
    def __init__(self, drafter: SuffixDrafter) -> None:
        self.max_n, self.top_k = drafter.max_n, drafter.top_k
        self.own_weight = drafter.own_weight
        self.cache = drafter.cache  # shared, read only here
        self.own = ContextIndex(drafter.max_n)
        self.tokens: list[int] = []

    def extend(self, tokens: Sequence[int]) -> None:
        for tok in tokens:
            self.tokens.append(int(tok))
            self.own.add(self.tokens, len(self.tokens) - 1)

    def guess(self, tail: Sequence[int] = ()) -> Guess:
        """Scores of the followers of the longest matching context. Occurrences whose follower
        lies in the tail count as the request's own, as extend(tail) would index them, so
        that guess(tail) equals guess() after extend(tail)."""
        # the last max_n committed tokens are all the context that the end or a tail
        # occurrence can reach back to
        window = [*self.tokens[-self.max_n :], *(int(t) for t in tail)]
        back = window[::-1]
        n_own, own = self.own.deepest(back)
        n_cache, cached = self.cache.deepest(back)
        in_tail = _tail_matches(window, len(tail), self.max_n)
        n = max(n_own, n_cache, *(m for m, _ in in_tail), 0)
        if n == 0:
            return Guess()
        score: dict[int, int] = {}
        if n_own == n:
            _add(score, own, self.own_weight)
        for m, tok in in_tail:
            if m >= n:
                score[tok] = score.get(tok, 0) + self.own_weight
        if n_cache == n:
            _add(score, cached, 1)
        return _top(score, self.top_k)


def _tail_matches(window: list[int], t: int, max_n: int) -> list[tuple[int, int]]:
    """For each of the last t tokens of `window` (the tail), in order: how many tokens (up to
    max_n) before it equal the window's last ones, and the token. O(t * max_n) compares."""
    end, out = len(window), []
    for q in range(end - t, end):
        m = 0
        while m < max_n and q - 1 - m >= 0 and window[q - 1 - m] == window[end - 1 - m]:
            m += 1
        out.append((m, window[q]))
    return out


def _add(score: dict[int, int], counts: dict[int, int], weight: int) -> None:
    for tok, c in counts.items():
        score[tok] = score.get(tok, 0) + weight * c


def _top(score: dict[int, int], k: int) -> Guess:
    """The k best-scored tokens, logp = log(score / total score). Ties go to the lower id, so
    the order depends on the counts alone, not on the history that built the index."""
    total = sum(score.values())
    best = sorted(score.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
    return Guess(tuple(t for t, _ in best), tuple(math.log(c / total) for _, c in best))
