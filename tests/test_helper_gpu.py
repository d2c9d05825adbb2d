"""The path a user takes: `smemtile generate -o k.cu`, nvcc, their own main() calling the generated
launch_<family>() helper. For every family, split K, and `smemtile tiles --top 1` picks of many shapes, the
helper's result matches the float64 reference on the GPU (marked gpu), and it builds here (marked slow)."""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import ROOT, nvcc_path
from harness import harness_main, read_output, run_arguments

from smemtile.codegen.render import render
from smemtile.families import FAMILIES, configure
from smemtile.gpu.run import compare
from smemtile.pipeline.fixes import variants
from smemtile.pipeline.specs import resolve

# (family, template parameters, problem): every family, both sgemm copies, split K with and without beta
CASES = [
    ("sgemm", {}, {"M": 1000, "N": 1001, "K": 333, "alpha": 0.75, "beta": -1.25}),
    ("sgemm", {"BM": 128, "TM": 8, "A_VEC": 0}, {"M": 257, "N": 131, "K": 77, "beta": 0.5}),
    (
        "sgemm",
        {"BM": 64, "TM": 8, "STAGES": 2, "SPLIT_K": 4, "MIN_BLOCKS": 3},
        {"M": 64, "N": 1000, "K": 5000},
    ),
    ("sgemm", {"BM": 64, "TM": 8, "STAGES": 2, "SPLIT_K": 8}, {"M": 100, "N": 300, "K": 9000, "beta": 0.5}),
    # the RAGGED loop (unaligned K and N, an 8x8 tile) with split K
    (
        "sgemm",
        {"BM": 128, "BN": 64, "BK": 16, "TM": 8, "TN": 8, "MIN_BLOCKS": 3, "SPLIT_K": 2, "REPACK": 2},
        {"M": 999, "N": 1001, "K": 2003, "beta": 0.5},
    ),
    # REPACK: unaligned A and B copied into the workspace first (16-byte loop); B only (K % 4 == 0) with split K
    (
        "sgemm",
        {"BM": 128, "BN": 128, "TM": 8, "TN": 16, "REPACK": 1},
        {"M": 1000, "N": 1001, "K": 333, "beta": 0.5},
    ),
    ("sgemm", {"BM": 64, "TM": 8, "STAGES": 2, "SPLIT_K": 4, "REPACK": 1}, {"M": 64, "N": 1001, "K": 5000}),
    ("transpose", {}, {"rows": 1000, "cols": 777}),
    ("transpose", {"TILE": 32, "BLOCK_ROWS": 8}, {"rows": 1024, "cols": 2048}),
    ("transpose", {"VEC": 1}, {"rows": 513, "cols": 257, "dtype": "f16"}),
    ("transpose", {}, {"rows": 512, "cols": 256, "dtype": "bf16"}),
    ("stencil2d", {"R": 1}, {"ny": 1000, "nx": 999}),
    ("stencil2d", {"R": 4, "BX": 64, "BY": 4}, {"ny": 7, "nx": 300}),
    # a tall transpose tile (TILE_Y 128) with ragged edges; a stencil whose rows are not float4-aligned (nx % 4)
    ("transpose", {"TILE": 32, "BLOCK_ROWS": 8, "TILE_Y": 128}, {"rows": 1000, "cols": 777}),
    # transpose: fp16 half2 pairs (PACK 2) with two tiles per block, edge tiles below and right of whole ones;
    # fp32 16-byte phase-2 loads (PACK 4) with evict-first global accesses
    (
        "transpose",
        {"TILE": 128, "BLOCK_ROWS": 8, "PACK": 2, "TILES": 2},
        {"rows": 1000, "cols": 1032, "dtype": "f16"},
    ),
    ("transpose", {"TILE": 64, "BLOCK_ROWS": 4, "PACK": 4, "STREAM": 1}, {"rows": 456, "cols": 264}),
    # transpose ASYNC: cp.async into the tile, two tiles per block with an edge tile below whole ones
    (
        "transpose",
        {"TILE": 64, "BLOCK_ROWS": 2, "PACK": 4, "TILES": 2, "ASYNC": 1},
        {"rows": 456, "cols": 264},
    ),
    # transpose GROUP 0: the launch order column by column, ragged in both directions
    ("transpose", {"TILE": 64, "BLOCK_ROWS": 8, "GROUP": 0}, {"rows": 1000, "cols": 777}),
    ("stencil2d", {"R": 3, "RY": 8, "BY": 4}, {"ny": 301, "nx": 1001}),
    # hgemm: masked K tail with 16-byte copies; split K with column-major B; the 2-byte copy path with f16 C
    ("hgemm", {}, {"M": 1000, "N": 1000, "K": 336, "alpha": 0.75, "beta": -1.25, "dtype": "bf16"}),
    (
        "hgemm",
        {"BM": 64, "BN": 64, "WM": 32, "WN": 32, "SPLIT_K": 3},
        {"M": 64, "N": 1000, "K": 4000, "beta": 0.5, "b_layout": "col"},
    ),
    ("hgemm", {"BM": 128, "BN": 128, "STAGES": 3}, {"M": 257, "N": 131, "K": 77, "c_dtype": "f16"}),
    # hgemm with bf16 C (raw bits through the helper) and the 4-byte register copies (K odd: ALIGN 2)
    (
        "hgemm",
        {"STAGES": 3, "ALIGN": 2},
        {"M": 300, "N": 264, "K": 1023, "beta": 0.5, "dtype": "bf16", "c_dtype": "bf16"},
    ),
    # wgmma_gemm (sm_90a): TMA tails in M, N, K and masked stores (N % 8 != 0); fp16 with TMA stores, 128 x 128
    ("wgmma_gemm", {}, {"M": 1000, "N": 1001, "K": 333, "dtype": "bf16"}),
    ("wgmma_gemm", {"BN": 128}, {"M": 520, "N": 1024, "K": 264, "dtype": "f16"}),
]
# shapes for `tiles --top 1`: square, ragged, skinny M, skinny N, deep K, small, mid-size, huge K
TILE_SHAPES = [(1024, 1024, 1024), (1000, 1001, 333), (64, 4096, 4096), (4096, 64, 4096), (256, 256, 65536),
               (33, 4, 100), (2048, 2048, 512), (1000, 1000, 50000)]  # fmt: skip


def _tiles_yaml(m: int, n: int, k: int) -> str:
    """What `smemtile tiles M N K --top 1 --format yaml` prints (in process: the same command)."""
    from click.testing import CliRunner

    from smemtile.cli import main

    r = CliRunner().invoke(main, ["tiles", str(m), str(n), str(k), "--top", "1", "--format", "yaml"])
    assert r.exit_code == 0, r.output
    return r.output


def _tiles_pick(m: int, n: int, k: int):
    return variants(resolve(yaml.safe_load(_tiles_yaml(m, n, k))))["fixed"]


def _configs() -> list:
    out = [
        variants(resolve({"arch": FAMILIES[f].default_arch, "tile": p, "kernel": {"family": f, **q}}))[
            "fixed"
        ]
        for f, p, q in CASES
    ]
    out += [_tiles_pick(*s) for s in TILE_SHAPES]
    return out


def _build(cfg, work: Path) -> Path:
    (work / "k.cu").write_text(render(cfg).source + "\n" + harness_main(cfg))
    exe = work / "k"
    p = subprocess.run([nvcc_path(), "-std=c++17", f"-arch={cfg.arch.name}", "-o", str(exe), str(work / "k.cu")],
                       capture_output=True, text=True, timeout=900)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    return exe


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_harness_builds_around_the_generated_helper(tmp_path):
    """Here (no GPU): the generated file plus a user's main() links into a program with nvcc."""
    cfg = configure(
        "sgemm", {"BM": 64, "TM": 8, "STAGES": 2, "SPLIT_K": 4, "M": 64, "N": 100, "K": 400}, {}, "sm_90"
    )
    assert _build(cfg, tmp_path).exists()


def test_tiles_picks_grid_in_the_helper_equals_json(tmp_path):
    """For tiles picks (split K included), generate --json's launch is the family's plan (what the helper
    computes: its C++ expressions are checked against g++ in test_families.py)."""
    from click.testing import CliRunner

    from smemtile.cli import main

    for m, n, k in TILE_SHAPES[2:3]:  # skinny M: a split K pick
        spec = tmp_path / f"t{m}x{n}.yaml"
        spec.write_text(_tiles_yaml(m, n, k))
        g = json.loads(CliRunner().invoke(main, ["generate", str(spec), "--json", "--no-compile"]).stdout)
        cfg = variants(resolve(yaml.safe_load(spec.read_text())))["fixed"]
        plan = FAMILIES[cfg.family].launch(cfg)
        assert g["grid"] == list(plan.grid) and [s["grid"] for s in g["launch"]["steps"]] == \
            [list(s.grid) for s in plan.steps]  # fmt: skip
        assert (
            cfg.params["SPLIT_K"] > 1 and g["launch"]["steps"][0]["kernel"] == "smemtile_sgemm_splitk_prepare"
        )


def run_helpers(cfgs: list, tmp_path: Path) -> tuple[list[str], list[dict]]:
    """Each configuration's generated .cu plus a user's main(), built by nvcc (in parallel), run on random inputs
    through launch_<family>(), its output compared with the family's float64 reference: (failures, report)."""
    works = [tmp_path / f"case{i}" for i in range(len(cfgs))]
    for w in works:
        w.mkdir()
    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as pool:
        exes = list(pool.map(_build, cfgs, works))
    failures, report = [], []
    runs = [
        (i, ws)
        for i, cfg in enumerate(cfgs)
        for ws in ((0, 1) if FAMILIES[cfg.family].workspaces(cfg) else (0,))
    ]
    for i, ws in runs:  # a helper with a workspace: once allocating its own, once with the caller's
        cfg, exe, work = cfgs[i], exes[i], works[i]
        fam = FAMILIES[cfg.family]
        inputs = fam.make_inputs(cfg, np.random.default_rng(100 + i))
        argv, env, out = run_arguments(cfg, inputs, work)
        env = {**env, "WORKSPACE": "1"} if ws else env
        p = subprocess.run(
            [str(exe), *argv], capture_output=True, text=True, env={**os.environ, **env}, timeout=300
        )
        label = f"{fam.name_expression(cfg)} {cfg.problem}" + (" (caller's workspace)" if ws else "")
        if p.returncode != 0:
            failures.append(f"{label}: exit {p.returncode} {p.stderr.strip()}")
            continue
        got = fam.decode_output(cfg, read_output(cfg, out))  # bf16 travels as raw bits
        chk = compare(fam.reference(cfg, inputs), got, fam.tolerance_for(cfg), exact=fam.exact)
        report.append({"case": label, "grid": list(fam.launch(cfg).grid), "correct": chk.correct,
                       "max_rel_error": chk.max_rel_error})  # fmt: skip
        if not chk.correct:
            failures.append(f"{label}: {chk.mismatch.describe()}")
    return failures, report


@pytest.mark.gpu
def test_generated_helper_is_correct_on_the_gpu(tmp_path):
    failures, report = run_helpers(_configs(), tmp_path)
    out_dir = os.environ.get("SMEMTILE_TEST_REPORT")
    if out_dir:
        (Path(out_dir) / "helper_gpu.json").write_text(json.dumps(report, indent=1))
    assert not failures, failures
    ws = sum("caller's workspace" in r["case"] for r in report)
    assert ws >= 2 and len(report) == len(CASES) + len(TILE_SHAPES) + ws


def test_cases_cover_every_family_and_split_k():
    fams = {f for f, _, _ in CASES}
    assert fams == set(FAMILIES)
    assert any(p.get("SPLIT_K", 1) > 1 for _, p, _ in CASES)
    assert ROOT.exists()
