"""Family ``stencil2d`` (``stencil2d.cu``): star stencil of radius R (1..4) on an ny x nx fp32 grid, zero boundary.

    out[y][x] = c0 * in[y][x] + sum_{r=1..R} c_r * (in[y][x-r] + in[y][x+r] + in[y-r][x] + in[y+r][x])

Spec (YAML)::

    arch: sm_90
    tile: {BX: 32, BY: 8, R: 4, VEC: 4, RY: 4}
    kernel: {family: stencil2d, ny: 4096, nx: 4096}

A block of BX x BY threads computes a BX*VEC x BY*RY output tile (each thread VEC columns of RY rows). It stages
the TH x TW halo tile, TH = BY*RY + 2R rows and TW = BX*VEC + 2*HX columns (HX = R rounded up to whole vectors),
VEC elements per lane (vector e = tid + i*THREADS, row-major; lanes past the tile store their previous vector
again), then each thread reads the RY + 2R vectors of its column window and, per output row, ceil(R/W) runs of
W elements on each side of its centre vector. Every shared access moves W elements (W = VEC unless the layout
breaks a vector's alignment). Launch: grid = (ceil(nx/(BX*VEC)), ceil(ny/(BY*RY))), block = (BX, BY); shared
memory static, TH * (TW + pad) * 4 bytes. A spec without a tile gets the tile model's pick for its shape and R
(tiles.py, calibrated on the H200); ``smemtile tiles --family stencil2d NY NX --radius R`` ranks
every configuration.
"""

from __future__ import annotations

import numpy as np

from smemtile.families.base import HostArg, KernelCall, KernelConfig, Param, ProblemKey
from smemtile.families.pitched import PITCH_PARAM, Pitched
from smemtile.families.stencil2d.tiles import StencilTiles


class Stencil2d(Pitched):
    name = "stencil2d"
    summary = "2-D star stencil of radius 1..4 (fp32) through a halo tile"
    file = "stencil2d.cu"
    # the radius is the user's stencil, not a tile choice (problem_params: the tile model's --radius option): a
    # spec giving only R still gets the model's tile, and every caller that ranks passes it with the problem
    tile_model = StencilTiles  # tiles.py: the configurations and the calibrated model (stencil_h200.json)
    peak = "memory"
    kernel = "stencil2d"
    signature = (
        "const float* in",
        "float* out",
        "int ny",
        "int nx",
        "const float* coeffs",
        "int ld_in",
        "int ld_out",
    )
    params = (
        Param(
            "BX",
            32,
            "threads along x (divides 32 or a multiple of 32); the tile is BX*VEC columns",
            lo=1,
            hi=1024,
        ),
        Param("BY", 8, "threads along y; the tile is BY*RY rows", lo=1, hi=1024),
        Param("R", 1, "stencil radius", (1, 2, 3, 4)),
        Param("VEC", 4, "columns per thread, moved as one vector (4: float4 loads and stores)", (1, 2, 4)),
        Param(
            "RY",
            4,
            "rows per thread (register blocking along y: RY + 2R column loads feed RY outputs)",
            lo=1,
            hi=16,
        ),
        PITCH_PARAM,
    )
    problem_keys = (
        ProblemKey("ny", 4096, "grid rows"),
        ProblemKey("nx", 4096, "grid columns"),
        ProblemKey("ld_in", 0, "row pitch of the input in elements (default nx: dense)", dense="nx"),
        ProblemKey("ld_out", 0, "row pitch of the output in elements (default nx: dense)", dense="nx"),
    )
    host_args = (
        HostArg("in", "const float*", "in", ("ny", "nx"), "f32", ld="ld_in"),
        HostArg("out", "float*", "out", ("ny", "nx"), "f32", ld="ld_out"),
        HostArg("ny", "int"),
        HostArg("nx", "int"),
        HostArg("coeffs", "const float*", "in", ("R + 1",), "f32"),
        HostArg("ld_in", "int"),
        HostArg("ld_out", "int"),
    )
    layout_dependent_accesses = True  # the access width W follows the layout (a padded row breaks a float4)
    tolerance = 1e-5

    def threads(self, p: dict[str, int]) -> int:
        return p["BX"] * p["BY"]

    def threads_message(self, p: dict[str, int], threads: int, implied: int) -> str:
        return f"threads = {threads} but the tile needs BX * BY = {implied}"

    def violations(self, cfg: KernelConfig) -> list[str]:
        p, out = cfg.params, []
        bx, by = p["BX"], p["BY"]
        if bx * by > 1024:
            out.append(f"BX*BY = {bx * by} threads; a block has at most 1024")
        elif (bx * by) % 32:
            out.append(f"BX*BY = {bx * by} is not whole warps (a multiple of 32)")
        if not (32 % bx == 0 or bx % 32 == 0):
            out.append(f"BX={bx} must divide 32 or be a multiple of 32 so warps cover whole rows")
        return out

    def halo_x(self, p: dict[str, int]) -> int:
        """HX: the x halo, R rounded up to whole vectors (stencil2d.cu)."""
        return -(-p["R"] // p["VEC"]) * p["VEC"]

    def run(self, cfg: KernelConfig) -> int:
        """W: elements per shared-memory access (stencil_smem_run in stencil2d.cu)."""
        p, lay = cfg.params, cfg.layouts["tile"]
        stride = p["BX"] * p["VEC"] + 2 * self.halo_x(p) + lay.pad
        w = p["VEC"]
        while w > 1 and (stride % w or (lay.swizzled and (1 << lay.swizzle.M) < w)):
            w //= 2
        return w

    def constants(self, cfg: KernelConfig) -> dict[str, int]:
        return {**super().constants(cfg), "HX": self.halo_x(cfg.params), "W": self.run(cfg)}

    def template_args(self, cfg: KernelConfig) -> list[str]:
        p = cfg.params
        t = cfg.layouts["tile"].template_args()
        return [str(v) for v in (p["BX"], p["BY"], p["R"], *t, p["VEC"], p["RY"], *self.pitch_args(cfg))]

    def buffers(self, cfg: KernelConfig) -> list[dict]:
        return [
            {
                "name": "tile",
                "dtype": "f32",
                "shape": ["BY*RY + 2*R", "BX*VEC + 2*HX"],
                "note": "input tile with its halo: R rows above and below, HX columns left and right",
            }
        ]

    def accesses(self, cfg: KernelConfig) -> list[dict]:
        e, nv, th = "(tid + i*THREADS)", "((BX*VEC + 2*HX)//VEC)", "(BY*RY + 2*R)"
        ry, cx = "(tid//BX)*RY", "(tid%BX)*VEC"
        ee = f"({e} - THREADS*({e} >= {th}*{nv}))"  # past the tile: the lane's previous vector again
        return [
            {
                "name": "halo_fill",
                "buffer": "tile",
                "op": "store",
                "width": "4*W",
                "role": "copy",
                "row": f"{ee}//{nv}",
                "col": f"({ee}%{nv})*VEC + j",
                "over": {"i": [0, f"cdiv({th}*{nv}, THREADS)"], "j": [0, "VEC", "W"]},
                "note": "vector e = tid + i*THREADS of the halo tile, row-major; lanes past the tile store their "
                "previous vector (e - THREADS) again, so every lane of every warp stores",
            },
            {
                "name": "column",
                "buffer": "tile",
                "op": "load",
                "width": "4*W",
                "role": "inner",
                "row": f"{ry} + k",
                "col": f"HX + {cx} + j",
                "over": {"k": [0, "RY + 2*R"], "j": [0, "VEC", "W"]},
                "note": "the column window: centre and up/down neighbours of the thread's RY output rows",
            },
            {
                "name": "sides",
                "buffer": "tile",
                "op": "load",
                "width": "4*W",
                "role": "inner",
                "row": f"{ry} + R + o",
                "col": f"HX + {cx} + s*(VEC + (2*m + 1)*W) - (m + 1)*W",
                "over": {"o": [0, "RY"], "m": [0, "cdiv(R, W)"], "s": [0, 2]},
                "note": "per output row, runs of W next to the centre vector, left (s = 0) and right (s = 1)",
            },
        ]

    def calls(self, cfg: KernelConfig) -> list[KernelCall]:
        return [
            KernelCall(
                ("in", "out", "ny", "nx", "coeffs", "ld_in", "ld_out"),
                ("cdiv(nx, BX*VEC)", "cdiv(ny, BY*RY)", "1"),
                ("BX", "BY", "1"),
            )
        ]

    def coefficients(self, r: int) -> np.ndarray:
        """Fixed, distinct coefficients so a swapped neighbour shows up as an error."""
        return np.array([0.5] + [0.125 / d + 0.01 * d for d in range(1, r + 1)], dtype=np.float32)

    def make_inputs(self, cfg: KernelConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
        shape = (int(cfg.problem["ny"]), int(cfg.problem["nx"]))
        return {
            "in": rng.standard_normal(shape, dtype=np.float32),
            "coeffs": self.coefficients(cfg.params["R"]),
        }

    def reference(self, cfg: KernelConfig, inputs: dict[str, np.ndarray]) -> np.ndarray:
        x = inputs["in"].astype(np.float64)
        c = inputs["coeffs"].astype(np.float64)
        r = len(c) - 1
        ny, nx = x.shape
        xp = np.pad(x, r)
        out = c[0] * x
        for d in range(1, r + 1):
            s = (
                xp[r : r + ny, r - d : r - d + nx]
                + xp[r : r + ny, r + d : r + d + nx]
                + xp[r - d : r - d + ny, r : r + nx]
                + xp[r + d : r + d + ny, r : r + nx]
            )
            out = out + c[d] * s
        return out

    def work(self, problem: dict) -> tuple[str, float]:
        return "gbps", 2.0 * problem["ny"] * problem["nx"] * 4

    def small_problem(self, cfg: KernelConfig) -> dict:
        p = cfg.params
        return {"ny": 4 * p["BY"] * p["RY"], "nx": 4 * p["BX"] * p["VEC"]}


FAMILY = Stencil2d()
