"""The transpose's candidate space (issue 20, session 5): ``tiles --family transpose`` ranks every configuration
of ``families/transpose/tiles.space`` the family builds (its own rules, ptxas' registers, no spills, MIN_BLOCKS only where
it changes the kernel), each predicted by the feature model (measured candidates by their own constants shrunk
toward it), the rejected ones listed with the family's reason; the calibration names its provenance."""

from __future__ import annotations

import pytest

from smemtile.families import FAMILIES, configure
from smemtile.families.transpose import fit as tf
from smemtile.families.transpose import tiles as tt
from smemtile.pipeline.rank import rank
from smemtile.pipeline.tiles import family_tiles

FAM = FAMILIES["transpose"]


@pytest.fixture(scope="module", params=["f32", "f16"])
def report(request):
    return family_tiles("transpose", [8192, 8192], dtype=request.param)


def test_the_space_spans_the_familys_parameters():
    """Every curated candidate first (the sweeps' own, in their order), then the grid, each label once."""
    for dt in ("f32", "f16"):
        sp = tt.space(dt)
        labels = [tt.label(p) for p in sp]
        assert len(labels) == len(set(labels))
        assert labels[: len(tt.candidates(dt))] == [tt.label(p) for p in tt.candidates(dt)]
        for k in ("TILE", "BLOCK_ROWS", "PACK", "TILES", "STREAM"):
            assert {p[k] for p in sp} >= set(tt.SPACE[k])
        assert {p["MIN_BLOCKS"] for p in sp} >= {1, 2, 4, 8}


def test_at_least_30_candidates_and_every_one_passes_the_familys_checks(report):
    dt = report.problem["dtype"]
    assert len(report.ranked) >= 30 and len({s.label for s in report.ranked}) == len(report.ranked)
    for s in report.ranked:
        cfg = configure(FAM, {**s.params_dict(), **report.problem}, check=False)
        assert FAM.problems(cfg, accesses=False) == [], (s.label, dt)
    # every configuration of the space is either ranked or rejected with a reason
    assert len(report.ranked) + len(report.rejected) == len(tt.space(dt))
    assert all(r["reason"] and r["kind"] in ("rules", "spills", "duplicate") for r in report.rejected)
    # the curated candidates still rank (and say they were measured)
    ranked = {s.label: s for s in report.ranked}
    rejected = {r["label"]: r for r in report.rejected}
    for p in tt.candidates(dt):  # fp32's T64xY128x16 4tiles mb2 (an fp16 candidate) spills in fp32: rejected
        assert (
            ranked[tt.label(p)].measured
            if tt.label(p) in ranked
            else rejected[tt.label(p)]["kind"] == "spills"
        )


def test_features_follow_the_geometry_and_the_registers():
    """T64x8 fp32: 512 threads, float4 accesses, 128-byte output runs... bytes in flight from the occupancy that
    ptxas' registers allow (32 registers: 4 blocks of 512 threads; 64: 2)."""
    p = {**tt.DEFAULTS, "TILE": 64, "BLOCK_ROWS": 8}
    f = tt.features(p, 4, 32)
    assert f["blocks_per_sm"] == 4 and f["in_flight"] == 4 * 64 * 64 * 4 and f["narrow"] == 0.0
    assert f["in_run"] == f["out_run"] == 0.5 and f["threads"] == 0.5 and f["stream"] == 0.0
    assert tt.features(p, 4, 64)["blocks_per_sm"] == 2
    # fp16 T32: 64-byte runs, 8-byte vectors (TILE / 8 lanes = 4 elements)
    g = tt.features({**tt.DEFAULTS, "TILE": 32, "BLOCK_ROWS": 8}, 2, 32)
    assert g["in_run"] == g["out_run"] == 2.0 and g["narrow"] == 1.0


def _rows(coef: dict, labels: dict, shapes) -> list[dict]:
    out = []
    for lab, p in labels.items():
        f = tt.features(p, 2, 32)
        t0, inv, w = tt.prior(f, coef)
        for n, m in shapes:
            r = {"label": lab, "elem": 2, "rows": n, "cols": m, "params": p, "case": f"{n}x{m}"}
            x0, so, *_ = tf._terms(r, 1.0, 0.0, 0.0)
            out.append({**r, "time_us": t0 + inv * x0 + w * so})
    return out


def test_fit_features_recovers_known_coefficients_and_predicts_an_unseen_candidate():
    coef = dict.fromkeys(tf.COEF, 0.0)
    coef.update(
        {
            "t0": 3.0,
            "t0*block": 1.0,
            "inv": 1 / 4000,
            "inv*stream": 0.1 / 4000,
            "inv*latency": 0.5 / 4000,
            "out": 0.3 / 4000,
        }
    )
    d = tt.DEFAULTS
    geo = {tt.label(p): tt.geometry(p, 2) for p in tt.space("f16")}
    labels = {
        tt.label(p): p
        for p in tt.space("f16")[::7]
        if geo[tt.label(p)].vec > 1
        and geo[tt.label(p)].threads <= 1024
        and geo[tt.label(p)].smem_bytes <= 49152
    }
    shapes = ((8192, 8192), (4096, 4096), (5000, 8192), (2048, 16384))
    rows = _rows(coef, labels, shapes)
    got = tf.fit_features(rows, {}, shared={2: (1.0, 0.0, 0.0)})["2"]
    for k, v in coef.items():
        assert got["coef"][k] == pytest.approx(v, rel=1e-4, abs=1e-9), k
    unseen = {**d, "TILE": 128, "BLOCK_ROWS": 8, "STREAM": 1}
    (want,) = _rows(coef, {"u": unseen}, ((6144, 6144),))
    cal = {"constants": {"2": got}}
    assert tt.predict_time_us(unseen, 6144, 6144, "f16", cal) == pytest.approx(want["time_us"], rel=1e-6)


def test_a_measured_candidate_is_pulled_toward_its_own_rows_by_how_many_it_has():
    """shrink: a candidate measured 5 % slower than the feature model keeps most of the 5 % with 8 rows, less
    with 1 (the prior's spread SPREAD_INV against the rows' NOISE)."""
    coef = dict.fromkeys(tf.COEF, 0.0)
    coef.update({"t0": 3.0, "inv": 1 / 4000})
    p = {**tt.DEFAULTS, "TILE": 64, "BLOCK_ROWS": 4}
    f = tt.features(p, 2, 32)
    model = {"kappa": 1.0, "phi_line": 0.0, "mu_in": 0.0}
    rows = [
        {**r, "time_us": r["time_us"] * 1.05}
        for r in _rows(coef, {"a": p}, [(4096 * k, 8192) for k in (1, 2, 3, 4, 1, 2, 3, 4)])
    ]
    many, one = tf.shrink(rows, f, coef, model), tf.shrink(rows[3:4], f, coef, model)
    assert 1 / 1.05 - 0.01 < many["prior_ratio"] < 1 / 1.04 and 1 / 1.05 - 0.01 < one["prior_ratio"]
    assert one["prior_ratio"] < 1.0 and many["fit_points"] == 8 and one["fit_points"] == 1


def test_the_ranking_of_a_known_case():
    """fp32 8192^2: T64x4 col (column order, measured 0.968x) first, the sample's T64x8 col (0.961-0.970x) second;
    fp16 8192^2: T128x4 P2 col (0.946-0.956x); the top five of each measured (s6coltop). Unmeasured candidates
    say so and rank as if their expected error slower."""
    f32, f16 = (
        tt.rank_transpose(8192, 8192, "f32", rank=rank),
        tt.rank_transpose(8192, 8192, "f16", rank=rank),
    )
    assert f32[0].label == "T64x4 col" and f32[1].label == "T64x8 col" and f32[0].registers == 38
    assert f16[0].label == "T128x4 P2 col" and all(s.measured for s in f32[:5] + f16[:5])
    assert 0.95 < f16[0].copy_ratio < 0.965 and f16[1].copy_ratio < f16[0].copy_ratio
    un = next(s for s in f16 if not s.measured)
    assert "not timed: the feature model" in un.reason
    assert f32[-1].copy_ratio < 0.5  # the bottom of the list: 1024-thread T32 blocks on the scalar path


def test_l1_left_by_the_carveout():
    """The L1 feature: the 256 KB per SM less the carve-out the resident blocks' shared memory needs, against the
    bytes their loads keep in flight (they land in L1). fp32 T64x2 P2 mb16: 13 blocks of 16 KB take the 228 KB
    carve-out, 28 KB of L1 for 208 KB in flight (measured 0.84-0.85x a copy, T64x8 0.94x); T64x8: 4 blocks, 100 KB
    carve-out, L1 holds all 64 KB; fp16 T128x4 P2: 132 KB carve-out, 124 KB of L1 for 128 KB."""
    f = tt.features({"TILE": 64, "BLOCK_ROWS": 2, "PACK": 2, "MIN_BLOCKS": 16}, 4, 32)
    assert f["blocks_per_sm"] == 13 and f["l1_bytes"] == 28 * 1024 and f["l1"] == pytest.approx(1 - 28 / 208)
    f = tt.features({"TILE": 64, "BLOCK_ROWS": 8}, 4, 32)
    assert f["l1_bytes"] == 156 * 1024 and f["l1"] == 0.0
    f = tt.features({"TILE": 128, "BLOCK_ROWS": 4, "PACK": 2}, 2, 32)
    assert f["l1_bytes"] == 124 * 1024 and f["l1"] == pytest.approx(1 - 124 / 128)
    # fitted: a byte-time penalty (>= 0), which ranks T64x2 P2 mb16 below T64x8 at the session-5 held-out shape
    cal = tt.load_calibration()
    assert all(cal["constants"][e]["coef"]["inv*l1"] > 0 for e in ("2", "4"))
    r = {s.label: s for s in tt.rank_transpose(7168, 7680, "f32", rank=rank)}
    assert r["T64x2 P2 mb16"].copy_ratio < 0.9 < r["T64x8"].copy_ratio


def test_a_candidate_timed_only_on_misaligned_shapes_keeps_the_feature_models_bandwidth():
    """Its rows cannot separate bandwidth from the misalignment weights (both scale with the bytes): shrink keeps
    the prior's t0 and bw and fits the weights alone; one aligned row frees them."""
    coef = {k: 0.0 for k in tf.COEF} | {"t0": 5.0, "inv": 1 / 4000.0, "out": 0.3 / 4000.0}
    p = {**tt.DEFAULTS, "TILE": 128, "BLOCK_ROWS": 4, "PACK": 2}
    f = tt.features(p, 2, 32)
    model = {"kappa": 1.0, "phi_line": 0.1, "mu_in": 0.0}
    rows = _rows(coef, {"a": p}, [(5000, 8192), (7000, 8192)])  # output pitch 10000 / 14000 bytes
    rows = [{**r, "time_us": r["time_us"] * 2.5} for r in rows]  # 2.5x slower than the prior says
    only = tf.shrink(rows, f, coef, model)
    assert only["prior_ratio"] == pytest.approx(1.0, abs=1e-3) and only["mu_out"] > 1.0
    with_aligned = tf.shrink([*rows, *_rows(coef, {"a": p}, [(8192, 8192)])], f, coef, model)
    assert with_aligned["prior_ratio"] != pytest.approx(1.0, abs=1e-3)


# ---- the tile model behind the protocol (families/transpose/tiles.py, fit.py) -------------------------------------


@pytest.mark.parametrize("dt,arch", [("f32", "sm_90"), ("f16", "sm_90"), ("f16", "sm_80")])
def test_the_rules_screen_shares_its_shape_checks_without_changing_them(dt, arch):
    fam = FAMILIES["transpose"]
    assert tt._rules(fam, dt, arch) == tt.rules_uncached(fam, dt, arch)


def test_the_transpose_tile_model_is_the_family_s_and_every_ranked_entry_configures():
    from smemtile.families.tile_model import TileModel
    from smemtile.model.arch import get_arch
    from smemtile.model.tiling_gpus import get_gpu

    fam = FAMILIES["transpose"]
    assert fam.tile_model is tt.TransposeTiles and isinstance(fam.tile_model(fam), TileModel)
    assert fam.tile_model.options == ()
    model = fam.tile_model(fam)
    ranking = rank(
        model, {"rows": 5000, "cols": 6000, "dtype": "f16"}, get_arch("sm_90"), get_gpu(None, "sm_90")
    )
    assert ranking.counts["generated"] == len(tt.space("f16"))
    assert ranking.counts["ranked"] + ranking.counts["rejected"] == ranking.counts["generated"]
    for e in ranking.ranked:
        cfg = model.configure(e)
        assert tt.label(cfg.params) == e.pred.result.label and cfg.problem["dtype"] == "f16"
    # never-timed candidates rank as if their expected error slower; measured ones pay nothing
    cal = tt.load_calibration()
    pen = cal["constants"]["2"]["unmeasured_penalty"]
    assert {e.pred.penalty for e in ranking.ranked} == {0.0, pen}
    assert all((e.pred.penalty == 0.0) == e.pred.result.measured for e in ranking.ranked)


def test_the_transpose_calibration_reproduces_from_its_results():
    stored, refit = tf.reproduce()
    assert refit["copy"] == stored["copy"]
    for e in ("2", "4"):
        s, r = stored[e], refit[e]
        assert r["model"] == s["model"] and r["min_fit_bytes"] == s["min_fit_bytes"]
        assert r["coef"] == pytest.approx(s["coef"], rel=1e-6, abs=1e-12)
        assert set(r["candidates"]) == set(s["candidates"])
        for lab, c in s["candidates"].items():
            assert r["candidates"][lab] == pytest.approx(c, rel=1e-6, abs=1e-12), lab
