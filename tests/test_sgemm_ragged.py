"""The sgemm family on unaligned problems (odd K or N, issue 20's ragged shapes): the B copy the family reports
for each alignment of N (the bank model's input) covers the tile exactly, and on a GPU the results for every
K % 4 and N % 4. (Session 3's realigned-A kernel was measured slower than this one on 4095x4097x1023 and on the
aligned shapes, bench/NOTES.md "Ragged SGEMM (session 3)": it was reverted, and its tests with it.)"""

from __future__ import annotations

import collections

import numpy as np
import pytest

from smemtile.codegen.analysis import access_results
from smemtile.families import configure

SG16x8 = {"BM": 128, "BN": 128, "BK": 8, "TM": 16, "TN": 8, "STAGES": 3, "MIN_BLOCKS": 2}
SG64 = {"BM": 64, "BN": 64, "BK": 8, "TM": 8, "TN": 8, "STAGES": 3, "MIN_BLOCKS": 4}
PAD4 = {"As": {"pad": 4}}


def _results(params: dict, problem: dict, lay: dict = PAD4) -> dict:
    cfg = configure("sgemm", {**params, **problem}, lay, "sm_90")
    return {r.access.name: r for r in access_results(cfg)}


def _cells(r) -> collections.Counter:
    """(row, col) -> how many times the access writes it, over every warp, instruction and active lane."""
    act = r.bank.active.ravel()
    return collections.Counter(
        (int(a), int(b)) for a, b, on in zip(r.rows.ravel(), r.cols.ravel(), act, strict=True) if on
    )


def test_b_copy_by_alignment_of_n():
    """N % 4 != 0: B by 4-byte cp.async, one element per lane, every Bs cell once."""
    res = _results(SG16x8, {"M": 4095, "N": 4096, "K": 1023})
    assert (res["Bs_copy"].access.op, res["Bs_copy"].access.width) == ("cp.async", 16)
    res = _results(SG16x8, {"M": 4095, "N": 4097, "K": 1023})
    assert (res["Bs_copy"].access.op, res["Bs_copy"].access.width) == ("cp.async", 4)
    assert _cells(res["Bs_copy"]) == collections.Counter({(kk, n): 1 for kk in range(8) for n in range(128)})


def test_cp_async_a_copy_has_no_realignment():
    """A_VEC 0 (4-byte cp.async of A) has no unmasked loop: the masked copies' description stays."""
    res = _results({**SG16x8, "A_VEC": 0, "TM": 8, "TN": 8}, {"M": 4095, "N": 4097, "K": 1023})
    assert res["As_copy"].access.op == "cp.async"
    assert (res["Bs_copy"].access.op, res["Bs_copy"].access.width) == ("cp.async", 4)


# ---- on the GPU -------------------------------------------------------------------------------------------------

GPU_CASES = [
    (SG16x8, {"M": 257, "N": 131, "K": 77, "beta": 0.5}),
    (SG16x8, {"M": 511, "N": 515, "K": 1024}),
    (SG16x8, {"M": 300, "N": 258, "K": 517, "alpha": 0.75}),
    (SG16x8, {"M": 77, "N": 3, "K": 300}),
    (SG64, {"M": 129, "N": 1027, "K": 259, "beta": -1.25}),
    ({**SG16x8, "STAGES": 2}, {"M": 130, "N": 1026, "K": 518}),
    ({**SG64, "BK": 16, "TM": 4}, {"M": 200, "N": 1023, "K": 1024}),
]


@pytest.mark.gpu
@pytest.mark.parametrize("params, problem", GPU_CASES)
def test_ragged_results_on_the_gpu(params, problem):
    from smemtile.gpu.run import check_config, open_device

    dev = open_device(0)
    cfg = configure("sgemm", {**params, **problem}, PAD4, dev.arch_name)
    res = check_config(cfg, dev, np.random.default_rng(7))
    assert res.correct, res.mismatch.describe() if res.mismatch else res
