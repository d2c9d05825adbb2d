"""``inspect``'s answer as text and as the ``--json`` document.

Laid out like Nsight Compute's Source page: one row per source line (L1 Wavefronts Shared, Ideal, Excessive),
costliest first; then one row per shared-memory instruction; then, one level below, the lane -> address -> bank
table of the costliest instruction (``analyze``'s table) and the fix of each array with its re-derived table.
"""

from __future__ import annotations

import os

from rich.console import Console
from rich.text import Text

from smemtile.model.inspect_explain import ArrayFix, InstrReport
from smemtile.model.layout import Layout
from smemtile.report.banks import Grid, degree_text, lane_rows, lane_table, phase_lines
from smemtile.report.layout import declaration
from smemtile.report.text import printable

MATCH_TOLERANCE = 0.02  # measured vs predicted wavefronts per execution of a line: within 2 % is a match


def _where(file: str, line: int) -> str:
    return f"{os.path.basename(file)}:{line}" if file else "?"


def _op_text(ins) -> str:
    if ins.op in ("ldmatrix", "stmatrix"):
        return f"{ins.op}.x{ins.matrices}{'.trans' if ins.trans else ''}"
    return f"{ins.op} {ins.width} B" + ("" if ins.space == "shared" else f" ({ins.space})")


def _num(x: float) -> str:
    return f"{x:.0f}" if abs(x - round(x)) < 1e-9 or abs(x) >= 100 else f"{x:.1f}"


def _grid(title: str, heads: list[str], rows: list[list[str]], styles=None, left: int = 1) -> Grid:
    """A Grid whose last column (source text or PTX) reads left-aligned like code."""
    w = max([len(heads[-1])] + [len(r[-1]) for r in rows])
    rows = [[*r[:-1], r[-1].ljust(w)] for r in rows]
    return Grid(Text(title, style="bold"), heads, rows, styles, left=left, wrap_last=True)


def declaration_text(fx: ArrayFix, lay: Layout) -> list[str]:
    """The array's declaration as the user wrote it, under ``lay`` (padding: the last dimension grows)."""
    info = fx.array
    d = info.decl
    if d is not None and d.extern:
        lines = declaration(fx.fix.buffer, lay)
        head = f"extern __shared__ {d.ctype} {d.name}[];  // {fx.array.size} bytes at launch (--smem)"
        return [head] + lines[1:]
    if d is None or d.dims is None:
        return declaration(fx.fix.buffer, lay)
    if lay.swizzle is not None:
        return [
            f"__shared__ {d.ctype} {d.name}{''.join(f'[{t}]' for t in d.dim_text)};  // unchanged; index it "
            f"through the swizzle:"
        ] + declaration(fx.fix.buffer, lay)[1:]
    pad = lay.pad // d.vector if lay.pad % d.vector == 0 else None
    if pad is None:
        return declaration(fx.fix.buffer, lay)
    last = d.dim_text[-1]
    dims_text = [*d.dim_text[:-1], f"{last} + {pad}" if pad else last]
    dims = [*d.dims[:-1], d.dims[-1] + pad]
    q = f"{d.qualifiers} " if d.qualifiers else ""
    text = f"__shared__ {q}{d.ctype} {d.name}{''.join(f'[{t}]' for t in dims_text)};"
    numeric = "".join(f"[{n}]" for n in dims)
    return [text + (f"  // {numeric}" if "".join(f"[{t}]" for t in dims_text) != numeric else "")]


def _instr_dict(r: InstrReport, detail: bool) -> dict:
    d = r.instr.to_dict()
    d.update(array=r.array, executions=r.executions, records=r.records, modelled=r.modelled, note=r.note)
    if r.result is not None:
        d.update(
            wavefronts_worst=r.worst,
            ideal_worst=r.worst_ideal,
            wavefronts_mean=round(r.mean, 4),
            ideal_mean=round(r.mean_ideal, 4),
            l1_wavefronts_shared=round(r.wavefronts, 2),
            ideal=round(r.ideal, 2),
            excessive=round(r.excessive, 2),
            conflict_degree=round(r.result.degree, 4),
            worst_at=r.result.label(r.result.worst),
        )
        if detail:
            d["worst_lanes"] = [x for x in lane_rows(r.result, r.result.worst) if x["active"]]
    return d


def _sass_text(sass: list[str]) -> str:
    """``['LDS', 'STS', 'LDS']`` -> ``2 LDS, 1 STS`` (first appearance order)."""
    counts: dict[str, int] = {}
    for op in sass:
        counts[op] = counts.get(op, 0) + 1
    return ", ".join(f"{n} {op}" for op, n in counts.items())


def _compiled(ln, m: dict) -> str:
    """What ptxas did to the line's shared-memory instructions, when its SASS count differs from the PTX's."""
    sass = m.get("sass")
    if ln is None or not sass or not ln.instrs:
        return ""
    k_ptx, k_sass = len(ln.instrs), len(sass)
    if k_ptx == k_sass:
        return ""
    how = "merged" if k_sass < k_ptx else "split"
    return (
        f"ptxas {how} {abs(k_ptx - k_sass)} shared instruction{'s' if abs(k_ptx - k_sass) != 1 else ''} on this "
        f"line: {k_ptx} in the PTX (recorded), {k_sass} in the SASS ncu measures ({_sass_text(sass)})"
    )


def _match(pred: float, execs: int, m: dict | None, full: bool, ln=None) -> tuple[str, str]:
    """(match, explanation) of a line's predicted L1 Wavefronts Shared against ncu's row ``m``. A sample of the
    whole grid compares totals (a warp whose lanes are all predicated off issues the SASS instruction for 0
    wavefronts: counts may differ, totals may not); a partial one compares wavefronts per execution. A
    disagreement says why it can be: ptxas merged or split the line's shared instructions (the SASS count ncu
    lists against the PTX one recorded), its executions differ from the recorded ones, or the sample does not
    cover ncu's executions; a line inside a device function called without inlining is not recorded on the GPU."""
    if not m:
        cp16 = (
            ln is not None
            and ln.instrs
            and all(r.instr.op == "cp.async" and r.instr.width == 16 for r in ln.instrs)
        )
        if cp16:
            return "-", "16-byte cp.async.cg writes are invisible to ncu's shared-memory counters (measured)"
        return "-", "no ncu row for this line"
    n = m.get("instructions") or 0
    if not n or not execs:
        funcs = sorted({r.instr.function for r in ln.instrs}) if ln is not None and ln.instrs else []
        if n and funcs and all(funcs):
            return "-", (
                f"inside a device function called without inlining ({', '.join(funcs)}): the GPU recording does "
                f"not see it (--simulate emulates it); ncu measured {m['wavefronts']} wavefronts in {n} executions"
            )
        if n and not execs:
            return "-", (
                f"ncu measured {m['wavefronts']} wavefronts in {n} executions; the sampled warps executed none "
                "of the line's instructions (run with --blocks/--warps covering the grid)"
            )
        return "-", "not executed in the sample or by ncu"
    compiled = _compiled(ln, m)
    if full:
        q = float(m["wavefronts"])
        if abs(pred - q) <= MATCH_TOLERANCE * max(q, 1):
            return "yes", ""
        why = [f"measured {q:.0f} wavefronts over the whole grid, predicted {pred:.0f}"]
        if compiled:
            why.append(compiled)
        if n != execs:
            sass = "" if compiled else f" ({', '.join(m.get('sass') or []) or '?'})"
            if not compiled:
                how = "ptxas merged, split or predicated them"
            elif n > execs:
                how = (
                    "where the PTX branches past them the SASS predicates them: a warp whose lanes are all "
                    "off still issues them, for 0 wavefronts"
                )
            else:
                how = "ptxas merged or hoisted some of them"
            why.append(
                f"ncu counts {n} executions of the line's SASS instructions{sass}, the recording {execs} of its "
                f"PTX ones ({how})"
            )
        elif m.get("sass") and not compiled:
            why.append(
                "the line's PTX and SASS instructions and their executions agree: the bank model and the "
                "hardware differ here"
            )
        return "no", "; ".join(why)
    p, q = pred / execs, m["wavefronts"] / n
    if abs(p - q) <= MATCH_TOLERANCE * max(q, 1):
        return "yes", ""
    return "no", (
        f"the sample covers {execs} of ncu's {n} executions; measured {q:.2f} wavefronts per execution "
        f"over the grid, predicted {p:.2f} for the sampled warps (the unsampled ones differ, or ptxas "
        "predicated the line's instructions: run with --blocks/--warps covering the grid)"
        + (f"; {compiled}" if compiled else "")
    )


def _full(res) -> bool:
    """The sample holds every block and every warp of the launch."""
    return res.sample.blocks >= _blocks(res) and res.sample.warps >= _warps(res)


def result_to_dict(res) -> dict:
    full = _full(res)
    lines = []
    for ln in res.lines:
        d = {
            "file": ln.file,
            "line": ln.line,
            "instructions": [r.instr.index for r in ln.instrs],
            "executions": ln.executions,
            "l1_wavefronts_shared": round(ln.wavefronts, 2),
            "ideal": round(ln.ideal, 2),
            "excessive": round(ln.excessive, 2),
            "worst_conflict_degree": round(ln.worst_degree, 4),
            "arrays": ln.arrays,
        }
        if res.ncu is not None:
            m = res.ncu.get(_where(ln.file, ln.line))
            d["ncu"] = m
            d["match"], d["explanation"] = _match(ln.wavefronts, ln.executions, m, full, ln)
        lines.append(d)
    top = next((r for r in res.reports if r.result is not None), None)
    return {
        "kernel": res.kernel,
        "entry": res.entry,
        "source": res.source,
        "arch": res.arch,
        "grid": list(res.grid),
        "block": list(res.block),
        "dynamic_smem": res.dynamic_smem,
        "mode": res.mode,
        "sample": res.sample.to_dict(),
        "arrays": [
            {
                "key": k,
                "name": a.name,
                "base": a.base,
                "bytes": a.size,
                "declaration": a.decl.to_dict() if a.decl else None,
                "buffer": a.buffer.to_dict() if a.buffer else None,
                "note": a.note,
            }
            for k, a in res.arrays.items()
        ],
        "instructions": [_instr_dict(r, r is top) for r in res.reports]
        if res.reports
        else [{**i.to_dict(), "executions": None} for i in res.instrs],
        "lines": lines if res.reports else _listing_lines(res),
        "records": res.meta,
        "fixes": [_fix_dict(f) for f in res.fixes],
        "no_fix": res.no_fix,
        "ncu": res.ncu,
        "emitted_spec": res.emitted,
        "no_device": res.no_device,
        "notes": res.notes,
    }


def _blocks(res) -> int:
    g = res.grid
    return g[0] * g[1] * g[2]


def _warps(res) -> int:
    b = res.block
    return -(-b[0] * b[1] * b[2] // 32)


def _listing_lines(res) -> list[dict]:
    by: dict[tuple[str, int], list] = {}
    for i in res.instrs:
        by.setdefault((i.file, i.line), []).append(i)
    return [
        {
            "file": f,
            "line": ln,
            "instructions": [i.index for i in v],
            "count": len(v),
            "arrays": sorted({i.array for i in v if i.array}),
        }
        for (f, ln), v in by.items()
    ]


def _fix_dict(f: ArrayFix) -> dict:
    rec = f.fix.recommended
    d = f.fix.to_dict()
    d.update(
        array=f.array.name,
        declaration_before=declaration_text(f, f.fix.baseline.layout),
        declaration_after=declaration_text(f, rec.layout),
        wavefronts_before=round(f.before, 2),
        wavefronts_after=round(f.after, 2),
        saving=round(f.before - f.after, 2),
    )
    return d


# ---- text -----------------------------------------------------------------------------------------------------


def _source_line(res, file: str, line: int) -> str:
    src = getattr(res, "source_text", "") or ""
    if not src or not line:
        return ""
    lines = src.splitlines()
    return " ".join(lines[line - 1].split()) if line <= len(lines) else ""


def render(console: Console, res, *, lanes: bool = True) -> None:
    """The listing, or the per-line and per-instruction tables, the costliest instruction's lanes, the fixes."""
    head = Text(f"{printable(res.kernel)}", style="bold")
    head.append(
        f"  ({printable(res.source)}, grid {','.join(map(str, res.grid))}, block "
        f"{','.join(map(str, res.block))}, {res.dynamic_smem} B dynamic shared memory, {res.arch})"
    )
    console.print(head)
    for a in res.arrays.values():
        d = a.decl
        what = f"{d.ctype} {d.name}{''.join(f'[{x}]' for x in d.dim_text)}" if d else a.name
        console.print(
            f"  __shared__ {printable(what)}: {a.size} bytes at shared offset {a.base}"
            + (f" ({printable(a.note)})" if a.note else ""),
            markup=False,
            highlight=False,
        )
    for n in res.notes:
        console.print(f"  note: {printable(n)}", markup=False, highlight=False)
    if not res.reports:
        return _render_listing(console, res)
    how = {"simulate": "emulated on the CPU", "gpu": "recorded on the GPU"}[res.mode]
    s = res.sample
    nb, nw = _blocks(res), _warps(res)
    console.print(
        f"Sample: {how}, the first {min(s.blocks, nb)} of {nb} block(s) x warps 0-{min(s.warps, nw) - 1} of "
        f"{nw}, the first {s.executions} executions per instruction per warp "
        f"({res.meta.get('recorded', 0)} warp accesses recorded, {res.meta.get('dropped', 0)} more counted)",
        markup=False,
        highlight=False,
    )
    for n in res.meta.get("notes", []):
        console.print(f"  note: {printable(n)}", markup=False, highlight=False)
    console.print()
    _render_lines(console, res)
    console.print()
    _render_instrs(console, res)
    top = next((r for r in res.reports if r.result is not None and r.excessive > 0), None)
    if top is not None:
        console.print()
        ar = top.result
        t = Text(
            f"Costliest: #{top.instr.index} `{printable(top.instr.text)}` at "
            f"{printable(_where(top.instr.file, top.instr.line))} on {printable(top.array or '?')}: ",
            style="bold",
        )
        t.append(f"{ar.wavefronts} wavefronts (ideal {ar.ideal}), ")
        t.append_text(degree_text(ar))
        console.print(t)
        if lanes:
            console.print(lane_table(ar))
            for ph in phase_lines(ar):
                console.print(ph)
    _render_fixes(console, res, lanes)
    if res.emitted:
        console.print(
            f"\nSpec written to {printable(res.emitted)} (smemtile analyze it for the what-ifs)",
            markup=False,
            highlight=False,
        )


def _render_listing(console: Console, res) -> None:
    console.print()
    rows = []
    for d in _listing_lines(res):
        ops = sorted({_op_text(i) for i in res.instrs if (i.file, i.line) == (d["file"], d["line"])})
        rows.append(
            [
                _where(d["file"], d["line"]),
                str(d["count"]),
                ", ".join(ops),
                ", ".join(d["arrays"]) or "?",
                _source_line(res, d["file"], d["line"]),
            ]
        )
    console.print(
        _grid(
            "Shared-memory instructions per source line (from the PTX; nothing was run):",
            ["line", "instructions", "ops", "array", "source"],
            rows,
        )
    )
    console.print()
    rows = [
        [str(i.index), _where(i.file, i.line), _op_text(i), i.array or "?", i.predicate, i.text]
        for i in res.instrs
    ]
    console.print(
        _grid("Instructions (PTX order):", ["#", "line", "op", "array", "guard", "PTX"], rows, left=2)
    )


def _render_lines(console: Console, res) -> None:
    full = _full(res)
    heads = ["line", "executions", "L1 Wavefronts Shared", "Ideal", "Excessive", "worst", "array"]
    if res.ncu is not None:
        heads += ["ncu Wavefronts", "ncu per exec", "match"]
    heads.append("source")
    rows, styles = [], []
    notes = []
    for ln in res.lines:
        worst = max((r.result.degree for r in ln.instrs if r.result), default=None)
        row = [
            _where(ln.file, ln.line),
            str(ln.executions),
            _num(ln.wavefronts),
            _num(ln.ideal),
            _num(ln.excessive),
            "-" if worst is None else f"{worst:g}-way" if float(worst).is_integer() else f"{worst:.2f}x",
            ", ".join(ln.arrays) or "?",
        ]
        if res.ncu is not None:
            m = res.ncu.get(_where(ln.file, ln.line))
            ok, why = _match(ln.wavefronts, ln.executions, m, full, ln)
            row += [
                "-" if not m else str(m["wavefronts"]),
                "-" if not m or not m.get("instructions") else f"{m['wavefronts'] / m['instructions']:.2f}",
                ok,
            ]
            if why and ok == "no":
                notes.append(f"disagreement {_where(ln.file, ln.line)}: {why}")
            elif why and ok == "-" and (m or why.startswith("16-byte")):  # ncu measured it, or cannot
                notes.append(f"not compared {_where(ln.file, ln.line)}: {why}")
        row.append(_source_line(res, ln.file, ln.line))
        rows.append(row)
        hot = "bold red" if ln.excessive > 0 else ""
        styles.append([hot] + [""] * (len(row) - 1))
    console.print(
        _grid(
            "Per source line, costliest first (over the sampled warps; Nsight Compute's columns):",
            heads,
            rows,
            styles,
        )
    )
    for n in notes:
        console.print(f"  {printable(n)}", markup=False, highlight=False)


def _render_instrs(console: Console, res) -> None:
    rows = []
    for r in res.reports:
        i = r.instr
        if r.result is None:
            rows.append(
                [
                    str(i.index),
                    _where(i.file, i.line),
                    _op_text(i),
                    r.array or "?",
                    str(r.executions),
                    "-",
                    "-",
                    "-",
                    r.note or i.text,
                ]
            )
            continue
        rows.append(
            [
                str(i.index),
                _where(i.file, i.line),
                _op_text(i),
                r.array or "?",
                str(r.executions),
                f"{r.worst} ({r.worst_ideal})",
                f"{r.mean:.2f} ({r.mean_ideal:.2f})",
                _num(r.excessive),
                i.text,
            ]
        )
    console.print(
        _grid(
            "Per instruction (worst and mean wavefronts over the recorded executions, ideal in brackets):",
            ["#", "line", "op", "array", "executions", "worst", "mean", "Excessive", "PTX"],
            rows,
            left=2,
        )
    )


def _render_fixes(console: Console, res, lanes: bool) -> None:
    for name, why in res.no_fix.items():
        console.print(
            f"\nNo fix for {printable(name)}: {printable(why)}; the tables above still hold.",
            markup=False,
            highlight=False,
        )
    for f in res.fixes:
        console.print()
        rec = f.fix.recommended
        t = Text(f"Fix for {f.array.name}: ", style="bold")
        if not f.fix.needed:
            t.append("already conflict-free; keep the declaration")
            console.print(t)
            continue
        t.append(f"{rec.layout.describe()}: {f.fix.reason}")
        console.print(t)
        console.print(
            "  before: " + "\n          ".join(declaration_text(f, f.fix.baseline.layout)),
            markup=False,
            highlight=False,
        )
        console.print(
            "  after:  " + "\n          ".join(declaration_text(f, rec.layout)), markup=False, highlight=False
        )
        saving = f.before - f.after
        pct = 100 * saving / f.before if f.before else 0
        console.print(
            f"  predicted: {_num(f.before)} -> {_num(f.after)} L1 Wavefronts Shared over the sampled "
            f"warps ({pct:.0f}% fewer)",
            markup=False,
            highlight=False,
        )
        worst = max(f.reports, key=lambda r: r.excessive)
        after = f.relaid.get(worst.instr.index)
        if after is not None and lanes:
            t = Text(
                f"  re-derived #{worst.instr.index} at {_where(worst.instr.file, worst.instr.line)} under "
                f"{rec.layout.describe()}: {after.wavefronts} wavefronts (ideal {after.ideal}), "
            )
            t.append_text(degree_text(after))
            console.print(t)
            console.print(lane_table(after, worst.result.worst))
