"""docs/api.md: its ```python cells run in order as one notebook session (CPU only), it documents every public
function of the API and the integrations, and the README points to it."""

from __future__ import annotations

import contextlib
import io
import os
import re

from conftest import ROOT

import smemtile.api
import smemtile.kernel_tuner
import smemtile.triton

DOC = ROOT / "docs" / "api.md"
TEXT = DOC.read_text()
CELLS = re.findall(r"```python\n(.*?)```", TEXT, flags=re.S)


def test_the_notebook_cells_run():
    assert len(CELLS) >= 5
    joined = "\n".join(CELLS)
    for needle in (
        "smemtile.analyze(",
        "smemtile.tiles(",
        "smemtile.triton.prune(",
        "smemtile.kernel_tuner.export(",
    ):
        assert needle in joined, needle
    scope: dict = {"__name__": "docs_api"}
    old = os.getcwd()
    os.chdir(ROOT)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            for i, cell in enumerate(CELLS):
                try:
                    exec(compile(cell, f"docs/api.md cell {i + 1}", "exec"), scope)
                except Exception as e:
                    raise AssertionError(f"docs/api.md cell {i + 1} fails: {type(e).__name__}: {e}") from e
    finally:
        os.chdir(old)
    printed = out.getvalue()
    assert "AnalyzeResult('samples/gemm_a_column.yaml', 2 accesses, worst 32x -> 1x)" in printed
    assert "OccupancyResult(4 blocks/SM, 50%, limited by shared_memory)" in printed


def test_every_public_function_is_documented():
    names = [f"smemtile.{n}(" for n in smemtile.api.__all__]
    names += [f"`{n}(" for n in ("prune", "pruner", "rank", "configs_as_dicts", "configs")]
    names += ["`export(family", "`tune(family"]
    for n in names:
        assert n in TEXT, f"docs/api.md does not document {n}"
    for mod, fn in ((smemtile.triton, "prune"), (smemtile.kernel_tuner, "export")):
        assert getattr(mod, fn).__doc__


def test_the_readme_points_to_the_api_page():
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"^## Python API\n(.*?)(?=^## )", readme, flags=re.S | re.M)
    assert m, "README.md has no '## Python API' section"
    assert "docs/api.md" in m.group(1) and "smemtile.analyze" in m.group(1)
    assert readme.index("## Commands") < readme.index("## Python API") < readme.index("## Samples")
