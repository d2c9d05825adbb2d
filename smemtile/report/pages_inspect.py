"""``smemtile inspect KERNEL --export FILE.html``: the user's kernel as a page, per source line.

* Per source line: L1 Wavefronts Shared, Ideal, Excessive (as Nsight Compute names them), costliest first, and
  the source text; then per instruction the same numbers.
* Per conflicted line: the worst instruction's lanes x banks heatmap, drawn from its recorded addresses
  (``report.figures_banks.lanes_by_banks`` of the instruction's ``AccessResult``).
* Per array with a fix: the declaration before and after, and the same instruction (same warp and loop values)
  re-derived under the fix, heatmap before beside after.

The tables are the numbers ``inspect --json`` prints (``InspectResult.to_dict``); the heatmaps come from the same
result's recorded addresses.
"""

from __future__ import annotations

import os

from smemtile.report.figures_banks import lanes_by_banks, same_instruction
from smemtile.report.html import command_page, esc, figure, table
from smemtile.report.inspect import _source_line


def _num(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.2f}"


def _where(file: str, line: int) -> str:
    return f"{os.path.basename(file)}:{line}"


def _lines(res, doc: dict) -> str:
    if not res.reports:
        return '<p class="note">No addresses were recorded (no GPU and no --simulate): the listing only.</p>'
    rows = []
    for d in sorted(doc["lines"], key=lambda d: -d["excessive"]):
        rows.append(
            [
                _where(d["file"], d["line"]),
                _source_line(res, d["file"], d["line"]).strip(),
                ", ".join(d["arrays"]),
                d["executions"],
                _num(d["l1_wavefronts_shared"]),
                _num(d["ideal"]),
                _num(d["excessive"]),
                f"{d['worst_conflict_degree']:g}x",
            ]
        )
    tab = table(
        [
            "line",
            "source",
            "arrays",
            "executions",
            "L1 Wavefronts Shared",
            "Ideal",
            "Excessive",
            "worst degree",
        ],
        rows,
        num=(3, 4, 5, 6, 7),
        cls=lambda i, j: ("bad" if rows[i][6] != "0" else "good") if j == 6 else "",
    )
    irows = [
        [
            f"#{i['index']}",
            _where(i["file"], i["line"]) if i.get("file") else "-",
            i["op"],
            i.get("array") or "-",
            i["executions"],
            _num(i["l1_wavefronts_shared"]) if i.get("modelled") else "-",
            _num(i["ideal"]) if i.get("modelled") else "-",
            _num(i["excessive"]) if i.get("modelled") else "-",
            i["text"],
        ]
        for i in doc["instructions"]
    ]
    return (
        tab
        + "<h3>Per instruction</h3>"
        + table(
            ["#", "line", "op", "array", "executions", "L1 Wavefronts Shared", "Ideal", "Excessive", "PTX"],
            irows,
            num=(4, 5, 6, 7),
        )
    )


def _heatmaps(res) -> str:
    out = [
        '<p class="note">Each row a lane, each column a bank; a filled cell is a word the lane touches, '
        "coloured by how many distinct words its bank delivers in the lane's phase (the busiest bank of a phase "
        "is its wavefront count), from the recorded addresses of the line's worst instruction.</p>"
    ]
    n = 0
    for ln in sorted(res.lines, key=lambda x: -x.excessive):
        if ln.excessive <= 0:
            continue
        mod = [r for r in ln.instrs if r.result is not None]
        if not mod:
            continue
        w = max(mod, key=lambda r: r.excessive)
        a = w.result
        out.append(f"<h3>{esc(_where(ln.file, ln.line))}: #{w.instr.index} {esc(w.instr.text)}</h3>")
        out.append(
            figure(
                lanes_by_banks(a, a.worst, "before"),
                f"{_where(ln.file, ln.line)}: "
                f"{a.wavefronts} wavefronts, ideal {a.ideal} ({a.layout.describe()})",
                "half",
            )
        )
        n += 1
    if n == 0:
        out.append('<p class="good">No line has excessive wavefronts: nothing to show.</p>')
    return "".join(out)


def _fixes(res, doc: dict) -> str:
    out = []
    for name, why in res.no_fix.items():
        out.append(f'<p class="note">No fix for {esc(name)}: {esc(why)}.</p>')
    by_array = {d["array"]: d for d in doc["fixes"]}
    for f in res.fixes:
        d = by_array.get(f.array.name, {})
        rec = f.fix.recommended
        out.append(f"<h3>{esc(f.array.name)}</h3>")
        if not f.fix.needed:
            out.append('<p class="good">Already conflict-free: keep the declaration.</p>')
            continue
        saving = f.before - f.after
        pct = 100 * saving / f.before if f.before else 0
        out.append(
            f"<p><b>{esc(rec.layout.describe())}</b>: {esc(f.fix.reason)}. Predicted {_num(f.before)} "
            f"&rarr; {_num(f.after)} L1 Wavefronts Shared over the sampled warps ({pct:.0f}% fewer).</p>"
        )
        before = "\n".join(d.get("declaration_before") or [])
        after = "\n".join(d.get("declaration_after") or [])
        out.append(
            f"<p>Before:</p><pre><code>{esc(before)}</code></pre><p>After:</p><pre><code>{esc(after)}"
            "</code></pre>"
        )
        worst = max(f.reports, key=lambda r: r.excessive)
        relaid = f.relaid.get(worst.instr.index)
        b = worst.result
        if b is None or relaid is None:
            continue
        i = b.worst
        j = same_instruction(b, i, relaid)
        if j is None:
            continue
        figs = [
            figure(lanes_by_banks(b, i, "before"), f"before: {b.layout.describe()}", "half"),
            figure(lanes_by_banks(relaid, j, "after"), f"after: {relaid.layout.describe()}", "half"),
        ]
        out.append(
            f"<p>#{worst.instr.index} at {esc(_where(worst.instr.file, worst.instr.line))}, the same "
            f"instruction (same warp and executions) before and after: {int(b.bank.wavefronts[i])} &rarr; "
            f"{int(relaid.bank.wavefronts[j])} wavefronts.</p>"
        )
        out.append(f'<div class="figs">{"".join(figs)}</div>')
    return "".join(out) or '<p class="note">No array with a declaration to change.</p>'


def inspect_page(res) -> str:
    """The page of an ``InspectResult`` (``pipeline.inspect``)."""
    doc = res.to_dict()
    g, b = "x".join(map(str, res.grid)), "x".join(map(str, res.block))
    note = esc(
        f"{res.source}, kernel {res.kernel} ({res.arch}); grid {g}, block {b}; addresses: {res.mode}, "
        f"sampled {res.sample.blocks} block(s) x {res.sample.warps} warp(s), the first "
        f"{res.sample.executions} executions"
    )
    total = sum(ln.excessive for ln in res.lines)
    verdict = (
        f'<p class="verdict">{_num(total)} excessive L1 Wavefronts Shared over the sampled warps.</p>'
        if total > 0
        else '<p class="verdict ok">No excessive wavefronts in the sampled warps.</p>'
    )
    sections = [
        ("lines", "Per source line: L1 Wavefronts Shared, Ideal, Excessive", _lines(res, doc)),
        ("heatmaps", "Bank heatmaps: the worst instruction of each conflicted line", _heatmaps(res)),
        ("fixes", "The fix: declarations and the same instruction before and after", _fixes(res, doc)),
    ]
    if res.notes:
        sections.append(("notes", "Notes", "".join(f'<p class="note">{esc(n)}</p>' for n in res.notes)))
    return command_page(
        f"smemtile inspect: {res.kernel}", sections, note=note, verdict=verdict if res.reports else ""
    )
