"""Hopper TMA / wgmma layouts: the byte swizzle of each mode, the hardware's rules (exit 1, one line), the four
notations, the widest mode the rows allow, and the sample that explains a 128B tile."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import ROOT, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from smemtile.errors import SpecError
from smemtile.model.analysis import analyze_spec
from smemtile.model.layout import TMA_MODES, Layout, Swizzle, tma_byte_swizzle
from smemtile.model.spec import parse_spec
from smemtile.model.tma import (
    ALIGN,
    Notations,
    TmaRuleBroken,
    check,
    mode_table,
    rule_violations,
    tma_report,
    widest_mode,
)

SAMPLE = ROOT / "samples" / "tma_128b.yaml"

SPEC = """
arch: sm_90a
threads: 128
buffers:
  - {{name: As, dtype: {dtype}, shape: [{rows}, {cols}], layout: {layout}}}
accesses:
  - {{name: a_core, buffer: As, op: ldmatrix, matrices: 4, row: "warp * 16 + lane % 16",
      col: "kk * 16 + (lane // 16) * 8", over: {{kk: [0, {cols} // 16]}}}}
"""


def spec(layout: str, rows: int = 64, cols: int = 64, dtype: str = "bf16"):
    return parse_spec(SPEC.format(layout=layout, rows=rows, cols=cols, dtype=dtype), "t.yaml")


def test_byte_swizzle_per_mode_and_element_equivalent():
    assert [tma_byte_swizzle(m) for m in TMA_MODES] == [
        None,
        Swizzle(1, 4, 3),
        Swizzle(2, 4, 3),
        Swizzle(3, 4, 3),
    ]
    # bf16: the byte swizzle Swizzle<3,4,3> is Swizzle<3,3,3> on element offsets; f32 <3,2,3>; u8 <3,4,3>
    assert Layout.for_tma("128B", 2).swizzle == Swizzle(3, 3, 3)
    assert Layout.for_tma("64B", 4).swizzle == Swizzle(2, 2, 3)
    assert Layout.for_tma("32B", 1).swizzle == Swizzle(1, 4, 3)
    assert Layout.for_tma("none", 2).swizzle is None
    with pytest.raises(ValueError, match="unknown TMA swizzle mode '256B'"):
        Layout.for_tma("256B", 2)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(TMA_MODES[1:]), st.sampled_from([1, 2, 4, 8]), st.integers(0, 4095))
def test_element_swizzle_is_the_byte_swizzle(mode, elem, offset):
    """For every element size, swizzling the element offset equals swizzling its byte address (the hardware's)."""
    lay = Layout.for_tma(mode, elem)
    byte = tma_byte_swizzle(mode)(offset * elem)
    assert lay.swizzle(offset) * elem == byte


def test_128b_rows_match_the_hardware_pattern():
    """Chunk c of row r of a 128-byte-row tile lands at r*128 + (c ^ r%8)*16 (the TMA / wgmma 128B layout)."""
    lay = Layout.for_tma("128B", 2)
    r, c = np.meshgrid(np.arange(16), np.arange(8), indexing="ij")
    got = lay.offset(r, c * 8, 64) * 2
    assert (got == r * 128 + ((c ^ (r % 8)) * 16)).all()


def test_notations_of_each_mode():
    n = Notations("128B", 2).to_dict()
    assert n["cute_bytes"] == "Swizzle<3,4,3>" and n["cute_elements"] == "Swizzle<3,3,3>"
    assert n["tma"] == {"enum": "CU_TENSOR_MAP_SWIZZLE_128B", "value": 3}
    assert (
        n["wgmma"]["layout_type"] == 1
        and n["wgmma"]["sbo_bytes"] == 1024
        and n["wgmma"]["k_step_bytes"] == 32
    )
    assert n["triton"] == {"swizzle_byte_width": 128, "vec": 8, "per_phase": 1, "max_phase": 8}
    assert n["alignment_bytes"] == 1024
    assert Notations("64B", 2).wgmma["layout_type"] == 2 and Notations("32B", 2).wgmma["layout_type"] == 3
    assert Notations("64B", 2).triton == {"swizzle_byte_width": 64, "vec": 8, "per_phase": 2, "max_phase": 4}
    assert Notations("32B", 4).triton == {"swizzle_byte_width": 32, "vec": 4, "per_phase": 4, "max_phase": 2}
    assert Notations("none", 2).tma == ("CU_TENSOR_MAP_SWIZZLE_NONE", 0)
    assert [ALIGN[m] for m in TMA_MODES] == [128, 256, 512, 1024]


def test_widest_mode_the_rows_allow():
    assert [widest_mode(b) for b in (16, 32, 48, 64, 96, 128, 256)] == [
        "none",
        "32B",
        "none",
        "64B",
        "32B",
        "128B",
        "128B",
    ]


@pytest.mark.parametrize(
    ("layout", "rows", "cols", "needle"),
    [
        ("{tma_swizzle: 128B, base: 512}", 64, 64, "base 512 is not 1024-byte aligned"),
        ("{tma_swizzle: 64B, base: 256}", 64, 32, "base 256 is not 512-byte aligned"),
        ("{tma_swizzle: 32B}", 64, 64, "wider than the 32-byte 32B swizzle span"),
        ("{tma_swizzle: 128B}", 64, 128, "store the tile as 2 column panels of 128 bytes"),
        (
            "{tma_swizzle: 128B, global_stride: 2046}",
            64,
            64,
            "global row stride 2046 bytes is not a multiple of 16",
        ),
        (
            "{tma_swizzle: 128B, wgmma_swizzle: 64B}",
            64,
            64,
            "mode mismatch: TMA writes with CU_TENSOR_MAP_SWIZZLE_128B",
        ),
        ("{tma_swizzle: none}", 64, 4, "not a multiple of 16"),
    ],
)
def test_hardware_rules_fail_with_one_line(layout, rows, cols, needle):
    s = (
        spec(layout, rows, cols)
        if cols >= 16
        else parse_spec(
            SPEC.format(layout=layout, rows=rows, cols=cols, dtype="bf16").split("accesses:")[0]
            + "accesses:\n  - {name: x, buffer: As, op: load, width: 2, row: lane, col: 0}\n",
            "t.yaml",
        )
    )
    with pytest.raises(TmaRuleBroken) as e:
        check(s)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg and msg.startswith("t.yaml: buffers.As.layout: ")
    assert e.value.exit_code == 1


def test_stages_keep_every_base_aligned():
    text = SPEC.format(layout="{tma_swizzle: 128B}", rows=4, cols=64, dtype="bf16").replace(
        "layout: {tma_swizzle: 128B}}", "layout: {tma_swizzle: 128B}, stages: 2}"
    )
    s = parse_spec(
        text.replace("over: {kk: [0, 64 // 16]}", "warps: [0], over: {kk: [0, 1]}").replace(
            "warp * 16 + lane % 16", "lane % 4"
        ),
        "t.yaml",
    )
    assert rule_violations(s.buffers[0]) == [
        "one stage is 512 bytes, not a multiple of 1024: stage 1 would start misaligned for 128B"
    ]


@pytest.mark.parametrize(
    "layout, needle",
    [
        ("{tma_swizzle: 128B, pad: 8}", "no pad or swizzle with it"),
        ("{base: 1024}", "give tma_swizzle too"),
        ("{tma_swizzle: 96B}", "allowed: none, 32B, 64B, 128B"),
    ],
)
def test_bad_tma_keys_are_spec_errors(layout, needle):
    with pytest.raises(SpecError, match=needle):
        spec(layout)


def test_mode_table_and_pick_on_128_byte_rows():
    s = spec("{tma_swizzle: 64B}", 64, 32)  # 64-byte rows: 64B is the widest mode
    rep = tma_report(s, analyze_spec(s))[0]
    assert rep.recommended == "64B" and rep.mode == "64B"
    s = spec("{tma_swizzle: 128B}")
    rows = {m.mode: m for m in mode_table(s.buffers[0], analyze_spec(s))}
    # ldmatrix.x4 down 16 rows of 128 bytes: dense 8-way (32 wavefronts), 32B 4-way, 64B 2-way, 128B ideal (4)
    assert {m: r.per_access["a_core"] for m, r in rows.items()} == {
        "none": (32, 4),
        "32B": (16, 4),
        "64B": (8, 4),
        "128B": (4, 4),
    }
    assert [m for m, r in rows.items() if r.tma_legal] == ["none", "128B"]
    assert [m for m, r in rows.items() if r.canonical] == ["128B"]


def test_layout_round_trips_through_the_spec():
    lay = Layout.for_tma("128B", 2, base=2048, global_stride=8192)
    assert lay.to_dict() == {"tma_swizzle": "128B", "base": 2048, "global_stride": 8192}
    s = spec("{tma_swizzle: 128B, base: 2048, global_stride: 8192}")
    assert s.buffers[0].layout == lay
    assert Layout.of({**lay.to_dict(), "elem_bytes": 2}) == lay


def test_sample_explains_a_128b_tile_in_four_notations():
    p = run_cli("analyze", str(SAMPLE))
    assert p.returncode == 0, p.stderr
    out = " ".join(p.stdout.split())
    for needle in (
        "Swizzle<3,4,3>",
        "Swizzle<3,3,3>",
        "CU_TENSOR_MAP_SWIZZLE_128B",
        "layout type 1",
        "NVMMASharedLayout(swizzle_byte_width=128)",
        "vec=8, perPhase=1, maxPhase=8",
        "128B is the widest mode",
    ):
        assert needle in out, needle
    doc = json.loads(run_cli("analyze", str(SAMPLE), "--json").stdout)
    tma = {t["buffer"]: t for t in doc["tma"]}
    assert set(tma) == {"As", "Cs"}
    assert tma["As"]["recommended"] == "128B"
    assert {m["mode"]: m["total_wavefronts"] for m in tma["As"]["modes"]} == {
        "none": 512,
        "32B": 256,
        "64B": 128,
        "128B": 64,
    }


def test_analyze_exit_1_on_a_misaligned_tile(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(SAMPLE.read_text().replace('base: "4 * BM * BK * 2"', "base: 33280"))
    p = run_cli("analyze", str(bad))
    assert p.returncode == 1
    assert p.stderr.strip().count("\n") == 0
    assert "buffers.Cs.layout: base 33280 is not 1024-byte aligned" in p.stderr
