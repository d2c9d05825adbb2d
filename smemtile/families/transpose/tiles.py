"""The ``transpose`` family's tile model (:class:`TransposeTiles`): its configurations, ranked per element size by
a model calibrated on the H200, through the one ranking loop (``smemtile.pipeline.rank``).

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
  on a grid, KAPPA >= 0.25: the scalar path still moves whole 64/128-byte warp rows; the fitting is
  ``fit.py`` in this folder). The expected error
  ``tiles`` states is the leave-one-shape-out median over the fit shapes until a held-out sweep replaces it.
- predicted GB/s = 2 x rows x cols x elem / time; the ratio to a device copy of the same bytes divides by the
  copy's measured bandwidth at the fitted sizes, interpolated in log(bytes). Below the smallest fitted size
  (64 MiB fp16, 128 MiB fp32: smaller problems live in L2 and were not measured) a candidate keeps the
  efficiency it has there.

The constants are data: ``transpose_h200.json`` in this folder (GPU, run, commit, fit and held-out shapes,
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
import json
import math
from dataclasses import asdict, dataclass, replace
from importlib import resources

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
from smemtile.model.memo import memo
from smemtile.model.residency import prime, residency
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
    candidates first (the sweeps' own, in their order), then the grid of ``SPACE`` in a fixed order, each once
    (enumerated once per process: each call gets its own dicts)."""
    return [dict(p) for p in _space(dtype)]


@functools.cache
def _space(dtype: str) -> tuple[tuple[tuple[str, int], ...], ...]:
    return tuple(tuple(p.items()) for p in _enumerate(dtype))


def _enumerate(dtype: str) -> list[dict]:
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


_LABELS: dict[tuple, str] = {}


def label(p: dict) -> str:
    """A short name: ``T128x8``, ``T64xY128x8``, then `` P2`` (PACK), `` 2tiles``, `` cs`` (STREAM), `` col`` (GROUP 0)."""
    return memo(_LABELS, tuple(p.items()), lambda: _label(p), limit=1 << 16)  # unhashable: named without it


def _label(p: dict) -> str:
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


@functools.cache
def _curated(elem: int) -> frozenset[str]:
    return frozenset(label(c) for c in CANDIDATES[elem])


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


@functools.cache
def load_calibration(name: str = DATA_FILE) -> dict | None:
    """The calibration data file shipped in this folder (None when absent: the model ranks uncalibrated)."""
    try:
        return json.loads(resources.files(__package__).joinpath(name).read_text())
    except (FileNotFoundError, OSError):
        return None


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
    timed only on misaligned shapes keeps the feature model's bandwidth, so it ranks as unmeasured). Computed
    once per calibration object and element size (a ranking asks for every candidate)."""
    key = (id(cal), elem)
    hit = _MEASURED.get(key)
    if hit is not None and hit[0] is cal:
        return hit[1]
    fitted = (cal or {}).get("constants", {}).get(str(elem), {}).get("candidates", {})
    out = frozenset(lab for lab, c in fitted.items() if c.get("bw_measured", True))
    _MEASURED[key] = (cal, out)
    return out


_MEASURED: dict[tuple, tuple] = {}


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
    if q["MIN_BLOCKS"] == 1 or label(q) in _curated(_elem(dtype)):  # the curated ones stay
        return None
    base = {**q, "MIN_BLOCKS": 1}
    r, r1 = registers_of(q, _elem(dtype), cal), registers_of(base, _elem(dtype), cal)
    return label(base) if r is not None and r == r1 else None


def copy_time_us(nbytes: float, cal: dict) -> float:
    """The device copy's time: its measured bandwidth at the fitted sizes, interpolated in log(bytes) (held
    constant outside them)."""
    return interp_log_bandwidth(nbytes, cal["copy"]["points"])


def calibration_applies(arch: str, gpu_key: str, cal: dict | None) -> bool:
    return cal is not None and arch in cal.get("archs", ()) and gpu_key == cal.get("gpu_key")


def _row(p: dict, kind: str, reason: str) -> dict:
    """A rejected candidate as ``tiles --family`` lists it."""
    return {"params": set_params(p), "label": label(p), "kind": kind, "reason": reason}


@functools.cache
def _rules(fam, dtype: str, arch: str) -> dict[str, str]:
    """The family's own rules over the whole candidate space of ``dtype``: {label: the first rule broken} of the
    configurations it refuses. The rules do not depend on the problem's size: once per dtype and arch. The
    checks every family shares (``Family.problems`` after the family's ``violations``: the tile buffer's layout
    and shared memory) depend on the tile's shape alone, so they run once per TILE x TY (tests hold this equal to
    ``problems`` on every candidate)."""
    from smemtile.errors import SpecError
    from smemtile.families import configure

    out: dict[str, str] = {}
    shared: dict[tuple, list[str]] = {}  # (TILE, TY) -> the shared checks' answer
    for p in space(dtype):
        try:
            cfg = configure(fam, {**p, "rows": 8192, "cols": 8192, "dtype": dtype}, arch=arch, check=False)
            why = fam.violations(cfg)
            if not why:
                key = (p["TILE"], p["TILE_Y"] or p["TILE"])
                if key not in shared:
                    shared[key] = fam.problems(cfg, accesses=False)
                why = shared[key]
        except SpecError as e:
            why = [str(e)]
        if why:
            out[label(p)] = why[0]
    return out


def screened(fam, dtype: str, arch: str) -> tuple[list[dict], list[tuple[dict, str]]]:
    """The candidate space of ``dtype`` through the family's own rules: (the configurations it builds, in space
    order; [(refused, the first rule broken)])."""
    refused = _rules(fam, dtype, arch)
    ok, bad = [], []
    for p in space(dtype):
        why = refused.get(label(p))
        if why is None:
            ok.append(p)
        else:
            bad.append((p, why))
    return ok, bad


def rules_uncached(fam, dtype: str, arch: str) -> dict[str, str]:
    """:func:`_rules` without the per-shape sharing: ``Family.problems`` on every candidate (what tests compare)."""
    from smemtile.errors import SpecError
    from smemtile.families import configure

    out = {}
    for p in space(dtype):
        try:
            why = fam.problems(
                configure(fam, {**p, "rows": 8192, "cols": 8192, "dtype": dtype}, arch=arch, check=False),
                accesses=False,
            )
        except SpecError as e:
            why = [str(e)]
        if why:
            out[label(p)] = why[0]
    return out


class TransposeTiles(SizesModel):
    """The transpose family's tile model (the :class:`~smemtile.families.tile_model.TileModel` protocol) for one
    problem ``{"rows", "cols", "dtype"}``: the candidate space of the dtype, screened by the family's rules, ptxas
    (no spills) and MIN_BLOCKS duplicates; predicted by the calibrated feature model (measured candidates by their
    own constants, shrunk toward it), or by Little's law where the calibration does not apply (tier 1).

    ``calibration``: another data file's contents; ``candidates``: rank these configurations instead of the
    space, unscreened (the model's own view, as :func:`rank_transpose` gives it)."""

    tie_rule = TieRule(TIE, "chain", "predicted times within 0.05 % are a tie (fewer threads first)")
    options: tuple[ModelOption, ...] = ()
    tiles_examples = (
        "smemtile tiles --family transpose 8192 8192 --dtype f16 --explain",
        "smemtile tiles --family transpose 8K 8K --top 1 --format yaml > t.yaml",
        "smemtile generate t.yaml -o transpose.cu",
    )
    source = "smemtile/families/transpose/tiles.py"

    def __init__(self, fam=None, *, calibration: dict | None = None, candidates: list[dict] | None = None):
        self.fam = fam
        self.cal = calibration if calibration is not None else load_calibration()
        self._given = candidates
        self.problem: dict = {}

    # ---- the protocol --------------------------------------------------------------------------------------

    def space(self, problem: dict, arch) -> list[dict]:
        self.problem = {
            "rows": int(problem["rows"]),
            "cols": int(problem["cols"]),
            "dtype": str(problem["dtype"]),
        }
        self.elem = _elem(self.problem["dtype"])
        self.arch = arch
        if self._given is not None:
            return [{**DEFAULTS, **p} for p in self._given]
        return space(self.problem["dtype"])

    def screen(self, p: dict) -> Rejection | None:
        if self._given is not None:
            return None
        dtype = self.problem["dtype"]
        why = _rules(self.fam, dtype, self.arch.name).get(label(p))
        if why is not None:
            return Rejection("rules", why, _row(p, "rules", why))
        table = (self.cal or {}).get("registers", {}).get(str(self.elem), {})
        regs, spills = table.get(label(p), [None, 0])
        if spills:
            why = f"ptxas spills {spills} bytes ({regs} registers, MIN_BLOCKS={p['MIN_BLOCKS']})"
            return Rejection("spills", why, _row(p, "spills", why))
        dup = duplicate_of(p, dtype, self.cal)
        if dup:
            why = f"the same kernel as {dup}: ptxas gives both {regs} registers"
            return Rejection("duplicate", why, _row(p, "duplicate", why))
        return None

    def predict_all(self, cands: list[dict], gpu) -> list[Prediction | Rejection]:
        cal, elem, a = self.cal, self.elem, self.arch
        rows, cols, dtype = self.problem["rows"], self.problem["cols"], self.problem["dtype"]
        use_cal = calibration_applies(a.base, gpu.key, cal) and gpu.sms == cal.get("sms")
        need = self.need = gpu.dram_gbps * 1e9 / gpu.sms * LATENCY_S  # bytes in flight per SM for the latency
        total = 2.0 * rows * cols * elem
        measured = measured_labels(cal, elem) if use_cal else set()
        pen = cal["constants"].get(str(elem), {}).get("unmeasured_penalty", 0.0) if use_cal else 0.0
        copy_us = copy_time_us(total, cal) if use_cal else None
        # the occupancy of every distinct kernel in one call (the ranking's and the feature model's, sm_90)
        kernels = []
        for p in cands:
            geo = geometry({**DEFAULTS, **p}, elem)
            kernels.append(
                (geo.threads, (registers_of(p, elem, cal) if use_cal else None) or 32, geo.smem_bytes)
            )
        prime(a.name, kernels)
        if use_cal:
            prime("sm_90", kernels)
        out: list[Prediction | Rejection] = []
        for p in cands:
            p = {**DEFAULTS, **p}
            geo = geometry(p, elem)
            regs = registers_of(p, elem, cal) if use_cal else None
            blocks, _ = residency(a.name, geo.threads, regs or 32, geo.smem_bytes)
            if blocks == 0:
                why = f"no block fits an SM ({regs or 32} registers x {geo.threads} threads, {geo.smem_bytes} B)"
                out.append(Rejection("occupancy", why, _row(p, "occupancy", why)))
                continue
            # every tile's loads are in flight before its barrier
            in_flight = blocks * geo.ty * geo.tile * elem * p["TILES"]
            vec, _ = split_bytes(p, rows, cols, elem)
            t = predict_time_us(p, rows, cols, dtype, cal) if use_cal else None
            calibrated = t is not None
            if t is None:  # Little's law: bandwidth = DRAM x min(1, in flight / needed); edge tiles 3x slower
                eff = gpu.dram_gbps * min(1.0, in_flight / need)
                t = (vec + 3.0 * (total - vec)) / (eff * 1e3)
            ratio = copy_us / t if calibrated else None
            lab = label(p)
            s = TransposeScored(
                tuple((k, p[k]) for k in PARAMS),
                lab,
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
                measured=lab in measured,
                registers=regs,
            )
            # a candidate never timed ranks as if its expected error slower (the fit's unmeasured_penalty):
            # within that, the measured one is the safer pick
            out.append(
                Prediction(
                    t * 1e-6,
                    tier=int(not calibrated),
                    penalty=0.0 if lab in measured or not calibrated else pen,
                    tie=(geo.threads,),
                    terms={"gbps": s.gbps, "copy_ratio": ratio, "vector_fraction": s.vector_fraction},
                    result=s,
                )
            )
        # the ranking's #1 is calibrated when any candidate is (calibrated ones rank first): what provenance says
        self.calibrated = any(isinstance(x, Prediction) and x.result.calibrated for x in out)
        return out

    def predict(self, p: dict, gpu) -> Prediction | Rejection:
        return self.predict_all([p], gpu)[0]

    def explain(self, entry: Ranked, top: Ranked, ranked) -> str:
        return _reason(entry.pred.result, top.pred.result, self.cal, self.need)

    def provenance(self) -> dict:
        cal = self.cal or {}
        calibrated = bool(getattr(self, "calibrated", False))
        dtype = self.problem.get("dtype", "f32")
        return {
            "model": "per candidate time = t0 + bytes / bw (+ edge tiles / kappa + misaligned runs), t0, bw and the "
            "output side's weight from the candidate's features (occupancy, bytes in flight, access width, run "
            f"lengths, block size), measured candidates' own constants shrunk toward them ({self.source})",
            "source": self.source,
            "file": f"smemtile/families/transpose/{DATA_FILE}",
            "gpu": cal.get("gpu"),
            "runs": cal.get("run"),
            "commit": cal.get("commit"),
            "calibrated": calibrated,
            "expected_error": expected_error(dtype, cal) if calibrated else None,
            "expected_error_unmeasured": expected_error(dtype, cal, measured=False) if calibrated else None,
            "expected_error_of": "median |time error|, held out: "
            + ", ".join(x for x in cal.get("held_out_shapes", []) if f" f{8 * _elem(dtype)} " in x),
        }

    # ---- what the commands built on the ranking ask ----------------------------------------------------------

    @staticmethod
    def scored(entry: Ranked) -> TransposeScored:
        """A ranked entry as the family's report row (rank and reason filled in)."""
        return replace(entry.pred.result, rank=entry.rank, reason=entry.reason)

    def configure(self, entry: Ranked):
        """The :class:`~smemtile.families.base.KernelConfig` of a ranked entry for this problem (the layout is
        the family's default; ``generate`` applies the fix search's)."""
        from smemtile.families import configure

        return configure(self.fam, {**set_params(entry.cand), **self.problem}, arch=self.arch)

    def ranker(self, ranking: Ranking, rerank=None) -> TransposeRanker:
        """The ranking as ``tune`` / ``generate`` / ``analyze`` read it (``rerank`` unused: one problem)."""
        return TransposeRanker(self, ranking)


class TransposeRanker:
    """A transpose ranking for one problem as ``tune`` (``top``, calling it with a configuration) and ``tiles
    --family`` (``ranked``, ``rejections``, ``provenance``) read it; ``generate`` without a tile uses #1."""

    def __init__(self, model: TransposeTiles, ranking: Ranking):
        self.fam, self.model, self.problem = model.fam, model, dict(model.problem)
        self.ranked = [model.scored(e) for e in ranking.ranked]
        # the family's rules first, then what ptxas refused (the order the report groups them in)
        rej = [r.rejection.result for r in ranking.rejected]
        self._rejected = [r for r in rej if r["kind"] == "rules"] + [r for r in rej if r["kind"] != "rules"]
        self._provenance = dict(ranking.provenance)

    def top(self, k: int) -> list[dict]:
        return [s.params_dict() for s in self.ranked[:k]]

    def __call__(self, params: dict, src: str):
        from smemtile.families.base import Candidate

        full = {**self.fam.defaults(), **params}
        name = label(full)
        s = None
        # the model's space sets PARAMS; every other family parameter (VEC, ASYNC) must be at its default
        if all(full[k] == v for k, v in self.fam.defaults().items() if k not in PARAMS):
            s = next((s for s in self.ranked if dict(s.params) == {k: full[k] for k in PARAMS}), None)
        if s is None:
            return Candidate(name, params, src, None, None, "outside the model's candidates")
        return Candidate(name, params, src, s.rank, s.gbps, s.reason)

    def rejections(self) -> list[dict]:
        """The configurations of the model's space the family refuses (its own rule), ptxas spills for, or that
        compile to the same kernel as one ranked (MIN_BLOCKS with nothing to give up)."""
        return list(self._rejected)

    def provenance(self) -> dict:
        return dict(self._provenance)


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
    rank=None,
) -> list[TransposeScored]:
    """Every candidate for ``dtype`` (``cands``, else ``ranked_space``: no family screen), best predicted first,
    through the one ranking loop (``rank``: another loop for tests; default smemtile.families.ranking.rank)."""
    from smemtile.model.arch import get_arch

    a = get_arch(arch)
    g = get_gpu(gpu, a.base, sms=sms)
    cal = calibration if calibration is not None else load_calibration()
    use_cal = calibration_applies(a.base, g.key, cal) and sms in (None, cal.get("sms"))
    if cands is None:
        cands = ranked_space(dtype, cal if use_cal else None)
    model = TransposeTiles(None, calibration=cal, candidates=cands)
    from smemtile.families.ranking import rank as loop

    rank = rank or loop
    ranking = rank(model, {"rows": rows, "cols": cols, "dtype": dtype}, a, g)
    return [model.scored(e) for e in ranking.ranked]


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


def prior(f: dict, coef: dict) -> tuple[float, float, float]:
    """(t0_us, inv = us per KB at the candidate's bandwidth, w = us per KB of output-side sector-misaligned
    bytes) of the feature model for a candidate's features."""
    t0 = coef["t0"] + sum(coef[f"t0*{k}"] * f[k] for k in T0_FEATURES)
    inv = coef["inv"] + sum(coef[f"inv*{k}"] * f[k] for k in BW_FEATURES)
    w = coef["out"] + sum(coef[f"out*{k}"] * f[k] for k in OUT_FEATURES)
    return t0, inv, max(w, 0.0)
