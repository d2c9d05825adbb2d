"""sgemm's REPACK: unaligned A (K % 4 != 0) and B (N % 4 != 0) copied into a workspace with 16-byte rows before
the GEMM. The rule, the launch plan (steps, workspace regions, leading dimensions), the generated helper (its
workspace size equals the plan's for many sizes, compiled with g++), and the model's time."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from smemtile.codegen.render import launch_helper, render
from smemtile.families import FAMILIES, configure, reconfigure
from smemtile.families.sgemm.tiles import repack_bytes, repack_pays, simt_time
from smemtile.model.gemm_tiles import TileConfig

FAM = FAMILIES["sgemm"]
TILE = {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 16, "STAGES": 2, "MIN_BLOCKS": 2}
PAD4 = {"As": {"pad": 4}}


def cfg(problem: dict, **params):
    return configure("sgemm", {**TILE, **params, **problem}, PAD4, "sm_90")


@pytest.mark.parametrize(
    "shape, on",
    [
        ((4095, 4097, 1023), True),  # 2 M N K / bytes = 512
        ((2999, 3001, 3003), True),  # 375
        ((4096, 4096, 4096), False),  # aligned: nothing to repack
        ((767, 769, 771), True),  # 96: measured 0.72x cuBLAS with REPACK, 0.54x without
        (
            (256, 4097, 4095),
            False,
        ),  # 60: measured 0.78x with, 0.84x without (the copies cost more than they save)
        ((4097, 256, 4095), False),  # 64 (A alone): 0.74x with, 0.84x without
        ((64, 4097, 4095), False),  # 16: skinny, B's copy is as large as the GEMM's work
        ((4096, 4096, 4095), True),  # A alone
        ((1000, 1001, 7), False),  # 125 flops per byte, but 14 MFLOP: the copies' launches cost more
    ],
)
def test_the_rule(shape, on):
    assert repack_pays(*shape) is on
    assert (repack_bytes(*shape) > 0) is (shape[1] % 4 != 0 or shape[2] % 4 != 0)


def test_plan_repacks_both_operands_of_an_unaligned_problem():
    c = cfg({"M": 4095, "N": 4097, "K": 1023})
    assert FAM.auto_values(c) == {"RAGGED": 2, "REPACK": 1}  # the GEMM gets 16-byte rows: no RAGGED loop
    plan = FAM.launch(c)
    assert [s.kernel.split("<")[0] for s in plan.steps] == ["smemtile_sgemm_repack"] * 2 + ["sgemm"]
    ws = {w.name: w for w in plan.workspace}
    assert (ws["Ap"].offset, ws["Ap"].nbytes) == (0, 4095 * 1024 * 4)
    assert (ws["Bp"].offset, ws["Bp"].nbytes) == (4095 * 1024 * 4, 1023 * 4100 * 4)  # 16773120: 256-aligned
    assert plan.workspace_bytes == 4095 * 1024 * 4 + 1023 * 4100 * 4
    rep_a, rep_b, main = ([v for v, _ in s.args] for s in plan.steps)
    assert rep_a == ["A", 4095, 1023, 1023, "Ap", 1024]
    assert rep_b == ["B", 1023, 4097, 4097, "Bp", 4100]
    assert plan.steps[0].grid == (1, 4095, 1) and plan.steps[1].grid == (5, 1023, 1)
    # the GEMM: M, N, K unchanged, A and B from the workspace with ldA 1024 and ldB 4100, C as the user's
    assert main == [4095, 4097, 1023, "alpha", "Ap", 1024, "Bp", 4100, "beta", "C", 4097]
    assert plan.to_dict()["workspace_bytes"] == plan.workspace_bytes


def test_plan_repacks_only_the_unaligned_operand():
    plan = FAM.launch(cfg({"M": 4096, "N": 4097, "K": 4096}))
    assert [s.kernel.split("<")[0] for s in plan.steps] == ["smemtile_sgemm_repack", "sgemm"]
    ws = {w.name: w for w in plan.workspace}
    assert not ws["Ap"].active and ws["Ap"].fallback == "A" and ws["Bp"].active
    assert plan.workspace_bytes == 4096 * 4100 * 4
    main = [v for v, _ in plan.steps[-1].args]
    assert main[4:8] == ["Ap", 4096, "Bp", 4100]  # Ap resolves to the user's A (launcher and helper alike)


def test_aligned_and_forced_off_plans_are_the_plain_gemm():
    for c in (cfg({"M": 4096, "N": 4096, "K": 4096}), cfg({"M": 4095, "N": 4097, "K": 1023}, REPACK=2)):
        plan = FAM.launch(c)
        assert [s.main for s in plan.steps] == [True] and plan.workspace == () and plan.workspace_bytes == 0
        assert [v for v, _ in plan.steps[0].args][4:8] == ["A", c.problem["K"], "B", c.problem["N"]]
    # an aligned spec's helper has no workspace parameter and is the same text with REPACK on or off
    aligned = {"M": 4096, "N": 4096, "K": 4096}
    assert "workspace" not in launch_helper(cfg(aligned)) and launch_helper(cfg(aligned)) == launch_helper(
        cfg(aligned, REPACK=2)
    )


def test_analysis_sees_the_repacked_b_copy():
    """With B repacked, the kernel copies B by 16-byte cp.async (ldB % 4 == 0): the spec says so, its source
    expression uses ldB = ceil(N/4)*4; without REPACK the 4-byte copy of an unaligned B, from the user's rows
    (leading dimension ldb)."""
    on = {a["name"]: a for a in FAM.accesses(cfg({"M": 4095, "N": 4097, "K": 1023}))}
    off = {a["name"]: a for a in FAM.accesses(cfg({"M": 4095, "N": 4097, "K": 1023}, REPACK=2))}
    assert (on["Bs_copy"]["width"], off["Bs_copy"]["width"]) == (16, 4)
    assert "cdiv(N, 4) * 4" in on["Bs_copy"]["source"] and "* ldb +" in off["Bs_copy"]["source"]
    assert "As_copy_ragged" not in on


def test_header_says_what_auto_chose_and_the_workspace():
    k = render(cfg({"M": 4095, "N": 4097, "K": 1023}))
    assert "REPACK=0 (auto: 1)" in k.header and "RAGGED=0 (auto: 2)" in k.header
    assert "// Workspace Ap: 16773120 bytes at offset 0" in k.header
    assert "33550320 in all (launch_sgemm_workspace_bytes())" in k.header
    assert re.search(
        r"inline cudaError_t launch_sgemm\(.*cudaStream_t stream = 0, void\* workspace = nullptr, "
        r"size_t workspace_bytes = 0\)",
        k.body,
    )
    assert "cudaMallocAsync" in k.body and "cudaFreeAsync" in k.body


SHAPES = [
    (4095, 4097, 1023),
    (4096, 4097, 4096),
    (4096, 4096, 4095),
    (1, 1, 1),
    (33, 4, 1),
    (4096, 4096, 4096),
    (7, 65537, 3),
    (100000, 5, 9),
]


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_helper_workspace_bytes_equal_the_plan_for_many_shapes(tmp_path):
    """launch_sgemm_workspace_bytes(), compiled with g++, gives the plan's workspace_bytes for every size (the
    helper of a spec that repacks repacks whatever unaligned sizes it is called with, as REPACK=1 plans do)."""
    helper = launch_helper(cfg({"M": 4095, "N": 4097, "K": 1023}))
    fn = helper[helper.index("inline size_t launch_sgemm_workspace_bytes") : helper.index("// Launch plan")]
    calls = "\n".join(
        f'  printf("%zu\\n", launch_sgemm_workspace_bytes({m}, {n}, {k}, {k}, {n}, {n}, nullptr, 256, 256));'
        for m, n, k in SHAPES
    )
    src = tmp_path / "ws.cpp"
    src.write_text(f"#include <cstdio>\n#include <cstddef>\n{fn}\nint main() {{\n{calls}\n  return 0;\n}}\n")
    subprocess.run(["g++", "-o", str(tmp_path / "ws"), str(src)], check=True)
    got = [
        int(x)
        for x in subprocess.run(
            [str(tmp_path / "ws")], capture_output=True, text=True, check=True
        ).stdout.split()
    ]
    base = cfg({"M": 4095, "N": 4097, "K": 1023}, REPACK=1)
    assert launch_helper(base) == helper
    want = [
        FAM.launch(reconfigure(base, problem={"M": m, "N": n, "K": k})).workspace_bytes for m, n, k in SHAPES
    ]
    assert got == want and got[0] == 33550320 and got[5] == 0


def test_model_time_of_a_repacked_problem():
    """The model prices REPACK as the aligned GEMM plus the copies at the measured bandwidth; without it, the
    unaligned GEMM (its fitted penalty)."""
    c = TileConfig(128, 128, 8, 4, 2, 8, 8, 16, 2)
    on = simt_time(4095, 4097, 1023, c, 128, 2, 132, repack=True)
    off = simt_time(4095, 4097, 1023, c, 128, 2, 132, repack=False)
    aligned = simt_time(4095, 4100, 1024, c, 128, 2, 132, repack=False)
    assert off["t_repack"] == 0 and on["t_repack"] > 0
    assert on["time"] == pytest.approx(aligned["time"] + on["t_repack"], rel=1e-9)
    assert on["time"] < off["time"]
    assert simt_time(4095, 4097, 1023, c, 128, 2, 132)["time"] == on["time"]  # auto: the rule says on


def test_copies_follow_the_users_leading_dimension():
    """A sub-view B (ldb = N + 3) has rows that are not 16-byte aligned although N is a multiple of 4: the
    kernel copies it 4 bytes at a time, and the spec says so, with the sources in the user's rows."""
    dense = {a["name"]: a for a in FAM.accesses(cfg({"M": 256, "N": 256, "K": 256}, REPACK=2))}
    view = {a["name"]: a for a in FAM.accesses(cfg({"M": 256, "N": 256, "K": 256, "ldb": 259}, REPACK=2))}
    assert (dense["Bs_copy"]["width"], view["Bs_copy"]["width"]) == (16, 4)
