"""`verify --ncu`: the ncu page parsers and the SASS -> family access mapping on CSVs saved from the H200
(tests/data/ncu, produced by bench/verify_ncu_h200.sh), the missing-ncu path, and (marked gpu) a real run."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner
from conftest import ROOT, run_cli

from smemtile.cli import main
from smemtile.families import FAMILIES, reconfigure
from smemtile.gpu import ncu as N
from smemtile.gpu import ncu_compare as C
from smemtile.gpu import ncu_parse as P
from smemtile.pipeline.fixes import variants
from smemtile.pipeline.specs import load as load_spec

DATA = ROOT / "tests" / "data" / "ncu"


# The kernel paths the first fixtures were measured with (2026-11-29): the 4-byte cp.async A copy of sgemm and
# the scalar transpose (the defaults since then are the float4 A copy and 16-byte transposes). The
# sgemm_default_* fixtures were measured later with the default kernel (float4 A copy through registers).
FIXTURE_PARAMS = {"sgemm": {"A_VEC": 0}, "transpose": {"VEC": 1}}
# the sgemm_default_* fixtures were measured with the sample's tile of that day (256x128x8, 16x8, 3 stages)
# and the transpose_32x32_* ones with its 32 x 32 tile, 32 x 8 block (64 x 64, 64 x 8 since issue 20; square tiles
# issue the same instructions)
FIXTURE_TILES = {
    "sgemm_default": {"BM": 256, "BN": 128, "BK": 8, "TM": 16, "TN": 8, "STAGES": 3, "MIN_BLOCKS": 1},
    "transpose_32x32": {"TILE": 32, "BLOCK_ROWS": 8},
}


def small_cfg(sample: str, variant: str, layouts: dict | None = None, pin: bool = True):
    """The configuration `verify --ncu` profiles; ``layouts`` pins the layout a fixture was measured with."""
    c = variants(load_spec(ROOT / "samples" / f"{sample}.yaml"))[variant]
    c = reconfigure(c, params=FIXTURE_TILES.get(sample, {}))
    full = reconfigure(c, params=FIXTURE_PARAMS.get(c.family, {}) if pin else {}, layouts=layouts or {})
    return reconfigure(full, problem=FAMILIES[c.family].small_problem(full))


def load(stem: str):
    rows, info = P.parse_source_csv((DATA / f"{stem}_source.csv").read_text())
    metrics = P.parse_raw_csv((DATA / f"{stem}_raw.csv").read_text())
    return rows, info, metrics


# ---- parsing ------------------------------------------------------------------------------------------------


def test_source_page_columns_and_rows():
    rows, info, _ = load("transpose_32x32_baseline")
    assert info["executed"] == "Instructions Executed"
    assert info["wavefronts"] == "L1 Wavefronts Shared"
    assert info["ideal"] == "L1 Wavefronts Shared Ideal"
    lds = [r for r in rows if r.source.startswith("LDS")]
    sts = [r for r in rows if "STS" in r.source]
    assert len(lds) == 4 and len(sts) == 4
    # 128 x 128 transpose: 16 blocks x 8 warps execute each of the four unrolled loads once
    assert all(r.executed == 128 and r.wavefronts == 4096 and r.ideal == 128 for r in lds)
    assert all(r.n_way == 32 and r.access_size_bits == 32 and r.address_space == "Shared" for r in lds)
    assert rows[0].offset == "+0x0000" and all(r.offset.startswith("+0x") for r in rows)


def test_raw_page_metrics():
    _, _, met = load("transpose_32x32_baseline")
    assert met["smsp__inst_executed_op_shared_ld.sum"] == 512
    assert met["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"] == 512 * 32
    assert met["smsp__inst_executed_op_shared_st.sum"] == 512
    assert met["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"] == 512


def test_parsers_refuse_other_text():
    with pytest.raises(ValueError):
        P.parse_source_csv("==PROF== nothing here\n")
    with pytest.raises(ValueError):
        P.parse_raw_csv("no header\n")


@pytest.mark.parametrize(
    "sass, op, width, bypass",
    [
        ("LDS R11, [R2]", "load", 4, False),
        ("@!P1  STS [R7], R2", "store", 4, False),
        ("LDS.128 R8, [R5+0x10]", "load", 16, False),
        ("LDS.64 R8, [R5]", "load", 8, False),
        ("LDS.U16 R8, [R5]", "load", 2, False),
        ("STS.U8 [R5], R2", "store", 1, False),
        ("STS.128 [R5], R8", "store", 16, False),
        ("LDSM.16.MT88.4 R4, [R2]", "ldmatrix", 16, False),
        ("@P0 LDGSTS.E.LTC128B [R5], desc[UR6][R2.64]", "cp.async", 4, False),
        ("LDGSTS.E.BYPASS.LTC128B.128.ZFILL [R5+0x200], desc[UR6][R2.64], P1", "cp.async", 16, True),
        ("LDGSTS.E.64 [R5], desc[UR6][R2.64]", "cp.async", 8, False),
    ],
)
def test_classify(sass, op, width, bypass):
    c = P.classify(sass)
    assert (c.op, c.width, c.bypass) == (op, width, bypass)


def test_classify_ignores_other_instructions():
    for sass in ("LDG.E R2, desc[UR4][R2.64]", "BAR.SYNC.DEFER_BLOCKING 0x0", "FFMA R1, R2, R3, R4", "EXIT"):
        assert P.classify(sass) is None


# ---- mapping and comparison ---------------------------------------------------------------------------------


def test_transpose_baseline_matches_model():
    rows, _, met = load("transpose_32x32_baseline")
    d = C.compare(small_cfg("transpose_32x32", "baseline"), rows, met)
    assert d["match"] is True
    reads = [i for i in d["instructions"] if i["access"] == "tile_read"]
    writes = [i for i in d["instructions"] if i["access"] == "tile_write"]
    assert len(reads) == 4 and len(writes) == 4
    for i in reads:
        assert i["wavefronts_per_instruction"] == 32 and i["model_wavefronts_per_instruction"] == 32
        assert i["conflicts_per_instruction"] == 31 and i["model_conflicts_per_instruction"] == 31
    assert {g["mapping"] for g in d["groups"]} == {"exact"}
    assert d["totals"]["load"]["wavefronts_per_instruction"] == {"measured": 32.0, "model": 32.0}
    assert d["totals"]["store"]["match"] and "cp.async" not in d["totals"]
    assert [i["offset"] for i in d["instructions"]] == sorted(i["offset"] for i in d["instructions"])


def test_measurement_of_another_layout_is_a_mismatch():
    rows, _, met = load("transpose_32x32_baseline")  # the dense tile, compared with the padded model
    d = C.compare(small_cfg("transpose_32x32", "baseline", {"tile": {"pad": 1}}), rows, met)
    assert d["match"] is False
    bad = [i for i in d["instructions"] if i["match"] is False]
    assert len(bad) == 4 and all(i["access"] == "tile_read" for i in bad)
    assert d["totals"]["load"]["match"] is False and d["totals"]["store"]["match"] is True


def test_stencil_float4_kernel_matches_model():
    """The float4 stencil (issue 20) with the dense tile, measured on the H200: 6 fill stores (STS.128) and 20
    reads (LDS.128: 12 of the column window, 8 side vectors) per thread, every one 4 quarter-warp wavefronts, as
    modelled. The last fill round has lanes past the tile: they store their previous float4 again, so all warps
    issue it with every lane on (a predicated-off store counted as executed by idle warps: 1.25 measured against
    the model's 4 before that change, bench/results/memory_h200_run2.json's run)."""
    rows, _, met = load("stencil_halo_vec_baseline")
    d = C.compare(small_cfg("stencil_halo", "baseline"), rows, met)
    assert d["match"] is True
    fill = [i for i in d["instructions"] if i["access"] == "halo_fill"]
    reads = [i for i in d["instructions"] if i["op"] == "load"]
    assert len(fill) == 6 and {i["opcode"] for i in fill} == {"STS.128"}
    assert len(reads) == 20 and {i["opcode"] for i in reads} == {"LDS.128"}
    # 128 x 512 grid = 4 x 4 blocks of 8 warps: each unrolled instruction executes 128 times
    assert all(i["executed"] == 128 for i in fill + reads)
    pairs = {(i["wavefronts_per_instruction"], i["model_wavefronts_per_instruction"]) for i in fill + reads}
    assert pairs == {(4, 4)}


def test_stencil_padded_tile_is_4_way_and_its_fix_2_way():
    """pad 1 breaks the float4s into 4-byte accesses 16 bytes apart per lane: 4-way on the reads; the fill's
    8 consecutive float4s of a quarter warp cross padded row ends, 3.125-3.75 wavefronts per 4-byte store, as
    modelled instruction by instruction. The fix search's Swizzle<1,1,4> keeps 8-byte runs: 2 wavefronts each."""
    rows, _, met = load("stencil_pad1_baseline")
    d = C.compare(small_cfg("stencil_halo", "baseline", {"tile": {"pad": 1}}), rows, met)
    assert d["match"] is True
    reads = [i for i in d["instructions"] if i["op"] == "load"]
    fill = [i for i in d["instructions"] if i["access"] == "halo_fill"]
    assert len(reads) == 80
    assert all(i["opcode"] == "LDS" and i["wavefronts_per_instruction"] == 4 for i in reads)
    assert len(fill) == 24 and {i["opcode"] for i in fill} == {"STS"}
    assert {i["wavefronts_per_instruction"] for i in fill} == {3.125, 3.25, 3.5, 3.625, 3.75}
    assert all(i["match"] for i in fill)
    rows, _, met = load("stencil_pad1_fixed")
    d = C.compare(small_cfg("stencil_halo", "baseline", {"tile": {"swizzle": [1, 1, 4]}}), rows, met)
    assert d["match"] is True
    assert {(i["opcode"], i["wavefronts_per_instruction"]) for i in d["instructions"]} == {
        ("STS.64", 2),
        ("LDS.64", 2),
    }


def _row(offset: int, sass: str, executed: float, wf: float, ideal: float) -> P.SassRow:
    return P.SassRow(f"0x{0x1000 + offset:x}", sass, executed, wf, ideal, offset=f"+0x{offset:04x}")


def test_ambiguous_group_compares_sums_and_bypass_is_not_comparable():
    cfg = small_cfg("sgemm_float4", "baseline", {"As": {"pad": 4}})
    model = {m.name: m for m in C.model_accesses(cfg)}
    reps = C.repeats_per_block(cfg) * 4  # 2 x 2 blocks
    a, b, cp4, cp16 = model["As_read"], model["Bs_read"], model["As_copy"], model["Bs_copy"]
    per_sass = a.instructions * reps // 16  # 16 unrolled LDS.128 per access
    rows = [
        _row(0x10 * k, f"LDS.128 R8, [R5+0x{k:x}0]", per_sass, per_sass * a.mean, per_sass * 2)
        for k in range(16)
    ]
    rows += [
        _row(0x200 + 0x10 * k, "LDS.128 R8, [R6]", per_sass, per_sass * b.mean, per_sass * 2)
        for k in range(16)
    ]
    n4 = cp4.instructions * reps // 4
    rows += [
        _row(0x400 + 0x10 * k, "LDGSTS.E.LTC128B [R9], desc[UR4][R2.64]", n4, n4 * cp4.mean, n4)
        for k in range(4)
    ]
    rows += [
        _row(0x500, "LDGSTS.E.BYPASS.LTC128B.128 [R3], desc[UR4][R4.64]", cp16.instructions * reps, 0, 0)
    ]
    rows += [_row(0x600, "LDGSTS.E.LTC128B [R9], desc[UR4][R2.64]", 0, 0, 0)]  # the 4-byte B path, not taken
    d = C.compare(cfg, rows, {})
    groups = {(g["op"], g["width"]): g for g in d["groups"]}
    lds = groups[("load", 16)]
    assert lds["mapping"] == "ambiguous" and lds["match"] is True and "sums" in lds["note"]
    # both accesses predict 2 wavefronts per instruction, so each LDS.128 is checked against that
    assert all(i["match"] is True for i in d["instructions"] if i["op"] == "load")
    assert groups[("cp.async", 16)]["comparable"] is False and groups[("cp.async", 16)]["match"] is None
    assert groups[("cp.async", 4)]["match"] is True
    assert (
        len([i for i in d["instructions"] if i["op"] == "cp.async" and i["width"] == 4]) == 4
    )  # not-taken one dropped
    assert d["match"] is True
    # one wrong LDS.128 count breaks the group's sum
    rows[3] = _row(0x30, "LDS.128 R8, [R5+0x30]", per_sass, per_sass * (a.mean + 1), per_sass * 2)
    bad = C.compare(cfg, rows, {})
    assert bad["match"] is False
    assert [i["offset"] for i in bad["instructions"] if i["match"] is False] == ["+0x0030"]
    assert {(g["op"], g["width"]) for g in bad["groups"] if g["match"] is False} == {("load", 16)}


# ---- the command --------------------------------------------------------------------------------------------


def _fake_gpu_doc(spec, cfgs, device, seed):
    rows = [{"variant": v, "correct": True, "occupancy": {"agree": True}} for v in cfgs]
    dev = {"index": 0, "name": "fake", "cc": "9.0", "arch": "sm_90", "sm_count": 132}
    return {"spec": str(spec), "device": dev, "variants": rows, "correct": True}


def test_ncu_missing_is_one_line_and_exit_unchanged(monkeypatch):
    import smemtile.pipeline.verify as pipeline

    monkeypatch.setattr(pipeline, "on_gpu", _fake_gpu_doc)
    monkeypatch.setattr(N, "find_ncu", lambda: None)
    res = CliRunner().invoke(main, ["verify", str(ROOT / "samples/transpose_32x32.yaml"), "--ncu", "--json"])
    assert res.exit_code == 0, res.output
    assert res.stderr.strip().splitlines() == [
        "smemtile: ncu (Nsight Compute) not found on PATH: --ncu skipped"
    ]
    doc = json.loads(res.stdout)
    assert doc["ncu"] == {"available": False, "error": "ncu not found on PATH", "match": None}


def test_ncu_ignored_with_compile_only(monkeypatch):
    import smemtile.cli.verify as verify
    import smemtile.pipeline.verify as pipeline

    monkeypatch.setattr(pipeline, "compile_only", lambda spec, cfgs: {"variants": [], "compile_only": True})
    monkeypatch.setattr(verify, "emit_json", lambda doc: None)
    res = CliRunner().invoke(
        main, ["verify", str(ROOT / "samples/transpose_32x32.yaml"), "--compile-only", "--ncu", "--json"]
    )
    assert res.exit_code == 0 and "ignored with --compile-only" in res.stderr


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("ncu") is None, reason="ncu not on PATH")
def test_verify_ncu_on_gpu():
    p = run_cli("verify", "samples/transpose_32x32.yaml", "--ncu", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    n = doc["ncu"]
    assert n["available"] and n["match"] is True
    base, fixed = n["variants"]["baseline"], n["variants"]["fixed"]
    # the default vector path: a warp reads 8 rows of one tile column group (8-way when dense) and writes
    # whole float4s (one 16-byte store each, 4 quarter-warp wavefronts)
    assert {i["wavefronts_per_instruction"] for i in base["instructions"] if i["access"] == "tile_read"} == {
        8
    }
    assert {i["wavefronts_per_instruction"] for i in base["instructions"] if i["access"] == "tile_write"} == {
        4
    }
    assert {i["wavefronts_per_instruction"] for i in fixed["instructions"] if i["access"] == "tile_read"} == {
        1
    }
    assert base["target"]["correct"] and fixed["target"]["correct"]


@pytest.mark.parametrize("variant, store_wf, unattributed", [("baseline", 2, 57.0), ("fixed", 1, 54.0)])
def test_default_sgemm_transposed_stores_match(variant, store_wf, unattributed):
    """The default kernel (float4 A copy through registers, four 4-byte transposed stores): every STS measured
    2 wavefronts with dense As and 1 with pad 4, as the model says. The kernel-level store counter holds a few
    wavefronts that no instruction of the source view has (only in kernels with cp.async.cg): reported, and
    the comparison uses the attributed ones."""
    rows, _, met = load(f"sgemm_default_{variant}")
    d = C.compare(small_cfg("sgemm_default", variant, pin=False), rows, met)
    assert d["match"] is True
    sts = [i for i in d["instructions"] if i["access"] == "As_copy"]
    assert len(sts) == 24 and all(i["match"] and i["wavefronts_per_instruction"] == store_wf for i in sts)
    st = d["totals"]["store"]
    assert st["match"] is True and st["unattributed_wavefronts"] == unattributed
    assert st["wavefronts"]["measured"] == 2048 * store_wf + unattributed


def test_vector_transpose_writes_whole_float4s():
    """The default transpose (float4 global accesses): with a dense tile each float4 goes to shared memory as one
    16-byte store (STS.128, 4 quarter-warp wavefronts), measured and modelled alike; the column reads are 8-way."""
    rows, _, met = load("transpose_32x32_vec_baseline")
    d = C.compare(small_cfg("transpose_32x32", "baseline", pin=False), rows, met)
    assert d["match"] is True
    by = {i["access"]: i for i in d["instructions"]}
    assert by["tile_write"]["opcode"] == "STS.128" and by["tile_write"]["wavefronts_per_instruction"] == 4
    assert (
        by["tile_read"]["wavefronts_per_instruction"]
        == 8
        == by["tile_read"]["model_wavefronts_per_instruction"]
    )


def test_sgemm_fixed_matches_and_placeholders_are_left_out():
    rows, _, met = load("sgemm_float4_fixed")
    d = C.compare(small_cfg("sgemm_float4", "baseline", {"As": {"pad": 4}}), rows, met)
    assert d["match"] is True
    # ptxas' `@!PT LDS RZ, [RZ]` next to each LDGSTS: issued, no thread on, no wavefront
    assert d["placeholders"] == {"load": 1536.0}
    assert d["totals"]["load"]["instructions"] == {"measured": 8192.0, "model": 8192}
    assert d["totals"]["load"]["placeholders_left_out"] == 1536.0
    groups = {(g["op"], g["width"]): g for g in d["groups"]}
    assert set(groups) == {("cp.async", 4), ("cp.async", 16), ("load", 16)}
    assert groups[("load", 16)]["mapping"] == "ambiguous" and groups[("load", 16)]["match"] is True
    # As_read and Bs_read both predict 2 wavefronts, so every LDS.128 is still checked on its own
    lds = [i for i in d["instructions"] if i["opcode"] == "LDS.128"]
    assert len(lds) == 32 and all(i["match"] and i["wavefronts_per_instruction"] == 2 for i in lds)
    assert groups[("cp.async", 4)]["wavefronts_per_instruction"] == {"measured": 4.0, "model": 4.0}
    assert groups[("cp.async", 16)]["comparable"] is False
    assert d["totals"]["cp.async"]["match"] is None  # derived by subtraction: informational


def test_sgemm_baseline_a_copy_matches_the_source_aware_model():
    """The recorded H200 measurement: 4-byte cp.async of the dense As tile (8 k rows of one bank per quarter, each
    quarter from its own row of A) costs 11 wavefronts per instruction in ncu. The quarter-phase model said 32;
    the source-aware model (groups by global line, pipelined in a beat) says 11."""
    rows, _, met = load("sgemm_float4_baseline")
    d = C.compare(small_cfg("sgemm_float4", "baseline"), rows, met)
    assert d["match"] is True
    a = [i for i in d["instructions"] if i["access"] == "As_copy"]
    assert a and all(i["match"] and i["wavefronts_per_instruction"] == 11 for i in a)
    assert all(i["model_wavefronts_per_instruction"] == 11 for i in a)
    assert d["totals"]["cp.async"]["wavefronts_per_instruction"]["measured"] == pytest.approx(11.6, abs=0.1)
    assert d["totals"]["load"]["match"] is True


@pytest.mark.parametrize(
    "family, params",
    [
        ("flash_attn", {"PATH": 1, "batch": 1, "heads": 4, "seq_q": 1024, "head_dim": 128, "dtype": "bf16"}),
        ("flash_attn", {"PATH": 1, "batch": 1, "heads": 2, "seq_q": 300, "head_dim": 64, "dtype": "f16"}),
        ("wgmma_gemm", {"M": 256, "N": 256, "K": 256}),
    ],
)
def test_the_profiled_runner_rebuilds_a_tma_configuration(family, params):
    """verify --ncu hands the configuration to a profiled subprocess as JSON: a TMA layout's spec form has no
    element size (the buffer's dtype gives it), so the JSON carries it (the H200 run of a PATH 1 flash_attn spec
    failed there with 'a tma_swizzle layout mapping needs elem_bytes')."""
    from smemtile.families import configure
    from smemtile.gpu.ncu import config_from_json, config_json

    cfg = configure(family, params, None, "sm_90a")
    back = config_from_json(config_json(cfg))
    assert back.layouts == cfg.layouts and back.params == cfg.params and back.problem == cfg.problem
    assert family != "flash_attn" or back.layouts["Qs"].tma == "128B"
