"""Family ``wgmma_gemm`` (``wgmma_gemm.cu``, sm_90a): C = A @ B.T on Hopper tensor cores with TMA and mbarriers.

Spec (YAML)::

    arch: sm_90a
    tile: {BM: 128, BN: 256}                       # any parameter below; the rest take their defaults
    stages: 3
    kernel: {family: wgmma_gemm, M: 8192, N: 8192, K: 8192, dtype: bf16}

A is M x K and B is N x K, both row-major (K contiguous: B is nn.Linear's weight, C = A @ B.T), with the user's
leading dimensions ``lda``, ``ldb`` (default K: dense) and ``ldc`` (default N). TMA needs 16-byte global row
strides and 16-byte aligned bases: where ``lda`` (``ldb``) is not a multiple of 8 or A (B) is not 16-byte aligned,
the launch first copies the operand into the workspace with rows of ``cdiv(K, 8) * 8`` elements
(``smemtile_wgmma_repack``) and the tensor map reads that copy; the K tail past K is never read (the tensor maps
end at K and TMA fills out-of-bounds boxes with zeros). C is M x N row-major in the input type, fp32
accumulation. Masked edges everywhere come from the tensor maps: loads past M, N, K read zeros, TMA stores
past M, N are clipped; when ldc % 8 != 0 or C is not 16-byte aligned (no tensor map for C) the epilogue writes the
staged tile with masked 2-byte stores instead.

The kernel (``wgmma_gemm.cu``, whose header has the data flow): warpgroup 0 produces (one thread waits on the
``empty`` mbarrier of a stage, arms ``full`` with the stage's bytes and issues ``cp.async.bulk.tensor`` for A and
B, 128B-swizzled), CONSUMERS warpgroups consume (wait ``full``, four ``wgmma.mma_async.m64nBNk16`` per 64-wide K
step from shared-memory descriptors, release the stage on every CTA of the cluster), ``setmaxnreg`` moves
registers from the producer to the consumers, a persistent grid walks the tiles in grouped order, clusters of 2
CTAs share B (each loads half and multicasts it), and the epilogue goes through shared memory (stmatrix into a
128B-swizzled tile, TMA store).

Shared memory (:meth:`WgmmaGemm.buffers`; every tile a TMA box with CU_TENSOR_MAP_SWIZZLE_128B, whose four notations
and bank tables ``smemtile analyze`` prints): As [BM][64], Bs [BN][64] x STAGES, Cs (EPI 1) [CONSUMERS * BN/64 *
BM/CONSUMERS][64], the mbarriers, plus 1024 bytes so the kernel can align its base to 1024. The tensor cores'
operand reads are described by their 8-row x 16-byte core matrices, as ldmatrix.x4 phases (the bank model's
measured unit); the epilogue's stmatrix.x4 as the kernel issues it.

Defaults: 128 x 256 (two consumer warpgroups of 64 x 256, 128 fp32 accumulators each), the most stages that fit
the 227 KB opt-in limit (4, with the C tile staged in two halves), clusters of 2, warp specialisation with setmaxnreg, one
stage of wgmma in flight, persistent over SMS / CLUSTER clusters, TMA store.
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
    TensorMapArg,
    Workspace,
    select,
)
from smemtile.families.gemm import GemmFamily
from smemtile.model.arch import Arch
from smemtile.model.bf16 import bf16_bits, bf16_value
from smemtile.model.layout import Layout

T_CTYPES = {"f16": "smemtile::f16", "bf16": "smemtile::bf16"}
BK = 64  # one 128-byte swizzle row of 16-bit elements
SLACK = 1024  # dynamic shared memory added so the kernel can align its tiles to 1024 bytes
H200_SMS = (
    132  # cuDeviceGetAttribute(MULTIPROCESSOR_COUNT) on the H200 (bench/results/occupancy_driver_h200.json)
)
TMA_BUFFERS = ("As", "Bs", "Cs")


def lead(k: str = "K") -> str:
    """The leading dimension of a repacked A or B (elements): K rounded up to 16 bytes."""
    return f"cdiv({k}, 8) * 8"


# when the launch repacks A / B into the workspace first: TMA's 16-byte global strides and base alignment
A_REPACK, B_REPACK = "((lda % 8 != 0) | (A_align < 16))", "((ldb % 8 != 0) | (B_align < 16))"
C_TMA = "((ldc % 8 == 0) & (C_align >= 16))"  # C rows TMA can store to (else masked stores)
REPACK_PARAMS = ("const void* src", "int rows", "int cols", "long long lds", "void* dst", "int ldd")


def smem_formula(p: dict) -> int:
    """Dynamic shared memory of a configuration (bytes): slack + stages of A and B + C staging + mbarriers."""
    staging = p["BM"] * p["BN"] * 2 // p["EPI"] if p["EPI"] else 0  # EPI 2: half the tile at a time
    return SLACK + p["STAGES"] * (p["BM"] + p["BN"]) * BK * 2 + staging + 16 * p["STAGES"]


def max_stages(p: dict, limit: int) -> int:
    s = 2
    while s < 8 and smem_formula({**p, "STAGES": s + 1}) <= limit:
        s += 1
    return s


class WgmmaGemm(GemmFamily):
    name = "wgmma_gemm"
    default_arch = "sm_90a"
    summary = (
        "Hopper GEMM C = A @ B.T (bf16/fp16, fp32 accumulation): TMA, mbarriers, wgmma, clusters (sm_90a)"
    )
    file = "wgmma_gemm.cu"
    peak = None
    kernel = "wgmma_gemm"
    signature = (
        "int M",
        "int N",
        "int K",
        "const __grid_constant__ smemtile::TensorMap tmA",
        "const __grid_constant__ smemtile::TensorMap tmB",
        "const __grid_constant__ smemtile::TensorMap tmC",
        "{T}* C",
        "int ldc",
        "int c_tma",
    )
    params = (
        Param("BM", 128, "block tile rows (64 or 128 per consumer warpgroup)", (64, 128, 256)),
        Param(
            "BN",
            256,
            "block tile columns = the wgmma n (at most 128 fp32 accumulators per thread)",
            (64, 128, 192, 256),
        ),
        Param(
            "STAGES", 0, "TMA/mbarrier ring depth; 0 = the most that fit the opt-in shared memory", lo=0, hi=8
        ),
        Param("CONSUMERS", 2, "consumer warpgroups (BM / CONSUMERS rows each)", (1, 2)),
        Param("CLUSTER", 2, "CTAs per cluster along M; 2 = the pair shares B through TMA multicast", (1, 2)),
        Param(
            "WS",
            1,
            "1 = a producer warpgroup issues the TMA loads (warp specialisation); 0 = thread 0 of the "
            "consumers does",
            (0, 1),
        ),
        Param(
            "INFLIGHT", 1, "wgmma groups a consumer keeps in flight before releasing a stage (0 or 1)", (0, 1)
        ),
        Param(
            "EPI",
            2,
            "epilogue: 1 = stmatrix into a swizzled staging tile + TMA store; 2 = the same in two "
            "halves (half the staging memory: one more stage); 0 = stores from registers",
            (0, 1, 2),
        ),
        Param("GROUP_M", 8, "cluster rows per group of the tile order", lo=1, hi=1024),
        Param(
            "SETMAXNREG",
            1,
            "1 = producer gives registers to the consumers (setmaxnreg; WS 1 and 2 consumers)",
            (0, 1),
        ),
        Param(
            "PERSISTENT",
            1,
            "1 = grid of at most SMS CTAs looping over the tiles; 0 = one cluster per tile",
            (0, 1),
        ),
        Param(
            "SMS",
            H200_SMS,
            "CTAs the persistent grid may keep resident (one per SM: the SM count, 132 on the H200)",
            lo=1,
            hi=4096,
        ),
    )
    problem_keys = (
        ProblemKey("M", 4096, "rows of A and C"),
        ProblemKey("N", 4096, "rows of B, columns of C"),
        ProblemKey("K", 4096, "columns of A and B (the reduction)"),
        ProblemKey("dtype", "bf16", "element type of A, B and C", "choice", tuple(T_CTYPES)),
        ProblemKey("lda", 0, "leading dimension of A (elements between rows; default K: dense)", dense="K"),
        ProblemKey("ldb", 0, "leading dimension of B (N x K row-major; default K: dense)", dense="K"),
        ProblemKey("ldc", 0, "leading dimension of C (default N: dense)", dense="N"),
    )
    host_args = (
        HostArg("M", "int"),
        HostArg("N", "int"),
        HostArg("K", "int"),
        HostArg("A", "const {T}*", "in", ("M", "K"), "dtype", ld="lda"),
        HostArg("lda", "int"),
        HostArg("B", "const {T}*", "in", ("N", "K"), "dtype", ld="ldb"),
        HostArg("ldb", "int"),
        HostArg("C", "{T}*", "out", ("M", "N"), "dtype", ld="ldc"),
        HostArg("ldc", "int"),
    )
    smem_kind = "auto"
    # bf16 output: rounding to 8 significant bits gives <= 2^-9 of an element, relative to max |C| (compare())
    tolerance = 5e-3

    # ---- configuration ---------------------------------------------------------------------------------------
    def threads(self, p: dict[str, int]) -> int:
        return (p["CONSUMERS"] + p["WS"]) * 128

    def derive(self, params: dict[str, int], user: set[str], arch: Arch) -> dict[str, int]:
        p = dict(params)
        if "SETMAXNREG" not in user:  # the register split needs a producer and pays with two consumers
            p["SETMAXNREG"] = int(p["WS"] == 1 and p["CONSUMERS"] == 2)
        if "INFLIGHT" not in user and not p["WS"]:
            p["INFLIGHT"] = 0  # thread 0 refills a stage right after releasing it
        if "EPI" not in user and p["EPI"] == 2 and p["BN"] % 128:
            p["EPI"] = 1  # two halves need two 64-column panels
        if not p["STAGES"]:
            p["STAGES"] = max_stages(p, arch.smem_optin_per_block)
        return p

    def ctypes(self, cfg: KernelConfig) -> dict[str, str]:
        return {"T": T_CTYPES[cfg.problem["dtype"]]}

    def violations(self, cfg: KernelConfig) -> list[str]:
        p, out = cfg.params, []
        lacks = getattr(cfg.arch, "lacks", None)
        why = lacks("wgmma") if lacks is not None else None
        if lacks is None or why:
            out.append(
                f"wgmma and setmaxnreg need sm_90a (architecture-specific Hopper code), not {cfg.arch.name}"
                + (f": {why}" if why else "")
            )
        wg_m = p["BM"] // p["CONSUMERS"]
        if p["BM"] % p["CONSUMERS"] or wg_m not in (64, 128):
            out.append(
                f"BM / CONSUMERS = {p['BM']} / {p['CONSUMERS']} must be 64 or 128 rows per consumer warpgroup"
            )
        elif wg_m // 64 * p["BN"] // 2 > 128:
            out.append(
                f"{wg_m // 64 * p['BN'] // 2} fp32 accumulators per thread (BM/CONSUMERS = {wg_m}, BN = "
                f"{p['BN']}); at most 128 fit next to the addresses (use BN <= {256 // (wg_m // 64)})"
            )
        if (p["BN"] // p["CLUSTER"]) % 8:
            out.append(
                f"each CTA of a cluster loads BN / CLUSTER = {p['BN'] // p['CLUSTER']} rows of B: whole 8-row "
                "swizzle atoms needed"
            )
        if p["EPI"] == 2 and p["BN"] % 128:
            out.append(
                f"EPI 2 stages the C tile in two halves of whole 64-column panels: BN = {p['BN']} cannot"
            )
        if not 2 <= p["STAGES"] <= 8:
            out.append(f"STAGES = {p['STAGES']}: the ring needs 2..8 stages")
        if not p["WS"] and p["INFLIGHT"]:
            out.append("WS 0 refills a stage right after its consumers release it: INFLIGHT must be 0")
        if p["SETMAXNREG"] and not p["WS"]:
            out.append("SETMAXNREG needs the producer warpgroup (WS 1) to take registers from")
        if p["SETMAXNREG"] and p["CONSUMERS"] != 2:
            out.append("SETMAXNREG is for 2 consumer warpgroups (384 threads capped at 168 registers each)")
        smem = smem_formula(p)
        if smem > cfg.arch.smem_optin_per_block:
            out.append(
                f"shared memory {smem} bytes per block (1024 alignment slack included) exceeds the "
                f"{cfg.arch.name} opt-in limit of {cfg.arch.smem_optin_per_block} bytes; reduce STAGES (at "
                f"most {max_stages(p, cfg.arch.smem_optin_per_block)} fit) or use EPI 0"
            )
        for name, lay in cfg.layouts.items():
            if name in TMA_BUFFERS and lay != self._tma_layout():
                out.append(
                    f"{name}: the kernel's tensor maps and wgmma descriptors use TMA 128B (rows of 128 "
                    f"bytes); {lay.describe()} is not what it builds"
                )
        return out

    def smem_hint(self, cfg: KernelConfig) -> str:
        return "; reduce STAGES"

    def template_args(self, cfg: KernelConfig) -> list[str]:
        p = cfg.params
        vals = [
            T_CTYPES[cfg.problem["dtype"]],
            p["BM"],
            p["BN"],
            p["STAGES"],
            p["CONSUMERS"],
            p["CLUSTER"],
            p["WS"],
            p["INFLIGHT"],
            p["EPI"],
            p["GROUP_M"],
            p["SETMAXNREG"],
        ]
        return [str(v) for v in vals]

    def smem_bytes(self, cfg: KernelConfig) -> int:
        return smem_formula(cfg.params)

    @staticmethod
    def _tma_layout() -> Layout:
        return Layout.for_tma("128B", 2)

    def default_layouts(self, cfg: KernelConfig) -> dict[str, Layout]:
        return {b["name"]: self._tma_layout() for b in self.buffers(cfg) if b["name"] in TMA_BUFFERS}

    # ---- shared memory as spec expressions ---------------------------------------------------------------------
    def buffers(self, cfg: KernelConfig) -> list[dict]:
        dt = cfg.problem["dtype"]
        out = [
            {
                "name": "As",
                "dtype": dt,
                "shape": ["BM", BK],
                "stages": "STAGES",
                "note": "A tile, TMA box {64, BM}: As[m][k] = A[m0 + m][k0 + k]",
            },
            {
                "name": "Bs",
                "dtype": dt,
                "shape": ["BN", BK],
                "stages": "STAGES",
                "note": "B tile, TMA box {64, BN / CLUSTER} per CTA (multicast): Bs[n][k] = B[n0 + n][k0 + k]",
            },
        ]
        if cfg.params["EPI"]:
            out.append(
                {
                    "name": "Cs",
                    "dtype": dt,
                    "shape": ["CONSUMERS * (BN // 64 // EPI) * (BM // CONSUMERS)", BK],
                    "note": "C staging: per consumer, BN/64/EPI panels of [BM/CONSUMERS][64] (TMA store boxes)",
                }
            )
        out.append(
            {
                "name": "bars",
                "dtype": "u64",
                "shape": ["2 * STAGES"],
                "note": "mbarriers: full[STAGES] (TMA bytes), empty[STAGES] (consumer releases)",
            }
        )
        return out

    def _consumer_warps(self, p: dict) -> list[int]:
        return list(range(4 * p["WS"], 4 * (p["WS"] + p["CONSUMERS"])))

    def accesses(self, cfg: KernelConfig) -> list[dict]:
        p = cfg.params
        warps = self._consumer_warps(p)
        c = f"((warp - {4 * p['WS']}) // 4)"  # consumer warpgroup of the warp
        core = "the tensor cores read 8-row x 16-byte core matrices: described as ldmatrix.x4 phases"
        out = [
            {
                "name": "A_wgmma",
                "buffer": "As",
                "op": "ldmatrix",
                "matrices": 4,
                "role": "inner",
                "warps": warps,
                "row": f"{c} * (BM // CONSUMERS) + mi * 64 + (warp % 4) * 16 + lane % 16",
                "col": "kk * 16 + (lane // 16) * 8",
                "over": {"mi": [0, "BM // CONSUMERS // 64"], "kk": [0, 4]},
                "note": f"wgmma A operand (rows of consumer {c}); {core}",
            },
            {
                "name": "B_wgmma",
                "buffer": "Bs",
                "op": "ldmatrix",
                "matrices": 4,
                "role": "inner",
                "warps": warps[:4],
                "row": "(warp % 4) * (BN // 4) + nj * 16 + lane % 16",
                "col": "kk * 16 + (lane // 16) * 8",
                "over": {"nj": [0, "BN // 64"], "kk": [0, 4]},
                "note": f"wgmma B operand (all BN rows, per consumer warpgroup); {core}",
            },
        ]
        if p["EPI"]:
            chunk = "(2 * q + lane // 16)"
            out.append(
                {
                    "name": "C_stmatrix",
                    "buffer": "Cs",
                    "op": "stmatrix",
                    "matrices": 4,
                    "role": "epilogue",
                    "warps": warps,
                    "row": f"({c} * (BN // 64 // EPI) + ({chunk} // 8) % (BN // 64 // EPI)) * (BM // CONSUMERS) + mi * 64"
                    " + (warp % 4) * 16"
                    " + ((lane // 8) % 2) * 8 + lane % 8",
                    "col": f"({chunk} % 8) * 8",
                    "over": {"mi": [0, "BM // CONSUMERS // 64"], "q": [0, "BN // 16"]},
                    "note": "accumulators (packed pairs) -> the staging tile, stmatrix.x4 per 16 columns",
                }
            )
        return out

    # ---- launch ------------------------------------------------------------------------------------------------
    def workspaces(self, cfg: KernelConfig) -> list[Workspace]:
        return [
            Workspace(
                "Ap",
                f"M * {lead()}",
                "unsigned short",
                when=A_REPACK,
                fallback="A",
                doc="A with rows of cdiv(K, 8) * 8 elements, for lda % 8 != 0 or A not 16-byte aligned",
            ),
            Workspace(
                "Bp",
                f"N * {lead()}",
                "unsigned short",
                when=B_REPACK,
                fallback="B",
                doc="B with rows of cdiv(K, 8) * 8 elements, for ldb % 8 != 0 or B not 16-byte aligned",
            ),
        ]

    def tensor_maps(self, cfg: KernelConfig) -> list[TensorMapArg]:
        return [
            TensorMapArg(
                "tmA",
                "Ap",
                ("K", "M"),
                f"{select(A_REPACK, lead(), 'lda')} * 2",
                (str(BK), "BM"),
                doc="A (or its repacked copy): box {64, BM}",
            ),
            TensorMapArg(
                "tmB",
                "Bp",
                ("K", "N"),
                f"{select(B_REPACK, lead(), 'ldb')} * 2",
                (str(BK), "BN // CLUSTER"),
                doc="B (or its repacked copy): box {64, BN / CLUSTER} (each CTA of a cluster loads its half)",
            ),
            TensorMapArg(
                "tmC",
                "C",
                ("N", "M"),
                "ldc * 2",
                (str(BK), "BM // CONSUMERS"),
                when=C_TMA,
                doc="C: box {64, BM / CONSUMERS} (TMA store) where ldc % 8 == 0 and C is 16-byte aligned",
            ),
        ]

    def layout_rules(self, cfg: KernelConfig) -> list[str]:
        return [
            "C must not overlap A or B (TMA reads A and B while the epilogue writes C).",
            "A, B: any lda >= K, ldb >= K and 2-byte alignment (rows TMA cannot read are repacked first); "
            "C: TMA stores where ldc % 8 == 0 and C is 16-byte aligned, masked stores otherwise.",
        ]

    def calls(self, cfg: KernelConfig) -> list[KernelCall]:
        tiles = "cdiv(cdiv(M, BM), CLUSTER) * cdiv(N, BN)"  # cluster tiles
        grid = f"(PERSISTENT * min({tiles}, max(1, SMS // CLUSTER)) + (1 - PERSISTENT) * {tiles}) * CLUSTER"
        repacks = [
            KernelCall(
                (op, rows, "K", f"ld{op.lower()}", f"{op}p", lead()),
                ("cdiv(K, 2048)", f"min({rows}, 65535)", "1"),
                ("256", "1", "1"),
                kernel="smemtile_wgmma_repack",
                params=REPACK_PARAMS,
                when=when,
                doc=f"repack: {op} into rows of cdiv(K, 8) * 8 elements (TMA's 16-byte strides)",
            )
            for op, rows, when in (("A", "M", A_REPACK), ("B", "N", B_REPACK))
        ]
        return [
            *repacks,
            KernelCall(
                ("M", "N", "K", "tmA", "tmB", "tmC", "C", "ldc", C_TMA),
                (grid, "1", "1"),
                ("THREADS", "1", "1"),
                cluster=("CLUSTER", "1", "1"),
            ),
        ]

    # ---- data and checks ---------------------------------------------------------------------------------------
    def make_inputs(self, cfg: KernelConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Dense M x K and N x K operands (the launcher lays them out with the problem's lda / ldb and poisons
        the bytes between rows: a kernel that reads past K fails the check)."""
        m, n, k = (int(cfg.problem[x]) for x in "MNK")
        out = {}
        for name, rows in (("A", m), ("B", n)):
            x = rng.standard_normal((rows, k), dtype=np.float32)
            out[name] = bf16_bits(x) if cfg.problem["dtype"] == "bf16" else x.astype(np.float16)
        return out

    def _values(self, cfg: KernelConfig, a: np.ndarray) -> np.ndarray:
        if cfg.problem["dtype"] == "bf16":
            return bf16_value(a).astype(np.float64)
        return np.asarray(a, dtype=np.float16).astype(np.float64)

    def reference(self, cfg: KernelConfig, inputs: dict[str, np.ndarray]) -> np.ndarray:
        k = int(cfg.problem["K"])
        a = self._values(cfg, inputs["A"])[:, :k]
        b = self._values(cfg, inputs["B"])[:, :k]
        return a @ b.T

    def decode_output(self, cfg: KernelConfig, raw: np.ndarray) -> np.ndarray:
        return bf16_value(raw) if cfg.problem["dtype"] == "bf16" else raw

    def k_step(self, cfg: KernelConfig) -> int:
        return BK

    def small_problem(self, cfg: KernelConfig) -> dict:
        p = cfg.params  # whole clusters along M
        return {**super().small_problem(cfg), "M": 2 * p["BM"] * p["CLUSTER"]}

    def one_block_reason(self, cfg: KernelConfig, occ: dict) -> str | None:
        p = cfg.params
        return (
            f"1 block/SM by design: {smem_formula(p)} bytes of shared memory ({p['STAGES']} stages of "
            f"{p['BM']}x64 + {p['BN']}x64) keep the tensor cores fed; {p['CONSUMERS']} consumer warpgroups"
        )

    def pipeline_items(self, cfg: KernelConfig, ptx: str | None) -> list[Item]:
        """The Hopper pipeline, read from the compiled PTX (the artefact)."""
        checks = (
            (
                "tma_load",
                "TMA loads (cp.async.bulk.tensor) complete on an mbarrier",
                r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\.mbarrier::complete_tx::bytes",
            ),
            (
                "wgmma",
                f"wgmma.mma_async m64n{cfg.params['BN']}k16 from shared-memory descriptors",
                rf"wgmma\.mma_async\.sync\.aligned\.m64n{cfg.params['BN']}k16",
            ),
            (
                "parity_wait",
                "consumers and producer wait by mbarrier phase parity",
                r"mbarrier\.try_wait\.parity",
            ),
            (
                "expect_tx",
                "each stage's full barrier is armed with its byte count",
                r"mbarrier\.arrive\.expect_tx",
            ),
        )
        extra = []
        if cfg.params["CLUSTER"] > 1:
            extra.append(
                ("multicast", "B reaches both CTAs of the cluster by TMA multicast", r"\.multicast::cluster")
            )
        if cfg.params["SETMAXNREG"]:
            extra.append(
                ("setmaxnreg", "registers move from the producer to the consumers", r"setmaxnreg\.inc")
            )
        if cfg.params["EPI"]:
            extra.append(
                (
                    "tma_store",
                    "epilogue: stmatrix, fence.proxy.async, TMA store",
                    r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta",
                )
            )
        items = []
        for ident, text, pattern in (*checks, *extra):
            if ptx is None:
                items.append(Item(ident, text, NA, "not compiled (no PTX to read)"))
                continue
            n = len(re.findall(pattern, ptx))
            items.append(Item(ident, text, PASS if n else FAIL, f"{n} instruction(s) in the PTX"))
        return items

    # ---- the tile model's view (smemtile tiles --arch sm_90a --dtype bf16) ---------------------------------------
    tiles_help = "f16 / bf16 on sm_90a (TMA + wgmma)"

    def tiles_for(self, dtype: str, arch, vendor: str = "nvidia") -> bool:
        """Whether ``smemtile tiles`` ranks this family for ``dtype`` on ``arch`` (wgmma targets only)."""
        return vendor == "nvidia" and dtype in T_CTYPES and arch.lacks("wgmma") is None

    def tile_arch(self, arch: str) -> str:
        from smemtile.model.arch import get_arch

        a = get_arch(arch)
        if a.lacks("wgmma") and a.cc == (9, 0):  # asked for the plain target: rank what runs there as sm_90a
            return a.base + "a"
        return arch

    def tiles_seam(self, problem) -> dict | None:
        from smemtile.families.wgmma_gemm.tiles import seam

        return seam(self, problem)

    def tile_spec(self, p, s) -> dict:
        from smemtile.families.wgmma_gemm.tiles import tile_spec

        return tile_spec(self, p, s)


from smemtile.families.wgmma_gemm.tiles import WgmmaTileModel  # noqa: E402  (it imports this package first)

WgmmaGemm.tile_model = WgmmaTileModel
FAMILY = WgmmaGemm()
