"""`verify --ncu`: run a generated kernel under Nsight Compute and put its shared-memory numbers beside the model's.

Three steps, each usable on its own:

1. :func:`profile` runs ``ncu --clock-control none --section SourceCounters --metrics ...`` on a small runner
   (``python -m smemtile.gpu.ncu --target ...``, one launch of one variant at a small, tile-multiple problem
   size) and reads back two pages of the report: the SASS source page (per instruction: executed count, shared
   wavefronts, ideal wavefronts) and the raw page (kernel-level counters).
2. :func:`parse_source_csv` / :func:`parse_raw_csv` turn those CSV pages into numbers (CPU only, tested on a
   saved fixture).
3. :func:`compare` maps every shared-memory SASS instruction (LDS / STS / LDSM / LDGSTS with its width) to the
   family contract's accesses of the same op and width and compares measured wavefronts per executed
   instruction with the bank model. Where several accesses share an op and width the per-instruction mapping is
   ambiguous, so the group's sums are compared instead, and the result says so. Kernel-level totals (load and
   store wavefronts per instruction from the hardware counters) are always compared too.

Known limits of the counters (HARDWARE.md, bench/ncu_bank_catalogue.py): 16-byte ``cp.async.cg`` writes
(``LDGSTS...BYPASS.128``) are not counted by any shared-memory wavefront counter; ncu's conflict counter for
cp.async assumes one wavefront per 128 bytes while the hardware works in quarter-warp phases.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

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
TIMEOUT_S = 300
REL_TOL = 1e-3  # wavefront counts are exact; this only absorbs float formatting


def find_ncu() -> str | None:
    """Path of the ``ncu`` executable, or None."""
    return shutil.which("ncu")


def small_problem(cfg) -> dict:
    """A small problem of whole tiles (no masked edges, so every lane of every warp is active): ncu replays
    the kernel many times, and the model's instruction counts hold exactly."""
    p = cfg.params
    if cfg.family == "sgemm":
        return {"M": 2 * p["BM"], "N": 2 * p["BN"], "K": 8 * p["BK"]}
    if cfg.family == "transpose":
        return {"rows": 4 * p["TILE"], "cols": 4 * p["TILE"]}
    if cfg.family == "stencil2d":
        return {"ny": 4 * p["BY"], "nx": 4 * p["BX"]}
    raise NotImplementedError(f"no small ncu problem for family {cfg.family!r}")


def repeats_per_block(cfg) -> int:
    """How often each contract access runs per block (the K loop of sgemm; 1 elsewhere)."""
    if cfg.family == "sgemm":
        return -(-int(cfg.problem["K"]) // cfg.params["BK"])
    return 1


# ---- SASS -> (op, width) ------------------------------------------------------------------------------------

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


@dataclass
class ModelAccess:
    name: str
    op: str
    width: int
    instructions: int  # per block and repetition, warp instructions with an active lane
    wavefronts: int  # their sum
    ideal: int
    ncu_ideal: int  # what ncu subtracts for its conflict count (cp.async: 1 per 128 bytes)
    # mean wavefronts of each unrolled instruction of the kernel source (first axis of the contract arrays)
    slot_means: list[float]

    @property
    def mean(self) -> float:
        return self.wavefronts / self.instructions if self.instructions else 0.0

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["mean"] = self.mean
        return d


def model_accesses(cfg) -> list[ModelAccess]:
    from smemtile.codegen import FAMILIES
    from smemtile.codegen.analysis import _wavefronts, byte_addresses

    fam = FAMILIES[cfg.family]
    out = []
    for acc in fam.accesses(cfg):
        addr = byte_addresses(fam, cfg, acc)
        slots = addr.shape[0]
        a = addr.reshape(-1, 32)
        active = (a >= 0).any(axis=1)
        w = np.zeros(a.shape[0], dtype=np.int64)
        ideal = np.zeros_like(w)
        if active.any():
            w[active], ideal[active] = _wavefronts(a[active], acc.op, acc.width)
        if acc.op == "cp.async":
            lanes = (a >= 0).sum(axis=1)
            ncu_ideal = np.where(active, np.maximum(1, -(-lanes * acc.width // 128)), 0)
        else:
            ncu_ideal = ideal
        per_slot_n = active.reshape(slots, -1).sum(axis=1)
        per_slot_w = w.reshape(slots, -1).sum(axis=1)
        means = sorted(
            {round(float(x) / int(n), 6) for x, n in zip(per_slot_w, per_slot_n, strict=True) if n}
        )
        out.append(
            ModelAccess(
                acc.name,
                acc.op,
                acc.width,
                int(active.sum()),
                int(w.sum()),
                int(ideal.sum()),
                int(ncu_ideal.sum()),
                means,
            )  # fmt: skip
        )
    return out


# ---- comparison ---------------------------------------------------------------------------------------------


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return False
    return bool(abs(a - b) <= REL_TOL * max(1.0, abs(b)))


def _fmt_num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def compare(cfg, rows: list[SassRow], metrics: dict[str, float]) -> dict:
    """Measured vs model, per SASS instruction, per (op, width) group and for the whole kernel."""
    from smemtile.codegen import FAMILIES

    fam = FAMILIES[cfg.family]
    launch = fam.launch(cfg)
    blocks = int(np.prod(launch.grid))
    reps = repeats_per_block(cfg) * blocks
    model = model_accesses(cfg)

    # Shared-memory SASS instructions that ran. ptxas places `@!PT LDS RZ, [RZ]` next to LDGSTS: issued (so
    # counted by smsp__inst_executed_op_shared_ld) but with no thread predicated on and no wavefront.
    sass = []
    other = []
    placeholders: dict[str, float] = {}
    for r in rows:
        c = classify(r.source)
        if c is None:
            if (r.wavefronts or 0) > 0:
                other.append(r)
            continue
        if r.executed <= 0:
            continue
        if r.predicated_on_threads == 0 or re.match(r"^\{?\s*@!PT\b", r.source):
            placeholders[c.op] = placeholders.get(c.op, 0.0) + r.executed
            continue
        sass.append((r, c))

    keys = sorted({(c.op, c.width) for _, c in sass} | {(m.op, m.width) for m in model})
    groups = []
    instructions = []
    all_match = True
    for op, width in keys:
        accs = [m for m in model if (m.op, m.width) == (op, width)]
        members = [(r, c) for r, c in sass if (c.op, c.width) == (op, width)]
        invisible = bool(members) and all(c.bypass for _, c in members)
        # LDGSTS whose shared wavefronts the source counters do not attribute to the instruction
        unattributed = (
            op == "cp.async"
            and not invisible
            and bool(members)
            and all(not r.wavefronts for r, _ in members)
            and any(m.wavefronts for m in accs)
        )
        exec_meas = sum(r.executed for r, _ in members)
        wf_meas = sum(r.wavefronts or 0.0 for r, _ in members)
        ideal_meas = (
            sum(r.ideal or 0.0 for r, _ in members) if all(r.ideal is not None for r, _ in members) else None
        )
        exec_model = sum(m.instructions for m in accs) * reps
        wf_model = sum(m.wavefronts for m in accs) * reps
        ncu_ideal_model = sum(m.ncu_ideal for m in accs) * reps
        mapping = "exact" if len(accs) == 1 else ("ambiguous" if accs else "unmapped")
        if not members:
            mapping = "not in SASS"
        g = {
            "op": op,
            "width": width,
            "opcodes": sorted({c.opcode for _, c in members}),
            "accesses": [m.name for m in accs],
            "mapping": mapping,
            "sass_instructions": len(members),
            "executed": {"measured": exec_meas, "model": exec_model},
            "wavefronts": {"measured": wf_meas, "model": wf_model},
            "wavefronts_per_instruction": {
                "measured": _ratio(wf_meas, exec_meas),
                "model": _ratio(wf_model, exec_model),
            },
            "conflicts_per_instruction": {
                "measured": _ratio(wf_meas - ideal_meas, exec_meas) if ideal_meas is not None else None,
                "model": _ratio(wf_model - ncu_ideal_model, exec_model),
            },
        }
        if invisible:
            g["note"] = (
                "cp.async.cg (LDGSTS ...BYPASS) shared-memory writes: the hardware wavefront counters count none "
                "of them (bench/ncu_bank_catalogue.py), so the source view's number is not a measurement: "
                "not compared"
            )
        elif unattributed:
            g["note"] = (
                "ncu's source counters attribute no shared wavefronts to these LDGSTS: compared through the "
                "kernel cp.async total (hardware counters) only"
            )
        elif mapping == "ambiguous":
            g["note"] = (
                f"{len(accs)} accesses ({', '.join(m.name for m in accs)}) share op {op} and width {width} B, so "
                "SASS instructions cannot be told apart: the sums over the group are compared"
                + (
                    f", and each instruction with the {_fmt_num(accs[0].slot_means[0])} wf/inst they all predict"
                    if len({v for m in accs for v in m.slot_means}) == 1
                    else ""
                )
            )
        elif mapping == "unmapped":
            g["note"] = "shared-memory instructions that no contract access describes"
        elif mapping == "not in SASS":
            g["note"] = "the contract lists this access but no executed SASS instruction has its op and width"
        g["invisible"] = invisible
        g["comparable"] = not (invisible or unattributed)
        g["match"] = None
        if g["comparable"]:
            g["match"] = bool(
                members and accs and _close(exec_meas, exec_model) and _close(wf_meas, wf_model)
            )
            all_match &= g["match"]
        groups.append(g)

        # Per instruction.
        for r, c in members:
            per = _ratio(r.wavefronts, r.executed)
            conf = _ratio((r.wavefronts - r.ideal) if r.wavefronts is not None and r.ideal is not None else None,
                          r.executed)  # fmt: skip
            row = {
                "address": r.address,
                "offset": r.offset,
                "sass": r.source,
                "opcode": c.opcode,
                "op": op,
                "width": width,
                "executed": r.executed,
                "wavefronts": r.wavefronts,
                "wavefronts_per_instruction": per,
                "conflicts_per_instruction": conf,
                "n_way": r.n_way,
                "access_size_bits": r.access_size_bits,
                "access": None,
                "model_wavefronts_per_instruction": None,
                "model_conflicts_per_instruction": None,
                "match": None,
            }
            if mapping == "exact" and g["comparable"]:
                m = accs[0]
                cands = sorted(set(m.slot_means) | {round(m.mean, 6)})
                hit = next((v for v in cands if _close(per, v)), None)
                row["access"] = m.name
                row["model_wavefronts_per_instruction"] = hit if hit is not None else m.mean
                row["model_conflicts_per_instruction"] = (m.wavefronts - m.ncu_ideal) / m.instructions
                if len(cands) > 1:
                    row["model_values"] = cands
                row["match"] = hit is not None
                all_match &= row["match"]
            elif mapping == "ambiguous":
                row["access"] = " | ".join(m.name for m in accs)
                values = sorted({v for m in accs for v in m.slot_means})
                row["model_values"] = values
                if len(values) == 1 and g["comparable"]:
                    # every candidate access predicts the same number: each instruction is checked against it
                    row["model_wavefronts_per_instruction"] = values[0]
                    row["model_conflicts_per_instruction"] = sum(
                        m.wavefronts - m.ncu_ideal for m in accs
                    ) / sum(m.instructions for m in accs)
                    row["match"] = _close(per, values[0])
                    all_match &= row["match"]
            elif not g["comparable"]:
                row["access"] = accs[0].name if len(accs) == 1 else " | ".join(m.name for m in accs)
                row["model_wavefronts_per_instruction"] = _ratio(wf_model, exec_model)
            instructions.append(row)

    instructions.sort(key=lambda r: r["offset"] or r["address"])
    comparable = [g for g in groups if g["comparable"]]
    per_block = {
        "measured": sum(g["wavefronts"]["measured"] for g in comparable) / blocks,
        "model": sum(g["wavefronts"]["model"] for g in comparable) / blocks,
        "what": "shared-memory wavefronts per block, summed over the comparable instructions",
    }
    totals = _totals(model, groups, metrics, reps, placeholders)
    for t in totals.values():
        if t.get("match") is not None:
            all_match &= t["match"]
    return {
        "problem": dict(cfg.problem),
        "blocks": blocks,
        "repeats_per_block": repeats_per_block(cfg),
        "model": [m.to_dict() for m in model],
        "instructions": instructions,
        "groups": groups,
        "totals": totals,
        "wavefronts_per_block": per_block,
        "other_shared_wavefronts": [r.to_dict() for r in other],
        "placeholders": placeholders,
        "metrics": metrics,
        "match": bool(all_match),
    }


def _totals(
    model: list[ModelAccess],
    groups: list[dict],
    met: dict[str, float],
    reps: int,
    placeholders: dict[str, float],
) -> dict:
    """Kernel-level hardware counters vs the model, per direction. Instructions issued with no thread predicated
    on (ptxas placeholders) are taken out of the measured instruction counts."""

    def model_sum(ops, invisible_ok=False):
        wf = inst = conf = 0
        for m in model:
            if m.op not in ops:
                continue
            g = next((g for g in groups if (g["op"], g["width"]) == (m.op, m.width)), None)
            if g is not None and g["invisible"] and not invisible_ok:
                continue  # not counted by the hardware
            wf += m.wavefronts * reps
            inst += m.instructions * reps
            conf += (m.wavefronts - m.ncu_ideal) * reps
        return wf, inst, conf

    W = "l1tex__data_pipe_lsu_wavefronts_mem_shared"
    C = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared"
    out = {}
    ld_inst = st_inst = None
    if "smsp__inst_executed_op_shared_ld.sum" in met:
        ld_inst = met["smsp__inst_executed_op_shared_ld.sum"] + met.get(
            "smsp__inst_executed_op_ldsm.sum", 0.0
        )
        ld_inst -= placeholders.get("load", 0.0) + placeholders.get("ldmatrix", 0.0)
    if "smsp__inst_executed_op_shared_st.sum" in met:
        st_inst = met["smsp__inst_executed_op_shared_st.sum"] - placeholders.get("store", 0.0)
    rows = [
        ("load", ("load", "ldmatrix"), met.get(f"{W}_op_ld.sum"), ld_inst, met.get(f"{C}_op_ld.sum")),
        ("store", ("store",), met.get(f"{W}_op_st.sum"), st_inst, met.get(f"{C}_op_st.sum")),
    ]
    tot = met.get(f"{W}.sum")
    if tot is not None and "smsp__inst_executed_op_ldgsts.sum" in met:
        # No per-op wavefront counter for LDGSTS: all shared wavefronts minus loads, stores and misc (barriers,
        # cp.async waits); the .cg 16-byte path is not counted at all, so its instructions are left out too.
        cp_wf = tot - sum(met.get(f"{W}_op_{k}.sum", 0.0) for k in ("ld", "st", "misc"))
        cp_inst = met["smsp__inst_executed_op_ldgsts.sum"] - met.get(
            "smsp__sass_inst_executed_op_ldgsts_cache_bypass.sum", 0.0
        )
        cp_inst -= placeholders.get("cp.async", 0.0)
        rows.append(("cp.async", ("cp.async",), cp_wf, cp_inst, met.get(f"{C}_op_ldgsts.sum")))
    for name, ops, wf, inst, conf in rows:
        mwf, minst, mconf = model_sum(ops)
        if not inst and not minst:
            continue  # neither the kernel nor the model has this kind of access
        t = {
            "instructions": {"measured": inst, "model": minst},
            "wavefronts": {"measured": wf, "model": mwf},
            "wavefronts_per_instruction": {"measured": _ratio(wf, inst), "model": _ratio(mwf, minst)},
            "conflicts_per_instruction": {"measured": _ratio(conf, inst), "model": _ratio(mconf, minst)},
        }
        if inst is None or wf is None:
            t["match"] = None
        elif name == "cp.async":
            # derived by subtraction, with a remainder the catalogue microkernels do not show: informational
            t["match"] = None
            t["note"] = (
                "derived (all shared wavefronts minus load, store and misc ones; .cg 16-byte copies left out): "
                "shown for reference, not used for the verdict"
            )
        else:
            t["match"] = _close(inst, minst) and _close(wf, mwf)
        if placeholders.get(name) or (name == "load" and placeholders.get("ldmatrix")):
            t["placeholders_left_out"] = placeholders.get(name, 0.0) + (
                placeholders.get("ldmatrix", 0.0) if name == "load" else 0.0
            )
        out[name] = t
    return out


# ---- running ncu --------------------------------------------------------------------------------------------


class NcuError(RuntimeError):
    pass


def _run(cmd: list[str], *, timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise NcuError(f"timed out after {timeout:.0f} s: {' '.join(cmd[:6])} ...") from None


def profile(spec: Path, variant: str, cfg, *, device: int = 0, ncu: str | None = None,
            save_dir: Path | None = None, timeout: float = TIMEOUT_S) -> dict:  # fmt: skip
    """Profile ``variant`` of ``spec`` at ``cfg``'s (small) problem under ncu and compare with the model."""
    from smemtile.codegen import FAMILIES

    ncu = ncu or find_ncu()
    if ncu is None:
        raise NcuError("ncu not found on PATH")
    fam = FAMILIES[cfg.family]
    work = Path(tempfile.mkdtemp(prefix="smemtile_ncu_"))
    try:
        report = work / "report"
        result = work / "target.json"
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        target = [sys.executable, "-m", "smemtile.gpu.ncu", "--target", str(Path(spec).resolve()), variant,
                  json.dumps(cfg.problem), str(device), str(result)]  # fmt: skip
        cmd = [ncu, "--clock-control", "none", "--target-processes", "all", "-k", f"regex:{fam.kernel}",
               "--launch-count", "1", "--section", "SourceCounters", "--metrics", ",".join(METRICS),
               "--import-source", "no", "-f", "-o", str(report), *target]  # fmt: skip
        p = _run(cmd, timeout=timeout, env=env)
        rep = report.with_suffix(".ncu-rep")
        if p.returncode != 0 or not rep.exists():
            tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
            raise NcuError(f"ncu exited {p.returncode}: {' | '.join(tail)}")
        src = _run(
            [ncu, "-i", str(rep), "--page", "source", "--csv", "--print-source", "sass"], timeout=timeout
        )
        raw = _run([ncu, "-i", str(rep), "--page", "raw", "--csv", "--print-units", "base"], timeout=timeout)
        if save_dir is not None:
            save_dir.mkdir(parents=True, exist_ok=True)
            stem = f"{Path(spec).stem}_{variant}"
            (save_dir / f"{stem}_source.csv").write_text(src.stdout)
            (save_dir / f"{stem}_raw.csv").write_text(raw.stdout)
            (save_dir / f"{stem}_ncu.log").write_text(p.stdout + "\n--- stderr ---\n" + p.stderr)
            shutil.copy(rep, save_dir / f"{stem}.ncu-rep")
        if src.returncode != 0 or raw.returncode != 0:
            raise NcuError(f"ncu -i failed: {(src.stderr or raw.stderr).strip()[:300]}")
        rows, info = parse_source_csv(src.stdout)
        metrics = parse_raw_csv(raw.stdout)
        doc = compare(cfg, rows, metrics)
        doc["columns"] = info
        doc["target"] = json.loads(result.read_text()) if result.exists() else None
        shown = [("REPORT" if x == str(report) else "RESULT.json" if x == str(result) else x) for x in cmd]
        doc["command"] = " ".join(shown)
        return doc
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ncu_version(ncu: str | None = None) -> str | None:
    ncu = ncu or find_ncu()
    if not ncu:
        return None
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    except Exception:
        return None
    lines = [ln for ln in out.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else None


# ---- the runner ncu profiles --------------------------------------------------------------------------------


def _target(spec: str, variant: str, problem_json: str, device: str, result: str) -> int:
    """One launch of one variant on a small problem, checked against the reference; writes a JSON summary."""
    from smemtile.codegen import FAMILIES, configure, from_spec
    from smemtile.gpu.run import LoadedKernel, open_device
    from smemtile.model.arch import get_arch
    from smemtile.model.spec import load_spec

    c = from_spec(load_spec(Path(spec)), variant)
    dev = open_device(int(device))
    cfg = configure(c.family, {**c.params, **json.loads(problem_json)}, c.layouts, get_arch(dev.arch_name))
    fam = FAMILIES[cfg.family]
    inputs = fam.make_inputs(cfg.problem, np.random.default_rng(1234))
    if cfg.family == "stencil2d":
        inputs["coeffs"] = fam.coefficients(cfg.params["R"])
    k = LoadedKernel(cfg, dev)
    try:
        chk = k.check(dict(inputs), fam.reference(cfg.problem, inputs))
    finally:
        k.close()
    Path(result).write_text(json.dumps({"name_expression": fam.name_expression(cfg), "problem": cfg.problem,
                                        "correct": chk.correct, "max_rel_error": chk.max_rel_error}))  # fmt: skip
    return 0 if chk.correct else 1


if __name__ == "__main__":  # pragma: no cover - runs on a GPU under ncu
    if len(sys.argv) == 7 and sys.argv[1] == "--target":
        raise SystemExit(_target(*sys.argv[2:]))
    print(
        "usage: python -m smemtile.gpu.ncu --target SPEC VARIANT PROBLEM_JSON DEVICE RESULT_JSON",
        file=sys.stderr,
    )
    raise SystemExit(2)
