"""Tile configurations for the ``stencil2d`` family, ranked by a time model calibrated on the H200.

The model in one screen. A radius-R star stencil reads and writes ny x nx floats: the bytes of a device copy of
one array. Whether a configuration (BX, BY, VEC, RY) gets there depends on what an SM does between its DRAM
requests: each block loads its halo tile in one round (every load in flight, then a barrier), computes from
shared memory and writes its outputs. So

    time = t0 + smax_p( copy(bytes),  rounds x L + wavefronts / (SMs x RATE x min(1, warps / WARPS)) )
    smax_p(a, b) = (a^p + b^p)^(1/p)          a smooth maximum: the larger term dominates, both cost near a tie

- ``copy(bytes)``: the device copy of the same bytes, measured in the same runs (interpolated in log bytes).
- ``rounds = blocks / (SMs x blocks per SM)``: how often each block slot of an SM waits for a fill. A fill costs
  about L (a round of loads under load) however small the tile, so one output per thread (32x8 VEC1 RY1: 2.2-3.2x
  slower than a copy, measured) pays it 16 times as often as 32x8 VEC4 RY4.
- ``wavefronts``: the shared-memory wavefronts of all blocks (halo fill, column window, side runs), counted by
  smemtile's bank model on the family's own accesses (dense tile), served at RATE x min(1, warps / WARPS) per
  microsecond per SM: below WARPS resident warps the dependent shared loads of the column window are no longer
  hidden. This is what slows RY 2 at R 3-4 (RY + 2R column loads feed only RY output rows: 0.82-0.91x
  measured) and RY 8 (80 registers, 3 blocks of 8 warps per SM: 0.88-0.90x at 4096^2, R 4).
- blocks per SM (and warps): the occupancy model with the registers ptxas gives the shipped kernel (NVRTC 13.0,
  sm_90).
- t0 (launch, the last wave's tail), L, RATE, WARPS and p: shared by every configuration, fitted on relative
  time error over the measurements labelled ``fit`` (4096^2, R 1-4, runs 1 and 3); those labelled
  ``held_out`` (8192^2) are only scored, and their median error is the expected error ``tiles`` states. The
  occupancy term was chosen over four other forms by leave-one-configuration-out error on the fit rows.

Halo re-reads ((BX*VEC + 2 HX) x (BY*RY + 2R) loads per BX*VEC x BY*RY outputs) come from L2, not DRAM; they
enter through the fill's wavefronts and the tile's shared memory (blocks per SM), not as DRAM bytes. Not
modelled: nx % VEC != 0 (the kernel reads element by element: such candidates are ranked after the vector
ones, stated), L2-resident grids (below the smallest fitted size a configuration keeps its efficiency there).
Another GPU or arch: the H200's constants with that GPU's DRAM bandwidth and SM count, stated as uncalibrated.

The per-candidate data (registers, spills, wavefronts per block for R = 1..4) and the constants are in
``smemtile/model/data/stencil_h200.json`` (``bench/fit_stencil.py``: NVRTC and the bank model, then the fit).
Ties: predicted times within the model's resolution (``tie_band`` of the data file: the median distance of
the fit rows' errors from their median, 1.5 %: how far apart two configurations' errors typically are) of the
fastest are a tie, and go to configurations measured on the H200 first, then by predicted time, then to the
family's defaults, then to fewer threads per block. Unmeasured configurations are the model's extrapolation (the
grid holds 9 measured ones), so within its resolution the measured ones come first.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from smemtile.model.data_files import read_data
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


def load_calibration(name: str = DATA_FILE) -> dict | None:
    """The calibration data file shipped with the package (None when absent)."""
    return read_data(name, required=False)


def copy_time_us(nbytes: float, points: list) -> float:
    """The device copy's time: its measured bandwidth at the fitted sizes, interpolated in log(bytes) (held
    constant outside them)."""
    pts = sorted((float(b), float(t)) for b, t in points)
    bw = [b / t for b, t in pts]
    x = math.log(nbytes)
    if x <= math.log(pts[0][0]):
        return nbytes / bw[0]
    for (b0, _), (b1, _), g0, g1 in zip(pts, pts[1:], bw, bw[1:], strict=False):
        if x <= math.log(b1):
            f = (x - math.log(b0)) / (math.log(b1) - math.log(b0)) if b1 > b0 else 0.0
            return nbytes / (g0 + f * (g1 - g0))
    return nbytes / bw[-1]


def smax(a, b, p: float):
    """The smooth maximum (a^p + b^p)^(1/p), computed without overflow."""
    m = np.maximum(a, b)
    return m * ((a / m) ** p + (b / m) ** p) ** (1.0 / p)


def model_time_us(copy_us, rounds, wavefronts_per_sm, warps, c: dict):
    """The model's time (numpy arrays or floats) from its inputs (the copy's time, fill rounds, shared-memory
    wavefronts per SM, resident warps per SM) and the constants ``c`` (t0_us, L_us, rate_per_us, warps_full,
    p)."""
    rate = c["rate_per_us"] * np.minimum(1.0, warps / c["warps_full"])
    sm = rounds * c["L_us"] + wavefronts_per_sm / rate
    return c["t0_us"] + smax(copy_us, sm, c["p"])


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


def rank_stencil(ny: int, nx: int, radius: int = 1, arch: str = "sm_90", *, gpu: str | None = None,
                 sms: int | None = None, calibration: dict | None = None,
                 screen: Callable[[dict], list[str]] | None = None,
                 ) -> tuple[list[StencilScored], list[StencilRejected]]:  # fmt: skip
    """(ranked, rejected): every candidate at radius ``radius``, best predicted first. ``screen(params)`` is the
    family's rules for a candidate (its broken constraints, [] when it builds); a candidate ptxas makes spill or
    that fits no block on an SM is rejected too."""
    from smemtile.model.arch import get_arch
    from smemtile.model.occupancy import occupancy_batch

    if radius not in RADII:
        raise ValueError(f"stencil radius {radius!r}: one of {', '.join(map(str, RADII))}")
    a = get_arch(arch)
    g = get_gpu(gpu, a.base, sms=sms)
    cal = calibration if calibration is not None else load_calibration()
    if cal is None:
        raise ValueError(f"the stencil model's data file {DATA_FILE} is missing")
    use_cal = calibration_applies(a.base, g.key, cal) and sms in (None, cal.get("sms"))
    table = cal["candidates"].get(str(radius), {})
    total = 2.0 * ny * nx * 4
    keep, rejected = [], []
    for p in candidates():
        lab = label(p)
        why = screen(p) if screen is not None else []
        if why:
            rejected.append(StencilRejected(tuple(p.items()), lab, "rules", why[0]))
            continue
        row = table.get(lab)
        if row is None:
            rejected.append(StencilRejected(tuple(p.items()), lab, "rules", "not in the model's data (never "
                                            "compiled for this radius)"))  # fmt: skip
            continue
        regs, spill, wf_block = row
        if spill:
            rejected.append(StencilRejected(tuple(p.items()), lab, "spills", f"ptxas spills {spill} bytes at "
                                            f"{regs} registers ({cal['compiler']})"))  # fmt: skip
            continue
        keep.append((p, lab, regs, wf_block, geometry(p, radius)))
    occ = occupancy_batch(
        a, [k[4].threads for k in keep], [k[2] for k in keep], [k[4].smem_bytes for k in keep]
    )
    scored = []
    c = cal["model"]
    for i, (p, lab, regs, wf_block, geo) in enumerate(keep):
        bps = int(occ.active_blocks[i])
        if bps == 0:
            rejected.append(StencilRejected(tuple(p.items()), lab, "occupancy", f"no block fits an SM ({regs} "
                                            f"registers x {geo.threads} threads, {geo.smem_bytes} B shared)"))  # fmt: skip
            continue
        blocks = grid_blocks(p, ny, nx)
        rounds = blocks / (g.sms * bps)
        wf_sm = blocks * wf_block / g.sms
        copy_us = copy_time_us(total, cal["copy"]["points"]) if use_cal else total / (g.dram_gbps * 1e3)
        # below the smallest fitted size (L2-resident grids were not measured): the efficiency of that size
        scale = max(1.0, cal.get("min_fit_bytes", 0.0) / total)
        if use_cal and scale > 1:
            copy_us = copy_time_us(total * scale, cal["copy"]["points"])
        warps = bps * geo.threads // 32
        t = float(model_time_us(copy_us, rounds * scale, wf_sm * scale, warps, c)) / scale
        vec_ok = nx % p["VEC"] == 0
        ratio = (copy_time_us(total, cal["copy"]["points"]) / t) if use_cal else None
        meas = cal.get("measured", {}).get(str(radius), {}).get(lab, {}) if use_cal else {}
        s = StencilScored(tuple((k, p[k]) for k in PARAMS), lab, radius, geo.threads, geo.smem_bytes, regs, bps,
                          rounds, wf_block / geo.outputs, geo.halo_reads, vec_ok, t, total / (t * 1e3), ratio,
                          use_cal, dict(meas), total)  # fmt: skip
        scored.append(s)
    # the vector path first (the element path is not modelled), then by time; ties by the stated rule
    order = {s.label: i for i, s in enumerate(scored)}  # the candidates' order: the family's defaults first
    scored.sort(key=lambda s: (not s.vector_path, s.time_us))
    tie = float(cal.get("tie_band", TIE))
    out: list[StencilScored] = []
    i = 0
    while i < len(scored):
        j = i + 1
        while (j < len(scored) and scored[j].vector_path == scored[i].vector_path
               and scored[j].time_us <= scored[i].time_us * (1 + tie)):  # fmt: skip
            j += 1
        out += sorted(scored[i:j], key=lambda s: (not s.measured, s.time_us, s.params_dict() != DEFAULTS,
                                                  s.threads, order[s.label]))  # fmt: skip
        i = j
    top = out[0] if out else None
    ranked = [StencilScored(**{**asdict(s), "rank": n + 1, "reason": _reason(s, top, cal, use_cal, tie)})
              for n, s in enumerate(out)]  # fmt: skip
    return ranked, rejected


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


def fit_inputs(row: dict, sms: int) -> tuple[float, float, float, float]:
    """(copy_us, rounds, wavefronts per SM, warps per SM) of a measured row ``{"params", "R", "ny", "nx",
    "copy_us", "blocks_per_sm", "wavefronts_block", ...}``."""
    blocks = grid_blocks(row["params"], row["ny"], row["nx"])
    bps = row["blocks_per_sm"]
    warps = bps * geometry(row["params"], row["R"]).threads // 32
    return row["copy_us"], blocks / (sms * bps), blocks * row["wavefronts_block"] / sms, warps


def fit(rows: list[dict], sms: int, warps_range=range(1, 65)) -> dict:
    """The constants ``{"t0_us", "L_us", "rate_per_us", "warps_full", "p"}`` minimising the sum of squared
    relative time errors over ``rows`` (the measurements labelled fit; each with ``time_us`` and what
    :func:`fit_inputs` reads): L, RATE and p on a grid refined three times around the best for every WARPS of
    ``warps_range`` (1..64), t0 (>= 0) in closed form for each."""
    x = np.array([fit_inputs(r, sms) for r in rows])
    t = np.array([r["time_us"] for r in rows])
    w = 1.0 / t**2
    col = lambda v: v[:, None, None, None]  # noqa: E731

    def best_of(ls, rates, ps, wfull):
        lg, rg, pg = np.meshgrid(ls, rates, ps, indexing="ij")
        sm = col(x[:, 1]) * lg + col(x[:, 2] / np.minimum(1.0, x[:, 3] / wfull)) / rg
        c = col(x[:, 0])
        m = np.maximum(c, sm)
        s = m * ((c / m) ** pg + (sm / m) ** pg) ** (1.0 / pg)
        t0 = np.maximum(0.0, np.tensordot(w, col(t) - s, axes=(0, 0)) / w.sum())
        err = np.tensordot(w, (t0 + s - col(t)) ** 2, axes=(0, 0))
        k = np.unravel_index(int(np.argmin(err)), err.shape)
        return float(err[k]), float(lg[k]), float(rg[k]), float(pg[k]), float(t0[k])

    best = None
    for wfull in warps_range:
        ls, rates, ps = (
            np.linspace(0.0, 3.0, 31),
            np.geomspace(100.0, 10000.0, 31),
            np.linspace(1.0, 16.0, 31),
        )
        for _ in range(4):
            e, L, rate, p, t0 = best_of(ls, rates, ps, wfull)
            dl, dr, dp = ls[1] - ls[0], rates[1] / rates[0], ps[1] - ps[0]
            ls = np.linspace(max(0.0, L - 2 * dl), L + 2 * dl, 21)
            rates = np.geomspace(rate / dr**2, rate * dr**2, 21)
            ps = np.linspace(max(1.0, p - 2 * dp), p + 2 * dp, 21)
        if best is None or e < best[0]:
            best = (e, {"t0_us": t0, "L_us": L, "rate_per_us": rate, "warps_full": float(wfull), "p": p})
    assert best is not None
    return best[1]


def errors(rows: list[dict], consts: dict, sms: int) -> list[float]:
    """Relative time errors (predicted / measured - 1) of ``rows`` under ``consts``."""
    return [float(model_time_us(*fit_inputs(r, sms), consts)) / r["time_us"] - 1 for r in rows]
