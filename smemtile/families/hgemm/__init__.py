"""Family ``hgemm`` (``hgemm.cu``): C = alpha * A @ B + beta * C on tensor cores, fp16 or bf16 in, fp32 accumulation.

Spec (YAML)::

    arch: sm_90
    tile: {BM: 256, BN: 128, BK: 32, WM: 64, WN: 64}   # any parameter below; the rest take their defaults
    stages: 4
    kernel: {family: hgemm, M: 4096, N: 4096, K: 4096, dtype: bf16}   # c_dtype f32|f16|bf16, b_layout row|col
    buffers:                                                            # optional: the layouts
      - {name: As, dtype: bf16, shape: [BM, BK], layout: {swizzle: [2, 3, 3]}, stages: 4}
      - {name: Bs, dtype: bf16, shape: [BK, BN], layout: {swizzle: [3, 3, 4]}, stages: 4}

A (M x K) is row-major; B is K x N row-major (``b_layout: row``, read with ``ldmatrix.trans``) or column-major
(``b_layout: col``: element (k, n) at B[n * K + k], Bs holds [BN][BK]); C is M x N row-major, fp32, fp16 or
bf16 (bf16 arrays travel as raw bits: ``make_inputs`` and ``decode_output``; checked at 4e-3, half a bf16 ulp
being 2e-3 of a value, :meth:`Hgemm.tolerance_for`).
Warp w owns the WM x WN warp tile at ((w // (BN/WN)) * WM, (w % (BN/WN)) * WN): WM/16 x WN/8 mma.sync.m16n8k16
tiles. Per K tile of BK: 16-byte ``cp.async.cg`` copies fill one slot of a STAGES-deep ring; per k16 step every
warp loads its fragments with ``ldmatrix.x4`` (double-buffered over the k16 steps) and issues the mma.sync.

Accesses (below, written once as spec expressions; the header comment of hgemm.cu derives them):

    access   op                    what                               lane -> (row, col)
    A_copy   cp.async 16 B         As[m][k], 8 elements per lane      chunk c = tid + i*THREADS: (c // (BK/8), c % (BK/8) * 8)
    B_copy   cp.async 16 B         Bs[k][n] (col: Bs[n][k])           as A_copy with BN/8 (col: BK/8) chunks per row
    A_frag   ldmatrix.x4           a0..a3 of m16 tile mi, k16 step kk lane l: row l % 16, column (l // 16) * 8
    B_frag   ldmatrix.x4(.trans)   b0, b1 of n8 tiles 2nj, 2nj+1      row: k = l % 16, column (l // 16) * 8 (+ nj*16)

With dense rows the fragment reads conflict (A_frag 4-way at BK 32: 8 rows of 64 bytes share 2 bank lines;
B_frag 8-way: 8 rows of BN*2 bytes land on one bank quad). ``Swizzle<B,3,S>`` on the element offset permutes the
16-byte granules of each 128-byte group by the row bits above one bank line (:func:`swizzle_for`): both the
copies and the ldmatrix phases are then conflict-free with no padding. These are the family's default layouts
(:meth:`Hgemm.default_layouts`, the kernel's own template defaults and what ``smemtile tiles`` emits; measured
3.2x faster than dense rows and 6 % faster than 8 elements of padding on the H200, bench/NOTES.md). A spec that
lists a buffer without ``layout:`` gets it dense: ``smemtile analyze`` then shows the conflicts and the fix.
Without 16-byte alignment (K, or N for row-major B, not a multiple of 8) the copies go through registers and
``st.shared.v4`` (the same shared addresses, op ``store``): ALIGN 1 (the family's choice) reads 2-byte elements,
one chunk at a time; ALIGN 2 reads each chunk as 4-byte words (a 2 mod 4 chunk: two 2-byte loads around three
words, funnel-shifted) and issues a K tile's loads before its stores, measured 7 % slower on the H200 (0.71x vs
0.76x cuBLAS at 4095x4097x1023, run 6).

Launch: grid = (ceil(M/BM) * ceil(N/BN) in GROUP_M order, 1, SPLIT_K), block = (BM/WM) * (BN/WN) * 32 threads;
shared memory always dynamic: STAGES * (BM*(BK + pad_As) + Bs rows * (Bs cols + pad_Bs)) * 2 bytes (the launch
helper raises the opt-in limit above 48 KiB). SPLIT_K > 1 first runs ``hgemm_splitk_prepare`` (C = beta * C, zeros
when beta = 0) and the K slices add alpha * A_z @ B_z into C with fp32 atomics (c_dtype f32 only).

Defaults: 256 x 128 x 32, 8 warps of 64 x 64, 4 stages (the fastest of 13 tilings measured on the H200,
bench/NOTES.md, issue 19); MIN_BLOCKS from the register estimate of the tile model (1 for 8 warps of 64 x 64,
2 for 4); ALIGN 0 picks 8 when the problem allows 16-byte copies, else 1. ``smemtile tiles`` ranks the family's
tiles with its measured factors (``calibration_h200.yaml``: depth, load latency, split K; see tiles.py).
"""

from __future__ import annotations

import numpy as np

from smemtile.families.base import (
    HostArg,
    Item,
    KernelCall,
    KernelConfig,
    Param,
    ProblemKey,
    with_params,
)
from smemtile.families.gemm import GemmFamily, gemm_reference
from smemtile.model.arch import Arch
from smemtile.model.bf16 import bf16_bits as _bf16_bits
from smemtile.model.bf16 import to_float64
from smemtile.model.layout import Layout, swizzle_for

T_CTYPES = {"f16": "smemtile::f16", "bf16": "smemtile::bf16"}
C_CTYPES = {"f32": "float", "f16": "smemtile::f16", "bf16": "smemtile::bf16"}
CHUNK = 8  # elements per 16-byte copy (2-byte elements)


def register_estimate(wm: int, wn: int) -> int:
    """Registers per thread of a WM x WN warp tile: fp32 accumulators + double-buffered fragments + ~40 (the tile
    model's estimate, smemtile.model.gemm_model; ptxas 13.0 used 226-255 for 64 x 64, bench/NOTES.md)."""
    return wm * wn // 32 + (wm + wn) // 2 + 40


class Hgemm(GemmFamily):
    name = "hgemm"
    summary = "fp16/bf16 tensor-core GEMM (mma.sync m16n8k16, ldmatrix, swizzled cp.async ring), split K"
    file = "hgemm.cu"
    peak = None
    kernel = "hgemm"
    signature = (
        "int M",
        "int N",
        "int K",
        "float alpha",
        "const {T}* A",
        "int lda",
        "const {T}* B",
        "int ldb",
        "float beta",
        "{TC}* C",
        "int ldc",
    )
    params = (
        Param("BM", 256, "block tile rows (a multiple of WM)", lo=16, hi=1024),
        Param("BN", 128, "block tile columns (a power of two, a multiple of WN)", lo=16, hi=1024),
        Param("BK", 32, "K step per stage (two or more k16 mma steps)", (32, 64, 128)),
        Param("WM", 64, "warp tile rows (a multiple of 16: m16 mma tiles)", lo=16, hi=256),
        Param(
            "WN",
            64,
            "warp tile columns (a multiple of 16: one ldmatrix.x4 feeds two n8 tiles)",
            lo=16,
            hi=256,
        ),
        Param("STAGES", 4, "cp.async ring depth", (2, 3, 4, 5)),
        Param("GROUP_M", 8, "block rows per L2 group in the block order", lo=1, hi=1024),
        Param(
            "SPLIT_K",
            1,
            "K slices (grid z); > 1 adds alpha*A@B into fp32 C with atomics after C = beta*C",
            lo=1,
            hi=64,
        ),
        Param(
            "MIN_BLOCKS",
            1,
            "__launch_bounds__ minimum blocks per SM (caps registers); default from the "
            "register estimate and shared memory",
            (1, 2, 3, 4),
        ),
        Param(
            "ALIGN",
            0,
            "copies: 8 = 16-byte cp.async (K and ldb multiples of 8), 1 = 2-byte loads through "
            "registers, a chunk at a time (any size), 2 = 4-byte loads, a tile's loads before its stores (any "
            "size; measured 7 % slower than 1), 0 = 8 when the problem allows it, else 1",
            (0, 1, 2, 8),
        ),
    )
    problem_keys = (
        ProblemKey("M", 4096, "rows of A and C"),
        ProblemKey("N", 4096, "columns of B and C"),
        ProblemKey("K", 4096, "columns of A, rows of B"),
        ProblemKey("alpha", 1.0, "scale of A @ B", "float"),
        ProblemKey("beta", 0.0, "scale of the old C (0: C is not read)", "float"),
        ProblemKey("dtype", "f16", "A and B element type", "choice", tuple(T_CTYPES)),
        ProblemKey("c_dtype", "f32", "C element type (accumulation is fp32)", "choice", tuple(C_CTYPES)),
        ProblemKey(
            "b_layout", "row", "B row-major (K x N) or column-major (N x K storage)", "choice", ("row", "col")
        ),
        ProblemKey("lda", 0, "leading dimension of A (elements between rows; default K: dense)", dense="K"),
        ProblemKey("ldb", 0, "leading dimension of B (default N, or K for column-major B: dense)", dense="N"),
        ProblemKey("ldc", 0, "leading dimension of C (default N: dense)", dense="N"),
    )
    host_args = (
        HostArg("M", "int"),
        HostArg("N", "int"),
        HostArg("K", "int"),
        HostArg("alpha", "float"),
        HostArg("A", "const {T}*", "in", ("M", "K"), "dtype", ld="lda"),
        HostArg("lda", "int"),
        HostArg(
            "B", "const {T}*", "in", ("K", "N"), "dtype", ld="ldb"
        ),  # (N, K) with b_layout col: array_shape
        HostArg("ldb", "int"),
        HostArg("beta", "float"),
        HostArg("C", "{TC}*", "inout", ("M", "N"), "c_dtype", ld="ldc"),
        HostArg("ldc", "int"),
    )
    smem_kind = "dynamic"  # extern __shared__ always (smem_split)
    # max |C - ref| / max |ref|: fp16 C rounds to 11 bits (half an ulp is 4.9e-4 of a value); fp32 C measured
    # ~1e-6 (exact products, fp32 sums; bench/NOTES.md); bf16 C rounds to 8 bits (half an ulp: 2^-9 = 2.0e-3 of a
    # value): TOLERANCE_BF16_C (tolerance_for)
    tolerance = 1e-3
    TOLERANCE_BF16_C = 4e-3

    # ---- shape --------------------------------------------------------------------------------------------
    def threads(self, p: dict[str, int]) -> int:
        wm, wn = p["WM"], p["WN"]
        if wm <= 0 or wn <= 0 or p["BM"] % wm or p["BN"] % wn:
            return max(1, p["BM"] * p["BN"] // max(1, wm * wn)) * 32
        return (p["BM"] // wm) * (p["BN"] // wn) * 32

    def threads_message(self, p: dict[str, int], threads: int, implied: int) -> str:
        return (
            f"threads = {threads} but (BM/WM) * (BN/WN) warps of the {p['BM']}x{p['BN']} tile with "
            f"{p['WM']}x{p['WN']} warp tiles need {implied}"
        )

    def b_col(self, cfg: KernelConfig) -> bool:
        return cfg.problem["b_layout"] == "col"

    def align(self, cfg: KernelConfig) -> int:
        """The kernel's ALIGN: 8 (16-byte cp.async) needs lda = K and ldb (N row-major, K column-major) to be
        multiples of 8 elements; ALIGN 0 picks it when the problem allows, else 1 (2-byte loads through registers,
        any alignment: 0.76x cuBLAS at 4095x4097x1023 against 0.71x for ALIGN 2's 4-byte loads, H200 run 6,
        bench/NOTES.md issue 19 phase 3)."""
        a = cfg.params["ALIGN"]
        return a if a else (8 if self.aligned_problem(cfg) else 1)

    def auto_values(self, cfg: KernelConfig) -> dict[str, int]:
        return {"ALIGN": self.align(cfg)} if cfg.params["ALIGN"] == 0 else {}

    def aligned_problem(self, cfg: KernelConfig) -> bool:
        """Whether the problem's leading dimensions allow the 16-byte copies (whole 16-byte rows)."""
        ints = self.problem_ints(cfg.problem)
        return ints["lda"] % CHUNK == 0 and ints["ldb"] % CHUNK == 0

    def dense_layout(self, problem: dict) -> dict[str, str]:
        return {"lda": "K", "ldb": "K" if problem.get("b_layout") == "col" else "N", "ldc": "N"}

    def requires(self, cfg: KernelConfig) -> list[tuple[str, str]]:
        out = super().requires(cfg)  # lda, ldb, ldc at least their rows (dense_layout knows column-major B)
        if self.align(cfg) == 8:  # the 16-byte cp.async copies cannot read rows that do not start on 16 bytes
            out.append(
                (
                    "((lda % 8) == 0) & ((ldb % 8) == 0) & (A_align >= 16) & (B_align >= 16)",
                    "lda and ldb multiples of 8 and A, B 16-byte aligned (this kernel is built with ALIGN 8, "
                    "16-byte cp.async copies; generate with ALIGN 1 for any layout)",
                )
            )
        return out

    def layout_rules(self, cfg: KernelConfig) -> list[str]:
        return [
            "C must not overlap A or B (the kernel reads A and B while blocks write C).",
            "C: any ldc and alignment (2-element stores where C rows are aligned to 2 elements, else one).",
        ]

    def ctypes(self, cfg: KernelConfig) -> dict[str, str]:
        return {"T": T_CTYPES[cfg.problem["dtype"]], "TC": C_CTYPES[cfg.problem["c_dtype"]]}

    def array_shape(self, cfg: KernelConfig, arg: HostArg) -> tuple[int, ...]:
        if arg.name == "B" and self.b_col(cfg):
            return (int(cfg.problem["N"]), int(cfg.problem["K"]))
        return super().array_shape(cfg, arg)

    def smem_split(self, cfg: KernelConfig) -> tuple[int, int]:
        return 0, self.smem_bytes(cfg)  # extern __shared__: dynamic at any size

    def derive(self, params: dict[str, int], user: set[str], arch: Arch) -> dict[str, int]:
        p = dict(params)
        if "MIN_BLOCKS" not in user:
            p["MIN_BLOCKS"] = self.blocks_estimate(p, arch)
        return p

    def blocks_estimate(self, p: dict[str, int], arch: Arch) -> int:
        """Blocks per SM the register estimate and the (unpadded) shared memory allow, 1..4."""
        from smemtile.model.occupancy import occupancy

        threads = self.threads(p)
        if not 32 <= threads <= arch.max_threads_per_block:
            return 1
        regs = min(arch.max_regs_per_thread, register_estimate(p["WM"], p["WN"]))
        smem = p["STAGES"] * (p["BM"] + p["BN"]) * p["BK"] * 2
        try:
            blocks = occupancy(arch, threads, regs, 0, smem).active_blocks
        except Exception:  # an invalid shape: violations() names it
            return 1
        return max(1, min(4, blocks))

    # ---- contract: every static_assert of hgemm.cu, in words ---------------------------------------------
    def violations(self, cfg: KernelConfig) -> list[str]:
        p, out = cfg.params, []
        bm, bn, bk, wm, wn = p["BM"], p["BN"], p["BK"], p["WM"], p["WN"]
        if cfg.arch.cc < (8, 0):
            out.append(f"hgemm needs sm_80 or newer (cp.async, bf16 mma.sync); {cfg.arch.name} has neither")
        if wm % 16:
            out.append(f"WM={wm} must be a multiple of 16: a warp's rows are m16 mma tiles")
        if wn % 16:
            out.append(f"WN={wn} must be a multiple of 16: one ldmatrix.x4 loads B for two n8 mma tiles")
        if bm % wm or bn % wn:
            out.append(f"the {wm}x{wn} warp tiles must tile the {bm}x{bn} block tile (BM % WM, BN % WN)")
        if bn & (bn - 1):
            out.append(f"BN={bn} must be a power of two (whole 16-byte chunks per copy pass, swizzle rows)")
        if out:
            return out
        threads = self.threads(p)
        if not 32 <= threads <= 1024:
            out.append(f"(BM/WM)*(BN/WN) = {threads // 32} warps; a block needs 1 to 32")
            return out
        b_cpr = bk // CHUNK if self.b_col(cfg) else bn // CHUNK
        if threads % (bk // CHUNK) or (bm * bk // CHUNK) % threads:
            out.append(
                f"the {bm * bk // CHUNK} 16-byte A chunks of a tile do not split evenly over {threads} "
                "threads in whole rows (BM*BK/8 % THREADS == 0)"
            )
        elif threads % b_cpr or (bk * bn // CHUNK) % threads:
            out.append(
                f"the {bk * bn // CHUNK} 16-byte B chunks of a tile do not split evenly over {threads} "
                f"threads in whole rows of {b_cpr} chunks"
            )
        if p["SPLIT_K"] > 1 and cfg.problem["c_dtype"] != "f32":
            out.append(
                f"SPLIT_K={p['SPLIT_K']} adds the K slices into C with fp32 atomics: c_dtype must be f32, "
                f"not {cfg.problem['c_dtype']}"
            )
        if p["ALIGN"] == 8 and not self.aligned_problem(cfg):
            out.append(
                f"ALIGN=8 (16-byte cp.async) needs K and ldb ({'K' if self.b_col(cfg) else 'N'}) to be "
                f"multiples of 8 elements; this problem is {cfg.problem['M']}x{cfg.problem['N']}x"
                f"{cfg.problem['K']}: use ALIGN 1 or 0"
            )
        for b in ("As", "Bs"):
            lay = cfg.layouts.get(b)
            if lay is None:
                continue
            if lay.pad % CHUNK:
                out.append(
                    f"{b}: padding {lay.pad} must be a multiple of 8 elements: cp.async and ldmatrix rows "
                    "are 16-byte aligned"
                )
            if lay.swizzled and lay.swizzle.M < 3:
                out.append(
                    f"{b}: {lay.swizzle} splits 16-byte granules; cp.async and ldmatrix move 16 bytes "
                    "(M >= 3)"
                )
        return out

    def smem_hint(self, cfg: KernelConfig) -> str:
        return "; reduce BK, STAGES or the block tile"

    def template_args(self, cfg: KernelConfig) -> list[str]:
        p = cfg.params
        a, b = cfg.layouts["As"].template_args(), cfg.layouts["Bs"].template_args()
        vals = [
            T_CTYPES[cfg.problem["dtype"]],
            C_CTYPES[cfg.problem["c_dtype"]],
            "true" if self.b_col(cfg) else "false",
            p["BM"],
            p["BN"],
            p["BK"],
            p["WM"],
            p["WN"],
            p["STAGES"],
            p["GROUP_M"],
            p["SPLIT_K"],
            p["MIN_BLOCKS"],
            self.align(cfg),
            *a,
            *b,
        ]
        return [str(v) for v in vals]

    # ---- the kernel's shared memory, written once ---------------------------------------------------------
    def buffers(self, cfg: KernelConfig) -> list[dict]:
        dt = cfg.problem["dtype"]
        if self.b_col(cfg):
            bs = {
                "name": "Bs",
                "dtype": dt,
                "shape": ["BN", "BK"],
                "stages": "STAGES",
                "note": "B tile, column-major B: Bs[n][k] = B[(n0+n)*K + k0+k]",
            }
        else:
            bs = {
                "name": "Bs",
                "dtype": dt,
                "shape": ["BK", "BN"],
                "stages": "STAGES",
                "note": "B tile: Bs[k][n] = B[k0+k][n0+n]",
            }
        return [
            {
                "name": "As",
                "dtype": dt,
                "shape": ["BM", "BK"],
                "stages": "STAGES",
                "note": "A tile: As[m][k] = A[m0+m][k0+k]",
            },
            bs,
        ]

    def accesses(self, cfg: KernelConfig) -> list[dict]:
        col = self.b_col(cfg)
        vec = self.align(cfg) == 8
        op = "cp.async" if vec else "store"
        how = (
            "16-byte cp.async.cg"
            if vec
            else "4-byte global loads, one st.shared.v4 (ALIGN 2)"
            if self.align(cfg) == 2
            else "2-byte global loads, one st.shared.v4 (ALIGN 1)"
        )
        ca = "(tid + i*THREADS)"
        a_row, a_col = f"{ca} // (BK//8)", f"({ca} % (BK//8)) * 8"
        a_copy = {
            "name": "A_copy",
            "buffer": "As",
            "op": op,
            "width": 16,
            "role": "copy",
            "row": a_row,
            "col": a_col,
            "over": {"i": [0, "BM*BK//8//THREADS"]},
            "note": f"A rows, {how}; rows past M read row M-1",
        }
        cb = "(tid + j*THREADS)"
        per_row = "(BK//8)" if col else "(BN//8)"
        b_row, b_col = f"{cb} // {per_row}", f"({cb} % {per_row}) * 8"
        b_copy = {
            "name": "B_copy",
            "buffer": "Bs",
            "op": op,
            "width": 16,
            "role": "copy",
            "row": b_row,
            "col": b_col,
            "over": {"j": [0, "BK*BN//8//THREADS"]},
            "note": f"B {'columns (column-major B)' if col else 'rows'}, {how}",
        }
        # cp.async sources: the global element each lane copies from (block 0, K tile 0) in the user's layout
        # (leading dimensions lda, ldb), with the kernel's row clamp (rows past M or N read the last row) and
        # column mask (row-major B chunks past N read column 0)
        if vec:
            a_copy["source"] = f"min({a_row}, M - 1) * lda + {a_col}"
            b_copy["source"] = (
                f"min({b_row}, N - 1) * ldb + {b_col}"
                if col
                else f"({b_row}) * ldb + ({b_col}) * ({b_col} < N)"
            )
        a_frag = {
            "name": "A_frag",
            "buffer": "As",
            "op": "ldmatrix",
            "matrices": 4,
            "role": "inner",
            "row": "(warp // (BN//WN))*WM + mi*16 + lane % 16",
            "col": "kk*16 + (lane // 16)*8",
            "over": {"mi": [0, "WM//16"], "kk": [0, "BK//16"]},
            "note": "mma A operand a0..a3 of m16 tile mi, k16 step kk",
        }
        if col:
            b_frag = {
                "name": "B_frag",
                "buffer": "Bs",
                "op": "ldmatrix",
                "matrices": 4,
                "role": "inner",
                "row": "(warp % (BN//WN))*WN + nj*16 + lane % 8 + (lane // 16)*8",
                "col": "kk*16 + ((lane // 8) % 2)*8",
                "over": {"nj": [0, "WN//16"], "kk": [0, "BK//16"]},
                "note": "b0, b1 of the n8 tiles 2nj and 2nj+1, k16 step kk",
            }
        else:
            b_frag = {
                "name": "B_frag",
                "buffer": "Bs",
                "op": "ldmatrix",
                "matrices": 4,
                "trans": True,
                "role": "inner",
                "row": "kk*16 + lane % 16",
                "col": "(warp % (BN//WN))*WN + nj*16 + (lane // 16)*8",
                "over": {"nj": [0, "WN//16"], "kk": [0, "BK//16"]},
                "note": "b0, b1 of the n8 tiles 2nj and 2nj+1 (transposed), k16 step kk",
            }
        return [a_copy, b_copy, a_frag, b_frag]

    def default_layouts(self, cfg: KernelConfig) -> dict[str, Layout]:
        """The kernel's own conflict-free layouts: :func:`swizzle_for` the row length of each tile."""
        b_cols = cfg.params["BK"] if self.b_col(cfg) else cfg.params["BN"]
        return {"As": Layout(0, swizzle_for(cfg.params["BK"])), "Bs": Layout(0, swizzle_for(b_cols))}

    # ---- launch -------------------------------------------------------------------------------------------
    def calls(self, cfg: KernelConfig) -> list[KernelCall]:
        return [
            KernelCall(
                ("C", "M", "N", "ldc", "beta"),
                ("min(M, 65535)", "1", "1"),
                ("256", "1", "1"),
                kernel="hgemm_splitk_prepare",
                params=("float* C", "int M", "int N", "int ldc", "float beta"),
                when="SPLIT_K > 1",
                doc="split K: C = beta * C (0 for beta = 0) before the slices add into it",
            ),
            KernelCall(
                ("M", "N", "K", "alpha", "A", "lda", "B", "ldb", "beta", "C", "ldc"),
                ("cdiv(M, BM) * cdiv(N, BN)", "1", "SPLIT_K"),
                ("THREADS", "1", "1"),
            ),
        ]

    # ---- reference -----------------------------------------------------------------------------------------
    def make_inputs(self, cfg: KernelConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
        m, n, k = (int(cfg.problem[x]) for x in "MNK")
        dt, cdt = cfg.problem["dtype"], cfg.problem["c_dtype"]

        def operand(shape):
            x = rng.standard_normal(shape, dtype=np.float32)
            return _bf16_bits(x) if dt == "bf16" else x.astype(np.float16)

        c = rng.standard_normal((m, n), dtype=np.float32)
        cc = {"f32": c, "f16": c.astype(np.float16), "bf16": _bf16_bits(c)}[cdt]
        return {"A": operand((m, k)), "B": operand((n, k) if self.b_col(cfg) else (k, n)), "C": cc}

    def reference(self, cfg: KernelConfig, inputs: dict[str, np.ndarray]) -> np.ndarray:
        """float64 of the fp16/bf16 inputs (exactly the values the kernel multiplies)."""
        dt = cfg.problem["dtype"]
        a, b = to_float64(inputs["A"], dt), to_float64(inputs["B"], dt)
        if self.b_col(cfg):
            b = b.T
        q = cfg.problem
        c = to_float64(inputs["C"], q["c_dtype"]) if "C" in inputs else None
        return gemm_reference(a, b, c, float(q["alpha"]), float(q["beta"]))

    def decode_output(self, cfg: KernelConfig, raw: np.ndarray) -> np.ndarray:
        """C as numbers: bf16 C travels as raw bits."""
        return to_float64(raw, "bf16") if cfg.problem["c_dtype"] == "bf16" else raw

    def tolerance_for(self, cfg: KernelConfig) -> float:
        return self.TOLERANCE_BF16_C if cfg.problem["c_dtype"] == "bf16" else self.tolerance

    def one_block_reason(self, cfg: KernelConfig, occ: dict) -> str | None:
        p = cfg.params
        acc = p["WM"] * p["WN"] // 32
        if occ.get("limiter") == "registers":
            return (
                f"1 block/SM by design: a {p['WM']}x{p['WN']} warp tile keeps {acc} fp32 accumulators and "
                f"{(p['WM'] + p['WN']) // 2} fragment registers per thread; {occ['active_warps']} warps/SM "
                f"issue {p['WM'] // 16 * p['WN'] // 8} independent mma.sync per k16 step each"
            )
        if occ.get("limiter") == "shared_memory":
            return (
                f"1 block/SM by design: {p['STAGES']} cp.async stages of the {p['BM']}x{p['BN']}x{p['BK']} tile "
                f"keep {p['STAGES'] - 1} K tiles in flight (shared memory is the limiter)"
            )
        return None

    def relax(self, cfg: KernelConfig, spilled_bytes: int) -> tuple[KernelConfig, str] | None:
        """When the __launch_bounds__ cap makes ptxas spill: one block per SM fewer (only if the user left
        MIN_BLOCKS to the tool): spilling accumulators costs more than the extra block buys."""
        if cfg.may_change("MIN_BLOCKS") and cfg.params["MIN_BLOCKS"] > 1:
            mb = cfg.params["MIN_BLOCKS"] - 1
            return with_params(cfg, MIN_BLOCKS=mb), f"using MIN_BLOCKS={mb}: more registers per thread"
        return None

    # ---- checklist from the PTX ------------------------------------------------------------------------------
    def pipeline_items(self, cfg: KernelConfig, ptx: str | None) -> list[Item]:
        from smemtile.families.hgemm.checks import pipeline_items

        return pipeline_items(self, cfg, ptx)

    # ---- the tile model's view (smemtile tiles / tune) -------------------------------------------------------
    tiles_help = "f16 / bf16 on sm_80+ (mma.sync; wgmma targets rank the warpgroup family)"

    def tiles_for(self, dtype: str, arch, vendor: str = "nvidia") -> bool:
        """f16 / bf16 on NVIDIA sm_80+ where the target has no wgmma (those rank their warpgroup kernel)."""
        return (
            dtype in ("f16", "bf16")
            and vendor == "nvidia"
            and arch.cc >= (8, 0)
            and arch.lacks("wgmma") is not None
        )

    def tile_spec(self, p, s) -> dict | None:
        from smemtile.families.hgemm.tiles import tile_spec

        return tile_spec(self, p, s)


from smemtile.families.hgemm.tiles import HgemmTileModel  # noqa: E402  (it imports this package first)

Hgemm.tile_model = HgemmTileModel
FAMILY = Hgemm()
