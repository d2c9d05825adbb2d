"""Per-process memos: a value made once per key and kept in a bounded dict (pure, no I/O).

The tile models and the fix search ask for the same pure answers thousands of times per command (a buffer's
parse, a family's problem check, an occupancy); each such place keeps its own dict and asks :func:`memo`."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

T = TypeVar("T")
LIMIT = 4096  # entries a memo keeps before it starts over (a long-lived process stays bounded)


def memo(store: dict, key: Hashable, make: Callable[[], T], limit: int = LIMIT) -> T:
    """``store[key]``, made by ``make()`` the first time; a key that cannot be hashed is made every time (the
    value's own checks then refuse it). An error from ``make`` is raised and never kept."""
    try:
        hit = store.get(key)
    except TypeError:
        return make()
    if hit is None:
        if len(store) >= limit:
            store.clear()
        hit = store[key] = make()
    return hit
