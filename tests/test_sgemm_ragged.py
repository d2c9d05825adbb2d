"""The sgemm family on unaligned problems (odd K or N, issue 20's ragged shapes): the B copy the family reports
for each alignment of N (the bank model's input) covers the tile exactly; RAGGED (the unmasked 4-byte loop) is
compiled in exactly where the measured rule says, and its A copy covers the tile conflict-free; on a GPU the
results for every K % 4 and N % 4, with RAGGED on, off and forced. (Session 3's realigned-A kernel was measured
slower than this one on 4095x4097x1023 and on the aligned shapes, bench/NOTES.md "Ragged SGEMM (session 3)": it
was reverted, and its tests with it.)"""

from __future__ import annotations

import collections

import numpy as np
import pytest

from smemtile.codegen.analysis import access_results
from smemtile.families import configure

SG16x8 = {"BM": 128, "BN": 128, "BK": 8, "TM": 16, "TN": 8, "STAGES": 3, "MIN_BLOCKS": 2, "REPACK": 2}
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


SG8x8 = {"BM": 128, "BN": 64, "BK": 16, "TM": 8, "TN": 8, "STAGES": 3, "MIN_BLOCKS": 3, "REPACK": 2}


@pytest.mark.parametrize(
    ("params", "problem", "on"),
    [
        (SG8x8, {"M": 2999, "N": 3001, "K": 3003}, True),  # 8x8 tiles: on for unaligned problems
        (SG8x8, {"M": 4096, "N": 4096, "K": 4096}, False),  # aligned: never compiled in
        (SG8x8, {"M": 4095, "N": 4096, "K": 4096}, False),  # M alone does not matter (lda = K, ldb = N)
        (SG16x8, {"M": 4095, "N": 4097, "K": 1023}, False),  # 128 accumulators, 2 blocks/SM, A unaligned
        (SG16x8, {"M": 1999, "N": 6001, "K": 1500}, True),  # ... only B unaligned: on (measured faster)
        ({**SG16x8, "MIN_BLOCKS": 1, "BM": 256}, {"M": 4095, "N": 4097, "K": 1023}, True),  # 1 block/SM
        ({**SG8x8, "MIN_BLOCKS": 4, "BK": 8}, {"M": 2999, "N": 3001, "K": 3003}, False),  # cap 128 registers
        ({**SG16x8, "RAGGED": 1}, {"M": 4095, "N": 4097, "K": 1023}, True),  # forced on
        ({**SG8x8, "RAGGED": 2}, {"M": 2999, "N": 3001, "K": 3003}, False),  # forced off
        ({**SG8x8, "A_VEC": 0}, {"M": 2999, "N": 3001, "K": 3003}, False),  # the 4-byte cp.async A copy
    ],
)
def test_ragged_rule(params, problem, on):
    """The family's RAGGED (template argument, last) follows sgemm.tiles.ragged_loop, the measured rule."""
    from smemtile.families import FAMILIES
    from smemtile.families.sgemm.tiles import ragged_loop

    fam = FAMILIES["sgemm"]
    cfg = configure("sgemm", {**params, **problem}, PAD4, "sm_90")
    assert fam.ragged(cfg) is on
    assert fam.template_args(cfg)[-1] == str(int(on))
    assert ("As_copy_ragged" in {a["name"] for a in fam.accesses(cfg)}) is on
    p = cfg.params
    if not p["RAGGED"] and p["A_VEC"]:
        assert on == ragged_loop(
            p["BM"],
            p["BN"],
            p["BK"],
            p["TM"],
            p["TN"],
            fam.threads(p),
            p["MIN_BLOCKS"],
            problem["K"],
            problem["N"],
        )


def test_ragged_a_copy_covers_the_tile_conflict_free():
    """RAGGED's A copy (8 consecutive k of 4 rows per warp, transposed into As[k][m]) writes every As cell once
    and, with the fix's PAD 4, takes one wavefront per instruction; dense, 8 (the rows of a warp fall 4 apart)."""
    res = _results(SG8x8, {"M": 2999, "N": 3001, "K": 3003})
    r = res["As_copy_ragged"]
    assert _cells(r) == collections.Counter({(kk, m): 1 for kk in range(16) for m in range(128)})
    assert (r.wavefronts, r.ideal) == (1, 1)
    dense = _results(SG8x8, {"M": 2999, "N": 3001, "K": 3003}, {})["As_copy_ragged"]
    assert (dense.wavefronts, dense.ideal) == (8, 1)


def test_ragged_explicit_on_needs_a_tile_it_can_split():
    """RAGGED=1 where the 8-k runs of A cannot split over the threads is a violation naming the rule."""
    from smemtile.families import FAMILIES

    cfg = configure(
        "sgemm",
        {"BM": 16, "BN": 96, "BK": 8, "TM": 4, "TN": 4, "RAGGED": 1, "M": 999, "N": 999, "K": 999},
        PAD4,
        "sm_90",
        check=False,
    )  # 96 threads, 128 A elements
    bad = FAMILIES["sgemm"].violations(cfg)
    assert any("RAGGED=1 copies A as runs of 8 k" in b for b in bad), bad


# ---- on the GPU -------------------------------------------------------------------------------------------------

GPU_CASES = [
    (SG16x8, {"M": 257, "N": 131, "K": 77, "beta": 0.5}),
    (SG16x8, {"M": 511, "N": 515, "K": 1024}),
    (SG16x8, {"M": 300, "N": 258, "K": 517, "alpha": 0.75}),
    (SG16x8, {"M": 77, "N": 3, "K": 300}),
    (SG64, {"M": 129, "N": 1027, "K": 259, "beta": -1.25}),
    ({**SG16x8, "STAGES": 2}, {"M": 130, "N": 1026, "K": 518}),
    ({**SG64, "BK": 16, "TM": 4}, {"M": 200, "N": 1023, "K": 1024}),
    # RAGGED on (8x8, and 16x8 where only B is unaligned), forced on where the rule leaves it off, forced off
    (SG8x8, {"M": 257, "N": 131, "K": 77, "beta": 0.5}),
    (SG8x8, {"M": 1000, "N": 1001, "K": 333, "alpha": 0.75, "beta": -1.25}),
    (SG16x8, {"M": 130, "N": 1027, "K": 516}),
    ({**SG16x8, "RAGGED": 1}, {"M": 257, "N": 131, "K": 77}),
    ({**SG16x8, "RAGGED": 1, "SPLIT_K": 2}, {"M": 300, "N": 258, "K": 517}),
    ({**SG8x8, "RAGGED": 2}, {"M": 129, "N": 1027, "K": 259}),
    # REPACK: both operands, A only (N % 4 == 0), B only with split K; the Python launcher's own workspace
    ({**SG16x8, "REPACK": 1}, {"M": 257, "N": 131, "K": 77}),
    ({**SG8x8, "REPACK": 1}, {"M": 300, "N": 256, "K": 517}),
    ({**SG8x8, "REPACK": 1, "SPLIT_K": 2}, {"M": 129, "N": 1027, "K": 260}),
]


@pytest.mark.gpu
@pytest.mark.parametrize("params, problem", GPU_CASES)
def test_ragged_results_on_the_gpu(params, problem):
    from smemtile.gpu.run import check_config, open_device

    dev = open_device(0)
    cfg = configure("sgemm", {**params, **problem}, PAD4, dev.arch_name)
    res = check_config(cfg, dev, np.random.default_rng(7))
    assert res.correct, res.mismatch.describe() if res.mismatch else res


def test_generated_header_says_what_auto_chose():
    """RAGGED 0 (auto) is printed with what it resolved to, as the instantiation's last argument has it."""
    from smemtile.codegen.render import render

    for problem, want in (({"M": 2999, "N": 3001, "K": 3003}, 1), ({"M": 4096, "N": 4096, "K": 4096}, 2)):
        k = render(configure("sgemm", {**SG8x8, **problem}, PAD4, "sm_90"))
        assert f"RAGGED=0 (auto: {want})" in k.header
        assert k.name_expression.endswith(f", {int(want == 1)}>")


def test_verify_ncu_profiles_the_kernel_the_problem_compiles():
    """`verify --ncu` runs a small problem of whole tiles (aligned): RAGGED stays what the user's problem resolved
    to, so the profiled kernel is the user's, and the model counts each A copy for the tiles it actually copies
    (RAGGED's loop for the whole tiles after the prologue, As_copy for the prologue): together once per K tile."""
    from smemtile.gpu.ncu_compare import model_accesses
    from smemtile.pipeline.verify import ncu_config

    user = configure("sgemm", {**SG8x8, "M": 2999, "N": 3001, "K": 3003}, PAD4, "sm_90")
    small = ncu_config(user, user.arch)
    assert small.problem["K"] % 4 == 0 and small.problem["N"] % 4 == 0  # whole tiles
    assert small.params["RAGGED"] == 1
    from smemtile.families import FAMILIES

    fam = FAMILIES["sgemm"]
    assert fam.name_expression(small).endswith(", 1>") and fam.name_expression(user).endswith(", 1>")
    model = {m.name: m for m in model_accesses(small)}
    tiles = fam.repeats_per_block(small)  # 8 K tiles, 3 stages: 2 in the prologue, 6 in RAGGED's loop
    assert (model["As_copy"].repeats, model["As_copy_ragged"].repeats) == (2, tiles - 2)
    assert model["As_copy"].instructions == model["As_copy_ragged"].instructions  # the same stores per tile
    assert model["Bs_read"].repeats == tiles
    aligned = ncu_config(
        configure("sgemm", {**SG8x8, "M": 4096, "N": 4096, "K": 4096}, PAD4, "sm_90"), user.arch
    )
    assert aligned.params["RAGGED"] == 2 and "As_copy_ragged" not in {m.name for m in model_accesses(aligned)}


def test_ragged_repeats_with_split_k_and_a_partial_tile():
    """Per K slice: whole tiles past the prologue go through RAGGED's loop, the prologue and a partial tile not."""
    from smemtile.families import FAMILIES

    cfg = configure("sgemm", {**SG8x8, "SPLIT_K": 2, "M": 999, "N": 1001, "K": 2003}, PAD4, "sm_90")
    rep = FAMILIES["sgemm"].access_repeats(cfg)
    # BK 16, 2 slices: kc = ceil(2003 / 32) * 16 = 1008 -> slices of 1008 and 995 elements: 63 and 63 tiles,
    # 63 and 62 whole; 3 stages: 61 and 60 through the loop
    assert rep == {"As_copy_ragged": (61 + 60) / 2, "As_copy": (2 + 3) / 2}
