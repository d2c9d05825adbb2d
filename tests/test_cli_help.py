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
