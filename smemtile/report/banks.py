"""Bank-model results as JSON documents and text tables.

Tables here are drawn as plain text lines (``Grid``) rather than rich ``Table`` layouts: a 1024-thread spec has
thousands of cells and rich's measuring pass dominated ``analyze``'s time. A ``Grid`` that does not fit the
console is stacked as ``header: value`` records (the same rule as ``report.text.Fit``): no cell is ever cut.

``--all-instructions`` (JSON) gives the lane detail of every *distinct* instruction (identical addresses, active
lanes and sources have identical phases), each listing the instructions it stands for, at most ``DETAIL_BUDGET``
in all; :func:`iter_details` yields them one at a time so the CLI can stream them.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Iterator

import numpy as np
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text

from smemtile.model.analysis import AccessResult
from smemtile.model.banks import BANKS, PhaseDetail
from smemtile.report.text import printable

DETAIL_BUDGET = 4096  # --all-instructions: distinct instructions detailed per report (about 4 KB each)


def _lanes_text(lanes) -> str:
    """[0,1,2,3,8,9] -> '0-3,8-9'."""
    lanes = sorted(lanes)
    out, start, prev = [], None, None
    for x in lanes:
        if start is None:
            start = prev = x
        elif x == prev + 1:
            prev = x
        else:
            out.append(f"{start}-{prev}" if prev != start else f"{start}")
            start = prev = x
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ",".join(out)


def lane_rows(ar: AccessResult, i: int) -> list[dict]:
    """Per lane of instruction ``i``: address, logical coordinates, banks, phase and wavefront(s)."""
    b = ar.bank
    words = (b.addresses[i] // 4)[:, None] + np.arange(max(1, b.width // 4))
    phases = instruction_detail(ar, i)
    wf_of_lane: dict[int, list[int]] = {}
    for ph in phases:
        for w, lanes in enumerate(ph.lanes_by_wavefront):
            for lane in lanes:
                # cp.async: a group's round w runs in wavefront slot ph.slots[w] of the instruction
                wf_of_lane.setdefault(lane, []).append(ph.slots[w] if ph.slots else w)
    rows = []
    for lane in range(32):
        d = {
            "lane": lane,
            "address": int(b.addresses[i, lane]),
            "active": bool(b.active[i, lane]),
            "phase": int(b.phase_of_lane[i, lane]),
            "banks": sorted({int(w) % BANKS for w in words[lane]}),
            "words": [int(w) for w in words[lane]],
            "wavefronts": wf_of_lane.get(lane, []),
        }
        if ar.rows is not None:
            d["row"], d["col"] = int(ar.rows[i, lane]), int(ar.cols[i, lane])
        elif ar.cols is not None:
            d["index"] = int(ar.cols[i, lane])
        if b.sources is not None:
            d["source"] = int(b.sources[i, lane])
        rows.append(d)
    return rows


def access_to_dict(ar: AccessResult, *, all_details: bool | int = False) -> dict:
    b = ar.bank
    a = ar.access
    n = len(b.wavefronts)
    per = [
        {
            "warp": int(ar.warp[i]),
            "loop": ar.loop_values[i],
            "wavefronts": int(b.wavefronts[i]),
            "ideal_wavefronts": int(b.ideal_wavefronts[i]),
        }
        for i in range(n)
    ]

    def inst(i: int) -> dict:
        return {
            "warp": int(ar.warp[i]),
            "loop": ar.loop_values[i],
            "wavefronts": int(b.wavefronts[i]),
            "ideal_wavefronts": int(b.ideal_wavefronts[i]),
            "phases": [p.to_dict() for p in instruction_detail(ar, i)],
            "lanes": lane_rows(ar, i),
        }

    d = {
        "name": a.name,
        "buffer": a.buffer,
        "op": a.op,
        "width": a.width,
        "layout": ar.layout.to_dict(),
        "instructions": n,
        "wavefronts": ar.wavefronts,
        "ideal_wavefronts": ar.ideal,
        "conflict_degree": round(ar.degree, 4),
        "ncu_bank_conflicts": int(b.wavefronts[ar.worst] - b.ncu_ideal[ar.worst]),
        "total_wavefronts": int(b.wavefronts.sum()),
        "total_ideal_wavefronts": int(b.ideal_wavefronts.sum()),
        "conflict_free": ar.conflict_free,
        "per_instruction": per,
        "worst": inst(ar.worst),
    }
    if a.op in ("ldmatrix", "stmatrix"):
        d.update(matrices=a.matrices, trans=a.trans)
    if ar.stages is not None:
        d["stage_of_worst"] = [int(x) for x in ar.stages[ar.worst]]
    if (
        all_details is not False
    ):  # True: up to DETAIL_BUDGET; an int: that many at most (a budget shared by a report)
        budget = DETAIL_BUDGET if all_details is True else int(all_details)
        d["details_summary"] = {**details_summary(ar, budget), "budget": budget}
        d["details"] = list(iter_details(ar, budget))
    return d


_DETAILS: dict[int, tuple[object, dict[int, tuple[PhaseDetail, ...]]]] = {}


def instruction_detail(ar: AccessResult, i: int) -> tuple[PhaseDetail, ...]:
    """The bank model's calculation for instruction ``i`` alone (BankResult.detail on a one-instruction slice:
    the cost does not grow with the number of instructions). Worked out once per bank result and instruction
    (the summary, part 1 and the page each show the worst instruction; the answer is immutable)."""
    b = ar.bank
    held, done = _DETAILS.get(id(b), (None, None))
    if held is not b:  # another object (the id of one no longer alive): start over
        if len(_DETAILS) >= 256:
            _DETAILS.clear()
        done = {}
        _DETAILS[id(b)] = (b, done)  # holding b keeps its id from being reused while cached
    if i not in done:
        done[i] = _instruction_detail(b, i)
    return done[i]


def _instruction_detail(b, i: int) -> tuple[PhaseDetail, ...]:
    one = dataclasses.replace(
        b,
        addresses=b.addresses[i : i + 1],
        active=b.active[i : i + 1],
        phase_of_lane=b.phase_of_lane[i : i + 1],
        wavefronts=b.wavefronts[i : i + 1],
        ideal_wavefronts=b.ideal_wavefronts[i : i + 1],
        merged=b.merged[i : i + 1],
        sources=None if b.sources is None else b.sources[i : i + 1],
    )
    return one.detail(0)


def details_summary(ar: AccessResult, budget: int) -> dict:
    """How many instructions, how many distinct, how many of those detailed within ``budget``."""
    first, _ = ar.distinct
    shown = min(len(first), max(0, budget))
    return {
        "instructions": len(ar.bank.wavefronts),
        "distinct": len(first),
        "detailed": shown,
        "left_out": len(first) - shown,
    }


def iter_details(ar: AccessResult, budget: int) -> Iterator[dict]:
    """The lane detail of each distinct instruction (worst first, then in order), at most ``budget`` of them;
    ``repeats`` lists the indices (into ``per_instruction``) of every instruction with exactly this pattern."""
    first, inv = ar.distinct
    order = sorted(range(len(first)), key=lambda k: (-int(ar.bank.wavefronts[first[k]]), int(first[k])))
    groups: dict[int, list[int]] = {}
    for idx, g in enumerate(inv.tolist()):
        groups.setdefault(g, []).append(idx)
    for k in order[: max(0, budget)]:
        i = int(first[k])
        b = ar.bank
        yield {
            "warp": int(ar.warp[i]),
            "loop": ar.loop_values[i],
            "wavefronts": int(b.wavefronts[i]),
            "ideal_wavefronts": int(b.ideal_wavefronts[i]),
            "repeats": groups[k],
            "phases": [p.to_dict() for p in instruction_detail(ar, i)],
            "lanes": lane_rows(ar, i),
        }


def degree_text(ar: AccessResult) -> Text:
    if ar.conflict_free:
        return Text("conflict-free", style="bold green")
    deg = ar.degree
    s = f"{deg:g}-way" if float(deg).is_integer() else f"{deg:.2f}x"
    return Text(f"{s} conflict", style="bold red" if deg >= 4 else "bold yellow")


def summary_line(ar: AccessResult) -> Text:
    a = ar.access
    b = ar.bank
    t = Text()
    t.append(printable(a.name), style="bold")
    kind = (
        f"{a.op} x{a.matrices}{'.trans' if a.trans else ''}" if a.op == "ldmatrix" else f"{a.op} {a.width} B"
    )
    t.append(f"  {kind} of {printable(a.buffer)} ({ar.layout.describe()}): ")
    n = len(b.wavefronts)
    t.append(
        f"{n} instruction{'s' if n != 1 else ''}, worst {ar.wavefronts} wavefronts (ideal {ar.ideal}) at "
        f"{printable(ar.label(ar.worst))}; "
    )
    t.append_text(degree_text(ar))
    vals, counts = np.unique(b.wavefronts, return_counts=True)
    if len(vals) > 1:
        t.append("  distribution: " + ", ".join(f"{c}x{v}" for v, c in zip(vals, counts, strict=True)))
    return t


class Grid:
    """A table drawn as text: right-aligned columns separated by two spaces when it fits the width it is rendered
    at, else one ``header: value`` record per row (first cell as the record's title). Fast: no layout pass."""

    def __init__(
        self,
        title: Text | str | None,
        headers: list[str],
        rows: list[list[str]],
        styles: list[list[str]] | None = None,
        left: int = 0,
        wrap_last: bool = False,
    ):
        self.title = Text(title) if isinstance(title, str) else title
        self.headers, self.rows, self.styles, self.left = headers, rows, styles, left
        self.wrap_last = wrap_last  # the last column is prose: wrapped in its own column when the rest fits

    def widths(self) -> list[int]:
        w = [len(h) for h in self.headers]
        for r in self.rows:
            for j, c in enumerate(r):
                w[j] = max(w[j], len(c))
        return w

    def natural_width(self) -> int:
        w = self.widths()
        return sum(w) + 2 * (len(w) - 1)

    def _cell(self, text: str, width: int, j: int) -> str:
        return text.ljust(width) if j < self.left else text.rjust(width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.title is not None:
            yield self.title
        w = self.widths()
        last = options.max_width - (sum(w[:-1]) + 2 * (len(w) - 1))
        wrapped = None
        if self.natural_width() > options.max_width and self.wrap_last and last >= 24:
            wrapped = [textwrap.wrap(r[-1], last, break_long_words=False) or [""] for r in self.rows]
            if any(len(x) > last for lines in wrapped for x in lines):
                wrapped = None
            else:
                w = [*w[:-1], min(w[-1], last)]
        if wrapped is not None or self.natural_width() <= options.max_width:
            yield Text(
                "  ".join(self._cell(h, w[j], j) for j, h in enumerate(self.headers)).rstrip(), style="bold"
            )
            for k, r in enumerate(self.rows):
                t = Text()
                cells = r if wrapped is None else [*r[:-1], wrapped[k][0]]
                for j, c in enumerate(cells):
                    if j:
                        t.append("  ")
                    st = self.styles[k][j] if self.styles else ""
                    t.append(self._cell(c, w[j], j), style=st)
                t.rstrip()
                yield t
                for more in wrapped[k][1:] if wrapped is not None else []:
                    yield Text(" " * (sum(w[:-1]) + 2 * (len(w) - 1)) + more)
            return
        for k, r in enumerate(self.rows):  # stacked: wraps at word boundaries, never cuts a number
            t = Text(f"{self.headers[0]} {r[0]}" if self.headers[0] else r[0], style="bold")
            for j in range(1, len(r)):
                t.append("; " if j > 1 else "  ")
                t.append(f"{self.headers[j]}: ", style="dim")
                t.append(r[j], style=self.styles[k][j] if self.styles else "")
            yield t

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(min(20, options.max_width), min(self.natural_width(), options.max_width))


def lane_table(ar: AccessResult, i: int | None = None) -> Grid:
    """The explicit lane -> address -> bank table of one instruction (the worst by default); stacked per lane
    when a console is too narrow for its columns."""
    i = ar.worst if i is None else i
    rows = lane_rows(ar, i)
    coord = (
        ("stage, row, col" if ar.stages is not None else "row, col")
        if ar.rows is not None
        else ("index" if ar.cols is not None else None)
    )
    title = Text(
        f"{printable(ar.access.name)} @ {printable(ar.label(i))}: {int(ar.bank.wavefronts[i])} wavefronts "
        f"(ideal {int(ar.bank.ideal_wavefronts[i])})",
        style="bold",
    )
    cp = ar.bank.sources is not None
    heads = (
        ["lane"]
        + ([coord] if coord else [])
        + (["source byte"] if cp else [])
        + ["byte addr", "bank(s)", "group" if cp else "phase", "wavefront"]
    )
    cells = []
    for r in rows:
        if not r["active"]:
            continue
        c = [str(r["lane"])]
        if ar.stages is not None:
            rr = r["row"] - int(ar.stages[i, r["lane"]]) * ar.buffer.rows
            c.append(f"{int(ar.stages[i, r['lane']])}, {rr}, {r['col']}")
        elif coord == "row, col":
            c.append(f"{r['row']}, {r['col']}")
        elif coord:
            c.append(str(r["index"]))
        banks = r["banks"]
        if cp:
            c.append(str(r["source"]))
        c += [
            str(r["address"]),
            f"{banks[0]}" if len(banks) == 1 else f"{banks[0]}-{banks[-1]}",
            str(r["phase"]),
            ",".join(str(w) for w in r["wavefronts"]),
        ]
        cells.append(c)
    return Grid(title, heads, cells)


def phase_lines(ar: AccessResult, i: int | None = None) -> list[Text]:
    """One line per phase: lanes served together and the busiest bank (the calculation, in words)."""
    i = ar.worst if i is None else i
    if ar.bank.sources is not None:
        return _cp_async_lines(ar, i)
    out = []
    for ph in instruction_detail(ar, i):
        per_bank = np.asarray(ph.words_per_bank)
        hot = int(per_bank.argmax())
        busy = ", ".join(f"b{k}:{int(per_bank[k])}" for k in np.flatnonzero(per_bank == per_bank.max())[:6])
        head = f"  phase {ph.phase}: lanes {_lanes_text(ph.lanes)} -> {int(per_bank.sum())} distinct words; "
        if per_bank.max() <= 1:
            t = Text(head + "no bank delivers more than one word -> 1 wavefront")
        else:
            t = Text(
                head + f"busiest bank {hot} delivers {int(per_bank[hot])} distinct words ({busy}) -> "
                f"{ph.wavefronts} wavefronts"
            )
        out.append(t)
    return out


def _cp_async_lines(ar: AccessResult, i: int) -> list[Text]:
    """cp.async: one line per group of lanes whose sources were read together, with its wavefront slots."""
    groups = instruction_detail(ar, i)
    out = []
    for g in groups:
        per_bank = np.asarray(g.words_per_bank)
        hot = int(per_bank.argmax())
        slots = f"slot {g.slots[0]}" if len(g.slots) == 1 else f"slots {_lanes_text(g.slots)}"
        lines = ", ".join(str(x) for x in g.source_lines[:4]) + (", ..." if len(g.source_lines) > 4 else "")
        out.append(
            Text(
                f"  group {g.phase}: lanes {_lanes_text(g.lanes)} read together from global line"
                f"{'s' if len(g.source_lines) > 1 else ''} {lines} (128-byte lines; beat {g.beat}) -> "
                f"{int(per_bank.sum())} words, busiest bank {hot} takes "
                f"{int(per_bank[hot])} -> {g.wavefronts} round{'s' if g.wavefronts != 1 else ''} in {slots}"
            )
        )
    beats = len({g.beat for g in groups})
    out.append(
        Text(
            f"  {len(groups)} group{'s' if len(groups) != 1 else ''} (read wavefronts of the sources) in "
            f"{beats} beat{'s' if beats != 1 else ''} (<= 128 data bytes each, one after another); in a beat "
            "each group starts one slot after the one before, finishes after it, and a slot serves a bank "
            "once -> "
            f"{int(ar.bank.wavefronts[i])} wavefronts"
        )
    )
    return out
