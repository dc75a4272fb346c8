"""A static prompt router: the baseline a user would deploy instead of online learning.

TF-IDF over the prompt's token ids (sublinear term frequency, L2-normalised rows) and a
multinomial logistic regression trained on the domains' training prompts choose one drafter
per request before it starts; the drafter then stays fixed for the whole request. This is the
HedgeSpec paper's router baseline in miniature: accurate on prompts like its training data,
brittle when prompts are wrapped in unseen instructions or come from unseen domains, where the
online learner keeps adapting. Torch and numpy only (no scikit-learn).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch


@dataclass(frozen=True)
class RouterFit:
    epochs: int = 300
    lr: float = 0.05  # Adam, full batch
    l2: float = 1e-4  # weight decay of the logistic regression
    min_df: int = 2  # token ids seen in fewer training prompts are not features


class PromptRouter:
    """Routes a prompt (target token ids) to one of `labels` (drafter ids)."""

    def __init__(self, vocab: np.ndarray, idf: np.ndarray, weights: np.ndarray, bias: np.ndarray,
                 labels: Sequence[str]) -> None:
        self.vocab = vocab.astype(np.int64)  # token id of each feature column
        self.idf = idf.astype(np.float32)
        self.weights = weights.astype(np.float32)  # [features, classes]
        self.bias = bias.astype(np.float32)
        self.labels = tuple(labels)
        self._column = {int(t): i for i, t in enumerate(self.vocab)}

    def features(self, prompts: Sequence[Sequence[int]]) -> np.ndarray:
        x = np.zeros((len(prompts), len(self.vocab)), dtype=np.float32)
        for r, ids in enumerate(prompts):
            cols, counts = np.unique([self._column[t] for t in ids if t in self._column],
                                     return_counts=True)
            x[r, cols.astype(np.int64)] = 1.0 + np.log(counts)
        x *= self.idf
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        return x / np.maximum(norms, 1e-12)

    def probabilities(self, prompts: Sequence[Sequence[int]]) -> np.ndarray:
        z = self.features(prompts) @ self.weights + self.bias
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        return p / p.sum(axis=1, keepdims=True)

    def route(self, prompt: Sequence[int]) -> str:
        return self.labels[int(self.probabilities([prompt])[0].argmax())]

    @classmethod
    def fit(cls, prompts: Sequence[Sequence[int]], labels: Sequence[str],
            cfg: RouterFit | None = None, seed: int = 0) -> PromptRouter:
        cfg = cfg or RouterFit()
        classes = sorted(set(labels))
        df: dict[int, int] = {}
        for ids in prompts:
            for t in set(ids):
                df[t] = df.get(t, 0) + 1
        vocab = np.array(sorted(t for t, n in df.items() if n >= cfg.min_df), dtype=np.int64)
        n = len(prompts)
        idf = np.array([math.log((1 + n) / (1 + df[int(t)])) + 1.0 for t in vocab],
                       dtype=np.float32)
        untrained = cls(vocab, idf, np.zeros((len(vocab), len(classes))), np.zeros(len(classes)),
                        classes)
        x = torch.from_numpy(untrained.features(prompts))
        y = torch.tensor([classes.index(lab) for lab in labels])
        w, b = _logistic_regression(x, y, len(classes), cfg, seed)
        return cls(vocab, idf, w, b, classes)

    def save(self, path: Path) -> None:
        np.savez_compressed(path, vocab=self.vocab, idf=self.idf,
                            weights=self.weights.astype(np.float16),
                            bias=self.bias, labels=np.array(self.labels))

    @classmethod
    def load(cls, path: Path) -> PromptRouter:
        with np.load(path, allow_pickle=False) as f:
            return cls(f["vocab"], f["idf"], f["weights"], f["bias"], [str(s) for s in f["labels"]])


def _logistic_regression(x: torch.Tensor, y: torch.Tensor, classes: int, cfg: RouterFit,
                         seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Full-batch softmax regression with L2 (the problem is convex: Adam reaches the optimum)."""
    torch.manual_seed(seed)
    w = torch.zeros(x.shape[1], classes, requires_grad=True)
    b = torch.zeros(classes, requires_grad=True)
    opt = torch.optim.Adam([w, b], lr=cfg.lr)
    for _ in range(cfg.epochs):
        loss = torch.nn.functional.cross_entropy(x @ w + b, y) + cfg.l2 * (w * w).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return w.detach().numpy(), b.detach().numpy()
