"""conv2d on the GPU (marked gpu; the lead runs it on the H200): every task-file test size through the generated
C++ helper (`smemtile generate`, nvcc, a user's main() calling launch_conv2d()) against the float64 reference,
dense, through the dense overload and as a sub-view (every pitch 3 elements past the row, every array 1 element
into its allocation: the 16-byte gathers refuse it with cudaErrorInvalidValue, the element gather runs it); the
tile model's picks, other tiles and the epilogue; and the issue's command line, tiles -> verify. PATH 1
(conv2d_wgmma, sm_90a) on every test size it accepts, four tiles: the generated helper (dense, dense overload, the
refused odd sub-view) and the Python launcher (dense and a 16-byte-aligned sub-view).

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
ISSUE = "--n 32 --h 28 --w 28 --c 128 --k 128 --r 3 --s 3 --pad 1 --dtype bf16".split()  # issue 33's problem

# tiles besides the defaults: the model's wide warp tile, BK 64, a small block, 2 blocks/SM
TILES = [
    {"BM": 256, "BN": 128, "WM": 64, "WN": 64},
    {"BK": 64, "STAGES": 3},
    {"BM": 64, "BN": 64, "WM": 32, "WN": 32, "STAGES": 3},
    {"BM": 128, "BN": 128, "WM": 64, "WN": 64, "MIN_BLOCKS": 2},
]


def _cfg(tile: dict, problem: dict):
    return variants(
        resolve({"arch": FAM.default_arch, "tile": tile, "kernel": {"family": "conv2d", **problem}})
    )["fixed"]


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


# ---- PATH 1: conv2d_wgmma (sm_90a: the producer warpgroup's cp.async gather, wgmma consumers) ------------------------
# tiles of the sm_90a path: 128 x 128 over one consumer (MI 2) and over two, 128 x 256 over two, 3 and 5 stages,
# 64 x 64 (the smallest: many K tiles per block on the small test sizes)
WGMMA_TILES = [
    {"PATH": 1, "BM": 128, "BN": 128, "CONSUMERS": 1, "STAGES": 4},
    {"PATH": 1, "BM": 128, "BN": 128, "CONSUMERS": 2, "STAGES": 5},
    {"PATH": 1, "BM": 128, "BN": 256, "CONSUMERS": 2, "STAGES": 3},
    {"PATH": 1, "BM": 64, "BN": 64, "CONSUMERS": 1, "STAGES": 2},
]


def _wgmma_configs() -> tuple[list, list]:
    """(configurations, refused test sizes): every test size the path accepts (c % 8 == 0) with every tile; the
    others (c = 3, 13: the element gather's) are refused by configure, naming PATH 0."""
    from smemtile.errors import SpecError

    out, refused = [], []
    for p in FAM.test_sizes:
        for t in WGMMA_TILES:
            try:
                out.append(
                    variants(resolve({"arch": "sm_90a", "tile": t, "kernel": {"family": "conv2d", **p}}))[
                        "fixed"
                    ]
                )
            except SpecError as e:
                assert "use PATH 0" in str(e), e
                refused.append(p)
    return out, refused


def _sm90_device():
    from smemtile.gpu.run import open_device

    dev = open_device(0)
    if dev.cc != (9, 0):
        pytest.skip("conv2d_wgmma needs an sm_90 GPU (built for sm_90a)")
    return dev


@pytest.mark.gpu
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_the_wgmma_path_through_the_generated_helper(tmp_path):
    """Every accepted test size x every sm_90a tile through the nvcc-built generated helper: dense, the dense
    overload and the odd sub-view (pitches 3 past the row, arrays 1 element in: refused by the 16-byte gathers,
    cudaErrorInvalidValue)."""
    _sm90_device()
    cfgs, refused = _wgmma_configs()
    assert len(cfgs) == 5 * len(WGMMA_TILES) and len(refused) == 2 * len(WGMMA_TILES)
    assert all(FAM.name_expression(c).startswith("conv2d_wgmma<") for c in cfgs)
    failures, report = run_helpers(cfgs, tmp_path, layouts=True)
    out_dir = os.environ.get("SMEMTILE_TEST_REPORT")
    if out_dir:
        (Path(out_dir) / "conv2d_wgmma_gpu.json").write_text(json.dumps(report, indent=1, default=str))
    assert not failures, failures
    ran = [r for r in report if r.get("correct")]
    assert len(ran) >= 2 * len(cfgs)  # dense and the dense overload of each
    assert any(r["refused_by_plan"] and r["refused"] for r in report)


@pytest.mark.gpu
def test_the_wgmma_path_through_the_python_launcher():
    """The same configurations through smemtile.gpu.run (cuda.core, NVRTC for sm_90a): dense, and a sub-view the
    16-byte gathers take (every pitch 8 elements past the row, every array 8 elements into its allocation)."""
    import numpy as np

    from smemtile.families.base import subview_case
    from smemtile.gpu.run import LoadedKernel

    dev = _sm90_device()
    cfgs, _ = _wgmma_configs()
    bad = []
    for i, cfg in enumerate(cfgs):
        k = LoadedKernel(cfg, dev)
        try:
            inputs = FAM.make_inputs(cfg, np.random.default_rng(i))
            ref = FAM.reference(cfg, inputs)
            dense = k.check(inputs, ref)
            sub, offsets = subview_case(FAM, cfg, pad=8, offset=8)
            view = k.check_layout(inputs, ref, sub, offsets)
        finally:
            k.close()
        for what, res in (("dense", dense), ("sub-view", view)):
            if not res.correct:
                why = res.mismatch.describe() if res.mismatch else res.max_rel_error
                bad.append((FAM.name_expression(cfg), dict(cfg.problem), what, why))
    assert not bad, bad
