"""bench/bench_memory.py's plans ``spearman`` and ``heldout`` (issue 20's rank test of the frozen memory models):
which configurations they sweep per held-out shape, and how a results file is scored. No GPU; the fix search's layouts
are stubbed (the plan takes them from ``smemtile.pipeline.fixes``, which its own tests cover)."""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def bench_memory():
    from bench import bench_memory as bm

    return bm


@cache
def cases(plan: str = "heldout") -> tuple:
    bm = bench_memory()
    mp = pytest.MonkeyPatch()
    mp.setattr(bm, "fixed_layouts", lambda family, params, problem: {})
    try:
        return tuple(bm.plan_cases(plan))
    finally:
        mp.undo()


def measured_before() -> set:
    """(family, problem) of every case of every committed results file but the held-out sweep's own."""
    out = set()
    for path in (ROOT / "bench" / "results").glob("memory_*.json"):
        if path.name == "memory_h200_session4_heldout.json":
            continue
        for case in json.loads(path.read_text()).get("cases", []):
            out.add((case["family"], json.dumps(case["problem"], sort_keys=True)))
    return out


DATA = {"stencil_h200.json": "stencil2d", "transpose_h200.json": "transpose"}  # each in its family's folder


def data(name: str) -> dict:
    return json.loads((ROOT / "smemtile" / "families" / DATA[name] / name).read_text())


def test_spread_ranks_top_then_even_to_the_last():
    bm = bench_memory()
    idx = bm.spread_ranks(319)
    assert len(idx) == len(set(idx)) == 36 and idx == sorted(idx)
    assert idx[:12] == list(range(12)) and idx[12] == 12 and idx[-1] == 318
    gaps = [b - a for a, b in zip(idx[12:], idx[13:], strict=False)]
    assert min(gaps) >= 13 and max(gaps) <= 14  # (319 - 12 - 1) / 23 = 13.3
    assert bm.spread_ranks(18) == list(range(18))  # a short list is swept whole


def test_the_held_out_shapes_were_never_measured_or_fitted():
    """Plan heldout: every shape is new (no committed results file before it measured it), and none is a fit
    shape of the data files."""
    before = measured_before()
    fit = set(data("stencil_h200.json")["fit_shapes"]) | set(data("transpose_h200.json")["fit_shapes"])
    for c in cases():
        assert (c.family, json.dumps(c.problem, sort_keys=True)) not in before, c.name
        assert c.name not in fit and c.role == "held_out"
    # and the session-4 sweep (plan spearman) is fit data now
    for c in cases("spearman"):
        assert (c.family, json.dumps(c.problem, sort_keys=True)) in before


def test_stencil_cases_span_the_ranking_on_held_out_shapes():
    st = [c for c in cases() if c.family == "stencil2d"]
    assert sorted({json.dumps(c.problem) for c in st}) == [
        '{"ny": 2048, "nx": 16384}',
        '{"ny": 6144, "nx": 6144}',
    ]
    assert sorted(c.configs[0].params["R"] for c in st) == [1, 1, 2, 2, 3, 3, 4, 4]
    for c in st:
        ranks = [x.predicted["rank"] for x in c.configs]
        n = c.configs[0].predicted["of"]
        assert len(ranks) >= 30 and n > 300 and c.role == "held_out"
        assert ranks[:12] == list(range(1, 13)) and ranks[-1] == n  # the top 12 and the last
        assert sum(r > n / 2 for r in ranks) >= 10  # half of the sample from the lower half of the list
        ratios = [x.predicted["copy_ratio"] for x in c.configs]
        assert max(ratios) > 0.9 and min(ratios) < 0.25  # predicted from near a copy to a quarter of one
        assert all(x.params["R"] == c.configs[0].params["R"] for x in c.configs)


def test_transpose_cases_cover_the_misalignment_classes_with_every_candidate():
    """fp16 5000 x 7000: both row pitches 16 mod 32 bytes; 8192 x 5000: the input pitch only; 12288 x 6144:
    aligned, not square. Every candidate (13 fp32, 18 fp16: fewer than 30, all the model ranks)."""
    from smemtile.families.transpose.tiles import candidates

    tr = [c for c in cases() if c.family == "transpose"]
    assert len(tr) == 6
    pitch = {c.name: (c.problem["cols"] * 2 % 32, c.problem["rows"] * 2 % 32) for c in tr if "f16" in c.name}
    assert pitch == {
        "transpose f16 5000x7000": (16, 16),
        "transpose f16 8192x5000": (16, 0),
        "transpose f16 12288x6144": (0, 0),
    }
    for c in tr:  # session 5: the whole space is ranked (316 / 421), sampled as the stencil's
        n = c.configs[0].predicted["of"]
        assert len(c.configs) == 36 and n > len(candidates(c.problem["dtype"]))
        assert [x.predicted["rank"] for x in c.configs][:12] == list(range(1, 13))


def test_score_spearman(tmp_path):
    """Scoring a results file: measured in the predicted order gives Spearman 1; the #1 measured slower than
    the #2 shows as the gap to the best; the top-12 Spearman counts only ranks 1-12."""
    bm = bench_memory()
    rows = []
    for rank in range(1, 21):
        pred = {
            "rank": rank,
            "of": 40,
            "gbps": 4000.0 - 100 * rank,
            "time_us": 100.0 + rank,
            "copy_ratio": 0.95,
        }
        gbps = pred["gbps"] if rank > 2 else {1: 3850.0, 2: 3900.0}[rank]  # #1 and #2 swapped
        rows.append(
            {
                "label": f"c{rank}",
                "predicted": pred,
                "gbps": gbps,
                "ratio": gbps / 4000.0,
                "median_ms": 1e-3 * (100.0 + rank),
            }
        )
    rows.append({"label": "wrong", "predicted": {**pred, "rank": 40}, "correct": False})
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"cases": [{"case": "x", "role": "held_out", "configs": rows}]}))
    (s,) = bm.score_spearman(path)
    assert s["swept"] == 21 and s["timed"] == 20 and s["top"] == 12 and s["ranked"] == 40
    assert s["spearman"] == pytest.approx(1 - 6 * 2 / (20 * 399))
    assert s["spearman_top"] == pytest.approx(1 - 6 * 2 / (12 * 143))
    assert s["pick"] == "c1" and s["best"] == "c2" and s["pick_measured_rank"] == 2
    assert s["pick_vs_best"] == pytest.approx(3850 / 3900)
    assert s["median_time_error"] == 0.0 and math.isclose(s["top_measured_spread"], 1 - 2800 / 3900)
    assert json.loads(path.read_text())["scores"][0]["pick"] == "c1"


def test_record_validation_reproduces_the_data_files_expected_errors(tmp_path):
    """The held-out run's errors, written into copies of the data files, are the ones the shipped files state;
    nothing else in them changes."""
    import shutil

    bm = bench_memory()
    for name in ("stencil_h200.json", "transpose_h200.json"):
        shutil.copy(ROOT / "smemtile" / "families" / DATA[name] / name, tmp_path / name)
    got = bm.record_validation(ROOT / "bench" / "results" / "memory_h200_session4_heldout.json", tmp_path)
    assert set(got) == {"stencil2d", "transpose f16", "transpose f32"}
    # the transpose file was refitted since (the input-pitch fit run): only the stencil file is this run's
    assert json.loads((tmp_path / "stencil_h200.json").read_text()) == data("stencil_h200.json")
    assert got["stencil2d"] == data("stencil_h200.json")["held_out_median_error"]
