"""Contract of ``kernels/transpose.cu``: out = in.T for fp32 or fp16/bf16 (moved as 16-bit words).

Spec mapping (YAML)::

    threads: 256                        # TILE * BLOCK_ROWS
    tile: {TILE: 32, BLOCK_ROWS: 8}
    buffers:
      - {name: tile, dtype: f32, shape: [TILE, TILE], layout: {pad: 1}}    # or {swizzle: [5, 0, 5]}; f16 for fp16
    kernel: {family: transpose, rows: 8192, cols: 8192}

VEC (default 0: the widest access of at most 16 bytes that fits the tile, 4 for fp32 and 8 for fp16 with TILE 64)
moves whole tiles with vector loads and stores, when rows, cols and both pointers allow it (checked at run time);
edge tiles and other shapes take the scalar path. The contract's accesses describe the vector path when VEC > 1.

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
        Param(
            "VEC",
            0,
            (0, 1, 2, 4, 8),
            "elements per global access on whole tiles (0 = 16 bytes: 4 for fp32, 8 for fp16; 1 = scalar)",
        ),
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

    def vec(self, cfg: KernelConfig) -> int:
        """Elements per global access of the vector path; VEC = 0: the widest of at most 16 bytes whose
        4 x 8-vector warp blocks tile the tile evenly over the warps (transpose_auto_vec in transpose.cu)."""
        p = cfg.params
        if p.get("VEC", 0):
            return p.get("VEC", 0)
        tile, warps = p["TILE"], p["TILE"] * p["BLOCK_ROWS"] // 32
        v = 16 // (4 if self.dtype(cfg) == "f32" else 2)
        while v > 1 and ((tile // v) % 8 or warps < 1 or ((tile // 4) * (tile // v // 8)) % warps):
            v //= 2
        return v

    def smem_run(self, cfg: KernelConfig) -> int:
        """Elements per shared-memory store of the vector path's phase 1 (transpose_smem_run in transpose.cu):
        the widest run of at most VEC elements the layout keeps contiguous and aligned."""
        lay, v = cfg.layouts["tile"], self.vec(cfg)
        w, stride = v, cfg.params["TILE"] + lay.pad
        while w > 1 and (stride % w or (lay.swz_b and (1 << lay.swz_m) < w)):
            w //= 2
        return w

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
        size = 4 if self.dtype(cfg) == "f32" else 2
        vec = self.vec(cfg)
        if p.get("VEC", 0) not in (0, 1, 2, 4, 8):
            out.append(f"VEC={p['VEC']}: must be 0 (16 bytes), 1, 2, 4 or 8")
        elif vec > 1:
            if vec * size > 16:
                out.append(f"VEC={vec}: {vec * size} bytes per access; at most 16")
            if (tile // vec) % 8:
                out.append(
                    f"VEC={vec}: TILE/VEC={tile // vec} must be a multiple of 8 (8 lanes along a tile row)"
                )
            elif (tile * rows) % 32 or ((tile // 4) * (tile // vec // 8)) % max(1, tile * rows // 32):
                out.append(
                    f"VEC={vec}: the {tile * rows // 32} warps do not share the tile's 4 x 8-vector blocks evenly"
                )
        smem = self.smem_bytes(cfg)
        if smem > 48 * 1024:
            out.append(f"the tile is static shared memory: {smem} bytes exceeds 48 KiB")
        return out + self.common_violations(cfg)

    def template_args(self, cfg: KernelConfig) -> list[str]:
        p, t = cfg.params, cfg.layouts["tile"]
        return [
            CTYPES.get(self.dtype(cfg), "float"),
            *(
                str(v)
                for v in (p["TILE"], p["BLOCK_ROWS"], t.pad, t.swz_b, t.swz_m, t.swz_s, p.get("VEC", 0))
            ),
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
        vec = self.vec(cfg)
        if vec > 1:  # whole tiles, vector path: warp block b = warp + i*warps of 4 rows x 8 vectors
            lane, warp = tid % 32, tid // 32
            warps, cg = tid.shape[0], tile // vec // 8
            i = np.arange((tile // 4) * cg // warps)[:, None, None, None]
            e = np.arange(vec)[None, :, None, None]
            b = warp[None, None] + i * warps
            row = (b // cg) * 4 + lane // 8
            col = ((b % cg) * 8 + lane % 8) * vec + e
            shape = (i.shape[0], vec, *tid.shape)
            row, col = (
                np.broadcast_to(row, shape).reshape(-1, *tid.shape),
                np.broadcast_to(col, shape).reshape(-1, *tid.shape),
            )
            wb = "(warp + i*(TILE*BLOCK_ROWS//32))"
            r_e, c_e = (
                f"({wb}//(TILE//{vec}//8))*4 + lane//8",
                f"(({wb}%(TILE//{vec}//8))*8 + lane%8)*{vec} + e",
            )
            over = {"i": [0, f"(TILE//4)*(TILE//{vec}//8)//(TILE*BLOCK_ROWS//32)"], "e": [0, vec]}
            # phase 1 stores runs of w elements (one access each; w = vec when the layout keeps vectors whole)
            w = self.smem_run(cfg)
            runs = slice(None, None, w)
            w_shape = (i.shape[0], vec // w, *tid.shape)
            w_row = np.broadcast_to(row.reshape(shape)[:, runs], w_shape).reshape(-1, *tid.shape)
            w_col = np.broadcast_to(col.reshape(shape)[:, runs], w_shape).reshape(-1, *tid.shape)
            w_over = {"i": over["i"], "e": [0, vec, w]}
            return [
                Access(
                    "tile_write",
                    "tile",
                    "store",
                    width * w,
                    w_row,
                    w_col,
                    True,
                    {"row": r_e, "col": c_e, "over": w_over},
                ),
                Access(
                    "tile_read", "tile", "load", width, col, row, True, {"row": c_e, "col": r_e, "over": over}
                ),
            ]
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
