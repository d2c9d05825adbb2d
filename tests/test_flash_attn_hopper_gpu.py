"""flash_attn PATH 1 (flash_attn_wgmma, sm_90a) on an H100 / H200: the generated helper built by nvcc over the task's
test sizes (dense and sub-view), o and lse through the Python launcher, packed QKV and strided views (through the
tensor maps), the issue's command. Run: ``python -m pytest -n 0 -p no:cacheprovider -m gpu
tests/test_flash_attn_hopper_gpu.py``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import nvcc_path, run_cli
from test_flash_attn_gpu import _device, _run_layout
from test_helper_gpu import run_helpers

from smemtile.families import FAMILIES
from smemtile.families.flash_attn import LSE_TOLERANCE
from smemtile.pipeline.fixes import variants
from smemtile.pipeline.specs import resolve

FAM = FAMILIES["flash_attn"]
ISSUE = "--batch 4 --heads 32 --seq 8192 --head-dim 128 --dtype bf16".split()
# PATH 1 tiles besides the sm_90a default (BN 128, 2 stages, OVERLAP 1): each schedule, BN 64, deeper rings,
# the persistent grid
TILES = [
    {"PATH": 1, "OVERLAP": 0},
    {"PATH": 1, "OVERLAP": 2},
    {"PATH": 1, "BN": 64, "STAGES": 4},
    {"PATH": 1, "BN": 128, "STAGES": 3, "OVERLAP": 2},
    # a persistent grid of 2 CTAs: each runs several items (ring positions and barrier phases carried over)
    {"PATH": 1, "PERSISTENT": 1, "SMS": 2},
    {"PATH": 1, "PERSISTENT": 1, "SMS": 2, "OVERLAP": 2, "BN": 64, "STAGES": 3},
]


def _cfg(tile: dict, problem: dict):
    return variants(resolve({"arch": "sm_90a", "tile": tile, "kernel": {"family": "flash_attn", **problem}}))[
        "fixed"
    ]


def _fits(tile: dict, problem: dict) -> bool:
    hd = problem.get("head_dim", 128)
    return not (hd == 128 and tile.get("STAGES", 2) * tile.get("BN", 128) > 384)


def _configs() -> list:
    sizes = list(FAM.test_sizes)
    out = [_cfg({"PATH": 1}, p) for p in sizes]
    for i, t in enumerate(TILES):
        out += [_cfg(t, p) for p in (sizes[i % len(sizes)], sizes[(i + 3) % len(sizes)]) if _fits(t, p)]
    return out


@pytest.mark.gpu
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_every_test_size_through_the_generated_helper(tmp_path):
    failures, report = run_helpers(_configs(), tmp_path, layouts=True)
    out_dir = os.environ.get("SMEMTILE_TEST_REPORT")
    if out_dir:
        (Path(out_dir) / "flash_attn_hopper_gpu.json").write_text(json.dumps(report, indent=1, default=str))
    assert not failures, failures
    assert len([r for r in report if r.get("correct")]) >= len(FAM.test_sizes)


@pytest.mark.gpu
def test_o_and_lse_through_the_python_launcher():
    from smemtile.gpu.run import LoadedKernel

    dev, bad = _device(), []
    for i, p in enumerate(FAM.test_sizes):
        for tile in ({"PATH": 1}, TILES[i % len(TILES)]):
            if not _fits(tile, p):
                continue
            cfg = _cfg(tile, p)
            k = LoadedKernel(cfg, dev)
            try:
                x = FAM.make_inputs(cfg, np.random.default_rng(i))
                res = k.check(x, FAM.reference(cfg, x))
                lse = k.output("lse").astype(np.float64)
            finally:
                k.close()
            err = float(np.abs(lse - FAM.reference_lse(cfg, x)).max())
            if not res.correct or not err <= LSE_TOLERANCE:
                bad.append((FAM.name_expression(cfg), p, res.max_rel_error, err))
    assert not bad, bad


@pytest.mark.gpu
@pytest.mark.parametrize(
    "problem",
    [
        {"batch": 2, "heads": 3, "seq_q": 100, "seq_kv": 300, "head_dim": 128, "causal": 1},
        {"batch": 1, "heads": 2, "seq_q": 129, "head_dim": 64, "dtype": "f16"},
    ],
)
def test_packed_qkv_and_views_through_the_tensor_maps(problem):
    """A packed QKV tensor (non-monotonic strides for TMA), q as heads 1..h of a wider tensor, k and v as
    [b, h, s, d] tensors, o with 8 elements of padding after each head (odd: 2-byte stores)."""
    q = {"seq_kv": problem["seq_q"], **problem}
    h, s, skv, d = q["heads"], q["seq_q"], q["seq_kv"], q["head_dim"]
    hd = h * d
    layouts = {
        "views": {
            "q": ("q", d, s * (h + 2) * d, (h + 2) * d, d),
            "k": ("k", 0, h * skv * d, d, skv * d),
            "v": ("v", 0, h * skv * d, d, skv * d),
            "o": ("o", 0, s * h * (d + 8), h * (d + 8), d + 8),
        },
        "odd o": {
            "q": ("q", 0, s * hd, hd, d),
            "k": ("k", 0, skv * hd, hd, d),
            "v": ("v", 0, skv * hd, hd, d),
            "o": ("o", 1, s * h * (d + 1), h * (d + 1), d + 1),
        },
    }
    if s == skv:
        layouts["packed qkv"] = {
            "q": ("qkv", 0, s * 3 * hd, 3 * hd, d),
            "k": ("qkv", hd, s * 3 * hd, 3 * hd, d),
            "v": ("qkv", 2 * hd, s * 3 * hd, 3 * hd, d),
            "o": ("o", 0, s * hd, hd, d),
        }
    dev, bad = _device(), []
    for tile in ({"PATH": 1}, {"PATH": 1, "BN": 64, "STAGES": 3, "OVERLAP": 2}):
        cfg = _cfg(tile, problem)
        for name, lay in layouts.items():
            err, lse_err, untouched = _run_layout(dev, cfg, lay, np.random.default_rng(7))
            if not (err <= FAM.tolerance_for(cfg) and lse_err <= LSE_TOLERANCE and untouched):
                bad.append((name, FAM.name_expression(cfg), err, lse_err, untouched))
    assert not bad, bad


@pytest.mark.gpu
def test_the_issue_command_is_correct_on_the_gpu():
    """tiles --arch sm_90a --top 1 --format yaml | verify -: PATH 1, correct (the float64 reference of the whole
    problem: a minute or two of CPU)."""
    t = run_cli(
        "tiles", "--family", "flash_attn", *ISSUE, "--arch", "sm_90a", "--top", "1", "--format", "yaml"
    )
    assert t.returncode == 0 and "PATH: 1" in t.stdout, t.stderr
    v = run_cli("verify", "-", "--json", input=t.stdout)
    assert v.returncode == 0, v.stderr[-2000:]
    doc = json.loads(v.stdout)
    assert "flash_attn_wgmma" in json.dumps(doc)
