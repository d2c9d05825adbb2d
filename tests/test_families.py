"""Kernel families: parameters, constraints (refused with one line), shared memory, the launch plan, the
accesses written once as spec expressions, references. One source of truth per family."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

from smemtile.codegen.analysis import bank_table
from smemtile.codegen.render import launch_helper, render
from smemtile.families import FAMILIES, ContractViolation, configure, reconfigure
from smemtile.model.spec import spec_from_dict

# the 128 x 128 x 8 tile, 8 x 8 per thread, 2 blocks/SM (the family default is 256 x 128, 16 x 8)
SG128 = {"BM": 128, "TM": 8, "MIN_BLOCKS": 2}


def test_families_registered_and_complete():
    assert set(FAMILIES) == {"sgemm", "transpose", "stencil2d", "hgemm", "wgmma_gemm", "conv2d", "flash_attn"}
    for fam in FAMILIES.values():
        assert fam.test_sizes and fam.bench_sizes and fam.params and fam.host_args and fam.summary
        cfg = configure(fam, {}, {}, fam.default_arch)
        assert re.search(rf"\b{fam.kernel}\(", fam.source())  # the template is in its own .cu
        assert fam.launch(cfg).threads == fam.threads(cfg.params)


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
        ("sgemm", {"BK": 12}, {}, "sm_90", "12 is not allowed; allowed: 8, 16, 32"),
        ("sgemm", {"M": 0}, {}, "sm_90", "0 is out of range"),
        ("sgemm", {"M": 2**47}, {}, "sm_90", "out of range"),
        ("sgemm", {"alpha": float("nan")}, {}, "sm_90", "finite number"),
        ("sgemm", {"M": 3.5}, {}, "sm_90", "whole number"),
        ("sgemm", {"BM": True}, {}, "sm_90", "whole number"),
        ("transpose", {"TILE": 48}, {}, "sm_90", "48 is not allowed; allowed: 32, 64"),
        ("transpose", {"BLOCK_ROWS": 5}, {}, "sm_90", "must divide TILE"),
        ("transpose", {"rows": 65535 * 64 + 1}, {}, "sm_90", "grid y = 65536"),
        ("transpose", {"dtype": "f64"}, {}, "sm_90", "not one of f32, f16, bf16"),
        ("stencil2d", {"R": 5}, {}, "sm_90", "5 is not allowed"),
        ("stencil2d", {"BX": 12}, {}, "sm_90", "BX=12"),
        ("stencil2d", {"BX": 64, "BY": 8}, {"tile": {"pad": 1}}, "sm_90", None),  # fine
        ("sgemm", {"XX": 1}, {}, "sm_90", "no parameter 'XX'"),
        ("sgemm", {"BMM": 1}, {}, "sm_90", "did you mean 'BM'"),
        ("nosuch", {}, {}, "sm_90", "unknown kernel family"),
        ("sgemm", {}, {"Cs": {"pad": 4}}, "sm_90", "unknown buffer 'Cs'"),
        (
            "transpose",
            {"TILE": 32, "BLOCK_ROWS": 8},
            {"tile": {"swizzle": [3, 8, 3]}},
            "sm_90",
            "aligned blocks of 2048 elements",
        ),
    ],
)
def test_contract_violations_refused(family, params, layouts, arch, needle):
    if needle is None:
        configure(family, params, layouts, arch)
        return
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


def test_arch_dependent_defaults_and_reconfigure():
    cfg = configure("sgemm", {}, {"As": {"pad": 4}}, "sm_75")
    assert cfg.params["CP_ASYNC"] == 0 and cfg.params["STAGES"] == 2
    on90 = reconfigure(cfg, arch="sm_90")  # defaults re-derived for the new arch, the layout kept
    assert on90.params["CP_ASYNC"] == 1 and on90.params["STAGES"] == 3 and on90.layouts["As"].pad == 4
    assert configure("sgemm", SG128, {}, "sm_90").params["MIN_BLOCKS"] == 2
    assert configure("sgemm", {}, {}, "sm_90").params["MIN_BLOCKS"] == 1  # 16 x 8 accumulators


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
    assert [s.main for s in launch.steps] == [True]  # no split K: the GEMM alone
    if expected <= 48 * 1024:
        assert (launch.static_smem_bytes, launch.dynamic_smem_bytes) == (expected, 0)
    else:
        assert (launch.static_smem_bytes, launch.dynamic_smem_bytes) == (0, expected)


def test_split_k_launch_plan_prepares_c_first():
    cfg = configure(
        "sgemm", {"BM": 64, "TM": 8, "STAGES": 2, "SPLIT_K": 4, "M": 1000, "N": 1000, "K": 50000}, {}, "sm_90"
    )
    plan = FAMILIES["sgemm"].launch(cfg)
    assert plan.grid == (16 * 8, 4, 1)
    prep, main = plan.steps
    assert prep.kernel == "smemtile_sgemm_splitk_prepare" and not prep.main and main.main
    assert prep.grid == (4, 1000, 1) and prep.args[0] == ("C", "float*") and prep.args[4] == ("beta", "float")
    assert main.args[5] == (50000, "int")  # lda = K, evaluated


def test_transpose_and_stencil_launch():
    t = configure(
        "transpose",
        {"TILE": 32, "BLOCK_ROWS": 8, "rows": 100, "cols": 33, "dtype": "f16"},
        {"tile": {"pad": 2}},
        "sm_80",
    )
    lt = FAMILIES["transpose"].launch(t)
    assert lt.grid == (2, 4, 1) and lt.block == (32, 8, 1) and lt.static_smem_bytes == 32 * 34 * 2
    # a tall tile: TILE_Y input rows per tile, grid y over them
    tr = FAMILIES["transpose"]
    tt = configure(tr, {"TILE": 32, "BLOCK_ROWS": 8, "TILE_Y": 128, "rows": 300, "cols": 33}, {}, "sm_90")
    assert tr.launch(tt).grid == (2, 3, 1) and tr.smem_bytes(tt) == 128 * 32 * 4
    # default stencil: 32 x 8 threads, each a float4 of 4 rows: a 128 x 32 output tile, halo HX = 4 (whole float4s)
    s = configure("stencil2d", {"R": 3, "ny": 17, "nx": 65}, {}, "sm_80")
    ls = FAMILIES["stencil2d"].launch(s)
    assert ls.grid == (1, 1, 1) and ls.block == (32, 8, 1)
    assert ls.static_smem_bytes == (32 + 6) * (128 + 8) * 4
    # one output per thread
    s1 = configure("stencil2d", {"R": 3, "VEC": 1, "RY": 1, "ny": 17, "nx": 65}, {}, "sm_80")
    ls1 = FAMILIES["stencil2d"].launch(s1)
    assert ls1.grid == (3, 3, 1) and ls1.static_smem_bytes == (8 + 6) * (32 + 6) * 4


def _degree(family, params, layouts, name):
    cfg = configure(family, params, layouts, "sm_90")
    return {b.name: b.degree for b in bank_table(cfg)}[name]


def test_bank_table_baseline_vs_fixed():
    t32 = {"TILE": 32, "BLOCK_ROWS": 8, "VEC": 1}  # scalar path: a warp reads one tile column
    assert _degree("transpose", t32, {}, "tile_read") == 32
    assert _degree("transpose", t32, {"tile": {"pad": 1}}, "tile_read") == 1
    assert _degree("transpose", t32, {"tile": {"swizzle": [5, 0, 5]}}, "tile_read") == 1
    assert _degree("transpose", {"VEC": 1}, {}, "tile_read") == 32  # 64 x 4
    assert _degree("transpose", {"VEC": 1}, {"tile": {"pad": 1}}, "tile_read") == 1
    # default vector path (float4, 4 rows x 8 vectors per warp): 8 rows of one column group per read when dense;
    # the write is one 16-byte store per float4 when the layout keeps float4s whole, else four 4-byte stores
    fam = FAMILIES["transpose"]
    for p in ({}, {"TILE": 32, "BLOCK_ROWS": 8}):
        assert (_degree("transpose", p, {}, "tile_read"), _degree("transpose", p, {}, "tile_write")) == (8, 1)
        assert {a["name"]: a["width"] for a in fam.accesses(configure(fam, p, {}, "sm_90"))} == {
            "tile_write": 16,
            "tile_read": 4,
        }
        padded = configure(fam, p, {"tile": {"pad": 1}}, "sm_90")
        assert {a["name"]: a["width"] for a in fam.accesses(padded)} == {"tile_write": 4, "tile_read": 4}
        lay = {"tile": {"pad": 1}}
        assert (_degree("transpose", p, lay, "tile_read"), _degree("transpose", p, lay, "tile_write")) == (
            1,
            1,
        )
    # A_VEC=1 (default): transposed 4-byte stores of a float4, 16 rows x 2 k per warp: 2-way when dense
    for tile in ({}, SG128):
        assert _degree("sgemm", tile, {}, "As_copy") == 2
        assert _degree("sgemm", tile, {"As": {"pad": 4}}, "As_copy") == 1
        for lay in ({}, {"As": {"pad": 4}}):
            assert _degree("sgemm", tile, lay, "As_read") == 1
            assert _degree("sgemm", tile, lay, "Bs_read") == 1
    assert _degree("sgemm", SG128, {"As": {"swizzle": [3, 2, 5]}}, "As_copy") == 1
    # A_VEC=0: 4-byte cp.async, 8 consecutive k of one m per quarter-warp, each quarter from its own row of A:
    # 8 words of one bank per quarter, the quarters pipelined -> 11 wavefronts against 4 (measured on the H200)
    assert _degree("sgemm", {**SG128, "A_VEC": 0}, {}, "As_copy") == 2.75
    assert _degree("sgemm", {**SG128, "A_VEC": 0}, {"As": {"pad": 4}}, "As_copy") == 1
    # the stencil's halo fill: 40 x 34 float4s over 256 threads, 6 per thread; in the last round the lanes past the
    # tile store their previous float4 again, so all 8 warps issue all 6 stores with every lane on, conflict-free
    st = configure("stencil2d", {"R": 4}, {}, "sm_90")
    results = __import__("smemtile.codegen.analysis", fromlist=["x"]).access_results(st)
    res = {r.access.name: r for r in results}
    fill = res["halo_fill"]
    assert fill.bank.active.all() and len(fill.bank.wavefronts) == 6 * 8 and set(fill.bank.wavefronts) == {4}
    cells = {(int(r), int(c)) for r, c in zip(fill.rows.ravel(), fill.cols.ravel(), strict=True)}
    # every float4 of the halo tile, once or twice
    assert cells == {(r, 4 * v) for r in range(40) for v in range(34)}
    # the reads: RY + 2R = 12 column float4s and one float4 each side of each of the RY = 4 rows, per thread
    assert {n: len(res[n].bank.wavefronts) // 8 for n in ("column", "sides")} == {"column": 12, "sides": 8}
    assert _degree("stencil2d", {"R": 4}, {}, "sides") == 1
    # pad 1 breaks the float4s into 4-byte accesses 16 bytes apart per lane: 4-way (measured: tests/test_ncu.py)
    assert _degree("stencil2d", {"R": 4}, {"tile": {"pad": 1}}, "column") == 4


@pytest.mark.parametrize(
    "family, params, lay",
    [
        ("sgemm", SG128, {}),
        ("sgemm", {**SG128, "A_VEC": 0}, {"As": {"pad": 4}}),
        ("sgemm", {"CP_ASYNC": 0}, {}),
        ("transpose", {"TILE": 32, "BLOCK_ROWS": 8}, {"tile": {"pad": 1}}),
        ("transpose", {"dtype": "f16"}, {}),
        ("stencil2d", {"R": 2, "BX": 16, "BY": 16}, {"tile": {"pad": 3}}),
    ],
)
def test_family_spec_round_trips_through_yaml(family, params, lay):
    """The family's spec document (generate --json's `spec` and `kernel_accesses`) parses back to the same
    analysis, through YAML text."""
    import yaml

    fam = FAMILIES[family]
    cfg = configure(fam, params, lay, "sm_90")
    doc = yaml.safe_load(yaml.safe_dump(fam.spec_doc(cfg)))
    again = {
        b.name: (b.wavefronts, b.ideal, b.instructions)
        for b in __import__("smemtile.codegen.analysis", fromlist=["x"]).summarize(
            __import__("smemtile.model.analysis", fromlist=["x"]).analyze_spec(spec_from_dict(doc))
        )
    }
    assert again == {b.name: (b.wavefronts, b.ideal, b.instructions) for b in bank_table(cfg)}
    # and the parsed spec's own document is a fixed point
    s1 = spec_from_dict(doc)
    assert spec_from_dict(s1.to_doc()).to_doc() == s1.to_doc()


def test_references_small():
    rng = np.random.default_rng(0)
    sg = FAMILIES["sgemm"]
    cfg = configure(sg, {"M": 5, "N": 3, "K": 4, "alpha": 2.0, "beta": 0.5}, {}, "sm_90")
    x = sg.make_inputs(cfg, rng)
    assert np.allclose(sg.reference(cfg, x), 2.0 * x["A"].astype(float) @ x["B"] + 0.5 * x["C"])
    st2 = FAMILIES["stencil2d"]
    c2 = configure(st2, {"ny": 3, "nx": 4}, {}, "sm_90")
    inp = {"in": np.ones((3, 4), np.float32), "coeffs": np.array([1.0, 1.0], np.float32)}
    out = st2.reference(c2, inp)
    assert out[1, 1] == 5 and out[0, 0] == 3  # zero boundary: corner has 2 neighbours
    tr = FAMILIES["transpose"]
    c3 = configure(tr, {"rows": 3, "cols": 5, "dtype": "f16"}, {}, "sm_90")
    a = tr.make_inputs(c3, rng)["in"]
    assert tr.reference(c3, {"in": a}).shape == (5, 3)


def test_no_family_branches_outside_the_families():
    """Nothing outside smemtile/families asks which family it has (one plug-in per family)."""
    import smemtile

    root = __import__("pathlib").Path(smemtile.__file__).parent
    pat = re.compile(
        r"""(family|\.name|fam)\s*[!=]=\s*["'](sgemm|transpose|stencil2d)["']|["'](sgemm|transpose|stencil2d)["']\s*[!=]="""
    )
    bad = []
    for f in root.rglob("*.py"):
        if "families" in f.parts:
            continue
        for i, line in enumerate(f.read_text().splitlines(), 1):
            if pat.search(line):
                bad.append(f"{f.relative_to(root)}:{i}: {line.strip()}")
    assert not bad, bad


# ---- the generated host helper computes the launch plan's numbers ----------------------------------------


SHAPES = [
    (1000, 1000, 50000),
    (4095, 4097, 1023),
    (64, 8192, 4096),
    (8192, 64, 4096),
    (33, 4, 1),
    (4096, 4096, 4096),
]


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize("split, repack", [(1, 2), (4, 2), (1, 1), (4, 1)])
def test_helper_grid_equals_the_plan_for_many_shapes(tmp_path, split, repack):
    """The C++ grid expressions of launch_sgemm(), compiled with g++ and evaluated for many run-time sizes,
    give exactly the grids Family.launch computes (what --json, verify and tune use); with REPACK, the repacking
    steps run exactly for the sizes whose K or N is not a multiple of 4, in the helper as in the plan."""
    fam = FAMILIES["sgemm"]
    cfg = configure(fam, {"BM": 64, "TM": 8, "STAGES": 2, "SPLIT_K": split, "REPACK": repack}, {}, "sm_90")
    helper = launch_helper(cfg)
    grids = re.findall(r"const long long gx = (.*), gy = (.*), gz = (.*);", helper)
    guards = re.findall(r"    if \((.*)\) \{\n        const long long gx", helper)
    assert len(grids) == 1 + (split > 1) + 2 * (repack == 1)
    conds = ["1"] * len(grids)  # which steps run: the guarded ones in the order the helper has them
    for i, g in enumerate(grids):
        m = re.search(r"    if \((.*)\) \{\n        const long long gx = " + re.escape(g[0]), helper)
        if m:
            conds[i] = m.group(1)
    assert len([c for c in conds if c != "1"]) == len(guards)
    lines = ["#include <cstdio>", "int main() {"]
    for m, n, k in SHAPES:
        lines.append(f"  {{ int M = {m}, N = {n}, K = {k}; (void)K;")
        # the dense layout at cudaMalloc'd (256-byte aligned) pointers, as the dense overload passes it
        lines.append(
            "    int lda = K, ldb = N; long long A_align = 256, B_align = 256; (void)lda; (void)ldb;"
        )
        lines.append("    (void)A_align; (void)B_align;")
        for (gx, gy, gz), cond in zip(grids, conds, strict=True):
            lines.append(
                f'    if ({cond}) printf("%lld %lld %lld\\n", (long long)({gx}), (long long)({gy}), (long long)({gz}));'
            )
        lines.append("  }")
    lines += ["  return 0;", "}"]
    src = tmp_path / "grid.cpp"
    src.write_text("\n".join(lines))
    subprocess.run(["g++", "-o", str(tmp_path / "grid"), str(src)], check=True)
    out = subprocess.run([str(tmp_path / "grid")], capture_output=True, text=True, check=True).stdout.split(
        "\n"
    )
    got = [tuple(map(int, ln.split())) for ln in out if ln.strip()]
    want = []
    for m, n, k in SHAPES:
        plan = fam.launch(reconfigure(cfg, problem={"M": m, "N": n, "K": k}))
        want += [s.grid for s in plan.steps]
    assert got == want


def test_rendered_source_is_what_nvrtc_compiles():
    gk = render(configure("sgemm", {}, {"As": {"pad": 4}}, "sm_90"))
    assert gk.source.endswith(gk.body) and gk.snippet in gk.body
    assert "template __global__ void sgemm<256, 128, 8, 16, 8, 3, true, 4, 0, 0, 0," in gk.body
    assert '#include "smem_layout.cuh"' not in gk.body  # inlined: the file stands alone
