"""Rebuilds sgemm's SIMT calibration (``sgemm_h200.json`` next to this file) from the measured sweeps in
``bench/results`` (a checkout's; the wheel ships the constants, not the sweeps). Moved from bench/tune_h200.py,
which writes the file (``python -m bench.tune_h200 --sweeps ...``) and now calls these:

* :func:`fit_simt`: weighted least squares on log(predicted / measured time) over the FIT shapes only (weights
  favour each shape's fastest configurations, where the ranking matters, and every shape counts alike); the
  register-need formula (:func:`fit_registers`) by least squares on the builds no __launch_bounds__ cap held
  back; the per-tile and local corrections (:func:`tile_residuals`). The HELD_OUT shapes are never fitted: they
  are scored afterwards (:func:`score`).
* :func:`reproduce`: (the shipped constants, the constants refitted from the sweeps the file names).

The least squares is scipy's (``scipy.optimize.least_squares``, bounded trust region), imported only here: a
refit is a developer's step, not the tool's.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from smemtile.families.sgemm.tiles import SimtBatch, calibration, shape_features, simt_cap, simt_time
from smemtile.model.fitting import spearman
from smemtile.model.gemm_tiles import TileConfig

ROOT = Path(__file__).resolve().parents[3]  # a checkout: bench/results holds the sweeps

REGISTER_TERMS = ("c0", "acc", "tmtn", "a_items", "b_items", "split")
PARAMS = [
    "f_ghz",
    "alpha",
    "beta",
    "beta_b",
    "gamma",
    "phi",
    "q",
    "r",
    "lat_a_us",
    "lat_b_us",
    "bar_cyc",
    "atom_gbps",
    "squeeze",
    "launch_us",
    "icache_kb",
    "icache_pen",
    "unaligned",
    "e16",
    "e32",
    "e64",
    "unaligned_ragged",
]
X0 = [
    1.8,
    1.0,
    1.0,
    1.0,
    20.0,
    0.5,
    1.0,
    1.0,
    0.5,
    1.0,
    300.0,
    1000.0,
    0.1,
    5.0,
    24.0,
    0.2,
    0.1,
    0.8,
    0.9,
    0.95,
    0.1,
]
LO = [
    1.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    50.0,
    0.0,
    0.0,
    8.0,
    0.0,
    0.0,
    0.3,
    0.3,
    0.3,
    0.0,
]
HI = [
    1.98,
    4.0,
    8.0,
    40.0,
    400.0,
    8.0,
    3.0,
    2.0,
    5.0,
    10.0,
    5000.0,
    1e5,
    5.0,
    50.0,
    64.0,
    2.0,
    1.0,
    1.2,
    1.2,
    1.2,
    1.0,
]


def load_rows(paths: list[Path], other=None) -> list[dict]:
    """Every timed sgemm row of the sweeps; a later file's row replaces an earlier one of the same config and
    shape (a re-measurement), and a later shape marked ``"replaces": true`` (a re-sweep after a kernel change)
    drops every earlier row of that shape. ``other(doc, path)``: the rows of a file of another format (None: not
    one), e.g. bench.run's results (bench/tune_h200.py)."""
    out: dict[tuple, dict] = {}
    for path in paths:
        d = json.loads(Path(path).read_text())
        rows = other(d, str(path)) if other is not None else None
        if rows is not None:
            out.update(((r["shape"], r["label"]), r) for r in rows)
            continue
        for s in d["shapes"].values():
            shape = tuple(s["shape"])
            if s.get("replaces", False):  # a re-sweep after a kernel change: the shape's older rows go
                out = {key: v for key, v in out.items() if key[0] != shape}
            ref = max((r["tflops"] for r in s["rows"] if "reference" in r), default=None)
            for r in s["rows"]:
                if "config" in r and "time_ms" in r:
                    out[(shape, r["config"])] = {
                        "role": s["role"],
                        "shape": shape,
                        "p": r["params"],
                        "b": r["blocks_per_sm"],
                        "t": r["time_ms"] * 1e-3,
                        "threads": r["threads"],
                        "regs": r["registers"],
                        "spill": r["spill_bytes"],
                        "tflops": r["tflops"],
                        "ref": ref,
                        "label": r["config"],
                        "file": str(path),
                    }
    return list(out.values())


def tile_of(p: dict, threads: int):

    return TileConfig(
        p["BM"],
        p["BN"],
        p["BK"],
        threads // 32,
        p["STAGES"],
        p.get("GROUP_M", 8),
        p["TM"],
        p["TN"],
        p["MIN_BLOCKS"],
        split_k=p.get("SPLIT_K", 1),
    )


def consts_of(x, registers: dict) -> dict:
    """The constants of a parameter vector; the REPACK copies' rate and launch are their own fit (the file's
    ``repack`` section, bench/bench_repack.py), carried over."""
    q = dict(zip(PARAMS, map(float, x), strict=True))
    q["class_eff"] = {"16": q.pop("e16"), "32": q.pop("e32"), "64": q.pop("e64"), "128": 1.0}
    q["registers"] = registers
    shipped = calibration()["constants"]
    q.update({k: shipped[k] for k in ("repack_gbps", "repack_launch_us")})
    return q


def repacked(p: dict) -> bool | None:
    """Whether a measured row repacked: rows measured before REPACK existed did not (their params lack it)."""
    return {0: None, 1: True, 2: False}[p.get("REPACK", 2)]


SMS = 132  # the H200's SMs: every sweep was measured on it


def predict(r: dict, q: dict) -> float:
    m, n, k = r["shape"]
    c = tile_of(r["p"], r["threads"])
    return simt_time(m, n, k, c, r["threads"], r["b"], SMS, consts=q, repack=repacked(r["p"]))["time"]


def batch_of(rows: list[dict]) -> SimtBatch:
    """The measured rows as one :class:`SimtBatch`: ``batch.times(q)[i] == predict(rows[i], q)``, bit for bit."""
    return SimtBatch(
        ((*r["shape"], tile_of(r["p"], r["threads"]), r["threads"], r["b"], repacked(r["p"])) for r in rows),
        SMS,
    )


def fit_registers(rows: list[dict]) -> dict:
    """ptxas' registers ~ c0 + acc*TM*TN + tmtn*(TM+TN) + a_items*A float4s + b_items*B float4s + split, over
    the builds whose count stayed under their __launch_bounds__ cap."""

    seen = {}
    for r in rows:
        p, t = r["p"], r["threads"]
        if r["regs"] < simt_cap(t, p["MIN_BLOCKS"]) - 4 and r["regs"] < 250:
            a, b = p["BM"] * p["BK"] / 4 / t, p["BK"] * p["BN"] / 4 / t
            seen[r["label"]] = (
                [1, p["TM"] * p["TN"], p["TM"] + p["TN"], a, b, float(p.get("SPLIT_K", 1) > 1)],
                r["regs"],
            )
    x = np.array([v[0] for v in seen.values()])
    y = np.array([v[1] for v in seen.values()], dtype=float)
    c, *_ = np.linalg.lstsq(x, y, rcond=None)
    err = np.abs(x @ c - y)
    return {
        **dict(zip(REGISTER_TERMS, map(float, c), strict=True)),
        "builds": len(y),
        "mean_abs_error": float(err.mean()),
    }


def fit_simt(rows: list[dict]) -> tuple[dict, dict]:
    from scipy.optimize import least_squares

    fit = [r for r in rows if r["role"] == "fit"]
    registers = fit_registers(rows)
    best, count = {}, {}
    for r in fit:
        best[r["shape"]] = max(best.get(r["shape"], 0.0), r["tflops"])
        count[r["shape"]] = count.get(r["shape"], 0) + 1
    w = np.sqrt([(r["tflops"] / best[r["shape"]]) ** 4 / math.sqrt(count[r["shape"]]) for r in fit])

    batch, t = batch_of(fit), np.array([r["t"] for r in fit])

    def resid(x):  # the same residuals as log(predict(r, q) / r["t"]) row by row, at numpy's speed
        q = consts_of(x, registers)
        return w * np.array(list(map(math.log, (batch.times(q) / t).tolist())))

    res = least_squares(resid, X0, bounds=(LO, HI))
    q = consts_of(res.x, registers)
    q["tile_bias"], shapes_bias = tile_residuals(rows, q)
    q["local_bias"] = {**LOCAL, "shapes": shapes_bias}
    q["unmeasured_penalty"] = 0.0
    e = [abs(math.log(predict(r, q) / r["t"])) for r in fit]
    q["unmeasured_penalty"] = round(float(np.percentile(e, 90)), 4)  # fit-set p90 error (never the held-out)
    return q, {"cost": float(res.cost), "n": len(fit), "shapes": len(best)}


def score(rows: list[dict], q: dict) -> dict:
    """Error and ranking of the model on measured rows, per shape (the model ranks the measured configs)."""

    out = {"shapes": {}}
    errs = []
    for shape in sorted({r["shape"] for r in rows}):
        sr = [r for r in rows if r["shape"] == shape]
        pred = [1 / predict(r, q) for r in sr]
        meas = [1 / r["t"] for r in sr]
        e = [abs(math.log(p_ / m_)) for p_, m_ in zip(pred, meas, strict=True)]
        errs += e
        i = int(np.argmax(pred))
        out["shapes"]["x".join(map(str, shape))] = {
            "n": len(sr),
            "spearman": spearman(pred, meas),
            "median_error": float(np.median(e)),
            "model_top1_of_measured": sr[i]["label"],
            "its_gap_to_best": max(meas) / meas[i] - 1,
            "best_measured": max(sr, key=lambda r: r["tflops"])["label"],
            "best_tflops": max(r["tflops"] for r in sr),
            "reference_tflops": sr[0]["ref"],
        }
    out["median"] = float(np.median(errs)) if errs else None
    out["p90"] = float(np.percentile(errs, 90)) if errs else None
    out["n"] = len(errs)
    out["shapes_n"] = len(out["shapes"])
    return out


def error_summary(sc: dict) -> dict:
    """The calibration file's error line of a ``score``: median, p90, configurations and shapes."""
    return {k: sc[k] for k in ("median", "p90", "n")} | {"shapes": sc["shapes_n"]}


def tile_key(p: dict, stages: bool = False) -> str:
    return f"{p['BM']}x{p['BN']}x{p['BK']} {p['TM']}x{p['TN']}" + (f" s{p['STAGES']}" if stages else "")


def measured_tiles(rows: list[dict]) -> dict:
    """Per tile (BMxBNxBK TMxTN, and with its stage count): the geometric-mean speed relative to each fitting
    shape's best measured configuration (the tie-break of ``smemtile tiles``; fitting shapes only)."""
    fit = [r for r in rows if r["role"] == "fit"]
    best: dict[tuple, float] = {}
    for r in fit:
        best[r["shape"]] = max(best.get(r["shape"], 0.0), r["tflops"])
    acc: dict[str, list[float]] = {}
    for r in fit:
        for key in (tile_key(r["p"]), tile_key(r["p"], True)):
            acc.setdefault(key, []).append(math.log(r["tflops"] / best[r["shape"]]))
    return {k: round(math.exp(sum(v) / len(v)), 4) for k, v in sorted(acc.items())}


# The local correction's width in log2 units of M, N, K (sigma), the weight of the tile's global mean residual
# against the nearby shapes' (prior), and how far an unaligned shape sits from an aligned one: chosen by
# leave-one-fitting-shape-out (``--loso``), never on the held-out shapes.
LOCAL = {"sigma": 1.0, "prior": 0.3, "unaligned_distance": 2.0}


def tile_residuals(rows: list[dict], q: dict) -> tuple[dict, list[dict]]:
    """log(predicted / measured) of every fitting row under the fitted model without corrections, once, summed up
    two ways: per tile (BMxBNxBK TMxTN, split-K rows left out) over all fitting shapes, the ``tile_bias``
    ``simt_time`` divides out (tiles never measured get none, and rank with the penalty); and per fitting shape,
    its features and the mean of each tile ("tile sk|1"), which ``tile_correction`` weighs by the distance to the
    problem."""

    q = {k: v for k, v in q.items() if k not in ("tile_bias", "local_bias")}
    tiles: dict[str, list[float]] = {}
    per: dict[tuple, dict[str, list[float]]] = {}
    for r in rows:
        if r["role"] != "fit":
            continue
        e = math.log(predict(r, q) / r["t"])
        split = r["p"].get("SPLIT_K", 1) > 1
        if not split:
            tiles.setdefault(tile_key(r["p"]), []).append(e)
        per.setdefault(r["shape"], {}).setdefault(f"{tile_key(r['p'])} {'sk' if split else '1'}", []).append(
            e
        )
    bias = {k: round(sum(v) / len(v), 4) for k, v in sorted(tiles.items())}
    local = [
        {
            "shape": list(s),
            "x": list(shape_features(*s)),
            "bias": {k: round(sum(v) / len(v), 4) for k, v in sorted(d.items())},
        }
        for s, d in sorted(per.items())
    ]
    return bias, local


def loso(rows: list[dict], grid: list[dict]) -> dict:
    """Leave one fitting shape out: fit on the others, rank the left-out shape's measured configurations; per
    setting of the local correction (``grid``) the #1's gap to the best, Spearman, and the count within 5 %."""
    fit = [r for r in rows if r["role"] == "fit"]
    shapes = sorted({r["shape"] for r in fit})
    out: dict[str, dict] = {}
    for s in shapes:
        train = [r for r in fit if r["shape"] != s]
        test = [r for r in fit if r["shape"] == s]
        q, _ = fit_simt(train)
        for g in grid:
            name = json.dumps(g, sort_keys=True)
            qq = (
                {**q, "local_bias": {**g, "shapes": q["local_bias"]["shapes"]}}
                if g
                else {k: v for k, v in q.items() if k != "local_bias"}
            )
            sc = score(test, qq)["shapes"]["x".join(map(str, s))]
            out.setdefault(name, {})["x".join(map(str, s))] = (
                round(sc["its_gap_to_best"], 4),
                round(sc["spearman"], 3),
            )
    summary = {}
    for name, per in out.items():
        gaps = [v[0] for v in per.values()]
        summary[name] = {
            "within_5": sum(g <= 0.05 for g in gaps),
            "within_10": sum(g <= 0.10 for g in gaps),
            "mean_gap": round(float(np.mean(gaps)), 4),
            "max_gap": max(gaps),
            "min_spearman": min(v[1] for v in per.values()),
            "per_shape": per,
        }
    return summary


def reproduce(root: Path | None = None) -> tuple[dict, dict]:
    """(the shipped fitted constants, the same constants refitted from the sweeps ``sgemm_h200.json`` names,
    read under ``root``, a checkout): the PARAMS of :func:`fit_simt` and the register formula."""
    root = ROOT if root is None else Path(root)
    d = calibration()
    rows = load_rows([root / p for p in d["sweeps"]])
    q, _ = fit_simt(rows)
    keys = [*(k for k in PARAMS if not k.startswith("e")), "class_eff"]
    stored = {k: d["constants"][k] for k in keys}
    stored["registers"] = {k: d["constants"]["registers"][k] for k in REGISTER_TERMS}
    refit = {k: q[k] for k in keys}
    refit["registers"] = {k: q["registers"][k] for k in REGISTER_TERMS}
    return stored, refit
