"""Family ``conv2d`` (``conv2d.cu``): forward 2-D convolution as an implicit GEMM on fp16 / bf16 tensor cores
(mma.sync.m16n8k16, fp32 accumulation, sm_80+).

Spec (YAML)::

    arch: sm_80
    tile: {BM: 128, BN: 128, BK: 32, WM: 64, WN: 32}   # any parameter below; the rest take their defaults
    stages: 4
    kernel: {family: conv2d, n: 32, h: 28, w: 28, c: 128, k: 128, r: 3, s: 3, stride: 1, pad: 1, dtype: bf16}

Arrays (the user's layout, as the framework takes it: 2-D views with leading dimensions, issue 27):

    x  activations NHWC: rows = n*h*w pixels of c channels, pixel row i at x[i * ldx] (ldx >= c)
    f  filters KRSC: k rows of r*s*c elements, tap (i, j), channel ch at f[kf * ldf + (i*s + j)*c + ch]
    y  output NPQK: rows = n*p*q pixels of k channels, at y[i * ldy] (ldy >= k); p = (h + 2*pad - r) // stride + 1
    bias  k fp32 values, read only with ``bias: 1``; ``relu: 1`` clamps at 0 after the bias

Padding: ``pad`` 0-7 on every side, or ``same`` (the default): (r - 1) // 2, ResNet's for its odd square filters
(1x1: 0, 3x3: 1, 7x7: 3). Stride any >= 1, dilation 1.

A sub-view (a channel slice of a wider tensor: ldx > c; an output written into a concatenation: ldy > k) is taken
as is. ``VEC`` 8 (16-byte gathers) needs c, ldx, ldf multiples of 8 and x, f 16-byte aligned (the launch refuses
otherwise); ``VEC`` 0 (the default) picks 8 where the problem allows it, else 1 (element gathers: any c, e.g. the
3 channels of an RGB stem, any leading dimension, any alignment).

The GEMM view: M = n*p*q, N = k, K = r*s*c; A[m][kg] = x at the output pixel's tap (0 in the halo), B = the filter
rows (column-major B). The tiles, fragment loads and mma.sync are the hgemm family's column-major-B ones; the A
copy is a gather. Accesses (below, written once as spec expressions; conv2d.cu's header comment derives them):

    access    op                  what                                lane -> (row, col)
    A_gather  cp.async 16 B       As[m][kg], 8 channels of one tap    chunk t = tid + i*THREADS: (t // (BK/8), t % (BK/8) * 8)
    B_copy    cp.async 16 B       Bs[k][kg], 8 filter elements        as A_gather, BN rows
    A_frag    ldmatrix.x4         a0..a3 of m16 tile mi, k16 step kk  row warp_m + mi*16 + lane % 16, col kk*16 + (lane // 16)*8
    B_frag    ldmatrix.x4         b0, b1 of n8 tiles 2nj, 2nj+1       row warp_n + nj*16 + lane % 8 + (lane // 16)*8, ...

The gather tile's banks: which pixel (or zero-filled halo) a row of As holds changes its global source, not its
shared address, so the gather writes As exactly as a dense row copy does: conflict-free, at the wavefronts its
sources allow (rows ldx elements apart: 4 lanes per 128-byte line, 8 wavefronts per warp, as the filter copy).
With dense rows of BK = 32 elements (64 bytes) both fragment loads are 4-way (the 8 rows of an ldmatrix phase
share 2 bank groups); hgemm's ``Swizzle<B,3,S>`` (:func:`smemtile.families.hgemm.swizzle_for`) makes every copy
and fragment load conflict-free with no padding: the family's default layouts. ``smemtile analyze
samples/conv2d_resnet50_3x3.yaml`` shows both (the sample lists its buffers without layouts: the conflicts and
the fix).

Launch: grid = (ceil(n*p*q / BM) * ceil(k / BN), 1, 1), block = (BM/WM) * (BN/WN) * 32 threads, shared memory
always dynamic: STAGES * (BM + BN) * BK * 2 bytes (with padding: its rows).

sm_90a (``PATH: 1``, kernel ``conv2d_wgmma``): a producer warpgroup gathers A and copies the filter rows with
16-byte cp.async into 128B-swizzled stages (TMA SWIZZLE_128B's layout) and signals each stage's mbarrier with
``cp.async.mbarrier.arrive.noinc``; one or two consumer warpgroups fence the async proxy and run wgmma_gemm's
wgmma main loop; bias / ReLU in the epilogue. BK 64, BM / CONSUMERS 64 or 128 rows, BN 64 / 128 / 256, 16-byte
gathers only (c, ldx, ldf multiples of 8: otherwise PATH 0). The same arguments, grid and helper as PATH 0; block
(CONSUMERS + 1) * 128 threads, 1024 + STAGES * (BM + BN) * 128 + 16 * STAGES bytes of dynamic shared memory.
:data:`RANK_WGMMA` decides whether the tile model ranks it (off until the H200 run confirms it).

Tolerance: max |y - ref| / max |ref| against the float64 reference of the same fp16 / bf16 inputs. Every product
of two 16-bit inputs is exact in fp32 and the r*s*c terms are summed in fp32 (mma.sync accumulates in fp32): for
r*s*c up to 2304 (the test sizes; 4608 at the bench sizes) that error stays near 1e-6 of max |y| (hgemm measured
~1e-6 for K ~ 1000 with fp32 C) and far below 1e-4 even at the worst-case growth of a sum. Output rounding dominates: f16 y half an ulp = 2^-11 = 4.9e-4 of a value, bf16 y 2^-9 = 2.0e-3: tolerances 1e-3 (f16,
f32 y) and 4e-3 (bf16 y), hgemm's for the same reasons.
"""

from __future__ import annotations

import numpy as np

from smemtile.families.base import (
    FAIL,
    NA,
    PASS,
    Family,
    HostArg,
    Item,
    KernelCall,
    KernelConfig,
    Param,
    ProblemKey,
    cp_async_ring_items,
    swizzle_proof_item,
    with_params,
)
from smemtile.families.hgemm import register_estimate
from smemtile.model.arch import Arch
from smemtile.model.bf16 import bf16_bits as _bf16_bits
from smemtile.model.bf16 import to_float64
from smemtile.model.layout import Layout, swizzle_for

T_CTYPES = {"f16": "smemtile::f16", "bf16": "smemtile::bf16"}
Y_CTYPES = {"f32": "float", "f16": "smemtile::f16", "bf16": "smemtile::bf16"}
CHUNK = 8  # elements per 16-byte copy (2-byte elements)
PADS = ("same", *range(8))
WG_BK = 64  # the wgmma path's K tile: one 128-byte swizzle row of 16-bit elements
# Registers a consumer thread needs beyond its accumulators (descriptors, addresses, loop state, the epilogue):
# ptxas 13.0 for sm_90a spills 128 x 64 x 1 consumer (64 accumulators) at an 80-register cap, not at 96 (session 12)
WG_REG_OVERHEAD = 32
WG_SLACK = 1024  # dynamic shared memory the wgmma path adds to align its tiles to 1024 bytes
# the wgmma path's 128B-swizzled tiles (TMA SWIZZLE_128B's layout, written by cp.async)
WG_BUFFERS = ("As", "Bs")
# PATH 1 (conv2d_wgmma) is chosen only when asked for (a spec's PATH: 1, a task plan's config) until the H200 run
# confirms it; then set this True: the tile model ranks its candidates on sm_90a beside the mma.sync tiles
RANK_WGMMA = False


def wg_smem(p: dict) -> int:
    """The wgmma path's dynamic shared memory (bytes): slack + STAGES x (A and B stages) + the mbarriers."""
    return WG_SLACK + p["STAGES"] * (p["BM"] + p["BN"]) * WG_BK * 2 + 16 * p["STAGES"]


# the output size and the GEMM view, as launch expressions over the helper's arguments
P_EXPR = "((h + 2 * pad - r) // stride + 1)"
Q_EXPR = "((w + 2 * pad - s) // stride + 1)"
M_EXPR = f"(n * {P_EXPR} * {Q_EXPR})"


def out_size(size: int, filt: int, stride: int, pad: int) -> int:
    """p (or q): output rows of an input of ``size`` rows, filter ``filt``, ``stride``, zero padding ``pad``."""
    return (size + 2 * pad - filt) // stride + 1


def gather_source(row: str, col: str) -> str:
    """The element a gather chunk (row ``row`` = output pixel, column ``col`` = kg; block 0, K tile 0) reads, as
    a spec expression: pixel (img, p, q) of the row, tap and channel of kg, in the coordinates of the zero-padded
    image (h + 2*pad rows of w + 2*pad pixels, ldx apart). A chunk in the halo is zero-filled and reads nothing;
    placing it in the padded image keeps every pixel row on its own global line, as the interior's are, so each
    copy instruction has the same ideal (the expression language has no conditional to leave it out)."""
    tap = f"(({col}) // c)"
    ih = f"(({row}) % (P * Q) // Q * stride + {tap} // s)"
    iw = f"(({row}) % (P * Q) % Q * stride + {tap} % s)"
    return f"((({row}) // (P * Q) * (h + 2 * pad) + {ih}) * (w + 2 * pad) + {iw}) * ldx + ({col}) % c"


class Conv2d(Family):
    name = "conv2d"
    summary = (
        "implicit-GEMM forward conv2d, NHWC x KRSC, fp16/bf16 mma.sync with a cp.async gather, bias/ReLU"
    )
    file = "conv2d.cu"
    peak = None
    kernel = "conv2d"
    default_arch = "sm_90"  # the H200 the benchmarks run on; the same code builds for sm_80 (tests)
    signature = (
        "int N",
        "int H",
        "int W",
        "int C",
        "int K",
        "int R",
        "int S",
        "int stride",
        "int pad",
        "int P",
        "int Q",
        "const {T}* x",
        "int ldx",
        "const {T}* f",
        "int ldf",
        "const float* bias",
        "{TY}* y",
        "int ldy",
    )
    params = (
        Param("BM", 128, "block tile of output pixels (GEMM rows; a multiple of WM)", lo=16, hi=1024),
        Param("BN", 128, "block tile of output channels (GEMM columns; a multiple of WN)", lo=16, hi=1024),
        Param("BK", 32, "GEMM K (filter taps x channels) per stage", (32, 64, 128)),
        Param("WM", 64, "warp tile rows (a multiple of 16: m16 mma tiles)", lo=16, hi=256),
        Param(
            "WN",
            32,
            "warp tile columns (a multiple of 16: one ldmatrix.x4 feeds two n8 tiles)",
            lo=16,
            hi=256,
        ),
        Param("STAGES", 4, "cp.async ring depth", (2, 3, 4, 5)),
        Param("GROUP_M", 8, "block rows per L2 group in the block order", lo=1, hi=1024),
        Param(
            "MIN_BLOCKS",
            1,
            "__launch_bounds__ minimum blocks per SM (caps registers); default from the register estimate and "
            "shared memory",
            (1, 2, 3, 4),
        ),
        Param(
            "VEC",
            0,
            "gather: 8 = 16-byte cp.async of 8 channels (c, ldx, ldf multiples of 8), 1 = element by element "
            "(any c and layout), 0 = 8 when the problem allows it, else 1",
            (0, 1, 8),
        ),
        Param(
            "PATH",
            0,
            "0 = mma.sync (conv2d, sm_80+); 1 = wgmma (conv2d_wgmma, sm_90a: a producer warpgroup's cp.async "
            "gather into 128B-swizzled stages, wgmma consumers; BK 64, 16-byte gathers)",
            (0, 1),
        ),
        Param(
            "CONSUMERS",
            2,
            "PATH 1: consumer warpgroups (BM / CONSUMERS = 64 or 128 rows each); unused by PATH 0",
            (1, 2),
        ),
    )
    problem_keys = (
        ProblemKey("n", 32, "images (batch)"),
        ProblemKey("h", 28, "input rows"),
        ProblemKey("w", 28, "input columns"),
        ProblemKey("c", 128, "input channels"),
        ProblemKey("k", 128, "output channels (filters)"),
        ProblemKey("r", 3, "filter rows"),
        ProblemKey("s", 3, "filter columns"),
        ProblemKey("stride", 1, "stride (rows and columns)"),
        ProblemKey(
            "pad",
            "same",
            "zero padding on each side of rows and columns, 0-7; same: (r - 1) // 2 (r == s)",
            "choice",
            PADS,
        ),
        ProblemKey("dtype", "bf16", "x and f element type", "choice", tuple(T_CTYPES)),
        ProblemKey(
            "y_dtype",
            "same",
            "y element type (same: dtype's; accumulation is fp32)",
            "choice",
            ("same", *Y_CTYPES),
        ),
        ProblemKey("bias", 0, "1: add bias[k] (fp32) in the epilogue", "choice", (0, 1)),
        ProblemKey("relu", 0, "1: ReLU after the bias", "choice", (0, 1)),
        ProblemKey("ldx", 0, "elements between pixels of x (default c: dense NHWC)", dense="c"),
        ProblemKey("ldf", 0, "elements between filters of f (default r*s*c: dense KRSC)", dense="r * s * c"),
        ProblemKey("ldy", 0, "elements between pixels of y (default k: dense NPQK)", dense="k"),
    )
    host_args = (
        HostArg("n", "int"),
        HostArg("h", "int"),
        HostArg("w", "int"),
        HostArg("c", "int"),
        HostArg("k", "int"),
        HostArg("r", "int"),
        HostArg("s", "int"),
        HostArg("stride", "int"),
        # unsigned: 0 is a padding (the helper refuses int arguments below 1)
        HostArg("pad", "unsigned"),
        HostArg("x", "const {T}*", "in", ("n * h * w", "c"), "dtype", ld="ldx"),
        HostArg("ldx", "int"),
        HostArg("f", "const {T}*", "in", ("k", "r * s * c"), "dtype", ld="ldf"),
        HostArg("ldf", "int"),
        HostArg("bias", "const float*", "in", ("k",), "f32"),
        HostArg("y", "{TY}*", "out", (M_EXPR, "k"), "y_dtype", ld="ldy"),
        HostArg("ldy", "int"),
    )
    smem_kind = "dynamic"
    tolerance = 1e-3
    TOLERANCE_BF16_Y = 4e-3

    # ---- shape --------------------------------------------------------------------------------------------
    def threads(self, p: dict[str, int]) -> int:
        if p.get("PATH"):
            return (p["CONSUMERS"] + 1) * 128  # the producer warpgroup and the consumers
        wm, wn = p["WM"], p["WN"]
        if wm <= 0 or wn <= 0 or p["BM"] % wm or p["BN"] % wn:
            return max(1, p["BM"] * p["BN"] // max(1, wm * wn)) * 32
        return (p["BM"] // wm) * (p["BN"] // wn) * 32

    def threads_message(self, p: dict[str, int], threads: int, implied: int) -> str:
        return (
            f"threads = {threads} but (BM/WM) * (BN/WN) warps of the {p['BM']}x{p['BN']} tile with "
            f"{p['WM']}x{p['WN']} warp tiles need {implied}"
        )

    def size_keys(self) -> list[ProblemKey]:
        """None positional: ``tiles --family conv2d`` takes the convolution's keys by name (the tile model's
        options, ``--n 32 --h 28 ...``)."""
        return []

    @property
    def problem_params(self) -> tuple[str, ...]:
        return ()  # the tile model's options are problem keys, not template parameters

    def problem_ints(self, problem: dict) -> dict[str, int]:
        """The integer keys, with the padding (a choice key: it may be 0) among them: ``same`` is (r - 1) // 2,
        ResNet's (and PyTorch's ``padding=k//2``) for odd square filters."""
        out = super().problem_ints(problem)
        pad = problem.get("pad", "same")
        out["pad"] = (out.get("r", 3) - 1) // 2 if pad == "same" else int(pad)
        return out

    def constants(self, cfg: KernelConfig) -> dict[str, int]:
        """The family's names, with the output size P x Q (the spec expressions' shorthand; launch expressions
        spell it out over the helper's arguments, P_EXPR)."""
        out = super().constants(cfg)
        g = self.geometry(cfg.problem)
        out["P"], out["Q"] = g["p"], g["q"]
        return out

    def geometry(self, problem: dict) -> dict[str, int]:
        """p, q and the GEMM view (M, N, K) of a problem."""
        q = {pk.name: problem.get(pk.name, pk.default) for pk in self.problem_keys if not pk.dense}
        pad = self.problem_ints(q)["pad"]
        p_ = out_size(int(q["h"]), int(q["r"]), int(q["stride"]), pad)
        q_ = out_size(int(q["w"]), int(q["s"]), int(q["stride"]), pad)
        return {
            "p": p_,
            "q": q_,
            "M": int(q["n"]) * p_ * q_,
            "N": int(q["k"]),
            "K": int(q["r"]) * int(q["s"]) * int(q["c"]),
        }

    def vec(self, cfg: KernelConfig) -> int:
        """The kernel's VEC: 8 (16-byte gathers) needs c, ldx and ldf multiples of 8; VEC 0 picks it when the
        problem allows, else 1 (element gathers)."""
        v = cfg.params["VEC"]
        if cfg.params["PATH"]:
            return 8  # conv2d_wgmma has the 16-byte gather only (violations() refuses VEC 1 there)
        return v if v else (8 if self.aligned_problem(cfg) else 1)

    def aligned_problem(self, cfg: KernelConfig) -> bool:
        ints = self.problem_ints(cfg.problem)
        return ints["c"] % CHUNK == 0 and ints["ldx"] % CHUNK == 0 and ints["ldf"] % CHUNK == 0

    def auto_values(self, cfg: KernelConfig) -> dict[str, int]:
        return {"VEC": self.vec(cfg)} if cfg.params["VEC"] == 0 else {}

    def y_dtype(self, cfg: KernelConfig) -> str:
        yd = cfg.problem["y_dtype"]
        return cfg.problem["dtype"] if yd == "same" else yd

    def array_dtype(self, cfg: KernelConfig, arg: HostArg) -> str:
        if arg.name == "y":
            return self.y_dtype(cfg)
        return super().array_dtype(cfg, arg)

    def ctypes(self, cfg: KernelConfig) -> dict[str, str]:
        return {"T": T_CTYPES[cfg.problem["dtype"]], "TY": Y_CTYPES[self.y_dtype(cfg)]}

    def requires(self, cfg: KernelConfig) -> list[tuple[str, str]]:
        out = super().requires(cfg)  # ldx >= c, ldf >= r*s*c, ldy >= k
        out.append(
            (
                "(h + 2 * pad >= r) & (w + 2 * pad >= s)",
                "h + 2*pad >= r and w + 2*pad >= s (the padded image holds the filter: at least one output)",
            )
        )
        out.append(
            (
                f"{M_EXPR} <= 2147483647",
                "n*p*q <= 2^31 - 1 output pixels (the GEMM view's M is an int)",
            )
        )
        if self.vec(cfg) == 8:
            built = (
                "PATH 1 (conv2d_wgmma), 16-byte gathers; generate with PATH 0 and VEC 1 for any layout"
                if cfg.params["PATH"]
                else "VEC 8, 16-byte gathers; generate with VEC 1 for any layout"
            )
            out.append(
                (
                    "((c % 8) == 0) & ((ldx % 8) == 0) & ((ldf % 8) == 0) & (x_align >= 16) & (f_align >= 16)",
                    f"c, ldx and ldf multiples of 8 and x, f 16-byte aligned (this kernel is built with {built})",
                )
            )
        return out

    def layout_rules(self, cfg: KernelConfig) -> list[str]:
        return [
            "y must not overlap x, f or bias (the kernel reads them while blocks write y).",
            "y: any ldy and alignment (2-element stores where y rows are aligned to 2 elements, else one).",
            "bias: k fp32 values, read only when the kernel is built with bias (any alignment of 4 bytes).",
        ]

    def smem_split(self, cfg: KernelConfig) -> tuple[int, int]:
        return 0, self.smem_bytes(cfg)  # extern __shared__: dynamic at any size

    def stages(self, p: dict[str, int]) -> int:
        return p["STAGES"]

    def derive(self, params: dict[str, int], user: set[str], arch: Arch) -> dict[str, int]:
        p = dict(params)
        if p["PATH"]:  # conv2d_wgmma: BK is one swizzle row; its default tile is 128 x 256 over two consumers
            if "BK" not in user:
                p["BK"] = WG_BK
            if "BN" not in user:
                p["BN"] = 256 if p["CONSUMERS"] == 2 else 128
            return (
                p  # MIN_BLOCKS: the parameter's default (1) unless asked; the accumulators fill the registers
            )
        if "MIN_BLOCKS" not in user:
            p["MIN_BLOCKS"] = self.blocks_estimate(p, arch)
        return p

    def blocks_estimate(self, p: dict[str, int], arch: Arch) -> int:
        """Blocks per SM the register estimate (hgemm's: the same accumulators and fragments, + the gather's
        per-pass image origins) and the shared memory allow, 1..4."""
        from smemtile.model.occupancy import occupancy

        threads = self.threads(p)
        if not 32 <= threads <= arch.max_threads_per_block:
            return 1
        passes = max(1, p["BM"] * p["BK"] // CHUNK // threads)
        regs = min(arch.max_regs_per_thread, register_estimate(p["WM"], p["WN"]) + 4 * passes)
        smem = p["STAGES"] * (p["BM"] + p["BN"]) * p["BK"] * 2
        try:
            blocks = occupancy(arch, threads, regs, 0, smem).active_blocks
        except Exception:  # an invalid shape: violations() names it
            return 1
        return max(1, min(4, blocks))

    # ---- contract: every static_assert of conv2d.cu, in words -------------------------------------------------
    def violations(self, cfg: KernelConfig) -> list[str]:
        if cfg.params["PATH"]:
            return self.wgmma_violations(cfg)
        p, out = cfg.params, []
        bm, bn, bk, wm, wn = p["BM"], p["BN"], p["BK"], p["WM"], p["WN"]
        if cfg.arch.cc < (8, 0):
            out.append(f"conv2d needs sm_80 or newer (cp.async, bf16 mma.sync); {cfg.arch.name} has neither")
        if wm % 16:
            out.append(f"WM={wm} must be a multiple of 16: a warp's rows are m16 mma tiles")
        if wn % 16:
            out.append(f"WN={wn} must be a multiple of 16: one ldmatrix.x4 loads B for two n8 mma tiles")
        if bm % wm or bn % wn:
            out.append(f"the {wm}x{wn} warp tiles must tile the {bm}x{bn} block tile (BM % WM, BN % WN)")
        if out:
            return out
        threads = self.threads(p)
        if not 32 <= threads <= 1024:
            out.append(f"(BM/WM)*(BN/WN) = {threads // 32} warps; a block needs 1 to 32")
            return out
        if threads % (bk // CHUNK) or (bm * bk // CHUNK) % threads:
            out.append(
                f"the {bm * bk // CHUNK} 16-byte A chunks of a tile do not split evenly over {threads} "
                "threads in whole rows (BM*BK/8 % THREADS == 0)"
            )
        elif (bn * bk // CHUNK) % threads:
            out.append(
                f"the {bn * bk // CHUNK} 16-byte filter chunks of a tile do not split evenly over {threads} "
                "threads (BN*BK/8 % THREADS == 0)"
            )
        if cfg.problem["pad"] == "same" and cfg.problem["r"] != cfg.problem["s"]:
            out.append(
                f"pad: same pads (r - 1) // 2 on every side, which needs a square filter; this one is "
                f"{cfg.problem['r']}x{cfg.problem['s']}: give pad 0-7"
            )
        if p["VEC"] == 8 and not self.aligned_problem(cfg):
            q = self.problem_ints(cfg.problem)
            out.append(
                f"VEC=8 (16-byte gathers) needs c, ldx and ldf to be multiples of 8 elements; this problem has "
                f"c={q['c']}, ldx={q['ldx']}, ldf={q['ldf']}: use VEC 1 or 0"
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
                    f"{b}: {lay.swizzle} splits 16-byte granules; cp.async and ldmatrix move 16 bytes (M >= 3)"
                )
        return out

    def wgmma_violations(self, cfg: KernelConfig) -> list[str]:
        """Every static_assert of conv2d_wgmma and what its launch needs, in words (PATH 1)."""
        p, out = cfg.params, []
        why = cfg.arch.lacks("wgmma")
        if why:
            out.append(f"PATH 1 (conv2d_wgmma) needs wgmma: {why}; use PATH 0 (mma.sync)")
        if p["BK"] != WG_BK:
            out.append(f"PATH 1 stages K tiles of BK = 64 (one 128-byte swizzle row), not BK {p['BK']}")
        wg_m = p["BM"] // p["CONSUMERS"]
        if p["BM"] % p["CONSUMERS"] or wg_m not in (64, 128):
            out.append(
                f"PATH 1: BM / CONSUMERS = {p['BM']} / {p['CONSUMERS']} must be 64 or 128 rows per consumer "
                "warpgroup"
            )
        if p["BN"] not in (64, 128, 256):
            out.append(f"PATH 1: BN = {p['BN']} must be 64, 128 or 256 (the wgmma n)")
        elif wg_m in (64, 128) and wg_m // 64 * p["BN"] // 2 > 128:
            out.append(
                f"PATH 1: {wg_m // 64 * p['BN'] // 2} fp32 accumulators per thread (BM / CONSUMERS = {wg_m}, "
                f"BN = {p['BN']}); at most 128 (use CONSUMERS 2 or BN <= {256 // (wg_m // 64)})"
            )
        if p["VEC"] == 1:
            out.append("PATH 1 gathers 16-byte chunks only: VEC 1 (element gathers) is PATH 0's")
        if not self.aligned_problem(cfg):
            q = self.problem_ints(cfg.problem)
            out.append(
                f"PATH 1 (16-byte cp.async gathers) needs c, ldx and ldf to be multiples of 8 elements; this "
                f"problem has c={q['c']}, ldx={q['ldx']}, ldf={q['ldf']}: use PATH 0 (its VEC 1 takes any)"
            )
        if cfg.problem["pad"] == "same" and cfg.problem["r"] != cfg.problem["s"]:
            out.append(
                f"pad: same pads (r - 1) // 2 on every side, which needs a square filter; this one is "
                f"{cfg.problem['r']}x{cfg.problem['s']}: give pad 0-7"
            )
        smem = wg_smem(p)
        if smem > cfg.arch.smem_optin_per_block:
            out.append(
                f"PATH 1: shared memory {smem} bytes per block (1024 alignment slack included) exceeds the "
                f"{cfg.arch.name} opt-in limit of {cfg.arch.smem_optin_per_block} bytes; reduce STAGES or BN"
            )
        mb = p["MIN_BLOCKS"]
        if mb > 3:
            out.append(f"PATH 1: MIN_BLOCKS {mb}: conv2d_wgmma keeps 1 to 3 blocks per SM")
        elif mb > 1 and wg_m in (64, 128):
            from smemtile.model.occupancy import occupancy

            need = wg_m // 64 * p["BN"] // 2 + WG_REG_OVERHEAD
            got = occupancy(cfg.arch, self.threads(p), need, 0, smem).active_blocks
            if got < mb:
                out.append(
                    f"PATH 1: MIN_BLOCKS {mb} resident blocks do not fit: {self.threads(p)} threads of about {need} "
                    f"registers (the consumers' {need - WG_REG_OVERHEAD} fp32 accumulators + {WG_REG_OVERHEAD}) and "
                    f"{smem} bytes of shared memory per block allow {got} (ptxas would spill or fail): use "
                    "MIN_BLOCKS 1, fewer STAGES, or a smaller BM / CONSUMERS or BN"
                )
        for name, lay in cfg.layouts.items():
            if name in WG_BUFFERS and lay != self._wg_layout():
                out.append(
                    f"{name}: PATH 1's wgmma descriptors read 128B-swizzled rows of 128 bytes (the gather writes "
                    f"that layout); {lay.describe()} is not what it builds"
                )
        return out

    @staticmethod
    def _wg_layout() -> Layout:
        return Layout.for_tma("128B", 2)

    def name_expression(self, cfg: KernelConfig) -> str:
        if cfg.params["PATH"]:
            return f"conv2d_wgmma<{', '.join(self.template_args(cfg))}>"
        return super().name_expression(cfg)

    def smem_bytes(self, cfg: KernelConfig) -> int:
        if cfg.params["PATH"]:
            return wg_smem(cfg.params)
        return super().smem_bytes(cfg)

    def smem_hint(self, cfg: KernelConfig) -> str:
        return "; reduce BK, STAGES or the block tile"

    def template_args(self, cfg: KernelConfig) -> list[str]:
        p = cfg.params
        if p["PATH"]:  # conv2d_wgmma<T, TC, BM, BN, STAGES, CONSUMERS, GROUP_M, BIAS, RELU[, MIN_BLOCKS]>
            vals = [
                T_CTYPES[cfg.problem["dtype"]],
                Y_CTYPES[self.y_dtype(cfg)],
                p["BM"],
                p["BN"],
                p["STAGES"],
                p["CONSUMERS"],
                p["GROUP_M"],
                "true" if int(cfg.problem["bias"]) else "false",
                "true" if int(cfg.problem["relu"]) else "false",
            ]
            if p["MIN_BLOCKS"] != 1:  # the template's default otherwise (names, and so caches, unchanged)
                vals.append(p["MIN_BLOCKS"])
            return [str(v) for v in vals]
        a, b = cfg.layouts["As"].template_args(), cfg.layouts["Bs"].template_args()
        vals = [
            T_CTYPES[cfg.problem["dtype"]],
            Y_CTYPES[self.y_dtype(cfg)],
            p["BM"],
            p["BN"],
            p["BK"],
            p["WM"],
            p["WN"],
            p["STAGES"],
            p["GROUP_M"],
            p["MIN_BLOCKS"],
            self.vec(cfg),
            "true" if int(cfg.problem["bias"]) else "false",
            "true" if int(cfg.problem["relu"]) else "false",
            *a,
            *b,
        ]
        return [str(v) for v in vals]

    # ---- the kernel's shared memory, written once ---------------------------------------------------------
    def buffers(self, cfg: KernelConfig) -> list[dict]:
        dt = cfg.problem["dtype"]
        if cfg.params["PATH"]:
            return [
                {
                    "name": "As",
                    "dtype": dt,
                    "shape": ["BM", WG_BK],
                    "stages": "STAGES",
                    "note": "gather tile, 128B-swizzled (TMA SWIZZLE_128B's layout, written by cp.async): As[m][kg] "
                    "= x at output pixel m0+m, tap and channel kg0+kg (0 in the halo)",
                },
                {
                    "name": "Bs",
                    "dtype": dt,
                    "shape": ["BN", WG_BK],
                    "stages": "STAGES",
                    "note": "filter tile, 128B-swizzled: Bs[n][kg] = f[(n0+n)*ldf + kg0+kg]",
                },
                {
                    "name": "bars",
                    "dtype": "u64",
                    "shape": ["2 * STAGES"],
                    "note": "mbarriers: full[STAGES] (128 cp.async arrivals), empty[STAGES] (consumer releases)",
                },
            ]
        return [
            {
                "name": "As",
                "dtype": dt,
                "shape": ["BM", "BK"],
                "stages": "STAGES",
                "note": "gather tile: As[m][kg] = x at output pixel m0+m, tap and channel kg0+kg (0 in the halo)",
            },
            {
                "name": "Bs",
                "dtype": dt,
                "shape": ["BN", "BK"],
                "stages": "STAGES",
                "note": "filter tile: Bs[n][kg] = f[(n0+n)*ldf + kg0+kg]",
            },
        ]

    def accesses(self, cfg: KernelConfig) -> list[dict]:
        if cfg.params["PATH"]:
            return self.wgmma_accesses(cfg)
        vec = self.vec(cfg) == 8
        op = "cp.async" if vec else "store"
        how = (
            "16-byte cp.async.cg (zero-fill: halo, padding, tails)"
            if vec
            else ("2-byte global loads, one st.shared.v4 (VEC 1)")
        )
        ca = "(tid + i*THREADS)"
        a_gather = {
            "name": "A_gather",
            "buffer": "As",
            "op": op,
            "width": 16,
            "role": "copy",
            "row": f"{ca} // (BK//8)",
            "col": f"({ca} % (BK//8)) * 8",
            "over": {"i": [0, "BM*BK//8//THREADS"]},
            "note": f"im2col gather: 8 kg of output pixel m0+row, {how}",
        }
        cb = "(tid + j*THREADS)"
        b_copy = {
            "name": "B_copy",
            "buffer": "Bs",
            "op": op,
            "width": 16,
            "role": "copy",
            "row": f"{cb} // (BK//8)",
            "col": f"({cb} % (BK//8)) * 8",
            "over": {"j": [0, "BN*BK//8//THREADS"]},
            "note": f"filter rows (column-major B), {how}",
        }
        if vec:  # the copies' global sources (block 0, K tile 0), elements from x and f in the user's layout
            a_gather["source"] = gather_source(f"{ca} // (BK//8)", f"({ca} % (BK//8)) * 8")
            b_copy["source"] = f"min({cb} // (BK//8), k - 1) * ldf + ({cb} % (BK//8)) * 8"
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
        return [a_gather, b_copy, a_frag, b_frag]

    def wgmma_accesses(self, cfg: KernelConfig) -> list[dict]:
        """PATH 1's shared-memory accesses (conv2d.cu's conv2d_wgmma header): the producer warpgroup's copies
        into the 128B-swizzled stages, the wgmma operand reads as ldmatrix.x4 phases (wgmma_gemm's notation)."""
        producer = [0, 1, 2, 3]
        consumers = list(range(4, 4 * (cfg.params["CONSUMERS"] + 1)))
        core = "the tensor cores read 8-row x 16-byte core matrices: described as ldmatrix.x4 phases"
        a_row, b_row, col = "tid // 8 + 16*i", "tid // 8 + 16*j", "(tid % 8) * 8"
        return [
            {
                "name": "A_gather",
                "buffer": "As",
                "op": "cp.async",
                "width": 16,
                "role": "copy",
                "warps": producer,
                "row": a_row,
                "col": col,
                "over": {"i": [0, "BM//16"]},
                "source": gather_source(a_row, col),
                "note": "im2col gather: 8 kg of output pixel m0+row, 16-byte cp.async.cg (zero-fill: halo, "
                "padding, tails) by the producer warpgroup",
            },
            {
                "name": "B_copy",
                "buffer": "Bs",
                "op": "cp.async",
                "width": 16,
                "role": "copy",
                "warps": producer,
                "row": b_row,
                "col": col,
                "over": {"j": [0, "BN//16"]},
                "source": f"min({b_row}, k - 1) * ldf + {col}",
                "note": "filter rows (K-major B), 16-byte cp.async.cg by the producer warpgroup",
            },
            {
                "name": "A_wgmma",
                "buffer": "As",
                "op": "ldmatrix",
                "matrices": 4,
                "role": "inner",
                "warps": consumers,
                "row": "((warp - 4) // 4) * (BM // CONSUMERS) + mi * 64 + (warp % 4) * 16 + lane % 16",
                "col": "kk * 16 + (lane // 16) * 8",
                "over": {"mi": [0, "BM // CONSUMERS // 64"], "kk": [0, 4]},
                "note": f"wgmma A operand (rows of the warp's consumer warpgroup); {core}",
            },
            {
                "name": "B_wgmma",
                "buffer": "Bs",
                "op": "ldmatrix",
                "matrices": 4,
                "role": "inner",
                "warps": consumers[:4],
                "row": "(warp % 4) * (BN // 4) + nj * 16 + lane % 16",
                "col": "kk * 16 + (lane // 16) * 8",
                "over": {"nj": [0, "BN // 64"], "kk": [0, 4]},
                "note": f"wgmma B operand (all BN rows, per consumer warpgroup); {core}",
            },
        ]

    def default_layouts(self, cfg: KernelConfig) -> dict[str, Layout]:
        """The kernel's conflict-free layouts: hgemm's swizzle for rows of BK 2-byte elements (both tiles); PATH 1:
        the 128B swizzle its wgmma descriptors read."""
        if cfg.params["PATH"]:
            return {b: self._wg_layout() for b in WG_BUFFERS}
        sw = swizzle_for(cfg.params["BK"])
        return {"As": Layout(0, sw), "Bs": Layout(0, sw)}

    # ---- launch -------------------------------------------------------------------------------------------
    def calls(self, cfg: KernelConfig) -> list[KernelCall]:
        return [
            KernelCall(
                (
                    "n",
                    "h",
                    "w",
                    "c",
                    "k",
                    "r",
                    "s",
                    "stride",
                    "pad",
                    P_EXPR,
                    Q_EXPR,
                    "x",
                    "ldx",
                    "f",
                    "ldf",
                    "bias",
                    "y",
                    "ldy",
                ),
                (f"cdiv({M_EXPR}, BM) * cdiv(k, BN)", "1", "1"),
                ("THREADS", "1", "1"),
            )
        ]

    # ---- reference -----------------------------------------------------------------------------------------
    def make_inputs(self, cfg: KernelConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
        q = self.problem_ints(cfg.problem)
        dt = cfg.problem["dtype"]

        def operand(shape):
            v = rng.standard_normal(shape, dtype=np.float32)
            return _bf16_bits(v) if dt == "bf16" else v.astype(np.float16)

        return {
            "x": operand((q["n"] * q["h"] * q["w"], q["c"])),
            "f": operand((q["k"], q["r"] * q["s"] * q["c"])),
            "bias": rng.standard_normal(q["k"], dtype=np.float32),
        }

    def reference(self, cfg: KernelConfig, inputs: dict[str, np.ndarray]) -> np.ndarray:
        """float64 convolution of the fp16 / bf16 inputs (exactly the values the kernel multiplies), as the
        output's 2-D view (n*p*q, k)."""
        q = self.problem_ints(cfg.problem)
        dt = cfg.problem["dtype"]
        n, h, w, c, k, r, s = (q[x] for x in "nhwckrs")
        st, pad = q["stride"], q["pad"]
        x = to_float64(inputs["x"], dt).reshape(n, h, w, c)
        f = to_float64(inputs["f"], dt).reshape(k, r, s, c)
        p_, q_ = out_size(h, r, st, pad), out_size(w, s, st, pad)
        xp = np.zeros((n, h + 2 * pad, w + 2 * pad, c))
        xp[:, pad : pad + h, pad : pad + w, :] = x
        out = np.zeros((n, p_, q_, k))
        for i in range(r):
            for j in range(s):
                win = xp[:, i : i + st * (p_ - 1) + 1 : st, j : j + st * (q_ - 1) + 1 : st, :]
                out += win @ f[:, i, j, :].T
        if int(cfg.problem["bias"]):
            out += np.asarray(inputs["bias"], dtype=np.float64)
        if int(cfg.problem["relu"]):
            out = np.maximum(out, 0.0)
        return out.reshape(n * p_ * q_, k)

    def decode_output(self, cfg: KernelConfig, raw: np.ndarray) -> np.ndarray:
        return to_float64(raw, "bf16") if self.y_dtype(cfg) == "bf16" else raw

    def tolerance_for(self, cfg: KernelConfig) -> float:
        return self.TOLERANCE_BF16_Y if self.y_dtype(cfg) == "bf16" else self.tolerance

    def reads(self, cfg: KernelConfig, array: str) -> bool:
        if array == "bias":
            return bool(int(cfg.problem["bias"]))
        return super().reads(cfg, array)

    def work(self, problem: dict) -> tuple[str, float]:
        g = self.geometry(problem)
        return "tflops", 2.0 * g["M"] * g["N"] * g["K"]

    def small_problem(self, cfg: KernelConfig) -> dict:
        """Whole tiles for ncu: a 1x1 convolution of 8x8 images, two block tiles each way, 8 K tiles."""
        p = cfg.params
        return {
            "n": max(1, 2 * p["BM"] // 64),
            "h": 8,
            "w": 8,
            "c": 8 * p["BK"],
            "k": 2 * p["BN"],
            "r": 1,
            "s": 1,
            "stride": 1,
            "pad": 0,
        }

    def repeats_per_block(self, cfg: KernelConfig) -> int:
        g = self.geometry(cfg.problem)
        return -(-g["K"] // int(cfg.params["BK"]))

    def one_block_reason(self, cfg: KernelConfig, occ: dict) -> str | None:
        p = cfg.params
        if p["PATH"]:
            return (
                f"1 block/SM by design: {wg_smem(p)} bytes of shared memory ({p['STAGES']} stages of "
                f"{p['BM']}x64 + {p['BN']}x64) keep the tensor cores fed; {p['CONSUMERS']} consumer warpgroups"
            )
        if occ.get("limiter") == "registers":
            return (
                f"1 block/SM by design: a {p['WM']}x{p['WN']} warp tile keeps {p['WM'] * p['WN'] // 32} fp32 "
                "accumulators per thread beside its fragments"
            )
        if occ.get("limiter") == "shared_memory":
            return (
                f"1 block/SM by design: {p['STAGES']} cp.async stages of the {p['BM']}x{p['BN']}x{p['BK']} "
                f"tile keep {p['STAGES'] - 1} K tiles in flight (shared memory is the limiter)"
            )
        return None

    def relax(self, cfg: KernelConfig, spilled_bytes: int) -> tuple[KernelConfig, str] | None:
        if cfg.may_change("MIN_BLOCKS") and cfg.params["MIN_BLOCKS"] > 1:
            mb = cfg.params["MIN_BLOCKS"] - 1
            return with_params(cfg, MIN_BLOCKS=mb), f"using MIN_BLOCKS={mb}: more registers per thread"
        return None

    # ---- checklist from the PTX ------------------------------------------------------------------------------
    def pipeline_items(self, cfg: KernelConfig, ptx: str | None) -> list[Item]:

        if cfg.params["PATH"]:
            return self.wgmma_pipeline_items(cfg, ptx)
        stages = cfg.params["STAGES"]
        items = cp_async_ring_items(
            ptx,
            {stages - 2, 0},
            "prologue + K loop",
            f"{stages} stages need {stages - 2} in the K loop and 0 for the drain",
        )
        items.append(swizzle_proof_item(self, cfg))
        return items

    def wgmma_pipeline_items(self, cfg: KernelConfig, ptx: str | None) -> list[Item]:
        """PATH 1's pipeline, read from the compiled PTX: the gather's cp.async completes on the full mbarrier
        (.noinc), the consumers fence the async proxy before wgmma, parity waits, wgmma of the tile's n."""
        import re

        checks = (
            (
                "cp_async_gather",
                "the gather and filter copies are cp.async 16 B",
                r"cp\.async\.cg\.shared\.global",
            ),
            (
                "cp_async_arrive",
                "each producer thread's copies complete on the stage's full mbarrier (arrive.noinc)",
                r"cp\.async\.mbarrier\.arrive\.noinc\.shared::cta\.b64",
            ),
            (
                "proxy_fence",
                "consumers order the generic-proxy cp.async writes before wgmma's async-proxy reads",
                r"fence\.proxy\.async\.shared::cta",
            ),
            (
                "parity_wait",
                "producer and consumers wait by mbarrier phase parity",
                r"mbarrier\.try_wait\.parity",
            ),
            (
                "wgmma",
                f"wgmma.mma_async m64n{cfg.params['BN']}k16 from shared-memory descriptors",
                rf"wgmma\.mma_async\.sync\.aligned\.m64n{cfg.params['BN']}k16",
            ),
        )
        items = []
        for ident, text, pattern in checks:
            if ptx is None:
                items.append(Item(ident, text, NA, "not compiled (no PTX to read)"))
                continue
            n = len(re.findall(pattern, ptx))
            items.append(Item(ident, text, PASS if n else FAIL, f"{n} instruction(s) in the PTX"))
        return items


from smemtile.families.conv2d.tiles import Conv2dTileModel  # noqa: E402  (it imports this package first)

Conv2d.tile_model = Conv2dTileModel
FAMILY = Conv2d()
