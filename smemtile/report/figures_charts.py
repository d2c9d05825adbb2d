"""The report page's charts: the CUDA Occupancy Calculator's three curves and the tile ranking.

Occupancy: ``model.occupancy.occupancy_batch`` (the driver's calculation, checked against
``cuOccupancyMaxActiveBlocksPerMultiprocessor``) swept over threads per block (warp steps), registers per thread
(1..255) and shared memory per block (allocation-unit steps up to the opt-in maximum), the other two held at this
kernel's values; the kernel is the marked point, whose value is ``smemtile occupancy``'s for the same numbers.

Tile ranking: the predicted TFLOP/s or GB/s of each ranked candidate as a bar with its expected-error band
(prediction x (1 +- error)), this spec's tile highlighted. The numbers come in as data (``pipeline.page``).
"""

from __future__ import annotations

import numpy as np

from smemtile.model.arch import Arch
from smemtile.model.arrays import unique_sorted
from smemtile.model.occupancy import occupancy_batch
from smemtile.report.svg import Svg

W, H = 400, 250
PAD_L, PAD_R, PAD_T, PAD_B = 46, 14, 34, 44


def _axes(svg: Svg, xmax: float, xlabel: str, xticks: list[float], fmt) -> None:
    x0, y0, x1, y1 = PAD_L, H - PAD_B, W - PAD_R, PAD_T
    svg.rect(x0, y1, x1 - x0, y0 - y1, "#ffffff", stroke="#ced4da")
    for pct in (0, 25, 50, 75, 100):
        y = y0 - (y0 - y1) * pct / 100
        svg.line(x0, y, x1, y, stroke="#e9ecef")
        svg.text(x0 - 5, y + 3, f"{pct}%", size=9, anchor="end", fill="#495057")
    for t in xticks:
        x = x0 + (x1 - x0) * t / xmax
        svg.line(x, y0, x, y0 + 4, stroke="#868e96")
        svg.text(x, y0 + 15, fmt(t), size=9, anchor="middle", fill="#495057")
    svg.text((x0 + x1) / 2, H - 8, xlabel, size=10, anchor="middle", fill="#343a40")


def _curve(
    title: str,
    xs: np.ndarray,
    occ: np.ndarray,
    this_x: float,
    this_occ: float,
    xlabel: str,
    xticks: list[float],
    fmt,
    key: str,
) -> Svg:
    xmax = float(xs[-1])
    svg = Svg(
        W,
        H,
        f"{title}; this kernel {100 * this_occ:.0f}% at {fmt(this_x)}",
        data_figure="occupancy",
        data_curve=key,
    )
    svg.text(4, 16, title, size=12, weight="bold")
    _axes(svg, xmax, xlabel, xticks, fmt)
    x0, y0, x1, y1 = PAD_L, H - PAD_B, W - PAD_R, PAD_T

    def px(x: float) -> float:
        return x0 + (x1 - x0) * x / xmax

    def py(o: float) -> float:
        return y0 - (y0 - y1) * o

    pts: list[tuple[float, float]] = []
    for k in range(len(xs)):  # a step curve: each value holds until the next sample
        if pts:
            pts.append((px(float(xs[k])), pts[-1][1]))
        pts.append((px(float(xs[k])), py(float(occ[k]))))
    svg.polyline(pts, "#1c7ed6", 2)
    cx, cy = px(this_x), py(this_occ)
    svg.line(cx, y0, cx, cy, stroke="#e03131", stroke_dasharray="3 3")
    svg.circle(
        cx,
        cy,
        5,
        "#e03131",
        title=f"this kernel: {fmt(this_x)} -> occupancy {100 * this_occ:.1f}%",
        data_marker="this",
        data_x=this_x,
        data_occupancy=round(this_occ, 6),
    )
    anchor = "end" if cx > (x0 + x1) / 2 else "start"
    svg.text(
        cx + (-8 if anchor == "end" else 8),
        max(y1 + 12, cy - 8),
        f"this kernel {100 * this_occ:.0f}%",
        size=10,
        anchor=anchor,
        fill="#c92a2a",
        weight="bold",
    )
    return svg


def _kib(v: float) -> str:
    return f"{v / 1024:g}K" if v % 1024 == 0 else f"{v / 1024:.1f}K"


def occupancy_curves(
    arch: Arch, threads: int, regs: int, static: int, dynamic: int
) -> tuple[list[Svg], dict]:
    """The three curves for this kernel and the occupancy at its own point (``occupancy_batch`` row)."""
    smem = static + dynamic
    ts = np.arange(32, arch.max_threads_per_block + 1, 32)
    rs = np.arange(1, arch.max_regs_per_thread + 1)
    unit = max(128, arch.smem_alloc_unit)
    ss = unique_sorted(np.concatenate([np.arange(0, arch.smem_optin_per_block + 1, unit), [smem]]))
    st = np.minimum(static, ss)  # the kernel's static part first, the rest dynamic (as it declares them)
    here = occupancy_batch(arch, threads, regs, static, dynamic)
    t = occupancy_batch(arch, ts, regs, static, dynamic)
    # the batch's rows are its threads column: held values are repeated to the swept one's length
    r = occupancy_batch(arch, np.full(len(rs), threads), rs, static, dynamic)
    s = occupancy_batch(arch, np.full(len(ss), threads), regs, st, ss - st)
    occ = float(here.occupancy[0])
    tmax = arch.max_threads_per_block
    figs = [
        _curve(
            "Occupancy vs threads per block",
            ts,
            t.occupancy,
            threads,
            occ,
            "threads per block",
            [x for x in (0, 256, 512, 768, 1024) if x <= tmax],
            lambda v: f"{v:g}",
            "threads",
        ),
        _curve(
            "Occupancy vs registers per thread",
            rs,
            r.occupancy,
            regs,
            occ,
            "registers per thread",
            [0, 64, 128, 192, 255],
            lambda v: f"{v:g}",
            "registers",
        ),
        _curve(
            "Occupancy vs shared memory per block",
            ss,
            s.occupancy,
            smem,
            occ,
            "shared memory per block",
            [x * 1024 for x in range(0, arch.smem_optin_per_block // 1024 + 1, 64)],
            _kib,
            "shared_memory",
        ),
    ]
    return figs, {
        "occupancy": occ,
        "active_blocks": int(here.active_blocks[0]),
        "max_warps": arch.max_warps_per_sm,
    }


def _nice_step(raw: float) -> float:
    """1, 2 or 5 times a power of ten, the smallest at least ``raw``."""
    p = 10 ** np.floor(np.log10(max(raw, 1e-9)))
    return float(next(m * p for m in (1, 2, 5, 10) if m * p >= raw))


def tile_chart(data: dict, max_rows: int = 16) -> Svg:
    """Predicted throughput per ranked candidate as a dot with its expected-error band (a dot plot: the axis
    spans the candidates' range, so near-equal predictions stay apart); ``data`` from pipeline.page."""
    cands = list(data["candidates"][:max_rows])
    unit = data["unit"]
    mine_ = data.get("this") or {}
    this = mine_.get("rank")
    if this is None and mine_.get(
        "predicted"
    ):  # the spec's own tile, scored but outside the ranking: its own row
        err = cands[0].get("error") if cands else None
        cands.append(
            {
                "rank": "spec",
                "label": f"this spec: {mine_.get('label')}",
                "predicted": mine_["predicted"],
                "error": err,
            }
        )
        this = "spec"
    label_w = min(300, 12 + 6.2 * max((len(c["label"]) for c in cands), default=10))
    row_h, top, width = 18, 40, 860
    lows = [c["predicted"] * (1 - (c.get("error") or 0)) for c in cands] or [0.0]
    highs = [c["predicted"] * (1 + (c.get("error") or 0)) for c in cands] or [1.0]
    span = max(max(highs) - min(lows), 0.02 * max(highs), 1e-9)
    step = _nice_step(span / 4)
    vmin = max(0.0, np.floor((min(lows) - 0.15 * span) / step) * step)
    vmax = np.ceil((max(highs) + 0.1 * span) / step) * step
    height = top + len(cands) * row_h + 44
    svg = Svg(
        width,
        height,
        f"tile ranking: predicted {unit} of the top {len(cands)} candidates with the expected error",
        data_figure="tiles",
        data_unit=unit,
    )
    svg.text(
        4,
        16,
        f"Predicted {unit} per candidate (top {len(cands)} of {data.get('total', len(cands))})",
        size=12,
        weight="bold",
    )
    svg.text(
        4,
        30,
        f"dot: the model's prediction; whiskers: x (1 +- expected error); red: this spec's tile; the axis "
        f"starts at {vmin:g}",
        size=9,
        fill="#495057",
    )
    x0, x1 = label_w + 34, width - 110

    def px(v: float) -> float:
        return x0 + (x1 - x0) * (v - vmin) / (vmax - vmin)

    v = vmin
    while v <= vmax + 1e-9:
        svg.line(px(v), top - 2, px(v), top + len(cands) * row_h, stroke="#e9ecef")
        svg.text(px(v), top + len(cands) * row_h + 14, f"{v:g}", size=9, anchor="middle", fill="#495057")
        v += step
    svg.text((x0 + x1) / 2, height - 8, unit, size=10, anchor="middle")
    for k, c in enumerate(cands):
        y = top + k * row_h
        mid = y + row_h / 2
        mine = c.get("rank") == this and this is not None
        name = c["label"] if len(c["label"]) <= 46 else c["label"][:45] + "…"
        svg.text(4, y + 12, f"#{c['rank']}" if c["rank"] != "spec" else "-", size=9, fill="#495057")
        svg.text(
            34, y + 12, name, size=9, weight="bold" if mine else None, fill="#c92a2a" if mine else "#212529"
        )
        p, e = float(c["predicted"]), c.get("error")
        svg.line(x0, mid, px(p), mid, stroke="#f1f3f5", width=6)
        if e:
            lo, hi = px(p * (1 - e)), px(p * (1 + e))
            svg.line(lo, mid, hi, mid, stroke="#495057", width=1.2)
            svg.line(lo, y + 5, lo, y + row_h - 5, stroke="#495057")
            svg.line(hi, y + 5, hi, y + row_h - 5, stroke="#495057")
        tip = f"#{c['rank']} {c['label']}: {p:.2f} {unit}" + (f" +- {100 * e:.1f}%" if e else "")
        svg.circle(
            px(p),
            mid,
            5,
            "#e03131" if mine else "#1c7ed6",
            title=tip,
            data_rank=c["rank"],
            data_predicted=round(p, 3),
        )
        svg.text(
            max(px(p * (1 + (e or 0))), px(p) + 6) + 5,
            y + 12,
            f"{p:.1f}" + (" measured" if c.get("measured") else ""),
            size=9,
            fill="#495057",
        )
    return svg
