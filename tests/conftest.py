"""Shared fixtures. GPU tests are marked ``gpu`` and skipped when no CUDA device answers."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "samples").glob("*.yaml"))


@functools.lru_cache(maxsize=1)
def gpu_available() -> bool:
    """True when the CUDA driver reports at least one device (checked in a subprocess to keep this one clean)."""
    code = (
        "from cuda.bindings import driver as d\n"
        "e,=d.cuInit(0)\n"
        "e2,n=d.cuDeviceGetCount()\n"
        "raise SystemExit(0 if int(e)==0 and int(e2)==0 and n>0 else 1)\n"
    )
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60).returncode == 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if os.environ.get("SMEMTILE_FORCE_GPU_TESTS") == "1" or gpu_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def run_cli(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m smemtile ARGS`` in a subprocess, the way a user does."""
    return subprocess.run(
        [sys.executable, "-m", "smemtile", *args], capture_output=True, text=True, cwd=ROOT, input=input, timeout=300
    )
