"""Declarations, bank diagrams and before/after diffs for a buffer's layout."""

from __future__ import annotations

import difflib

import numpy as np
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

from smemtile.fileio import printable
from smemtile.model.analysis import AccessResult
from smemtile.model.banks import BANKS
from smemtile.model.layout import Layout
from smemtile.model.spec import Buffer

CTYPES = {
    "f64": "double",
    "f32": "float",
    "tf32": "float",
    "f16": "__half",
    "bf16": "__nv_bfloat16",
    "f8e4m3": "__nv_fp8_e4m3",
    "f8e5m2": "__nv_fp8_e5m2",
    "i64": "long long",
    "i32": "int",
    "i16": "short",
    "i8": "signed char",
    "u64": "unsigned long long",
    "u32": "unsigned",
    "u16": "unsigned short",
    "u8": "unsigned char",
}


def declaration(buf: Buffer, lay: Layout) -> list[str]:
    """The ``__shared__`` declaration and the index expression for ``lay`` (stages included)."""
    ct = CTYPES[buf.dtype]
    st = f"[{buf.stages}]" if buf.stages > 1 else ""
    s_idx = "[stage]" if buf.stages > 1 else ""
    nbytes = buf.bytes(lay)
    if len(buf.shape) == 1:
        n = buf.shape[0] + lay.pad
        lines = [f"__shared__ __align__(128) {ct} {buf.name}{st}[{n}];  // {nbytes} bytes"]
        idx = "swz(i)" if lay.swizzle else "i"
        lines.append(f"// element i: {buf.name}{s_idx}[{idx}]")
    else:
        rows, cols = buf.shape
        if lay.swizzle is None:
            dim = f"{cols} + {lay.pad}" if lay.pad else f"{cols}"
            align = 16 if (cols + lay.pad) * buf.elem_bytes % 16 == 0 else 4
            lines = [
                f"__shared__ __align__({max(align, 16)}) {ct} {buf.name}{st}[{rows}][{dim}];  // {nbytes} bytes",
                f"// element (r, c): {buf.name}{s_idx}[r][c]   (row stride {cols + lay.pad} elements)",
            ]
        else:
            stride = f"({cols} + {lay.pad})" if lay.pad else f"{cols}"
            sw = lay.swizzle
            lines = [
                f"__shared__ __align__(128) {ct} {buf.name}{st}[{rows} * {stride}];  // {nbytes} bytes",
                f"// {sw}: XOR bits [{sw.M + sw.S}, {sw.M + sw.S + sw.B}) of the offset into bits "
                f"[{sw.M}, {sw.M + sw.B})",
                f"__device__ __forceinline__ int {buf.name}_swz(int o) {{ return {sw.cpp()}; }}",
                f"// element (r, c): {buf.name}{s_idx}[{buf.name}_swz(r * {stride} + c)]",
            ]
    return lines


def layout_diff(buf: Buffer, before: Layout, after: Layout) -> list[str]:
    """Unified diff of the declarations and index arithmetic."""
    a, b = declaration(buf, before), declaration(buf, after)
    return [ln.rstrip("\n") for ln in difflib.unified_diff(a, b, "before", "after", lineterm="", n=3)]


def bank_grid(buf: Buffer, lay: Layout, max_rows: int = 16, max_words: int = 32) -> np.ndarray:
    """[rows, words] bank of each 4-byte word of the first rows/columns (one cell per word)."""
    eb = buf.elem_bytes
    per_word = max(1, 4 // eb)
    rows = buf.shape[0] if len(buf.shape) == 2 else 1
    cols = buf.cols
    nr = min(rows, max_rows)
    step = per_word
    ncol = min((cols * eb + 3) // 4, max_words)
    r = np.arange(nr)[:, None]
    c = (np.arange(ncol) * step)[None, :]
    c = np.minimum(c, cols - 1)
    off = lay.offset(r, c, cols) if len(buf.shape) == 2 else (lay.swizzle(c) if lay.swizzle else c)
    return (off * eb // 4) % BANKS


def diagram(buf: Buffer, lay: Layout, hot: AccessResult | None = None, max_rows: int = 16) -> BankDiagram:
    """Tile rows x words, each cell the bank; cells read by ``hot``'s worst instruction coloured (red: their
    bank delivers more than one distinct word, green: conflict-free). Narrow consoles get the words in blocks
    of 16 or 8 columns, one block under the other (see ``BankDiagram``)."""
    grid = bank_grid(buf, lay, max_rows=max_rows)
    eb = buf.elem_bytes
    per_word = max(1, 4 // eb)
    marks: dict[tuple[int, int], str] = {}
    if hot is not None and hot.rows is not None:
        i = hot.worst
        for ph in hot.bank.detail(i):
            per_bank = np.asarray(ph.words_per_bank)
            for lane in ph.lanes:
                r, c = int(hot.rows[i, lane]), int(hot.cols[i, lane]) // per_word
                b = int(grid[r, c]) if r < grid.shape[0] and c < grid.shape[1] else None
                if b is not None:
                    marks[(r, c)] = "bold white on red" if per_bank[b] > 1 else "bold black on green"
    labels = [str(j * per_word) if per_word > 1 else str(j) if eb <= 4 else str(j * 4 // eb)
              for j in range(grid.shape[1])]  # fmt: skip
    title = Text(f"{printable(buf.name)} ({lay.describe()}): bank of each word, rows 0-{grid.shape[0] - 1}")
    return BankDiagram(title, grid, marks, labels)


class BankDiagram:
    """The bank diagram, laid out for the width it is rendered at: all 32 words of a row on one line when they
    fit (about 100 columns), else blocks of 16 (or 8) words, each block a small table with the row numbers.
    Every cell keeps its full number: nothing is cut to an ellipsis."""

    CELL = 3  # two digits and a space

    def __init__(self, title: Text, grid: np.ndarray, marks: dict[tuple[int, int], str], labels: list[str]):
        self.title, self.grid, self.marks, self.labels = title, grid, marks, labels

    def words_per_block(self, width: int) -> int:
        n = self.grid.shape[1]
        head = max(3, len(str(self.grid.shape[0] - 1)))
        per = n
        while per > 4 and head + self.CELL * per > width:
            per = (per + 1) // 2
        return per

    def block(self, start: int, stop: int) -> Table:
        t = Table(box=None, pad_edge=False, show_header=True, padding=(0, 0, 0, 1), collapse_padding=True)
        t.add_column("row", justify="right", style="dim", no_wrap=True)
        for j in range(start, stop):
            t.add_column(self.labels[j], justify="right", no_wrap=True, min_width=2)
        for r in range(self.grid.shape[0]):
            t.add_row(str(r), *[Text(f"{int(self.grid[r, c]):2d}", style=self.marks.get((r, c), ""))
                                for c in range(start, stop)])  # fmt: skip
        return t

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        n = self.grid.shape[1]
        per = self.words_per_block(options.max_width)
        title = self.title.copy()
        if per < n:
            title.append(f"; words in blocks of {per}")
        yield title
        for start in range(0, n, per):
            yield self.block(start, min(n, start + per))
