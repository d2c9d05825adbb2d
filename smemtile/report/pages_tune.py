"""``smemtile tune ... --export FILE.html``: per problem the plan (the candidates with their model ranks and
predictions, as a dot plot) and, once a run measured them, predicted against measured as a scatter with the
Spearman rank correlation the run's summary gives (``pipeline.tune.summarize``).

Drawn from the document ``tune --json`` prints: ``--dry-run``'s plan, or a run's rows and summary.
"""

from __future__ import annotations

from smemtile.report.html import command_page, esc, figure, table
from smemtile.report.pages_tiles import _nice_step, dot_chart
from smemtile.report.svg import Svg

UNITS = {"tflops": "TFLOP/s", "gbps": "GB/s"}


def _unit(d: dict) -> str:
    for r in d.get("rows") or []:
        if r.get("unit") in UNITS:
            return UNITS[r["unit"]]
    try:
        from smemtile.families import FAMILIES

        return UNITS.get(FAMILIES[d["family"]].work(d["problem"])[0], "")
    except Exception:  # a family without a work model: the numbers are shown without a unit
        return ""


def scatter(rows: list[dict], unit: str, rho: float | None, title: str) -> Svg:
    """Measured against predicted, one dot per measured configuration, the model's top-1 marked."""
    pts = [(float(r["predicted"]), float(r["value"]), r) for r in rows]
    size, left, top = 420, 70, 40
    width, height = left + size + 30, top + size + 50
    rho_text = f"Spearman rank correlation {rho:.3f}" if rho is not None else "no rank correlation"
    svg = Svg(
        width,
        height,
        f"{title}: measured against predicted {unit}, {len(pts)} configurations, {rho_text}",
        data_figure="tune-scatter",
        data_points=len(pts),
        data_spearman="" if rho is None else round(rho, 6),
    )
    svg.text(4, 16, f"Measured vs predicted {unit}: {rho_text}", size=12, weight="bold")
    svg.text(
        4,
        30,
        "each dot one configuration; dashed: measured = predicted; red: the model's #1",
        size=9,
        fill="#495057",
    )
    vals = [v for p in pts for v in p[:2]] or [0.0, 1.0]
    lo, hi = min(vals), max(vals)
    span = max(hi - lo, 0.02 * max(abs(hi), 1e-9), 1e-9)
    step = _nice_step(span / 4)
    vmin = max(0.0, (lo - 0.1 * span) // step * step)
    vmax = -(-(hi + 0.1 * span) // step) * step

    def sx(v: float) -> float:
        return left + size * (v - vmin) / (vmax - vmin)

    def sy(v: float) -> float:
        return top + size - size * (v - vmin) / (vmax - vmin)

    v = vmin
    while v <= vmax + 1e-9:
        svg.line(sx(v), top, sx(v), top + size, stroke="#e9ecef")
        svg.line(left, sy(v), left + size, sy(v), stroke="#e9ecef")
        svg.text(sx(v), top + size + 14, f"{v:g}", size=9, anchor="middle", fill="#495057")
        svg.text(left - 4, sy(v) + 3, f"{v:g}", size=9, anchor="end", fill="#495057")
        v += step
    svg.line(sx(vmin), sy(vmin), sx(vmax), sy(vmax), stroke="#adb5bd", stroke_dasharray="4 3")
    svg.text(left + size / 2, height - 8, f"predicted {unit}", size=10, anchor="middle")
    svg.text(
        12,
        top + size / 2,
        f"measured {unit}",
        size=10,
        anchor="middle",
        transform=f"rotate(-90 12 {top + size / 2:.1f})",
    )
    top1 = min((r.get("model_rank") or 1 << 30 for _, _, r in pts), default=None)
    for p, m, r in pts:
        mine = r.get("model_rank") == top1
        tip = (
            f"{r['label']}: model #{r.get('model_rank')}, predicted {p:.2f}, measured {m:.2f} {unit} "
            f"(measured #{r.get('measured_rank')})"
        )
        svg.circle(
            sx(p),
            sy(m),
            5,
            "#e03131" if mine else "#1c7ed6",
            title=tip,
            data_label=r["label"],
            data_predicted=round(p, 3),
            data_value=round(m, 3),
        )
    return svg


def _f(v, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def _problem(d: dict) -> str:
    p = d.get("problem") or {}
    return f"{d.get('family', '')} {', '.join(f'{k}={v}' for k, v in p.items())} on {d.get('arch', '')}"


def _section(d: dict, k: int) -> tuple[str, str, str]:
    unit = _unit(d)
    rows = d.get("rows")
    cands = d.get("candidates") or []
    plot_rows = [
        {
            "rank": c.get("model_rank") if c.get("model_rank") is not None else "-",
            "label": c["label"],
            "predicted": float(c["predicted"]),
            "error": None,
        }
        for c in cands
        if c.get("predicted") is not None
    ]
    n = len(cands) if rows is None else len(rows)
    out = [
        f'<p class="note">{esc(d.get("spec", ""))}: {n} candidates {"planned" if rows is None else "run"}.</p>'
    ]
    if plot_rows:
        out.append(
            figure(
                dot_chart(plot_rows, unit, len(plot_rows), figure_id="tune-plan"),
                f"the plan: the model's prediction per candidate ({unit})",
            )
        )
    if rows is None:
        tab = [
            [i, c["label"], c.get("source", ""), _f(c.get("model_rank"), "{}"), _f(c.get("predicted"))]
            for i, c in enumerate(cands, 1)
        ]
        out.append(
            table(["#", "configuration", "from", "model rank", f"predicted {unit}"], tab, num=(0, 3, 4))
        )
        out.append(
            '<p class="note">Not measured yet: run without --dry-run on a GPU to compile, check and time '
            "them; the page of that run plots predicted against measured.</p>"
        )
        return (f"problem{k}", f"Plan: {_problem(d)}", "".join(out))
    s = d.get("summary") or {}
    ok = [r for r in rows if r.get("status") == "ok" and r.get("predicted") is not None and r.get("value")]
    rho = s.get("rank_correlation")
    if ok:
        out.append(figure(scatter(ok, unit, rho, _problem(d)), "predicted against measured"))
    words = (
        f"Spearman rank correlation {rho:.3f} over {s.get('rank_correlation_n')} configurations"
        if rho is not None
        else esc(s.get("rank_correlation_note") or "no rank correlation")
    )
    t1 = s.get("model_top1")
    if t1:
        words += (
            f"; the model's #1 ({esc(t1['label'])}) measured #{t1['measured_rank']}, "
            f"{100 * t1['slower_than_best']:.1f}% slower than the best"
        )
    out.append(f"<p>{words}.</p>")
    tab = [
        [
            r["label"],
            r.get("source", ""),
            _f(r.get("model_rank"), "{}"),
            _f(r.get("predicted")),
            _f(r.get("measured_rank"), "{}"),
            _f(r.get("time_ms"), "{:.4f}"),
            _f(r.get("value")),
            r.get("status", ""),
            r.get("reason", "") or "",
        ]
        for r in rows
    ]
    out.append(
        table(
            [
                "configuration",
                "from",
                "model rank",
                f"predicted {unit}",
                "measured rank",
                "time ms",
                f"measured {unit}",
                "status",
                "why skipped",
            ],
            tab,
            num=(2, 3, 4, 5, 6),
        )
    )
    return (f"problem{k}", f"Measured: {_problem(d)}", "".join(out))


def tune_page(doc: dict) -> str:
    """The page of a ``tune --json`` document (``--dry-run``'s plan or a run's results)."""
    problems = doc.get("problems") or [doc]
    dry = bool(doc.get("dry_run"))
    sections = [_section(d, k) for k, d in enumerate(problems, 1)]
    dev = problems[0].get("device")
    dev = dev.get("name", "") if isinstance(dev, dict) else dev
    note = esc(
        f"{len(problems)} problem(s); "
        + ("the plan (--dry-run), nothing timed" if dry else f"measured on {dev or 'the GPU'}")
    )
    title = "smemtile tune --dry-run" if dry else "smemtile tune"
    return command_page(f"{title}: {problems[0].get('spec', '')}", sections, note=note)
