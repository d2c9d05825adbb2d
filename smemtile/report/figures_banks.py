"""The report page's bank figures, drawn from the same data the tables print (``report.banks``).

* :func:`lanes_by_banks`: one instruction as a 32 x 32 grid, lane (row) against bank (column); a cell is filled
  where the lane reads or writes a word of that bank, coloured by how many distinct words the bank delivers in
  the lane's phase (``PhaseDetail.words_per_bank``: 1 green, more yellow to red). The busiest bank of a phase is
  its wavefront count, so the reddest cell of a phase row band is the conflict.
* :func:`buffer_words`: the same instruction on the buffer's storage, rows x 4-byte words, each cell labelled
  with its bank (CuTe's ``print_layout`` habit) and coloured by the same bank load.
* :func:`same_instruction`: the instruction of an access under another layout with the same warp and loop values
  (before and after a fix show one instruction, never each variant's own worst).
* :func:`layout_grid`: a layout as a grid: for a swizzle each 2**M-element chunk of a logical row and the chunk
  it lands in (TMA modes too); for padding each element's bank, pad elements hatched.
"""

from __future__ import annotations

import numpy as np

from smemtile.model.analysis import AccessResult
from smemtile.model.banks import BANKS
from smemtile.model.layout import Layout
from smemtile.model.spec import Buffer
from smemtile.report.banks import instruction_detail
from smemtile.report.svg import IDLE, Svg, hue, load_colour

MAX_ROWS = 40  # buffer rows a heatmap shows (the rows the instruction touches, gaps collapsed)
LINE = 128  # bytes: the unit rows fall back to when a buffer's row is not whole words or too wide


def same_instruction(before: AccessResult, i: int, after: AccessResult) -> int | None:
    """Index in ``after`` of the instruction with ``before``'s warp and loop values at ``i`` (None if absent)."""
    key = (int(before.warp[i]), tuple(sorted(before.loop_values[i].items())))
    for j in range(len(after.warp)):
        if int(after.warp[j]) == key[0] and tuple(sorted(after.loop_values[j].items())) == key[1]:
            return j
    return None


def bank_loads(ar: AccessResult, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(load[lane, bank], phase[lane], words[lane, k]) of instruction ``i``: the distinct words the bank
    delivers in the lane's phase where the lane touches the bank, else 0; phase -1 for an idle lane."""
    b = ar.bank
    nw = max(1, b.width // 4) if ar.access.op not in ("ldmatrix", "stmatrix") else 4
    words = (b.addresses[i] // 4)[:, None] + np.arange(nw)
    load = np.zeros((32, BANKS), dtype=np.int64)
    phase = np.full(32, -1, dtype=np.int64)
    for ph in instruction_detail(ar, i):
        per = np.asarray(ph.words_per_bank)
        for lane in ph.lanes:
            phase[lane] = ph.phase
            for w in words[lane]:
                load[lane, int(w) % BANKS] = per[int(w) % BANKS]
    return load, phase, words


def _caption(ar: AccessResult, i: int) -> str:
    return (
        f"{ar.access.name} @ {ar.label(i)}: {int(ar.bank.wavefronts[i])} wavefronts (ideal "
        f"{int(ar.bank.ideal_wavefronts[i])}), {ar.layout.describe()}"
    )


def lanes_by_banks(ar: AccessResult, i: int, variant: str) -> Svg:
    """Lane x bank heatmap of instruction ``i`` (``variant``: before / after, for the label and the tests)."""
    load, phase, _ = bank_loads(ar, i)
    cell_w, cell_h, left, top = 16, 12, 92, 46
    wf, ideal = int(ar.bank.wavefronts[i]), int(ar.bank.ideal_wavefronts[i])
    unit = "group" if ar.bank.sources is not None else "phase"
    label = f"{variant}: lanes x banks, {_caption(ar, i)}"
    svg = Svg(
        left + BANKS * cell_w + 10,
        top + 32 * cell_h + 40,
        label,
        data_figure="lanes-banks",
        data_variant=variant,
        data_access=ar.access.name,
        data_wavefronts=wf,
        data_ideal=ideal,
    )
    svg.text(
        0,
        14,
        f"{variant}: {wf} wavefronts (ideal {ideal})",
        size=13,
        weight="bold",
        fill="#c92a2a" if wf > ideal else "#2b8a3e",
    )
    svg.text(0, 28, f"{ar.access.name} @ {ar.label(i)} · {ar.layout.describe()}", size=10, fill="#495057")
    for b in range(BANKS):
        svg.text(left + b * cell_w + cell_w / 2, top - 4, b, size=7, anchor="middle", fill="#495057")
    svg.text(left - 4, top - 4, "bank", size=8, anchor="end", fill="#495057")
    # untouched cells: one background with white grid lines (a thousand empty rectangles would weigh 60 KB)
    svg.rect(left, top, BANKS * cell_w - 1, 32 * cell_h - 1, IDLE)
    for b in range(1, BANKS):
        svg.line(
            left + b * cell_w - 0.5, top, left + b * cell_w - 0.5, top + 32 * cell_h - 1, stroke="#ffffff"
        )
    for lane in range(1, 32):
        svg.line(
            left,
            top + lane * cell_h - 0.5,
            left + BANKS * cell_w - 1,
            top + lane * cell_h - 0.5,
            stroke="#ffffff",
        )
    for lane in range(32):
        y = top + lane * cell_h
        idle = phase[lane] < 0
        svg.text(
            left - 4,
            y + cell_h - 3,
            f"lane {lane} · {unit} {phase[lane]}" if not idle else f"lane {lane} idle",
            size=8,
            anchor="end",
            fill="#adb5bd" if idle else "#343a40",
        )
        for b in np.flatnonzero(load[lane]).tolist():
            n = int(load[lane, b])
            tip = f"lane {lane}, bank {b}: the bank delivers {n} distinct word{'s' if n != 1 else ''} in {unit} {phase[lane]}"
            svg.rect(left + b * cell_w, y, cell_w - 1, cell_h - 1, load_colour(n), title=tip)
        if lane and phase[lane] != phase[lane - 1]:
            svg.line(left - 2, y - 0.5, left + BANKS * cell_w, y - 0.5, stroke="#212529", width=1)
    _legend(svg, 0, top + 32 * cell_h + 14)
    return svg


def _legend(svg: Svg, x: float, y: float) -> None:
    svg.text(x, y + 9, "distinct words the bank delivers:", size=9, fill="#495057")
    xs = x + 190
    for n in (1, 2, 4, 8, 16, 32):
        svg.rect(xs, y, 14, 11, load_colour(n))
        svg.text(xs + 17, y + 9, n, size=9, fill="#495057")
        xs += 34
    svg.rect(xs, y, 14, 11, IDLE)
    svg.text(xs + 17, y + 9, "not touched", size=9, fill="#495057")


def _row_bytes(buf: Buffer, lay: Layout) -> tuple[int, str]:
    """Bytes per heatmap row and what a row is: the buffer's stored row, or a 128-byte line."""
    if len(buf.shape) > 1:
        rb = lay.row_stride(buf.cols) * buf.elem_bytes
        if rb % 4 == 0 and 4 <= rb <= 72 * 4:
            return rb, "row"
    return LINE, "128-byte line"


def buffer_words(ar: AccessResult, i: int, variant: str) -> Svg:
    """Rows x 4-byte words of the buffer's storage, the words instruction ``i`` touches coloured by bank load."""
    load, phase, words = bank_loads(ar, i)
    rb, what = _row_bytes(ar.buffer, ar.layout)
    per_row = rb // 4
    word_load: dict[int, int] = {}
    for lane in range(32):
        if phase[lane] < 0:
            continue
        for w in words[lane]:
            word_load[int(w)] = max(word_load.get(int(w), 0), int(load[lane, int(w) % BANKS]))
    rows = sorted({w // per_row for w in word_load})
    shown = _rows_to_show(rows)
    cell = max(8, min(18, 620 // per_row))
    left, top = 74, 40
    height = top + len(shown) * cell + 30
    svg = Svg(
        max(420, left + per_row * cell + 10),
        height,
        f"{variant}: {ar.buffer.name} storage, {what}s x 4-byte words, {_caption(ar, i)}",
        data_figure="buffer-words",
        data_variant=variant,
        data_access=ar.access.name,
        data_wavefronts=int(ar.bank.wavefronts[i]),
    )
    svg.text(
        0,
        14,
        f"{ar.buffer.name}: {what}s x 4-byte words ({rb} bytes per {what}), bank in each cell",
        size=11,
        weight="bold",
    )
    svg.text(
        0, 28, f"{len(word_load)} words touched by {ar.access.name} @ {ar.label(i)}", size=9, fill="#495057"
    )
    for c in range(0, per_row, 4 if cell < 14 else 1):
        svg.text(left + c * cell + cell / 2, top - 3, c, size=7, anchor="middle", fill="#868e96")
    for k, r in enumerate(shown):
        y = top + k * cell
        if r is None:
            svg.text(left - 6, y + cell - 2, "⋮", size=10, anchor="end", fill="#868e96")
            svg.line(
                left,
                y + cell / 2,
                left + per_row * cell,
                y + cell / 2,
                stroke="#ced4da",
                stroke_dasharray="4 3",
            )
            continue
        svg.text(left - 6, y + cell - 3, f"{what.split()[-1]} {r}", size=8, anchor="end", fill="#343a40")
        for c in range(per_row):
            w = r * per_row + c
            n = word_load.get(w, 0)
            tip = f"byte {4 * w}: bank {w % BANKS}, delivers {n} distinct word(s) in its phase" if n else None
            svg.rect(left + c * cell, y, cell - 1, cell - 1, load_colour(n), title=tip)
            if cell >= 14:
                svg.text(
                    left + c * cell + (cell - 1) / 2,
                    y + cell - 5,
                    w % BANKS,
                    size=7,
                    anchor="middle",
                    fill="#ffffff" if n > 1 else "#495057" if n == 0 else "#0b3d17",
                )
    return svg


def _rows_to_show(rows: list[int]) -> list[int | None]:
    """Touched rows with gaps of one or two untouched rows filled in and longer gaps as one ``None``."""
    out: list[int | None] = []
    for r in rows:
        last = next((x for x in reversed(out) if x is not None), None)
        if last is not None and r - last > 3:
            out.append(None)
        elif last is not None:
            out.extend(range(last + 1, r))
        out.append(r)
        if len(out) >= MAX_ROWS:
            break
    return out


def layout_grid(buf: Buffer, lay: Layout, label: str, *, max_rows: int = 16) -> Svg:
    """A swizzle as chunk -> chunk (each logical 2**M-element chunk of a row and where it is stored), or a
    padded / dense layout as each element's bank (pad elements hatched)."""
    if (lay.swizzle is not None and lay.swizzle.B > 0) or lay.tma is not None:  # TMA none: the identity
        return _swizzle_grid(buf, lay, label, max_rows)
    return _bank_grid(buf, lay, label, min(max_rows, 8))


def _swizzle_grid(buf: Buffer, lay: Layout, label: str, max_rows: int) -> Svg:
    sw = lay.swizzle
    chunk = (1 << sw.M) if sw is not None else max(1, 16 // buf.elem_bytes)  # the swizzle never splits one
    cols = buf.cols if len(buf.shape) > 1 else LINE // buf.elem_bytes
    stride = lay.row_stride(cols) if len(buf.shape) > 1 else cols
    n_chunks = max(1, min(16, cols // chunk))
    period_rows = max(1, sw.period // max(1, stride)) if sw is not None else 8
    n_rows = max(1, min(max_rows, buf.rows if len(buf.shape) > 1 else 16, max(8, period_rows)))
    cell, left, top = 30, 58, 44
    svg = Svg(
        max(420, left + n_chunks * cell + 10),
        top + n_rows * 20 + 30,
        label,
        data_figure="layout",
        data_layout=lay.describe(),
    )
    svg.text(0, 14, label, size=11, weight="bold")
    what = str(sw) if sw is not None else "no swizzle"
    svg.text(
        0,
        28,
        f"{what}: logical chunk ({chunk} elements = {chunk * buf.elem_bytes} B) -> stored chunk",
        size=9,
        fill="#495057",
    )
    for c in range(n_chunks):
        svg.text(left + c * cell + cell / 2, top - 4, c, size=8, anchor="middle", fill="#868e96")
    for r in range(n_rows):
        y = top + r * 20
        svg.text(left - 6, y + 14, f"row {r}", size=8, anchor="end")
        for c in range(n_chunks):
            o = int(lay.offset(r, c * chunk, cols))
            dr, dc = divmod(o, stride)
            dc //= chunk
            txt = str(dc) if dr == r else f"{dr}.{dc}"
            svg.rect(
                left + c * cell,
                y,
                cell - 2,
                18,
                hue(dc, n_chunks),
                title=f"row {r}, chunk {c} -> stored in row {dr}, chunk {dc}",
            )
            svg.text(
                left + c * cell + (cell - 2) / 2,
                y + 13,
                txt,
                size=9,
                anchor="middle",
                weight="bold" if dc != c else None,
            )
    svg.text(
        0, top + n_rows * 20 + 16, "bold: the chunk moved; r.c: stored in another row", size=9, fill="#495057"
    )
    return svg


def _bank_grid(buf: Buffer, lay: Layout, label: str, max_rows: int) -> Svg:
    e = buf.elem_bytes
    cols = buf.cols if len(buf.shape) > 1 else LINE // e
    stride = lay.row_stride(cols) if len(buf.shape) > 1 else cols
    n_el = min(stride, 72)
    cell = max(8, min(18, 640 // n_el))
    n_rows = max(1, min(max_rows, buf.rows if len(buf.shape) > 1 else 4))
    left, top = 58, 44
    svg = Svg(
        max(420, left + n_el * cell + 10),
        top + n_rows * (cell + 2) + 26,
        label,
        data_figure="layout",
        data_layout=lay.describe(),
    )
    svg.text(0, 14, label, size=11, weight="bold")
    more = f" (first {n_el} of {stride})" if n_el < stride else ""
    svg.text(
        0,
        28,
        f"bank of each element (row stride {stride} elements = {stride * e} B{more}); hatched: padding",
        size=9,
        fill="#495057",
    )
    for r in range(n_rows):
        y = top + r * (cell + 2)
        svg.text(left - 6, y + cell - 4, f"row {r}", size=8, anchor="end")
        for c in range(n_el):
            bank = (r * stride + c) * e // 4 % BANKS
            pad = c >= cols
            svg.rect(
                left + c * cell,
                y,
                cell - 1,
                cell,
                "#dee2e6" if pad else hue(bank, BANKS, 72),
                title=f"row {r}, element {c}: bank {bank}" + (" (padding)" if pad else ""),
                stroke="#868e96" if pad else None,
                stroke_dasharray="2 2" if pad else None,
            )
            if cell >= 14:
                svg.text(left + c * cell + (cell - 1) / 2, y + cell - 5, bank, size=7, anchor="middle")
    return svg
