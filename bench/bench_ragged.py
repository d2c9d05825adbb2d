"""Issue 20's ragged SGEMM: the sgemm family's unaligned paths (lda or ldb not a multiple of 4 floats, or a base
pointer not 16-byte aligned) on the H200, this tree's kernel against earlier ones (``--variants``: "prev" = 4516a58,
the masked copies only; "v16" = 3c6a8fc; "v18" = 0596837; or NAME=FILE, an experiment's sgemm.cu) and cuBLAS, in
the same process. Every configuration is built twice, for an aligned and an unaligned problem (keys "u ..."): the
family compiles its RAGGED loop in only for the latter (session 4, bench/NOTES.md).

The kernel bodies are rendered from this tree at build time (bench_kernels.py no longer reads a sources.json
back; a stale one had timed an old kernel text for a whole session).

Steps (``run --steps``):

* ``check``: correctness first. Every configuration of CHECKS (tile shapes, 2-5 stages, BK 8/16, BN 32..256,
  split K, dense / swizzled layouts) on SIZES (every K % 4 and N % 4, K a multiple of BK with odd N, N below 4
  and below BN, tiny K), launched as ``verify`` does (``LoadedKernel``, the family's launch plan, poisoned
  output) against numpy float64; then base pointers 4, 8 and 12 bytes past a 16-byte boundary (torch tensors
  bound with ``LoadedKernel.bind``, against torch float64).
* ``ab``: this tree's kernel and the ``--variants`` ones of AB_CONFIGS on
  AB_SHAPES, timed as bench/bench_kernels.py times (alternating rounds, order reversed every round, a 512 MiB memset before every timed call outside the events, median and
  spread = (p90 - p10) / median; bench/timing.py), with torch.matmul and cublasSgemm_v2 (TF32 off) in the same
  rounds; each output checked against torch float64 first.
* ``bk``: bench/bench_kernels.py's bench and sweep steps in this process (its h200.json and sweep_h200.json under
  OUT/bk): the issue-20 cases through tiles' picks with 4096^3 and 8192^3 as the aligned control, and the
  calibration pool swept on ``--shapes``.
* ``memcheck``: this tree's kernel of a few configurations on small ragged sizes under ``compute-sanitizer --tool
  memcheck`` (cuMemAlloc'd arrays of the exact size: a read past A or B is reported).

    python -m bench.bench_ragged build [--variants prev]                # CPU: cubins into .cache (carry it)
    python -m bench.bench_ragged run --out $OUT [--variants prev]    # GPU
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from bench.bench_kernels import A_PAD, CACHE, CANONICAL_RAGGED, FLUSH_BYTES, _c, canonical_shape, cfg_label  # noqa: E402
from bench.timing import stats, tee_log, time_rounds  # noqa: E402

V16_COMMIT = "3c6a8fc"  # the sgemm.cu of NOTES' version 16 (bench/results/h200.json, run 3)
V18_COMMIT = (
    "0596837"  # session 3's realigned-A kernel (reverted in be7a787: this tree is the kernel before v16)
)
PREV_COMMIT = (
    "4516a58"  # session 4's baseline: the kernel before the all-cp.async unaligned path (pre16 text)
)
COMMITS = {"v16": V16_COMMIT, "v18": V18_COMMIT, "prev": PREV_COMMIT}
SOURCES = CACHE / "ragged_sources.json"  # rendered bodies, both kernels (`build` writes it)

# (params, layouts): the tiles picks of the ragged shapes, the sample, and the paths the realigned copies take
CHECKS: list[tuple[dict, dict]] = [
    (_c(128, 128, 8, 16, 8, 3, 2), {}),  # tiles #1 for 4095x4097x1023 and 1999x6001x1500
    (_c(128, 128, 8, 8, 16, 3, 2), {}),  # samples/sgemm_default.yaml
    (_c(128, 64, 8, 8, 8, 3, 3), {}),  # tiles #1 for 2999x3001x3003 (BN 64: two B rows per warp)
    (_c(64, 64, 8, 8, 8, 3, 4), {}),  # 64 threads
    (_c(256, 128, 8, 16, 8, 2, 1), {}),  # 2 stages: A by 4-byte loads, B realigned
    (_c(128, 128, 8, 16, 8, 5, 2), {}),  # 5 stages
    (_c(128, 64, 16, 8, 8, 3, 3), {}),  # BK 16: two k runs per row
    (_c(32, 128, 16, 4, 8, 3, 4), {}),  # BM 32 < rows per A pass: two runs per pass
    (_c(128, 32, 16, 8, 4, 3, 4), {}),  # BN 32: four B rows per warp
    (_c(64, 128, 8, 8, 16, 3, 4), {}),  # 64 threads, 2 B rows per pass: a shift per pass
    (_c(128, 256, 8, 8, 16, 2, 1), {}),  # BN 256: two warps per B row
    (_c(64, 128, 8, 8, 8, 3, 4, 4), {}),  # split K
    (_c(128, 128, 8, 16, 8, 3, 2), {"As": {"pad": 0}}),  # dense As (2-way copies, same path)
    (_c(128, 128, 8, 16, 8, 3, 2), {"As": {"swizzle": [3, 2, 5]}}),  # swizzled As: 4-byte A loads
    (_c(128, 128, 8, 16, 8, 3, 2), {"Bs": {"swizzle": [3, 2, 3]}}),  # swizzled Bs: a shift per pass
    # RAGGED = 1 forced where the family leaves it off (the unaligned 4-byte loop with every layout)
    ({**_c(128, 128, 8, 16, 8, 3, 2), "RAGGED": 1}, {}),
    ({**_c(128, 128, 8, 16, 8, 3, 2), "RAGGED": 1}, {"As": {"pad": 0}}),
    ({**_c(128, 128, 8, 16, 8, 3, 2), "RAGGED": 1}, {"As": {"swizzle": [3, 2, 5]}}),
    ({**_c(128, 128, 8, 16, 8, 3, 2), "RAGGED": 1}, {"Bs": {"swizzle": [3, 2, 3]}}),
    ({**_c(64, 128, 8, 8, 16, 3, 4), "RAGGED": 1}, {}),
]
SIZES = [
    {"M": 257, "N": 131, "K": 77, "beta": 0.5},  # the family's ragged test size
    {"M": 1000, "N": 1001, "K": 333, "alpha": 0.75, "beta": -1.25},
    {"M": 511, "N": 515, "K": 1024},  # K a multiple of BK, N odd: the last whole tile is masked
    {"M": 300, "N": 258, "K": 517},  # N % 4 = 2, K % 4 = 1
    {"M": 129, "N": 1027, "K": 259},  # N % 4 = 3, K % 4 = 3
    {"M": 130, "N": 1026, "K": 518},  # K % 4 = 2
    {"M": 64, "N": 35, "K": 1001},  # N below BN
    {"M": 77, "N": 3, "K": 300},  # N below one float4
    {"M": 200, "N": 1024, "K": 1023},  # only A unaligned
    {"M": 200, "N": 1023, "K": 1024},  # only B unaligned
    {"M": 130, "N": 257, "K": 33},  # few K tiles
    {"M": 512, "N": 384, "K": 1024, "beta": 1.0},  # aligned (the 16-byte path)
]
# base pointers past a 16-byte boundary (bytes for A, B): torch tensors viewed from an offset
MISALIGNED = [
    ((0, 4), (512, 512, 512)),
    ((4, 0), (512, 512, 512)),
    ((8, 12), (300, 301, 302)),
    ((12, 8), (1000, 1003, 500)),
]
MISALIGNED_CONFIGS = [0, 2, 4, 8, 15]  # indices into CHECKS

AB_CONFIGS = [
    _c(128, 128, 8, 8, 16, 2, 2),
    _c(128, 128, 8, 16, 8, 3, 2),
    _c(128, 128, 8, 8, 16, 3, 2),
    _c(128, 64, 8, 8, 8, 3, 3),
    _c(64, 64, 8, 8, 8, 3, 4),
    _c(128, 64, 16, 8, 8, 3, 3),
    _c(256, 128, 8, 16, 8, 2, 1),
    _c(128, 128, 8, 8, 8, 3, 1),
    _c(128, 128, 16, 8, 8, 3, 1),
    {**_c(128, 128, 8, 8, 16, 2, 2), "RAGGED": 1},
    {**_c(128, 128, 8, 16, 8, 3, 2), "RAGGED": 1},
]
AB_SHAPES = [(4095, 4097, 1023), (2999, 3001, 3003), (1999, 6001, 1500), (4096, 4096, 4096)]
VARIANTS = ["", "prev"]  # see _key; "v16" and "v18" (COMMITS) were last timed in session 3
MEMCHECK = [0, 2, 4, 7, 8, 15, 17]  # indices into CHECKS
MEMCHECK_SIZES = [SIZES[0], SIZES[2], SIZES[6], SIZES[7]]


def _layouts(lay: dict) -> dict:
    return {"As": {"pad": A_PAD}, **lay}


def _ragged(problem: dict) -> bool:
    """Whether a problem is of the unaligned class (bench_kernels.canonical_shape): the kernel text differs by it."""
    return canonical_shape((problem["M"], problem["N"], problem["K"])) == CANONICAL_RAGGED


def _key(params: dict, lay: dict, variant: str = "", ragged: bool = False) -> str:
    """Names a build: variant "" is this tree's kernel, the others the sgemm.cu of a commit in COMMITS ("prev" the
    kernel before the all-cp.async unaligned path, "v16" version 16, "v18" session 3's realigned-A kernel; same
    template signature)."""
    tag = "" if not lay else " " + json.dumps(lay, sort_keys=True)
    forced = f" RAGGED={params['RAGGED']}" if "RAGGED" in params else ""
    return (f"{variant} " if variant else "") + ("u " if ragged else "") + cfg_label(params) + forced + tag


def _configure(params: dict, lay: dict, problem: dict, arch: str = "sm_90"):
    from smemtile.families import configure

    # REPACK off unless a configuration sets it: this script measures the unaligned loops themselves (session 4)
    return configure("sgemm", {"REPACK": 2, **params, **problem}, _layouts(lay), arch)


def _old_body(new_body: str, old_cu: str) -> str:
    """The same instantiation and helper around the version-16 kernel text."""
    from smemtile.codegen.render import inline_headers
    from smemtile.families import FAMILIES

    new = inline_headers(FAMILIES["sgemm"].source()).rstrip()
    assert new in new_body
    old = inline_headers(old_cu).rstrip()
    if "int RAGGED" not in old:  # kernels before RAGGED (session 4): same instantiation, the argument unused
        old = old.replace(
            "int A_VEC = 1, int SPLIT_K = 1>", "int A_VEC = 1, int SPLIT_K = 1, int RAGGED = 0>"
        )
    return new_body.replace(new, old)


def _build_one(job) -> tuple[str, str, str]:
    from smemtile.codegen.render import body
    from smemtile.gpu.run import compile_config

    params, lay, variant, old_cus, shape = job
    key = _key(params, lay, variant, shape is not None)
    try:
        cfg = _configure(params, lay, dict(zip("MNK", canonical_shape(shape), strict=True)))
        src = body(cfg)
        if variant:
            src = _old_body(src, old_cus[variant])
        res = next(iter(compile_config(cfg, source=src).resources.values()))
        return key, f"{res.registers} regs, {res.spills} B spilled", src
    except Exception as e:  # report, never abort the batch
        return key, f"FAILED {type(e).__name__}: {str(e).splitlines()[0]}", ""


def _set_variants(spec: str) -> dict[str, str]:
    """``--variants a,b=path.cu``: the kernel variants besides this tree's, each a commit of COMMITS or a file
    (an experiment's sgemm.cu). Returns name -> path for the files."""
    files = {}
    VARIANTS[:] = [""]
    for v in filter(None, spec.split(",")):
        name, _, path = v.partition("=")
        if path:
            files[name] = path
        elif name not in COMMITS:
            raise SystemExit(
                f"--variants: unknown variant {name!r} (commits: {', '.join(COMMITS)}; or NAME=FILE)"
            )
        VARIANTS.append(name)
    return files


def cmd_build(args) -> None:
    from concurrent.futures import ProcessPoolExecutor

    os.environ["SMEMTILE_CACHE_DIR"] = str(CACHE)
    files = _set_variants(args.variants)
    old_cu = {
        v: Path(files[v]).read_text()
        if v in files
        else subprocess.run(
            ["git", "show", f"{COMMITS[v]}:smemtile/families/sgemm/sgemm.cu"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for v in VARIANTS
        if v
    }
    shapes = (None, CANONICAL_RAGGED)  # the aligned and the unaligned text (bench_kernels.canonical_shape)
    jobs = [(p, lay, "", old_cu, sh) for p, lay in CHECKS for sh in shapes]
    jobs += [(p, {}, v, old_cu, sh) for p in AB_CONFIGS for v in VARIANTS for sh in shapes]
    seen, uniq = set(), []
    for j in jobs:
        if _key(j[0], j[1], j[2], j[4] is not None) not in seen:
            seen.add(_key(j[0], j[1], j[2], j[4] is not None))
            uniq.append(j)
    CACHE.mkdir(parents=True, exist_ok=True)
    sources = {}
    with ProcessPoolExecutor(args.jobs) as ex:
        for key, what, src in ex.map(_build_one, uniq):
            sources[key] = src
            print(f"  {key:<60} {what}", flush=True)
    SOURCES.write_text(json.dumps(sources))


# ---- GPU ------------------------------------------------------------------------------------------------------
def _sources() -> dict:
    return json.loads(SOURCES.read_text())


def _load(params: dict, lay: dict, problem: dict, dev, variant: str = ""):
    from smemtile.gpu.run import LoadedKernel

    return LoadedKernel(
        _configure(params, lay, problem, dev.arch_name),
        dev,
        source=_sources()[_key(params, lay, variant, _ragged(problem))],
    )


def step_check(dev, log) -> dict:
    import numpy as np

    from smemtile.families import FAMILIES

    fam = FAMILIES["sgemm"]
    refs, rows = {}, []
    for params, lay in CHECKS:
        for si, size in enumerate(SIZES):
            row = {"config": _key(params, lay), "size": size}
            try:
                k = _load(params, lay, size, dev)
                try:
                    if si not in refs:
                        inputs = fam.make_inputs(k.cfg, np.random.default_rng(200 + si))
                        refs[si] = (inputs, fam.reference(k.cfg, inputs))
                    res = k.check(dict(refs[si][0]), refs[si][1])
                    row.update(
                        correct=bool(res.correct),
                        max_rel_error=float(res.max_rel_error),
                        registers=k.registers,
                        spill_bytes=k.local_bytes,
                    )
                    if not res.correct:
                        row["mismatch"] = res.mismatch.describe() if res.mismatch else str(res)
                        log(f"  WRONG {row['config']} {size}: {row['mismatch']}")
                finally:
                    k.close()
            except Exception as e:
                row.update(correct=False, error=f"{type(e).__name__}: {e}")
                log(f"  FAILED {row['config']} {size}: {row['error']}")
            rows.append(row)
    mis = step_misaligned(dev, log)
    ok = sum(r["correct"] for r in rows) + sum(r["correct"] for r in mis)
    log(
        f"  check: {ok} of {len(rows) + len(mis)} correct "
        f"(worst error {max(r.get('max_rel_error', 0) for r in rows + mis):.2e})"
    )
    return {"sizes": rows, "misaligned": mis}


def step_misaligned(dev, log) -> list[dict]:
    import torch

    from bench.bench_kernels import Problem
    from smemtile.families import FAMILIES

    tol = FAMILIES["sgemm"].tolerance
    out = []
    g = torch.Generator(device="cuda").manual_seed(5)
    for (oa, ob), (m, n, kk) in MISALIGNED:
        a_big = torch.randn(m * kk + 4, device="cuda", generator=g)
        b_big = torch.randn(kk * n + 4, device="cuda", generator=g)
        a = a_big[oa // 4 : oa // 4 + m * kk].view(m, kk)
        b = b_big[ob // 4 : ob // 4 + kk * n].view(kk, n)
        prob = Problem(torch, (m, n, kk), a=a, b=b)
        for ci in MISALIGNED_CONFIGS:
            params, lay = CHECKS[ci]
            row = {
                "config": _key(params, lay),
                "shape": [m, n, kk],
                "offsets_bytes": [oa, ob],
                "a_mod16": a.data_ptr() % 16,
                "b_mod16": b.data_ptr() % 16,
            }
            try:
                k = _load(params, lay, {"M": m, "N": n, "K": kk}, dev)
                try:
                    err = prob.run(k)
                    row.update(correct=err <= tol, max_rel_error=err)
                    if err > tol:
                        log(f"  WRONG misaligned {row}")
                finally:
                    k.close()
            except Exception as e:
                row.update(correct=False, error=f"{type(e).__name__}: {e}")
                log(f"  FAILED misaligned {row}")
            out.append(row)
    return out


def step_ab(dev, log, rounds: int) -> list[dict]:
    import torch

    from bench.bench_kernels import Cublas, Problem
    from smemtile.families import FAMILIES

    tol = FAMILIES["sgemm"].tolerance
    cublas = Cublas()
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    entries = []
    for shape in AB_SHAPES:
        m, n, kk = shape
        flops = 2.0 * m * n * kk
        prob = Problem(torch, shape, seed=3)
        fns, meta, kernels = {}, {}, []
        for params in AB_CONFIGS:
            for variant in VARIANTS:
                label = _key(params, {}, variant)
                try:
                    k = _load(params, {}, {"M": m, "N": n, "K": kk}, dev, variant)
                    err = prob.run(k)
                    meta[label] = {
                        "registers": k.registers,
                        "spill_bytes": k.local_bytes,
                        "blocks_per_sm": k.driver_blocks,
                        "rel_err_fp64": err,
                        "params": params,
                        "kernel": variant or "this tree",
                    }
                    kernels.append(k)
                    if err <= tol:
                        fns[label] = k.launch
                    else:
                        log(f"  {shape} {label}: WRONG (err {err:.2e}); not timed")
                except Exception as e:
                    meta[label] = {"error": f"{type(e).__name__}: {e}", "params": params}
                    log(f"  {shape} {label}: FAILED {e}")
        fns["torch.matmul"] = lambda p=prob: torch.matmul(p.a, p.b, out=p.c2)
        fns["cublasSgemm"] = lambda p=prob: cublas.sgemm(p.a, p.b, p.c2)
        times = time_rounds(fns, torch, rounds, flush)
        st = {key: stats(v) for key, v in times.items()}
        ref_name = min(("torch.matmul", "cublasSgemm"), key=lambda r: st[r]["median_ms"])
        ref_ms = st[ref_name]["median_ms"]
        for label, mt in meta.items():
            e = {"shape": list(shape), "config": label, **mt}
            if label in st:
                e.update(
                    ms=st[label]["median_ms"],
                    tflops=flops / st[label]["median_ms"] / 1e9,
                    spread=st[label]["spread"],
                    stats=st[label],
                    reference=ref_name,
                    reference_ms=ref_ms,
                    reference_tflops=flops / ref_ms / 1e9,
                    reference_spread=st[ref_name]["spread"],
                    ratio=ref_ms / st[label]["median_ms"],
                )
                log(
                    f"  {m}x{n}x{kk} {label:<36} {e['tflops']:6.1f} TFLOP/s {e['ratio']:.3f}x "
                    f"(spread {e['spread']:.1%}; ref {ref_name} {e['reference_tflops']:.1f})"
                )
            entries.append(e)
        entries.append(
            {
                "shape": list(shape),
                "references": {
                    r: {**st[r], "tflops": flops / st[r]["median_ms"] / 1e9}
                    for r in ("torch.matmul", "cublasSgemm")
                },
            }
        )
        for k in kernels:
            k.close()
        prob.free()
        torch.cuda.empty_cache()
    return entries


def step_memcheck_inner(dev) -> None:
    """Under compute-sanitizer: each configuration of MEMCHECK on MEMCHECK_SIZES, cuMemAlloc'd exact arrays."""
    import numpy as np

    from smemtile.families import FAMILIES

    fam = FAMILIES["sgemm"]
    for ci in MEMCHECK:
        params, lay = CHECKS[ci]
        for size in MEMCHECK_SIZES:
            k = _load(params, lay, size, dev)
            inputs = fam.make_inputs(k.cfg, np.random.default_rng(1))
            res = k.check(inputs, fam.reference(k.cfg, inputs))
            print(f"memcheck {_key(params, lay)} {size}: correct {res.correct}", flush=True)
            k.close()


def run_bench_kernels(dev, head: dict, args, log) -> None:
    """``bench_kernels.py run --steps bench,sweep --fit --shapes <args.shapes>``, writing its h200.json and
    sweep_h200.json under ``args.out / "bk"``: the issue-20 cases (tiles' picks, the sample, 4096^3 and 8192^3)
    and the calibration pool on the given shapes."""
    import torch

    from bench.bench_kernels import FIT, HELD_OUT, POOL, Cublas, step_bench, step_sweep

    out = args.out / "bk"
    out.mkdir(parents=True, exist_ok=True)
    ctx = {
        "torch": torch,
        "dev": dev,
        "flush": torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda"),
        "cublas": Cublas(),
        "keep": [],
    }
    doc = {**head, "entries": step_bench(ctx, 15, False, log)}
    (out / "h200.json").write_text(json.dumps(doc, indent=1, default=str))
    shapes = [("held_out", s) for s in HELD_OUT] + [("fit", s) for s in FIT]
    shapes = [(r, s) for r, s in shapes if "x".join(map(str, s)) in args.shapes]
    res = step_sweep(ctx, shapes, POOL, log, time.time() + args.sweep_budget_s)
    (out / "sweep_h200.json").write_text(
        json.dumps({**head, "pool": len(POOL), "shapes": res}, indent=1, default=str)
    )
    del ctx


def cmd_run(args) -> None:
    from smemtile.gpu.run import open_device

    _set_variants(args.variants)

    os.environ.setdefault("SMEMTILE_CACHE_DIR", str(CACHE))
    if args.steps == "memcheck-inner":
        step_memcheck_inner(open_device(0))
        return
    import torch

    from bench.bench_kernels import versions

    args.out.mkdir(parents=True, exist_ok=True)
    log = tee_log(args.out / "ragged_log.txt")

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.zeros(1, device="cuda")
    dev = open_device(0)
    head = versions(torch, dev)
    path = args.out / "ragged.json"  # steps run by separate invocations add to one document
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc.update(
        {
            **head,
            "v16_commit": V16_COMMIT,
            "checks": [[p, lay] for p, lay in CHECKS],
            "check_sizes": SIZES,
            "ab_configs": AB_CONFIGS,
            "ab_shapes": AB_SHAPES,
            "rounds": args.rounds,
        }
    )
    for step in args.steps.split(","):
        t0 = time.time()
        try:
            if step == "check":
                doc["check"] = step_check(dev, log)
            elif step == "ab":
                doc["ab"] = step_ab(dev, log, args.rounds)
            elif step == "bk":  # bench_kernels.py's bench and sweep steps, in this process (same JSON files)
                run_bench_kernels(dev, head, args, log)
            elif step == "memcheck":
                cmd = [
                    "compute-sanitizer",
                    "--tool",
                    "memcheck",
                    "--print-limit",
                    "20",
                    sys.executable,
                    "-m",
                    "bench.bench_ragged",
                    "run",
                    "--out",
                    str(args.out),
                    "--steps",
                    "memcheck-inner",
                ]
                r = subprocess.run(
                    cmd, capture_output=True, text=True, timeout=args.memcheck_timeout, cwd=ROOT
                )
                (args.out / "memcheck.txt").write_text(r.stdout + r.stderr)
                summary = [ln for ln in (r.stdout + r.stderr).splitlines() if "ERROR SUMMARY" in ln]
                doc["memcheck"] = {"returncode": r.returncode, "summary": summary}
                log(f"  memcheck: rc {r.returncode}, {summary}")
        except Exception as e:
            log(f"step {step} FAILED: {type(e).__name__}: {e}\n{traceback.format_exc()}")
        log(f"step {step}: {time.time() - t0:.1f} s")
        path.write_text(json.dumps(doc, indent=1, default=str))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="compile both kernels' configurations into the NVRTC cache (CPU)")
    b.add_argument("--jobs", type=int, default=2)
    for p in (b, r := sub.add_parser("run", help="measure on the GPU")):
        p.add_argument(
            "--variants",
            default="prev",
            help="kernels besides this tree's: commits of COMMITS "
            "(prev, v16, v18) or NAME=FILE (an sgemm.cu); the same list for build and run",
        )
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--steps", default="check,ab,bk,memcheck")
    r.add_argument("--rounds", type=int, default=25)
    r.add_argument("--memcheck-timeout", type=float, default=150.0)
    r.add_argument(
        "--shapes",
        nargs="*",
        default=["4095x4097x1023", "2999x3001x3003", "1999x6001x1500"],
        help="the bk step's sweep shapes (bench_kernels' held-out and fit lists)",
    )
    r.add_argument("--sweep-budget-s", type=float, default=120.0)
    args = ap.parse_args()
    {"build": cmd_build, "run": cmd_run}[args.cmd](args)


if __name__ == "__main__":
    main()
