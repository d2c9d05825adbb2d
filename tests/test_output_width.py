"""Every command's tables at 80 and 200 columns (a pipe is 80): no line wider than the console, no cell cut to
`…`, exports rendered at their own width whatever the terminal's, files written 0644."""

from __future__ import annotations

import io
import os
import re
import stat

import pytest
from click.testing import CliRunner
from conftest import ROOT, SAMPLES

from smemtile.cli import main
from smemtile.report.text import EXPORT_WIDTH, MAX_WIDTH, Fit, make_console

WIDTHS = (80, 200)
BATCH = (
    "arch,threads,regs,static_smem,dynamic_smem,carveout,opt_in\nsm_90,256,64,0,48K,,1\nsm_80,128,255,0,0,50,0\n"
    "sm_86,1024,32,0,60000,,0\n"
)


def check_fits(text: str, width: int, code: frozenset[str] = frozenset()) -> None:
    """Every line within ``width``, none cut; a line of C++ from ``code`` (the command's own --json code lines) is
    printed whole instead, never wrapped mid-expression (issue 30), so it may be wider."""
    assert text.strip(), "no output"
    for n, line in enumerate(text.splitlines(), 1):
        whole = line.rstrip() in code or line[1:].rstrip() in code  # a diff line carries its +/- marker
        assert len(line) <= width or whole, f"line {n} has {len(line)} > {width} columns: {line!r}"
        assert "…" not in line, f"line {n} was cut: {line!r}"


def _code_lines(args: list[str]) -> frozenset[str]:
    """The C++ lines of an analyze report (declarations, the pipeline's code, the declarations' diff) as --json
    gives them."""
    import json

    if args[0] != "analyze":
        return frozenset()
    doc = json.loads(run([*args, "--json"], 200).stdout)
    out: set[str] = set()

    def walk(x) -> None:
        if isinstance(x, str):
            out.update(ln.rstrip() for ln in x.split("\n"))
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk([doc.get("declarations"), doc.get("pipeline"), doc.get("comparison")])
    return frozenset(ln for ln in out if ln.strip())


def run(args: list[str], width: int, **kw):
    r = CliRunner().invoke(main, args, env={"COLUMNS": str(width)}, catch_exceptions=False, **kw)
    assert r.exit_code == 0, (args, r.exit_code, r.output)
    return r


COMMANDS = [
    *[["analyze", str(s)] for s in SAMPLES],
    ["occupancy", "--arch", "sm_90", "--threads", "256", "--regs", "64", "--smem-dynamic", "48K"],
    [
        "occupancy",
        "--arch",
        "sm_86",
        "--threads",
        "1024",
        "--regs",
        "40",
        "--smem-static",
        "12K",
        "--carveout",
        "50",
    ],
    ["archs"],
    ["tiles", "4096", "4096", "4096", "--dtype", "f32", "--arch", "sm_90"],
    ["tiles", "8192", "8192", "1024", "--dtype", "f16", "--arch", "sm_80"],
    ["tiles", "64", "4096", "4096", "--dtype", "bf16", "--arch", "gfx942", "--vendor", "amd"],
    ["tiles", "4096", "4096", "4096", "--dtype", "bf16", "--arch", "sm_90", "--explain"],  # + the Hopper line
    ["analyze", str(ROOT / "samples" / "hgemm_bf16.yaml"), "--lanes"],
    ["samples"],
    ["verify", str(ROOT / "samples" / "sgemm_float4.yaml"), "--compile-only"],
    ["verify", str(ROOT / "samples" / "transpose_32x32.yaml"), "--compile-only"],
]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a).replace(str(ROOT) + "/", ""))
def test_command_fits(args, width):
    check_fits(run(args, width).stdout, width, _code_lines(args))


@pytest.mark.parametrize("width", WIDTHS)
def test_batch_and_generate_summary_fit(width, tmp_path):
    check_fits(run(["occupancy", "--batch", "-"], width, input=BATCH).stdout, width)
    out = tmp_path / "k.cu"
    r = run(["generate", str(ROOT / "samples" / "transpose_32x32.yaml"), "-o", str(out)], width)
    check_fits(r.stdout, width)  # with -o the summary and the checklist go to stdout
    assert "review checklist" in r.stdout and out.stat().st_size > 0


def test_narrow_bank_diagram_is_split_not_cut():
    """80 columns: the 32 words of a row come in blocks of 16, every bank number whole."""
    out = run(["analyze", str(ROOT / "samples" / "gemm_a_column.yaml")], 80).stdout
    assert "words in blocks of 16" in out
    heads = [ln.split() for ln in out.splitlines() if ln.startswith("row ")]
    assert ["row", *map(str, range(16))] in heads and ["row", *map(str, range(16, 32))] in heads
    wide = run(["analyze", str(ROOT / "samples" / "gemm_a_column.yaml")], 200).stdout
    assert ["row", *map(str, range(32))] in [ln.split() for ln in wide.splitlines() if ln.startswith("row ")]


@pytest.mark.parametrize("suffix", [".html", ".svg"])
def test_export_has_its_own_width_and_mode_0644(tmp_path, suffix):
    """The export (the report page, or its heatmaps as SVG) is the same at any terminal width."""
    texts = []
    for width in (80, 200):
        out = tmp_path / f"report{width}{suffix}"
        old = os.umask(0o022)
        try:
            run(["analyze", str(ROOT / "samples" / "gemm_a_column.yaml"), "--export", str(out)], width)
        finally:
            os.umask(old)
        assert stat.S_IMODE(out.stat().st_mode) == 0o644
        texts.append(out.read_text())
    assert texts[0] == texts[1]
    # the 32-way access's heatmap: all 32 banks labelled across the top, before and after the fix
    for variant in ("before", "after"):
        fig = re.search(rf'<svg [^>]*data-variant="{variant}" data-access="a_col".*?</svg>', texts[0], re.S)
        assert fig is not None
        banks = re.findall(
            r'<text [^>]*font-size="7" text-anchor="middle" fill="#495057">(\d+)</text>', fig[0]
        )
        assert banks[:32] == [str(b) for b in range(32)]


def test_huge_columns_is_clamped():
    r = run(["archs"], 100_000_000)
    assert max(len(ln) for ln in r.stdout.splitlines()) <= MAX_WIDTH
    assert len(r.stdout) < 200_000


def _render(renderable, width: int) -> str:
    con = make_console(file=io.StringIO(), width=width)
    con.print(renderable)
    return con.file.getvalue()


def test_tune_and_timed_verify_tables_fit():
    """GPU-only tables, rendered from documents of the shape the commands build."""
    from smemtile.report.tiles import render_tune

    rows = [
        {
            "label": f"{bm}x128x8 (16x8) s3 g8",
            "source": "model",
            "predicted": 20.5 - i,
            "model_rank": i + 1,
            "status": "ok",
            "time_ms": 7.25 + i,
            "value": 18.9 - i,
            "unit": "tflops",
            "registers": 128,
            "spill_bytes": 0,
            "blocks_per_sm": 1,
            "cached": i == 0,
            "measured_rank": i + 1,
            "name_expression": f"sgemm<{bm}, 128, 8>",
        }
        for i, bm in enumerate((256, 128, 64))
    ]
    doc = {
        "spec": "samples/sgemm_default.yaml",
        "family": "sgemm",
        "problem": {"M": 4096, "N": 4096, "K": 4096},
        "device": {"name": "NVIDIA H200", "arch": "sm_90", "sm_count": 132},
        "rows": rows,
        "summary": {"best": rows[0], "rank_correlation": 1.0, "rank_correlation_n": 3, "model_top1": None},
        "winner_spec": "sgemm_default.tuned.yaml",
        "cache": "/home/u/.cache/smemtile/tune.jsonl",
    }
    for width in WIDTHS:
        text = _render(render_tune(doc), width)
        check_fits(text, width)
        assert "7.250" in text and "18.9" in text


def test_timed_verify_table_fits(monkeypatch, capsys):
    from smemtile.report.verify import render

    def variant(name: str, ms: float) -> dict:
        return {
            "variant": name,
            "layout_text": "As: pad 4; Bs: row-major, no padding",
            "registers": 128,
            "spills": 0,
            "local_bytes": 0,
            "static_smem_bytes": 33280,
            "occupancy": {
                "model": {"active_blocks": 2, "occupancy": 0.25},
                "driver": {"active_blocks": 2},
                "agree": True,
            },
            "correct": True,
            "max_rel_error": 3.2e-7,
            "time_ms": ms,
            "tflops": 137.4 / ms,
            "peak_fraction": 0.68,
            "timing": {"runs": 41, "l2_flush_bytes": 100 << 20},
        }

    rows = [variant("baseline", 7.9112), variant("fixed", 7.2519)]
    doc = {
        "spec": "samples/sgemm_float4.yaml",
        "family": "sgemm",
        "arch": "sm_90",
        "problem": {"M": 4096},
        "compile_only": False,
        "variants": rows,
        "speedup": 7.9112 / 7.2519,
        "device": {
            "name": "NVIDIA H200",
            "arch": "sm_90",
            "index": 0,
            "peak": {"tflops": 66.9, "tflops_basis": "FP32 FMA at 1980 MHz"},
        },
    }
    for width in WIDTHS:
        monkeypatch.setenv("COLUMNS", str(width))
        render(doc)
        text = capsys.readouterr().out
        check_fits(text, width)
        assert "7.2519" in text and "3.20e-07" in text and "1.09x" in text


def test_fit_stacks_a_table_too_wide_for_its_numbers():
    from rich.table import Table

    t = Table(title="wide")
    for i in range(12):
        t.add_column(f"column {i}", no_wrap=True, justify="right")
    t.add_row(*[f"{123456789 * (i + 1):,}" for i in range(12)])
    narrow = _render(Fit(t), 80)
    check_fits(narrow, 80)
    assert "column 11: 1,481,481,468" in narrow  # stacked: header and value together, whole
    assert "┃" in _render(Fit(t), MAX_WIDTH)  # wide enough: the table itself
    assert EXPORT_WIDTH >= 120


@pytest.mark.parametrize("sample", ["hgemm_bf16.yaml", "wgmma_gemm_bf16.yaml", "gemm_a_column.yaml"])
def test_code_is_never_wrapped_at_80_columns(sample):
    """Every declaration line (file scope, kernel, host) appears whole at 80 columns, as --json gives it: code that
    is copied from the terminal compiles (issue 30)."""
    import json

    args = ["analyze", str(ROOT / "samples" / sample)]
    lines = {ln.rstrip() for ln in run(args, 80).stdout.splitlines()}
    decl = json.loads(run([*args, "--json"], 200).stdout)["declarations"]["fixed"]
    code = [ln for part in ("file_scope", "kernel", "host") for ln in (decl.get(part) or []) if ln.strip()]
    assert code and max(map(len, code)) > 80 or sample == "gemm_a_column.yaml"
    missing = [ln for ln in code if ln.rstrip() not in lines]
    assert not missing, missing
