"""The transpose tile model's fitting: rebuilds the constants of ``transpose_h200.json`` from measured rows.

Rows are ``{"label", "elem", "rows", "cols", "time_us", "params"}`` (the medians of the H200 sweeps in
``bench/results``, see :func:`rows_from_results`). :func:`fit_features` is the shipped model (the feature
coefficients per element size, then each measured candidate's constants shrunk toward them); :func:`fit` is the
per-candidate form it replaced (kept for the form comparisons in bench/NOTES.md). :func:`reproduce` refits the
shipped file's fit rows and returns (stored, refit). Pure numpy; the helpers are :mod:`smemtile.model.fitting`.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np

from smemtile.families.transpose.tiles import (
    BW_FEATURES,
    DEFAULTS,
    ELEM,
    OUT_FEATURES,
    PARAMS,
    SIGNED,
    T0_FEATURES,
    col_misaligned_us,
    edge_loop,
    features,
    label,
    load_calibration,
    misaligned_sides,
    prior,
    space,
    split_bytes,
)
from smemtile.model.fitting import lsq_rel_nonneg, nnls_rel

# the prior's spread per constant (relative to the prior; the output weight relative to inv), against the fit
# rows' noise (NOISE): how far a measured candidate's constants may move from the feature model's
NOISE = 0.005  # a fit row's own error: the median of 15 rounds with a 1-3 % spread (p90 - p10)


KAPPAS = tuple(k / 20 for k in range(5, 21))  # 0.25 .. 1
PHIS = tuple(k / 20 for k in range(0, 41))  # 0 .. 2
MU_INS = tuple(k / 20 for k in range(0, 31))  # 0 .. 1.5


MU_IN_FORMS = (
    "per_candidate",
    "shared",
)  # the input side's weight: one per candidate, or one per element size


def fit(rows: list[dict], mu_in_form: str = "per_candidate") -> dict:
    """Fit the constants from measured rows ``{"label", "elem", "rows", "cols", "time_us", "params"}``: per element
    size KAPPA and PHI_LINE on a grid; per candidate (t0, bw, MU_OUT) by least squares on relative error (t0,
    MU_OUT >= 0; MU_OUT only where the candidate has a point whose output pitch is sector-misaligned, else the
    median of its element size). The input side (``mu_in_form``): ``"per_candidate"`` fits MU_IN with t0, bw and
    MU_OUT (>= 0, where the candidate has a point whose input pitch is sector-misaligned, else the median);
    ``"shared"`` one MU_IN per element size on the grid. Returns ``{"model": {}, "constants": {elem: {"model":
    {"kappa", "phi_line", "mu_in", "mu_in_form"}, "candidates": {label: {"t0_us", "bw_gbps", "mu_out", ["mu_in"],
    "fit_points", "fit_max_error"}}, "min_fit_bytes", "mu_out_median", ["mu_in_median"]}}}``."""
    assert mu_in_form in MU_IN_FORMS, mu_in_form
    per_cand = mu_in_form == "per_candidate"
    out: dict = {"model": {}, "constants": {}}
    for elem in sorted({r["elem"] for r in rows}):
        groups: dict[str, list[dict]] = {}
        for r in rows:
            if r["elem"] == elem:
                groups.setdefault(r["label"], []).append(r)
        parts = {
            lab: [
                (
                    *split_bytes(r["params"], r["rows"], r["cols"], elem),
                    *misaligned_sides(r["params"], r["rows"], r["cols"], elem),
                )
                for r in pts
            ]
            for lab, pts in groups.items()
        }
        any_in = any(si > 0 for pts in parts.values() for *_, si, _ in pts)
        best = None
        for kappa in KAPPAS:
            for phi_line in PHIS:
                for mu_in in MU_INS if any_in and not per_cand else (0.0,):
                    err, cons = 0.0, {}
                    for lab in groups:
                        xs = [
                            (v + s / kappa + phi_line * ml + mu_in * si) / 1e3
                            for v, s, ml, si, _ in parts[lab]
                        ]
                        zs = [[so / 1e3 for *_, so in parts[lab]]]
                        if per_cand:
                            zs.append([si / 1e3 for *_, si, _ in parts[lab]])
                        sol = lsq_rel_nonneg(xs, zs, [r["time_us"] for r in groups[lab]])
                        err += sum(e * e for e in sol[3])
                        cons[lab] = sol
                    if best is None or err < best[0] - 1e-15:
                        best = (err, kappa, phi_line, mu_in, cons)
        assert best is not None
        _, kappa, phi_line, mu_in, cons = best
        per = {
            "model": {"kappa": kappa, "phi_line": phi_line, "mu_in": mu_in, "mu_in_form": mu_in_form},
            "candidates": {},
        }
        for lab, (t0, inv, mus, errs) in sorted(cons.items()):
            c = {"t0_us": t0, "bw_gbps": 1.0 / inv, "mu_out": mus[0]}
            if per_cand:
                c["mu_in"] = mus[1]
            per["candidates"][lab] = {**c, "fit_points": len(errs), "fit_max_error": max(errs)}
        per["min_fit_bytes"] = min(2.0 * r["rows"] * r["cols"] * elem for pts in groups.values() for r in pts)
        for key in ("mu_out", "mu_in") if per_cand else ("mu_out",):
            mus = sorted(c[key] for c in per["candidates"].values() if c[key] is not None)
            per[f"{key}_median"] = mus[len(mus) // 2] if mus else 0.0
            for c in per[
                "candidates"
            ].values():  # candidates without a sector-misaligned fit point: the median
                if c[key] is None:
                    c[key] = per[f"{key}_median"]
        out["constants"][str(elem)] = per
    return out


def copy_fit(points: list[tuple[float, float]]) -> dict:
    """``{"points": [[bytes, microseconds], ...]}`` of the device copy (the median where a size repeats)."""
    by: dict[float, list[float]] = {}
    for b, t in points:
        by.setdefault(float(b), []).append(t)
    return {"points": [[b, sorted(ts)[len(ts) // 2]] for b, ts in sorted(by.items())]}


def _terms(r: dict, kappa: float, phi: float, mu_in: float) -> tuple[float, float, float, float, float]:
    """(X0, s_out, edge, s_in, line) of a row in KB: the bytes every candidate pays at its bandwidth, the output
    side's sector-misaligned bytes (weighted per candidate), the edge tiles' bytes x ``edge_loop``, the input
    side's sector-misaligned bytes and the line-misaligned run bytes (the last two weighted again in column
    order: short reads)."""
    e = r["elem"]
    vec, scalar = split_bytes(r["params"], r["rows"], r["cols"], e)
    line, s_in, s_out = misaligned_sides(r["params"], r["rows"], r["cols"], e)
    x0 = (vec + scalar / kappa + phi * line + mu_in * s_in) / 1e3
    return x0, s_out / 1e3, scalar * edge_loop(r["params"]) / 1e3, s_in / 1e3, line / 1e3


def _design(
    f: dict, x0: float, s_out: float, edge: float = 0.0, s_in: float = 0.0, line: float = 0.0
) -> list[float]:
    return [
        1.0,
        *(f[k] for k in T0_FEATURES),
        x0,
        *(x0 * f[k] for k in BW_FEATURES),
        s_out,
        *(s_out * f[k] for k in OUT_FEATURES),
        edge,
        f["col"] * s_in,
        f["col"] * line,
    ]


COEF = (
    "t0",
    *(f"t0*{k}" for k in T0_FEATURES),
    "inv",
    *(f"inv*{k}" for k in BW_FEATURES),
    "out",
    *(f"out*{k}" for k in OUT_FEATURES),
    "edge",
    "in_col",
    "line_col",
)
SIGNED_COLUMNS = (*(COEF.index(f"inv*{k}") for k in SIGNED), COEF.index("out*col"))


def fit_features(rows: list[dict], registers: dict, *, shared: dict | None = None) -> dict:
    """The feature model per element size from measured rows (``{"label", "elem", "rows", "cols", "time_us",
    "params"}``) and ptxas' registers per label (``{elem: {label: registers}}``): KAPPA, PHI_LINE and MU_IN on a
    grid (``shared``: ``{elem: (kappa, phi, mu_in)}`` fixes them), the coefficients of COEF (all >= 0) by least
    squares on relative time error over every row; then each measured candidate's (t0, inv, w) pulled from the
    prior by its own rows (``shrink``). Returns ``{elem: {"model", "coef", "candidates", "min_fit_bytes"}}``."""
    out: dict = {}
    for elem in sorted({r["elem"] for r in rows}):
        mine = [r for r in rows if r["elem"] == elem]
        regs = registers.get(str(elem), {})
        feats = {r["label"]: features(r["params"], elem, regs.get(r["label"])) for r in mine}
        t = np.array([r["time_us"] for r in mine])
        any_in = any(misaligned_sides(r["params"], r["rows"], r["cols"], elem)[1] > 0 for r in mine)
        grid = (
            [shared[elem]]
            if shared and elem in shared
            else [
                (k, ph, mu)
                for k in KAPPAS[::1]
                for ph in PHIS[::2]
                for mu in (MU_INS[::2] if any_in else (0.0,))
            ]
        )
        best = None
        for kappa, phi, mu_in in grid:
            a = (
                np.array([_design(feats[r["label"]], *_terms(r, kappa, phi, mu_in)) for r in mine])
                / t[:, None]
            )
            x = nnls_rel(a, free=SIGNED_COLUMNS)
            err = float(np.sum((a @ x - 1) ** 2))
            if best is None or err < best[0] - 1e-15:
                best = (err, kappa, phi, mu_in, x)
        assert best is not None
        _, kappa, phi, mu_in, x = best
        coef = dict(zip(COEF, (float(v) for v in x), strict=True))
        per = {
            "model": {"kappa": kappa, "phi_line": phi, "mu_in": mu_in, "mu_in_form": "shared"},
            "coef": coef,
            "candidates": {},
        }
        groups: dict[str, list[dict]] = {}
        for r in mine:
            groups.setdefault(r["label"], []).append(r)
        for lab, pts in sorted(groups.items()):
            per["candidates"][lab] = shrink(pts, feats[lab], coef, per["model"])
        per["min_fit_bytes"] = min(2.0 * r["rows"] * r["cols"] * elem for r in mine)
        out[str(elem)] = per
    return out


def shrink(pts: list[dict], f: dict, coef: dict, model: dict) -> dict:
    """A measured candidate's (t0, bw, phi_line, mu_out): least squares of its own rows' relative time errors
    together with the feature model's prior, each constant's deviation from the prior weighted by NOISE / its
    spread (t0: a tenth of the prior plus 0.1 us: on two or three shapes a free t0 trades off against bw and
    extrapolates to other sizes wildly, 1.2x a copy at fp16 9216^2; inv: SPREAD_INV of the prior; the line-misaligned bytes' weight:
    0.2 x inv around PHI_LINE x inv; the output side's: 0.3 x inv, the spread of mu_out): a candidate timed on
    many shapes keeps what it measured, one timed on two moves part of the way."""
    t0p, invp, wp = prior(f, coef)
    phi = model["phi_line"]
    sig = np.array([0.1 * t0p + 0.1, SPREAD_INV * invp, 0.2 * invp, 0.3 * invp])
    # a candidate timed only on shapes with misaligned runs cannot tell its bandwidth from its misalignment weights
    # (both scale with the bytes): it keeps the feature model's t0 and bw and fits the weights alone (session 6:
    # fp16 T64xY128x1 P4 4tiles cs, timed at 0.33-0.35x on two misaligned shapes, extrapolated to 1.07x at 8192^2)
    prior_bw = all(any(misaligned_sides(r["params"], r["rows"], r["cols"], r["elem"])) for r in pts)
    if prior_bw:
        sig[:2] *= 1e-3
    rows_a, rows_b = [], []
    for r in pts:
        e = r["elem"]
        vec, scalar = split_bytes(r["params"], r["rows"], r["cols"], e)
        line, s_in, s_out = misaligned_sides(r["params"], r["rows"], r["cols"], e)
        x0 = (vec + scalar / model["kappa"] + model["mu_in"] * s_in) / 1e3
        rows_a.append(np.array([1.0, x0, line / 1e3, s_out / 1e3]) / r["time_us"])
        fixed = coef.get("edge", 0.0) * scalar * edge_loop(r["params"]) / 1e3
        fixed += col_misaligned_us(r["params"], line, s_in, coef)
        rows_b.append(1.0 - fixed / r["time_us"])
    w = NOISE / sig
    a = np.vstack([np.array(rows_a), np.diag(w)])
    b = np.concatenate([np.array(rows_b), w * np.array([t0p, invp, phi * invp, wp])])
    sol, *_ = np.linalg.lstsq(a, b, rcond=None)
    t0, inv = max(float(sol[0]), 0.0), float(sol[1])
    vl, wo = max(float(sol[2]), 0.0), max(float(sol[3]), 0.0)
    errs = [abs(float(np.array([t0, inv, vl, wo]) @ ra) - rb) for ra, rb in zip(rows_a, rows_b, strict=True)]
    return {
        "t0_us": t0,
        "bw_gbps": 1.0 / inv,
        "phi_line": vl / inv,
        "mu_out": wo / inv,
        "fit_points": len(pts),
        "fit_max_error": max(errs),
        "prior_ratio": invp / inv,
        "bw_measured": not prior_bw,
    }


# the feature model's spread of inv over candidates (its candidate-left-out errors: median 2-5 %, tails 10 %)


# the feature model's spread of inv over candidates (its candidate-left-out errors: median 2-5 %, tails 10 %)
SPREAD_INV = 0.05


# ---- the measured rows and the refit ------------------------------------------------------------------------


def results_dir() -> Path:
    """The repository's ``bench/results`` (a source checkout; the wheel does not ship the measurements)."""
    return Path(__file__).resolve().parents[3] / "bench" / "results"


def rows_from_results(results: list[Path]) -> tuple[list[dict], list[tuple[float, float]], list[dict]]:
    """(rows, copy points, docs) of the transpose cases of ``results`` (in order): each (shape, candidate) the
    median of its ratios to the copy of the same run, its time the first run's copy time of that shape / that
    ratio (so one run's clock or DRAM drift does not move the candidates it timed against the others); a later
    run of a shape is anchored to the earlier ones by the candidates both timed (the median of earlier ratio /
    this ratio, when at least two are shared)."""
    docs = [json.loads(r.read_text()) for r in results]
    labels = {dt: {label(c) for c in space(dt)} for dt in ELEM}
    ratios: dict[tuple, list[float]] = {}
    meta: dict[tuple, dict] = {}
    copy_us: dict[str, float] = {}
    shape_of: dict[str, dict] = {}
    for d in docs:
        for case in d["cases"]:
            if case["family"] != "transpose" or case.get("role") not in ("fit", "held_out"):
                continue
            copy_us.setdefault(case["case"], case["copy"]["median_ms"] * 1e3)
            shape_of.setdefault(case["case"], case)
            cands = labels[case["problem"]["dtype"]]
            mine = {r["label"]: r for r in case["configs"] if r["label"] in cands and "ratio" in r}
            common = [
                statistics.median(ratios[(case["case"], lab)]) / r["ratio"]
                for lab, r in mine.items()
                if (case["case"], lab) in ratios
            ]
            scale = statistics.median(common) if len(common) >= 2 else 1.0
            for lab, r in mine.items():
                ratios.setdefault((case["case"], lab), []).append(r["ratio"] * scale)
                meta[(case["case"], lab)] = r
    rows = []
    for (name, lab), rs in sorted(ratios.items()):
        case, r = shape_of[name], meta[(name, lab)]
        ratio = statistics.median(rs)
        rows.append(
            {
                "label": lab,
                "elem": ELEM[case["problem"]["dtype"]],
                "rows": case["problem"]["rows"],
                "cols": case["problem"]["cols"],
                "time_us": copy_us[name] / ratio,
                "ratio": ratio,
                "runs": len(rs),
                "params": {k: r["params"].get(k, DEFAULTS[k]) for k in PARAMS},
                "case": name,
            }
        )
    copies = [(float(case["bytes"]), copy_us[name]) for name, case in shape_of.items()]
    return rows, copies, docs


def reproduce(results: Path | None = None, *, full: bool = False) -> tuple[dict, dict]:
    """(stored, refit): the data file's fitted constants (per element size: the shared constants, the feature
    coefficients, each measured candidate's constants; the copy's points) and the same fit run again on the
    results files it names (``run``), without the configurations ptxas spills for. The shared constants
    (KAPPA, PHI_LINE, MU_IN) are searched on their grid with ``full`` (minutes), else held at the stored ones."""
    cal = load_calibration()
    where = results or results_dir()
    files = [where / Path(x.strip()).name for x in cal["run"].split(",")]
    rows, copies, _ = rows_from_results(files)
    table = cal["registers"]
    rows = [r for r in rows if not table[str(r["elem"])].get(r["label"], [0, 1])[1]]
    regs = {e: {lab: v[0] for lab, v in t.items()} for e, t in table.items()}
    shared = None
    if not full:
        shared = {
            int(e): tuple(per["model"][k] for k in ("kappa", "phi_line", "mu_in"))
            for e, per in cal["constants"].items()
        }
    fitted = fit_features(rows, regs, shared=shared)
    keys = ("model", "coef", "candidates", "min_fit_bytes")
    stored = {"copy": cal["copy"], **{e: {k: per[k] for k in keys} for e, per in cal["constants"].items()}}
    refit = {"copy": copy_fit(copies), **{e: {k: per[k] for k in keys} for e, per in fitted.items()}}
    return stored, refit
