"""`analyze` gives the answer first: at 80 columns the first screen (24 lines) of the README's first command shows
the 32-way access, the `pad 1` fix and the saving; `--json` keeps every key and adds `summary`; lane tables only
with `--lanes`; exit 1 when the block cannot launch."""

from __future__ import annotations

import json

from click.testing import CliRunner
from conftest import ROOT

from smemtile.cli import main

GEMM = str(ROOT / "samples" / "gemm_a_column.yaml")


def cli(*args: str, width: int = 80):
    return CliRunner().invoke(main, list(args), env={"COLUMNS": str(width)}, catch_exceptions=False)


def test_first_screen_at_80_columns_has_the_conflict_the_fix_and_the_saving():
    r = cli("analyze", GEMM)
    assert r.exit_code == 0, r.output
    screen = r.stdout.splitlines()[:24]
    assert all(len(ln) <= 80 for ln in screen)
    row = next(ln.split() for ln in screen if ln.startswith("a_col "))
    # access, op, worst/ideal -> after, degree, fix, +bytes, blocks/SM before->after
    assert row == ["a_col", "load", "4", "B", "32/1", "->", "1/1", "32-way", "pad", "1", "+512", "4->4"]
    fill = next(ln.split() for ln in screen if ln.startswith("a_fill "))
    assert fill == ["a_fill", "store", "4", "B", "1/1", "none", "-", "-", "-"]
    text = "\n".join(screen)
    assert "Saving: 8320 -> 384 wavefronts per block (95% fewer, ideal 384); +512 B smem" in text
    assert "Occupancy: blocks/SM 4 -> 4, 50%, limiter registers (64 regs, assumed)" in text
    # the bank strip of the conflicted access: 32 lanes, all in bank 0, on two lines
    strip = [ln for ln in screen if "-> banks:" in ln]
    assert [ln.split(":")[1].split() for ln in strip] == [["0"] * 16, ["0"] * 16]
    assert "a_col @ warp 0, k=0: 32/1 wavefronts; bank 0: 32 distinct words (red)" in text
    # the summary comes before the seven parts, and no lane table is printed without --lanes
    assert text.index("Summary") < r.stdout.index("1. Bank analysis") < r.stdout.index("Review checklist")
    assert "byte addr  bank(s)" not in r.stdout


def test_lanes_flag_brings_back_the_lane_tables():
    r = cli("analyze", GEMM, "--lanes")
    assert r.exit_code == 0
    out = r.stdout
    assert out.count("byte addr  bank(s)") == 2  # a_fill and a_col
    assert out.index("Summary") < out.index("1. Bank analysis") < out.index("byte addr  bank(s)")
    assert (
        "  31     31, 0       3968        0      0         31" in out.splitlines()
    )  # a_col: bank 0, wavefront 31
    assert cli("analyze", GEMM, "--detail").stdout == out


def test_conflict_free_sample_has_no_strip():
    r = cli("analyze", str(ROOT / "samples" / "stencil_halo.yaml"), "--no-compile")
    assert r.exit_code == 0, r.output
    head = r.stdout.split("1. Bank analysis")[0]
    assert "-> banks:" not in head and "Saving: 832 -> 832 wavefronts per block (0% fewer" in head
    assert [ln.split()[0] for ln in head.splitlines() if ln.endswith("  -") and "none" in ln] == [
        "halo_fill",
        "column",
        "sides",
    ]


def test_json_keeps_its_keys_and_adds_summary():
    doc = json.loads(cli("analyze", GEMM, "--json").stdout)
    for key in ("accesses", "fixes", "occupancy", "comparison", "checklist", "fix_costs", "declarations"):
        assert key in doc
    s = doc["summary"]
    rows = {a["access"]: a for a in s["accesses"]}
    assert rows["a_col"]["wavefronts"] == 32 and rows["a_col"]["ideal_wavefronts"] == 1
    assert rows["a_col"]["conflict_degree"] == 32 and rows["a_col"]["fix"] == "pad 1"
    assert rows["a_col"]["fix_extra_bytes"] == 512 and rows["a_col"]["blocks_per_sm"] == {
        "before": 4,
        "after": 4,
    }
    assert rows["a_col"]["after"]["wavefronts"] == 1
    assert rows["a_fill"]["conflict_degree"] == 1
    assert s["conflicted"] == ["a_col"]
    assert s["total_wavefronts"] == {"before": 8320, "after": 384, "ideal": 384}
    assert s["saved_fraction"] == round(7936 / 8320, 4) and s["launches"] is True
    assert s["occupancy"]["active_blocks"] == 4 and s["occupancy"]["limiter"] == "registers"
    (strip,) = s["bank_strips"]
    assert strip["banks"] == [0] * 32 and strip["busiest_bank"] == 0 and strip["busiest_bank_words"] == 32
    assert strip["hot_lanes"] == list(range(32))
    # the summary agrees with the parts it stands for
    assert doc["comparison"]["total_wavefronts"] == {"before": 8320, "after": 384}


def test_ldmatrix_strip_shows_the_row_banks():
    doc = json.loads(cli("analyze", str(ROOT / "samples" / "ldmatrix_f16.yaml"), "--json").stdout)
    (strip,) = doc["summary"]["bank_strips"]
    # 128-byte rows read by ldmatrix.x4: the 8 row addresses of each matrix all start in the same bank
    assert (
        strip["banks"] == [0] * 16 + [4] * 16 and strip["wavefronts"] == 32 and strip["ideal_wavefronts"] == 4
    )


BIG = """arch: sm_90
threads: 1024
buffers:
  - {name: S, dtype: f32, shape: [256, 256]}
accesses:
  - {name: r, buffer: S, op: load, width: 4, row: "lane", col: "0"}
"""


def test_a_block_that_cannot_launch_exits_1(tmp_path):
    f = tmp_path / "big.yaml"
    f.write_text(BIG)  # 256 KiB of shared memory: more than a block may have on sm_90
    r = CliRunner().invoke(main, ["analyze", str(f)], env={"COLUMNS": "80"})
    assert r.exit_code == 1
    assert "The block cannot launch: 0 blocks fit on an SM" in r.stdout  # the report is still printed
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("smemtile: error: the baseline block cannot launch: 0 blocks fit on an sm_90 SM")
    j = CliRunner().invoke(main, ["analyze", str(f), "--json"])
    assert j.exit_code == 1 and json.loads(j.stdout)["summary"]["launches"] is False
    ok = tmp_path / "ok.yaml"
    ok.write_text(BIG.replace("[256, 256]", "[64, 64]"))
    assert CliRunner().invoke(main, ["analyze", str(ok)]).exit_code == 0
