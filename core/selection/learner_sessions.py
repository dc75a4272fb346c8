"""Learners carried across the requests of one session (opt-in; the default is per request).

HedgeSpec's learner starts uniform in every request, which costs a short request most of its
rounds before NormalHedge finds the right drafter. A client that sends related requests (one
user's conversation, one domain) can name a session: its next request then starts from the
learner state the previous one ended with. Only completed feedback windows ever reached that
state (censored windows at a request's end are statistics only), so the learner's guarantee
simply extends over the longer sequence of rounds; decoding stays lossless whatever the state.

A stored learner is re-indexed onto the pool a request sees (`adapt`): drafters removed since
are dropped with their state, new drafters join at zero regret, the order follows the pool.
The store is a bounded LRU: the least recently used session is forgotten first. Concurrent
requests of one session each start from the stored state; the last to finish is kept.
"""

from __future__ import annotations

import collections
import copy
from collections.abc import Sequence
from dataclasses import dataclass

from core.selection.learners import Learner


@dataclass
class _Entry:
    learner_name: str
    drafter_ids: tuple[str, ...]
    learner: Learner
    requests: int  # finished requests whose feedback the learner carries


@dataclass(frozen=True)
class WarmStart:
    learner: Learner  # a private copy, re-indexed onto the request's pool
    requests: int


def adapt(learner: Learner, old_ids: Sequence[str], new_ids: Sequence[str]) -> Learner | None:
    """Re-index `learner` (experts = `old_ids`, in order) onto `new_ids`, in place; None when
    the two pools share no drafter (nothing learned applies, start afresh)."""
    wanted = set(new_ids)
    ids = list(old_ids)
    if not wanted.intersection(ids) or len(set(new_ids)) != len(new_ids):
        return None
    for i in reversed(range(len(ids))):
        if ids[i] not in wanted:
            learner.remove_expert(i)
            del ids[i]
    for drafter_id in new_ids:
        if drafter_id not in ids:
            learner.add_expert()
            ids.append(drafter_id)
    learner.permute([ids.index(d) for d in new_ids])
    return learner


class LearnerSessions:
    """session key -> the learner its last finished request ended with (bounded LRU)."""

    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self._entries: collections.OrderedDict[str, _Entry] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def take(self, key: str, learner_name: str, drafter_ids: Sequence[str]) -> WarmStart | None:
        """A copy of the session's learner for a new request, or None (unknown session, another
        learner kind, or no drafter in common)."""
        entry = self._entries.get(key)
        if entry is None or entry.learner_name != learner_name:
            return None
        self._entries.move_to_end(key)
        learner = adapt(copy.deepcopy(entry.learner), entry.drafter_ids, drafter_ids)
        return WarmStart(learner, entry.requests) if learner is not None else None

    def put(self, key: str, learner_name: str, drafter_ids: Sequence[str], learner: Learner,
            requests: int) -> None:
        """Keep the learner a finished request ended with (the request no longer uses it)."""
        if self.max_sessions <= 0:
            return
        self._entries[key] = _Entry(learner_name, tuple(drafter_ids), learner, requests)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_sessions:
            self._entries.popitem(last=False)
