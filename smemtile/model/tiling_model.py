"""The tile model's arithmetic: per-candidate resources, pruning with reasons, occupancy, predicted time, and
the sentence that explains each rank. The formulas are stated in ``smemtile.model.tiling``'s docstring; the
calibrated constants are data (``smemtile/model/data/*.json``, each naming its GPU, sweep and commit)."""

from __future__ import annotations

import math

import numpy as np

from smemtile.model.data_files import read_data
from smemtile.model.tiling import (
    A_PAD_SIMT,
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

MAX_SQUEEZE = 0.3  # a __launch_bounds__ cap more than 30% under the estimated need spills: rejected

MODEL_TEXT = {
    "simt": "calibrated sgemm model (model/data/sgemm_h200.json): per K tile issue cycles x (1 + phi / "
    "(warps per scheduler^q * ILP^r)) vs shared-memory wavefronts, + barrier / blocks, latency floors, waves "
    "of b blocks per SM, register-squeeze penalty, split K's atomics",
    "predicts": f"mma: time = max(t_sm, t_dram, t_l2) + {OVERLAP} x (the other two) + 3 us, t_sm / the measured "
    "efficiency of (tile, BK, stages, warps) (model/data/triton_h200.json); score = useful TFLOP/s",
    "t_sm": "busiest SM runs ceil(tiles/SMs) tiles, b at a time: sum of rounds r * t_tile / eff(r)",
    "eff": f"mma: min(1, warps/{MMA_W_SAT})**{MMA_X}, capped by Little's law on (stages-1) tiles in flight vs "
    f"{MEM_LATENCY_S * 1e9:.0f} ns",
    "inner": "mma cycles / max(mma cycles, ldmatrix + copy bytes at 128 B/clk/SM) per k step",
    "family": "a generating family's own tiles (hgemm): x its measured BK / stages factor, t_sm >= rounds x K "
    "tiles x latency / (stages-1) (L2, or DRAM below the ridge), + split K's atomics; the family's calibration file",
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


def simt_constants() -> dict:
    return load_calibration("sgemm_h200.json")["constants"]


def calibration_info(p: Problem) -> dict:
    """Which calibration applies to the problem's predictions, and the expected error (printed by tiles)."""
    if p.simt:
        d = load_calibration("sgemm_h200.json")
        same = p.gpu.key == d["gpu_key"] and p.gpu.sms == d["sms"]
        err = d["error"]["held_out"]
        return {
            "model": "sgemm (SIMT), calibrated",
            "file": "smemtile/model/data/sgemm_h200.json",
            "gpu": d["gpu"],
            "sweeps": d["sweeps"],
            "commit": d["commit"],
            "date": d["date"],
            "applies": same,
            "median_error": err["median"],
            "p90_error": err["p90"],
            "expected_error": (
                f"held-out median {err['median']:.0%}, 90% within {err['p90']:.0%} "
                f"({err['shapes']} shapes, {err['n']} configurations)"
            )
            if same
            else (
                f"not calibrated on the {p.gpu.name}: the {d['gpu']}'s constants with this GPU's FP32 lanes "
                "and clock; expect more than the H200's held-out error"
            ),
        }
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
            "file": "smemtile/model/tiling_model.py",
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


# ---- the calibrated SIMT (sgemm) model ---------------------------------------------------------------------------
def simt_registers(c: TileConfig, threads: int, consts: dict | None = None) -> float:
    """ptxas' register need without a cap (least squares over the sweep's uncapped builds, CUDA 13.0 sm_90)."""
    r = (consts or simt_constants())["registers"]
    a_items, b_items = c.bm * c.bk / 4 / threads, c.bk * c.bn / 4 / threads
    return (
        r["c0"]
        + r["acc"] * c.tm * c.tn
        + r["tmtn"] * (c.tm + c.tn)
        + r["a_items"] * a_items
        + r["b_items"] * b_items
        + (r["split"] if c.split_k > 1 else 0.0)
    )


def simt_cap(threads: int, min_blocks: int) -> int:
    """Registers per thread ptxas may use under __launch_bounds__(threads, min_blocks) (sm_70+)."""
    return min(255, (65536 // (threads * max(1, min_blocks))) // 8 * 8)


def ragged_split_errors(bm: int, bn: int, bk: int, threads: int) -> list[str]:
    """Why the RAGGED loop's copies cannot split over the threads (empty: they can): A in runs of 8 consecutive k
    per thread, B one element per thread."""
    out, per_pass = [], max(1, threads // 8)
    if (bm * bk) % threads or (bm % per_pass and per_pass % bm):
        out.append(
            f"RAGGED=1 copies A as runs of 8 k per thread: BM*BK={bm * bk} must split over {threads} "
            f"threads and BM={bm}, threads/8={per_pass} must divide one another"
        )
    if threads % bn and bn % threads:
        out.append(
            f"RAGGED=1 copies B one element per thread: threads={threads} and BN={bn} must divide one another"
        )
    return out


def ragged_loop(
    bm: int, bn: int, bk: int, tm: int, tn: int, threads: int, min_blocks: int, k: int, n: int
) -> bool:
    """Whether the sgemm kernel for this tile and problem compiles in its unmasked 4-byte loop for unaligned
    whole tiles (the family's RAGGED 0 = auto; K or N not a multiple of 4). Measured on the H200 against the
    masked copies (bench/bench_ragged.py ab, session 4: 4095x4097x1023, 2999x3001x3003, 1999x6001x1500):
    8x8 tiles +4-22 %, 256x128 16x8 at 1 block/SM +2-11 %; 128-accumulator tiles at 2+ blocks/SM lose 14-17 %
    where A is unaligned (K % 4 != 0: ptxas schedules their FFMA loop worse) and gain 7-11 % where only B is.
    Off where the register cap is 128 or less (ptxas spills with the extra loop; not measured)."""
    if not (k % 4 or n % 4):
        return False
    if ragged_split_errors(bm, bn, bk, threads):
        return False
    if tm * tn >= 128 and min_blocks >= 2 and k % 4:
        return False
    return 65536 // (max(32, threads) * max(1, min_blocks)) > 128


# Repacking unaligned operands (sgemm's REPACK): A (K % 4 != 0) and B (N % 4 != 0) are read and written once more
# before the GEMM. It pays where the GEMM does at least this many flops per byte the copies move (read + write).
# Break-even: copies at ~4.1 TB/s (sgemm_h200.json "repack") against the ~17 % the unaligned loops cost at
# ~45 TFLOP/s: 45 / (0.17 x 4.1) ~ 64. Measured on the H200 (bench/bench_repack.py, the fitting shapes of
# bench/results/issue20_repack_session5_fit.json): REPACK lost 7-13 % at 60-64 flops per byte (skinny problems)
# and won 3-35 % from 96 up (767^3-ish to 4096^3-ish); the threshold sits between. Below REPACK_MIN_FLOPS the
# copies' ~4 us launches outweigh what they save (derived: ~8 us against at most ~30 % of a GEMM of ~25 us at the
# small tiles' ~20 TFLOP/s; the smallest problem measured, 767 x 769 x 771, 0.9 GFLOP, gained).
REPACK_MIN_FLOPS_PER_BYTE = 80
REPACK_MIN_FLOPS = 5e8


def repack_bytes(m: int, n: int, k: int) -> int:
    """Bytes the repacking copies read and write for this problem (0: both operands aligned)."""
    return 8 * (m * k if k % 4 else 0) + 8 * (k * n if n % 4 else 0)


def repack_pays(m: int, n: int, k: int) -> bool:
    """Whether sgemm repacks the unaligned operands of this problem (REPACK 0 = auto)."""
    b, flops = repack_bytes(m, n, k), 2 * m * n * k
    return b > 0 and flops >= REPACK_MIN_FLOPS and flops >= REPACK_MIN_FLOPS_PER_BYTE * b


def shape_features(m: int, n: int, k: int) -> tuple[float, float, float, float]:
    """Where a GEMM shape sits for the local correction: log2 M, N, K and whether lda or ldb is unaligned."""
    return (
        math.log2(max(m, 1)),
        math.log2(max(n, 1)),
        math.log2(max(k, 1)),
        1.0 if (k % 4 or n % 4) else 0.0,
    )


def _local_weights(q: dict, m: int, n: int, k: int) -> list[float]:
    """Gaussian weight of every fitting shape of ``q["local_bias"]`` for (m, n, k); cached per constants."""
    lb = q["local_bias"]
    memo = lb.setdefault("_memo", {})
    if (m, n, k) not in memo:
        x = shape_features(m, n, k)
        s, u = lb["sigma"], lb["unaligned_distance"]
        memo[(m, n, k)] = [
            math.exp(
                -(
                    sum((a - b) ** 2 for a, b in zip(x[:3], e["x"][:3], strict=True))
                    + (u * (x[3] - e["x"][3])) ** 2
                )
                / (2 * s * s)
            )
            for e in lb["shapes"]
        ]
    return memo[(m, n, k)]


def tile_correction(q: dict, m: int, n: int, k: int, c: TileConfig) -> float | None:
    """log(predicted / measured) the model divides out for this tile: the residual of the tile on the fitting
    shapes near (m, n, k) (Gaussian weights in log2 M, N, K; unaligned shapes apart), shrunk toward the tile's
    mean residual over all fitting shapes; None for a tile never measured on a fitting shape."""
    key = f"{c.bm}x{c.bn}x{c.bk} {c.tm}x{c.tn}"
    glob = q.get("tile_bias", {}).get(key)
    lb = q.get("local_bias")
    if lb is None:
        return glob
    wsum = lb["prior"] if glob is not None else 0.0
    acc = wsum * (glob or 0.0)
    sk = "sk" if c.split_k > 1 else "1"
    for w, e in zip(_local_weights(q, m, n, k), lb["shapes"], strict=True):
        r = e["bias"].get(f"{key} {sk}")
        if r is not None:
            acc += w * r
            wsum += w
    return acc / wsum if wsum > 0 else glob


def simt_time(
    m: int,
    n: int,
    k: int,
    c: TileConfig,
    threads: int,
    b: int,
    sms: int,
    *,
    consts: dict | None = None,
    lanes: float = 128.0,
    repack: bool | None = None,
) -> dict:
    """Predicted seconds of one sgemm launch (and the parts) with ``b`` resident blocks per SM; ``repack``: whether
    unaligned A / B are repacked first (None: the family's auto rule, :func:`repack_pays`)."""
    q = consts or simt_constants()
    t_repack, copied = 0.0, repack_bytes(m, n, k)
    if copied and (
        repack_pays(m, n, k) if repack is None else repack
    ):  # sgemm's REPACK: the GEMM on 16-byte rows
        launches = (k % 4 > 0) + (n % 4 > 0)
        t_repack = copied / (q["repack_gbps"] * 1e9) + launches * q["repack_launch_us"] * 1e-6
        n, k = -(-n // 4) * 4, -(-k // 4) * 4  # same tile counts: BN and BK are multiples of 4
    f = q["f_ghz"] * 1e9
    w = threads / 32
    gm, gn, z = math.ceil(m / c.bm), math.ceil(n / c.bn), c.split_k
    kt = math.ceil(k / (c.bk * z))
    tiles = gm * gn * z
    a_items, b_items = c.bm * c.bk / 4 / threads, c.bk * c.bn / 4 / threads
    # unaligned lda / ldb (K or N not a multiple of 4): A is loaded and B copied 4 bytes at a time (4x the copies)
    a_loads, b_copies = a_items * (4 if k % 4 else 1), b_items * (4 if n % 4 else 1)
    instr = (
        c.bk * (c.tm * c.tn + q["alpha"] * (c.tm + c.tn) / 4)
        + q["beta"] * (a_loads + 4 * a_items)
        + q["beta_b"] * b_copies
        + q["gamma"]
    )  # per warp per K tile
    wavefronts = w * c.bk * (c.tm + c.tn) / 4 * 2 + 4 * a_items * threads / 32 + b_copies * threads / 32 * 4
    ilp = c.tm * c.tn / 16
    eff = q["class_eff"].get(str(c.tm * c.tn), 1.0)
    body_kb = c.bk * (c.tm * c.tn + (c.tm + c.tn) / 4 + 5 * a_items / c.bk) * 16 / 1024
    icache = 1 + q["icache_pen"] * max(0.0, body_kb / q["icache_kb"] - 1)
    scale = 128.0 / lanes

    def t_ktile(bb: int) -> float:  # one K tile of each of the bb co-resident blocks
        ws = bb * w / 4
        issue = bb * w * instr / 4 * (1 + q["phi"] / (ws ** q["q"] * ilp ** q["r"])) * icache / eff * scale
        cyc = max(issue, bb * wavefronts) + q["bar_cyc"] / bb
        return max(cyc / f, q["lat_a_us"] * 1e-6, q["lat_b_us"] * 1e-6 / max(c.stages - 1, 1))

    slots = sms * b
    full, rem = divmod(tiles, slots)
    t_sm = full * kt * t_ktile(b) + (kt * t_ktile(math.ceil(rem / sms)) if rem else 0.0)
    need = simt_registers(c, threads, q)
    squeeze = max(0.0, need - simt_cap(threads, c.min_blocks)) / need
    t_sm *= 1 + q["squeeze"] * squeeze
    if k % 4 or n % 4:  # lda or ldb not a multiple of 4: 4-byte copies (the masked path, or RAGGED's loop)
        ragged = ragged_loop(c.bm, c.bn, c.bk, c.tm, c.tn, threads, c.min_blocks, k, n)
        t_sm *= 1 + (
            q.get("unaligned_ragged", q.get("unaligned", 0.0)) if ragged else q.get("unaligned", 0.0)
        )
    t_split = m * n * 4 * z * 2 / (q["atom_gbps"] * 1e9) + LAUNCH_S if z > 1 else 0.0
    # the fitted per-tile correction (tiles measured on the fitting shapes); others carry the fit's p90 error
    bias = tile_correction(q, m, n, k, c)
    if "tile_bias" in q:
        t_sm *= math.exp(-bias) if bias is not None else 1 + q["unmeasured_penalty"]
    t = t_sm + t_split + t_repack + q["launch_us"] * 1e-6
    return {
        "calibrated_tile": bias is not None,
        "time": t,
        "t_sm": t_sm,
        "t_split": t_split,
        "t_repack": t_repack,
        "tiles": tiles,
        "waves": tiles / slots,
        "t_ktile": t_ktile(b),
        "squeeze": squeeze,
        "need": need,
        "icache": icache,
        "latency_eff": 1 / (1 + q["phi"] / ((b * w / 4) ** q["q"] * ilp ** q["r"])),
    }


# ---- resources and static pruning ---------------------------------------------------------------------------
def evaluate(
    p: Problem, cfgs: list[TileConfig], *, prune_padding: bool = True
) -> tuple[list[Scored], list[Rejected]]:
    """Resources, pruning and the score of every configuration."""
    rejected: list[Rejected] = []
    fits: list[tuple[TileConfig, dict]] = []
    contract_cache: dict[tuple, tuple] = {}
    for c in cfgs:
        res = _resources(p, c, prune_padding, contract_cache)
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
        scored.append(_score(p, c, res, b, limiter, occ))
    return scored, rejected


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
    if p.simt:
        return _simt_resources(p, c, cache)
    return _mma_resources(p, c)


def _simt_resources(p: Problem, c: TileConfig, cache: dict) -> dict | Rejected:
    from smemtile.model.arch import get_arch

    if p.contract is None:
        raise ValueError(
            "SIMT tiles need the sgemm family's rules: pass contract= (smemtile.pipeline.tiles does)"
        )
    arch = get_arch(p.arch)
    key = (c.bm, c.bn, c.bk, c.tm, c.tn, c.stages)
    if key not in cache:  # the family's rules do not depend on MIN_BLOCKS or SPLIT_K
        cache[key] = p.contract(c)
    bad, threads, smem = cache[key]
    if bad:
        kind = "shared_memory" if "shared memory" in bad[0] else "contract"
        return Rejected(c, kind, f"sgemm: {bad[0]}")
    need = simt_registers(c, threads)
    cap = simt_cap(threads, c.min_blocks)
    if need > cap * (1 + MAX_SQUEEZE):
        return Rejected(
            c,
            "registers",
            f"registers: ~{need:.0f} per thread for the {c.tm}x{c.tn} tile, but "
            f"MIN_BLOCKS={c.min_blocks} caps ptxas at {cap}: it would spill",
        )
    static = smem <= arch.static_smem_max
    pad_bytes = c.stages * c.bk * A_PAD_SIMT * 4
    return {
        "cfg": c,
        "threads": threads,
        "regs": int(min(round(need), cap)),
        "smem": smem,
        "pad": pad_bytes,
        "static": smem if static else 0,
        "dynamic": 0 if static else smem,
        "wm": 4 * c.tm,
        "wn": 8 * c.tn,
    }


def _mma_resources(p: Problem, c: TileConfig) -> dict | Rejected:
    amd = p.vendor == "amd"
    lane = 64 if amd else 32
    threads = c.warps * lane
    mm, mn = (16, 16) if amd else (16, 8)  # MFMA 16x16xK / mma.sync m16n8kK output shapes
    layouts = [(wm, c.warps // wm) for wm in (1, 2, 4, 8) if c.warps % wm == 0]
    ok = [
        (c.bm // wm, c.bn // wn)
        for wm, wn in layouts
        if c.bm % wm == 0 and c.bn % wn == 0 and (c.bm // wm) % mm == 0 and (c.bn // wn) % mn == 0
    ]
    if not ok:
        return Rejected(
            c,
            "mma_shape",
            f"{c.bm}x{c.bn} cannot be split over {c.warps} warps in {mm}x{mn} "
            f"{'MFMA' if amd else 'mma'} tiles",
        )
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
    if p.contract is not None:  # the kernel family that generates these tiles (as _simt_resources)
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
    the family ships with its provenance, e.g. smemtile/families/hgemm/calibration_h200.yaml), or None.
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
    """sgemm: the tile's speed relative to the best on the fitting shapes (a tie-break only; 0.5 if never
    measured). Tensor-core tiles as Triton runs them (no family contract): measured / roofline-model TFLOP/s of
    the standard Triton matmul on the H200 for this tile and warps, BK bytes and stages (log-linear fit); a
    (tile, warps) pair never measured takes the worst factor of each kind and the fit's rms error as a penalty.
    1.0 elsewhere (AMD, or a family's own tiles)."""
    if p.vendor != "nvidia" or not USE_MEASURED:
        return 1.0
    if p.simt:
        rel = load_calibration("sgemm_h200.json").get("measured_tiles", {})
        key = f"{c.bm}x{c.bn}x{c.bk} {c.tm}x{c.tn}"
        return float(rel.get(f"{key} s{c.stages}", 0.99 * rel.get(key, 0.5)))
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
    if p.simt:
        lanes = (
            128.0
            if g.key == load_calibration("sgemm_h200.json")["gpu_key"]
            else g.peak("f32") * 1e12 / (2 * g.sms * g.clock_ghz * 1e9)
        )
        s = simt_time(p.m, p.n, p.k, c, r["threads"], b, g.sms, lanes=lanes, repack=p.repack)
        t_sm = s["t_sm"] + s["t_split"]
        inner = (1 + s["squeeze"] * simt_constants()["squeeze"]) ** -1 / s["icache"]
        lat_eff = s["latency_eff"]
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
        repack_s=s["t_repack"] if p.simt else 0.0,
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


def spearman(a, b) -> float:
    """Spearman rank correlation of two equal-length sequences (average ranks for ties); NaN when either side
    has no spread (``spearman_or_tie`` says why)."""
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
