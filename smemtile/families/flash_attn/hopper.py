"""PATH 1 of flash_attn: the sm_90a kernel ``flash_attn_wgmma`` (kernels/flash_attn.cu's last block; measured
standalone as bench/flash_attn_sm90), the FlashAttention-3 schedule: TMA + mbarrier rings, wgmma, a producer
warpgroup and two consumer warpgroups (setmaxnreg), the softmax of tile j under the P V wgmmas of tile j - 1
(OVERLAP 1) or with the consumers' ping-pong (OVERLAP 2).

Everything here is PATH 1's half of the family (FlashAttn dispatches to it when ``PATH`` is 1): the signature
with the three tensor maps after lse, the template arguments, the tensor maps (4-D, 128B swizzle: the table of
bench/flash_attn_sm90/README.md), the launch (one CTA per work item (q tile, batch * head), or PERSISTENT's grid of SMS CTAs, 384 threads, dynamic
shared memory ``fa::smem_bytes``), the shared-memory buffers as TMA writes them and the wgmma reads as
ldmatrix-phase expressions (as wgmma_gemm describes its own), the rules, the checklist and the tile model's part.

BM is fixed at 128 (two consumer warpgroups of 64 rows), BN 64 or 128, STAGES 2..4 (the depth of the K ring and of
the V ring), OVERLAP 0 / 1 / 2. The kernel reads q, k, v only through the tensor maps: TMA needs them 16-byte
aligned with strides that are multiples of 8 elements; o takes any strides (4-byte stores where o and its strides
allow, else 2-byte).
"""

from __future__ import annotations

import functools
import re

from smemtile.families.base import FAIL, NA, PASS, Item, KernelCall, KernelConfig, TensorMapArg
from smemtile.model.layout import Layout

KERNEL = "flash_attn_wgmma"
BM = 128  # query rows per CTA: 2 consumer warpgroups x 64
THREADS = 384  # producer warpgroup + 2 consumer warpgroups
SLACK = 1024  # the kernel aligns its tiles to 1024 bytes at run time
BNS, STAGES, OVERLAPS = (64, 128), (2, 3, 4), (0, 1, 2)
BUFFERS = ("Qs", "Ks", "Vs")
ARRAYS = ("q", "k", "v", "o")
STRIDES = tuple(f"{a}_{s}" for a in ARRAYS for s in ("sb", "ss", "sh"))
CONSUMER_WARPS = list(range(4, 12))


def smem_formula(hd: int, bn: int, stages: int) -> int:
    """``fa::smem_bytes<HD, BN, STAGES>()``: slack + the Q tile + K and V rings + 2 + 4 * STAGES mbarriers."""
    return SLACK + BM * hd * 2 + 2 * stages * bn * hd * 2 + 8 * (2 + 4 * stages)


def signature(fam) -> tuple[str, ...]:
    sig = list(fam.signature)
    at = sig.index("float* lse") + 1
    maps = [f"const __grid_constant__ smemtile::TensorMap tm_{a}" for a in "qkv"]
    return tuple(sig[:at] + maps + sig[at:])


def template_args(fam, cfg: KernelConfig) -> list[str]:
    from smemtile.families.flash_attn import T_CTYPES

    p, q = cfg.params, fam.problem_ints(cfg.problem)
    vals = [T_CTYPES[cfg.problem["dtype"]], q["head_dim"], p["BN"], p["STAGES"], q["causal"], p["OVERLAP"]]
    return [str(v) for v in vals]


def name_expression(fam, cfg: KernelConfig) -> str:
    return f"{KERNEL}<{', '.join(template_args(fam, cfg))}>"


def tensor_maps(fam, cfg: KernelConfig) -> list[TensorMapArg]:
    out = []
    for a, seq, rows in (("q", "seq_q", "BM"), ("k", "seq_kv", "BN"), ("v", "seq_kv", "BN")):
        out.append(
            TensorMapArg(
                f"tm_{a}",
                a,
                ("head_dim", seq, "heads", "batch"),
                "",
                ("64", rows, "1", "1"),
                strides=(f"{a}_ss * 2", f"{a}_sh * 2", f"{a}_sb * 2"),
                doc=f"{a} [batch, {seq}, heads, head_dim]: box {{64, {rows}, 1, 1}} per 64-column panel",
            )
        )
    return out


def calls(fam, cfg: KernelConfig) -> list[KernelCall]:
    return [
        KernelCall(
            (
                "q",
                "k",
                "v",
                "o",
                "lse",
                "tm_q",
                "tm_k",
                "tm_v",
                "batch",
                "heads",
                "seq_q",
                "seq_kv",
                *STRIDES,
                "scale",
            ),
            (
                "PERSISTENT * min(cdiv(seq_q, BM) * batch * heads, SMS)"
                " + (1 - PERSISTENT) * cdiv(seq_q, BM) * batch * heads",
                "1",
                "1",
            ),
            ("THREADS", "1", "1"),
            doc="one CTA per work item (q tile, batch * head), or with PERSISTENT at most SMS CTAs looping over them",
        )
    ]


def smem_bytes(fam, cfg: KernelConfig) -> int:
    p = cfg.params
    return smem_formula(fam.problem_ints(cfg.problem)["head_dim"], p["BN"], p["STAGES"])


def tma_layout() -> Layout:
    return Layout.for_tma("128B", 2)


def default_layouts(fam, cfg: KernelConfig) -> dict[str, Layout]:
    return {b: tma_layout() for b in BUFFERS}


def violations(fam, cfg: KernelConfig) -> list[str]:
    from smemtile.families.flash_attn import HEAD_DIMS, SEQ_STRIDES

    p, out = cfg.params, []
    q = fam.problem_ints(cfg.problem)
    why = cfg.arch.lacks("wgmma")
    if why:
        out.append(
            f"PATH 1 (wgmma, TMA, setmaxnreg) needs sm_90a, not {cfg.arch.name}: {why}; PATH 0 (mma.sync) runs there"
        )
    if q["head_dim"] not in HEAD_DIMS:
        out.append(
            f"head_dim {q['head_dim']} is not supported: PATH 1 is built for head dimensions 64 and 128"
        )
    if p["BM"] != BM:
        out.append(f"BM = {p['BM']}: PATH 1 fixes BM at 128 (two consumer warpgroups of 64 query rows)")
    if p["BN"] not in BNS:
        out.append(f"BN = {p['BN']}: PATH 1 takes 64 or 128 keys per KV tile (the wgmma n of S = Q K^T)")
    if p["STAGES"] not in STAGES:
        out.append(f"STAGES = {p['STAGES']}: PATH 1's K and V rings take 2 to 4 stages")
    if p["OVERLAP"] not in OVERLAPS:
        out.append(f"OVERLAP = {p['OVERLAP']}: 0 (simple), 1 (softmax under P V) or 2 (1 with ping-pong)")
    for s in SEQ_STRIDES:
        if q[s] < q["heads"] * q["head_dim"]:
            out.append(
                f"{s} = {q[s]} is below heads * head_dim = {q['heads'] * q['head_dim']}: a token's row holds "
                "its heads (the problem's arrays are rows of tokens; the generated helper takes any strides)"
            )
    smem = smem_formula(q["head_dim"], p["BN"], p["STAGES"])
    if smem > cfg.arch.smem_optin_per_block:
        out.append(
            f"shared memory {smem} bytes per block (1024 alignment slack included) exceeds the {cfg.arch.name} "
            f"opt-in limit of {cfg.arch.smem_optin_per_block} bytes; reduce STAGES or BN"
        )
    for name in BUFFERS:
        lay = cfg.layouts.get(name)
        if lay is not None and lay != tma_layout():
            out.append(
                f"{name}: PATH 1's tensor maps and wgmma descriptors use TMA 128B (rows of 128 bytes); "
                f"{lay.describe()} is not what it builds"
            )
    return out


def requires(fam, cfg: KernelConfig) -> list[tuple[str, str]]:
    """TMA: q, k, v 16-byte aligned and their strides multiples of 8 elements (16-byte global strides); o takes
    any strides and 2-byte alignment."""
    aligned = " & ".join(f"({a}_align >= 16)" for a in "qkv")
    mult = " & ".join(f"(({s} % 8) == 0)" for s in STRIDES if s[0] != "o")
    return [
        (aligned, "q, k and v 16-byte aligned (TMA reads them through tensor maps)"),
        (
            mult,
            "the q, k and v strides multiples of 8 elements (TMA's global strides are multiples of 16 bytes)",
        ),
    ]


def buffers(fam, cfg: KernelConfig) -> list[dict]:
    dt = cfg.problem["dtype"]
    return [
        {
            "name": "Qs",
            "dtype": dt,
            "shape": ["HD // 64 * BM", 64],
            "note": "query tile as HD/64 TMA boxes {64, 128}: row p*BM + r holds q[b, m0 + r, h, 64p ..]",
        },
        {
            "name": "Ks",
            "dtype": dt,
            "shape": ["HD // 64 * BN", 64],
            "stages": "STAGES",
            "note": "key tile as HD/64 TMA boxes {64, BN}: row p*BN + j holds k[b, kv0 + j, h, 64p ..]",
        },
        {
            "name": "Vs",
            "dtype": dt,
            "shape": ["HD // 64 * BN", 64],
            "stages": "STAGES",
            "note": "value tile, the same boxes (read MN-major by the P V wgmma)",
        },
        {
            "name": "bars",
            "dtype": "u64",
            "shape": ["2 + 4 * STAGES"],
            "note": "mbarriers: q_full, q_empty, k_full / v_full / k_empty / v_empty [STAGES]",
        },
    ]


def accesses(fam, cfg: KernelConfig) -> list[dict]:
    core = "the tensor cores read 8-row x 16-byte core matrices: described as ldmatrix.x4 phases"
    return [
        {
            "name": "Q_wgmma",
            "buffer": "Qs",
            "op": "ldmatrix",
            "matrices": 4,
            "role": "inner",
            "warps": CONSUMER_WARPS,
            "row": "(kk // 4) * BM + ((warp - 4) // 4) * 64 + (warp % 4) * 16 + lane % 16",
            "col": "(kk % 4) * 16 + (lane // 16) * 8",
            "over": {"kk": [0, "HD // 16"]},
            "note": f"S = Q K^T, A operand (K-major 128B descriptor, the consumer's 64 rows), k16 step kk; {core}",
        },
        {
            "name": "K_wgmma",
            "buffer": "Ks",
            "op": "ldmatrix",
            "matrices": 4,
            "role": "inner",
            "warps": CONSUMER_WARPS,
            "row": "(kk // 4) * BN + (warp % 4) * (BN // 4) + nj * 16 + lane % 16",
            "col": "(kk % 4) * 16 + (lane // 16) * 8",
            "over": {"nj": [0, "BN // 64"], "kk": [0, "HD // 16"]},
            "note": f"S = Q K^T, B operand (K-major; every consumer warpgroup reads all BN rows); {core}",
        },
        {
            "name": "V_wgmma",
            "buffer": "Vs",
            "op": "ldmatrix",
            "matrices": 4,
            "trans": True,
            "role": "inner",
            "warps": CONSUMER_WARPS,
            "row": "(nj // 4) * BN + (warp % 4) * (BN // 4) + kk * 16 + lane % 16",
            "col": "(nj % 4) * 16 + (lane // 16) * 8",
            "over": {"kk": [0, "BN // 64"], "nj": [0, "HD // 16"]},
            "note": f"O += P V, B operand (MN-major: V is [kv][hd], read transposed), A = P from registers; {core}",
        },
    ]


def access_repeats(fam, cfg: KernelConfig) -> dict[str, float]:
    t = fam.kv_tiles(cfg)
    return {"Q_wgmma": t, "K_wgmma": t, "V_wgmma": t}


def one_block_reason(fam, cfg: KernelConfig, occ: dict) -> str:
    p = cfg.params
    return (
        f"1 block/SM by design: {smem_bytes(fam, cfg)} bytes of shared memory (the Q tile and {p['STAGES']} stages "
        f"of K and V tiles of {p['BN']} keys), 384 threads at 168 registers (setmaxnreg: 40 producer, 232 consumer)"
    )


def pipeline_items(fam, cfg: KernelConfig, ptx: str | None) -> list[Item]:
    """The Hopper pipeline, read from the compiled PTX."""
    hd = fam.problem_ints(cfg.problem)["head_dim"]
    bn = cfg.params["BN"]
    checks = (
        (
            "tma_load",
            "TMA loads (cp.async.bulk.tensor.4d) complete on an mbarrier",
            r"cp\.async\.bulk\.tensor\.4d\.shared::cluster\.global\.mbarrier::complete_tx::bytes",
        ),
        (
            "wgmma_qk",
            f"S = Q K^T: wgmma.mma_async m64n{bn}k16",
            rf"wgmma\.mma_async\.sync\.aligned\.m64n{bn}k16",
        ),
        (
            "wgmma_pv",
            f"O += P V: wgmma.mma_async m64n{hd}k16",
            rf"wgmma\.mma_async\.sync\.aligned\.m64n{hd}k16",
        ),
        (
            "parity_wait",
            "consumers and producer wait by mbarrier phase parity",
            r"mbarrier\.try_wait\.parity",
        ),
        ("expect_tx", "each full barrier is armed with its byte count", r"mbarrier\.arrive\.expect_tx"),
        ("setmaxnreg", "registers move from the producer to the consumers", r"setmaxnreg\.inc"),
    )
    items = []
    for ident, text, pattern in checks:
        if ptx is None:
            items.append(Item(ident, text, NA, "not compiled (no PTX to read)"))
            continue
        n = len(re.findall(pattern, ptx))
        items.append(Item(ident, text, PASS if n else FAIL, f"{n} instruction(s) in the PTX"))
    return items


# ---- the tile model's part (tiles.py ranks these on sm_90a) ---------------------------------------------------------
# Calibrated on the H200 (flash_attn_h200.json, fitted by flash_attn/fit.py on bench/results/session11/
# flash_attn_sweep_h200_run3.json): per configuration (head_dim, BN, STAGES, OVERLAP, PERSISTENT) the KV loop's rate
# (TFLOP/s of the S and P V wgmmas while an SM runs one CTA) and per grid kind the cost of a work item outside its
# KV loop (Q load, first K tile, epilogue), both fitted to the measured times through :func:`schedule_time`.
# Without the calibration (another GPU): the rate below, scaled by the GPU table's bf16 peak.
DATA_FILE = "flash_attn_h200.json"
RATE_GUESS = 0.95  # KV-loop rate / the GPU table's bf16 rate (the standalone kernel's OVERLAP 1, session 10)
ITEM_GUESS_S = 1.5e-6
PERSISTENT_KEYS = ((128, 2, 1), (128, 2, 2))  # (BN, STAGES, OVERLAP) the persistent grid is ranked with


def item_lengths(q: dict, bn: int) -> list[int]:
    """KV tiles of each work item in the kernel's order (item t: head t // m_tiles, q tile m_tiles - 1 - t % m_tiles)
    for one head: with causal the longest first."""
    m_tiles = -(-q["seq_q"] // BM)
    all_kv = -(-q["seq_kv"] // bn)
    if not q["causal"]:
        return [all_kv] * m_tiles
    return [
        max(1, min(all_kv, (min(m0 + BM, q["seq_q"]) - 1) // bn + 1))
        for m0 in ((m_tiles - 1 - i) * BM for i in range(m_tiles))
    ]


def schedule_time(q: dict, bn: int, t_tile: float, item_s: float, sms: int, persistent: bool) -> float:
    """Seconds for the problem: item t costs ``n_kv(t) * t_tile + item_s``; one CTA per SM. One CTA per item: the
    hardware hands the next item to the first free SM (list scheduling in the kernel's order); persistent: CTA x
    runs items x, x + G, ... (G = min(items, sms)), the time is the busiest CTA's."""
    import heapq

    import numpy as np

    per = item_lengths(q, bn)
    bh = q["batch"] * q["heads"]
    items = len(per) * bh
    if persistent:
        g = min(items, sms)
        cost = np.tile(np.asarray(per, float) * t_tile + item_s, bh)
        return float(np.bincount(np.arange(items) % g, weights=cost, minlength=g).max())
    if not q["causal"] or items <= sms:
        return -(-items // sms) * (max(per) * t_tile + item_s)
    slots = [0.0] * sms
    for _ in range(bh):
        for n in per:
            heapq.heappush(slots, heapq.heappop(slots) + n * t_tile + item_s)
    return max(slots)


def tile_flops(hd: int, bn: int) -> float:
    return 4.0 * BM * bn * hd  # S = Q K^T and O += P V of one KV tile


@functools.lru_cache(maxsize=4)
def load_calibration(name: str = DATA_FILE) -> dict | None:
    """The calibration's JSON (read once; callers do not modify it), None when the file is absent."""
    import json
    from pathlib import Path

    path = Path(__file__).with_name(name)
    return json.loads(path.read_text()) if path.exists() else None


def cal_key(hd: int, bn: int, stages: int, overlap: int, persistent: int) -> str:
    return f"hd{hd} bn{bn} s{stages} o{overlap} p{persistent}"


def predict_time(q: dict, cand, gpu, cal: dict | None) -> tuple[float, bool]:
    """(seconds, fitted): :func:`schedule_time` at the calibration's per-SM rate and item cost for the
    configuration (the calibration's own GPU, or another GPU of the same SM, sm_90a: its own SM count, the H200's
    per-SM rates), else at RATE_GUESS x the GPU table's peak."""
    hd = q["head_dim"]
    key = cal_key(hd, cand.bn, cand.stages, cand.overlap, cand.persistent)
    if cal is not None and key in cal["rates"]:
        per_sm = cal["rates"][key] * 1e12 / cal["sms"]  # the whole GPU's rate with one CTA on every SM
        item_s = cal["item_s"][str(cand.persistent)]
        fitted = True
    else:
        per_sm = RATE_GUESS * gpu.peak(q.get("dtype", "bf16")) * 1e12 / gpu.sms
        item_s, fitted = ITEM_GUESS_S, False
    t_tile = tile_flops(hd, cand.bn) / per_sm
    return schedule_time(q, cand.bn, t_tile, item_s, gpu.sms, bool(cand.persistent)), fitted
