"""Contract of ``kernels/transpose.cu``: out = in.T for fp32 or fp16/bf16 (moved as 16-bit words).

Spec mapping (YAML)::

    threads: 256                        # TILE * BLOCK_ROWS
    tile: {TILE: 32, BLOCK_ROWS: 8}
    buffers:
      - {name: tile, dtype: f32, shape: [TILE, TILE], layout: {pad: 1}}    # or {swizzle: [5, 0, 5]}; f16 for fp16
    kernel: {family: transpose, rows: 8192, cols: 8192}

Shared memory per block = TILE * (TILE + pad) * sizeof(element) bytes, static.
Launch: grid = (ceil(cols/TILE), ceil(rows/TILE)), block = (TILE, BLOCK_ROWS).
"""

from __future__ import annotations

import numpy as np

from smemtile.codegen.contract import Access, Buffer, Family, KernelConfig, Launch, Param, cdiv

CTYPES = {"f32": "float", "f16": "unsigned short", "bf16": "unsigned short"}
NPTYPES = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}


class Transpose(Family):
    name = "transpose"
    file = "transpose.cu"
    kernel = "transpose"
    signature = ("const T* in", "T* out", "int rows", "int cols")
    params = (
        # 64 x 4: 16 elements in flight per thread, the fastest measured on the H200 (0.93x device copy)
        Param("TILE", 64, (32, 64), "square tile edge (a warp spans whole tile rows)"),
        Param("BLOCK_ROWS", 4, None, "thread rows; each thread moves TILE/BLOCK_ROWS elements"),
    )
    problem_keys = {"rows": 8192, "cols": 8192, "dtype": "f32"}
    test_sizes = (
        {"rows": 32, "cols": 32},
        {"rows": 1000, "cols": 777},
        {"rows": 33, "cols": 2049},
        {"rows": 1, "cols": 5},
        {"rows": 513, "cols": 257, "dtype": "f16"},
    )
    bench_sizes = ({"rows": 8192, "cols": 8192},)
    tolerance = 0.0  # a bit-exact copy

    def dtype(self, cfg_or_problem) -> str:
        prob = cfg_or_problem.problem if isinstance(cfg_or_problem, KernelConfig) else cfg_or_problem
        return str(prob.get("dtype", "f32"))

    def buffers(self, cfg: KernelConfig) -> list[Buffer]:
        dt, p = self.dtype(cfg), cfg.params
        return [
            Buffer(
                "tile",
                dt if dt in CTYPES else "f32",
                p["TILE"],
                p["TILE"],
                "tile[r][c] = in[y0+r][x0+c]; written by rows, read by columns",
            )
        ]

    def threads(self, p: dict[str, int]) -> int:
        return p["TILE"] * p["BLOCK_ROWS"]

    def violations(self, cfg: KernelConfig) -> list[str]:
        p, out = cfg.params, []
        tile, rows = p["TILE"], p["BLOCK_ROWS"]
        if tile not in (32, 64):
            out.append(f"TILE={tile}: must be 32 or 64 (a warp spans whole tile rows)")
        if rows < 1 or tile % rows:
            out.append(f"BLOCK_ROWS={rows} must divide TILE={tile}")
        if tile * rows > 1024:
            out.append(f"TILE*BLOCK_ROWS = {tile * rows} threads; a block has at most 1024")
        if self.dtype(cfg) not in CTYPES:
            out.append(f"dtype {self.dtype(cfg)!r}: transpose supports {', '.join(CTYPES)}")
        smem = self.smem_bytes(cfg)
        if smem > 48 * 1024:
            out.append(f"the tile is static shared memory: {smem} bytes exceeds 48 KiB")
        return out + self.common_violations(cfg)

    def template_args(self, cfg: KernelConfig) -> list[str]:
        p, t = cfg.params, cfg.layouts["tile"]
        return [
            CTYPES.get(self.dtype(cfg), "float"),
            *(str(v) for v in (p["TILE"], p["BLOCK_ROWS"], t.pad, t.swz_b, t.swz_m, t.swz_s)),
        ]

    def launch(self, cfg: KernelConfig) -> Launch:
        p, q = cfg.params, cfg.problem
        return Launch(
            (cdiv(q["cols"], p["TILE"]), cdiv(q["rows"], p["TILE"]), 1),
            (p["TILE"], p["BLOCK_ROWS"], 1),
            0,
            self.smem_bytes(cfg),
        )

    def accesses(self, cfg: KernelConfig) -> list[Access]:
        p = cfg.params
        tile, brows = p["TILE"], p["BLOCK_ROWS"]
        width = 4 if self.dtype(cfg) == "f32" else 2
        tid = np.arange(tile * brows).reshape(-1, 32)
        tx, ty = tid % tile, tid // tile
        j = np.arange(0, tile, brows)[:, None, None]
        return [
            Access(
                "tile_write",
                "tile",
                "store",
                width,
                ty[None] + j,
                np.broadcast_to(tx, (len(j), *tx.shape)),
                True,
                {
                    "row": "(warp*32+lane)//TILE + j",
                    "col": "(warp*32+lane)%TILE",
                    "over": {"j": [0, "TILE", "BLOCK_ROWS"]},
                },
            ),
            Access(
                "tile_read",
                "tile",
                "load",
                width,
                np.broadcast_to(tx, (len(j), *tx.shape)),
                ty[None] + j,
                True,
                {
                    "row": "(warp*32+lane)%TILE",
                    "col": "(warp*32+lane)//TILE + j",
                    "over": {"j": [0, "TILE", "BLOCK_ROWS"]},
                },
            ),
        ]

    def make_inputs(self, problem: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
        dt = str(problem.get("dtype", "f32"))
        x = rng.standard_normal((problem["rows"], problem["cols"]), dtype=np.float32)
        if dt == "bf16":
            x = (x.view(np.uint32) >> 16).astype(np.uint16)
        return {"in": x.astype(NPTYPES[dt]) if dt != "bf16" else x}

    def reference(self, problem: dict, inputs: dict[str, np.ndarray]) -> np.ndarray:
        return np.ascontiguousarray(inputs["in"].T)

    def flops_or_bytes(self, problem: dict) -> tuple[str, float]:
        size = 4 if str(problem.get("dtype", "f32")) == "f32" else 2
        return "gbps", 2.0 * problem["rows"] * problem["cols"] * size
