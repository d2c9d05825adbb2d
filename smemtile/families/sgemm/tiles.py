"""The tile model's view of sgemm (``smemtile tiles M N K`` for fp32 on NVIDIA, ``smemtile tune``): the SIMT
candidates, this family's rules, and the calibrated SIMT model.

Candidates: every configuration of the sgemm family the model can score (SIMT FFMA, register tile TM x TN in
{4, 8, 16}^2 up to 128 accumulators, 16x8 and 8x16 included; 2-8 warps; BK 8/16/32; 2-5 stages; MIN_BLOCKS 1-4;
split K 2/4/8/16 when the grid is under two blocks per SM), each checked against the family's own rules
(:class:`SgemmRules`), so every survivor compiles.

Model (:func:`simt_time`; constants in ``sgemm_h200.json`` next to this file, fitted on measured sweeps with
held-out shapes never used; the file names the GPU, sweep and commit, and the expected error ``smemtile tiles``
prints). Per K tile a block issues BK * (TM*TN FFMA + LDS) + copy instructions per warp; the SM runs b blocks:
issue cycles x (1 + phi / (warps per scheduler^q * ILP^r)), against the shared-memory wavefronts (the bank
model's 2 per LDS.128), + a barrier per tile; floors from the global-load latency; waves (full rounds of b
blocks per SM, the last round with fewer); a register squeeze penalty when __launch_bounds__ caps ptxas below
the estimated need; split K's atomics and prepare launch; the REPACK copies of unaligned operands. The rest of
the score (DRAM and L2 traffic, the bound, the reason) is the generic GEMM model's (smemtile.model.gemm_model).
"""

from __future__ import annotations

import json
import math
from functools import cache
from importlib import resources as _res

from smemtile.errors import SpecError
from smemtile.families.base import Candidate, KernelConfig
from smemtile.families.gemm import GemmTileModel
from smemtile.model.arch import Arch
from smemtile.model.gemm_model import FamilyRules
from smemtile.model.gemm_tiles import LAUNCH_S, WARPS, Problem, Rejected, TileConfig, splits

CALIBRATION = "sgemm_h200.json"
SIMT_THREAD_TILES = ((4, 4), (4, 8), (8, 4), (8, 8), (8, 16), (16, 8))
A_PAD_SIMT = 4  # floats per As row: the fix search's layout for the sgemm kernel (transposing A copies)
MAX_SQUEEZE = 0.3  # a __launch_bounds__ cap more than 30% under the estimated need spills: rejected


@cache
def calibration() -> dict:
    """The SIMT model's constants with their provenance (``sgemm_h200.json`` next to this file, written by
    ``bench/tune_h200.py``)."""
    return json.loads(_res.files(__package__).joinpath(CALIBRATION).read_text())


def constants() -> dict:
    return calibration()["constants"]


def params_of(c: TileConfig) -> dict:
    """Template parameters of the sgemm family for a SIMT candidate."""
    d = {
        "BM": c.bm,
        "BN": c.bn,
        "BK": c.bk,
        "TM": c.tm,
        "TN": c.tn,
        "STAGES": c.stages,
        "GROUP_M": c.group_m,
        "MIN_BLOCKS": c.min_blocks,
    }
    if c.split_k > 1:
        d["SPLIT_K"] = c.split_k
    return d


def min_blocks_values(threads: int) -> list[int]:
    """MIN_BLOCKS values that give ptxas different register caps (of equal caps, the largest: the same code)."""

    def cap(mb: int) -> int:
        return min(255, (65536 // (threads * mb)) // 8 * 8)

    return [mb for mb in (1, 2, 3, 4) if mb == 4 or cap(mb) != cap(mb + 1)]


def candidates(p: Problem):
    """The raw SIMT space (before any pruning), as TileConfig values."""
    from smemtile.model.arch import get_arch

    cp = get_arch(p.arch).has_cp_async
    stages = (2, 3, 4, 5) if cp else (2,)
    for bm in (32, 64, 128, 256):
        for bn in (32, 64, 128, 256):
            for tm, tn in SIMT_THREAD_TILES:
                if bm % (4 * tm) or bn % (8 * tn):
                    continue
                threads = bm * bn // (tm * tn)
                if threads // 32 not in WARPS or threads % 32:
                    continue
                for bk in (8, 16, 32):
                    for z in splits(p, bm, bn, bk, p.gpu.sms * 2):
                        for s in stages:
                            for mb in min_blocks_values(threads):
                                yield TileConfig(bm, bn, bk, threads // 32, s, 8, tm, tn, mb, split_k=z)


# ---- the calibrated SIMT model ------------------------------------------------------------------------------------
def simt_registers(c: TileConfig, threads: int, consts: dict | None = None) -> float:
    """ptxas' register need without a cap (least squares over the sweep's uncapped builds, CUDA 13.0 sm_90)."""
    r = (consts or constants())["registers"]
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
    q = consts or constants()
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


class SimtBatch:
    """Many (m, n, k, TileConfig, threads, b, repack) rows of :func:`simt_time` on ``sms`` SMs, for scoring them
    all under one set of constants at once (:func:`simt_time_batch`; the refit's residual, ``fit.fit_simt``).
    Everything that does not depend on the constants is worked out here once, per row, by the same Python
    arithmetic as :func:`simt_time`; :meth:`times` then does the rest over numpy arrays in the same order of
    operations (the fitted powers per distinct value and the corrections' exponentials per row, with Python floats), so every time is bit for bit
    the one :func:`simt_time` returns (tests/test_sgemm_batch.py holds it over every measured row)."""

    def __init__(self, items, sms: int):
        import numpy as np

        self.items = [(m, n, k, c, threads, b, repack) for m, n, k, c, threads, b, repack in items]
        self.sms = sms
        cols: dict[str, list] = {}
        for m, n, k, c, threads, b, repack in self.items:
            copied = repack_bytes(m, n, k)
            rep = bool(copied and (repack_pays(m, n, k) if repack is None else repack))
            launches = (k % 4 > 0) + (n % 4 > 0)
            if rep:
                n, k = -(-n // 4) * 4, -(-k // 4) * 4
            w = threads / 32
            gm, gn, z = math.ceil(m / c.bm), math.ceil(n / c.bn), c.split_k
            kt = math.ceil(k / (c.bk * z))
            tiles = gm * gn * z
            a_items, b_items = c.bm * c.bk / 4 / threads, c.bk * c.bn / 4 / threads
            a_loads, b_copies = a_items * (4 if k % 4 else 1), b_items * (4 if n % 4 else 1)
            full, rem = divmod(tiles, sms * b)
            unaligned = bool(k % 4 or n % 4)
            row = {
                "repack": rep,
                "copied": copied if rep else 0,
                "launches": launches if rep else 0,
                "m": m,
                "n": n,
                "k": k,
                "bk": c.bk,
                "tm": c.tm,
                "tn": c.tn,
                "tmtn": c.tm * c.tn,
                "tmptn": c.tm + c.tn,
                "stages1": max(c.stages - 1, 1),
                "ab": a_loads + 4 * a_items,
                "b_copies": b_copies,
                "a_items": a_items,
                "b_items": b_items,
                "wavefronts": w * c.bk * (c.tm + c.tn) / 4 * 2
                + 4 * a_items * threads / 32
                + b_copies * threads / 32 * 4,
                "ilp": c.tm * c.tn / 16,
                "body_kb": c.bk * (c.tm * c.tn + (c.tm + c.tn) / 4 + 5 * a_items / c.bk) * 16 / 1024,
                "w": w,
                "b": b,
                "b2": math.ceil(rem / sms) if rem else 1,  # 1: no partial round (its time is not used)
                "rem": rem > 0,
                "full_kt": full * kt,
                "kt": kt,
                "ws": b * w / 4,
                "ws2": (math.ceil(rem / sms) if rem else 1) * w / 4,
                "cap": simt_cap(threads, c.min_blocks),
                "split": c.split_k > 1,
                "unaligned": unaligned,
                "ragged": unaligned
                and ragged_loop(c.bm, c.bn, c.bk, c.tm, c.tn, threads, c.min_blocks, k, n),
                "atom_bytes": m * n * 4 * z * 2 if z > 1 else 0,
            }
            for key, v in row.items():
                cols.setdefault(key, []).append(v)
        self.a = {
            key: np.array(v, dtype=bool if isinstance(v[0], bool) else float) for key, v in cols.items()
        }
        # the distinct values that are raised to a fitted power, and the classes that carry a fitted efficiency
        self._pow = {}
        for key in ("ws", "ws2", "ilp") if self.items else ():
            u, inv = np.unique(self.a[key], return_inverse=True)
            self._pow[key] = ([float(x) for x in u], inv)
        keys = [str(c.tm * c.tn) for _, _, _, c, *_ in self.items]
        self._class_keys = sorted(set(keys))
        self._class_of = np.array([self._class_keys.index(x) for x in keys], dtype=int)

    def _power(self, key: str, e: float):
        import numpy as np

        u, inv = self._pow[key]
        return np.array([x**e for x in u])[inv]

    def times(self, consts: dict | None = None, lanes: float = 128.0):
        """The predicted seconds of every row (``simt_time(...)["time"]``) as a numpy array."""
        import numpy as np

        q = consts or constants()
        a = self.a
        if not self.items:
            return np.zeros(0)
        t_repack = np.where(
            a["repack"],
            a["copied"] / (q["repack_gbps"] * 1e9) + a["launches"] * q["repack_launch_us"] * 1e-6,
            0.0,
        )
        f = q["f_ghz"] * 1e9
        instr = (
            a["bk"] * (a["tmtn"] + q["alpha"] * a["tmptn"] / 4)
            + q["beta"] * a["ab"]
            + q["beta_b"] * a["b_copies"]
            + q["gamma"]
        )
        eff = np.array([q["class_eff"].get(x, 1.0) for x in self._class_keys])[self._class_of]
        icache = 1 + q["icache_pen"] * np.maximum(0.0, a["body_kb"] / q["icache_kb"] - 1)
        scale = 128.0 / lanes
        ilp_r = self._power("ilp", q["r"])
        lat = np.maximum(q["lat_a_us"] * 1e-6, q["lat_b_us"] * 1e-6 / a["stages1"])

        def t_ktile(bb, ws_q):
            issue = bb * a["w"] * instr / 4 * (1 + q["phi"] / (ws_q * ilp_r)) * icache / eff * scale
            cyc = np.maximum(issue, bb * a["wavefronts"]) + q["bar_cyc"] / bb
            return np.maximum(cyc / f, lat)

        t_sm = a["full_kt"] * t_ktile(a["b"], self._power("ws", q["q"]))
        t_sm = t_sm + np.where(a["rem"], a["kt"] * t_ktile(a["b2"], self._power("ws2", q["q"])), 0.0)
        r = q["registers"]
        need = (
            r["c0"]
            + r["acc"] * a["tm"] * a["tn"]
            + r["tmtn"] * a["tmptn"]
            + r["a_items"] * a["a_items"]
            + r["b_items"] * a["b_items"]
            + np.where(a["split"], r["split"], 0.0)
        )
        squeeze = np.maximum(0.0, need - a["cap"]) / need
        t_sm = t_sm * (1 + q["squeeze"] * squeeze)
        u = q.get("unaligned", 0.0)
        ur = q.get("unaligned_ragged", u)
        t_sm = t_sm * np.where(a["unaligned"], 1 + np.where(a["ragged"], ur, u), 1.0)
        t_split = np.where(a["split"], a["atom_bytes"] / (q["atom_gbps"] * 1e9) + LAUNCH_S, 0.0)
        if "tile_bias" in q:  # the fitted corrections, per row as simt_time applies them
            fac = []
            for (m, _, _, c, *_), n, k in zip(self.items, a["n"], a["k"], strict=True):
                bias = tile_correction(q, m, int(n), int(k), c)
                fac.append(math.exp(-bias) if bias is not None else 1 + q["unmeasured_penalty"])
            t_sm = t_sm * np.array(fac)
        return t_sm + t_split + t_repack + q["launch_us"] * 1e-6


def simt_time_batch(items, sms: int, *, consts: dict | None = None, lanes: float = 128.0):
    """``simt_time(m, n, k, c, threads, b, sms, consts=, lanes=, repack=)["time"]`` of every row of ``items``
    ((m, n, k, c, threads, b, repack) tuples, or a :class:`SimtBatch` built on them once) as a numpy array,
    bit for bit."""
    batch = items if isinstance(items, SimtBatch) else SimtBatch(items, sms)
    assert batch.sms == sms, "a SimtBatch is built for one SM count"
    return batch.times(consts, lanes)


# ---- this family's rules for the generic GEMM model -------------------------------------------------------------
_CONTRACTS: dict[tuple, tuple] = {}  # the rules' answers (pure: the same tile always gets the same one)


class SgemmRules(FamilyRules):
    """sgemm's rules (``contract(tile) -> (broken rules, threads, smem bytes)``: a TileConfig as this kernel would
    build it, MIN_BLOCKS 1, the arch's pipeline, As padded by 4) and its SIMT model for the generic GEMM model."""

    def __init__(self, fam, arch: Arch, problem: dict):
        self.fam, self.arch, self.problem = fam, arch, problem

    def _check(self, c) -> tuple:
        from smemtile.families import configure

        params = {
            **params_of(c),
            "MIN_BLOCKS": 1,
            "SPLIT_K": 1,
            "CP_ASYNC": int(self.arch.has_cp_async),
            **self.problem,
        }
        try:
            cfg = configure(self.fam, params, {"As": {"pad": A_PAD_SIMT}}, self.arch, check=False)
        except SpecError as e:
            return [str(e)], 0, 0
        bad = self.fam.problems(cfg, accesses=False)  # violations() already rules out empty copy loops
        return bad, self.fam.threads(cfg.params), 0 if bad else self.fam.smem_bytes(cfg)

    def __call__(self, c):
        # the rules depend on the tile, stages and arch, not on MIN_BLOCKS or the problem size
        key = (self.arch.name, c.bm, c.bn, c.bk, c.tm, c.tn, c.stages)
        if key not in _CONTRACTS:
            _CONTRACTS[key] = self._check(c)
        return _CONTRACTS[key]

    def resources(self, p: Problem, c: TileConfig, cache: dict) -> dict | Rejected:
        arch = self.arch
        key = (c.bm, c.bn, c.bk, c.tm, c.tn, c.stages)
        if key not in cache:  # the family's rules do not depend on MIN_BLOCKS or SPLIT_K
            cache[key] = self(c)
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

    def timing(self, p: Problem, c: TileConfig, r: dict, b: int) -> dict:
        g = p.gpu
        lanes = (
            128.0
            if g.key == calibration()["gpu_key"]
            else g.peak("f32") * 1e12 / (2 * g.sms * g.clock_ghz * 1e9)
        )
        s = simt_time(p.m, p.n, p.k, c, r["threads"], b, g.sms, lanes=lanes, repack=p.repack)
        return {
            **s,
            "t_sm": s["t_sm"] + s["t_split"],
            "inner": (1 + s["squeeze"] * constants()["squeeze"]) ** -1 / s["icache"],
        }

    def measured_eff(self, p: Problem, c: TileConfig) -> float:
        """The tile's speed relative to the best on the fitting shapes (a tie-break only; 0.5 if never measured)."""
        rel = calibration().get("measured_tiles", {})
        key = f"{c.bm}x{c.bn}x{c.bk} {c.tm}x{c.tn}"
        return float(rel.get(f"{key} s{c.stages}", 0.99 * rel.get(key, 0.5)))

    def calibration_info(self, p: Problem) -> dict:
        d = calibration()
        same = p.gpu.key == d["gpu_key"] and p.gpu.sms == d["sms"]
        err = d["error"]["held_out"]
        return {
            "model": "sgemm (SIMT), calibrated",
            "file": f"smemtile/families/sgemm/{CALIBRATION}",
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


# ---- the TileModel ---------------------------------------------------------------------------------------------
KIND = "SIMT FFMA, the sgemm family (generate / verify / tune can build these)"
REPACK_NOTE = (
    "K or N is not a multiple of 4: the launch first copies the unaligned operands into 16-byte rows "
    "(the sgemm family's REPACK, {us:.0f} us of the predicted time), so the GEMM runs "
    "its aligned loop; the generated helper takes that workspace (launch_sgemm_workspace_bytes())."
)

TRITON_NOTE = (
    "fp32: ranked for SIMT FFMA (the sgemm family); tl.dot needs BLOCK_SIZE_K >= 16 and uses "
    "TF32 unless input_precision='ieee'"
)


class SgemmTileModel(GemmTileModel):
    """sgemm's candidates and rules through the generic GEMM model, its own SIMT timing."""

    def rules(self, arch: Arch, dims: dict):
        return SgemmRules(self.fam, arch, dims)

    def candidates(self, p: Problem):
        return candidates(p)

    def kind_text(self, p: Problem) -> str:
        return KIND

    def texts(self, p: Problem) -> dict:
        return {**super().texts(p), "repack": REPACK_NOTE, "triton": TRITON_NOTE}

    def ranker(self, report) -> Ranker:
        return Ranker(self, report)

    def configure(self, entry) -> KernelConfig:
        from smemtile.families import configure

        s = getattr(getattr(entry, "pred", None), "result", entry)
        params = {**params_of(s.cfg), "CP_ASYNC": int(self.p.contract.arch.has_cp_async)}
        problem = {"M": self.p.m, "N": self.p.n, "K": self.p.k}
        return configure(self.fam, {**params, **problem}, {"As": {"pad": A_PAD_SIMT}}, self.p.contract.arch)


def tile_spec(fam, p: Problem, s) -> dict:
    """The spec body of a ranked candidate ``s`` (the family's buffers and accesses are its own)."""
    c = s.cfg
    kernel = {
        "family": fam.name,
        "M": p.m,
        "N": p.n,
        "K": p.k,
        "GROUP_M": c.group_m,
        "MIN_BLOCKS": c.min_blocks,
    }
    if c.split_k > 1:  # the K slices add into C with atomics after the launch plan's C = beta * C
        kernel["SPLIT_K"] = c.split_k
    return {
        "tile": {"BM": c.bm, "BN": c.bn, "BK": c.bk, "TM": c.tm, "TN": c.tn},
        "stages": c.stages,
        "kernel": kernel,
    }


class Ranker:
    """The tile model's ranking of sgemm configurations for one problem (``smemtile tune``): ``top(k)`` and a
    Candidate for any configuration (``__call__``)."""

    def __init__(self, model: SgemmTileModel, report):
        self.model, self.fam, self.p, self.report = model, model.fam, model.p, report
        self.by_label = {s.cfg.label: s for s in report.ranked}

    def top(self, k: int) -> list[dict]:
        return [params_of(s.cfg) for s in self.report.ranked[:k]]

    def __call__(self, params: dict, src: str) -> Candidate:
        from smemtile.model.gemm_tiles import Scored

        full = {**self.fam.defaults(), **params}
        threads = self.fam.threads(full)
        c = TileConfig(
            full["BM"],
            full["BN"],
            full["BK"],
            threads // 32,
            full["STAGES"],
            full["GROUP_M"],
            full["TM"],
            full["TN"],
            full["MIN_BLOCKS"],
            split_k=full["SPLIT_K"],
        )
        label = c.label
        ranked = self.by_label.get(c.label)
        if ranked is not None:
            return Candidate(label, params, src, ranked.rank, ranked.tflops, ranked.reason)
        x = self.model.score(c)
        if isinstance(x, Scored):
            return Candidate(
                label,
                params,
                src,
                None,
                x.tflops,
                "not in the model's ranking (another "
                "stages / GROUP_M / MIN_BLOCKS of the tile ranks instead)",
            )
        return Candidate(label, params, src, None, None, x.reason)
