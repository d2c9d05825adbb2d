"""Issue 19, phase 1: the tensor-core GEMM (smemtile/families/hgemm/hgemm.cu) against cuBLAS on one GPU.

Every variant is compiled with NVRTC (smemtile.gpu.nvrtc.compile_cubin, name expressions, the device's exact
arch, in parallel processes), loaded with cuModuleLoadData into torch's primary context and launched with
cuLaunchKernel on torch memory. No other part of smemtile is used.

Correctness first, in a child process (a faulting variant cannot take the timing down with it): every variant
at ragged sizes (M, N not multiples of the tile, K not a multiple of BK, K = 0, a 1x1x1 problem), alpha/beta,
padded and unaligned leading dimensions (the 2-byte copy path), f16 and bf16 inputs, C in the input type and
in fp32. The output is poisoned with NaN first (beta = 0 never reads C); reference: torch in float64 on the same
(rounded) inputs; error = ||C - ref||_F / ||ref||_F. Tolerances (the output rounding dominates; fp32
accumulation of exact products adds ~1e-6): C fp32 1e-4, C f16 1e-3, C bf16 6e-3.

Timing: per shape and dtype, our variants and torch.matmul (cuBLAS; fp16/bf16 reduced-precision reductions
off, i.e. fp32 accumulation) in alternating rounds (order reversed every round), >= 15 rounds; before every
timed call a 512 MiB memset (outside the events) evicts L2; CUDA events around the call alone (split K: the
C = beta*C prepare kernel and the GEMM). Reported: median, and the spread as (p90 - p10) / median. Each variant's
output at the timed size is also checked against float64.

    python -m bench.bench_hgemm --json $OUT/hgemm_h200.json        # on the GPU machine
    python -m bench.bench_hgemm --list                             # variants and shapes (no GPU)
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from bench.timing import environment, stats, time_rounds  # noqa: E402

FAMILIES = ROOT / "smemtile" / "families"
SOURCE = FAMILIES / "hgemm" / "hgemm.cu"
HEADER = FAMILIES / "smem_layout.cuh"

CPP_TYPE = {"f16": "smemtile::f16", "bf16": "smemtile::bf16", "f32": "float"}
TOLERANCE = {"f32": 1e-4, "f16": 1e-3, "bf16": 6e-3}
FLUSH_BYTES = 512 << 20


def ilog2(x: int) -> int:
    return x.bit_length() - 1


def default_swizzle(cols: int) -> tuple[int, int, int]:
    """hgemm.cu's hgemm_swizzle_b/_s: Swizzle<B, 3, S> that makes a row of `cols` 2-byte elements conflict-free."""
    if cols >= 64:
        return (3, 3, ilog2(cols) - 3)
    return (ilog2(cols // 8), 3, 3)


@dataclass(frozen=True)
class Variant:
    """One hgemm<...> configuration (the template parameters; dtypes are chosen per problem)."""

    label: str
    bm: int = 128
    bn: int = 256
    bk: int = 32
    wm: int = 64
    wn: int = 64
    stages: int = 4
    group_m: int = 8
    split_k: int = 1
    min_blocks: int = 1
    b_col: bool = False
    align: int = 8  # 8: 16-byte cp.async (lda, ldb % 8 == 0, 16-byte aligned A, B); 1: any ld (2-byte loads)
    layout: str = "swizzle"  # "swizzle" (the default), "dense" (no swizzle, no padding) or "pad8"
    c_types: tuple[str, ...] = ("same", "f32")  # C types built: the input type and/or fp32

    @property
    def threads(self) -> int:
        return (self.bm // self.wm) * (self.bn // self.wn) * 32

    def layouts(self) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int]]:
        """(PAD, B, M, S) for As and Bs."""
        b_cols = self.bk if self.b_col else self.bn
        if self.layout == "dense":
            return (0, 0, 0, 0), (0, 0, 0, 0)
        if self.layout == "pad8":
            return (8, 0, 0, 0), (8, 0, 0, 0)
        return (0, *default_swizzle(self.bk)), (0, *default_swizzle(b_cols))

    @property
    def smem_bytes(self) -> int:
        (pa, *_), (pb, *_) = self.layouts()
        b = self.bn * (self.bk + pb) if self.b_col else self.bk * (self.bn + pb)
        return self.stages * (self.bm * (self.bk + pa) + b) * 2

    def expr(self, t: str, tc: str) -> str:
        la, lb = self.layouts()
        args = [
            CPP_TYPE[t],
            CPP_TYPE[tc],
            "true" if self.b_col else "false",
            self.bm,
            self.bn,
            self.bk,
            self.wm,
            self.wn,
            self.stages,
            self.group_m,
            self.split_k,
            self.min_blocks,
            self.align,
            *la,
            *lb,
        ]
        return f"hgemm<{', '.join(str(a) for a in args)}>"

    def c_type(self, t: str, which: str) -> str:
        return t if which == "same" else which

    def exprs(self) -> list[str]:
        return [self.expr(t, self.c_type(t, c)) for t in ("f16", "bf16") for c in self.c_types]

    def grid(self, m: int, n: int) -> tuple[int, int, int]:
        return (-(-m // self.bm) * -(-n // self.bn), 1, self.split_k)


# Variants timed on the square shapes (and the ragged one). The first is the template's default.
BIG = [
    Variant("256x128x32 S4 (default)", bm=256, bn=128),  # the template's defaults since run 3 (was 128x256)
    Variant("128x256x32 S4"),
    Variant("128x256x32 S3", stages=3),
    Variant("128x256x32 S5", stages=5),
    Variant("128x256x64 S3", bk=64, stages=3),
    Variant("128x256x64 S4", bk=64, stages=4),
    Variant("256x128x64 S3", bm=256, bn=128, bk=64, stages=3),
    Variant("128x128x32 S4 4w MB2", bn=128, min_blocks=2),
    Variant("128x128x32 S5 4w MB2", bn=128, stages=5, min_blocks=2),
    Variant("128x128x64 S3 4w", bn=128, bk=64, stages=3),  # 255 registers: still 2 blocks/SM
    Variant("128x256x32 S4 dense", layout="dense"),
    Variant("128x256x32 S4 pad8", layout="pad8"),
    Variant("128x256x32 S4 GROUP_M 16", group_m=16),
]
B_COL = [
    Variant("128x256x32 S4 B col-major", b_col=True),
    Variant("128x128x32 S4 4w MB2 B col", bn=128, min_blocks=2, b_col=True),
]
# ALIGN 1: any leading dimension (odd ones included), 2-byte loads through registers: correct, not fast
UNALIGNED = [
    Variant("128x256x32 S4 ALIGN 1", align=1),
    Variant("128x256x32 S4 B col ALIGN 1", b_col=True, align=1),
]
SKINNY = [  # 64 x 8192 x 4096: 64 block columns of 128; split K fills the SMs (fp32 C, atomics)
    Variant(
        "64x128x64 w64x32 S4 SK4 MB2", bm=64, bn=128, bk=64, wn=32, split_k=4, min_blocks=2, c_types=("f32",)
    ),
    Variant(
        "64x128x64 w64x32 S4 SK2 MB2", bm=64, bn=128, bk=64, wn=32, split_k=2, min_blocks=2, c_types=("f32",)
    ),
    Variant(
        "64x128x32 w64x32 S5 SK4 MB2",
        bm=64,
        bn=128,
        bk=32,
        wn=32,
        stages=5,
        split_k=4,
        min_blocks=2,
        c_types=("f32",),
    ),
    Variant(
        "64x128x64 w32x64 S4 SK4 MB2", bm=64, bn=128, bk=64, wm=32, split_k=4, min_blocks=2, c_types=("f32",)
    ),
    Variant("64x64x64 w32x32 S3 MB4", bm=64, bn=64, bk=64, wm=32, wn=32, stages=3, min_blocks=4),
    Variant("64x128x64 w64x32 S4 MB2", bm=64, bn=128, bk=64, wn=32, min_blocks=2),
]
ALL = BIG + B_COL + SKINNY + UNALIGNED
# The configurations the family ships (tests/test_hgemm_kernel.py compiles each for sm_80 and sm_90, 0 spills)
SHIPPED = (
    "256x128x32 S4 (default)",
    "128x256x32 S4",
    "128x256x64 S3",
    "128x128x32 S4 4w MB2",
    "128x128x64 S3 4w",
    "128x256x32 S4 B col-major",
    "64x128x64 w64x32 S4 SK2 MB2",
    "64x128x64 w64x32 S4 SK4 MB2",
    "128x256x32 S4 ALIGN 1",
    "128x256x32 S4 B col ALIGN 1",
)

# (M, N, K, padded leading dimensions, variants). Padded: lda, ldb, ldc rounded up to multiples of 8 elements
# (16 bytes), for cuBLAS and for us: the 16-byte copies need it (an odd ld takes the 2-byte path, checked below).
BY_LABEL = {v.label: v for v in ALL}


def pick(*labels: str) -> list[Variant]:
    return [BY_LABEL[lb] for lb in labels]


SHAPES = [
    (4096, 4096, 4096, False, BIG + B_COL),
    (
        8192,
        8192,
        8192,
        False,
        pick("256x128x32 S4 (default)", "128x256x32 S4", "128x256x64 S3")
        + [
            v
            for v in BIG + B_COL[:1]
            if v.label not in ("256x128x32 S4 (default)", "128x256x32 S4", "128x256x64 S3")
        ],
    ),
    (4095, 4097, 1023, True, BIG[:10]),
    (
        4096,
        4096,
        1024,
        False,
        pick("256x128x32 S4 (default)", "128x256x32 S4", "128x128x32 S4 4w MB2", "128x128x64 S3 4w"),
    ),  # the aligned neighbour of the ragged shape (context)
    (64, 8192, 4096, False, SKINNY + pick("256x128x32 S4 (default)", "128x128x32 S4 4w MB2")),
    (4095, 4097, 1023, False, UNALIGNED[:1]),  # tight, odd lda and ldb: ALIGN 1 only (information)
]

# Small correctness problems: (M, N, K, alpha, beta, leading dimensions). "r8": each ld rounded up to a multiple
# of 8 elements (the 16-byte cp.async path); "r8+8": 8 more; "odd": odd lds (2-byte alignment: the 2-byte path).
SMALL = [
    (1, 1, 1, 1.0, 0.0, "odd"),
    (17, 33, 40, 1.0, 0.0, "r8"),
    (129, 257, 100, 1.0, 0.0, "r8"),
    (256, 512, 64, 1.0, 0.0, "r8"),
    (389, 519, 33, 1.0, 0.0, "r8+8"),
    (300, 520, 1000, 1.0, 0.0, "r8"),
    (64, 64, 0, 1.0, 0.5, "r8"),
    (200, 296, 152, 0.5, -1.5, "r8+8"),
    (77, 91, 45, 1.0, 0.0, "odd"),
    (130, 270, 75, 2.0, 0.25, "odd"),
]


def round8(x: int) -> int:
    return (x + 7) // 8 * 8


# ---- compile (no GPU) -----------------------------------------------------------------------------------------------
def _compile_one(job: tuple[str, tuple[str, ...], str]) -> dict:
    from smemtile.gpu.nvrtc import compile_cubin

    label, exprs, arch = job
    t0 = time.perf_counter()
    try:
        r = compile_cubin(
            SOURCE.read_text(),
            list(exprs),
            arch,
            headers={"smem_layout.cuh": HEADER.read_text()},
            filename="hgemm.cu",
        )
    except Exception as e:  # a variant that does not build is data, not a crash
        return {"label": label, "error": str(e)[:2000]}
    return {
        "label": label,
        "cubin": r.cubin,
        "lowered": r.lowered,
        "seconds": time.perf_counter() - t0,
        "resources": {e: v.to_dict() for e, v in r.resources.items()},
        "nvrtc": r.nvrtc_version,
    }


def source_sha256() -> str:
    import hashlib

    return hashlib.sha256(SOURCE.read_bytes() + HEADER.read_bytes()).hexdigest()


def compile_all(variants: list[Variant], arch: str, workers: int | None = None) -> dict[str, dict]:
    """One NVRTC program per variant (all its name expressions), in parallel spawned processes."""
    import multiprocessing

    jobs = [(v.label, tuple(v.exprs()), arch) for v in variants]
    ctx = multiprocessing.get_context("spawn")  # the parent may hold a CUDA context
    with ProcessPoolExecutor(
        max_workers=workers or min(len(jobs), os.cpu_count() or 1), mp_context=ctx
    ) as ex:
        return {r["label"]: r for r in ex.map(_compile_one, jobs)}


# ---- driver API -----------------------------------------------------------------------------------------------------
def _drv():
    from cuda.bindings import driver

    return driver


def _ok(res):
    err = res[0] if isinstance(res, tuple) else res
    if int(err) != 0:
        d = _drv()
        name = d.cuGetErrorName(err)[1]
        raise RuntimeError(f"CUDA driver error {name.decode() if isinstance(name, bytes) else name}")
    if isinstance(res, tuple):
        return res[1] if len(res) == 2 else res[1:]
    return None


P, INT, F = ctypes.c_void_p, ctypes.c_int, ctypes.c_float


class Module:
    """A compiled variant loaded into the current context: one CUfunction per name expression."""

    def __init__(self, variant: Variant, built: dict):
        d = _drv()
        self.v, self.built = variant, built
        self.module = _ok(d.cuModuleLoadData(built["cubin"]))
        self.funcs, self.info = {}, {}
        a = d.CUfunction_attribute
        for expr, lowered in built["lowered"].items():
            f = _ok(d.cuModuleGetFunction(self.module, lowered.encode()))
            _ok(
                d.cuFuncSetAttribute(f, a.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, variant.smem_bytes)
            )
            self.funcs[expr] = f
            self.info[expr] = {
                "registers": int(_ok(d.cuFuncGetAttribute(a.CU_FUNC_ATTRIBUTE_NUM_REGS, f))),
                "local_bytes": int(_ok(d.cuFuncGetAttribute(a.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f))),
                "blocks_per_sm": int(
                    _ok(d.cuOccupancyMaxActiveBlocksPerMultiprocessor(f, variant.threads, variant.smem_bytes))
                ),
                "ptxas": built["resources"].get(expr),
            }
        self.prepare = _ok(d.cuModuleGetFunction(self.module, b"hgemm_splitk_prepare"))

    def launch(self, expr: str, m, n, k, alpha, a_ptr, lda, b_ptr, ldb, beta, c_ptr, ldc, stream) -> None:
        d = _drv()
        v = self.v
        if v.split_k > 1:  # C = beta * C first: the slices add into it
            args = ((c_ptr, m, n, ldc, beta), (P, INT, INT, INT, F))
            _ok(
                d.cuLaunchKernel(
                    self.prepare, max(1, min(m, 65535)), 1, 1, 256, 1, 1, 0, d.CUstream(stream), args, 0
                )
            )
        vals = (m, n, k, alpha, a_ptr, lda, b_ptr, ldb, beta, c_ptr, ldc)
        types = (INT, INT, INT, F, P, INT, P, INT, F, P, INT)
        gx, gy, gz = v.grid(m, n)
        _ok(
            d.cuLaunchKernel(
                self.funcs[expr],
                gx,
                gy,
                gz,
                v.threads,
                1,
                1,
                v.smem_bytes,
                d.CUstream(stream),
                (vals, types),
                0,
            )
        )


# ---- problems on the GPU --------------------------------------------------------------------------------------------
class Problem:
    """A, B (row-major K x N, or column-major with b_col) and C with the given leading dimensions, in torch memory."""

    def __init__(self, torch, m, n, k, t, tc, *, b_col=False, ld_mode: str = "tight", seed=0):
        self.torch = torch
        self.m, self.n, self.k, self.t, self.tc, self.b_col = m, n, k, t, tc, b_col
        dt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
        self.dt = dt
        g = torch.Generator(device="cuda").manual_seed(seed)

        def ld(x):
            if ld_mode == "odd":
                return x + 1 if x % 2 == 0 else x
            return {"tight": max(x, 1), "r8": round8(max(x, 1)), "r8+8": round8(x) + 8}[ld_mode]

        self.lda, self.ldc = ld(k), ld(n)
        self.ldb = ld(k) if b_col else ld(n)
        self.a_store = torch.randn(m, self.lda, device="cuda", generator=g).to(dt[t])
        rows, cols = (n, k) if b_col else (k, n)
        self.b_store = torch.randn(rows, self.ldb, device="cuda", generator=g).to(dt[t])
        self.c_store = torch.randn(m, self.ldc, device="cuda", generator=g).to(dt[tc])
        self.a = self.a_store[:, :k]
        self.b = self.b_store[:, :k].t() if b_col else self.b_store[:, :n]  # logical K x N
        self.c = self.c_store[:, :n]
        self.c0 = self.c.clone()

    def with_c(self, tc: str) -> Problem:
        """The same A and B with a fresh C of type tc (same leading dimension)."""
        q = Problem.__new__(Problem)
        q.__dict__.update(self.__dict__)
        q.tc = tc
        q.c_store = self.torch.randn(self.m, self.ldc, device="cuda").to(self.dt[tc])
        q.c = q.c_store[:, : self.n]
        q.c0 = q.c.clone()
        return q

    def reference(self, alpha: float, beta: float):
        ref = alpha * (self.a.double() @ self.b.double())
        if beta != 0.0:
            ref += beta * self.c0.double()
        return ref

    def reset_c(self, beta: float) -> None:
        """NaN everywhere when C is not read (beta = 0), else the original C."""
        if beta == 0.0:
            self.c_store.fill_(float("nan"))
        else:
            self.c.copy_(self.c0)

    def args(self, alpha, beta):
        return (
            self.m,
            self.n,
            self.k,
            alpha,
            self.a_store.data_ptr(),
            self.lda,
            self.b_store.data_ptr(),
            self.ldb,
            beta,
            self.c_store.data_ptr(),
            self.ldc,
        )

    def error(self, ref) -> float:
        got = self.c.double()
        if not bool(self.torch.isfinite(got).all()):
            return float("inf")
        den = float(ref.norm())
        return float((got - ref).norm()) / (den if den > 0 else 1.0)


def check_small(mod: Module, torch, log, sizes=None) -> list[dict]:
    """Every (t, tc) built for the variant, at the SMALL sizes."""
    out = []
    sizes = SMALL if sizes is None else sizes
    stream = torch.cuda.current_stream().cuda_stream
    for t in ("f16", "bf16"):
        for which in mod.v.c_types:
            tc = mod.v.c_type(t, which)
            expr = mod.v.expr(t, tc)
            for i, (m, n, k, alpha, beta, ld_mode) in enumerate(sizes):
                p = Problem(torch, m, n, k, t, tc, b_col=mod.v.b_col, ld_mode=ld_mode, seed=100 + i)
                p.reset_c(beta)
                mod.launch(expr, *p.args(alpha, beta), stream)
                torch.cuda.synchronize()
                if ld_mode == "odd" and mod.v.align == 8:  # misuse: the kernel must leave its tiles NaN
                    err = float(torch.isnan(p.c.float()).float().mean()) if p.c.numel() else 1.0
                    ok = err == 1.0
                else:
                    err = p.error(p.reference(alpha, beta))
                    ok = err <= TOLERANCE[tc]
                out.append(
                    {
                        "variant": mod.v.label,
                        "expr": expr,
                        "t": t,
                        "tc": tc,
                        "size": [m, n, k],
                        "alpha": alpha,
                        "beta": beta,
                        "ld": [p.lda, p.ldb, p.ldc],
                        "b_col": mod.v.b_col,
                        "err": err,
                        "ok": ok,
                    }
                )
                if not ok:
                    log(
                        f"   FAIL [{mod.v.label}] {t}->{tc} {m}x{n}x{k} alpha {alpha} beta {beta} ld {p.lda},"
                        f"{p.ldb},{p.ldc}: err {err:.2e}"
                    )
    return out


# ---- timing ---------------------------------------------------------------------------------------------------------


def sustained(fn, torch, seconds: float = 1.5) -> dict:
    """Launch fn back to back for `seconds` (no flush) while NVML samples the SM clock, power and the clock-event
    reasons every 10 ms; medians over the second half (the clock settles at the power cap). Says whether a kernel
    runs at 1980 MHz or is held back by the 700 W cap, which sets the mma.sync ceiling for that kernel."""
    import threading

    try:
        import pynvml
    except ImportError:
        return {"error": "pynvml missing"}
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    samples, stop = [], threading.Event()

    def sample():
        while not stop.is_set():
            samples.append(
                (
                    time.perf_counter(),
                    pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                    pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                    pynvml.nvmlDeviceGetCurrentClocksEventReasons(h),
                )
            )
            time.sleep(0.01)

    th = threading.Thread(target=sample, daemon=True)
    s0, e0 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    th.start()
    t0 = time.perf_counter()
    calls = 0
    s0.record()
    while time.perf_counter() - t0 < seconds:
        for _ in range(20):
            fn()
        calls += 20
        if calls % 200 == 0:  # keep the launch queue short
            torch.cuda.current_stream().synchronize()
    e0.record()
    torch.cuda.synchronize()
    stop.set()
    th.join()
    half = [x for x in samples if x[0] - t0 > seconds / 2]
    reasons = 0
    for x in half:
        reasons |= int(x[3])
    return {
        "ms_per_call": s0.elapsed_time(e0) / calls,
        "calls": calls,
        "sm_clock_mhz": statistics.median(x[1] for x in half) if half else None,
        "power_w": statistics.median(x[2] for x in half) if half else None,
        "clock_event_reasons": hex(reasons),
        "sw_power_cap": bool(reasons & 0x4),
        "hw_slowdown": bool(reasons & 0x8),
        "samples": len(half),
    }


def bench_shape(mods: dict, shape, t: str, torch, rounds: int, flush, log, sustain=()) -> list[dict]:
    m, n, k, padded, variants = shape
    stream = torch.cuda.current_stream().cuda_stream
    flop = 2.0 * m * n * k
    entries = []
    mode = "r8" if padded else "tight"  # padded: ours and cuBLAS see the same round-up strides
    probs = {False: Problem(torch, m, n, k, t, t, ld_mode=mode, seed=1)}
    if any(v.b_col for v in variants):
        probs[True] = Problem(torch, m, n, k, t, t, b_col=True, ld_mode=mode, seed=2)
    f32c = probs[False].with_c("f32")  # fp32 C for the split-K variants (same A, B)
    refs = {bc: p.reference(1.0, 0.0) for bc, p in probs.items()}
    # cuBLAS: torch.matmul into C (out=, same strides as ours) and into a fresh tensor; the faster is the reference
    p0 = probs[False]
    out_t = torch.empty(m, n, device="cuda", dtype=p0.c.dtype)
    fns = {
        "cuBLAS": lambda: torch.matmul(p0.a, p0.b, out=p0.c),
        "cuBLAS (new C)": lambda: torch.matmul(p0.a, p0.b, out=out_t),
    }
    if (
        padded
    ):  # cuBLAS may prefer the tight (contiguous) operands: time those too, the fastest is the reference
        a_t, b_t = p0.a.contiguous(), p0.b.contiguous()
        fns["cuBLAS (tight)"] = lambda: torch.matmul(a_t, b_t, out=out_t)
    errs = {}
    torch.matmul(p0.a, p0.b, out=p0.c)
    errs["cuBLAS"] = p0.error(refs[False])
    if True in probs:
        pc = probs[True]
        fns["cuBLAS B col"] = lambda: torch.matmul(pc.a, pc.b, out=pc.c)
        torch.matmul(pc.a, pc.b, out=pc.c)
        errs["cuBLAS B col"] = pc.error(refs[True])
    for v in variants:
        if v.label not in mods:
            continue
        mod = mods[v.label]
        tc = "f32" if v.split_k > 1 else t
        expr = v.expr(t, tc)
        p = f32c if tc == "f32" else probs[v.b_col]
        p.c_store.fill_(float("nan"))
        mod.launch(expr, *p.args(1.0, 0.0), stream)
        torch.cuda.synchronize()
        errs[v.label] = p.error(refs[v.b_col])
        fns[v.label] = lambda mod=mod, expr=expr, p=p: mod.launch(expr, *p.args(1.0, 0.0), stream)
    times = time_rounds(fns, torch, rounds, flush)
    st = {k: stats(v) for k, v in times.items()}
    sus = {}
    if sustain:  # the clock each kernel runs at when it runs back to back (the power cap)
        for name in [*sustain, "cuBLAS"]:
            if name in fns:
                sus[name] = sustained(fns[name], torch)
                r = sus[name]
                if "error" not in r:
                    log(
                        f"   sustained [{name}]: {flop / r['ms_per_call'] / 1e9:.1f} TFLOP/s at {r['sm_clock_mhz']} MHz, "
                        f"{r['power_w']:.0f} W, clock-event reasons {r['clock_event_reasons']}"
                    )
    cublas_nn = [k for k in st if k.startswith("cuBLAS") and k != "cuBLAS B col"]
    best_nn = min(cublas_nn, key=lambda k: st[k]["median_ms"])
    ref_nn = st[best_nn]["median_ms"]
    shape_s = f"{m}x{n}x{k}" + (" (ld padded to 8)" if padded else "")
    log(
        f"{t} {shape_s}: cuBLAS {flop / ref_nn / 1e9:.1f} TFLOP/s ({best_nn}; "
        + ", ".join(f"{k[7:].strip('()') or 'out=C'} {st[k]['median_ms']:.4f} ms" for k in cublas_nn)
        + f"; spread {st[best_nn]['spread']:.1%}, "
        f"rel err {errs['cuBLAS']:.1e})"
    )
    if "cuBLAS B col" in st:
        log(f"   cuBLAS B col-major {flop / st['cuBLAS B col']['median_ms'] / 1e9:.1f} TFLOP/s")
    for v in variants:
        if v.label not in mods:
            continue
        ref_ms = st["cuBLAS B col"]["median_ms"] if v.b_col else ref_nn
        s = st[v.label]
        tc = "f32" if v.split_k > 1 else t
        ok = errs[v.label] <= TOLERANCE[tc]
        info = mods[v.label].info[v.expr(t, tc)]
        e = {
            "shape": [m, n, k],
            "ld_padded": padded,
            "dtype": t,
            "c_dtype": tc,
            "variant": v.label,
            "params": asdict(v),
            "expr": v.expr(t, tc),
            "ours_tflops": flop / s["median_ms"] / 1e9,
            "cublas_tflops": flop / ref_ms / 1e9,
            "ratio": ref_ms / s["median_ms"],
            "ours": s,
            "cublas": st["cuBLAS B col"] if v.b_col else st[best_nn],
            "cublas_call": "cuBLAS B col" if v.b_col else best_nn,
            "cublas_all": {k: st[k] for k in cublas_nn},
            "rel_err": errs[v.label],
            "cublas_rel_err": errs["cuBLAS B col" if v.b_col else "cuBLAS"],
            "tolerance": TOLERANCE[tc],
            "correct": ok,
            "sustained": sus.get(v.label),
            "cublas_sustained": sus.get("cuBLAS"),
            **info,
        }
        entries.append(e)
        log(
            f"   [{v.label}] {e['ours_tflops']:.1f} TFLOP/s = {e['ratio']:.3f}x (spread {s['spread']:.1%}) "
            f"err {errs[v.label]:.1e} {'OK' if ok else 'WRONG'} | {info['registers']} regs, "
            f"{info['blocks_per_sm']} blk/SM"
        )
    del probs, f32c, refs, fns
    torch.cuda.empty_cache()
    return entries


# ---- phases ---------------------------------------------------------------------------------------------------------
def torch_setup():
    import torch

    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    major, minor = torch.cuda.get_device_capability()
    return torch, f"sm_{major}{minor}"


def load_built(path: Path) -> dict:
    import pickle

    return pickle.loads(path.read_bytes())


def phase_check(built_path: Path, out_path: Path, skip: set[str]) -> int:
    """Child process: small-size checks for every built variant, one JSON line per variant as it finishes."""
    torch, _ = torch_setup()
    built = load_built(built_path)
    with out_path.open("a") as f:
        for v in ALL:
            if v.label in skip or "cubin" not in built.get(v.label, {}):
                continue
            f.write(json.dumps({"start": v.label}) + "\n")
            f.flush()
            mod = Module(v, built[v.label])
            res = check_small(mod, torch, lambda s: print(s, flush=True))
            f.write(json.dumps({"done": v.label, "checks": res}) + "\n")
            f.flush()
    return 0


def load_or_compile(variants: list[Variant], arch: str, built_path: Path | None, log) -> dict[str, dict]:
    """compile_all's result for `variants`; entries of a prebuilt pickle (same hgemm.cu, NVRTC and name
    expressions, e.g. made on a CPU machine with the device's NVRTC) are taken as they are."""
    built = {}
    if built_path and built_path.exists():
        import pickle

        from smemtile.gpu.nvrtc import nvrtc_version

        pre = pickle.loads(built_path.read_bytes())
        if pre.pop("__source_sha256", None) != source_sha256():
            pre = {}  # made from another hgemm.cu
        want = {v.label: v.exprs() for v in variants}
        built = {
            lb: b
            for lb, b in pre.items()
            if lb in want
            and b.get("nvrtc") == nvrtc_version()
            and sorted(b.get("lowered", {})) == sorted(want[lb])
        }
        log(f"prebuilt: {len(built)} of {len(variants)} variants taken from {built_path.name}")
    todo = [v for v in variants if v.label not in built]
    if todo:
        built.update(compile_all(todo, arch))
    return built


def versions(torch) -> dict:
    env = environment()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(),
        "nvidia_smi": env["nvidia_smi"],
        "cuda_driver_api": env["cuda_driver_api"],
        "versions": {
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "cuda-bindings": env["cuda_bindings"],
            "nvrtc": env["nvrtc"],
        },
        "cublas_settings": "torch.matmul, allow_fp16/bf16_reduced_precision_reduction = False",
        "timing": f"{FLUSH_BYTES >> 20} MiB memset before every call (outside the events), alternating rounds",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--rounds", type=int, default=30, help="alternating timing rounds (>= 15)")
    ap.add_argument("--only", help="comma-separated variant labels (default: all)")
    ap.add_argument("--shapes", help="comma-separated indices into SHAPES (default: all)")
    ap.add_argument("--dtypes", default="f16,bf16")
    ap.add_argument("--list", action="store_true", help="print the variants and shapes and exit")
    ap.add_argument("--commit", help="the git commit measured (the device copy has no .git)")
    ap.add_argument(
        "--built", type=Path, help="a pickle of compile_all's result made with the same NVRTC (optional)"
    )
    ap.add_argument(
        "--check-only",
        action="store_true",
        help="compile and run the small checks in this process, no timing (for compute-sanitizer)",
    )
    ap.add_argument("--phase-check", nargs=2, type=Path, metavar=("BUILT", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--skip", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase_check:
        return phase_check(*args.phase_check, set(filter(None, args.skip.split("|"))))
    variants = [v for v in ALL if not args.only or v.label in args.only.split(",")]
    if args.list:
        for v in variants:
            print(f"{v.label:<34} {v.threads:>4} thr {v.smem_bytes:>7} B smem  {v.exprs()[0]}")
        return 0
    lines: list[str] = []

    def log(s):
        print(s, flush=True)
        lines.append(s)

    if (
        args.check_only
    ):  # e.g. compute-sanitizer --tool racecheck python -m bench.bench_hgemm --check-only --only L
        torch, arch = torch_setup()
        built = load_or_compile(variants, arch, args.built, print)
        bad = 0
        for v in variants:
            res = check_small(Module(v, built[v.label]), torch, print, SMALL[1:6])
            bad += sum(not c["ok"] for c in res)
            print(f"[{v.label}] {sum(c['ok'] for c in res)}/{len(res)} small checks OK", flush=True)
        return 1 if bad else 0
    torch, arch = torch_setup()
    meta = versions(torch)
    meta["commit"] = args.commit or "unknown"
    log(f"{meta['gpu']} {arch} | {meta['nvidia_smi']} | {meta['versions']}")

    t0 = time.perf_counter()
    built = load_or_compile(variants, arch, args.built, log)
    log(
        f"built {len(built)} variants ({sum(len(v.exprs()) for v in variants)} kernels) for {arch} in "
        f"{time.perf_counter() - t0:.1f} s"
    )
    for lb, b in built.items():
        if "error" in b:
            log(f"   BUILD FAILED [{lb}]: {b['error'][:400]}")
        else:
            for e, r in b["resources"].items():
                if r.get("spills"):
                    log(f"   spills [{lb}] {e}: {r}")

    # correctness in a child process: a faulting variant is skipped and the rest rechecked
    import pickle
    import tempfile

    tmp = Path(tempfile.mkdtemp())
    (tmp / "built.pkl").write_bytes(pickle.dumps(built))
    checks, crashed = [], set()
    for _attempt in range(6):
        out = tmp / "checks.jsonl"
        out.unlink(missing_ok=True)
        done = {c["variant"] for c in checks}
        skip = crashed | done | {lb for lb, b in built.items() if "error" in b}
        cmd = [
            sys.executable,
            __file__,
            "--phase-check",
            str(tmp / "built.pkl"),
            str(out),
            "--skip",
            "|".join(skip),
        ]
        try:  # a hung kernel (a pipeline bug) must not eat the whole run
            rc = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=240).returncode
        except subprocess.TimeoutExpired:
            rc = -9
        started = None
        for line in out.read_text().splitlines() if out.exists() else []:
            rec = json.loads(line)
            if "start" in rec:
                started = rec["start"]
            else:
                checks += rec["checks"]
                started = None
        if rc == 0:
            break
        log(f"   check process died (rc {rc}) in [{started}]: excluded")
        if started is None:
            break
        crashed.add(started)
    bad = {c["variant"] for c in checks if not c["ok"]} | crashed
    log(
        f"small checks: {sum(c['ok'] for c in checks)}/{len(checks)} OK; failing variants: {sorted(bad) or 'none'}"
    )

    # every variant that did not crash is timed (a wrong one is reported WRONG)
    mods = {
        v.label: Module(v, built[v.label])
        for v in variants
        if v.label not in crashed and "cubin" in built[v.label]
    }
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    entries = []
    shapes = [SHAPES[int(i)] for i in args.shapes.split(",")] if args.shapes else SHAPES
    for shape in shapes:
        for t in args.dtypes.split(","):
            sh = (*shape[:4], [v for v in shape[4] if v.label in mods])
            try:
                sus = [v.label for v in sh[4][:3]] if (shape[0], shape[2]) == (8192, 8192) else []
                entries += bench_shape(mods, sh, t, torch, max(args.rounds, 15), flush, log, sus)
            except Exception as e:  # keep the other shapes
                log(f"   shape {shape[:3]} {t} failed: {e.__class__.__name__}: {e}")

    log("")
    log(f"{'shape':<16} {'dt':<5} {'variant':<32} {'ours':>7} {'cuBLAS':>7} {'ratio':>6} {'spread':>7}  ok")
    for e in entries:
        shape = "x".join(str(s) for s in e["shape"])
        log(
            f"{shape:<16} {e['dtype']:<5} {e['variant'][:32]:<32} {e['ours_tflops']:>7.1f} {e['cublas_tflops']:>7.1f} "
            f"{e['ratio']:>6.3f} {e['ours']['spread']:>6.1%}  {'ok' if e['correct'] else 'WRONG'}"
        )
    failures = sum(not e["correct"] for e in entries) + sum(not c["ok"] for c in checks) + len(crashed)
    log(f"failures: {failures}")
    if args.json:
        build_info = {
            lb: {k: b[k] for k in ("resources", "seconds", "nvrtc", "error") if k in b}
            for lb, b in built.items()
        }
        doc = {
            **meta,
            "tolerance": TOLERANCE,
            "entries": entries,
            "small_checks": checks,
            "build": build_info,
            "log": lines,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1, default=str))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
