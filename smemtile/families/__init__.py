"""Kernel families: one plug-in each (``smemtile/families/<name>/``: the ``.cu`` template and a ``Family``).

Adding a family touches its own folder and one line of ``registry.REGISTRY``. Pure Python (no CUDA)::

    cfg = configure("sgemm", {"BM": 128, "M": 4096, "N": 4096, "K": 4096}, {"As": Layout(pad=4)}, "sm_90")
    FAMILIES["sgemm"].launch(cfg)      # LaunchConfig: grid, block, dynamic smem, the steps before it
    FAMILIES["sgemm"].spec(cfg)        # the KernelSpec (buffers + accesses) analyze and generate share
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from typing import Any

from smemtile.families.registry import NAMES

# the public names and the module that defines each; loaded on first use, so that importing a submodule
# (``smemtile.families.registry``) or listing the names costs nothing
_LAZY = {
    "ContractViolation": "base",
    "Family": "base",
    "KernelConfig": "base",
    "LaunchConfig": "base",
}


def _core():
    return importlib.import_module("smemtile.families.core")


class _Families(MutableMapping):
    """``FAMILIES``: name -> Family, the registry's modules imported on first use (``from smemtile.families
    import FAMILIES`` costs nothing until a family is looked up, so a spec without a kernel never loads them).
    It is :data:`smemtile.families.core.FAMILIES` itself behind this door (tests may add a family to it)."""

    def _d(self) -> dict:
        return _core().FAMILIES

    def __getitem__(self, key):
        return self._d()[key]

    def __setitem__(self, key, value) -> None:
        self._d()[key] = value

    def __delitem__(self, key) -> None:
        del self._d()[key]

    def __iter__(self) -> Iterator:
        return iter(self._d())

    def __len__(self) -> int:
        return len(self._d())

    def __contains__(self, key) -> bool:
        return key in self._d()

    def __repr__(self) -> str:
        return repr(self._d())


FAMILIES: MutableMapping = _Families()


def configure(*args, **kwargs):
    """:func:`smemtile.families.core.configure` (loaded on first use)."""
    return _core().configure(*args, **kwargs)


def reconfigure(*args, **kwargs):
    """:func:`smemtile.families.core.reconfigure` (loaded on first use)."""
    return _core().reconfigure(*args, **kwargs)


def get_family(name):
    """:func:`smemtile.families.core.get_family` (loaded on first use)."""
    return _core().get_family(name)


def split_params(*args, **kwargs):
    """:func:`smemtile.families.core.split_params` (loaded on first use)."""
    return _core().split_params(*args, **kwargs)


__all__ = ["FAMILIES", "NAMES", "configure", "get_family", "reconfigure", "split_params", *_LAZY]


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'smemtile.families' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"smemtile.families.{mod}"), name)
    globals()[name] = value
    return value
