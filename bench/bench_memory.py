"""Issue 20, the memory-bound half: transpose and stencil2d against a device-to-device copy of the same bytes.

Every configuration is built exactly as ``smemtile verify`` builds it: a family configuration
(``smemtile.families.configure``), NVRTC through ``smemtile.gpu.run.LoadedKernel`` and launched step by step
through the family's launch plan (``Family.launch``). Nothing here knows a kernel's grid or arguments.

Correctness first, for every configuration: the family's own small test sizes (ragged shapes included; the
kernel text is the timed configuration's, only the launch changes), then the timed size, the output poisoned
(NaN) before each run. Transpose is compared bit for bit; stencil2d against a float64 reference (relative to
max |ref|, the family's tolerance 1e-5). A configuration that fails is reported and never timed.

Timing, per case (one problem): every configuration of the case and the reference, ``cuMemcpyDtoDAsync`` of one
array of the same size (bytes read + bytes written = the kernel's), in alternating rounds (order reversed every
other round), ``--rounds`` (>= 15) rounds after 3 warm-up calls each; before every timed call a 512 MiB
``cuMemsetD8Async`` (outside the events) evicts L2; CUDA events around the call alone. Reported: median, spread
= (p90 - p10) / median, GB/s = (read + write bytes) / median, ratio = copy median / ours median, and the median
of the per-round ratios (each against the copy timed in the same round).

    PYTHONPATH=. python bench/bench_memory.py --list [--plan sweep|final]      # the plan (no GPU)
    PYTHONPATH=. python bench/bench_memory.py --prebuild DIR [--plan ...]      # NVRTC cubins into a cache (no GPU)
    SMEMTILE_CACHE_DIR=DIR PYTHONPATH=. python bench/bench_memory.py --plan sweep --json $OUT/memory.json
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from smemtile.families import FAMILIES, configure  # noqa: E402

FLUSH_BYTES = 512 << 20
ARCH = "sm_90"


@dataclass(frozen=True)
class Config:
    label: str
    params: dict
    layouts: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Case:
    name: str
    family: str
    problem: dict
    configs: tuple[Config, ...]


def pad1():
    return {"tile": {"pad": 1}}


def swz(b, m, s):
    return {"tile": {"swizzle": [b, m, s]}}


def transpose_configs(dtype: str, plan: str) -> tuple[Config, ...]:
    if plan == "final" and dtype == "f32":
        return (
            Config("T64x4 pad1", {"TILE": 64, "BLOCK_ROWS": 4}, pad1()),
            Config("T64x8 pad1", {"TILE": 64, "BLOCK_ROWS": 8}, pad1()),
            Config("T64x8 swz326", {"TILE": 64, "BLOCK_ROWS": 8}, swz(3, 2, 6)),
            Config("T64xY128x4 pad1", {"TILE": 64, "BLOCK_ROWS": 4, "TILE_Y": 128}, pad1()),
            Config("T64xY128x8 pad1", {"TILE": 64, "BLOCK_ROWS": 8, "TILE_Y": 128}, pad1()),
            Config("T64xY128x16 pad1", {"TILE": 64, "BLOCK_ROWS": 16, "TILE_Y": 128}, pad1()),
            Config("T32xY128x8 pad1", {"TILE": 32, "BLOCK_ROWS": 8, "TILE_Y": 128}, pad1()),
            Config("T32xY256x8 pad1", {"TILE": 32, "BLOCK_ROWS": 8, "TILE_Y": 256}, pad1()),
            Config("T32x8 pad1 (old sample)", {"TILE": 32, "BLOCK_ROWS": 8}, pad1()),
        )
    if plan == "final":
        return (
            Config("T64x4 swz336", {"TILE": 64, "BLOCK_ROWS": 4}, swz(3, 3, 6)),
            Config("T64x8 swz336", {"TILE": 64, "BLOCK_ROWS": 8}, swz(3, 3, 6)),
            Config("T64xY128x4 swz336", {"TILE": 64, "BLOCK_ROWS": 4, "TILE_Y": 128}, swz(3, 3, 6)),
            Config("T64xY128x8 swz336", {"TILE": 64, "BLOCK_ROWS": 8, "TILE_Y": 128}, swz(3, 3, 6)),
            Config("T64xY256x8 swz336", {"TILE": 64, "BLOCK_ROWS": 8, "TILE_Y": 256}, swz(3, 3, 6)),
            Config("T64xY256x16 swz336", {"TILE": 64, "BLOCK_ROWS": 16, "TILE_Y": 256}, swz(3, 3, 6)),
            Config("T128x8 swz337", {"TILE": 128, "BLOCK_ROWS": 8}, swz(3, 3, 7)),
            Config("T128x8 swz337 G16", {"TILE": 128, "BLOCK_ROWS": 8, "GROUP": 16}, swz(3, 3, 7)),
        )
    if dtype == "f32":
        sweep = [
            Config("T64x4 pad1", {"TILE": 64, "BLOCK_ROWS": 4}, pad1()),
            Config("T64x4 pad1 G8", {"TILE": 64, "BLOCK_ROWS": 4, "GROUP": 8}, pad1()),
            Config("T64x4 pad1 G32", {"TILE": 64, "BLOCK_ROWS": 4, "GROUP": 32}, pad1()),
            Config("T64x4 swz326", {"TILE": 64, "BLOCK_ROWS": 4}, swz(3, 2, 6)),
            Config("T64x4 swz326 G16", {"TILE": 64, "BLOCK_ROWS": 4, "GROUP": 16}, swz(3, 2, 6)),
            Config("T64x2 pad1", {"TILE": 64, "BLOCK_ROWS": 2}, pad1()),
            Config("T64x2 pad1 G16", {"TILE": 64, "BLOCK_ROWS": 2, "GROUP": 16}, pad1()),
            Config("T64x8 pad1", {"TILE": 64, "BLOCK_ROWS": 8}, pad1()),
            Config("T64x8 pad1 G16", {"TILE": 64, "BLOCK_ROWS": 8, "GROUP": 16}, pad1()),
            Config("T64x4 dense", {"TILE": 64, "BLOCK_ROWS": 4}, {}),
            Config("T32x8 pad1", {"TILE": 32, "BLOCK_ROWS": 8}, pad1()),
            Config("T32x8 pad1 G16", {"TILE": 32, "BLOCK_ROWS": 8, "GROUP": 16}, pad1()),
            Config("T32x4 pad1", {"TILE": 32, "BLOCK_ROWS": 4}, pad1()),
            Config("T32x2 pad1 G16", {"TILE": 32, "BLOCK_ROWS": 2, "GROUP": 16}, pad1()),
        ]
    else:
        sweep = [
            Config("T64x4 swz336", {"TILE": 64, "BLOCK_ROWS": 4}, swz(3, 3, 6)),
            Config("T64x4 swz336 G16", {"TILE": 64, "BLOCK_ROWS": 4, "GROUP": 16}, swz(3, 3, 6)),
            Config("T64x2 swz336 G16", {"TILE": 64, "BLOCK_ROWS": 2, "GROUP": 16}, swz(3, 3, 6)),
            Config("T64x4 pad1", {"TILE": 64, "BLOCK_ROWS": 4}, pad1()),
            Config("T128x4 swz337", {"TILE": 128, "BLOCK_ROWS": 4}, swz(3, 3, 7)),
            Config("T128x4 swz337 G8", {"TILE": 128, "BLOCK_ROWS": 4, "GROUP": 8}, swz(3, 3, 7)),
            Config("T128x4 swz337 G32", {"TILE": 128, "BLOCK_ROWS": 4, "GROUP": 32}, swz(3, 3, 7)),
            Config("T128x2 swz337 G16", {"TILE": 128, "BLOCK_ROWS": 2, "GROUP": 16}, swz(3, 3, 7)),
            Config("T128x8 swz337 G16", {"TILE": 128, "BLOCK_ROWS": 8, "GROUP": 16}, swz(3, 3, 7)),
            Config("T128x4 pad1 G16", {"TILE": 128, "BLOCK_ROWS": 4, "GROUP": 16}, pad1()),
        ]
    return tuple(sweep)


def stencil_configs(r: int, plan: str) -> tuple[Config, ...]:
    if plan == "final":
        return (
            Config("32x8 RY4", {"R": r, "BX": 32, "BY": 8, "RY": 4}),
            Config("32x4 RY4", {"R": r, "BX": 32, "BY": 4, "RY": 4}),
            Config("old: 32x8 VEC1 RY1", {"R": r, "BX": 32, "BY": 8, "VEC": 1, "RY": 1}),
        )
    shapes = [  # (BX, BY, RY): output tile BX*4 x BY*RY
        (32, 8, 4), (32, 4, 8), (32, 8, 8), (32, 16, 2), (32, 8, 2), (32, 4, 4), (16, 16, 4), (64, 4, 8),
    ]  # fmt: skip
    out = [Config(f"{bx}x{by} RY{ry}", {"R": r, "BX": bx, "BY": by, "RY": ry}) for bx, by, ry in shapes]
    out.append(Config("old: 32x8 VEC1 RY1", {"R": r, "BX": 32, "BY": 8, "VEC": 1, "RY": 1}))
    return tuple(out)


def sample_config(name: str) -> Config:
    """The shipped sample's headline (fixed) variant, as `smemtile verify` runs it."""
    from smemtile.pipeline.fixes import variants
    from smemtile.pipeline.specs import load

    cfg = variants(load(ROOT / "samples" / f"{name}.yaml"))["fixed"]
    return Config(f"sample {name}", dict(cfg.params), {k: v.to_dict() for k, v in cfg.layouts.items()})


def plan_cases(plan: str) -> list[Case]:
    cases = []
    for dt in ("f32", "f16"):
        cfgs = transpose_configs(dt, plan)
        if dt == "f32":
            cfgs = (sample_config("transpose_32x32"), *cfgs)
        cases.append(
            Case(f"transpose {dt} 8192^2", "transpose", {"rows": 8192, "cols": 8192, "dtype": dt}, cfgs)
        )
    for n in (4096, 8192):
        for r in (1, 2, 3, 4):
            cfgs = stencil_configs(r, plan)
            if r == 4 and n == 4096:
                cfgs = (sample_config("stencil_halo"), *cfgs)
            cases.append(Case(f"stencil R{r} {n}^2", "stencil2d", {"ny": n, "nx": n}, cfgs))
    return cases


def full_config(case: Case, c: Config, problem: dict | None = None):
    return configure(case.family, {**c.params, **(problem or case.problem)}, c.layouts, ARCH)


# ---- compile (no GPU) ---------------------------------------------------------------------------------------


def _compile_one(args) -> tuple[str, str]:
    family, params, layouts = args
    from smemtile.gpu.run import compile_config

    cfg = configure(family, params, layouts, ARCH)
    t0 = time.perf_counter()
    compile_config(cfg)
    return FAMILIES[family].name_expression(cfg), f"{time.perf_counter() - t0:.1f} s"


def compile_all(cases: list[Case], workers: int, quiet: bool = False) -> None:
    jobs = {}
    for case in cases:
        for c in case.configs:
            cfg = full_config(case, c)
            jobs[(FAMILIES[case.family].name_expression(cfg), cfg.problem.get("rows"), cfg.problem.get("ny"))] = (
                case.family, {**c.params, **case.problem}, c.layouts)  # fmt: skip
    with ProcessPoolExecutor(workers) as ex:
        done = list(ex.map(_compile_one, jobs.values()))
    if not quiet:
        for name, took in done:
            print(f"  built {name} ({took})", flush=True)
    print(f"{len(done)} kernels built or taken from the cache", flush=True)


# ---- references and checks ----------------------------------------------------------------------------------


def stencil_reference(x: np.ndarray, c: np.ndarray, workers: int = 16) -> np.ndarray:
    """The family's float64 formula (zero boundary), in row blocks on several threads (numpy releases the GIL)."""
    r = len(c) - 1
    ny, nx = x.shape
    xp = np.pad(x, r)
    out = np.empty((ny, nx), np.float64)

    def block(y0: int, y1: int) -> None:
        v = xp[y0 : y1 + 2 * r].astype(np.float64)
        h = y1 - y0
        acc = c[0] * v[r : r + h, r : r + nx]
        for d in range(1, r + 1):
            acc += c[d] * (v[r : r + h, r - d : r - d + nx] + v[r : r + h, r + d : r + d + nx]
                           + v[r - d : r - d + h, r : r + nx] + v[r + d : r + d + h, r : r + nx])  # fmt: skip
        out[y0:y1] = acc

    step = -(-ny // workers)
    with ThreadPoolExecutor(workers) as ex:
        list(ex.map(lambda y: block(y, min(y + step, ny)), range(0, ny, step)))
    return out


def check_output(fam, ref: np.ndarray, got: np.ndarray) -> tuple[bool, float]:
    """(correct, max relative error): bit for bit when the family is exact, else relative to max |ref|."""
    if fam.exact:
        u = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
        ok = np.array_equal(got.view(u), np.ascontiguousarray(ref).astype(got.dtype, copy=False).view(u))
        return bool(ok), 0.0 if ok else float("inf")
    rows = -(-got.shape[0] // 16)

    def block(y: int) -> tuple[bool, float, float]:
        g, r = got[y : y + rows], ref[y : y + rows]
        return bool(np.isfinite(g).all()), float(np.abs(g - r).max()), float(np.abs(r).max())

    with ThreadPoolExecutor(16) as ex:
        parts = list(ex.map(block, range(0, got.shape[0], rows)))
    if not all(p[0] for p in parts):
        return False, float("inf")
    err = max(p[1] for p in parts) / max(max(p[2] for p in parts), 1e-30)
    return err <= fam.tolerance, err


# ---- GPU ----------------------------------------------------------------------------------------------------


def versions(dev) -> dict:
    import cuda.bindings
    from cuda.bindings import driver

    from smemtile.gpu.nvrtc import nvrtc_version

    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,power.limit",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        smi = ""
    drv = driver.cuDriverGetVersion()[1]
    return {"gpu": dev.name, "cc": f"{dev.cc[0]}.{dev.cc[1]}", "sm_count": dev.sm_count, "nvidia_smi": smi,
            "cuda_driver": f"{drv // 1000}.{drv % 1000 // 10}", "cuda_bindings": cuda.bindings.__version__,
            "nvrtc": nvrtc_version(), "numpy": np.__version__, "python": sys.version.split()[0]}  # fmt: skip


def source_sha256() -> dict:
    out = {}
    for fam in ("transpose", "stencil2d"):
        out[fam] = hashlib.sha256(FAMILIES[fam].source().encode()).hexdigest()[:16]
    return out


class Copy:
    """The reference: cuMemcpyDtoDAsync of one array (bytes read + written = the kernel's)."""

    def __init__(self, nbytes: int):
        from smemtile.gpu.run import DeviceBuffer

        self.src, self.dst, self.nbytes = DeviceBuffer(nbytes), DeviceBuffer(nbytes), nbytes
        self.src.poison()

    def launch(self) -> None:
        from cuda.bindings import driver as d

        (err,) = d.cuMemcpyDtoDAsync(self.dst.ptr, self.src.ptr, self.nbytes, d.CUstream(0))
        assert int(err) == 0, err

    def close(self) -> None:
        self.src.free()
        self.dst.free()


def time_rounds(entries: dict, rounds: int) -> dict[str, list[float]]:
    """Alternating rounds; a 512 MiB memset before every timed call; events around the call alone."""
    from cuda.bindings import driver as d

    from smemtile.gpu.run import DeviceBuffer, _ok

    scratch = DeviceBuffer(FLUSH_BYTES)
    start, end = _ok(d.cuEventCreate(0), "event"), _ok(d.cuEventCreate(0), "event")
    s0 = d.CUstream(0)
    for e in entries.values():  # warm-up
        for _ in range(3):
            e.launch()
    _ok(d.cuCtxSynchronize(), "sync")
    times: dict[str, list[float]] = {k: [] for k in entries}
    names = list(entries)
    try:
        for rnd in range(rounds):
            for i, name in enumerate(names if rnd % 2 == 0 else names[::-1]):
                _ok(d.cuMemsetD8Async(scratch.ptr, (rnd + i) & 0xFF, FLUSH_BYTES, s0), "memset")
                _ok(d.cuEventRecord(start, s0), "record")
                entries[name].launch()
                _ok(d.cuEventRecord(end, s0), "record")
                _ok(d.cuEventSynchronize(end), "sync")
                times[name].append(float(_ok(d.cuEventElapsedTime(start, end), "elapsed")))
    finally:
        d.cuEventDestroy(start)
        d.cuEventDestroy(end)
        scratch.free()
    return times


def stats(ts: list[float]) -> dict:
    q = np.percentile(ts, [10, 50, 90])
    return {"median_ms": float(q[1]), "p10_ms": float(q[0]), "p90_ms": float(q[2]), "min_ms": min(ts),
            "spread": float((q[2] - q[0]) / q[1]), "runs": len(ts)}  # fmt: skip


def run_case(case: Case, dev, rounds: int, log) -> dict:
    from smemtile.codegen.render import body
    from smemtile.gpu.run import LoadedKernel

    fam = FAMILIES[case.family]
    rng = np.random.default_rng(20)
    base = full_config(case, case.configs[0])
    inputs = fam.make_inputs(base, rng)
    t0 = time.perf_counter()
    if case.family == "stencil2d":
        ref = stencil_reference(inputs["in"], inputs["coeffs"].astype(np.float64))
    else:
        ref = fam.reference(base, inputs)
    log(f"  reference {time.perf_counter() - t0:.1f} s")
    unit, nbytes = fam.work(base.problem)
    rows, loaded = [], {}
    for c in case.configs:
        cfg = full_config(case, c)
        src = body(cfg)
        row: dict = {"label": c.label, "params": cfg.params, "layouts": c.layouts,
                     "name_expression": fam.name_expression(cfg)}  # fmt: skip
        try:
            small = []
            for size in fam.test_sizes:
                scfg = full_config(case, c, {**case.problem, **size})
                k = LoadedKernel(scfg, dev, source=src)  # the timed kernel's text; the small problem's launch
                try:
                    sin = fam.make_inputs(scfg, rng)
                    chk = k.check(sin, fam.reference(scfg, sin))
                finally:
                    k.close()
                small.append({"problem": size, "correct": chk.correct, "max_rel_error": chk.max_rel_error})
            row["small_checks"] = small
            k = LoadedKernel(cfg, dev, source=src)
            k.prepare(inputs)
            k.launch()
            k.synchronize()
            ok, err = check_output(fam, ref, k.output())
            row.update(correct=ok and all(s["correct"] for s in small), max_rel_error=err, registers=k.registers,
                       static_smem_bytes=k.static_smem, local_bytes=k.local_bytes, blocks_per_sm=k.driver_blocks,
                       launch=k.shape.to_dict())  # fmt: skip
            if row["correct"]:
                loaded[c.label] = k
            else:
                k.close()
                log(f"  {c.label}: WRONG (timed size ok={ok}, err {err}; small {small})")
        except Exception as e:  # a configuration that fails to build or run is data, not a crash
            row.update(correct=False, error=f"{type(e).__name__}: {str(e)[:400]}")
            log(f"  {c.label}: {row['error']}")
        rows.append(row)
    copy = Copy(int(nbytes // 2))
    try:
        times = time_rounds({"copy": copy, **loaded}, rounds)
    finally:
        copy.close()
        for k in loaded.values():
            k.close()
    cs = stats(times["copy"])
    for row in rows:
        if row["label"] not in times:
            continue
        ts = times[row["label"]]
        st = stats(ts)
        row.update(st, gbps=nbytes / (st["median_ms"] * 1e-3) / 1e9, ratio=cs["median_ms"] / st["median_ms"],
                   ratio_rounds=statistics.median(c / t for c, t in zip(times["copy"], ts, strict=True)))  # fmt: skip
    return {"case": case.name, "family": case.family, "problem": case.problem, "bytes": nbytes,
            "copy": {**cs, "gbps": nbytes / (cs["median_ms"] * 1e-3) / 1e9}, "configs": rows}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", default="sweep", choices=("sweep", "final"))
    ap.add_argument("--only", default="", help="run only cases whose name contains this text")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--commit", default="")
    ap.add_argument("--list", action="store_true")
    ap.add_argument(
        "--prebuild", type=Path, help="compile every configuration into this NVRTC cache (no GPU)"
    )
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument(
        "--profile", default="", help="launch the first configuration with this label 3 times (for ncu)"
    )
    a = ap.parse_args()
    cases = [c for c in plan_cases(a.plan) if a.only in c.name]
    if a.list:
        for case in cases:
            print(case.name, case.problem)
            for c in case.configs:
                cfg = full_config(case, c)
                print(f"  {c.label:24s} {FAMILIES[case.family].name_expression(cfg)}")
        return 0
    if a.prebuild:
        os.environ["SMEMTILE_CACHE_DIR"] = str(a.prebuild)
        compile_all(cases, a.workers)
        return 0
    assert a.rounds >= 15, "at least 15 rounds"
    compile_all(
        cases, a.workers, quiet=True
    )  # cache hits when prebuilt; else in parallel on this machine's cores
    from smemtile.gpu.run import open_device

    dev = open_device(0)
    t_start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t_start:6.1f} s] {msg}", flush=True)

    doc = {"what": "issue 20: transpose and stencil2d vs device-to-device copy of the same bytes",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "commit": a.commit, "family_sources": source_sha256(), "versions": versions(dev), "plan": a.plan,
           "method": {"rounds": a.rounds, "flush_bytes": FLUSH_BYTES, "order": "alternating, reversed every other round",
                      "reference": "cuMemcpyDtoDAsync of one array (read + write bytes = the kernel's)",
                      "spread": "(p90 - p10) / median"}, "cases": []}  # fmt: skip
    for case in cases:
        log(f"{case.name}: {len(case.configs)} configurations")
        doc["cases"].append(run_case(case, dev, a.rounds, log))
        if a.json:
            a.json.write_text(json.dumps(doc, indent=1))
    print()
    for cd in doc["cases"]:
        print(f"{cd['case']}: copy {cd['copy']['gbps']:.0f} GB/s ({cd['copy']['median_ms']:.4f} ms, "
              f"spread {cd['copy']['spread']:.1%})")  # fmt: skip
        for r in sorted(cd["configs"], key=lambda r: -r.get("ratio", 0)):
            if "ratio" in r:
                print(f"  {r['label']:24s} {r['gbps']:7.0f} GB/s  {r['ratio']:.3f}x (rounds {r['ratio_rounds']:.3f})"
                      f"  spread {r['spread']:5.1%}  {r['registers']} regs {r['blocks_per_sm']} blk/SM")  # fmt: skip
            else:
                print(f"  {r['label']:24s} FAILED {r.get('error', '')[:100]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
