"""GPU correctness, timing and sanitizer driver for the generated kernel families (needs a CUDA GPU + torch).

Every configuration is built with smemtile.codegen (NVRTC -> cubin for the device's exact arch), loaded with
cuModuleLoadData and launched with cuLaunchKernel on torch-allocated memory. Outputs are poisoned with NaN
before each launch and compared with the contract's numpy float64 reference on random inputs.

    python bench/gpu_kernels_check.py                 # correctness at the contract's test sizes + timing
    python bench/gpu_kernels_check.py --small         # correctness only, small sizes (for compute-sanitizer)
    compute-sanitizer --tool memcheck  python bench/gpu_kernels_check.py --small
    compute-sanitizer --tool racecheck python bench/gpu_kernels_check.py --small

Timing: CUDA events around each launch, warm-up first, median of the runs; SGEMM at 4096^3 against
torch.matmul with TF32 off in the same process, transpose at 8192^2 against a device-to-device copy.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from smemtile.codegen.build import compile_config  # noqa: E402

from smemtile.codegen import FAMILIES, configure  # noqa: E402

# (family, template params, layouts, label)
CONFIGS = [
    ("sgemm", {"BK": 8, "STAGES": 4}, {"As": {"pad": 4}}, "fixed pad4 BK8 S4"),
    ("sgemm", {"BK": 8, "STAGES": 3}, {"As": {"pad": 4}}, "pad4 BK8 S3"),
    ("sgemm", {"BK": 16, "STAGES": 4, "MIN_BLOCKS": 1}, {"As": {"pad": 4}}, "pad4 BK16 S4 dyn MB1"),
    ("sgemm", {"BK": 8, "STAGES": 4}, {}, "baseline BK8 S4"),
    ("sgemm", {"BN": 256, "BK": 8, "STAGES": 4, "MIN_BLOCKS": 1}, {"As": {"pad": 4}}, "128x256 pad4 BK8 S4"),
    ("sgemm", {"BK": 8, "STAGES": 4, "MIN_BLOCKS": 1}, {"As": {"swizzle": [3, 2, 5]}}, "swizzle BK8 S4 MB1"),
    ("sgemm", {"BK": 16, "STAGES": 3, "MIN_BLOCKS": 1}, {"As": {"pad": 4}}, "pad4 BK16 S3 dyn MB1"),
    (
        "sgemm",
        {"BK": 8, "STAGES": 2, "CP_ASYNC": 0, "MIN_BLOCKS": 1},
        {"As": {"pad": 4}},
        "regbuf (sm_75 path)",
    ),
    ("sgemm", {"BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4, "STAGES": 3}, {"As": {"pad": 4}}, "64x64 4x4"),
    ("transpose", {"TILE": 32, "BLOCK_ROWS": 8}, {"tile": {"pad": 1}}, "T32 BR8 pad1"),
    ("transpose", {"TILE": 32, "BLOCK_ROWS": 8}, {}, "T32 BR8 baseline"),
    ("transpose", {"TILE": 32, "BLOCK_ROWS": 8}, {"tile": {"swizzle": [5, 0, 5]}}, "T32 BR8 swizzle 5,0,5"),
    ("transpose", {"TILE": 64, "BLOCK_ROWS": 8}, {"tile": {"pad": 1}}, "T64 pad1"),
    ("transpose", {"TILE": 64, "BLOCK_ROWS": 16}, {"tile": {"pad": 1}}, "T64 BR16 pad1"),
    ("transpose", {"TILE": 64, "BLOCK_ROWS": 4}, {"tile": {"pad": 1}}, "T64 BR4 pad1"),
    ("transpose", {"TILE": 32, "BLOCK_ROWS": 4}, {"tile": {"pad": 1}}, "T32 BR4 pad1"),
    ("transpose", {"TILE": 64, "BLOCK_ROWS": 8}, {"tile": {"swizzle": [5, 0, 6]}}, "T64 swizzle 5,0,6"),
    ("transpose", {"TILE": 32, "BLOCK_ROWS": 8, "dtype": "f16"}, {"tile": {"pad": 2}}, "f16 T32 pad2"),
    ("transpose", {"dtype": "f16"}, {"tile": {"pad": 2}}, "f16 T64 BR4 pad2"),
    ("sgemm", {}, {"As": {"pad": 4}}, "default 256x128 16x8 S3 (A_VEC)"),
    ("sgemm", {}, {}, "default dense As"),
    ("sgemm", {"A_VEC": 0}, {"As": {"pad": 4}}, "default tile, 4-byte cp.async A copy"),
    (
        "sgemm",
        {"BM": 64, "BN": 128, "TM": 8, "TN": 8, "STAGES": 2, "SPLIT_K": 4, "MIN_BLOCKS": 3},
        {"As": {"pad": 4}},
        "64x128 split K 4",
    ),
    ("transpose", {}, {"tile": {"pad": 1}}, "default (VEC) pad1"),
    ("transpose", {"dtype": "f16"}, {}, "f16 default (VEC) dense"),
    ("stencil2d", {"R": 1}, {}, "R1 32x8"),
    ("stencil2d", {"R": 4}, {}, "R4 32x8"),
    ("stencil2d", {"R": 2, "BX": 16, "BY": 16}, {"tile": {"pad": 16}}, "R2 16x16 pad16"),
    ("stencil2d", {"R": 3, "BX": 16, "BY": 16}, {}, "R3 16x16"),
]


def _drv():
    from cuda.bindings import driver

    return driver


def _ok(res):
    err = res[0]
    if int(err) != 0:
        raise RuntimeError(f"CUDA driver error {err}")
    return res[1] if len(res) == 2 else res[1:]


class Loaded:
    """A cubin loaded into the current (torch's primary) context."""

    def __init__(self, cfg, source: str | None = None):
        d = _drv()
        fam = FAMILIES[cfg.family]
        self.cfg, self.fam = cfg, fam
        self.compiled = compile_config(cfg, source)
        expr = fam.name_expression(cfg)
        self.module = _ok(d.cuModuleLoadData(self.compiled.cubin))
        self.func = _ok(d.cuModuleGetFunction(self.module, self.compiled.lowered[expr].encode()))
        self.launch_shape = fam.launch(cfg)
        a = d.CUfunction_attribute
        self.regs = _ok(d.cuFuncGetAttribute(a.CU_FUNC_ATTRIBUTE_NUM_REGS, self.func))
        self.static_smem = _ok(d.cuFuncGetAttribute(a.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, self.func))
        self.local = _ok(d.cuFuncGetAttribute(a.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, self.func))
        dyn = self.launch_shape.dynamic_smem_bytes
        if dyn > 48 * 1024:
            _ok(
                (
                    d.cuFuncSetAttribute(self.func, a.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dyn)[
                        0
                    ],
                    None,
                )
            )
        self.blocks_per_sm = _ok(
            d.cuOccupancyMaxActiveBlocksPerMultiprocessor(
                self.func, self.launch_shape.block[0] * self.launch_shape.block[1], dyn
            )
        )

    def launch(self, shape, args, stream):
        d = _drv()
        vals = tuple(a[0] for a in args)
        types = tuple(a[1] for a in args)
        res = d.cuLaunchKernel(
            self.func,
            *shape.grid,
            *shape.block,
            shape.dynamic_smem_bytes,
            d.CUstream(stream),
            (vals, types),
            0,
        )
        _ok((res[0], None))


def _run_one(ld: Loaded, problem: dict, rng, torch, *, b_misaligned=False):
    """Launch once on fresh random inputs; return (max relative error, launch args builder)."""
    cfg = configure(
        ld.cfg.family, {**ld.cfg.params, **ld.cfg.problem, **problem}, ld.cfg.layouts, ld.cfg.arch
    )
    fam, shape = FAMILIES[cfg.family], FAMILIES[cfg.family].launch(cfg)
    q = cfg.problem
    inputs = fam.make_inputs(q, rng)
    stream = torch.cuda.current_stream().cuda_stream
    P, INT, F = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
    if cfg.family == "sgemm":
        m, n, k = q["M"], q["N"], q["K"]
        da = torch.from_numpy(inputs["A"]).cuda()
        if b_misaligned:  # B starts 4 bytes past a 16-byte boundary: the kernel must take the 4-byte path
            raw = torch.from_numpy(np.concatenate([np.zeros(1, np.float32), inputs["B"].ravel()])).cuda()
            b_ptr = raw.data_ptr() + 4
        else:
            db = torch.from_numpy(inputs["B"]).cuda()
            b_ptr = db.data_ptr()
        beta = float(q.get("beta", 0.0))
        if cfg.params.get("SPLIT_K", 1) > 1:  # K slices add into C with atomics: C starts as beta * C
            c0 = (inputs["C"] * np.float32(beta)).astype(np.float32)
        else:
            c0 = (
                inputs["C"] if beta != 0.0 else np.full((m, n), np.nan, np.float32)
            )  # beta = 0 must not read C
        dc = torch.from_numpy(c0.copy()).cuda()
        args = [
            (m, INT),
            (n, INT),
            (k, INT),
            (float(q.get("alpha", 1.0)), F),
            (da.data_ptr(), P),
            (k, INT),
            (b_ptr, P),
            (n, INT),
            (beta, F),
            (dc.data_ptr(), P),
            (n, INT),
        ]
        keep = (da, dc, raw if b_misaligned else db)
        out = dc
    elif cfg.family == "transpose":
        x = inputs["in"]
        din = torch.from_numpy(x.view(np.uint16) if x.dtype == np.float16 else x).cuda()
        dout = torch.from_numpy(
            np.full(
                (q["cols"], q["rows"]),
                0xFFFF if x.itemsize == 2 else np.nan,
                np.uint16 if x.itemsize == 2 else np.float32,
            )
        ).cuda()
        args = [(din.data_ptr(), P), (dout.data_ptr(), P), (q["rows"], INT), (q["cols"], INT)]
        keep, out = (din, dout), dout
    else:
        x = inputs["in"]
        coeffs = fam.coefficients(cfg.params["R"])
        inputs["coeffs"] = coeffs
        din, dco = torch.from_numpy(x).cuda(), torch.from_numpy(coeffs).cuda()
        dout = torch.from_numpy(np.full_like(x, np.nan)).cuda()
        args = [
            (din.data_ptr(), P),
            (dout.data_ptr(), P),
            (q["ny"], INT),
            (q["nx"], INT),
            (dco.data_ptr(), P),
        ]
        keep, out = (din, dco, dout), dout
    ld.launch(shape, args, stream)
    torch.cuda.synchronize()
    got = out.cpu().numpy()
    ref = fam.reference(q, inputs)
    if cfg.family == "transpose":
        exact = np.array_equal(got.view(ref.dtype) if got.dtype != ref.dtype else got, ref)
        return (0.0 if exact else float("inf")), keep
    if not np.isfinite(got).all():
        return float("inf"), keep
    scale = max(float(np.abs(ref).max()), 1e-30)
    return float(np.abs(got.astype(np.float64) - ref).max() / scale), keep


def event_times(fn, n: int, torch) -> list[float]:
    """CUDA events around each of ``n`` calls of ``fn`` (ms)."""
    out = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e))
    return out


def _time(fn, torch, iters=20, warm_s=0.3):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warm_s:
        fn()
    torch.cuda.synchronize()
    ts = event_times(fn, iters, torch)
    return statistics.median(ts), min(ts), max(ts)


def timing(loaded: dict, torch, log):
    res = {}
    stream = torch.cuda.current_stream().cuda_stream
    P, INT, F = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    n = 4096
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    c = torch.empty(n, n, device="cuda")
    flop = 2.0 * n**3
    t_ref = _time(lambda: torch.matmul(a, b, out=c), torch)[0]
    res["torch_matmul_fp32_4096"] = {"ms": t_ref, "tflops": flop / t_ref / 1e9}
    log(f"torch.matmul fp32 (TF32 off) 4096^3: {t_ref:.3f} ms  {flop / t_ref / 1e9:.1f} TFLOP/s")
    ref_c = torch.matmul(a, b)
    for label, ld in loaded.items():
        if ld.cfg.family != "sgemm":
            continue
        cfg = configure("sgemm", {**ld.cfg.params, "M": n, "N": n, "K": n}, ld.cfg.layouts, ld.cfg.arch)
        shape = FAMILIES["sgemm"].launch(cfg)
        args = [
            (n, INT),
            (n, INT),
            (n, INT),
            (1.0, F),
            (a.data_ptr(), P),
            (n, INT),
            (b.data_ptr(), P),
            (n, INT),
            (0.0, F),
            (c.data_ptr(), P),
            (n, INT),
        ]
        ms, lo, hi = _time(lambda ld=ld, shape=shape, args=args: ld.launch(shape, args, stream), torch)
        err = float((c - ref_c).abs().max() / ref_c.abs().max())
        res[f"sgemm {label}"] = {
            "ms": ms,
            "tflops": flop / ms / 1e9,
            "vs_torch": t_ref / ms,
            "rel_err_vs_torch": err,
        }
        log(
            f"sgemm [{label}] 4096^3: {ms:.3f} ms ({lo:.3f}..{hi:.3f})  {flop / ms / 1e9:.1f} TFLOP/s  "
            f"= {t_ref / ms:.2f}x torch  (max rel diff vs torch {err:.1e})"
        )
    a = b = c = ref_c = None  # free the GEMM operands before the 8192^2 buffers
    n = 8192
    x = torch.randn(n, n, device="cuda")
    y = torch.empty(n, n, device="cuda")
    nbytes = 2.0 * n * n * 4
    t_copy = _time(lambda: y.copy_(x), torch)[0]
    res["device_copy_8192_f32"] = {"ms": t_copy, "gbps": nbytes / t_copy / 1e6}
    log(f"device copy 8192^2 f32: {t_copy:.3f} ms  {nbytes / t_copy / 1e6:.0f} GB/s (read + write)")
    for label, ld in loaded.items():
        if ld.cfg.family != "transpose" or ld.cfg.problem.get("dtype", "f32") != "f32":
            continue
        cfg = configure("transpose", {**ld.cfg.params, "rows": n, "cols": n}, ld.cfg.layouts, ld.cfg.arch)
        shape = FAMILIES["transpose"].launch(cfg)
        args = [(x.data_ptr(), P), (y.data_ptr(), P), (n, INT), (n, INT)]
        ms, lo, hi = _time(lambda ld=ld, shape=shape, args=args: ld.launch(shape, args, stream), torch)
        ok = bool(torch.equal(y, x.t()))
        res[f"transpose {label}"] = {
            "ms": ms,
            "gbps": nbytes / ms / 1e6,
            "vs_copy": t_copy / ms,
            "correct": ok,
        }
        log(
            f"transpose [{label}] 8192^2: {ms:.3f} ms  {nbytes / ms / 1e6:.0f} GB/s = {t_copy / ms:.2f}x copy  correct={ok}"
        )
    for label, ld in loaded.items():
        if ld.cfg.family != "stencil2d":
            continue
        cfg = configure("stencil2d", {**ld.cfg.params, "ny": n, "nx": n}, ld.cfg.layouts, ld.cfg.arch)
        shape = FAMILIES["stencil2d"].launch(cfg)
        co = torch.from_numpy(FAMILIES["stencil2d"].coefficients(cfg.params["R"])).cuda()
        args = [(x.data_ptr(), P), (y.data_ptr(), P), (n, INT), (n, INT), (co.data_ptr(), P)]
        ms, lo, hi = _time(lambda ld=ld, shape=shape, args=args: ld.launch(shape, args, stream), torch)
        res[f"stencil2d {label}"] = {"ms": ms, "gbps": nbytes / ms / 1e6, "vs_copy": t_copy / ms}
        log(
            f"stencil2d [{label}] 8192^2: {ms:.3f} ms  {nbytes / ms / 1e6:.0f} GB/s = {t_copy / ms:.2f}x copy"
        )
    return res


def torch_arch(torch) -> str:
    """Make torch's primary context current (the driver API launches use it) and return the device's sm_XY."""
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="small sizes, no timing (for compute-sanitizer)")
    ap.add_argument("--json", type=Path, help="write results here")
    ap.add_argument("--only", help="comma-separated families")
    ap.add_argument(
        "--sgemm-source", type=Path, help="A/B experiment: compile this .cu instead of kernels/sgemm.cu"
    )
    args = ap.parse_args()
    import torch

    arch = torch_arch(torch)
    lines: list[str] = []

    def log(s):
        print(s, flush=True)
        lines.append(s)

    log(f"device {torch.cuda.get_device_name()} {arch}; torch {torch.__version__}")
    rng = np.random.default_rng(1234)
    results: dict = {"arch": arch, "device": torch.cuda.get_device_name(), "correctness": [], "timing": {}}
    loaded: dict[str, Loaded] = {}
    failures = 0
    only = set(args.only.split(",")) if args.only else None
    for family, params, layouts, label in CONFIGS:
        if only and family not in only:
            continue
        cfg = configure(family, params, layouts, arch)
        ld = Loaded(cfg, args.sgemm_source.read_text() if args.sgemm_source and family == "sgemm" else None)
        loaded[f"{family} {label}" if family != "sgemm" else label] = ld
        fam = FAMILIES[family]
        res = ld.compiled.resources.get(fam.name_expression(cfg))
        ptx = res.to_dict() if res else {}
        model_smem = fam.smem_bytes(cfg)
        log(
            f"[{family} {label}] {fam.name_expression(cfg)}: {ld.regs} regs, local {ld.local} B, static smem "
            f"{ld.static_smem} B (model {ld.launch_shape.static_smem_bytes} static / {model_smem} total), "
            f"{ld.blocks_per_sm} blocks/SM (driver)"
        )
        sizes = list(fam.test_sizes)
        if family == "transpose":  # the element type is part of the instantiation
            dt = cfg.problem.get("dtype", "f32")
            sizes = [{**s, "dtype": dt} for s in sizes]
        if args.small:
            sizes = [
                s
                for s in sizes
                if np.prod([v for k, v in s.items() if k in ("M", "N", "rows", "cols", "ny", "nx")])
                <= 300_000
            ]
        for size in sizes:
            extra = [False, True] if family == "sgemm" and size.get("N", 1) % 4 == 0 else [False]
            for mis in extra:
                err, _ = _run_one(ld, size, rng, torch, b_misaligned=mis)
                ok = err <= fam.tolerance
                failures += not ok
                tag = " B misaligned" if mis else ""
                log(
                    f"   {'OK  ' if ok else 'FAIL'} {size}{tag}: max rel err {err:.2e} (tol {fam.tolerance:g})"
                )
                results["correctness"].append(
                    {
                        "family": family,
                        "config": label,
                        "size": size,
                        "b_misaligned": mis,
                        "max_rel_err": err,
                        "ok": ok,
                        "regs": ld.regs,
                        "static_smem": ld.static_smem,
                        "local_bytes": ld.local,
                        "ptxas": ptx,
                    }
                )
    if not args.small:
        results["timing"] = timing(loaded, torch, log)
    log(f"correctness failures: {failures}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
