"""Rebuilds the Triton calibration (``model/data/triton_h200.json``) from the measured Triton sweep in
``bench/results`` (a checkout's): log(measured / roofline-model TFLOP/s) = tile + warps(tile area) + BK bytes x
stages, least squares (:func:`fit_triton`); :func:`reproduce` returns (the shipped factors, the refitted ones).
Moved from bench/tune_h200.py, which writes the file and now calls :func:`fit_triton`. Pure numpy."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from smemtile.model import gemm_model as gm
from smemtile.model.gemm_tiles import TileConfig, make_problem

ROOT = Path(__file__).resolve().parents[2]  # a checkout: bench/results holds the sweep


def fit_triton(path: Path) -> dict:
    """log(measured / roofline-model TFLOP/s) = tile + warps(tile area) + BK-bytes x stages, least squares."""
    d = json.loads(Path(path).read_text())
    was, gm.USE_MEASURED = gm.USE_MEASURED, False  # the roofline model alone: the factors are what it misses
    try:
        obs = _observations(d)
    finally:
        gm.USE_MEASURED = was
    return _fit(obs)


def _observations(d: dict) -> list[tuple]:
    obs = []
    for s in d["shapes"].values():
        m, n, k = s["shape"]
        p = make_problem(m, n, k, s["dtype"], "sm_90")
        for r in s["rows"]:
            if "tflops" not in r or "config" not in r:
                continue
            bm, bn, bk, st, w = r["config"]
            c = TileConfig(bm, bn, bk, w, st, 8)
            res = gm._mma_resources(p, c)
            if not isinstance(res, dict):
                continue
            res.pop("cfg")
            ((b, lim, occ, _),) = gm._blocks(p, [(c, res)])
            if b <= 0:
                continue
            base = gm._score(p, c, res, b, lim, occ).tflops
            obs.append(
                (
                    f"{bm}x{bn}",
                    f"{min(bm * bn, 32768)}:{w}",
                    f"{bk * p.elem}:{st}",
                    math.log(r["tflops"] / base),
                    f"{bm}x{bn}:{w}",
                    f"{bm}x{bn}x{bk * p.elem}B:{st}:{w}",
                )
            )
    return obs


def _fit(obs: list[tuple]) -> dict:
    keys = {
        "tile": sorted({o[0] for o in obs}),
        "warps": sorted({o[1] for o in obs}),
        "bkst": sorted({o[2] for o in obs}),
    }
    cols = (
        [("tile", k) for k in keys["tile"]]
        + [("warps", k) for k in keys["warps"][1:]]
        + [("bkst", k) for k in keys["bkst"][1:]]
    )
    x = np.array(
        [
            [
                1.0
                if (g == "tile" and o[0] == k) or (g == "warps" and o[1] == k) or (g == "bkst" and o[2] == k)
                else 0.0
                for g, k in cols
            ]
            for o in obs
        ]
    )
    y = np.array([o[3] for o in obs])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ coef
    f = {"tile": {}, "warps": {keys["warps"][0]: 0.0}, "bkst": {keys["bkst"][0]: 0.0}}
    for (g, k), v in zip(cols, coef, strict=True):
        f[g][k] = float(v)
    # log factors (the tile's include the intercept): measured = roofline x exp(tile + warps + stages_bk)
    exact: dict[str, list[float]] = {}
    for o in obs:
        exact.setdefault(o[5], []).append(o[3])
    out = {
        "tile": f["tile"],
        "warps": f["warps"],
        "stages_bk": f["bkst"],
        "exact": {k: sum(v) / len(v) for k, v in sorted(exact.items())},
    }
    return {
        "factors": out,
        "measured_pairs": sorted({o[4] for o in obs}),
        "observations": len(obs),
        "rms_log_residual": float(np.sqrt(np.mean(resid**2))),
    }


def reproduce(root: Path | None = None) -> tuple[dict, dict]:
    """(the shipped fit, the fit recomputed from the sweep ``triton_h200.json`` names, read under ``root``):
    factors, measured pairs, observations, rms log residual."""
    root = ROOT if root is None else Path(root)
    d = gm.load_calibration("triton_h200.json")
    refit = fit_triton(root / d["sweeps"][0])
    return {k: d[k] for k in refit}, refit
