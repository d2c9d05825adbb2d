"""The tile model's arithmetic: per-candidate resources, pruning with reasons, occupancy, predicted time, and
the sentence that explains each rank. The formulas are stated in ``smemtile.model.tiling``'s docstring."""

from __future__ import annotations

import math

import numpy as np

from smemtile.model.tiling import (
    A_PAD_SIMT,
    LAUNCH_S,
    MEM_LATENCY_S,
    MMA_W_SAT,
    MMA_X,
    OVERLAP,
    SIMT_W_SAT,
    SIMT_X,
    SMEM_BYTES_PER_CLK,
    Problem,
    Rejected,
    Scored,
    TileConfig,
)
from smemtile.model.tiling_gpus import AMD_ARCHS

LDS_CYCLES = (
    2.0  # per warp-wide LDS.128 of the inner loop: the bank model's wavefronts (A and B reads: 2 each)
)

MODEL_TEXT = {
    "predicts": f"time = max(t_sm, t_dram, t_l2) + {OVERLAP} x (the other two) + 3 us; score = useful TFLOP/s",
    "t_sm": "busiest SM runs ceil(tiles/SMs) tiles, b at a time: sum of rounds r * t_tile / eff(r)",
    "eff": f"min(1, warps/W_SAT)**X (SIMT W_SAT={SIMT_W_SAT} X={SIMT_X}; mma W_SAT={MMA_W_SAT} X={MMA_X}), "
    f"capped by Little's law on (stages-1) tiles in flight vs {MEM_LATENCY_S * 1e9:.0f} ns",
    "inner": "FMA (mma) cycles / max(issue or FMA cycles, shared-memory wavefront cycles) per k step",
    "t_dram": "waves x (r*BM + c*BN) x K bytes in the GROUP_SIZE_M launch order, >= A+B; A+B <= L2/2: read once",
    "t_l2": "tiles x (BM+BN) x K bytes / L2 bandwidth (2.5x DRAM, assumed)",
    "padding": "useful MNK / (tiles rounded up to BM, BN, BK)",
}


def evaluate(
    p: Problem, cfgs: list[TileConfig], *, prune_padding: bool = True
) -> tuple[list[Scored], list[Rejected]]:
    """Resources, pruning and the score of every configuration."""
    rejected: list[Rejected] = []
    fits: list[tuple[TileConfig, dict]] = []
    for c in cfgs:
        res = _resources(p, c, prune_padding)
        if isinstance(res, Rejected):
            rejected.append(res)
        else:
            fits.append((res.pop("cfg"), res))
    blocks = _blocks(p, fits)
    scored = []
    for (c, res), (b, limiter, occ, why) in zip(fits, blocks, strict=True):
        if b <= 0:
            rejected.append(Rejected(c, "occupancy", why))
            continue
        if p.vendor == "amd":
            c = TileConfig(**{**c.__dict__, "waves_per_eu": max(1, min(8, b * c.warps // 4))})
        scored.append(_score(p, c, res, b, limiter, occ))
    return scored, rejected


# ---- resources and static pruning ---------------------------------------------------------------------------


def _overhang(size: int, tile: int) -> float:
    return 1.0 - size / (math.ceil(size / tile) * tile)


def _resources(p: Problem, c: TileConfig, prune_padding: bool = True) -> dict | Rejected:
    for dim, size, tile, smallest in (("M", p.m, c.bm, 16), ("N", p.n, c.bn, 32 if p.simt else 16),
                                      ("K", p.k, c.bk, 8 if p.simt else (32 if p.vendor == "amd" else 16))):  # fmt: skip
        waste = _overhang(size, tile)
        if prune_padding and waste > 0.5 and tile > smallest:
            return Rejected(c, "padding", f"B{dim}={tile} for {dim}={size}: {waste:.0%} of the tiles along {dim} "
                            "is padding; a smaller tile fills the grid")  # fmt: skip
    kt = math.ceil(p.k / c.bk)
    if c.stages > max(2, kt):
        return Rejected(c, "stages", f"num_stages={c.stages} but K={p.k} has only {kt} k-tiles of {c.bk}")
    if p.simt:
        return _simt_resources(p, c)
    return _mma_resources(p, c)


def _simt_resources(p: Problem, c: TileConfig) -> dict | Rejected:
    from smemtile.model.arch import get_arch

    if p.contract is None:
        raise ValueError(
            "SIMT tiles need the sgemm family's rules: pass contract= (smemtile.pipeline.tiles does)"
        )
    arch = get_arch(p.arch)
    bad, threads, smem = p.contract(c)
    if bad:
        kind = "shared_memory" if "shared memory" in bad[0] else "contract"
        return Rejected(c, kind, f"sgemm: {bad[0]}")
    # Registers: least-squares fit to ptxas (CUDA 13.0 NVRTC, sm_90, MIN_BLOCKS=1) over the 69 shapes of this
    # space that do not hit 255: the unrolled copies dominate (each 16-byte B copy a thread issues per k-tile
    # keeps ~20 registers live); mean error 20, so it steers MIN_BLOCKS and the occupancy, and `smemtile tune`
    # measures the real count.
    a_copies, b_copies = c.bm * c.bk / threads, c.bk * c.bn / 4 / threads
    est = min(255, round(58 + 3.3 * (c.tm + c.tn) + 0.2 * c.tm * c.tn + 1.1 * a_copies + 20 * b_copies))
    alloc = -(-(smem + arch.smem_reserved_per_block) // arch.smem_alloc_unit) * arch.smem_alloc_unit
    fit = min(4, arch.smem_per_sm // alloc, arch.max_threads_per_sm // threads, arch.max_blocks_per_sm)

    def cap(mb: int) -> int:  # __launch_bounds__(threads, mb): registers per thread ptxas may use
        return min(arch.max_regs_per_thread, (arch.regs_per_sm // (threads * mb)) // 8 * 8)

    # ptxas squeezes ~12% under a __launch_bounds__ cap without spilling (measured: 145 -> 128 at 128x128x8).
    ok = [mb for mb in range(1, max(fit, 1) + 1) if cap(mb) >= 0.85 * est]
    if not ok:
        return Rejected(c, "registers", f"registers: ~{est} per thread estimated for the {c.tm}x{c.tn} register "
                        f"tile exceed {cap(1)} at {threads} threads: it would spill")  # fmt: skip
    mb = max(ok)
    cfg = TileConfig(**{**c.__dict__, "min_blocks": mb})
    static = smem <= arch.static_smem_max
    pad_bytes = c.stages * c.bk * A_PAD_SIMT * 4
    return {"cfg": cfg, "threads": threads, "regs": min(est, cap(mb)), "smem": smem, "pad": pad_bytes,
            "static": smem if static else 0, "dynamic": 0 if static else smem, "wm": 4 * c.tm, "wn": 8 * c.tn}  # fmt: skip


def _mma_resources(p: Problem, c: TileConfig) -> dict | Rejected:
    amd = p.vendor == "amd"
    lane = 64 if amd else 32
    threads = c.warps * lane
    mm, mn = (16, 16) if amd else (16, 8)  # MFMA 16x16xK / mma.sync m16n8k16 output shapes
    layouts = [(wm, c.warps // wm) for wm in (1, 2, 4, 8) if c.warps % wm == 0]
    ok = [(c.bm // wm, c.bn // wn) for wm, wn in layouts
          if c.bm % wm == 0 and c.bn % wn == 0 and (c.bm // wm) % mm == 0 and (c.bn // wn) % mn == 0]  # fmt: skip
    if not ok:
        return Rejected(c, "mma_shape", f"{c.bm}x{c.bn} cannot be split over {c.warps} warps in {mm}x{mn} "
                        f"{'MFMA' if amd else 'mma'} tiles")  # fmt: skip
    wm, wn = min(ok, key=lambda t: (t[0] + t[1], -t[0]))
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
        return Rejected(c, "registers", f"registers: ~{est} per thread ({wm}x{wn} fp32 accumulators per warp) "
                        f"exceed {limit}: it would spill")  # fmt: skip
    if smem > lim_s:
        return Rejected(c, "shared_memory", f"out of resource: shared memory, required {smem}, limit {lim_s}; "
                        "reduce BK or num_stages")  # fmt: skip
    if p.contract is not None:  # the kernel family that generates these tiles (as _simt_resources)
        bad, threads, smem = p.contract(c)
        if bad:
            return Rejected(c, "shared_memory" if "shared memory" in bad[0] else "contract", bad[0])
    return {"cfg": c, "threads": threads, "regs": est, "smem": smem, "pad": pad, "static": 0, "dynamic": smem,
            "wm": wm, "wn": wn}  # fmt: skip


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
    ob = occupancy_batch(arch, [r["threads"] for r in res], [r["regs"] for r in res],
                         [r["static"] for r in res], [r["dynamic"] for r in res])  # fmt: skip
    out = []
    for i, r in enumerate(res):
        b = int(ob.active_blocks[i])
        bits = int(ob.limiting_factors[i])
        lim = next((n for n in LIMITERS if bits & {"warps": 1, "registers": 2, "shared_memory": 4,
                                                     "blocks": 8, "barriers": 16}[n]), "blocks")  # fmt: skip
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
    if p.simt:
        t = r["threads"]
        # per thread per k: TM*TN FFMA, (TM+TN)/4 LDS.128, its share of the copies, ~8 per k-tile overhead
        instr = c.tm * c.tn + (c.tm + c.tn) / 4 + (c.bm + c.bn / 4) / t + 8 / c.bk
        issue = c.warps * instr / 4  # 4 schedulers, one warp instruction each per clock
        ffma = c.bm * c.bn / 128  # 128 FP32 lanes per SM
        lds = c.warps * (c.tm + c.tn) / 4 * LDS_CYCLES + (c.bm + c.bn) / 32  # A and B reads + the copies
        return ffma / max(issue, lds, ffma)
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
    out = p.m * p.n * (4 if p.dtype in ("f32", "tf32") else e)
    if once <= p.gpu.l2_bytes / 2:
        return once + out
    slots = max(1, min(slots, tiles))
    g = max(1, min(group, gm))
    rows = min(gm, max(min(g, slots), math.ceil(slots / gn)))
    cols = min(gn, math.ceil(slots / min(g, slots)))
    per_wave = (rows * c.bm + cols * c.bn) * p.k * e
    return max(once, math.ceil(tiles / slots) * per_wave) + out


def _score(p: Problem, c: TileConfig, r: dict, b: int, limiter: str, occ: float) -> Scored:
    g = p.gpu
    z = c.split_k
    # split K: z slices of ceil(K / (BK z)) steps each run as separate blocks and add into C with atomics
    gm, gn, kt = math.ceil(p.m / c.bm), math.ceil(p.n / c.bn), math.ceil(p.k / (c.bk * z))
    tiles = gm * gn * z
    pad_eff = p.m * p.n * p.k / (gm * c.bm * gn * c.bn * kt * c.bk * z)
    peak_sm = g.peak(p.dtype) * 1e12 / g.sms
    inner = _inner_eff(p, c, r)
    w_sat, x = (SIMT_W_SAT, SIMT_X) if p.simt else (MMA_W_SAT, MMA_X)
    ai_tile = 2 * c.bm * c.bn / ((c.bm + c.bn) * p.elem)  # FLOP per byte moved into shared memory
    tile_bytes = (c.bm + c.bn) * c.bk * p.elem
    in_flight = max(c.stages - 1, 0.5) * tile_bytes

    def eff(n: int) -> float:
        lat = min(1.0, n * c.warps / w_sat) ** x
        pipe = n * in_flight / MEM_LATENCY_S * ai_tile / (peak_sm * inner * lat)
        return lat * min(1.0, pipe)

    t_tile = 2 * c.bm * c.bn * kt * c.bk / (peak_sm * inner)
    busiest = math.ceil(tiles / g.sms)
    full, rem = divmod(busiest, b)
    t_sm = full * b * t_tile / eff(b) + (rem * t_tile / eff(rem) if rem else 0.0)
    slots = g.sms * b
    waves = tiles / slots
    # split K: C is zeroed (or scaled) first and every slice does a read-modify-write of its tile in L2
    c_extra = 2 * p.m * p.n * 4 * z if z > 1 else 0
    c_init = p.m * p.n * 4 if z > 1 else 0
    dram = _dram_bytes(p, c, slots, c.group_m) + c_init
    dram_ug = _dram_bytes(p, c, slots, 1) + c_init
    l2 = tiles * (c.bm + c.bn) * kt * c.bk * p.elem + c_extra
    t_dram, t_l2 = dram / (g.dram_gbps * 1e9), l2 / (g.l2_gbps * 1e9)
    parts = {"compute": t_sm, "dram": t_dram, "l2": t_l2}
    bound = max(parts, key=parts.get)
    # Overlap is imperfect: OVERLAP of the non-binding times shows through (favours high-intensity tiles).
    t = parts[bound] + OVERLAP * (sum(parts.values()) - parts[bound]) + LAUNCH_S
    tflops = p.flops / t / 1e12
    return Scored(
        cfg=c, threads=r["threads"], regs=r["regs"], smem_bytes=r["smem"], smem_pad_bytes=r["pad"],
        blocks_per_sm=b, occupancy=occ, limiter=limiter, tiles=tiles, waves=waves,
        wave_eff=waves / math.ceil(waves), inner_eff=inner, latency_eff=eff(min(b, busiest)), pad_eff=pad_eff,
        dram_bytes=dram, dram_bytes_ungrouped=dram_ug, l2_bytes=l2, intensity=p.flops / dram,
        ridge=g.peak(p.dtype) * 1e12 / (g.dram_gbps * 1e9), bound=bound, time_s=t, tflops=tflops,
        roofline_frac=tflops / g.peak(p.dtype),
    )  # fmt: skip


# ---- explanations ----------------------------------------------------------------------------------------------


def explain(s: Scored, top: Scored, p: Problem) -> str:
    """One short sentence: what limits the best candidate; for rank > 1 what costs it most against #1."""
    c = s.cfg
    unit = "CU" if p.vendor == "amd" else "SM"
    head = (f"{s.bound}-bound, {s.waves:.2f} waves ({s.wave_eff:.0%} full), {s.blocks_per_sm} blk/{unit} "
            f"({s.limiter})")  # fmt: skip
    if s.dram_bytes_ungrouped > 1.05 * s.dram_bytes:
        head += f", GROUP_SIZE_M={c.group_m} cuts DRAM {s.dram_bytes_ungrouped / s.dram_bytes:.1f}x"
    if s.cfg == top.cfg:
        return "best: " + head
    tile = (
        f"{c.tm}x{c.tn} register tile" if c.tm else f"{s.threads // (64 if p.vendor == 'amd' else 32)} warps"
    )
    losses = {
        "waves": (top.wave_eff / s.wave_eff if s.tiles < 4 * p.gpu.sms * s.blocks_per_sm else 1.0,
                  f"last wave {s.waves % 1 or 1:.0%} full ({s.waves:.2f} waves)"),
        "latency": (top.latency_eff / s.latency_eff,
                    f"latency hiding {s.latency_eff:.0%} vs {top.latency_eff:.0%} "
                    f"({s.blocks_per_sm * c.warps} vs {top.blocks_per_sm * top.cfg.warps} warps/{unit}, "
                    f"{c.stages} vs {top.cfg.stages} stages)"),
        "inner": (top.inner_eff / s.inner_eff, f"inner loop {s.inner_eff:.0%} vs {top.inner_eff:.0%} ({tile})"),
        "padding": (top.pad_eff / s.pad_eff, f"{1 - s.pad_eff:.0%} of the computed tiles is padding"),
        "traffic": (1 + (s.l2_bytes - top.l2_bytes) / max(top.l2_bytes, 1) * 0.1 if s.bound == "compute" else 1.0,
                    f"{s.l2_bytes / top.l2_bytes:.1f}x the L2->SM traffic of #1 (intensity per tile)"),
        "memory": (s.time_s / top.time_s if s.bound != "compute" else 1.0,
                   f"{s.bound}-bound: {s.dram_bytes / 1e9:.2f} GB from DRAM, {s.intensity:.0f} FLOP/B "
                   f"vs ridge {s.ridge:.0f}"),
    }  # fmt: skip
    worst = max(losses.values(), key=lambda t: t[0])
    gap = s.time_s / top.time_s - 1
    return f"{gap:+.1%} vs #1: {worst[1] if worst[0] > 1.002 else 'ties within the model'}"


def spearman(a, b) -> float:
    """Spearman rank correlation of two equal-length sequences (average ranks for ties)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(x) < 2:
        return float("nan")

    def ranks(v: np.ndarray) -> np.ndarray:
        order = v.argsort(kind="stable")
        r = np.empty(len(v))
        r[order] = np.arange(len(v), dtype=float)
        for val in np.unique(v):  # average ties
            m = v == val
            r[m] = r[m].mean()
        return r

    rx, ry = ranks(x), ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])
