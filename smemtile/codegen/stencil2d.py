"""Contract of ``kernels/stencil2d.cu``: star stencil of radius R (1..4) on an ny x nx fp32 grid, zero boundary.

    out[y][x] = c0 * in[y][x] + sum_{r=1..R} c_r * (in[y][x-r] + in[y][x+r] + in[y-r][x] + in[y+r][x])

Spec mapping (YAML)::

    threads: 256                         # BX * BY
    tile: {BX: 32, BY: 8, R: 1}
    buffers:
      - {name: tile, dtype: f32, shape: [BY + 2*R, BX + 2*R], layout: {pad: 0}}   # the halo tile
    kernel: {family: stencil2d, ny: 4096, nx: 4096}

Shared memory per block = (BY + 2R) * (BX + 2R + pad) * 4 bytes, static.
Launch: grid = (ceil(nx/BX), ceil(ny/BY)), block = (BX, BY).
"""

from __future__ import annotations

import numpy as np

from smemtile.codegen.contract import Access, Buffer, Family, KernelConfig, Launch, Param, cdiv


class Stencil2d(Family):
    name = "stencil2d"
    file = "stencil2d.cu"
    kernel = "stencil2d"
    signature = ("const float* in", "float* out", "int ny", "int nx", "const float* coeffs")
    params = (
        Param("BX", 32, None, "output tile width = threads along x (divides 32 or a multiple of 32)"),
        Param("BY", 8, None, "output tile height = threads along y"),
        Param("R", 1, (1, 2, 3, 4), "stencil radius"),
    )
    problem_keys = {"ny": 4096, "nx": 4096}
    test_sizes = ({"ny": 64, "nx": 64}, {"ny": 1000, "nx": 999}, {"ny": 7, "nx": 300}, {"ny": 1, "nx": 1})
    bench_sizes = ({"ny": 8192, "nx": 8192},)
    tolerance = 1e-5

    def buffers(self, cfg: KernelConfig) -> list[Buffer]:
        p = cfg.params
        r = p["R"]
        return [
            Buffer(
                "tile",
                "f32",
                p["BY"] + 2 * r,
                p["BX"] + 2 * r,
                "input tile with an R-wide halo on every side",
            )
        ]

    def threads(self, p: dict[str, int]) -> int:
        return p["BX"] * p["BY"]

    def violations(self, cfg: KernelConfig) -> list[str]:
        p, out = cfg.params, []
        bx, by, r = p["BX"], p["BY"], p["R"]
        if not 1 <= r <= 4:
            out.append(f"R={r}: the stencil radius must be 1..4")
        if bx < 1 or by < 1 or bx * by > 1024:
            out.append(f"BX*BY = {bx * by} threads; a block has 1..1024")
        elif (bx * by) % 32:
            out.append(f"BX*BY = {bx * by} is not whole warps (multiple of 32)")
        if bx >= 1 and not (32 % bx == 0 or bx % 32 == 0):
            out.append(f"BX={bx} must divide 32 or be a multiple of 32 so warps cover whole rows")
        smem = self.smem_bytes(cfg)
        if smem > 48 * 1024:
            out.append(f"the halo tile is static shared memory: {smem} bytes exceeds 48 KiB")
        return out + self.common_violations(cfg)

    def template_args(self, cfg: KernelConfig) -> list[str]:
        p, t = cfg.params, cfg.layouts["tile"]
        return [str(v) for v in (p["BX"], p["BY"], p["R"], t.pad, t.swz_b, t.swz_m, t.swz_s)]

    def launch(self, cfg: KernelConfig) -> Launch:
        p, q = cfg.params, cfg.problem
        return Launch(
            (cdiv(q["nx"], p["BX"]), cdiv(q["ny"], p["BY"]), 1),
            (p["BX"], p["BY"], 1),
            0,
            self.smem_bytes(cfg),
        )

    def accesses(self, cfg: KernelConfig) -> list[Access]:
        p = cfg.params
        bx, by, r = p["BX"], p["BY"], p["R"]
        tw, th, t = bx + 2 * r, by + 2 * r, bx * by
        tid = np.arange(t).reshape(-1, 32)
        tx, ty = tid % bx, tid // bx
        n_fill = -(-th * tw // t)
        e = tid[None] + np.arange(n_fill)[:, None, None] * t
        e = np.where(e < th * tw, e, -1)  # lanes past the tile idle: masked as -1
        fill_row = np.where(e >= 0, e // tw, -1)
        fill_col = np.where(e >= 0, e % tw, -1)
        offs = [(0, 0)] + [(0, -d) for d in range(1, r + 1)] + [(0, d) for d in range(1, r + 1)]
        offs += [(-d, 0) for d in range(1, r + 1)] + [(d, 0) for d in range(1, r + 1)]
        rd_row = np.stack([ty + r + dy for dy, _ in offs])
        rd_col = np.stack([tx + r + dx for _, dx in offs])
        tid_e = "(warp*32+lane)"
        return [
            Access(
                "halo_fill",
                "tile",
                "store",
                4,
                fill_row,
                fill_col,
                False,
                {
                    "row": f"({tid_e} + i*THREADS)//(BX+2*R)",
                    "col": f"({tid_e} + i*THREADS)%(BX+2*R)",
                    "over": {"i": [0, "ceil((BY+2*R)*(BX+2*R)/THREADS)"]},
                },
            ),
            Access(
                "neighbour_read",
                "tile",
                "load",
                4,
                rd_row,
                rd_col,
                True,
                {
                    "row": f"{tid_e}//BX + R + dy",
                    "col": f"{tid_e}%BX + R + dx",
                    "over": {"(dy,dx)": "the 4R+1 star points"},
                },
            ),
        ]

    def coefficients(self, r: int) -> np.ndarray:
        """Fixed, distinct coefficients so a swapped neighbour shows up as an error."""
        return np.array([0.5] + [0.125 / d + 0.01 * d for d in range(1, r + 1)], dtype=np.float32)

    def make_inputs(self, problem: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
        return {"in": rng.standard_normal((problem["ny"], problem["nx"]), dtype=np.float32)}

    def reference(self, problem: dict, inputs: dict[str, np.ndarray], r: int = 1) -> np.ndarray:
        x = inputs["in"].astype(np.float64)
        c = inputs.get("coeffs", self.coefficients(r)).astype(np.float64)
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

    def flops_or_bytes(self, problem: dict) -> tuple[str, float]:
        return "gbps", 2.0 * problem["ny"] * problem["nx"] * 4
