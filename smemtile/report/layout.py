"""Declarations, bank diagrams and before/after diffs for the spec's buffers.

``declarations(buffers, layouts, arch)`` gives the exact C++ for a layout: up to the architecture's static limit
(48 KiB: ptxas refuses more with "too much shared data") each buffer is a ``__shared__`` array; above it every
buffer is carved out of one ``extern __shared__`` array (128-byte aligned offsets; TMA tiles at their mode's
alignment) and the host must raise the per-block limit with ``cudaFuncSetAttribute(kernel,
cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)`` before the launch, which passes the same bytes as its
third launch parameter. tests/test_analyze_declarations.py builds both forms with nvcc (64 KB and 192 KB).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import numpy as np
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text

from smemtile.fileio import printable
from smemtile.model.analysis import AccessResult
from smemtile.model.arch import Arch
from smemtile.model.banks import BANKS
from smemtile.model.dtypes import DTYPES, INCLUDES
from smemtile.model.layout import Layout
from smemtile.model.spec import Buffer
from smemtile.report.banks import instruction_detail

CTYPES = {n: d.ctype for n, d in DTYPES.items()}  # spec dtype -> the CUDA C++ type a declaration uses
TMA_ALIGN = {"32B": 256, "64B": 512, "128B": 1024}  # a TMA tile's base: the swizzle pattern's repeat


def _align(buf: Buffer, lay: Layout) -> int:
    tma = getattr(lay, "tma", None)
    if tma:
        return TMA_ALIGN.get(tma, 128)
    if lay.swizzle is not None or len(buf.shape) == 1:
        return 128  # the bank model and the swizzle assume a 128-byte-aligned base
    return max(16, buf.elem_bytes)  # room for 16-byte vectors


def _dims(buf: Buffer, lay: Layout) -> tuple[list[str], str, str]:
    """(array dimensions, index of one element, what the index names) of ``buf`` under ``lay``."""
    name = buf.name
    stride = f"{buf.cols} + {lay.pad}" if lay.pad else f"{buf.cols}"
    staged = len(buf.shape) == 2 and buf.stages > 1
    if len(buf.shape) == 1:
        n = f"{buf.shape[0]} + {lay.pad}" if lay.pad else f"{buf.shape[0]}"
        idx = f"{name}_swz(i)" if lay.swizzle is not None else "i"
        return (
            ([f"{buf.stages}"] if buf.stages > 1 else []) + [n],
            f"{name}{'[stage]' if buf.stages > 1 else ''}[{idx}]",
            "element i",
        )
    if lay.swizzle is not None:
        if len(buf.shape) == 3:  # the swizzle acts on the offset of (stage, row, col): one flat array
            s, r = buf.shape[0], buf.rows
            return (
                [f"{s} * {r} * ({stride})" if lay.pad else f"{s} * {r} * {stride}"],
                f"{name}[{name}_swz((s * {r} + r) * {_p(stride, lay)} + c)]",
                "element (s, r, c)",
            )
        flat = f"{buf.rows} * ({stride})" if lay.pad else f"{buf.rows} * {stride}"
        return (
            ([f"{buf.stages}"] if staged else []) + [flat],
            f"{name}{'[stage]' if staged else ''}[{name}_swz(r * {_p(stride, lay)} + c)]",
            "element (r, c)",
        )
    if len(buf.shape) == 3:
        return [str(buf.shape[0]), str(buf.rows), stride], f"{name}[s][r][c]", "element (s, r, c)"
    return (
        ([f"{buf.stages}"] if staged else []) + [str(buf.rows), stride],
        f"{name}{'[stage]' if staged else ''}[r][c]",
        "element (r, c)",
    )


def _p(stride: str, lay: Layout) -> str:
    return f"({stride})" if lay.pad else stride


def _helper(buf: Buffer, lay: Layout) -> list[str]:
    sw = lay.swizzle
    if sw is None:
        return []
    return [
        f"// {buf.name}: {sw} XORs bits [{sw.M + sw.S}, {sw.M + sw.S + sw.B}) of the element offset into bits "
        f"[{sw.M}, {sw.M + sw.B})",
        f"__device__ __forceinline__ int {buf.name}_swz(int o) {{ return {sw.cpp()}; }}",
    ]


def declaration(buf: Buffer, lay: Layout) -> list[str]:
    """The static ``__shared__`` declaration of one buffer and how an element is indexed (stages included)."""
    dims, idx, what = _dims(buf, lay)
    ct = CTYPES[buf.dtype]
    decl = f"__shared__ __align__({_align(buf, lay)}) {ct} {buf.name}{''.join(f'[{d}]' for d in dims)};"
    lines = [f"{decl}  // {buf.bytes(lay)} bytes"]
    if lay.swizzle is not None:
        lines += _helper(buf, lay)
    lines.append(
        f"// {what}: {idx}" + (f"   (row stride {buf.cols + lay.pad} elements)" if len(buf.shape) > 1 else "")
    )
    return lines


@dataclass(frozen=True)
class Declarations:
    """The C++ for a set of buffers: what goes at file scope, in the kernel, and on the host before the launch."""

    file_scope: tuple[str, ...]
    kernel: tuple[str, ...]
    host: tuple[str, ...]
    total_bytes: int  # shared memory per block (alignment gaps of the dynamic form included)
    dynamic: bool  # above the static limit: extern __shared__ + cudaFuncSetAttribute
    static_limit: int
    fits: bool  # within the architecture's opt-in maximum per block

    def lines(self) -> list[str]:
        out = []
        if self.file_scope:
            out += ["// file scope", *self.file_scope]
        out += ["// in the kernel", *self.kernel]
        if self.host:
            out += ["// on the host, before the first launch", *self.host]
        return out

    def to_dict(self) -> dict:
        return {
            "file_scope": list(self.file_scope),
            "kernel": list(self.kernel),
            "host": list(self.host),
            "bytes": self.total_bytes,
            "dynamic": self.dynamic,
            "static_limit": self.static_limit,
            "fits": self.fits,
        }


def declarations(buffers, layouts: dict[str, Layout] | None, arch: Arch) -> Declarations:
    """Every buffer with its layout (``layouts`` overrides the buffer's own), as the kernel must declare them."""
    layouts = layouts or {}
    bufs = [(b, layouts.get(b.name, b.layout)) for b in buffers]
    includes = sorted({INCLUDES[b.dtype] for b, _ in bufs if b.dtype in INCLUDES})
    file_scope = [f"#include <{h}>" for h in includes]
    for b, lay in bufs:
        file_scope += _helper(b, lay)
    static_total = sum(b.bytes(lay) for b, lay in bufs)
    limit = arch.static_smem_max
    if static_total <= limit:
        kernel = []
        for b, lay in bufs:
            kernel += [ln for ln in declaration(b, lay) if "_swz(int o)" not in ln and "XORs bits" not in ln]
        return Declarations(
            tuple(file_scope),
            tuple(kernel),
            (),
            static_total,
            False,
            limit,
            static_total <= arch.smem_optin_per_block,
        )
    # dynamic: one extern array, each buffer at an offset aligned as its static declaration would be
    kernel, off = [], 0
    placed = []
    for b, lay in bufs:
        a = max(128, _align(b, lay))
        off = max((off + a - 1) // a * a, getattr(lay, "base", 0) or 0)  # a TMA tile may say where it sits
        placed.append((b, lay, off))
        off += b.bytes(lay)
    total = off
    kernel.append(
        f"extern __shared__ __align__({max([128] + [max(128, _align(b, lay)) for b, lay in bufs])}) "
        f"unsigned char smem[];  // {total} bytes, dynamic (over the {limit}-byte static limit)"
    )
    for b, lay, at in placed:
        dims, idx, what = _dims(b, lay)
        ct = CTYPES[b.dtype]
        inner = "".join(f"[{d}]" for d in dims[1:])
        ptr = f"{ct} (*{b.name}){inner}" if inner else f"{ct}* {b.name}"
        cast = f"{ct} (*){inner}" if inner else f"{ct}*"
        src = f"smem + {at}" if at else "smem"
        kernel.append(f"{ptr} = reinterpret_cast<{cast}>({src});  // {b.bytes(lay)} bytes at offset {at}")
        kernel.append(f"// {what}: {idx}")
    host = [
        f"// the default is {limit} bytes per block: raise it for this kernel (once), then launch with {total}",
        f"cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, {total});",
        f"// kernel<<<grid, block, {total}>>>(...);",
    ]
    fits = total <= arch.smem_optin_per_block
    if not fits:
        host.append(
            f"// does not fit: {total} bytes > the {arch.name} opt-in maximum of "
            f"{arch.smem_optin_per_block} bytes per block"
        )
    return Declarations(tuple(file_scope), tuple(kernel), tuple(host), total, True, limit, fits)


def layout_diff(buf: Buffer, before: Layout, after: Layout) -> list[str]:
    """Unified diff of the declarations and index arithmetic."""
    a, b = declaration(buf, before), declaration(buf, after)
    return [ln.rstrip("\n") for ln in difflib.unified_diff(a, b, "before", "after", lineterm="", n=3)]


def bank_grid(buf: Buffer, lay: Layout, max_rows: int = 16, max_words: int = 32) -> np.ndarray:
    """[rows, words] bank of each 4-byte word of the first rows/columns (one cell per word); a 3-D buffer's rows
    are counted across its stages."""
    eb = buf.elem_bytes
    per_word = max(1, 4 // eb)
    rows = int(np.prod(buf.shape[:-1])) if len(buf.shape) >= 2 else 1
    cols = buf.cols
    nr = min(rows, max_rows)
    ncol = min((cols * eb + 3) // 4, max_words)
    r = np.arange(nr)[:, None]
    c = np.minimum((np.arange(ncol) * per_word)[None, :], cols - 1)
    off = lay.offset(r, c, cols) if len(buf.shape) >= 2 else (lay.swizzle(c) if lay.swizzle else c)
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
        for ph in instruction_detail(hot, i):
            per_bank = np.asarray(ph.words_per_bank)
            for lane in ph.lanes:
                r, c = int(hot.rows[i, lane]), int(hot.cols[i, lane]) // per_word
                b = int(grid[r, c]) if r < grid.shape[0] and c < grid.shape[1] else None
                if b is not None:
                    marks[(r, c)] = "bold white on red" if per_bank[b] > 1 else "bold black on green"
    labels = [
        str(j * per_word) if per_word > 1 else str(j) if eb <= 4 else str(j * 4 // eb)
        for j in range(grid.shape[1])
    ]
    what = "rows (across stages)" if len(buf.shape) == 3 else "rows"
    title = Text(f"{printable(buf.name)} ({lay.describe()}): bank of each word, {what} 0-{grid.shape[0] - 1}")
    return BankDiagram(title, grid, marks, labels)


class BankDiagram:
    """The bank diagram, laid out for the width it is rendered at: all 32 words of a row on one line when they
    fit (about 100 columns), else blocks of 16 (or 8) words, one block under the other, each with the row
    numbers. Every cell keeps its full number: nothing is cut to an ellipsis. Drawn as plain text lines (no
    table layout pass: fast at any size)."""

    CELL = 3  # two digits and a space

    def __init__(self, title: Text, grid: np.ndarray, marks: dict[tuple[int, int], str], labels: list[str]):
        self.title, self.grid, self.marks, self.labels = title, grid, marks, labels

    def head_width(self) -> int:
        return max(3, len(str(self.grid.shape[0] - 1)))

    def words_per_block(self, width: int) -> int:
        n = self.grid.shape[1]
        per = n
        while per > 4 and self.head_width() + self.CELL * per > width:
            per = (per + 1) // 2
        return per

    def block(self, start: int, stop: int) -> list[Text]:
        hw = self.head_width()
        head = Text("row".rjust(hw), style="dim")
        for j in range(start, stop):
            head.append(" " + self.labels[j].rjust(2))
        lines = [head]
        for r in range(self.grid.shape[0]):
            t = Text(str(r).rjust(hw), style="dim")
            for c in range(start, stop):
                t.append(" ")
                t.append(f"{int(self.grid[r, c]):2d}", style=self.marks.get((r, c), ""))
            lines.append(t)
        return lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        n = self.grid.shape[1]
        per = self.words_per_block(options.max_width)
        title = self.title.copy()
        if per < n:
            title.append(f"; words in blocks of {per}")
        yield title
        for start in range(0, n, per):
            yield from self.block(start, min(n, start + per))

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        w = self.head_width() + self.CELL * self.grid.shape[1]
        return Measurement(min(w, self.head_width() + self.CELL * 4), w)
