"""Issue 8: the generated SGEMM and transpose against their references on the H200, in one process.

Every kernel is built the way `smemtile verify` builds it (smemtile.codegen -> NVRTC cubin for the device's
arch -> cuModuleLoadData -> cuLaunchKernel on torch memory; bench/gpu_kernels_check.Loaded). References:
torch.matmul in fp32 with TF32 off (cuBLAS SGEMM) and a device-to-device copy of the same bytes (read +
write) for the transposes.

Timing: CUDA events around each launch, warm-up first, median of many launches; the inputs rotate over
several buffer sets (together larger than the 60 MiB L2) so no launch finds its operands in L2. Ours and the
reference are timed in alternating rounds, so a drift of the power-capped clock hits both alike.
Correctness at every size: our output (poisoned with NaN first) against torch in float64 on the same inputs
(SGEMM: ||C - C64|| / ||C64||, also printed for cuBLAS fp32; transposes: bit-exact); plus the contract's
small test sizes (edges, alpha/beta, unaligned leading dimensions, B and A 4 bytes off 16-byte alignment).

    PYTHONPATH=. python bench/bench_h200.py --json bench/results/h200.json --commit <git sha>
    PYTHONPATH=. python bench/bench_h200.py --variants        # also time the alternative configurations
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_kernels_check import Loaded, _run_one, event_times, torch_arch  # noqa: E402

from smemtile.codegen import FAMILIES, configure  # noqa: E402

SGEMM_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4095, 4097, 1023), (64, 8192, 4096)]
# Alternatives timed with --variants: (label, params, layouts). The first entry is the contract's default.
SKINNY = (64, 8192, 4096)
# Alternatives timed with --variants: (label, params, layouts or None for the default's, shapes or None = all).
# The first entry is the contract's default.
T128 = {"BM": 128, "TM": 8}  # the 128 x 128 tile, 8 x 8 per thread
SGEMM_VARIANTS = [
    ("default", {}, None, None),
    ("256x128 TM16 S2 MB1", {"STAGES": 2}, None, None),
    ("256x128 TM16 S4 MB1", {"STAGES": 4}, None, None),
    ("128x256 TN16 S3 MB1", {**T128, "BN": 256, "TN": 16}, None, None),
    ("128x128 BK8 S2 MB2", {**T128, "STAGES": 2, "MIN_BLOCKS": 2}, None, None),
    ("128x128 BK8 S4 A_VEC0 (before)", {**T128, "STAGES": 4, "MIN_BLOCKS": 2, "A_VEC": 0}, None, None),
    ("64x128 SK4 MB3", {**T128, "BM": 64, "STAGES": 2, "SPLIT_K": 4, "MIN_BLOCKS": 3}, None, [SKINNY]),
    ("64x128 SK8 MB4", {**T128, "BM": 64, "STAGES": 2, "SPLIT_K": 8, "MIN_BLOCKS": 4}, None, [SKINNY]),
]
TRANSPOSE_VARIANTS = [
    ("default", {}, None),
    ("T64 BR4 VEC1 (previous)", {"TILE": 64, "BLOCK_ROWS": 4, "VEC": 1}, {"tile": {"pad": 1}}),
    ("T64 BR8 VEC4", {"TILE": 64, "BLOCK_ROWS": 8, "VEC": 4}, {"tile": {"pad": 1}}),
]
F16_VARIANTS = [
    ("default", {}, None),
    ("T64 BR4 VEC1 pad2 (previous)", {"TILE": 64, "BLOCK_ROWS": 4, "VEC": 1}, {"tile": {"pad": 2}}),
    ("T64 BR4 VEC8 pad1", {"TILE": 64, "BLOCK_ROWS": 4, "VEC": 8}, {"tile": {"pad": 1}}),
]


def tiles_top1(m: int, n: int, k: int, arch: str = "sm_90") -> dict:
    """`smemtile tiles M N K` #1 as sgemm parameters: the tool's own recommendation for that shape."""
    from smemtile.model.tiling import recommend

    return recommend(m, n, k, "f32", arch).ranked[0].cfg.sgemm_params()


SGEMM_VARIANTS.append(("tiles #1 for the skinny shape", tiles_top1(*SKINNY), None, [SKINNY]))
# Without --variants: the default and, for the skinny shape, the split-K configuration the notes recommend
# and the tile recommender's #1.
DEFAULT_SGEMM = ("default", "64x128 SK4 MB3", "tiles #1 for the skinny shape")
P, INT, F = ctypes.c_void_p, ctypes.c_int, ctypes.c_float


def default_layouts(family: str, params: dict, arch: str) -> dict:
    """The layouts `smemtile generate` picks for the samples (the fix search's): As pad 4 for SGEMM, one
    element of padding per 4-byte word for the transpose tile (pad 1 for fp32, pad 2 for fp16)."""
    if family == "sgemm":
        return {"As": {"pad": 4}}
    return {"tile": {"pad": 1 if params.get("dtype", "f32") == "f32" else 2}}


def compare(fns: dict, torch, *, rounds: int, per_round: int, warm_s: float = 0.2) -> dict:
    """Median ms of each fn (fn(i) launches on buffer set i), timed in alternating rounds."""
    counters = dict.fromkeys(fns, 0)

    def call(name):
        fns[name](counters[name])
        counters[name] += 1

    for name in fns:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < warm_s:
            call(name)
    torch.cuda.synchronize()
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for name in fns:
            times[name] += event_times(lambda name=name: call(name), per_round, torch)
    return {k: statistics.median(v) for k, v in times.items()}


def sgemm_args(m, n, k, a, b, c, lda=None, ldb=None, ldc=None, a_ptr=None, b_ptr=None):
    return [
        (m, INT),
        (n, INT),
        (k, INT),
        (1.0, F),
        (a_ptr or a.data_ptr(), P),
        (lda or k, INT),
        (b_ptr or b.data_ptr(), P),
        (ldb or n, INT),
        (0.0, F),
        (c.data_ptr(), P),
        (ldc or n, INT),
    ]


def bench_sgemm(variants, torch, arch, log, *, rounds, shapes):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    stream = torch.cuda.current_stream().cuda_stream
    loaded, only_for = {}, {}
    for label, params, lay, for_shapes in variants:
        lay = lay if lay is not None else default_layouts("sgemm", params, arch)
        ld = Loaded(configure("sgemm", params, lay, arch))
        loaded[label] = ld
        only_for[label] = for_shapes
        log(
            f"sgemm [{label}] {ld.fam.name_expression(ld.cfg)}: {ld.regs} regs, local {ld.local} B, "
            f"{ld.blocks_per_sm} blocks/SM"
        )
    entries = []
    for m, n, k in shapes:
        flop = 2.0 * m * n * k
        nsets = max(2, min(6, int(3 * 64e6 // (4 * (m * k + k * n))) + 1))
        a = [torch.randn(m, k, device="cuda") for _ in range(nsets)]
        b = [torch.randn(k, n, device="cuda") for _ in range(nsets)]
        c = [torch.empty(m, n, device="cuda") for _ in range(nsets)]
        # correctness on set 0 against float64
        ref64 = a[0].double() @ b[0].double()
        ref_norm = float(ref64.norm())
        c32 = torch.matmul(a[0], b[0])
        err_torch = float((c32.double() - ref64).norm()) / ref_norm
        fns = {"torch": lambda i, a=a, b=b, c=c, ns=nsets: torch.matmul(a[i % ns], b[i % ns], out=c[i % ns])}
        errs = {}
        here = {lb: ld for lb, ld in loaded.items() if only_for[lb] is None or (m, n, k) in only_for[lb]}
        for label, ld in here.items():
            cfg = configure("sgemm", {**ld.cfg.params, "M": m, "N": n, "K": k}, ld.cfg.layouts, arch)
            shape = FAMILIES["sgemm"].launch(cfg)
            # split K adds into C: zero it first (beta = 0), also inside the timed region
            split = cfg.params["SPLIT_K"] > 1
            c[0].fill_(0.0 if split else float("nan"))
            ld.launch(shape, sgemm_args(m, n, k, a[0], b[0], c[0]), stream)
            torch.cuda.synchronize()
            # NaN if any element was not written
            errs[label] = float((c[0].double() - ref64).norm()) / ref_norm
            argsets = [sgemm_args(m, n, k, a[i], b[i], c[i]) for i in range(nsets)]
            if split:
                fns[label] = lambda i, ld=ld, shape=shape, argsets=argsets, c=c: (
                    c[i % len(argsets)].zero_(),
                    ld.launch(shape, argsets[i % len(argsets)], stream),
                )
            else:
                fns[label] = lambda i, ld=ld, shape=shape, argsets=argsets: ld.launch(
                    shape, argsets[i % len(argsets)], stream
                )
        del ref64, c32
        per_round = 10 if flop < 3e12 else 4
        med = compare(fns, torch, rounds=rounds, per_round=per_round)
        t_ref = med["torch"]
        log(
            f"sgemm {m}x{n}x{k}: torch fp32 (TF32 off) {t_ref:.3f} ms = {flop / t_ref / 1e9:.1f} TFLOP/s "
            f"(rel err vs fp64 {err_torch:.1e}); {nsets} buffer sets"
        )
        for label in here:
            ms = med[label]
            ok = errs[label] <= 1e-5
            log(
                f"   [{label}] {ms:.3f} ms = {flop / ms / 1e9:.1f} TFLOP/s = {t_ref / ms:.3f}x torch  "
                f"rel err {errs[label]:.1e} {'OK' if ok else 'FAIL'}"
            )
            entries.append(
                {
                    "kernel": "sgemm",
                    "config": label,
                    "name_expression": loaded[label].fam.name_expression(loaded[label].cfg),
                    "shape": [m, n, k],
                    "ours": flop / ms / 1e9,
                    "reference": flop / t_ref / 1e9,
                    "ratio": t_ref / ms,
                    "units": "TFLOP/s (reference: torch.matmul fp32, TF32 off)",
                    "ours_ms": ms,
                    "reference_ms": t_ref,
                    "rel_err_fp64": errs[label],
                    "reference_rel_err_fp64": err_torch,
                    "correct": ok,
                }
            )
        del a, b, c, fns
        torch.cuda.empty_cache()
    return loaded, entries


def bench_transpose(variants, dtype, torch, arch, log, *, rounds, n=8192):
    stream = torch.cuda.current_stream().cuda_stream
    tdt = torch.float32 if dtype == "f32" else torch.float16
    esize = 4 if dtype == "f32" else 2
    nsets = 3
    x = [torch.randn(n, n, device="cuda").to(tdt) for _ in range(nsets)]
    y = [torch.empty(n, n, device="cuda", dtype=tdt) for _ in range(nsets)]
    nbytes = 2.0 * n * n * esize
    fns = {"copy": lambda i: y[i % nsets].copy_(x[i % nsets])}  # noqa: B023 (called before x, y change)
    loaded, ok = {}, {}
    for label, params, lay in variants:
        params = {**params, "dtype": dtype}
        lay = lay if lay is not None else default_layouts("transpose", params, arch)
        ld = Loaded(configure("transpose", params, lay, arch))
        loaded[label] = ld
        cfg = configure(
            "transpose", {**ld.cfg.params, "rows": n, "cols": n, "dtype": dtype}, ld.cfg.layouts, arch
        )
        shape = FAMILIES["transpose"].launch(cfg)
        y[0].fill_(float("nan"))
        ld.launch(shape, [(x[0].data_ptr(), P), (y[0].data_ptr(), P), (n, INT), (n, INT)], stream)
        torch.cuda.synchronize()
        ok[label] = bool(
            torch.equal(
                y[0].view(torch.int16 if esize == 2 else torch.int32),
                x[0].t().contiguous().view(torch.int16 if esize == 2 else torch.int32),
            )
        )
        argsets = [[(x[i].data_ptr(), P), (y[i].data_ptr(), P), (n, INT), (n, INT)] for i in range(nsets)]
        fns[label] = lambda i, ld=ld, shape=shape, argsets=argsets: ld.launch(
            shape, argsets[i % len(argsets)], stream
        )
    med = compare(fns, torch, rounds=rounds, per_round=20)
    t_copy = med["copy"]
    log(
        f"transpose {dtype} {n}x{n}: device copy {t_copy:.4f} ms = {nbytes / t_copy / 1e6:.0f} GB/s (read + write)"
    )
    entries = []
    for label, ld in loaded.items():
        ms = med[label]
        log(
            f"   [{label}] {ld.fam.name_expression(ld.cfg)} {ld.regs} regs: {ms:.4f} ms = "
            f"{nbytes / ms / 1e6:.0f} GB/s = {t_copy / ms:.3f}x copy  {'OK' if ok[label] else 'FAIL'}"
        )
        entries.append(
            {
                "kernel": f"transpose {dtype}",
                "config": label,
                "name_expression": ld.fam.name_expression(ld.cfg),
                "shape": [n, n],
                "ours": nbytes / ms / 1e6,
                "reference": nbytes / t_copy / 1e6,
                "ratio": t_copy / ms,
                "units": "GB/s read + write (reference: device-to-device copy of the same bytes)",
                "ours_ms": ms,
                "reference_ms": t_copy,
                "correct": ok[label],
            }
        )
    return loaded, entries


def small_checks(loaded: dict, torch, log) -> list[dict]:
    """The contract's test sizes (edges, alpha/beta, unaligned ld, B 4 bytes off) for every loaded config."""
    rng = np.random.default_rng(8)
    out = []
    for label, ld in loaded.items():
        fam = ld.fam
        sizes = list(fam.test_sizes)
        if fam.name == "transpose":
            sizes = [{**s, "dtype": ld.cfg.problem.get("dtype", "f32")} for s in sizes]
            sizes += [{"rows": 256, "cols": 192, "dtype": ld.cfg.problem.get("dtype", "f32")}]  # whole tiles
        for size in sizes:
            mis_opts = [False, True] if fam.name == "sgemm" and size.get("N", 1) % 4 == 0 else [False]
            for mis in mis_opts:
                if fam.name == "sgemm" and ld.cfg.params["SPLIT_K"] > 1:
                    err = run_split(ld, size, rng, torch, b_misaligned=mis)
                else:
                    err, _ = _run_one(ld, size, rng, torch, b_misaligned=mis)
                ok = err <= fam.tolerance
                out.append(
                    {
                        "config": label,
                        "family": fam.name,
                        "size": size,
                        "b_misaligned": mis,
                        "err": err,
                        "ok": ok,
                    }
                )
                if not ok:
                    log(f"   FAIL [{fam.name} {label}] {size} B misaligned={mis}: err {err:.2e}")
    if any(ld.fam.name == "sgemm" for ld in loaded.values()):
        out += a_misaligned(loaded, torch, log)
    bad = sum(not r["ok"] for r in out)
    log(f"small-size checks: {len(out) - bad}/{len(out)} OK")
    return out


def run_split(ld, size: dict, rng, torch, *, b_misaligned=False) -> float:
    """A split-K launch adds alpha*A@B into C: C is set to beta*C first (the caller's step in the contract)."""
    cfg = configure("sgemm", {**ld.cfg.params, **size}, ld.cfg.layouts, ld.cfg.arch)
    q, fam = cfg.problem, FAMILIES["sgemm"]
    m, n, k = q["M"], q["N"], q["K"]
    x = fam.make_inputs(q, rng)
    a = torch.from_numpy(x["A"]).cuda()
    braw = torch.from_numpy(np.concatenate([np.zeros(1, np.float32), x["B"].ravel()])).cuda()
    b_ptr = braw.data_ptr() + (4 if b_misaligned else 0)
    if not b_misaligned:
        braw = torch.from_numpy(x["B"]).cuda()
        b_ptr = braw.data_ptr()
    beta = float(q.get("beta", 0.0))
    c = torch.from_numpy((x["C"] * np.float32(beta)) if beta else np.zeros((m, n), np.float32)).cuda()
    args = sgemm_args(m, n, k, a, None, c, b_ptr=b_ptr)
    args[3] = (float(q.get("alpha", 1.0)), F)
    ld.launch(fam.launch(cfg), args, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    ref = fam.reference(q, x)
    got = c.cpu().numpy().astype(np.float64)
    if not np.isfinite(got).all():
        return float("inf")
    return float(np.abs(got - ref).max() / max(float(np.abs(ref).max()), 1e-30))


def a_misaligned(loaded, torch, log):
    """A (and C) 4 bytes past a 16-byte boundary with lda % 4 == 0: the float4 A path must not be taken."""
    stream = torch.cuda.current_stream().cuda_stream
    res = []
    for m, n, k in ((256, 256, 64), (129, 260, 40)):
        a = torch.randn(m * k + 1, device="cuda")
        b = torch.randn(k, n, device="cuda")
        c = torch.full((m * n + 1,), float("nan"), device="cuda")
        ref = a[1:].view(m, k).double() @ b.double()
        for label, ld in loaded.items():
            if ld.fam.name != "sgemm":
                continue
            cfg = configure("sgemm", {**ld.cfg.params, "M": m, "N": n, "K": k}, ld.cfg.layouts, ld.cfg.arch)
            c.fill_(0.0 if cfg.params["SPLIT_K"] > 1 else float("nan"))
            args = sgemm_args(m, n, k, a, b, c, a_ptr=a.data_ptr() + 4)
            args[9] = (c.data_ptr() + 4, P)
            ld.launch(FAMILIES["sgemm"].launch(cfg), args, stream)
            torch.cuda.synchronize()
            got = c[1:].view(m, n).double()
            err = float((got - ref).abs().max() / ref.abs().max())
            ok = err <= FAMILIES["sgemm"].tolerance
            if not ok:
                log(f"   FAIL [sgemm {label}] A/C misaligned {m}x{n}x{k}: err {err:.2e}")
            res.append(
                {
                    "config": label,
                    "family": "sgemm",
                    "size": [m, n, k],
                    "a_misaligned": True,
                    "err": err,
                    "ok": ok,
                }
            )
    return res


def versions(torch, commit: str | None) -> dict:
    import cuda.bindings
    from cuda.bindings import driver, nvrtc

    drv = driver.cuDriverGetVersion()[1]
    nv = nvrtc.nvrtcVersion()
    try:
        import subprocess

        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        smi = ""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(),
        "driver": smi or f"CUDA driver API {drv // 1000}.{drv % 1000 // 10}",
        "cuda_driver_api": f"{drv // 1000}.{drv % 1000 // 10}",
        "versions": {
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "cuda-bindings": getattr(cuda.bindings, "__version__", "?"),
            "nvrtc": f"{nv[1]}.{nv[2]}",
            "smemtile_commit": commit or "unknown",
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--commit", help="the smemtile git commit being measured (the device copy has no .git)")
    ap.add_argument("--variants", action="store_true", help="also time the alternative configurations")
    ap.add_argument("--rounds", type=int, default=5, help="alternating timing rounds per case")
    ap.add_argument("--only", help="comma-separated: sgemm, transpose, f16")
    ap.add_argument(
        "--shape", action="append", help="SGEMM shapes to run, MxNxK (repeatable; default all four)"
    )
    args = ap.parse_args()
    shapes = [tuple(int(x) for x in sh.split("x")) for sh in args.shape] if args.shape else SGEMM_SHAPES
    import torch

    arch = torch_arch(torch)
    lines: list[str] = []

    def log(s):
        print(s, flush=True)
        lines.append(s)

    meta = versions(torch, args.commit)
    log(f"{meta['gpu']} {arch}, driver {meta['driver']}; {meta['versions']}")
    only = set(args.only.split(",")) if args.only else {"sgemm", "transpose", "f16"}
    entries, checks = [], []
    if "sgemm" in only:
        var = SGEMM_VARIANTS if args.variants else [v for v in SGEMM_VARIANTS if v[0] in DEFAULT_SGEMM]
        var = [v for v in var if v[3] is None or any(sh in v[3] for sh in shapes)]
        loaded, e = bench_sgemm(var, torch, arch, log, rounds=args.rounds, shapes=shapes)
        entries += e
        checks += small_checks(loaded, torch, log)
    if "transpose" in only:
        var = TRANSPOSE_VARIANTS if args.variants else TRANSPOSE_VARIANTS[:1]
        loaded, e = bench_transpose(var, "f32", torch, arch, log, rounds=args.rounds)
        entries += e
        checks += small_checks(loaded, torch, log)
    if "f16" in only:
        var = F16_VARIANTS if args.variants else F16_VARIANTS[:1]
        loaded, e = bench_transpose(var, "f16", torch, arch, log, rounds=args.rounds)
        entries += e
        checks += small_checks(loaded, torch, log)

    log("")
    log(f"{'kernel':<14} {'config':<30} {'shape':<18} {'ours':>9} {'reference':>10} {'ratio':>7}  units")
    for r in entries:
        shape = "x".join(str(s) for s in r["shape"])
        unit = r["units"].split(" (")[0]
        flag = "" if r["correct"] else "  WRONG"
        log(
            f"{r['kernel']:<14} {r['config'][:30]:<30} {shape:<18} {r['ours']:>9.1f} {r['reference']:>10.1f} "
            f"{r['ratio']:>6.3f}x  {unit}{flag}"
        )
    failures = sum(not r["correct"] for r in entries) + sum(not c["ok"] for c in checks)
    log(f"failures: {failures}")
    if args.json:
        doc = {**meta, "entries": entries, "small_checks": checks, "log": lines}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1, default=str))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
