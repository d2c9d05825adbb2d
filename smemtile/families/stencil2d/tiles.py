"""The ``stencil2d`` family's tile model (:class:`StencilTiles`): its configurations, ranked by a time model
calibrated on the H200, through the one ranking loop (``smemtile.pipeline.rank``).

The model in one screen. A radius-R star stencil reads and writes ny x nx floats: the bytes of a device copy of
one array. Whether a configuration (BX, BY, VEC, RY) gets there depends on what an SM does between its DRAM
requests: each block loads its halo tile in one round (every load in flight, then a barrier), computes from
shared memory and writes its outputs. So

    time = t0 + smax_p( smax_p( copy(bytes),  rounds x L + wavefronts / (SMs x RATE x min(1, warps / WARPS))
                                              + global loads / SMs x LOAD ),  blocks / SMs x BLOCK )
    smax_p(a, b) = (a^p + b^p)^(1/p)          a smooth maximum: the larger term dominates, both cost near a tie

- ``copy(bytes)``: the device copy of the same bytes, measured in the same runs (interpolated in log bytes).
- ``rounds = blocks / (SMs x blocks per SM)``: how often each block slot of an SM waits for a fill. A fill costs
  about L (a round of loads under load) however small the tile, so one output per thread (32x8 VEC1 RY1: 2.2-3.2x
  slower than a copy, measured) pays it 16 times as often as 32x8 VEC4 RY4.
- ``wavefronts``: the shared-memory wavefronts of all blocks (halo fill, column window, side runs), counted by
  smemtile's bank model on the family's own accesses (dense tile), served at RATE x min(1, warps / WARPS) per
  microsecond per SM (RATE at most one per clock): below WARPS resident warps the dependent shared loads of the
  column window are no longer hidden. This is what slows RY 2 at R 3-4 (RY + 2R column loads feed only RY output
  rows: 0.82-0.91x measured).
- ``global loads``: the warp instructions of the fills, blocks x warps per block x FILL (FILL = ceil(TH x TW /
  VEC / threads) loads per thread), at LOAD microseconds each per SM: a fill of VEC-wide loads issues 4 / VEC as
  many instructions for the same bytes, and a narrow or short tile reloads more halo per output (session 4: VEC 1
  and VEC 2 fills, measured 16-25 % and 5-15 % slower than the form without this term predicted).
- ``blocks / SMs x BLOCK``: what an SM spends per block it starts and retires, a floor of its own (64-thread
  blocks with one output each: 0.10x a copy at every radius, 2M blocks).
- blocks per SM (and warps): the occupancy model with the registers ptxas gives the shipped kernel (NVRTC 13.0,
  sm_90).
- t0 (launch, the last wave's tail), L, RATE, WARPS, p, LOAD and BLOCK: shared by every configuration, fitted on
  relative time error over every measurement of the H200 runs (R 1-4 at 4096^2 and 8192^2: runs 1 and 3, and
  session 4's sweep of 36 configurations per radius spanning the ranking). The form was chosen among
  ``fit.FORMS`` by leave-one-radius-out on those rows (``bench/fit_stencil.py cv``); the expected error ``tiles``
  states is that cross-validated median until a sweep of shapes nobody measured (``held_out_shapes``)
  replaces it.

Halo re-reads ((BX*VEC + 2 HX) x (BY*RY + 2R) loads per BX*VEC x BY*RY outputs) come from L2, not DRAM; they
enter through the fill's loads and wavefronts and the tile's shared memory (blocks per SM), not as DRAM bytes
(a term for the L2 sectors of the fills was tried: its weight fitted to 0 next to the load instructions). Not
modelled: nx % VEC != 0 (the kernel reads element by element: such candidates are ranked after the vector
ones, stated), L2-resident grids (below the smallest fitted size a configuration keeps its efficiency there).
Another GPU or arch: the H200's constants with that GPU's DRAM bandwidth and SM count, stated as uncalibrated.

The per-candidate data (registers, spills, wavefronts per block for R = 1..4) and the constants are in
``stencil_h200.json`` in this folder (``bench/fit_stencil.py``: NVRTC and the bank model, then the fit in
``fit.py``, which :func:`fit.reproduce` runs again on the results it names).
Ties: predicted times within the model's resolution (``tie_band`` of the data file: the median distance of
the fit rows' errors from their median, 3.3 %: how far apart two configurations' errors typically are) of the
fastest are a tie, and go to configurations measured on the H200 first, ordered by what they measured (the
median over the shapes timed of their ratio to a copy / the best ratio there), then to the others by predicted
time, then to the family's defaults, then to fewer threads per block. Within its resolution the model cannot
order them; the measurement can (40-45 of the 319-325 configurations per radius have been timed).
"""

from __future__ import annotations

import functools
import itertools
import json
import math
from dataclasses import asdict, dataclass, replace
from importlib import resources

import numpy as np

from smemtile.errors import SpecError
from smemtile.families.tile_model import (
    ModelOption,
    Prediction,
    Ranked,
    Ranking,
    Rejection,
    SizesModel,
    TieRule,
)
from smemtile.model.fitting import interp_log_bandwidth
from smemtile.model.tiling_gpus import get_gpu

DATA_FILE = "stencil_h200.json"
PARAMS = ("BX", "BY", "VEC", "RY")  # what a candidate sets; R is the problem's
DEFAULTS = {"BX": 32, "BY": 8, "VEC": 4, "RY": 4}  # the family's parameter defaults
# The candidate space: every combination the family's rules then screen (threads whole warps and <= 1024, BX
# dividing 32 or a multiple of it, the halo tile <= 48 KiB static) and ptxas screens (no spills).
GRID = {"BX": (8, 16, 32, 64, 128), "BY": (1, 2, 4, 8, 16, 32), "VEC": (1, 2, 4), "RY": (1, 2, 4, 8, 16)}
RADII = (1, 2, 3, 4)
TIE = 0.015  # without a calibration: predicted times within 1.5 % are a tie (the data file states its own)


def label(p: dict) -> str:
    """``32x8 VEC4 RY4``: block BX x BY, VEC columns and RY rows per thread."""
    q = {**DEFAULTS, **p}
    return f"{q['BX']}x{q['BY']} VEC{q['VEC']} RY{q['RY']}"


def candidates() -> list[dict]:
    """Every configuration of the grid (the family's rules screen them), the family's defaults first."""
    out = [dict(DEFAULTS)]
    for bx, by, vec, ry in itertools.product(*(GRID[k] for k in PARAMS)):
        p = {"BX": bx, "BY": by, "VEC": vec, "RY": ry}
        if p != DEFAULTS:
            out.append(p)
    return out


@dataclass(frozen=True)
class Geometry:
    """A block's work (stencil2d.cu's own arithmetic)."""

    threads: int
    tile_w: int  # halo tile columns TW = BX*VEC + 2*HX
    tile_h: int  # halo tile rows TH = BY*RY + 2R
    fill: int  # fill vectors per thread
    outputs: int  # output elements per block, BX*VEC x BY*RY
    halo_reads: float  # tile elements loaded per output element (L2 -> SM)
    smem_bytes: int  # the dense tile


def geometry(p: dict, r: int) -> Geometry:
    q = {**DEFAULTS, **p}
    bx, by, vec, ry = q["BX"], q["BY"], q["VEC"], q["RY"]
    hx = -(-r // vec) * vec
    tw, th = bx * vec + 2 * hx, by * ry + 2 * r
    threads = bx * by
    fill = -(-th * (tw // vec) // threads)
    out = bx * vec * by * ry
    return Geometry(threads, tw, th, fill, out, th * tw / out, th * tw * 4)


def grid_blocks(p: dict, ny: int, nx: int) -> int:
    q = {**DEFAULTS, **p}
    return math.ceil(nx / (q["BX"] * q["VEC"])) * math.ceil(ny / (q["BY"] * q["RY"]))


@functools.cache
def load_calibration(name: str = DATA_FILE) -> dict | None:
    """The calibration data file shipped in this folder (None when absent)."""
    try:
        return json.loads(resources.files(__package__).joinpath(name).read_text())
    except (FileNotFoundError, OSError):
        return None


def copy_time_us(nbytes: float, points: list) -> float:
    """The device copy's time: its measured bandwidth at the fitted sizes, interpolated in log(bytes) (held
    constant outside them)."""
    return interp_log_bandwidth(nbytes, points)


def smax(a, b, p: float):
    """The smooth maximum (a^p + b^p)^(1/p), computed without overflow."""
    m = np.maximum(a, b)
    m = np.where(m > 0, m, 1.0)
    return m * ((a / m) ** p + (b / m) ** p) ** (1.0 / p)


def model_time_us(copy_us, rounds, wavefronts_per_sm, warps, c: dict, loads_per_sm=0.0, blocks_per_sm=0.0):
    """The model's time (numpy arrays or floats) from its inputs (the copy's time, fill rounds, shared-memory
    wavefronts per SM, resident warps per SM, global-load warp instructions per SM, blocks per SM over the grid)
    and the constants ``c`` (t0_us, L_us, rate_per_us, warps_full, p, load_us, block_us; the last two absent in
    the form before session 4, i.e. zero)."""
    rate = c["rate_per_us"] * np.minimum(1.0, warps / c["warps_full"])
    sm = rounds * c["L_us"] + wavefronts_per_sm / rate + loads_per_sm * c.get("load_us", 0.0)
    t = smax(copy_us, sm, c["p"])
    if c.get("block_us", 0.0) > 0:
        t = smax(t, blocks_per_sm * c["block_us"], c["p"])
    return c["t0_us"] + t


@dataclass(frozen=True)
class StencilScored:
    params: tuple  # ((name, value), ...) of PARAMS
    label: str
    radius: int
    threads: int
    smem_bytes: int
    registers: int
    blocks_per_sm: int
    rounds: float  # fills per block slot of an SM
    wavefronts_per_output: float  # shared memory, per output element
    halo_reads: float  # tile loads per output element
    vector_path: bool  # nx % VEC == 0: the kernel's vector path (else element by element, not modelled)
    time_us: float
    gbps: float
    copy_ratio: float | None  # a device copy of the same bytes / this (calibrated only)
    calibrated: bool
    measured: dict  # {"4096x4096": ratio to the copy, ...}: this configuration and R in the H200 runs
    bytes: float = 0.0  # read + written
    rank: int = 0
    reason: str = ""

    def params_dict(self) -> dict:
        return dict(self.params)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["params"] = self.params_dict()
        return d


@dataclass(frozen=True)
class StencilRejected:
    params: tuple
    label: str
    kind: str  # rules (the family's), spills (ptxas), occupancy
    reason: str

    def to_dict(self) -> dict:
        return {"params": dict(self.params), "label": self.label, "kind": self.kind, "reason": self.reason}


def calibration_applies(arch: str, gpu_key: str, cal: dict | None) -> bool:
    return cal is not None and arch in cal.get("archs", ()) and gpu_key == cal.get("gpu_key")


@functools.cache
def _rules(fam, arch: str, r: int) -> dict[str, str]:
    """The family's own rules over every candidate at radius ``r``: {label: the first rule broken} of those it
    refuses (they do not depend on the grid size: once per arch and radius). The checks every family shares
    (``Family.problems`` after the family's ``violations``: the halo tile's layout and shared memory) depend
    on the tile's shape alone, so they run once per TH x TW (tests hold this equal to ``problems``)."""
    from smemtile.families import configure

    out: dict[str, str] = {}
    shared: dict[tuple, list[str]] = {}  # (TH, TW) -> the shared checks' answer
    for p in candidates():
        try:
            cfg = configure(fam, {**p, "R": r}, arch=arch, check=False)
            why = fam.violations(cfg)
            if not why:
                g = geometry(p, r)
                key = (g.tile_h, g.tile_w)
                if key not in shared:
                    shared[key] = fam.problems(cfg, accesses=False)
                why = shared[key]
        except SpecError as e:
            why = [str(e)]
        if why:
            out[label(p)] = why[0]
    return out


def rules_uncached(fam, arch: str, r: int) -> dict[str, str]:
    """:func:`_rules` without the per-shape sharing: ``Family.problems`` on every candidate (what tests compare)."""
    from smemtile.families import configure

    out = {}
    for p in candidates():
        try:
            why = fam.problems(configure(fam, {**p, "R": r}, arch=arch, check=False), accesses=False)
        except SpecError as e:
            why = [str(e)]
        if why:
            out[label(p)] = why[0]
    return out


class StencilTiles(SizesModel):
    """The stencil2d family's tile model (the :class:`~smemtile.families.tile_model.TileModel` protocol) for one
    problem ``{"ny", "nx", "R"}``: every configuration of the grid, screened by the family's rules, the data
    file's table (compiled for this radius, no spills) and the occupancy model; predicted by the calibrated time
    model; the element-by-element path (nx % VEC != 0) ranks after the vector path (tier 1). Ties within the
    model's resolution go to measured configurations, by what they measured.

    ``calibration``: another data file's contents; ``fam`` None: no family rules (the model's own view)."""

    options = (ModelOption("R", "--radius", "the stencil radius R (1-4).", RADII),)
    tiles_examples = ("smemtile tiles --family stencil2d 8192 8192 --radius 4 --top 5",)
    source = "smemtile/families/stencil2d/tiles.py"

    def __init__(self, fam=None, *, calibration: dict | None = None):
        self.fam = fam
        self.cal = calibration if calibration is not None else load_calibration()
        tie = float((self.cal or {}).get("tie_band", TIE))
        self.tie_rule = TieRule(
            tie,
            "chain",
            f"predicted times within {tie:.1%} (the model's resolution) are a tie, and go to configurations "
            "measured on the H200 first",
        )
        self.problem: dict = {}
        self.calibrated = False

    # ---- the protocol --------------------------------------------------------------------------------------

    def space(self, problem: dict, arch) -> list[dict]:
        r = problem.get("R", self.fam.defaults()["R"] if self.fam is not None else 1)
        if r not in RADII:
            raise SpecError(f"stencil radius {r!r}: one of {', '.join(map(str, RADII))}", key="R")
        if self.cal is None:
            raise SpecError(f"the stencil model's data file {DATA_FILE} is missing")
        self.problem = {"ny": int(problem["ny"]), "nx": int(problem["nx"]), "R": int(r)}
        self.arch = arch
        self._table = self.cal["candidates"].get(str(r), {})
        return candidates()

    def screen(self, p: dict) -> Rejection | None:
        lab, r = label(p), self.problem["R"]
        why = _rules(self.fam, self.arch.name, r).get(lab) if self.fam is not None else None
        if why is not None:
            return _reject(p, "rules", why)
        row = self._table.get(lab)
        if row is None:
            return _reject(p, "rules", "not in the model's data (never compiled for this radius)")
        regs, spill, _ = row
        if spill:
            return _reject(
                p, "spills", f"ptxas spills {spill} bytes at {regs} registers ({self.cal['compiler']})"
            )
        return None

    def predict_all(self, cands: list[dict], gpu) -> list[Prediction | Rejection]:
        from smemtile.model.occupancy import occupancy_batch

        cal, a, (ny, nx, radius) = self.cal, self.arch, self.problem.values()
        use_cal = calibration_applies(a.base, gpu.key, cal) and gpu.sms == cal.get("sms")
        rows = [(p, *self._table[label(p)][::2], geometry(p, radius)) for p in cands]  # (p, regs, wf, geo)
        occ = occupancy_batch(
            a, [g.threads for *_, g in rows], [x[1] for x in rows], [g.smem_bytes for *_, g in rows]
        )
        total = 2.0 * ny * nx * 4
        c = cal["model"]
        # per shape: the best ratio to a copy measured there at this radius (what a measured tie is ordered by)
        measured_at = cal.get("measured", {}).get(str(radius), {}) if use_cal else {}
        best_at: dict[str, float] = {}
        for meas in measured_at.values():
            for k, v in meas.items():
                best_at[k] = max(best_at.get(k, 0.0), v)
        copy_us = copy_time_us(total, cal["copy"]["points"]) if use_cal else total / (gpu.dram_gbps * 1e3)
        copy_full = copy_us if use_cal else None  # the copy of these bytes (the ratio's numerator)
        # below the smallest fitted size (L2-resident grids were not measured): the efficiency of that size
        scale = max(1.0, cal.get("min_fit_bytes", 0.0) / total)
        if use_cal and scale > 1:
            copy_us = copy_time_us(total * scale, cal["copy"]["points"])
        out: list[Prediction | Rejection] = []
        for i, (p, regs, wf_block, geo) in enumerate(rows):
            bps = int(occ.active_blocks[i])
            if bps == 0:
                out.append(
                    _reject(
                        p,
                        "occupancy",
                        f"no block fits an SM ({regs} registers x {geo.threads} threads, {geo.smem_bytes} B shared)",
                    )
                )
                continue
            blocks = grid_blocks(p, ny, nx)
            rounds = blocks / (gpu.sms * bps)
            wf_sm = blocks * wf_block / gpu.sms
            loads_sm = (
                blocks * (geo.threads // 32) * geo.fill / gpu.sms
            )  # the fills' global-load warp instructions
            warps = bps * geo.threads // 32
            t_scaled = model_time_us(
                copy_us, rounds * scale, wf_sm * scale, warps, c, loads_sm * scale, blocks * scale / gpu.sms
            )
            t = float(t_scaled) / scale
            vec_ok = nx % p["VEC"] == 0
            ratio = (copy_full / t) if use_cal else None
            lab = label(p)
            s = StencilScored(
                tuple((k, p[k]) for k in PARAMS),
                lab,
                radius,
                geo.threads,
                geo.smem_bytes,
                regs,
                bps,
                rounds,
                wf_block / geo.outputs,
                geo.halo_reads,
                vec_ok,
                t,
                total / (t * 1e3),
                ratio,
                use_cal,
                dict(measured_at.get(lab, {})),
                total,
            )
            tie = (
                not s.measured,
                -_measured_rel(s, best_at),
                s.time_us,
                s.params_dict() != DEFAULTS,
                s.threads,
            )
            out.append(
                Prediction(
                    t * 1e-6,
                    tier=int(not vec_ok),
                    tie=tie,
                    terms={"gbps": s.gbps, "copy_ratio": ratio, "rounds": rounds},
                    result=s,
                )
            )
        # provenance: calibrated when the calibration applies and anything was ranked (as the ranking's #1 says)
        self.calibrated = use_cal and any(isinstance(x, Prediction) for x in out)
        return out

    def predict(self, p: dict, gpu) -> Prediction | Rejection:
        return self.predict_all([p], gpu)[0]

    def explain(self, entry: Ranked, top: Ranked, ranked) -> str:
        return _reason(entry.pred.result, top.pred.result, self.cal, self.calibrated, self.tie_rule.band)

    def provenance(self) -> dict:
        cal = self.cal or {}
        return {
            "model": "time = t0 + smax_p(smax_p(copy(bytes), fill rounds x L + shared wavefronts / (SMs x "
            "rate x min(1, warps / WARPS)) + fill loads / SMs x LOAD), blocks / SMs x BLOCK); ties "
            "within the model's resolution go to measured configurations, by what they measured "
            f"({self.source})",
            "source": self.source,
            "file": f"smemtile/families/stencil2d/{DATA_FILE}",
            "gpu": cal.get("gpu"),
            "runs": cal.get("run"),
            "commit": cal.get("commit"),
            "calibrated": self.calibrated,
            "expected_error": cal.get("held_out_median_error") if self.calibrated else None,
            "expected_error_of": "median |time error|, held out: "
            + ", ".join(cal.get("held_out_shapes", [])),
            "tie_band": cal.get("tie_band"),
            "compiler": cal.get("compiler"),
        }

    # ---- what the commands built on the ranking ask ----------------------------------------------------------

    @staticmethod
    def scored(entry: Ranked) -> StencilScored:
        """A ranked entry as the family's report row (rank and reason filled in)."""
        return replace(entry.pred.result, rank=entry.rank, reason=entry.reason)

    def configure(self, entry: Ranked):
        """The :class:`~smemtile.families.base.KernelConfig` of a ranked entry for this problem."""
        from smemtile.families import configure

        return configure(self.fam, {**entry.cand, **self.problem}, arch=self.arch)

    def ranker(self, ranking: Ranking, rerank=None) -> StencilRanker:
        """The ranking as ``tune`` / ``generate`` / ``analyze`` read it; ``rerank(problem) -> Ranking`` ranks
        another radius (a configuration called with its own R)."""
        return StencilRanker(self, ranking, rerank)


def _reject(p: dict, kind: str, reason: str) -> Rejection:
    return Rejection(kind, reason, {"params": dict(p), "label": label(p), "kind": kind, "reason": reason})


class StencilRanker:
    """A stencil2d ranking for one problem and radius as ``tune`` (``top``, calling it with a configuration, of
    any radius) and ``tiles --family`` (``ranked``, ``rejections``, ``provenance``) read it; ``generate`` without
    a tile uses #1."""

    def __init__(self, model: StencilTiles, ranking: Ranking, rerank=None):
        self.fam, self.model, self.rerank = model.fam, model, rerank
        self.problem = dict(model.problem)
        self.radius = self.problem["R"]
        self.ranked = [model.scored(e) for e in ranking.ranked]
        rej = [
            r.rejection.result for r in ranking.rejected
        ]  # what occupancy refused last, as the model found it
        self._rejected = [x for x in rej if x["kind"] != "occupancy"] + [
            x for x in rej if x["kind"] == "occupancy"
        ]
        self._provenance = dict(ranking.provenance)
        self._by_radius = {self.radius: self.ranked}

    def top(self, k: int) -> list[dict]:
        return [{**s.params_dict(), "R": self.radius} for s in self.ranked[:k]]

    def __call__(self, params: dict, src: str):
        from smemtile.families.base import Candidate

        full = {**self.fam.defaults(), **params}
        r = full["R"]
        name = f"{label(full)} R{r}"
        if r not in self._by_radius:
            try:
                ranking = self.rerank({**self.problem, "R": r}) if self.rerank is not None else None
            except SpecError:
                ranking = None
            self._by_radius[r] = [] if ranking is None else [StencilTiles.scored(e) for e in ranking.ranked]
        want = {k: full[k] for k in PARAMS}
        s = next((s for s in self._by_radius[r] if s.params_dict() == want), None)
        if s is None:
            return Candidate(name, params, src, None, None, "outside the model's candidates")
        return Candidate(name, params, src, s.rank, s.gbps, s.reason)

    def rejections(self) -> list[dict]:
        return list(self._rejected)

    def provenance(self) -> dict:
        return dict(self._provenance)


def rank_stencil(
    ny: int,
    nx: int,
    radius: int = 1,
    arch: str = "sm_90",
    *,
    rank=None,
    gpu: str | None = None,
    sms: int | None = None,
    calibration: dict | None = None,
    fam=None,
) -> tuple[list[StencilScored], list[dict]]:
    """(ranked, rejected) at radius ``radius`` through the one ranking loop (``rank``: another loop for tests;
    default smemtile.families.ranking.rank); ``fam``: screen by its rules too."""
    from smemtile.model.arch import get_arch

    a = get_arch(arch)
    model = StencilTiles(fam, calibration=calibration)
    from smemtile.families.ranking import rank as loop

    rank = rank or loop
    ranking = rank(model, {"ny": ny, "nx": nx, "R": radius}, a, get_gpu(gpu, a.base, sms=sms))
    return [model.scored(e) for e in ranking.ranked], [r.rejection.result for r in ranking.rejected]


def _measured_rel(s: StencilScored, best_at: dict[str, float]) -> float:
    """How a measured configuration did: the median over the shapes the H200 runs timed it at of its ratio to a
    device copy / the best ratio measured at that shape (1 = the best there; 0 when never measured). Ties within
    the model's resolution are ordered by it among measured configurations."""
    return float(np.median([v / best_at[k] for k, v in s.measured.items()])) if s.measured else 0.0


def _reason(s: StencilScored, top: StencilScored | None, cal: dict, calibrated: bool, tie: float) -> str:
    parts = []
    if not s.vector_path:
        parts.append("nx is not a multiple of VEC: the element-by-element path, not modelled")
    if s.measured:
        parts.append("measured " + ", ".join(f"{v:.3f}x at {k}" for k, v in sorted(s.measured.items())))
    if s.bytes < cal.get("min_fit_bytes", 0):
        parts.append(f"below the calibrated sizes (>= {cal['min_fit_bytes'] / 2**20:.0f} MiB)")
    if not calibrated:
        parts.append("uncalibrated: the H200's constants with this GPU's DRAM bandwidth and SMs")
    extra = "; " + "; ".join(parts) if parts else ""
    ratio = f", {s.copy_ratio:.3f}x a device copy" if s.copy_ratio else ""
    if top is None or s.label == top.label:
        return f"best: {s.gbps:.0f} GB/s predicted{ratio}{extra}"
    rel = top.time_us / s.time_us - 1
    within = " (a tie)" if abs(s.time_us / top.time_us - 1) <= tie else ""
    return f"{rel:+.1%} vs #1{within}: {s.gbps:.0f} GB/s{ratio}{extra}"
