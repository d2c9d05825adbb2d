#!/usr/bin/env python3
"""Measure shared-memory wavefronts per instruction on a real GPU with Nsight Compute.

The catalogue is a list of warp-level access patterns (32 byte offsets, an op, a width). For each one a
one-warp microkernel issues the same shared-memory instruction ITERS times (inline PTX; the address carries
`i & zero` with a runtime zero so that the compiler can neither hoist nor merge it), and ncu reads the
wavefront and instruction counters. wavefronts / instructions is the hardware's number for that pattern.

    python -m bench.ncu_bank_catalogue --list                 # print the catalogue (no GPU needed)
    python -m bench.ncu_bank_catalogue --source out.cu        # write the CUDA program (no GPU needed)
    python -m bench.ncu_bank_catalogue --run --out DIR        # on a GPU with nvcc, ncu, cuobjdump

--run writes DIR/bank_catalogue.json (patterns + measurements), the ncu CSV and the SASS listing.
Copy the JSON to tests/data/bank_catalogue_fitted.json; tests/test_banks.py checks the model against it.
cp.async patterns carry `global`: the byte offset each lane copies from (the write side depends on it).
Measured on the H200 on 2026-11-29 (rounds 1-3 twice, identical; round 4 once).
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

ITERS = 1024
LANES = list(range(32))

# kernel kind -> (op, width, PTX body). %1 is the 32-bit shared address, %0 a value register.
KINDS = {
    "ld1": ("load", 1, "ld.shared.u8 %0, [%1];"),
    "ld2": ("load", 2, "ld.shared.u16 %0, [%1];"),
    "ld4": ("load", 4, "ld.shared.u32 %0, [%1];"),
    "ld8": ("load", 8, None),
    "ld16": ("load", 16, None),
    "st1": ("store", 1, "st.shared.u8 [%1], %0;"),
    "st2": ("store", 2, "st.shared.u16 [%1], %0;"),
    "st4": ("store", 4, "st.shared.u32 [%1], %0;"),
    "st8": ("store", 8, None),
    "st16": ("store", 16, None),
    "ldsm1": ("ldmatrix", 16, None),
    "ldsm2": ("ldmatrix", 16, None),
    "ldsm4": ("ldmatrix", 16, None),
    "ldsm4t": ("ldmatrix", 16, None),
    "ldsm2t": ("ldmatrix", 16, None),
    "cpa4": ("cp.async", 4, None),
    "cpa8": ("cp.async", 8, None),
    "cpa16": ("cp.async", 16, None),
    "cpa16ca": ("cp.async", 16, None),
}


GLOBAL_BYTES = 1 << 20


def _p(name, kind, addrs, note="", glob=None):
    op, width, _ = KINDS[kind]
    addrs = [int(a) for a in addrs]
    assert len(addrs) == 32 and all(0 <= a < 49152 for a in addrs), name
    d = {"name": name, "kind": kind, "op": op, "width": width, "addresses": addrs, "note": note}
    if op == "cp.async":  # global source offsets per lane (default 16 * lane: one 128-byte line per quarter)
        glob = [16 * i for i in LANES] if glob is None else glob
        assert len(glob) == 32 and all(0 <= g < GLOBAL_BYTES and g % width == 0 for g in glob)
        d["global"] = [int(g) for g in glob]
    else:
        assert glob is None
    if kind.startswith("ldsm"):
        d["matrices"] = int(kind[4])
        d["trans"] = kind.endswith("t")
        d["width"] = 16
    assert all(a % d["width"] == 0 for a in addrs) or op == "ldmatrix", name
    return d


def patterns() -> list[dict]:
    """The catalogue. Names are stable: tests refer to them."""
    P = []
    rng = random.Random(20261129)
    # ---- 4-byte loads and stores
    for s in (1, 2, 3, 4, 5, 7, 8, 16, 31, 32, 33, 36, 64):
        P.append(_p(f"ld4_stride{s}", "ld4", [4 * s * i for i in LANES], f"word stride {s}"))
    P.append(_p("ld4_uniform0", "ld4", [0] * 32, "every lane the same word"))
    P.append(_p("ld4_uniform400", "ld4", [400] * 32, "every lane the same word"))
    P.append(_p("ld4_pairs", "ld4", [4 * (i // 2) for i in LANES], "lanes 2k,2k+1 share a word"))
    P.append(_p("ld4_halves_same", "ld4", [4 * (i % 16) for i in LANES], "both half-warps read words 0..15"))
    P.append(_p("ld4_two_words_bank0", "ld4", [128 * (i % 2) for i in LANES], "two words of bank 0"))
    P.append(_p("ld4_bcast_mix", "ld4", [0 if i % 4 == 0 else 4 * i for i in LANES], "broadcast + distinct"))
    P.append(_p("ld4_4words_bank5", "ld4", [20 + 128 * (i % 4) for i in LANES], "4 words of bank 5"))
    P.append(_p("ld4_gemm_col_bk32", "ld4", [4 * 32 * i for i in LANES], "A[lane][k], BK=32, fp32"))
    P.append(_p("ld4_gemm_col_bk32_pad1", "ld4", [4 * 33 * i + 8 for i in LANES], "A[lane][2], BK=32+1"))
    P.append(_p("ld4_transpose_col", "ld4", [4 * 32 * i + 12 for i in LANES], "tile[lane][3], 32x32 fp32"))
    for k in range(3):
        P.append(_p(f"ld4_random{k}", "ld4", [4 * rng.randrange(4096) for _ in LANES], "random words"))
    for s in (1, 2, 32, 33):
        P.append(_p(f"st4_stride{s}", "st4", [4 * s * i for i in LANES], f"word stride {s}"))
    P.append(_p("st4_uniform", "st4", [64] * 32, "every lane the same word"))
    P.append(_p("st4_pairs", "st4", [4 * (i // 2) for i in LANES], "lanes 2k,2k+1 write the same word"))
    P.append(_p("st4_random0", "st4", [4 * rng.randrange(4096) for _ in LANES], "random words"))
    # ---- 1- and 2-byte
    P.append(_p("ld1_consecutive", "ld1", LANES, "bytes 0..31"))
    P.append(_p("ld1_stride4", "ld1", [4 * i for i in LANES], "one byte per word"))
    P.append(_p("ld1_stride128", "ld1", [128 * i for i in LANES], "32 words of bank 0"))
    P.append(_p("ld1_uniform", "ld1", [7] * 32, "same byte"))
    P.append(_p("ld1_random0", "ld1", [rng.randrange(16384) for _ in LANES], "random bytes"))
    P.append(_p("ld2_consecutive", "ld2", [2 * i for i in LANES], "fp16 row: 64 bytes"))
    P.append(_p("ld2_stride2", "ld2", [4 * i for i in LANES], "every other half"))
    P.append(_p("ld2_col_row64", "ld2", [64 * i for i in LANES], "fp16 column, 32 halves per row"))
    P.append(_p("ld2_col_row66", "ld2", [66 * i for i in LANES], "fp16 column, 32+1 halves per row"))
    P.append(_p("ld2_col_row128", "ld2", [128 * i for i in LANES], "fp16 column, 64 halves per row"))
    P.append(_p("ld2_col_row130", "ld2", [130 * i for i in LANES], "fp16 column, 64+1 halves per row"))
    P.append(_p("ld2_uniform", "ld2", [6] * 32, "same half"))
    P.append(_p("ld2_random0", "ld2", [2 * rng.randrange(8192) for _ in LANES], "random halves"))
    P.append(_p("st1_consecutive", "st1", LANES, "bytes 0..31"))
    P.append(_p("st2_consecutive", "st2", [2 * i for i in LANES], "halves 0..31"))
    P.append(_p("st2_col_row64", "st2", [64 * i for i in LANES], "fp16 column store"))
    # ---- 8-byte
    P.append(_p("ld8_consecutive", "ld8", [8 * i for i in LANES], "256 contiguous bytes"))
    P.append(_p("ld8_stride16", "ld8", [16 * i for i in LANES], "every other 8 bytes"))
    P.append(_p("ld8_stride32", "ld8", [32 * i for i in LANES], ""))
    P.append(_p("ld8_stride256", "ld8", [256 * i for i in LANES], "all in banks 0-1"))
    P.append(_p("ld8_stride264", "ld8", [264 * i for i in LANES], "padded rows of 256+8 bytes"))
    P.append(_p("ld8_uniform", "ld8", [0] * 32, "every lane the same 8 bytes"))
    P.append(_p("ld8_halves_same", "ld8", [8 * (i % 16) for i in LANES], "both half-warps read bytes 0..127"))
    P.append(_p("ld8_pairs", "ld8", [8 * (i // 2) for i in LANES], "lanes 2k,2k+1 share 8 bytes"))
    P.append(
        _p(
            "ld8_even_odd_split",
            "ld8",
            [8 * (i // 2) + 128 * (i % 2) for i in LANES],
            "even lanes 0..127, odd lanes 128..255: conflicts inside each half-warp only",
        )
    )
    P.append(_p("ld8_half_swap", "ld8", [8 * ((i + 16) % 32) for i in LANES], "lane i reads 8*(i+16 mod 32)"))
    P.append(_p("ld8_quarter_bcast", "ld8", [8 * (i % 8) for i in LANES], "4 groups read the same 64 bytes"))
    P.append(_p("ld8_random0", "ld8", [8 * rng.randrange(2048) for _ in LANES], "random"))
    P.append(_p("ld8_random1", "ld8", [8 * rng.randrange(64) for _ in LANES], "random in 512 bytes"))
    P.append(_p("st8_consecutive", "st8", [8 * i for i in LANES], ""))
    P.append(_p("st8_stride16", "st8", [16 * i for i in LANES], ""))
    P.append(
        _p("st8_halves_same", "st8", [8 * (i % 16) for i in LANES], "both half-warps write bytes 0..127")
    )
    P.append(_p("st8_uniform", "st8", [0] * 32, "every lane the same 8 bytes"))
    # ---- 16-byte
    P.append(_p("ld16_consecutive", "ld16", [16 * i for i in LANES], "512 contiguous bytes"))
    P.append(_p("ld16_stride32", "ld16", [32 * i for i in LANES], ""))
    P.append(_p("ld16_stride128", "ld16", [128 * i for i in LANES], "all in banks 0-3"))
    P.append(_p("ld16_stride144", "ld16", [144 * i for i in LANES], "padded rows of 128+16 bytes"))
    P.append(_p("ld16_uniform", "ld16", [0] * 32, "every lane the same 16 bytes"))
    P.append(
        _p("ld16_quarters_same", "ld16", [16 * (i % 8) for i in LANES], "all quarter-warps read bytes 0..127")
    )
    P.append(
        _p(
            "ld16_quarter_pairs_same",
            "ld16",
            [16 * (i % 8) + 128 * (i // 16) for i in LANES],
            "quarters 0,1 read 0..127, quarters 2,3 read 128..255",
        )
    )
    P.append(
        _p("ld16_halves_same", "ld16", [16 * (i % 16) for i in LANES], "both half-warps read bytes 0..255")
    )
    P.append(_p("ld16_quad_bcast", "ld16", [16 * (i // 4) for i in LANES], "lanes 4k..4k+3 share 16 bytes"))
    P.append(
        _p(
            "ld16_transposed_quarters",
            "ld16",
            [16 * ((i % 4) * 8 + i // 4) for i in LANES],
            "each quarter hits 4 rows of 128 bytes: conflicts inside quarters, none across the warp",
        )
    )
    P.append(
        _p(
            "ld16_quarter_rotate",
            "ld16",
            [16 * ((i + 8) % 32) for i in LANES],
            "lane i reads 16*(i+8 mod 32)",
        )
    )
    P.append(
        _p(
            "ld16_sgemm_bcast_a",
            "ld16",
            [16 * ((i // 16) * 2) for i in LANES],
            "float4 of A^T: two addresses per warp (warp tile 2x16)",
        )
    )
    P.append(_p("ld16_sgemm_b", "ld16", [16 * (i % 16) for i in LANES], "float4 of B row: 16 distinct"))
    P.append(_p("ld16_random0", "ld16", [16 * rng.randrange(1024) for _ in LANES], "random"))
    P.append(_p("ld16_random1", "ld16", [16 * rng.randrange(32) for _ in LANES], "random in 512 bytes"))
    P.append(_p("st16_consecutive", "st16", [16 * i for i in LANES], ""))
    P.append(_p("st16_stride128", "st16", [128 * i for i in LANES], "all in banks 0-3"))
    P.append(
        _p(
            "st16_quarters_same",
            "st16",
            [16 * (i % 8) for i in LANES],
            "all quarter-warps write bytes 0..127",
        )
    )
    P.append(_p("st16_transposed_quarters", "st16", [16 * ((i % 4) * 8 + i // 4) for i in LANES], ""))

    # ---- ldmatrix: lane i supplies row (i % 8) of matrix (i // 8)
    def ldsm(row_bytes, swz=False, col_off=16):
        out = []
        for i in LANES:
            r, m = i % 8, i // 8
            chunk = m * (col_off // 16)
            if swz:
                chunk ^= r
            out.append(r * row_bytes + 16 * chunk)
        return out

    for x in (1, 2, 4):
        P.append(_p(f"ldsm_x{x}_row16", f"ldsm{x}", [16 * i for i in LANES], "contiguous 8x8 matrices"))
        P.append(_p(f"ldsm_x{x}_row128", f"ldsm{x}", ldsm(128), "fp16 tile with 64 halves per row"))
    P.append(_p("ldsm_x4_row144", "ldsm4", ldsm(144), "64 + 8 halves per row (padded)"))
    P.append(_p("ldsm_x4_row64", "ldsm4", ldsm(64), "32 halves per row"))
    P.append(_p("ldsm_x4_row32", "ldsm4", ldsm(32), "16 halves per row"))
    P.append(_p("ldsm_x4_row80", "ldsm4", ldsm(80), "32 + 8 halves per row (padded)"))
    P.append(_p("ldsm_x4_row128_swizzle", "ldsm4", ldsm(128, swz=True), "Swizzle<3,4,3> on bytes"))
    P.append(_p("ldsm_x4t_row128", "ldsm4t", ldsm(128), "transposed, 64 halves per row"))
    P.append(_p("ldsm_x4t_row128_swizzle", "ldsm4t", ldsm(128, swz=True), "transposed, swizzled"))
    P.append(_p("ldsm_x2t_row64", "ldsm2t", ldsm(64), "transposed, 32 halves per row"))
    P.append(_p("ldsm_x4_same_matrix", "ldsm4", [16 * (i % 8) for i in LANES], "four copies of one matrix"))
    P.append(
        _p(
            "ldsm_x1_ignored_lanes",
            "ldsm1",
            [16 * i if i < 8 else 128 * i for i in LANES],
            "lanes 8..31 supply conflicting addresses that x1 must ignore",
        )
    )
    P.append(
        _p(
            "ldsm_x2_ignored_lanes",
            "ldsm2",
            [16 * i if i < 16 else 128 * (i - 16) for i in LANES],
            "lanes 16..31 supply conflicting addresses that x2 must ignore",
        )
    )
    P.append(_p("ldsm_x4_random", "ldsm4", [16 * rng.randrange(2048) for _ in LANES], "random rows"))
    # ---- cp.async shared-memory write side
    P.append(_p("cpa4_consecutive", "cpa4", [4 * i for i in LANES], ""))
    P.append(_p("cpa4_stride32", "cpa4", [128 * i for i in LANES], "32 words of bank 0"))
    P.append(_p("cpa8_consecutive", "cpa8", [8 * i for i in LANES], ""))
    P.append(_p("cpa8_stride256", "cpa8", [256 * i for i in LANES], ""))
    P.append(_p("cpa16_consecutive", "cpa16", [16 * i for i in LANES], ""))
    P.append(_p("cpa16_stride128", "cpa16", [128 * i for i in LANES], "all in banks 0-3"))
    P.append(_p("cpa16_stride144", "cpa16", [144 * i for i in LANES], "padded rows"))
    P.append(_p("cpa16_transposed_quarters", "cpa16", [16 * ((i % 4) * 8 + i // 4) for i in LANES], ""))
    P.append(_p("cpa16_swizzle", "cpa16", [128 * (i // 8) + 16 * ((i % 8) ^ (i // 8)) for i in LANES], ""))

    # ---- second round: partial lane-pair sharing, pair-shared random addresses, stores, cp.async.ca 16
    def paired(vals):
        return [vals[i // 2] for i in LANES]

    P.append(
        _p(
            "ld8_pairs_half0_only",
            "ld8",
            [8 * (i // 2) if i < 16 else 8 * i + 256 for i in LANES],
            "pairs share in lanes 0-15 only",
        )
    )
    P.append(
        _p(
            "ld8_pairs_all_but_one",
            "ld8",
            [8 * (i // 2) if i != 31 else 8 * 40 for i in LANES],
            "every pair shares except (30, 31)",
        )
    )
    P.append(
        _p(
            "ld8_pairs_conflict",
            "ld8",
            paired([256 * k for k in range(16)]),
            "pairs share, 16 words of bank 0",
        )
    )
    for k in range(2):
        P.append(
            _p(
                f"ld8_pairs_random{k}",
                "ld8",
                paired([8 * rng.randrange(256) for _ in range(16)]),
                "random addresses shared by lane pairs",
            )
        )
    P.append(
        _p("ld16_pairs_conflict", "ld16", paired([128 * k for k in range(16)]), "pairs share, banks 0-3")
    )
    P.append(
        _p(
            "ld16_pairs_half0_only",
            "ld16",
            [16 * (i // 2) if i < 16 else 16 * i + 512 for i in LANES],
            "pairs share in lanes 0-15 only",
        )
    )
    P.append(
        _p(
            "ld16_pairs_quarter0_only",
            "ld16",
            [16 * (i // 2) if i < 8 else 16 * i for i in LANES],
            "pairs share in lanes 0-7 only",
        )
    )
    for k in range(3):
        P.append(
            _p(
                f"ld16_pairs_random{k}",
                "ld16",
                paired([16 * rng.randrange(128) for _ in range(16)]),
                "random addresses shared by lane pairs",
            )
        )
    P.append(
        _p("ld16_even_odd_pairs", "ld16", [16 * (i % 2) for i in LANES], "two addresses: even and odd lanes")
    )
    P.append(_p("ld4_random3", "ld4", [4 * rng.randrange(256) for _ in LANES], "random words in 1 KB"))
    P.append(_p("ld2_random1", "ld2", [2 * rng.randrange(256) for _ in LANES], "random halves in 512 B"))
    P.append(_p("st16_uniform", "st16", [0] * 32, "every lane the same 16 bytes"))
    P.append(
        _p("st16_pairs", "st16", paired([16 * k for k in range(16)]), "lane pairs write the same 16 bytes")
    )
    P.append(_p("st8_pairs", "st8", paired([8 * k for k in range(16)]), "lane pairs write the same 8 bytes"))
    P.append(_p("st8_random0", "st8", [8 * rng.randrange(512) for _ in LANES], "random"))
    P.append(_p("st16_random0", "st16", [16 * rng.randrange(256) for _ in LANES], "random"))
    P.append(_p("cpa4_random0", "cpa4", [4 * rng.randrange(512) for _ in LANES], "random words"))
    P.append(_p("cpa8_stride16", "cpa8", [16 * i for i in LANES], ""))
    P.append(_p("cpa16ca_consecutive", "cpa16ca", [16 * i for i in LANES], "cp.async.ca, 16 bytes"))
    P.append(_p("cpa16ca_stride128", "cpa16ca", [128 * i for i in LANES], "cp.async.ca, banks 0-3"))
    P.append(_p("cpa16ca_stride144", "cpa16ca", [144 * i for i in LANES], "cp.async.ca, padded rows"))
    P.append(_p("cpa16ca_transposed_quarters", "cpa16ca", [16 * ((i % 4) * 8 + i // 4) for i in LANES], ""))
    P.append(
        _p("cpa16ca_swizzle", "cpa16ca", [128 * (i // 8) + 16 * ((i % 8) ^ (i // 8)) for i in LANES], "")
    )
    P.append(_p("cpa16ca_random0", "cpa16ca", [16 * rng.randrange(256) for _ in LANES], "random"))
    # ---- third round: does the cp.async write side depend on where the
    # global data comes from? The sgemm A copy (each quarter-warp copies 8 consecutive k of one row m, one
    # 32-byte sector per quarter) measured 11 wavefronts in verify --ncu where quarter phases predict 32.
    a_copy = [(k * 128 + q) * 4 for q in range(4) for k in range(8)]
    a_glob = [q * 16384 + 4 * k for q in range(4) for k in range(8)]
    P.append(_p("r3_cpa4_sgemm_a_copy", "cpa4", a_copy, "sgemm A copy, global rows as in the kernel", a_glob))
    P.append(_p("r3_cpa4_sgemm_a_copy_line_global", "cpa4", a_copy, "same shared side, global 16*lane"))
    P.append(
        _p(
            "r3_cpa4_sgemm_a_copy_contig_global",
            "cpa4",
            a_copy,
            "same shared side, global 4*lane",
            [4 * i for i in LANES],
        )
    )
    P.append(
        _p(
            "r3_cpa4_sgemm_a_copy_pad4",
            "cpa4",
            [(k * 132 + q) * 4 for q in range(4) for k in range(8)],
            "padded As rows, global rows as in the kernel",
            a_glob,
        )
    )
    P.append(
        _p(
            "r3_cpa4_quarters_disjoint_2way",
            "cpa4",
            [4 * (8 * (i // 8) + (i % 4)) + 128 * ((i % 8) // 4) for i in LANES],
            "each quarter: 4 banks of its own, 2 words each",
        )
    )
    P.append(
        _p(
            "r3_cpa4_random0_contig_global",
            "cpa4",
            P[[x["name"] for x in P].index("cpa4_random0")]["addresses"],
            "cpa4_random0's shared side, global 4*lane",
            [4 * i for i in LANES],
        )
    )
    tq = [16 * ((i % 4) * 8 + i // 4) for i in LANES]
    P.append(
        _p(
            "r3_cpa16ca_transposed_quarters_row_global",
            "cpa16ca",
            tq,
            "global: every lane its own line",
            [128 * i for i in LANES],
        )
    )
    P.append(
        _p(
            "r3_cpa16_transposed_quarters_row_global",
            "cpa16",
            tq,
            ".cg, every lane its own line",
            [128 * i for i in LANES],
        )
    )
    P.append(
        _p(
            "r3_cpa16ca_quarters_disjoint_2way",
            "cpa16ca",
            [16 * (2 * (i // 8) + (i % 2)) + 128 * ((i % 8) // 2) for i in LANES],
            "each quarter: 8 banks of its own, 4 words each",
        )
    )
    P.append(
        _p(
            "r3_cpa8_consecutive_contig_global",
            "cpa8",
            [8 * i for i in LANES],
            "global 8*lane",
            [8 * i for i in LANES],
        )
    )

    # quarter-overlap probes for the 4- and 8-byte write side: quarter q writes `depth` words into one bank of
    # its own (or a shared bank), the rest conflict-free; global source one line per quarter (the default)
    def quarter_banks(depth_of):
        # quarter q owns banks 8q..8q+7: lanes j < depth stack words in bank 8q, the rest one word each in 8q+1...
        return [
            4 * (8 * q) + 128 * j if j < depth_of(q) else 4 * (8 * q + j - max(depth_of(q) - 1, 0)) + 128 * 16
            for q in range(4)
            for j in range(8)
        ]

    for depth in (2, 4):
        P.append(
            _p(
                f"r3_cpa4_quarter_bank_depth{depth}",
                "cpa4",
                quarter_banks(lambda q, d=depth: d),
                f"quarter q: {depth} words in bank 8q",
            )
        )
    P.append(
        _p(
            "r3_cpa4_quarter_bank_depth8_same",
            "cpa4",
            [128 * (8 * q + j) for q in range(4) for j in range(8)],
            "every quarter: 8 words of bank 0",
        )
    )
    P.append(
        _p(
            "r3_cpa4_quarter_bank_depth8_pairs",
            "cpa4",
            [4 * (q // 2) + 128 * (8 * (q % 2) + j) for q in range(4) for j in range(8)],
            "quarters 0,1: bank 0; quarters 2,3: bank 1; 8 words each",
        )
    )
    P.append(
        _p(
            "r3_cpa4_q0_only_8way",
            "cpa4",
            quarter_banks(lambda q: 8 if q == 0 else 0),
            "quarter 0: 8 words of bank 0; the others conflict-free",
        )
    )
    P.append(
        _p(
            "r3_cpa4_q3_only_8way",
            "cpa4",
            quarter_banks(lambda q: 8 if q == 3 else 0),
            "quarter 3: 8 words of bank 24; the others conflict-free",
        )
    )
    P.append(
        _p(
            "r3_cpa4_q01_8way",
            "cpa4",
            quarter_banks(lambda q: 8 if q < 2 else 0),
            "quarters 0 and 1: 8 words of banks 0, 8; the others conflict-free",
        )
    )
    P.append(
        _p(
            "r3_cpa4_quarter_bank_depth8_contig_global",
            "cpa4",
            quarter_banks(lambda q: 8),
            "quarter q: 8 words in bank 8q, global 4*lane",
            [4 * i for i in LANES],
        )
    )
    P.append(
        _p(
            "r3_cpa8_quarter_bank_depth8",
            "cpa8",
            [32 * (i // 8) + 128 * (i % 8) for i in LANES],
            "quarter q: 8 doublewords in banks 8q, 8q+1",
        )
    )
    P.append(
        _p(
            "r3_cpa8_quarter_pairs_4way",
            "cpa8",
            [32 * (i // 8) + 8 * (i % 2) + 128 * ((i % 8) // 2) for i in LANES],
            "quarter q: banks 8q..8q+3, 4 doublewords each",
        )
    )
    P.append(
        _p(
            "r3_cpa16ca_quarter_bank_depth8",
            "cpa16ca",
            [16 * q + 128 * j for q in range(4) for j in range(8)],
            "quarter q: 8 x 16 bytes in banks 4q..4q+3",
        )
    )
    # ---- fourth round: out-of-sample check of the cp.async schedule model (smemtile/model/banks.py), whose
    # predictions were recorded in bench/results/cp_async_round4_predictions.json before this round ran
    r4 = random.Random(4)
    for k in range(4):
        P.append(
            _p(
                f"r4_cpa4_random_lines{k}",
                "cpa4",
                [4 * r4.randrange(1024) for _ in LANES],
                "random words, sources in random lines",
                [4 * r4.randrange(4096) for _ in LANES],
            )
        )
    for k in range(3):
        P.append(
            _p(
                f"r4_cpa4_random_two_lines{k}",
                "cpa4",
                [4 * r4.randrange(1024) for _ in LANES],
                "random words, lanes split at random between two lines",
                [128 * r4.randrange(2) + 4 * r4.randrange(32) for _ in LANES],
            )
        )
    for k in range(3):
        P.append(
            _p(
                f"r4_cpa4_sector_rows{k}",
                "cpa4",
                [4 * ((j % 8) * (32 + 4 * k) + q) for q in range(4) for j in range(8)],
                f"transposing copy, row pitch {32 + 4 * k} words, each quarter its own line",
                [q * 4096 + 4 * j for q in range(4) for j in range(8)],
            )
        )
    P.append(
        _p(
            "r4_cpa4_interleaved_lines",
            "cpa4",
            [128 * (i % 8) + 4 * (i // 8) for i in LANES],
            "even and odd lanes from two lines",
            [128 * (i % 2) + 4 * (i // 2) for i in LANES],
        )
    )
    P.append(
        _p(
            "r4_cpa4_pairs_of_quarters",
            "cpa4",
            [(k * 128 + q) * 4 for q in range(4) for k in range(8)],
            "sgemm A copy shared side, quarters 0-1 and 2-3 each share a line",
            [(q // 2) * 16384 + 32 * (q % 2) + 4 * k for q in range(4) for k in range(8)],
        )
    )
    for k in range(3):
        P.append(
            _p(
                f"r4_cpa8_random_lines{k}",
                "cpa8",
                [8 * r4.randrange(512) for _ in LANES],
                "random doublewords, random lines",
                [8 * r4.randrange(2048) for _ in LANES],
            )
        )
    P.append(
        _p(
            "r4_cpa8_contig_conflict",
            "cpa8",
            [256 * (i % 16) + 8 * (i // 16) for i in LANES],
            "two 128-byte lines of sources, shared side 16-deep in banks 0-3",
            [8 * i for i in LANES],
        )
    )
    for k in range(3):
        P.append(
            _p(
                f"r4_cpa16ca_random_lines{k}",
                "cpa16ca",
                [16 * r4.randrange(256) for _ in LANES],
                "random 16-byte chunks, random lines",
                [16 * r4.randrange(1024) for _ in LANES],
            )
        )
    P.append(
        _p(
            "r4_cpa16ca_half_lines",
            "cpa16ca",
            [16 * ((i % 4) * 8 + i // 4) for i in LANES],
            "transposed quarters, each line feeds 4 lanes",
            [64 * (i // 4) * 2 + 16 * (i % 4) for i in LANES],
        )
    )
    names = [p["name"] for p in P]
    assert len(names) == len(set(names))
    return P


def _body(kind: str) -> str:
    op, width, ptx = KINDS[kind]
    if kind.startswith("ld") and not kind.startswith("ldsm"):
        if width == 8:
            return 'asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];" : "=r"(v0), "=r"(v1) : "r"(a));'
        if width == 16:
            return 'asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v0), "=r"(v1), "=r"(v2), "=r"(v3) : "r"(a));'
        return f'asm volatile("{ptx}" : "=r"(v0) : "r"(a));'
    if kind.startswith("st"):
        if width == 8:
            return 'asm volatile("st.shared.v2.u32 [%0], {%1,%2};" :: "r"(a), "r"(i), "r"(acc));'
        if width == 16:
            return 'asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};" :: "r"(a), "r"(i), "r"(acc), "r"(i), "r"(acc));'
        if width == 1:
            return 'asm volatile("st.shared.u8 [%0], %1;" :: "r"(a), "r"(i));'
        if width == 2:
            return 'asm volatile("st.shared.u16 [%0], %1;" :: "r"(a), "h"((unsigned short)i));'
        return 'asm volatile("st.shared.u32 [%0], %1;" :: "r"(a), "r"(i));'
    if kind.startswith("ldsm"):
        x = int(kind[4])
        t = ".trans" if kind.endswith("t") else ""
        regs = ",".join(f"%{j}" for j in range(x))
        outs = ", ".join(f'"=r"(v{j})' for j in range(x))
        return f'asm volatile("ldmatrix.sync.aligned.m8n8.x{x}{t}.shared.b16 {{{regs}}}, [%{x}];" : {outs} : "r"(a));'
    if kind.startswith("cpa"):
        cache = "cg" if kind == "cpa16" else "ca"
        return (
            f'asm volatile("cp.async.{cache}.shared.global [%0], [%1], {width};" :: "r"(a), "l"(g));\n'
            '      asm volatile("cp.async.commit_group;");\n'
            '      asm volatile("cp.async.wait_group 4;" ::: "memory");'
        )
    raise ValueError(kind)


def source(pats: list[dict]) -> str:
    kinds = sorted({p["kind"] for p in pats}, key=list(KINDS).index)
    out = [
        "// Generated by bench/ncu_bank_catalogue.py: one-warp shared-memory microkernels.",
        "#include <cstdio>",
        "#include <cstdlib>",
        "#include <cuda_runtime.h>",
        f"#define ITERS {ITERS}",
        f"#define GLOBAL_BYTES {GLOBAL_BYTES}",
        '#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA %s at %d\\n", cudaGetErrorString(e_), __LINE__); exit(1);} } while (0)',
    ]
    for k in kinds:
        out.append(f"""
__global__ void __launch_bounds__(32) k_{k}(const unsigned* addrs, unsigned zero, unsigned* out, const char* gsrc,
                                             const unsigned* gaddrs) {{
  __shared__ __align__(1024) unsigned char smem[49152];
  unsigned lane = threadIdx.x;
  unsigned base = (unsigned)__cvta_generic_to_shared(smem) + addrs[lane];
  const char* g = gsrc + gaddrs[lane];
  unsigned acc = 0, v0 = 0, v1 = 0, v2 = 0, v3 = 0;
  if (zero == 12345u) out[lane] = (unsigned)(size_t)g;  // keeps g alive for cp.async kinds
#pragma unroll 1
  for (unsigned i = 0; i < ITERS; ++i) {{
      unsigned a = base + (i & zero);
      {_body(k)}
      acc ^= v0 + v1 + v2 + v3 + i;
  }}
  asm volatile("cp.async.wait_all;" ::: "memory");
  out[lane] = acc;
}}""")
    out.append("struct Pat { int kind; unsigned addr[32]; unsigned gaddr[32]; };")
    out.append("static const Pat PATS[] = {")
    for p in pats:
        glob = p.get("global", [16 * i for i in LANES])  # loads, stores, ldmatrix: unused
        out.append(
            f"  {{{kinds.index(p['kind'])}, {{{', '.join(map(str, p['addresses']))}}}, "
            f"{{{', '.join(map(str, glob))}}}}}, // {p['name']}"
        )
    out.append("};")
    launches = "\n".join(
        f"      case {i}: k_{k}<<<1, 32>>>(d_addr, zero, d_out, d_g, d_gaddr); break;"
        for i, k in enumerate(kinds)
    )
    out.append(f"""
int main(int argc, char** argv) {{
  unsigned zero = argc > 5 ? 1u : 0u;  // always 0 in practice; the compiler cannot know
  unsigned *d_addr, *d_out, *d_gaddr; char* d_g;
  CK(cudaMalloc(&d_gaddr, 32 * sizeof(unsigned)));
  CK(cudaMalloc(&d_addr, 32 * sizeof(unsigned)));
  CK(cudaMalloc(&d_out, 32 * sizeof(unsigned)));
  CK(cudaMalloc(&d_g, GLOBAL_BYTES));
  CK(cudaMemset(d_g, 1, GLOBAL_BYTES));
  int n = sizeof(PATS) / sizeof(PATS[0]);
  for (int p = 0; p < n; ++p) {{
    CK(cudaMemcpy(d_addr, PATS[p].addr, sizeof(PATS[p].addr), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_gaddr, PATS[p].gaddr, sizeof(PATS[p].gaddr), cudaMemcpyHostToDevice));
    switch (PATS[p].kind) {{
{launches}
    }}
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
  }}
  printf("ran %d patterns\\n", n);
  return 0;
}}""")
    return "\n".join(out) + "\n"


WANT = re.compile(
    r"^(l1tex__data_pipe_lsu_wavefronts_mem_shared\w*|l1tex__data_bank_conflicts_pipe_lsu_mem_shared\w*"
    r"|smsp__inst_executed_op_(shared|ldsm|ldgsts)\w*|smsp__sass_inst_executed_op_(shared|ldsm|ldgsts)\w*"
    r"|l1tex__data_bank_(reads|writes)\w*)$"
)


def _metrics() -> list[str]:
    txt = subprocess.run(["ncu", "--query-metrics", "--chip", "gh100"], capture_output=True, text=True).stdout
    names = sorted({ln.split()[0] for ln in txt.splitlines() if ln.strip() and WANT.match(ln.split()[0])})
    base = [
        "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld",
        "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st",
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld",
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st",
        "smsp__inst_executed_op_shared_ld",
        "smsp__inst_executed_op_shared_st",
        "smsp__inst_executed_op_ldsm",
    ]
    return [n + ".sum" for n in (names or base)]


def _sass(binary: Path, out: Path) -> dict[str, list[str]]:
    txt = subprocess.run(["cuobjdump", "--dump-sass", str(binary)], capture_output=True, text=True).stdout
    out.write_text(txt)
    res: dict[str, list[str]] = {}
    cur = None
    for ln in txt.splitlines():
        m = re.search(r"Function : (\S+)", ln)
        if m:
            cur = m.group(1)
            res[cur] = []
            continue
        m = re.search(r"\b(LDS(\.\w+)*|STS(\.\w+)*|LDSM(\.\w+)*|LDGSTS(\.\w+)*)\b", ln)
        if cur and m:
            res[cur].append(m.group(1))
    return res


def run(out_dir: Path) -> None:
    pats = patterns()
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(os.environ.get("TMPDIR", "/tmp")) / "smemtile_catalogue"
    work.mkdir(parents=True, exist_ok=True)
    cu = work / "catalogue.cu"
    cu.write_text(source(pats))
    exe = work / "catalogue"
    subprocess.run(["nvcc", "-O3", "-arch=sm_90", "-o", str(exe), str(cu)], check=True)
    plain = subprocess.run([str(exe)], capture_output=True, text=True)
    if plain.returncode != 0:
        sys.exit(f"microkernels failed without ncu: {plain.stdout} {plain.stderr}")
    sass = _sass(exe, out_dir / "catalogue.sass")
    metrics = _metrics()
    (out_dir / "metrics.txt").write_text("\n".join(metrics))
    csv_path = out_dir / "ncu.csv"
    cmd = [
        "ncu",
        "--clock-control",
        "none",
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
        "--metrics",
        ",".join(metrics),
        str(exe),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True)
    csv_path.write_text(res.stdout)
    (out_dir / "ncu.stderr").write_text(res.stderr)
    rows = [r for r in csv.DictReader(io.StringIO(res.stdout[res.stdout.find('"ID"') :]))]
    rows = [r for r in rows if r.get("Kernel Name", "").startswith("k_")]
    if len(rows) != len(pats):
        sys.exit(f"expected {len(pats)} profiled launches, got {len(rows)}; see {csv_path}")

    def num(r, k):
        v = r.get(k, "")
        try:
            return float(v.replace(",", ""))
        except ValueError:
            return None

    for p, r in zip(pats, rows, strict=True):
        meas = {k: num(r, k) for k in metrics if num(r, k) is not None}
        op = p["op"]
        inst_key = {
            "load": "smsp__inst_executed_op_shared_ld.sum",
            "store": "smsp__inst_executed_op_shared_st.sum",
            "ldmatrix": "smsp__inst_executed_op_ldsm.sum",
            "cp.async": "smsp__inst_executed_op_ldgsts.sum",
        }[op]
        inst = meas.get(inst_key)
        wf_key = (
            "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"
            if op == "store"
            else "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"
        )
        if op == "cp.async":
            # ncu has no per-op wavefront counter for LDGSTS: all shared wavefronts minus the misc ones
            # (the wait_group instructions); the .cg (bypass) 16-byte path is not counted at all.
            tot, misc = (
                meas.get("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum"),
                meas.get("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_misc.sum", 0.0),
            )
            meas["ldgsts_wavefronts"] = tot - misc if tot is not None else None
            wf_key = "ldgsts_wavefronts"
        p["measured"] = {
            "instructions": inst,
            "wavefronts_total": meas.get(wf_key),
            "wavefronts_per_instruction": (meas.get(wf_key) / inst)
            if inst and meas.get(wf_key) is not None
            else None,
            "sass": sorted({op for k, v in sass.items() if re.match(rf"_Z\d+k_{p['kind']}P", k) for op in v}),
            "counters": meas,
        }
    doc = {
        "about": "Shared-memory wavefronts per instruction measured with Nsight Compute, one warp, "
        f"{ITERS} identical instructions per pattern. Produced by bench/ncu_bank_catalogue.py --run.",
        "date": _dt.date.today().isoformat(),
        "gpu": subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        ).stdout.strip(),
        "ncu": subprocess.run(["ncu", "--version"], capture_output=True, text=True)
        .stdout.strip()
        .splitlines()[-1],
        "nvcc": subprocess.run(["nvcc", "--version"], capture_output=True, text=True)
        .stdout.strip()
        .splitlines()[-1],
        "iterations": ITERS,
        "patterns": pats,
    }
    (out_dir / "bank_catalogue.json").write_text(json.dumps(doc, indent=1))
    for p in pats:
        m = p["measured"]
        print(
            f"{p['name']:32s} {p['op']:9s} w{p['width']:<3d} inst={m['instructions']} "
            f"wf/inst={m['wavefronts_per_instruction']} sass={m['sass']}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--source")
    ap.add_argument("--run", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT", "ncu_out"))
    a = ap.parse_args()
    if a.list:
        for p in patterns():
            print(p["name"], p["op"], p["width"], p["addresses"][:8], "...")
        print(len(patterns()), "patterns")
    if a.source:
        Path(a.source).write_text(source(patterns()))
    if a.run:
        if not shutil.which("ncu"):
            sys.exit("ncu not found")
        run(Path(a.out))


if __name__ == "__main__":
    main()
