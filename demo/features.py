"""The frozen target's view of every rollout, computed once and kept compact.

A drafter learns from two things the target computes per position: the fused aux features
(inputs of three decoder layers, [T, 3H]) and the target distribution. Keeping full-vocabulary
logits costs V floats per position (203 KB at SmolLM2's 49,152 tokens, ~160 GB for a pool);
the final normed hidden state [T, H] costs 576 and gives the logits back exactly as
`hidden @ lm_head.T`, and training only ever needs them restricted to the draft vocabulary, so
they are recomputed per batch for Vd columns. The one thing needing the full vocabulary, the
target's argmax (is it draftable at all?), is stored as one id per position.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from tqdm import tqdm
from transformers import LlamaForCausalLM

from demo.rollouts import Rollout


@dataclass(frozen=True)
class RolloutView:
    fused: Tensor  # [T, 3H] aux features (inputs of the three aux layers, low/mid/high)
    hidden: Tensor  # [T, H] final normed hidden state: logits = hidden @ lm_head.T
    argmax: Tensor  # [T] full-vocabulary argmax of the target at each position


class TargetFeatures:
    """Every rollout's `RolloutView`, computed in length-sorted batches by `compute`."""

    def __init__(self, target: LlamaForCausalLM, aux_layers: tuple[int, int, int],
                 batch_size: int = 16) -> None:
        self.target, self.aux_layers, self.batch_size = target, aux_layers, batch_size
        self.views: dict[Rollout, RolloutView] = {}

    @property
    def lm_head(self) -> Tensor:
        return self.target.get_output_embeddings().weight  # [V, H]

    def compute(self, rollouts: Sequence[Rollout], progress: bool = True) -> None:
        missing = sorted({r for r in rollouts if r not in self.views}, key=lambda r: len(r.ids))
        batches = [missing[i : i + self.batch_size]
                   for i in range(0, len(missing), self.batch_size)]
        for batch in tqdm(batches, desc="target features", unit="batch", disable=not progress):
            self._compute(batch)

    @torch.no_grad()
    def _compute(self, batch: list[Rollout]) -> None:
        width = max(len(r.ids) for r in batch)
        ids = torch.zeros(len(batch), width, dtype=torch.long)
        for i, r in enumerate(batch):  # right padding: causal attention keeps real rows exact
            ids[i, : len(r.ids)] = torch.tensor(r.ids)
        out = self.target(input_ids=ids.to(self.target.device), output_hidden_states=True)
        fused = torch.cat([out.hidden_states[i] for i in self.aux_layers], dim=-1)
        hidden, argmax = out.hidden_states[-1], out.logits.argmax(-1)
        for i, r in enumerate(batch):
            n = len(r.ids)
            self.views[r] = RolloutView(fused[i, :n].clone(), hidden[i, :n].clone(),
                                        argmax[i, :n].to(torch.int32).clone())

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for v in self.views.values()
                   for t in (v.fused, v.hidden, v.argmax))


def draft_logits(hidden: Tensor, lm_head: Tensor, t2d: Tensor) -> Tensor:
    """Target logits restricted to the draft vocabulary, fp32 [..., Vd] (draft-id order)."""
    return hidden.float() @ lm_head[t2d].float().T
