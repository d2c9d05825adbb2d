"""Rich rendering of a tile ranking (``smemtile tiles``). No calculation happens here."""

from __future__ import annotations

import re

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from smemtile.model.gemm_tiles import TileReport
from smemtile.report.text import Fit, esc, plain, printable

EXPLAIN_HINT = "sources: --explain"


def _kib(n: int) -> str:
    return f"{n / 1024:.1f}K" if n % 1024 else f"{n // 1024}K"


def short_error(text: object) -> str:
    """An expected-error paragraph cut to its first clause, without parentheses: one line's worth."""
    s = " ".join(str(text).split())
    while True:
        t = re.sub(r"\s*\([^()]*\)", "", s)
        if t == s:
            break
        s = t
    return s.split(";")[0].strip().rstrip(".") or "unknown"


def calibration_line(gpu: str | None, date: str | None, error: str, applies: bool = True) -> Text:
    """``tiles``' one line on its calibration: the GPU it was measured on, when, and the expected error (or why
    there is none for this GPU); the files, sweeps and commits behind it come with --explain."""
    t = Text("Calibration: ", style="bold")
    if gpu is None:
        t.append(f"none ({error}; {EXPLAIN_HINT})", style="yellow")
        return t
    where = f"{gpu}" + (f", {date}" if date else "")
    if applies:
        t.append(f"{where}; expected error {error} ({EXPLAIN_HINT})")
    else:
        t.append(
            f"{where}, not on this GPU: use it to order, not to promise ({EXPLAIN_HINT})", style="yellow"
        )
    return t


def hopper_seam(report: TileReport) -> dict | None:
    """What a faster family one target away measured (the ranking's ``seam``, from that family's data), for one
    line; None: nothing to say for this problem."""
    return report.seam


def hopper_line(seam: dict, explain: bool = False) -> list[Text]:
    fam = seam["family"]
    other = next(
        k.removesuffix("_vs_cublas") for k in seam if k.endswith("_vs_cublas") and k != f"{fam}_vs_cublas"
    )
    w = " / ".join(f"{x:.2f}x" for x in seam[f"{fam}_vs_cublas"])
    h = " / ".join(f"{x:.2f}x" for x in seam[f"{other}_vs_cublas"])
    t = Text("Hopper: ", style="bold")
    t.append(
        f"--arch {seam['arch']} gives the {fam} family: {w} cuBLAS (4096^3 / 8192^3, H200) vs {h} for these "
        f"{other} tiles ({EXPLAIN_HINT})",
        style="bold yellow",
    )
    out = [t]
    if explain:
        out.append(
            plain(
                f"  hopper: {seam['data']} ({seam['gpu']}; {'; '.join(seam['sources'])}; "
                f"{' / '.join(seam['dates'])})",
                style="dim",
            )
        )
    return out


def render_tiles(
    report: TileReport, top: int, rejected: int, width: int = 200, explain: bool = False
) -> Group:
    """Header (problem, GPU, counts), the calibration in one line (its sources with ``explain``), the ranked
    table with a reason per rank, the first rejected ones."""
    p, g = report.problem, report.problem.gpu
    amd = p.vendor == "amd"
    unit = "CU" if amd else "SM"
    head = Text()
    head.append(f"smemtile tiles {p.m} x {p.n} x {p.k} {p.dtype}", style="bold")
    ops = "TOPS" if p.dtype == "i8" else "TFLOP/s"
    head.append(
        f" on {p.arch} ({g.name}: {g.sms} {unit}s, {g.peak(p.dtype):g} {ops} {p.dtype}, "
        f"{g.dram_gbps:g} GB/s, L2 {g.l2_bytes >> 20} MiB)\n"
    )
    kind = report.texts.get("kind", "")  # the model names its tiles (and the family that builds them)
    c = report.counts
    rej = ", ".join(
        f"{v} {k.removeprefix('rejected_').replace('_', ' ')}"
        for k, v in c.items()
        if k.startswith("rejected_") and k != "rejected_shapes"
    )
    head.append(
        f"{kind}. {c['generated']} configurations: {c['ranked']} tile shapes ranked (the best stages / "
        f"MIN_BLOCKS of each), {c['rejected']} configurations rejected ({rej}), listed below as "
        f"{c.get('rejected_shapes', len(report.rejected))} shapes."
    )
    cal = report.calibration or {}
    lines: list = [head]
    if cal:
        measured = cal.get("commit", "-") != "-" or bool(cal.get("date"))
        lines.append(
            calibration_line(
                cal.get("gpu") if measured else None,
                cal.get("date"),
                short_error(cal.get("expected_error", "unknown")),
                cal.get("applies", True),
            )
        )
    else:
        lines.append(calibration_line(None, None, f"the roofline and the {g.name}'s peaks only"))
    if explain:
        lines.append(plain(f"  peaks: {g.source_of(p.dtype)}", style="dim"))
        if cal:
            lines.append(
                plain(
                    f"  predicted {ops}: {cal.get('model', '')} ({cal.get('file', '')}: "
                    f"{cal.get('gpu', '')}, {', '.join(cal.get('sweeps', []))}, commit "
                    f"{cal.get('commit', '?')}); expected error: {cal.get('expected_error', 'unknown')}",
                    style="dim",
                )
            )
    seam = hopper_seam(report)
    if seam is not None:
        lines += hopper_line(seam, explain)
    wide = width >= 160  # the reasons go in a column, else in a numbered list under the table
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    shape = "tile (TMxTN)" if p.simt else "tile"
    cols = [
        "#",
        shape,
        "warps" if wide else "w",
        "stages" if wide else "st",
        "group" if wide else "g",
        "smem",
        "regs~",
        f"blk/{unit}" if wide else "blk",
        "occ",
        "waves",
        "TFLOP/s",
    ]
    if amd:
        cols.insert(8, "w/EU" if wide else "wEU")
    if wide:
        cols += ["% peak", "why this rank"]
    for col in cols:
        t.add_column(
            col,
            justify="left" if col in (shape, "why this rank") else "right",
            overflow="fold",
            max_width=80 if col == "why this rank" else None,
            no_wrap=col != "why this rank",
        )
    for s in report.ranked[:top]:
        cf = s.cfg
        tile = getattr(cf, "tile_text", None)  # a family's own ranking names its knobs
        tile = tile or f"{cf.bm}x{cf.bn}x{cf.bk}" + (f" ({cf.tm}x{cf.tn})" if p.simt else "")
        if cf.split_k > 1:
            tile += f" splitK {cf.split_k}"
        row = [
            str(s.rank),
            tile,
            str(cf.warps),
            str(cf.stages),
            str(cf.group_m),
            _kib(s.smem_bytes),
            str(s.regs),
            str(s.blocks_per_sm),
            f"{s.occupancy:.0%}",
            f"{s.waves:.2f}",
            f"{s.tflops:.1f}",
        ]
        if amd:
            row.insert(8, str(cf.waves_per_eu))
        if wide:
            row += [f"{s.roofline_frac:.0%}", esc(s.reason)]
        t.add_row(*row, style="bold" if s.rank == 1 else None)
    parts = [*lines, Fit(t)]
    if not wide:
        parts.append(Text("\n".join(f"{s.rank:>3}. {s.reason}" for s in report.ranked[:top])))
    if report.ranked:
        best = report.ranked[0]
        parts.append(
            Text(
                f"#1 in numbers: {best.tiles} tiles, wave efficiency {best.wave_eff:.0%}, inner loop {best.inner_eff:.0%}, "
                f"latency hiding {best.latency_eff:.0%}, padding waste {1 - best.pad_eff:.1%}, DRAM "
                f"{best.dram_bytes / 1e9:.2f} GB (raster order {best.dram_bytes_ungrouped / 1e9:.2f} GB), intensity "
                f"{best.intensity:.0f} FLOP/B vs ridge {best.ridge:.0f}: {best.bound}-bound."
            )
        )
        if best.repack_s > 0 and report.texts.get("repack"):
            parts.append(Text(report.texts["repack"].format(us=best.repack_s * 1e6)))
    if rejected and report.rejected:
        shown = report.rejected[:rejected]
        lines = [
            f"first {len(shown)} of {len(report.rejected)} rejected shapes ({report.counts.get('rejected', '?')} "
            "configurations; +N alike = other stages / MIN_BLOCKS of the shape, same reason):"
        ]
        for x in shown:
            more = f" (+{x.alike - 1} alike)" if x.alike > 1 else ""
            lines.append(f"  {x.cfg.label}{more} [{x.kind.replace('_', ' ')}]: {x.reason}")
        parts.append(Text("\n".join(lines)))
    parts.append(Text(f"Ties: {report.texts.get('ties', '')}.", style="dim"))
    parts.append(Text(report.texts.get("model", ""), style="dim"))
    return Group(*parts)


def render_tune(doc: dict) -> Group:
    """The measured ranking next to the model's, the skipped configurations, and the verdict."""
    dev = doc["device"]
    prob = ", ".join(f"{k}={v}" for k, v in doc["problem"].items())
    head = Text()
    head.append(f"smemtile tune {printable(doc['spec'])}", style="bold")
    head.append(
        f": {doc['family']} {printable(prob)} on {printable(dev['name'])} ({dev['arch']}, {dev['sm_count']} SMs)"
    )
    rows = doc["rows"]
    ok = sorted((r for r in rows if r.get("status") == "ok"), key=lambda r: r["time_ms"])
    unit = "TFLOP/s" if ok and ok[0].get("unit") == "tflops" else "GB/s"
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    workers = sorted({r["worker"] for r in ok if r.get("worker")})
    cols = ("#", "model", "configuration", "from", "pred.", unit, "ms", "regs", "spill", "blk", "cache")
    if len(workers) > 1:  # timed on several GPUs: which one timed each (* = timed again, see first_timing)
        cols += ("gpu",)
    for col in cols:
        left = col in ("configuration", "from")
        t.add_column(
            col, justify="left" if left else "right", no_wrap=col != "configuration", overflow="fold"
        )
    for r in ok:
        pred = f"{r['predicted']:.1f}" if r.get("predicted") is not None else "-"
        mr = f"#{r['model_rank']}" if r.get("model_rank") is not None else "-"
        cells = [
            str(r["measured_rank"]),
            mr,
            esc(r["label"]),
            esc(r["source"]),
            pred,
            f"{r['value']:.1f}",
            f"{r['time_ms']:.3f}",
            str(r.get("registers", "-")),
            str(r.get("spill_bytes", "-")),
            str(r.get("blocks_per_sm", "-")),
            "hit" if r.get("cached") else "",
        ]
        if len(workers) > 1:
            cells.append(esc(str(r.get("worker") or "-")) + ("*" if r.get("retimed") else ""))
        t.add_row(*cells, style="bold" if r is ok[0] else None)
    parts = [head, Fit(t)]
    skipped = [r for r in rows if r.get("status") != "ok"]
    if skipped:
        parts.append(plain("skipped:\n" + "\n".join(f"  {r['label']}: {r.get('reason')}" for r in skipped)))
    s = doc["summary"]
    lines = []
    if s["best"]:
        b = s["best"]
        lines.append(
            f"best: {b['label']} ({b['name_expression']}) {b['time_ms']:.4f} ms, {b['value']:.1f} {unit}"
        )
    if s.get("rank_correlation") is not None:
        lines.append(
            f"model vs measured: Spearman rank correlation {s['rank_correlation']:+.2f} over "
            f"{s['rank_correlation_n']} configurations"
        )
    t1 = s.get("model_top1")
    if t1:
        verdict = "within 10%" if t1["within_10pct"] else "more than 10% off"
        lines.append(
            f"model's top-1 ({t1['label']}, model #{t1['model_rank']}) measured #{t1['measured_rank']}: "
            f"{t1['slower_than_best']:+.1%} vs the best ({verdict})"
        )
    if doc.get("winner_spec"):
        lines.append(f"winner written to {doc['winner_spec']}; cache {doc['cache']}")
    parts.append(Text("\n".join(lines), style="bold"))
    return Group(*parts)


def render_tune_run(run: dict) -> Text:
    """The end of a ``tune`` run: where it ran, the counts, what was re-timed and what failed, and why."""
    c = run["counts"]
    slots = run.get("slots") or []
    hosts = sorted({s.get("host") or "?" for s in slots})
    lines = [
        f"{run.get('executor', 'local')}: {c['gpus']} GPU worker{'s' if c['gpus'] != 1 else ''} on "
        f"{', '.join(printable(h) for h in hosts)}; {c['total']} configurations: {c['timed']} timed, "
        f"{c['cached']} from the cache, {c['skipped']} skipped; {c.get('retimed', 0)} timed again "
        f"({c.get('outliers', 0)} outliers); {run['wall_s']:.1f} s"
    ]
    if c.get("workers_lost") or c.get("requeued"):
        lines.append(
            f"{c.get('workers_lost', 0)} GPU worker(s) left mid-run; {c.get('requeued', 0)} in-flight "
            "candidate(s) re-queued and timed elsewhere"
        )
    if run.get("failures"):
        lines.append("failed: " + ", ".join(f"{f['count']} {printable(f['kind'])}" for f in run["failures"]))
    return Text("\n".join(lines))
