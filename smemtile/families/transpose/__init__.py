"""Family ``transpose`` (``transpose.cu``): out = in.T for fp32 or fp16/bf16 (moved as 16-bit words).

Spec (YAML)::

    arch: sm_90
    tile: {TILE: 64, BLOCK_ROWS: 4}
    kernel: {family: transpose, rows: 8192, cols: 8192, dtype: f32}
    buffers: [{name: tile, dtype: f32, shape: [TILE, TILE], layout: {pad: 1}}]   # optional: the layout

Whole tiles take the vector path: V elements per global access (VEC = 0 picks the widest of at most 16 bytes
that fits the tile: 4 for fp32, 8 for fp16 with TILE 64), a warp covering 4 tile rows x 8 vectors; phase 1 stores
runs of W elements (the widest run the layout keeps contiguous and aligned: W = V for a dense tile, 1 with
pad 1), phase 2 reads one element per row. The accesses below describe that path (edge tiles take the scalar
path: tile[ty + j][tx] and tile[tx][ty + j]); with VEC = 1 they describe the scalar path.

Launch: grid = (ceil(cols/TILE), ceil(rows/TILE)), block = (TILE, BLOCK_ROWS); shared memory static,
TILE * (TILE + pad) * element bytes.
"""

from __future__ import annotations

import numpy as np

from smemtile.families.base import Candidate, Family, HostArg, KernelCall, KernelConfig, Param, ProblemKey

CTYPES = {"f32": "float", "f16": "unsigned short", "bf16": "unsigned short"}
SIZES = {"f32": 4, "f16": 2, "bf16": 2}


class Transpose(Family):
    name = "transpose"
    summary = "matrix transpose through a shared tile (fp32, fp16, bf16), vector path for whole tiles"
    file = "transpose.cu"
    kernel = "transpose"
    signature = ("const {T}* in", "{T}* out", "int rows", "int cols")
    params = (
        # 64 x 4: 16 elements in flight per thread, the fastest measured on the H200 (0.93x device copy)
        Param("TILE", 64, "square tile edge (a warp spans whole tile rows)", (32, 64)),
        Param("BLOCK_ROWS", 4, "thread rows; each thread moves TILE/BLOCK_ROWS elements", lo=1, hi=64),
        Param("VEC", 0, "elements per global access on whole tiles (0 = 16 bytes: 4 for fp32, 8 for fp16; "
              "1 = scalar only)", (0, 1, 2, 4, 8)),
    )  # fmt: skip
    problem_keys = (
        ProblemKey("rows", 8192, "rows of the input"),
        ProblemKey("cols", 8192, "columns of the input"),
        ProblemKey("dtype", "f32", "element type", "choice", tuple(CTYPES)),
    )
    host_args = (
        HostArg("in", "const {T}*", "in", ("rows", "cols"), "dtype"),
        HostArg("out", "{T}*", "out", ("cols", "rows"), "dtype"),
        HostArg("rows", "int"),
        HostArg("cols", "int"),
    )
    layout_dependent_accesses = True  # the phase-1 store width W follows the layout
    exact = True
    tolerance = 0.0
    test_sizes = (
        {"rows": 32, "cols": 32},
        {"rows": 1000, "cols": 777},
        {"rows": 33, "cols": 2049},
        {"rows": 1, "cols": 5},
        {"rows": 513, "cols": 257, "dtype": "f16"},
    )
    bench_sizes = ({"rows": 8192, "cols": 8192},)

    def threads(self, p: dict[str, int]) -> int:
        return p["TILE"] * p["BLOCK_ROWS"]

    def threads_message(self, p: dict[str, int], threads: int, implied: int) -> str:
        return f"threads = {threads} but the tile needs TILE * BLOCK_ROWS = {implied}"

    def ctypes(self, cfg: KernelConfig) -> dict[str, str]:
        return {"T": CTYPES[cfg.problem["dtype"]]}

    def elem_bytes(self, cfg: KernelConfig) -> int:
        return SIZES[cfg.problem["dtype"]]

    def vec(self, cfg: KernelConfig) -> int:
        """V: elements per global access of the vector path (transpose_auto_vec in transpose.cu for VEC = 0)."""
        p = cfg.params
        if p["VEC"]:
            return p["VEC"]
        tile, warps = p["TILE"], p["TILE"] * p["BLOCK_ROWS"] // 32
        v = 16 // self.elem_bytes(cfg)
        while v > 1 and ((tile // v) % 8 or warps < 1 or ((tile // 4) * (tile // v // 8)) % warps):
            v //= 2
        return v

    def run(self, cfg: KernelConfig) -> int:
        """W: elements per phase-1 shared store (transpose_smem_run in transpose.cu)."""
        lay, w = cfg.layouts["tile"], self.vec(cfg)
        stride = cfg.params["TILE"] + lay.pad
        while w > 1 and (stride % w or (lay.swizzled and (1 << lay.swizzle.M) < w)):
            w //= 2
        return w

    def constants(self, cfg: KernelConfig) -> dict[str, int]:
        return {**super().constants(cfg), "V": self.vec(cfg), "W": self.run(cfg)}

    def violations(self, cfg: KernelConfig) -> list[str]:
        p, out = cfg.params, []
        tile, rows = p["TILE"], p["BLOCK_ROWS"]
        if tile % rows:
            out.append(f"BLOCK_ROWS={rows} must divide TILE={tile}")
        if tile * rows > 1024:
            out.append(f"TILE*BLOCK_ROWS = {tile * rows} threads; a block has at most 1024")
        elif (tile * rows) % 32:
            out.append(f"TILE*BLOCK_ROWS = {tile * rows} is not whole warps")
        size, vec = self.elem_bytes(cfg), self.vec(cfg)
        if vec > 1 and not out:
            if vec * size > 16:
                out.append(f"VEC={vec}: {vec * size} bytes per access; at most 16")
            elif (tile // vec) % 8:
                out.append(
                    f"VEC={vec}: TILE/VEC={tile // vec} must be a multiple of 8 (8 lanes along a tile row)"
                )
            elif ((tile // 4) * (tile // vec // 8)) % (tile * rows // 32):
                out.append(f"VEC={vec}: the {tile * rows // 32} warps do not share the tile's 4 x 8-vector blocks "
                           "evenly")  # fmt: skip
        return out

    def template_args(self, cfg: KernelConfig) -> list[str]:
        p = cfg.params
        t = cfg.layouts["tile"].template_args()
        return [CTYPES[cfg.problem["dtype"]], *(str(v) for v in (p["TILE"], p["BLOCK_ROWS"], *t, p["VEC"]))]

    def buffers(self, cfg: KernelConfig) -> list[dict]:
        return [{"name": "tile", "dtype": cfg.problem["dtype"], "shape": ["TILE", "TILE"],
                 "note": "tile[r][c] = in[y0+r][x0+c]: written by rows, read by columns"}]  # fmt: skip

    def accesses(self, cfg: KernelConfig) -> list[dict]:
        if self.vec(cfg) > 1:
            # warp block b = warp + i*warps covers 4 tile rows x 8 vectors of V elements
            wb = "(warp + i*(THREADS//32))"
            row, col = f"({wb}//(TILE//V//8))*4 + lane//8", f"(({wb}%(TILE//V//8))*8 + lane%8)*V + e"
            blocks = "(TILE//4)*(TILE//V//8)//(THREADS//32)"
            return [
                {"name": "tile_write", "buffer": "tile", "op": "store", "width": self.elem_bytes(cfg) * self.run(cfg),
                 "role": "inner", "row": row, "col": col, "over": {"i": [0, blocks], "e": [0, "V", "W"]},
                 "note": "phase 1: W-element runs of each vector (whole vectors when the layout keeps them)"},
                {"name": "tile_read", "buffer": "tile", "op": "load", "width": self.elem_bytes(cfg),
                 "role": "inner", "row": col, "col": row, "over": {"i": [0, blocks], "e": [0, "V"]},
                 "note": "phase 2: one element per tile row, down a column"},
            ]  # fmt: skip
        return [
            {"name": "tile_write", "buffer": "tile", "op": "store", "width": self.elem_bytes(cfg), "role": "inner",
             "row": "tid//TILE + j", "col": "tid%TILE", "over": {"j": [0, "TILE", "BLOCK_ROWS"]},
             "note": "tile[ty + j][tx] = in[...]"},
            {"name": "tile_read", "buffer": "tile", "op": "load", "width": self.elem_bytes(cfg), "role": "inner",
             "row": "tid%TILE", "col": "tid//TILE + j", "over": {"j": [0, "TILE", "BLOCK_ROWS"]},
             "note": "out[...] = tile[tx][ty + j]"},
        ]  # fmt: skip

    def calls(self, cfg: KernelConfig) -> list[KernelCall]:
        return [KernelCall(("in", "out", "rows", "cols"), ("cdiv(cols, TILE)", "cdiv(rows, TILE)", "1"),
                           ("TILE", "BLOCK_ROWS", "1"))]  # fmt: skip

    def make_inputs(self, cfg: KernelConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
        dt = cfg.problem["dtype"]
        x = rng.standard_normal((int(cfg.problem["rows"]), int(cfg.problem["cols"])), dtype=np.float32)
        if dt == "bf16":  # the top 16 bits of fp32: a valid bf16 bit pattern
            return {"in": (x.view(np.uint32) >> 16).astype(np.uint16)}
        return {"in": x.astype(np.float16) if dt == "f16" else x}

    def reference(self, cfg: KernelConfig, inputs: dict[str, np.ndarray]) -> np.ndarray:
        return np.ascontiguousarray(inputs["in"].T)

    def work(self, problem: dict) -> tuple[str, float]:
        return "gbps", 2.0 * problem["rows"] * problem["cols"] * SIZES[problem["dtype"]]

    def small_problem(self, cfg: KernelConfig) -> dict:
        return {"rows": 4 * cfg.params["TILE"], "cols": 4 * cfg.params["TILE"]}

    def ranker(self, problem: dict, arch: str, gpu: str | None):
        return _Ranker(self, problem, arch, gpu)


class _Ranker:
    """The bandwidth model's ranking of transpose tiles for one problem (model/tiling_transpose.py)."""

    def __init__(self, fam: Transpose, problem: dict, arch: str, gpu: str | None):
        from smemtile.model.tiling_transpose import rank_transpose

        self.fam = fam
        self.ranked = rank_transpose(int(problem["rows"]), int(problem["cols"]), str(problem["dtype"]), arch,
                                     gpu=gpu)  # fmt: skip

    def top(self, k: int) -> list[dict]:
        return [s.params() for s in self.ranked[:k]]

    def __call__(self, params: dict, src: str) -> Candidate:
        full = {**self.fam.defaults(), **params}
        label = f"TILE {full['TILE']} x BLOCK_ROWS {full['BLOCK_ROWS']}"
        s = next((s for s in self.ranked if s.params() == {k: full[k] for k in ("TILE", "BLOCK_ROWS")}), None)
        if s is None:
            return Candidate(label, params, src, None, None, "outside the model's space")
        return Candidate(label, params, src, s.rank, s.gbps, s.reason)


FAMILY = Transpose()
