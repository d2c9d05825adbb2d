"""sgemm's REPACK on the H200 (issue 20, session 5): unaligned A (K % 4 != 0) and B (N % 4 != 0) copied into a
workspace with 16-byte rows before the GEMM, against the same tiles without it (the RAGGED loop or the masked
copies), with cuBLAS in the same rounds; and the repacking copies alone, for the model's bandwidth.

Every configuration is the family's own, launched through its launch plan exactly as ``verify`` does
(``bench_kernels.load``: the repacking steps and the GEMM, the workspace allocated by the launcher), checked
against float64 on the GPU before it is timed. Timing: ``bench_kernels``' alternating rounds (512 MiB memset
before every timed call, outside the events), median and spread.

    python -m bench.bench_repack build                  # CPU: NVRTC cubins (carry .cache/tiles_nvrtc)
    python -m bench.bench_repack run --out $OUT [--rounds 9] [--shapes MxNxK ...]
    python -m bench.bench_repack list                   # the shapes and configurations (no GPU)
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from pathlib import Path

from smemtile.families.sgemm.tiles import params_of

ROOT = Path(__file__).resolve().parents[1]

from bench.bench_kernels import (  # noqa: E402
    CACHE,
    FLUSH_BYTES,
    Cublas,
    Problem,
    _build_one,
    cfg_label,
    load,
    small_checks,
    versions,
)
from bench.timing import stats, tee_log, time_rounds  # noqa: E402

# Fitting shapes for the repacking rule (REPACK_MIN_FLOPS_PER_BYTE) and bandwidth: large unaligned problems where
# the session-4 sweeps measured the unaligned loops, and smaller ones around the threshold; K or N alone
# unaligned; skinny unaligned problems (where the copies cost most against the GEMM).
SHAPES = [
    (4095, 4097, 1023),
    (2999, 3001, 3003),
    (1999, 6001, 1500),
    (2047, 2049, 2051),
    (1535, 1537, 1539),
    (1023, 1025, 1027),
    (767, 769, 771),
    (4096, 4096, 4095),
    (4096, 4097, 4096),
    (256, 4097, 4095),
    (4097, 256, 4095),
]
TOP = 2  # tiles' top configurations with REPACK forced on and forced off, per shape


def configs(shape) -> list[dict]:
    """tiles' #1..#TOP for the problem with REPACK forced on (1) and off (2), each pinned explicitly."""
    from smemtile.pipeline.tiles import recommend

    out, seen = [], set()
    for rp in (1, 2):
        for s in recommend(*shape, "f32", "sm_90", repack=rp == 1).ranked[:TOP]:
            p = {**params_of(s.cfg), "REPACK": rp}
            if cfg_label(p) not in seen:
                seen.add(cfg_label(p))
                out.append(p)
    return out


def cmd_list(args) -> None:
    from smemtile.families.sgemm.tiles import repack_bytes, repack_pays

    for shape in SHAPES:
        m, n, k = shape
        print(
            f"{m}x{n}x{k}: flops/byte {2 * m * n * k / max(1, repack_bytes(*shape)):.0f}, auto "
            f"{'on' if repack_pays(*shape) else 'off'}: " + ", ".join(cfg_label(p) for p in configs(shape))
        )


def cmd_build(args) -> None:
    from concurrent.futures import ProcessPoolExecutor

    from smemtile.families import FAMILIES

    os.environ["SMEMTILE_CACHE_DIR"] = str(CACHE)
    small = [(s["M"], s["N"], s["K"]) for s in FAMILIES["sgemm"].test_sizes]  # small_checks' sizes
    jobs = {}
    for shape in SHAPES:
        for p in configs(shape):
            jobs.setdefault(cfg_label(p), (p, list(small)))[1].append(shape)
    with ProcessPoolExecutor(args.jobs) as ex:
        futs = [ex.submit(_build_one, p, tuple(shapes)) for p, shapes in jobs.values()]
        for f in futs:
            label, what, _ = f.result()
            print(f"  {label:<40} {what}", flush=True)
    if args.strip_ptx:
        for f in (CACHE / "nvrtc").glob("*.json"):
            doc = json.loads(f.read_text())
            if doc.get("ptx"):
                doc["ptx"] = ""
                f.write_text(json.dumps(doc))


def _repack_steps(kern):
    """A function launching only the plan's repacking steps of a LoadedKernel, bound already."""
    return lambda: kern.launch(only=lambda step: "repack" in step.kernel)


def cmd_run(args) -> None:
    import torch

    from smemtile.families import FAMILIES
    from smemtile.families.sgemm.tiles import repack_bytes
    from smemtile.gpu.run import open_device

    args.out.mkdir(parents=True, exist_ok=True)
    log = tee_log(args.out / "repack_log.txt")
    os.environ.setdefault("SMEMTILE_CACHE_DIR", str(CACHE))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    dev = open_device(0)
    cublas = Cublas()
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    head = versions(torch, dev)
    tol = FAMILIES["sgemm"].tolerance
    shapes = [s for s in SHAPES if not args.shapes or "x".join(map(str, s)) in args.shapes]
    out = {
        "what": "sgemm REPACK on / off, same rounds, cuBLAS reference",
        "commit": args.commit,
        **head,
        "rounds": args.rounds,
        "shapes": {},
    }
    t0 = time.time()
    for shape in shapes:
        m, n, k = shape
        flops = 2.0 * m * n * k
        prob = Problem(torch, shape, seed=3)
        fns, rows, keep = {}, {}, []
        for p in configs(shape):
            label = cfg_label(p)
            try:
                chk = small_checks(p, dev, log)
                kern = load(p, shape, dev)
                err = prob.run(kern)
                rows[label] = {
                    "params": p,
                    "rel_err_fp64": err,
                    "small_checks": chk,
                    "registers": kern.registers,
                    "spill_bytes": kern.local_bytes,
                    "blocks_per_sm": kern.driver_blocks,
                    "steps": [s.kernel.split("<")[0] for s in kern.shape.steps],
                    "workspace_bytes": kern.shape.workspace_bytes,
                }
                if err <= tol and chk["correct"]:
                    fns[label] = kern.launch
                    if p["REPACK"] == 1 and kern.shape.workspace_bytes and "repack only" not in fns:
                        fns["repack only"] = _repack_steps(kern)
                    keep.append(kern)
                else:
                    log(f"  {shape} {label}: WRONG (err {err:.2e}); not timed")
            except Exception as e:
                rows[label] = {"params": p, "error": f"{type(e).__name__}: {e}"}
                log(f"  {shape} {label}: FAILED {type(e).__name__}: {e}\n{traceback.format_exc()}")
        fns["torch.matmul"] = lambda p=prob: torch.matmul(p.a, p.b, out=p.c2)
        fns["cublasSgemm"] = lambda p=prob: cublas.sgemm(p.a, p.b, p.c2)
        times = time_rounds(fns, torch, args.rounds, flush)
        st = {kk: stats(v) for kk, v in times.items()}
        ref = min(("torch.matmul", "cublasSgemm"), key=lambda r: st[r]["median_ms"])
        for label, r in rows.items():
            if label in st:
                r.update(
                    time_ms=st[label]["median_ms"],
                    spread=st[label]["spread"],
                    tflops=flops / st[label]["median_ms"] / 1e9,
                    ratio=st[ref]["median_ms"] / st[label]["median_ms"],
                )
        entry = {
            "shape": list(shape),
            "reference": ref,
            "reference_ms": st[ref]["median_ms"],
            "references": {r: st[r] for r in ("torch.matmul", "cublasSgemm")},
            "rows": rows,
        }
        if "repack only" in st:
            b = repack_bytes(*shape)
            entry["repack_only"] = {
                **st["repack only"],
                "bytes": b,
                "gbps": b / st["repack only"]["median_ms"] / 1e6,
            }
        out["shapes"]["x".join(map(str, shape))] = entry
        for label, r in sorted(rows.items(), key=lambda x: -x[1].get("ratio", 0)):
            if "ratio" in r:
                log(
                    f"  {m}x{n}x{k} {label:<40} {r['tflops']:6.1f} TFLOP/s {r['ratio']:.3f}x {ref} "
                    f"(spread {r['spread']:.1%})"
                )
        if "repack_only" in entry:
            ro = entry["repack_only"]
            log(f"  {m}x{n}x{k} repack only: {ro['median_ms'] * 1e3:.1f} us, {ro['gbps']:.0f} GB/s")
        for kern in keep:
            kern.close()
        prob.free()
        torch.cuda.empty_cache()
        (args.out / "repack_h200.json").write_text(json.dumps(out, indent=1, default=str))
    log(f"done in {time.time() - t0:.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--jobs", type=int, default=2)
    b.add_argument("--strip-ptx", action="store_true")
    sub.add_parser("list")
    r = sub.add_parser("run")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--rounds", type=int, default=9)
    r.add_argument("--shapes", nargs="*", default=[])
    r.add_argument("--commit", default="", help="the commit the run measures (the device copy has no git)")
    args = ap.parse_args()
    {"build": cmd_build, "list": cmd_list, "run": cmd_run}[args.cmd](args)


if __name__ == "__main__":
    main()
