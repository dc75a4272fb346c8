"""A preallocated key/value buffer for the drafters' caches (one attention layer each).

`KVBuffer` holds `rows` sequences of one common length (the drafters of one catch-up unit,
core/speculation/drafter_pool.py) in tensors [rows, nkv, capacity, hd] that grow geometrically:
appending T entries writes them in place, so a round costs O(T) instead of the O(context) copy that
`torch.cat` made at every catch-up and at every tree level. Entries past `length` are scratch:
drafting writes its tree's K/V there (core/speculation/drafting.py) and the next catch-up overwrites
them.
"""

from __future__ import annotations

import torch
from torch import Tensor

KV = tuple[Tensor, Tensor]
MIN_CAPACITY = 64


class KVBuffer:
    def __init__(self, keys: Tensor, values: Tensor, length: int = 0) -> None:
        self.keys, self.values = keys, values  # [rows, nkv, capacity, hd]
        self.length = length

    @classmethod
    def empty(cls, rows: int, nkv: int, head_dim: int, dtype: torch.dtype, device: torch.device,
              capacity: int = MIN_CAPACITY) -> KVBuffer:
        # zeros, not empty: masked scratch entries still enter q·k, and NaN garbage would
        # survive an additive -inf mask
        shape = (rows, nkv, capacity, head_dim)
        return cls(torch.zeros(shape, dtype=dtype, device=device),
                   torch.zeros(shape, dtype=dtype, device=device))

    @classmethod
    def of(cls, kv: KV, spare: int = MIN_CAPACITY) -> KVBuffer:
        """A buffer holding a copy of `kv` ([rows, nkv, S, hd]) plus room for `spare` more."""
        buf = cls.empty(kv[0].shape[0], kv[0].shape[1], kv[0].shape[3], kv[0].dtype, kv[0].device,
                        kv[0].shape[2] + spare)
        buf.append(kv[0], kv[1])
        return buf

    @property
    def capacity(self) -> int:
        return int(self.keys.shape[2])

    def reserve(self, extra: int) -> None:
        """Room for `extra` entries past `length` (doubling, so appends cost O(1) amortised)."""
        need = self.length + extra
        if need <= self.capacity:
            return
        cap = max(need, 2 * self.capacity, MIN_CAPACITY)
        keys = self.keys.new_zeros((*self.keys.shape[:2], cap, self.keys.shape[3]))
        values = torch.zeros_like(keys)
        keys[:, :, : self.length] = self.keys[:, :, : self.length]
        values[:, :, : self.length] = self.values[:, :, : self.length]
        self.keys, self.values = keys, values

    def write(self, k: Tensor, v: Tensor, offset: int) -> None:
        """k/v [rows, nkv, T, hd] at entries offset..offset+T (reserved beforehand)."""
        end = offset + k.shape[2]
        if end > self.capacity:
            raise ValueError(f"KV write up to {end} past capacity {self.capacity}: reserve first")
        self.keys[:, :, offset:end] = k
        self.values[:, :, offset:end] = v

    def append(self, k: Tensor, v: Tensor) -> None:
        self.reserve(k.shape[2])
        self.write(k, v, self.length)
        self.length += k.shape[2]

    def view(self, end: int | None = None) -> KV:
        """The first `end` entries (default: the committed ones), as views."""
        stop = self.length if end is None else end
        return self.keys[:, :, :stop], self.values[:, :, :stop]
