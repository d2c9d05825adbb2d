"""Block-tile recommendations for a GEMM ``C[M,N] = A[M,K] @ B[K,N]``: candidates, pruning with reasons, a
stated performance model, a ranking. Pure Python + numpy (no CUDA, no printing).

Candidates
    NVIDIA fp32: the ``sgemm`` family (SIMT FFMA, register tile TMxTN per thread, warps of 4x8 lanes), checked
    against the family's own rules (``Problem.contract``, given by the caller: the model imports no family)
    so every survivor compiles. Other dtypes (tf32, f16,
    bf16) and AMD: tensor/matrix-core tiles (BM, BN multiples of the mma shape, BK >= 16, >= 32 on AMD MFMA),
    as Triton would run them (model only; exported as ``triton.Config``).
    num_warps {2, 4, 8} (AMD: wavefronts of 64), num_stages >= 2 with cp.async (>= 1 on AMD and pre-sm_80),
    GROUP_SIZE_M {4, 8, 16}.

Model (one number per candidate: predicted time, hence TFLOP/s; every factor is reported)
    t = max(t_sm, t_dram, t_l2) + 3 us launch
    t_sm    the busiest SM runs ceil(tiles / SMs) tiles, ``b`` at a time (occupancy): each round of ``r``
            tiles takes r * t_tile / eff(r); t_tile = 2*BM*BN*Kpad / (peak_per_SM * inner). This is wave
            quantisation and occupancy in one formula.
    inner   fraction of issue / shared-memory cycles that are FMA (SIMT) or mma (tensor core): per k step,
            SIMT: TM*TN FFMA vs (TM+TN)/4 LDS.128 (2 wavefronts each, from the bank model) + copies;
            tensor core: mma cycles vs ldmatrix + cp.async bytes at 128 B/clk/SM.
    eff(r)  latency hiding: min(1, warps / W_SAT) ** X (SIMT: W_SAT 32, X 0.4, fitted to the measured
            128x128x8 sgemm at 2 blocks/SM on the H200; tensor / matrix core: 8 warps, 0.5), capped by
            Little's law on the cp.async pipeline: (stages - 1) tiles in flight per block against 600 ns.
    t_dram  bytes from DRAM / bandwidth. Blocks in flight (SMs x b) cover r tile rows and c tile columns in
            the grouped launch order (GROUP_SIZE_M); each wave reads (r*BM + c*BN)*K elements; never less than
            A + B once; A + B that fit half the L2 are read once.
    t_l2    L2 -> SM bytes (tiles x (BM+BN) x K) / L2 bandwidth.
    Padding waste (tile overhang over M, N, K) is computed work that is thrown away.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from smemtile.errors import SpecError
from smemtile.model.sizes import parse_size
from smemtile.model.tiling_gpus import AMD_ARCHS, GpuPeak, get_gpu, vendor_of

DTYPE_BYTES = {"f32": 4, "tf32": 4, "f16": 2, "bf16": 2}
GROUPS = (4, 8, 16)
WARPS = (2, 4, 8)
SPLITS = (2, 4, 8)  # sgemm SPLIT_K values tried when the grid is under one block per SM
MIN_K_STEPS_PER_SLICE = 8  # a K slice keeps at least this many BK steps (the pipeline needs a few to fill)
LAUNCH_S = 3e-6
MEM_LATENCY_S = 600e-9
OVERLAP = 0.15
SIMT_W_SAT, SIMT_X = 32, 0.4
MMA_W_SAT, MMA_X = 8, 0.5
SMEM_BYTES_PER_CLK = 128  # shared memory / LDS: 32 banks x 4 bytes per clock
A_PAD_SIMT = (
    4  # floats per As row: the fix search's layout for the sgemm kernel (cp.async transposing copies)
)


@dataclass(frozen=True)
class Problem:
    m: int
    n: int
    k: int
    dtype: str
    arch: str
    vendor: str
    gpu: GpuPeak
    # SIMT candidates: the sgemm family's rules, ``contract(tile) -> (broken rules, threads, smem bytes)``
    contract: Callable | None = field(default=None, compare=False, repr=False)

    @property
    def simt(self) -> bool:
        """fp32 on NVIDIA: the sgemm family's FFMA kernel (no tensor cores)."""
        return self.dtype == "f32" and self.vendor == "nvidia"

    @property
    def elem(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    def to_dict(self) -> dict:
        return {"M": self.m, "N": self.n, "K": self.k, "dtype": self.dtype, "arch": self.arch,
                "vendor": self.vendor, "gpu": self.gpu.to_dict()}  # fmt: skip


@dataclass(frozen=True)
class TileConfig:
    """The knobs of one candidate. SIMT candidates also carry TM, TN and MIN_BLOCKS (sgemm template)."""

    bm: int
    bn: int
    bk: int
    warps: int
    stages: int
    group_m: int
    tm: int = 0
    tn: int = 0
    min_blocks: int = 0
    waves_per_eu: int = 0  # AMD hint: the occupancy the model expects (waves per SIMD)
    split_k: int = 1  # SIMT: K slices added into C with atomics (sgemm SPLIT_K), for grids under one wave

    def shape_key(self) -> tuple:
        return (self.bm, self.bn, self.bk, self.warps, self.tm, self.tn, self.split_k)

    @property
    def label(self) -> str:
        reg = f" {self.tm}x{self.tn}" if self.tm else ""
        split = f" splitk{self.split_k}" if self.split_k > 1 else ""
        return f"{self.bm}x{self.bn}x{self.bk}{reg} w{self.warps} s{self.stages} g{self.group_m}{split}"

    def sgemm_params(self) -> dict:
        """Template parameters of the sgemm family (SIMT candidates only)."""
        d = {"BM": self.bm, "BN": self.bn, "BK": self.bk, "TM": self.tm, "TN": self.tn,
             "STAGES": self.stages, "GROUP_M": self.group_m, "MIN_BLOCKS": self.min_blocks}  # fmt: skip
        if self.split_k > 1:
            d["SPLIT_K"] = self.split_k
        return d

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items()
                if (v and not (k == "split_k" and v == 1)) or k in ("bm", "bn", "bk", "warps", "stages")}  # fmt: skip


@dataclass(frozen=True)
class Scored:
    """A candidate that fits, with every factor of the model (``to_dict`` for JSON)."""

    cfg: TileConfig
    threads: int
    regs: int
    smem_bytes: int
    smem_pad_bytes: int
    blocks_per_sm: int
    occupancy: float
    limiter: str
    tiles: int
    waves: float
    wave_eff: float
    inner_eff: float
    latency_eff: float
    pad_eff: float
    dram_bytes: float
    dram_bytes_ungrouped: float
    l2_bytes: float
    intensity: float
    ridge: float
    bound: str  # compute | dram | l2
    time_s: float
    tflops: float
    roofline_frac: float
    rank: int = 0
    reason: str = ""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["cfg"] = self.cfg.to_dict()
        d["label"] = self.cfg.label
        return d


@dataclass(frozen=True)
class Rejected:
    cfg: TileConfig
    kind: str  # contract | shared_memory | registers | occupancy | padding | stages | mma_shape | dominated
    reason: str
    alike: int = 1  # configurations (other stages / GROUP_SIZE_M) rejected for the same reason

    def to_dict(self) -> dict:
        return {"cfg": self.cfg.to_dict(), "label": self.cfg.label, "kind": self.kind, "reason": self.reason,
                "alike": self.alike}  # fmt: skip


@dataclass(frozen=True)
class TileReport:
    problem: Problem
    ranked: tuple[Scored, ...]
    rejected: tuple[Rejected, ...]
    counts: dict = field(default_factory=dict)

    def to_dict(self, top: int | None = None, rejected: int | None = None) -> dict:
        from smemtile.model.tiling_model import MODEL_TEXT

        return {
            "problem": self.problem.to_dict(),
            "model": MODEL_TEXT,
            "counts": dict(self.counts),
            "candidates": [s.to_dict() for s in self.ranked[:top]],
            "rejected": [r.to_dict() for r in self.rejected[:rejected]],
        }


def make_problem(m, n, k, dtype: str = "f32", arch: str | None = None, vendor: str | None = None,
                 gpu: str | None = None, sms: int | None = None, contract: Callable | None = None) -> Problem:  # fmt: skip
    """Validate the inputs (SpecError, exit 2, one line each) and pick the GPU row."""
    dims = []
    for key, v in (("M", m), ("N", n), ("K", k)):
        text = str(v).strip()
        try:  # 4096, or 4K / 1M (powers of 1024, as sizes are written elsewhere in smemtile)
            iv = int(text) if text.lstrip("-").isdigit() else parse_size(text, key=key)
        except (ValueError, SpecError):
            raise SpecError(f"expected a positive integer such as 4096 or 4K, got {v!r}", key=key) from None
        if not 1 <= iv <= 2**31 - 1:
            raise SpecError(f"must be between 1 and 2^31-1, got {iv}", key=key)
        dims.append(iv)
    dt = str(dtype).lower()
    if dt not in DTYPE_BYTES:
        raise SpecError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPE_BYTES)}", key="--dtype")
    vend = (vendor or "").lower() or (vendor_of(arch) if arch else "nvidia")
    if vend not in ("nvidia", "amd"):
        raise SpecError(f"unknown vendor {vendor!r}; choose nvidia or amd", key="--vendor")
    arch_name = _arch_name(arch or ("gfx942" if vend == "amd" else "sm_90"), vend)
    return Problem(*dims, dt, arch_name, vend, get_gpu(gpu, arch_name, sms=sms), contract)


def _arch_name(arch: str, vendor: str) -> str:
    text = str(arch).strip().lower()
    if vendor == "amd":
        if text not in AMD_ARCHS:
            raise SpecError(f"unknown AMD architecture {arch!r}; known: {', '.join(AMD_ARCHS)}", key="--arch")
        return text
    if text.startswith("gfx"):
        raise SpecError(f"{arch} is an AMD target; pass --vendor amd (or an sm_XX arch)", key="--arch")
    from smemtile.model.arch import get_arch

    return get_arch(text).base  # sm_90a ranks as sm_90: same limits and GPU rows


def recommend(m, n, k, dtype: str = "f32", arch: str | None = None, *, vendor: str | None = None,
              gpu: str | None = None, sms: int | None = None, contract: Callable | None = None) -> TileReport:  # fmt: skip
    """Every candidate for the problem, ranked by the model's predicted time; rejected ones with reasons.
    ``contract`` checks SIMT candidates against the sgemm family (smemtile.pipeline.tiles passes it)."""
    from smemtile.model.tiling_model import evaluate

    p = make_problem(m, n, k, dtype, arch, vendor, gpu, sms, contract)
    scored, rejected = evaluate(p, list(candidates(p)))
    if len({s.cfg.shape_key() for s in scored}) < 3:  # a tiny problem: (nearly) every tile overhangs
        scored, rejected = evaluate(p, list(candidates(p)), prune_padding=False)
    best: dict[tuple, Scored] = {}
    for s in scored:  # one entry per tile shape: the best stages / GROUP_SIZE_M (ties: fewer stages, group 8)
        key = s.cfg.shape_key()
        cur = best.get(key)
        if cur is None or _better(s, cur):
            best[key] = s
    rejected = _dedupe(rejected)
    dominated = []
    for s in scored:
        top = best[s.cfg.shape_key()]
        if s is not top:
            dominated.append(
                Rejected(
                    s.cfg,
                    "dominated",
                    f"same tile as {top.cfg.label}, which the model predicts faster "
                    f"({s.tflops:.1f} vs {top.tflops:.1f} TFLOP/s)",
                )  # fmt: skip
            )
    ranked = sorted(best.values(), key=lambda s: (s.time_s, s.smem_bytes, s.cfg.label))
    from smemtile.model.tiling_model import explain

    ranked = [replace(s, rank=i + 1, reason=explain(s, ranked[0], p)) for i, s in enumerate(ranked)]
    order = {"shared_memory": 0, "registers": 1, "occupancy": 2, "contract": 3, "mma_shape": 4, "padding": 5,
             "stages": 6, "dominated": 7}  # fmt: skip
    rej = sorted(
        rejected + dominated, key=lambda r: (order.get(r.kind, 9), -r.cfg.bm * r.cfg.bn, r.cfg.label)
    )
    counts = {"generated": len(scored) + sum(r.alike for r in rejected), "ranked": len(ranked),
              "rejected": sum(r.alike for r in rej)}  # fmt: skip
    for r in rej:
        counts[f"rejected_{r.kind}"] = counts.get(f"rejected_{r.kind}", 0) + r.alike
    return TileReport(p, tuple(ranked), tuple(rej), counts)


def _dedupe(rejected: list[Rejected]) -> list[Rejected]:
    """One entry per tile shape and reason; ``alike`` counts the stages / group variants it stands for."""
    seen: dict[tuple, Rejected] = {}
    for r in rejected:
        key = (r.cfg.shape_key(), r.kind, r.reason)
        cur = seen.get(key)
        seen[key] = r if cur is None else replace(cur, alike=cur.alike + 1)
    return list(seen.values())


def _better(a: Scored, b: Scored) -> bool:
    if not math.isclose(a.time_s, b.time_s, rel_tol=1e-9):
        return a.time_s < b.time_s
    # Ties (the model sees no difference): 3 stages (a common default that absorbs latency spikes), group 8.
    return (abs(a.cfg.stages - 3), abs(a.cfg.group_m - 8)) < (abs(b.cfg.stages - 3), abs(b.cfg.group_m - 8))


def candidates(p: Problem):
    """The raw space (before any pruning), as TileConfig values."""
    amd = p.vendor == "amd"
    if p.simt:
        from smemtile.model.arch import get_arch

        cp = get_arch(p.arch).has_cp_async
        stages = (2, 3, 4, 5) if cp else (2,)
        for bm in (16, 32, 64, 128, 256):
            for bn in (32, 64, 128, 256):
                # split K only when the grid is under one block per SM (skinny problems)
                under = math.ceil(p.m / bm) * math.ceil(p.n / bn) < p.gpu.sms
                for tm in (4, 8):
                    for tn in (4, 8):
                        if bm % (4 * tm) or bn % (8 * tn):
                            continue
                        threads = bm * bn // (tm * tn)
                        if threads // 32 not in WARPS or threads % 32:
                            continue
                        for bk in (8, 16, 32):
                            splits = [1] + [
                                z for z in SPLITS if under and p.k >= z * bk * MIN_K_STEPS_PER_SLICE
                            ]
                            for s in stages:
                                for g in GROUPS:
                                    for z in splits:
                                        yield TileConfig(bm, bn, bk, threads // 32, s, g, tm, tn, split_k=z)
        return
    if amd:
        bks, stages = (32, 64, 128), (1, 2, 3)
    else:
        from smemtile.model.arch import get_arch

        bks = (16, 32, 64, 128)
        stages = (2, 3, 4, 5) if get_arch(p.arch).has_cp_async else (1, 2)
    for bm in (16, 32, 64, 128, 256):
        for bn in (16, 32, 64, 128, 256):
            for bk in bks:
                for w in WARPS:
                    for s in stages:
                        for g in GROUPS:
                            yield TileConfig(bm, bn, bk, w, s, g)
