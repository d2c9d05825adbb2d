"""Family ``transpose`` (``transpose.cu``): out = in.T for fp32 or fp16/bf16 (moved as 16-bit words).

Spec (YAML)::

    arch: sm_90
    tile: {TILE: 64, BLOCK_ROWS: 4}
    kernel: {family: transpose, rows: 8192, cols: 8192, dtype: f32}
    buffers: [{name: tile, dtype: f32, shape: [TILE, TILE], layout: {pad: 1}}]   # optional: the layout

A tile is TY input rows x TILE input columns (TY = TILE_Y, or TILE when TILE_Y = 0). Whole tiles take the vector
path: V elements per global access (VEC = 0 picks the widest of at most 16 bytes that fits the tile: 4 for fp32,
8 for fp16 with TILE 64), a warp covering 4 rows x 8 vectors; phase 1 stores runs of W elements (the widest run
the layout keeps contiguous and aligned: W = V for a dense tile, 1 with pad 1), phase 2 reads one element per
row (PACK = P > 1: P consecutive elements of a row per load, P output rows per thread, the P x V block transposed
in registers; for fp16, P = 2 moves half2 pairs as 32-bit words). The accesses below describe that path (edge
tiles take the scalar path: tile[ty + j][tx] and tile[c0 + tx][ty + j]); with VEC = 1 they describe the scalar
path. TILES = n: a block moves n tiles one below the other, the next tile's loads in flight while one is staged.

Launch: grid = (ceil(cols/TILE), ceil(rows/(TY*TILES))), block = (TILE, BLOCK_ROWS); shared memory static,
TY * (TILE + pad) * element bytes. A spec without a tile gets the calibrated model's pick for its dtype and
shape (tiles.py: what measured fastest on the H200, carried to the shape).
"""

from __future__ import annotations

import re

import numpy as np

from smemtile.families.base import (
    FAIL,
    NA,
    PASS,
    PIPELINE_ITEMS,
    HostArg,
    Item,
    KernelCall,
    KernelConfig,
    Param,
    ProblemKey,
    barrier_follows_each_wait,
)
from smemtile.families.pitched import PITCH_PARAM, Pitched
from smemtile.families.transpose.tiles import TransposeTiles

CTYPES = {"f32": "float", "f16": "unsigned short", "bf16": "unsigned short"}
SIZES = {"f32": 4, "f16": 2, "bf16": 2}


class Transpose(Pitched):
    name = "transpose"
    summary = "matrix transpose through a shared tile (fp32, fp16, bf16), vector path for whole tiles"
    # smemtile.kernel_tuner: block_size_x / _y are Kernel Tuner's own names for the thread block
    kernel_tuner_space = {
        "tune": {
            "block_size_x": ("TILE", (32, 64, 128)),
            "block_size_y": ("BLOCK_ROWS", (1, 2, 4, 8, 16, 32)),
            "smem_pad": ("pad:tile", (0, 1)),
            "vec": ("VEC", (0, 1, 2, 4, 8)),
            "launch_order": ("GROUP", (0, 1)),
        },
        "problem_size": ("cols", "rows"),  # x: columns (TILE per block), y: rows (TILE per block)
        "grid_div": (("block_size_x",), ("block_size_x",)),
    }
    file = "transpose.cu"
    peak = "memory"
    kernel = "transpose"
    signature = ("const {T}* in", "{T}* out", "int rows", "int cols", "int ld_in", "int ld_out")
    params = (
        # 64 x 4 (16 elements per thread): 0.933x of a device copy on the H200 for fp32 8192^2, 64 x 8: 0.94x (within
        # the 1.3 % spread; the sample ships it), fp16: 0.90x, TILE 128 x 8: 0.93x (bench/results/memory_h200_run2.json)
        Param(
            "TILE",
            64,
            "tile edge: input columns = output rows per tile (a warp spans whole tile rows)",
            (32, 64, 128),
        ),
        Param("BLOCK_ROWS", 4, "thread rows; each thread moves TILE/BLOCK_ROWS elements", lo=1, hi=64),
        Param(
            "VEC",
            0,
            "elements per global access on whole tiles (0 = 16 bytes: 4 for fp32, 8 for fp16; "
            "1 = scalar only)",
            (0, 1, 2, 4, 8),
        ),
        Param(
            "GROUP",
            1,
            "launch order: tile rows per group, walked column by column (1 = row by row, 0 = all "
            "of them: column by column, the writes of whole output rows together)",
            lo=0,
            hi=256,
        ),
        Param(
            "TILE_Y",
            0,
            "input rows = output columns per tile, a multiple of TILE (0 = TILE: square)",
            (0, 32, 64, 128, 256, 512),
        ),
        Param(
            "PACK",
            1,
            "elements per phase-2 shared load = output rows per thread (whole tiles; 2 for 16-bit "
            "types: 4-byte loads of 2 x 2 blocks swapped in registers)",
            (1, 2, 4, 8),
        ),
        Param(
            "TILES",
            1,
            "tiles per block, one below the other; the next tile's loads are in flight while one is staged",
            (1, 2, 4),
        ),
        Param(
            "STREAM",
            0,
            "1: the whole tiles' global loads and stores are evict-first (ld/st.global.cs: data used "
            "once); 0: plain",
            (0, 1),
        ),
        Param(
            "MIN_BLOCKS",
            1,
            "blocks per SM the registers must allow (__launch_bounds__' second argument)",
            lo=1,
            hi=32,
        ),
        Param(
            "ASYNC",
            0,
            "1 (sm_80+): phase 1 of whole tiles is cp.async, global straight into the tile (no "
            "registers, no L1 line in flight; the layout must keep whole vectors); 0: loads through registers",
            (0, 1),
        ),
        PITCH_PARAM,
    )
    problem_keys = (
        ProblemKey("rows", 8192, "rows of the input"),
        ProblemKey("cols", 8192, "columns of the input"),
        ProblemKey("dtype", "f32", "element type", "choice", tuple(CTYPES)),
        ProblemKey("ld_in", 0, "row pitch of the input in elements (default cols: dense)", dense="cols"),
        ProblemKey("ld_out", 0, "row pitch of the output in elements (default rows: dense)", dense="rows"),
    )
    host_args = (
        HostArg("in", "const {T}*", "in", ("rows", "cols"), "dtype", ld="ld_in"),
        HostArg("out", "{T}*", "out", ("cols", "rows"), "dtype", ld="ld_out"),
        HostArg("rows", "int"),
        HostArg("cols", "int"),
        HostArg("ld_in", "int"),
        HostArg("ld_out", "int"),
    )
    tile_model = TransposeTiles  # tiles.py: the candidate space, the calibrated model (transpose_h200.json)
    layout_dependent_accesses = True  # the phase-1 store width W follows the layout
    exact = True
    tolerance = 0.0

    def threads(self, p: dict[str, int]) -> int:
        return p["TILE"] * p["BLOCK_ROWS"]

    def threads_message(self, p: dict[str, int], threads: int, implied: int) -> str:
        return f"threads = {threads} but the tile needs TILE * BLOCK_ROWS = {implied}"

    def ctypes(self, cfg: KernelConfig) -> dict[str, str]:
        return {"T": CTYPES[cfg.problem["dtype"]]}

    def elem_bytes(self, cfg: KernelConfig) -> int:
        return SIZES[cfg.problem["dtype"]]

    def tile_y(self, p: dict[str, int]) -> int:
        """TY: input rows per tile (TILE_Y, or TILE for a square tile)."""
        return p["TILE_Y"] or p["TILE"]

    def vec(self, cfg: KernelConfig) -> int:
        """V: elements per global access of the vector path (transpose_auto_vec in transpose.cu for VEC = 0)."""
        p = cfg.params
        if p["VEC"]:
            return p["VEC"]
        tile, ty, warps = p["TILE"], self.tile_y(p), p["TILE"] * p["BLOCK_ROWS"] // 32
        v = 16 // self.elem_bytes(cfg)
        while v > 1 and (
            (tile // v) % 8 or (ty // v) % 8 or warps < 1 or ((ty // 4) * (tile // v // 8)) % warps
        ):
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
        return {
            **super().constants(cfg),
            "TY": self.tile_y(cfg.params),
            "V": self.vec(cfg),
            "W": self.run(cfg),
        }

    def violations(self, cfg: KernelConfig) -> list[str]:
        p, out = cfg.params, []
        tile, rows, ty = p["TILE"], p["BLOCK_ROWS"], self.tile_y(p)
        if ty % tile:
            out.append(f"TILE_Y={ty} must be 0 (square) or a multiple of TILE={tile}")
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
            elif (tile // vec) % 8 or (ty // vec) % 8:
                out.append(
                    f"VEC={vec}: TILE/VEC={tile // vec} and TY/VEC={ty // vec} must be multiples of 8 (8 lanes "
                    "along a row)"
                )
            elif ((ty // 4) * (tile // vec // 8)) % (tile * rows // 32):
                out.append(
                    f"VEC={vec}: the {tile * rows // 32} warps do not share the tile's 4 x 8-vector blocks "
                    "evenly"
                )
            elif p["STREAM"] and vec * size not in (8, 16):  # transpose.cu's ld/st_global static_assert
                out.append(
                    f"STREAM=1 needs 8- or 16-byte vectors (ld/st.global.cs); VEC={vec} moves {vec * size} "
                    "bytes (fewer BLOCK_ROWS or a wider TILE)"
                )
        if p["ASYNC"] and not out:
            if cfg.arch.lacks("cp.async"):
                out.append(f"ASYNC=1: {cfg.arch.lacks('cp.async')}")
            elif vec < 2 or vec * size < 4:
                out.append(
                    f"ASYNC=1 needs the vector path with 4-, 8- or 16-byte vectors (VEC={vec} moves "
                    f"{vec * size} bytes)"
                )
            elif p["STREAM"]:
                out.append("ASYNC=1 copies with cp.async, which has no evict-first form: STREAM must be 0")
            elif "tile" in cfg.layouts and self.run(cfg) != vec:
                out.append(
                    f"ASYNC=1 copies whole {vec}-element vectors into the tile: the layout must keep them "
                    f"contiguous and aligned (pad a multiple of {vec} or a swizzle with M >= "
                    f"{vec.bit_length() - 1}; pad 1 cannot)"
                )
        pack = p["PACK"]
        if pack > 1 and not out:
            lay = cfg.layouts.get("tile")
            per_thread = (ty // 4) * (tile // vec // 8) // (tile * rows // 32) if vec > 1 else 0
            if vec < 2:
                out.append(f"PACK={pack} needs the vector path (VEC > 1)")
            elif pack * size > 16:
                out.append(f"PACK={pack}: {pack * size} bytes per shared load; at most 16")
            elif per_thread % pack:
                out.append(
                    f"PACK={pack} must divide the {per_thread} vectors each thread moves per tile "
                    f"(fewer BLOCK_ROWS)"
                )
            elif lay is not None and (
                (tile + lay.pad) % pack or (lay.swizzled and (1 << lay.swizzle.M) < pack)
            ):
                out.append(
                    f"PACK={pack} reads {pack} consecutive elements of a tile row: the layout must keep them "
                    f"contiguous and aligned (pad a multiple of {pack}, swizzle M >= {pack.bit_length() - 1})"
                )
        return out

    def pipeline_items(self, cfg: KernelConfig, ptx: str | None) -> list[Item]:
        """ASYNC = 1: the one-tile cp.async protocol, read from the compiled PTX (wait_all, then a barrier before
        phase 2 reads the tile); ASYNC = 0 has no cp.async."""
        if not cfg.params["ASYNC"]:
            return super().pipeline_items(cfg, ptx)
        if ptx is None:
            why = "not compiled (no PTX to read): run without --no-compile"
            return [Item(i, t, NA, why) for i, t in PIPELINE_ITEMS]
        copies = len(re.findall(r"cp\.async\.c[ag]\.shared\.global", ptx))
        waits = len(re.findall(r"cp\.async\.wait_all", ptx))
        barrier_ok = barrier_follows_each_wait(ptx)
        (i0, t0), (i1, t1), (i2, t2), (i3, t3) = PIPELINE_ITEMS
        return [
            Item(
                i0,
                t0,
                PASS if copies and waits else FAIL,
                f"the PTX has {copies} cp.async copies and {waits} cp.async.wait_all (commit and wait in one: "
                f"one group per tile)",
            ),
            Item(
                i1,
                t1,
                PASS if waits and not re.search(r"cp\.async\.wait_group", ptx) else FAIL,
                "one stage: wait_all (= wait_group 0) before the tile is read, nothing left pending",
            ),
            Item(
                i2,
                t2,
                PASS if barrier_ok else FAIL,
                "every cp.async.wait_all in the PTX is followed by bar.sync before the next shared load"
                if barrier_ok
                else "a shared load follows a wait_all before any bar.sync",
            ),
            Item(i3, t3, NA, "one tile buffer, no ring (the next tile is copied after a barrier)"),
        ]

    def template_args(self, cfg: KernelConfig) -> list[str]:
        p = cfg.params
        t = cfg.layouts["tile"].template_args()
        args = (
            p["TILE"],
            p["BLOCK_ROWS"],
            *t,
            p["VEC"],
            p["GROUP"],
            p["TILE_Y"],
            p["PACK"],
            p["TILES"],
            p["STREAM"],
            p["MIN_BLOCKS"],
            p["ASYNC"],
        )
        return [CTYPES[cfg.problem["dtype"]], *(str(v) for v in args), *self.pitch_args(cfg)]

    def buffers(self, cfg: KernelConfig) -> list[dict]:
        return [
            {
                "name": "tile",
                "dtype": cfg.problem["dtype"],
                "shape": ["TY", "TILE"],
                "note": "tile[r][c] = in[y0+r][x0+c]: written by rows, read by columns",
            }
        ]

    def accesses(self, cfg: KernelConfig) -> list[dict]:
        if self.vec(cfg) > 1:
            # warp block b = warp + i*warps covers 4 tile rows x 8 vectors of V elements
            wb = "(warp + i*(THREADS//32))"
            row, col = f"({wb}//(TILE//V//8))*4 + lane//8", f"(({wb}%(TILE//V//8))*8 + lane%8)*V + e"
            orow, ocol = f"({wb}//(TY//V//8))*4 + lane//8", f"(({wb}%(TY//V//8))*8 + lane%8)*V + e"
            blocks = "(TY//4)*(TILE//V//8)//(THREADS//32)"
            read = {
                "name": "tile_read",
                "buffer": "tile",
                "op": "load",
                "width": self.elem_bytes(cfg),
                "role": "inner",
                "row": ocol,
                "col": orow,
                "over": {"i": [0, blocks], "e": [0, "V"]},
                "note": "phase 2: one element per tile row, down a column",
            }
            if cfg.params["PACK"] > 1:  # PACK consecutive elements of a tile row = PACK output rows per load
                orow0 = f"({wb}//(TY//V//8))*(4*PACK) + (lane//8)*PACK"
                read = {
                    **read,
                    "width": self.elem_bytes(cfg) * cfg.params["PACK"],
                    "col": orow0,
                    "over": {"i": [0, f"{blocks}//PACK"], "e": [0, "V"]},
                    "note": "phase 2: PACK elements of each of V tile rows (a PACK x V block, transposed in "
                    "registers into PACK output vectors)",
                }
            return [
                {
                    "name": "tile_write",
                    "buffer": "tile",
                    "op": "store",
                    "width": self.elem_bytes(cfg) * self.run(cfg),
                    "role": "inner",
                    "row": row,
                    "col": col,
                    "over": {"i": [0, blocks], "e": [0, "V", "W"]},
                    "note": "phase 1: W-element runs of each vector (whole vectors when the layout keeps them)",
                },
                read,
            ]
        tall = self.tile_y(cfg.params) != cfg.params["TILE"]  # output columns in chunks c0 of TILE
        read_over = (
            {"c0": [0, "TY", "TILE"], "j": [0, "TILE", "BLOCK_ROWS"]}
            if tall
            else {"j": [0, "TILE", "BLOCK_ROWS"]}
        )
        return [
            {
                "name": "tile_write",
                "buffer": "tile",
                "op": "store",
                "width": self.elem_bytes(cfg),
                "role": "inner",
                "row": "tid//TILE + j",
                "col": "tid%TILE",
                "over": {"j": [0, "TY", "BLOCK_ROWS"]},
                "note": "tile[ty + j][tx] = in[...]",
            },
            {
                "name": "tile_read",
                "buffer": "tile",
                "op": "load",
                "width": self.elem_bytes(cfg),
                "role": "inner",
                "row": "c0 + tid%TILE" if tall else "tid%TILE",
                "col": "tid//TILE + j",
                "over": read_over,
                "note": "out[...] = tile[c0 + tx][ty + j]" if tall else "out[...] = tile[tx][ty + j]",
            },
        ]

    def calls(self, cfg: KernelConfig) -> list[KernelCall]:
        return [
            KernelCall(
                ("in", "out", "rows", "cols", "ld_in", "ld_out"),
                ("cdiv(cols, TILE)", "cdiv(rows, TY*TILES)", "1"),
                ("TILE", "BLOCK_ROWS", "1"),
            )
        ]

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
        return {"rows": 4 * self.tile_y(cfg.params) * cfg.params["TILES"], "cols": 4 * cfg.params["TILE"]}

    def repeats_per_block(self, cfg: KernelConfig) -> int:
        return cfg.params["TILES"]


def _screen(fam: Transpose, dtype: str, arch: str):
    # TODO(issue 28): remove once bench/bench_memory.py calls tiles.screened (its s5_fit_sample imports this name)
    from smemtile.families.transpose.tiles import screened

    return screened(fam, dtype, arch)


FAMILY = Transpose()
