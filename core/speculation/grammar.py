"""Grammar-constrained decoding (structured outputs) with llguidance, per draft-tree node.

A grammar masks the target distribution to the tokens it allows next. In a draft tree the
allowed set depends on the node's own path (the committed text plus the draft tokens from the
root down to it), so every node gets its own mask: the matcher consumes the path, computes the
mask and rolls back. Verification then runs on the masked target, so greedy output equals
constrained plain greedy decoding and sampling follows the constrained distribution.

llguidance was chosen by measurement (bench/results/grammar.md): its mask costs ~10 us a token
on the demo target's 49k vocabulary, against ~4 us for xgrammar, both negligible next to a
60 ms round, and it is a single 3 MB wheel with no dependencies (xgrammar pulls triton).
A request's grammar text and its checks are torch-free, in grammar_text.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import llguidance
import llguidance.hf
import llguidance.numpy as llg_np
import torch
from torch import Tensor

from core.config import GrammarSpec
from core.speculation.grammar_text import grammar_text

_BITS = torch.arange(32, dtype=torch.int32)


def unpack_bitmask(words: Tensor, vocab: int) -> Tensor:
    """[..., W] int32 bitmask (bit b of word w = token 32w + b) -> [..., vocab] bool."""
    bits = (words[..., :, None] >> _BITS) & 1
    return bits.flatten(-2)[..., :vocab].bool()


class GrammarCompiler:
    """The target tokenizer in llguidance's form (built once: ~0.5 s on a 49k vocabulary)."""

    def __init__(self, hf_tokenizer: Any, vocab_size: int, eos_ids: Sequence[int] = ()) -> None:
        self.vocab_size = vocab_size
        eos = list(eos_ids) or None
        self._tokenizer = llguidance.hf.from_tokenizer(hf_tokenizer, n_vocab=vocab_size,
                                                       eos_token=eos)

    def matcher(self, spec: GrammarSpec) -> TokenMatcher:
        return TokenMatcher(llguidance.LLMatcher(self._tokenizer, grammar_text(spec), log_level=0),
                            self.vocab_size)


class TokenMatcher:
    """One request's grammar state: the committed tokens consumed, masks for any path ahead."""

    def __init__(self, matcher: llguidance.LLMatcher, vocab_size: int) -> None:
        if matcher.is_error():
            raise ValueError(f"grammar error: {matcher.get_error()}")
        self._m = matcher
        self.vocab_size = vocab_size
        # llguidance.numpy, not llguidance.torch: the latter's import compiles a kernel with
        # torch.compile, pulling in dynamo and inductor (2.5 s of every server's start)
        self._array = llg_np.allocate_token_bitmask(1, vocab_size)
        self._words = torch.from_numpy(self._array)  # the same memory, read as a tensor

    def commit(self, tokens: Sequence[int]) -> None:
        """Advance over committed tokens (each was allowed: the target was masked)."""
        if not self._m.is_stopped() and tokens:
            self._m.consume_tokens(list(tokens))

    def fork(self) -> TokenMatcher:
        """An independent copy of this state (a `grammar` drafter's lookup advances its own)."""
        return TokenMatcher(self._m.deep_copy(), self.vocab_size)

    def forced_after(self, path: Sequence[int]) -> tuple[int, ...]:
        """The canonical tokens of the text the grammar forces after the committed tokens plus
        `path` (none for a path it rejects, or once it is complete)."""
        path = list(path)
        if self._m.is_stopped() or self._m.validate_tokens(path) < len(path):
            return ()
        if path:
            self._m.consume_tokens(path)
        forced = () if self._m.is_stopped() else tuple(self._m.compute_ff_tokens())
        if path:
            self._m.rollback(len(path))
        return forced

    @property
    def done(self) -> bool:
        """The grammar is complete and admits nothing more (only end of sequence)."""
        return self._m.is_stopped()

    def masks_after(self, paths: Sequence[Sequence[int]]) -> Tensor:
        """[len(paths), V] bool: what the grammar allows after the committed tokens plus each
        path. A path the grammar rejects somewhere gets an all-False row (its node can never be
        accepted: its parent's mask gives its token probability zero)."""
        rows = torch.zeros(len(paths), self.vocab_size, dtype=torch.bool)
        for i, path in enumerate(paths):
            if self._m.validate_tokens(list(path)) < len(path):
                continue
            if path:
                self._m.consume_tokens(list(path))
            llg_np.fill_next_token_bitmask(self._m, self._array, 0)
            if path:
                self._m.rollback(len(path))
            rows[i] = unpack_bitmask(self._words[0], self.vocab_size)
        return rows

    def tree_masks(self, tokens: Tensor, parents: Tensor) -> Tensor:
        """[N+1, V] bool for a draft tree's nodes (node 0 = the committed root)."""
        return self.node_masks(tokens, parents, range(tokens.numel()))

    def node_masks(self, tokens: Tensor, parents: Tensor, nodes: Sequence[int]) -> Tensor:
        """[len(nodes), V] bool for the given nodes of a draft tree, each over its own path."""
        paths = node_paths(tokens, parents)
        return self.masks_after([paths[n] for n in nodes])


class GrammarTrail:
    """What the grammar allowed after each committed position, for the counterfactual
    evaluation: under a grammar a drafter's real tree holds the best candidates the grammar
    allows (core/speculation/drafting.py), so its catch-up top-k must be drawn from the same set or
    the evaluation judges a tree the drafter never drafts (a forced token outside the unmasked top-k
    would count as missed). A fork of the request's grammar, taken before any output, follows the
    committed tokens; masks are kept from the evaluation's oldest unconsumed position on
    (`trim`)."""

    def __init__(self, matcher: TokenMatcher, tokens: Sequence[int], prompt_len: int) -> None:
        self._m = matcher.fork()
        self._tokens = tokens  # the request's token list, read as it grows
        self._consumed = prompt_len  # sequence tokens the fork stands after
        self._first = prompt_len - 1  # the first position whose next token is output
        self._base = self._first  # position of self._masks[0]
        self._masks: list[Tensor] = []

    def masks(self, start: int, end: int) -> Tensor | None:
        """[end - start, V] bool: what was allowed after tokens[0..m] for m = start..end-1
        (everything where the next token is the prompt's); None when all of it is."""
        if end <= self._first:
            return None
        assert start >= self._base or start < self._first, "asked for a trimmed position"
        while self._base + len(self._masks) < end:
            m = self._base + len(self._masks)
            self._m.commit(list(self._tokens[self._consumed : m + 1]))
            self._consumed = max(self._consumed, m + 1)
            self._masks.append(self._m.masks_after([[]])[0])
        vocab = self._masks[0].numel()
        rows = [torch.ones(vocab, dtype=torch.bool)] * max(0, min(end, self._first) - start)
        kept = self._masks[max(start, self._first) - self._base : end - self._base]
        return torch.stack(rows + kept)

    def trim(self, floor: int) -> None:
        """Positions before `floor` will not be asked for again."""
        drop = min(max(0, floor - self._base), len(self._masks))
        self._masks, self._base = self._masks[drop:], self._base + drop


def node_paths(tokens: Tensor, parents: Tensor) -> list[list[int]]:
    """The draft tokens from below the root down to each node, for nodes 0..N (parents
    precede children, as in core/speculation/tree.DraftTree)."""
    toks, par = tokens.tolist(), parents.tolist()
    paths: list[list[int]] = [[]]
    for i in range(1, len(toks)):
        paths.append(paths[par[i]] + [toks[i]] if par[i] > 0 else [toks[i]])
    return paths


def apply_mask(logits: Tensor, allowed: Tensor) -> Tensor:
    """Logits with the disallowed tokens at -inf. Rows with nothing allowed (a node the
    grammar rejects, never on an accepted path) stay as they are, so no row becomes NaN."""
    allowed = allowed.to(logits.device)
    keep = allowed | ~allowed.any(dim=-1, keepdim=True)
    width = min(logits.shape[-1], keep.shape[-1])
    out = logits.clone()
    out[..., :width] = out[..., :width].masked_fill(~keep[..., :width], float("-inf"))
    return out
