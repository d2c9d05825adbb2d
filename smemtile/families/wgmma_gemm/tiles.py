"""The tile model's view of wgmma_gemm (``smemtile tiles M N K --dtype bf16 --arch sm_90a``, ``smemtile tune``).

Candidates: block tiles (BM, BN) with their consumer warpgroups, clusters of 1 or 2, warp specialisation on or off,
and every stage count from 2 to what the 227 KB opt-in limit holds (the C staging tile of the TMA-store epilogue
included); each is checked against the family's own rules (:meth:`WgmmaGemm.problems`), so every ranked one
generates. One entry per (tile, cluster, warp specialisation): its best stage count.

Model (stated; every factor is in ``--format json``), one persistent CTA per SM::

    t = max(t_sm, t_l2, t_dram) + 15% of the other two + 3 us launch
    t_sm    rounds x t_tile; rounds = ceil(cluster tiles / resident clusters) (wave quantisation), resident
            clusters from smemtile.model.occupancy.active_clusters (the H200's measured value where recorded)
    t_tile  2 * BM * BN * Kpad / (peak per SM x inner x latency) + epilogue (BM * BN * 2 bytes through shared
            memory at 128 B/clock, twice that for stores from registers)
    inner   by a consumer warpgroup's tile (rows x BN), measured on the H200 (bench/results/wgmma_h200.json, run 2,
            4096^3 and 8192^3 bf16, relative to 128x256): 64x256 1.0, 128x128 0.97 (256x128: 0.96-0.98),
            64x128 0.70 (128x128: 0.67-0.73); 64x64 0.5 and 64x192 0.85 assumed; x 0.8 with one consumer
            warpgroup (assumption); x 0.7 without warp specialisation (R1 ran at 0.66-0.68 of R2)
    latency (STAGES - 1) stages of MMAs must cover a TMA round trip: sqrt(min(1, that / 1.9 us)), fitted to run 1
            (3 stages of 128x256 ran at 0.90-0.91 of 4 stages); ties go to more stages
    t_l2    (BM + BN / CLUSTER) x Kpad x 2 bytes per CTA tile from L2 (a cluster shares B) / the GPU row's L2 rate
    t_dram  A + B + C once (the grouped order keeps the reuse in L2 for the sizes ranked here)
The absolute scale is the GPU row's measured bf16/f16 rate (smemtile.model.tiling_gpus); only the order matters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from smemtile.errors import SpecError
from smemtile.families.base import Candidate, KernelConfig
from smemtile.families.gemm import MODEL_TEXT, TEXTS, TIE_RULE
from smemtile.families.tile_model import Prediction, Rejection, TieRule
from smemtile.model.gemm_tiles import Problem, Rejected, Scored, TileConfig, TileReport
from smemtile.model.occupancy import active_clusters
from smemtile.model.tiling_gpus import get_gpu

SHAPES = ((128, 256, 2), (128, 128, 2), (256, 128, 2), (64, 256, 1), (128, 128, 1), (64, 128, 1))
LAUNCH_S = 3e-6
TMA_LATENCY_S = 1.9e-6
# (rows, BN) of one consumer warpgroup -> efficiency (H200 run 2; 64x192 and 64x64 not measured)
INNER = {(64, 256): 1.0, (128, 128): 0.97, (64, 192): 0.85, (64, 128): 0.70, (128, 64): 0.6, (64, 64): 0.5}
SMEM_BYTES_PER_CLK = 128
OVERLAP = 0.15


@dataclass(frozen=True)
class WgTile(TileConfig):
    """A wgmma_gemm candidate: the tile model's knobs plus this family's own."""

    consumers: int = 2
    cluster: int = 1
    ws: int = 1
    family: str = "wgmma_gemm"

    def shape_key(self) -> tuple:
        return (self.bm, self.bn, self.consumers, self.cluster, self.ws)

    @property
    def label(self) -> str:
        return (
            f"{self.bm}x{self.bn}x{self.bk} c{self.consumers} cl{self.cluster} {'ws' if self.ws else 'no-ws'} "
            f"s{self.stages} g{self.group_m}"
        )

    @property
    def tile_text(self) -> str:  # the ranking table's tile column
        return (
            f"{self.bm}x{self.bn}x{self.bk} c{self.consumers} cl{self.cluster}{'' if self.ws else ' no-ws'}"
        )

    def params(self) -> dict:
        return {
            "BM": self.bm,
            "BN": self.bn,
            "STAGES": self.stages,
            "CONSUMERS": self.consumers,
            "CLUSTER": self.cluster,
            "WS": self.ws,
            "GROUP_M": self.group_m,
        }

    def to_dict(self) -> dict:
        return {
            "bm": self.bm,
            "bn": self.bn,
            "bk": self.bk,
            "warps": self.warps,
            "stages": self.stages,
            "group_m": self.group_m,
            "consumers": self.consumers,
            "cluster": self.cluster,
            "ws": self.ws,
            "family": self.family,
        }


def candidates(fam, p: Problem, arch):
    """(candidate, its KernelConfig, the family's broken rules) for every tile, cluster, specialisation, depth."""
    from smemtile.families import configure

    for bm, bn, cons in SHAPES:
        for cluster in (1, 2):
            for ws in (1, 0):
                for stages in range(2, 9):
                    c = WgTile(bm, bn, 64, (cons + ws) * 4, stages, 8, consumers=cons, cluster=cluster, ws=ws)
                    try:
                        cfg = configure(
                            fam,
                            {**c.params(), "M": p.m, "N": p.n, "K": p.k, "dtype": p.dtype},
                            {},
                            arch,
                            check=False,
                        )
                        bad = fam.problems(cfg, accesses=False)
                    except SpecError as e:
                        bad = [str(e)]
                    yield c, cfg, bad


def score(fam, p: Problem, c: WgTile, cfg) -> Scored:
    g = p.gpu
    peak_sm = g.peak(p.dtype) * 1e12 / g.sms
    clk = g.clock_ghz * 1e9
    resident = active_clusters(1, c.cluster, g.sms, g.key)["active_clusters"]
    m_tiles, n_tiles = -(-p.m // c.bm), -(-p.n // c.bn)
    ctiles = -(-m_tiles // c.cluster) * n_tiles
    rounds = math.ceil(ctiles / max(1, resident))
    wave_eff = ctiles / (rounds * resident)
    kpad = -(-p.k // 64) * 64
    pad_eff = p.m * p.n * p.k / (ctiles * c.cluster * c.bm * c.bn * kpad)
    inner = INNER[(c.bm // c.consumers, c.bn)] * (1.0 if c.consumers == 2 else 0.8) * (1.0 if c.ws else 0.7)
    t_stage = 2 * c.bm * c.bn * 64 / (peak_sm * inner)
    lat = math.sqrt(min(1.0, (c.stages - 1) * t_stage / TMA_LATENCY_S))
    epi = c.bm * c.bn * 2 / SMEM_BYTES_PER_CLK / clk * (1 if cfg.params["EPI"] else 2)
    t_tile = 2 * c.bm * c.bn * kpad / (peak_sm * inner * lat) + epi
    t_sm = rounds * t_tile
    l2_bytes = ctiles * c.cluster * (c.bm + c.bn / c.cluster) * kpad * 2
    t_l2 = l2_bytes / (g.l2_gbps * 1e9)
    dram = (p.m * p.k + p.n * p.k + p.m * p.n) * 2
    t_dram = dram / (g.dram_gbps * 1e9)
    terms = {"compute": t_sm, "l2": t_l2, "dram": t_dram}
    bound = max(terms, key=terms.get)
    t = terms[bound] + OVERLAP * (sum(terms.values()) - terms[bound]) + LAUNCH_S
    tflops = p.flops / t / 1e12
    smem = fam.smem_bytes(cfg)
    return Scored(
        c,
        fam.threads(cfg.params),
        168 if cfg.params["SETMAXNREG"] else 255,
        smem,
        0,
        1,
        fam.threads(cfg.params) / 2048,
        "shared_memory",
        ctiles * c.cluster,
        ctiles / resident,
        wave_eff,
        inner,
        lat,
        pad_eff,
        dram,
        dram,
        l2_bytes,
        p.flops / dram,
        g.peak(p.dtype) * 1e12 / (g.dram_gbps * 1e9),
        bound,
        t,
        tflops,
        tflops / g.peak(p.dtype),
    )


def _reason(s: Scored, top: Scored) -> str:
    c = s.cfg
    parts = [
        f"{s.tiles} CTA tiles in {math.ceil(s.waves - 1e-9)} rounds over the resident clusters "
        f"(wave efficiency {s.wave_eff:.0%})",
        f"latency hiding {s.latency_eff:.0%} with {c.stages} stages",
        f"{'TMA multicast of B halves L2 reads of B' if c.cluster == 2 else 'no cluster'}",
    ]
    if not c.ws:
        parts.append("no producer warpgroup (0.7x issue efficiency, measured)")
    if s is not top:
        parts.append(f"{s.tflops / top.tflops:.0%} of #1")
    return "; ".join(parts)


KIND = (
    "TMA + wgmma tiles of the wgmma_gemm family (c: consumer warpgroups, cl: CTAs per cluster; generate "
    "/ verify / tune build them)"
)
CALIBRATION = {
    "model": "roofline x this family's measured tile efficiency (families/wgmma_gemm/tiles.py)",
    "file": "bench/results/wgmma_h200.json",
    "gpu": "H200",
    "sweeps": ["runs 1-2 (2026-11-30)"],
    "commit": "issue 13",
    "expected_error": "the measured order of the tilings; absolute TFLOP/s are scaled by the GPU row "
    "(bf16 638) and read about 20 % under the measured 714 at 8192^3",
}


class WgmmaTileModel:
    """wgmma_gemm's TileModel: its candidates screened by its own rules, timed by :func:`score`; one entry per
    (tile, cluster, warp specialisation), of equal times the one with more stages; the order: predicted time,
    then less shared memory, then the label (chain rule, band 0)."""

    tie_rule = TieRule(0.0, "chain", "ties: less shared memory, then the label; of one shape, more stages")
    options = ()
    tiles_examples = (
        "smemtile tiles 4096 4096 4096 --dtype bf16 --arch sm_90a   # Hopper: the wgmma_gemm family",
    )

    def __init__(self, fam):
        self.fam = fam
        self.p = None
        self._cfgs: dict = {}

    def problem(self, problem: dict, arch):
        from smemtile.model.arch import get_arch
        from smemtile.model.gemm_tiles import make_problem

        a = get_arch(arch)
        gpu, sms = problem.get("gpu"), problem.get("sms")
        m, n, k = (problem[x] for x in "MNK")
        base = make_problem(
            m, n, k, problem.get("dtype", "bf16"), a.base, "nvidia", gpu, sms
        )  # validates; GPU row
        return replace(base, arch=a.name, gpu=get_gpu(gpu, a.base, sms=sms)), a

    def space(self, problem: dict, arch) -> list:
        self.p, a = self.problem(problem, arch)
        out = []
        for c, cfg, bad in candidates(self.fam, self.p, a):
            self._cfgs[c] = (cfg, bad)
            out.append(c)
        return out

    def screen(self, c) -> Rejection | None:
        bad = self._cfgs[c][1]
        if not bad:
            return None
        kind = "shared_memory" if "shared memory" in bad[0] else "contract"
        return Rejection(kind, bad[0], Rejected(c, kind, bad[0]))

    def predict(self, c, gpu) -> Prediction:
        s = score(self.fam, self.p, c, self._cfgs[c][0])
        return Prediction(s.time_s, tie=(s.smem_bytes, c.label), pick=(-c.stages,), result=s)

    def shape_key(self, c) -> tuple:
        return c.shape_key()

    def explain(self, entry, top, ranked) -> str:
        s = entry.pred.result
        return _reason(s, s if entry.rank == 1 else top.pred.result)

    def provenance(self) -> dict:
        return dict(CALIBRATION)

    def report(self, ranking) -> TileReport:
        ranked = [replace(e.pred.result, rank=e.rank, reason=e.reason) for e in ranking.ranked]
        rejected = [r.rejection.result for r in ranking.rejected]
        seen: dict[tuple, Rejected] = {}
        for r in rejected:  # one entry per shape and reason
            key = (r.cfg.shape_key(), r.reason)
            seen[key] = r if key not in seen else replace(seen[key], alike=seen[key].alike + 1)
        rej = sorted(seen.values(), key=lambda r: (r.kind, r.cfg.label))
        counts = {"generated": ranking.counts["generated"], "ranked": len(ranked), "rejected": len(rejected)}
        for r in rej:
            counts[f"rejected_{r.kind}"] = counts.get(f"rejected_{r.kind}", 0) + r.alike
        return TileReport(
            self.p,
            tuple(ranked),
            tuple(rej),
            counts,
            dict(ranking.provenance),
            family=self.fam.name,
            model_text=MODEL_TEXT,
            texts={"kind": KIND, "ties": TIE_RULE, "model": TEXTS["model"]},
        )

    def configure(self, entry) -> KernelConfig:
        from smemtile.families import configure
        from smemtile.model.arch import get_arch

        s = getattr(getattr(entry, "pred", None), "result", entry)
        problem = {"M": self.p.m, "N": self.p.n, "K": self.p.k, "dtype": self.p.dtype}
        return configure(self.fam, {**s.cfg.params(), **problem}, {}, get_arch(self.p.arch))

    def ranker(self, report) -> Ranker:
        return Ranker(self, report)


HOPPER_DATA = "hopper_gemm_h200.json"  # measured wgmma_gemm and hgemm against cuBLAS on the H200
HOPPER_SHAPES = ("4096x4096x4096", "8192x8192x8192")


def seam(fam, p: Problem) -> dict | None:
    """``--arch sm_90`` with a 16-bit GEMM ranks the mma.sync tiles (hgemm): this family needs the ``sm_90a``
    target. What the H200 measured for both (against cuBLAS, each in its own run), to say so in one line; None
    for any other problem."""
    if p.vendor != "nvidia" or p.arch != "sm_90" or p.dtype not in ("f16", "bf16"):
        return None
    import json
    from importlib import resources

    d = json.loads(resources.files(__package__).joinpath(HOPPER_DATA).read_text("utf-8"))
    wg, hg = d["wgmma_gemm"], d["hgemm"]
    return {
        "family": fam.name,
        "arch": "sm_90a",
        "command": f"smemtile tiles {p.m} {p.n} {p.k} --dtype {p.dtype} --arch sm_90a",
        "shapes": list(HOPPER_SHAPES),
        "wgmma_gemm_vs_cublas": [wg["vs_cublas"][p.dtype][s]["vs_cublas"] for s in HOPPER_SHAPES],
        "hgemm_vs_cublas": [hg["vs_cublas"][p.dtype][s]["vs_cublas"] for s in HOPPER_SHAPES],
        "gpu": d["gpu"],
        "dates": [wg["date"], hg["date"]],
        "sources": [wg["source"], hg["source"]],
        "data": f"smemtile/families/wgmma_gemm/{HOPPER_DATA}",
    }


def tile_spec(fam, p: Problem, s: Scored) -> dict:
    """The spec body ``generate`` / ``verify`` take for one ranked candidate (``smemtile tiles --format yaml``)."""
    c = s.cfg
    return {
        "tile": {"BM": c.bm, "BN": c.bn},
        "stages": c.stages,
        "kernel": {
            "family": fam.name,
            "M": p.m,
            "N": p.n,
            "K": p.k,
            "dtype": p.dtype,
            "CONSUMERS": c.consumers,
            "CLUSTER": c.cluster,
            "WS": c.ws,
            "GROUP_M": c.group_m,
        },
    }


class Ranker:
    """``smemtile tune``'s view: the model's top configurations and a score for any given one."""

    def __init__(self, model: WgmmaTileModel, report):
        self.model, self.fam, self.report = model, model.fam, report
        self.by_key = {s.cfg.params().__repr__(): s for s in self.report.ranked}

    def top(self, k: int) -> list[dict]:
        return [s.cfg.params() for s in self.report.ranked[:k]]

    def __call__(self, params: dict, src: str) -> Candidate:
        s = self.by_key.get(
            repr({k: params.get(k) for k in ("BM", "BN", "STAGES", "CONSUMERS", "CLUSTER", "WS", "GROUP_M")})
        )
        label = ", ".join(f"{k}={v}" for k, v in params.items())
        if s is not None:
            return Candidate(label, params, src, s.rank, s.tflops, s.reason)
        return Candidate(label, params, src, None, None, "not in the model's ranking")
