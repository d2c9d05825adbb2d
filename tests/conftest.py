"""Shared fixtures. GPU tests are marked ``gpu`` and skipped when no CUDA device answers."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

# One BLAS thread per process: the suite already runs one xdist worker per core, and OpenBLAS' own threads on
# an oversubscribed machine turn a 1 ms SVD into 200 ms (sgemm's refit: 11 s instead of 1 s). Read by OpenBLAS
# when numpy first loads, which is after this file (the subprocesses the tests start inherit it).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# analyze's answers kept on disk (smemtile/pipeline/disk_memo.py) are off: a test that changes a model in its
# process must see the change (tests/test_disk_memo.py turns it on in a private folder)
os.environ["SMEMTILE_ANSWER_CACHE"] = "0"

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


# The files whose tests take longest (seconds each, the warm suite's --durations on the 2-core machine), run
# first: pytest-xdist hands out tests in this order, so the long ones start while the short ones still fill both
# workers, and the suite does not end waiting on one long test (the order changes no result).
FIRST = (
    "test_report_browser.py",  # one test: a headless browser over every page (~14 s)
    "test_generate_one_tu.py",
    "test_hostile_round3.py",
    "test_conv2d_family.py",
    "test_hgemm_kernel.py",
    "test_hgemm_family.py",
    "test_family_contract.py",
    "test_hostile_cli.py",
    "test_report_page.py",
    "test_fuzz_spec.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))  # stable: the rest keep their order
    if os.environ.get("SMEMTILE_FORCE_GPU_TESTS") == "1" or gpu_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def run_cli(*args: str, input: str | None = None, process: bool = False):
    """Run ``smemtile ARGS`` from the repository root: in this process through click (fast: most tests), or
    with ``process=True`` as ``python -m smemtile ARGS`` in a subprocess, the way a user does (signals, stream
    encodings, the real exit path). In process, an exception that escapes the command is re-raised: a bug is a
    test error, never a quiet exit 1. Returns returncode, stdout and stderr like subprocess.run."""
    if process:
        return subprocess.run(
            [sys.executable, "-m", "smemtile", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            input=input,
            timeout=300,
        )
    from click.testing import CliRunner

    from smemtile.cli import main

    old = os.getcwd()
    os.chdir(ROOT)
    try:
        r = CliRunner().invoke(main, list(args), input=input, catch_exceptions=True)
    finally:
        os.chdir(old)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return SimpleNamespace(returncode=r.exit_code, stdout=r.stdout, stderr=r.stderr)


def nvcc_path() -> str | None:
    return shutil.which("nvcc") or next((p for p in ["/usr/local/cuda/bin/nvcc"] if os.path.exists(p)), None)


@functools.lru_cache(maxsize=1)
def _nvcc_version() -> str:
    return subprocess.run([nvcc_path(), "--version"], capture_output=True, text=True).stdout


def nvcc(source: str, args: list[str], *, suffix: str = ".cu", output: bool = False) -> SimpleNamespace:
    """Compile ``source`` with nvcc (``args`` without -o), cached on disk by source, arguments and nvcc version
    (the result does not depend on anything else): returncode, stdout and stderr of the real compile; with
    ``output=True`` also ``output``, the text nvcc wrote to -o (e.g. the PTX of ``-ptx``; None if none)."""
    parts = [source, args, _nvcc_version()] + (["output"] if output else [])
    key = hashlib.sha256(json.dumps(parts).encode()).hexdigest()
    root = Path(os.environ.get("SMEMTILE_CACHE_DIR") or Path.home() / ".cache" / "smemtile") / "nvcc"
    hit = root / f"{key}.json"
    if hit.exists():
        try:
            return SimpleNamespace(**json.loads(hit.read_text()))
        except ValueError:
            pass
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / f"k{suffix}"
        src.write_text(source)
        p = subprocess.run(
            [nvcc_path(), *args, str(src), "-o", str(Path(d) / "k.o")],
            capture_output=True,
            text=True,
            timeout=600,
        )
        doc = {"returncode": p.returncode, "stdout": p.stdout, "stderr": p.stderr.replace(d, "TMP")}
        if output:
            out = Path(d) / "k.o"
            doc["output"] = out.read_text() if p.returncode == 0 and out.is_file() else None
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = hit.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        tmp.replace(hit)
    except OSError:
        pass
    return SimpleNamespace(**doc)
