"""Family ``stencil2d`` (``stencil2d.cu``): star stencil of radius R (1..4) on an ny x nx fp32 grid, zero boundary.

    out[y][x] = c0 * in[y][x] + sum_{r=1..R} c_r * (in[y][x-r] + in[y][x+r] + in[y-r][x] + in[y+r][x])

Spec (YAML)::

    arch: sm_90
    tile: {BX: 32, BY: 8, R: 4}
    kernel: {family: stencil2d, ny: 4096, nx: 4096}

A block of BX x BY threads stages the (BY + 2R) x (BX + 2R) halo tile (element e = tid + i*THREADS, row-major:
lanes past the tile idle), then each thread reads its 4R + 1 neighbours: the centre, R left/right pairs, R
up/down pairs. Launch: grid = (ceil(nx/BX), ceil(ny/BY)), block = (BX, BY); shared memory static,
(BY + 2R) * (BX + 2R + pad) * 4 bytes.
"""

from __future__ import annotations

import numpy as np

from smemtile.families.base import Family, HostArg, KernelCall, KernelConfig, Param, ProblemKey


class Stencil2d(Family):
    name = "stencil2d"
    summary = "2-D star stencil of radius 1..4 (fp32) through a halo tile"
    file = "stencil2d.cu"
    kernel = "stencil2d"
    signature = ("const float* in", "float* out", "int ny", "int nx", "const float* coeffs")
    params = (
        Param(
            "BX", 32, "output tile width = threads along x (divides 32 or a multiple of 32)", lo=1, hi=1024
        ),
        Param("BY", 8, "output tile height = threads along y", lo=1, hi=1024),
        Param("R", 1, "stencil radius", (1, 2, 3, 4)),
    )
    problem_keys = (ProblemKey("ny", 4096, "grid rows"), ProblemKey("nx", 4096, "grid columns"))
    host_args = (
        HostArg("in", "const float*", "in", ("ny", "nx"), "f32"),
        HostArg("out", "float*", "out", ("ny", "nx"), "f32"),
        HostArg("ny", "int"),
        HostArg("nx", "int"),
        HostArg("coeffs", "const float*", "in", ("R + 1",), "f32"),
    )
    tolerance = 1e-5
    test_sizes = ({"ny": 64, "nx": 64}, {"ny": 1000, "nx": 999}, {"ny": 7, "nx": 300}, {"ny": 1, "nx": 1})
    bench_sizes = ({"ny": 8192, "nx": 8192},)

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

    def template_args(self, cfg: KernelConfig) -> list[str]:
        p = cfg.params
        return [str(v) for v in (p["BX"], p["BY"], p["R"], *cfg.layouts["tile"].template_args())]

    def buffers(self, cfg: KernelConfig) -> list[dict]:
        return [{"name": "tile", "dtype": "f32", "shape": ["BY + 2*R", "BX + 2*R"],
                 "note": "input tile with an R-wide halo on every side"}]  # fmt: skip

    def accesses(self, cfg: KernelConfig) -> list[dict]:
        e, tw, n = "(tid + i*THREADS)", "(BX + 2*R)", "(BY + 2*R)*(BX + 2*R)"
        y, x = "tid//BX + R", "tid%BX + R"
        side = "(2*s - 1)*d"  # s = 0: -d, s = 1: +d
        return [
            {"name": "halo_fill", "buffer": "tile", "op": "store", "width": 4, "role": "copy",
             "row": f"{e}//{tw}", "col": f"{e}%{tw}", "active": f"{e} < {n}", "over": {"i": [0, f"cdiv({n}, THREADS)"]},
             "note": "element e = tid + i*THREADS of the halo tile, row-major; lanes past the tile idle"},
            {"name": "centre", "buffer": "tile", "op": "load", "width": 4, "role": "inner", "row": y, "col": x,
             "note": "tile[ty + R][tx + R]"},
            {"name": "left_right", "buffer": "tile", "op": "load", "width": 4, "role": "inner", "row": y,
             "col": f"{x} + {side}", "over": {"d": [1, "R + 1"], "s": [0, 2]}, "note": "tile[ty + R][tx + R -+ d]"},
            {"name": "up_down", "buffer": "tile", "op": "load", "width": 4, "role": "inner", "row": f"{y} + {side}",
             "col": x, "over": {"d": [1, "R + 1"], "s": [0, 2]}, "note": "tile[ty + R -+ d][tx + R]"},
        ]  # fmt: skip

    def calls(self, cfg: KernelConfig) -> list[KernelCall]:
        return [KernelCall(("in", "out", "ny", "nx", "coeffs"), ("cdiv(nx, BX)", "cdiv(ny, BY)", "1"),
                           ("BX", "BY", "1"))]  # fmt: skip

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
            s = (xp[r : r + ny, r - d : r - d + nx] + xp[r : r + ny, r + d : r + d + nx]
                 + xp[r - d : r - d + ny, r : r + nx] + xp[r + d : r + d + ny, r : r + nx])  # fmt: skip
            out = out + c[d] * s
        return out

    def work(self, problem: dict) -> tuple[str, float]:
        return "gbps", 2.0 * problem["ny"] * problem["nx"] * 4

    def small_problem(self, cfg: KernelConfig) -> dict:
        return {"ny": 4 * cfg.params["BY"], "nx": 4 * cfg.params["BX"]}


FAMILY = Stencil2d()
