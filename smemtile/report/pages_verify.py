"""``smemtile verify SPEC --export FILE.html``: the per-variant table as a page, from the document ``verify --json``
prints: correct, time, throughput (GPU runs), registers and spills (ptxas or the driver), the model's occupancy
against the driver's, and a bar figure of the variants' occupancy (model and, on a GPU, driver) and time.

With ``--compile-only`` (no GPU) the time, throughput and driver columns say "not run" rather than vanish, so a
page from a GPU run has the same table with numbers in them.
"""

from __future__ import annotations

from smemtile.report.html import command_page, esc, figure, table
from smemtile.report.svg import Svg


def _occ(o: dict | None) -> float | None:
    return None if not o else o.get("occupancy")


def _pct(v: float | None) -> str:
    return "not run" if v is None else f"{100 * v:.0f}%"


def _throughput(r: dict) -> str:
    for k, unit in (("tflops", "TFLOP/s"), ("gbps", "GB/s"), ("value", "")):
        if r.get(k) is not None:
            return f"{r[k]:.1f} {unit or r.get('unit', '')}".strip()
    return "not run"


def variant_rows(doc: dict) -> list[list[object]]:
    rows = []
    for r in doc["variants"]:
        occ = r.get("occupancy") or {}
        m, d = occ.get("model") or {}, occ.get("driver")
        correct = "not run" if r.get("correct") is None else ("yes" if r["correct"] else "NO")
        t = r.get("time_ms")
        rows.append(
            [
                r["variant"],
                r.get("layout_text", ""),
                correct,
                "not run" if t is None else f"{t:.4f}",
                _throughput(r),
                r.get("registers"),
                r.get("spills"),
                r.get("static_smem_bytes"),
                f"{m.get('active_blocks', '-')} ({_pct(_occ(m))})",
                "not run" if d is None else f"{d.get('active_blocks', '-')} ({_pct(_occ(d))})",
                m.get("limiter", ""),
            ]
        )
    return rows


def occupancy_bars(doc: dict) -> Svg:
    """Per variant the model's occupancy (and the driver's where the GPU ran it) as horizontal bars."""
    vs = doc["variants"]
    row_h, left, top, width = 26, 200, 40, 760
    height = top + len(vs) * row_h + 36
    svg = Svg(
        width,
        height,
        f"occupancy per variant: the model's{' and the driver' if not doc.get('compile_only') else ''}"
        f" of {len(vs)} variants",
        data_figure="verify-occupancy",
        data_variants=len(vs),
    )
    svg.text(
        4,
        16,
        "Occupancy per variant (blue: the model; grey: the driver, on a GPU run)",
        size=12,
        weight="bold",
    )
    x1 = width - 70
    for f in (0, 0.25, 0.5, 0.75, 1.0):
        x = left + (x1 - left) * f
        svg.line(x, top - 4, x, top + len(vs) * row_h, stroke="#e9ecef")
        svg.text(x, top + len(vs) * row_h + 14, f"{f:.0%}", size=9, anchor="middle", fill="#495057")
    for k, r in enumerate(vs):
        y = top + k * row_h
        occ = r.get("occupancy") or {}
        m, d = _occ(occ.get("model")), _occ(occ.get("driver"))
        svg.text(4, y + 15, r["variant"], size=10)
        if m is not None:
            svg.rect(
                left,
                y + 3,
                (x1 - left) * m,
                9,
                "#1c7ed6",
                title=f"{r['variant']}: model {m:.0%}",
                data_variant=r["variant"],
                data_model=round(m, 4),
            )
        if d is not None:
            svg.rect(
                left,
                y + 13,
                (x1 - left) * d,
                9,
                "#868e96",
                title=f"{r['variant']}: driver {d:.0%}",
                data_driver=round(d, 4),
            )
        svg.text(x1 + 6, y + 15, f"{_pct(m)}" + (f" / {_pct(d)}" if d is not None else ""), size=9)
    return svg


def verify_page(doc: dict) -> str:
    """The page of a ``verify --json`` document (a kernel spec's variants)."""
    p = doc.get("problem") or {}
    what = f"{doc.get('family', '')} {', '.join(f'{k}={v}' for k, v in p.items())} on {doc.get('arch', '')}"
    heads = [
        "variant",
        "layout",
        "correct",
        "time ms",
        "throughput",
        "registers",
        "spills",
        "static smem B",
        "model blocks/SM (occ.)",
        "driver blocks/SM (occ.)",
        "limiter",
    ]
    rows = variant_rows(doc)
    good = {"yes": "good", "NO": "bad"}
    tab = table(heads, rows, num=(3, 5, 6, 7), cls=lambda i, j: good.get(rows[i][j], "") if j == 2 else "")
    if doc.get("compile_only"):
        head = (
            '<p class="verdict ok">Compiled only (--compile-only): registers and shared memory from ptxas, '
            "occupancy from the model; correctness, time and the driver's occupancy need a GPU run.</p>"
        )
    elif doc.get("correct") is False:
        head = '<p class="verdict">A variant computed a wrong result.</p>'
    else:
        sp = doc.get("speedup")
        head = (
            '<p class="verdict ok">Every variant is correct'
            + (f"; the fixed layout runs {sp:.2f}x the baseline's speed" if sp else "")
            + ".</p>"
        )
    agree = doc.get("occupancy_agree")
    notes = (
        []
        if agree is None
        else [f"The model's occupancy {'agrees' if agree else 'DISAGREES'} with the driver's."]
    )
    for r in doc["variants"]:
        notes += [f"{r['variant']}: {n}" for n in r.get("notes") or []]
        if r.get("compile_note"):
            notes.append(f"{r['variant']}: {r['compile_note']}")
    body = (
        tab
        + figure(occupancy_bars(doc), "occupancy per variant")
        + "".join(f'<p class="note">{esc(n)}</p>' for n in notes)
    )
    exprs = "".join(
        f"<h3>{esc(r['variant'])}</h3><pre><code>{esc(r.get('name_expression', ''))}</code></pre>"
        for r in doc["variants"]
    )
    sections = [("variants", "Variants", body), ("kernels", "Kernels (name expressions)", exprs)]
    return command_page(f"smemtile verify: {doc.get('spec', '')}", sections, note=esc(what), verdict=head)
