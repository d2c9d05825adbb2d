"""Synthesized microkernels: source generation, refusals, NVRTC compile-only of every analysis-only sample,
`smemtile measure`, rendering, and (marked gpu) the real run with ncu."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import yaml

from smemtile.codegen.microkernel import (
    MAX_SLOTS,
    TARGET_INSTRUCTIONS,
    Instr,
    Pattern,
    build_module,
    catalogue_patterns,
    check_pattern,
)
from smemtile.errors import NoDevice, SpecError
from smemtile.gpu.microkernel import expected_sass, ncu_by_label, parse_ncu_rows, spec_patterns, verify_spec
from smemtile.model.arch import get_arch
from smemtile.model.fix import fix_spec
from smemtile.model.spec import load_spec, parse_spec
from tests.conftest import ROOT, gpu_available, run_cli

ANALYSIS_SAMPLES = [
    "gemm_a_column.yaml",
    "gemm_a_column_cpasync.yaml",
    "ldmatrix_f16.yaml",
    "raw_addresses.yaml",
]
HELDOUT = ROOT / "bench" / "catalogue_heldout.yaml"
SM90 = get_arch("sm_90")
L = np.arange(32)


def _nvrtc_ok() -> bool:
    try:
        from smemtile.gpu.nvrtc import nvrtc_version

        nvrtc_version()
        return True
    except Exception:
        return False


needs_nvrtc = pytest.mark.skipif(not _nvrtc_ok(), reason="NVRTC wheel not installed")


def _cat(text: str, source: str = "cat.yaml"):
    return catalogue_patterns(yaml.safe_load(text), source)


def _pattern(op, width, addr, *, matrices=4, trans=False, cache=None, src=None, active=None, threads=32):
    a = np.asarray(addr, dtype=np.int64)[None]
    act = np.ones_like(a, dtype=bool) if active is None else np.asarray(active, dtype=bool)[None]
    s = None if src is None else np.asarray(src, dtype=np.int64)[None]
    return Pattern(
        "p",
        Instr(op, width, matrices, trans, cache),
        a,
        act,
        np.zeros(1, np.int64),
        np.ones(1, np.int64),
        np.ones(1, np.int64),
        threads,
        s,
    )


def _verify(sample: str, **kw):
    sp = load_spec(ROOT / "samples" / sample)
    return verify_spec(sp, {"baseline": {}, "fixed": fix_spec(sp).layouts}, **kw)


# ---- instructions and source -------------------------------------------------------------------------------


def test_instruction_names_ptx_and_expected_sass():
    cases = [
        (Instr("load", 1), "ld.shared.u8", "LDS.U8"),
        (Instr("load", 16), "ld.shared.v4.u32", "LDS.128"),
        (Instr("store", 8), "st.shared.v2.u32", "STS.64"),
        (Instr("store", 4), "st.shared.u32", "STS"),
        (Instr("ldmatrix", 16, 2, True), "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16", "LDSM.16.MT88.2"),
        (Instr("stmatrix", 16, 4), "stmatrix.sync.aligned.m8n8.x4.shared.b16", "STSM.16.M88.4"),
        (Instr("stmatrix", 16, 1), "stmatrix.sync.aligned.m8n8.x1.shared.b16", "STSM.16.M88"),
        (Instr("cp.async", 8, cache="ca"), "cp.async.ca.shared.global", "LDGSTS.E.64"),
        (Instr("cp.async", 16, cache="cg"), "cp.async.cg.shared.global", "LDGSTS.E.BYPASS.128"),
    ]
    for instr, ptx, sass in cases:
        assert instr.ptx == ptx
        assert expected_sass(instr) == sass


def test_one_kernel_per_instruction_kind_and_the_tables_hold_the_model_addresses():
    _, pats = _cat("""
patterns:
  - {name: a, op: load, width: 16, address: "lane * 48"}
  - {name: b, op: load, width: 16, address: "lane * 16"}
  - {name: c, op: store, width: 4, address: "lane * 132"}
""")
    mod = build_module(pats, SM90)
    assert mod.kernels == ("smk_ld16_s1_t32", "smk_st4_s1_t32")
    assert mod.source.count("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];") == 8  # 8 copies per iteration
    assert "st.shared.u32 [%0], %1;" in mod.source and "__launch_bounds__(32)" in mod.source
    x = mod.launches[0]
    assert x.addr[0, 0].tolist() == (48 * L).tolist()
    assert x.on.tolist() == [[0xFFFFFFFF]] and x.warp_on.tolist() == [1]
    assert x.repeats * x.slots * x.iterations >= TARGET_INSTRUCTIONS
    assert x.instructions == 1 and x.model_wavefronts == 4  # 16-byte loads 3 chunks apart: 4 quarters, 1 each
    assert mod.launches[2].model_wavefronts == 1  # stride 33 words


def test_idle_lanes_are_predicated_off():
    _, pats = _cat('patterns: [{name: h, op: load, width: 4, address: "lane * 128", active: "lane < 16"}]')
    mod = build_module(pats, SM90)
    (x,) = mod.launches
    assert x.kernel.endswith("_p")
    assert x.on.tolist() == [[0x0000FFFF]]
    assert "setp.ne.u32 q, %2, 0; @q ld.shared.u32 %0, [%1];" in mod.source
    assert x.model_wavefronts == 16  # 16 words of bank 0


def test_ldmatrix_unused_lanes_repeat_used_aligned_addresses():
    addr = [16 * i if i < 8 else 3 for i in range(32)]  # lanes 8..31 are ignored by x1 (even misaligned)
    p = _pattern("ldmatrix", 16, addr, matrices=1)
    p = Pattern(p.name, p.instr, p.addresses, L[None] < 8, p.warp, p.wavefronts, p.ideal)
    (x,) = build_module([p], SM90).launches
    assert x.addr[0, 0].tolist() == [16 * (i % 8) for i in range(32)]
    assert not x.kernel.endswith("_p")


def test_long_access_is_split_into_launches_of_at_most_max_slots():
    sp = parse_spec(f"""
arch: sm_90
threads: 64
buffers: [{{name: A, dtype: f32, shape: [64, 64]}}]
accesses:
  - {{name: col, buffer: A, op: load, width: 4, row: "lane", col: "k", over: {{k: [0, {MAX_SLOTS + 8}]}}}}
""")
    mod = build_module(spec_patterns(sp, {"baseline": {}})[0], SM90)
    assert [x.slots for x in mod.launches] == [MAX_SLOTS, 8]
    assert sum(x.instructions for x in mod.launches) == 2 * (MAX_SLOTS + 8)  # 2 warps
    assert (
        sum(x.model_wavefronts for x in mod.launches) == 2 * (MAX_SLOTS + 8) * 32
    )  # rows of 64 words: one bank


# ---- refusals ----------------------------------------------------------------------------------------------


def test_refuses_misaligned_16_byte_address():
    with pytest.raises(SpecError, match="16-byte aligned"):
        check_pattern(_pattern("load", 16, 16 * L + (L == 5) * 8), SM90)


def test_refuses_ldmatrix_row_not_16_byte_aligned():
    with pytest.raises(SpecError, match="lane 2 address 40 is not 16-byte aligned"):
        check_pattern(_pattern("ldmatrix", 16, [0, 16, 40] + [16 * i for i in range(3, 32)]), SM90)


def test_refuses_ops_the_arch_lacks():
    with pytest.raises(SpecError, match="cp.async needs sm_80 or later; the target is sm_75"):
        check_pattern(_pattern("cp.async", 4, 4 * L, cache="ca", src=4 * L), get_arch("sm_75"))
    with pytest.raises(SpecError, match="stmatrix needs sm_90 or later; the target is sm_89"):
        check_pattern(_pattern("stmatrix", 16, 16 * L), get_arch("sm_89"))


def test_refuses_ldmatrix_with_an_idle_address_lane():
    with pytest.raises(SpecError, match=r"\.sync\.aligned: lane 3"):
        _, pats = _cat(
            'patterns: [{name: x, op: ldmatrix, matrices: 1, address: "lane * 16", active: "lane != 3"}]'
        )
        build_module(pats, SM90)


def test_verify_spec_refuses_cp_async_before_sm80_before_compiling():
    # refused when the spec is read, long before anything is compiled
    with pytest.raises(SpecError, match="accesses.a_fill: cp.async needs sm_80"):
        text = (ROOT / "samples" / "gemm_a_column_cpasync.yaml").read_text()
        sp = parse_spec(text.replace("sm_90", "sm_75"))
        verify_spec(sp, {"baseline": {}}, compile_only=True)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'arch: sm_80\npatterns: [{name: s, op: stmatrix, address: "lane * 16"}]',
            "patterns.s: stmatrix needs sm_90 or later; the target is sm_80",
        ),
        (
            'patterns: [{name: v, op: load, width: 16, address: "lane * 8"}]',
            "patterns.v: lane 1 address 8 is not aligned to 16 bytes",
        ),
        ('patterns: [{name: v, op: load, width: 4, adress: "lane * 4"}]', "unknown key 'adress'"),
        (
            'patterns: [{name: c, op: cp.async, width: 8, cache: cg, address: "lane * 8"}]',
            "patterns.c.cache: cache 'cg': allowed ca, or cg for 16-byte cp.async",
        ),
    ],
)
def test_measure_bad_catalogue_exit_2_one_line(tmp_path, text, message):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    p = run_cli("measure", str(f), "--predict-only")
    assert p.returncode == 2, p.stdout + p.stderr
    assert message in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


# ---- NVRTC compile-only of the analysis-only samples -------------------------------------------------------

# access -> (PTX that must appear, model wavefronts baseline, fixed)
EXPECTED = {
    "gemm_a_column.yaml": {
        "a_fill": ("st.shared.u32 [%r], %r;", 1, 1),
        "a_col": ("ld.shared.u32 %r, [%r];", 32, 1),
    },
    "gemm_a_column_cpasync.yaml": {
        "a_fill": ("cp.async.ca.shared.global [%r], [%r], 16;", 4, 4),
        "a_col": ("ld.shared.u32 %r, [%r];", 32, 4),
    },
    "ldmatrix_f16.yaml": {
        "a_fill": ("cp.async.ca.shared.global [%r], [%r], 16;", 4, 4),
        "a_frag": ("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r,%r,%r,%r}, [%r];", 32, 4),
    },
    "raw_addresses.yaml": {
        "v4_stride2": ("ld.shared.v4.u32 {%r,%r,%r,%r}, [%r];", 8, 8),
        "ldsm": ("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r,%r,%r,%r}, [%r];", 32, 32),
    },
}


@needs_nvrtc
@pytest.mark.parametrize("sample", ANALYSIS_SAMPLES)
def test_compile_only_every_analysis_sample(sample):
    doc = verify_spec(
        load_spec(ROOT / "samples" / sample),
        {"baseline": {}, "fixed": fix_spec(load_spec(ROOT / "samples" / sample)).layouts},
        compile_only=True,
    )
    assert doc["compile_only"] is True and doc["device"] is None and doc["arch"] == "sm_90"
    note = doc["sass_check"]["note"]
    assert note.startswith("SASS checked with") or note.startswith("SASS not checked")
    if doc["sass_check"]["available"]:
        assert doc["sass_check"]["ok"] is True, note
    rows = {(r["variant"], r["access"]): r for r in doc["accesses"]}
    for access, (ptx, base, fixed) in EXPECTED[sample].items():
        for variant, wf in (("baseline", base), ("fixed", fixed)):
            r = rows[(variant, access)]
            assert ptx in r["ptx"], r["ptx"]
            assert len(r["ptx"]) == 1  # the kernel holds this one shared-memory instruction and nothing else
            assert r["model_wavefronts"] == wf
            assert 0 < r["registers"] <= 255 and r["spills"] == 0


def test_no_gpu_raises_no_device():
    if gpu_available():
        pytest.skip("a GPU is present")
    with pytest.raises(NoDevice):
        _verify("raw_addresses.yaml", compile_only=False)


def test_microkernel_codegen_report_and_measure_load_no_cuda():
    code = (
        "import sys; import smemtile.codegen.microkernel, smemtile.report.microkernel, smemtile.cli.measure; "
        "import smemtile.gpu.microkernel; bad = [m for m in sys.modules if m.split('.')[0] == 'cuda']; "
        "print(bad); raise SystemExit(1 if bad else 0)"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr


# ---- measure: catalogue, predictions -----------------------------------------------------------------------


def _key(op, width, addr, matrices, trans, src):
    return (
        op,
        width,
        tuple(addr),
        matrices if op in ("ldmatrix", "stmatrix") else 4,
        bool(trans),
        None if src is None else tuple(src),
    )


def test_heldout_catalogue_is_large_new_and_covers_every_kind():
    arch, pats = catalogue_patterns(yaml.safe_load(HELDOUT.read_text()), str(HELDOUT))
    assert arch.name == "sm_90" and len(pats) >= 60
    fitted = json.loads((ROOT / "tests" / "data" / "bank_catalogue_fitted.json").read_text())["patterns"]
    seen = {
        _key(p["op"], p["width"], p["addresses"], p.get("matrices", 4), p.get("trans"), p.get("global"))
        for p in fitted
    }
    for p in pats:
        src = None if p.sources is None else p.sources[0].tolist()
        assert (
            _key(p.instr.op, p.instr.width, p.addresses[0].tolist(), p.instr.matrices, p.instr.trans, src)
            not in seen
        ), p.name
    kinds = {(p.instr.op, p.instr.width) for p in pats}
    for k in [
        ("load", 1),
        ("load", 2),
        ("load", 4),
        ("load", 8),
        ("load", 16),
        ("store", 1),
        ("store", 2),
        ("store", 4),
        ("store", 8),
        ("store", 16),
        ("ldmatrix", 16),
        ("stmatrix", 16),
        ("cp.async", 4),
        ("cp.async", 8),
        ("cp.async", 16),
    ]:
        assert k in kinds
    assert sum(p.instr.op == "stmatrix" for p in pats) >= 10
    assert sum(not p.active.all() for p in pats if p.instr.op in ("load", "store", "cp.async")) >= 5


def test_recorded_predictions_are_for_this_catalogue():
    rec = json.loads((ROOT / "bench" / "results" / "heldout_predictions.json").read_text())
    p = run_cli("measure", str(HELDOUT), "--predict-only", "--json")
    assert p.returncode == 0, p.stderr
    now = json.loads(p.stdout)
    assert [x["name"] for x in rec["patterns"]] == [x["name"] for x in now["patterns"]]
    for a, b in zip(rec["patterns"], now["patterns"], strict=True):
        assert a["addresses"] == b["addresses"] and a.get("global") == b.get("global")
    byname = {x["name"]: x["model"]["wavefronts"] for x in rec["patterns"]}
    # the hypothesis as written before measuring: stmatrix x4 with rows 128 B apart is 8-way per matrix
    assert (
        byname["h_stsm_x4_row128"] == 32
        and byname["h_stsm_x4_row144"] == 4
        and byname["h_stsm_x1_row128"] == 8
    )


def test_ncu_rows_give_wavefronts_per_issued_instruction():
    _, pats = _cat("""
patterns:
  - {name: a, op: load, width: 4, address: "lane * 128"}
  - {name: b, op: stmatrix, matrices: 4, address: "(lane % 8) * 128 + (lane // 8) * 16"}
""")
    mod = build_module(pats, SM90)
    W = "l1tex__data_pipe_lsu_wavefronts_mem_shared"
    n = [x.iterations * x.repeats for x in mod.launches]
    text = (
        '==PROF== Disconnected\n"ID","Kernel Name","'
        + W
        + '.sum","'
        + W
        + '_op_misc.sum","'
        + W
        + '_op_st.sum","smsp__inst_executed_op_shared_ld.sum"\n'
        '"","","wavefront","wavefront","wavefront","inst"\n'
        f'"0","smk_ld4_s1_t32","{32 * n[0]}","0","0","{n[0]}"\n'
        f'"1","smk_stsm4_s1_t32","{16 * n[1] + 7}","7","{16 * n[1]}","0"\n'
    )
    rows = parse_ncu_rows(
        text, (f"{W}.sum", f"{W}_op_misc.sum", f"{W}_op_st.sum", "smsp__inst_executed_op_shared_ld.sum")
    )
    assert len(rows) == 2
    by = ncu_by_label(mod, rows)
    assert by["a"]["wavefronts_per_instruction"] == 32 and by["a"]["agree"] is True
    assert by["a"]["instructions_counted"] == n[0]
    assert by["b"]["wavefronts_per_instruction"] == 16 and by["b"]["agree"] is False  # model: 32
    assert (
        by["b"]["instructions_counted"] is None
    )  # its counter (sm__sass_inst_executed_op_shared_stsm) not in rows


MEASURED = json.loads((ROOT / "tests" / "data" / "bank_catalogue_heldout.json").read_text())


def test_heldout_measurement_is_complete_and_came_after_the_predictions():
    rec = json.loads((ROOT / "bench" / "results" / "heldout_predictions.json").read_text())
    assert [p["name"] for p in MEASURED["patterns"]] == [p["name"] for p in rec["patterns"]]
    assert (
        MEASURED["date"] >= rec["date"]
        and MEASURED["arch"] == "sm_90"
        and MEASURED["sass_check"]["ok"] is True
    )
    assert MEASURED["compared"] >= 60 and MEASURED["agreed"] == MEASURED["compared"]
    for p in MEASURED["patterns"]:
        m = p["measured"]
        assert m["instructions_expected"] == 2048  # one warp, TARGET_INSTRUCTIONS
        if p.get("cache") == "cg":
            assert p["agree"] is None and m["wavefronts_per_instruction"] == 0  # invisible to ncu
        elif p["op"] != "cp.async":  # cp.async is in neither counter (all shared wavefronts minus misc)
            ld, st = m["wavefronts_ld_st"]
            assert (st if p["op"] in ("store", "stmatrix") else ld) == m["wavefronts_per_instruction"] * 2048
            assert (ld if p["op"] in ("store", "stmatrix") else st) == 0


@pytest.mark.parametrize(
    "p", [p for p in MEASURED["patterns"] if p["agree"] is not None], ids=lambda p: p["name"]
)
def test_model_reproduces_heldout_measurement(p):
    from smemtile.model.banks import analyze_addresses

    active = None
    if "active_lanes" in p and p["op"] not in ("ldmatrix", "stmatrix"):
        active = np.isin(L, p["active_lanes"])
    model = int(
        analyze_addresses(
            p["addresses"], p["op"], p["width"], p.get("matrices", 4), sources=p.get("global"), active=active
        ).wavefronts[0]
    )
    measured = p["measured"]["wavefronts_per_instruction"]
    assert model == p["model"]["wavefronts"]  # the prediction recorded before the run still holds
    assert abs(measured - model) <= 0.1  # exact, or cp.async's first-touch L1 misses (at most 0.08 seen)


FAKE_NCU = """#!{python}
import json, pathlib, sys
a = sys.argv[1:]
assert a[a.index("--clock-control") + 1] == "none" and "--csv" in a
mark = pathlib.Path({mark!r})
if not mark.exists():  # the first run fails, as a profiler sometimes does
    mark.write_text("x")
    print("==ERROR== the profiler failed", file=sys.stderr)
    raise SystemExit(9)
plan = json.loads((pathlib.Path(a[a.index("--target") + 1]) / "plan.json").read_text())
mets = a[a.index("--metrics") + 1].split(",")
print('"ID","Kernel Name",' + ",".join(f'"{{m}}"' for m in mets))
for i, x in enumerate(plan["launches"]):
    n = x["iterations"] * 8  # the patterns below: one slot, 8 copies per iteration
    vals = {{m: 0 for m in mets}}
    vals["l1tex__data_pipe_lsu_wavefronts_mem_shared.sum"] = (4 if i == 0 else 3) * n
    print(f'"{{i}}","{{x["kernel"]}}",' + ",".join(f'"{{vals[m]}}"' for m in mets))
"""


def test_profile_runs_ncu_on_the_saved_plan_and_retries_once(tmp_path, monkeypatch):
    import smemtile.gpu.microkernel as G

    exe = tmp_path / "ncu"
    exe.write_text(FAKE_NCU.format(python=sys.executable, mark=str(tmp_path / "failed_once")))
    exe.chmod(0o755)
    monkeypatch.setattr(G, "find_ncu", lambda: str(exe))
    _, pats = _cat("""
patterns:
  - {name: a, op: load, width: 16, address: "lane * 48"}
  - {name: b, op: stmatrix, matrices: 1, address: "(lane % 8) * 128"}
""")
    mod = build_module(pats, SM90)
    failures: list[str] = []
    by = ncu_by_label(mod, G.profile(mod, b"cubin", failures=failures))
    assert len(failures) == 1 and "ncu exited 9" in failures[0] and "the profiler failed" in failures[0]
    assert by["a"]["wavefronts_per_instruction"] == 4 and by["a"]["agree"] is True
    assert by["b"]["wavefronts_per_instruction"] == 3 and by["b"]["agree"] is False  # model: 8-way, 8
    from smemtile.gpu.ncu import NcuError

    with pytest.raises(NcuError, match="ncu exited 9"):
        (tmp_path / "failed_once").unlink()
        G.profile(mod, b"cubin", attempts=1)


# ---- rendering ---------------------------------------------------------------------------------------------


def _render_text(fn, doc, width=80) -> str:
    from rich.console import Console

    con = Console(width=width, record=True, highlight=False, force_terminal=False)
    fn(doc, console=con)
    return con.export_text()


@needs_nvrtc
def test_render_stays_readable_at_80_columns():
    from smemtile.report.microkernel import render, render_measure

    doc = _verify("gemm_a_column_cpasync.yaml", compile_only=True)
    text = _render_text(render, doc)
    assert "…" not in text and "a_col" in text and "cp.async.ca 16 B" in text
    assert max(len(line) for line in text.splitlines() if "│" in line or "  " in line) <= 80
    # the same document as a GPU run would fill it
    doc = dict(
        doc,
        compile_only=False,
        device={"name": "NVIDIA H200", "arch": "sm_90", "index": 0},
        ncu={"available": True, "version": "2025.3.1", "agree": True, "error": None},
    )
    doc["method"] = dict(doc["method"], blocks=132)
    for r in doc["accesses"]:
        r.update(
            cycles_per_instruction=123456.789,
            ncu_wavefronts=r["model_wavefronts"],
            agree=True,
            speedup=12.345 if r["variant"] == "fixed" else None,
        )
    text = _render_text(render, doc)
    assert "…" not in text and "123456.8" in text and "12.35x" in text and "agree on every access" in text
    pred = json.loads((ROOT / "bench" / "results" / "heldout_predictions.json").read_text())
    text = _render_text(render_measure, pred)
    assert "…" not in text and "h_stsm_x4_frag16x16_swz" in text


# ---- on the GPU --------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_raw_sample_measured_with_ncu_agrees():
    doc = _verify("raw_addresses.yaml", compile_only=False, use_ncu=True)
    assert doc["device"] is not None and doc["sass_check"]["ok"] in (True, None)
    assert doc["ncu"]["error"] is None, doc["ncu"]
    for r in doc["accesses"]:
        assert r["cycles_per_instruction"] > 0
        assert r["agree"] is True, (r["access"], r["ncu_wavefronts"], r["model_wavefronts"])
        assert r["ncu_instructions"] == r["instructions_expected"]
    assert doc["agree"] is True


@pytest.mark.gpu
def test_gpu_fixed_column_read_is_faster(tmp_path):
    doc = _verify("gemm_a_column.yaml", compile_only=False)
    assert doc["speedup"]["a_col"] > 2  # 32 wavefronts -> 1
    assert doc["fixed_no_worse"] is True
    f = tmp_path / "c.yaml"
    f.write_text(
        'patterns: [{name: s, op: stmatrix, matrices: 2, address: "(lane % 8) * 128 + (lane // 8) * 16"},'
        ' {name: l, op: load, width: 8, address: "lane * 8"}]'
    )
    p = run_cli("measure", str(f), "--out", str(tmp_path / "m.json"))
    assert p.returncode == 0, p.stderr
    m = json.loads((tmp_path / "m.json").read_text())
    assert m["ncu"]["error"] is None, m["ncu"]
    assert (
        m["patterns"][1]["agree"] is True and m["patterns"][1]["measured"]["wavefronts_per_instruction"] == 2
    )
    st = m["patterns"][0]["measured"]
    assert (
        st["wavefronts_per_instruction"] == 16 and m["patterns"][0]["agree"] is True
    )  # x2, rows 128 B apart
    assert st["instructions"] == st["instructions_expected"] == 2048  # stmatrix's own instruction counter
