"""The target's distribution at the nodes of a verified draft tree, computed on first use.

What verification and the counterfactual evaluation read at node i: the raw logits (what
`logprobs` report), the penalised and grammar-masked logits (core/speculation/penalties.py and
core/speculation/grammar.py, each over node i's own path), and under sampling p̃ after temperature,
top-k and top-p. Only the nodes the acceptance walk visits are ever asked for (the accepted path, L
+ 1 of the tree's N + 1), so the LM head can run on those rows alone (TargetOutput.rows); whether
that beats one head call over every node depends on the machine (core/batching/head_rows.py: the
visited rows on a CPU, every node on an accelerator).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from core.decoding.request import RequestState
from core.model.target import TargetOutput
from core.speculation.grammar import apply_mask
from core.speculation.penalties import apply_penalties, path_counts, token_counts
from core.speculation.sampling import process_logits
from core.speculation.tree import DraftTree


class NodeLogits:
    """One request's target distributions over one tree, row by row, each computed once.
    `self[node]` is what verification reads: the penalised logits under greedy, p̃ when
    sampling."""

    def __init__(self, out: TargetOutput, state: RequestState, tree: DraftTree) -> None:
        self.out, self.state, self.tree = out, state, tree
        self.greedy = state.params.greedy
        self._penalised: dict[int, Tensor] = {}
        self._probs: dict[int, Tensor] = {}
        self._counts: tuple[Tensor, Tensor] | None = None

    def __getitem__(self, node: int) -> Tensor:
        return self.penalised([node])[0] if self.greedy else self.probs([node])[0]

    def raw(self, nodes: Sequence[int]) -> Tensor:
        """[R, V] the model's own logits."""
        return self.out.rows(nodes)

    def penalised(self, nodes: Sequence[int]) -> Tensor:
        """[R, V] after penalties and the grammar mask, each node over its own path."""
        missing = [n for n in dict.fromkeys(nodes) if n not in self._penalised]
        if missing:
            raw = self.raw(missing)
            rows = penalise(raw, self.state, self.tree, missing, self._base(raw))
            self._penalised.update(zip(missing, rows, strict=True))
        return torch.stack([self._penalised[n] for n in nodes])

    def probs(self, nodes: Sequence[int]) -> Tensor:
        """[R, V] p̃ (sampling only)."""
        missing = [n for n in dict.fromkeys(nodes) if n not in self._probs]
        if missing:
            p = self.state.params
            rows = process_logits(self.penalised(missing), p.temperature, p.top_p, p.top_k)
            self._probs.update(zip(missing, rows, strict=True))
        return torch.stack([self._probs[n] for n in nodes])

    def _base(self, raw: Tensor) -> tuple[Tensor, Tensor] | None:
        """The committed output's token counts and the prompt's tokens (penalties only)."""
        if not self.state.params.penalties.active:
            return None
        if self._counts is None:
            self._counts = base_counts(self.state, raw.shape[-1], raw.device)
        return self._counts


def base_counts(state: RequestState, vocab: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """(counts [V] of the tokens generated so far, bool [V] tokens seen in the prompt)."""
    output = token_counts(state.token_ids[state.prompt_len :], vocab, device)
    prompt_seen = token_counts(state.token_ids[: state.prompt_len], vocab, device) > 0
    return output, prompt_seen


def penalise(logits: Tensor, state: RequestState, tree: DraftTree, nodes: Sequence[int],
             base: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """logits [R, V] of tree nodes `nodes` -> the penalised and grammar-masked target's
    logits, each node over its own path: the committed output plus the draft tokens from the
    root down to it."""
    pen = state.params.penalties
    if pen.active:
        output, prompt_seen = base or base_counts(state, logits.shape[-1], logits.device)
        counts = path_counts(output, tree.tokens, tree.mask[list(nodes)])
        logits = apply_penalties(logits, counts, prompt_seen, pen)
    if state.matcher is not None:
        logits = apply_mask(logits, state.matcher.node_masks(tree.tokens, tree.parents, nodes))
    return logits
