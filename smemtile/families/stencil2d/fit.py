"""The stencil2d tile model's fitting: the constants of ``stencil_h200.json`` from the H200 measurements.

:func:`fit` minimises the relative time error of :func:`~smemtile.families.stencil2d.tiles.model_time_us` over
measured rows (Levenberg-Marquardt from :mod:`smemtile.model.fitting`, for every WARPS); :data:`FORMS` are the
forms compared by leave-one-radius-out; :func:`measured_rows` reads the rows from ``bench/results``;
:func:`reproduce` refits the shipped form on them and returns (stored, refit). Pure numpy, no CUDA.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from smemtile.families.stencil2d.tiles import geometry, grid_blocks, label, load_calibration, model_time_us
from smemtile.model.fitting import levenberg_marquardt


def fit_inputs(row: dict, sms: int) -> tuple[float, ...]:
    """(copy_us, rounds, wavefronts per SM, warps per SM, global-load warp instructions per SM, blocks per SM) of
    a measured row ``{"params", "R", "ny", "nx", "copy_us", "blocks_per_sm", "wavefronts_block", ...}``: the
    arguments of :func:`model_time_us` after the constants."""
    blocks = grid_blocks(row["params"], row["ny"], row["nx"])
    bps = row["blocks_per_sm"]
    geo = geometry(row["params"], row["R"])
    warps = bps * geo.threads // 32
    loads = blocks * (geo.threads // 32) * geo.fill / sms
    return (
        row["copy_us"],
        blocks / (sms * bps),
        blocks * row["wavefronts_block"] / sms,
        warps,
        loads,
        blocks / sms,
    )


def _predict(x: np.ndarray, c: dict) -> np.ndarray:
    """model_time_us over the columns of ``x`` (rows of fit_inputs)."""
    return model_time_us(x[:, 0], x[:, 1], x[:, 2], x[:, 3], c, x[:, 4], x[:, 5])


# The constants fit() searches, each on a scale where steps are even: L, rate, load and block times in logs (> 0),
# t0 (>= 0) and p (1..16) as they are. FORMS: which of them a form frees (the others absent, i.e. zero).
_FREE = ("t0_us", "L_us", "rate_per_us", "p", "load_us", "block_us")
_LOG = {"L_us", "rate_per_us", "load_us", "block_us"}
FORMS = {
    "session 3 (fill rounds + shared wavefronts)": ("t0_us", "L_us", "rate_per_us", "p"),
    "+ global loads": ("t0_us", "L_us", "rate_per_us", "p", "load_us"),
    "+ global loads + blocks": _FREE,
}
FORM = "+ global loads + blocks"  # the shipped form (chosen by leave-one-radius-out, bench/fit_stencil.py cv)


def fit(
    rows: list[dict], sms: int, warps_range=range(1, 65), *, form: str = FORM, rate_max: float = 1980.0
) -> dict:
    """The constants ``{"t0_us", "L_us", "rate_per_us", "warps_full", "p", "load_us", "block_us"}`` minimising
    the sum of squared relative time errors over ``rows`` (the measurements labelled fit; each with ``time_us``
    and what :func:`fit_inputs` reads): for every WARPS of ``warps_range``, the form's other constants by
    Levenberg-Marquardt from three fixed starts, rate at most ``rate_max`` (one wavefront per clock: the H200's
    1980 MHz)."""
    free = FORMS[form]
    x = np.array([fit_inputs(r, sms) for r in rows], float)
    t = np.array([r["time_us"] for r in rows], float)
    lo = np.array([math.log(1e-6) if k in _LOG else {"t0_us": 0.0, "p": 1.0}[k] for k in free])
    hi = np.array(
        [
            math.log(rate_max)
            if k == "rate_per_us"
            else math.log(1e4)
            if k in _LOG
            else {"t0_us": 100.0, "p": 16.0}[k]
            for k in free
        ]
    )
    starts = (
        {"t0_us": 0.3, "L_us": 0.9, "rate_per_us": 1500.0, "p": 3.0, "load_us": 3e-3, "block_us": 0.05},
        {"t0_us": 1.0, "L_us": 0.3, "rate_per_us": 1000.0, "p": 2.0, "load_us": 1e-3, "block_us": 0.02},
        {"t0_us": 0.0, "L_us": 1.5, "rate_per_us": 1900.0, "p": 6.0, "load_us": 1e-2, "block_us": 0.1},
    )

    def consts(v: np.ndarray, wfull: float) -> dict:
        c = {k: (math.exp(a) if k in _LOG else float(a)) for k, a in zip(free, v, strict=True)}
        return {"warps_full": float(wfull), **c}

    best = None
    for wfull in warps_range:
        for s0 in starts:
            v0 = np.array([math.log(s0[k]) if k in _LOG else s0[k] for k in free])

            def resid(v: np.ndarray, wfull=wfull) -> np.ndarray:
                return _predict(x, consts(v, wfull)) / t - 1

            v, cost = levenberg_marquardt(resid, v0, lo, hi)
            if best is None or cost < best[0] - 1e-15:
                best = (cost, consts(v, wfull))
    assert best is not None
    c = best[1]
    return {
        k: c.get(k, 0.0) for k in ("t0_us", "L_us", "rate_per_us", "warps_full", "p", "load_us", "block_us")
    }


def errors(rows: list[dict], consts: dict, sms: int) -> list[float]:
    """Relative time errors (predicted / measured - 1) of ``rows`` under ``consts``."""
    x = np.array([fit_inputs(r, sms) for r in rows], float)
    t = np.array([r["time_us"] for r in rows], float)
    return [float(e) for e in _predict(x, consts) / t - 1]


RATE_MAX = 1980.0  # one shared-memory wavefront per clock at the H200's 1980 MHz


def results_dir() -> Path:
    """The repository's ``bench/results`` (a source checkout; the wheel does not ship the measurements)."""
    return Path(__file__).resolve().parents[3] / "bench" / "results"


def measured_rows(results: Path | None = None, cal: dict | None = None) -> list[dict]:
    """Every correct stencil measurement of the runs the data file names (its ``run``: files under
    ``bench/results``), with the inputs the model takes; all of them are fit rows (the sample's explicit-layout
    copy of the default configuration left out)."""
    cal = cal if cal is not None else load_calibration()
    table = cal["candidates"]
    where = results or results_dir()
    rows = []
    for name in (x.strip() for x in cal["run"].split(",")):
        path = where / Path(name).name
        run = path.stem.removeprefix("memory_h200_").split("_")[0]  # run1, run3, session4
        d = json.loads(path.read_text())
        for case in d["cases"]:
            if case["family"] != "stencil2d":
                continue
            ny, nx = case["problem"]["ny"], case["problem"]["nx"]
            for x in case["configs"]:
                if x["label"].startswith("sample") or not x.get("correct") or "median_ms" not in x:
                    continue  # the sample is the default configuration with an explicit dense layout
                p = dict(x["params"])
                r = p.pop("R")
                lab = label(p)
                rows.append(
                    {
                        "run": run,
                        "commit": d["commit"],
                        "R": r,
                        "params": p,
                        "label": lab,
                        "ny": ny,
                        "nx": nx,
                        "time_us": x["median_ms"] * 1e3,
                        "copy_us": case["copy"]["median_ms"] * 1e3,
                        "ratio": x["ratio"],
                        "spread": x["spread"],
                        "blocks_per_sm": x["blocks_per_sm"],
                        "wavefronts_block": table[str(r)][lab][2],
                        "set": "fit",
                    }
                )
    return rows


def reproduce(results: Path | None = None, *, full: bool = False) -> tuple[dict, dict]:
    """(stored, refit): the data file's constants and the same form fitted again on the rows it names. The
    WARPS search spans 1..64 with ``full`` (about a minute), else the stored WARPS and its neighbours."""
    cal = load_calibration()
    rows = measured_rows(results, cal)
    w = int(cal["model"]["warps_full"])
    warps = range(1, 65) if full else (w - 1, w, w + 1)
    refit = fit(rows, cal["sms"], warps, form=cal["form"], rate_max=RATE_MAX)
    return dict(cal["model"]), refit
