"""Every command teaches: help text with an example; the README's first command works."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from conftest import ROOT, run_cli

from smemtile.cli import main


@pytest.mark.parametrize("name", main.list_commands(None))
def test_every_command_has_help_with_an_example(name):
    r = CliRunner().invoke(main, [name, "--help"])
    assert r.exit_code == 0, r.output
    assert "Example" in r.output and f"smemtile {name}" in r.output
    assert "--json" in r.output


def test_readme_opens_with_install_and_analyze_then_tests():
    lines = [ln for ln in (ROOT / "README.md").read_text().splitlines() if ln.startswith("pip install")]
    assert "smemtile analyze samples/" in lines[0] and "pytest" in lines[1]
    sample = lines[0].split("smemtile analyze ")[1].strip()
    r = run_cli("analyze", sample)
    assert r.returncode == 0 and "conflict" in r.stdout


def test_python_dash_m_works_and_unknown_command_is_usage_error():
    assert run_cli("--version").returncode == 0
    r = run_cli("analyse")
    assert r.returncode == 2 and "No such command" in r.stderr


def test_a_closed_pipe_ends_quietly():
    """`smemtile analyze ... | head -1`: the reader goes away; smemtile ends like a Unix filter (SIGPIPE), no
    traceback."""
    import signal
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    # 6 MB of JSON: far more than a pipe buffer, so the writer is still writing when the reader leaves
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "smemtile",
            "analyze",
            "samples/sgemm_float4.yaml",
            "--json",
            "--all-instructions",
        ],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.stdout.read(100)
    p.stdout.close()
    err = p.stderr.read()
    p.wait(timeout=60)
    assert p.returncode == -signal.SIGPIPE and err == b""


# ---- typed options: --help lists the choices, completion offers them, short help is never cut -----------------

MINE = (
    "analyze",
    "occupancy",
    "archs",
    "tiles",
    "verify",
    "tune",
    "measure",
    "samples",
    "generate",
    "report",
    "inspect",
)


def test_fixed_values_match_the_model_tables():
    from smemtile.cli import common
    from smemtile.families import FAMILIES
    from smemtile.model.arch import known_targets
    from smemtile.model.gemm_tiles import DTYPE_BYTES
    from smemtile.model.tiling_gpus import AMD_ARCHS

    assert list(common.ARCH_TARGETS) == known_targets()
    assert list(common.AMD_TARGETS) == list(AMD_ARCHS)
    assert list(common.GEMM_DTYPES) == list(DTYPE_BYTES)
    assert sorted(common.FAMILY_NAMES) == sorted(FAMILIES)


def test_help_lists_the_choices():
    out = " ".join(CliRunner().invoke(main, ["tiles", "--help"], terminal_width=200).stdout.split())
    for opt, values in (
        ("--format", "[table|json|yaml|triton]"),
        ("--vendor", "[nvidia|amd]"),
        ("--family", "[sgemm|transpose|stencil2d|hgemm|wgmma_gemm|conv2d|flash_attn]"),
        ("--dtype", "[f32|tf32|f16|bf16|f8e4m3|f8e5m2|i8]"),
        ("--radius", "INTEGER RANGE"),
    ):
        assert f"{opt} {values}" in out, opt
    assert "sm_90a" in out and "gfx942" in out and "--top INTEGER RANGE" in out
    occ = " ".join(CliRunner().invoke(main, ["occupancy", "--help"], terminal_width=200).stdout.split())
    assert "--arch ARCH" in occ and "sm_121f" in occ and "--threads N" in occ


def complete(*words: str) -> list[str]:
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "_SMEMTILE_COMPLETE": "bash_complete",
        "COMP_WORDS": " ".join(("smemtile", *words)),
        "COMP_CWORD": str(len(words)),
    }
    r = subprocess.run(
        [sys.executable, "-m", "smemtile"], env=env, capture_output=True, text=True, timeout=60
    )
    return [ln.split(",", 1)[1] for ln in r.stdout.splitlines()]


def test_shell_completion_offers_the_choices():
    assert complete("tiles", "--format", "") == ["table", "json", "yaml", "triton"]
    assert complete("occupancy", "--arch", "sm_9") == ["sm_90", "sm_90a"]
    assert complete("tiles", "--family", "") == [
        "sgemm",
        "transpose",
        "stencil2d",
        "hgemm",
        "wgmma_gemm",
        "conv2d",
        "flash_attn",
    ]
    assert "samples" in complete("sa")


@pytest.mark.parametrize("name", MINE)
def test_short_help_is_whole(name):
    out = CliRunner().invoke(main, ["--help"], terminal_width=80).stdout
    line = next(ln for ln in out.splitlines() if ln.strip().startswith(name + " "))
    assert "..." not in line and len(line) <= 80


@pytest.mark.parametrize(
    "args, needle",
    [
        (
            ["tiles", "64", "64", "64", "--format", "xml"],
            "'xml' is not one of 'table', 'json', 'yaml', 'triton'",
        ),
        (["tiles", "64", "64", "64", "--dtype", "f64"], "'f64' is not one of"),
        (["tiles", "64", "64", "64", "--top", "0"], "0 is not in the range x>=1"),
        (["tiles", "--family", "stencil2d", "64", "64", "--radius", "5"], "5 is not in the range 1<=x<=4"),
        (["occupancy", "--threads", "2000", "--regs", "32"], "2000 is not in the range 1<=x<=1024"),
        (["occupancy", "--arch", "sm_61", "--threads", "128", "--regs", "32"], "known: sm_70, sm_75"),
        (["archs", "--arch", "sm_61"], "unknown architecture 'sm_61'"),
    ],
)
def test_typed_options_refuse_in_one_line(args, needle):
    r = run_cli(*args)
    assert r.returncode == 2 and r.stdout == "", r.stdout
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("smemtile: error:") and needle in line, line


def test_arch_aliases_still_work():
    assert run_cli("occupancy", "--arch", "90", "--threads", "128", "--regs", "32").stdout.startswith(
        "sm_90 "
    )
    assert run_cli("occupancy", "--arch", "SM_90", "--threads", "128", "--regs", "32").stdout.startswith(
        "sm_90 "
    )


def test_readme_documents_completion():
    text = (ROOT / "README.md").read_text()
    assert 'eval "$(_SMEMTILE_COMPLETE=bash_source smemtile)"' in text
