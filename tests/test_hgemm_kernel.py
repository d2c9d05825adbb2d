"""The tensor-core GEMM (smemtile/families/hgemm/hgemm.cu, issue 19 phase 1).

CPU: every shipped configuration compiles with NVRTC for sm_80 and sm_90 with 0 spills, its PTX holds ldmatrix,
mma.sync and cp.async, the static_asserts reject bad parameters with their message, and nvcc builds a translation
unit that includes the kernel with an explicit instantiation. GPU (marked): correctness of the default and
the other shipped configurations against a float64 reference on ragged sizes, the K tail, alpha/beta, split K
and odd leading dimensions (ALIGN 1), with the output poisoned first.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import bench_hgemm as hb  # noqa: E402  (no GPU or torch at import)

pytest.importorskip("cuda.bindings.nvrtc")

SHIPPED = [v for v in hb.ALL if v.label in hb.SHIPPED]
ARCHS = ("sm_80", "sm_90")


def _compile(exprs: list[str], arch: str):
    from smemtile.gpu.nvrtc import compile_cubin

    return compile_cubin(
        hb.SOURCE.read_text(),
        exprs,
        arch,
        headers={"smem_layout.cuh": hb.HEADER.read_text()},
        filename="hgemm.cu",
    )


def test_shipped_list_is_known():
    assert {v.label for v in SHIPPED} == set(hb.SHIPPED)
    assert hb.ALL[0].label in hb.SHIPPED  # the template's defaults


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("variant", SHIPPED, ids=lambda v: v.label)
def test_shipped_variant_compiles_without_spills(variant, arch):
    # one input type with C in the input type, the other with fp32 C (split K: fp32 C only)
    exprs = sorted(
        {
            variant.expr("bf16", variant.c_type("bf16", variant.c_types[0])),
            variant.expr("f16", variant.c_type("f16", variant.c_types[-1])),
        }
    )
    res = _compile(exprs, arch)
    for e in exprs:
        r = res.resources[e]
        assert r.spills == 0 and r.stack_frame == 0, (e, arch, r)
        assert r.registers * variant.threads * variant.min_blocks <= 65536, (e, arch, r)
        assert r.static_smem_bytes == 0  # all shared memory is dynamic: the host passes smem_bytes
    ptx = res.ptx
    for needle in (
        "ldmatrix.sync.aligned.m8n8.x4",
        "mma.sync.aligned.m16n8k16.row.col.f32",
        "cp.async.wait_group",
    ):
        assert needle in ptx, needle
    if variant.align == 8:
        assert "cp.async.cg.shared.global" in ptx
    if not variant.b_col:
        assert "ldmatrix.sync.aligned.m8n8.x4.trans" in ptx
    assert "hgemm_splitk_prepare" in ptx


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"bk": 16}, "BK must be a multiple of 32"),
        ({"stages": 6}, "STAGES (cp.async ring depth) must be 2 to 5"),
        ({"wn": 24}, "WN must be a multiple of 16"),
        ({"split_k": 2}, "SPLIT_K > 1 adds the K slices into C with fp32 atomics"),
    ],
)
def test_static_asserts_state_the_rule(override, message):
    from dataclasses import replace

    from smemtile.errors import CompileError

    v = replace(hb.ALL[0], **override)
    with pytest.raises(CompileError, match="static assertion failed") as e:
        _compile([v.expr("bf16", "bf16")], "sm_90")
    assert message in str(e.value)


def test_default_template_arguments_are_the_bench_default():
    """hgemm<bf16, float> with every other argument defaulted is the first bench variant (same mangled name)."""
    v = hb.ALL[0]
    res = _compile(["hgemm<smemtile::bf16, float>", v.expr("bf16", "f32")], "sm_90")
    assert res.lowered["hgemm<smemtile::bf16, float>"] == res.lowered[v.expr("bf16", "f32")]


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
    reason="nvcc not installed",
)
def test_nvcc_builds_an_explicit_instantiation(tmp_path: Path):
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    v = hb.ALL[0]
    args = v.expr("bf16", "bf16")[len("hgemm<") : -1]
    tu = tmp_path / "k.cu"
    tu.write_text(
        '#include "hgemm/hgemm.cu"\n'
        f"template __global__ void hgemm<{args}>(int, int, int, float, const smemtile::bf16*, int,\n"
        "    const smemtile::bf16*, int, float, smemtile::bf16*, int);\n"
    )
    out = subprocess.run(
        [
            nvcc,
            "-std=c++17",
            "-arch=sm_80",
            f"-I{hb.FAMILIES}",
            "-Xptxas",
            "-v",
            "-c",
            str(tu),
            "-o",
            str(tmp_path / "k.o"),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in out.stderr


# ---- GPU ----------------------------------------------------------------------------------------------------------
def _bf16_bits(x: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bits(bits: np.ndarray, t: str) -> np.ndarray:
    if t == "f16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _to_bits(x: np.ndarray, t: str) -> np.ndarray:
    return x.astype(np.float16).view(np.uint16) if t == "f16" else _bf16_bits(x)


def _run(dev, mod_func, prep, v, t, tc, m, n, k, alpha, beta, ld_extra, rng):
    from cuda.bindings import driver as d

    from smemtile.gpu.run import DeviceBuffer

    def ld(x):
        return x + ld_extra if ld_extra >= 0 else (x if x % 2 else x + 1)  # -1: odd

    lda, ldc = ld(k), ld(n)
    ldb = ld(k) if v.b_col else ld(n)
    a = _to_bits(rng.standard_normal((m, lda)).astype(np.float32), t)
    b = _to_bits(rng.standard_normal((n, ldb) if v.b_col else (k, ldb)).astype(np.float32), t)
    c0 = rng.standard_normal((m, ldc)).astype(np.float32)
    a64, b64 = _from_bits(a, t)[:, :k], _from_bits(b, t)
    b64 = b64[:, :k].T if v.b_col else b64[:, :n]
    if tc == "f32":
        c_host = c0
    else:
        c_host = _to_bits(c0, tc)
    c_in = c_host.astype(np.float64) if tc == "f32" else _from_bits(c_host, tc)
    ref = alpha * (a64 @ b64) + (beta * c_in[:, :n] if beta else 0.0)
    da, db = DeviceBuffer.from_array(a), DeviceBuffer.from_array(b)
    dc = DeviceBuffer.from_array(c_host)
    if beta == 0.0:
        dc.poison()
    P, INT, F = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
    if v.split_k > 1:
        d.cuLaunchKernel(
            prep,
            max(1, m),
            1,
            1,
            256,
            1,
            1,
            0,
            d.CUstream(0),
            ((dc.addr, m, n, ldc, beta), (P, INT, INT, INT, F)),
            0,
        )
    gx, gy, gz = v.grid(m, n)
    vals = (m, n, k, alpha, da.addr, lda, db.addr, ldb, beta, dc.addr, ldc)
    res = d.cuLaunchKernel(
        mod_func,
        gx,
        gy,
        gz,
        v.threads,
        1,
        1,
        v.smem_bytes,
        d.CUstream(0),
        (vals, (INT, INT, INT, F, P, INT, P, INT, F, P, INT)),
        0,
    )
    assert int(res[0]) == 0, res
    assert int(d.cuCtxSynchronize()[0]) == 0
    got = dc.to_array(c_host.shape, c_host.dtype)
    got = got.astype(np.float64) if tc == "f32" else _from_bits(got, tc)
    got = got[:, :n]
    for buf in (da, db, dc):
        buf.free()
    assert np.isfinite(got).all(), "unwritten or NaN outputs"
    den = np.linalg.norm(ref) or 1.0
    return float(np.linalg.norm(got - ref) / den)


GPU_CASES = [  # (M, N, K, alpha, beta, ld extra: 0 tight, 8 padded, -1 odd (ALIGN 1 only))
    (1, 8, 8, 1.0, 0.0, 0),
    (129, 264, 104, 1.0, 0.0, 0),  # ragged M, N; K tail (104 = 3 * 32 + 8)
    (389, 520, 1000, 1.0, 0.0, 8),
    (200, 296, 152, 0.5, -1.5, 8),
    (64, 64, 0, 1.0, 0.5, 0),
]


@pytest.mark.gpu
@pytest.mark.parametrize("variant", SHIPPED, ids=lambda v: v.label)
def test_gpu_matches_float64(variant):
    from cuda.bindings import driver as d

    from smemtile.gpu.run import open_device

    dev = open_device(0)
    res = _compile(variant.exprs(), dev.arch_name)
    module = d.cuModuleLoadData(res.cubin)[1]
    prep = d.cuModuleGetFunction(module, b"hgemm_splitk_prepare")[1]
    rng = np.random.default_rng(19)
    cases = GPU_CASES + (
        [(77, 91, 45, 1.0, 0.0, -1), (130, 270, 75, 2.0, 0.25, -1)] if variant.align == 1 else []
    )
    for t in ("f16", "bf16"):
        for which in variant.c_types:
            tc = variant.c_type(t, which)
            expr = variant.expr(t, tc)
            f = d.cuModuleGetFunction(module, res.lowered[expr].encode())[1]
            attr = d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            assert int(d.cuFuncSetAttribute(f, attr, variant.smem_bytes)[0]) == 0
            for m, n, k, alpha, beta, ld_extra in cases:
                err = _run(dev, f, prep, variant, t, tc, m, n, k, alpha, beta, ld_extra, rng)
                assert err <= hb.TOLERANCE[tc], (expr, (m, n, k, alpha, beta, ld_extra), err)
    d.cuModuleUnload(module)
