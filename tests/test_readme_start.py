"""The README's "Ways to start" commands run as written (CPU): the inspect example prints the 32-way column read
on its source line and proposes tile[32][33]; the report example writes one page; the tiles example ranks."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from click.testing import CliRunner

from smemtile.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _commands() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    part = text[text.index("## Ways to start") : text.index("## The bank model")]
    return [shlex.split(c)[1:] for c in re.findall(r"`(smemtile [^`|]+?)`", part)]


def test_ways_to_start_name_inspect_first():
    cmds = _commands()
    assert cmds[0][0] == "inspect" and {c[0] for c in cmds} >= {"inspect", "analyze", "report", "tiles"}


def test_ways_to_start_run(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    for args in _commands():
        if args[0] == "report":  # write the page into the test's folder
            args = [*args[:-1], str(tmp_path / "report.html")]
        r = CliRunner().invoke(main, args, terminal_width=100)
        assert r.exit_code == 0, (args, r.output[-2000:])
        if args[0] == "inspect":
            first = r.output[: r.output.index("Per instruction")]
            assert "transpose_naive.cu:16" in first and "32-way" in first
            assert "tile[TILE][TILE + 1]" in r.output and "[32][33]" in r.output
        if args[0] == "report":
            page = (tmp_path / "report.html").read_text()
            assert page.startswith("<!DOCTYPE html>") and "<svg" in page
