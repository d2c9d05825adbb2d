"""analyze and generate report the same accesses, layouts and wavefronts for every kernel sample: both come
from the family's spec and the same fix search (issue 12)."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner
from conftest import SAMPLES

from smemtile.cli import main

KERNEL_SAMPLES = [p for p in SAMPLES if (yaml.safe_load(p.read_text()) or {}).get("kernel")]


def _json(*args: str) -> dict:
    r = CliRunner().invoke(main, list(args))
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize("sample", KERNEL_SAMPLES, ids=lambda p: p.stem)
def test_analyze_and_generate_agree(sample):
    a = _json("analyze", str(sample), "--json")
    g = _json("generate", str(sample), "--json", "--no-compile")
    before = {x["name"]: (x["op"], x["width"], x["wavefronts"], x["ideal_wavefronts"]) for x in a["accesses"]}
    assert before == {
        b["name"]: (b["op"], b["width"], b["wavefronts"], b["ideal"]) for b in g["banks_baseline"]
    }
    after = {
        x["name"]: (x["op"], x["width"], x["wavefronts"], x["ideal_wavefronts"]) for x in a["fixed_accesses"]
    }
    assert after == {b["name"]: (b["op"], b["width"], b["wavefronts"], b["ideal"]) for b in g["banks"]}
    recommended = {f["buffer"]: f["recommended"]["layout"] for f in a["fixes"]}
    for name, lay in g["layouts"].items():
        want = {k: v for k, v in recommended.get(name, {"pad": 0}).items() if v is not None}
        assert {k: v for k, v in lay.items() if v is not None} == want
    assert [x["name"] for x in g["kernel_accesses"]] == [x["name"] for x in a["accesses"]]
