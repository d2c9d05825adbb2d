"""What `inspect`'s recording costs: a 4096^2 tiled SGEMM timed with and without the instrumentation at the
default sample (2 blocks, 4 warps, 64 executions), and the wall time of one record() including the compile.

    python -m bench.bench_inspect_overhead [--out FILE.json] [--size 4096] [--runs 20]

The kernel: 128 x 128 x 8 tiles, 256 threads, 8 x 8 outputs per thread, A stored transposed in shared memory
(four scalar stores per thread), B stored with one float4, the inner loop reading both with float4 loads.
Results: the instrumented kernel's C must equal the plain one's bit for bit, and 16 entries of C are checked
against float64 on the host; "function" gives the registers and local bytes the driver's JIT gave each kernel.
Besides the default sample, two variants say where time goes ("overhead_pct_by_variant"):
"sample_off" is the instrumented module with no block in the sample, decided at run time (every warp runs the
prologue, then the plain copy: the cost of the larger function alone), "executions_1" records one execution
per instruction (the sampled warps' sites are past the bound almost always: what counting costs).
Needs a GPU (exit 3 without one).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

SGEMM = r"""
#define BM 128
#define BN 128
#define BK 8
extern "C" __global__ void __launch_bounds__(256) sgemm_tiled(int M, int N, int K, const float* __restrict__ A,
                                                             const float* __restrict__ B, float* __restrict__ C) {
  __shared__ __align__(16) float As[BK][BM];
  __shared__ __align__(16) float Bs[BK][BN];
  int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const float* Ab = A + (size_t)blockIdx.y * BM * K;
  const float* Bb = B + (size_t)blockIdx.x * BN;
  int ar = tid / 2, ac = (tid % 2) * 4, br = tid / 32, bc = (tid % 32) * 4;
  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;
  for (int k0 = 0; k0 < K; k0 += BK) {
    float4 a = *(const float4*)(Ab + (size_t)ar * K + k0 + ac);
    As[ac + 0][ar] = a.x; As[ac + 1][ar] = a.y; As[ac + 2][ar] = a.z; As[ac + 3][ar] = a.w;
    *(float4*)&Bs[br][bc] = *(const float4*)(Bb + (size_t)(k0 + br) * N + bc);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float4 a0 = *(const float4*)&As[k][ty * 4], a1 = *(const float4*)&As[k][ty * 4 + 64];
      float4 b0 = *(const float4*)&Bs[k][tx * 4], b1 = *(const float4*)&Bs[k][tx * 4 + 64];
      float ra[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      float rb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] += ra[i] * rb[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    int row = blockIdx.y * BM + ty * 4 + (i < 4 ? i : 60 + i);
#pragma unroll
    for (int j = 0; j < 8; j += 4) {
      int col = blockIdx.x * BN + tx * 4 + (j < 4 ? 0 : 64);
      *(float4*)&C[(size_t)row * N + col] = make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
    }
  }
}
"""
ENTRY = "sgemm_tiled"


def _func_attrs(launch) -> dict:
    """What the driver's JIT gave the function: registers per thread, local (stack) bytes per thread, static
    shared bytes (the recording's scratch is local memory that only the sampled warps touch)."""
    from smemtile.gpu.inspect import _driver, _ok

    d = _driver()
    a = d.CUfunction_attribute
    get = lambda attr: int(_ok(d.cuFuncGetAttribute(attr, launch.func), "cuFuncGetAttribute"))  # noqa: E731
    return {
        "registers": get(a.CU_FUNC_ATTRIBUTE_NUM_REGS),
        "local_bytes": get(a.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES),
        "shared_bytes": get(a.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--runs", type=int, default=20)
    opt = ap.parse_args()
    os.environ["SMEMTILE_COMPILE_CACHE"] = "0"  # the compile is part of what inspect costs

    from smemtile.errors import SmemtileError
    from smemtile.gpu.inspect import PreparedLaunch, check_unchanged, instrument, record
    from smemtile.gpu.nvrtc import compile_cubin
    from smemtile.model.inspect_args import KernelArg
    from smemtile.model.ptx import entry_params, shared_instructions
    from smemtile.model.ptx_instrument import BufferLayout, Sample, shared_symbols

    n = opt.size
    sample = Sample()
    args = [
        KernelArg("M", "scalar", "i32", value=n),
        KernelArg("N", "scalar", "i32", value=n),
        KernelArg("K", "scalar", "i32", value=n),
        KernelArg("A", "array", "f32", n * n, "random"),
        KernelArg("B", "array", "f32", n * n, "random"),
        KernelArg("C", "array", "f32", n * n),
    ]
    launch = dict(grid=(n // 128, n // 128), block=256, dynamic_smem=0, args=args)
    doc: dict = {
        "size": n,
        "sample": {"blocks": sample.blocks, "warps": sample.warps, "executions": sample.executions},
    }
    try:
        t0 = time.perf_counter()
        ptx = compile_cubin(SGEMM, [], "sm_90", options=("-lineinfo",), filename="sgemm_tiled.cu").ptx
        instrs = shared_instructions(ptx, ENTRY)
        doc["compile_s"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        records, info = record(ptx, ENTRY, instrs, sample=sample, **launch)
        doc["record_s"] = time.perf_counter() - t1  # instrument + JIT + inputs + launch + decode
        doc["compile_and_record_s"] = time.perf_counter() - t0
        doc["instructions"] = len(instrs)
        doc["records"] = len(records)
        doc["dropped"] = info["dropped"]
        doc["record_bytes"] = info["record_bytes"]
        types = [t for t, _ in entry_params(ptx, ENTRY)]
        layout = BufferLayout(len(instrs), len(shared_symbols(ptx, ENTRY)), sample)
        plain = PreparedLaunch(ptx, ENTRY, param_types=types, **launch)
        regs = _func_attrs(plain)["registers"]  # the cap inspect's record() puts on the recording
        text = instrument(ptx, ENTRY, instrs, sample, max_registers=regs)
        # no block in the sample, decided at run time (a word of the zeroed buffer that only sampled warps
        # write) so that ptxas keeps the recording copy and allocates the function as it does for the real one
        bound = f"setp.lt.u32 \t%smt_p0, %smt_r5, {sample.blocks};"
        zero = (
            f"ld.global.u32 \t%smt_r9, [%smt_rd0+{4 * layout.slot_off}];\n"
            "\tsetp.lt.u32 \t%smt_p0, %smt_r5, %smt_r9;"
        )
        off = text.replace(bound, zero, 1)
        assert off != text, "the prologue's sample bound moved"
        one = Sample(blocks=sample.blocks, warps=sample.warps, executions=1)
        one_layout = BufferLayout(len(instrs), len(shared_symbols(ptx, ENTRY)), one)
        kernels = {"plain": plain}
        try:
            kernels["instrumented"] = PreparedLaunch(
                text, ENTRY, param_types=types, record_nbytes=layout.nbytes, **launch
            )
            kernels["sample_off"] = PreparedLaunch(
                off, ENTRY, param_types=types, record_nbytes=layout.nbytes, **launch
            )
            kernels["executions_1"] = PreparedLaunch(
                instrument(ptx, ENTRY, instrs, one, regs),
                ENTRY,
                param_types=types,
                record_nbytes=one_layout.nbytes,
                **launch,
            )
            doc["function"] = {name: _func_attrs(k) for name, k in kernels.items()}
            times: dict[str, list[float]] = {name: [] for name in kernels}
            for _ in range(2):  # interleaved, so that clock drift hits all alike
                for name, k in kernels.items():
                    times[name].append(k.time_ms(opt.runs))
            plain.launch()
            plain.synchronize()
            c = plain.outputs()["C"].reshape(n, n)
            a, b = plain.arrays["A"][1].reshape(n, n), plain.arrays["B"][1].reshape(n, n)
        finally:
            for k in kernels.values():
                k.close()
        best = {name: min(t) for name, t in times.items()}
        tp, ti = best["plain"], best["instrumented"]
        doc["kernel_ms"] = {**best, "all": times}
        doc["overhead_pct"] = 100.0 * (ti - tp) / tp
        doc["overhead_pct_by_variant"] = {
            name: 100.0 * (t - tp) / tp for name, t in best.items() if name != "plain"
        }
        doc["tflops_plain"] = 2 * n**3 / (tp * 1e-3) / 1e12
        rng = np.random.default_rng(7)
        idx = rng.integers(0, n, (16, 2))
        ref = np.array([a[i].astype(np.float64) @ b[:, j].astype(np.float64) for i, j in idx])
        got = np.array([c[i, j] for i, j in idx], dtype=np.float64)
        doc["c_max_rel_error"] = float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30))
        doc["c_correct"] = doc["c_max_rel_error"] < 1e-4
        f = doc["function"]
        doc["registers_within_plain"] = all(v["registers"] <= f["plain"]["registers"] for v in f.values())
        doc["unchanged"] = check_unchanged(ptx, ENTRY, instrs, sample=sample, **launch)["identical"]
    except SmemtileError as e:
        print(f"error: {e}", file=sys.stderr)
        doc["error"] = str(e)
        if opt.out:
            opt.out.write_text(json.dumps(doc, indent=1))
        return e.exit_code
    text = json.dumps(doc, indent=1)
    print(text)
    if opt.out:
        opt.out.write_text(text)
    return 0 if doc["c_correct"] and doc["unchanged"] and doc["registers_within_plain"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
