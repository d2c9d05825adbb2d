"""Adding a family is its folder and one registry line: a seventh family (tests/data/dummy_family/scale7: its
module, .cu and task.yaml) is copied in as a folder of ``smemtile.families``, registered with one line, and
gets the family contract (tests/family_contract.py), the bank model, generate and the CLI, with no other edit."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import family_contract as fc
import pytest

import smemtile.families as families_pkg
from smemtile.families import FAMILIES, configure
from smemtile.families.core import load
from smemtile.families.registry import REGISTRY
from smemtile.model.analysis import analyze_spec

HERE = Path(__file__).parent / "data" / "dummy_family"


@pytest.fixture
def scale7(tmp_path, monkeypatch):
    folder = tmp_path / "families"
    shutil.copytree(HERE, folder)
    monkeypatch.setattr(families_pkg, "__path__", [*families_pkg.__path__, str(folder)])
    monkeypatch.setitem(REGISTRY, "scale7", "scale7")  # the one registry line
    monkeypatch.setitem(FAMILIES, "scale7", load(REGISTRY["scale7"]))
    yield FAMILIES["scale7"]
    sys.modules.pop("smemtile.families.scale7", None)


def test_the_seventh_family_keeps_the_contract(scale7, tmp_path):
    fc.check_task_sizes(scale7)
    assert [p["n"] for p in scale7.test_sizes] == [1, 1000, 4097]  # from its own task.yaml
    assert fc.check_compiles(scale7)["registers"] > 0
    assert fc.check_helper_grid(scale7, tmp_path) == 4  # three test sizes and one bench size
    assert fc.check_reference(scale7) == 3
    fc.check_generates(configure("scale7", {"n": 1000}, {}, "sm_90"))


def test_the_seventh_family_goes_through_the_bank_model_and_the_cli(scale7, tmp_path):
    cfg = configure("scale7", {"TILE": 128, "n": 1000}, {}, "sm_90")
    res = {r.access.name: r for r in analyze_spec(scale7.spec(cfg))}
    assert {k: int(r.bank.wavefronts.max()) for k, r in res.items()} == {"stage": 1, "read": 1}
    spec = tmp_path / "scale7.yaml"
    spec.write_text("arch: sm_90\ntile: {TILE: 128}\nkernel: {family: scale7, n: 1000}\n")
    from click.testing import CliRunner

    from smemtile.cli import main

    out = tmp_path / "scale7.cu"
    r = CliRunner().invoke(main, ["generate", str(spec), "-o", str(out), "--no-compile"])
    assert r.exit_code == 0, r.output
    assert "launch_scale7(const float* in, float* out, int n, float alpha" in out.read_text()
