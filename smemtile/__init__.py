"""smemtile: a shared-memory tile advisor for CUDA kernels.

The Python API (documented in docs/api.md) is loaded on first use, so ``import smemtile`` stays cheap and loads
no CUDA: ``smemtile.analyze``, ``fix``, ``occupancy``, ``tiles``, ``generate``, ``verify``, ``tune``,
``inspect``, ``report_page`` and ``load_spec``
(smemtile.api), the ``smemtile.triton`` and ``smemtile.kernel_tuner``
integrations, and the exceptions of ``smemtile.errors``.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_API = (
    "analyze",
    "fix",
    "occupancy",
    "tiles",
    "generate",
    "verify",
    "tune",
    "inspect",
    "report_page",
    "load_spec",
)
_ERRORS = ("SmemtileError", "SpecError", "OutOfResources", "VerificationFailed", "CompileError", "NoDevice")
_MODULES = ("triton", "kernel_tuner", "api", "errors")

__all__ = ["__version__", *_API, *_ERRORS, *_MODULES]


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(importlib.import_module("smemtile.api"), name)
    if name in _ERRORS:
        return getattr(importlib.import_module("smemtile.errors"), name)
    if name in _MODULES:
        return importlib.import_module(f"smemtile.{name}")
    raise AttributeError(f"module 'smemtile' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
