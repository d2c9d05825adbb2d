"""Fitting helpers the tile models share: rank correlation, least squares on relative error (with sign
constraints), a small box-constrained Levenberg-Marquardt, and a measured bandwidth interpolated in log(bytes).

Pure numpy, deterministic, no family named: each family's ``fit.py`` builds its design matrices and calls these.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from itertools import combinations

import numpy as np

__all__ = [
    "interp_log_bandwidth",
    "levenberg_marquardt",
    "lsq_rel_nonneg",
    "nnls_rel",
    "spearman",
]


def spearman(a, b) -> float:
    """Spearman rank correlation of two equal-length sequences (average ranks for ties); NaN when either side
    has fewer than two values or no spread."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(x) < 2:
        return float("nan")

    def ranks(v: np.ndarray) -> np.ndarray:
        order = v.argsort(kind="stable")
        r = np.empty(len(v))
        r[order] = np.arange(len(v), dtype=float)
        for val in np.unique(v):  # average ties
            m = v == val
            r[m] = r[m].mean()
        return r

    rx, ry = ranks(x), ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def nnls_rel(a: np.ndarray, free: Sequence[int] = ()) -> np.ndarray:
    """Least squares of ``a @ x = 1`` (rows already divided by their targets: relative error) with every
    coefficient >= 0 except the columns in ``free``: the most negative one is dropped (held at 0) and the rest
    refitted until none is negative."""
    keep = list(range(a.shape[1]))
    b = np.ones(a.shape[0])
    while True:
        sol, *_ = np.linalg.lstsq(a[:, keep], b, rcond=None)
        neg = [(v, c) for v, c in zip(sol, keep, strict=True) if v < 0 and c not in free]
        if not neg:
            x = np.zeros(a.shape[1])
            x[keep] = sol
            return x
        keep.remove(min(neg)[1])


def lsq_rel_nonneg(
    xs: Sequence[float], zs: Sequence[Sequence[float]], ts: Sequence[float]
) -> tuple[float, float, list[float | None], list[float]]:
    """(t0, inv, [mu per z column], relative errors) minimising sum(((t0 + inv (x + sum mu_k z_k)) - t) / t)^2
    with t0 >= 0, inv > 0 and every mu_k >= 0; a mu_k is None (not fitted) when no point has z_k > 0. Where the
    free solution breaks a sign, the subsets with fewer free terms are tried: t0 dropped first, then the mus in
    order."""
    a = np.array([[1.0, x, *z] for x, *z in zip(xs, *zs, strict=True)]) / np.array(ts)[:, None]
    b = np.ones(len(ts))
    fitted = [2 + k for k, z in enumerate(zs) if any(v > 0 for v in z)]
    optional = [0, *fitted]
    t0, inv, w = 0.0, 0.0, {}
    for n in range(len(optional) + 1):
        for drop in combinations(optional, n):
            keep = [1, *(c for c in optional if c not in drop)]
            keep.sort()
            sol, *_ = np.linalg.lstsq(a[:, keep], b, rcond=None)
            full = dict(zip(keep, sol, strict=True))
            t0, inv = full.get(0, 0.0), full.get(1, 0.0)
            w = {c: full.get(c, 0.0) for c in fitted}
            if t0 >= 0 and inv > 0 and all(v >= 0 for v in w.values()):
                break
        else:
            continue
        break
    errs = [
        abs(t0 + inv * x + sum(w.get(2 + k, 0.0) * z for k, z in enumerate(zk)) - t) / t
        for x, *zk, t in zip(xs, *zs, ts, strict=True)
    ]
    mus = [float(w[2 + k] / inv) if 2 + k in w else None for k in range(len(zs))]
    return float(t0), float(inv), mus, errs


def levenberg_marquardt(
    resid: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    iters: int = 200,
) -> tuple[np.ndarray, float]:
    """Levenberg-Marquardt on a box (each step clipped to [lo, hi]), forward-difference Jacobian; returns (x,
    sum of squared residuals). Deterministic; small problems only (a few parameters)."""
    x = np.clip(np.asarray(x0, float), lo, hi)
    r = resid(x)
    cost, lam = float(r @ r), 1e-3
    for _ in range(iters):
        h = 1e-7 * np.maximum(1.0, np.abs(x))
        jac = np.stack([(resid(x + h[i] * np.eye(len(x))[i]) - r) / h[i] for i in range(len(x))], axis=1)
        g, a = jac.T @ r, jac.T @ jac
        improved = False
        while lam < 1e10:
            step = np.linalg.solve(a + lam * np.diag(np.maximum(np.diag(a), 1e-12)), -g)
            xn = np.clip(x + step, lo, hi)
            rn = resid(xn)
            cn = float(rn @ rn)
            if np.isfinite(cn) and cn < cost:
                done = cost - cn < 1e-12 * max(cost, 1e-30)
                x, r, cost, lam, improved = xn, rn, cn, max(lam / 3, 1e-12), True
                break
            lam *= 4
        if not improved or done:
            break
    return x, cost


def interp_log_bandwidth(nbytes: float, points: Sequence[Sequence[float]]) -> float:
    """The time (the points' unit) to move ``nbytes`` at a measured bandwidth: ``points`` are ``[bytes, time]``
    measurements, their bandwidth interpolated linearly in log(bytes) and held constant outside them."""
    pts = sorted((float(b), float(t)) for b, t in points)
    bw = [b / t for b, t in pts]
    x = math.log(nbytes)
    if x <= math.log(pts[0][0]):
        return nbytes / bw[0]
    for (b0, _), (b1, _), g0, g1 in zip(pts, pts[1:], bw, bw[1:], strict=False):  # consecutive pairs
        if x <= math.log(b1):
            f = (x - math.log(b0)) / (math.log(b1) - math.log(b0)) if b1 > b0 else 0.0
            return nbytes / (g0 + f * (g1 - g0))
    return nbytes / bw[-1]
