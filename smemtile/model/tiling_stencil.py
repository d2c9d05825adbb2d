"""Tile configurations for the ``stencil2d`` family, ranked by a time model calibrated on the H200.

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
  ``FORMS`` by leave-one-radius-out on those rows (``bench/fit_stencil.py cv``); the expected error ``tiles``
  states is that cross-validated median until a sweep of shapes nobody measured (``held_out_shapes``)
  replaces it.

Halo re-reads ((BX*VEC + 2 HX) x (BY*RY + 2R) loads per BX*VEC x BY*RY outputs) come from L2, not DRAM; they
enter through the fill's loads and wavefronts and the tile's shared memory (blocks per SM), not as DRAM bytes
(a term for the L2 sectors of the fills was tried: its weight fitted to 0 next to the load instructions). Not
modelled: nx % VEC != 0 (the kernel reads element by element: such candidates are ranked after the vector
ones, stated), L2-resident grids (below the smallest fitted size a configuration keeps its efficiency there).
Another GPU or arch: the H200's constants with that GPU's DRAM bandwidth and SM count, stated as uncalibrated.

The per-candidate data (registers, spills, wavefronts per block for R = 1..4) and the constants are in
``smemtile/model/data/stencil_h200.json`` (``bench/fit_stencil.py``: NVRTC and the bank model, then the fit).
Ties: predicted times within the model's resolution (``tie_band`` of the data file: the median distance of
the fit rows' errors from their median, 3.3 %: how far apart two configurations' errors typically are) of the
fastest are a tie, and go to configurations measured on the H200 first, ordered by what they measured (the
median over the shapes timed of their ratio to a copy / the best ratio there), then to the others by predicted
time, then to the family's defaults, then to fewer threads per block. Within its resolution the model cannot
order them; the measurement can (40-45 of the 319-325 configurations per radius have been timed).
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


def rank_stencil(
    ny: int,
    nx: int,
    radius: int = 1,
    arch: str = "sm_90",
    *,
    gpu: str | None = None,
    sms: int | None = None,
    calibration: dict | None = None,
    screen: Callable[[dict], list[str]] | None = None,
) -> tuple[list[StencilScored], list[StencilRejected]]:
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
            rejected.append(
                StencilRejected(
                    tuple(p.items()), lab, "rules", "not in the model's data (never compiled for this radius)"
                )
            )
            continue
        regs, spill, wf_block = row
        if spill:
            rejected.append(
                StencilRejected(
                    tuple(p.items()),
                    lab,
                    "spills",
                    f"ptxas spills {spill} bytes at {regs} registers ({cal['compiler']})",
                )
            )
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
            rejected.append(
                StencilRejected(
                    tuple(p.items()),
                    lab,
                    "occupancy",
                    f"no block fits an SM ({regs} "
                    f"registers x {geo.threads} threads, {geo.smem_bytes} B shared)",
                )
            )
            continue
        blocks = grid_blocks(p, ny, nx)
        rounds = blocks / (g.sms * bps)
        wf_sm = blocks * wf_block / g.sms
        loads_sm = blocks * (geo.threads // 32) * geo.fill / g.sms  # the fills' global-load warp instructions
        copy_us = copy_time_us(total, cal["copy"]["points"]) if use_cal else total / (g.dram_gbps * 1e3)
        # below the smallest fitted size (L2-resident grids were not measured): the efficiency of that size
        scale = max(1.0, cal.get("min_fit_bytes", 0.0) / total)
        if use_cal and scale > 1:
            copy_us = copy_time_us(total * scale, cal["copy"]["points"])
        warps = bps * geo.threads // 32
        t_scaled = model_time_us(
            copy_us, rounds * scale, wf_sm * scale, warps, c, loads_sm * scale, blocks * scale / g.sms
        )
        t = float(t_scaled) / scale
        vec_ok = nx % p["VEC"] == 0
        ratio = (copy_time_us(total, cal["copy"]["points"]) / t) if use_cal else None
        meas = cal.get("measured", {}).get(str(radius), {}).get(lab, {}) if use_cal else {}
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
            dict(meas),
            total,
        )
        scored.append(s)
    # the vector path first (the element path is not modelled), then by time; ties by the stated rule
    order = {s.label: i for i, s in enumerate(scored)}  # the candidates' order: the family's defaults first
    scored.sort(key=lambda s: (not s.vector_path, s.time_us))
    tie = float(cal.get("tie_band", TIE))
    best_at: dict[str, float] = {}  # per shape: the best ratio to a copy measured there at this radius
    for meas in (cal.get("measured", {}).get(str(radius), {}) if use_cal else {}).values():
        for k, v in meas.items():
            best_at[k] = max(best_at.get(k, 0.0), v)
    out: list[StencilScored] = []
    i = 0
    while i < len(scored):
        j = i + 1
        while (
            j < len(scored)
            and scored[j].vector_path == scored[i].vector_path
            and scored[j].time_us <= scored[i].time_us * (1 + tie)
        ):
            j += 1
        out += sorted(
            scored[i:j],
            key=lambda s: (
                not s.measured,
                -_measured_rel(s, best_at),
                s.time_us,
                s.params_dict() != DEFAULTS,
                s.threads,
                order[s.label],
            ),
        )
        i = j
    top = out[0] if out else None
    ranked = [
        StencilScored(**{**asdict(s), "rank": n + 1, "reason": _reason(s, top, cal, use_cal, tie)})
        for n, s in enumerate(out)
    ]
    return ranked, rejected


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


def fit_inputs(row: dict, sms: int) -> tuple[float, ...]:
    """(copy_us, rounds, wavefronts per SM, warps per SM, global-load warp instructions per SM, blocks per SM) of
    a measured row ``{"params", "R", "ny", "nx", "copy_us", "blocks_per_sm", "wavefronts_block", ...}``: the
    arguments of :func:`model_time_us` after the constants."""
    blocks = grid_blocks(row["params"], row["ny"], row["nx"])
    bps = row["blocks_per_sm"]
    geo = geometry(row["params"], row["R"])
    warps = bps * geo.threads // 32
    loads = blocks * (geo.threads // 32) * geo.fill / sms
    return (
        row["copy_us"],
        blocks / (sms * bps),
        blocks * row["wavefronts_block"] / sms,
        warps,
        loads,
        blocks / sms,
    )


def _predict(x: np.ndarray, c: dict) -> np.ndarray:
    """model_time_us over the columns of ``x`` (rows of fit_inputs)."""
    return model_time_us(x[:, 0], x[:, 1], x[:, 2], x[:, 3], c, x[:, 4], x[:, 5])


# The constants fit() searches, each on a scale where steps are even: L, rate, load and block times in logs (> 0),
# t0 (>= 0) and p (1..16) as they are. FORMS: which of them a form frees (the others absent, i.e. zero).
_FREE = ("t0_us", "L_us", "rate_per_us", "p", "load_us", "block_us")
_LOG = {"L_us", "rate_per_us", "load_us", "block_us"}
FORMS = {
    "session 3 (fill rounds + shared wavefronts)": ("t0_us", "L_us", "rate_per_us", "p"),
    "+ global loads": ("t0_us", "L_us", "rate_per_us", "p", "load_us"),
    "+ global loads + blocks": _FREE,
}
FORM = "+ global loads + blocks"  # the shipped form (chosen by leave-one-radius-out, bench/fit_stencil.py cv)


def _lm(
    resid: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    iters: int = 200,
) -> tuple[np.ndarray, float]:
    """Levenberg-Marquardt on a box (each step clipped to [lo, hi]), forward-difference Jacobian; returns (x,
    sum of squared residuals). Deterministic; small problems only (a few parameters)."""
    x = np.clip(np.asarray(x0, float), lo, hi)
    r = resid(x)
    cost, lam = float(r @ r), 1e-3
    for _ in range(iters):
        h = 1e-7 * np.maximum(1.0, np.abs(x))
        jac = np.stack([(resid(x + h[i] * np.eye(len(x))[i]) - r) / h[i] for i in range(len(x))], axis=1)
        g, a = jac.T @ r, jac.T @ jac
        improved = False
        while lam < 1e10:
            step = np.linalg.solve(a + lam * np.diag(np.maximum(np.diag(a), 1e-12)), -g)
            xn = np.clip(x + step, lo, hi)
            rn = resid(xn)
            cn = float(rn @ rn)
            if np.isfinite(cn) and cn < cost:
                done = cost - cn < 1e-12 * max(cost, 1e-30)
                x, r, cost, lam, improved = xn, rn, cn, max(lam / 3, 1e-12), True
                break
            lam *= 4
        if not improved or done:
            break
    return x, cost


def fit(
    rows: list[dict], sms: int, warps_range=range(1, 65), *, form: str = FORM, rate_max: float = 1980.0
) -> dict:
    """The constants ``{"t0_us", "L_us", "rate_per_us", "warps_full", "p", "load_us", "block_us"}`` minimising
    the sum of squared relative time errors over ``rows`` (the measurements labelled fit; each with ``time_us``
    and what :func:`fit_inputs` reads): for every WARPS of ``warps_range``, the form's other constants by
    Levenberg-Marquardt from three fixed starts, rate at most ``rate_max`` (one wavefront per clock: the H200's
    1980 MHz)."""
    free = FORMS[form]
    x = np.array([fit_inputs(r, sms) for r in rows], float)
    t = np.array([r["time_us"] for r in rows], float)
    lo = np.array([math.log(1e-6) if k in _LOG else {"t0_us": 0.0, "p": 1.0}[k] for k in free])
    hi = np.array(
        [
            math.log(rate_max)
            if k == "rate_per_us"
            else math.log(1e4)
            if k in _LOG
            else {"t0_us": 100.0, "p": 16.0}[k]
            for k in free
        ]
    )
    starts = (
        {"t0_us": 0.3, "L_us": 0.9, "rate_per_us": 1500.0, "p": 3.0, "load_us": 3e-3, "block_us": 0.05},
        {"t0_us": 1.0, "L_us": 0.3, "rate_per_us": 1000.0, "p": 2.0, "load_us": 1e-3, "block_us": 0.02},
        {"t0_us": 0.0, "L_us": 1.5, "rate_per_us": 1900.0, "p": 6.0, "load_us": 1e-2, "block_us": 0.1},
    )

    def consts(v: np.ndarray, wfull: float) -> dict:
        c = {k: (math.exp(a) if k in _LOG else float(a)) for k, a in zip(free, v, strict=True)}
        return {"warps_full": float(wfull), **c}

    best = None
    for wfull in warps_range:
        for s0 in starts:
            v0 = np.array([math.log(s0[k]) if k in _LOG else s0[k] for k in free])

            def resid(v: np.ndarray, wfull=wfull) -> np.ndarray:
                return _predict(x, consts(v, wfull)) / t - 1

            v, cost = _lm(resid, v0, lo, hi)
            if best is None or cost < best[0] - 1e-15:
                best = (cost, consts(v, wfull))
    assert best is not None
    c = best[1]
    return {
        k: c.get(k, 0.0) for k in ("t0_us", "L_us", "rate_per_us", "warps_full", "p", "load_us", "block_us")
    }


def errors(rows: list[dict], consts: dict, sms: int) -> list[float]:
    """Relative time errors (predicted / measured - 1) of ``rows`` under ``consts``."""
    x = np.array([fit_inputs(r, sms) for r in rows], float)
    t = np.array([r["time_us"] for r in rows], float)
    return [float(e) for e in _predict(x, consts) / t - 1]
