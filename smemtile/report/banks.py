"""Bank-model results as JSON documents and rich tables."""

from __future__ import annotations

import numpy as np
from rich.table import Table
from rich.text import Text

from smemtile.model.analysis import AccessResult
from smemtile.model.banks import BANKS
from smemtile.report.text import Fit, esc, printable


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
    words = b.words()[i]
    phases = b.detail(i)
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


def access_to_dict(ar: AccessResult, *, all_details: bool = False) -> dict:
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
            "phases": [p.to_dict() for p in b.detail(i)],
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
    if a.op == "ldmatrix":
        d.update(matrices=a.matrices, trans=a.trans)
    if all_details:
        d["details"] = [inst(i) for i in range(n)]
    return d


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


def lane_table(ar: AccessResult, i: int | None = None) -> Fit:
    """The explicit lane -> address -> bank table of one instruction (the worst by default); stacked per lane
    when a console is too narrow for its columns."""
    i = ar.worst if i is None else i
    rows = lane_rows(ar, i)
    coord = "row, col" if ar.rows is not None else ("index" if ar.cols is not None else None)
    t = Table(
        title=f"{esc(ar.access.name)} @ {esc(ar.label(i))}: {int(ar.bank.wavefronts[i])} wavefronts "
        f"(ideal {int(ar.bank.ideal_wavefronts[i])})",
        title_justify="left",
        box=None,
        pad_edge=False,
    )
    t.add_column("lane", justify="right", no_wrap=True)
    if coord:
        t.add_column(coord, justify="right", no_wrap=True)
    cp = ar.bank.sources is not None
    if cp:
        t.add_column("source byte", justify="right", no_wrap=True)
    t.add_column("byte addr", justify="right", no_wrap=True)
    t.add_column("bank(s)", justify="right", no_wrap=True)
    t.add_column("group" if cp else "phase", justify="right", no_wrap=True)
    t.add_column("wavefront", justify="right", no_wrap=True)
    for r in rows:
        if not r["active"]:
            continue
        cells = [str(r["lane"])]
        if coord == "row, col":
            cells.append(f"{r['row']}, {r['col']}")
        elif coord:
            cells.append(str(r["index"]))
        banks = r["banks"]
        if cp:
            cells.append(str(r["source"]))
        cells += [
            str(r["address"]),
            f"{banks[0]}" if len(banks) == 1 else f"{banks[0]}-{banks[-1]}",
            str(r["phase"]),
            ",".join(str(w) for w in r["wavefronts"]),
        ]
        t.add_row(*cells)
    return Fit(t)


def phase_lines(ar: AccessResult, i: int | None = None) -> list[Text]:
    """One line per phase: lanes served together and the busiest bank (the calculation, in words)."""
    i = ar.worst if i is None else i
    if ar.bank.sources is not None:
        return _cp_async_lines(ar, i)
    out = []
    for ph in ar.bank.detail(i):
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
    groups = ar.bank.detail(i)
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
