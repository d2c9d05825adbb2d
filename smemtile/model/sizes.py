"""Byte sizes as users write them: ``49152``, ``48K``, ``48KB``, ``48KiB``, ``1M``.

K/KB/KiB all mean 1024 bytes, as in CUDA's documentation of shared-memory sizes.
"""

from __future__ import annotations

import re

from smemtile.errors import SpecError

_SIZE = re.compile(r"^\s*(\d+)\s*(k|kb|kib|m|mb|mib|b)?\s*$", re.IGNORECASE)
_SCALE = {None: 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20}


def parse_size(text: str | int, *, key: str = "size") -> int:
    """Return the size in bytes; raise SpecError naming ``key`` when it does not parse."""
    if isinstance(text, bool):
        raise SpecError(f"expected a byte size such as 49152, 48K or 48KiB, got {text!r}", key=key)
    if isinstance(text, int):
        if text < 0:
            raise SpecError(f"must not be negative, got {text}", key=key)
        return text
    m = _SIZE.match(str(text))
    if not m:
        raise SpecError(f"expected a byte size such as 49152, 48K or 48KiB, got {text!r}", key=key)
    unit = m.group(2).lower() if m.group(2) else None
    return int(m.group(1)) * _SCALE[unit]
