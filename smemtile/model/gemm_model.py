"""The GEMM tile model's arithmetic: per-candidate resources, pruning with reasons, occupancy, predicted time, and
the sentence that explains each rank. The formulas are stated in ``smemtile.model.gemm_tiles``' docstring; the
Triton calibration is data (``smemtile/model/data/triton_h200.json``, naming its GPU, sweep and commit).

A family that generates the tiles plugs in through :class:`FamilyRules` (its rules, its measured factors and, for
SIMT fp32 kernels, its own resources, timing and calibration); this module names no family."""

from __future__ import annotations

import math

from smemtile.model.data_files import read_data
from smemtile.model.gemm_tiles import (
    LAUNCH_S,
    MEM_LATENCY_S,
    MMA_W_SAT,
    MMA_X,
    OVERLAP,
    SMEM_BYTES_PER_CLK,
    Problem,
    Rejected,
    Scored,
    TileConfig,
)
from smemtile.model.tiling_gpus import AMD_ARCHS

# the model's stated formulas (JSON "model"), before and after a generating family's factors
MMA_TEXT_HEAD = {
    "predicts": f"mma: time = max(t_sm, t_dram, t_l2) + {OVERLAP} x (the other two) + 3 us, t_sm / the measured "
    "efficiency of (tile, BK, stages, warps) (model/data/triton_h200.json); score = useful TFLOP/s",
    "t_sm": "busiest SM runs ceil(tiles/SMs) tiles, b at a time: sum of rounds r * t_tile / eff(r)",
    "eff": f"mma: min(1, warps/{MMA_W_SAT})**{MMA_X}, capped by Little's law on (stages-1) tiles in flight vs "
    f"{MEM_LATENCY_S * 1e9:.0f} ns",
    "inner": "mma cycles / max(mma cycles, ldmatrix + copy bytes at 128 B/clk/SM) per k step",
}
MMA_TEXT_TAIL = {
    "t_dram": "waves x (r*BM + c*BN) x K bytes in the GROUP_SIZE_M launch order, >= A+B; A+B <= L2/2: read once",
    "t_l2": "tiles x (BM+BN) x K bytes / L2 bandwidth (2.5x DRAM, assumed)",
    "padding": "useful MNK / (tiles rounded up to BM, BN, BK)",
    "labels": "compute-bound: SM time dominates and intensity >= ridge; latency-bound: SM time dominates below "
    "the ridge; dram / l2-bound: that time dominates",
}


# ---- calibration data -------------------------------------------------------------------------------------------
def load_calibration(name: str) -> dict:
    """A calibration file of ``smemtile/model/data`` (constants with their provenance)."""
    return read_data(name)


def calibration_info(p: Problem) -> dict:
    """Which calibration applies to the problem's predictions, and the expected error (printed by tiles)."""
    own = p.contract.calibration_info(p) if p.contract is not None else None
    if own is not None:  # a family's own model (SIMT): its calibration file
        return own
    d = load_calibration("triton_h200.json")
    nv = p.vendor == "nvidia"
    fam = family_calibration(p)
    if fam is not None:  # a family's own tiles with its measured factors (stages, load latency, split K)
        same = p.gpu.key == fam["gpu_key"]
        return {
            "model": f"tensor-core roofline x the {fam['family']} family's measured factors",
            "file": fam["file"],
            "gpu": fam["gpu"],
            "sweeps": list(fam["sources"]),
            "commit": fam["commit"],
            "date": fam["date"],
            "applies": same,
            "expected_error": fam["expected_error"]
            if same
            else f"factors measured on the {fam['gpu']}, not this GPU: use them to order, not to promise",
        }
    if p.contract is not None:  # a family's own tiles: the roofline model alone
        return {
            "model": "tensor-core roofline (the generating family's tiles; no measured factors)",
            "file": "smemtile/model/gemm_model.py",
            "gpu": p.gpu.name,
            "sweeps": [],
            "commit": "-",
            "applies": False,
            "expected_error": "unknown: the family's own kernels were not swept; "
            "`smemtile tune` measures them",
        }
    return {
        "model": "tensor-core roofline x measured Triton efficiency" if nv else "matrix-core roofline",
        "file": "smemtile/model/data/triton_h200.json",
        "gpu": d["gpu"],
        "sweeps": d["sweeps"],
        "commit": d["commit"],
        "date": d["date"],
        "applies": nv and p.gpu.key == d["gpu_key"],
        "expected_error": d["expected_error"]
        if nv and p.gpu.key == d["gpu_key"]
        else "uncalibrated for this GPU (roofline from its datasheet row): use it to order, not to promise",
    }


# ---- resources and static pruning ---------------------------------------------------------------------------
class FamilyRules:
    """What a family that generates GEMM tiles gives the model (subclassed in the family's folder).

    ``contract(tile) -> (broken rules, threads, smem bytes)`` (``__call__``); ``calibration``: its measured
    factors for its tensor-core tiles (see :func:`family_calibration`), or None. A SIMT family (fp32 FFMA) also
    gives its own ``resources`` (registers, shared memory, or the rejection), ``timing`` (predicted seconds and
    the parts of the score), ``measured_eff`` (its tie-break) and ``calibration_info`` (its file's provenance)."""

    calibration: dict | None = None

    def __call__(self, c: TileConfig) -> tuple[list[str], int, int]:
        raise NotImplementedError

    def resources(self, p: Problem, c: TileConfig, cache: dict) -> dict | Rejected:
        raise NotImplementedError(f"{type(self).__name__} has no SIMT resources")

    def timing(self, p: Problem, c: TileConfig, r: dict, b: int) -> dict:
        raise NotImplementedError(f"{type(self).__name__} has no SIMT timing")

    def measured_eff(self, p: Problem, c: TileConfig) -> float:
        return 1.0

    def calibration_info(self, p: Problem) -> dict | None:
        return None


def warp_tile(bm: int, bn: int, warps: int, mm: int = 16, mn: int = 8) -> tuple[int, int] | None:
    """(WM, WN): the split of ``warps`` over a BM x BN block tile into mm x mn multiples (mma.sync m16n8:
    16 x 8; MFMA: 16 x 16) whose WM + WN is smallest, taller on ties; None when none splits."""
    ok = [
        (bm // wm, bn // (warps // wm))
        for wm in (1, 2, 4, 8)
        if warps % wm == 0
        and bm % wm == 0
        and bn % (warps // wm) == 0
        and (bm // wm) % mm == 0
        and (bn // (warps // wm)) % mn == 0
    ]
    return min(ok, key=lambda t: (t[0] + t[1], -t[0])) if ok else None


def evaluate_each(
    p: Problem, cfgs: list[TileConfig], *, prune_padding: bool = True
) -> list[Scored | Rejected]:
    """Resources, pruning and the score of every configuration, in the given order."""
    out: list = [None] * len(cfgs)
    fits: list[tuple[int, TileConfig, dict]] = []
    contract_cache: dict[tuple, tuple] = {}
    for i, c in enumerate(cfgs):
        res = _resources(p, c, prune_padding, contract_cache)
        if isinstance(res, Rejected):
            out[i] = res
        else:
            fits.append((i, res.pop("cfg"), res))
    blocks = _blocks(p, [(c, r) for _, c, r in fits])
    for (i, c, res), (b, limiter, occ, why) in zip(fits, blocks, strict=True):
        out[i] = Rejected(c, "occupancy", why) if b <= 0 else _score(p, c, res, b, limiter, occ)
    return out


def evaluate(
    p: Problem, cfgs: list[TileConfig], *, prune_padding: bool = True
) -> tuple[list[Scored], list[Rejected]]:
    """Resources, pruning and the score of every configuration: (scored, rejected)."""
    each = evaluate_each(p, cfgs, prune_padding=prune_padding)
    return [x for x in each if isinstance(x, Scored)], [x for x in each if isinstance(x, Rejected)]


def evaluate_problem(p: Problem, cfgs: list[TileConfig]) -> list[Scored | Rejected]:
    """:func:`evaluate_each` with the padding rule, or without it for a tiny problem where fewer than three tile
    shapes survive it (nearly every tile overhangs)."""
    each = evaluate_each(p, cfgs)
    if len({x.cfg.shape_key() for x in each if isinstance(x, Scored)}) < 3:
        each = evaluate_each(p, cfgs, prune_padding=False)
    return each


def _overhang(size: int, tile: int) -> float:
    return 1.0 - size / (math.ceil(size / tile) * tile)


def _resources(p: Problem, c: TileConfig, prune_padding: bool, cache: dict) -> dict | Rejected:
    for dim, size, tile, smallest in (
        ("M", p.m, c.bm, 16 if not p.simt else 32),
        ("N", p.n, c.bn, 32 if p.simt else 16),
        ("K", p.k, c.bk, 8 if p.simt else (32 if p.vendor == "amd" else 16)),
    ):
        waste = _overhang(size, tile)
        if prune_padding and waste > 0.5 and tile > smallest:
            return Rejected(
                c,
                "padding",
                f"B{dim}={tile} for {dim}={size}: {waste:.0%} of the tiles along {dim} "
                "is padding; a smaller tile fills the grid",
            )
    kt = math.ceil(p.k / (c.bk * c.split_k))
    if c.stages > max(2, kt):
        return Rejected(
            c, "stages", f"num_stages={c.stages} but each K slice has only {kt} k-tiles of {c.bk}"
        )
    if p.simt:  # a SIMT kernel's resources are its family's (its rules, its register model)
        return p.contract.resources(p, c, cache)
    return _mma_resources(p, c)


def _mma_resources(p: Problem, c: TileConfig) -> dict | Rejected:
    amd = p.vendor == "amd"
    lane = 64 if amd else 32
    threads = c.warps * lane
    mm, mn = (16, 16) if amd else (16, 8)  # MFMA 16x16xK / mma.sync m16n8kK output shapes
    split = warp_tile(c.bm, c.bn, c.warps, mm, mn)
    if split is None:
        return Rejected(
            c,
            "mma_shape",
            f"{c.bm}x{c.bn} cannot be split over {c.warps} warps in {mm}x{mn} "
            f"{'MFMA' if amd else 'mma'} tiles",
        )
    wm, wn = split
    e = p.elem
    if amd:
        # accumulators (fp32) + A/B fragments of one BK step + ~32: VGPRs + AGPRs, 512 per lane at most.
        est, limit = wm * wn // 64 + (wm + wn) * c.bk * e // 256 + 32, 512
        smem, lim_s, pad = c.stages * (c.bm + c.bn) * c.bk * e, AMD_ARCHS[p.arch].lds_per_block, 0
    else:
        from smemtile.model.arch import get_arch

        # accumulators (fp32) + double-buffered ldmatrix fragments + ~40 (addresses, pipeline state).
        est, limit = wm * wn // 32 + (wm + wn) // 2 + 40, 255
        smem, pad = c.stages * (c.bm + c.bn) * c.bk * e, 0  # Swizzle<3,3,3>-style layouts: no padding bytes
        lim_s = get_arch(p.arch).smem_optin_per_block
    if est > limit:
        return Rejected(
            c,
            "registers",
            f"registers: ~{est} per thread ({wm}x{wn} fp32 accumulators per warp) "
            f"exceed {limit}: it would spill",
        )
    if smem > lim_s:
        return Rejected(
            c,
            "shared_memory",
            f"out of resource: shared memory, required {smem}, limit {lim_s}; reduce BK or num_stages",
        )
    if p.contract is not None:  # the kernel family that generates these tiles
        bad, threads, smem = p.contract(c)
        if bad:
            return Rejected(c, "shared_memory" if "shared memory" in bad[0] else "contract", bad[0])
    return {
        "cfg": c,
        "threads": threads,
        "regs": est,
        "smem": smem,
        "pad": pad,
        "static": 0,
        "dynamic": smem,
        "wm": wm,
        "wn": wn,
    }


def _blocks(p: Problem, fits: list[tuple[TileConfig, dict]]) -> list[tuple[int, str, float, str]]:
    """(blocks per SM, limiter, occupancy, reason when 0) for every fitting configuration."""
    if not fits:
        return []
    if p.vendor == "amd":
        a = AMD_ARCHS[p.arch]
        out = []
        for c, r in fits:
            b, lim = a.blocks_per_cu(c.warps, r["regs"], r["smem"])
            out.append(
                (b, lim, b * c.warps / (a.simds * a.max_waves_per_simd), f"0 workgroups per CU ({lim})")
            )
        return out
    from smemtile.model.arch import get_arch
    from smemtile.model.occupancy import LIMITERS, occupancy, occupancy_batch

    arch = get_arch(p.arch)
    res = [r for _, r in fits]
    ob = occupancy_batch(
        arch,
        [r["threads"] for r in res],
        [r["regs"] for r in res],
        [r["static"] for r in res],
        [r["dynamic"] for r in res],
    )
    out = []
    for i, r in enumerate(res):
        b = int(ob.active_blocks[i])
        bits = int(ob.limiting_factors[i])
        lim = next(
            (
                n
                for n in LIMITERS
                if bits & {"warps": 1, "registers": 2, "shared_memory": 4, "blocks": 8, "barriers": 16}[n]
            ),
            "blocks",
        )
        why = ""
        if b == 0:
            why = (
                occupancy(arch, r["threads"], r["regs"], r["static"], r["dynamic"]).reason
                or "0 blocks per SM"
            )
        out.append((b, lim, float(ob.occupancy[i]), why))
    return out


# ---- the score ------------------------------------------------------------------------------------------------
def _inner_eff(p: Problem, c: TileConfig, r: dict) -> float:
    e, kstep = p.elem, c.bk
    flops_per_clk = p.gpu.peak(p.dtype) * 1e12 / (p.gpu.sms * p.gpu.clock_ghz * 1e9)
    mma = 2 * c.bm * c.bn * kstep / flops_per_clk
    smem = (c.warps * (r["wm"] + r["wn"]) * kstep * e + (c.bm + c.bn) * kstep * e) / SMEM_BYTES_PER_CLK
    return mma / max(mma, smem)


def _dram_bytes(p: Problem, c: TileConfig, slots: int, group: int) -> float:
    e = p.elem
    gm, gn = math.ceil(p.m / c.bm), math.ceil(p.n / c.bn)
    tiles = gm * gn
    once = (p.m * p.k + p.k * p.n) * e
    out = p.m * p.n * p.out_elem
    if once <= p.gpu.l2_bytes / 2:
        return once + out
    slots = max(1, min(slots, tiles))
    g = max(1, min(group, gm))
    rows = min(gm, max(min(g, slots), math.ceil(slots / gn)))
    cols = min(gn, math.ceil(slots / min(g, slots)))
    per_wave = (rows * c.bm + cols * c.bn) * p.k * e
    return max(once, math.ceil(tiles / slots) * per_wave) + out


USE_MEASURED = True  # bench/tune_h200.py turns it off while it fits the factors (no circularity)


def family_calibration(p: Problem) -> dict | None:
    """The generating family's measured factors for its own tensor-core tiles (``p.contract.calibration``: data
    the family ships with its provenance, e.g. the calibration file in its folder), or None.
    Keys: ``stages`` (relative speed per "BK:STAGES", "unmeasured" for the rest), ``latency_us`` {l2, dram} (a
    block's K tile takes at least latency / (STAGES - 1): Little's law on the tiles in flight), ``atom_gbps``
    (split K's fp32 atomics into C)."""
    if p.simt or p.vendor != "nvidia" or p.contract is None or not USE_MEASURED:
        return None
    return getattr(p.contract, "calibration", None)


def family_stage_factor(fam: dict, c: TileConfig) -> float:
    """The family's measured relative speed of BK and the pipeline depth (1.0: the fastest measured)."""
    st = fam["stages"]
    return float(st.get(f"{c.bk}:{c.stages}", st["unmeasured"]))


def measured_eff(p: Problem, c: TileConfig) -> float:
    """SIMT: the family's own measure (its tile's speed relative to the best on the fitting shapes, a tie-break
    only). Tensor-core tiles as Triton runs them (no family contract): measured / roofline-model TFLOP/s of
    the standard Triton matmul on the H200 for this tile and warps, BK bytes and stages (log-linear fit); a
    (tile, warps) pair never measured takes the worst factor of each kind and the fit's rms error as a penalty.
    1.0 elsewhere (AMD, or a family's own tiles)."""
    if p.vendor != "nvidia" or not USE_MEASURED:
        return 1.0
    if p.simt:
        return p.contract.measured_eff(p, c)
    fam = family_calibration(p)
    if fam is not None:
        return family_stage_factor(fam, c)
    if p.contract is not None:
        return 1.0
    d = load_calibration("triton_h200.json")
    f = d["factors"]

    def get(kind: str, key: str) -> float:
        return f[kind].get(key, min(f[kind].values()))

    exact = f["exact"].get(f"{c.bm}x{c.bn}x{c.bk * p.elem}B:{c.stages}:{c.warps}")
    if exact is not None:  # this very configuration was measured: its mean over the measured shapes
        return float(math.exp(exact))
    pair = f"{c.bm}x{c.bn}:{c.warps}"
    lg = get("tile", f"{c.bm}x{c.bn}") + get("warps", f"{min(c.bm * c.bn, 32768)}:{c.warps}")
    lg += get("stages_bk", f"{c.bk * p.elem}:{c.stages}")
    if pair not in d["measured_pairs"]:
        lg -= d["rms_log_residual"]
    return float(math.exp(lg))


def _score(p: Problem, c: TileConfig, r: dict, b: int, limiter: str, occ: float) -> Scored:
    g = p.gpu
    z = c.split_k
    gm, gn, kt = math.ceil(p.m / c.bm), math.ceil(p.n / c.bn), math.ceil(p.k / (c.bk * z))
    tiles = gm * gn * z
    pad_eff = p.m * p.n * p.k / (gm * c.bm * gn * c.bn * kt * c.bk * z)
    slots = g.sms * b
    waves = tiles / slots
    c_extra = 2 * p.m * p.n * 4 * z if z > 1 else 0  # split K: every slice read-modify-writes C in L2 (fp32)
    c_init = p.m * p.n * 4 if z > 1 else 0
    dram = _dram_bytes(p, c, slots, c.group_m) + c_init
    dram_ug = _dram_bytes(p, c, slots, 1) + c_init
    l2 = tiles * (c.bm + c.bn) * kt * c.bk * p.elem + c_extra
    t_dram, t_l2 = dram / (g.dram_gbps * 1e9), l2 / (g.l2_gbps * 1e9)
    ridge = g.peak(p.dtype) * 1e12 / (g.dram_gbps * 1e9)
    meff, hint = measured_eff(p, c), ""
    repack_s = 0.0
    if p.simt:  # the family's own timing of a SIMT kernel
        s = p.contract.timing(p, c, r, b)
        t_sm, inner, lat_eff, repack_s = s["t_sm"], s["inner"], s["latency_eff"], s["t_repack"]
        parts = {"compute": t_sm, "dram": t_dram, "l2": t_l2}
        bound = max(parts, key=parts.get)
        t = max(s["time"], t_dram, t_l2)
    else:
        peak_sm = g.peak(p.dtype) * 1e12 / g.sms
        inner = _inner_eff(p, c, r)
        ai_tile = 2 * c.bm * c.bn / ((c.bm + c.bn) * p.elem)
        in_flight = max(c.stages - 1, 0.5) * (c.bm + c.bn) * c.bk * p.elem

        def eff(nb: int) -> float:
            lat = min(1.0, nb * c.warps / MMA_W_SAT) ** MMA_X
            pipe = nb * in_flight / MEM_LATENCY_S * ai_tile / (peak_sm * inner * lat)
            return lat * min(1.0, pipe)

        t_tile = 2 * c.bm * c.bn * kt * c.bk / (peak_sm * inner * meff)
        busiest = math.ceil(tiles / g.sms)
        full, rem = divmod(busiest, b)
        t_sm = full * b * t_tile / eff(b) + (rem * t_tile / eff(rem) if rem else 0.0)
        lat_eff = eff(min(b, busiest))
        fam = family_calibration(p)
        t_atom = 0.0
        if fam is not None:
            # the family's measured floor: a block has STAGES-1 K tiles in flight, each waits the load latency
            # (L2-resident operands, or streamed from DRAM when the problem is below the ridge)
            stream = p.flops / dram < ridge
            floor = kt * fam["latency_us"]["dram" if stream else "l2"] * 1e-6 / max(c.stages - 1, 1)
            rounds_t = full * max(b * t_tile / eff(b), floor) + (
                max(rem * t_tile / eff(rem), floor) if rem else 0.0
            )
            lat_eff *= t_sm / rounds_t
            t_sm = rounds_t
            t_atom = 2 * p.m * p.n * 4 * z / (fam["atom_gbps"] * 1e9) if z > 1 else 0.0
        parts = {"compute": t_sm, "dram": t_dram, "l2": t_l2}
        bound = max(parts, key=parts.get)
        # Overlap is imperfect: OVERLAP of the non-binding times shows through (favours high-intensity tiles).
        t = (
            parts[bound]
            + OVERLAP * (sum(parts.values()) - parts[bound])
            + LAUNCH_S
            + (LAUNCH_S if z > 1 else 0)
            + t_atom
        )
    intensity = p.flops / dram
    if bound == "compute" and intensity < ridge:
        bound = "latency"  # the SMs are the limit only because too little work is in flight (below the ridge)
    if p.vendor == "amd":
        c, hint = _waves_per_eu(p, c, r, b, bound)
    tflops = p.flops / t / 1e12
    return Scored(
        cfg=c,
        threads=r["threads"],
        regs=r["regs"],
        smem_bytes=r["smem"],
        smem_pad_bytes=r["pad"],
        blocks_per_sm=b,
        occupancy=occ,
        limiter=limiter,
        tiles=tiles,
        waves=waves,
        wave_eff=waves / math.ceil(waves),
        inner_eff=inner,
        latency_eff=lat_eff,
        pad_eff=pad_eff,
        dram_bytes=dram,
        dram_bytes_ungrouped=dram_ug,
        l2_bytes=l2,
        intensity=intensity,
        ridge=ridge,
        bound=bound,
        time_s=t,
        tflops=tflops,
        roofline_frac=tflops / g.peak(p.dtype),
        measured_eff=meff,
        hint=hint,
        repack_s=repack_s,
    )


def _waves_per_eu(p: Problem, c: TileConfig, r: dict, b: int, bound: str) -> tuple[TileConfig, str]:
    """AMD's ``waves_per_eu`` hint by the memory/compute-bound rule (ROCm's Triton optimisation guide: memory-
    bound kernels want 4-8 waves per SIMD to hide latency; compute-bound GEMM tiles keep the VGPRs they need)."""
    a = AMD_ARCHS[p.arch]
    achieved = max(1, min(a.max_waves_per_simd, b * c.warps // a.simds))
    if bound == "compute":
        why = (
            f"compute-bound: waves_per_eu={achieved} (the occupancy the {r['regs']} VGPRs allow); a higher "
            "hint would cap the registers the tile needs"
        )
        return TileConfig(**{**c.__dict__, "waves_per_eu": achieved}), why
    lds_blocks = a.lds_per_cu // r["smem"] if r["smem"] else a.max_waves_per_simd * a.simds
    lds_waves = max(1, min(a.max_waves_per_simd, lds_blocks * c.warps // a.simds))
    want = min(lds_waves, max(4, achieved))
    cap = "" if want >= 4 else f" (LDS: {r['smem']} B per workgroup allows only {lds_waves})"
    why = (
        f"{bound}-bound: waves_per_eu={want}{cap}: more waves per SIMD hide memory latency (ROCm guide: 4-8 for "
        f"memory-bound kernels); the compiler caps VGPRs at {a.vgprs_per_simd_lane // want} to get there"
    )
    return TileConfig(**{**c.__dict__, "waves_per_eu": want}), why


# ---- explanations ----------------------------------------------------------------------------------------------
def _bound_text(s: Scored) -> str:
    if s.bound == "compute":
        return f"compute-bound (intensity {s.intensity:.0f} >= ridge {s.ridge:.0f} FLOP/B)"
    if s.bound == "latency":
        return (
            f"latency-bound (intensity {s.intensity:.0f} < ridge {s.ridge:.0f} FLOP/B, yet too few tiles or "
            "warps in flight to stream memory at full rate)"
        )
    return f"{s.bound}-bound (intensity {s.intensity:.0f} vs ridge {s.ridge:.0f} FLOP/B)"


def explain(s: Scored, top: Scored, p: Problem, ranked: list[Scored] | None = None) -> str:
    """One short sentence: what limits the best candidate; for rank > 1 what costs it most against #1."""
    c = s.cfg
    unit = "CU" if p.vendor == "amd" else "SM"
    head = f"{_bound_text(s)}, {s.waves:.2f} waves ({s.wave_eff:.0%} full), {s.blocks_per_sm} blk/{unit} ({s.limiter})"
    if c.split_k > 1:
        head += f", split K {c.split_k} fills the {unit}s"
    fam = family_calibration(p)
    if not p.simt and p.vendor == "nvidia" and p.contract is None:
        head += (
            f", Triton measured {s.measured_eff:.2f}x the roofline model for {c.bm}x{c.bn}, BK {c.bk}, "
            f"{c.stages} stages, {c.warps} warps"
        )
    elif fam is not None:
        head += f", BK {c.bk} / {c.stages} stages: {fam['family']} measured {s.measured_eff:.3f}x the fastest depth"
    if s.hint:
        head += f"; {s.hint}"
    if s.cfg == top.cfg:
        return "best: " + head
    gap = s.time_s / top.time_s - 1
    if abs(gap) < 0.005:
        why = (
            "measured faster on the H200" if s.measured_eff < top.measured_eff else "fewer stages / less smem"
        )
        if fam is not None and s.measured_eff < top.measured_eff:
            why = (
                f"BK {top.cfg.bk} / {top.cfg.stages} stages measured faster: {top.measured_eff:.3f} vs "
                f"{s.measured_eff:.3f}, {fam['family']} on the {fam['gpu']}"
            )
        return f"ties #1 (within 0.5% predicted); below it by the tie rule ({why} wins)"
    tile = (
        f"{c.tm}x{c.tn} register tile" if c.tm else f"{s.threads // (64 if p.vendor == 'amd' else 32)} warps"
    )
    losses = {
        "waves": (
            top.wave_eff / s.wave_eff if s.tiles < 4 * p.gpu.sms * s.blocks_per_sm else 1.0,
            f"last wave {s.waves % 1 or 1:.0%} full ({s.waves:.2f} waves)",
        ),
        "latency": (
            top.latency_eff / s.latency_eff,
            f"latency hiding {s.latency_eff:.0%} vs {top.latency_eff:.0%} "
            f"({s.blocks_per_sm * c.warps} vs {top.blocks_per_sm * top.cfg.warps} warps/{unit}, "
            f"{c.stages} vs {top.cfg.stages} stages)",
        ),
        "inner": (
            top.inner_eff / s.inner_eff,
            f"inner loop {s.inner_eff:.0%} vs {top.inner_eff:.0%} ({tile})",
        ),
        "measured": (
            top.measured_eff / s.measured_eff if not p.simt else 1.0,
            f"BK {c.bk} / {c.stages} stages: {fam['family']} measured {s.measured_eff:.3f}x vs "
            f"{top.measured_eff:.3f}x for #1 (BK {top.cfg.bk} / {top.cfg.stages} stages)"
            if fam
            else f"BK {c.bk} / {c.stages} stages / {c.warps} warps: Triton measured {s.measured_eff:.2f}x the "
            f"roofline vs {top.measured_eff:.2f}x for #1",
        ),
        "padding": (top.pad_eff / s.pad_eff, f"{1 - s.pad_eff:.0%} of the computed tiles is padding"),
        "memory": (
            s.time_s / top.time_s if s.bound in ("dram", "l2") else 1.0,
            f"{s.bound}-bound: {s.dram_bytes / 1e9:.2f} GB from DRAM, {s.intensity:.0f} FLOP/B "
            f"vs ridge {s.ridge:.0f}",
        ),
    }
    worst = max(losses.values(), key=lambda t: t[0])
    return f"{gap:+.1%} vs #1: {worst[1] if worst[0] > 1.002 else 'per-tile overheads (copies, barriers, split K)'}"
