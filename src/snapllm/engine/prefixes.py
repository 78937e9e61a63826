"""Saved prompt prefixes: KV states kept in RAM, so a prompt that starts with one evaluates only the rest.

    cache = PrefixCache(budget_bytes=256 * MiB)
    cache.add(decoder.save(), pinned=True)     # a declared prefix, evaluated before the snapshot
    state = cache.best(lambda state: decoder.reused_from(state, prompt))

What is kept, and for how long: docs/decoding.md ("The prompt cache").
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

#: The fewest tokens a recent conversation's state must hold to be saved: a shorter prefix costs little more
#: to evaluate again than its state's copy (a declared prefix is kept whatever its length).
MIN_SAVED_TOKENS = 64


@dataclass(eq=False)
class SavedState:
    """One sequence's KV state as llama.cpp wrote it, and the tokens whose keys and values it holds."""

    tokens: list[int]
    data: ctypes.Array[ctypes.c_uint8] = field(repr=False)

    @property
    def size(self) -> int:
        """Bytes of the state."""
        return len(self.data)


@dataclass
class PrefixStats:
    """What the cache saved: requests that reused a prefix (from the live sequence or a saved state), ones
    that reused none, prompt tokens not evaluated, and saved states restored and evicted."""

    hits: int = 0
    misses: int = 0
    cached_tokens: int = 0
    restores: int = 0
    saves: int = 0
    evictions: int = 0


class PrefixCache:
    """Saved states, pinned or least recently used, the unpinned bounded by ``budget_bytes``."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = max(0, budget_bytes)
        self._pinned: list[SavedState] = []
        self._recent: OrderedDict[int, SavedState] = OrderedDict()
        self.stats = PrefixStats()

    @property
    def pinned(self) -> tuple[SavedState, ...]:
        return tuple(self._pinned)

    @property
    def recent(self) -> tuple[SavedState, ...]:
        """The unpinned states, least recently used first."""
        return tuple(self._recent.values())

    @property
    def pinned_bytes(self) -> int:
        return sum(state.size for state in self._pinned)

    @property
    def recent_bytes(self) -> int:
        return sum(state.size for state in self._recent.values())

    def holds(self, tokens: list[int]) -> bool:
        """Whether a state of exactly ``tokens``, or of more tokens starting with them, is kept already."""
        count = len(tokens)
        return any(
            len(state.tokens) >= count and state.tokens[:count] == tokens
            for state in (*self._pinned, *self._recent.values())
        )

    def forget_recent(self) -> None:
        """Drop every unpinned state and start the counts again (after a warm-up)."""
        self._recent.clear()
        self.stats = PrefixStats()

    def add(self, state: SavedState, *, pinned: bool = False) -> bool:
        """Keep ``state``; an unpinned one larger than the whole budget is not kept (False). States that
        ``state`` covers (a prefix of its tokens) are dropped: it restores all they held."""
        if pinned:
            self._pinned.append(state)
            return True
        if state.size > self.budget_bytes:
            return False
        for key, kept in list(self._recent.items()):
            if len(kept.tokens) <= len(state.tokens) and state.tokens[: len(kept.tokens)] == kept.tokens:
                del self._recent[key]
        self._recent[id(state)] = state
        used = self.recent_bytes
        while used > self.budget_bytes:
            _, evicted = self._recent.popitem(last=False)
            used -= evicted.size
            self.stats.evictions += 1
        self.stats.saves += 1
        return True

    def best(self, reused: Callable[[SavedState], int]) -> tuple[SavedState | None, int]:
        """The state from which a prompt reuses the most tokens (``reused`` says how many), and that many;
        (None, 0) when none gives any. The state found counts as used."""
        best: SavedState | None = None
        most = 0
        for state in (*self._pinned, *reversed(self._recent.values())):
            count = reused(state)
            if count > most:
                best, most = state, count
        if best is not None and id(best) in self._recent:
            self._recent.move_to_end(id(best))
        return best, most
