"""Fix search: the cheapest layout change that makes every access of a buffer conflict-free.

Two families, both checked by re-running the bank model on every instruction:

* padding: ``pad`` extra elements per row. Rows must keep the alignment the buffer's accesses need
  (a 16-byte vector load, cp.async 16 or an ldmatrix row needs 16-byte-aligned rows), so only multiples of
  ``align / element size`` are tried. Costs ``rows * pad`` elements per stage.
* swizzle: ``Swizzle<B, M, S>`` on the element offset (see layout.py). ``2**M`` elements must cover the
  widest vector (so vectors stay contiguous), and the swizzle's period must divide the buffer. Costs no
  memory; every index computation goes through one XOR.

The recommendation: the padding when it is conflict-free and costs at most ``PAD_BUDGET`` of the buffer
(one extra word per row of a large tile is the easiest change to review); otherwise the swizzle when it is
conflict-free; otherwise whichever comes closest (fewest total wavefronts).

A kernel family can pass ``variant(buffer, layout)``: the buffer's accesses as the kernel issues them under that
layout (an instruction may change with the layout, e.g. the width of a store that must stay aligned), or None
when the family cannot build that layout. The candidates are then judged on exactly what the kernel would run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from smemtile.model.analysis import AccessResult, analyze_spec
from smemtile.model.banks import analyze_addresses
from smemtile.model.layout import Layout, Swizzle
from smemtile.model.spec import Buffer, KernelSpec

PAD_BUDGET = 1 / 16
MAX_PAD_BYTES = 128


@dataclass(frozen=True)
class Candidate:
    layout: Layout
    kind: str  # "baseline" | "pad" | "swizzle"
    wavefronts: int  # total over all instructions of the buffer's accesses
    ideal: int
    conflict_free: bool
    extra_bytes: int  # shared memory on top of the unpadded buffer, all stages
    per_access: dict  # access name -> (worst wavefronts, ideal, degree)

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "layout": self.layout.to_dict(),
            "describe": self.layout.describe(),
            "total_wavefronts": self.wavefronts,
            "total_ideal_wavefronts": self.ideal,
            "conflict_free": self.conflict_free,
            "extra_bytes": self.extra_bytes,
            "accesses": {
                k: {"wavefronts": v[0], "ideal_wavefronts": v[1], "conflict_degree": v[2]}
                for k, v in self.per_access.items()
            },
        }


@dataclass(frozen=True)
class BufferFix:
    buffer: Buffer
    baseline: Candidate
    padding: Candidate | None  # best padding (conflict-free smallest, else closest)
    swizzle: Candidate | None
    recommended: Candidate
    reason: str
    align_bytes: int
    tried: int = 0

    @property
    def needed(self) -> bool:
        return not self.baseline.conflict_free

    def to_dict(self) -> dict:
        return {
            "buffer": self.buffer.name,
            "needed": self.needed,
            "align_bytes": self.align_bytes,
            "baseline": self.baseline.to_dict(),
            "padding": self.padding.to_dict() if self.padding else None,
            "swizzle": self.swizzle.to_dict() if self.swizzle else None,
            "recommended": self.recommended.to_dict(),
            "reason": self.reason,
            "candidates_tried": self.tried,
        }


@dataclass(frozen=True)
class FixReport:
    buffers: tuple[BufferFix, ...]
    results: tuple[AccessResult, ...] = field(repr=False)  # baseline analysis

    @property
    def layouts(self) -> dict[str, Layout]:
        """Buffer name -> the recommended layout (the 'fixed' variant)."""
        return {f.buffer.name: f.recommended.layout for f in self.buffers}

    def to_dict(self) -> list:
        return [f.to_dict() for f in self.buffers]


def _relayout(ar: AccessResult, lay: Layout) -> np.ndarray:
    """Wavefronts per instruction of ``ar`` under another layout (coordinates reused, not re-evaluated)."""
    buf = ar.buffer
    # identical instructions (warps that repeat a pattern) are modelled once (AccessResult.distinct): the
    # cp.async schedule runs per instruction, thousands of times per candidate for a 1024-thread spec otherwise
    first, inv = ar.distinct
    if ar.rows is not None:
        off = lay.offset(ar.rows[first], ar.cols[first], buf.cols)
    else:
        off = lay.swizzle(ar.cols[first]) if lay.swizzle is not None else ar.cols[first]
    src = None if ar.bank.sources is None else ar.bank.sources[first]
    r = analyze_addresses(
        off * buf.elem_bytes,
        ar.access.op,
        ar.access.width,
        ar.access.matrices,
        sources=src,
        active=ar.bank.active[first],
    )
    return r.wavefronts[inv], r.ideal_wavefronts[inv]


Variant = Callable[[str, Layout], "list[AccessResult] | None"]
Allowed = Callable[[str, Layout], bool]


def relayout_only(allowed: Allowed) -> Variant:
    """A variant for kernels whose instructions do not depend on the layout: the same coordinates, relaid
    (fast), for the layouts ``allowed`` accepts."""

    def variant(buffer: str, lay: Layout):
        return RELAYOUT if allowed(buffer, lay) else None

    return variant


RELAYOUT: list = []  # sentinel: judge the candidate on the baseline's coordinates


def _candidate(
    results: list[AccessResult], buf: Buffer, lay: Layout, kind: str, variant: Variant | None = None
) -> Candidate | None:
    tot = ideal = 0
    per = {}
    pairs = [(ar, None) for ar in results]
    if variant is not None:
        redone = variant(buf.name, lay)
        if redone is None:
            return None  # the kernel cannot use this layout
        if redone is not RELAYOUT:
            pairs = [(ar, (ar.bank.wavefronts, ar.bank.ideal_wavefronts)) for ar in redone]
    for ar, known in pairs:
        w, i = known if known is not None else _relayout(ar, lay)
        tot += int(w.sum())
        ideal += int(i.sum())
        worst = int(np.argmax(w))
        per[ar.access.name] = (int(w[worst]), int(i[worst]), round(float((w / i).max()), 4))
    extra = buf.bytes(lay) - buf.bytes(Layout())
    return Candidate(lay, kind, tot, ideal, tot == ideal, extra, per)


def required_alignment(results: list[AccessResult]) -> int:
    """Bytes every row start must stay aligned to: the widest vector access, 16 for ldmatrix rows."""
    align = 4
    for ar in results:
        align = max(align, 16 if ar.access.op in ("ldmatrix", "stmatrix") else ar.access.width)
    return align


def _swizzles(buf: Buffer, results: list[AccessResult], any_granule: bool = False) -> list[Swizzle]:
    """Candidate swizzles in cost order (fewest XOR bits first)."""
    eb = buf.elem_bytes
    vec = (
        1
        if any_granule
        else max((16 if ar.access.op in ("ldmatrix", "stmatrix") else ar.access.width) for ar in results)
        // eb
    )
    m_min = max(0, int(np.ceil(np.log2(max(vec, 1)))))
    m_min = max(m_min, int(np.log2(max(1, 4 // eb))))  # never split a 4-byte word
    line = 128 // eb  # elements per 128-byte bank line
    total = buf.layout.storage_elements(buf.shape) if len(buf.shape) == 1 else buf.shape[0] * buf.cols
    out = []
    for B in range(1, 6):
        for M in range(m_min, m_min + 3):
            if (1 << (M + B)) > line:
                continue
            for S in range(B, 11):
                sw = Swizzle(B, M, S)
                if total % sw.block == 0:
                    out.append(sw)
    return out


def _first_conflict_free(
    results, buf: Buffer, layouts, kind: str, variant: Variant | None = None
) -> tuple[Candidate | None, int]:
    """Try ``layouts`` in cost order; the first conflict-free one, else the one with the fewest wavefronts."""
    best, n = None, 0
    for lay in layouts:
        c = _candidate(results, buf, lay, kind, variant)
        n += 1
        if c is None:
            continue
        if c.conflict_free:
            return c, n
        if best is None or c.wavefronts < best.wavefronts:
            best = c
    return best, n


def _column_read(ar: AccessResult) -> bool:
    """Lanes of one instruction differ in row and share a column (reading down a column)."""
    if ar.rows is None:
        return False
    return bool(((ar.cols == ar.cols[:, :1]).all(axis=1) & (ar.rows != ar.rows[:, :1]).any(axis=1)).any())


def fix_buffer(
    spec: KernelSpec, buf: Buffer, results: list[AccessResult], variant: Variant | None = None
) -> BufferFix | None:
    """Search padding and swizzles for one buffer; None when its accesses are raw byte addresses.

    With ``variant`` (a kernel family's) every candidate is judged on the accesses the kernel issues under it;
    a variant marked ``redo = True`` re-derives the instructions per layout, so rows need only the element's
    alignment (the family refuses the layouts it cannot build)."""
    results = [r for r in results if not r.access.raw]
    if not results:
        return None
    base_layout = buf.layout
    baseline = _candidate(results, buf, base_layout, "baseline")
    redo = variant is not None and getattr(variant, "redo", False)
    align = required_alignment(results) if not redo else buf.elem_bytes
    eb = buf.elem_bytes
    if baseline.conflict_free:
        return BufferFix(
            buf, baseline, None, None, baseline, "already conflict-free: keep the layout", align, 1
        )
    if base_layout.tma is not None:  # a TMA tile: only the copy engine's swizzle modes (smemtile.model.tma)
        from smemtile.model.tma import mode_fix

        return mode_fix(buf, results, baseline, lambda lay: _candidate(results, buf, lay, "swizzle", variant))
    padding = swizzle = None
    n_pad = n_swz = 0
    if len(buf.shape) == 2:
        step = max(1, align // eb)
        pads = (Layout(pad=p) for p in range(step, MAX_PAD_BYTES // eb + 1, step))
        padding, n_pad = _first_conflict_free(results, buf, pads, "pad", variant)
    swizzles = (Layout(pad=0, swizzle=sw) for sw in _swizzles(buf, results, redo))
    swizzle, n_swz = _first_conflict_free(results, buf, swizzles, "swizzle", variant)
    tried = 1 + n_pad + n_swz
    rec, reason = _recommend(buf, baseline, padding, swizzle, align)
    if not rec.conflict_free and any(_column_read(r) for r in results) and align > buf.elem_bytes:
        reason += (
            f"; a column read cannot be conflict-free while rows keep {align}-byte vectors: store the tile "
            "transposed so that the inner loop reads along rows (what the SIMT GEMM kernel does with A)"
        )
    return BufferFix(buf, baseline, padding, swizzle, rec, reason, align, tried)


def _recommend(buf: Buffer, base: Candidate, pad: Candidate | None, swz: Candidate | None, align: int):
    if base.conflict_free:
        return base, "already conflict-free: keep the layout"
    size = buf.bytes(Layout())
    if pad and pad.conflict_free and pad.extra_bytes <= PAD_BUDGET * size:
        return pad, (
            f"padding by {pad.layout.pad} element(s) per row removes every conflict for "
            f"{pad.extra_bytes} extra bytes ({100 * pad.extra_bytes / size:.1f}% of the buffer), keeps "
            f"{align}-byte row alignment, and changes only the row stride"
        )
    if swz and swz.conflict_free:
        why = (
            f"no padding that keeps the rows {align}-byte aligned is conflict-free"
            if not (pad and pad.conflict_free)
            else f"padding would cost {pad.extra_bytes} bytes ({100 * pad.extra_bytes / size:.1f}%)"
        )
        return swz, f"{swz.layout.swizzle} is conflict-free with no extra memory; {why}"
    if pad and pad.conflict_free:
        return pad, (
            f"padding by {pad.layout.pad} element(s) is the only conflict-free option found "
            f"({pad.extra_bytes} extra bytes)"
        )
    options = [c for c in (pad, swz) if c is not None and c.wavefronts < base.wavefronts]
    if not options:
        return base, "no padding or swizzle tried reduces the wavefronts; keep the layout"
    best = min(options, key=lambda c: (c.wavefronts, c.extra_bytes))
    return best, (
        f"no option is conflict-free; {best.layout.describe()} comes closest: "
        f"{best.wavefronts} wavefronts against an ideal {best.ideal} (baseline {base.wavefronts})"
    )


def fix_spec(
    spec: KernelSpec, results: tuple[AccessResult, ...] | None = None, *, variant: Variant | None = None
) -> FixReport:
    """Fixes for every buffer the spec's accesses touch through logical coordinates (``variant``: see
    :func:`fix_buffer`)."""
    results = results if results is not None else analyze_spec(spec)
    fixes = []
    for buf in spec.buffers:
        f = fix_buffer(spec, buf, [r for r in results if r.access.buffer == buf.name], variant)
        if f is not None:
            fixes.append(f)
    return FixReport(tuple(fixes), results)


def recommend(spec: KernelSpec) -> FixReport:
    """Alias used by codegen: ``recommend(spec).layouts`` is the fixed variant's layouts."""
    return fix_spec(spec)
