"""Hopper TMA / wgmma shared-memory layouts: the hardware's rules, the four notations, the widest mode.

The copy engine (``cp.async.bulk.tensor``) writes a box into shared memory row after row and swizzles the byte
address in one of four modes; ``wgmma`` reads the same bytes through a 64-bit shared-memory descriptor that must
name the same mode. One mode, four spellings (``notations``)::

    mode   CuTe (bytes)      TMA tensor map                 wgmma descriptor (bits 62-63)  Triton NVMMASharedLayout
    none   -                 CU_TENSOR_MAP_SWIZZLE_NONE (0)  0  no swizzle (interleave)     vec 1, perPhase 1, maxPhase 1
    32B    Swizzle<1,4,3>    CU_TENSOR_MAP_SWIZZLE_32B  (1)  3  32-byte swizzle             vec 16/e, perPhase 4, maxPhase 2
    64B    Swizzle<2,4,3>    CU_TENSOR_MAP_SWIZZLE_64B  (2)  2  64-byte swizzle             vec 16/e, perPhase 2, maxPhase 4
    128B   Swizzle<3,4,3>    CU_TENSOR_MAP_SWIZZLE_128B (3)  1  128-byte swizzle            vec 16/e, perPhase 1, maxPhase 8

    byte address bits:  ... | 9 8 7 | 6 5 4 | 3 2 1 0 |      Swizzle<3,4,3>: the 16-byte chunk (bits 4-6) ^= the
                              line    chunk   in chunk        128-byte line within 1024 bytes (bits 7-9)

(e = element bytes; Triton's vec/perPhase/maxPhase are ``128/elementBitWidth``, ``128/swizzle``, ``swizzle/16``.)
The pattern repeats every 8 lines of the span: 256, 512, 1024 bytes, which is why a tile's base must be aligned to
that much (the descriptor's 3-bit base offset is 0 only then, and a TMA write and a wgmma read that disagree on
the phase see different permutations).

Rules checked here (:func:`rule_violations`; ``analyze`` fails with exit 1 on the first, one line):

* the tile's base (``base``, bytes) and every stage's start aligned to 128 (none), 256, 512 or 1024 bytes;
* the box's inner dimension (one tile row) a multiple of 16 bytes and, when swizzled, within the swizzle span
  (``cuTensorMapEncodeTiled`` refuses wider boxes: split the tile into span-wide column panels); a tile of more
  than 256 rows is several boxes;
* the global tensor's row stride (``global_stride``) a multiple of 16 bytes (``cuTensorMapEncodeTiled``);
* the wgmma descriptor's mode (``wgmma_swizzle``) equal to the TMA mode.

The widest mode the row bytes allow is the one CUTLASS (``ss_smem_selector``), Triton (``NVMMASharedLayout``),
DeepGEMM and ThunderKittens pick: the largest span (16 for none, 32, 64, 128) that divides the row. Only then is
the tile a whole number of the descriptor's canonical atoms (8 rows x span bytes), and the eight 16-byte rows of
a core matrix (what an ldmatrix phase, a stmatrix phase or the tensor core reads at once) land in eight distinct
16-byte bank groups when the span is 128 bytes. :func:`mode_table` runs the bank model on the buffer's accesses
under every mode so the report shows it rather than asserts it. Pure: numpy and the model only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from smemtile.errors import SmemtileError
from smemtile.model.banks import analyze_addresses
from smemtile.model.layout import TMA_MODES, Layout, tma_byte_swizzle

SPAN = {
    "none": 16,
    "32B": 32,
    "64B": 64,
    "128B": 128,
}  # canonical atom row bytes (none: the 16-byte core row)
ALIGN = {"none": 128, "32B": 256, "64B": 512, "128B": 1024}  # the pattern's repeat (none: TMA's 128 bytes)
TMA_ENUM = {m: (f"CU_TENSOR_MAP_SWIZZLE_{m.upper()}", i) for i, m in enumerate(TMA_MODES)}
WGMMA_LAYOUT_TYPE = {"none": 0, "128B": 1, "64B": 2, "32B": 3}  # matrix descriptor bits 62-63 (sm_90)


class TmaRuleBroken(SmemtileError):
    """A TMA tile breaks a rule of the hardware (alignment, box width, global stride, mode agreement)."""

    exit_code = 1


@dataclass(frozen=True)
class Notations:
    """One mode for one element size, in the four ecosystems' vocabulary."""

    mode: str
    elem_bytes: int

    @property
    def byte_swizzle(self) -> str:
        sw = tma_byte_swizzle(self.mode)
        return str(sw) if sw is not None else "none (identity)"

    @property
    def element_swizzle(self) -> str:
        sw = Layout.for_tma(self.mode, self.elem_bytes).swizzle
        return str(sw) if sw is not None else "none (identity)"

    @property
    def tma(self) -> tuple[str, int]:
        return TMA_ENUM[self.mode]

    @property
    def wgmma(self) -> dict:
        """The K-major descriptor fields for a tile of span-byte rows (the canonical atom); one wgmma k-step
        (k16 for 16-bit types) advances the start address by 32 bytes."""
        span = SPAN[self.mode]
        if self.mode == "none":  # 8x16-byte core matrices, each 128 contiguous bytes
            lbo, sbo = "bytes between core matrices along K (rows x 16 for a [rows][16 B] box)", 128
        else:
            lbo, sbo = "unused when K fits one atom (encode 1)", 8 * span
        return {
            "layout_type": WGMMA_LAYOUT_TYPE[self.mode],
            "layout_name": "no swizzle (interleave)" if self.mode == "none" else f"{self.mode} swizzle",
            "sbo_bytes": sbo,
            "lbo": lbo,
            "base_offset": 0,
            "k_step_bytes": 32,
        }

    @property
    def triton(self) -> dict:
        if self.mode == "none":
            return {"swizzle_byte_width": 0, "vec": 1, "per_phase": 1, "max_phase": 1}
        s = SPAN[self.mode]
        return {
            "swizzle_byte_width": s,
            "vec": 16 // self.elem_bytes,
            "per_phase": 128 // s,
            "max_phase": s // 16,
        }

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "cute_bytes": self.byte_swizzle,
            "cute_elements": self.element_swizzle,
            "tma": {"enum": self.tma[0], "value": self.tma[1]},
            "wgmma": self.wgmma,
            "triton": self.triton,
            "alignment_bytes": ALIGN[self.mode],
        }


def row_bytes(buf) -> int:
    return int(buf.shape[-1]) * buf.elem_bytes


def widest_mode(nbytes: int) -> str:
    """The widest mode whose span divides a row of ``nbytes`` (16-byte rows and narrower: none)."""
    for mode in ("128B", "64B", "32B"):
        if nbytes % SPAN[mode] == 0:
            return mode
    return "none"


def rule_violations(buf) -> list[str]:
    """Every hardware rule a TMA buffer breaks, each one line (empty when it is fine or not a TMA tile)."""
    lay = buf.layout
    if lay.tma is None:
        return []
    mode, out = lay.tma, []
    align, rb = ALIGN[mode], row_bytes(buf)
    if lay.base % align:
        out.append(
            f"base {lay.base} is not {align}-byte aligned: the {mode} pattern repeats every {align} bytes "
            "and the wgmma descriptor (base offset 0) assumes it starts there"
        )
    stage = buf.bytes() // buf.stages
    if buf.stages > 1 and stage % align:
        out.append(
            f"one stage is {stage} bytes, not a multiple of {align}: stage 1 would start misaligned for "
            f"{mode}"
        )
    if rb % 16:
        out.append(f"the box's inner dimension is {rb} bytes, not a multiple of 16 (TMA moves 16-byte units)")
    elif mode != "none" and rb > SPAN[mode]:
        out.append(
            f"the box's inner dimension is {rb} bytes, wider than the {SPAN[mode]}-byte {mode} swizzle "
            f"span (cuTensorMapEncodeTiled refuses it): store the tile as {rb // SPAN[mode]} column panels "
            f"of {SPAN[mode]} bytes"
        )
    if lay.global_stride is not None and lay.global_stride % 16:
        e = buf.elem_bytes
        out.append(
            f"global row stride {lay.global_stride} bytes is not a multiple of 16 (cuTensorMapEncodeTiled "
            f"refuses it): pad the leading dimension to a multiple of {max(1, 16 // e)} elements"
        )
    if lay.wgmma is not None and lay.wgmma != mode:
        out.append(
            f"mode mismatch: TMA writes with {TMA_ENUM[mode][0]} but the wgmma descriptor reads layout "
            f"type {WGMMA_LAYOUT_TYPE[lay.wgmma]} ({lay.wgmma}): the tensor cores would read permuted data"
        )
    return out


def check(spec) -> None:
    """Raise :class:`TmaRuleBroken` (exit 1) naming the first rule a TMA buffer of ``spec`` breaks."""
    for b in spec.buffers:
        bad = rule_violations(b)
        if bad:
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            raise TmaRuleBroken(f"{spec.source}: buffers.{b.name}.layout: {bad[0]}{more}")


@dataclass(frozen=True)
class ModeRow:
    """The buffer's accesses under one mode."""

    mode: str
    tma_legal: bool  # cuTensorMapEncodeTiled accepts the box with this mode
    canonical: bool  # the row is one canonical wgmma atom row (span bytes): the descriptor can describe it
    per_access: dict  # access name -> (worst wavefronts, ideal)
    wavefronts: int  # all instructions of all the buffer's accesses
    ideal: int

    @property
    def conflict_free(self) -> bool:
        return self.wavefronts == self.ideal

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "tma_legal": self.tma_legal,
            "wgmma_canonical": self.canonical,
            "alignment_bytes": ALIGN[self.mode],
            "total_wavefronts": self.wavefronts,
            "total_ideal_wavefronts": self.ideal,
            "conflict_free": self.conflict_free,
            "accesses": {
                k: {"wavefronts": w, "ideal_wavefronts": i} for k, (w, i) in self.per_access.items()
            },
        }


def mode_table(buf, results) -> list[ModeRow]:
    """The bank model on ``results`` (this buffer's accesses, analysed) under each of the four modes."""
    rb, rows = row_bytes(buf), []
    mine = [r for r in results if r.access.buffer == buf.name and r.rows is not None]
    for mode in TMA_MODES:
        lay = Layout.for_tma(mode, buf.elem_bytes)
        per, tot, ideal = {}, 0, 0
        for ar in mine:
            off = lay.offset(ar.rows, ar.cols, buf.cols) * buf.elem_bytes
            act = ar.bank.active
            r = analyze_addresses(
                np.where(act, off, 0),
                ar.access.op,
                ar.access.width,
                ar.access.matrices,
                sources=ar.bank.sources,
                active=act,
            )
            worst = int(np.argmax(r.wavefronts))
            per[ar.access.name] = (int(r.wavefronts[worst]), int(r.ideal_wavefronts[worst]))
            tot += int(r.wavefronts.sum())
            ideal += int(r.ideal_wavefronts.sum())
        legal = rb % 16 == 0 and (mode == "none" or rb <= SPAN[mode])
        rows.append(ModeRow(mode, legal, rb == SPAN[mode], per, tot, ideal))
    return rows


@dataclass(frozen=True)
class TmaBuffer:
    """The TMA section of ``analyze`` for one buffer: its mode in four notations, the modes compared, the pick."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    mode: str
    row_bytes: int
    notations: Notations
    modes: tuple[ModeRow, ...]
    recommended: str
    reason: str

    def to_dict(self) -> dict:
        return {
            "buffer": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "mode": self.mode,
            "row_bytes": self.row_bytes,
            "notations": self.notations.to_dict(),
            "modes": [m.to_dict() for m in self.modes],
            "recommended": self.recommended,
            "recommended_notations": Notations(self.recommended, self.notations.elem_bytes).to_dict(),
            "reason": self.reason,
        }


def _reason(buf, rows: list[ModeRow], pick: str) -> str:
    rb = row_bytes(buf)
    by = {r.mode: r for r in rows}
    chosen = by[pick]
    cost = f"{chosen.wavefronts} wavefronts (ideal {chosen.ideal}) over the buffer's accesses"
    if not chosen.per_access:
        cost = "no lane access of this buffer is described, so the bank model has nothing to compare"
    parts = [
        f"rows are {rb} bytes: {pick} is the widest mode whose span ({SPAN[pick]} B) divides the row, so the "
        f"tile is whole wgmma atoms of 8 rows x {SPAN[pick]} B (CUTLASS, Triton, DeepGEMM and ThunderKittens "
        f"pick the same); under it {cost}"
    ]
    if chosen.per_access:
        worse = [
            f"{r.mode} {r.wavefronts}" for r in rows if r.mode != pick and r.wavefronts > chosen.wavefronts
        ]
        if worse:
            parts.append(
                "narrower modes cost more (" + ", ".join(worse) + "): fewer distinct chunk phases, so "
                "rows of one core matrix share 16-byte bank groups"
            )
    wider = [m for m in TMA_MODES if SPAN[m] > SPAN[pick] and m != "none"]
    if wider and rb < 128:
        parts.append(
            f"{', '.join(wider)} would not be whole atoms on {rb}-byte rows (the descriptor cannot "
            "describe them)"
        )
    if rb > 128:
        parts.append(
            f"a {rb}-byte row is wider than any span: TMA needs {rb // 128} column panels of 128 bytes"
        )
    return "; ".join(parts)


def tma_report(spec, results) -> list[TmaBuffer]:
    """The TMA section for every buffer of ``spec`` with a ``tma_swizzle`` layout."""
    out = []
    for b in spec.buffers:
        if b.layout.tma is None:
            continue
        rows = mode_table(b, results)
        pick = widest_mode(row_bytes(b))
        out.append(
            TmaBuffer(
                b.name,
                b.dtype,
                tuple(b.shape),
                b.layout.tma,
                row_bytes(b),
                Notations(b.layout.tma, b.elem_bytes),
                tuple(rows),
                pick,
                _reason(b, rows, pick),
            )
        )
    return out


def mode_fix(buf, results, baseline, judge):
    """The fix search for a TMA tile: its only layouts are the copy engine's modes, so the candidate is the widest
    mode the rows allow (``judge(layout)`` scores it as smemtile.model.fix does); padding never applies."""
    from smemtile.model.fix import BufferFix

    lay = buf.layout
    pick = widest_mode(row_bytes(buf))
    cand = judge(Layout.for_tma(pick, buf.elem_bytes, base=lay.base, global_stride=lay.global_stride))
    if cand is not None and pick != lay.tma and cand.wavefronts < baseline.wavefronts:
        why = (
            f"TMA {pick}: the widest mode the {row_bytes(buf)}-byte rows allow ({cand.wavefronts} wavefronts "
            f"against {baseline.wavefronts}); padding is not a TMA layout"
        )
        return BufferFix(buf, baseline, None, cand, cand, why, 16, 2)
    why = (
        f"no other TMA mode does better on {row_bytes(buf)}-byte rows ({pick} is the widest they allow); "
        "padding is not a TMA layout"
    )
    return BufferFix(buf, baseline, None, cand, baseline, why, 16, 2)
