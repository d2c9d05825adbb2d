"""Every sample runs; the fix search's recommendations really are conflict-free; layouts keep content."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import yaml
from conftest import ROOT, SAMPLES, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from smemtile.errors import SpecError
from smemtile.model.analysis import analyze_spec
from smemtile.model.layout import Layout, Swizzle
from smemtile.model.spec import parse_spec

EXPECTED = {  # sample -> {access: worst wavefronts before}, {buffer: recommended layout}, all conflict-free after
    "gemm_a_column.yaml": ({"a_col": 32, "a_fill": 1}, {"As": "pad 1"}, True),
    "gemm_a_column_cpasync.yaml": ({"a_col": 32, "a_fill": 4}, {"As": "Swizzle<3,2,3>"}, False),
    # the transpose family's vector path (whole tiles): 4 elements per lane down a column, 8-way when dense;
    # pad 1 makes the phase-1 stores 4-byte runs and both phases conflict-free
    "transpose_32x32.yaml": ({"tile_read": 8, "tile_write": 4}, {"tile": "pad 1"}, True),
    "ldmatrix_f16.yaml": ({"a_frag": 32, "a_fill": 4}, {"As": "Swizzle<3,3,3>"}, True),
    "sgemm_float4.yaml": (
        {"As_copy": 11, "Bs_copy": 4, "As_read": 2, "Bs_read": 2},
        {"As": "pad 4", "Bs": "row-major, no padding"},
        True,
    ),
    "sgemm_default.yaml": (
        {"As_copy": 2, "Bs_copy": 4, "As_read": 2, "Bs_read": 2},
        {"As": "pad 4", "Bs": "row-major, no padding"},
        True,
    ),
    # float4 fill and reads, 8 consecutive float4s of one row per quarter warp: 4 wavefronts each, the ideal
    "stencil_halo.yaml": (
        {"halo_fill": 4, "column": 4, "sides": 4},
        {"tile": "row-major, no padding"},
        True,
    ),
    "raw_addresses.yaml": ({"v4_stride2": 8, "ldsm": 32}, {}, None),
    # Hopper TMA tiles with 128B swizzle: the wgmma core-matrix reads and the stmatrix epilogue are ideal
    # the wgmma_gemm family (sm_90a): TMA tiles with 128B swizzle, every access at its ideal wavefronts
    "wgmma_gemm_bf16.yaml": (
        {"A_wgmma": 4, "B_wgmma": 4, "C_stmatrix": 4},
        {b: "TMA 128B swizzle (Swizzle<3,4,3> on bytes)" for b in ("As", "Bs", "Cs")},
        True,
    ),
    "tma_128b.yaml": (
        {"a_core": 4, "c_stmatrix": 4},
        {
            "As": "TMA 128B swizzle (Swizzle<3,4,3> on bytes)",
            "Cs": "TMA 128B swizzle (Swizzle<3,4,3> on bytes), base 32768",
        },
        True,
    ),
    # dense conv2d tiles (the gather tile As, the filter tile Bs: 64-byte rows): the copies conflict-free (a row's
    # pixel changes its global source, not its shared address), ldmatrix 4-way on both
    "conv2d_resnet50_3x3.yaml": (
        {"A_gather": 8, "B_copy": 8, "A_frag": 16, "B_frag": 16},
        {"As": "Swizzle<2,3,3>", "Bs": "Swizzle<2,3,3>"},
        True,
    ),
    # the flash_attn family's hd128 tile under its Swizzle<3,3,4> layouts (128-element rows of 16-byte chunks):
    # the cp.async copies of Q, K, V and the ldmatrix loads (V through .trans) at their ideal 4 wavefronts
    "flash_attn_hd128.yaml": (
        {"Q_copy": 4, "K_copy": 4, "V_copy": 4, "Q_frag": 4, "K_frag": 4, "V_frag": 4},
        {b: "Swizzle<3,3,4>" for b in ("Qs", "Ks", "Vs")},
        True,
    ),
    # flash_attn PATH 1 (sm_90a): TMA tiles with the 128-byte swizzle, the wgmma reads of Q, K and V (.trans) ideal
    "flash_attn_sm90a.yaml": (
        {"Q_wgmma": 4, "K_wgmma": 4, "V_wgmma": 4},
        {b: "TMA 128B swizzle (Swizzle<3,4,3> on bytes)" for b in ("Qs", "Ks", "Vs")},
        True,
    ),
    # dense hgemm tiles: ldmatrix 4-way (A, 64-byte rows) and 8-way (B, .trans down 256-byte rows)
    "hgemm_bf16.yaml": (
        {"A_copy": 8, "B_copy": 4, "A_frag": 16, "B_frag": 32},
        {"As": "Swizzle<2,3,3>", "Bs": "pad 8"},
        True,
    ),
}


def test_every_sample_is_covered():
    assert {p.name for p in SAMPLES} == set(EXPECTED)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_sample_analysis_and_fix(path):
    from smemtile.families import FAMILIES
    from smemtile.pipeline.fixes import fix_report, variants
    from smemtile.pipeline.specs import load

    before, layouts, all_free = EXPECTED[path.name]
    res = load(path)
    spec = res.spec
    results = analyze_spec(spec)
    got = {r.access.name: r.wavefronts for r in results}
    assert got == before
    fixes = fix_report(res)
    assert {f.buffer.name: f.recommended.layout.describe() for f in fixes.buffers} == layouts
    if res.config is None:
        after = analyze_spec(spec, fixes.layouts)
    else:  # a kernel issues its own instructions under the fixed layout (analyze and generate use these)
        fixed = variants(res, fixes)["fixed"]
        after = analyze_spec(FAMILIES[fixed.family].spec(fixed))
    for f in fixes.buffers:
        free = all(r.conflict_free for r in after if r.access.buffer == f.buffer.name)
        # the recommendation's claim is what the model says after re-running it on every instruction
        assert free == f.recommended.conflict_free
        assert (
            sum(int(r.bank.wavefronts.sum()) for r in after if r.access.buffer == f.buffer.name)
            == f.recommended.wavefronts
        )
    if all_free is not None:
        assert all(f.recommended.conflict_free for f in fixes.buffers) == all_free
    for f in fixes.buffers:  # the recommended layout keeps every logical element distinct and in bounds
        buf, lay = f.buffer, f.recommended.layout
        r, c = np.meshgrid(np.arange(buf.shape[0]), np.arange(buf.cols), indexing="ij")
        off = lay.offset(r, c, buf.cols)
        assert len(np.unique(off)) == off.size and off.max() < lay.storage_elements(buf.shape)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_sample_cli_json(path):
    r = run_cli("analyze", str(path), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    for a in doc["accesses"]:
        for key in ("name", "buffer", "op", "width", "wavefronts", "ideal_wavefronts", "conflict_degree"):
            assert key in a
        phases = a["worst"]["phases"]
        assert all(max(p["words_per_bank"]) == p["wavefronts"] for p in phases)
        if a["op"] == "cp.async":  # groups read together; their rounds overlap in wavefront slots
            slots = [s for p in phases for s in p["slots"]]
            assert max(slots) + 1 == a["wavefronts"] and all(
                len(p["slots"]) == p["wavefronts"] for p in phases
            )
        else:
            assert sum(p["wavefronts"] for p in phases) == a["wavefronts"]
    assert isinstance(doc["fixes"], list)


def test_text_report_reads_top_to_bottom():
    r = run_cli("analyze", str(ROOT / "samples" / "gemm_a_column.yaml"))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    order = [
        "1. Bank analysis",
        "32-way conflict",
        "busiest bank 0",
        "2. Fix and its verification",
        "Recommended for As: pad 1",
        "Gain and cost: saves 7936 of 8320 wavefronts",
        "3. Declarations and bank diagram",
        "float As[128][32 + 1]",
        "As (pad 1): bank of each word",
        "4. Tile size: occupancy and registers",
        "no problem size",
        "5. Double buffering",
        "6. Occupancy",
        "4 blocks/SM",
        "7. Before / after",
        "Total wavefronts 8320 -> 384",
        "+__shared__",
        "Review checklist",
    ]
    pos = [out.index(s) for s in order]
    assert pos == sorted(pos)


def test_export_svg_and_html(tmp_path):
    for ext in ("svg", "html"):
        f = tmp_path / f"r.{ext}"
        r = run_cli("analyze", str(ROOT / "samples" / "transpose_32x32.yaml"), "--export", str(f))
        assert r.returncode == 0, r.stderr
        assert "tile_read" in f.read_text()
    r = run_cli(
        "analyze", str(ROOT / "samples" / "transpose_32x32.yaml"), "--export", str(tmp_path / "r.pdf")
    )
    assert r.returncode == 2 and not (tmp_path / "r.pdf").exists()


def test_analyze_never_imports_cuda():
    code = (
        "import sys\nfrom click.testing import CliRunner\nfrom smemtile.cli import main\n"
        f"r = CliRunner().invoke(main, ['analyze', r'{ROOT / 'samples' / 'sgemm_float4.yaml'}', '--json', "
        "'--no-compile'])\n"
        "assert r.exit_code == 0, r.output\n"
        "bad = [m for m in sys.modules if m.startswith(('cuda', 'cupy', 'torch'))]\n"
        "assert not bad, bad\n"
        f"r = CliRunner().invoke(main, ['analyze', r'{ROOT / 'samples' / 'sgemm_float4.yaml'}', '--json'])\n"
        "assert r.exit_code == 0, r.output\n"
        "assert not [ln for ln in open('/proc/self/maps') if 'libcuda.so' in ln], 'the CUDA driver was loaded'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 64),
    st.integers(1, 64),
    st.integers(0, 8),
    st.integers(1, 3),
    st.integers(0, 3),
    st.integers(0, 4),
)
def test_layouts_never_change_which_element_a_coordinate_reaches(rows, cols, pad, B, M, extra):
    """Padding and swizzling are injective on logical coordinates and stay inside the storage."""
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    lay = Layout(pad=pad)
    off = lay.offset(r, c, cols)
    assert len(np.unique(off)) == rows * cols and off.max() < lay.storage_elements((rows, cols))
    sw = Swizzle(B, M, B + extra)
    n = sw.period * 2
    o = np.arange(n)
    s = sw(o)
    assert sorted(s.tolist()) == o.tolist()  # a bijection on whole periods
    assert (sw(s) == o).all()  # and its own inverse


def test_cp_async_source_key_changes_the_write_side():
    """Without `source` the model assumes the coalesced copy (one 128-byte line for the warp's 4-byte copies)."""
    doc = yaml.safe_load((ROOT / "samples" / "sgemm_float4.yaml").read_text())
    with_source = {
        a.access.name: a for a in analyze_spec(parse_spec(yaml.safe_dump(doc), "sgemm_float4.yaml"))
    }
    assert (with_source["As_copy"].wavefronts, with_source["As_copy"].ideal) == (11, 4)
    for a in doc["accesses"]:
        a.pop("source", None)
    without = {a.access.name: a for a in analyze_spec(parse_spec(yaml.safe_dump(doc), "sgemm_float4.yaml"))}
    assert (without["As_copy"].wavefronts, without["As_copy"].ideal) == (8, 1)
    doc["accesses"][2]["source"] = "lane"  # As_read is a load
    with pytest.raises(SpecError, match="only applies to op cp.async"):
        parse_spec(yaml.safe_dump(doc), "sgemm_float4.yaml")
