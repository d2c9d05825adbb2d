"""Contract of ``kernels/sgemm.cu``: C = alpha * A @ B + beta * C in fp32 (FFMA, no TF32), row-major.

Spec mapping (YAML)::

    threads: 256                       # must equal (BM / (4*TM)) * (BN / (8*TN)) * 32
    tile: {BM: 256, BN: 128, BK: 8}    # also TM (16), TN (8), GROUP_M (8), MIN_BLOCKS (1), A_VEC (1), SPLIT_K (1)
    stages: 3                          # shared-memory ring depth (default 3; 2 without cp.async)
    buffers:
      - {name: As, dtype: f32, shape: [BK, BM], layout: {pad: 4}}    # A tile stored transposed: As[k][m]
      - {name: Bs, dtype: f32, shape: [BK, BN], layout: {pad: 0}}    # Bs[k][n]
    kernel: {family: sgemm, M: 4096, N: 4096, K: 4096}               # alpha (1.0), beta (0.0) optional

The kernel's own accesses (As_copy, Bs_copy, As_read, Bs_read) are in :meth:`Sgemm.accesses`, also as spec
expressions (``generate --json`` lists them under ``kernel_accesses``). The lanes of a warp form an interleaved
4 (m) x 8 (n) grid: lm = ((lane>>1)&1) | ((lane>>2)&2), ln = (lane&1) | ((lane>>1)&2) | ((lane>>2)&4).

Defaults (the fastest measured on the H200, bench/results/h200.json): a 256 x 128 x 8 block tile of 16 x 8 per
thread (256 threads, about 230 registers, MIN_BLOCKS 1: one block of 8 warps per SM), 3 stages, A_VEC 1 (float4
A loads into registers, transposed stores). MIN_BLOCKS defaults to 2 for thread tiles of at most 64 accumulators
(e.g. 8 x 8). At 128 registers (2 blocks of 256 threads) a few values may spill depending on stages and arch; ``codegen.build`` then recompiles
with A_VEC=0 (4-byte cp.async for A, nothing held in registers), then with MIN_BLOCKS=1, each only where the spec
left the parameter at its default, and says so.

SPLIT_K > 1 (grid y) splits K: every slice adds alpha * its partial product into C with atomics and beta is not
applied, so the caller sets C = beta * C (zero for beta = 0) first. For small M (e.g. 64 x 8192 x 4096: BM 64, TM 8,
2 stages, SPLIT_K 4, MIN_BLOCKS 3) it fills the SMs that ceil(M/BM) * ceil(N/BN) blocks cannot.

Shared memory per block = STAGES * (BK * (BM + pad_As) + BK * (BN + pad_Bs)) * 4 bytes.
Launch: grid = (ceil(M/BM) * ceil(N/BN) (grouped by GROUP_M), SPLIT_K), block = threads,
dynamic shared memory = 0 when the total fits 48 KiB (declared statically) else the total.
"""

from __future__ import annotations

import numpy as np

from smemtile.codegen.contract import Access, Buffer, Family, KernelConfig, Launch, Param, cdiv

LANES_M, LANES_N = 4, 8  # a warp's lanes as a 4 (m) x 8 (n) grid


def lane_grid(lane: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lm, ln) of each lane, interleaved as in sgemm.cu: lane bits 1,3 -> lm, bits 0,2,4 -> ln, so every lane
    quad covers 2 m x 2 n and reads at most 2 distinct float4 of each tile (served in half-warps)."""
    lm = ((lane >> 1) & 1) | ((lane >> 2) & 2)
    ln = (lane & 1) | ((lane >> 1) & 2) | ((lane >> 2) & 4)
    return lm, ln


class Sgemm(Family):
    name = "sgemm"
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
        Param("BM", 256, None, "block tile rows (multiple of 4*TM)"),
        Param("BN", 128, None, "block tile columns (multiple of 8*TN)"),
        Param("BK", 8, (8, 16, 32), "K step per stage (multiple of 8)"),
        Param("TM", 16, (4, 8, 16), "register tile rows per thread (multiple of 4)"),
        Param("TN", 8, (4, 8, 16), "register tile columns per thread (multiple of 4)"),
        Param("STAGES", 3, None, "shared-memory stages (2..8); exactly 2 without cp.async"),
        Param("CP_ASYNC", 1, (0, 1), "cp.async pipeline (sm_80+); 0 = register double-buffering (sm_75)"),
        Param("GROUP_M", 8, None, "block rows per L2 group in the block order"),
        Param(
            "MIN_BLOCKS",
            1,
            (1, 2, 3, 4),
            "__launch_bounds__ min blocks per SM (caps registers); default 2 when TM*TN <= 64, else 1",
        ),
        Param(
            "A_VEC",
            1,
            (0, 1),
            "A copy: 1 = float4 loads to registers + transposed stores, 0 = 4-byte cp.async",
        ),
        Param(
            "SPLIT_K",
            1,
            None,
            "K slices (grid y); > 1 adds alpha*A@B into C with atomics: the caller sets C = beta*C first",
        ),
    )
    problem_keys = {"M": 4096, "N": 4096, "K": 4096, "alpha": 1.0, "beta": 0.0}
    test_sizes = (
        {"M": 128, "N": 128, "K": 64},
        {"M": 257, "N": 131, "K": 77, "beta": 0.5},
        {"M": 1000, "N": 1001, "K": 333, "alpha": 0.75, "beta": -1.25},
        {"M": 33, "N": 4, "K": 1},
        {"M": 512, "N": 384, "K": 1024, "beta": 1.0},
    )
    bench_sizes = ({"M": 4096, "N": 4096, "K": 4096}, {"M": 8192, "N": 8192, "K": 8192})
    tolerance = 1e-4  # fp32 accumulation over K terms against float64, relative to max |C|

    def buffers(self, cfg: KernelConfig) -> list[Buffer]:
        p = cfg.params
        return [
            Buffer("As", "f32", p["BK"], p["BM"], "A tile transposed (k-major): As[k][m] = A[m0+m][k0+k]"),
            Buffer("Bs", "f32", p["BK"], p["BN"], "B tile: Bs[k][n] = B[k0+k][n0+n]"),
        ]

    def stages(self, p: dict[str, int]) -> int:
        return p["STAGES"]

    def threads(self, p: dict[str, int]) -> int:
        wm, wn = LANES_M * p["TM"], LANES_N * p["TN"]
        if wm <= 0 or wn <= 0 or p["BM"] % wm or p["BN"] % wn:
            return p["BM"] * p["BN"] // max(1, p["TM"] * p["TN"])
        return (p["BM"] // wm) * (p["BN"] // wn) * 32

    def violations(self, cfg: KernelConfig) -> list[str]:
        p, out = cfg.params, []
        bm, bn, bk, tm, tn = p["BM"], p["BN"], p["BK"], p["TM"], p["TN"]
        if tm % 4 or tn % 4 or tm <= 0 or tn <= 0:
            out.append(
                f"TM and TN must be positive multiples of 4 (the inner loop reads float4s), got TM={tm} TN={tn}"
            )
            return out
        if bm % (LANES_M * tm):
            out.append(f"BM={bm} must be a multiple of the warp tile height 4*TM={LANES_M * tm}")
        if bn % (LANES_N * tn):
            out.append(f"BN={bn} must be a multiple of the warp tile width 8*TN={LANES_N * tn}")
        threads = self.threads(p)
        if not 32 <= threads <= 1024:
            out.append(f"BM*BN/(TM*TN) = {threads} threads; a block needs 32..1024")
        if bk % 8 or bk <= 0:
            out.append(f"BK={bk} must be a positive multiple of 8 (A is copied in runs of 8 consecutive k)")
        elif threads:
            lane_k = 2 if p.get("A_VEC", 1) else 8  # threads along one 8-deep k run of an A row
            per_pass = threads // lane_k
            a_items = bm * bk // 4 if p.get("A_VEC", 1) else bm * bk
            what = "float4s" if p.get("A_VEC", 1) else "elements"
            if bm % per_pass and per_pass % bm:
                out.append(
                    f"BM={bm} and threads/{lane_k} = {per_pass} (rows one pass of A copies covers) must divide one another"
                )
            elif a_items % threads:
                out.append(
                    f"BM*BK{'/4' if p.get('A_VEC', 1) else ''}={a_items} A {what} do not split evenly over {threads} threads"
                )
            elif (bk * bn // 4) % threads:
                out.append(f"BK*BN/4={bk * bn // 4} B float4s do not split evenly over {threads} threads")
            elif threads % (bn // 4):
                out.append(
                    f"threads={threads} must be a multiple of BN/4={bn // 4} (whole B rows per copy pass)"
                )
        for b in ("As", "Bs"):
            lay = cfg.layouts.get(b)
            if lay is not None and lay.pad % 4:
                out.append(
                    f"{b}: padding {lay.pad} must be a multiple of 4 floats to keep the float4 reads aligned"
                )
            if lay is not None and lay.swizzled and lay.swz_m < 2:
                out.append(f"{b}: swizzle M={lay.swz_m} splits float4s; the inner loop needs M >= 2")
        stages, cp = p["STAGES"], bool(p["CP_ASYNC"])
        if cp and not cfg.arch.has_cp_async:
            out.append(
                f"cp.async needs sm_80 or newer; {cfg.arch.name} must use CP_ASYNC=0 (register double-buffering)"
            )
        if cp and stages < 2:
            out.append(f"a cp.async pipeline needs at least 2 stages, got STAGES={stages}")
        if not cp and stages != 2:
            out.append(
                f"without cp.async the kernel double-buffers through registers: STAGES must be 2, got {stages}"
            )
        if stages > 8:
            out.append(f"STAGES={stages}: at most 8")
        if p["GROUP_M"] < 1:
            out.append("GROUP_M must be at least 1")
        if not 1 <= p.get("SPLIT_K", 1) <= 64:
            out.append(f"SPLIT_K={p.get('SPLIT_K', 1)}: must be 1..64")
        return out + self.common_violations(cfg)

    def smem_hint(self, cfg: KernelConfig) -> str:
        return "; reduce BK or STAGES"

    def template_args(self, cfg: KernelConfig) -> list[str]:
        p, a, b = cfg.params, cfg.layouts["As"], cfg.layouts["Bs"]
        vals = [
            p["BM"],
            p["BN"],
            p["BK"],
            p["TM"],
            p["TN"],
            p["STAGES"],
            "true" if p["CP_ASYNC"] else "false",
        ]
        vals += [
            a.pad,
            a.swz_b,
            a.swz_m,
            a.swz_s,
            b.pad,
            b.swz_b,
            b.swz_m,
            b.swz_s,
            p["GROUP_M"],
            p["MIN_BLOCKS"],
            p.get("A_VEC", 1),
            p.get("SPLIT_K", 1),
        ]
        return [str(v) for v in vals]

    def launch(self, cfg: KernelConfig) -> Launch:
        p, q = cfg.params, cfg.problem
        smem = self.smem_bytes(cfg)
        blocks = cdiv(q["M"], p["BM"]) * cdiv(q["N"], p["BN"])
        static = smem <= 48 * 1024
        return Launch(
            (blocks, p.get("SPLIT_K", 1), 1),
            (self.threads(p), 1, 1),
            0 if static else smem,
            smem if static else 0,
        )

    def accesses(self, cfg: KernelConfig) -> list[Access]:
        p = cfg.params
        bm, bn, bk, tm, tn = p["BM"], p["BN"], p["BK"], p["TM"], p["TN"]
        t = self.threads(p)
        warps = t // 32
        tid = np.arange(t).reshape(warps, 32)
        lane, warp = tid % 32, tid // 32
        if p.get("A_VEC", 1):
            # A copies: float4 chunk c = tid + i*T, r = c//2; m = r % BM, k = (r//BM)*8 + (c%2)*4 + q: four
            # 4-byte stores As[k+q][m] per chunk (q = 0..3, one instruction each)
            i = np.arange(bm * bk // 4 // t)[:, None, None, None]
            q = np.arange(4)[None, :, None, None]
            r = (tid[None, None] + i * t) // 2
            a_row = ((r // bm) * 8 + (tid[None, None] % 2) * 4 + q).reshape(-1, warps, 32)
            a_col = np.broadcast_to(r % bm, (i.shape[0], 4, warps, 32)).reshape(-1, warps, 32)
        else:
            # A copies: e = tid + i*T; k = (e//8 // BM)*8 + e%8, m = (e//8) % BM  -> As[k][m]
            i = np.arange(bm * bk // t)[:, None, None]
            e = tid[None] + i * t
            a_row, a_col = (e // 8 // bm) * 8 + e % 8, (e // 8) % bm
        # B copies (16-byte path): c = tid + i*T; k = c // (BN/4), n = (c % (BN/4))*4
        j = np.arange(bk * bn // 4 // t)[:, None, None]
        c = tid[None] + j * t
        b_row, b_col = c // (bn // 4), (c % (bn // 4)) * 4
        # Inner loop, per k: As[k][warp_m + lm*4 + 16*i], Bs[k][warp_n + ln*4 + 32*j]
        wm, wn = LANES_M * tm, LANES_N * tn
        warp_m, warp_n = (warp // (bn // wn)) * wm, (warp % (bn // wn)) * wn
        lm, ln = lane_grid(lane)
        ks = np.arange(bk)
        ia = np.arange(tm // 4)
        la_row = np.broadcast_to(ks[:, None, None, None], (bk, tm // 4, warps, 32)).reshape(-1, warps, 32)
        la_col = np.broadcast_to(
            (warp_m + lm * 4)[None, None] + 16 * ia[None, :, None, None], (bk, tm // 4, warps, 32)
        )
        jb = np.arange(tn // 4)
        lb_row = np.broadcast_to(ks[:, None, None, None], (bk, tn // 4, warps, 32)).reshape(-1, warps, 32)
        lb_col = np.broadcast_to(
            (warp_n + ln * 4)[None, None] + 32 * jb[None, :, None, None], (bk, tn // 4, warps, 32)
        )
        copy_op = "cp.async" if p["CP_ASYNC"] else "store"
        tid_e = "(warp*32+lane)"
        # cp.async sources: byte offsets into row-major A (M x K) and B (K x N) of the first block's first K
        # tile (later tiles shift by whole 32-byte runs). Which lanes' sources can be read together decides how
        # the copy's shared-memory writes are grouped (smemtile.model.banks).
        K, N = int(cfg.problem["K"]), int(cfg.problem["N"])
        a_cp = copy_op == "cp.async" and not p.get("A_VEC", 1)
        a_src = (a_col * K + a_row) * 4 if a_cp else None
        b_src = (b_row * N + b_col) * 4 if copy_op == "cp.async" else None
        a_rc = (f"(({tid_e} + i*THREADS)//8//BM)*8 + lane%8", f"(({tid_e} + i*THREADS)//8) % BM")
        b_rc = (f"({tid_e} + j*THREADS)//(BN//4)", f"(({tid_e} + j*THREADS) % (BN//4))*4")
        return [
            Access(
                "As_copy",
                "As",
                "store" if p.get("A_VEC", 1) else copy_op,
                4,
                a_row,
                a_col,
                False,
                {
                    "row": f"((({tid_e} + i*THREADS)//2)//BM)*8 + (lane%2)*4 + q",
                    "col": f"(({tid_e} + i*THREADS)//2) % BM",
                    "over": {"i": [0, "BM*BK//4//THREADS"], "q": [0, 4]},
                }
                if p.get("A_VEC", 1)
                else {
                    "row": a_rc[0],
                    "col": a_rc[1],
                    **({"source": f"({a_rc[1]}) * {K} + {a_rc[0]}"} if a_cp else {}),
                    "over": {"i": [0, "BM*BK//THREADS"]},
                },
                sources=a_src,
            ),
            Access(
                "Bs_copy",
                "Bs",
                copy_op,
                16,
                b_row,
                b_col,
                False,
                {
                    "row": b_rc[0],
                    "col": b_rc[1],
                    **({"source": f"({b_rc[0]}) * {N} + {b_rc[1]}"} if b_src is not None else {}),
                    "over": {"j": [0, "BK*BN//4//THREADS"]},
                },
                sources=b_src,
            ),
            Access(
                "As_read",
                "As",
                "load",
                16,
                la_row,
                la_col.reshape(-1, warps, 32),
                True,
                {
                    "row": "k",
                    "col": "(warp//(BN//(8*TN)))*4*TM + (((lane>>1)&1) | ((lane>>2)&2))*4 + 16*i",
                    "over": {"k": [0, "BK"], "i": [0, "TM//4"]},
                },
            ),
            Access(
                "Bs_read",
                "Bs",
                "load",
                16,
                lb_row,
                lb_col.reshape(-1, warps, 32),
                True,
                {
                    "row": "k",
                    "col": "(warp%(BN//(8*TN)))*8*TN + ((lane&1) | ((lane>>1)&2) | ((lane>>2)&4))*4 + 32*j",
                    "over": {"k": [0, "BK"], "j": [0, "TN//4"]},
                },
            ),
        ]

    def make_inputs(self, problem: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
        m, n, k = problem["M"], problem["N"], problem["K"]
        return {
            "A": rng.standard_normal((m, k), dtype=np.float32),
            "B": rng.standard_normal((k, n), dtype=np.float32),
            "C": rng.standard_normal((m, n), dtype=np.float32),
        }

    def reference(self, problem: dict, inputs: dict[str, np.ndarray]) -> np.ndarray:
        a, b, c = (inputs[x].astype(np.float64) for x in ("A", "B", "C"))
        alpha, beta = float(problem.get("alpha", 1.0)), float(problem.get("beta", 0.0))
        out = alpha * (a @ b)
        return out + beta * c if beta != 0.0 else out

    def flops_or_bytes(self, problem: dict) -> tuple[str, float]:
        return "tflops", 2.0 * problem["M"] * problem["N"] * problem["K"]
