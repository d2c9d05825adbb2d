"""Family ``sgemm`` (``sgemm.cu``): C = alpha * A @ B + beta * C in fp32 (FFMA, never TF32), row-major.

Spec (YAML)::

    arch: sm_90
    tile: {BM: 128, BN: 128, BK: 8, TM: 8, TN: 16}   # any parameter below; the rest take their defaults
    stages: 3
    kernel: {family: sgemm, M: 4096, N: 4096, K: 4096}   # alpha (1.0), beta (0.0) optional
    buffers: [{name: As, dtype: f32, shape: [BK, BM], layout: {pad: 4}, stages: 3}]   # optional: layouts

The block tile BM x BN is split over warps of 4 (m) x 8 (n) lanes, TM x TN accumulators per lane; A is stored
transposed (As[k][m]) so both inner-loop reads are float4s along a row. Its accesses below are the kernel's own,
written once as spec expressions (lane grid interleaved: lm = ((lane>>1)&1) | ((lane>>2)&2),
ln = (lane&1) | ((lane>>1)&2) | ((lane>>2)&4), so every lane quad reads at most 2 float4s: 2 wavefronts).

Launch: grid = (ceil(M/BM) * ceil(N/BN) in GROUP_M order, SPLIT_K), block = (BM/(4*TM)) * (BN/(8*TN)) * 32.
SPLIT_K > 1 first runs ``smemtile_sgemm_splitk_prepare`` (C = beta*C, or 0): the K slices add with atomics.
REPACK (auto for large enough problems whose K or N is not a multiple of 4) first runs ``smemtile_sgemm_repack``
on A and / or B into a workspace with rows of a multiple of 4 floats; the GEMM then streams whole tiles through
its 16-byte loop (H200: 4095x4097x1023 0.92x cuBLAS with it, 0.82x without; bench/NOTES.md, session 5). The
generated helper then takes ``void* workspace, size_t workspace_bytes`` (nullptr: it allocates one on the stream).
Shared memory = STAGES * BK * ((BM + pad_As) + (BN + pad_Bs)) * 4 bytes: static up to 48 KiB, dynamic above.

Template defaults: 256 x 128 x 8, 16 x 8 per thread, 8 warps, 3 stages, MIN_BLOCKS 1, A_VEC 1 (the tile the
tests and the ncu fixtures were built around). What users get is measured instead: a ``kernel:`` spec without
a tile gets the tile model's #1 for its problem (smemtile.pipeline.specs), and samples/sgemm_default.yaml
carries the fastest tile measured on the H200 at 2048^3 .. 8192^3, 128 x 128 x 8 with 8 x 16 per thread,
4 warps, MIN_BLOCKS 2 (0.94-0.96x cuBLAS against 0.90-0.91x for 256 x 128, bench/results/h200.json).
MIN_BLOCKS defaults to 2 for thread tiles of at most 64 accumulators, else to the most blocks per SM whose
register share keeps ~TM*TN + 100 registers per thread (1 for the 256-thread default, 2 for 128 threads);
without cp.async (sm_70/75) 2 stages.
"""

from __future__ import annotations

import re

import numpy as np

from smemtile.families.base import (
    FAIL,
    NA,
    PASS,
    HostArg,
    Item,
    KernelCall,
    KernelConfig,
    Param,
    ProblemKey,
    Workspace,
    barrier_follows_each_wait,
    select,
    with_params,
)
from smemtile.families.gemm import GemmFamily, gemm_reference
from smemtile.model.arch import Arch

LANES_M, LANES_N = 4, 8  # a warp's lanes as a 4 (m) x 8 (n) grid
# the GEMM's leading dimensions with REPACK (K and N without): rows of a multiple of 4 floats
LDA4, LDB4 = "(cdiv(K, 4) * 4)", "(cdiv(N, 4) * 4)"
# when REPACK copies A / B (its region and its step): rows not a whole number of float4s, or a base pointer not
# 16-byte aligned (a sub-view of a bigger matrix)
A_UNALIGNED, B_UNALIGNED = "((lda % 4 != 0) | (A_align < 16))", "((ldb % 4 != 0) | (B_align < 16))"
LDA_USED, LDB_USED = select(A_UNALIGNED, LDA4, "lda"), select(B_UNALIGNED, LDB4, "ldb")
REPACK_PARAMS = ("const float* src", "int rows", "int cols", "int lds", "float* dst", "int ldd")
LM = "(((lane >> 1) & 1) | ((lane >> 2) & 2))"
LN = "((lane & 1) | ((lane >> 1) & 2) | ((lane >> 2) & 4))"


class Sgemm(GemmFamily):
    name = "sgemm"
    summary = "fp32 GEMM (FFMA), register-blocked, cp.async pipeline, split K"
    file = "sgemm.cu"
    kernel = "sgemm"
    signature = (
        "int M",
        "int N",
        "int K",
        "float alpha",
        "const float* A",
        "int lda",
        "const float* B",
        "int ldb",
        "float beta",
        "float* C",
        "int ldc",
    )
    params = (
        Param("BM", 256, "block tile rows (a multiple of 4*TM)", lo=4, hi=1024),
        Param("BN", 128, "block tile columns (a multiple of 8*TN)", lo=8, hi=1024),
        Param("BK", 8, "K step per stage (a multiple of 8)", (8, 16, 32)),
        Param("TM", 16, "accumulator rows per thread (a multiple of 4)", (4, 8, 16)),
        Param("TN", 8, "accumulator columns per thread (a multiple of 4)", (4, 8, 16)),
        Param("STAGES", 3, "shared-memory ring depth (2..8); exactly 2 without cp.async", lo=1, hi=8),
        Param(
            "CP_ASYNC",
            1,
            "1 = cp.async pipeline (sm_80+, the default there); 0 = register double-buffering",
            (0, 1),
        ),
        Param("GROUP_M", 8, "block rows per L2 group in the block order", lo=1, hi=1024),
        Param(
            "MIN_BLOCKS",
            1,
            "__launch_bounds__ minimum blocks per SM (caps registers); default 2 when "
            "TM*TN <= 64, else the most that leave ~TM*TN + 100 registers per thread",
            (1, 2, 3, 4),
        ),
        Param(
            "A_VEC",
            1,
            "A copy: 1 = float4 loads to registers + transposed stores, 0 = 4-byte cp.async",
            (0, 1),
        ),
        Param(
            "SPLIT_K",
            1,
            "K slices (grid y); > 1 adds alpha*A@B into C with atomics after C = beta*C",
            lo=1,
            hi=64,
        ),
        Param(
            "RAGGED",
            0,
            "unaligned whole tiles (K or N not a multiple of 4): 1 = an unmasked loop of 4-byte "
            "copies (A through registers, 8 k x 4 rows per warp), 2 = the masked copies; 0 picks 1 for such "
            "problems where it measured faster (not for 128-accumulator tiles at 2+ blocks/SM with K % 4 != 0, "
            "nor at register caps <= 128), else 2",
            (0, 1, 2),
        ),
        Param(
            "REPACK",
            0,
            "unaligned operands (K or N not a multiple of 4): 1 = the launch first copies them into "
            "a workspace with 16-byte rows (the GEMM then runs its aligned loop), 2 = never; 0 picks 1 where "
            "the copy costs little against the GEMM (smemtile.families.sgemm.tiles.repack_pays)",
            (0, 1, 2),
        ),
    )
    problem_keys = (
        ProblemKey("M", 4096, "rows of A and C"),
        ProblemKey("N", 4096, "columns of B and C"),
        ProblemKey("K", 4096, "columns of A, rows of B"),
        ProblemKey("alpha", 1.0, "scale of A @ B", "float"),
        ProblemKey("beta", 0.0, "scale of the old C (0: C is not read)", "float"),
        ProblemKey("lda", 0, "leading dimension of A (elements between rows; default K: dense)", dense="K"),
        ProblemKey("ldb", 0, "leading dimension of B (default N: dense)", dense="N"),
        ProblemKey("ldc", 0, "leading dimension of C (default N: dense)", dense="N"),
    )
    host_args = (
        HostArg("M", "int"),
        HostArg("N", "int"),
        HostArg("K", "int"),
        HostArg("alpha", "float"),
        HostArg("A", "const float*", "in", ("M", "K"), "f32", ld="lda"),
        HostArg("lda", "int"),
        HostArg("B", "const float*", "in", ("K", "N"), "f32", ld="ldb"),
        HostArg("ldb", "int"),
        HostArg("beta", "float"),
        HostArg("C", "float*", "inout", ("M", "N"), "f32", ld="ldc"),
        HostArg("ldc", "int"),
    )
    smem_kind = "auto"
    tolerance = 1e-4  # fp32 accumulation over K terms against float64, relative to max |C|

    def threads(self, p: dict[str, int]) -> int:
        wm, wn = LANES_M * p["TM"], LANES_N * p["TN"]
        if wm <= 0 or wn <= 0 or p["BM"] % wm or p["BN"] % wn:
            return p["BM"] * p["BN"] // max(1, p["TM"] * p["TN"])
        return (p["BM"] // wm) * (p["BN"] // wn) * 32

    def threads_message(self, p: dict[str, int], threads: int, implied: int) -> str:
        return (
            f"the thread layout does not cover the tile: BM*BN = {p['BM'] * p['BN']} but threads*TM*TN = "
            f"{threads * p['TM'] * p['TN']} (with TM={p['TM']}, TN={p['TN']} it needs {implied} threads)"
        )

    def derive(self, params: dict[str, int], user: set[str], arch: Arch) -> dict[str, int]:
        p = dict(params)
        if "CP_ASYNC" not in user:
            p["CP_ASYNC"] = int(arch.has_cp_async)
        if not p["CP_ASYNC"] and "STAGES" not in user:
            p["STAGES"] = 2  # register double-buffering has exactly two slots
        if "MIN_BLOCKS" not in user:
            # 2 blocks/SM (<= 128 registers with 256 threads) fit a thread tile of up to 64 accumulators; larger
            # tiles need ~TM*TN + 100 registers (ptxas 13.0: 16x8 and 8x16 take 227-255): as many blocks as keep
            # that many (the default 8x16 at 128 threads: 2 blocks of 255; 16x8 at 256 threads: 1)
            if p["TM"] * p["TN"] <= 64:
                p["MIN_BLOCKS"] = 2
            else:
                need, threads = p["TM"] * p["TN"] + 100, max(32, self.threads(p))
                p["MIN_BLOCKS"] = max([1] + [m for m in (2, 3, 4) if 65536 // (threads * m) >= need])
        return p

    def retarget(self, params: dict[str, int], arch: Arch) -> tuple[dict[str, int], list[str]]:
        if arch.has_cp_async or params.get("STAGES", 2) == 2 and not params.get("CP_ASYNC"):
            return params, []
        out = {k: v for k, v in params.items() if k != "CP_ASYNC"}
        notes = []
        if params.get("STAGES", 2) != 2:
            out["STAGES"] = 2
            notes.append(
                f"{arch.name} has no cp.async: register double-buffering with 2 stages (the spec asks "
                f"for {params['STAGES']})"
            )
        return out, notes

    def violations(self, cfg: KernelConfig) -> list[str]:
        p, out = cfg.params, []
        bm, bn, bk, tm, tn = p["BM"], p["BN"], p["BK"], p["TM"], p["TN"]
        if bm % (LANES_M * tm):
            out.append(f"BM={bm} must be a multiple of the warp tile height 4*TM={LANES_M * tm}")
        if bn % (LANES_N * tn):
            out.append(f"BN={bn} must be a multiple of the warp tile width 8*TN={LANES_N * tn}")
        threads = self.threads(p)
        if not 32 <= threads <= 1024:
            out.append(f"BM*BN/(TM*TN) = {threads} threads; a block needs 32..1024")
        if out:
            return out
        a_vec = p["A_VEC"]
        per_pass = threads // (2 if a_vec else 8)  # rows one pass of A copies covers
        a_items, what = (bm * bk // 4, "float4s") if a_vec else (bm * bk, "elements")
        if bm % per_pass and per_pass % bm:
            out.append(f"BM={bm} and the {per_pass} rows one pass of A copies covers must divide one another")
        elif a_items % threads:
            out.append(f"the {a_items} A {what} of a tile do not split evenly over {threads} threads")
        elif (bk * bn // 4) % threads:
            out.append(f"the {bk * bn // 4} B float4s of a tile do not split evenly over {threads} threads")
        elif threads % (bn // 4):
            out.append(f"threads={threads} must be a multiple of BN/4={bn // 4} (whole B rows per copy pass)")
        for b in ("As", "Bs"):
            lay = cfg.layouts.get(b)
            if lay is not None and lay.pad % 4:
                out.append(
                    f"{b}: padding {lay.pad} must be a multiple of 4 floats to keep the float4 reads aligned"
                )
            if lay is not None and lay.swizzled and lay.swizzle.M < 2:
                out.append(f"{b}: swizzle M={lay.swizzle.M} splits float4s; the inner loop needs M >= 2")
        if p["RAGGED"] == 1 and p["A_VEC"] and p["CP_ASYNC"]:
            from smemtile.families.sgemm.tiles import ragged_split_errors

            out += ragged_split_errors(p["BM"], p["BN"], p["BK"], self.threads(p))
        stages, cp = p["STAGES"], bool(p["CP_ASYNC"])
        if cp and not cfg.arch.has_cp_async:
            out.append(
                f"cp.async needs sm_80 or newer; {cfg.arch.name} must use CP_ASYNC=0 "
                "(register double-buffering)"
            )
        if cp and stages < 2:
            out.append(f"a cp.async pipeline needs at least 2 stages, got STAGES={stages}")
        if not cp and stages != 2:
            out.append(
                f"without cp.async the kernel double-buffers through registers: STAGES must be 2, got {stages}"
            )
        return out

    def repack(self, cfg: KernelConfig) -> bool:
        """Whether the launch repacks unaligned A (K % 4 != 0) or B (N % 4 != 0) into a workspace first
        (REPACK 1 / 2 say so; 0 = auto follows smemtile.families.sgemm.tiles.repack_pays, measured on the H200)."""
        from smemtile.families.sgemm.tiles import repack_pays

        r = cfg.params["REPACK"]
        if r:
            return r == 1
        return repack_pays(*(int(cfg.problem[x]) for x in "MNK"))

    def workspaces(self, cfg: KernelConfig) -> list[Workspace]:
        if not self.repack(cfg):  # the helper of an aligned (or not repacked) problem takes no workspace
            return []
        return [
            Workspace(
                "Ap", f"M * {LDA4}", when=A_UNALIGNED, fallback="A", doc="A with rows of ceil(K/4)*4 floats"
            ),
            Workspace(
                "Bp", f"K * {LDB4}", when=B_UNALIGNED, fallback="B", doc="B with rows of ceil(N/4)*4 floats"
            ),
        ]

    def ragged(self, cfg: KernelConfig) -> bool:
        """Whether the kernel compiles in the unmasked 4-byte loop for unaligned whole tiles (template RAGGED):
        RAGGED 1 / 2 say so; 0 (auto) follows the tile model's rule, measured on the H200
        (smemtile.families.sgemm.tiles.ragged_loop: K or N not a multiple of 4, where the generated launch passes
        lda = K and ldb = N, and not where it measured slower)."""
        from smemtile.families.sgemm.tiles import ragged_loop

        p = cfg.params
        if p["RAGGED"] or not p["A_VEC"] or not p["CP_ASYNC"]:
            return p["RAGGED"] == 1 and bool(p["A_VEC"]) and bool(p["CP_ASYNC"])
        if self.repack(cfg):  # the GEMM gets 16-byte rows: no unaligned whole tiles
            return False
        return ragged_loop(
            p["BM"],
            p["BN"],
            p["BK"],
            p["TM"],
            p["TN"],
            self.threads(p),
            p["MIN_BLOCKS"],
            int(cfg.problem["K"]),
            int(cfg.problem["N"]),
        )

    def auto_values(self, cfg: KernelConfig) -> dict[str, int]:
        out = {"RAGGED": 1 if self.ragged(cfg) else 2} if cfg.params["RAGGED"] == 0 else {}
        if cfg.params["REPACK"] == 0:
            out["REPACK"] = 1 if self.repack(cfg) else 2
        return out

    def access_repeats(self, cfg: KernelConfig) -> dict[str, float]:
        """With RAGGED, every K slice copies its whole tiles after the prologue's STAGES-1 through the RAGGED loop
        (As_copy_ragged) and the rest, the prologue and a partial last tile, through As_copy."""
        if not self.ragged(cfg):
            return {}
        k, bk, z, stages = int(cfg.problem["K"]), cfg.params["BK"], self.split_k(cfg), cfg.params["STAGES"]
        kc = -(-k // (bk * z)) * bk  # the kernel's K slice
        slices = [max(0, min(k - i * kc, kc)) for i in range(z)]
        tiles = [-(-s // bk) for s in slices]
        loop = [max(0, s // bk - (stages - 1)) for s in slices]
        return {"As_copy_ragged": sum(loop) / z, "As_copy": (sum(tiles) - sum(loop)) / z}

    def smem_hint(self, cfg: KernelConfig) -> str:
        return "; reduce BK or STAGES"

    def template_args(self, cfg: KernelConfig) -> list[str]:
        p = cfg.params
        a, b = cfg.layouts["As"].template_args(), cfg.layouts["Bs"].template_args()
        vals = [
            p["BM"],
            p["BN"],
            p["BK"],
            p["TM"],
            p["TN"],
            p["STAGES"],
            "true" if p["CP_ASYNC"] else "false",
            *a,
            *b,
            p["GROUP_M"],
            p["MIN_BLOCKS"],
            p["A_VEC"],
            p["SPLIT_K"],
            int(self.ragged(cfg)),
        ]
        return [str(v) for v in vals]

    def buffers(self, cfg: KernelConfig) -> list[dict]:
        return [
            {
                "name": "As",
                "dtype": "f32",
                "shape": ["BK", "BM"],
                "stages": "STAGES",
                "note": "A tile transposed (k-major): As[k][m] = A[m0+m][k0+k]",
            },
            {
                "name": "Bs",
                "dtype": "f32",
                "shape": ["BK", "BN"],
                "stages": "STAGES",
                "note": "B tile: Bs[k][n] = B[k0+k][n0+n]",
            },
        ]

    def accesses(self, cfg: KernelConfig) -> list[dict]:
        p, repack = cfg.params, self.repack(cfg)
        copy_op = "cp.async" if p["CP_ASYNC"] else "store"
        if p["A_VEC"]:
            # chunk c = tid + i*THREADS is the float4 A[m][k..k+3], r = c//2, m = r % BM,
            # k = (r//BM)*8 + (c%2)*4; stored transposed as four 4-byte stores As[k+q][m]
            a_copy = {
                "name": "As_copy",
                "buffer": "As",
                "op": "store",
                "width": 4,
                "role": "copy",
                "row": "(((tid + i*THREADS)//2)//BM)*8 + (tid%2)*4 + q",
                "col": "((tid + i*THREADS)//2) % BM",
                "over": {"i": [0, "BM*BK//4//THREADS"], "q": [0, 4]},
                "note": "float4 of A in registers -> 4 transposed 4-byte stores",
            }
        else:
            # element e = tid + i*THREADS: k = (e//8//BM)*8 + e%8, m = (e//8) % BM, one 4-byte copy A[m][k] -> As[k][m]
            row, col = "((tid + i*THREADS)//8//BM)*8 + tid%8", "((tid + i*THREADS)//8) % BM"
            a_copy = {
                "name": "As_copy",
                "buffer": "As",
                "op": copy_op,
                "width": 4,
                "role": "copy",
                "row": row,
                "col": col,
                "over": {"i": [0, "BM*BK//THREADS"]},
                "note": "A[m][k] -> As[k][m], 4 bytes",
            }
            if copy_op == "cp.async":  # where each lane's word comes from: row-major A, leading dimension lda
                a_copy["source"] = f"({col}) * {LDA4 if repack else 'lda'} + {row}"
        ragged = []
        if self.ragged(cfg):  # unaligned whole tiles (RAGGED): the A_VEC = 0 mapping, through registers
            ragged = [
                {
                    "name": "As_copy_ragged",
                    "buffer": "As",
                    "op": "store",
                    "width": 4,
                    "role": "copy",
                    "row": "((tid + i*THREADS)//8//BM)*8 + tid%8",
                    "col": "((tid + i*THREADS)//8) % BM",
                    "over": {"i": [0, "BM*BK//THREADS"]},
                    "note": "unaligned whole tiles (RAGGED=1): A[m][k] through registers, 8 k x 4 rows per "
                    "warp; As_copy is then the prologue's and the partial K tile's",
                }
            ]
        ldb = int(self.problem_ints(cfg.problem)["ldb"])  # the user's leading dimension (dense: N)
        if ldb % 4 == 0 or repack:  # rows of B (or of B repacked) 16-byte aligned: 16-byte copies
            b_row, b_col = "(tid + j*THREADS)//(BN//4)", "((tid + j*THREADS) % (BN//4))*4"
            b_copy = {
                "name": "Bs_copy",
                "buffer": "Bs",
                "op": copy_op,
                "width": 16,
                "role": "copy",
                "row": b_row,
                "col": b_col,
                "over": {"j": [0, "BK*BN//4//THREADS"]},
                "note": "B rows, 16 bytes per lane",
            }
        else:  # rows of B are not 16-byte aligned: the kernel copies one element per lane (b_vec false)
            b_row, b_col = "(tid + j*THREADS)//BN", "(tid + j*THREADS) % BN"
            b_copy = {
                "name": "Bs_copy",
                "buffer": "Bs",
                "op": copy_op,
                "width": 4,
                "role": "copy",
                "row": b_row,
                "col": b_col,
                "over": {"j": [0, "BK*BN//THREADS"]},
                "note": "B rows, 4 bytes per lane (ldb is not a multiple of 4)",
            }
        if copy_op == "cp.async":  # row-major B, leading dimension ldb
            b_copy["source"] = f"({b_row}) * {LDB4 if repack else 'ldb'} + {b_col}"
        return [
            a_copy,
            *ragged,
            b_copy,
            {
                "name": "As_read",
                "buffer": "As",
                "op": "load",
                "width": 16,
                "role": "inner",
                "row": "k",
                "col": f"(warp//(BN//(8*TN)))*4*TM + {LM}*4 + 16*i",
                "over": {"k": [0, "BK"], "i": [0, "TM//4"]},
                "note": "float4 of As[k] along m (8-lane broadcasts)",
            },
            {
                "name": "Bs_read",
                "buffer": "Bs",
                "op": "load",
                "width": 16,
                "role": "inner",
                "row": "k",
                "col": f"(warp%(BN//(8*TN)))*8*TN + {LN}*4 + 32*j",
                "over": {"k": [0, "BK"], "j": [0, "TN//4"]},
                "note": "float4 of Bs[k] along n",
            },
        ]

    def calls(self, cfg: KernelConfig) -> list[KernelCall]:
        prepare = KernelCall(
            ("C", "M", "N", "ldc", "beta"),
            ("min(cdiv(N, 256), 64)", "min(M, 65535)", "1"),
            ("256", "1", "1"),
            kernel="smemtile_sgemm_splitk_prepare",
            params=("float* C", "int M", "int N", "int ldc", "float beta"),
            when="SPLIT_K > 1",
            doc="split K: C = beta * C (0 for beta = 0) before the slices add into it",
        )
        grid, block = ("cdiv(M, BM) * cdiv(N, BN)", "SPLIT_K", "1"), ("THREADS", "1", "1")
        if not self.repack(cfg):
            return [
                prepare,
                KernelCall(("M", "N", "K", "alpha", "A", "lda", "B", "ldb", "beta", "C", "ldc"), grid, block),
            ]
        # repacked: unaligned A / B copied into the workspace first; the GEMM reads Ap / Bp (A / B when aligned)
        repacks = [
            KernelCall(
                (op, rows, cols, f"ld{op.lower()}", f"{op}p", ld4),
                (f"cdiv({cols}, 1024)", f"min({rows}, 65535)", "1"),
                ("256", "1", "1"),
                kernel="smemtile_sgemm_repack",
                params=REPACK_PARAMS,
                when=when,
                doc=f"repack: {op} into rows of ceil({cols}/4)*4 floats",
            )
            for op, rows, cols, ld4, when in (
                ("A", "M", "K", LDA4, A_UNALIGNED),
                ("B", "K", "N", LDB4, B_UNALIGNED),
            )
        ]
        return [
            prepare,
            *repacks,
            KernelCall(
                ("M", "N", "K", "alpha", "Ap", LDA_USED, "Bp", LDB_USED, "beta", "C", "ldc"), grid, block
            ),
        ]

    def layout_rules(self, cfg: KernelConfig) -> list[str]:
        return [
            "C must not overlap A or B (the kernel reads A and B while blocks write C).",
            "Any pointer alignment and leading dimension: the 16-byte copies run only where rows are 16-byte "
            "aligned (checked at run time, uniform per launch), 4-byte copies otherwise"
            + (" or, with the workspace, a repack into 16-byte rows first." if self.workspaces(cfg) else "."),
        ]

    def make_inputs(self, cfg: KernelConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
        m, n, k = (int(cfg.problem[x]) for x in "MNK")
        return {
            "A": rng.standard_normal((m, k), dtype=np.float32),
            "B": rng.standard_normal((k, n), dtype=np.float32),
            "C": rng.standard_normal((m, n), dtype=np.float32),
        }

    def reference(self, cfg: KernelConfig, inputs: dict[str, np.ndarray]) -> np.ndarray:
        q = cfg.problem
        return gemm_reference(inputs["A"], inputs["B"], inputs["C"], float(q["alpha"]), float(q["beta"]))

    def one_block_reason(self, cfg: KernelConfig, occ: dict) -> str | None:
        if cfg.params["MIN_BLOCKS"] == 1:
            p = cfg.params
            return (
                f"1 block/SM by design (MIN_BLOCKS=1): a {p['TM']}x{p['TN']} register tile per thread needs more "
                f"than 128 registers; {occ['active_warps']} warps/SM with {p['TM'] * p['TN']} independent FMAs "
                "each keep the FMA pipes busy"
            )
        return None

    def relax(self, cfg: KernelConfig, spilled_bytes: int) -> tuple[KernelConfig, str] | None:
        """When the register cap makes ptxas spill, step back along what the user did not set:
        A_VEC 1 -> 0 (the 4-byte cp.async copy holds no A tile in registers), then MIN_BLOCKS -> 1 (spilling
        an FFMA-bound kernel costs more than a second block per SM buys)."""
        p = cfg.params
        if cfg.may_change("A_VEC") and p["A_VEC"] == 1 and p["CP_ASYNC"]:
            return with_params(
                cfg, A_VEC=0
            ), "using A_VEC=0: 4-byte cp.async for A, no A tile held in registers"
        if cfg.may_change("MIN_BLOCKS") and p["MIN_BLOCKS"] > 1:
            return (
                with_params(cfg, MIN_BLOCKS=1),
                "using MIN_BLOCKS=1: 1 block per SM with every register it needs",
            )
        return None

    def pipeline_items(self, cfg: KernelConfig, ptx: str | None) -> list[Item]:
        """The cp.async protocol, read from the compiled PTX (the artefact), not from the template text."""
        stages, cp = cfg.params["STAGES"], bool(cfg.params["CP_ASYNC"])
        if not cp:
            why = "no cp.async: register double-buffering (global loads to registers, one barrier per K step)"
            return [
                Item("commit_group", "cp.async.commit_group after all copies of a tile", NA, why),
                Item("wait_group", "cp.async.wait_group(N) with the right N for the stage count", NA, why),
                Item(
                    "barrier_after_wait",
                    "a barrier after the wait and before reading the newly filled buffer",
                    NA,
                    why,
                ),
                Item(
                    "ring_index",
                    "the ring-buffer index advances every iteration",
                    NA,
                    "two slots; a stale slot shows as a wrong result in `smemtile verify`, not here",
                ),
            ]
        if ptx is None:
            why = "not compiled (no PTX to read): run without --no-compile"
            return [Item(i, t, NA, why) for i, t in _PIPELINE]
        waits = [int(x) for x in re.findall(r"cp\.async\.wait_group\s+(\d+)", ptx)]
        commits = len(re.findall(r"cp\.async\.commit_group", ptx))
        steady = [w for w in waits if w != 0]
        want = stages - 2
        items = [
            Item(
                "commit_group",
                _PIPELINE[0][1],
                PASS if commits >= 2 else FAIL,
                f"the PTX commits {commits} groups (prologue + K loops)",
            )
        ]
        ok = bool(waits) and all(w == want for w in steady) and (want != 0 or not steady)
        items.append(
            Item(
                "wait_group",
                _PIPELINE[1][1],
                PASS if ok else FAIL,
                f"PTX wait_group values {sorted(set(waits))}; {stages} stages need {want} in the K loop "
                f"({stages - 1} tiles in flight, at most {want} pending) and 0 for the drain",
            )
        )
        barrier_ok = barrier_follows_each_wait(ptx)
        items.append(
            Item(
                "barrier_after_wait",
                _PIPELINE[2][1],
                PASS if barrier_ok else FAIL,
                "every cp.async.wait_group in the PTX is followed by bar.sync before the next shared load"
                if barrier_ok
                else "a shared load follows a wait_group before any bar.sync",
            )
        )
        items.append(
            Item(
                "ring_index",
                _PIPELINE[3][1],
                NA,
                "the slot index lives in registers and is not visible in PTX; a stale slot gives wrong "
                "results, which `smemtile verify` checks on the GPU",
            )
        )
        return items

    # ---- the tile model's view of this family (smemtile tiles / tune) -----------------------------------
    tiles_help = "fp32 on NVIDIA (SIMT FFMA, the default --dtype)"

    def tiles_for(self, dtype: str, arch, vendor: str = "nvidia") -> bool:
        return dtype == "f32" and vendor == "nvidia"

    def tile_spec(self, p, s) -> dict:
        from smemtile.families.sgemm.tiles import tile_spec

        return tile_spec(self, p, s)


_PIPELINE = (
    ("commit_group", "cp.async.commit_group after all copies of a tile"),
    ("wait_group", "cp.async.wait_group(N) with the right N for the stage count"),
    ("barrier_after_wait", "a barrier after the wait and before reading the newly filled buffer"),
    ("ring_index", "the ring-buffer index advances every iteration"),
)


from smemtile.families.sgemm.tiles import SgemmTileModel  # noqa: E402  (it imports this package first)

Sgemm.tile_model = SgemmTileModel
FAMILY = Sgemm()
