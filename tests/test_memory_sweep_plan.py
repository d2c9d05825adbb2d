"""bench/bench_memory.py's plan ``spearman`` (issue 20's rank test of the frozen memory models): which
configurations it sweeps per held-out shape, and how a results file is scored. No GPU; the fix search's layouts
are stubbed (the plan takes them from ``smemtile.pipeline.fixes``, which its own tests cover)."""

from __future__ import annotations

import json
import math
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def bench_memory():
    sys.path.insert(0, str(ROOT / "bench"))
    import bench_memory as bm

    return bm


@cache
def cases() -> tuple:
    bm = bench_memory()
    mp = pytest.MonkeyPatch()
    mp.setattr(bm, "fixed_layouts", lambda family, params, problem: {})
    try:
        return tuple(bm.plan_cases("spearman"))
    finally:
        mp.undo()


def data(name: str) -> dict:
    return json.loads((ROOT / "smemtile" / "model" / "data" / name).read_text())


def test_spread_ranks_top_then_even_to_the_last():
    bm = bench_memory()
    idx = bm.spread_ranks(319)
    assert len(idx) == len(set(idx)) == 36 and idx == sorted(idx)
    assert idx[:12] == list(range(12)) and idx[12] == 12 and idx[-1] == 318
    gaps = [b - a for a, b in zip(idx[12:], idx[13:], strict=False)]
    assert min(gaps) >= 13 and max(gaps) <= 14  # (319 - 12 - 1) / 23 = 13.3
    assert bm.spread_ranks(18) == list(range(18))  # a short list is swept whole


def test_stencil_cases_span_the_ranking_on_held_out_shapes():
    st = [c for c in cases() if c.family == "stencil2d"]
    held = data("stencil_h200.json")["held_out_shapes"]
    assert held == ["stencil R1-4 8192^2"] and [c.problem for c in st] == [{"ny": 8192, "nx": 8192}] * 4
    assert sorted(c.configs[0].params["R"] for c in st) == [1, 2, 3, 4]
    for c in st:
        ranks = [x.predicted["rank"] for x in c.configs]
        n = c.configs[0].predicted["of"]
        assert len(ranks) >= 30 and n > 300 and c.role == "held_out"
        assert ranks[:12] == list(range(1, 13)) and ranks[-1] == n  # the top 12 and the last
        assert sum(r > n / 2 for r in ranks) >= 10  # half of the sample from the lower half of the list
        ratios = [x.predicted["copy_ratio"] for x in c.configs]
        assert max(ratios) > 0.9 and min(ratios) < 0.25  # predicted from near a copy to a quarter of one
        assert all(x.params["R"] == c.configs[0].params["R"] for x in c.configs)


def test_transpose_cases_are_the_held_out_shapes_with_every_candidate():
    from smemtile.model.tiling_transpose import candidates

    tr = [c for c in cases() if c.family == "transpose"]
    cal = data("transpose_h200.json")
    assert sorted(c.name for c in tr) == sorted(cal["held_out_shapes"])
    assert not {c.name for c in tr} & set(cal["fit_shapes"])
    for c in tr:
        n = len(candidates(c.problem["dtype"]))
        # 13 fp32, 18 fp16 candidates: fewer than 30, so every one of them
        assert len(c.configs) == n == c.configs[0].predicted["of"]
        assert [x.predicted["rank"] for x in c.configs] == list(range(1, n + 1))


def test_score_spearman(tmp_path):
    """Scoring a results file: measured in the predicted order gives Spearman 1; the #1 measured slower than
    the #2 shows as the gap to the best; the top-12 Spearman counts only ranks 1-12."""
    bm = bench_memory()
    rows = []
    for rank in range(1, 21):
        pred = {"rank": rank, "of": 40, "gbps": 4000.0 - 100 * rank, "time_us": 100.0 + rank, "copy_ratio": 0.95}  # fmt: skip
        gbps = pred["gbps"] if rank > 2 else {1: 3850.0, 2: 3900.0}[rank]  # #1 and #2 swapped
        rows.append({"label": f"c{rank}", "predicted": pred, "gbps": gbps, "ratio": gbps / 4000.0,
                     "median_ms": 1e-3 * (100.0 + rank)})  # fmt: skip
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
