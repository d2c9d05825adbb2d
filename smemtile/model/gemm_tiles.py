"""Block-tile recommendations for a GEMM ``C[M,N] = A[M,K] @ B[K,N]``: the problem, the candidates' knobs, the
scored and rejected candidates and the report they make. Pure Python + numpy (no CUDA, no printing); the model's
arithmetic is :mod:`smemtile.model.gemm_model`; a family that generates the tiles brings its rules (and, for SIMT
fp32, its own calibrated model) from its folder, and the one ranking loop (``smemtile.pipeline.rank``) orders them.

Candidates (model only: tensor/matrix-core tiles as Triton runs them; tf32, f16, bf16, fp8 e4m3/e5m2, int8, AMD):
    BM, BN multiples of the mma shape, BK >= the mma K (8 tf32, 16 f16/bf16, 32 fp8/int8; AMD >= 32), num_warps
    {2, 4, 8} (AMD: wavefronts of 64), num_stages 2-5 with cp.async (1-3 on AMD), split K when under one wave,
    GROUP_SIZE_M 8; exported as ``triton.Config``. A dtype the architecture or the GPU row lacks (bf16 / tf32
    before sm_80, fp8 before sm_89, int8 mma before sm_75) is refused. fp32 on NVIDIA (SIMT FFMA) is ranked by
    the family that generates it, with its own candidates and calibration.

Model (tensor core / matrix core, :mod:`smemtile.model.gemm_model`): t = max(t_sm, t_dram, t_l2) + 15% of the
    other two + 3 us; t_sm from waves x occupancy x inner-loop efficiency (mma vs ldmatrix + copy bytes at 128
    B/clk/SM) x latency hiding; on NVIDIA divided by the efficiency measured for the tile, BK, stages and warps
    with the standard Triton matmul on the H200 (``model/data/triton_h200.json``), which also breaks the model's
    ties. t_dram: bytes in the GROUP_SIZE_M launch order; t_l2: L2 -> SM bytes.
    Labels: compute-bound only when the SM time dominates and the intensity is above the ridge; latency-bound
    when the SM time dominates below the ridge (too few tiles or warps to stream memory at full rate);
    memory-bound (DRAM or L2) when that time dominates.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from smemtile.errors import SpecError
from smemtile.model.sizes import parse_size
from smemtile.model.tiling_gpus import AMD_ARCHS, GpuPeak, get_gpu, vendor_of

DTYPE_BYTES = {"f32": 4, "tf32": 4, "f16": 2, "bf16": 2, "f8e4m3": 1, "f8e5m2": 1, "i8": 1}
# C's element size: fp32 / tf32 accumulate to fp32; f16 / bf16 keep their type; fp8 products go to bf16 (as
# Triton's fp8 matmuls usually store them); int8 accumulates and stores int32.
OUT_BYTES = {"f32": 4, "tf32": 4, "f16": 2, "bf16": 2, "f8e4m3": 2, "f8e5m2": 2, "i8": 4}
MMA_K = {"tf32": 8, "f16": 16, "bf16": 16, "f8e4m3": 32, "f8e5m2": 32, "i8": 32}  # mma.sync K per instruction
GROUPS = (8,)  # GROUP_SIZE_M: 8 (the Triton tutorial's); the DRAM model also reports the ungrouped traffic
WARPS = (2, 4, 8)
SPLITS = (2, 4, 8, 16)  # K slices tried when the grid is under two blocks per SM (one wave for mma tiles)
MIN_K_STEPS_PER_SLICE = 8  # a K slice keeps at least this many BK steps (the pipeline needs a few to fill)
LAUNCH_S = 3e-6
MEM_LATENCY_S = 600e-9
OVERLAP = 0.15
MMA_W_SAT, MMA_X = 8, 0.5
SMEM_BYTES_PER_CLK = 128  # shared memory / LDS: 32 banks x 4 bytes per clock


@dataclass(frozen=True)
class Problem:
    m: int
    n: int
    k: int
    dtype: str
    arch: str
    vendor: str
    gpu: GpuPeak
    # the generating family's rules (smemtile.model.gemm_model.FamilyRules): ``contract(tile) -> (broken rules,
    # threads, smem bytes)``, its measured factors, and for SIMT its own resources and timing; None: model only
    contract: Callable | None = field(default=None, compare=False, repr=False)
    # SIMT: whether the launch repacks unaligned A / B first (the family's REPACK); None = the family's auto rule
    repack: bool | None = None

    @property
    def simt(self) -> bool:
        """fp32 on NVIDIA: a SIMT FFMA kernel (no tensor cores)."""
        return self.dtype == "f32" and self.vendor == "nvidia"

    @property
    def elem(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def out_elem(self) -> int:
        return OUT_BYTES[self.dtype]

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    def to_dict(self) -> dict:
        return {
            "M": self.m,
            "N": self.n,
            "K": self.k,
            "dtype": self.dtype,
            "arch": self.arch,
            "vendor": self.vendor,
            "gpu": self.gpu.to_dict(),
        }


@dataclass(frozen=True)
class TileConfig:
    """The knobs of one candidate. SIMT candidates also carry TM, TN and MIN_BLOCKS (a thread's register tile and
    the blocks per SM its __launch_bounds__ asks for)."""

    bm: int
    bn: int
    bk: int
    warps: int
    stages: int
    group_m: int
    tm: int = 0
    tn: int = 0
    min_blocks: int = 0
    waves_per_eu: int = 0  # AMD hint (waves per SIMD): from the memory/compute-bound rule (gemm_model)
    split_k: int = 1  # K slices added into C (a family's SPLIT_K with atomics; Triton: a split-K kernel)

    def shape_key(self) -> tuple:
        return (self.bm, self.bn, self.bk, self.warps, self.tm, self.tn, self.split_k)

    @property
    def label(self) -> str:
        reg = f" {self.tm}x{self.tn}" if self.tm else ""
        split = f" splitk{self.split_k}" if self.split_k > 1 else ""
        mb = f" mb{self.min_blocks}" if self.tm and self.min_blocks else ""
        return f"{self.bm}x{self.bn}x{self.bk}{reg} w{self.warps} s{self.stages} g{self.group_m}{mb}{split}"

    def to_dict(self) -> dict:
        return {
            k: v
            for k, v in asdict(self).items()
            if (v and not (k == "split_k" and v == 1)) or k in ("bm", "bn", "bk", "warps", "stages")
        }


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
    bound: str  # compute | latency | dram | l2
    time_s: float
    tflops: float
    roofline_frac: float
    rank: int = 0
    reason: str = ""
    measured_eff: float = 1.0  # mma: the calibrated efficiency of (tile, BK, stages, warps); SIMT: 1
    hint: str = ""  # AMD: why this waves_per_eu
    repack_s: float = 0.0  # SIMT: seconds of the family's REPACK copies in time_s (unaligned K or N)

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
    alike: int = 1  # configurations (other stages / MIN_BLOCKS / GROUP_SIZE_M) rejected for the same reason

    def to_dict(self) -> dict:
        return {
            "cfg": self.cfg.to_dict(),
            "label": self.cfg.label,
            "kind": self.kind,
            "reason": self.reason,
            "alike": self.alike,
        }


@dataclass(frozen=True)
class TileReport:
    problem: Problem
    ranked: tuple[Scored, ...]
    rejected: tuple[Rejected, ...]
    counts: dict = field(default_factory=dict)
    calibration: dict = field(default_factory=dict)  # the model's provenance and expected error
    family: str | None = None  # the family that generates the ranked tiles (None: the model's ranking only)
    model_text: dict = field(default_factory=dict)  # the model's stated formulas (JSON "model")
    texts: dict = field(
        default_factory=dict
    )  # the ranking's words for the table: kind, tie rule, model, repack
    seam: dict | None = None  # a faster family one target away (what it measured), for one line

    def to_dict(self, top: int | None = None, rejected: int | None = None) -> dict:
        return {
            "problem": self.problem.to_dict(),
            "model": dict(self.model_text),
            "calibration": dict(self.calibration),
            "counts": dict(self.counts),
            "candidates": [s.to_dict() for s in self.ranked[:top]],
            "rejected": [r.to_dict() for r in self.rejected[:rejected]],
        }


def make_problem(
    m,
    n,
    k,
    dtype: str = "f32",
    arch: str | None = None,
    vendor: str | None = None,
    gpu: str | None = None,
    sms: int | None = None,
    contract: Callable | None = None,
) -> Problem:
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
    _check_dtype(dt, arch_name, vend)
    g = get_gpu(gpu, arch_name, sms=sms)
    if not g.has(dt):
        have = ", ".join(d for d in DTYPE_BYTES if g.has(d))
        raise SpecError(
            f"the {g.name} has no {dt} {'FMA' if dt == 'f32' else 'matrix'} units in its row; it has {have}",
            key="--dtype",
        )
    return Problem(*dims, dt, arch_name, vend, g, contract)


def _check_dtype(dtype: str, arch: str, vendor: str) -> None:
    """Refuse a dtype the architecture's tensor cores lack (NVIDIA: the arch table's features)."""
    if vendor != "nvidia":
        return
    from smemtile.model.arch import DTYPE_FEATURES, get_arch

    a = get_arch(arch)
    feature = DTYPE_FEATURES.get(dtype)
    why = a.lacks(feature) if feature else None
    if why is None and dtype == "i8" and a.cc < (7, 5):
        why = f"int8 mma (mma.sync .s8) needs sm_75 or later; {a.name} does not have it"
    if why:
        raise SpecError(why, key="--dtype")


def _arch_name(arch: str, vendor: str) -> str:
    text = str(arch).strip().lower()
    if vendor == "amd":
        if text not in AMD_ARCHS:
            raise SpecError(f"unknown AMD architecture {arch!r}; known: {', '.join(AMD_ARCHS)}", key="--arch")
        return text
    if text.startswith("gfx"):
        raise SpecError(f"{arch} is an AMD target; pass --vendor amd (or an sm_XX arch)", key="--arch")
    from smemtile.model.arch import get_arch

    return get_arch(text).name


def order_key(s: Scored) -> tuple:
    """Predicted time in 0.5 % steps, then the tie rule: what measured faster (``measured_eff``), fewer stages,
    less shared memory, the label (the ranking loop's bucket rule with ``tie_key``)."""
    return (round(math.log(s.time_s) / math.log(1.005)), *tie_key(s))


def tie_key(s: Scored) -> tuple:
    return (-s.measured_eff, s.cfg.stages, s.smem_bytes, s.cfg.label)


def dedupe(rejected: list[Rejected]) -> list[Rejected]:
    """One entry per tile shape and reason; ``alike`` counts the stages / group variants it stands for."""
    seen: dict[tuple, Rejected] = {}
    for r in rejected:
        key = (r.cfg.shape_key(), r.kind, r.reason)
        cur = seen.get(key)
        seen[key] = r if cur is None else replace(cur, alike=cur.alike + 1)
    return list(seen.values())


def candidates(p: Problem):
    """The raw space of tensor / matrix-core tiles (before any pruning), as TileConfig values."""
    amd = p.vendor == "amd"
    if p.simt:
        raise ValueError("SIMT fp32 candidates are the generating family's (its tile model enumerates them)")
    if amd:
        bks, stages = tuple(b for b in (32, 64, 128) if b >= MMA_K.get(p.dtype, 32)), (1, 2, 3)
    else:
        from smemtile.model.arch import get_arch

        bks = tuple(b for b in (16, 32, 64, 128, 256) if b >= MMA_K.get(p.dtype, 16) and b * p.elem <= 256)
        stages = (2, 3, 4, 5) if get_arch(p.arch).has_cp_async else (1, 2)
    for bm in (16, 32, 64, 128, 256):
        for bn in (16, 32, 64, 128, 256):
            for bk in bks:
                for z in splits(p, bm, bn, bk, p.gpu.sms):
                    for w in WARPS:
                        for s in stages:
                            for g in GROUPS:
                                yield TileConfig(bm, bn, bk, w, s, g, split_k=z)


def min_blocks_values(threads: int) -> list[int]:
    """MIN_BLOCKS values that give ptxas different register caps (of equal caps, the largest: the same code)."""

    def cap(mb: int) -> int:
        return min(255, (65536 // (threads * mb)) // 8 * 8)

    return [mb for mb in (1, 2, 3, 4) if mb == 4 or cap(mb) != cap(mb + 1)]


def splits(p: Problem, bm: int, bn: int, bk: int, under: int) -> list[int]:
    """1, and the split-K factors when the grid has fewer than ``under`` tiles (and each slice keeps
    MIN_K_STEPS_PER_SLICE K steps)."""
    tiles = math.ceil(p.m / bm) * math.ceil(p.n / bn)
    if tiles >= under:
        return [1]
    return [1] + [z for z in SPLITS if p.k >= z * bk * MIN_K_STEPS_PER_SLICE]
