"""inspect on the GPU (smemtile.gpu.inspect): the recorded lane addresses equal the addresses computed on the host
from each kernel's indexing, recording leaves the kernel's results bit for bit as they are, and ncu's per-line
wavefronts for the naive transpose's column read are 32 per instruction (ideal 1).

Run on the H200: ``pytest -q -n 0 -m gpu tests/test_inspect_gpu_record.py`` (bench/inspect_gpu_check.sh; with
``SMEMTILE_INSPECT_SAVE=DIR`` the ncu source page of the last test is kept in DIR/ncu)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from smemtile.model.inspect_args import KernelArg
from smemtile.model.ptx import shared_instructions as instructions
from smemtile.model.ptx_instrument import Sample

pytestmark = pytest.mark.gpu

TRANSPOSE = r"""
#ifndef PAD
#define PAD 0
#endif
extern "C" __global__ void naive_transpose(const float* in, float* out, int n) {
  __shared__ float tile[32][32 + PAD];
  int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
  tile[threadIdx.y][threadIdx.x] = in[y * n + x];
  __syncthreads();
  out[(blockIdx.x * 32 + threadIdx.y) * n + blockIdx.y * 32 + threadIdx.x] = tile[threadIdx.x][threadIdx.y];
}
"""

LOOP = r"""
extern "C" __global__ void loop_reads(float* out, int iters) {
  __shared__ float s[32 * 33];
  int t = threadIdx.x, lane = t & 31, w = t >> 5;
#pragma unroll 1
  for (int i = t; i < 32 * 33; i += blockDim.x) s[i] = i;
  __syncthreads();
  float acc = 0.f;
#pragma unroll 1
  for (int k = 0; k < iters; ++k) acc += s[(lane * 33 + k + w) % (32 * 33)];
  out[blockIdx.x * blockDim.x + t] = acc;
}
"""

HISTOGRAM = r"""
extern "C" __global__ void histogram(const unsigned* in, unsigned* bins, int n) {
  __shared__ unsigned h[256];
#pragma unroll 1
  for (int i = threadIdx.x; i < 256; i += blockDim.x) h[i] = 0;
  __syncthreads();
#pragma unroll 1
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    atomicAdd(&h[in[i] & 255], 1u);
  __syncthreads();
#pragma unroll 1
  for (int i = threadIdx.x; i < 256; i += blockDim.x) atomicAdd(&bins[i], h[i]);
}
"""

DYNAMIC = r"""
extern "C" __global__ void dyn_vec(float4* out) {
  extern __shared__ float4 dsm[];
  int t = threadIdx.x;
  dsm[t] = make_float4(t, t + 1, t + 2, t + 3);
  __syncthreads();
  dsm[t + 3072] = dsm[(t + 1) % blockDim.x];
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = dsm[3072 + ((t * 2) % blockDim.x)];
}
"""

GENERIC = r"""
extern "C" __global__ void generic(float* out, float* p, int sel) {
  __shared__ float s[256];
  s[threadIdx.x] = threadIdx.x;
  __syncthreads();
  float* q = sel ? s : p;
  out[blockIdx.x * blockDim.x + threadIdx.x] = q[(threadIdx.x * 4) % blockDim.x];
}
"""

LDMATRIX = r"""
extern "C" __global__ void ldm(unsigned* out) {
  __shared__ __align__(128) unsigned short tile[16 * 64];
  int t = threadIdx.x;
#pragma unroll 1
  for (int i = t; i < 16 * 64; i += 32) tile[i] = i;
  __syncthreads();
  unsigned a = (unsigned)__cvta_generic_to_shared(tile + (t % 16) * 64 + (t / 16) * 8);
  unsigned r0, r1, r2, r3;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a));
  out[t * 4 + 0] = r0; out[t * 4 + 1] = r1; out[t * 4 + 2] = r2; out[t * 4 + 3] = r3;
}
"""

LANES = np.arange(32)


def compile_ptx(source: str, name: str, tmp_path, options: tuple[str, ...] = ()) -> str:
    """PTX with line info; the source is written to a real file so ncu can import it."""
    from smemtile.gpu.nvrtc import compile_cubin

    path = tmp_path / f"{name}.cu"
    path.write_text(source)
    return compile_cubin(source, [], "sm_90", options=("-lineinfo", *options), filename=str(path)).ptx


def arr(name, dtype, count, fill="zeros"):
    return KernelArg(name=name, kind="array", dtype=dtype, count=count, fill=fill)


def val(name, dtype, value):
    return KernelArg(name=name, kind="scalar", dtype=dtype, value=value)


def by_key(records):
    return {(r.instr, r.block, r.warp): r for r in records}


def run(ptx, entry, *, grid, block, args, sample=None, dynamic_smem=0):
    from smemtile.gpu.inspect import check_unchanged, record

    instrs = instructions(ptx, entry)
    kw = dict(grid=grid, block=block, dynamic_smem=dynamic_smem, args=args, sample=sample or Sample())
    records, info = record(ptx, entry, instrs, **kw)
    same = check_unchanged(ptx, entry, instrs, **kw)
    assert same["identical"], same
    return instrs, records, info


@pytest.mark.parametrize("pad", [0, 1])
def test_transpose_addresses(pad, tmp_path):
    n = 256
    ptx = compile_ptx(TRANSPOSE, "naive_transpose", tmp_path, (f"-DPAD={pad}",))
    args = [arr("in", "f32", n * n, "random"), arr("out", "f32", n * n), val("n", "i32", n)]
    instrs, records, info = run(ptx, "naive_transpose", grid=(n // 32, n // 32), block=(32, 32), args=args)
    (st,) = [i for i in instrs if i.op == "store"]
    (ld,) = [i for i in instrs if i.op == "load"]
    assert st.array == ld.array == "tile"
    row = 4 * (32 + pad)
    recs = by_key(records)
    assert len(records) == 2 * 4 * 2  # blocks 0, 1 x warps 0..3 x (store, load), each executed once
    for b in ((0, 0, 0), (1, 0, 0)):
        for w in range(4):  # warp w is threadIdx.y == w; lane l is threadIdx.x == l
            s, r = recs[(st.index, b, w)], recs[(ld.index, b, w)]
            assert s.active == r.active == 0xFFFFFFFF
            assert list(s.addresses) == (w * row + 4 * LANES).tolist()  # tile[ty][tx]
            assert list(r.addresses) == (LANES * row + 4 * w).tolist()  # tile[tx][ty]: the column read
    assert info["executions"] == {st.index: 8, ld.index: 8} and info["dropped"] == 0
    assert info["symbols"] == {"_ZZ15naive_transposeE4tile": 0}


def test_transpose_results_are_the_transpose(tmp_path):
    from smemtile.gpu.inspect import PreparedLaunch, instrument
    from smemtile.model.ptx import entry_params
    from smemtile.model.ptx_instrument import BufferLayout, shared_symbols

    n = 128
    ptx = compile_ptx(TRANSPOSE, "naive_transpose", tmp_path)
    instrs = instructions(ptx, "naive_transpose")
    layout = BufferLayout(len(instrs), len(shared_symbols(ptx, "naive_transpose")), Sample())
    args = [arr("in", "f32", n * n, "iota"), arr("out", "f32", n * n), val("n", "i32", n)]
    k = PreparedLaunch(
        instrument(ptx, "naive_transpose", instrs, Sample()),
        "naive_transpose",
        grid=(4, 4),
        block=(32, 32),
        dynamic_smem=0,
        args=args,
        param_types=[t for t, _ in entry_params(ptx, "naive_transpose")],
        record_nbytes=layout.nbytes,
    )
    try:
        k.launch()
        k.synchronize()
        out = k.outputs()
    finally:
        k.close()
    src = np.arange(n * n, dtype=np.float32).reshape(n, n)
    assert np.array_equal(out["out"].reshape(n, n), src.T)


def test_loop_executions_and_sample_bounds(tmp_path):
    ptx = compile_ptx(LOOP, "loop_reads", tmp_path)
    iters = 100
    args = [arr("out", "f32", 3 * 64), val("iters", "i32", iters)]
    sample = Sample(blocks=1, warps=2, executions=64)
    instrs, records, info = run(ptx, "loop_reads", grid=3, block=64, args=args, sample=sample)
    (st,) = [i for i in instrs if i.op == "store"]
    (ld,) = [i for i in instrs if i.op == "load"]
    # the init loop: 1056 words over 64 threads: warp 0 runs 17 times, warp 1 16 times; the read loop 100 times
    assert info["executions"] == {st.index: 17 + 16, ld.index: 2 * iters}
    assert info["dropped"] == 2 * (iters - 64)
    assert {r.block for r in records} == {(0, 0, 0)} and {r.warp for r in records} == {0, 1}
    for w in range(2):
        stores = [r for r in records if r.instr == st.index and r.warp == w]
        loads = [r for r in records if r.instr == ld.index and r.warp == w]
        assert len(stores) == 17 - w and len(loads) == 64
        for e, r in enumerate(stores):
            assert list(r.addresses) == (4 * (LANES + 32 * w + 64 * e)).tolist()
        for e, r in enumerate(loads):  # records of one warp come back in execution order
            assert list(r.addresses) == (4 * ((LANES * 33 + e + w) % (32 * 33))).tolist()


def test_histogram_data_dependent_atomics(tmp_path):
    from smemtile.gpu.inspect import PreparedLaunch
    from smemtile.model.ptx import entry_params

    n = 4096
    ptx = compile_ptx(HISTOGRAM, "histogram", tmp_path)
    args = [arr("in", "u32", n, "iota"), arr("bins", "u32", 256), val("n", "i32", n)]
    instrs, records, info = run(ptx, "histogram", grid=4, block=256, args=args)
    (atom,) = [i for i in instrs if i.op in ("atom", "red")]
    for b in range(2):
        for w in range(4):
            rs = [r for r in records if r.instr == atom.index and r.block == (b, 0, 0) and r.warp == w]
            assert len(rs) == 4  # i = b*256 + 32w + lane + 1024e, e = 0..3
            for e, r in enumerate(rs):
                i = b * 256 + 32 * w + LANES + 1024 * e
                assert list(r.addresses) == (4 * (i & 255)).tolist()  # h[in[i] & 255], in = iota
    assert info["executions"][atom.index] == 2 * 4 * 4
    k = PreparedLaunch(
        ptx,
        "histogram",
        grid=4,
        block=256,
        dynamic_smem=0,
        args=args,
        param_types=[t for t, _ in entry_params(ptx, "histogram")],
    )
    try:
        k.launch()
        k.synchronize()
        assert k.outputs()["bins"].tolist() == [n // 256] * 256
    finally:
        k.close()


def test_dynamic_shared_memory_above_48k_and_vectors(tmp_path):
    ptx = compile_ptx(DYNAMIC, "dyn_vec", tmp_path)
    args = [arr("out", "f32", 4 * 2 * 128)]
    instrs, records, info = run(ptx, "dyn_vec", grid=2, block=128, args=args, dynamic_smem=65536)
    assert info["dynamic_smem"] == 65536
    stores = sorted((i for i in instrs if i.op == "store"), key=lambda i: i.ptx_line)
    loads = sorted((i for i in instrs if i.op == "load"), key=lambda i: i.ptx_line)
    assert all(i.width == 16 for i in stores + loads)
    recs = by_key(records)
    for w in range(4):
        t = 32 * w + LANES
        for b in ((0, 0, 0), (1, 0, 0)):
            assert list(recs[(stores[0].index, b, w)].addresses) == (16 * t).tolist()
            assert list(recs[(stores[-1].index, b, w)].addresses) == (16 * (t + 3072)).tolist()
            assert list(recs[(loads[0].index, b, w)].addresses) == (16 * ((t + 1) % 128)).tolist()
            assert list(recs[(loads[-1].index, b, w)].addresses) == (16 * (3072 + (t * 2) % 128)).tolist()


@pytest.mark.parametrize("sel", [1, 0])
def test_generic_loads_recorded_only_when_shared(sel, tmp_path):
    ptx = compile_ptx(GENERIC, "generic", tmp_path)
    args = [arr("out", "f32", 256), arr("p", "f32", 256, "random"), val("sel", "i32", sel)]
    instrs, records, info = run(ptx, "generic", grid=1, block=256, args=args)
    (gen,) = [i for i in instrs if i.space == "generic"]
    got = [r for r in records if r.instr == gen.index]
    if not sel:  # a global pointer: nothing recorded, nothing counted
        assert got == [] and info["executions"][gen.index] == 0
        return
    assert len(got) == 4 and info["executions"][gen.index] == 4
    for r in got:
        t = 32 * r.warp + LANES
        assert r.active == 0xFFFFFFFF
        assert list(r.addresses) == (4 * ((t * 4) % 256)).tolist()


def test_ldmatrix_row_addresses_and_result(tmp_path):
    ptx = compile_ptx(LDMATRIX, "ldm", tmp_path)
    args = [arr("out", "u32", 128)]
    instrs, records, info = run(ptx, "ldm", grid=1, block=32, args=args)
    (ldm,) = [i for i in instrs if i.op == "ldmatrix"]
    (r,) = [r for r in records if r.instr == ldm.index]
    assert ldm.matrices == 4
    assert list(r.addresses) == ((LANES % 16) * 128 + (LANES // 16) * 16).tolist()
    from smemtile.gpu.inspect import PreparedLaunch
    from smemtile.model.ptx import entry_params

    k = PreparedLaunch(
        ptx,
        "ldm",
        grid=1,
        block=32,
        dynamic_smem=0,
        args=args,
        param_types=[t for t, _ in entry_params(ptx, "ldm")],
    )
    try:
        k.launch()
        k.synchronize()
        out = k.outputs()["out"].reshape(32, 4)
    finally:
        k.close()
    for lane in range(32):
        for m in range(4):
            src = 8 * m + lane // 4  # the lane whose address is the row this lane's fragment comes from
            flat = (src % 16) * 64 + (src // 16) * 8 + 2 * (lane % 4)
            assert out[lane, m] == flat | ((flat + 1) << 16)


def test_ncu_per_line_naive_transpose(tmp_path):
    from smemtile.gpu.inspect import find_ncu, ncu_per_line

    if find_ncu() is None:
        pytest.skip("ncu not installed")
    n = 256
    ptx = compile_ptx(TRANSPOSE, "naive_transpose", tmp_path)
    instrs = instructions(ptx, "naive_transpose")
    (ld,) = [i for i in instrs if i.op == "load"]
    (st,) = [i for i in instrs if i.op == "store"]
    args = [arr("in", "f32", n * n, "random"), arr("out", "f32", n * n), val("n", "i32", n)]
    lines = ncu_per_line(
        ptx,
        "naive_transpose",
        grid=(n // 32, n // 32),
        block=(32, 32),
        dynamic_smem=0,
        args=args,
        save_dir=Path(os.environ.get("SMEMTILE_INSPECT_SAVE", tmp_path)) / "ncu",
    )
    warps = (n // 32) ** 2 * 32
    col = lines[(ld.file, ld.line)]
    assert col["instructions"] == warps
    assert col["wavefronts"] == 32 * warps and col["ideal"] == warps  # 32-way: Excessive 31 per instruction
    row = lines[(st.file, st.line)]
    assert row["instructions"] == warps and row["wavefronts"] == warps


def _corpus():
    from test_inspect_instrument import CORPUS

    return CORPUS


@pytest.mark.parametrize("args_yaml", _corpus(), ids=lambda p: p.name.split(".")[0])
def test_corpus_records_and_results_unchanged(args_yaml):
    """Every corpus kernel records (something, within the sample) and computes bit for bit what it computes
    without the recording."""
    from test_inspect_instrument import corpus_launch, corpus_ptx

    from smemtile.model.inspect_args import load_args
    from smemtile.model.ptx import entry_params
    from smemtile.pipeline.inspect import _defines

    launch = corpus_launch(args_yaml)
    ptx, entry = corpus_ptx(launch)
    args = load_args(launch["args"], entry_params(ptx, entry), _defines(launch["defines"])[1])
    sample = Sample()
    instrs, records, info = run(
        ptx,
        entry,
        grid=launch["grid"],
        block=launch["block"],
        args=args,
        sample=sample,
        dynamic_smem=launch["smem"],
    )
    assert records and info["dropped"] >= 0
    warps = min(sample.warps, -(-int(np.prod(launch["block"])) // 32))
    for r in records:
        assert r.warp < warps and r.block in {(0, 0, 0), (1, 0, 0), (0, 1, 0)}
        assert r.active and all(a == 0 for lane, a in enumerate(r.addresses) if not r.active >> lane & 1)
        assert all(0 <= a < 228 * 1024 for a in r.addresses)  # inside the CTA's shared window
