"""Small numpy helpers the model shares."""

from __future__ import annotations

import numpy as np


def unique_sorted(values) -> np.ndarray:
    """``np.unique(values)`` for integer arrays (flattened, sorted, distinct, same dtype) without what plain
    ``np.unique`` costs first: it asks ``np.ma.is_masked``, which imports numpy.ma (~15 ms) on first use."""
    s = np.sort(np.asarray(values).ravel())
    return s[np.append(True, s[1:] != s[:-1])] if s.size else s
