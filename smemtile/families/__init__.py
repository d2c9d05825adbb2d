"""Kernel families: one plug-in each (``smemtile/families/<name>/``: the ``.cu`` template and a ``Family``).

Adding a family touches its own folder and one line of ``registry.REGISTRY``. Pure Python (no CUDA)::

    cfg = configure("sgemm", {"BM": 128, "M": 4096, "N": 4096, "K": 4096}, {"As": Layout(pad=4)}, "sm_90")
    FAMILIES["sgemm"].launch(cfg)      # LaunchConfig: grid, block, dynamic smem, the steps before it
    FAMILIES["sgemm"].spec(cfg)        # the KernelSpec (buffers + accesses) analyze and generate share
"""

from __future__ import annotations

import importlib
from typing import Any

from smemtile.families.registry import NAMES

# the public names and the module that defines each; loaded on first use, so that importing a submodule
# (``smemtile.families.registry``) or listing the names costs nothing
_LAZY = {
    "FAMILIES": "core",
    "configure": "core",
    "reconfigure": "core",
    "get_family": "core",
    "split_params": "core",
    "ContractViolation": "base",
    "Family": "base",
    "KernelConfig": "base",
    "LaunchConfig": "base",
}

__all__ = ["NAMES", *_LAZY]


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'smemtile.families' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"smemtile.families.{mod}"), name)
    globals()[name] = value
    return value
