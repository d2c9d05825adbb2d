"""Builds and drives ``occupancy_shim.cpp``: NVIDIA's ``cuda_occupancy.h`` as a reference for the model.

``available()`` says whether the header and g++ exist (cheap: the skip conditions the tests are collected
with). ``shim()`` returns the binary, or None when they do not: built with g++ on first use and cached on disk
(``$SMEMTILE_CACHE_DIR/occupancy_shim`` or ``~/.cache/smemtile/occupancy_shim``), keyed by the shim source, the
header, the compiler's path and version and the command line, so a warm session compiles nothing.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CUDA_INCLUDE = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"
HEADER = CUDA_INCLUDE / "cuda_occupancy.h"
SOURCE = HERE / "occupancy_shim.cpp"
FLAGS = ["-O2", "-std=c++17", f"-I{CUDA_INCLUDE}"]


def _cxx() -> str | None:
    return shutil.which("g++") or shutil.which("c++")


def available() -> bool:
    """The header and a C++ compiler exist (nothing is compiled)."""
    return _cxx() is not None and HEADER.exists()


def _key(cxx: str) -> str:
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
    parts = [SOURCE.read_text(), HEADER.read_text(), os.path.realpath(cxx), version, FLAGS]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


@functools.lru_cache(maxsize=1)
def shim() -> Path | None:
    if not available():
        return None
    cxx = _cxx()
    root = (
        Path(os.environ.get("SMEMTILE_CACHE_DIR") or Path.home() / ".cache" / "smemtile") / "occupancy_shim"
    )
    exe = root / _key(cxx)
    if exe.is_file() and os.access(exe, os.X_OK):
        return exe
    try:
        root.mkdir(parents=True, exist_ok=True)
        build_dir = root
    except OSError:  # a read-only cache: build in a temporary folder, as before the cache
        build_dir = Path(tempfile.mkdtemp(prefix="smemtile-occ-"))
        exe = build_dir / "occupancy_shim"
    # built under a unique name, then renamed: another xdist worker building the same key never sees half a file
    tmp = str(build_dir / f".build-{os.getpid()}-{exe.name}")
    try:
        subprocess.run([cxx, *FLAGS, str(SOURCE), "-o", tmp], check=True, capture_output=True, timeout=120)
        os.replace(tmp, exe)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return exe


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
