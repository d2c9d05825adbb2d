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
    # conv2d: a 3x3 with halo and stride 2, odd k (its own test sizes are tests/test_conv2d_gpu.py's)
    ("conv2d", {}, {"n": 2, "h": 14, "w": 14, "c": 32, "k": 40, "r": 3, "s": 3, "stride": 2, "pad": 1}),
    ("wgmma_gemm", {"BN": 128}, {"M": 520, "N": 1024, "K": 264, "dtype": "f16"}),
    # flash_attn: causal with seq_q != seq_kv (both tails), and head_dim 64 in fp16 non-causal
    ("flash_attn", {}, {"batch": 2, "heads": 3, "seq_q": 100, "seq_kv": 129, "head_dim": 128, "causal": 1}),
    ("flash_attn", {}, {"batch": 1, "heads": 2, "seq_q": 257, "head_dim": 64, "dtype": "f16"}),
]
# shapes for `tiles --top 1`: square, ragged, skinny M, skinny N, deep K, small, mid-size, huge K
TILE_SHAPES = [
    (1024, 1024, 1024),
    (1000, 1001, 333),
    (64, 4096, 4096),
    (4096, 64, 4096),
    (256, 256, 65536),
    (33, 4, 100),
    (2048, 2048, 512),
    (1000, 1000, 50000),
]


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
    p = subprocess.run(
        [
            nvcc_path(),
            "-std=c++17",
            "-Xcicc",
            "--sharedmem32=0",
            f"-arch={cfg.arch.name}",
            "-o",
            str(exe),
            str(work / "k.cu"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
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
        assert g["grid"] == list(plan.grid) and [s["grid"] for s in g["launch"]["steps"]] == [
            list(s.grid) for s in plan.steps
        ]
        assert (
            cfg.params["SPLIT_K"] > 1 and g["launch"]["steps"][0]["kernel"] == "smemtile_sgemm_splitk_prepare"
        )


# The layout matrix (issue 27): every residue of K modulo the 16-byte vector for the 16-bit GEMMs (K % 8 = 1..7, the
# dense K = 1023 wgmma case users hit), odd pitches for the memory families, each run dense through the dense
# overload, dense through the full helper, and as a sub-view (leading dimensions 3 past the row length, every
# array 1 element into its allocation): correct, or refused with cudaErrorInvalidValue exactly where the plan
# says so, never wrong.
MATRIX = [
    *[
        ("wgmma_gemm", {}, {"M": 257, "N": 136, "K": k, "dtype": dt})
        for k in range(1017, 1025)
        for dt in ("bf16", "f16")
    ],
    ("wgmma_gemm", {}, {"M": 4096, "N": 4096, "K": 1023, "dtype": "bf16"}),
    ("wgmma_gemm", {"BN": 128, "EPI": 0}, {"M": 300, "N": 203, "K": 77, "dtype": "f16"}),
    *[("hgemm", {}, {"M": 200, "N": 136, "K": k, "beta": 0.5}) for k in range(97, 105)],
    ("hgemm", {}, {"M": 200, "N": 136, "K": 72, "b_layout": "col", "dtype": "bf16"}),
    *[
        (
            "sgemm",
            {"BM": 128, "BN": 128, "TM": 8, "TN": 16, "REPACK": r},
            {"M": 300, "N": 257, "K": k, "beta": 0.5},
        )
        for r in (1, 2)
        for k in (129, 130, 131, 132)
    ],
    ("sgemm", {"BM": 64, "TM": 8, "STAGES": 2, "SPLIT_K": 4}, {"M": 64, "N": 1001, "K": 3001, "beta": -1.0}),
    *[
        ("transpose", p, {"rows": r, "cols": c, "dtype": dt})
        for dt, p in (
            ("f32", {}),
            ("f32", {"TILE": 64, "BLOCK_ROWS": 4, "PACK": 4}),
            ("f16", {}),
            ("f16", {"TILE": 128, "BLOCK_ROWS": 8, "PACK": 2}),
        )
        for (r, c) in ((1001, 777), (1024, 1000))
    ],
    *[("stencil2d", {"R": r}, {"ny": 301, "nx": 1001}) for r in (1, 2, 3, 4)],
    # kernels built with row pitches (PITCH 1): the sub-view runs (the dense kernels above refuse it)
    *[("stencil2d", {"R": r, "PITCH": 1}, {"ny": 301, "nx": 1001}) for r in (1, 4)],
    ("stencil2d", {"R": 2, "PITCH": 1}, {"ny": 64, "nx": 1024}),
    *[
        ("transpose", {**p, "PITCH": 1}, {"rows": 1001, "cols": 777, "dtype": dt})
        for dt, p in (("f32", {}), ("f16", {"TILE": 128, "BLOCK_ROWS": 8, "PACK": 2}))
    ],
    ("transpose", {"PITCH": 1}, {"rows": 1024, "cols": 1024, "dtype": "f32"}),
]


# the path of the report: `tiles 4096 4096 1023 --dtype bf16|f16 --arch sm_90a --top 1 --format yaml`
TILES_16BIT = [(4096, 4096, 1023, "bf16"), (4096, 4096, 1023, "f16"), (1000, 3000, 517, "bf16")]


def _tiles_pick_16bit(m: int, n: int, k: int, dt: str):
    from click.testing import CliRunner

    from smemtile.cli import main

    args = [
        "tiles",
        str(m),
        str(n),
        str(k),
        "--dtype",
        dt,
        "--arch",
        "sm_90a",
        "--top",
        "1",
        "--format",
        "yaml",
    ]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    return variants(resolve(yaml.safe_load(r.output)))["fixed"]


def _matrix_configs() -> list:
    out = [
        variants(resolve({"arch": FAMILIES[f].default_arch, "tile": p, "kernel": {"family": f, **q}}))[
            "fixed"
        ]
        for f, p, q in MATRIX
    ]
    return out + [_tiles_pick_16bit(*s) for s in TILES_16BIT]


def run_helpers(cfgs: list, tmp_path: Path, *, layouts: bool = False) -> tuple[list[str], list[dict]]:
    """Each configuration's generated .cu plus a user's main(), built by nvcc (in parallel, once per distinct
    source), run on random inputs through launch_<family>(), its output compared with the family's float64
    reference and the bytes around it checked untouched: (failures, report). ``layouts``: also through the dense
    overload and as a sub-view; a layout the plan refuses must be refused by the helper (cudaErrorInvalidValue)."""
    from smemtile.families.base import refusal, subview_case

    sources = {}
    for cfg in cfgs:
        sources.setdefault(render(cfg).source + "\n" + harness_main(cfg), []).append(cfg)
    works = [tmp_path / f"case{i}" for i in range(len(sources))]
    for w in works:
        w.mkdir()
    firsts = [v[0] for v in sources.values()]
    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as pool:
        exes = list(pool.map(_build, firsts, works))
    exe_of = {
        id(c): (exe, work)
        for (src, group), exe, work in zip(sources.items(), exes, works, strict=True)
        for c in group
    }
    failures, report = [], []
    for i, cfg in enumerate(cfgs):
        fam = FAMILIES[cfg.family]
        exe, work = exe_of[id(cfg)]
        runs = [(cfg, {}, {}, "dense")]
        if FAMILIES[cfg.family].workspaces(cfg):  # once allocating its own workspace, once with the caller's
            runs.append((cfg, {}, {"WORKSPACE": "1"}, "dense, caller's workspace"))
        if layouts:
            sub, offsets = subview_case(fam, cfg)
            runs += [(cfg, {}, {"DENSE": "1"}, "dense overload"), (sub, offsets, {}, "sub-view")]
        for run_cfg, offsets, extra_env, what in runs:
            inputs = fam.make_inputs(run_cfg, np.random.default_rng(100 + i))
            argv, env, out = run_arguments(run_cfg, inputs, work, offsets)
            p = subprocess.run(
                [str(exe), *argv],
                capture_output=True,
                text=True,
                env={**os.environ, **env, **extra_env},
                timeout=300,
            )
            label = f"{fam.name_expression(cfg)} {run_cfg.problem} ({what})"
            refused = refusal(fam, run_cfg, offsets)
            row = {
                "case": label,
                "grid": list(fam.launch(cfg).grid),
                "refused_by_plan": refused,
                "key": (fam.name_expression(cfg), repr(cfg.problem), what),
            }
            if refused is not None:
                ok = p.returncode == 3 and "invalid argument" in p.stderr
                row.update(correct=None, refused=ok)
                report.append(row)
                if not ok:
                    failures.append(
                        f"{label}: the plan refuses ({refused}) but the helper gave exit "
                        f"{p.returncode} {p.stderr.strip()}"
                    )
                continue
            if p.returncode != 0:
                failures.append(f"{label}: exit {p.returncode} {p.stderr.strip()}")
                continue
            raw, untouched = read_output(run_cfg, out, offsets)
            got = fam.decode_output(run_cfg, raw)  # bf16 travels as raw bits
            chk = compare(fam.reference(run_cfg, inputs), got, fam.tolerance_for(run_cfg), exact=fam.exact)
            row.update(
                correct=chk.correct and untouched, max_rel_error=chk.max_rel_error, untouched=untouched
            )
            report.append(row)
            if not chk.correct:
                failures.append(f"{label}: {chk.mismatch.describe()}")
            elif not untouched:
                failures.append(f"{label}: wrote outside the output's elements")
    return failures, report


@pytest.mark.gpu
def test_generated_helper_is_correct_on_the_gpu(tmp_path):
    failures, report = run_helpers(_configs(), tmp_path)
    out_dir = os.environ.get("SMEMTILE_TEST_REPORT")
    if out_dir:
        (Path(out_dir) / "helper_gpu.json").write_text(json.dumps(report, indent=1, default=str))
    assert not failures, failures
    ws = sum("caller's workspace" in r["case"] for r in report)
    assert ws >= 2 and len(report) == len(CASES) + len(TILE_SHAPES) + ws


@pytest.mark.gpu
def test_generated_helper_takes_the_users_layout_on_the_gpu(tmp_path):
    """Issue 27's matrix through the nvcc-built helper: dense (both overloads) and a sub-view with odd leading
    dimensions at odd addresses; correct and untouched outside the output, or refused exactly where the plan
    refuses; the K = 1023 wgmma case included."""
    failures, report = run_helpers(_matrix_configs(), tmp_path, layouts=True)
    out_dir = os.environ.get("SMEMTILE_TEST_REPORT")
    if out_dir:
        (Path(out_dir) / "helper_layouts_gpu.json").write_text(json.dumps(report, indent=1, default=str))
    assert not failures, failures
    assert any("K': 1023" in r["case"] and "sub-view" in r["case"] and r["correct"] for r in report)


def test_layout_matrix_covers_the_residues():
    """The matrix holds every K % 8 residue for both 16-bit GEMMs and odd pitches for the memory families (CPU)."""
    ks = {q["K"] % 8 for f, _, q in MATRIX if f == "wgmma_gemm"}
    assert ks == set(range(8))
    assert {q["K"] % 8 for f, _, q in MATRIX if f == "hgemm"} == set(range(8))
    assert any(f == "transpose" and q["rows"] % 2 and q["cols"] % 2 for f, _, q in MATRIX)
    assert {p["R"] for f, p, _ in MATRIX if f == "stencil2d"} == {1, 2, 3, 4}


def test_cases_cover_every_family_and_split_k():
    fams = {f for f, _, _ in CASES}
    assert fams == set(FAMILIES)
    assert any(p.get("SPLIT_K", 1) > 1 for _, p, _ in CASES)
    assert ROOT.exists()


@pytest.mark.gpu
def test_verify_reports_what_the_helper_does_on_the_gpu(tmp_path):
    """`verify` (the Python launcher through the same plan) and the nvcc-built helper give the same verdict per
    layout: correct on both, or refused by both (issue 27: verify checks what users run)."""
    from smemtile.gpu.run import LoadedKernel, open_device
    from smemtile.pipeline.verify import _subview

    picks = [
        c
        for c in _matrix_configs()
        if (c.family, c.problem.get("K")) in {("wgmma_gemm", 1023), ("hgemm", 104), ("sgemm", 131)}
        or c.family in ("stencil2d",)
    ][:8]
    assert {c.family for c in picks} >= {"wgmma_gemm", "hgemm", "sgemm", "stencil2d"}
    failures, report = run_helpers(picks, tmp_path, layouts=True)
    assert not failures, failures
    helper = {r["key"]: r for r in report}
    dev = open_device(0)
    for cfg in picks:
        fam = FAMILIES[cfg.family]
        inputs = fam.make_inputs(cfg, np.random.default_rng(7))
        ref = fam.reference(cfg, inputs)
        k = LoadedKernel(cfg, dev)
        try:
            sub = _subview(k, fam, cfg, inputs, ref)
            dense = k.check(dict(inputs), ref)
        finally:
            k.close()
        label = f"{fam.name_expression(cfg)} {cfg.problem}"
        assert dense.correct, (label, dense.to_dict())
        h = helper[(fam.name_expression(cfg), repr(cfg.problem), "sub-view")]
        if sub.get("refused"):
            assert h["refused"] is True, (label, sub, h)
        else:
            assert sub["correct"] and h["correct"], (label, sub, h)
