"""Family contracts: parameters, constraints (refused with one line), shared-memory formula, launch, references."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smemtile.codegen import FAMILIES, ContractViolation, configure
from smemtile.codegen.analysis import bank_table
from smemtile.codegen.contract import TileLayout

# the 128 x 128 x 8 tile, 8 x 8 per thread, 2 blocks/SM (the sample's; the family default is 256 x 128, 16 x 8)
SG128 = {"BM": 128, "TM": 8, "MIN_BLOCKS": 2}


def test_families_registered():
    assert set(FAMILIES) == {"sgemm", "transpose", "stencil2d"}
    for fam in FAMILIES.values():
        assert fam.test_sizes and fam.bench_sizes and fam.params


@pytest.mark.parametrize(
    ("family", "params", "layouts", "arch", "needle"),
    [
        ("sgemm", {"BM": 100}, {}, "sm_90", "BM=100 must be"),  # warp tile does not fit
        ("sgemm", {"TM": 4}, {}, "sm_90", "do not split evenly over 1024 threads"),
        ("sgemm", {"CP_ASYNC": 1}, {}, "sm_75", "cp.async needs sm_80"),
        ("sgemm", {"STAGES": 1}, {}, "sm_90", "at least 2 stages"),
        ("sgemm", {"BK": 32, "STAGES": 8}, {"As": {"pad": 4}}, "sm_86", "exceeds the sm_86 opt-in limit"),
        ("sgemm", {}, {"As": {"pad": 1}}, "sm_90", "multiple of 4 floats"),
        ("sgemm", {}, {"As": {"swizzle": [3, 0, 5]}}, "sm_90", "splits float4s"),
        ("sgemm", {"BK": 12}, {}, "sm_90", "multiple of 8"),
        ("transpose", {"TILE": 48}, {}, "sm_90", "must be 32 or 64"),
        ("transpose", {"BLOCK_ROWS": 5}, {}, "sm_90", "must divide TILE"),
        ("stencil2d", {"R": 5}, {}, "sm_90", "radius must be 1..4"),
        ("stencil2d", {"BX": 12}, {}, "sm_90", "BX=12"),
        ("sgemm", {"XX": 1}, {}, "sm_90", "no parameter 'XX'"),
        ("nosuch", {}, {}, "sm_90", "unknown kernel family"),
    ],
)
def test_contract_violations_refused(family, params, layouts, arch, needle):
    with pytest.raises(ContractViolation) as e:
        configure(family, params, layouts, arch)
    msg = str(e.value)
    assert needle in msg
    assert "\n" not in msg
    assert e.value.exit_code == 2


def test_threads_must_cover_tile():
    with pytest.raises(ContractViolation, match=r"BM\*BN = 32768 but threads\*TM\*TN = 16384"):
        configure("sgemm", {}, {}, "sm_90", threads=128)
    configure("sgemm", {}, {}, "sm_90", threads=256)


def test_sm75_defaults_to_register_double_buffering():
    cfg = configure("sgemm", {}, {"As": {"pad": 4}}, "sm_75")
    assert cfg.params["CP_ASYNC"] == 0 and cfg.params["STAGES"] == 2


@pytest.mark.parametrize(
    ("params", "pad_a", "expected"),
    [
        ({}, 4, 3 * (8 * 260 + 8 * 128) * 4),  # default: 256 x 128 x 8, 3 stages
        ({"BK": 16, "STAGES": 3}, 0, 3 * (16 * 256 + 16 * 128) * 4),
        ({"BK": 16, "STAGES": 4}, 4, 4 * (16 * 260 + 16 * 128) * 4),
    ],
)
def test_sgemm_smem_formula_and_launch(params, pad_a, expected):
    cfg = configure("sgemm", {**params, "M": 1000, "N": 1001, "K": 7}, {"As": {"pad": pad_a}}, "sm_90")
    fam = FAMILIES["sgemm"]
    assert fam.smem_bytes(cfg) == expected
    launch = fam.launch(cfg)
    assert launch.grid == (4 * 8, 1, 1) and launch.block == (256, 1, 1)
    if expected <= 48 * 1024:
        assert (launch.static_smem_bytes, launch.dynamic_smem_bytes) == (expected, 0)
    else:
        assert (launch.static_smem_bytes, launch.dynamic_smem_bytes) == (0, expected)


def test_transpose_and_stencil_launch():
    t = configure(
        "transpose",
        {"TILE": 32, "BLOCK_ROWS": 8, "rows": 100, "cols": 33, "dtype": "f16"},
        {"tile": {"pad": 2}},
        "sm_80",
    )
    lt = FAMILIES["transpose"].launch(t)
    assert lt.grid == (2, 4, 1) and lt.block == (32, 8, 1) and lt.static_smem_bytes == 32 * 34 * 2
    s = configure("stencil2d", {"R": 3, "ny": 17, "nx": 65}, {}, "sm_80")
    ls = FAMILIES["stencil2d"].launch(s)
    assert ls.grid == (3, 3, 1) and ls.static_smem_bytes == (8 + 6) * (32 + 6) * 4


def test_bank_table_baseline_vs_fixed():
    def degree(family, params, layouts, name):
        cfg = configure(family, params, layouts, "sm_90")
        return {b.name: b.degree for b in bank_table(FAMILIES[family], cfg)}[name]

    t32 = {"TILE": 32, "BLOCK_ROWS": 8, "VEC": 1}  # scalar path: a warp reads one tile column
    assert degree("transpose", t32, {}, "tile_read") == 32
    assert degree("transpose", t32, {"tile": {"pad": 1}}, "tile_read") == 1
    assert degree("transpose", t32, {"tile": {"swizzle": [5, 0, 5]}}, "tile_read") == 1
    assert degree("transpose", {"VEC": 1}, {}, "tile_read") == 32  # 64 x 4
    assert degree("transpose", {"VEC": 1}, {"tile": {"pad": 1}}, "tile_read") == 1
    assert degree("transpose", {"VEC": 1}, {"tile": {"swizzle": [5, 0, 6]}}, "tile_read") == 1
    # default vector path (float4, 4 rows x 8 vectors per warp): 8 rows of one column group per read when dense;
    # the write is one 16-byte store per float4 when the layout keeps float4s whole (dense: conflict-free,
    # 4 wavefronts = 4 quarter-warp phases), else four 4-byte stores (pad 1)
    for p in ({}, {"TILE": 32, "BLOCK_ROWS": 8}):
        assert (degree("transpose", p, {}, "tile_read"), degree("transpose", p, {}, "tile_write")) == (8, 1)
        widths = {a.name: a.width for a in FAMILIES["transpose"].accesses(configure("transpose", p, {}, "sm_90"))}
        assert widths == {"tile_write": 16, "tile_read": 4}
        padded = configure("transpose", p, {"tile": {"pad": 1}}, "sm_90")
        assert {a.name: a.width for a in FAMILIES["transpose"].accesses(padded)} == {"tile_write": 4, "tile_read": 4}
        lay = {"tile": {"pad": 1}}
        assert (degree("transpose", p, lay, "tile_read"), degree("transpose", p, lay, "tile_write")) == (1, 1)
    # A_VEC=1 (default): transposed 4-byte stores of a float4, 16 rows x 2 k per warp: 2-way when dense
    for tile in ({}, SG128):  # the default 256 x 128 tile and the 128 x 128 one
        assert degree("sgemm", tile, {}, "As_copy") == 2
        assert degree("sgemm", tile, {"As": {"pad": 4}}, "As_copy") == 1
        for lay in ({}, {"As": {"pad": 4}}):
            assert degree("sgemm", tile, lay, "As_read") == 1
            assert degree("sgemm", tile, lay, "Bs_read") == 1
    assert degree("sgemm", SG128, {"As": {"swizzle": [3, 2, 5]}}, "As_copy") == 1
    # A_VEC=0: 4-byte cp.async, 8 consecutive k of one m per quarter-warp, each quarter from its own row of A:
    # 8 words of one bank per quarter, the quarters pipelined -> 11 wavefronts against 4 (measured on the H200)
    assert degree("sgemm", {**SG128, "A_VEC": 0}, {}, "As_copy") == 2.75
    assert degree("sgemm", {**SG128, "A_VEC": 0}, {"As": {"pad": 4}}, "As_copy") == 1


def test_tile_layout_from_model_layout():
    from smemtile.model.layout import Layout, Swizzle

    assert TileLayout.of(Layout(pad=4)) == TileLayout(pad=4)
    assert TileLayout.of(Layout(swizzle=Swizzle(3, 2, 5))) == TileLayout(0, 3, 2, 5)
    assert TileLayout.of({"swizzle": [5, 0, 5]}) == TileLayout(0, 5, 0, 5)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 64),
    cols=st.sampled_from([8, 32, 64, 128]),
    pad=st.integers(0, 8),
    b=st.integers(0, 3),
    m=st.integers(0, 3),
    extra=st.integers(0, 3),
)
def test_tile_layout_matches_model_and_is_a_bijection(rows, cols, pad, b, m, extra):
    from smemtile.model.layout import Layout, Swizzle

    s = b + extra
    tl = TileLayout(pad, b, m, s)
    if (rows * (cols + pad)) % (1 << (m + b)):
        return  # the contract refuses such a swizzle
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    ours = tl.offsets(r, c, cols)
    model = Layout(pad=pad, swizzle=Swizzle(b, m, s) if b else None).offset(r, c, cols)
    assert np.array_equal(ours, np.asarray(model))
    assert len(np.unique(ours)) == rows * cols
    assert ours.max() < rows * (cols + pad)


def test_references_small():
    rng = np.random.default_rng(0)
    sg = FAMILIES["sgemm"]
    q = {"M": 5, "N": 3, "K": 4, "alpha": 2.0, "beta": 0.5}
    x = sg.make_inputs(q, rng)
    assert np.allclose(sg.reference(q, x), 2.0 * x["A"].astype(float) @ x["B"] + 0.5 * x["C"])
    st2 = FAMILIES["stencil2d"]
    q2 = {"ny": 3, "nx": 4}
    inp = {"in": np.ones((3, 4), np.float32), "coeffs": np.array([1.0, 1.0], np.float32)}
    out = st2.reference(q2, inp)
    assert out[1, 1] == 5 and out[0, 0] == 3  # zero boundary: corner has 2 neighbours
    tr = FAMILIES["transpose"]
    a = tr.make_inputs({"rows": 3, "cols": 5, "dtype": "f16"}, rng)["in"]
    assert tr.reference({}, {"in": a}).shape == (5, 3)


def test_no_cuda_import_in_codegen():
    import subprocess
    import sys

    code = (
        "import sys, smemtile.codegen, smemtile.codegen.render, smemtile.codegen.checklist\n"
        "bad = [m for m in sys.modules if m.startswith('cuda')]\n"
        "raise SystemExit(1 if bad else 0)\n"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def _checklist(src_edit=None, **cfg_kw):
    from dataclasses import replace

    from smemtile.codegen.checklist import evaluate
    from smemtile.codegen.render import render

    gk = render(
        configure("sgemm", {}, {"As": {"pad": 4}}, "sm_90"), baseline=configure("sgemm", {}, {}, "sm_90")
    )
    if src_edit:
        gk = replace(gk, source=src_edit(gk.source))
    return {i.id: i for i in evaluate(gk)}


def test_checklist_passes_for_the_shipped_pipeline():
    items = _checklist()
    for key in (
        "bank_index",
        "pad_dimension",
        "padded_stride",
        "commit_group",
        "wait_group",
        "barrier_after_wait",
    ):
        assert items[key].status == "pass", items[key]
    assert items["ring_index"].status == "pass"
    assert items["ncu"].status == "n/a"
    assert "wait_group(1) with 3 stages" in items["wait_group"].reason


@pytest.mark.parametrize(
    ("edit", "item"),
    [
        (
            lambda s: s.replace(
                "cp_async_wait<STAGES - 2>();  // tile kt", "cp_async_wait<STAGES - 1>();  // tile kt"
            ),
            "wait_group",
        ),
        (
            lambda s: s.replace("has landed\n            __syncthreads();", "has landed\n"),
            "barrier_after_wait",
        ),
        (
            lambda s: s.replace("            write_slot = (write_slot + 1 == STAGES)", "            // "),
            "ring_index",
        ),
    ],
)
def test_checklist_catches_a_broken_pipeline(edit, item):
    """The pipeline items read the kernel text: breaking the code fails the item."""
    assert _checklist(edit)[item].status == "fail"


@pytest.mark.parametrize("lay", [{}, {"As": {"pad": 4}}, {"As": {"swizzle": [3, 2, 5]}}])
def test_sgemm_kernel_accesses_as_spec_agree_with_contract(lay):
    """The spec expressions the contract publishes describe the same accesses as its numpy arrays: the
    project's spec analysis and the contract's bank table give the same worst wavefronts."""
    import yaml as _yaml

    from smemtile.model.analysis import analyze_spec
    from smemtile.model.spec import spec_from_dict

    cfg = configure("sgemm", SG128, lay, "sm_90")
    fam = FAMILIES["sgemm"]
    accesses = []
    for a in fam.accesses(cfg):
        d = {"name": a.name, "buffer": a.buffer, "op": a.op, "width": a.width, **a.expr}
        d["row"] = d["row"].replace("(warp*32+lane)", "tid")
        d["col"] = d["col"].replace("(warp*32+lane)", "tid")
        accesses.append(d)
    layout = {"pad": cfg.layouts["As"].pad}
    if cfg.layouts["As"].swizzled:
        layout = {"swizzle": [cfg.layouts["As"].swz_b, cfg.layouts["As"].swz_m, cfg.layouts["As"].swz_s]}
    doc = {
        "arch": "sm_90",
        "threads": 256,
        "tile": {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8},
        "buffers": [
            {"name": "As", "dtype": "f32", "shape": ["BK", "BM"], "layout": layout},
            {"name": "Bs", "dtype": "f32", "shape": ["BK", "BN"]},
        ],
        "accesses": accesses,
    }
    spec = spec_from_dict(_yaml.safe_load(_yaml.safe_dump(doc)))
    theirs = {r.access.name: (r.wavefronts, r.ideal) for r in analyze_spec(spec)}
    ours = {b.name: (b.wavefronts, b.ideal) for b in bank_table(fam, cfg)}
    assert theirs == ours


@pytest.mark.parametrize("params", [{"TILE": 32, "BLOCK_ROWS": 8}, {"TILE": 64, "BLOCK_ROWS": 4}])
@pytest.mark.parametrize("lay", [{}, {"tile": {"pad": 1}}])
def test_transpose_kernel_accesses_as_spec_agree_with_contract(params, lay):
    from smemtile.model.analysis import analyze_spec
    from smemtile.model.spec import spec_from_dict

    cfg = configure("transpose", params, lay, "sm_90")
    fam = FAMILIES["transpose"]
    accesses = [
        {"name": a.name, "buffer": a.buffer, "op": a.op, "width": a.width, **a.expr}
        for a in fam.accesses(cfg)
    ]
    for d in accesses:
        d["row"], d["col"] = (d[k].replace("(warp*32+lane)", "tid") for k in ("row", "col"))
    doc = {
        "arch": "sm_90",
        "threads": params["TILE"] * params["BLOCK_ROWS"],
        "tile": params,
        "buffers": [
            {
                "name": "tile",
                "dtype": "f32",
                "shape": ["TILE", "TILE"],
                "layout": {"pad": cfg.layouts["tile"].pad},
            }
        ],
        "accesses": accesses,
    }
    theirs = {r.access.name: (r.wavefronts, r.ideal) for r in analyze_spec(spec_from_dict(doc))}
    assert theirs == {b.name: (b.wavefronts, b.ideal) for b in bank_table(fam, cfg)}
