"""The shared fitting helpers (smemtile/model/fitting.py): each against a case whose answer is known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from smemtile.model.fitting import (
    interp_log_bandwidth,
    levenberg_marquardt,
    lsq_rel_nonneg,
    nnls_rel,
    spearman,
)


def test_spearman_ranks_ties_and_degenerate_inputs():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # average ranks for ties: x ranks (0, 1.5, 1.5, 3), y ranks (0, 1, 2, 3)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(
        float(np.corrcoef([0, 1.5, 1.5, 3], [0, 1, 2, 3])[0, 1])
    )
    assert math.isnan(spearman([1], [2]))
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))


def test_nnls_rel_drops_the_negative_coefficient_unless_free():
    # t = 2 + 3 x exactly; a third column that would want a negative weight
    xs = np.array([1.0, 2.0, 3.0, 4.0])
    t = 2 + 3 * xs
    z = np.array([1.0, -1.0, 1.0, -1.0])
    a = np.column_stack([np.ones(4), xs, z]) / (t - 0.3 * z)[:, None]
    sol = nnls_rel(a)
    assert all(v >= 0 for v in sol)
    assert nnls_rel(a, free=(2,))[2] < 0
    exact = np.column_stack([np.ones(4), xs]) / t[:, None]
    assert nnls_rel(exact) == pytest.approx([2.0, 3.0])


def test_lsq_rel_nonneg_recovers_an_exact_law_and_holds_signs():
    xs, z = [1.0, 2.0, 4.0, 8.0], [0.0, 1.0, 0.0, 2.0]
    ts = [0.5 + 2.0 * (x + 0.25 * zz) for x, zz in zip(xs, z, strict=True)]
    t0, inv, mus, errs = lsq_rel_nonneg(xs, [z], ts)
    assert (t0, inv, mus[0]) == pytest.approx((0.5, 2.0, 0.25))
    assert max(errs) < 1e-9
    # no point with z > 0: that weight is not fitted (None); a negative intercept is dropped to 0
    t0, inv, mus, _ = lsq_rel_nonneg(xs, [[0.0] * 4], [2.0 * x - 0.1 for x in xs])
    assert mus == [None] and t0 == 0.0 and inv > 0


def test_levenberg_marquardt_fits_inside_its_box():
    x = np.linspace(0, 1, 20)
    y = 1.5 * np.exp(0.7 * x)
    sol, cost = levenberg_marquardt(
        lambda v: v[0] * np.exp(v[1] * x) - y,
        np.array([1.0, 0.0]),
        np.array([0.0, -5.0]),
        np.array([10.0, 5.0]),
    )
    assert sol == pytest.approx([1.5, 0.7], rel=1e-6) and cost < 1e-12
    sol, _ = levenberg_marquardt(
        lambda v: v[0] * np.exp(v[1] * x) - y,
        np.array([1.0, 0.0]),
        np.array([0.0, -5.0]),
        np.array([1.0, 5.0]),
    )
    assert sol[0] == pytest.approx(1.0)  # held on the box's edge


def test_interp_log_bandwidth():
    pts = [[100.0, 1.0], [10000.0, 50.0]]  # 100 B/us, then 200 B/us
    assert interp_log_bandwidth(50.0, pts) == pytest.approx(0.5)  # below: the first bandwidth
    assert interp_log_bandwidth(1e6, pts) == pytest.approx(5000.0)  # above: the last one
    assert interp_log_bandwidth(1000.0, pts) == pytest.approx(1000.0 / 150.0)  # halfway in log(bytes)
