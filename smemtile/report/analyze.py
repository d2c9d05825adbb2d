"""The `analyze` report: one document (JSON) and its rich rendering, top to bottom like a review."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.panel import Panel
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from smemtile.model.analysis import AccessResult, analyze_spec
from smemtile.model.fix import FixReport, fix_spec
from smemtile.model.occupancy import occupancy
from smemtile.model.spec import KernelSpec
from smemtile.report.banks import access_to_dict, lane_table, phase_lines, summary_line
from smemtile.report.layout import declaration, diagram, layout_diff
from smemtile.report.text import Fit, esc, plain, printable
from smemtile.report.tma import render_tma, tma_to_dict

ASSUMED_REGS = 64


@dataclass(frozen=True)
class AnalyzeReport:
    spec: KernelSpec
    results: tuple[AccessResult, ...]
    fixes: FixReport
    fixed_results: tuple[AccessResult, ...]
    occupancy: dict | None

    def to_dict(self, all_details: bool = False) -> dict:
        d = {
            "spec": self.spec.to_dict(),
            "arch": self.spec.arch.name,
            "accesses": [access_to_dict(r, all_details=all_details) for r in self.results],
            "fixes": self.fixes.to_dict(),
            "fixed_accesses": [access_to_dict(r) for r in self.fixed_results],
            "shared_memory_bytes": {
                "baseline": self.spec.smem_bytes(),
                "fixed": self.spec.smem_bytes(self.fixes.layouts),
            },
        }
        for f, fd in zip(self.fixes.buffers, d["fixes"], strict=True):
            fd["declaration_before"] = declaration(f.buffer, f.baseline.layout)
            fd["declaration_after"] = declaration(f.buffer, f.recommended.layout)
            fd["diff"] = layout_diff(f.buffer, f.baseline.layout, f.recommended.layout)
        if self.occupancy is not None:
            d["occupancy"] = self.occupancy
        tma = tma_to_dict(self.spec, self.results)  # Hopper TMA tiles: four notations, every mode compared
        if tma:
            d["tma"] = tma
        return d


def _occupancy(spec: KernelSpec, fixes: FixReport, regs: int | None) -> dict | None:
    """Blocks per SM for the baseline and fixed shared memory, or None without ``threads``."""
    if not spec.threads:
        return None
    r = regs or spec.regs
    source = (
        "given"
        if r
        else (
            "assumed: set regs: in the spec or --regs, or read the real value with "
            "`smemtile verify --compile-only`"
        )
    )
    r = r or ASSUMED_REGS
    out = {"threads": spec.threads, "regs": r, "regs_source": source}
    for name, lay in (("baseline", None), ("fixed", fixes.layouts)):
        smem = spec.smem_bytes(lay)
        res = occupancy(spec.arch, spec.threads, r, smem_static=0, smem_dynamic=smem)
        out[name] = {"smem_bytes": smem, **res.to_dict()}
    return out


def build_report(
    spec: KernelSpec,
    regs: int | None = None,
    *,
    fixes: FixReport | None = None,
    fixed_results: tuple[AccessResult, ...] | None = None,
) -> AnalyzeReport:
    """``fixes`` and ``fixed_results`` come from smemtile.pipeline for a kernel spec (its family may issue
    other instructions under the fixed layout); by default the spec's accesses are relaid."""
    results = analyze_spec(spec)
    fixes = fixes if fixes is not None else fix_spec(spec, results)
    fixed = fixed_results if fixed_results is not None else analyze_spec(spec, fixes.layouts)
    return AnalyzeReport(spec, results, fixes, fixed, _occupancy(spec, fixes, regs))


def render(console: Console, rep: AnalyzeReport, *, brief: bool = False) -> None:
    spec = rep.spec
    head = Text()
    head.append(f"{printable(spec.name or spec.source)}\n", style="bold")
    head.append(f"arch {spec.arch.name} (CC {spec.arch.cc[0]}.{spec.arch.cc[1]})")
    if spec.threads:
        head.append(f", {spec.threads} threads ({spec.warps} warps)")
    if spec.constants:
        consts = {k: v for k, v in spec.constants.items() if k not in ("THREADS", "STAGES")}
        if consts:
            head.append(", " + ", ".join(f"{printable(k)}={printable(v)}" for k, v in consts.items()))
    for b in spec.buffers:
        head.append(
            f"\n  {printable(b.name)}: {b.dtype} {list(b.shape)}, {b.layout.describe()}"
            f"{f', {b.stages} stages' if b.stages > 1 else ''}, {b.bytes()} bytes"
        )
    console.print(Panel(head, title="smemtile analyze", title_align="left"))

    console.print(Rule("1. Accesses as the hardware serves them", align="left"))
    for r in rep.results:
        console.print(summary_line(r))
        if not brief:
            for line in phase_lines(r):
                console.print(line)
            console.print(lane_table(r))
        console.print()

    console.print(Rule("2. Fixes (each verified by re-running the bank model)", align="left"))
    if not rep.fixes.buffers:
        console.print(
            "No buffer is addressed through logical coordinates (raw byte addresses): there is no "
            "layout to change. Edit the addresses themselves."
        )
    for f in rep.fixes.buffers:
        t = Table(
            title=f"{esc(f.buffer.name)}: rows must stay {f.align_bytes}-byte aligned", title_justify="left"
        )
        t.add_column("option", overflow="fold")
        t.add_column("extra smem", justify="right", no_wrap=True)
        t.add_column("total wavefronts", justify="right", no_wrap=True)
        for a in spec.accesses:
            if a.buffer == f.buffer.name and not a.raw:
                t.add_column(esc(a.name), justify="right", no_wrap=True)  # numbers: never folded
        for label, c in (("baseline", f.baseline), ("padding", f.padding), ("swizzle", f.swizzle)):
            if c is None:
                continue
            name = f"{label}: {c.layout.describe()}" + (" *" if c is f.recommended else "")
            cells = [name, f"{c.extra_bytes} B", f"{c.wavefronts} (ideal {c.ideal})"]
            for _, (w, i, deg) in c.per_access.items():
                cells.append(
                    Text(
                        f"{w}/{i}" + ("" if w == i else f" ({deg:g}x)"), style="green" if deg == 1 else "red"
                    )
                )
            t.add_row(*cells)
        console.print(Fit(t))
        style = "green" if f.recommended.conflict_free else "yellow"
        console.print(Text(f"Recommended: {f.recommended.layout.describe()} — {f.reason}", style=style))
        console.print()

    console.print(Rule("3. Recommended layout", align="left"))
    for f in rep.fixes.buffers:
        console.print(plain("\n".join(declaration(f.buffer, f.recommended.layout)), style="cyan"))
        hot = max(
            (r for r in rep.fixed_results if r.access.buffer == f.buffer.name and r.rows is not None),
            key=lambda r: r.degree,
            default=None,
        )
        base_hot = max(
            (r for r in rep.results if r.access.buffer == f.buffer.name and r.rows is not None),
            key=lambda r: r.degree,
            default=None,
        )
        if not brief:
            if f.needed:
                console.print(diagram(f.buffer, f.baseline.layout, base_hot, max_rows=8))
            console.print(diagram(f.buffer, f.recommended.layout, hot, max_rows=8))
        diff = layout_diff(f.buffer, f.baseline.layout, f.recommended.layout)
        if diff:
            console.print(Rule(f"before/after: {esc(f.buffer.name)}", style="dim", align="left"))
            for ln in diff:
                style = (
                    "green"
                    if ln.startswith("+") and not ln.startswith("+++")
                    else "red"
                    if ln.startswith("-") and not ln.startswith("---")
                    else "dim"
                )
                console.print(plain(ln, style=style))
        console.print()
    if rep.fixes.buffers and not brief:
        console.print(Text("After the fix:", style="bold"))
        for r in rep.fixed_results:
            console.print(summary_line(r))

    if rep.occupancy:
        o = rep.occupancy
        console.print(Rule("4. Occupancy", align="left"))
        for name in ("baseline", "fixed"):
            x = o[name]
            console.print(
                f"{name}: {x['smem_bytes']} B shared memory per block -> {x['active_blocks']} blocks/SM, "
                f"{x['active_warps']} warps, occupancy {100 * x['occupancy']:.0f}% "
                f"(limiter: {x['limiter']})"
            )
        console.print(Text(f"registers: {o['regs']} per thread, {o['regs_source']}", style="dim"))
    render_tma(console, rep.spec, rep.results, 5 if rep.occupancy else 4)
