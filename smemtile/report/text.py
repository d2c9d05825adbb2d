"""Text that is safe and fits: names as data, consoles of a sane width, tables that never cut a number.

- ``esc(x)`` for user data inside rich markup strings (``f"[bold]{esc(name)}[/]"``) and ``plain(x)`` for a
  ``Text``: access, buffer and spec names and file names are never read as markup (``[/bold]`` in a name must
  not crash, ``[link=javascript:...]`` must not become a link in an HTML export) and never reach the terminal
  as control characters (an ESC in a name is shown as ``\\x1b``).
- ``make_console()``: every console the commands print through. Its width is clamped to
  ``MIN_WIDTH..MAX_WIDTH`` (``COLUMNS=100000000`` must not make rich pad a hundred-million-column line), and
  any control character that still reaches a rendered segment is replaced (a last line of defence).
- ``Fit(table)``: renders the table when it fits the width it is given without cutting a cell (no ``…``, no
  line wider than the console); otherwise the same rows as stacked records, ``header: value`` pairs that wrap
  at word boundaries. The choice is made at render time, so a terminal, a pipe (80 columns) and an export
  (``EXPORT_WIDTH``) each get the form that fits them.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markup import escape as _markup_escape
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from smemtile.fileio import printable

MIN_WIDTH = 40
MAX_WIDTH = 512
EXPORT_WIDTH = 160  # --export svg/html: rendered at this width whatever the terminal's

# C0 (but newline), DEL, C1, bidi embeddings/overrides/isolates: never written to a terminal as they are.
_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def esc(value: object) -> str:
    """``value`` for a rich markup string: control characters escaped, ``[`` made literal."""
    return _markup_escape(printable(value))


def plain(value: object, style: str | None = None) -> Text:
    """``value`` as a rich Text (never parsed as markup), its lines kept, other control characters escaped."""
    return Text("\n".join(printable(ln) for ln in str(value).split("\n")), style=style or "")


class _SafeConsole(Console):
    """A Console whose rendered text segments never carry control characters (styles still apply)."""

    def render(self, renderable, options=None):
        for seg in super().render(renderable, options):
            if seg.control is None and _CONTROL.search(seg.text):
                yield Segment(_CONTROL.sub("?", seg.text), seg.style)
            else:
                yield seg


def clamp_width(width: int) -> int:
    return max(MIN_WIDTH, min(MAX_WIDTH, int(width)))


def make_console(
    *, stderr: bool = False, record: bool = False, file=None, width: int | None = None
) -> Console:
    """The console every command prints through: no highlighting, width clamped, control characters removed."""
    con = _SafeConsole(highlight=False, stderr=stderr, record=record, file=file, width=width)
    con.width = clamp_width(con.width)
    return con


def export_console() -> Console:
    """A recording console of ``EXPORT_WIDTH`` columns writing nowhere: what ``--export`` renders."""
    return make_console(record=True, file=io.StringIO(), width=EXPORT_WIDTH)


# ---- tables that fit ---------------------------------------------------------------------------------------------


def _cuts(lines: Iterable[list[Segment]], width: int) -> bool:
    """True when a rendered line is wider than ``width`` or a cell was shortened with an ellipsis."""
    for line in lines:
        text = "".join(s.text for s in line if s.control is None)
        if "…" in text or Segment.get_line_length(line) > width:
            return True
    return False


def fits(console: Console, renderable: RenderableType, width: int) -> bool:
    """Whether ``renderable`` renders at ``width`` columns without cutting anything."""
    opts = console.options.update(width=width, height=None)
    return not _cuts(console.render_lines(renderable, opts, pad=False), width)


def stacked(table: Table) -> Group:
    """The rows of ``table`` as records: the first cell as the record's title, then ``header: value`` pairs."""
    heads = [Text.from_markup(c.header) if isinstance(c.header, str) else c.header for c in table.columns]
    heads = [Text(" ".join(h.plain.split())) if isinstance(h, Text) else Text(str(h)) for h in heads]
    columns = [list(c.cells) for c in table.columns]
    parts: list[RenderableType] = []
    if table.title:
        title = table.title if isinstance(table.title, Text) else Text.from_markup(str(table.title))
        parts.append(title)
    for r in range(table.row_count):
        rec = Text()
        for j, col in enumerate(columns):
            cell = col[r]
            cell = cell if isinstance(cell, Text) else Text.from_markup(str(cell))
            if not cell.plain.strip():
                continue
            if j == 0:
                rec.append_text(cell.copy())
                rec.stylize("bold", 0, len(rec))
                continue
            rec.append("  " if j == 1 and rec.plain else ("; " if rec.plain else ""))
            if heads[j].plain:
                rec.append(heads[j].plain + ": ", style="dim")
            rec.append_text(cell)
        parts.append(rec)
    return Group(*parts)


class Fit:
    """``table`` where it fits, else ``stacked(table)`` (or ``fallback``), decided at the width it gets.
    ``min_width``: below it the table is stacked even if rich could squeeze it (cells folded into slivers)."""

    def __init__(self, table: Table, fallback: RenderableType | None = None, min_width: int = 0):
        self.table = table
        self.fallback = fallback
        self.min_width = min_width

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        if width >= self.min_width and (
            Measurement.get(console, options.update_width(10_000), self.table).maximum <= width  # fits as is
            or fits(console, self.table, width)
        ):
            yield self.table
        else:
            yield self.fallback if self.fallback is not None else stacked(self.table)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.table).clamp(max_width=options.max_width)
