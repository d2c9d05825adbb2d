"""What ``smemtile generate`` loads, and NVRTC's two front ends agreeing (issue 28 item 7: generate dominated by
NVRTC). No timings here: bench/bench_tool_speed.py measures them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TRANSPOSE = ROOT / "samples" / "transpose_32x32.yaml"

PROBE = """
import json, sys
from smemtile.cli import run
sys.argv = ["smemtile", "generate", *sys.argv[1:]]
try:
    run()
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def _generate_modules(tmp_path: Path, *args: str) -> tuple[int, set[str]]:
    env = {**os.environ, "SMEMTILE_COMPILE_CACHE": "0", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("SMEMTILE_CACHE_DIR", None)
    env.pop("SMEMTILE_NVRTC_BINDINGS", None)
    p = subprocess.run(
        [sys.executable, "-c", PROBE, str(TRANSPOSE), "-o", str(tmp_path / "t.cu"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    doc = json.loads(p.stderr.strip().splitlines()[-1])
    return doc["code"], set(doc["modules"])


def _has_nvrtc() -> bool:
    from smemtile.gpu.nvrtc_ctypes import load

    return load() is not None


def test_generate_loads_no_cuda_bindings_and_no_other_family(tmp_path):
    if not _has_nvrtc():
        pytest.skip("no nvidia-cuda-nvrtc wheel here")
    code, mods = _generate_modules(tmp_path)
    assert code == 0
    assert (tmp_path / "t.cu").read_text().count("transpose") > 0
    assert "smemtile.gpu.nvrtc_ctypes" in mods  # it compiled through ctypes ...
    assert not [m for m in mods if m.startswith("cuda.")]  # ... without cuda-python's driver bindings
    assert "rich.table" in mods  # the summary's checklist table
    others = {"sgemm", "hgemm", "wgmma_gemm", "stencil2d", "conv2d", "flash_attn"}
    assert not [m for m in mods if m.split(".")[:3][-1] in others and m.startswith("smemtile.families.")]


def test_no_compile_loads_no_nvrtc(tmp_path):
    code, mods = _generate_modules(tmp_path, "--no-compile")
    assert code == 0
    assert "smemtile.gpu.nvrtc" not in mods and "smemtile.gpu.nvrtc_ctypes" not in mods
    assert not [m for m in mods if m.startswith("cuda")]


def test_command_start_loads_no_rich():
    """rich is imported beside the compile (nvrtc.meanwhile), not when the command line starts."""
    code = (
        "import os, sys; os.environ['COLUMNS'] = '100000'\n"
        "import smemtile.cli.generate, smemtile.cli.common as c\n"
        "c._clamp_columns()\n"
        "print(os.environ['COLUMNS'], any(m == 'rich' or m.startswith('rich.') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["512", "False"]


def test_the_clamp_is_the_consoles_widest():
    from smemtile.cli.common import MAX_WIDTH
    from smemtile.report import text

    assert MAX_WIDTH == text.MAX_WIDTH == 512


SOURCE = """
template <int N> __global__ void k(float *out) {
    __shared__ float s[N];
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = s[(threadIdx.x + 1) % N];
}
template __global__ void k<128>(float *);
"""


def test_ctypes_and_cuda_bindings_compile_the_same(monkeypatch):
    if not _has_nvrtc():
        pytest.skip("no nvidia-cuda-nvrtc wheel here")
    pytest.importorskip("cuda.bindings.nvrtc")
    from smemtile.gpu import nvrtc

    monkeypatch.setenv("SMEMTILE_COMPILE_CACHE", "0")
    fast = nvrtc.compile_cubin(SOURCE, ["k<128>"], "sm_80")
    assert type(nvrtc._nvrtc()).__name__ == "Nvrtc"
    monkeypatch.setenv("SMEMTILE_NVRTC_BINDINGS", "1")
    assert nvrtc._nvrtc().__name__ == "cuda.bindings.nvrtc"
    slow = nvrtc.compile_cubin(SOURCE, ["k<128>"], "sm_80")
    assert fast.lowered == slow.lowered == {"k<128>": "_Z1kILi128EEvPf"}
    assert fast.cubin == slow.cubin and fast.cubin[:4] == b"\x7fELF"
    assert fast.ptx == slow.ptx and ".entry _Z1kILi128EEvPf" in fast.ptx
    assert fast.resources == slow.resources
    assert fast.resources["k<128>"].static_smem_bytes == 512
    assert fast.nvrtc_version == slow.nvrtc_version


def test_ctypes_compile_error_is_the_log_line(monkeypatch):
    if not _has_nvrtc():
        pytest.skip("no nvidia-cuda-nvrtc wheel here")
    from smemtile.errors import CompileError
    from smemtile.gpu import nvrtc

    monkeypatch.setenv("SMEMTILE_COMPILE_CACHE", "0")
    with pytest.raises(CompileError, match=r"bad\.cu for sm_80: .*error.*undefined_name"):
        nvrtc.compile_cubin("__global__ void k() { undefined_name = 1; }", [], "sm_80", filename="bad.cu")


def test_meanwhile_runs_beside_the_compile_and_is_withdrawn_without_one(monkeypatch):
    if not _has_nvrtc():
        pytest.skip("no nvidia-cuda-nvrtc wheel here")
    from smemtile.gpu import nvrtc

    monkeypatch.setenv("SMEMTILE_COMPILE_CACHE", "0")
    ran: list[str] = []
    m = nvrtc.meanwhile(lambda: ran.append(threading.current_thread().name))
    nvrtc.compile_cubin(SOURCE, ["k<128>"], "sm_80")
    m.wait()
    assert ran == ["smemtile-nvrtc-meanwhile"]
    idle = nvrtc.meanwhile(lambda: ran.append("late"))
    idle.wait()  # no compile started it: withdrawn
    nvrtc.compile_cubin(SOURCE, ["k<128>"], "sm_80")
    assert ran == ["smemtile-nvrtc-meanwhile"]
    boom = nvrtc.meanwhile(lambda: 1 / 0)  # a failing head start is dropped; the compile is unaffected
    assert nvrtc.compile_cubin(SOURCE, ["k<128>"], "sm_80").lowered == {"k<128>": "_Z1kILi128EEvPf"}
    boom.wait()
