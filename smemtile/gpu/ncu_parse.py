"""Parse Nsight Compute's CSV pages: the SASS source page (per instruction) and the raw page (per kernel).

Pure Python (no CUDA); tested on pages saved from the H200 (tests/data/ncu/).
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from typing import Any

# Kernel-level counters (names checked on the H200 by bench/ncu_bank_catalogue.py).
METRICS = (
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_misc.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ldgsts.sum",
    "smsp__inst_executed_op_shared_ld.sum",
    "smsp__inst_executed_op_shared_st.sum",
    "smsp__inst_executed_op_ldsm.sum",
    "smsp__inst_executed_op_ldgsts.sum",
    "smsp__sass_inst_executed_op_ldgsts_cache_bypass.sum",
)
REL_TOL = 1e-3  # wavefront counts are exact; this only absorbs float formatting


_WIDTH_TOKENS = {"U8": 1, "S8": 1, "8": 1, "U16": 2, "S16": 2, "16": 2, "32": 4, "64": 8, "128": 16}


@dataclass(frozen=True)
class SassOp:
    op: str  # load | store | ldmatrix | cp.async
    width: int  # bytes per lane (16 for ldmatrix rows)
    opcode: str  # e.g. LDS.128, LDGSTS.E.BYPASS.128
    bypass: bool = False  # LDGSTS .cg: the shared-memory write is invisible to the counters
    matrices: int | None = None


def classify(sass: str) -> SassOp | None:
    """The shared-memory op of one SASS line (``@P0 LDS.128 R4, [R2+0x10] ;``), or None for anything else."""
    text = sass.strip()
    text = re.sub(r"^\{?\s*@!?U?P\w+\s+", "", text)  # predicate guard
    m = re.match(r"([A-Z][A-Z0-9_]*)((?:\.[A-Z0-9_]+)*)", text)
    if not m:
        return None
    base, mods = m.group(1), [x for x in m.group(2).split(".") if x]
    opcode = base + "".join("." + x for x in mods)
    if base in ("LDS", "STS"):
        width = 4
        for x in mods:
            width = _WIDTH_TOKENS.get(x, width)
        return SassOp("load" if base == "LDS" else "store", width, opcode)
    if base == "LDSM":
        mat = next((int(x) for x in mods if x in ("1", "2", "4")), 1)
        return SassOp("ldmatrix", 16, opcode, matrices=mat)
    if base == "LDGSTS":
        width = 4
        for x in mods:
            if x in ("64", "128"):
                width = _WIDTH_TOKENS[x]
        return SassOp("cp.async", width, opcode, bypass="BYPASS" in mods)
    return None


# ---- CSV pages ----------------------------------------------------------------------------------------------


@dataclass
class SassRow:
    address: str  # as ncu prints it (absolute); ``offset`` is relative to the function's first instruction
    source: str
    executed: float
    wavefronts: float | None
    ideal: float | None
    offset: str = ""
    n_way: float | None = None  # ncu's "L1 Conflicts Shared N-Way"
    access_size_bits: float | None = None  # ncu's "Access Size"
    address_space: str = ""  # ncu's "Address Space" (Shared, Global, ...)
    predicated_on_threads: float | None = None  # ncu's "Predicated-On Thread Instructions Executed"

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _num(s: Any) -> float | None:
    if s is None:
        return None
    t = str(s).strip().replace(",", "").replace("%", "")
    if t in ("", "-", "n/a", "N/A"):
        return None
    try:
        return float(t)
    except ValueError:
        return None


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", name.lower()).strip()


def source_columns(header: list[str]) -> dict[str, int | None]:
    """Indices of the columns the comparison needs, found by name (ncu's labels differ between versions)."""
    norm = [_norm(h) for h in header]

    def first(pred) -> int | None:
        return next((i for i, n in enumerate(norm) if pred(n)), None)

    cols = {
        "address": first(lambda n: n in ("address", "pc", "offset")) or first(lambda n: "address" in n),
        "source": first(lambda n: n in ("source", "sass")),
        "executed": first(
            lambda n: n in ("instructions executed", "warp instructions executed", "inst executed")
        )
        or first(lambda n: n.endswith("instructions executed") and "thread" not in n),
        "wavefronts": first(
            lambda n: "wavefronts shared" in n and "ideal" not in n and "excessive" not in n and "%" not in n
        ),
        "ideal": first(lambda n: "wavefronts shared ideal" in n),
        "excessive": first(lambda n: "wavefronts shared excessive" in n),
        "n_way": first(lambda n: "conflicts shared n way" in n),
        "access_size": first(lambda n: n == "access size"),
        "address_space": first(lambda n: n == "address space"),
        "predicated_on": first(lambda n: n == "predicated on thread instructions executed"),
    }
    if cols["source"] is None:
        cols["source"] = first(lambda n: "source" in n)
    return cols


def parse_source_csv(text: str) -> tuple[list[SassRow], dict]:
    """Rows of ``ncu --page source --csv --print-source sass``: every SASS instruction with its counters.

    Returns (rows, info) where info names the columns used. Lines before the header (``==PROF==`` chatter) and
    repeated headers are skipped.
    """
    lines = text.splitlines()
    start = next(
        (i for i, ln in enumerate(lines) if "Source" in ln and ("Address" in ln or "Wavefronts" in ln)), None
    )
    if start is None:
        raise ValueError("no header with 'Source' found in the ncu source page")
    reader = csv.reader(io.StringIO("\n".join(lines[start:])))
    header = next(reader)
    cols = source_columns(header)
    if cols["source"] is None or cols["executed"] is None or cols["wavefronts"] is None:
        raise ValueError(f"ncu source page lacks a needed column; columns: {header}")
    rows = []
    for cells in reader:
        if len(cells) < len(header) or cells == header:
            continue

        def get(key, cells=cells):
            i = cols[key]
            return None if i is None else cells[i]

        ex = _num(get("executed"))
        wf = _num(get("wavefronts"))
        ideal = _num(get("ideal"))
        if ideal is None and cols["excessive"] is not None and wf is not None:
            exc = _num(get("excessive"))
            ideal = wf - exc if exc is not None else None
        rows.append(
            SassRow(
                str(get("address") or "").strip(),
                str(get("source")).strip(),
                ex or 0.0,
                wf,
                ideal,
                n_way=_num(get("n_way")),
                access_size_bits=_num(get("access_size")),
                address_space=str(get("address_space") or "").strip(),
                predicated_on_threads=_num(get("predicated_on")),
            )
        )
    _offsets(rows)
    info = {k: (header[v] if v is not None else None) for k, v in cols.items()}
    return rows, info


def _offsets(rows: list[SassRow]) -> None:
    """Addresses relative to the first instruction (ncu prints absolute, run-dependent addresses)."""
    try:
        base = min(int(r.address, 16) for r in rows if r.address)
    except ValueError:
        return
    for r in rows:
        try:
            r.offset = f"+0x{int(r.address, 16) - base:04x}"
        except ValueError:
            r.offset = r.address


def parse_raw_csv(text: str, names: tuple[str, ...] | list[str] = METRICS) -> dict[str, float]:
    """Kernel-level metrics from ``ncu --page raw --csv`` (first profiled kernel); units row skipped."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"') or ln.startswith("ID,")), None)
    if start is None:
        raise ValueError("no header row in the ncu raw page")
    reader = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    for row in reader:
        if _num(row.get("ID")) is None:
            continue  # units row
        out = {}
        for n in names:
            v = _num(row.get(n))
            if v is not None:
                out[n] = v
        return out
    raise ValueError("no profiled kernel in the ncu raw page")


# ---- the model side -----------------------------------------------------------------------------------------
