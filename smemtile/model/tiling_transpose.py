"""Tile configurations for the ``transpose`` family, ranked per element size by a model calibrated on the H200.

The model in one screen. A transpose moves ``2 x rows x cols x elem`` bytes and is bound by DRAM; what decides
its last 5-10 % (launch order, run length of the writes, bytes in flight, block size) is invisible to a bank or
occupancy count, so each candidate's speed is *measured*, and the model only carries it to other shapes:

    time(c, shape) = t0[c] + (vector_bytes + scalar_bytes / KAPPA + PHI_LINE x line_bytes
                              + MU_IN x sector_in_bytes + MU_OUT[c] x sector_out_bytes) / bw[c]

- ``vector_bytes``: the bytes of whole tiles (they take the kernel's vector path: 16-byte global accesses);
  ``scalar_bytes``: the edge tiles (masked, one element per access) and every tile when rows or cols is not a
  multiple of the vector width; KAPPA (<= 1) is how much slower a byte of the scalar path is.
- misalignment, per side: each side (the reads of input rows, the writes of output rows) moves its bytes in runs
  of ``TILE x elem`` (input) and ``TY x TILES x elem`` (output) bytes. When the side's row pitch is a multiple of
  32 but not of 128 bytes, every run starts inside a 128-byte line: ``line_bytes = side_bytes x 128 / run``. When
  it is not a multiple of 32, every run starts inside a 32-byte sector: that side's bytes count
  ``sector_in_bytes`` (input pitch = cols x elem) or ``sector_out_bytes`` (output pitch = rows x elem). The
  output side has a weight per candidate, MU_OUT[c] (partial sectors written by two blocks at different times;
  fp16 5000 x 6000 and 7000 x 9000 measured 0.23-0.92 of the side's bytes, no run-length law fits it); the
  input side one weight per element size, MU_IN (fp16: 0.1, fitted on 7000 x 9000 and the two shapes whose
  input pitch alone is 16 mod 32 bytes, 6144 x 5000 and 4096 x 9000; a read run starting mid-sector shares
  that sector with the neighbouring run, mostly from L2). A weight per candidate for the input side
  (``fit(rows, "per_candidate")``) was the alternative: it lost the leave-one-shape-out choice on the fit
  shapes (mean fp16 Spearman 0.70 against 0.77; bench/NOTES.md), the form itself chosen among six before. A
  candidate with no sector-misaligned fit point uses the median MU_OUT of its element size (fp32 has none:
  MU_OUT = MU_IN = 0, stated). A device copy of contiguous bytes pays neither.
- ``t0[c]`` (launch, ramp-up, the last wave's tail), ``bw[c]`` (steady bandwidth) and MU_OUT[c] per candidate;
  KAPPA, PHI_LINE and MU_IN per element size: weighted least squares on relative time error over the shapes of
  the sweeps (``bench/bench_memory.py --plan run4``, ``run5``, ``spearman``, then ``--fit``; the shared constants
  on a grid, KAPPA >= 0.25: the scalar path still moves whole 64/128-byte warp rows). The expected error
  ``tiles`` states is the leave-one-shape-out median over the fit shapes until a held-out sweep replaces it.
- predicted GB/s = 2 x rows x cols x elem / time; the ratio to a device copy of the same bytes divides by the
  copy's measured bandwidth at the fitted sizes, interpolated in log(bytes). Below the smallest fitted size
  (64 MiB fp16, 128 MiB fp32: smaller problems live in L2 and were not measured) a candidate keeps the
  efficiency it has there.

The constants are data: ``smemtile/model/data/transpose_h200.json`` (GPU, run, commit, fit and held-out shapes,
per-candidate constants and the held-out errors). Ties (within 0.05 %) go to fewer threads per block, then the
family's candidate order. Without a calibration for the target (another architecture, no data file), the
candidates are ranked by Little's law alone (bytes in flight per SM against DRAM bandwidth x 1 us), stated as
uncalibrated.

Candidates per element size (``CANDIDATES``) are the configurations the sweep measures, every one the family
builds (the layout is the fix search's: pad 1 or a swizzle, conflict-free in both phases).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import asdict, dataclass

import numpy as np

from smemtile.model.data_files import read_data
from smemtile.model.tiling_gpus import get_gpu

LATENCY_S = 1e-6  # the uncalibrated fallback's DRAM latency under load (Little's law)
ELEM = {"f32": 4, "f16": 2, "bf16": 2}
DATA_FILE = "transpose_h200.json"
DEFAULTS = {
    "TILE": 64,
    "BLOCK_ROWS": 4,
    "TILE_Y": 0,
    "PACK": 1,
    "TILES": 1,
    "STREAM": 0,
    "MIN_BLOCKS": 1,
    "GROUP": 1,
}
PARAMS = tuple(DEFAULTS)  # what a candidate sets
TIE = 5e-4  # predicted times within 0.05 % are a tie


def _c(tile: int, br: int, **kw: int) -> dict:
    return {**DEFAULTS, "TILE": tile, "BLOCK_ROWS": br, **kw}


# Per element size (bytes): the candidate configurations. 4 bytes: V = 4 (float4 global accesses); 2 bytes: V = 8.
CANDIDATES: dict[int, tuple[dict, ...]] = {
    4: (
        _c(64, 8),  # the shipped sample (0.942x in run 2)
        _c(64, 4),  # the family's parameter defaults (0.933x)
        _c(64, 8, PACK=2),  # 8-byte phase-2 loads: 2 output rows per thread
        _c(64, 4, PACK=2),
        _c(64, 4, PACK=4),  # 16-byte phase-2 loads: a 4 x 4 block transposed in registers
        _c(64, 16, TILES=2),  # 1024 threads, the second tile's loads in flight while the first is staged
        _c(64, 8, TILES=2),
        _c(64, 8, PACK=2, TILES=2),
        _c(64, 8, STREAM=1),  # evict-first global accesses
        _c(64, 8, PACK=2, STREAM=1),
        _c(64, 16, TILE_Y=128),  # tall tile: 512-byte output runs
        _c(32, 8),  # the 32 x 32 classic (0.864x)
        _c(64, 16, TILES=4, MIN_BLOCKS=2),  # run 5: 4 tiles per block, registers held to 2 blocks/SM
    ),
    2: (
        _c(128, 8),  # best of run 2 (0.928x)
        _c(64, 4),  # the family's parameter defaults (0.900x)
        _c(128, 8, PACK=2),  # half2 pairs: 4-byte phase-2 loads, 2 x 2 blocks swapped in registers
        _c(64, 4, PACK=2),
        _c(128, 4, PACK=2),
        _c(128, 4, PACK=4),  # 8-byte phase-2 loads, 4 output rows per thread
        _c(64, 2, PACK=4),
        _c(64, 8, TILE_Y=128, PACK=2),
        _c(128, 8, PACK=2, TILES=2),
        _c(64, 8, TILES=2),
        _c(64, 4, PACK=2, TILES=2),
        _c(128, 8, PACK=2, STREAM=1),
        _c(64, 16, TILE_Y=128, TILES=2),
        _c(64, 8),  # one vector per thread (0.84x in run 2)
        # run 5: TILES with the registers held to full occupancy (32 registers, no spills, ptxas 13.0)
        _c(128, 8, PACK=2, TILES=2, MIN_BLOCKS=2),
        _c(64, 8, TILES=2, MIN_BLOCKS=4),
        _c(64, 8, TILE_Y=128, TILES=2, MIN_BLOCKS=4),
        _c(64, 16, TILE_Y=128, TILES=4, MIN_BLOCKS=2),
    ),
}


# The candidate space ``tiles --family transpose`` enumerates (session 5): every combination of these values, then
# the family's own rules screen it (``Family.problems``: whole warps, <= 1024 threads, TILE_Y a multiple of TILE,
# PACK dividing the vectors per thread, the tile <= 48 KiB static shared memory) and ptxas (MIN_BLOCKS > 1 is
# kept only where it changes the registers: otherwise the same kernel as MIN_BLOCKS 1). VEC 0 (the widest access
# the tile allows) stays at its default; the launch order is GROUP 1 (row by row) or 0 (column by column, session
# 6: 0.3-2.5 % faster at 8192^2); GROUP 8 and 32 lost 2 % in runs 1-2 (bench/NOTES.md).
SPACE = {
    "TILE": (32, 64, 128),
    "BLOCK_ROWS": (1, 2, 4, 8, 16, 32),
    "TILE_Y": (1, 2),
    "PACK": (1, 2, 4),
    "TILES": (1, 2, 4),
    "STREAM": (0, 1),
    "MIN_BLOCKS": (1, 0),
    "GROUP": (1, 0),
}  # TILE_Y: x TILE; MIN_BLOCKS 0: full occupancy
FULL_THREADS, MAX_BLOCKS = 2048, 32  # sm_90: resident threads and blocks per SM


def full_blocks(threads: int) -> int:
    """MIN_BLOCKS that asks for full occupancy (2048 threads per SM, at most 32 blocks)."""
    return max(1, min(MAX_BLOCKS, FULL_THREADS // max(1, threads)))


def space(dtype: str) -> list[dict]:
    """Every configuration the candidate space spans for ``dtype`` (before the family's rules): the curated
    candidates first (the sweeps' own, in their order), then the grid of ``SPACE`` in a fixed order, each once."""
    _elem(dtype)
    out, seen = [], set()
    for p in candidates(dtype):
        out.append(p)
        seen.add(label(p))
    keys = tuple(SPACE)
    for vals in itertools.product(*(SPACE[k] for k in keys)):
        q = dict(zip(keys, vals, strict=True))
        tile, br = q["TILE"], q["BLOCK_ROWS"]
        ty = tile * q["TILE_Y"]
        p = {
            **DEFAULTS,
            "TILE": tile,
            "BLOCK_ROWS": br,
            "TILE_Y": 0 if ty == tile else ty,
            "PACK": q["PACK"],
            "TILES": q["TILES"],
            "STREAM": q["STREAM"],
            "MIN_BLOCKS": 1 if q["MIN_BLOCKS"] else full_blocks(tile * br),
            "GROUP": q["GROUP"],
        }
        if q["MIN_BLOCKS"] == 0 and p["MIN_BLOCKS"] == 1:
            continue
        if label(p) not in seen:
            seen.add(label(p))
            out.append(p)
    return out


def set_params(p: dict) -> dict:
    """The family parameters configuration ``p`` sets: TILE and BLOCK_ROWS always, the rest where not default."""
    return {k: v for k, v in p.items() if k in ("TILE", "BLOCK_ROWS") or v != DEFAULTS[k]}


def label(p: dict) -> str:
    """A short name: ``T128x8``, ``T64xY128x8``, then `` P2`` (PACK), `` 2tiles``, `` cs`` (STREAM), `` col`` (GROUP 0)."""
    q = {**DEFAULTS, **p}
    ty = f"xY{q['TILE_Y']}" if q["TILE_Y"] and q["TILE_Y"] != q["TILE"] else ""
    out = f"T{q['TILE']}{ty}x{q['BLOCK_ROWS']}"
    if q["PACK"] > 1:
        out += f" P{q['PACK']}"
    if q["TILES"] > 1:
        out += f" {q['TILES']}tiles"
    if q["STREAM"]:
        out += " cs"
    if q["MIN_BLOCKS"] > 1:
        out += f" mb{q['MIN_BLOCKS']}"
    if q.get("GROUP", 1) > 1:
        out += f" G{q['GROUP']}"
    elif q.get("GROUP", 1) == 0:
        out += " col"
    return out


def candidates(dtype: str) -> list[dict]:
    """The candidate configurations (family parameters) for ``dtype``."""
    return [dict(c) for c in CANDIDATES[_elem(dtype)]]


def _elem(dtype: str) -> int:
    e = ELEM.get(str(dtype).lower())
    if e is None:
        raise ValueError(f"transpose dtype {dtype!r}: one of {', '.join(ELEM)}")
    return e


@dataclass(frozen=True)
class Geometry:
    """What a candidate does per block (the family's own arithmetic, transpose_auto_vec and the tile shape)."""

    tile: int
    ty: int
    threads: int
    vec: int  # elements per global access on whole tiles
    per_thread: int  # vectors each thread loads per tile
    smem_bytes: int  # the tile, assuming pad 1 for 4-byte PACK 1 (the fix search's pick) and none otherwise


def geometry(p: dict, elem: int) -> Geometry:
    q = {**DEFAULTS, **p}
    tile, br = q["TILE"], q["BLOCK_ROWS"]
    ty = q["TILE_Y"] or tile
    threads, warps = tile * br, tile * br // 32
    v = 16 // elem
    while v > 1 and ((tile // v) % 8 or (ty // v) % 8 or warps < 1 or ((ty // 4) * (tile // v // 8)) % warps):
        v //= 2
    per = (ty // 4) * (tile // v // 8) // warps if v > 1 and warps else 0
    pad = 1 if elem == 4 and q["PACK"] == 1 else 0
    return Geometry(tile, ty, threads, v, per, ty * (tile + pad) * elem)


def split_bytes(p: dict, rows: int, cols: int, elem: int) -> tuple[float, float]:
    """(bytes through whole tiles on the vector path, bytes through the scalar path), reads + writes."""
    g = geometry(p, elem)
    total = 2.0 * rows * cols * elem
    if g.vec < 2 or rows % g.vec or cols % g.vec:
        return 0.0, total
    whole = 2.0 * (cols // g.tile * g.tile) * (rows // g.ty * g.ty) * elem
    return whole, total - whole


def misaligned_sides(p: dict, rows: int, cols: int, elem: int) -> tuple[float, float, float]:
    """(line_bytes, sector_in_bytes, sector_out_bytes): see the module docstring (the runs of each side whose
    pitch is not line or sector aligned)."""
    q = {**DEFAULTS, **p}
    g = geometry(q, elem)
    side = float(rows) * cols * elem
    line, sectors = 0.0, [0.0, 0.0]
    for k, (pitch, run) in enumerate(((cols * elem, g.tile * elem), (rows * elem, g.ty * q["TILES"] * elem))):
        if pitch % 32:
            sectors[k] = side
        elif pitch % 128:
            line += side * 128 / run
    return line, sectors[0], sectors[1]


def misaligned_bytes(p: dict, rows: int, cols: int, elem: int) -> tuple[float, float]:
    """(line_bytes, sector_bytes of both sides together)."""
    line, s_in, s_out = misaligned_sides(p, rows, cols, elem)
    return line, s_in + s_out


@dataclass(frozen=True)
class TransposeScored:
    params: tuple  # ((name, value), ...) of PARAMS
    label: str
    threads: int
    smem_bytes: int
    blocks_per_sm: int
    in_flight_bytes: int  # per SM, the loads of every resident block's tiles
    vector_fraction: float  # of the bytes, through whole tiles (vector path)
    time_us: float
    gbps: float
    copy_ratio: float | None  # predicted time of a device copy of the same bytes / this one (calibrated only)
    calibrated: bool
    elem: int = 4
    bytes: float = 0.0  # read + written
    rank: int = 0
    reason: str = ""
    measured: bool = False  # timed on the H200 (its own constants, shrunk toward the feature model)
    registers: int | None = None  # ptxas (the data file's table); None: not known, 32 assumed

    @property
    def tile(self) -> int:
        return dict(self.params)["TILE"]

    @property
    def block_rows(self) -> int:
        return dict(self.params)["BLOCK_ROWS"]

    def params_dict(self) -> dict:
        """The family parameters this candidate sets (defaults left out)."""
        return set_params(dict(self.params))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["params"] = self.params_dict()
        return d


def load_calibration(name: str = DATA_FILE) -> dict | None:
    """The calibration data file shipped with the package (None when absent)."""
    return read_data(name, required=False)


def _key(p: dict) -> str:
    return label(p)


def predict_time_us(p: dict, rows: int, cols: int, dtype: str, cal: dict) -> float | None:
    """The calibrated time of candidate ``p``: its own constants where it was measured (shrunk toward the feature
    model), else the feature model's (None when the calibration has neither)."""
    elem = _elem(dtype)
    per = cal["constants"].get(str(elem), {})
    c = per.get("candidates", {}).get(_key(p))
    twin = twin_of(p, cal, elem)
    if c is None or twin is not None:  # not timed, or its bandwidth not measured and its other order's was
        if "coef" not in per:
            return None
        t0, inv, w = prior(features(p, elem, registers_of(p, elem, cal)), per["coef"])
        c = {"t0_us": t0, "bw_gbps": 1.0 / inv, "mu_out": w / inv}
        if twin is not None:  # the other launch order was timed: its constants, bw moved by the order's terms
            _, inv_twin, w_twin = prior(features(twin, elem, registers_of(twin, elem, cal)), per["coef"])
            c = {**per["candidates"][_key(twin)]}
            c["bw_gbps"] *= inv_twin / inv
            # the output side's weight (per byte, relative to 1/bw) moved by the order's term the same way
            c["mu_out"] = c["mu_out"] * (w / inv) / (w_twin / inv_twin) if w_twin > 0 else w / inv
    m = {**cal.get("model", {}), **per.get("model", {})}  # the element size's shared constants
    vec, scalar = split_bytes(p, rows, cols, elem)
    line, s_in, s_out = misaligned_sides(p, rows, cols, elem)
    mu_in = c.get("mu_in", m.get("mu_in", 0.0))  # per candidate where fitted so, else the element size's
    phi = c.get(
        "phi_line", m["phi_line"]
    )  # per candidate where it was measured (shrunk), else the shared one
    x = vec + scalar / m["kappa"] + phi * line + mu_in * s_in + c["mu_out"] * s_out
    # below the smallest fitted size (L2-sized problems are not measured) the efficiency of that size: the bytes
    # scaled up to it, the time scaled back down (the shape's edge and misaligned fractions kept)
    scale = max(1.0, per.get("min_fit_bytes", 0.0) / (vec + scalar))
    edge = per.get("coef", {}).get("edge", 0.0) * scalar * edge_loop(p) / 1e3  # the edge tiles' serial loop
    edge += col_misaligned_us(p, line, s_in, per.get("coef", {}))
    return (c["t0_us"] + scale * (x / (c["bw_gbps"] * 1e3) + edge)) / scale


def twin_of(p: dict, cal: dict | None, elem: int) -> dict | None:
    """The same configuration in the other launch order (GROUP 1 <-> 0) when it was timed and ``p`` was not: an
    unmeasured candidate carries its twin's constants, its bandwidth moved by the feature model's launch-order
    terms (what the order changes), instead of the feature model's whole guess."""
    q = {**DEFAULTS, **p}
    measured = measured_labels(cal, elem)
    if q["GROUP"] not in (0, 1) or _key(q) in measured:
        return None
    twin = {**q, "GROUP": 1 - q["GROUP"]}
    return twin if _key(twin) in measured else None


def measured_labels(cal: dict | None, elem: int) -> set[str]:
    """The candidates whose bandwidth was measured: fitted on at least one shape without misaligned runs (one
    timed only on misaligned shapes keeps the feature model's bandwidth, so it ranks as unmeasured)."""
    fitted = (cal or {}).get("constants", {}).get(str(elem), {}).get("candidates", {})
    return {lab for lab, c in fitted.items() if c.get("bw_measured", True)}


def registers_of(p: dict, elem: int, cal: dict | None) -> int | None:
    """ptxas' registers for candidate ``p`` (the data file's table, NVRTC 13.0 sm_90), None when not listed."""
    return ((cal or {}).get("registers", {}).get(str(elem), {}).get(_key(p)) or [None])[0]


def ranked_space(dtype: str, cal: dict | None) -> list[dict]:
    """The candidates the calibrated model ranks: every configuration of ``space`` the data file's table lists
    (those the family's rules let through and ptxas built without spilling), the curated ones first; without a
    table, the curated list."""
    table = (cal or {}).get("registers", {}).get(str(_elem(dtype)))
    if not table:
        return candidates(dtype)
    return [
        p
        for p in space(dtype)
        if label(p) in table and not table[label(p)][1] and not duplicate_of(p, dtype, cal)
    ]


def duplicate_of(p: dict, dtype: str, cal: dict | None) -> str | None:
    """For MIN_BLOCKS > 1: the MIN_BLOCKS 1 configuration with the same registers (ptxas had nothing to give
    up: the same kernel), else None."""
    q = {**DEFAULTS, **p}
    if q["MIN_BLOCKS"] == 1 or label(q) in {label(c) for c in candidates(dtype)}:  # the curated ones stay
        return None
    base = {**q, "MIN_BLOCKS": 1}
    r, r1 = registers_of(q, _elem(dtype), cal), registers_of(base, _elem(dtype), cal)
    return label(base) if r is not None and r == r1 else None


def copy_time_us(nbytes: float, cal: dict) -> float:
    """The device copy's time: its measured bandwidth at the fitted sizes, interpolated in log(bytes) (held
    constant outside them)."""
    pts = sorted(cal["copy"]["points"])
    bw = [b / t for b, t in pts]
    x = math.log(nbytes)
    if x <= math.log(pts[0][0]):
        return nbytes / bw[0]
    for (b0, _), (b1, _), g0, g1 in zip(pts, pts[1:], bw, bw[1:], strict=False):  # consecutive pairs
        if x <= math.log(b1):
            f = (x - math.log(b0)) / (math.log(b1) - math.log(b0)) if b1 > b0 else 0.0
            return nbytes / (g0 + f * (g1 - g0))
    return nbytes / bw[-1]


def calibration_applies(arch: str, gpu_key: str, cal: dict | None) -> bool:
    return cal is not None and arch in cal.get("archs", ()) and gpu_key == cal.get("gpu_key")


def rank_transpose(
    rows: int,
    cols: int,
    dtype: str = "f32",
    arch: str = "sm_90",
    *,
    gpu: str | None = None,
    sms: int | None = None,
    calibration: dict | None = None,
    cands: list[dict] | None = None,
) -> list[TransposeScored]:
    """Every candidate for ``dtype`` (``cands``, else ``ranked_space``), best predicted first (calibrated where
    the data file covers the target)."""
    from smemtile.model.arch import get_arch

    a = get_arch(arch)
    g = get_gpu(gpu, a.base, sms=sms)
    elem = _elem(dtype)
    cal = calibration if calibration is not None else load_calibration()
    use_cal = calibration_applies(a.base, g.key, cal) and sms in (None, cal.get("sms"))
    need = g.dram_gbps * 1e9 / g.sms * LATENCY_S  # bytes in flight per SM that cover the latency
    total = 2.0 * rows * cols * elem
    measured = measured_labels(cal, elem) if use_cal else set()
    scored = []
    for i, p in enumerate(cands if cands is not None else ranked_space(dtype, cal if use_cal else None)):
        p = {**DEFAULTS, **p}
        geo = geometry(p, elem)
        regs = registers_of(p, elem, cal) if use_cal else None
        blocks, _ = residency(a.name, geo.threads, regs or 32, geo.smem_bytes)
        if blocks == 0:
            continue
        # every tile's loads are in flight before its barrier
        in_flight = blocks * geo.ty * geo.tile * elem * p["TILES"]
        vec, _ = split_bytes(p, rows, cols, elem)
        t = predict_time_us(p, rows, cols, dtype, cal) if use_cal else None
        calibrated = t is not None
        if t is None:  # Little's law: bandwidth = DRAM x min(1, in flight / needed); edge tiles 3x slower
            eff = g.dram_gbps * min(1.0, in_flight / need)
            t = (vec + 3.0 * (total - vec)) / (eff * 1e3)
        ratio = copy_time_us(total, cal) / t if calibrated else None
        # a candidate never timed ranks as if its expected error slower (the fit's unmeasured_penalty): within
        # that, the measured one is the safer pick
        pen = cal["constants"].get(str(elem), {}).get("unmeasured_penalty", 0.0) if calibrated else 0.0
        key = (t * (1 + (0.0 if label(p) in measured else pen)), geo.threads, i)
        scored.append(
            (
                key,
                TransposeScored(
                    tuple((k, p[k]) for k in PARAMS),
                    label(p),
                    geo.threads,
                    geo.smem_bytes,
                    blocks,
                    in_flight,
                    vec / total,
                    t,
                    total / (t * 1e3),
                    ratio,
                    calibrated,
                    elem,
                    total,
                    measured=label(p) in measured,
                    registers=regs,
                ),
            )
        )
    # calibrated candidates first; times within TIE of each other are ordered by threads, then candidate order
    scored.sort(key=lambda x: (not x[1].calibrated, x[0][0]))
    out: list[TransposeScored] = []
    i = 0
    while i < len(scored):
        j = i + 1
        while (
            j < len(scored)
            and scored[j][1].calibrated == scored[i][1].calibrated
            and scored[j][0][0] <= scored[i][0][0] * (1 + TIE)
        ):
            j += 1
        out += [s for _, s in sorted(scored[i:j], key=lambda x: x[0][1:])]
        i = j
    top = out[0] if out else None
    ranked = []
    for n, s in enumerate(out):
        ranked.append(TransposeScored(**{**asdict(s), "rank": n + 1, "reason": _reason(s, top, cal, need)}))
    return ranked


def _reason(s: TransposeScored, top: TransposeScored | None, cal: dict | None, need: float) -> str:
    if not s.calibrated:
        return (
            f"uncalibrated (Little's law): {s.in_flight_bytes // 1024} KiB in flight per SM of "
            f"{need / 1024:.0f} KiB needed"
        )
    src = f"calibrated on the {cal['gpu']} ({cal['run']})" if cal else "calibrated"
    ratio = f", {s.copy_ratio:.3f}x a device copy" if s.copy_ratio else ""
    edge = f"; {1 - s.vector_fraction:.1%} of the bytes in edge tiles" if s.vector_fraction < 0.9995 else ""
    if cal and s.bytes < cal["constants"].get(str(s.elem), {}).get("min_fit_bytes", 0):
        edge += f"; below the calibrated sizes (>= {cal['constants'][str(s.elem)]['min_fit_bytes'] / 2**20:.0f} MiB)"
    if cal and not s.measured and "coef" in cal["constants"].get(str(s.elem), {}):
        err = expected_error(f"f{8 * s.elem}", cal, measured=False)
        twin = twin_of(dict(s.params), cal, s.elem)
        fitted = s.label in cal["constants"][str(s.elem)].get("candidates", {})
        if twin is not None:
            how = f"not timed here: {label(twin)}'s constants, the launch order from the feature model"
        elif fitted:
            how = "timed only on misaligned shapes: the feature model's bandwidth"
        else:
            how = "not timed: the feature model"
        edge += f"; {how}" + (f" (expected error {err:.1%})" if err is not None else "")
    if top is None or s is top or s.label == top.label:
        return f"best: {s.gbps:.0f} GB/s predicted{ratio}{edge} ({src})"
    return f"{top.time_us / s.time_us - 1:+.1%} vs #1: {s.gbps:.0f} GB/s predicted{ratio}{edge}"


def expected_error(dtype: str, cal: dict | None = None, *, measured: bool = True) -> float | None:
    """The calibration's median relative time error for this element size: on the held-out shapes for the
    candidates it measured (``measured``), else its error on candidates left out of the fit (cross-validated
    over candidates, then replaced by a held-out run's unmeasured candidates)."""
    cal = cal if cal is not None else load_calibration()
    if cal is None:
        return None
    per = cal["constants"].get(str(_elem(dtype)), {})
    if not measured and "unmeasured_median_error" in per:
        return per["unmeasured_median_error"]
    return per.get("held_out_median_error")


KAPPAS = tuple(k / 20 for k in range(5, 21))  # 0.25 .. 1
PHIS = tuple(k / 20 for k in range(0, 41))  # 0 .. 2
MU_INS = tuple(k / 20 for k in range(0, 31))  # 0 .. 1.5


MU_IN_FORMS = (
    "per_candidate",
    "shared",
)  # the input side's weight: one per candidate, or one per element size


def fit(rows: list[dict], mu_in_form: str = "per_candidate") -> dict:
    """Fit the constants from measured rows ``{"label", "elem", "rows", "cols", "time_us", "params"}``: per element
    size KAPPA and PHI_LINE on a grid; per candidate (t0, bw, MU_OUT) by least squares on relative error (t0,
    MU_OUT >= 0; MU_OUT only where the candidate has a point whose output pitch is sector-misaligned, else the
    median of its element size). The input side (``mu_in_form``): ``"per_candidate"`` fits MU_IN with t0, bw and
    MU_OUT (>= 0, where the candidate has a point whose input pitch is sector-misaligned, else the median);
    ``"shared"`` one MU_IN per element size on the grid. Returns ``{"model": {}, "constants": {elem: {"model":
    {"kappa", "phi_line", "mu_in", "mu_in_form"}, "candidates": {label: {"t0_us", "bw_gbps", "mu_out", ["mu_in"],
    "fit_points", "fit_max_error"}}, "min_fit_bytes", "mu_out_median", ["mu_in_median"]}}}``."""
    assert mu_in_form in MU_IN_FORMS, mu_in_form
    per_cand = mu_in_form == "per_candidate"
    out: dict = {"model": {}, "constants": {}}
    for elem in sorted({r["elem"] for r in rows}):
        groups: dict[str, list[dict]] = {}
        for r in rows:
            if r["elem"] == elem:
                groups.setdefault(r["label"], []).append(r)
        parts = {
            lab: [
                (
                    *split_bytes(r["params"], r["rows"], r["cols"], elem),
                    *misaligned_sides(r["params"], r["rows"], r["cols"], elem),
                )
                for r in pts
            ]
            for lab, pts in groups.items()
        }
        any_in = any(si > 0 for pts in parts.values() for *_, si, _ in pts)
        best = None
        for kappa in KAPPAS:
            for phi_line in PHIS:
                for mu_in in MU_INS if any_in and not per_cand else (0.0,):
                    err, cons = 0.0, {}
                    for lab in groups:
                        xs = [
                            (v + s / kappa + phi_line * ml + mu_in * si) / 1e3
                            for v, s, ml, si, _ in parts[lab]
                        ]
                        zs = [[so / 1e3 for *_, so in parts[lab]]]
                        if per_cand:
                            zs.append([si / 1e3 for *_, si, _ in parts[lab]])
                        sol = _lsq_rel(xs, zs, [r["time_us"] for r in groups[lab]])
                        err += sum(e * e for e in sol[3])
                        cons[lab] = sol
                    if best is None or err < best[0] - 1e-15:
                        best = (err, kappa, phi_line, mu_in, cons)
        assert best is not None
        _, kappa, phi_line, mu_in, cons = best
        per = {
            "model": {"kappa": kappa, "phi_line": phi_line, "mu_in": mu_in, "mu_in_form": mu_in_form},
            "candidates": {},
        }
        for lab, (t0, inv, mus, errs) in sorted(cons.items()):
            c = {"t0_us": t0, "bw_gbps": 1.0 / inv, "mu_out": mus[0]}
            if per_cand:
                c["mu_in"] = mus[1]
            per["candidates"][lab] = {**c, "fit_points": len(errs), "fit_max_error": max(errs)}
        per["min_fit_bytes"] = min(2.0 * r["rows"] * r["cols"] * elem for pts in groups.values() for r in pts)
        for key in ("mu_out", "mu_in") if per_cand else ("mu_out",):
            mus = sorted(c[key] for c in per["candidates"].values() if c[key] is not None)
            per[f"{key}_median"] = mus[len(mus) // 2] if mus else 0.0
            for c in per[
                "candidates"
            ].values():  # candidates without a sector-misaligned fit point: the median
                if c[key] is None:
                    c[key] = per[f"{key}_median"]
        out["constants"][str(elem)] = per
    return out


def _lsq_rel(
    xs: list[float], zs: list[list[float]], ts: list[float]
) -> tuple[float, float, list[float | None], list[float]]:
    """(t0, inv, [mu per z column], relative errors) minimising sum(((t0 + inv (x + sum mu_k z_k)) - t) / t)^2
    with t0 >= 0 and every mu_k >= 0; a mu_k is None (not fitted) when no point has z_k > 0. Where the free
    solution has a negative t0 or mu, the subsets with fewer of them are tried: t0 dropped first, then the mus
    in order."""
    from itertools import combinations

    a = np.array([[1.0, x, *z] for x, *z in zip(xs, *zs, strict=True)]) / np.array(ts)[:, None]
    b = np.ones(len(ts))
    fitted = [2 + k for k, z in enumerate(zs) if any(v > 0 for v in z)]
    optional = [0, *fitted]
    t0, inv, w = 0.0, 0.0, {}
    for n in range(len(optional) + 1):
        for drop in combinations(optional, n):
            keep = [1, *(c for c in optional if c not in drop)]
            keep.sort()
            sol, *_ = np.linalg.lstsq(a[:, keep], b, rcond=None)
            full = dict(zip(keep, sol, strict=True))
            t0, inv = full.get(0, 0.0), full.get(1, 0.0)
            w = {c: full.get(c, 0.0) for c in fitted}
            if t0 >= 0 and inv > 0 and all(v >= 0 for v in w.values()):
                break
        else:
            continue
        break
    errs = [
        abs(t0 + inv * x + sum(w.get(2 + k, 0.0) * z for k, z in enumerate(zk)) - t) / t
        for x, *zk, t in zip(xs, *zs, ts, strict=True)
    ]
    mus = [float(w[2 + k] / inv) if 2 + k in w else None for k in range(len(zs))]
    return float(t0), float(inv), mus, errs


def copy_fit(points: list[tuple[float, float]]) -> dict:
    """``{"points": [[bytes, microseconds], ...]}`` of the device copy (the median where a size repeats)."""
    by: dict[float, list[float]] = {}
    for b, t in points:
        by.setdefault(float(b), []).append(t)
    return {"points": [[b, sorted(ts)[len(ts) // 2]] for b, ts in sorted(by.items())]}


def waves(p: dict, rows: int, cols: int, elem: int, blocks_per_sm: int, sms: int) -> float:
    """Blocks of the grid / resident blocks of the GPU (a diagnostic the notes quote)."""
    g = geometry(p, elem)
    blocks = math.ceil(cols / g.tile) * math.ceil(rows / (g.ty * p.get("TILES", 1)))
    return blocks / max(1, blocks_per_sm * sms)


# ---- the feature model (session 5): every candidate of the space, measured or not --------------------------------

NEED_BYTES = 4.8e12 / 132 * 1e-6  # Little's law: bytes in flight per SM that cover 1 us of the H200's DRAM
# sm_90: L1 and shared memory are one 256 KB array per SM; the shared part is one of the arch's carve-outs
L1_SHARED_BYTES = 256 * 1024
BW_FEATURES = (
    "latency",
    "occupancy",
    "narrow",
    "in_run",
    "out_run",
    "stream",
    "threads",
    "tiles",
    "lds",
    "l1",
    "col",
    "col_in_run",
    "col_out_run",
)
# the launch order's terms may have either sign (column by column: long writes, short reads)
SIGNED = ("col", "col_in_run", "col_out_run")
T0_FEATURES = ("block",)
OUT_FEATURES = ("out_run_block", "small_block", "col")  # col: column order writes whole output rows
# the prior's spread per constant (relative to the prior; the output weight relative to inv), against the fit
# rows' noise (NOISE): how far a measured candidate's constants may move from the feature model's
NOISE = 0.005  # a fit row's own error: the median of 15 rounds with a 1-3 % spread (p90 - p10)


def features(p: dict, elem: int, registers: int | None = None, arch: str = "sm_90") -> dict:
    """What the feature model reads of a candidate: geometry, occupancy (from ptxas' registers; 32 when unknown),
    bytes in flight per SM, access widths and run lengths (relative to a 128-byte line), block size."""
    from smemtile.model.arch import get_arch

    q = {**DEFAULTS, **p}
    g = geometry(q, elem)
    blocks, smem_alloc = residency(arch, g.threads, registers or 32, g.smem_bytes)
    # every load of a tile is issued before its barrier; TILES > 1 keeps the next tile's loads in flight too
    in_flight = blocks * g.ty * g.tile * elem * min(q["TILES"], 2)
    # the loads land in L1 first: what the carve-out for the resident blocks' shared memory leaves of the 256 KB
    carveouts = get_arch(arch).carveouts
    carve = next((c for c in carveouts if c >= blocks * smem_alloc), carveouts[-1])
    l1 = max(0, L1_SHARED_BYTES - carve)
    col = float(q["GROUP"] == 0)  # launch order column by column
    return {
        "l1": max(0.0, 1 - l1 / max(in_flight, 1)),
        "l1_bytes": l1,
        "blocks_per_sm": blocks,
        "in_flight": in_flight,
        "registers": registers or 32,
        "latency": NEED_BYTES / max(in_flight, 1),
        "occupancy": 1 - min(1.0, blocks * g.threads / FULL_THREADS),
        "narrow": 16 / (max(g.vec, 1) * elem) - 1,
        "in_run": 128 / (g.tile * elem),
        "out_run": 128 / (g.ty * elem),
        "stream": float(q["STREAM"]),
        "threads": g.threads / 1024,
        "tiles": float(q["TILES"] > 1),
        "lds": 1 / q["PACK"],
        "block": 2 * g.ty * g.tile * q["TILES"] * elem / 65536,
        "col": col,
        "col_in_run": col * 128 / (g.tile * elem),
        "col_out_run": col * 128 / (g.ty * elem),
        "out_run_block": 128 / (g.ty * q["TILES"] * elem),
        "small_block": 256 / g.threads,
    }


@functools.cache
def residency(arch: str, threads: int, regs: int, smem_static: int) -> tuple[int, int]:
    """(blocks per SM, shared memory the driver allocates per block, reserved part included) from the occupancy
    calculation's core (``occupancy.limits_batch``, without the what-if searches ``occupancy`` adds), once per
    distinct kernel: the ranking and the features of a candidate and of its launch-order twin ask alike."""
    from smemtile.model.arch import get_arch
    from smemtile.model.occupancy import limits_batch

    lim = limits_batch(get_arch(arch), threads, regs, smem_static, 0)
    return int(lim["active_blocks"][0]), int(lim["smem_per_block"][0])


def _terms(r: dict, kappa: float, phi: float, mu_in: float) -> tuple[float, float, float, float, float]:
    """(X0, s_out, edge, s_in, line) of a row in KB: the bytes every candidate pays at its bandwidth, the output
    side's sector-misaligned bytes (weighted per candidate), the edge tiles' bytes x ``edge_loop``, the input
    side's sector-misaligned bytes and the line-misaligned run bytes (the last two weighted again in column
    order: short reads)."""
    e = r["elem"]
    vec, scalar = split_bytes(r["params"], r["rows"], r["cols"], e)
    line, s_in, s_out = misaligned_sides(r["params"], r["rows"], r["cols"], e)
    x0 = (vec + scalar / kappa + phi * line + mu_in * s_in) / 1e3
    return x0, s_out / 1e3, scalar * edge_loop(r["params"]) / 1e3, s_in / 1e3, line / 1e3


def col_misaligned_us(p: dict, line: float, s_in: float, coef: dict) -> float:
    """Column order's extra time (us) for misaligned runs: its reads are one tile wide, so an input pitch that
    is not sector- (s_in) or line-aligned (line) costs more than row by row (fp16 6144 x 5000, input pitch 16
    mod 32 bytes: 5-10 % slower in column order, s6colfit)."""
    if {**DEFAULTS, **p}["GROUP"] != 0:
        return 0.0
    return (coef.get("in_col", 0.0) * s_in + coef.get("line_col", 0.0) * line) / 1e3


def edge_loop(p: dict) -> float:
    """The scalar (edge-tile) path's serial loop per thread, TY x TILES / BLOCK_ROWS elements, relative to 32: a
    128 x 1 block walks 256 rows one by one (fp16 T128x1 P4 2tiles cs: 0.86x a copy at 8192^2, whole tiles;
    0.24-0.26x at 5000 x 6000 and 6144 x 5000, where 1-2 % of the tiles are edge tiles)."""
    q = {**DEFAULTS, **p}
    return (q["TILE_Y"] or q["TILE"]) * q["TILES"] / q["BLOCK_ROWS"] / 32


def _design(
    f: dict, x0: float, s_out: float, edge: float = 0.0, s_in: float = 0.0, line: float = 0.0
) -> list[float]:
    return [
        1.0,
        *(f[k] for k in T0_FEATURES),
        x0,
        *(x0 * f[k] for k in BW_FEATURES),
        s_out,
        *(s_out * f[k] for k in OUT_FEATURES),
        edge,
        f["col"] * s_in,
        f["col"] * line,
    ]


COEF = (
    "t0",
    *(f"t0*{k}" for k in T0_FEATURES),
    "inv",
    *(f"inv*{k}" for k in BW_FEATURES),
    "out",
    *(f"out*{k}" for k in OUT_FEATURES),
    "edge",
    "in_col",
    "line_col",
)
SIGNED_COLUMNS = (*(COEF.index(f"inv*{k}") for k in SIGNED), COEF.index("out*col"))


def prior(f: dict, coef: dict) -> tuple[float, float, float]:
    """(t0_us, inv = us per KB at the candidate's bandwidth, w = us per KB of output-side sector-misaligned
    bytes) of the feature model for a candidate's features."""
    t0 = coef["t0"] + sum(coef[f"t0*{k}"] * f[k] for k in T0_FEATURES)
    inv = coef["inv"] + sum(coef[f"inv*{k}"] * f[k] for k in BW_FEATURES)
    w = coef["out"] + sum(coef[f"out*{k}"] * f[k] for k in OUT_FEATURES)
    return t0, inv, max(w, 0.0)


def _nnls_rel(a: np.ndarray, free: tuple[int, ...] = ()) -> np.ndarray:
    """Least squares of a @ x = 1 with every coefficient >= 0 except those in ``free``: the most negative one is
    dropped (held at 0) and the rest refitted until none is negative."""
    keep = list(range(a.shape[1]))
    b = np.ones(a.shape[0])
    while True:
        sol, *_ = np.linalg.lstsq(a[:, keep], b, rcond=None)
        neg = [(v, c) for v, c in zip(sol, keep, strict=True) if v < 0 and c not in free]
        if not neg:
            x = np.zeros(a.shape[1])
            x[keep] = sol
            return x
        keep.remove(min(neg)[1])


def fit_features(rows: list[dict], registers: dict, *, shared: dict | None = None) -> dict:
    """The feature model per element size from measured rows (``{"label", "elem", "rows", "cols", "time_us",
    "params"}``) and ptxas' registers per label (``{elem: {label: registers}}``): KAPPA, PHI_LINE and MU_IN on a
    grid (``shared``: ``{elem: (kappa, phi, mu_in)}`` fixes them), the coefficients of COEF (all >= 0) by least
    squares on relative time error over every row; then each measured candidate's (t0, inv, w) pulled from the
    prior by its own rows (``shrink``). Returns ``{elem: {"model", "coef", "candidates", "min_fit_bytes"}}``."""
    out: dict = {}
    for elem in sorted({r["elem"] for r in rows}):
        mine = [r for r in rows if r["elem"] == elem]
        regs = registers.get(str(elem), {})
        feats = {r["label"]: features(r["params"], elem, regs.get(r["label"])) for r in mine}
        t = np.array([r["time_us"] for r in mine])
        any_in = any(misaligned_sides(r["params"], r["rows"], r["cols"], elem)[1] > 0 for r in mine)
        grid = (
            [shared[elem]]
            if shared and elem in shared
            else [
                (k, ph, mu)
                for k in KAPPAS[::1]
                for ph in PHIS[::2]
                for mu in (MU_INS[::2] if any_in else (0.0,))
            ]
        )
        best = None
        for kappa, phi, mu_in in grid:
            a = (
                np.array([_design(feats[r["label"]], *_terms(r, kappa, phi, mu_in)) for r in mine])
                / t[:, None]
            )
            x = _nnls_rel(a, free=SIGNED_COLUMNS)
            err = float(np.sum((a @ x - 1) ** 2))
            if best is None or err < best[0] - 1e-15:
                best = (err, kappa, phi, mu_in, x)
        assert best is not None
        _, kappa, phi, mu_in, x = best
        coef = dict(zip(COEF, (float(v) for v in x), strict=True))
        per = {
            "model": {"kappa": kappa, "phi_line": phi, "mu_in": mu_in, "mu_in_form": "shared"},
            "coef": coef,
            "candidates": {},
        }
        groups: dict[str, list[dict]] = {}
        for r in mine:
            groups.setdefault(r["label"], []).append(r)
        for lab, pts in sorted(groups.items()):
            per["candidates"][lab] = shrink(pts, feats[lab], coef, per["model"])
        per["min_fit_bytes"] = min(2.0 * r["rows"] * r["cols"] * elem for r in mine)
        out[str(elem)] = per
    return out


def shrink(pts: list[dict], f: dict, coef: dict, model: dict) -> dict:
    """A measured candidate's (t0, bw, phi_line, mu_out): least squares of its own rows' relative time errors
    together with the feature model's prior, each constant's deviation from the prior weighted by NOISE / its
    spread (t0: a tenth of the prior plus 0.1 us: on two or three shapes a free t0 trades off against bw and
    extrapolates to other sizes wildly, 1.2x a copy at fp16 9216^2; inv: SPREAD_INV of the prior; the line-misaligned bytes' weight:
    0.2 x inv around PHI_LINE x inv; the output side's: 0.3 x inv, the spread of mu_out): a candidate timed on
    many shapes keeps what it measured, one timed on two moves part of the way."""
    t0p, invp, wp = prior(f, coef)
    phi = model["phi_line"]
    sig = np.array([0.1 * t0p + 0.1, SPREAD_INV * invp, 0.2 * invp, 0.3 * invp])
    # a candidate timed only on shapes with misaligned runs cannot tell its bandwidth from its misalignment weights
    # (both scale with the bytes): it keeps the feature model's t0 and bw and fits the weights alone (session 6:
    # fp16 T64xY128x1 P4 4tiles cs, timed at 0.33-0.35x on two misaligned shapes, extrapolated to 1.07x at 8192^2)
    prior_bw = all(any(misaligned_sides(r["params"], r["rows"], r["cols"], r["elem"])) for r in pts)
    if prior_bw:
        sig[:2] *= 1e-3
    rows_a, rows_b = [], []
    for r in pts:
        e = r["elem"]
        vec, scalar = split_bytes(r["params"], r["rows"], r["cols"], e)
        line, s_in, s_out = misaligned_sides(r["params"], r["rows"], r["cols"], e)
        x0 = (vec + scalar / model["kappa"] + model["mu_in"] * s_in) / 1e3
        rows_a.append(np.array([1.0, x0, line / 1e3, s_out / 1e3]) / r["time_us"])
        fixed = coef.get("edge", 0.0) * scalar * edge_loop(r["params"]) / 1e3
        fixed += col_misaligned_us(r["params"], line, s_in, coef)
        rows_b.append(1.0 - fixed / r["time_us"])
    w = NOISE / sig
    a = np.vstack([np.array(rows_a), np.diag(w)])
    b = np.concatenate([np.array(rows_b), w * np.array([t0p, invp, phi * invp, wp])])
    sol, *_ = np.linalg.lstsq(a, b, rcond=None)
    t0, inv = max(float(sol[0]), 0.0), float(sol[1])
    vl, wo = max(float(sol[2]), 0.0), max(float(sol[3]), 0.0)
    errs = [abs(float(np.array([t0, inv, vl, wo]) @ ra) - rb) for ra, rb in zip(rows_a, rows_b, strict=True)]
    return {
        "t0_us": t0,
        "bw_gbps": 1.0 / inv,
        "phi_line": vl / inv,
        "mu_out": wo / inv,
        "fit_points": len(pts),
        "fit_max_error": max(errs),
        "prior_ratio": invp / inv,
        "bw_measured": not prior_bw,
    }


# the feature model's spread of inv over candidates (its candidate-left-out errors: median 2-5 %, tails 10 %)
SPREAD_INV = 0.05
