"""Rebuilds hgemm's measured factors (``calibration_h200.yaml`` next to this file) from the recorded H200 runs in
``bench/results`` (a checkout's; the wheel ships the factors, not the runs): :func:`calibrate` computes them,
:func:`reproduce` returns (the shipped factors, the recomputed ones). CPU only; the runs themselves are
``bench/bench_hgemm_family.py``'s (phase 1 run 3, phase 2 runs 4-5, phase 3 run 6)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from smemtile.families.hgemm.tiles import Contract, calibration, warp_tile
from smemtile.families.sgemm.tiles import calibration as sgemm_calibration
from smemtile.model.arch import get_arch
from smemtile.model.gemm_model import evaluate
from smemtile.model.gemm_tiles import TileConfig, make_problem

RESULTS = Path(__file__).resolve().parents[3] / "bench" / "results"
# phase 1 run 3 (commit 10517bf): 13 tilings, stages 3-5, skinny, split K; phase 2 runs 4-5: the family's picks,
# 3 vs 4 stages; phase 3 run 6: picks, 3 vs 4 stages, skinny (BK 128, split K), the register copies
PHASE1 = "hgemm_h200.json"
PHASE2 = "hgemm_family_h200.json"
PHASE3 = "hgemm_family_h200_run6.json"
FACTORS = ("stages", "latency_us", "atom_gbps")


def _family_rows(results: Path) -> list[tuple[str, dict, dict]]:
    """(run, bench row, its timed kernel with the template arguments parsed) of runs 4-6."""
    fam = json.loads((results / PHASE2).read_text())
    runs = [(run, fam[run]["bench"]) for run in ("run4", "run5")]
    if (results / PHASE3).exists():
        runs.append(("run6", json.loads((results / PHASE3).read_text())["bench"]))
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


def _square_times(results: Path) -> dict:
    """{(source, shape, dtype, BM, BN, MIN_BLOCKS): {(BK, STAGES): median ms}} of the swizzled square runs."""
    groups: dict = {}
    for e in json.loads((results / PHASE1).read_text())["entries"]:
        q = e["params"]
        if len(set(e["shape"])) != 1 or q["layout"] != "swizzle" or q["group_m"] != 8 or q["b_col"]:
            continue
        key = ("run3", tuple(e["shape"]), e["dtype"], q["bm"], q["bn"], q["min_blocks"])
        groups.setdefault(key, {})[(q["bk"], q["stages"])] = e["ours"]["median_ms"]
    for run, row, o in _family_rows(results):
        if o["c_dtype"] != "f32" or len(set(row["shape"])) != 1 or o["SPLIT_K"] != 1 or o["ALIGN"] != 8:
            continue
        key = (run, tuple(row["shape"]), row["dtype"], o["BM"], o["BN"], o["MIN_BLOCKS"])
        groups.setdefault(key, {})[(o["BK"], o["STAGES"])] = o["median_ms"]
    return groups


def _skinny_points(results: Path) -> list[tuple]:
    """(dtype, TileConfig, measured ms) of the 64 x 8192 x 4096 runs (phase 1's whose warp split is the model's,
    run 6's tiles candidates)."""
    out = []
    for e in json.loads((results / PHASE1).read_text())["entries"]:
        q = e["params"]
        if e["shape"] != [64, 8192, 4096]:
            continue
        warps = (q["bm"] // q["wm"]) * (q["bn"] // q["wn"])
        if warp_tile(q["bm"], q["bn"], warps) != (q["wm"], q["wn"]):
            continue  # the model scores every tile with its own warp split
        c = TileConfig(q["bm"], q["bn"], q["bk"], warps, q["stages"], q["group_m"], split_k=q["split_k"])
        out.append((e["dtype"], c, e["ours"]["median_ms"]))
    for _run, row, o in _family_rows(results):  # run 6: the tiles picks (BK 128) and split K
        if row["shape"] == [64, 8192, 4096]:
            warps = (o["BM"] // o["WM"]) * (o["BN"] // o["WN"])
            c = TileConfig(o["BM"], o["BN"], o["BK"], warps, o["STAGES"], o["GROUP_M"], split_k=o["SPLIT_K"])
            out.append((row["dtype"], c, o["median_ms"]))
    return out


def _predict(cal: dict, dtype: str, shape, c) -> float:
    """The tile model's predicted ms for one configuration under the calibration ``cal``."""
    from smemtile.families import FAMILIES

    m, n, k = shape
    contract = Contract(FAMILIES["hgemm"], get_arch("sm_90"), {"M": m, "N": n, "K": k})
    contract.calibration = cal
    scored, rejected = evaluate(make_problem(m, n, k, dtype, "sm_90", contract=contract), [c])
    assert scored, rejected
    return scored[0].time_s * 1e3


def calibrate(results: Path | None = None) -> dict:
    """The factors of ``calibration_h200.yaml`` from the recorded runs (``results``: bench/results of a checkout): the relative speed
    of each BK:STAGES against BK 32, 4 stages of the same tile and run (geometric mean); the L2 load latency
    from the 3-stage runs (where the floor binds: t = rounds x K tiles x L / 2); the DRAM one fitted to phase
    1's 64 x 8192 x 4096 runs (least squares in log time through the whole model); split K's atomics at the
    sgemm calibration's measured fp32 atomic rate."""
    results = RESULTS if results is None else Path(results)
    groups = _square_times(results)
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
    atom = sgemm_calibration()
    cal = {
        "stages": stages,
        "latency_us": {"l2": round(statistics.geometric_mean(l2), 3), "dram": 1.0},
        "atom_gbps": round(atom["constants"]["atom_gbps"], 1),
        "gpu_key": "h200",
        "gpu": "NVIDIA H200",
        "family": "hgemm",
        "file": "-",
    }
    pts = _skinny_points(results)

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


def reproduce(results: Path | None = None) -> tuple[dict, dict]:
    """(the shipped factors, the factors :func:`calibrate` recomputes from ``results``): stages, latency_us,
    atom_gbps."""
    shipped, doc = calibration(), calibrate(results)
    return {k: shipped[k] for k in FACTORS}, {k: doc["calibration"][k] for k in FACTORS}
