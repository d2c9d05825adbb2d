"""Issue 13: the Hopper GEMM family (smemtile/families/wgmma_gemm) against cuBLAS on the H200, rung by rung.

Every variant is built and launched as ``smemtile verify`` does it: the family's configuration, the generated
body compiled by NVRTC for sm_90a (``LoadedKernel``), the family's launch plan (tensor maps encoded with the
driver's cuTensorMapEncodeTiled, cluster launches with cuLaunchKernelEx). The body is generated for one canonical
problem per (variant, dtype): bodies differ between problems only by a comment of the host helper, so one cubin
serves every shape; ``build`` compiles them here with the device's NVRTC (13.0) into .cache/wgmma_nvrtc, which the
GPU run carries (SMEMTILE_CACHE_DIR).

Correctness first, in child processes (a hung or faulting variant is cut off by a deadline and cannot take the
timing down): every variant on the family's test sizes (ragged M, N, K; K not a multiple of 8; N not a multiple
of 8), bf16 and fp16, against numpy float64 (``LoadedKernel.check``: poisoned output, NaN in the row padding past
K). compute-sanitizer memcheck and racecheck on small sizes. At every timed size the output is compared with a
float32 product of the same inputs (TF32 off), and so is cuBLAS's.

Timing: the variants and torch.matmul (cuBLAS, bf16/fp16 in and out, fp32 accumulation) on the same A and B
(A: M x LD, B: N x LD, LD = K rounded up to 8: the same leading dimension for both), alternating rounds (order
reversed every round), >= 15 rounds, a 512 MiB memset before every timed call (outside the events), CUDA events
around the call alone; median and spread = (p90 - p10) / median.

    python -m bench.bench_wgmma list                 # variants and shapes (no GPU)
    python -m bench.bench_wgmma build                # NVRTC 13.0 cubins of every variant (run with it preloaded)
    SMEMTILE_CACHE_DIR=.cache/wgmma_nvrtc python -m bench.bench_wgmma run --out $OUT   # on the GPU
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from bench.timing import stats, tee_log, time_rounds  # noqa: E402

FLUSH_BYTES = 512 << 20
CANONICAL = {"M": 4096, "N": 4096, "K": 4096}
ARCH = "sm_90a"


# The ladder (each rung adds one thing to the previous) and a few tilings, and which shapes each is timed on: the
# family's task.yaml plan ``sweep`` (smemtile/families/wgmma_gemm/task.yaml; ``python -m bench.run wgmma_gemm
# sweep`` runs it too). Every rung is BM 128 x BN 256 with two consumer warpgroups (64 x 256 each); stages: as
# many as fit (4 without the C staging tile, 3 with it); "R6 +tma store" is the family's defaults.
def _sweep() -> list[dict]:
    from smemtile.families import FAMILIES
    from smemtile.families.task import load

    return load(type(FAMILIES["wgmma_gemm"]).__module__)["plans"]["sweep"]["groups"]


VARIANTS = {c["label"]: c.get("params", {}) for g in _sweep() for c in g["configs"]}
# (shape, dtype) -> variants timed there
PLAN = {
    ((s["M"], s["N"], s["K"]), s["dtype"]): [c["label"] for c in g["configs"]]
    for g in _sweep()
    for s in g["shapes"]
}
SQUARE = [(4096, 4096, 4096), (8192, 8192, 8192)]
RAGGED = (4095, 4097, 1023)
CACHE = ROOT / ".cache" / "wgmma_nvrtc"
HELPER = ROOT / ".cache" / "wgmma_helper"  # a user's main() around the generated .cu, built here (nvcc 13.0)
HELPER_CASES = [
    ({}, {"M": 1000, "N": 1001, "K": 333, "dtype": "bf16"}),
    ({"BN": 128}, {"M": 520, "N": 1024, "K": 264, "dtype": "f16"}),
    ({}, {"M": 4095, "N": 4097, "K": 1023, "dtype": "bf16"}),
]


def configure(label: str, problem: dict, dtype: str):
    from smemtile.families import configure as cfg

    return cfg("wgmma_gemm", {**VARIANTS[label], **problem, "dtype": dtype}, {}, ARCH)


def canonical_source(label: str, dtype: str) -> str:
    from smemtile.codegen.render import body

    return body(configure(label, CANONICAL, dtype))


def load(label: str, problem: dict, dtype: str, dev):
    from smemtile.gpu.run import LoadedKernel

    return LoadedKernel(configure(label, problem, dtype), dev, source=canonical_source(label, dtype))


def verify_spec_bodies() -> list:
    """The configurations `smemtile verify` builds from `smemtile tiles ... --top 1 --format yaml` (precompiled)."""
    from smemtile.pipeline.specs import resolve
    from smemtile.pipeline.tiles import recommend, spec_doc

    out = []
    for m, n, k in SQUARE:
        rep = recommend(m, n, k, "bf16", ARCH)
        out.append(resolve(spec_doc(rep.problem, rep.ranked[0], len(rep.ranked)), "tiles").config)
    return out


# ---- build / list (no GPU) -------------------------------------------------------------------------------------
def cmd_list(args) -> None:
    from smemtile.families import FAMILIES

    fam = FAMILIES["wgmma_gemm"]
    for label in VARIANTS:
        cfg = configure(label, CANONICAL, "bf16")
        plan = fam.launch(cfg)
        print(
            f"{label:<20} {fam.name_expression(cfg):<70} grid {plan.grid[0]:>4} cluster {plan.cluster[0]} "
            f"smem {plan.dynamic_smem_bytes}"
        )
    for (shape, dt), labels in PLAN.items():
        print(f"{shape} {dt}: {', '.join(labels)}")


def cmd_build(args) -> None:
    from smemtile.codegen.render import body
    from smemtile.families import FAMILIES
    from smemtile.gpu.nvrtc import compile_cubin, nvrtc_version

    os.environ.setdefault("SMEMTILE_CACHE_DIR", str(ROOT / ".cache" / "wgmma_nvrtc_root"))
    print(f"NVRTC {nvrtc_version()} into {os.environ['SMEMTILE_CACHE_DIR']}", flush=True)
    fam = FAMILIES["wgmma_gemm"]
    jobs = [
        (configure(lb, CANONICAL, dt), canonical_source(lb, dt)) for lb in VARIANTS for dt in ("bf16", "f16")
    ]
    jobs += [(c, body(c)) for c in verify_spec_bodies()]
    for cfg, src in jobs:
        t0 = time.time()
        r = compile_cubin(src, [fam.name_expression(cfg)], cfg.arch.name, filename="wgmma_gemm.cu")
        res = r.resources.get(fam.name_expression(cfg))
        print(
            f"  {fam.name_expression(cfg)}: {res.registers} regs, {res.spills} spill bytes, "
            f"{time.time() - t0:.1f} s",
            flush=True,
        )


def helper_configs() -> list:
    from smemtile.families import configure as cfg

    return [cfg("wgmma_gemm", {**p, **q}, {}, ARCH) for p, q in HELPER_CASES]


def cmd_helper_build(args) -> None:
    """The generated .cu (generate's output) + tests/harness.py's main(), nvcc -arch=sm_90a (as a user builds)."""
    from smemtile.codegen.render import render
    from tests.harness import harness_main

    HELPER.mkdir(parents=True, exist_ok=True)
    for i, c in enumerate(helper_configs()):
        src = HELPER / f"case{i}.cu"
        src.write_text(render(c).source + "\n" + harness_main(c))
        p = subprocess.run(
            [
                "nvcc",
                "-std=c++17",
                "-Xcicc",
                "--sharedmem32=0",
                "-arch=sm_90a",
                "-o",
                str(HELPER / f"case{i}"),
                str(src),
            ],
            capture_output=True,
            text=True,
        )
        print(f"case{i} {c.problem}: nvcc exit {p.returncode} {p.stderr[-500:]}", flush=True)


def helper_run(log) -> list[dict]:
    """Run the prebuilt helper programs on fresh inputs; compare with the float64 reference."""
    import numpy as np

    from smemtile.families import FAMILIES
    from smemtile.gpu.run import compare
    from tests.harness import read_output, run_arguments

    fam = FAMILIES["wgmma_gemm"]
    out = []
    for i, c in enumerate(helper_configs()):
        work = Path(os.environ.get("TMPDIR", "/tmp")) / f"wg_helper{i}"
        work.mkdir(exist_ok=True)
        inputs = fam.make_inputs(c, np.random.default_rng(500 + i))
        argv, env, outp = run_arguments(c, inputs, work)
        p = subprocess.run(
            [str(HELPER / f"case{i}"), *argv],
            capture_output=True,
            text=True,
            env={**os.environ, **env},
            timeout=120,
        )
        if p.returncode != 0:
            out.append(
                {"case": c.problem, "correct": False, "error": f"exit {p.returncode}: {p.stderr[-300:]}"}
            )
        else:
            chk = compare(fam.reference(c, inputs), fam.decode_output(c, read_output(c, outp)), fam.tolerance)
            out.append(
                {
                    "case": c.problem,
                    "correct": chk.correct,
                    "max_rel_error": chk.max_rel_error,
                    "mismatch": chk.mismatch.describe() if chk.mismatch else None,
                }
            )
        log(f"  helper {c.problem}: {out[-1]}")
    return out


# ---- correctness (child process) -------------------------------------------------------------------------------
def cmd_check(args) -> None:
    """One JSON line per (variant, dtype, size): the family's test sizes against numpy float64."""
    import numpy as np

    from smemtile.families import FAMILIES
    from smemtile.gpu.run import open_device

    fam = FAMILIES["wgmma_gemm"]
    dev = open_device(0)
    sizes = [s for s in fam.test_sizes if not args.small or s["M"] * s["N"] * s["K"] <= 2**26]
    refs: dict = {}
    for label in args.variants:
        for dt in args.dtypes:
            for i, size in enumerate(sizes):
                problem = {k: v for k, v in size.items() if k in "MNK"}
                t0 = time.time()
                k = load(label, problem, dt, dev)
                try:
                    key = (i, dt)
                    if key not in refs:  # fresh inputs per size, the float64 reference once
                        cfg = k.cfg
                        inputs = fam.make_inputs(cfg, np.random.default_rng(1000 + i))
                        refs[key] = (inputs, fam.reference(cfg, inputs))
                    res = k.check(dict(refs[key][0]), refs[key][1])
                    doc = {
                        "variant": label,
                        "dtype": dt,
                        **problem,
                        "correct": res.correct,
                        "max_rel_error": res.max_rel_error,
                        "registers": k.registers,
                        "driver_blocks": k.driver_blocks,
                        "driver_clusters": k.driver_clusters,
                        "mismatch": res.mismatch.describe() if res.mismatch else None,
                        "seconds": round(time.time() - t0, 2),
                    }
                finally:
                    k.close()
                print("CHECK " + json.dumps(doc), flush=True)


def run_checks(
    labels: list[str], dtypes: list[str], small: bool, log, deadline_s: float = 40.0, wrap: list[str] = ()
) -> list[dict]:
    """Checks in a child process, restarted after a variant that hangs or crashes (deadline per variant)."""
    out, todo = [], list(labels)
    while todo:
        cmd = [
            *wrap,
            sys.executable,
            "-m",
            "bench.bench_wgmma",
            "check",
            "--variants",
            *todo,
            "--dtypes",
            *dtypes,
        ]
        if small:
            cmd.append("--small")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        seen: set = set()
        last = time.time()
        tail: list[str] = []
        os.set_blocking(proc.stdout.fileno(), False)
        while True:
            line = proc.stdout.readline()
            if line:
                last = time.time()
                if line.startswith("CHECK "):
                    d = json.loads(line[6:])
                    out.append(d)
                    seen.add(d["variant"])
                    if not d["correct"]:
                        log(f"  FAIL {d['variant']} {d['dtype']} {d['M']}x{d['N']}x{d['K']}: {d['mismatch']}")
                else:
                    tail = (tail + [line.rstrip()])[-30:]
                continue
            if proc.poll() is not None:
                break
            if time.time() - last > deadline_s:
                proc.kill()
                log(f"  child cut off after {deadline_s:.0f} s without output (hung kernel?)")
                break
            time.sleep(0.05)
        proc.wait()
        done = [lb for lb in todo if lb in seen]
        stuck = next((lb for lb in todo if lb not in seen), None)
        finished = proc.returncode == 0 and stuck is None
        if finished:
            break
        # the first variant with no (or incomplete) result is blamed; the rest run again
        blame = stuck if stuck is not None else done[-1]
        log(f"  child exited {proc.returncode}; blamed {blame}; last output: {' | '.join(tail[-6:])}")
        out.append({"variant": blame, "correct": False, "error": "crashed or hung", "tail": tail[-12:]})
        todo = todo[todo.index(blame) + 1 :]
        failures = sum(1 for c in out if c.get("error"))
        if failures >= 2 and not any(c["correct"] for c in out):  # systematic: do not spend the lease on it
            log(f"  two variants crashed or hung and none passed: the other {len(todo)} are not run")
            out += [{"variant": lb, "correct": False, "error": "not run"} for lb in todo]
            break
    return out


# ---- timing (parent, GPU) -----------------------------------------------------------------------------------------


def bench_shape(
    shape, dt: str, labels: list[str], dev, torch, flush, rounds: int, log, cfgs: dict | None = None
) -> list[dict]:
    """cuBLAS and the kernels of ``labels`` (VARIANTS, or the configurations ``cfgs`` maps them to) on one
    shape: checked against fp32 (relative Frobenius error), timed in the same alternating rounds."""
    from smemtile.gpu.run import LoadedKernel

    m, n, k = shape
    ld = -(-k // 8) * 8
    tdt = torch.bfloat16 if dt == "bf16" else torch.float16
    g = torch.Generator(device="cuda").manual_seed(7)
    a = torch.randn(m, ld, device="cuda", generator=g).to(tdt)
    b = torch.randn(n, ld, device="cuda", generator=g).to(tdt)
    a[:, k:] = float("nan")  # row padding past K: never read by either side
    b[:, k:] = float("nan")
    av, bv = a[:, :k], b[:, :k]
    torch.backends.cuda.matmul.allow_tf32 = False
    ref = av.float() @ bv.float().T
    rnorm = float(ref.norm())
    c_ref = torch.empty(m, n, device="cuda", dtype=tdt)
    fns, kernels, outs = {}, {}, {}

    def cublas():
        torch.mm(av, bv.t(), out=c_ref)

    fns["cuBLAS"] = cublas
    for lb in labels:
        try:
            kern = LoadedKernel(cfgs[lb], dev) if cfgs else load(lb, {"M": m, "N": n, "K": k}, dt, dev)
        except Exception as e:  # a configuration that cannot run here is data
            log(f"  {lb}: not loaded: {e}")
            continue
        c = torch.full((m, n), float("nan"), device="cuda", dtype=tdt)
        kern.bind({"A": a.data_ptr(), "B": b.data_ptr(), "C": c.data_ptr()})
        kernels[lb], outs[lb] = kern, c
        fns[lb] = kern.launch
    times = time_rounds(fns, torch, rounds, flush, warmup=3)
    flop = 2.0 * m * n * k
    base = stats(times["cuBLAS"])
    rows = [
        {
            "shape": list(shape),
            "dtype": dt,
            "name": "cuBLAS",
            **base,
            "tflops": flop / base["median_ms"] / 1e9,
            "rel_error_fro": float((c_ref.float() - ref).norm()) / rnorm,
        }
    ]
    for lb, kern in kernels.items():
        s = stats(times[lb])
        c = outs[lb]
        err = float((c.float() - ref).norm()) / rnorm if bool(torch.isfinite(c).all()) else float("inf")
        rows.append(
            {
                "shape": list(shape),
                "dtype": dt,
                "name": lb,
                **s,
                "tflops": flop / s["median_ms"] / 1e9,
                "vs_cublas": base["median_ms"] / s["median_ms"],
                "rel_error_fro": err,
                "name_expression": kern.expr,
                "grid": list(kern.shape.grid),
                "cluster": list(kern.shape.cluster),
                "registers": kern.registers,
                "driver_clusters": kern.driver_clusters,
            }
        )
        kern.close()
    del a, b, ref, outs
    torch.cuda.empty_cache()
    return rows


def cluster_occupancy(dev) -> dict:
    """cuOccupancyMaxActiveClusters of the default configuration for cluster sizes 1, 2, 4, 8."""
    from cuda.bindings import driver as d

    k = load("R6 +tma store", CANONICAL, "bf16", dev)
    out = {}
    try:
        for size in (1, 2, 4, 8):
            cfg = k._launch_config(None, 0)
            attr = cfg.attrs[0]
            attr.value.clusterDim.x = size
            cfg.attrs = [attr]
            cfg.gridDimX = 132 * size
            err, n = d.cuOccupancyMaxActiveClusters(k.func, cfg)
            out[str(size)] = int(n) if int(err) == 0 else f"error {int(err)}"
    finally:
        k.close()
    return out


def sh(cmd: str, timeout: int = 120) -> str:
    try:
        p = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        return (p.stdout + p.stderr)[-6000:]
    except subprocess.TimeoutExpired as e:
        return f"TIMEOUT after {timeout} s: {(e.stdout or '')[-2000:]}"


def cmd_run(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = tee_log(out / "wgmma_log.txt", "w")

    doc: dict = {"date": datetime.date.today().isoformat(), "variants": VARIANTS}
    t_start = time.time()
    from smemtile.gpu.nvrtc import nvrtc_version
    from smemtile.gpu.run import open_device

    dev = open_device(0)
    doc["device"] = {**dev.to_dict(), "nvrtc": nvrtc_version()}
    log(f"{dev.name} {dev.arch_name} {dev.sm_count} SMs, NVRTC {nvrtc_version()}")
    doc["max_active_clusters"] = cluster_occupancy(dev)
    log(f"cuOccupancyMaxActiveClusters (default config, 1 block/SM): {doc['max_active_clusters']}")

    log("== correctness (numpy float64, the family's test sizes)")
    checks = run_checks(list(VARIANTS), ["bf16", "f16"], False, log)
    doc["checks"] = checks
    ok = {
        lb
        for lb in VARIANTS
        if all(c["correct"] for c in checks if c["variant"] == lb) and any(c["variant"] == lb for c in checks)
    }
    for lb in VARIANTS:
        rs = [c for c in checks if c["variant"] == lb]
        worst = max((c.get("max_rel_error", float("inf")) for c in rs), default=float("inf"))
        log(f"  {lb:<20} {sum(c['correct'] for c in rs)}/{len(rs)} correct, worst {worst:.2e}")

    log("== generated .cu + a user's main() (built with nvcc -arch=sm_90a), launch_wgmma_gemm() on the GPU")
    try:
        doc["helper"] = helper_run(log)
    except Exception as e:  # the prebuilt programs may not run on this image: recorded
        doc["helper"] = [{"error": repr(e)}]
        log(f"  helper: {e!r}")

    log("== timing vs cuBLAS (torch.matmul), 512 MiB flush before every call, alternating rounds")
    import torch

    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    rows = []
    for (shape, dt), labels in PLAN.items():
        labels = [lb for lb in labels if lb in ok]
        if not labels:
            continue
        rs = bench_shape(shape, dt, labels, dev, torch, flush, args.rounds, log)
        rows += rs
        base = rs[0]
        log(
            f"  {shape} {dt}: cuBLAS {base['tflops']:.0f} TFLOP/s (spread {base['spread']:.1%}, err "
            f"{base['rel_error_fro']:.1e})"
        )
        for r in rs[1:]:
            log(
                f"    {r['name']:<20} {r['tflops']:6.0f} TFLOP/s  {r['vs_cublas']:.3f}x  spread {r['spread']:.1%}  "
                f"err {r['rel_error_fro']:.1e}"
            )
        doc["timing"] = rows
        (out / "wgmma_h200.json").write_text(json.dumps(doc, indent=1))
    if args.sanitize and ok:
        log("== compute-sanitizer (small sizes, R6 and R1)")
        wrap = "compute-sanitizer --print-limit 10 --report-api-errors no"
        doc["sanitizer"] = {}
        for tool in ("memcheck", "racecheck"):
            for lb in ("R6 +tma store",):
                txt = sh(
                    f"{wrap} --tool {tool} {sys.executable} -m bench.bench_wgmma check --small --variants '{lb}' "
                    "--dtypes bf16",
                    timeout=100,
                )
                doc["sanitizer"][f"{tool} {lb}"] = txt
                summary = [
                    ln
                    for ln in txt.splitlines()
                    if "ERROR SUMMARY" in ln or "RACECHECK SUMMARY" in ln or "TIMEOUT" in ln
                ]
                log(f"  {tool} {lb}: {' | '.join(summary) or txt.splitlines()[-1:]}")

    doc["seconds"] = time.time() - t_start
    (out / "wgmma_h200.json").write_text(json.dumps(doc, indent=1))
    log(f"done in {doc['seconds']:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list")
    sub.add_parser("build")
    sub.add_parser("helper-build")
    c = sub.add_parser("check")
    c.add_argument("--variants", nargs="+", default=list(VARIANTS))
    c.add_argument("--dtypes", nargs="+", default=["bf16", "f16"])
    c.add_argument("--small", action="store_true")
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--rounds", type=int, default=15)
    r.add_argument("--sanitize", action="store_true")
    args = ap.parse_args()
    cmds = {
        "list": cmd_list,
        "build": cmd_build,
        "helper-build": cmd_helper_build,
        "check": cmd_check,
        "run": cmd_run,
    }
    cmds[args.cmd](args)


if __name__ == "__main__":
    main()
