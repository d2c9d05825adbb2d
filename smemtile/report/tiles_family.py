"""Rich rendering of a family's own tile ranking (``smemtile tiles --family NAME ...``): the header with the
model's provenance and expected error, the ranked table with a reason per rank, the rejected ones with the
family's reasons, the model's tie rule. No calculation happens here (the report object is pipeline.tiles.FamilyTileReport)."""

from __future__ import annotations

import re

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from smemtile.report.text import Fit, esc, plain
from smemtile.report.tiles import calibration_line


def _kib(n: int) -> str:
    return f"{n / 1024:.1f}K" if n % 1024 else f"{n // 1024}K"


def _measured(s) -> str:
    """Whether the H200 runs timed this configuration: the candidate's ``measured`` (its measurements, or whether
    it was timed), else whether it is calibrated (a model that calibrates only what it measured)."""
    m = getattr(s, "measured", None)
    return "yes" if (m if m is not None else s.calibrated) else "-"


def _date(prov: dict) -> str | None:
    """The calibration's date: the provenance's own, else the ``date`` of the packaged data file it names."""
    if prov.get("date"):
        return str(prov["date"])
    name = str(prov.get("file", ""))
    if not name.startswith("smemtile/") or not name.endswith(".json"):
        return None
    import json
    from importlib import resources

    try:
        doc = json.loads((resources.files("smemtile") / name.removeprefix("smemtile/")).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return str(doc["date"]) if isinstance(doc, dict) and doc.get("date") else None


def render_family_tiles(rep, top: int, rejected: int, width: int = 200, explain: bool = False) -> Group:
    """Header (problem, GPU, counts), the calibration in one line (its provenance with ``explain``), the ranked
    table, the reasons, the first rejected ones."""
    p, g, prov = rep.problem, rep.gpu, rep.provenance
    sizes = " x ".join(str(v) for k, v in p.items() if isinstance(v, int) and k not in rep.tile_keys)
    extra = f" {p['dtype']}" if "dtype" in p else ""
    extra += "".join(f", {k} {p[k]}" for k in rep.tile_keys)
    head = Text()
    head.append(f"smemtile tiles --family {rep.family} {sizes}{extra}", style="bold")
    head.append(f" on {rep.arch} ({esc(g['name'])}: {g['sms']} SMs, {g['dram_gbps']:g} GB/s DRAM)\n")
    c = rep.counts
    kinds = ", ".join(f"{v} {k.removeprefix('rejected_')}" for k, v in c.items() if k.startswith("rejected_"))
    head.append(
        f"{c['candidates']} configurations the family can generate: {c['ranked']} ranked, {c['rejected']} "
        f"rejected ({kinds or 'none'}), listed below with the family's reason."
    )
    lines: list = [head]
    err = prov.get("expected_error")
    if prov.get("calibrated"):
        err_text = f"{err:.1%} median on held-out shapes" if isinstance(err, float) else "unknown"
        unmeasured = prov.get("expected_error_unmeasured")
        if isinstance(err, float) and isinstance(unmeasured, float):
            err_text += f" ({unmeasured:.1%} for candidates never timed)"
        lines.append(calibration_line(prov.get("gpu"), _date(prov), err_text))
    else:
        lines.append(calibration_line(prov.get("gpu", "H200"), _date(prov), "", applies=False))
    if explain:
        if prov.get("calibrated"):
            full = f"{err:.1%} ({prov.get('expected_error_of', '')})" if isinstance(err, float) else "unknown"
            lines.append(
                plain(
                    f"  predicted GB/s: {prov.get('source', '')}, constants {prov.get('file', '')} "
                    f"({prov.get('gpu', '')}; {prov.get('runs', '')}; commit {prov.get('commit', '?')}); "
                    f"expected error {full}",
                    style="dim",
                )
            )
        else:
            lines.append(
                plain(
                    f"  uncalibrated for {rep.arch} / {g['name']}: {prov.get('source', '')} with the "
                    f"{prov.get('gpu', 'H200')}'s constants ({prov.get('file', '')})",
                    style="dim",
                )
            )
    wide = width >= 160
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    rate = rep.rate_unit
    cols = (
        ["#", "configuration", "thr", "regs", "blk", "smem", rate]
        + (["x copy"] if rate == "GB/s" else [])
        + ["meas"]
    )
    if wide:
        cols.append("why this rank")
    for col in cols:
        t.add_column(
            col,
            justify="left" if col in ("configuration", "why this rank") else "right",
            overflow="fold",
            no_wrap=col != "why this rank",
            max_width=90 if col == "why this rank" else None,
        )
    for s in rep.ranked[:top]:
        regs = getattr(s, "registers", None)
        row = [
            str(s.rank),
            esc(s.label),
            str(s.threads),
            "-" if regs is None else str(regs),
            str(s.blocks_per_sm),
            _kib(s.smem_bytes),
            f"{s.tflops:.0f}" if rate == "TFLOP/s" else f"{s.gbps:.0f}",
            *(["-" if s.copy_ratio is None else f"{s.copy_ratio:.3f}"] if rate == "GB/s" else []),
            _measured(s),
        ]
        if wide:
            row.append(esc(s.reason))
        t.add_row(*row, style="bold" if s.rank == 1 else None)
    parts = [*lines, Fit(t)]
    if not wide:
        parts.append(plain("\n".join(f"{s.rank:>3}. {s.reason}" for s in rep.ranked[:top])))
    if rejected and rep.rejected:
        groups: dict[
            tuple, list[dict]
        ] = {}  # one line per rule broken (the numbers aside), its first example
        for x in rep.rejected:
            groups.setdefault((x["kind"], re.sub(r"\d+", "N", x["reason"])), []).append(x)
        shown = list(groups.values())[:rejected]
        lines = [
            f"{len(rep.rejected)} rejected, {len(groups)} reasons (first example of each; +N alike = other "
            "configurations broken the same way):"
        ]
        for xs in shown:
            more = f" (+{len(xs) - 1} alike)" if len(xs) > 1 else ""
            lines.append(f"  {xs[0]['label']}{more} [{xs[0]['kind']}]: {xs[0]['reason']}")
        parts.append(plain("\n".join(lines)))
    rule = rep.tie_rule  # the model's own words (TieRule.text)
    parts.append(
        Text(
            f"Ties: {rule}. meas: timed on the H200 (the model's own data); `--format yaml` writes "
            "specs that `smemtile generate` / `verify` take; `--format json` has every number.",
            style="dim",
        )
    )
    return Group(*parts)
