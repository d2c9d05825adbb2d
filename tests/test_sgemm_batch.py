"""sgemm's SimtBatch (the refit's vectorised residual) gives every measured row the time simt_time gives it, bit
for bit, under the shipped constants (with the per-tile corrections), the fit's starting point and its bounds."""

from __future__ import annotations

import numpy as np
import pytest

from smemtile.families.sgemm import fit
from smemtile.families.sgemm.tiles import SimtBatch, calibration, simt_time_batch
from smemtile.model.gemm_tiles import TileConfig


@pytest.fixture(scope="module")
def rows():
    d = calibration()
    return fit.load_rows([fit.ROOT / p for p in d["sweeps"]])


def _consts(x):
    return fit.consts_of(x, calibration()["constants"]["registers"])


@pytest.mark.parametrize("which", ["shipped", "x0", "lo", "hi"])
def test_batch_times_are_simt_times_on_every_measured_row(rows, which):
    q = {"shipped": calibration()["constants"], "x0": _consts(fit.X0), "lo": _consts(fit.LO)}.get(which)
    q = q if q is not None else _consts(fit.HI)
    assert len(rows) > 1000 and ("tile_bias" in q) == (which == "shipped")
    got = fit.batch_of(rows).times(q)
    want = np.array([fit.predict(r, q) for r in rows])
    assert got.shape == want.shape and got.dtype == np.float64
    assert np.array_equal(got, want), f"{int(np.sum(got != want))} rows differ"
    # the rows cover what the batch treats apart (but repacking: the next test): unaligned, RAGGED's loop, split
    # K, a partial last round and none
    a = fit.batch_of(rows).a
    assert a["unaligned"].any() and a["ragged"].any() and a["split"].any()
    assert a["rem"].any() and (~a["rem"]).any()


def test_batch_on_other_gpus_lanes_and_repack_choices():
    """Another SM count and lane width, and repack forced on, off and automatic, against simt_time."""
    from smemtile.families.sgemm.tiles import simt_time

    c1 = TileConfig(128, 128, 16, 8, 3, 8, 8, 8, 1)
    c2 = TileConfig(64, 64, 8, 4, 2, 8, 4, 4, 2, split_k=4)
    items = [
        (m, n, k, c, c.warps * 32, b, rep)
        for m, n, k in [(4096, 4096, 4096), (767, 769, 771), (64, 64, 65536), (4095, 4097, 1023)]
        for c in (c1, c2)
        for b in (1, 2)
        for rep in (None, True, False)
    ]
    a = SimtBatch(items, 132).a
    assert a["repack"].any() and (a["unaligned"] & ~a["repack"]).any() and a["split"].any()
    for sms, lanes in [(132, 128.0), (108, 64.0), (170, 128.0)]:
        got = simt_time_batch(items, sms, lanes=lanes)
        want = [
            simt_time(m, n, k, c, t, b, sms, lanes=lanes, repack=r)["time"] for m, n, k, c, t, b, r in items
        ]
        assert got.tolist() == want
    assert simt_time_batch([], 132).shape == (0,)
    with pytest.raises(AssertionError):
        simt_time_batch(SimtBatch(items, 132), 108)
