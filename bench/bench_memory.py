"""Issue 20, the memory-bound half: transpose and stencil2d against a device-to-device copy of the same bytes.

Every configuration is built exactly as ``smemtile verify`` builds it: a family configuration
(``smemtile.families.configure``), NVRTC through ``smemtile.gpu.run.LoadedKernel`` and launched step by step
through the family's launch plan (``Family.launch``). Nothing here knows a kernel's grid or arguments.

The measurement is bench/run.py's (``bench.run.run_case``, what ``python -m bench.run FAMILY PLAN`` runs for the
task files' plans); this script holds the historical plans of issue 20 and the fitting and scoring of the memory
models. Correctness first, for every configuration: the family's own small test sizes (ragged shapes included),
then the timed size, the output poisoned before each run (``LoadedKernel.check``, as ``verify`` checks: transpose
bit for bit, stencil2d against float64 within the family's tolerance). A configuration that fails is reported and
never timed.

Timing, per case (one problem): every configuration of the case and the reference, ``cuMemcpyDtoDAsync`` of one
array of the same size (bytes read + bytes written = the kernel's), in alternating rounds (order reversed every
other round), ``--rounds`` (>= 15) rounds after 3 warm-up calls each; before every timed call a 512 MiB
``cuMemsetD8Async`` (outside the events) evicts L2; CUDA events around the call alone. Reported: median, spread
= (p90 - p10) / median, GB/s = (read + write bytes) / median, ratio = copy median / ours median, and the median
of the per-round ratios (each against the copy timed in the same round).

Plan ``run4`` (issue 20, the transpose line): every candidate of the transpose model
(``smemtile.families.transpose.tiles.CANDIDATES``) for f32 and f16, each with the layout the fix search gives it
(what ``generate`` builds), at 6 shapes: 3 labelled ``fit`` (the model's constants are fitted on them only) and 3
``held_out`` (scored, never fitted), one ragged in each group. Timing through ``bench/timing.py`` (torch events,
a 512 MiB tensor zeroed before every timed call, alternating rounds), the copy is ``cuMemcpyDtoDAsync``.

Plan ``spearman`` (session 4): the frozen models over their whole ranked lists on their held-out shapes (stencil
R 1-4 at 8192^2: the top 12 of `smemtile tiles --family stencil2d` and 24 evenly spaced ranks down to the last;
transpose: every calibrated candidate), each configuration carrying the model's prediction from when the plan was
written; ``--score FILE`` adds Spearman, the #1 against the best measured and the median errors to the file.

Plan ``heldout`` (session 4, continued): the same sampling and scoring for the models refitted on everything up to
plan spearman, on shapes none of the earlier runs measured (stencil R 1-4 at 6144^2 and 2048 x 16384; transpose
f32 and f16 at 5000 x 7000, 12288 x 6144 and 8192 x 5000). The small-size checks draw their inputs and float64
reference once per case and test size (the reference does not depend on the tile), every configuration is
checked against them.

    python -m bench.bench_memory --list [--plan sweep|final|run4|spearman|heldout]   # (no GPU)
    python -m bench.bench_memory --prebuild DIR [--plan ...]           # NVRTC cubins + DIR/plan.json
    SMEMTILE_CACHE_DIR=DIR python -m bench.bench_memory --plan run4 --plan-file DIR/plan.json \
        --json $OUT/memory.json
    python -m bench.bench_memory --fit bench/results/memory_h200_run4.json    # the model's data file
    python -m bench.bench_memory --score bench/results/memory_h200_session4_spearman.json
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from smemtile.families import FAMILIES, configure  # noqa: E402

FLUSH_BYTES = 512 << 20
ARCH = "sm_90"


@dataclass(frozen=True)
class Config:
    label: str
    params: dict
    layouts: dict = field(default_factory=dict)
    # plan spearman: the frozen model's rank, GB/s, time and ratio to a copy, computed when the plan is written
    predicted: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Case:
    name: str
    family: str
    problem: dict
    configs: tuple[Config, ...]
    role: str = ""  # run4: "fit" (the model is fitted on it) or "held_out" (only scored)


# run4: (role, rows, cols); one ragged shape in each group (edge tiles take the scalar path)
RUN4_SHAPES = (
    ("fit", 8192, 8192),
    ("fit", 4096, 4096),
    ("fit", 5000, 6000),
    ("held_out", 4096, 16384),
    ("held_out", 16384, 4096),
    ("held_out", 7000, 9000),
)


def pad1():
    return {"tile": {"pad": 1}}


def swz(b, m, s):
    return {"tile": {"swizzle": [b, m, s]}}


def transpose_configs(dtype: str, plan: str) -> tuple[Config, ...]:
    if plan == "final" and dtype == "f32":
        return (
            Config("T64x4 pad1", {"TILE": 64, "BLOCK_ROWS": 4}, pad1()),
            Config("T64x8 pad1", {"TILE": 64, "BLOCK_ROWS": 8}, pad1()),
            Config("T64x8 swz326", {"TILE": 64, "BLOCK_ROWS": 8}, swz(3, 2, 6)),
            Config("T64xY128x4 pad1", {"TILE": 64, "BLOCK_ROWS": 4, "TILE_Y": 128}, pad1()),
            Config("T64xY128x8 pad1", {"TILE": 64, "BLOCK_ROWS": 8, "TILE_Y": 128}, pad1()),
            Config("T64xY128x16 pad1", {"TILE": 64, "BLOCK_ROWS": 16, "TILE_Y": 128}, pad1()),
            Config("T32xY128x8 pad1", {"TILE": 32, "BLOCK_ROWS": 8, "TILE_Y": 128}, pad1()),
            Config("T32xY256x8 pad1", {"TILE": 32, "BLOCK_ROWS": 8, "TILE_Y": 256}, pad1()),
            Config("T32x8 pad1 (old sample)", {"TILE": 32, "BLOCK_ROWS": 8}, pad1()),
        )
    if plan == "final":
        return (
            Config("T64x4 swz336", {"TILE": 64, "BLOCK_ROWS": 4}, swz(3, 3, 6)),
            Config("T64x8 swz336", {"TILE": 64, "BLOCK_ROWS": 8}, swz(3, 3, 6)),
            Config("T64xY128x4 swz336", {"TILE": 64, "BLOCK_ROWS": 4, "TILE_Y": 128}, swz(3, 3, 6)),
            Config("T64xY128x8 swz336", {"TILE": 64, "BLOCK_ROWS": 8, "TILE_Y": 128}, swz(3, 3, 6)),
            Config("T64xY256x8 swz336", {"TILE": 64, "BLOCK_ROWS": 8, "TILE_Y": 256}, swz(3, 3, 6)),
            Config("T64xY256x16 swz336", {"TILE": 64, "BLOCK_ROWS": 16, "TILE_Y": 256}, swz(3, 3, 6)),
            Config("T128x8 swz337", {"TILE": 128, "BLOCK_ROWS": 8}, swz(3, 3, 7)),
            Config("T128x8 swz337 G16", {"TILE": 128, "BLOCK_ROWS": 8, "GROUP": 16}, swz(3, 3, 7)),
        )
    if dtype == "f32":
        sweep = [
            Config("T64x4 pad1", {"TILE": 64, "BLOCK_ROWS": 4}, pad1()),
            Config("T64x4 pad1 G8", {"TILE": 64, "BLOCK_ROWS": 4, "GROUP": 8}, pad1()),
            Config("T64x4 pad1 G32", {"TILE": 64, "BLOCK_ROWS": 4, "GROUP": 32}, pad1()),
            Config("T64x4 swz326", {"TILE": 64, "BLOCK_ROWS": 4}, swz(3, 2, 6)),
            Config("T64x4 swz326 G16", {"TILE": 64, "BLOCK_ROWS": 4, "GROUP": 16}, swz(3, 2, 6)),
            Config("T64x2 pad1", {"TILE": 64, "BLOCK_ROWS": 2}, pad1()),
            Config("T64x2 pad1 G16", {"TILE": 64, "BLOCK_ROWS": 2, "GROUP": 16}, pad1()),
            Config("T64x8 pad1", {"TILE": 64, "BLOCK_ROWS": 8}, pad1()),
            Config("T64x8 pad1 G16", {"TILE": 64, "BLOCK_ROWS": 8, "GROUP": 16}, pad1()),
            Config("T64x4 dense", {"TILE": 64, "BLOCK_ROWS": 4}, {}),
            Config("T32x8 pad1", {"TILE": 32, "BLOCK_ROWS": 8}, pad1()),
            Config("T32x8 pad1 G16", {"TILE": 32, "BLOCK_ROWS": 8, "GROUP": 16}, pad1()),
            Config("T32x4 pad1", {"TILE": 32, "BLOCK_ROWS": 4}, pad1()),
            Config("T32x2 pad1 G16", {"TILE": 32, "BLOCK_ROWS": 2, "GROUP": 16}, pad1()),
        ]
    else:
        sweep = [
            Config("T64x4 swz336", {"TILE": 64, "BLOCK_ROWS": 4}, swz(3, 3, 6)),
            Config("T64x4 swz336 G16", {"TILE": 64, "BLOCK_ROWS": 4, "GROUP": 16}, swz(3, 3, 6)),
            Config("T64x2 swz336 G16", {"TILE": 64, "BLOCK_ROWS": 2, "GROUP": 16}, swz(3, 3, 6)),
            Config("T64x4 pad1", {"TILE": 64, "BLOCK_ROWS": 4}, pad1()),
            Config("T128x4 swz337", {"TILE": 128, "BLOCK_ROWS": 4}, swz(3, 3, 7)),
            Config("T128x4 swz337 G8", {"TILE": 128, "BLOCK_ROWS": 4, "GROUP": 8}, swz(3, 3, 7)),
            Config("T128x4 swz337 G32", {"TILE": 128, "BLOCK_ROWS": 4, "GROUP": 32}, swz(3, 3, 7)),
            Config("T128x2 swz337 G16", {"TILE": 128, "BLOCK_ROWS": 2, "GROUP": 16}, swz(3, 3, 7)),
            Config("T128x8 swz337 G16", {"TILE": 128, "BLOCK_ROWS": 8, "GROUP": 16}, swz(3, 3, 7)),
            Config("T128x4 pad1 G16", {"TILE": 128, "BLOCK_ROWS": 4, "GROUP": 16}, pad1()),
        ]
    return tuple(sweep)


def stencil_configs(r: int, plan: str) -> tuple[Config, ...]:
    if plan == "final":
        return (
            Config("32x8 RY4", {"R": r, "BX": 32, "BY": 8, "RY": 4}),
            Config("32x4 RY4", {"R": r, "BX": 32, "BY": 4, "RY": 4}),
            Config("old: 32x8 VEC1 RY1", {"R": r, "BX": 32, "BY": 8, "VEC": 1, "RY": 1}),
        )
    shapes = [  # (BX, BY, RY): output tile BX*4 x BY*RY
        (32, 8, 4),
        (32, 4, 8),
        (32, 8, 8),
        (32, 16, 2),
        (32, 8, 2),
        (32, 4, 4),
        (16, 16, 4),
        (64, 4, 8),
    ]
    out = [Config(f"{bx}x{by} RY{ry}", {"R": r, "BX": bx, "BY": by, "RY": ry}) for bx, by, ry in shapes]
    out.append(Config("old: 32x8 VEC1 RY1", {"R": r, "BX": 32, "BY": 8, "VEC": 1, "RY": 1}))
    return tuple(out)


def sample_config(name: str) -> Config:
    """The shipped sample's headline (fixed) variant, as `smemtile verify` runs it."""
    from smemtile.pipeline.fixes import variants
    from smemtile.pipeline.specs import load

    cfg = variants(load(ROOT / "samples" / f"{name}.yaml"))["fixed"]
    return Config(f"sample {name}", dict(cfg.params), {k: v.to_dict() for k, v in cfg.layouts.items()})


def fixed_layouts(family: str, params: dict, problem: dict) -> dict:
    """The layouts the fix search gives a kernel spec with this tile (what `generate` and `verify` build)."""
    from smemtile.pipeline.fixes import variants
    from smemtile.pipeline.specs import resolve

    doc = {"arch": ARCH, "tile": dict(params), "kernel": {"family": family, **problem}}
    cfg = variants(resolve(doc))["fixed"]
    return {k: v.to_dict() for k, v in cfg.layouts.items()}


def run4_cases() -> list[Case]:
    from smemtile.families.transpose.tiles import candidates, label, set_params

    cases = []
    for dt in ("f32", "f16"):
        cfgs = []
        for p in candidates(dt):
            params = set_params(p)
            cfgs.append(
                Config(
                    label(p),
                    params,
                    fixed_layouts("transpose", params, {"rows": 8192, "cols": 8192, "dtype": dt}),
                )
            )
        for role, rows, cols in RUN4_SHAPES:
            extra: tuple[Config, ...] = ()
            if (rows, cols) == (8192, 8192) and dt == "f32":
                extra = (
                    sample_config("transpose_32x32"),
                    Config("T64x8 swz326", {"TILE": 64, "BLOCK_ROWS": 8}, swz(3, 2, 6)),
                )
            cases.append(
                Case(
                    f"transpose {dt} {rows}x{cols}",
                    "transpose",
                    {"rows": rows, "cols": cols, "dtype": dt},
                    (*cfgs, *extra),
                    role,
                )
            )
    return cases


# run 5: the candidates added after run 4 (full occupancy for TILES), with run 4's best as controls
RUN5_CONTROLS = {"f32": ("T64x8",), "f16": ("T128x4 P2", "T128x8 P2", "T64xY128x16 2tiles")}


# plan spearman (session 4): the frozen memory models over their whole ranked lists, on held-out shapes only.
# Per shape the family's candidates as `smemtile tiles --family` ranks them, sampled deterministically: the
# model's top SPEARMAN_TOP, then SPEARMAN_SPREAD more at evenly spaced ranks of the rest (the last included).
# A list no longer than that is taken whole (transpose: its 13 fp32 / 18 fp16 calibrated candidates).
SPEARMAN_TOP, SPEARMAN_SPREAD = 12, 24
SPEARMAN_STENCIL = ((8192, 8192), (1, 2, 3, 4))  # stencil_h200.json: fitted at 4096^2, 8192^2 held out


def spread_ranks(n: int, top: int = SPEARMAN_TOP, spread: int = SPEARMAN_SPREAD) -> list[int]:
    """Indices (0-based) into a ranked list of ``n``: the first ``top``, then ``spread`` evenly spaced over the
    rest, the last included; every index when ``n <= top + spread``."""
    if n <= top + spread:
        return list(range(n))
    rest = n - top
    return list(range(top)) + [top + round(i * (rest - 1) / (spread - 1)) for i in range(spread)]


def ranked_configs(family: str, problem: dict, keys: dict) -> tuple[Config, ...]:
    """The sampled candidates of ``smemtile tiles --family`` for one problem, each with the fix search's layouts
    (what ``generate`` builds from the printed spec) and the model's prediction."""
    from smemtile.pipeline.tiles import family_tiles

    sizes = [problem[pk.name] for pk in FAMILIES[family].size_keys()]
    ranked = family_tiles(family, sizes, dtype=problem.get("dtype"), keys=keys, arch=ARCH).ranked
    out = []
    for i in spread_ranks(len(ranked)):
        s = ranked[i]
        params = {**s.params_dict(), **keys}
        pred = {
            "rank": s.rank,
            "of": len(ranked),
            "gbps": s.gbps,
            "time_us": s.time_us,
            "copy_ratio": s.copy_ratio,
        }
        out.append(Config(s.label, params, fixed_layouts(family, params, problem), pred))
    return tuple(out)


def spearman_cases() -> list[Case]:
    (ny, nx), radii = SPEARMAN_STENCIL
    held = tuple((rows, cols) for role, rows, cols in RUN4_SHAPES if role == "held_out")
    return stencil_ranked_cases(((ny, nx),), radii) + transpose_ranked_cases(
        ((("f32",), held), (("f16",), held)), "held_out"
    )


def stencil_ranked_cases(shapes: tuple, radii: tuple, role: str = "held_out") -> list[Case]:
    """The sampled stencil2d candidates, with the model's prediction, for each shape and radius."""
    return [
        Case(
            f"stencil R{r} {ny}x{nx}",
            "stencil2d",
            {"ny": ny, "nx": nx},
            ranked_configs("stencil2d", {"ny": ny, "nx": nx}, {"R": r}),
            role,
        )
        for ny, nx in shapes
        for r in radii
    ]


# plan heldout (session 4, continued): the refitted models (frozen at the commit the run records) on shapes no
# earlier run measured, sampled as plan spearman samples (stencil: the top 12 and 24 evenly spaced ranks down to
# the last of 319-325; transpose: every calibrated candidate, 13 fp32 / 18 fp16). Transpose shapes: both row
# pitches 16 mod 32 bytes in fp16 (5000 x 7000), an aligned non-square (12288 x 6144), only the input pitch
# 16 mod 32 bytes in fp16 (8192 x 5000: the output side aligned).
HELDOUT_STENCIL = (((6144, 6144), (2048, 16384)), (1, 2, 3, 4))
HELDOUT_TRANSPOSE = ((5000, 7000), (12288, 6144), (8192, 5000))


def heldout_cases() -> list[Case]:
    shapes, radii = HELDOUT_STENCIL
    return transpose_ranked_cases(((("f32", "f16"), HELDOUT_TRANSPOSE),), "held_out") + stencil_ranked_cases(
        shapes, radii
    )


# plans inpitch / inpitch_heldout (session 4, transpose input pitch): shapes whose fp16 input pitch alone is
# 16 mod 32 bytes (cols = 8 mod 16, rows = 0 mod 16), every calibrated candidate, to fit a per-candidate input
# weight (inpitch: fit data, f32 and f16) and to validate it afresh (inpitch_heldout: fp16, two input-only
# shapes and one with both pitches 16 mod 32 bytes). None of these shapes was measured before. 4096 x 9000
# stands in for 4096 x 3000, which (49 MB read + written) is below the model's smallest fitted size in fp16.
INPITCH_FIT = ((("f32", "f16"), ((6144, 5000), (4096, 9000))),)
INPITCH_HELDOUT = ((("f16",), ((12288, 3000), (8192, 7000), (3000, 7000))),)


# plans s5fit / s5heldout (session 5, the transpose's candidate space): the feature model ranks every configuration
# of tiling_transpose.space the family builds (about 400 per dtype). s5fit: one fitting sweep of S5_FIT_N
# configurations per dtype never timed before (drawn at random, seed S5_SEED, from the ranked space) and three
# controls, at fit shapes only (existing fit shapes, so each new candidate sits beside the 13 / 18 measured ones):
# fp32 8192^2, 4096^2, 7000 x 9000 (line-misaligned both sides); fp16 8192^2, 6144 x 5000 (input pitch 16 mod
# 32 bytes), 5000 x 6000 (output pitch 16 mod 32). s5heldout: shapes no results file has measured, the top 12
# of `tiles --family transpose` and 24 evenly spaced ranks of the rest (36 per shape).
S5_FIT_N, S5_SEED = 56, 5
S5_CONTROLS = {"f32": ("T64x8", "T64x4", "T32x8"), "f16": ("T128x4 P2", "T64x4", "T64x8")}
S5_FIT_SHAPES = {
    "f32": ((8192, 8192), (4096, 4096), (7000, 9000)),
    "f16": ((8192, 8192), (6144, 5000), (5000, 6000)),
}
S5_HELDOUT = (
    (("f16",), ((10240, 5400), (14336, 2600), (9216, 9216), (6600, 5400))),
    (("f32",), ((7168, 7680), (6144, 7000))),
)
# s6heldout: the session-6 model (the L1 feature, refitted on everything up to s6async) on shapes no results file
# has measured: two aligned and one ragged, line-misaligned shape per element size; same sampling as s5heldout
S6_HELDOUT = (
    (("f32",), ((10240, 6144), (6656, 8704), (9000, 5200))),
    (("f16",), ((7680, 7168), (5760, 10240), (12000, 4000))),
)


def shape_cases(dtype: str, shapes, cfgs: list[Config], role: str = "fit") -> list[Case]:
    """One transpose case per (rows, cols) of ``shapes``, each timing ``cfgs``."""
    return [
        Case(
            f"transpose {dtype} {rows}x{cols}",
            "transpose",
            {"rows": rows, "cols": cols, "dtype": dtype},
            tuple(cfgs),
            role,
        )
        for rows, cols in shapes
    ]


def s5_fit_sample(dtype: str) -> list[dict]:
    """The fitting sweep's new configurations for ``dtype``: S5_FIT_N drawn (seed S5_SEED) from the space the
    family builds (its own rules), without the curated candidates and without MIN_BLOCKS > 1 on one tile per
    block (mostly the same kernel as MIN_BLOCKS 1), in space order."""
    from smemtile.families.transpose import _screen
    from smemtile.families.transpose import tiles as tt

    curated = {tt.label(p) for p in tt.candidates(dtype)}
    ok, _ = _screen(FAMILIES["transpose"], dtype, ARCH)
    pool = [p for p in ok if tt.label(p) not in curated and (p["MIN_BLOCKS"] == 1 or p["TILES"] > 1)]
    pick = sorted(
        np.random.default_rng(S5_SEED).choice(len(pool), size=min(S5_FIT_N, len(pool)), replace=False)
    )
    return [pool[i] for i in pick]


def s5_fit_cases() -> list[Case]:
    from smemtile.families.transpose import tiles as tt

    cases = []
    for dt, shapes in S5_FIT_SHAPES.items():
        ctl = [p for p in tt.candidates(dt) if tt.label(p) in S5_CONTROLS[dt]]
        cfgs = []
        for p in [*ctl, *s5_fit_sample(dt)]:
            params = tt.set_params(p)
            cfgs.append(
                Config(
                    tt.label(p),
                    params,
                    fixed_layouts("transpose", params, {"rows": 8192, "cols": 8192, "dtype": dt}),
                )
            )
        cases += shape_cases(dt, shapes, cfgs)
    return cases


def transpose_ranked_cases(groups: tuple, role: str) -> list[Case]:
    """Every calibrated transpose candidate, with the model's prediction, for each (dtypes, shapes) group."""
    cases = []
    for dtypes, shapes in groups:
        for dt in dtypes:
            for rows, cols in shapes:
                problem = {"rows": rows, "cols": cols, "dtype": dt}
                cases.append(
                    Case(
                        f"transpose {dt} {rows}x{cols}",
                        "transpose",
                        problem,
                        ranked_configs("transpose", problem, {}),
                        role,
                    )
                )
    return cases


def s5_f16_top_cases() -> list[Case]:
    """Session 5, fp16 8192^2 (a fitting shape; issue 20's fp16 line at 0.93x a copy): the model's top 20 of
    `tiles --family transpose` and tall tiles of 256 input rows (512-byte output runs; session 3 run 2 measured
    T64xY256 at 0.92-0.94), every one checked, timed against the copy in the same rounds."""
    problem = {"rows": 8192, "cols": 8192, "dtype": "f16"}
    from smemtile.pipeline.tiles import family_tiles

    ranked = family_tiles("transpose", [8192, 8192], dtype="f16", keys={}, arch=ARCH).ranked
    cfgs = [
        Config(
            s.label,
            s.params_dict(),
            fixed_layouts("transpose", s.params_dict(), problem),
            {
                "rank": s.rank,
                "of": len(ranked),
                "gbps": s.gbps,
                "time_us": s.time_us,
                "copy_ratio": s.copy_ratio,
            },
        )
        for s in ranked[:20]
    ]
    for br, pack in ((8, 1), (8, 2), (16, 1), (16, 2), (4, 2)):
        params = {"TILE": 64, "BLOCK_ROWS": br, "TILE_Y": 256, **({"PACK": pack} if pack > 1 else {})}
        label = f"T64xY256x{br}" + (f" P{pack}" if pack > 1 else "")
        cfgs.append(Config(label, params, fixed_layouts("transpose", params, problem)))
    return [Case("transpose f16 8192x8192", "transpose", problem, tuple(cfgs), "fit")]


# session 6: ASYNC = 0 / 1 pairs (phase 1 through registers or cp.async); (label, params) per dtype
S6_ASYNC = {
    "f16": (
        ("T128x4 P2", {"TILE": 128, "BLOCK_ROWS": 4, "PACK": 2}),
        ("T128x8 P2", {"TILE": 128, "BLOCK_ROWS": 8, "PACK": 2}),
        ("T128x2 P2", {"TILE": 128, "BLOCK_ROWS": 2, "PACK": 2}),
        ("T128x4 P4", {"TILE": 128, "BLOCK_ROWS": 4, "PACK": 4}),
        ("T64xY128x4", {"TILE": 64, "BLOCK_ROWS": 4, "TILE_Y": 128}),
        ("T64xY128x8 P2", {"TILE": 64, "BLOCK_ROWS": 8, "TILE_Y": 128, "PACK": 2}),
        ("T64x4 P2", {"TILE": 64, "BLOCK_ROWS": 4, "PACK": 2}),
        ("T64x2 P2", {"TILE": 64, "BLOCK_ROWS": 2, "PACK": 2}),
        ("T128x4 P2 2tiles", {"TILE": 128, "BLOCK_ROWS": 4, "PACK": 2, "TILES": 2}),
        ("T64xY256x4 P2", {"TILE": 64, "BLOCK_ROWS": 4, "TILE_Y": 256, "PACK": 2}),
    ),
    "f32": (
        ("T64x8", {"TILE": 64, "BLOCK_ROWS": 8}),
        ("T64x4 P2", {"TILE": 64, "BLOCK_ROWS": 4, "PACK": 2}),
        ("T64x2 P2 mb16", {"TILE": 64, "BLOCK_ROWS": 2, "PACK": 2, "MIN_BLOCKS": 16}),
        ("T64x2 P4", {"TILE": 64, "BLOCK_ROWS": 2, "PACK": 4}),
        ("T64x4", {"TILE": 64, "BLOCK_ROWS": 4}),
        ("T64xY128x8 P2", {"TILE": 64, "BLOCK_ROWS": 8, "TILE_Y": 128, "PACK": 2}),
        ("T64x1", {"TILE": 64, "BLOCK_ROWS": 1}),
        ("T32x2 P2", {"TILE": 32, "BLOCK_ROWS": 2, "PACK": 2}),
    ),
}
S6_ASYNC_SHAPES = (("f16", 8192, 8192), ("f32", 8192, 8192), ("f32", 7168, 7680))


def s6_async_cases() -> list[Case]:
    """Session 6: phase 1 through registers (ASYNC = 0) against cp.async into the tile (ASYNC = 1), same tiles,
    same rounds, against the copy: fp16 and fp32 8192^2 (issue 20's fp16 line) and fp32 7168 x 7680 (the session-5
    held-out shape where T64x2 measured 0.85x, predicted 0.96x: 13 blocks' shared memory leave L1 28 KB)."""
    cases = []
    for dt, rows, cols in S6_ASYNC_SHAPES:
        problem = {"rows": rows, "cols": cols, "dtype": dt}
        cfgs = []
        for label, params in S6_ASYNC[dt]:
            for a in (0, 1):
                q = {**params, "ASYNC": 1} if a else dict(params)
                cfgs.append(
                    Config(label + (" async" if a else ""), q, fixed_layouts("transpose", q, problem))
                )
        cases.append(Case(f"transpose {dt} {rows}x{cols}", "transpose", problem, tuple(cfgs), "experiment"))
    return cases


def s6_group_cases() -> list[Case]:
    """Session 6, fp16 8192^2 (issue 20's fp16 line, 0.924-0.927x): the launch order (GROUP tile rows walked column
    by column) of the best tiles, which sets how much of each output row the resident blocks write together; fp32
    T64x8 alongside."""
    cases = []
    for dt, tiles in (
        (
            "f16",
            (
                ("T128x4 P2", {"TILE": 128, "BLOCK_ROWS": 4, "PACK": 2}),
                ("T128x8 P2", {"TILE": 128, "BLOCK_ROWS": 8, "PACK": 2}),
                ("T64xY256x4 P2", {"TILE": 64, "BLOCK_ROWS": 4, "TILE_Y": 256, "PACK": 2}),
            ),
        ),
        ("f32", (("T64x8", {"TILE": 64, "BLOCK_ROWS": 8}),)),
    ):
        problem = {"rows": 8192, "cols": 8192, "dtype": dt}
        cfgs = []
        for label, params in tiles:
            for g in (1, 2, 4, 8, 64):
                q = {**params, "GROUP": g} if g > 1 else dict(params)
                cfgs.append(
                    Config(label + (f" G{g}" if g > 1 else ""), q, fixed_layouts("transpose", q, problem))
                )
        cases.append(Case(f"transpose {dt} 8192x8192", "transpose", problem, tuple(cfgs), "experiment"))
    return cases


# s6colheldout: the model with the launch order (refitted on s6colfit and every transpose run before it, s6heldout
# included) on shapes no results file has measured; same sampling as s5heldout
S6_COL_HELDOUT = (
    (("f32",), ((7680, 9216), (12288, 4608), (7496, 6504))),
    (("f16",), ((9728, 6144), (4608, 14336), (7000, 8000))),
)
# s6colheldout2: after s6colheldout's miss at fp16 7000 x 8000 (#1 row order 0.825x, column order 0.925x: column
# order writes whole output rows, so a misaligned output pitch costs it less), the output side's weight with a
# column term, refitted on everything, s6colheldout included; fresh shapes again
S6_COL_HELDOUT2 = (
    (("f32",), ((9216, 7168), (5632, 11264), (6000, 7000))),
    (("f16",), ((6656, 9216), (11000, 5120), (6000, 9000))),
)
# s6colfit: the launch order as a fitting sweep, each configuration row by row (GROUP 1) and column by column
# (GROUP 0): the model's top 10 at 8192^2 and S6_COL_SAMPLE more drawn (seed 6) from the rest of the space the
# family builds without spills, on four fit shapes per element size (aligned, tall, wide, misaligned)
S6_COL_TOP, S6_COL_SAMPLE, S6_COL_SEED = 10, 8, 6
S6_COL_SHAPES = {
    "f32": ((8192, 8192), (4096, 4096), (7000, 9000), (16384, 4096)),
    "f16": ((8192, 8192), (6144, 5000), (5000, 6000), (4096, 16384)),
}


def s6_col_configs(dtype: str) -> list[dict]:
    """Row-by-row configurations of the s6colfit sweep (GROUP 1): the model's top S6_COL_TOP at 8192^2, then
    S6_COL_SAMPLE drawn from the rest of the ranked space (MIN_BLOCKS > 1 only with TILES > 1)."""
    from smemtile.families.transpose import tiles as tt

    ranked = [
        dict(s.params) for s in tt.rank_transpose(8192, 8192, dtype) if dict(s.params).get("GROUP", 1) == 1
    ]
    top = ranked[:S6_COL_TOP]
    pool = [p for p in ranked[S6_COL_TOP:] if p["MIN_BLOCKS"] == 1 or p["TILES"] > 1]
    pick = sorted(np.random.default_rng(S6_COL_SEED).choice(len(pool), size=S6_COL_SAMPLE, replace=False))
    return top + [pool[i] for i in pick]


def s6_col_fit_cases() -> list[Case]:
    from smemtile.families.transpose import tiles as tt

    cases = []
    for dt, shapes in S6_COL_SHAPES.items():
        cfgs = []
        for p in s6_col_configs(dt):
            for g in (1, 0):
                q = tt.set_params({**p, "GROUP": g})
                cfgs.append(
                    Config(
                        tt.label(q),
                        q,
                        fixed_layouts("transpose", q, {"rows": 8192, "cols": 8192, "dtype": dt}),
                    )
                )
        cases += shape_cases(dt, shapes, cfgs)
    return cases


S6_TOP_SHAPES = {"f32": ((8192, 8192), (16384, 4096)), "f16": ((8192, 8192), (4096, 16384))}


def s6_col_top_cases() -> list[Case]:
    """Session 6, after s6colfit: the refitted model's top 12 at 8192^2 and the other launch order of each (the
    unmeasured ones carried their twin's constants), timed on two aligned fit shapes per element size, so the top
    of the list is measured before the held-out run."""
    from smemtile.families.transpose import tiles as tt

    cases = []
    for dt, shapes in S6_TOP_SHAPES.items():
        seen, cfgs = set(), []
        for s in tt.rank_transpose(8192, 8192, dt)[:12]:
            p = dict(s.params)
            for q in (p, {**p, "GROUP": 1 - p["GROUP"]}):
                if tt.label(q) in seen:
                    continue
                seen.add(tt.label(q))
                params = tt.set_params(q)
                cfgs.append(
                    Config(
                        tt.label(q),
                        params,
                        fixed_layouts("transpose", params, {"rows": 8192, "cols": 8192, "dtype": dt}),
                    )
                )
        cases += shape_cases(dt, shapes, cfgs)
    return cases


def s6_final_cases() -> list[Case]:
    """Session 6's closing check at 8192^2: the shipped transpose sample as `verify` builds it, and tiles' #1 and #2
    per dtype (fp32, fp16, bf16) of the final model, against the copy in the same rounds."""
    from smemtile.families.transpose import tiles as tt

    cases = []
    for dt in ("f32", "f16", "bf16"):
        problem = {"rows": 8192, "cols": 8192, "dtype": dt}
        cfgs = [sample_config("transpose_32x32")] if dt == "f32" else []
        for s in tt.rank_transpose(8192, 8192, dt)[:2]:
            q = s.params_dict()
            cfgs.append(
                Config(
                    f"tiles #{s.rank} {s.label}",
                    q,
                    fixed_layouts("transpose", q, problem),
                    {
                        "rank": s.rank,
                        "of": 0,
                        "gbps": s.gbps,
                        "time_us": s.time_us,
                        "copy_ratio": s.copy_ratio,
                    },
                )
            )
        cases.append(Case(f"transpose {dt} 8192x8192", "transpose", problem, tuple(cfgs), "experiment"))
    return cases


def run5_cases() -> list[Case]:
    """Run 5: run 4's shapes, the MIN_BLOCKS candidates and the controls."""
    from smemtile.families.transpose.tiles import candidates, label

    out = []
    for case in run4_cases():
        dt = case.problem["dtype"]
        new = {label(p) for p in candidates(dt) if p.get("MIN_BLOCKS", 1) > 1}
        keep = tuple(c for c in case.configs if c.label in new or c.label in RUN5_CONTROLS[dt])
        out.append(Case(case.name, case.family, case.problem, keep, case.role))
    return out


# the plans by name (``sweep`` and ``final``, the first two, are built by plan_cases itself)
PLANS = {
    "run4": run4_cases,
    "run5": run5_cases,
    "spearman": spearman_cases,
    "heldout": heldout_cases,
    "inpitch": lambda: transpose_ranked_cases(INPITCH_FIT, "fit"),
    "inpitch_heldout": lambda: transpose_ranked_cases(INPITCH_HELDOUT, "held_out"),
    "s5fit": s5_fit_cases,
    "s5heldout": lambda: transpose_ranked_cases(S5_HELDOUT, "held_out"),
    "s5f16top": s5_f16_top_cases,
    "s6async": s6_async_cases,
    "s6heldout": lambda: transpose_ranked_cases(S6_HELDOUT, "held_out"),
    "s6group": s6_group_cases,
    "s6colfit": s6_col_fit_cases,
    "s6colheldout": lambda: transpose_ranked_cases(S6_COL_HELDOUT, "held_out"),
    "s6coltop": s6_col_top_cases,
    "s6colheldout2": lambda: transpose_ranked_cases(S6_COL_HELDOUT2, "held_out"),
    "s6final": s6_final_cases,
}


def plan_cases(plan: str) -> list[Case]:
    if plan in PLANS:
        return PLANS[plan]()
    cases = []
    for dt in ("f32", "f16"):
        cfgs = transpose_configs(dt, plan)
        if dt == "f32":
            cfgs = (sample_config("transpose_32x32"), *cfgs)
        cases.append(
            Case(f"transpose {dt} 8192^2", "transpose", {"rows": 8192, "cols": 8192, "dtype": dt}, cfgs)
        )
    for n in (4096, 8192):
        for r in (1, 2, 3, 4):
            cfgs = stencil_configs(r, plan)
            if r == 4 and n == 4096:
                cfgs = (sample_config("stencil_halo"), *cfgs)
            cases.append(Case(f"stencil R{r} {n}^2", "stencil2d", {"ny": n, "nx": n}, cfgs))
    return cases


def full_config(case: Case, c: Config, problem: dict | None = None):
    return configure(case.family, {**c.params, **(problem or case.problem)}, c.layouts, ARCH)


def small_config(case: Case, c: Config, size: dict):
    """The configuration at one of the family's test sizes, or None when the family refuses it there."""
    from smemtile.families.base import ContractViolation

    try:
        return full_config(case, c, {**case.problem, **size})
    except ContractViolation:
        return None


# ---- compile (no GPU) ---------------------------------------------------------------------------------------


# ---- references and checks ----------------------------------------------------------------------------------


# ---- GPU ----------------------------------------------------------------------------------------------------


def source_sha256() -> dict:
    out = {}
    for fam in ("transpose", "stencil2d"):
        out[fam] = hashlib.sha256(FAMILIES[fam].source().encode()).hexdigest()[:16]
    return out


def runner_cases(cases: list[Case]) -> list:
    """The plan's cases as bench.run builds, checks and times them (``bench.run.run_case``): each configuration
    with its layouts, checked at the family's test sizes it accepts and at the timed size."""
    from bench import run as runner

    out = []
    for case in cases:
        fam = FAMILIES[case.family]
        entries = []
        for c in case.configs:
            e = runner.Entry(
                c.label, dict(c.params), c.layouts, dict(case.problem), predicted=c.predicted or None
            )
            e.cfg = full_config(case, c)
            e.checks = [(size, small_config(case, c, size)) for size in fam.test_sizes]
            entries.append(e)
        out.append(runner.Case(case.name, dict(case.problem), {}, entries))
    return out


def save_plan(cases: list[Case], path: Path) -> None:
    """The resolved plan (layouts from the fix search included), so the GPU machine does not redo the search."""
    path.write_text(
        json.dumps(
            [
                {
                    "name": c.name,
                    "family": c.family,
                    "problem": c.problem,
                    "role": c.role,
                    "configs": [
                        {"label": x.label, "params": x.params, "layouts": x.layouts, "predicted": x.predicted}
                        for x in c.configs
                    ],
                }
                for c in cases
            ],
            indent=1,
        )
    )


def load_plan(path: Path) -> list[Case]:
    return [
        Case(d["name"], d["family"], d["problem"], tuple(Config(**x) for x in d["configs"]), d["role"])
        for d in json.loads(path.read_text())
    ]


def transpose_rows(results: list[Path]) -> tuple[list[dict], list[tuple[float, float]], list[dict]]:
    """(rows, copy points, docs) of the transpose cases of ``results``: the family's reader
    (smemtile.families.transpose.fit.rows_from_results)."""
    from smemtile.families.transpose.fit import rows_from_results

    return rows_from_results(results)


def _space_labels(dtype: str) -> set[str]:
    from smemtile.families.transpose import tiles as tt

    if dtype not in _SPACE_LABELS:
        _SPACE_LABELS[dtype] = {tt.label(c) for c in tt.space(dtype)}
    return _SPACE_LABELS[dtype]


_SPACE_LABELS: dict[str, set[str]] = {}


def _predict_rows(rows: list[dict], cal: dict) -> list[float]:
    from smemtile.families.transpose import tiles as tt

    return [
        tt.predict_time_us(r["params"], r["rows"], r["cols"], "f32" if r["elem"] == 4 else "f16", cal)
        for r in rows
    ]


def _cv_summary(rows: list[dict], pred: list[float]) -> dict:
    """Median and max |time error| of ``pred`` against ``rows``, Spearman of predicted and measured time per
    shape (the mean over shapes, and each)."""
    from smemtile.model import fitting

    errs = [abs(p / r["time_us"] - 1) for p, r in zip(pred, rows, strict=True)]
    per: dict[str, float] = {}
    for case in sorted({r["case"] for r in rows}):
        ix = [i for i, r in enumerate(rows) if r["case"] == case]
        if len(ix) >= 3:
            per[case] = fitting.spearman([pred[i] for i in ix], [rows[i]["time_us"] for i in ix])
    return {
        "median_error": statistics.median(errs),
        "max_error": max(errs),
        "rows": len(rows),
        "mean_spearman": statistics.fmean(per.values()) if per else None,
        "spearman": per,
    }


def transpose_feature_cv(rows: list[dict], regs: dict, fitted: dict, folds: int = 5) -> dict:
    """The feature model's two cross-validations per element size, the shared constants (KAPPA, PHI_LINE, MU_IN)
    held at the full fit's: candidates left out (``folds`` groups of labels, every candidate predicted by a fit
    that never saw it: the error ``tiles`` states for an unmeasured candidate) and shapes left out (each fit
    shape predicted by a fit on the others: measured candidates by their shrunk constants)."""
    from smemtile.families.transpose import fit as tf

    out: dict = {}
    for elem in sorted({r["elem"] for r in rows}):
        mine = [r for r in rows if r["elem"] == elem]
        m = fitted[str(elem)]["model"]
        shared = {elem: (m["kappa"], m["phi_line"], m["mu_in"])}
        labels = sorted({r["label"] for r in mine})
        pred = [0.0] * len(mine)
        for k in range(folds):
            test = {lab for i, lab in enumerate(labels) if i % folds == k}
            cal = {
                "constants": tf.fit_features(
                    [r for r in mine if r["label"] not in test], regs, shared=shared
                ),
                "registers": regs_table(regs),
            }
            for i, r in enumerate(mine):
                if r["label"] in test:
                    pred[i] = _predict_rows([r], cal)[0]
        cand = _cv_summary(mine, pred)
        # the top of the list: per shape the fifth predicted fastest, signed error (predicted / measured time - 1);
        # negative = candidates predicted near the top measure slower (what the unmeasured penalty answers)
        top = []
        for case in sorted({r["case"] for r in mine}):
            ix = sorted((i for i, r in enumerate(mine) if r["case"] == case), key=lambda i: pred[i])
            top += [pred[i] / mine[i]["time_us"] - 1 for i in ix[: max(1, len(ix) // 5)]]
        cand["top_fifth_signed_median_error"] = statistics.median(top)
        pred = [0.0] * len(mine)
        for case in sorted({r["case"] for r in mine}):
            cal = {
                "constants": tf.fit_features([r for r in mine if r["case"] != case], regs, shared=shared),
                "registers": regs_table(regs),
            }
            for i, r in enumerate(mine):
                if r["case"] == case:
                    pred[i] = _predict_rows([r], cal)[0]
        shape = _cv_summary(mine, pred)
        out[str(elem)] = {"candidates_left_out": cand, "shapes_left_out": shape}
        print(
            f"  elem {elem}: candidates left out: median |err| {cand['median_error']:.1%}, mean Spearman "
            f"{cand['mean_spearman']:.2f}; shapes left out: {shape['median_error']:.1%}, "
            f"{shape['mean_spearman']:.2f}",
            flush=True,
        )
    return out


def regs_table(regs: dict) -> dict:
    """``{elem: {label: registers}}`` as the data file's ``registers`` (``{elem: {label: [registers, spills]}}``)."""
    return {e: {lab: [r, 0] for lab, r in t.items()} for e, t in regs.items()}


def load_registers(path: Path) -> tuple[dict, dict]:
    """(``{elem: {label: registers}}`` of the built configurations, the data file's ``registers`` table with
    spills) from ``transpose_registers``' output."""
    doc = json.loads(path.read_text())
    table = {
        str(4 if dt == "f32" else 2): {
            lab: [r["registers"], r["spills"]] for lab, r in rows.items() if "registers" in r
        }
        for dt, rows in doc["per_dtype"].items()
    }
    return {e: {lab: v[0] for lab, v in t.items()} for e, t in table.items()}, table


def _provenance(docs: list[dict], results: list[Path]) -> dict:
    """Where a transpose calibration's data came from: the GPU, the results files, their commits, the last date."""
    return {
        "gpu": docs[0]["versions"]["gpu"],
        "gpu_key": "h200",
        "sms": docs[0]["versions"]["sm_count"],
        "archs": ["sm_90"],
        "run": ", ".join(f"bench/results/{r.name}" for r in results),
        "commit": ", ".join(d.get("commit", "") for d in docs),
        "date": docs[-1]["date"][:10],
    }


def fit_transpose_features(results: list[Path], out: Path, registers: Path) -> dict:
    """Session 5: the feature model (tiling_transpose.fit_features) on every transpose shape of ``results`` (fit
    data only), the cross-validations, the registers table; written to ``out`` with its provenance."""
    from smemtile.families.transpose import fit as tf

    rows, copies, docs = transpose_rows(results)
    regs, table = load_registers(registers)
    # candidates only: a configuration ptxas spills for (MIN_BLOCKS holding 100-180 registers to 32: measured
    # 0.14-0.6x a copy) is rejected by the ranking, so it does not teach the model
    dropped = sorted({r["label"] for r in rows if table[str(r["elem"])].get(r["label"], [0, 1])[1]})
    rows = [r for r in rows if not table[str(r["elem"])].get(r["label"], [0, 1])[1]]
    fitted = tf.fit_features(rows, regs)
    cv = transpose_feature_cv(rows, regs, fitted)
    full = {"copy": tf.copy_fit(copies), "constants": fitted, "registers": table}
    for elem, per in fitted.items():
        mine = [r for r in rows if str(r["elem"]) == elem]
        e = [abs(p / r["time_us"] - 1) for p, r in zip(_predict_rows(mine, full), mine, strict=True)]
        per["fit_median_error"], per["fit_max_error"] = statistics.median(e), max(e)
        per["held_out_median_error"] = cv[elem]["shapes_left_out"]["median_error"]
        per["held_out_max_error"] = cv[elem]["shapes_left_out"]["max_error"]
        per["unmeasured_median_error"] = cv[elem]["candidates_left_out"]["median_error"]
        per["unmeasured_max_error"] = cv[elem]["candidates_left_out"]["max_error"]
        # the ranking's, fixed at fit time: the larger of the candidates-left-out median |error| and how much
        # slower than predicted the predicted top fifth measured (the winner's curse of an extrapolation)
        per["unmeasured_penalty"] = max(
            per["unmeasured_median_error"], -cv[elem]["candidates_left_out"]["top_fifth_signed_median_error"]
        )
    regdoc = json.loads(registers.read_text())
    shapes = sorted({r["case"] for r in rows})
    cal = {
        "what": "constants of the transpose model, smemtile.model.tiling_transpose: per candidate time = t0 + "
        "(vector bytes + edge bytes / kappa + phi_line x line-misaligned run bytes + mu_in x input-side "
        "sector-misaligned bytes + mu_out x output-side sector-misaligned bytes) / bw, with t0, 1/bw and "
        "mu_out / bw linear in the candidate's features (coef); a measured candidate's own constants "
        "are its rows' least squares shrunk toward those",
        **_provenance(docs, results),
        "method": "the ratios to the same run's copy, median over runs, times = the first run's copy / ratio; per "
        "element size KAPPA, PHI_LINE and MU_IN on a grid and the feature coefficients (>= 0) by least "
        "squares on relative time error over every fit row (bench/bench_memory.py --fit-features); each "
        "measured candidate's (t0, 1/bw, mu_out/bw) by least squares of its own rows with the feature "
        "model as a prior (tiling_transpose.shrink). Expected errors: measured candidates, shapes left "
        "out (held_out_median_error); unmeasured, candidates left out in 5 folds "
        "(unmeasured_median_error); each replaced by a held-out run's when one is recorded",
        "fit_shapes": shapes,
        "held_out_shapes": [
            f"transpose {dt} leave-one-shape-out over the fit shapes (cross-validation)"
            for dt in ("f16", "f32")
        ],
        "not_fitted": {
            "what": "timed, but ptxas spills for them (the ranking rejects them)",
            "labels": dropped,
        },
        "cv": cv,
        "registers_compiler": regdoc["compiler"],
        "registers_source_sha256": regdoc["source_sha256"],
        **full,
    }
    out.write_text(json.dumps(cal, indent=1) + "\n")
    return cal


def transpose_loso(rows: list[dict], copies: list, mu_in_form: str = "per_candidate") -> dict:
    """Leave-one-shape-out per element size: the model fitted on the other shapes, scored on the left-out one
    (median |time error|, Spearman of predicted and measured times over its candidates); the pooled median."""
    from smemtile.families.transpose import fit as tf
    from smemtile.families.transpose import tiles as tt
    from smemtile.model import fitting

    out: dict = {}
    for elem in sorted({r["elem"] for r in rows}):
        mine = [r for r in rows if r["elem"] == elem]
        folds, pooled = {}, []
        for case in sorted({r["case"] for r in mine}):
            train = [r for r in mine if r["case"] != case]
            test = [r for r in mine if r["case"] == case]
            cal = {"copy": tf.copy_fit(copies), **tf.fit(train, mu_in_form)}
            dt = "f32" if elem == 4 else "f16"
            pred = [tt.predict_time_us(r["params"], r["rows"], r["cols"], dt, cal) for r in test]
            errs = [abs(p / r["time_us"] - 1) for p, r in zip(pred, test, strict=True)]
            pooled += errs
            folds[case] = {
                "median_error": statistics.median(errs),
                "spearman": fitting.spearman(pred, [r["time_us"] for r in test]),
            }
            print(
                f"  LOSO {case:28s} median |err| {folds[case]['median_error']:.1%}  spearman "
                f"{folds[case]['spearman']:.2f}",
                flush=True,
            )
        out[str(elem)] = {
            "folds": folds,
            "median_error": statistics.median(pooled),
            "max_error": max(pooled),
            "mean_spearman": statistics.fmean(f["spearman"] for f in folds.values()),
        }
    return out


def transpose_form_choice(rows: list[dict], copies: list) -> dict:
    """Leave-one-shape-out of every input-side form of ``tiling_transpose.fit`` (MU_IN_FORMS) on ``rows``."""
    from smemtile.families.transpose import fit as tf

    return {form: transpose_loso(rows, copies, form) for form in tf.MU_IN_FORMS}


def choose_form(choice: dict) -> str:
    """The rule, fixed before the scores were seen: the higher mean fp16 fold Spearman (the input side only
    matters in fp16), a difference under 0.01 going to the lower pooled median |time error|."""
    top = max(c["2"]["mean_spearman"] for c in choice.values())
    near = [f for f, c in choice.items() if c["2"]["mean_spearman"] >= top - 0.01]
    return min(near, key=lambda f: choice[f]["2"]["median_error"])


def fit_transpose(results: list[Path], out: Path, choice: dict | None = None) -> dict:
    """Fit smemtile/model/tiling_transpose.py's constants on every transpose shape of ``results`` (since session
    4 all of them are fit data: runs 4 and 5's fit and held-out shapes, the session-4 sweep, the input-pitch fit
    run), in the input-side form ``choose_form`` picks from the leave-one-shape-out scores (``choice``, computed
    here when not given); the expected error is that form's leave-one-shape-out median."""
    from smemtile.families.transpose import fit as tf
    from smemtile.families.transpose import tiles as tt

    rows, copies, docs = transpose_rows(results)
    choice = choice or transpose_form_choice(rows, copies)
    form = choose_form(choice)
    loso = choice[form]
    fitted = tf.fit(rows, form)
    constants = fitted["constants"]
    for elem, per in constants.items():
        per["held_out_median_error"] = loso[elem]["median_error"]
        per["held_out_max_error"] = loso[elem]["max_error"]
        mine = [r for r in rows if str(r["elem"]) == elem]
        e = [
            abs(
                tt.predict_time_us(
                    r["params"],
                    r["rows"],
                    r["cols"],
                    "f32" if elem == "4" else "f16",
                    {"copy": {"points": []}, **fitted},
                )
                / r["time_us"]
                - 1
            )
            for r in mine
        ]
        per["fit_median_error"], per["fit_max_error"] = statistics.median(e), max(e)
    shapes = sorted({r["case"] for r in rows})
    cal = {
        "what": "constants of the transpose model, smemtile.model.tiling_transpose: per candidate time = t0 + "
        "(vector bytes + edge bytes / kappa + phi_line x line-misaligned run bytes + mu_in x input-side "
        "sector-misaligned bytes + mu_out x output-side sector-misaligned bytes) / bw",
        **_provenance(docs, results),
        "method": "the ratios to the same run's copy, median over runs, times = the first run's copy / ratio; per "
        "candidate (t0, bw, mu_out) by least squares on relative time error over every shape (t0, "
        "mu_out >= 0; mu_out only where a shape's output pitch is sector-misaligned, else the "
        "median), per element size kappa (>= 0.25), phi_line and mu_in on a grid (bench/bench_memory.py "
        "--fit). Since session 4 every measured shape is fit data (the session-4 sweep was scored as "
        "held out first); the form (a misalignment weight per side: mu_out per candidate, mu_in per "
        "element size) was chosen among six by leave-one-shape-out on these shapes (bench/NOTES.md, "
        "bench/results/memory_h200_session4_form_choice.json), the input side's weight (per element "
        "size or per candidate, mu_in_form) again after the input-pitch fit run by bench_memory."
        "choose_form (mu_in_form_choice), and the expected error is the chosen form's "
        "leave-one-shape-out median until a held-out sweep replaces it",
        "fit_shapes": shapes,
        "held_out_shapes": [
            f"transpose {dt} leave-one-shape-out over the fit shapes (cross-validation)"
            for dt in ("f16", "f32")
        ],
        "loso": loso,
        "mu_in_form": form,
        "mu_in_form_choice": {
            f: {
                e: {k: v for k, v in c[e].items() if k != "folds"}
                | {"folds": {n: {k: round(x, 4) for k, x in fd.items()} for n, fd in c[e]["folds"].items()}}
                for e in c
            }
            for f, c in choice.items()
        },
        "copy": tf.copy_fit(copies),
        "model": fitted["model"],
        "constants": constants,
    }
    out.write_text(json.dumps(cal, indent=1) + "\n")
    return cal


def _transpose_layout(job: tuple[str, tuple]) -> tuple[tuple, dict | str]:
    """The fix search's layout for one (dtype, TILE, BLOCK_ROWS, TILE_Y, PACK): the accesses depend on nothing
    else (TILES, STREAM, MIN_BLOCKS change neither the tile nor its accesses); or the family's reason."""
    from smemtile.errors import SpecError

    dt, (tile, br, ty, pack) = job
    params = {"TILE": tile, "BLOCK_ROWS": br, "TILE_Y": ty, "PACK": pack}
    try:
        return job, fixed_layouts("transpose", params, {"rows": 8192, "cols": 8192, "dtype": dt})
    except SpecError as e:
        return job, str(e)


def _transpose_compile(job: tuple[str, list[tuple[str, dict, dict]]]) -> list[tuple[str, dict]]:
    """NVRTC once for many instantiations (the family's text is one template; only the name expressions
    differ): (label, {"registers", "spills", "layout"}) each."""
    from smemtile.codegen.render import body
    from smemtile.errors import CompileError
    from smemtile.gpu.nvrtc import compile_cubin

    dt, items = job
    fam = FAMILIES["transpose"]
    cfgs = [
        (lab, configure(fam, {**params, "rows": 8192, "cols": 8192, "dtype": dt}, lay, ARCH), lay)
        for lab, params, lay in items
    ]
    names = [fam.name_expression(c) for _, c, _ in cfgs]
    try:
        res = compile_cubin(body(cfgs[0][1]), names, ARCH, filename="transpose.cu").resources
    except CompileError:
        if len(cfgs) == 1:  # the kernel refuses what the family's rules let through: data, stated
            return [(items[0][0], {"rejected": "NVRTC refuses it (a static_assert the family's rules lack)"})]
        return [x for it in items for x in _transpose_compile((dt, [it]))]
    return [
        (lab, {"registers": int(res[n].registers), "spills": int(res[n].spills or 0), "layout": lay["tile"]})
        for (lab, _, lay), n in zip(cfgs, names, strict=True)
    ]


def transpose_registers(workers: int) -> dict:
    """Per dtype (f32, f16; bf16 is f16's code) every configuration of ``tiling_transpose.space``: the family's
    rules (dense tile, then the fix search's layout, what ``generate`` builds), then registers and spills from
    NVRTC (sm_90, 8192^2: the code does not depend on the size), or the family's reason for refusing it."""
    from smemtile.families.transpose import _screen
    from smemtile.families.transpose import tiles as tt
    from smemtile.gpu.nvrtc import nvrtc_version

    fam = FAMILIES["transpose"]
    out: dict = {"f32": {}, "f16": {}}
    todo: dict[str, list] = {"f32": [], "f16": []}
    for dt in out:
        ok, refused = _screen(fam, dt, ARCH)  # the family's rules, as `tiles --family transpose` applies them
        out[dt].update({tt.label(p): {"rejected": why} for p, why in refused})
        todo[dt] += [(tt.label(p), tt.set_params(p), p) for p in ok]
    keys = sorted(
        {(dt, (p["TILE"], p["BLOCK_ROWS"], p["TILE_Y"], p["PACK"])) for dt in todo for *_, p in todo[dt]}
    )
    with ProcessPoolExecutor(workers) as ex:
        lays = dict(ex.map(_transpose_layout, keys))
    groups: dict[tuple, list] = {}  # one NVRTC call per layout key (TILES, STREAM, MIN_BLOCKS variants)
    for dt, items in todo.items():
        for lab, params, p in items:
            key = (dt, (p["TILE"], p["BLOCK_ROWS"], p["TILE_Y"], p["PACK"]))
            if isinstance(lays[key], str):
                out[dt][lab] = {"rejected": lays[key]}
            else:
                groups.setdefault(key, []).append((lab, params, lays[key]))
    jobs = [(key[0], items) for key, items in groups.items()]
    with ProcessPoolExecutor(workers) as ex:
        for (dt, _), part in zip(jobs, ex.map(_transpose_compile, jobs), strict=True):
            for lab, row in part:
                out[dt][lab] = row
    return {
        "compiler": f"NVRTC {nvrtc_version()}, sm_90, the fix search's layout (what generate builds)",
        "source_sha256": source_sha256()["transpose"],
        "per_dtype": out,
    }


MODEL_DATA = (("stencil2d", "stencil_h200.json"), ("transpose", "transpose_h200.json"))


def data_file(family: str, name: str, data_dir: Path | None = None) -> Path:
    """A memory model's data file: in ``data_dir`` when given, else in the family's folder."""
    import importlib

    if data_dir is not None:
        return data_dir / name
    return Path(importlib.import_module(f"smemtile.families.{family}").__file__).parent / name


def model_data_sha256() -> dict:
    """The memory models' data files as this run read them (the plan's predictions come from these)."""
    return {n: hashlib.sha256(data_file(f, n).read_bytes()).hexdigest()[:16] for f, n in MODEL_DATA}


def score_spearman(path: Path) -> list[dict]:
    """Per case of a plan-spearman results file, the frozen model's predictions (made when the plan was written)
    against the measurement: Spearman of predicted and measured GB/s over every timed configuration and over the
    model's top SPEARMAN_TOP, the model's #1 against the best measured, the median |time error| and |copy-ratio
    error|. Written into the file under ``scores``."""
    from smemtile.model.fitting import spearman

    doc = json.loads(path.read_text())
    scores = []
    for case in doc["cases"]:
        rows = [r for r in case["configs"] if "gbps" in r and r.get("predicted")]
        top = [r for r in rows if r["predicted"]["rank"] <= SPEARMAN_TOP]
        pick = next((r for r in rows if r["predicted"]["rank"] == 1), None)
        order = sorted(rows, key=lambda r: -r["gbps"])

        def rho(rs: list[dict]) -> float:
            return spearman([r["predicted"]["gbps"] for r in rs], [r["gbps"] for r in rs])

        scores.append(
            {
                "case": case["case"],
                "role": case["role"],
                "swept": len(case["configs"]),
                "timed": len(rows),
                "ranked": rows[0]["predicted"]["of"] if rows else 0,
                "spearman": rho(rows),
                "spearman_top": rho(top),
                "top": len(top),
                "pick": pick and pick["label"],
                "pick_ratio": pick and pick["ratio"],
                "pick_measured_rank": pick and 1 + order.index(pick),
                "best": order[0]["label"],
                "best_ratio": order[0]["ratio"],
                "pick_vs_best": pick and pick["gbps"] / order[0]["gbps"],
                "top_measured_spread": 1 - min(r["gbps"] for r in top) / max(r["gbps"] for r in top),
                "measured_ratio_range": [order[-1]["ratio"], order[0]["ratio"]],
                "median_time_error": statistics.median(
                    abs(r["predicted"]["time_us"] / (r["median_ms"] * 1e3) - 1) for r in rows
                ),
                # a bench.run results file carries the model's rate and time, not its copy ratio
                "median_ratio_error": statistics.median(
                    abs(r["predicted"]["copy_ratio"] / r["ratio"] - 1) for r in rows
                )
                if all("copy_ratio" in r["predicted"] for r in rows)
                else None,
            }
        )
    doc["scores"] = scores
    doc["sampling"] = (
        f"per shape the model's top {SPEARMAN_TOP} of `smemtile tiles --family`, then "
        f"{SPEARMAN_SPREAD} evenly spaced ranks of the rest, the last included (bench_memory."
        f"spread_ranks); a shorter list whole"
    )
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return scores


def record_validation(path: Path, data_dir: Path | None = None) -> dict:
    """Write a scored plan-heldout results file into the memory models' data files as their expected error: per
    family (transpose: per element size) the pooled median and max |time error| over every configuration of the
    held-out cases, the cases' scores under ``validation``. The constants are not touched (nothing is refitted);
    the data files' sha256 at plan time stay in the results file."""
    doc = json.loads(path.read_text())
    scores = {s["case"]: s for s in doc["scores"]}
    out = {}
    for fam, name in (("stencil2d", "stencil_h200.json"), ("transpose", "transpose_h200.json")):
        cases = [c for c in doc["cases"] if c["family"] == fam and c["role"] == "held_out"]
        if not cases:  # a run of one family leaves the other's data file alone
            continue
        target_file = data_file(fam, name, data_dir)
        cal = json.loads(target_file.read_text())
        groups: dict[str, list[dict]] = {}
        for c in cases:
            groups.setdefault(str(c["problem"].get("dtype", "")), []).append(c)
        shapes = []
        for dt, cs in sorted(groups.items()):
            errs = [
                abs(r["predicted"]["time_us"] / (r["median_ms"] * 1e3) - 1)
                for c in cs
                for r in c["configs"]
                if "median_ms" in r
            ]
            target = cal["constants"]["4" if dt == "f32" else "2"] if fam == "transpose" else cal
            if fam == "transpose" and "coef" in target:  # session 5: measured and unmeasured candidates apart
                timed = set(target["candidates"])
                split = {
                    m: [
                        abs(r["predicted"]["time_us"] / (r["median_ms"] * 1e3) - 1)
                        for c in cs
                        for r in c["configs"]
                        if "median_ms" in r and (r["label"] in timed) == m
                    ]
                    for m in (True, False)
                }
                if split[False]:
                    target["unmeasured_median_error"] = statistics.median(split[False])
                    target["unmeasured_max_error"] = max(split[False])
                errs = split[True] or errs
            target["held_out_median_error"], target["held_out_max_error"] = statistics.median(errs), max(errs)
            shapes += sorted(
                {
                    c["case"]
                    if fam == "transpose"
                    else f"stencil R1-4 {c['problem']['ny']}x{c['problem']['nx']}"
                    for c in cs
                }
            )
            out[f"{fam} {dt}".strip()] = target["held_out_median_error"]
        # a run of some dtypes keeps what the file states for the others (transpose: per element size)
        kept = [
            x
            for x in cal.get("held_out_shapes", [])
            if fam == "transpose" and not any(f" {dt} " in x for dt in groups)
        ]
        cal["held_out_shapes"] = kept + shapes
        cal["validation"] = {
            "run": f"bench/results/{path.name}",
            "commit": doc["commit"],
            "date": doc["date"][:10],
            "model_data_sha256_at_plan_time": doc["model_data"][name],
            "what": "scored after the run (bench_memory.py --score, --record-validation); the "
            "expected error is the pooled median |time error| of these cases; the "
            "cross-validated one it replaces stays under form_choice / loso",
            "cases": [scores[c["case"]] for c in cases],
        }
        if fam == "stencil2d":
            # the stencil file's own layout (short lists on one line)
            from bench.fit_stencil import write_data

            write_data(cal, target_file)
        else:
            target_file.write_text(json.dumps(cal, indent=1) + "\n")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--plan",
        default="sweep",
        choices=("sweep", "final", *PLANS),
    )
    ap.add_argument(
        "--plan-file", type=Path, help="the resolved plan --prebuild wrote (skips the fix search)"
    )
    ap.add_argument("--only", default="", help="run only cases whose name contains this text")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--commit", default="")
    ap.add_argument("--list", action="store_true")
    ap.add_argument(
        "--prebuild", type=Path, help="compile every configuration into this NVRTC cache (no GPU)"
    )
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument(
        "--fit", type=Path, nargs="+", help="fit the transpose model on these results files (no GPU)"
    )
    ap.add_argument("--fit-out", type=Path, default=data_file("transpose", "transpose_h200.json"))
    ap.add_argument(
        "--fit-features",
        type=Path,
        nargs="+",
        help="session 5: fit the transpose feature model on "
        "these results files (no GPU); --registers-table names the NVRTC table",
    )
    ap.add_argument(
        "--registers-table",
        type=Path,
        default=ROOT / "bench" / "results" / "memory_h200_session6_registers.json",
        help="--registers writes it, --fit-features reads it",
    )
    ap.add_argument(
        "--registers",
        action="store_true",
        help="build every configuration of the transpose space "
        "with NVRTC (no GPU) and write --registers-table",
    )
    ap.add_argument(
        "--form-choice", type=Path, help="--fit: the forms' cross-validation, read if present, else written"
    )
    ap.add_argument("--score", type=Path, help="score a plan-spearman results file in place (no GPU)")
    ap.add_argument(
        "--record-validation",
        type=Path,
        help="a scored plan-heldout file: its errors become the expected error",
    )
    a = ap.parse_args()
    if a.record_validation:
        print(record_validation(a.record_validation))
        return 0
    if a.registers:
        a.registers_table.write_text(json.dumps(transpose_registers(a.workers), indent=1) + "\n")
        return 0
    if a.fit_features:
        cal = fit_transpose_features(a.fit_features, a.fit_out, a.registers_table)
        for elem, c in cal["constants"].items():
            print(
                f"elem {elem}: {c['model']}; fit median {c['fit_median_error']:.1%}, shapes left out "
                f"{c['held_out_median_error']:.1%}, candidates left out {c['unmeasured_median_error']:.1%}"
            )
        return 0
    if a.score:
        for r in score_spearman(a.score):
            print(
                f"{r['case']:28s} {r['timed']:2d}/{r['swept']:2d} of {r['ranked']:3d}  spearman {r['spearman']:5.2f}"
                f"  top{r['top']} {r['spearman_top']:5.2f} (measured within {r['top_measured_spread']:.1%})  "
                f"#1 {r['pick']} {r['pick_ratio']:.3f}x rank {r['pick_measured_rank']}, best {r['best']} "
                f"{r['best_ratio']:.3f}x: #1/best {r['pick_vs_best']:.3f}  median |err| time "
                f"{r['median_time_error']:.1%} ratio "
                + (f"{r['median_ratio_error']:.1%}" if r["median_ratio_error"] is not None else "-")
            )
        return 0
    if a.fit:
        choice = None
        if a.form_choice and a.form_choice.exists():
            choice = json.loads(a.form_choice.read_text())["loso"]
        elif a.form_choice:
            from smemtile.families.transpose import fit as tf

            rows, copies, _ = transpose_rows(a.fit)
            choice = transpose_form_choice(rows, copies)
            a.form_choice.write_text(
                json.dumps(
                    {
                        "what": "leave-one-shape-out per input-side form of the "
                        "transpose fit (bench_memory.transpose_form_choice) on these "
                        "results",
                        "results": [str(r) for r in a.fit],
                        "forms": list(tf.MU_IN_FORMS),
                        "loso": choice,
                    },
                    indent=1,
                )
                + "\n"
            )
        cal = fit_transpose(a.fit, a.fit_out, choice)
        for elem, c in cal["constants"].items():
            print(
                f"elem {elem}: {c['model']}; fit median error {c['fit_median_error']:.1%}, leave-one-shape-out "
                f"median {c['held_out_median_error']:.1%}, max {c['held_out_max_error']:.1%}"
            )
        print(f"model {cal['model']}; wrote {a.fit_out}")
        return 0
    from bench import run as runner

    cases = load_plan(a.plan_file) if a.plan_file else plan_cases(a.plan)
    cases = [c for c in cases if a.only in c.name]
    if a.list:
        for case in cases:
            print(case.name, case.problem, case.role)
            for c in case.configs:
                cfg = full_config(case, c)
                print(f"  {c.label:24s} {FAMILIES[case.family].name_expression(cfg)}")
        return 0
    if a.prebuild:
        os.environ["SMEMTILE_CACHE_DIR"] = str(a.prebuild)
        a.prebuild.mkdir(parents=True, exist_ok=True)
        save_plan(cases, a.prebuild / "plan.json")
        runner.compile_all(runner_cases(cases), a.workers)
        return 0
    assert a.rounds >= 15, "at least 15 rounds"
    todo = runner_cases(cases)
    runner.compile_all(todo, a.workers, log=lambda s: None)  # cache hits when prebuilt, else built here
    texts = runner.sources(todo)
    from smemtile.gpu.run import open_device

    torch = runner.torch_setup()
    dev = open_device(torch.cuda.current_device())
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    t_start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t_start:6.1f} s] {msg}", flush=True)

    doc = {
        "what": "issue 20: transpose and stencil2d vs device-to-device copy of the same bytes",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": a.commit,
        "family_sources": source_sha256(),
        "model_data": model_data_sha256(),
        "versions": runner.versions(dev),
        "plan": a.plan,
        "method": {
            "rounds": a.rounds,
            "flush_bytes": FLUSH_BYTES,
            "order": "alternating, reversed every other round",
            "timing": "bench/timing.py: torch CUDA events around each call, a 512 MiB tensor zeroed "
            "before it (outside the events)",
            "reference": "cuMemcpyDtoDAsync of one array (read + write bytes = the kernel's)",
            "spread": "(p90 - p10) / median",
        },
        "cases": [],
    }
    for case, rcase in zip(cases, todo, strict=True):
        log(f"{case.name}: {len(case.configs)} configurations")
        res = runner.run_case(
            FAMILIES[case.family], rcase, {"kind": "copy"}, dev, a.rounds, torch, flush, log, True, texts
        )
        doc["cases"].append({**res, "role": case.role})
        torch.cuda.empty_cache()
        if a.json:
            a.json.write_text(json.dumps(doc, indent=1))
    print()
    for cd in doc["cases"]:
        print(
            f"{cd['case']} ({cd.get('role') or '-'}): copy {cd['copy']['gbps']:.0f} GB/s "
            f"({cd['copy']['median_ms']:.4f} ms, spread {cd['copy']['spread']:.1%})"
        )
        for r in sorted(cd["configs"], key=lambda r: -r.get("ratio", 0)):
            if "ratio" in r:
                print(
                    f"  {r['label']:24s} {r['gbps']:7.0f} GB/s  {r['ratio']:.3f}x (rounds {r['ratio_rounds']:.3f})"
                    f"  spread {r['spread']:5.1%}  {r['registers']} regs {r['blocks_per_sm']} blk/SM"
                )
            else:
                print(f"  {r['label']:24s} FAILED {r.get('error', '')[:100]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
