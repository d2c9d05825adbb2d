"""Issue 19 phase 2 on the GPU: the hgemm family as `smemtile verify` builds and launches it, against cuBLAS.

Every kernel is the family's configuration of a spec (``smemtile tiles ... --format yaml``, resolved and fixed as
``verify`` does), the generated body compiled by NVRTC for the device (``LoadedKernel``), launched step by step
through the family's launch plan; its arrays are torch tensors (``bind``) so cuBLAS reads the very same A and B.
Correctness first: the timed output against torch float64 on the GPU (max |C - ref| / max |ref| within the
family's tolerance, every element written: the output is poisoned with NaN before the check).

Reference: torch.matmul (cuBLAS, fp16/bf16 reduced-precision reductions off = fp32 accumulation), 16-bit C, into a
fresh tensor and into a preallocated one; the faster is the reference. Where torch offers ``out_dtype`` (fp32 C
from 16-bit inputs) that call is timed too, for the like-for-like fp32-C comparison. Timing: alternating rounds
(order reversed every round), a 512 MiB memset before every timed call outside the events, CUDA events around
the call alone; median and spread = (p90 - p10) / median.

``power``: the clock and power each kernel runs at back to back (NVML, 1.5 s each; the phase-1 hypothesis that
the 700 W cap, not stalls, holds mma.sync near 0.6x): ours, cuBLAS, and a registers-only mma.sync loop (8 warps
per SM, 16 independent accumulators per warp, no memory traffic).

``sanitize``: small problems through ``LoadedKernel.check`` (for compute-sanitizer memcheck / racecheck).

    python -m bench.bench_hgemm_family bench t1.yaml t2.yaml --json $OUT/hgemm_family.json
    python -m bench.bench_hgemm_family power t.yaml --json $OUT/power.json
    python -m bench.bench_hgemm_family sanitize
    python -m bench.bench_hgemm_family build t1.yaml ...    # CPU: fill the NVRTC cache ($SMEMTILE_CACHE_DIR)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from bench.timing import stats, time_rounds  # noqa: E402

FLUSH_BYTES = 512 << 20
# small problems for the sanitizers: the 4-byte register copies (ALIGN 2) and the 2-byte ones (ALIGN 1, the
# family's choice for odd K), bf16 C, masked K tail, split K with column-major B, f16 C, and odd K and N (row-major
# B, the N edge, bf16 C). Run 6 ran the first two and the last with ALIGN 2 (then the default): 0 errors, 0 hazards
SANITIZE = [
    ({"ALIGN": 2}, {"M": 130, "N": 136, "K": 45, "beta": 0.5}),
    ({"ALIGN": 2}, {"M": 130, "N": 136, "K": 45, "beta": 0.5, "dtype": "bf16", "c_dtype": "bf16"}),
    ({"ALIGN": 1}, {"M": 130, "N": 136, "K": 45, "beta": 0.5}),
    ({"BM": 128, "BN": 128, "STAGES": 3}, {"M": 300, "N": 264, "K": 104, "dtype": "bf16"}),
    (
        {"BM": 64, "BN": 64, "WM": 32, "WN": 32, "SPLIT_K": 2},
        {"M": 64, "N": 200, "K": 512, "b_layout": "col"},
    ),
    ({}, {"M": 256, "N": 128, "K": 96, "c_dtype": "f16", "alpha": 0.5}),
    ({"STAGES": 3, "ALIGN": 2}, {"M": 200, "N": 131, "K": 1023, "dtype": "bf16", "c_dtype": "bf16"}),
]
MMA_REGS = r"""
extern "C" __global__ void __launch_bounds__(256, 1) mma_regs(float* out, int iters) {
    // registers only: 16 independent m16n8k16 accumulators per warp, operands that are not constants
    unsigned h = (threadIdx.x + 1u) * 2654435761u, a[4], b[2];
    for (int i = 0; i < 4; ++i) { h = h * 1664525u + 1013904223u; a[i] = (h & 0x80008000u) | 0x3c003c00u | (h & 0x03ff03ffu); }
    for (int i = 0; i < 2; ++i) { h = h * 1664525u + 1013904223u; b[i] = (h & 0x80008000u) | 0x3c003c00u | (h & 0x03ff03ffu); }
    float acc[16][4] = {};
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int j = 0; j < 16; ++j)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                         "{%8,%9}, {%0,%1,%2,%3};\n"
                         : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    float s = 0.f;
    for (int j = 0; j < 16; ++j) s += acc[j][0] + acc[j][1] + acc[j][2] + acc[j][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"""


def config_of(spec: str, arch: str | None = None, **problem):
    """The configuration `smemtile verify SPEC` runs (the fixed variant), for ``arch``, problem keys changed."""
    from smemtile.families import reconfigure
    from smemtile.pipeline.fixes import variants
    from smemtile.pipeline.specs import load

    cfg = variants(load(spec))["fixed"]
    return reconfigure(cfg, arch=arch or cfg.arch, problem=problem or None)


def variants_of(spec: str, arch: str | None = None) -> dict:
    """The spec's kernel and, for context, the family default tile (4 stages) and 16-bit C where allowed."""
    from smemtile.families import reconfigure

    cfg = config_of(spec, arch)
    out = {"pick": cfg}
    if cfg.params["STAGES"] != 4:
        out["pick, 4 stages"] = reconfigure(cfg, params={"STAGES": 4})
    if cfg.problem["dtype"] == "f16" and cfg.params["SPLIT_K"] == 1:
        out["pick, f16 C"] = reconfigure(cfg, problem={"c_dtype": "f16"})
    return out


def build(specs: list[str], arch: str, run6: bool = False) -> None:
    from smemtile.gpu.run import compile_config

    todo = [(spec, name, cfg) for spec in specs for name, cfg in variants_of(spec, arch).items()]
    if run6:
        todo += [(c["case"], name, cfg) for c in run6_cases(arch) for name, cfg in c["configs"].items()]
        todo += [
            ("sanitize", str(problem), cfg)
            for (params, problem), cfg in zip(SANITIZE, sanitize_configs(arch), strict=True)
        ]
    for case, name, cfg in todo:
        r = compile_config(cfg)
        res = next(iter(r.resources.values()))
        print(f"{case} [{name}] NVRTC {r.nvrtc_version}: {res}")


# ---- run 6 (issue 19 phase 3): every case from `smemtile tiles`, ranked by this commit's model ---------------------
# (M, N, K, dtypes, tiles ranks timed besides #1, variants of #1): the square picks with 3 stages beside them (the
# model's depth rule) and bf16 C; the skinny pick beside the next BN-128 tile and the two best split-K candidates
# (one of them phase 1's 64x128x64 w4 s4 SPLIT_K 2); the odd-K pick through the 4-byte copies (ALIGN 2, the
# family's choice now) beside the 2-byte ones (ALIGN 1, phase 1's 0.70x) and the 2-blocks/SM runner-up.
RUN6 = [
    (4096, 4096, 4096, ("f16", "bf16"), "square"),
    (8192, 8192, 8192, ("f16", "bf16"), "square"),
    (64, 8192, 4096, ("f16", "bf16"), "skinny"),
    (4095, 4097, 1023, ("f16", "bf16"), "odd"),
]


def _tiles_config(p, s, total: int, arch: str):
    """The configuration `smemtile tiles ... --format yaml` writes for candidate ``s``, resolved as verify does."""
    from smemtile.families import reconfigure
    from smemtile.pipeline.fixes import variants
    from smemtile.pipeline.specs import resolve
    from smemtile.pipeline.tiles import spec_doc

    cfg = variants(resolve(spec_doc(p, s, total)))["fixed"]
    return reconfigure(cfg, arch=arch)


def run6_cases(arch: str = "sm_90") -> list[dict]:
    """Every configuration run 6 times, named by its tiles rank (one compile per name expression)."""
    from smemtile.families import FAMILIES, reconfigure
    from smemtile.pipeline.tiles import recommend

    out = []
    for m, n, k, dtypes, kind in RUN6:
        for dt in dtypes:
            r = recommend(m, n, k, dt, "sm_90")
            total = len(r.ranked)
            top = r.ranked[0]
            pick = _tiles_config(r.problem, top, total, arch)
            cfgs = {f"pick #1 {top.cfg.label}": pick}
            if kind == "square":
                cfgs["pick, 3 stages"] = reconfigure(pick, params={"STAGES": 3})
                if dt == "bf16" and m == 4096:
                    cfgs["pick, bf16 C"] = reconfigure(pick, problem={"c_dtype": "bf16"})
            elif kind == "skinny":
                more = [s for s in r.ranked[1:] if s.cfg.bn >= 128 and s.cfg.split_k == 1][:1]
                more += [s for s in r.ranked if s.cfg.split_k > 1][:1]
                more += [s for s in r.ranked if s.cfg.label == "64x128x64 w4 s4 g8 splitk2"]
                for s in more:
                    cfgs.setdefault(f"#{s.rank} {s.cfg.label}", _tiles_config(r.problem, s, total, arch))
            else:
                other = 2 if FAMILIES["hgemm"].align(pick) == 1 else 1  # the register copies not picked
                cfgs[f"pick, ALIGN {other}"] = reconfigure(pick, params={"ALIGN": other})
                s = r.ranked[1]
                cfgs[f"#{s.rank} {s.cfg.label}"] = _tiles_config(r.problem, s, total, arch)
            out.append(
                {
                    "case": f"{m}x{n}x{k} {dt}",
                    "shape": [m, n, k],
                    "dtype": dt,
                    "configs": cfgs,
                    "ranks": {
                        f"#{s.rank} {s.cfg.label}": {"tflops_predicted": s.tflops, "reason": s.reason}
                        for s in r.ranked[:3]
                    },
                }
            )
    return out


# ---- calibration of the tile model's hgemm factors (CPU, from the recorded runs) --------------------------------
# phase 1 run 3 (commit 10517bf): 13 tilings, stages 3-5, skinny, split K; phase 2 runs 4-5: the family's picks,
# 3 vs 4 stages; phase 3 run 6: picks, 3 vs 4 stages, skinny (BK 128, split K), the register copies
PHASE1 = ROOT / "bench/results/hgemm_h200.json"
PHASE2 = ROOT / "bench/results/hgemm_family_h200.json"
PHASE3 = ROOT / "bench/results/hgemm_family_h200_run6.json"


def _family_rows() -> list[tuple[str, dict, dict]]:
    """(run, bench row, its timed kernel with the template arguments parsed) of runs 4-6."""
    fam = json.loads(PHASE2.read_text())
    runs = [(run, fam[run]["bench"]) for run in ("run4", "run5")]
    if PHASE3.exists():
        runs.append(("run6", json.loads(PHASE3.read_text())["bench"]))
    out = []
    for run, rows in runs:
        for row in rows:
            for o in row["ours"].values():
                args = [x.strip() for x in o["name_expression"].split("<", 1)[1].rstrip(">").split(",")]
                t = dict(
                    zip(
                        ("BM", "BN", "BK", "WM", "WN", "STAGES", "GROUP_M", "SPLIT_K", "MIN_BLOCKS", "ALIGN"),
                        (int(a) for a in args[3:13]),
                        strict=True,
                    )
                )
                out.append((run, row, {**o, **t, "b_col": args[2] == "true"}))
    return out


def _square_times() -> dict:
    """{(source, shape, dtype, BM, BN, MIN_BLOCKS): {(BK, STAGES): median ms}} of the swizzled square runs."""
    groups: dict = {}
    for e in json.loads(PHASE1.read_text())["entries"]:
        q = e["params"]
        if len(set(e["shape"])) != 1 or q["layout"] != "swizzle" or q["group_m"] != 8 or q["b_col"]:
            continue
        key = ("run3", tuple(e["shape"]), e["dtype"], q["bm"], q["bn"], q["min_blocks"])
        groups.setdefault(key, {})[(q["bk"], q["stages"])] = e["ours"]["median_ms"]
    for run, row, o in _family_rows():
        if o["c_dtype"] != "f32" or len(set(row["shape"])) != 1 or o["SPLIT_K"] != 1 or o["ALIGN"] != 8:
            continue
        key = (run, tuple(row["shape"]), row["dtype"], o["BM"], o["BN"], o["MIN_BLOCKS"])
        groups.setdefault(key, {})[(o["BK"], o["STAGES"])] = o["median_ms"]
    return groups


def _skinny_points() -> list[tuple]:
    """(dtype, TileConfig, measured ms) of the 64 x 8192 x 4096 runs (phase 1's whose warp split is the model's,
    run 6's tiles candidates)."""
    from smemtile.families.hgemm.tiles import warp_tile
    from smemtile.model.tiling import TileConfig

    out = []
    for e in json.loads(PHASE1.read_text())["entries"]:
        q = e["params"]
        if e["shape"] != [64, 8192, 4096]:
            continue
        warps = (q["bm"] // q["wm"]) * (q["bn"] // q["wn"])
        if warp_tile(q["bm"], q["bn"], warps) != (q["wm"], q["wn"]):
            continue  # the model scores every tile with its own warp split
        c = TileConfig(q["bm"], q["bn"], q["bk"], warps, q["stages"], q["group_m"], split_k=q["split_k"])
        out.append((e["dtype"], c, e["ours"]["median_ms"]))
    for _run, row, o in _family_rows():  # run 6: the tiles picks (BK 128) and split K
        if row["shape"] == [64, 8192, 4096]:
            warps = (o["BM"] // o["WM"]) * (o["BN"] // o["WN"])
            c = TileConfig(o["BM"], o["BN"], o["BK"], warps, o["STAGES"], o["GROUP_M"], split_k=o["SPLIT_K"])
            out.append((row["dtype"], c, o["median_ms"]))
    return out


def _predict(cal: dict, dtype: str, shape, c) -> float:
    """The tile model's predicted ms for one configuration under the calibration ``cal``."""
    from smemtile.families import FAMILIES
    from smemtile.families.hgemm.tiles import Contract
    from smemtile.model.arch import get_arch
    from smemtile.model.tiling import make_problem
    from smemtile.model.tiling_model import evaluate

    m, n, k = shape
    contract = Contract(FAMILIES["hgemm"], get_arch("sm_90"), {"M": m, "N": n, "K": k})
    contract.calibration = cal
    scored, rejected = evaluate(make_problem(m, n, k, dtype, "sm_90", contract=contract), [c])
    assert scored, rejected
    return scored[0].time_s * 1e3


def calibrate() -> dict:
    """The factors of smemtile/families/hgemm/calibration_h200.yaml from the recorded runs: the relative speed
    of each BK:STAGES against BK 32, 4 stages of the same tile and run (geometric mean); the L2 load latency
    from the 3-stage runs (where the floor binds: t = rounds x K tiles x L / 2); the DRAM one fitted to phase
    1's 64 x 8192 x 4096 runs (least squares in log time through the whole model); split K's atomics at the
    sgemm calibration's measured fp32 atomic rate."""
    import math
    import statistics

    from smemtile.model.tiling_model import load_calibration

    groups = _square_times()
    ratios: dict = {}
    l2 = []
    for (_src, shape, _dt, bm, bn, mb), t in groups.items():
        ref = t.get((32, 4))
        for (bk, st), ms in t.items():
            if ref is not None:
                ratios.setdefault(f"{bk}:{st}", []).append(ref / ms)
            if (bk, st) == (32, 3) and mb == 1:
                m, n, k = shape
                rounds = math.ceil(math.ceil(m / bm) * math.ceil(n / bn) / 132)
                l2.append(2 * ms * 1e3 / (rounds * k / bk))
    stages = {key: statistics.geometric_mean(v) for key, v in sorted(ratios.items())}
    top = max(stages.values())
    stages = {key: round(v / top, 4) for key, v in stages.items()}
    counts = {key: len(v) for key, v in sorted(ratios.items())}
    stages["unmeasured"] = min(stages.values())
    atom = load_calibration("sgemm_h200.json")
    cal = {
        "stages": stages,
        "latency_us": {"l2": round(statistics.geometric_mean(l2), 3), "dram": 1.0},
        "atom_gbps": round(atom["constants"]["atom_gbps"], 1),
        "gpu_key": "h200",
        "gpu": "NVIDIA H200",
        "family": "hgemm",
        "file": "-",
    }
    pts = _skinny_points()

    def loss(lat: float) -> float:
        c2 = {**cal, "latency_us": {**cal["latency_us"], "dram": lat}}
        return sum(math.log(_predict(c2, dt, (64, 8192, 4096), c) / ms) ** 2 for dt, c, ms in pts)

    grid = [round(0.5 + 0.05 * i, 2) for i in range(51)]
    cal["latency_us"]["dram"] = min(grid, key=loss)
    fit = [
        {
            "dtype": dt,
            "config": c.label,
            "measured_ms": ms,
            "model_ms": _predict(cal, dt, (64, 8192, 4096), c),
        }
        for dt, c, ms in pts
    ]
    sq = []
    for (src, shape, dt, bm, bn, mb), t in groups.items():
        from smemtile.model.tiling import TileConfig

        for (bk, st), ms in t.items():
            c = TileConfig(bm, bn, bk, 8 if mb == 1 and bm * bn > 16384 else 4, st, 8)
            sq.append(
                {
                    "source": src,
                    "shape": shape,
                    "dtype": dt,
                    "config": c.label,
                    "measured_ms": ms,
                    "model_ms": _predict(cal, dt, shape, c),
                }
            )
    return {
        "calibration": cal,
        "stage_comparisons": counts,
        "l2_latency_points_us": l2,
        "skinny_fit": fit,
        "square_fit": sq,
    }


# ---- GPU ----------------------------------------------------------------------------------------------------------
def torch_setup():
    import torch

    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    return torch


def operands(torch, cfg, seed: int = 0):
    m, n, k = (int(cfg.problem[x]) for x in "MNK")
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[cfg.problem["dtype"]]
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=g).to(dt)
    b = torch.randn(k, n, device="cuda", generator=g).to(dt)
    return a, b


def run_ours(torch, k, a, b, cfg):
    """Bind ours to a, b and a fresh C of c_dtype; (launch function, C tensor, column-major B storage)."""
    cdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[cfg.problem["c_dtype"]]
    m, n = a.shape[0], b.shape[1]
    bb = b.t().contiguous() if cfg.problem["b_layout"] == "col" else b
    c = torch.full((m, n), float("nan"), device="cuda", dtype=cdt)
    k.bind({"A": a.data_ptr(), "B": bb.data_ptr(), "C": c.data_ptr()})
    return k.launch, c, bb


def bench(specs: list[str], rounds: int, run6: bool = False, out: Path | None = None) -> list[dict]:
    from smemtile.gpu.run import open_device

    torch = torch_setup()
    dev = open_device(torch.cuda.current_device())
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    todo = [(spec, variants_of(spec, dev.arch_name), {}) for spec in specs]
    if run6:
        todo += [(c["case"], c["configs"], {"ranks": c["ranks"]}) for c in run6_cases(dev.arch_name)]
    rows = []
    for label, cfgs, extra in todo:
        rows.append({**bench_configs(torch, dev, flush, label, cfgs, rounds), **extra})
        print_table(rows[-1:], head=len(rows) == 1)
        if out:  # after every case: a run cut short keeps what it measured
            out.write_text(json.dumps(rows, indent=1))
        torch.cuda.empty_cache()
    return rows


def bench_configs(torch, dev, flush, label: str, cfgs: dict, rounds: int) -> dict:
    """cuBLAS and every configuration of ``cfgs`` (one problem), checked against float64, then timed in
    alternating rounds."""
    from smemtile.families import FAMILIES
    from smemtile.gpu.run import LoadedKernel

    first = next(iter(cfgs.values()))
    fam = FAMILIES[first.family]
    a, b = operands(torch, first)
    m, n, kk = a.shape[0], b.shape[1], a.shape[1]
    ref = a.double() @ b.double()
    scale = float(ref.abs().max())
    flop = 2.0 * m * n * kk
    fns, info, kernels, errs = {}, {}, [], {}
    c16 = torch.empty(m, n, device="cuda", dtype=a.dtype)
    fns["cuBLAS"] = lambda: torch.matmul(a, b)
    fns["cuBLAS out=C"] = lambda: torch.matmul(a, b, out=c16)
    try:
        torch.mm(a, b, out_dtype=torch.float32)
        fns["cuBLAS fp32 C"] = lambda: torch.mm(a, b, out_dtype=torch.float32)
    except (TypeError, RuntimeError):
        pass
    for name in list(fns):
        errs[name] = float((fns[name]().double() - ref).abs().max()) / scale
    for name, cfg in cfgs.items():
        k = LoadedKernel(cfg, dev)
        kernels.append(k)
        launch, c, _bb = run_ours(torch, k, a, b, cfg)
        launch()
        torch.cuda.synchronize()
        written = bool(torch.isfinite(c).all())
        errs[name] = float((c.double() - ref).abs().max()) / scale if written else float("inf")
        info[name] = {
            "name_expression": fam.name_expression(cfg),
            "registers": k.registers,
            "local_bytes": k.local_bytes,
            "blocks_per_sm": k.driver_blocks,
            "align": fam.align(cfg),
            "split_k": cfg.params["SPLIT_K"],
            "c_dtype": cfg.problem["c_dtype"],
            "tolerance": fam.tolerance_for(cfg),
            "correct": written and errs[name] <= fam.tolerance_for(cfg),
        }
        fns[name] = launch
    st = {name: stats(ts) for name, ts in time_rounds(fns, torch, rounds, flush).items()}
    ref_name = min(("cuBLAS", "cuBLAS out=C"), key=lambda x: st[x]["median_ms"])
    ref_ms = st[ref_name]["median_ms"]
    line = {
        "spec": label,
        "shape": [m, n, kk],
        "dtype": first.problem["dtype"],
        "cublas_call": ref_name,
        "cublas_tflops": flop / ref_ms / 1e9,
        "cublas": st[ref_name],
        "cublas_all": {
            x: {**st[x], "tflops": flop / st[x]["median_ms"] / 1e9, "rel_err": errs[x]}
            for x in fns
            if x.startswith("cuBLAS")
        },
        "ours": {},
    }
    for name in cfgs:
        s = st[name]
        line["ours"][name] = {
            **info[name],
            **s,
            "tflops": flop / s["median_ms"] / 1e9,
            "ratio": ref_ms / s["median_ms"],
            "rel_err": errs[name],
        }
    for k in kernels:
        k.close()
    return line


def print_table(rows: list[dict], head: bool = True) -> None:
    if head:
        print(f"{'case':<22} {'kernel':<16} {'TFLOP/s':>8} {'x cuBLAS':>8} {'spread':>7} {'rel err':>8} ok")
    for r in rows:
        case = (
            f"{r['shape'][0]}^3 {r['dtype']}" if len(set(r["shape"])) == 1 else f"{r['shape']} {r['dtype']}"
        )
        print(f"{case:<22} {'cuBLAS':<16} {r['cublas_tflops']:8.1f} {1.0:8.3f} {r['cublas']['spread']:7.1%}")
        for name, o in r["ours"].items():
            print(
                f"{'':<22} {name:<16} {o['tflops']:8.1f} {o['ratio']:8.3f} {o['spread']:7.1%} "
                f"{o['rel_err']:8.1e} {'yes' if o['correct'] else 'NO'} {o['registers']} regs"
            )


def power(spec: str) -> dict:
    from bench.bench_hgemm import sustained
    from smemtile.gpu.nvrtc import compile_cubin
    from smemtile.gpu.run import LoadedKernel, open_device

    torch = torch_setup()
    dev = open_device(torch.cuda.current_device())
    cfg = config_of(spec, dev.arch_name)
    a, b = operands(torch, cfg)
    k = LoadedKernel(cfg, dev)
    launch, _, _ = run_ours(torch, k, a, b, cfg)
    flop = 2.0 * a.shape[0] * b.shape[1] * a.shape[1]
    out = {"spec": spec, "flop": flop}
    for name, fn in (("ours", launch), ("cuBLAS", lambda: torch.matmul(a, b))):
        out[name] = sustained(fn, torch)
        out[name]["tflops"] = flop / out[name]["ms_per_call"] / 1e9
    from cuda.bindings import driver as d

    res = compile_cubin(MMA_REGS, [], dev.arch_name, filename="mma_regs.cu")
    mod = d.cuModuleLoadData(res.cubin)[1]
    func = d.cuModuleGetFunction(mod, b"mma_regs")[1]
    blocks, iters = dev.sm_count, 16384
    buf = torch.empty(blocks * 256, device="cuda")
    import ctypes

    args = ((buf.data_ptr(), iters), (ctypes.c_void_p, ctypes.c_int))

    def regs():
        d.cuLaunchKernel(func, blocks, 1, 1, 256, 1, 1, 0, d.CUstream(0), args, 0)

    out["mma_regs"] = sustained(regs, torch)
    out["mma_regs"]["tflops"] = (
        blocks * 8 * iters * 16 * 2 * 16 * 8 * 16 / out["mma_regs"]["ms_per_call"] / 1e9
    )
    out["mma_regs"]["registers"] = next(iter(res.resources.values())).registers if res.resources else None
    k.close()
    return out


def sanitize_configs(arch: str) -> list:
    from smemtile.families import FAMILIES, configure, reconfigure

    fam = FAMILIES["hgemm"]
    out = []
    for params, problem in SANITIZE:
        cfg = configure(fam, {**params, **problem}, {}, arch)
        out.append(reconfigure(cfg, layouts=fam.default_layouts(cfg)))  # the kernel's swizzles
    return out


def sanitize() -> int:
    import numpy as np

    from smemtile.families import FAMILIES
    from smemtile.gpu.run import check_config, open_device

    dev = open_device(0)
    fam = FAMILIES["hgemm"]
    bad = 0
    for (_params, problem), cfg in zip(SANITIZE, sanitize_configs(dev.arch_name), strict=True):
        chk = check_config(cfg, dev, np.random.default_rng(3))
        bad += not chk.correct
        print(
            f"{fam.name_expression(cfg)} {problem}: correct={chk.correct} max_rel_error={chk.max_rel_error:.1e} "
            f"ALIGN {fam.align(cfg)}"
        )
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("bench", "power", "sanitize", "build", "calibrate"))
    ap.add_argument("specs", nargs="*")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument(
        "--run6", action="store_true", help="the issue 19 phase 3 cases (tiles picks of this commit)"
    )
    args = ap.parse_args()
    if args.mode == "build":
        build(args.specs, args.arch, args.run6)
        return 0
    if args.mode == "sanitize":
        return sanitize()
    if args.mode == "calibrate":
        doc = calibrate()
        if args.json:
            args.json.write_text(json.dumps(doc, indent=1, default=list))
        print(json.dumps(doc["calibration"], indent=1))
        for f in doc["skinny_fit"]:
            print(
                f"{f['dtype']:5} {f['config']:<34} measured {f['measured_ms'] * 1e3:6.1f} us, model "
                f"{f['model_ms'] * 1e3:6.1f} us"
            )
        return 0
    doc = (
        bench(args.specs, args.rounds, args.run6, args.json) if args.mode == "bench" else power(args.specs[0])
    )
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1))
    if args.mode != "bench":
        for name in ("ours", "cuBLAS", "mma_regs"):
            r = doc[name]
            print(
                f"{name:<9} {r.get('tflops', 0):7.1f} TFLOP/s at {r.get('sm_clock_mhz')} MHz, "
                f"{r.get('power_w') or 0:.0f} W, reasons {r.get('clock_event_reasons')}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
