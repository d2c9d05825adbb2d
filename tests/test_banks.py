"""The bank model against the hardware: every pattern measured with ncu on an H200 (tests/data).

Two catalogues, scored separately: ``bank_catalogue_fitted.json`` (180 patterns the model's rules were fitted
on, rounds 1-4) and ``bank_catalogue_heldout.json`` (79 patterns measured after the model was frozen, with its
predictions committed first: bench/results/heldout_predictions.json). The README quotes both scores."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smemtile.errors import SpecError
from smemtile.model.banks import analyze_addresses

CATALOGUE = json.loads((Path(__file__).parent / "data" / "bank_catalogue_fitted.json").read_text())
HELDOUT = json.loads((Path(__file__).parent / "data" / "bank_catalogue_heldout.json").read_text())["patterns"]
PATTERNS = CATALOGUE["patterns"]
# cp.async.cg 16-byte (the L1-bypass path) is invisible to ncu's shared-memory counters: measured 0.
UNMEASURABLE = {p["name"] for p in PATTERNS if p["kind"] == "cpa16"}
# cp.async from (almost) one random line per lane: the model does not know where lines sit in L1's banks and
# is off by 1-3 wavefronts, 7 of the 8 short (bench/ncu_bank_catalogue.py round 4)
APPROXIMATE = {
    "r4_cpa4_random_lines3",
    "r4_cpa4_random_two_lines0",
    "r4_cpa4_random_two_lines1",
    "r4_cpa4_random_two_lines2",
    "r4_cpa8_random_lines2",
    "r4_cpa16ca_random_lines0",
    "r4_cpa16ca_random_lines1",
    "r4_cpa16ca_random_lines2",
}
# predictions for round 4 of the first cp.async model (groups = source lines), recorded before measuring
PREDICTIONS = json.loads(
    (Path(__file__).parents[1] / "bench" / "results" / "cp_async_round4_predictions.json").read_text()
)["patterns"]


def _measured(p) -> int:
    """Wavefronts per instruction; random-line cp.async patterns add ~50 per 1024 instructions (L1 misses of the
    first touches), so the value is rounded."""
    v = p["measured"]["wavefronts_per_instruction"]
    assert abs(v - round(v)) < 0.1, p["name"]
    return round(v)


def _model(p) -> int:
    return int(
        analyze_addresses(
            p["addresses"], p["op"], p["width"], p.get("matrices", 4), sources=p.get("global")
        ).wavefronts[0]
    )


def test_catalogue_is_large_and_covers_every_kind():
    assert len(PATTERNS) >= 50
    kinds = {(p["op"], p["width"]) for p in PATTERNS}
    for op, w in [
        ("load", 1),
        ("load", 2),
        ("load", 4),
        ("load", 8),
        ("load", 16),
        ("store", 4),
        ("store", 8),
        ("store", 16),
        ("ldmatrix", 16),
        ("cp.async", 4),
        ("cp.async", 8),
        ("cp.async", 16),
    ]:
        assert (op, w) in kinds
    assert all(p["measured"]["instructions"] == CATALOGUE["iterations"] for p in PATTERNS)


@pytest.mark.parametrize(
    "p", [p for p in PATTERNS if p["name"] not in UNMEASURABLE | APPROXIMATE], ids=lambda p: p["name"]
)
def test_model_reproduces_measured_wavefronts(p):
    assert _model(p) == _measured(p)


@pytest.mark.parametrize("p", [p for p in PATTERNS if p["name"] in APPROXIMATE], ids=lambda p: p["name"])
def test_random_source_cp_async_within_three_wavefronts(p):
    assert 1 <= abs(_measured(p) - _model(p)) <= 3


def test_agreement_count():
    exact = [p for p in PATTERNS if p["name"] not in UNMEASURABLE and _model(p) == _measured(p)]
    assert len(PATTERNS) == 180 and len(UNMEASURABLE) == 6
    assert len(exact) == len(PATTERNS) - len(UNMEASURABLE) - len(APPROXIMATE) == 166


def test_every_cp_async_pattern_names_its_global_sources():
    cp = [p for p in PATTERNS if p["op"] == "cp.async"]
    assert len(cp) >= 30 and all(len(p["global"]) == 32 for p in cp)


MEASURED = {p["name"]: p for p in PATTERNS}


def test_round4_predictions_held_for_structured_sources_only():
    """The first cp.async model (groups = source lines) was asked before round 4 ran: it got every structured
    pattern right and every random-source one badly wrong, which is what led to the read-side groups."""
    right = {p["name"] for p in PREDICTIONS if p["predicted_wavefronts"] == _measured(MEASURED[p["name"]])}
    assert right == {
        "r4_cpa4_sector_rows0",
        "r4_cpa4_sector_rows1",
        "r4_cpa4_sector_rows2",
        "r4_cpa4_interleaved_lines",
        "r4_cpa4_pairs_of_quarters",
        "r4_cpa8_contig_conflict",
        "r4_cpa16ca_half_lines",
    }
    for name in right:  # the refitted model keeps them
        assert _model(MEASURED[name]) == _measured(MEASURED[name])


def test_ncu_conflict_counter_matches_model_for_loads_and_stores():
    for p in PATTERNS:
        if p["op"] not in ("load", "store"):
            continue
        r = analyze_addresses(p["addresses"], p["op"], p["width"])
        key = "ld" if p["op"] == "load" else "st"
        measured = p["measured"]["counters"].get(
            f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{key}.sum", 0
        )
        assert measured / p["measured"]["instructions"] == int(r.wavefronts[0] - r.ncu_ideal[0]), p["name"]


def test_folklore_consecutive_fp16_is_not_conflicted():
    r = analyze_addresses([2 * i for i in range(32)], "load", 2)
    assert r.wavefronts[0] == 1 and r.conflict_degree[0] == 1


def test_classic_cases():
    assert analyze_addresses([128 * i for i in range(32)], "load", 4).wavefronts[0] == 32
    assert analyze_addresses([132 * i for i in range(32)], "load", 4).wavefronts[0] == 1
    assert analyze_addresses([0] * 32, "load", 16).wavefronts[0] == 2  # uniform 16-byte: halves
    assert analyze_addresses([0] * 32, "store", 16).wavefronts[0] == 4  # stores never merge
    assert analyze_addresses([8 * (i // 2) for i in range(32)], "load", 8).wavefronts[0] == 1


def test_cp_async_depends_on_the_source_lines():
    """The sgemm A copy: four quarter-warps write 8 words each into banks 0..3 (measured on the H200)."""
    shared = [(k * 128 + q) * 4 for q in range(4) for k in range(8)]
    rows = [q * 16384 + 4 * k for q in range(4) for k in range(8)]  # each quarter: a different global row
    r = analyze_addresses(shared, "cp.async", 4, sources=rows)
    assert (int(r.wavefronts[0]), int(r.ideal_wavefronts[0])) == (11, 4)
    assert int(analyze_addresses(shared, "cp.async", 4).wavefronts[0]) == 8  # default: one line, coalesced
    groups = r.detail(0)
    assert [g.slots for g in groups] == [tuple(range(q, q + 8)) for q in range(4)]
    assert [g.source_lines for g in groups] == [(0,), (128,), (256,), (384,)] and {
        g.beat for g in groups
    } == {0}
    with pytest.raises(SpecError, match="only apply to cp.async"):
        analyze_addresses(shared, "load", 4, sources=rows)
    with pytest.raises(SpecError, match="not aligned"):
        analyze_addresses(shared, "cp.async", 4, sources=[2] * 32)


def test_misaligned_and_bad_ops_raise():
    with pytest.raises(SpecError, match="aligned"):
        analyze_addresses([4 * i + 2 for i in range(32)], "load", 4)
    with pytest.raises(SpecError, match="width"):
        analyze_addresses([0] * 32, "cp.async", 2)
    with pytest.raises(SpecError, match="32 addresses"):
        analyze_addresses([0] * 31, "load", 4)


def test_ldmatrix_ignores_unused_lanes():
    a = [16 * i if i < 8 else 128 * i for i in range(32)]
    assert analyze_addresses(a, "ldmatrix", 16, matrices=1).wavefronts[0] == 1


def test_detail_explains_the_count():
    r = analyze_addresses([128 * (i % 4) for i in range(32)], "load", 4)
    (ph,) = r.detail(0)
    assert ph.wavefronts == 4 and ph.words_per_bank[0] == 4
    assert sorted(sum(ph.lanes_by_wavefront, ())) == list(range(32))


addr_lists = st.lists(st.integers(0, 4095), min_size=32, max_size=32)


@settings(max_examples=200, deadline=None)
@given(
    addr_lists,
    st.sampled_from(
        [("load", 4), ("load", 8), ("load", 16), ("store", 8), ("cp.async", 16), ("ldmatrix", 16)]
    ),
)
def test_invariants(words, opw):
    op, w = opw
    a = np.asarray(words) * w
    r = analyze_addresses(a, op, w)
    wf, ideal = int(r.wavefronts[0]), int(r.ideal_wavefronts[0])
    assert 1 <= ideal <= wf <= 32 * max(1, w // 4)
    # batching instructions gives the same answer as one at a time
    r2 = analyze_addresses(np.stack([a, a[::-1]]), op, w)
    assert int(r2.wavefronts[0]) == wf
    assert int(r2.wavefronts[1]) == int(analyze_addresses(a[::-1], op, w).wavefronts[0])


@settings(max_examples=100, deadline=None)
@given(addr_lists)
def test_permuting_lanes_of_a_4_byte_access_changes_nothing(words):
    a = np.asarray(words) * 4
    perm = np.random.default_rng(sum(words)).permutation(32)
    assert (
        analyze_addresses(a, "load", 4).wavefronts[0] == analyze_addresses(a[perm], "load", 4).wavefronts[0]
    )


def test_idle_lanes_take_no_part():
    conflicting = [0] * 8 + [128 * i for i in range(24)]
    on = [i < 8 for i in range(32)]
    assert analyze_addresses(conflicting, "load", 4, active=on).wavefronts[0] == 1
    assert analyze_addresses(conflicting, "load", 4).wavefronts[0] == 24
    # a cp.async whose lanes 8..31 are predicated off: one group of 8 consecutive words
    r = analyze_addresses([4 * i if i < 8 else -1 for i in range(32)], "cp.async", 4, active=on)
    assert (int(r.wavefronts[0]), int(r.ideal_wavefronts[0])) == (1, 1)
    assert list(r.phase_of_lane[0]) == [0] * 8 + [-1] * 24
    with pytest.raises(SpecError, match="negative"):
        analyze_addresses([4 * i if i < 8 else -1 for i in range(32)], "cp.async", 4)


def test_fitted_and_held_out_scores_quoted_in_the_readme():
    """Fitted: 166 of the 174 measurable patterns exact, the other 8 within 3; held out: every measurable
    pattern agrees (within 0.1 wavefront, an L1 first-touch miss of cp.async). The README says exactly this."""
    measurable = [p for p in PATTERNS if p["name"] not in UNMEASURABLE]
    exact = sum(_model(p) == _measured(p) for p in measurable)
    assert (len(PATTERNS), len(measurable), exact) == (180, 174, 166)
    held = [p for p in HELDOUT if p.get("cache") != "cg"]  # 16-byte cp.async.cg: invisible to ncu
    agree = 0
    for p in held:
        active = None
        if "active_lanes" in p and p["op"] not in ("ldmatrix", "stmatrix"):
            active = np.isin(np.arange(32), p["active_lanes"])
        model = analyze_addresses(
            p["addresses"], p["op"], p["width"], p.get("matrices", 4), sources=p.get("global"), active=active
        ).wavefronts[0]
        agree += abs(float(model) - p["measured"]["wavefronts_per_instruction"]) <= 0.1
    assert (len(HELDOUT), len(held), agree) == (79, 78, 78)
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    assert "166 of the 174" in readme and "78 of the 78" in readme
