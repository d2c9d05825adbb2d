"""From recorded warp accesses of a user's kernel to Nsight Compute's numbers per instruction and source line,
and the fix for each ``__shared__`` array whose declaration is known.

Per shared-memory instruction the recorded executions (``WarpRecord``) go through the bank model
(:func:`smemtile.model.banks.analyze_addresses`) as one :class:`AccessResult` (one row per recorded execution),
so the existing lane tables and the fix search (:func:`smemtile.model.fix.fix_buffer`) take them unchanged.
Totals use Nsight Compute's words, estimated for the sampled warps: *L1 Wavefronts Shared* = the mean
wavefronts of the recorded executions x the executions counted (records are capped per warp, counts are not),
*Ideal* likewise, *Excessive* = their difference. Instructions and lines are ordered by Excessive, so the first
row is the one that costs most.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from smemtile.errors import SpecError
from smemtile.model.analysis import AccessResult
from smemtile.model.banks import WIDTHS, analyze_addresses
from smemtile.model.cuda_decl import SharedDecl
from smemtile.model.fix import BufferFix, fix_buffer
from smemtile.model.inspect_args import WarpRecord
from smemtile.model.layout import Layout
from smemtile.model.ptx import SharedInstr
from smemtile.model.spec import Access, Buffer


@dataclass(frozen=True)
class ArrayInfo:
    """A shared array as the analysis sees it: where it sits in the window and how to read its offsets."""

    name: str  # source name ("tile"; "extern" for dynamic shared memory; "smem" when unknown)
    base: int  # byte offset of element 0 in the CTA's shared window
    size: int  # bytes (0: to the end of the window)
    decl: SharedDecl | None = None
    buffer: Buffer | None = None  # the logical buffer (dtype, shape) when the declaration was read
    note: str = ""  # why there is no buffer (the fix needs one)
    symbol: str = ""  # the PTX symbol


@dataclass(frozen=True)
class InstrReport:
    instr: SharedInstr
    array: str | None
    executions: int  # counted in the sampled warps
    records: int  # of them recorded (the first N per warp)
    result: AccessResult | None = field(default=None, repr=False)
    note: str = ""
    recorded: tuple[WarpRecord, ...] = field(default=(), repr=False)

    @property
    def modelled(self) -> bool:
        return self.result is not None

    @property
    def worst(self) -> int:
        return self.result.wavefronts if self.result else 0

    @property
    def worst_ideal(self) -> int:
        return self.result.ideal if self.result else 0

    @property
    def mean(self) -> float:
        return float(self.result.bank.wavefronts.mean()) if self.result else 0.0

    @property
    def mean_ideal(self) -> float:
        return float(self.result.bank.ideal_wavefronts.mean()) if self.result else 0.0

    @property
    def wavefronts(self) -> float:
        """L1 Wavefronts Shared over the sampled warps' executions (mean of the records x executions)."""
        return self.mean * self.executions

    @property
    def ideal(self) -> float:
        return self.mean_ideal * self.executions

    @property
    def excessive(self) -> float:
        return self.wavefronts - self.ideal


@dataclass(frozen=True)
class LineReport:
    file: str
    line: int
    instrs: tuple[InstrReport, ...]

    @property
    def executions(self) -> int:
        return sum(r.executions for r in self.instrs)

    @property
    def wavefronts(self) -> float:
        return sum(r.wavefronts for r in self.instrs)

    @property
    def ideal(self) -> float:
        return sum(r.ideal for r in self.instrs)

    @property
    def excessive(self) -> float:
        return self.wavefronts - self.ideal

    @property
    def worst_degree(self) -> float:
        return max((r.result.degree for r in self.instrs if r.result), default=1.0)

    @property
    def arrays(self) -> list[str]:
        return sorted({r.array for r in self.instrs if r.array})


def bank_op(instr: SharedInstr) -> tuple[str, int] | str:
    """(op, width) the bank model takes for this instruction, or the reason it does not model it."""
    op, width = instr.op, instr.width
    if op in ("atom", "red"):
        op = (
            "load" if op == "atom" else "store"
        )  # a shared atomic's data moves like a load/store of its width
    if op == "cp.async.bulk":
        return "bulk copies (TMA) move whole boxes, not per-lane words: not a bank-model instruction"
    if op not in WIDTHS:
        return f"{op} is not a bank-model instruction"
    if width not in WIDTHS[op]:
        return f"{op} of {width} bytes per lane is not a width the bank model has ({WIDTHS[op]})"
    return op, width


def array_of(instr: SharedInstr, recs: list[WarpRecord], arrays: dict[str, ArrayInfo]) -> str | None:
    """The array the instruction touches: the PTX's, else the one every recorded active lane falls in."""
    if instr.array in arrays:
        return instr.array
    hits = set()
    for r in recs:
        for lane in range(32):
            if r.active >> lane & 1:
                a = r.addresses[lane]
                hits |= {
                    n
                    for n, info in arrays.items()
                    if info.base <= a and (not info.size or a < info.base + info.size)
                }
    return hits.pop() if len(hits) == 1 else instr.array


def _result(
    instr: SharedInstr, recs: list[WarpRecord], info: ArrayInfo | None, op: str, width: int
) -> AccessResult:
    addr = np.asarray([r.addresses for r in recs], dtype=np.int64)
    active = np.asarray([[(r.active >> lane) & 1 for lane in range(32)] for r in recs], dtype=bool)
    bank = analyze_addresses(addr, op, width, instr.matrices, active=active)
    warp = np.asarray([r.warp for r in recs], dtype=np.int64)
    loops = tuple({"block": ",".join(map(str, r.block)), "exec": k} for k, r in _exec_numbers(recs))
    buf, rows, cols, layout = Buffer("smem", "u8", (1 << 20,)), None, None, Layout()
    if info is not None and info.buffer is not None:
        buf = info.buffer
        eb = buf.elem_bytes
        used = active.copy()
        if op in ("ldmatrix", "stmatrix"):  # lanes 8m..8m+7 give matrix m's rows; the others are not used
            used &= np.arange(32) < 8 * instr.matrices
        rel = np.where(used, addr - info.base, 0)
        fits = ((rel >= 0) & (rel + min(width, 16) <= buf.bytes()) & (rel % min(eb, width) == 0)) | ~used
        if fits.all():
            elem = rel // eb
            if len(buf.shape) == 1:
                cols = elem
            else:
                rows, cols = elem // buf.cols, elem % buf.cols
        else:
            buf = Buffer(info.name, "u8", (max(info.size, 1),))
    elif info is not None:
        buf = Buffer(info.name if info.name.isidentifier() else "smem", "u8", (max(info.size, 1),))
    access = Access(
        name=f"i{instr.index}",
        buffer=buf.name,
        op=op,
        width=width,
        matrices=instr.matrices,
        trans=instr.trans,
        addresses=None if rows is not None or cols is not None else (0,) * 32,
    )
    return AccessResult(access, buf, layout, bank, warp, loops, rows, cols)


def _exec_numbers(recs: list[WarpRecord]):
    seen: dict[tuple, int] = {}
    for r in recs:
        key = (r.block, r.warp)
        k = seen.get(key, 0)
        seen[key] = k + 1
        yield k, r


def explain(
    instrs: list[SharedInstr],
    records: list[WarpRecord],
    executions: dict[int, int],
    arrays: dict[str, ArrayInfo],
) -> list[InstrReport]:
    """One report per instruction, most Excessive first (unrecorded instructions last, in PTX order)."""
    by: dict[int, list[WarpRecord]] = {}
    for r in records:
        by.setdefault(r.instr, []).append(r)
    out = []
    for ins in instrs:
        recs = by.get(ins.index, [])
        name = array_of(ins, recs, arrays)
        n_exec = max(int(executions.get(ins.index, len(recs))), len(recs))
        if not recs:
            note = "not executed by the sampled warps" if n_exec == 0 else "executed, none recorded"
            out.append(InstrReport(ins, name, n_exec, 0, None, note))
            continue
        kind = bank_op(ins)
        if isinstance(kind, str):
            out.append(InstrReport(ins, name, n_exec, len(recs), None, kind, tuple(recs)))
            continue
        try:
            res = _result(ins, recs, arrays.get(name) if name else None, *kind)
        except SpecError as e:
            out.append(InstrReport(ins, name, n_exec, len(recs), None, f"not modelled: {e}"))
            continue
        note = "a shared atomic: modelled as a load/store of its width" if ins.op in ("atom", "red") else ""
        out.append(InstrReport(ins, name, n_exec, len(recs), res, note, tuple(recs)))
    return sorted(out, key=lambda r: (r.result is None, -r.excessive, r.instr.index))


def lines(reports: list[InstrReport]) -> list[LineReport]:
    """Instructions grouped by source line, most Excessive first."""
    by: dict[tuple[str, int], list[InstrReport]] = {}
    for r in sorted(reports, key=lambda r: r.instr.index):
        by.setdefault((r.instr.file, r.instr.line), []).append(r)
    out = [LineReport(f, ln, tuple(rs)) for (f, ln), rs in by.items()]
    return sorted(out, key=lambda x: (-x.excessive, -x.wavefronts, x.file, x.line))


@dataclass(frozen=True)
class ArrayFix:
    """The fix search on one array's recorded accesses, and what it changes."""

    array: ArrayInfo
    fix: BufferFix
    reports: tuple[InstrReport, ...]  # the array's modelled instructions
    relaid: dict[int, AccessResult] = field(default_factory=dict, repr=False)  # instr index -> under the fix

    @property
    def before(self) -> float:
        return sum(r.wavefronts for r in self.reports)

    @property
    def after(self) -> float:
        total = 0.0
        for r in self.reports:
            ar = self.relaid.get(r.instr.index, r.result)
            total += float(ar.bank.wavefronts.mean()) * r.executions
        return total


def relay(ar: AccessResult, lay: Layout, base: int = 0) -> AccessResult:
    """``ar`` under another layout of its buffer (the same logical coordinates)."""
    buf = ar.buffer
    off = lay.swizzle(ar.cols) if ar.rows is None and lay.swizzle is not None else ar.cols
    if ar.rows is not None:
        off = lay.offset(ar.rows, ar.cols, buf.cols)
    addr = np.where(ar.bank.active, off * buf.elem_bytes + base, 0)
    bank = analyze_addresses(addr, ar.access.op, ar.access.width, ar.access.matrices, active=ar.bank.active)
    return dataclasses.replace(ar, layout=lay, bank=bank)


def fixes(reports: list[InstrReport], arrays: dict[str, ArrayInfo]) -> tuple[list[ArrayFix], dict[str, str]]:
    """The fix per array with a readable declaration; and, per array without one, why it has none."""
    out, why = [], {}
    for name, info in arrays.items():
        mine = [r for r in reports if r.array == name and r.result is not None]
        if not mine:
            continue
        if info.buffer is None:
            why[name] = info.note or "its declaration could not be read"
            continue
        coords = [r for r in mine if r.result.rows is not None or r.result.cols is not None]
        if len(coords) < len(mine):
            why[name] = (
                "recorded offsets fall outside its declared size: the fix needs (row, col) for every access"
            )
            continue
        f = fix_buffer(None, info.buffer, [r.result for r in coords])
        if f is None:
            continue
        relaid = {}
        if f.recommended.layout != info.buffer.layout:
            relaid = {r.instr.index: relay(r.result, f.recommended.layout, info.base) for r in coords}
        out.append(ArrayFix(info, f, tuple(coords), relaid))
    return out, why
