"""The calibration files shipped in ``smemtile/model/data`` (each names its GPU, runs and commit)."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources


@lru_cache(maxsize=16)
def read_data(name: str, required: bool = True) -> dict | None:
    """The parsed data file ``name``; None when it is absent and not ``required`` (the models then rank
    uncalibrated and say so)."""
    try:
        text = resources.files("smemtile.model").joinpath("data", name).read_text()
    except (FileNotFoundError, OSError):
        if required:
            raise
        return None
    return json.loads(text)
