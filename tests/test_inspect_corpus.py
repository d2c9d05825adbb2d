"""The inspect corpus (samples/kernels/): every kernel compiles through NVRTC, lists its shared-memory
instructions with their arrays, and runs through the CPU emulator with the wavefronts of each source line
asserted against values derived by hand (in the comments); the emitted spec, analyzed, gives the same
wavefronts; the done-when command prints the 32-way column read, its lanes and banks, and `[32][33]`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from smemtile.cli import main
from smemtile.model.analysis import analyze_spec
from smemtile.model.spec import spec_from_dict
from smemtile.pipeline.inspect import Sample, inspect

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "samples" / "kernels"

# name -> launch, {source line: (worst wavefronts, ideal) over the line's instructions}, fix (array, declaration)
CORPUS = {
    # tile written along rows (1), read down a column: 32 lanes, 32 words of bank 0 -> 32 against 1
    "transpose_naive": dict(
        grid=(32, 32),
        block=(32, 8),
        lines={11: (1, 1), 16: (32, 1)},
        fix=("tile", "__shared__ float tile[TILE][TILE + 1];  // [32][33]"),
    ),
    # row stride 33 words: lane l of the column read is in bank l -> 1
    "transpose_padded": dict(
        grid=(32, 32), block=(32, 8), lines={10: (1, 1), 15: (1, 1)}, fix=("tile", None)
    ),
    # As[ty][k]: two addresses (rows ty, ty+1, 16 words apart: banks differ), Bs[k][tx]: 16 words -> 1
    "sgemm_tiled": dict(grid=(16, 16), block=(16, 16), lines={11: (1, 1), 12: (1, 1), 15: (1, 1)}),
    # As[k][m] stored transposed from i = tid: k = tid % 8, m = tid / 8 -> words 64k + m: banks 0-3, 8 words
    # each -> 8; float4 reads: As[k][4 ty] one address per half-warp -> 2 merged halves; Bs[k][4 tx]: 16
    # consecutive vectors -> 4 quarter-warps
    "sgemm_float4": dict(
        grid=(4, 4),
        block=(256,),
        lines={19: (8, 1), 23: (1, 1), 27: (2, 2), 28: (4, 4)},
        fix=("As", "__shared__ __align__(16) float As[BK][BM + 4];  // [8][68]"),
    ),
    # index = 2 s tid: stride 2 s words; s = 4: 8 words per bank (s = 8, 16 with fewer lanes: 8 too)
    "reduction": dict(grid=(64,), block=(256,), lines={8: (1, 1), 12: (8, 1), 15: (1, 1)}),
    # data[i] = i (iota): the warp's atomics hit 32 consecutive bins -> 1
    "histogram": dict(grid=(4,), block=(256,), lines={6: (1, 1), 9: (1, 1), 11: (1, 1)}),
    # 128-byte rows: each 8x8 matrix's rows all start in bank 0 -> 8 per matrix: x4 32 (ideal 4),
    # x2.trans 16 (2); the 2-byte stores: lanes 16-31 write the next row, 32 words on -> banks 0-7 twice -> 2
    "ldmatrix_gemm": dict(
        grid=(1,),
        block=(32,),
        lines={11: (2, 1), 12: (2, 1), 18: (32, 4), 21: (16, 2)},
        fix=("As", "__shared__ __align__(128) unsigned short As[16][LD + 24];  // [16][88]"),
    ),
    # column c ^ r: the 32 lanes of the column read land in 32 different banks -> 1
    "transpose_swizzled": dict(grid=(32, 32), block=(32, 8), lines={12: (1, 1), 19: (1, 1)}),
    # pitch 32 (the args): buf[t * 32 + c] is a column read -> 32
    "dynamic_smem": dict(grid=(8,), block=(32,), smem=4096, lines={7: (1, 1), 10: (32, 1)}),
    # lut[idx & 255]: data-dependent, derived from the fill in test_gather_follows_the_data
    "gather": dict(grid=(4,), block=(256,), lines={7: (1, 1)}),
    # consecutive words everywhere; the halo stores run with 4 lanes
    "stencil_halo": dict(grid=(16,), block=(256,), lines={10: (1, 1), 12: (1, 1), 13: (1, 1), 17: (1, 1)}),
    # 8-byte accesses in half-warps: the column read's 16 lanes per half sit 256 bytes apart (banks 0-1)
    # -> 16 + 16 = 32 against 2; one double of padding -> 2
    "tile_f64": dict(
        grid=(8, 8),
        block=(32, 8),
        lines={9: (2, 2), 13: (32, 2)},
        fix=("tile", "__shared__ double tile[TILE][TILE + 1];  // [32][33]"),
    ),
    # 4-byte cp.async rows: 32 lanes from one 128-byte global line, 32 banks -> 1; the column read -> 32
    "cp_async_tile": dict(
        grid=(32, 32),
        block=(32, 8),
        lines={11: (1, 1), 16: (32, 1)},
        fix=("tile", "__shared__ __align__(128) float tile[TILE][TILE + 1];  // [32][33]"),
    ),
    # put() / get() not inlined: the tile's address reaches them through .param; get()'s column read (line 10)
    # is 32-way, put()'s row write (8) and the kernel's own row read (19) are 1
    "device_call": dict(
        grid=(32, 32),
        block=(32, 8),
        lines={8: (1, 1), 10: (32, 1), 19: (1, 1)},
        fix=("tile", "__shared__ float tile[TILE][TILE + 1];  // [32][33]"),
    ),
    # 4-byte cp.async of the table: 32 consecutive words -> 1; 16-byte ones of the indices: 4 quarter-warps -> 4
    # (ideal 4); the gather at the copied indices (line 19) is derived in test_cp_async_copies_the_data
    "cp_async_gather": dict(grid=(4,), block=(256,), lines={11: (1, 1), 14: (4, 4)}),
}


def _run(name: str, mode: str = "simulate", **kw):
    c = CORPUS[name]
    return inspect(
        KERNELS / f"{name}.cu",
        grid=c["grid"],
        block=c["block"],
        smem=c.get("smem", 0),
        args=KERNELS / f"{name}.args.yaml",
        mode=mode,
        **kw,
    )


class _Emulated(dict):
    """name -> the kernel's ``_run(name)``, emulated when a test first asks for it (then kept)."""

    def __missing__(self, name: str):
        self[name] = res = _run(name)
        return res


@pytest.fixture(scope="module")
def simulated():
    """Each corpus kernel emulated once per module and only when a test needs it: a pytest-xdist worker that
    runs some of this module's tests emulates their kernels, not all fifteen."""
    return _Emulated()


def test_corpus_has_a_launch_yaml_per_kernel():
    cus = sorted(p.stem for p in KERNELS.glob("*.cu"))
    assert cus == sorted(CORPUS) and len(cus) >= 12
    for name in cus:
        assert (KERNELS / f"{name}.args.yaml").is_file()


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_listing_names_every_instruction_line_and_array(name):
    res = _run(name, mode="listing")
    assert res.instrs and res.mode == "listing" and not res.reports
    assert all(i.line > 0 and i.file.endswith(f"{name}.cu") for i in res.instrs)
    # a device function's pointer argument is known only at run time (device_call picks its tile then)
    assert all(i.array is not None or i.function for i in res.instrs), [
        i.text for i in res.instrs if i.array is None
    ]
    doc = res.to_dict()
    assert sum(x["count"] for x in doc["lines"]) == len(res.instrs)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_simulated_wavefronts_per_line(simulated, name):
    res = simulated[name]
    got = {}
    for ln in res.lines:
        worst = max((r for r in ln.instrs if r.result is not None), key=lambda r: r.worst)
        got[ln.line] = (worst.worst, worst.worst_ideal)
    for line, want in CORPUS[name]["lines"].items():
        assert got.get(line) == want, (line, got)
    assert all(r.result is not None for r in res.reports if r.records), [r.note for r in res.reports]
    first = res.lines[0]
    assert first.excessive == max(x.excessive for x in res.lines)  # the costliest line comes first


@pytest.mark.parametrize("name", [n for n in sorted(CORPUS) if "fix" in CORPUS[n]])
def test_fix_declaration(simulated, name):
    from smemtile.report.inspect import declaration_text

    array, decl = CORPUS[name]["fix"]
    res = simulated[name]
    fx = next(f for f in res.fixes if f.array.name == array)
    if decl is None:
        assert not fx.fix.needed and fx.after == fx.before
        return
    assert fx.fix.needed and fx.fix.recommended.conflict_free
    assert declaration_text(fx, fx.fix.recommended.layout) == [decl]
    assert fx.after == sum(r.ideal for r in fx.reports) < fx.before  # the fix reaches the ideal


def test_reduction_conflicts_double_with_the_stride(simulated):
    res = simulated["reduction"]
    # per step s = 1, 2, 4: 2-, 4-, 8-way (all 32 lanes active while 2 s tid < 256); the loop is unrolled
    steps = sorted(
        {
            (r.worst, bin(r.recorded[0].active).count("1"))
            for r in res.reports
            if r.instr.line == 12 and r.instr.op == "load" and r.result is not None
        }
    )
    assert (2, 32) in steps and (4, 32) in steps and (8, 32) in steps and (8, 16) in steps and (1, 1) in steps


def test_stencil_halo_runs_with_four_lanes(simulated):
    res = simulated["stencil_halo"]
    halo = [r for r in res.reports if r.instr.line in (12, 13)]
    assert halo and all(x.active == 0xF for r in halo for x in r.recorded)
    assert all(r.executions == 2 for r in halo)  # warp 0 of each of the 2 sampled blocks


def test_gather_follows_the_data(simulated):
    from smemtile.gpu.inspect import host_array  # what the GPU uploads (computed on the host, no CUDA)

    res = simulated["gather"]
    (ld,) = [r for r in res.reports if r.instr.line == 10 and r.instr.op == "load"]
    # idx (parameter 1) holds the "random" fill the GPU gets; lut[idx[i] & 255]: a 4-byte load takes as many
    # wavefronts as its busiest bank has distinct words
    idx = host_array(res.args[1], 1)
    assert idx.dtype == np.int32 and idx.max() <= 255
    worst = 0
    for rec in ld.recorded:
        i = np.arange(32) + 32 * rec.warp + 256 * rec.block[0]
        word = idx[i] & 255
        assert list(rec.addresses) == [4 * int(w) for w in word]
        per_bank = [len({int(w) for w in word if w % 32 == b}) for b in range(32)]
        worst = max(worst, max(per_bank))
    assert ld.worst == worst and worst >= 2


def test_cp_async_copies_the_data(simulated):
    """The gather reads lut at indices only cp.async moved into shared memory: its addresses are the GPU's
    fill of idx (16-byte copies), so the emulator copied the bytes."""
    from smemtile.gpu.inspect import host_array

    res = simulated["cp_async_gather"]
    idx = host_array(res.args[2], 2)
    (ld,) = [r for r in res.reports if r.instr.line == 19 and r.array == "lut"]
    assert len(ld.recorded) == 8  # 2 blocks x 4 warps
    worst = 0
    for rec in ld.recorded:
        i = np.arange(32) + 32 * rec.warp + 256 * rec.block[0]
        word = idx[i] & 255
        assert list(rec.addresses) == [4 * int(w) for w in word]
        worst = max(worst, max(len({int(w) for w in word if w % 32 == b}) for b in range(32)))
    assert ld.worst == worst and len({a for rec in ld.recorded for a in rec.addresses}) > 100


def test_device_functions_are_followed_through_the_call(simulated):
    """put() and get() run once per call with the caller's lanes: their instructions are listed under their own
    source lines and function, every call site's execution counted (4 calls x 8 sampled warps)."""
    res = simulated["device_call"]
    by = {r.instr.line: r for r in res.reports}
    assert by[8].instr.function == "_Z3putPfiif" and by[10].instr.function == "_Z3getPKfii"
    assert by[8].executions == by[10].executions == 32 and by[19].instr.function == ""
    # get(t, threadIdx.x, threadIdx.y + j): lane l reads word 32 l + warp + 8 j of tile (found by address)
    first = by[10].recorded[0]
    assert by[10].array == "tile" and first.active == 0xFFFFFFFF
    assert [a // 4 for a in first.addresses] == [32 * lane for lane in range(32)]
    assert "get (_Z3getPKfii) without inlining it: its 1 shared-memory instruction is listed" in " ".join(
        res.notes
    )


def test_emitted_spec_analyzes_to_the_same_wavefronts(simulated, tmp_path):
    for name in (
        "transpose_naive",
        "sgemm_float4",
        "reduction",
        "ldmatrix_gemm",
        "dynamic_smem",
        "stencil_halo",
    ):
        res = simulated[name]
        doc = res.spec
        spec = spec_from_dict(yaml.safe_load(yaml.safe_dump(doc)), f"{name}.spec")
        worst: dict[str, int] = {}
        for ar in analyze_spec(spec):
            key = ar.access.name.split("_p")[0]
            worst[key] = max(worst.get(key, 0), ar.wavefronts)
        want = {f"i{r.instr.index}": r.worst for r in res.reports if r.result is not None}
        assert worst == want, name
    # affine in lane and warp: the naive transpose's column read is written as row/col expressions
    acc = {a["name"]: a for a in simulated["transpose_naive"].spec["accesses"]}
    assert acc["i4"]["row"] == "(32 * lane + warp) // 32" and acc["i4"]["col"] == "(32 * lane + warp) % 32"


def test_emit_spec_file_is_what_analyze_takes(tmp_path):
    out = tmp_path / "t.yaml"
    res = _run("transpose_naive", emit_spec=out)
    assert res.emitted == str(out) and out.read_text().startswith("# written by smemtile inspect")
    r = CliRunner().invoke(main, ["analyze", str(out), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    by = {a["name"]: a for a in doc["accesses"]}
    assert by["i4"]["wavefronts"] == 32 and by["i4"]["ideal_wavefronts"] == 1 and by["i0"]["wavefronts"] == 1
    tile = next(f for f in doc["fixes"] if f["buffer"] == "tile")
    assert tile["recommended"]["layout"] == {"pad": 1}  # analyze's what-if finds the same fix


def test_done_when_command(monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    cmd = [
        "inspect",
        "samples/kernels/transpose_naive.cu",
        "--kernel",
        "transpose",
        "--grid",
        "32,32",
        "--block",
        "32,8",
        "--args",
        "samples/kernels/transpose_naive.args.yaml",
        "--simulate",
    ]
    old = os.getcwd()
    os.chdir(ROOT)
    try:
        r = CliRunner().invoke(main, cmd)
    finally:
        os.chdir(old)
    assert r.exit_code == 0, r.output
    out = r.stdout
    lines = out.splitlines()
    first = next(ln for ln in lines if ln.startswith("transpose_naive.cu:"))
    assert first.split()[:6] == [
        "transpose_naive.cu:16",
        "32",
        "1024",
        "32",
        "992",
        "32-way",
    ]  # costliest first
    assert "out[(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];" in first
    assert "32 wavefronts (ideal 1), 32-way conflict" in out
    lane31 = [ln.split() for ln in lines if ln.split()[:1] == ["31"]]
    assert [
        "31",
        "31,",
        "0",
        "3968",
        "0",
        "0",
        "31",
    ] in lane31  # lane -> (row, col) -> byte -> bank 0 -> wf 31
    assert [
        "31",
        "31,",
        "0",
        "4092",
        "31",
        "0",
        "0",
    ] in lane31  # re-derived under pad 1: bank 31, wavefront 0
    assert "after:  __shared__ float tile[TILE][TILE + 1];  // [32][33]" in out
    assert "1056 -> 64 L1 Wavefronts Shared" in out


def test_json_document(simulated):
    doc = json.loads(json.dumps(simulated["transpose_naive"].to_dict()))
    assert doc["mode"] == "simulate" and doc["kernel"] == "transpose" and doc["grid"] == [32, 32, 1]
    top = doc["lines"][0]
    assert (top["line"], top["l1_wavefronts_shared"], top["ideal"], top["excessive"]) == (16, 1024, 32, 992)
    ins = {i["index"]: i for i in doc["instructions"]}
    assert (
        ins[4]["wavefronts_worst"] == 32
        and ins[4]["conflict_degree"] == 32
        and len(ins[4]["worst_lanes"]) == 32
    )
    assert doc["fixes"][0]["declaration_after"] == ["__shared__ float tile[TILE][TILE + 1];  // [32][33]"]
    assert doc["records"]["recorded"] == 64 and doc["records"]["dropped"] == 0


def test_sample_bounds_the_records():
    res = _run("sgemm_tiled", sample=Sample(blocks=1, warps=2, executions=3))
    assert res.meta["recorded"] == sum(len(r.recorded) for r in res.reports)
    assert all(len(r.recorded) <= 2 * 3 for r in res.reports)
    assert all(r.executions == 2 * 16 for r in res.reports)  # 256 / 16 tiles of k, every one counted


def test_ldmatrix_x2_rows_map_back_to_the_array(simulated):
    res = simulated["ldmatrix_gemm"]
    assert res.no_fix == {} and sorted(f.array.name for f in res.fixes) == ["As", "Bs"]
    (x2,) = [r for r in res.reports if r.instr.op == "ldmatrix" and r.instr.matrices == 2]
    assert x2.array == "Bs" and x2.result.rows is not None
    assert x2.result.rows[0, :16].tolist() == list(range(16)) and x2.recorded[0].addresses[16:] == (0,) * 16
    bs = next(f for f in res.fixes if f.array.name == "Bs")
    assert bs.relaid[x2.instr.index].wavefronts == 2  # the .x2.trans read, conflict-free under the fix


# ---- inspect --ncu: a disagreement is explained on its line -----------------------------------------------------

# Recorded on the H200 (bench/results/session7/pytest_gpu_h200_run3.txt, test_ncu_agrees_per_line[reduction],
# ncu 2025.3.1, the whole grid recorded): reduction.cu:12 measured 8512 L1 Wavefronts Shared over 11776
# executions of its shared-memory SASS instructions. 11776 = 64 blocks x 8 warps x 23: every warp issues the
# line's 23 SASS instructions (predicated); the opcodes are the log's printed tail (..., LDS, STS, LDS, LDS, STS,
# LDS, LDS, STS) continued as the unrolled loop's 8 steps of (LDS, LDS, STS) less one LDS.
REDUCTION_NCU_H200 = {
    12: {"wavefronts": 8512, "instructions": 11776, "sass": (["LDS", "LDS", "STS"] * 8)[1:]},
}


class _RecordedNcu:
    """smemtile.gpu.inspect's interface: the emulator's records (the GPU's equal them: the corpus GPU test) and
    ncu's recorded per-line counters."""

    from smemtile.model.ptx_instrument import Sample  # the real Sample type

    def __init__(self, measured: dict):
        self.measured = measured

    def record(self, ptx_text, entry, instrs, *, grid, block, dynamic_smem, args, sample, device=0):
        from smemtile.model import ptx
        from smemtile.model.ptx_emu import emulate

        return emulate(
            ptx_text,
            entry,
            instrs,
            grid=grid,
            block=block,
            dynamic_smem=dynamic_smem,
            args=args,
            params=ptx.entry_params(ptx_text, entry),
            sample=sample,
        )

    def ncu_per_line(self, ptx_text, entry, *, grid, block, dynamic_smem, args, device=0):
        from smemtile.model import ptx

        f = next(i.file for i in ptx.shared_instructions(ptx_text, entry))
        return {(f, line): dict(v, ideal=0) for line, v in self.measured.items()}


def _with_ncu(monkeypatch, name, measured, sample):
    import smemtile.pipeline.inspect as pi

    monkeypatch.setattr(pi, "_gpu_module", lambda: _RecordedNcu(measured))
    monkeypatch.setattr(pi, "_has_gpu", lambda device: True)
    return _run(name, mode="gpu", ncu=True, sample=sample)


def test_ncu_disagreement_says_ptxas_merged_an_instruction(monkeypatch):
    from tests.test_inspect_corpus_gpu import _full_sample

    res = _with_ncu(monkeypatch, "reduction", REDUCTION_NCU_H200, _full_sample("reduction"))
    by = {ln["line"]: ln for ln in res.to_dict()["lines"]}
    assert (by[12]["executions"], by[12]["l1_wavefronts_shared"], by[12]["match"]) == (2304, 9024, "no")
    assert by[12]["explanation"] == (
        "measured 8512 wavefronts over the whole grid, predicted 9024; ptxas merged 1 shared instruction on this "
        "line: 24 in the PTX (recorded), 23 in the SASS ncu measures (15 LDS, 8 STS); ncu counts 11776 "
        "executions of the line's SASS instructions, the recording 2304 of its PTX ones (where the PTX branches "
        "past them the SASS predicates them: a warp whose lanes are all off still issues them, for 0 wavefronts)"
    )
    assert by[8]["match"] == "-" and by[8]["explanation"] == "no ncu row for this line"
    # the text output prints it under the table, on the line's name
    from rich.console import Console

    from smemtile.report.inspect import render

    console = Console(width=200, record=True)
    render(console, res, lanes=False)
    text = console.export_text()
    row = next(t for t in text.splitlines() if t.startswith("reduction.cu:12"))
    assert row.split()[:3] == ["reduction.cu:12", "2304", "9024"] and " 8512 " in row and " no " in row
    assert "  disagreement reduction.cu:12: measured 8512 wavefronts over the whole grid" in text
    assert "ptxas merged 1 shared instruction on this line" in " ".join(text.split())


def test_ncu_partial_sample_and_unrecorded_lines_say_so(monkeypatch):
    """A sample short of the grid says what it covers; a line the sampled warps never ran, and a line inside a
    device function (not recorded on the GPU), say why they are not compared."""
    measured = {
        **REDUCTION_NCU_H200,
        15: {"wavefronts": 64, "instructions": 512, "sass": ["LDS"]},  # tid == 0: warp 0 only, others off
    }
    res = _with_ncu(monkeypatch, "reduction", measured, Sample(blocks=1, warps=1))
    by = {ln["line"]: ln for ln in res.to_dict()["lines"]}
    assert by[12]["match"] == "no" and by[12]["explanation"].startswith("the sample covers 24 of ncu's 11776")
    assert by[12]["explanation"].endswith(
        "; ptxas merged 1 shared instruction on this line: 24 in the PTX (recorded), 23 in the SASS ncu measures "
        "(15 LDS, 8 STS)"
    )
    assert by[15]["match"] == "no" and "the sample covers 1 of ncu's 512 executions" in by[15]["explanation"]

    calls = {8: {"wavefronts": 32768, "instructions": 32768, "sass": ["STS"]}}
    res = _with_ncu(monkeypatch, "device_call", calls, Sample())
    doc = res.to_dict()
    by = {ln["line"]: ln for ln in doc["lines"]}
    assert by[8]["match"] == "-" and by[8]["explanation"] == (
        "inside a device function called without inlining (_Z3putPfiif): the GPU recording does not see it "
        "(--simulate emulates it); ncu measured 32768 wavefronts in 32768 executions"
    )
    assert any("the GPU recording does not yet see inside device functions" in n for n in doc["notes"])
    assert by[8]["executions"] == 0  # the recording left the function out
    from rich.console import Console

    from smemtile.report.inspect import render

    console = Console(width=400, record=True)
    render(console, res, lanes=False)
    assert "  not compared device_call.cu:8: inside a device function called without inlining" in (
        console.export_text()
    )
