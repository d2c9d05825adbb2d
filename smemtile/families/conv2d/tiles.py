"""The tile model of conv2d (``smemtile tiles --family conv2d N H W C K R S STRIDE --dtype bf16``: the
convolution's keys in that order, padding ``same`` = (r - 1) // 2; ``smemtile tune``, ``generate`` without a tile).

The kernel's main loop is hgemm's column-major-B loop on the GEMM view (M = n*p*q, N = k, K = r*s*c), so the
prediction is the GEMM tile model's (:mod:`smemtile.model.gemm_model`, tensor-core roofline x the measured
efficiency of the tile) with hgemm's measured factors (``smemtile/families/hgemm/calibration_h200.yaml``: BK /
stages speed, load latency): the same tiles, copies, fragment loads and mma.sync. What the convolution adds:

* the gather's instructions (per 16-byte A chunk: the tap's two bounds tests, the address, the zero-fill
  predicate; per element on the VEC 1 path) beside the mma.sync. A warp scheduler issues one instruction a cycle
  and one mma.sync.m16n8k16 keeps the tensor pipe busy MMA_CYCLES cycles, so a K tile costs
  max(mma x MMA_CYCLES, all issued instructions) cycles per warp: the factor
  ``gather = max(1, issued / (mma x MMA_CYCLES))`` on the SM time (1.0 for the default tiles; > 1 for small warp
  tiles and the element gather);
* no split K (the rules refuse it: the kernel has none).

The GEMM view counts A as the im2col matrix (r*s times the activations for a 3x3): its DRAM bytes are an upper
bound (the halo rows are re-read from L2, not DRAM). GATHER_INSTR, ELEMENT_INSTR and MMA_CYCLES are estimates
from the instruction counts of conv2d.cu's loop, **not calibrated on conv measurements** (no conv run is recorded
yet: the provenance says so and the ranking prints no expected error; bench/run.py's ``bench`` plan of the
task file measures the ResNet-50 layers against cuDNN when the reference kind is accepted).

PATH 1 (conv2d_wgmma, sm_90a, problems whose c, ldx, ldf are multiples of 8) adds candidates once
``smemtile.families.conv2d.RANK_WGMMA`` is True (off until the H200 run confirms the path): BM 128, BN 128 over
BN 64 or 128 over one or two consumer warpgroups or BN 256 over two, BK 64, 3-5 stages (what the 227 KB opt-in holds), one CTA per
tile (no clusters: B comes through the producer's cp.async, not a TMA multicast). Their time is the wgmma_gemm
model's mainloop (its measured consumer efficiencies ``INNER``, the stage-latency term, wave quantisation over one
CTA per SM; smemtile/families/wgmma_gemm/tiles.py) on the GEMM view, the epilogue's stores from registers, the
convolution's unique DRAM bytes, and the producer's issue factor (its cp.async and address instructions per stage
against the stage's MMA time). **Not calibrated on conv** (nor is the mainloop's cp.async feed: wgmma_gemm's
factors were measured with TMA loads).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from smemtile.errors import SpecError
from smemtile.families.base import Candidate, KernelConfig
from smemtile.families.tile_model import (
    ModelOption,
    Prediction,
    Ranked,
    Ranking,
    Rejection,
    SizesModel,
    TieRule,
)
from smemtile.model.arch import Arch
from smemtile.model.gemm_model import FamilyRules, warp_tile

GATHER_INSTR = 12  # per 16-byte A chunk (VEC 8): 2 adds, 3 compares, 2 IMAD, address, select, cp.async
ELEMENT_INSTR = 10  # per element of a VEC 1 chunk (bounds, address, a 2-byte load, the pack), + the tap walk
COPY_INSTR = 4  # per 16-byte filter chunk (address, bound, cp.async)
MMA_CYCLES = (
    4  # issue cycles one mma.sync.m16n8k16 occupies the tensor pipe of a warp scheduler (sm_80 / sm_90)
)
SOURCE = "smemtile/families/conv2d/tiles.py"

PARAMS = ("BM", "BN", "BK", "WM", "WN", "STAGES", "GROUP_M", "MIN_BLOCKS")


# PATH 1: (BM, BN, consumer warpgroups); BN 64 for the k = 64 layers (BN 128 would be half padding)
WG_SHAPES = ((128, 64, 1), (128, 64, 2), (128, 128, 1), (128, 128, 2), (128, 256, 2))
WG_STAGES = (3, 4, 5)
WG_PARAMS = ("PATH", "BM", "BN", "BK", "CONSUMERS", "STAGES", "GROUP_M")


@dataclass(frozen=True)
class WgConvTile:
    """A PATH 1 (conv2d_wgmma) candidate."""

    bm: int
    bn: int
    consumers: int
    stages: int
    group_m: int = 8

    def shape_key(self) -> tuple:
        return ("wgmma", self.bm, self.bn, self.consumers)

    def params(self) -> dict:
        return {
            "PATH": 1,
            "BM": self.bm,
            "BN": self.bn,
            "BK": 64,
            "CONSUMERS": self.consumers,
            "STAGES": self.stages,
            "GROUP_M": self.group_m,
        }


def wg_label(p: dict) -> str:
    return f"wgmma {p['BM']}x{p['BN']}x{p['BK']} c{p['CONSUMERS']} s{p['STAGES']} g{p['GROUP_M']}"


def tile_params(c) -> dict:
    """conv2d template parameters of a GEMM tile-model candidate (TileConfig), with the model's warp split."""
    wt = warp_tile(c.bm, c.bn, c.warps)
    wm, wn = wt if wt else (16, 8)  # no split: the rules name the broken one
    return {"BM": c.bm, "BN": c.bn, "BK": c.bk, "WM": wm, "WN": wn, "STAGES": c.stages, "GROUP_M": c.group_m}


def label(p: dict) -> str:
    return f"{p['BM']}x{p['BN']}x{p['BK']} w{p['WM']}x{p['WN']} s{p['STAGES']} g{p['GROUP_M']}"


def gather_factor(p: dict, vec: int) -> float:
    """The gather's issue-slot factor of one tile (see the module text)."""
    threads = (p["BM"] // p["WM"]) * (p["BN"] // p["WN"]) * 32
    ksteps = p["BK"] // 16
    mma = (p["WM"] // 16) * (p["WN"] // 8) * ksteps
    ldsm = (p["WM"] // 16 + p["WN"] // 16) * ksteps
    a_chunks = p["BM"] * p["BK"] // 8 / threads
    b_chunks = p["BN"] * p["BK"] // 8 / threads
    per_chunk = GATHER_INSTR if vec == 8 else 8 * ELEMENT_INSTR
    issued = mma + ldsm + a_chunks * per_chunk + b_chunks * COPY_INSTR * (1 if vec == 8 else 4)
    return max(1.0, issued / (mma * MMA_CYCLES))


def gather_registers(p: dict) -> int:
    """Registers per thread: hgemm's estimate of the accumulators and fragments, + 4 per gather pass (the output
    pixel's image origin and image of each A chunk row a thread copies; ptxas 13.0 spilled 60-488 bytes where
    this exceeds 255: 256x64x64 and 128x256x128 of 64x64 warps)."""
    from smemtile.families.hgemm import register_estimate

    threads = (p["BM"] // p["WM"]) * (p["BN"] // p["WN"]) * 32
    return register_estimate(p["WM"], p["WN"]) + 4 * max(1, p["BM"] * p["BK"] // 8 // threads)


class Contract(FamilyRules):
    """The GEMM model's rules for conv2d tiles: the family's own checks of the configuration (every static_assert
    of conv2d.cu, shared memory), no split K; ``calibration``: hgemm's measured factors (the same main loop)."""

    def __init__(self, fam, arch: Arch, problem: dict):
        from smemtile.families.hgemm.tiles import calibration

        self.fam, self.arch, self.problem = fam, arch, problem
        self.calibration = calibration()
        self.seen: dict[tuple, tuple] = {}

    def __call__(self, c):
        params = tile_params(c)
        threads = (c.bm // params["WM"]) * (c.bn // params["WN"]) * 32 if c.bm % params["WM"] == 0 else 32
        if c.split_k > 1:
            return ([f"conv2d: no split K (SPLIT {c.split_k}): the kernel adds no K slices"], threads, 0)
        key = tuple(params[k] for k in PARAMS if k in params and k != "GROUP_M")
        if key in self.seen:
            return self.seen[key]
        try:
            cfg = configure_tile(self.fam, {**params, "MIN_BLOCKS": 1}, self.problem, self.arch, check=False)
            bad = [f"conv2d: {b}" for b in self.fam.problems(cfg, accesses=False)]
            regs = gather_registers(params)
            if not bad and regs > 255:
                bad = [
                    f"conv2d: registers: {params['WM']}x{params['WN']} accumulators and fragments beside "
                    f"{params['BM'] * params['BK'] // 8 // self.fam.threads(params)} gather passes (4 registers "
                    f"each: the pixel's origin and image) need ~{regs} registers per thread; ptxas 13.0 spills "
                    "such tiles (255 cap)"
                ]
            if not bad and self.fam.vec(cfg) == 1 and params["BK"] > 32:
                bad = [
                    "conv2d: the element gather (VEC 1: c or a leading dimension not a multiple of 8) is "
                    "built with BK 32 only (its registers beside BK 64+ were not checked)"
                ]
        except SpecError as e:
            bad = [f"conv2d: {e}"]
        out = (bad, self.fam.threads(params), 0 if bad else self.fam.smem_bytes(cfg))
        self.seen[key] = out
        return out


def configure_tile(fam, params: dict, problem: dict, arch: Arch, check: bool = True) -> KernelConfig:
    from smemtile.families import configure

    return configure(fam, {**params, **problem}, {}, arch, check=check)


@dataclass(frozen=True)
class ConvScored:
    """One ranked conv2d configuration as ``tiles --family`` prints it."""

    params: tuple  # ((name, value), ...) of PARAMS
    label: str
    threads: int
    registers: int
    blocks_per_sm: int
    smem_bytes: int
    time_us: float
    tflops: float
    gbps: float  # (x + f + y bytes) / predicted time: the effective bandwidth
    gather: float  # the gather's issue factor on the GEMM view's SM time
    gemm_time_us: float  # the GEMM view's prediction (hgemm's calibrated tile model)
    bound: str
    copy_ratio: float | None = None
    calibrated: bool = False
    measured: bool = False
    rank: int = 0
    reason: str = ""

    def params_dict(self) -> dict:
        return dict(self.params)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["params"] = self.params_dict()
        return d


class Conv2dTileModel(SizesModel):
    """conv2d's TileModel: the GEMM view's tensor-core tiles (gemm_tiles.candidates), screened by the family's
    rules (:class:`Contract`), predicted by the GEMM model with hgemm's factors, times the gather factor."""

    # the convolution's keys, by name (``tiles --family conv2d --n 32 --h 28 ...``: Conv2d.size_keys is empty)
    options = (
        ModelOption("n", "--n", "conv2d: images (batch) N."),
        ModelOption("h", "--h", "conv2d: input rows H."),
        ModelOption("w", "--w", "conv2d: input columns W."),
        ModelOption("c", "--c", "conv2d: input channels C."),
        ModelOption("k", "--k", "conv2d: output channels K."),
        ModelOption("r", "--r", "conv2d: filter rows R."),
        ModelOption("s", "--s", "conv2d: filter columns S."),
        ModelOption("stride", "--stride", "conv2d: stride (default 1).", required=False),
        ModelOption(
            "pad", "--pad", "conv2d: zero padding per side, 0-7 (default (R-1)/2).", tuple(range(8)), False
        ),
    )
    tiles_examples = (
        "smemtile tiles --family conv2d --n 32 --h 28 --w 28 --c 128 --k 128 --r 3 --s 3 --pad 1 --dtype bf16 "
        "--arch sm_80 --top 3",
    )
    tie_rule = TieRule(
        0.005,
        "bucket",
        "ties (within 0.5 % predicted) go to what hgemm measured faster on the H200 (its BK / stages factor), then "
        "fewer stages, then less shared memory",
    )

    def __init__(self, fam=None):
        self.fam = fam
        self.problem: dict = {}
        self.arch = None
        self.p = None
        self.wg_ranked = False

    # ---- the protocol --------------------------------------------------------------------------------------
    def space(self, problem: dict, arch) -> list:
        from smemtile.model.arch import get_arch
        from smemtile.model.gemm_tiles import candidates, make_problem

        fam = self.fam
        a = arch if isinstance(arch, Arch) else get_arch(arch)
        from smemtile.families.base import ranked_problem

        self.problem = ranked_problem(fam, problem)
        self.arch = a
        if a.cc < (8, 0):
            raise SpecError(
                f"conv2d needs sm_80 or newer (cp.async, bf16 mma.sync); {a.name} has neither", key="--arch"
            )
        g = fam.geometry(self.problem)
        if g["p"] < 1 or g["q"] < 1:
            raise SpecError(
                f"the {self.problem['r']}x{self.problem['s']} filter does not fit the padded "
                f"{self.problem['h']}x{self.problem['w']} image (pad {self.problem['pad']})",
                key="--pad",
            )
        contract = Contract(fam, a, self.problem)
        self.p = make_problem(
            g["M"],
            g["N"],
            g["K"],
            self.problem["dtype"],
            a.base,  # the GPU of the target (sm_90a: sm_90's H200); the rules (Contract) keep the target itself
            "nvidia",
            problem.get("gpu"),
            None,
            contract,
        )
        out = list(candidates(self.p))
        from smemtile.families import conv2d

        # PATH 1 ranks first (a tier above the mma.sync tiles: the two models' scales are not comparable) where
        # it applies, once RANK_WGMMA is on
        self.wg_ranked = conv2d.RANK_WGMMA and a.lacks("wgmma") is None and self._aligned()
        if self.wg_ranked:
            out += [WgConvTile(bm, bn, c, st) for bm, bn, c in WG_SHAPES for st in WG_STAGES]
        return out

    def screen(self, cand) -> Rejection | None:
        return None  # the GEMM model applies the rules (Contract) with its own resources

    def predict_all(self, cands: list, gpu) -> list:
        wg = {i: c for i, c in enumerate(cands) if isinstance(c, WgConvTile)}
        gemm = [c for c in cands if not isinstance(c, WgConvTile)]
        out = self._predict_gemm(gemm) if gemm else []
        for i in sorted(wg):  # each PATH 1 candidate back at its place in the list
            out.insert(i, self._predict_wgmma(wg[i]))
        return out

    def _predict_gemm(self, cands: list) -> list:
        from smemtile.model.gemm_model import evaluate_problem
        from smemtile.model.gemm_tiles import Scored, tie_key

        out = []
        vec = 8 if self._aligned() else 1
        nbytes = self._bytes()
        for x in evaluate_problem(self.p, cands):
            if not isinstance(x, Scored):
                out.append(Rejection(x.kind, x.reason, _rejected(x.cfg, x.kind, x.reason)))
                continue
            params = {**tile_params(x.cfg), "MIN_BLOCKS": max(1, min(4, x.blocks_per_sm))}
            fac = gather_factor(params, vec)
            t, bound = self._conv_time(x, fac)
            s = ConvScored(
                tuple((k, params[k]) for k in PARAMS),
                label(params),
                x.threads,
                x.regs,
                x.blocks_per_sm,
                x.smem_bytes,
                t * 1e6,
                self.p.flops / t / 1e12,
                nbytes / t / 1e9,
                fac,
                x.time_s * 1e6,
                bound,
            )
            out.append(
                Prediction(
                    t,
                    tier=1 if self.wg_ranked else 0,
                    tie=tie_key(x),
                    terms={"gather": fac, "bound": bound},
                    result=s,
                )
            )
        return out

    def _predict_wgmma(self, c: WgConvTile):
        """PATH 1: the wgmma_gemm model's mainloop on the GEMM view (see the module text), not calibrated on conv."""
        import math

        from smemtile.families.wgmma_gemm.tiles import INNER, LAUNCH_S, OVERLAP, TMA_LATENCY_S

        params = c.params()
        try:
            cfg = configure_tile(self.fam, params, self.problem, self.arch, check=False)
            bad = self.fam.problems(cfg, accesses=False)
        except SpecError as e:
            bad = [str(e)]
        if bad:
            why = f"conv2d: {bad[0]}"
            return Rejection(
                "contract",
                why,
                {"params": params, "label": wg_label(params), "kind": "contract", "reason": why},
            )
        g, q, geo = self.p.gpu, self.problem, self.fam.geometry(self.problem)
        m, n, k = geo["M"], geo["N"], geo["K"]
        peak_sm = g.peak(q["dtype"]) * 1e12 / g.sms
        tiles = -(-m // c.bm) * -(-n // c.bn)
        rounds = math.ceil(tiles / g.sms)  # one CTA per SM (shared memory)
        kpad = -(-k // 64) * 64
        inner = INNER[(c.bm // c.consumers, c.bn)] * (1.0 if c.consumers == 2 else 0.8)
        t_stage = 2 * c.bm * c.bn * 64 / (peak_sm * inner)
        lat = math.sqrt(min(1.0, (c.stages - 1) * t_stage / TMA_LATENCY_S))
        clk = g.clock_ghz * 1e9
        # the producer warpgroup's issue per stage and scheduler (4 warps, one per scheduler): A chunks with their
        # tap tests, B chunks, the barrier wait and arrive, against the stage's MMA time
        per_thread = c.bm // 16 * GATHER_INSTR + c.bn // 16 * COPY_INSTR + 8
        fac = max(1.0, per_thread / clk / t_stage)
        y_item = 4 if q["y_dtype"] == "f32" else 2
        epi = c.bm * c.bn * y_item / 64 / clk  # stores from registers: ~64 bytes a clock per SM
        t_tile = 2 * c.bm * c.bn * kpad / (peak_sm * inner * lat) * fac + epi
        l2 = tiles * (c.bm + c.bn) * kpad * 2 / (g.l2_gbps * 1e9)
        nbytes = self._bytes()
        parts = {"compute": rounds * t_tile, "dram": nbytes / (g.dram_gbps * 1e9), "l2": l2}
        bound = max(parts, key=parts.get)
        t = parts[bound] + OVERLAP * (sum(parts.values()) - parts[bound]) + LAUNCH_S
        smem = self.fam.smem_bytes(cfg)
        threads = self.fam.threads(params)
        s = ConvScored(
            tuple((key, params[key]) for key in WG_PARAMS),
            wg_label(params),
            threads,
            168 if c.consumers == 2 else 255,
            1,
            smem,
            t * 1e6,
            self.p.flops / t / 1e12,
            nbytes / t / 1e9,
            fac,
            (rounds * (t_tile - epi) / fac) * 1e6,
            bound,
        )
        return Prediction(
            t, tie=(-inner, c.stages, smem, wg_label(params)), terms={"gather": fac, "bound": bound}, result=s
        )

    def _conv_time(self, x, fac: float) -> tuple[float, str]:
        """The GEMM view's time with the convolution's own DRAM bytes and the gather factor: the model's parts
        (SM, DRAM, L2 time) recovered from its score, the DRAM part scaled by the convolution's unique bytes over
        the im2col GEMM's (the halo is re-read from L2, not DRAM), the SM part by the gather factor, combined by
        the GEMM model's rule (the binding part + OVERLAP x the others + the launch)."""
        from smemtile.model.gemm_tiles import LAUNCH_S, OVERLAP

        g = self.p.gpu
        d, l2 = x.dram_bytes / (g.dram_gbps * 1e9), x.l2_bytes / (g.l2_gbps * 1e9)
        if x.bound == "dram":
            sm = (x.time_s - d - LAUNCH_S) / OVERLAP - l2
        elif x.bound == "l2":
            sm = (x.time_s - l2 - LAUNCH_S) / OVERLAP - d
        else:  # compute or latency: the SMs bind
            sm = x.time_s - OVERLAP * (d + l2) - LAUNCH_S
        parts = {"compute": max(sm, 0.0) * fac, "dram": d * self._dram_ratio(), "l2": l2}
        bound = max(parts, key=parts.get)
        t = parts[bound] + OVERLAP * (sum(parts.values()) - parts[bound]) + LAUNCH_S
        if bound == "compute" and x.bound == "latency":
            bound = "latency"
        return t, bound

    def _dram_ratio(self) -> float:
        """The convolution's unique bytes (x, f, y) over the GEMM view's (im2col A, B, C)."""
        q, g = self.problem, self.fam.geometry(self.problem)
        y_item = 4 if q["y_dtype"] == "f32" else 2
        gemm = (g["M"] * g["K"] + g["K"] * g["N"]) * 2 + g["M"] * g["N"] * y_item
        return min(1.0, self._bytes() / gemm)

    def predict(self, cand, gpu):
        return self.predict_all([cand], gpu)[0]

    def shape_key(self, cand):
        return cand.shape_key()

    def explain(self, entry: Ranked, top: Ranked, ranked) -> str:
        s, t = entry.pred.result, top.pred.result
        why = f"{s.bound}-bound (the GEMM view through hgemm's calibrated model), gather x{s.gather:.2f}"
        if dict(s.params).get("PATH"):
            why = (
                f"{s.bound}-bound (PATH 1: wgmma_gemm's mainloop model on the GEMM view, not calibrated on conv), "
                f"producer x{s.gather:.2f}"
            )
        if s is t:
            return f"best: {s.tflops:.1f} TFLOP/s predicted; {why}"
        rel = s.time_us / t.time_us - 1.0
        return f"{rel:+.1%} vs #1: {s.tflops:.1f} TFLOP/s; {why}"

    def provenance(self) -> dict:
        from smemtile.families.hgemm.tiles import calibration

        cal = calibration()
        return {
            "model": "the GEMM view (M = n*p*q, N = k, K = r*s*c) through the GEMM tile model with hgemm's "
            "measured factors (the same mma.sync main loop), x the gather's issue factor; not yet calibrated on "
            f"conv measurements ({SOURCE})",
            "source": SOURCE,
            "file": cal.get("file"),
            "gpu": cal.get("gpu"),
            "date": cal.get("date"),
            "runs": "hgemm's GEMM runs (no conv2d run recorded)",
            "commit": cal.get("commit"),
            "calibrated": False,
            "expected_error": None,
            "expected_error_of": "none measured: no conv2d run is recorded yet",
        }

    # ---- what the commands built on the ranking ask ----------------------------------------------------------
    def _aligned(self) -> bool:
        q = self.fam.problem_ints(self.problem)
        return q["c"] % 8 == 0 and q["ldx"] % 8 == 0 and q["ldf"] % 8 == 0

    def _bytes(self) -> float:
        q, g = self.problem, self.fam.geometry(self.problem)
        item = 2
        y_item = 4 if q["y_dtype"] == "f32" else 2
        return float(
            q["n"] * q["h"] * q["w"] * q["c"] * item + g["N"] * g["K"] * item + g["M"] * g["N"] * y_item
        )

    @staticmethod
    def scored(entry: Ranked) -> ConvScored:
        return replace(entry.pred.result, rank=entry.rank, reason=entry.reason)

    def configure(self, entry: Ranked) -> KernelConfig:
        s = self.scored(entry)
        return configure_tile(self.fam, s.params_dict(), self.problem, self.arch)

    def ranker(self, ranking: Ranking, rerank=None) -> Ranker:
        return Ranker(self, ranking)


def _rejected(cfg, kind: str, reason: str) -> dict:
    p = tile_params(cfg)
    return {
        "params": p,
        "label": f"{label(p)}{' split' + str(cfg.split_k) if cfg.split_k > 1 else ''}",
        "kind": kind,
        "reason": reason,
    }


class Ranker:
    """A conv2d ranking for one problem as ``tune`` (``top``, calling it with a configuration) and ``tiles
    --family`` (``ranked``, ``rejections``, ``provenance``) read it; ``generate`` without a tile uses #1."""

    def __init__(self, model: Conv2dTileModel, ranking: Ranking):
        self.fam, self.model = model.fam, model
        self.problem = dict(model.problem)
        self.ranked = [model.scored(e) for e in ranking.ranked]
        self._rejected = [r.rejection.result for r in ranking.rejected]
        self._provenance = dict(ranking.provenance)

    def top(self, k: int) -> list[dict]:
        return [s.params_dict() for s in self.ranked[:k]]

    def __call__(self, params: dict, src: str) -> Candidate:
        full = {**self.fam.defaults(), **params}
        if full.get("PATH"):
            full.setdefault("BK", 64)
            want = {k: full[k] for k in WG_PARAMS}
            name = wg_label(full)
        else:
            want = {k: full[k] for k in PARAMS}
            name = label(full)
        s = next((s for s in self.ranked if s.params_dict() == want), None)
        if s is None:
            return Candidate(name, params, src, None, None, "outside the model's ranking")
        return Candidate(name, params, src, s.rank, s.tflops, s.reason)

    def rejections(self) -> list[dict]:
        return list(self._rejected)

    def provenance(self) -> dict:
        return dict(self._provenance)
