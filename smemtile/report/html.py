"""The report page: one self-contained HTML file (inline SVG and CSS, no script, no network) of an analysis.

Sections, each in the table of contents:

    Summary       per access the op, worst / ideal wavefronts and degree before and after the fix, the fix;
                  total wavefronts saved, shared memory, occupancy
    Bank heatmaps per access the worst instruction, lanes x banks and the buffer's words, before and after the
                  fix for that same instruction (report.figures_banks)
    Layouts       each buffer's layout as a grid: swizzle chunk -> chunk, padding as banks, TMA's four modes
    Occupancy     the Occupancy Calculator's three curves with this kernel marked, the limiter in words
    Tile ranking  predicted throughput per candidate with the expected error (where a tile model applies)
    Declarations  the exact C++ (a plain <pre>: copies as written) and the layout diff
    Checklist     the review checklist

Every figure is drawn from the ``AnalyzeReport`` the tables print, so picture and table cannot disagree. A
Content-Security-Policy forbids every fetch and every script: names in the spec are text, never markup.
"""

from __future__ import annotations

import re
from html import escape

from smemtile.report.analyze import AnalyzeReport
from smemtile.report.figures_banks import buffer_words, lanes_by_banks, layout_grid, same_instruction
from smemtile.report.figures_charts import occupancy_curves, tile_chart
from smemtile.report.svg import Svg, standalone

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
SECTIONS = (
    ("summary", "Summary"),
    ("heatmaps", "Bank heatmaps: the worst instruction before and after the fix"),
    ("layouts", "Layouts: padding and swizzle as grids"),
    ("occupancy", "Occupancy"),
    ("tiles", "Tile ranking"),
    ("declarations", "Declarations"),
    ("checklist", "Review checklist"),
)
STYLE = """
main{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#212529;background:#f8f9fa;
max-width:1240px;margin:0 auto;padding:16px 20px 60px}
h1{font-size:22px;margin:8px 0 4px}h2{font-size:18px;border-bottom:2px solid #dee2e6;padding-bottom:4px;margin-top:34px}
h3{font-size:15px;margin:18px 0 6px}
nav ol{columns:2;margin:6px 0;padding-left:22px}nav a{color:#1864ab}
.verdict{font-size:16px;padding:8px 12px;border-radius:6px;background:#fff;border-left:5px solid #e03131}
.verdict.ok{border-left-color:#2f9e44}
table{border-collapse:collapse;width:100%;background:#fff;margin:6px 0 10px;table-layout:auto}
th,td{border:1px solid #dee2e6;padding:4px 8px;text-align:left;vertical-align:top;overflow-wrap:anywhere}
th{background:#f1f3f5;white-space:nowrap;overflow-wrap:normal}td.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
.bad{color:#c92a2a;font-weight:600}.good{color:#2b8a3e;font-weight:600}.warn{color:#e67700}
.figs{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}
figure{margin:0;background:#fff;border:1px solid #dee2e6;border-radius:6px;padding:8px;max-width:100%;box-sizing:border-box}
figure.half{flex:1 1 560px}figure svg{max-width:100%;height:auto;display:block}
figcaption{font-size:13px;color:#495057;margin-top:4px}
pre{background:#212529;color:#e9ecef;padding:10px 12px;border-radius:6px;overflow-x:auto;white-space:pre;font-size:13px}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.note{color:#495057;font-size:14px}td.nw{white-space:nowrap;overflow-wrap:normal}
"""


def _scoped(css: str, scope: str = ".smemtile-report") -> str:
    """Every rule of ``css`` limited to the page's own element, so the page also sits inside a notebook cell
    (``_repr_html_``) without restyling the notebook; ``main`` is that element itself."""
    out = []
    for rule in re.findall(r"([^{}]+)\{([^{}]*)\}", css):
        sels = ",".join(scope if s.strip() == "main" else f"{scope} {s.strip()}" for s in rule[0].split(","))
        out.append(f"{sels}{{{rule[1]}}}")
    return "\n".join(out)


def _e(x: object) -> str:
    return escape(str(x), quote=True)


def report_html(rep: AnalyzeReport, ranking: dict | None = None) -> str:
    """The page of ``rep``; ``ranking``: the full tile ranking (``pipeline.page.tile_ranking``), else the top
    candidates ``rep.tiles`` holds (no expected error)."""
    spec = rep.spec
    title = spec.name or spec.source
    body = [f"<h1>smemtile report: {_e(title)}</h1>", _header(rep), _verdict(rep), _toc()]
    body += [
        _summary(rep),
        _heatmaps(rep),
        _layouts(rep),
        _occupancy(rep),
        _tiles(rep, ranking),
        _declarations(rep),
        _checklist(rep),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>smemtile report: {_e(title)}</title><style>html,body{{margin:0;background:#f8f9fa}}\n"
        f'{_scoped(STYLE)}</style></head>\n<body><main class="smemtile-report">{"".join(body)}</main></body>'
        "</html>\n"
    )


def _section(key: str) -> str:
    name = dict(SECTIONS)[key]
    return f'<section id="{key}"><h2>{_e(name)}</h2>'


def _toc() -> str:
    items = "".join(f'<li><a href="#{k}">{_e(n)}</a></li>' for k, n in SECTIONS)
    return f'<nav aria-label="contents"><h2>Contents</h2><ol>{items}</ol></nav>'


def _header(rep: AnalyzeReport) -> str:
    spec, o = rep.spec, rep.occupancy["fixed"]
    bufs = "; ".join(f"{b.name}: {b.dtype} {list(b.shape)}, {b.layout.describe()}" for b in spec.buffers)
    return (
        f'<p class="note">arch {_e(spec.arch.name)} (CC {spec.arch.cc[0]}.{spec.arch.cc[1]}), {o["threads"]} '
        f"threads; buffers: {_e(bufs)}; source <code>{_e(spec.source)}</code></p>"
    )


def _verdict(rep: AnalyzeReport) -> str:
    c = rep.comparison
    tw = c["total_wavefronts"]
    bad = [r for r in rep.results if not r.conflict_free]
    if not bad:
        return '<p class="verdict ok">Every access is served at its ideal wavefronts: no fix needed.</p>'
    worst = max(bad, key=lambda r: r.degree)
    pct = 100 * (tw["before"] - tw["after"]) / max(1, tw["before"])
    fix = next((f for f in rep.fixes.buffers if f.buffer.name == worst.access.buffer), None)
    fx = (
        f"; fix {_e(fix.buffer.name)}: <b>{_e(fix.recommended.layout.describe())}</b>"
        if fix and fix.needed
        else ""
    )
    return (
        f'<p class="verdict">{len(bad)} of {len(rep.results)} accesses conflict; worst <b>{_e(worst.access.name)}'
        f"</b> {_degree(worst.degree)} ({worst.wavefronts} wavefronts, ideal {worst.ideal}){fx}. Total wavefronts "
        f"{tw['before']} &rarr; {tw['after']} ({pct:.0f}% fewer).</p>"
    )


def _degree(d: float) -> str:
    """As analyze words it: an integer degree is N-way, a fraction (cp.async's pipelined rounds) N.NNx."""
    return f"{d:g}-way" if float(d).is_integer() else f"{d:.2f}x"


def _summary(rep: AnalyzeReport) -> str:
    fixes = {f.buffer.name: f for f in rep.fixes.buffers}
    after = {a["access"]: a for a in rep.comparison["accesses"]}
    rows = []
    for r in rep.results:
        a = r.access
        op = (
            f"{a.op} x{a.matrices}{'.trans' if a.trans else ''}"
            if a.op in ("ldmatrix", "stmatrix")
            else (f"{a.op} {a.width} B")
        )
        f = fixes.get(a.buffer)
        fix = (
            (f.recommended.layout.describe() if f.needed else "none needed")
            if f
            else "no layout (raw addresses)"
        )
        c = after.get(a.name)
        aft = f"{c['after']['wavefronts']}/{c['after']['ideal']} ({c['after']['degree']:g}x)" if c else "-"
        cls = "good" if r.conflict_free else "bad"
        acls = "good" if c and c["after"]["wavefronts"] == c["after"]["ideal"] else "warn"
        rows.append(
            f"<tr><td>{_e(a.name)}</td><td>{_e(a.buffer)}</td><td>{_e(op)}</td>"
            f'<td class="num {cls}">{r.wavefronts}/{r.ideal} ({r.degree:g}x)</td><td>{_e(fix)}</td>'
            f'<td class="num {acls}">{_e(aft)}</td></tr>'
        )
    c = rep.comparison
    tw, sm, bl = c["total_wavefronts"], c["smem_bytes"], c["blocks_per_sm"]
    o = rep.occupancy["fixed"]
    occ = (
        f"occupancy {100 * o['occupancy']:.0f}% ({o['active_blocks']} blocks/SM, {o['active_warps']} warps; "
        f"limiter: {o['limiter'].replace('_', ' ')})"
    )
    return (
        _section("summary") + "<table><thead><tr><th>access</th><th>buffer</th><th>op</th><th>worst / ideal "
        "(degree)</th><th>fix</th><th>after the fix</th></tr></thead><tbody>"
        + "".join(rows)
        + f"</tbody></table><p>Total wavefronts over every instruction {tw['before']} &rarr; {tw['after']} "
        f"(ideal {c['ideal_wavefronts']}); shared memory {sm['before']} &rarr; {sm['after']} bytes; blocks/SM "
        f"{bl['before']} &rarr; {bl['after']}; {_e(occ)}.</p></section>"
    )


def _fig(svg: Svg | str, caption: str, cls: str = "") -> str:
    c = f' class="{cls}"' if cls else ""
    return f"<figure{c}>{svg}<figcaption>{_e(caption)}</figcaption></figure>"


def _heatmaps(rep: AnalyzeReport) -> str:
    out = [
        _section("heatmaps"),
        '<p class="note">Each row is a lane, each column a bank; a filled cell is a word the '
        "lane touches, coloured by how many distinct words its bank delivers in the lane's phase (the busiest "
        "bank of a phase is its wavefront count; lanes reading one word share it). Below, the same instruction "
        "on the buffer's storage, with the bank in each cell. <b>After</b> is the same instruction (same warp "
        "and loop values) under the fixed layout.</p>",
    ]
    for r, a in pairs(rep):
        i = r.worst
        out.append(
            f"<h3>{_e(r.access.name)} ({_e(r.access.op)} of {_e(r.access.buffer)}): {r.wavefronts} "
            f"wavefronts, ideal {r.ideal}</h3>"
        )
        j = same_instruction(r, i, a) if a is not None else None
        figs = [_fig(lanes_by_banks(r, i, "before"), f"before: {r.layout.describe()}", "half")]
        words = [_fig(buffer_words(r, i, "before"), f"before: {r.buffer.name} storage", "half")]
        if a is not None and j is not None:
            figs.append(_fig(lanes_by_banks(a, j, "after"), f"after: {a.layout.describe()}", "half"))
            words.append(_fig(buffer_words(a, j, "after"), f"after: {a.buffer.name} storage", "half"))
        out.append(f'<div class="figs">{"".join(figs)}</div><div class="figs">{"".join(words)}</div>')
        if a is None:
            out.append(f'<p class="note">No after: {_e(_why_same(r))}.</p>')
        elif j is None:
            out.append(
                '<p class="note">The fixed kernel issues no instruction with these warp and loop values.</p>'
            )
    return "".join(out) + "</section>"


def _why_same(r) -> str:
    if r.rows is None and r.cols is None:
        return "raw byte addresses: there is no layout to change; edit the addresses themselves"
    if r.conflict_free:
        return "conflict-free, and the fix leaves this buffer's layout as it is"
    return "no layout the fix search tried removes a wavefront here, so the layout stays"


def pairs(rep: AnalyzeReport) -> list:
    """(baseline result, fixed result or None) per access: None where the fix leaves its layout as it is."""
    after = {r.access.name: r for r in rep.fixed_results}
    out = []
    for r in rep.results:
        a = after.get(r.access.name)
        out.append((r, a if a is not None and a.layout != r.layout else None))
    return out


def _layouts(rep: AnalyzeReport) -> str:
    from smemtile.model.layout import TMA_MODES, Layout

    out = [_section("layouts")]
    fixes = {f.buffer.name: f for f in rep.fixes.buffers}
    for b in rep.spec.buffers:
        f = fixes.get(b.name)
        figs = []
        if b.layout.tma is not None:
            for mode in TMA_MODES:
                lay = Layout.for_tma(mode, b.elem_bytes)
                mark = " (this tile)" if mode == b.layout.tma else ""
                figs.append(
                    _fig(layout_grid(b, lay, f"{b.name}: TMA {mode}{mark}"), f"TMA {mode}: {lay.describe()}")
                )
        else:
            figs.append(
                _fig(
                    layout_grid(b, b.layout, f"{b.name}: {b.layout.describe()} (spec)"), "as the spec lays it"
                )
            )
            if f is not None and f.needed and f.recommended.layout != b.layout:
                lay = f.recommended.layout
                figs.append(
                    _fig(layout_grid(b, lay, f"{b.name}: {lay.describe()} (fix)"), f"the fix: {f.reason}")
                )
        out.append(f'<h3>{_e(b.name)}</h3><div class="figs">{"".join(figs)}</div>')
    return "".join(out) + "</section>"


def _occupancy(rep: AnalyzeReport) -> str:
    o = rep.occupancy["fixed"]
    arch = rep.spec.arch
    figs, here = occupancy_curves(arch, o["threads"], o["regs"], o["static_smem"], o["dynamic_smem"])
    lim = o["limiter"].replace("_", " ")
    text = (
        f"This kernel (the fixed variant): {o['threads']} threads, {o['regs']} registers/thread, "
        f"{o['static_smem'] + o['dynamic_smem']} bytes of shared memory per block &rarr; {o['active_blocks']} "
        f"blocks/SM, {o['active_warps']} of {arch.max_warps_per_sm} warps, occupancy "
        f"<b>{100 * o['occupancy']:.0f}%</b>. Limiter: <b>{_e(lim)}</b>"
        f" ({_e(_limits(o))}). Registers: {_e(o['regs_source'])}."
    )
    if o["active_blocks"] == 0:
        why = o.get("reason") or "0 blocks fit on an SM"
        text += f' <b class="bad">The block cannot launch: {_e(why)}.</b>'
    return (
        _section("occupancy") + f'<div class="figs">{"".join(_fig(s, s.label) for s in figs)}</div>'
        f'<p data-occupancy="{here["occupancy"]:.6f}">{text}</p></section>'
    )


def _limits(o: dict) -> str:
    lim = o.get("limits") or {}
    return (
        ", ".join(f"{k.replace('_', ' ')} allow {v} blocks" for k, v in lim.items() if v is not None)
        or "none"
    )


def _tiles(rep: AnalyzeReport, ranking: dict | None) -> str:
    out = _section("tiles")
    if ranking is None:
        t = rep.tiles or {}
        if "ranked" not in t:
            ranking = {"missing": t.get("missing", "no tile model applies")}
        else:
            cands = [
                {"rank": c.get("model_rank"), "label": c["label"], "predicted": c["predicted"], "error": None}
                for c in t["ranked"]
                if c.get("predicted") is not None
            ]
            this = t.get("this") or {}
            ranking = {
                "unit": t.get("unit", ""),
                "candidates": cands,
                "total": t.get("ranked_total", len(cands)),
                "this": {
                    "rank": this.get("model_rank"),
                    "label": this.get("label"),
                    "predicted": this.get("predicted"),
                },
                "error_text": "not given here (smemtile tiles prints it)",
                "command": t.get("command", ""),
            }
    if "missing" in ranking or not ranking.get("candidates"):
        why = ranking.get("missing", "the model ranks no candidate")
        return out + f'<p class="note">Not applicable: {_e(why)}</p></section>'
    this = ranking.get("this") or {}
    where = (
        f"this spec's tile ({_e(this.get('label'))}) is #{this['rank']}"
        if this.get("rank")
        else f"this spec's tile ({_e(this.get('label') or 'unnamed')}) is not among the ranked candidates"
        + (" (its own prediction is the last row)" if this.get("predicted") else "")
    )
    return (
        out
        + _fig(tile_chart(ranking), f"the ranking of {ranking.get('command', '')}")
        + f"<p>{where}. Expected error: {_e(ranking.get('error_text', 'unknown'))}. Reproduce with "
        f"<code>{_e(ranking.get('command', ''))}</code>.</p></section>"
    )


def _declarations(rep: AnalyzeReport) -> str:
    decl = rep.declarations["fixed"]
    out = [
        _section("declarations"),
        f"<p>{decl.total_bytes} bytes per block"
        + (
            ", dynamic shared memory with the opt-in attribute"
            if decl.dynamic
            else ", static __shared__ arrays"
        )
        + ":</p>",
        f"<pre><code>{_e(chr(10).join(decl.lines()))}</code></pre>",
    ]
    from smemtile.report.layout import layout_diff

    for f in rep.fixes.buffers:
        diff = layout_diff(f.buffer, f.baseline.layout, f.recommended.layout)
        if diff:
            out.append(
                f"<h3>{_e(f.buffer.name)}: the declaration's diff</h3><pre><code>{_e(chr(10).join(diff))}"
                "</code></pre>"
            )
    return "".join(out) + "</section>"


def _checklist(rep: AnalyzeReport) -> str:
    rows = "".join(
        f'<tr><td class="{"good" if i.status == "pass" else "bad" if i.status == "fail" else ""}">'
        f"{_e(i.status)}</td><td>{_e(i.text)}</td><td>{_e(i.reason)}</td></tr>"
        for i in rep.checklist
    )
    return (
        _section("checklist") + "<table><thead><tr><th>status</th><th>item</th><th>why</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></section>"
    )


def report_svg(rep: AnalyzeReport) -> str:
    """``analyze --export FILE.svg``: the bank heatmaps (lanes x banks) before and after, one standalone SVG."""
    figs: list[Svg] = []
    for r, a in pairs(rep):
        figs.append(lanes_by_banks(r, r.worst, "before"))
        j = same_instruction(r, r.worst, a) if a is not None else None
        if a is not None and j is not None:
            figs.append(lanes_by_banks(a, j, "after"))
    return standalone(figs, f"smemtile analyze: {rep.spec.name or rep.spec.source}")


# ---- the other commands' pages (tiles, verify, tune, inspect --export FILE.html): the same frame and CSS ----------


def command_page(
    title: str, sections: list[tuple[str, str, str]], *, note: str = "", verdict: str = ""
) -> str:
    """One self-contained page of ``sections`` (``(id, heading, html body)``, each in the table of contents),
    with the analyze page's frame: the Content-Security-Policy, the scoped CSS, no script."""
    items = "".join(f'<li><a href="#{k}">{_e(n)}</a></li>' for k, n, _ in sections)
    body = [f"<h1>{_e(title)}</h1>"]
    if note:
        body.append(f'<p class="note">{note}</p>')
    if verdict:
        body.append(verdict)
    body.append(f'<nav aria-label="contents"><h2>Contents</h2><ol>{items}</ol></nav>')
    body += [f'<section id="{k}"><h2>{_e(n)}</h2>{html}</section>' for k, n, html in sections]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>html,body{{margin:0;background:#f8f9fa}}\n"
        f'{_scoped(STYLE)}</style></head>\n<body><main class="smemtile-report">{"".join(body)}</main></body>'
        "</html>\n"
    )


def table(
    heads: list[str],
    rows: list[list[object]],
    *,
    num: tuple[int, ...] = (),
    cls=None,
    nowrap: tuple[int, ...] = (),
) -> str:
    """An HTML table of escaped cells; columns in ``num`` right-aligned, in ``nowrap`` kept on one line (short
    words); ``cls(row_index, col) -> class``."""
    th = "".join(f"<th>{_e(h)}</th>" for h in heads)
    out = []
    for i, r in enumerate(rows):
        cells = []
        for j, v in enumerate(r):
            parts = ("num" if j in num else "", "nw" if j in nowrap else "", (cls(i, j) if cls else "") or "")
            c = " ".join(x for x in parts if x)
            cells.append(f'<td class="{c}">{_e(v)}</td>' if c else f"<td>{_e(v)}</td>")
        out.append(f"<tr>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(out)}</tbody></table>"


def figure(svg: Svg | str, caption: str, cls: str = "") -> str:
    """A figure with its caption (the analyze page's)."""
    return _fig(svg, caption, cls)


def esc(x: object) -> str:
    return _e(x)
