"""conv2d on the GPU (marked gpu; the lead runs it on the H200): every task-file test size through the generated
C++ helper (`smemtile generate`, nvcc, a user's main() calling launch_conv2d()) against the float64 reference,
dense, through the dense overload and as a sub-view (every pitch 3 elements past the row, every array 1 element
into its allocation: the 16-byte gathers refuse it with cudaErrorInvalidValue, the element gather runs it); the
tile model's picks, other tiles and the epilogue; and the issue's command line, tiles -> verify.

    SMEMTILE_FORCE_GPU_TESTS=1 python -m pytest -q -n 0 -p no:cacheprovider tests/test_conv2d_gpu.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import nvcc_path, run_cli
from test_helper_gpu import run_helpers

from smemtile.families import FAMILIES
from smemtile.pipeline.fixes import variants
from smemtile.pipeline.specs import resolve

FAM = FAMILIES["conv2d"]
ISSUE = ["32", "28", "28", "128", "128", "3", "3", "1", "--dtype", "bf16"]  # n h w c k r s stride, pad same = 1

# tiles besides the defaults: the model's wide warp tile, BK 64, a small block, 2 blocks/SM
TILES = [
    {"BM": 256, "BN": 128, "WM": 64, "WN": 64},
    {"BK": 64, "STAGES": 3},
    {"BM": 64, "BN": 64, "WM": 32, "WN": 32, "STAGES": 3},
    {"BM": 128, "BN": 128, "WM": 64, "WN": 64, "MIN_BLOCKS": 2},
]


def _cfg(tile: dict, problem: dict):
    return variants(resolve({"arch": FAM.default_arch, "tile": tile, "kernel": {"family": "conv2d", **problem}}))[
        "fixed"
    ]


def _configs() -> list:
    sizes = list(FAM.test_sizes)
    out = [_cfg({"BM": 128}, p) for p in sizes]  # the defaults (a parameter given: no model pick)
    out += [_cfg({}, p) for p in sizes]  # the tile model's #1 for each
    out += [_cfg({"VEC": 1}, p) for p in sizes[:4]]  # the element gather on aligned sizes: the sub-view runs
    out += [_cfg(t, sizes[i % len(sizes)]) for i, t in enumerate(TILES)]
    return out


@pytest.mark.gpu
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_every_test_size_through_the_generated_helper(tmp_path):
    failures, report = run_helpers(_configs(), tmp_path, layouts=True)
    out_dir = os.environ.get("SMEMTILE_TEST_REPORT")
    if out_dir:
        (Path(out_dir) / "conv2d_gpu.json").write_text(json.dumps(report, indent=1, default=str))
    assert not failures, failures
    ran = [r for r in report if r.get("correct")]
    assert len(ran) >= 3 * len(FAM.test_sizes)
    assert any("sub-view" in r["case"] for r in ran)  # the element gather took the odd pitches and addresses
    assert any(r["refused_by_plan"] and r["refused"] for r in report)  # the 16-byte gathers refused them


@pytest.mark.gpu
def test_the_issue_command_is_correct_on_the_gpu(tmp_path):
    """`smemtile tiles --family conv2d ... --top 1 --format yaml | smemtile verify -` (the issue's problem)."""
    for arch in ("sm_80", "sm_90"):  # verify compiles each for the device's own architecture
        t = run_cli("tiles", "--family", "conv2d", *ISSUE, "--arch", arch, "--top", "1", "--format", "yaml")
        assert t.returncode == 0, t.stderr
        v = run_cli("verify", "-", "--json", input=t.stdout, process=True)
        assert v.returncode == 0, v.stderr[-2000:]
        doc = json.loads(v.stdout)
        assert doc["correct"] is True and doc["spills"] == 0, doc
        assert doc["max_rel_error"] <= FAM.TOLERANCE_BF16_Y and doc["tflops"] > 0
