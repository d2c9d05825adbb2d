"""`analyze`: the seven parts in order with their numbers, each fix's cost beside its gain, warnings for fixes that
cost occupancy or make another access worse, declarations that switch to extern + cudaFuncSetAttribute above
48 KiB, the tile part, the cp.async stage loop, occupancy, before/after and the spec-level checklist."""

from __future__ import annotations

import io
import json
import time

import pytest
from click.testing import CliRunner
from conftest import ROOT

from smemtile.cli import main
from smemtile.codegen.checklist import evaluate  # noqa: F401  (the vocabulary the spec checklist reuses)
from smemtile.model.analysis import analyze_spec
from smemtile.model.layout import Layout
from smemtile.model.spec import parse_spec, spec_from_dict
from smemtile.pipeline.analyze import analyze, fix_costs, relaid
from smemtile.pipeline.specs import load, resolve
from smemtile.report.analyze import PARTS, render
from smemtile.report.text import make_console

SAMPLES = ROOT / "samples"
CHECKLIST_IDS = [
    "bank_index",
    "pad_dimension",
    "padded_stride",
    "commit_group",
    "wait_group",
    "barrier_after_wait",
    "ring_index",
    "func_set_attribute",
    "smem_total",
    "ncu",
    "two_blocks",
]


def text_of(rep, width: int = 80, brief: bool = False, lanes: bool = False) -> str:
    buf = io.StringIO()
    render(make_console(file=buf, width=width), rep, brief=brief, lanes=lanes)
    return buf.getvalue()


def from_yaml(text: str):
    from smemtile.model.spec import load_yaml

    return resolve(load_yaml(text, "t.yaml"), "t.yaml")


def headings_in_order(out: str) -> list[int]:
    return [out.index(f"{n}. {title}") for n, title in enumerate(PARTS, 1)] + [out.index("Review checklist")]


@pytest.mark.parametrize("sample", ["gemm_a_column_cpasync.yaml", "sgemm_float4.yaml"])
@pytest.mark.parametrize("brief", [False, True])
def test_seven_parts_in_order(sample, brief):
    rep = analyze(load(SAMPLES / sample), compile=False)
    out = text_of(rep, brief=brief, lanes=not brief)
    pos = headings_in_order(out)
    assert pos == sorted(pos) and out.index("Summary") < pos[0]  # the verdict first, then the seven parts
    if brief:  # short: no lane tables, no diagrams, no loop code
        assert len(out.splitlines()) < 75 and "byte addr" not in out and "cp_async_wait<" not in out
    else:
        assert "byte addr  bank(s)" in out and "cp_async_wait<" in out and "cp_async_commit();" in out
        # without --lanes: the same parts, no lane table (only the summary's bank strips)
        short = text_of(rep)
        assert "byte addr  bank(s)" not in short and "lanes  0-15 -> banks:" in short
        assert headings_in_order(short) == sorted(headings_in_order(short))


def test_json_has_every_part():
    r = CliRunner().invoke(main, ["analyze", str(SAMPLES / "sgemm_float4.yaml"), "--json", "--no-compile"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    for key in (
        "accesses",
        "fixes",
        "fix_costs",
        "declarations",
        "tiles",
        "pipeline",
        "occupancy",
        "comparison",
        "checklist",
        "parts",
    ):
        assert d[key], key
    assert d["parts"] == list(PARTS)
    assert [i["id"] for i in d["checklist"]] == CHECKLIST_IDS
    assert d["pipeline"]["stages"] == 4 and d["pipeline"]["wait_group"] == 2


# ---- part 2: cost beside gain, weighed ------------------------------------------------------------------------

OCCUPANCY_BOUND = """
arch: sm_90
threads: 256
regs: 32
buffers: [{name: T, dtype: f32, shape: [448, 32]}]
accesses:
  - {name: fill, buffer: T, op: store, width: 4, row: "i * 8 + warp", col: "lane", over: {i: [0, 56]}}
  - {name: col, buffer: T, op: load, width: 4, row: "lane + 32 * (warp % 14)", col: "k", over: {k: [0, 32]}}
"""


def test_a_fix_that_costs_a_block_per_sm_is_weighed():
    # 448 x 32 floats = 57344 B: exactly 4 blocks fit 228 KiB with 1 KiB reserved each; pad 1 adds 1792 B -> 3
    rep = analyze(from_yaml(OCCUPANCY_BOUND))
    (c,) = rep.costs
    rec = next(o for o in c["options"] if o["recommended"])
    assert (rec["layout"], rec["extra_bytes"], c["blocks_before"], rec["blocks_per_sm"]) == (
        "pad 1",
        1792,
        4,
        3,
    )
    swz = next(o for o in c["options"] if o["option"] == "swizzle")
    assert swz["extra_bytes"] == 0 and swz["blocks_per_sm"] == 4 and swz["saved"] == rec["saved"]
    (w,) = [w for w in c["warnings"] if w["kind"] == "occupancy"]
    assert (
        "drops the block from 4 to 3 blocks/SM" in w["text"]
        and swz["layout"] + " keeps 4 blocks/SM" in w["text"]
    )
    out = text_of(rep, width=200)
    assert "warning: pad 1 saves 7936 of 8640 wavefronts (92%) but costs 1792 bytes" in out


def test_a_2_way_conflict_fixed_by_doubling_the_tile_is_weighed():
    rep = analyze(
        from_yaml("""
arch: sm_90
threads: 128
buffers: [{name: T, dtype: f32, shape: [32, 24]}]
accesses:
  - {name: rd, buffer: T, op: load, width: 16, row: "lane // 4", col: "(lane % 4) * 4"}
""")
    )
    (c,) = rep.costs
    rec = next(o for o in c["options"] if o["recommended"])
    assert rec["layout"] == "pad 24" and rec["extra_bytes"] == 3072  # the tile doubles
    (w,) = c["warnings"]
    assert w["kind"] == "memory" and "grows T by 100% (3072 -> 6144 bytes)" in w["text"]
    assert c["gain"] == "saves 16 of 32 wavefronts (50%)"


def test_a_fix_that_makes_another_access_worse_is_warned():
    # a linear halo fill and a column read: padding rows by 2 frees the column but splits the fill's runs
    spec = spec_from_dict(
        {
            "arch": "sm_90",
            "threads": 256,
            "buffers": [{"name": "t", "dtype": "f32", "shape": [16, 40]}],
            "accesses": [
                {
                    "name": "fill",
                    "buffer": "t",
                    "op": "store",
                    "width": 4,
                    "row": "(tid + 256 * i) // 40",
                    "col": "(tid + 256 * i) % 40",
                    "active": "tid + 256 * i < 640",
                    "over": {"i": [0, 3]},
                },
                {
                    "name": "col",
                    "buffer": "t",
                    "op": "load",
                    "width": 4,
                    "row": "lane % 16",
                    "col": "k + lane // 16",
                    "over": {"k": [0, 39]},
                },
            ],
        }
    )
    from smemtile.model.fix import fix_spec

    results = analyze_spec(spec)
    fixes = fix_spec(spec, results)
    padded = relaid(spec, results, {"t": Layout(pad=2)})
    costs = fix_costs(spec, fixes, results, padded, lambda smem: (4, "registers"))
    (w,) = [w for c in costs for w in c["warnings"] if w["kind"] == "worse"]
    assert w["text"].startswith("the fix makes fill worse: 1x -> 2x")


# ---- part 3: declarations ---------------------------------------------------------------------------------------


def big_tile(kb: int, arch: str = "sm_90") -> str:
    rows = kb * 1024 // (64 * 4)
    return f"""
arch: {arch}
threads: 256
buffers: [{{name: As, dtype: f32, shape: [{rows}, 64]}}, {{name: Bs, dtype: f16, shape: [64, 64], layout: {{swizzle: [3, 3, 3]}}}}]
accesses:
  - {{name: a, buffer: As, op: load, width: 16, row: "warp", col: "(lane % 16) * 4"}}
  - {{name: b, buffer: Bs, op: ldmatrix, matrices: 4, row: "lane % 16", col: "(lane // 16) * 8"}}
"""


def test_declarations_switch_to_extern_above_48_kib():
    small = analyze(from_yaml(big_tile(16))).declarations["fixed"]
    assert not small.dynamic and small.host == ()
    assert "__shared__ __align__(16) float As[64][64];  // 16384 bytes" in small.kernel
    big = analyze(from_yaml(big_tile(64))).declarations["fixed"]
    assert big.dynamic and big.total_bytes == 65536 + 8192
    assert big.kernel[0].startswith("extern __shared__ __align__(128) unsigned char smem[];")
    assert (
        "float (*As)[64] = reinterpret_cast<float (*)[64]>(smem);  // 65536 bytes at offset 0" in big.kernel
    )
    assert (
        "__half* Bs = reinterpret_cast<__half*>(smem + 65536);  // 8192 bytes at offset 65536" in big.kernel
    )
    assert (
        f"cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, {65536 + 8192});"
        in big.host
    )
    assert "#include <cuda_fp16.h>" in big.file_scope and any("Bs_swz(int o)" in ln for ln in big.file_scope)
    too_big = analyze(from_yaml(big_tile(240))).declarations["fixed"]
    assert not too_big.fits and "does not fit" in too_big.host[-1]


# ---- part 4: tile size ----------------------------------------------------------------------------------------------

PROBLEM = """
arch: sm_90
threads: 128
tile: {BM: 128, BN: 128, BK: 32}
problem: {M: 4096, N: 4096, K: 4096, dtype: f16}
buffers: [{name: As, dtype: f16, shape: [BM, BK], stages: 3}]
accesses:
  - {name: a_frag, buffer: As, op: ldmatrix, matrices: 4, row: "(warp % 4) * 16 + lane % 16",
     col: "kk * 16 + (lane // 16) * 8", over: {kk: [0, BK // 16]}}
"""


def test_tile_part_ranks_the_problem_and_places_the_spec_tile():
    from smemtile.pipeline.tiles import recommend

    t = analyze(from_yaml(PROBLEM)).tiles
    rep = recommend(4096, 4096, 4096, "f16", "sm_90")
    assert t["command"] == "smemtile tiles 4096 4096 4096 --dtype f16 --arch sm_90"
    assert [r["label"] for r in t["ranked"]] == [s.cfg.label for s in rep.ranked[:3]]
    mine = next(s for s in rep.ranked if (s.cfg.bm, s.cfg.bn, s.cfg.bk) == (128, 128, 32))
    assert t["this"]["model_rank"] == mine.rank and t["ranked_total"] == len(rep.ranked)


def test_tile_part_says_what_is_missing_and_the_register_budget():
    rep = analyze(load(SAMPLES / "gemm_a_column.yaml"))
    t = rep.tiles
    assert "no problem size: add problem:" in t["missing"]
    # 256 threads, 16896 B: 8 blocks up to 32 registers (the warp limit), 4 at 64 (the assumed count)
    budget = {(b["regs_from"], b["regs_to"]): b["blocks_per_sm"] for b in t["register_budget"]}
    assert budget[(1, 32)] == 8 and budget[(49, 64)] == 4 and budget[(129, 255)] == 1
    assert t["regs"] == 64 and t["regs_source"].startswith("assumed")


def test_kernel_spec_registers_come_from_nvrtc():
    pytest.importorskip("cuda.bindings.nvrtc")
    res = load(SAMPLES / "transpose_32x32.yaml")
    rep = analyze(res)
    from smemtile.pipeline.build import build
    from smemtile.pipeline.fixes import variants

    built = build(variants(res)["fixed"])
    regs = built.kernel.extra["ptxas"]["registers"]
    assert rep.tiles["regs"] == regs and rep.tiles["regs_source"].startswith("from ptxas")
    assert rep.occupancy["fixed"]["regs"] == regs
    p = res.config.params
    assert (
        rep.tiles["this"]["label"] == f"T{p['TILE']}x{p['BLOCK_ROWS']} col"
    )  # tiling_transpose.label (GROUP 0)
    assert rep.tiles["unit"] == "GB/s"


# ---- part 5: the stage loop -----------------------------------------------------------------------------------------


def test_stage_loop_counts_and_cost():
    rep = analyze(load(SAMPLES / "sgemm_float4.yaml"), compile=False)
    p = rep.pipeline
    assert (p["stages"], p["wait_group"], p["barriers_per_iteration"]) == (4, 2, 1)
    assert p["commits"] == {"prologue": 3, "per_iteration": 1}
    assert p["ring_index"] == {"read": "t % 4", "write": "(t + 3) % 4"}
    # the ring is As (pad 4 after the fix) and Bs: 8 x (128 + 4) + 8 x 128 floats per stage
    assert p["stage_bytes"] == (8 * 132 + 8 * 128) * 4 and p["smem_bytes"] == 4 * p["stage_bytes"]
    assert {k: v["smem_bytes"] for k, v in p["by_stages"].items()} == {
        s: s * p["stage_bytes"] for s in (1, 2, 4, 5)
    }
    assert any("cp_async_wait<STAGES - 2>();  // wait_group 2: tile t has landed" in ln for ln in p["code"])


def test_single_stage_cp_async_loop_has_two_barriers():
    rep = analyze(load(SAMPLES / "gemm_a_column_cpasync.yaml"))
    p = rep.pipeline
    assert p["stages"] == 1 and p["barriers_per_iteration"] == 2 and p["wait_group"] == 0
    assert p["copies"] == [{"access": "a_fill", "buffer": "As", "width": 16, "per_thread": 4, "bytes": 16384}]
    assert p["by_stages"][2]["smem_bytes"] == 2 * 16384


def test_no_pipeline_part_without_stages_or_cp_async():
    rep = analyze(load(SAMPLES / "gemm_a_column.yaml"))
    assert rep.pipeline is None
    assert "Single stage and no cp.async: nothing to pipeline." in text_of(rep)


# ---- part 6: occupancy, threads ------------------------------------------------------------------------------------


def test_fewer_than_two_blocks_is_warned():
    rep = analyze(from_yaml(big_tile(150)))
    assert rep.occupancy["fixed"]["active_blocks"] == 1
    out = text_of(rep, width=200)
    assert "warning: fixed: 1 block(s) per SM (limited by shared_memory)" in out
    two = next(i for i in rep.checklist if i.id == "two_blocks")
    assert two.status == "fail" and "1 block(s)/SM, limited by shared_memory" in two.reason


def test_missing_threads_is_a_stated_default():
    rep = analyze(load(SAMPLES / "raw_addresses.yaml"))
    o = rep.occupancy["fixed"]
    assert o["threads"] == 32 and o["threads_source"].startswith("default: the spec has no threads:")
    out = text_of(rep, width=200)
    assert "32 threads (1 warps) [default: no threads: in the spec]" in out


# ---- part 7 and the checklist ---------------------------------------------------------------------------------------


def test_before_after_totals_are_the_analysis():
    rep = analyze(load(SAMPLES / "gemm_a_column.yaml"))
    c = rep.comparison
    assert c["total_wavefronts"] == {"before": 8320, "after": 384} and c["ideal_wavefronts"] == 384
    assert c["smem_bytes"] == {"before": 16384, "after": 16896}
    assert sum(int(r.bank.wavefronts.sum()) for r in rep.fixed_results) == 384


def test_spec_checklist_uses_the_kernel_vocabulary_and_says_why():
    rep = analyze(load(SAMPLES / "gemm_a_column_cpasync.yaml"))
    assert [i.id for i in rep.checklist] == CHECKLIST_IDS
    by = {i.id: i for i in rep.checklist}
    assert by["wait_group"].status == "n/a" and "wait_group(0)" in by["wait_group"].reason
    assert (
        by["padded_stride"].status == "n/a"
        and "a spec gives addresses, not index code" in by["padded_stride"].reason
    )
    assert by["smem_total"].status == "pass" and all(i.reason for i in rep.checklist)
    big = {i.id: i for i in analyze(from_yaml(big_tile(240))).checklist}
    assert big["smem_total"].status == "fail" and big["func_set_attribute"].status == "pass"


def test_spec_padding_that_removes_nothing_fails_the_checklist():
    rep = analyze(
        from_yaml("""
arch: sm_90
threads: 32
buffers: [{name: T, dtype: f32, shape: [32, 32], layout: {pad: 4}}]
accesses:
  - {name: row_read, buffer: T, op: load, width: 4, row: "0", col: "lane"}
""")
    )
    item = next(i for i in rep.checklist if i.id == "pad_dimension")
    assert (
        item.status == "fail" and "the spec's padding removes no conflict: row_read 1x -> 1x" in item.reason
    )


# ---- 3-D buffers ----------------------------------------------------------------------------------------------------


def test_3d_buffer_addresses_each_stage_after_the_other():
    spec = parse_spec("""
arch: sm_90
threads: 32
buffers: [{name: A, dtype: f32, shape: [2, 8, 36], layout: {pad: 4}}]
accesses:
  - {name: a, buffer: A, op: load, width: 4, stage: "s", row: "lane % 8", col: "lane // 8", over: {s: [0, 2]}}
""")
    (r,) = analyze_spec(spec)
    for i, s in enumerate((0, 1)):
        for lane in (0, 9, 31):
            expect = ((s * 8 + lane % 8) * 40 + lane // 8) * 4
            assert int(r.bank.addresses[i, lane]) == expect
    assert spec.buffers[0].stage_count == 2 and spec.buffers[0].bytes() == 2 * 8 * 40 * 4


def test_3d_stage_is_checked_and_required():
    base = (
        "arch: sm_90\nbuffers: [{name: A, dtype: f32, shape: [2, 8, 32]}]\naccesses: [{name: a, buffer: A, "
    )
    from smemtile.errors import SpecError

    with pytest.raises(SpecError, match="give stage as well as row and col"):
        parse_spec(base + "row: lane % 8, col: 0}]")
    with pytest.raises(
        SpecError, match=r"lane 0 has stage = 2, outside A \[2, 8, 32\]; allowed 0..1 \(access a of buffer A"
    ):
        analyze_spec(parse_spec(base + "stage: '2', row: lane % 8, col: 0}]"))
    with pytest.raises(SpecError, match="leave out 'stages'"):
        parse_spec(
            base.replace("shape: [2, 8, 32]", "shape: [2, 8, 32], stages: 2") + "stage: 0, row: 0, col: 0}]"
        )


# ---- bounded output and time ----------------------------------------------------------------------------------------

BIG = """
arch: sm_90
threads: 1024
tile: {BM: 128, BK: 32}
buffers:
  - {name: As, dtype: f32, shape: [BM, BK]}
  - {name: Bs, dtype: f32, shape: [BK, BM]}
accesses:
  - {name: a_fill, buffer: As, op: store, width: 4, row: "i * 32 + warp", col: "lane", over: {i: [0, 4]}}
  - {name: a_col, buffer: As, op: load, width: 4, row: "(warp % 4) * 32 + lane", col: "k", over: {k: [0, BK]}}
  - {name: b_row, buffer: Bs, op: load, width: 16, row: "k", col: "(lane * 4) % BM", over: {k: [0, BK]}}
  - {name: b_cp, buffer: Bs, op: cp.async, width: 16, row: "(tid // 32) % BK", col: "(tid % 32) * 4", over: {j: [0, 2]}}
  - {name: a_cp, buffer: As, op: cp.async, width: 4, row: "(tid // 32) % BM", col: "tid % 32", over: {j: [0, 4]}}
"""


def test_1024_thread_5_access_spec_is_fast(tmp_path):
    res = from_yaml(BIG)
    analyze(res)  # warm caches (imports, numpy)
    t = time.process_time()
    rep = analyze(res)
    text_of(rep)
    spent = time.process_time() - t
    assert spent < 1.0, (
        f"{spent:.2f} s CPU"
    )  # about 0.25 s on the development machine; the budget absorbs load


def test_all_instructions_streams_distinct_instructions_within_a_budget(tmp_path, monkeypatch):
    f = tmp_path / "big.yaml"
    f.write_text(BIG)
    r = CliRunner().invoke(main, ["analyze", str(f), "--json", "--all-instructions"])
    assert r.exit_code == 0, r.output
    assert len(r.stdout) < 5_000_000  # 94.5 MB before: every instruction with every lane, indented
    d = json.loads(r.stdout)
    a_col = next(a for a in d["accesses"] if a["name"] == "a_col")
    # rows depend on warp % 4: 4 x 32 distinct of 32 warps x 32 k
    assert a_col["details_summary"] == {
        "instructions": 1024,
        "distinct": 128,
        "detailed": 128,
        "left_out": 0,
        "budget": 4096,
    }
    assert sum(len(x["repeats"]) for x in a_col["details"]) == 1024
    assert a_col["details"][0]["wavefronts"] == 32 and len(a_col["details"][0]["lanes"]) == 32
    import smemtile.report.banks as banks

    monkeypatch.setattr(banks, "DETAIL_BUDGET", 100)
    r = CliRunner().invoke(main, ["analyze", str(f), "--json", "--all-instructions"])
    d = json.loads(r.stdout)
    shown = [a["details_summary"]["detailed"] for a in d["accesses"]]
    assert sum(shown) == 100 and shown[0] == 100 and d["accesses"][1]["details_summary"]["left_out"] == 128
