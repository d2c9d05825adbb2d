"""Builds and drives ``occupancy_shim.cpp``: NVIDIA's ``cuda_occupancy.h`` as a reference for the model.

``shim()`` compiles once per session with g++ and returns the binary, or None when the header or g++ is missing
(the differential tests then skip).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CUDA_INCLUDE = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"


@functools.lru_cache(maxsize=1)
def shim() -> Path | None:
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None or not (CUDA_INCLUDE / "cuda_occupancy.h").exists():
        return None
    out = Path(tempfile.mkdtemp(prefix="smemtile-occ-")) / "occupancy_shim"
    cmd = [cxx, "-O2", "-std=c++17", f"-I{CUDA_INCLUDE}", str(HERE / "occupancy_shim.cpp"), "-o", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    return out


def ask(lines: list[str]) -> list[list[int]]:
    """Send query lines to the shim; one list of integers back per line."""
    exe = shim()
    assert exe is not None
    res = subprocess.run(
        [str(exe)], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True
    )
    return [[int(v) for v in row.split()] for row in res.stdout.splitlines()]


def occ_line(arch, threads: int, regs: int, static: int, dynamic: int, carveout: int, opt_in: bool) -> str:
    """One ``occ`` query for an Arch row (the header takes the device constants as inputs)."""
    a = arch
    return (
        f"occ {a.cc[0]} {a.cc[1]} {a.max_threads_per_sm} {a.max_blocks_per_sm} {a.regs_per_sm} {a.regs_per_block} "
        f"{a.smem_default_per_block} {a.smem_per_sm} {a.smem_optin_per_block} {a.smem_reserved_per_block} "
        f"{threads} {regs} {static} {dynamic} {carveout} {int(opt_in)}"
    )
