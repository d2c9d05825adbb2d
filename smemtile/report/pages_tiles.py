"""``smemtile tiles ... --export FILE.html``: the ranking as a dot plot with the expected-error whiskers, the
candidates and the rejected ones as tables, the calibration in one line, and measured points from the tune cache.

Everything is drawn from the document ``tiles --json`` prints (``pipeline.tiles.json_doc`` for a GEMM,
``family_json_doc`` for ``--family``), so the page and the JSON cannot disagree. Measured points come from the
tune cache's rows that name this problem and a ranked candidate's label (``measured_points``); none: no points.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from smemtile.report.figures_charts import _nice_step  # the axis step the analyze page uses
from smemtile.report.html import command_page, esc, figure, table
from smemtile.report.svg import Svg

TOP = 24  # candidates plotted


def _is_family(doc: dict) -> bool:
    return "family" in doc and "unit" in doc


def ranking(doc: dict) -> dict:
    """``{"unit", "rows": [{rank, label, predicted, error}], "total", "error_text", "gpu"}`` of a tiles document."""
    cal = doc.get("calibration") or {}
    if _is_family(doc):
        err, unm = cal.get("expected_error"), cal.get("expected_error_unmeasured")
        rows = []
        for c in doc["candidates"]:
            e = unm if (c.get("measured") is False and unm is not None) else err
            rows.append({"rank": c["rank"], "label": c["label"], "predicted": float(c["gbps"]), "error": e})
        if err is not None:
            text = f"expected error {err:.1%} ({cal.get('expected_error_of', '')})"
            if unm is not None:
                text += f"; {unm:.1%} for candidates never timed"
        else:
            text = "uncalibrated here: no expected error"
        gpu = cal.get("gpu") or (doc.get("gpu") or {}).get("name", "")
        return {
            "unit": "GB/s",
            "rows": rows,
            "total": doc["counts"].get("ranked", len(rows)),
            "error_text": text,
            "gpu": gpu,
            "date": "",
        }
    err = cal.get("median_error") if cal.get("applies") else None
    rows = [
        {"rank": c["rank"], "label": c["label"], "predicted": float(c["tflops"]), "error": err}
        for c in doc["candidates"]
    ]
    return {
        "unit": "TFLOP/s",
        "rows": rows,
        "total": doc["counts"].get("ranked", len(rows)),
        "error_text": f"expected error: {cal.get('expected_error', 'unknown')}",
        "gpu": cal.get("gpu", ""),
        "date": cal.get("date", ""),
    }


def problem_of(doc: dict) -> dict:
    """The problem a tiles document ranks, as the tune cache's rows name it (``{"M", "N", "K", "dtype"}`` or
    ``{"rows", "cols", "dtype", ...}``)."""
    p = doc["problem"]
    if _is_family(doc):
        return dict(p)
    return {"M": p["M"], "N": p["N"], "K": p["K"], "dtype": p["dtype"]}


def measured_points(doc: dict, cache_path: Path | None) -> dict[str, float]:
    """label -> measured value (the unit of the ranking) from the tune cache's ok rows for this problem: rows
    that carry ``problem`` equal to this one and a ``label`` (a row without them cannot be matched to a
    candidate and is left out). A missing or unreadable cache gives none."""
    from smemtile.cache import default_cache_path

    path = Path(cache_path) if cache_path is not None else default_cache_path()
    if not path.is_file():
        return {}
    want = problem_of(doc)
    unit = "tflops" if not _is_family(doc) else "gbps"
    labels = {c["label"] for c in doc["candidates"]}
    out: dict[str, float] = {}
    try:
        from smemtile.cache import ResultCache

        rows = ResultCache(path).rows.values()
    except Exception:  # a broken cache is the tune command's to report; the page just has no points
        return {}
    for row in rows:
        if row.get("status") != "ok" or row.get("label") not in labels or row.get("unit") != unit:
            continue
        p = row.get("problem")
        if not isinstance(p, dict) or any(p.get(k) != v for k, v in want.items()):
            continue
        out[row["label"]] = max(out.get(row["label"], 0.0), float(row["value"]))
    return out


def dot_chart(
    rows: list[dict],
    unit: str,
    total: int,
    measured: dict[str, float] | None = None,
    figure_id: str = "tiles",
) -> Svg:
    """Predicted value per candidate as a dot with its expected-error whiskers; a measured value (where the
    tune cache has one) as a diamond on the same row."""
    measured = measured or {}
    rows = rows[:TOP]
    vals = [r["predicted"] * (1 - (r.get("error") or 0)) for r in rows] + list(measured.values())
    highs = [r["predicted"] * (1 + (r.get("error") or 0)) for r in rows] + list(measured.values())
    lo, hi = (min(vals), max(highs)) if vals else (0.0, 1.0)
    span = max(hi - lo, 0.02 * max(hi, 1e-9), 1e-9)
    step = _nice_step(span / 4)
    vmin = max(0.0, np.floor((lo - 0.1 * span) / step) * step)
    vmax = np.ceil((hi + 0.1 * span) / step) * step
    label_w = min(300, 12 + 6.2 * max((len(r["label"]) for r in rows), default=10))
    row_h, top, width = 18, 44, 860
    height = top + len(rows) * row_h + 44
    n_meas = sum(r["label"] in measured for r in rows)
    svg = Svg(
        width,
        height,
        f"{figure_id}: predicted {unit} of the top {len(rows)} candidates with the expected "
        f"error" + (f", {n_meas} measured" if n_meas else ""),
        data_figure=figure_id,
        data_unit=unit,
        data_measured=n_meas,
    )
    svg.text(4, 16, f"Predicted {unit} per candidate (top {len(rows)} of {total})", size=12, weight="bold")
    legend = "dot: the model's prediction; whiskers: x (1 +- expected error)"
    if n_meas:
        legend += "; diamond: measured (tune cache)"
    svg.text(4, 32, f"{legend}; the axis starts at {vmin:g}", size=9, fill="#495057")
    x0, x1 = label_w + 34, width - 90

    def px(v: float) -> float:
        return x0 + (x1 - x0) * (v - vmin) / (vmax - vmin)

    v = vmin
    while v <= vmax + 1e-9:
        svg.line(px(v), top - 2, px(v), top + len(rows) * row_h, stroke="#e9ecef")
        svg.text(px(v), top + len(rows) * row_h + 14, f"{v:g}", size=9, anchor="middle", fill="#495057")
        v += step
    svg.text((x0 + x1) / 2, height - 8, unit, size=10, anchor="middle")
    for k, r in enumerate(rows):
        y = top + k * row_h
        mid = y + row_h / 2
        name = r["label"] if len(r["label"]) <= 46 else r["label"][:45] + "…"
        svg.text(4, y + 12, f"#{r['rank']}", size=9, fill="#495057")
        svg.text(34, y + 12, name, size=9)
        p, e = float(r["predicted"]), r.get("error")
        if e:
            a, b = px(p * (1 - e)), px(p * (1 + e))
            svg.line(a, mid, b, mid, stroke="#495057", width=1.2)
            svg.line(a, y + 5, a, y + row_h - 5, stroke="#495057")
            svg.line(b, y + 5, b, y + row_h - 5, stroke="#495057")
        tip = f"#{r['rank']} {r['label']}: {p:.2f} {unit} predicted" + (f" +- {100 * e:.1f}%" if e else "")
        svg.circle(px(p), mid, 5, "#1c7ed6", title=tip, data_rank=r["rank"], data_predicted=round(p, 3))
        m = measured.get(r["label"])
        if m is not None:
            cx = px(m)
            pts = [(cx, mid - 6), (cx + 6, mid), (cx, mid + 6), (cx - 6, mid)]
            svg.polyline(pts + pts[:1], stroke="#862e2e", width=1, fill="#e8590c", data_measured=round(m, 3))
        svg.text(
            x1 + 6, y + 12, f"{p:.1f}" + (f" / {m:.1f}" if m is not None else ""), size=9, fill="#495057"
        )
    return svg


def _f(v, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def tiles_page(doc: dict, measured: dict[str, float] | None = None) -> str:
    """The page of a ``tiles --json`` document; ``measured``: label -> measured value (``measured_points``)."""
    rk = ranking(doc)
    fam = _is_family(doc)
    p = doc["problem"]
    if fam:
        what = f"{doc['family']} {', '.join(f'{k}={v}' for k, v in p.items())} on {doc.get('arch', '')}"
    else:
        what = f"GEMM {p['M']} x {p['N']} x {p['K']} {p['dtype']} on {p['arch']}"
    cal_line = ", ".join(x for x in (rk["gpu"], rk["date"], rk["error_text"]) if x)
    chart = dot_chart(rk["rows"], rk["unit"], rk["total"], measured)
    n_meas = len(measured or {})
    meas_note = (
        f"{n_meas} candidate(s) measured by <code>smemtile tune</code> (the tune cache): the diamonds."
        if n_meas
        else "No measured results for this problem in the tune cache."
    )
    plot = figure(chart, f"the ranking of {doc.get('command', '')}") + f'<p class="note">{meas_note}</p>'
    if fam:
        heads = ["rank", "configuration", "GB/s", "x copy", "threads", "smem B", "blocks/SM", "timed", "why"]
        rows = [
            [
                c["rank"],
                c["label"],
                _f(c["gbps"]),
                _f(c.get("copy_ratio"), "{:.3f}"),
                c.get("threads"),
                c.get("smem_bytes"),
                c.get("blocks_per_sm"),
                "yes" if c.get("measured") else "no",
                c.get("reason"),
            ]
            for c in doc["candidates"]
        ]
        num = (0, 2, 3, 4, 5, 6)
    else:
        heads = ["rank", "configuration", "TFLOP/s", "bound", "blocks/SM", "occupancy", "limiter", "why"]
        rows = [
            [
                c["rank"],
                c["label"],
                _f(c["tflops"], "{:.2f}"),
                c.get("bound"),
                c.get("blocks_per_sm"),
                _f(c.get("occupancy"), "{:.0%}"),
                c.get("limiter"),
                c.get("reason"),
            ]
            for c in doc["candidates"]
        ]
        num = (0, 2, 4, 5)
    nowrap = (heads.index("bound"), heads.index("limiter")) if "bound" in heads else ()
    if measured:
        heads.insert(3, "measured")
        for r, c in zip(rows, doc["candidates"], strict=True):
            r.insert(3, _f(measured.get(c["label"]), "{:.2f}"))
        num = tuple(sorted({*(n + (n >= 3) for n in num), 3}))
    cands = table(heads, rows, num=num, nowrap=tuple(n + (bool(measured) and n >= 3) for n in nowrap))
    rej = doc.get("rejected") or []
    counts = doc.get("counts") or {}
    rej_rows = [[r["label"], r.get("kind", ""), r.get("reason", ""), r.get("alike", "")] for r in rej]
    rej_html = (
        f"<p>{counts.get('rejected', len(rej))} rejected in all; "
        + esc(
            ", ".join(
                f"{k.removeprefix('rejected_')} {v}" for k, v in counts.items() if k.startswith("rejected_")
            )
        )
        + ".</p>"
        + (
            table(["configuration", "kind", "reason", "alike"], rej_rows, num=(3,), nowrap=(1,))
            if rej_rows
            else '<p class="note">None shown (--rejected 0).</p>'
        )
    )
    sections = [
        ("ranking", "Ranking: predicted throughput with the expected error", plot),
        ("candidates", "Candidates", cands),
        ("rejected", "Rejected", rej_html),
        (
            "calibration",
            "Calibration",
            f"<p>{esc(cal_line)}.</p><p>Reproduce with <code>{esc(doc.get('command', ''))}</code>.</p>",
        ),
    ]
    note = esc(
        f"{what}; {len(doc['candidates'])} of {rk['total']} ranked candidates shown; calibration: {cal_line}"
    )
    return command_page(f"smemtile tiles: {what}", sections, note=note)
