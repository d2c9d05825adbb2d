"""The `analyze` report: one document (JSON) and its rendering, the seven parts in order, then the checklist.

    Summary              the verdict table, the saving, occupancy, bank strips (report.summary)
    1. Bank analysis        each access: instructions, worst wavefronts, the phases (the lane table: --lanes)
    2. Fix and verification the options the fix search tried, re-run through the bank model, with their cost
    3. Declarations         the exact C++ for the fixed layouts (extern + cudaFuncSetAttribute above 48 KiB),
                            bank diagrams
    4. Tile sizes           the tile model for the problem, registers, blocks per SM against registers
    5. Double buffering     the cp.async stage loop and what its stages cost (specs with stages or cp.async)
    6. Occupancy            baseline and fixed, warned below 2 blocks per SM
    7. Before/after         per access, totals, bytes, blocks per SM, the declarations' diff
       Review checklist     pass / fail / n/a, each with its reason

The data comes from ``smemtile.pipeline.analyze`` (this module computes nothing the report does not show).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Console
from rich.panel import Panel
from rich.rule import Rule
from rich.text import Text

from smemtile.families.base import FAIL, PASS, Item
from smemtile.model.analysis import AccessResult
from smemtile.model.fix import FixReport
from smemtile.model.spec import KernelSpec
from smemtile.report.banks import DETAIL_BUDGET, Grid, access_to_dict, lane_table, phase_lines, summary_line
from smemtile.report.layout import diagram, layout_diff
from smemtile.report.summary import render_summary, summary_to_dict
from smemtile.report.text import plain, printable
from smemtile.report.tma import render_tma, tma_to_dict

PARTS = (
    "Bank analysis: how the hardware serves each access",
    "Fix and its verification",
    "Declarations and bank diagram",
    "Tile size: occupancy and registers",
    "Double buffering",
    "Occupancy",
    "Before / after",
)


@dataclass(frozen=True)
class AnalyzeReport:
    spec: KernelSpec
    results: tuple[AccessResult, ...]
    fixes: FixReport
    fixed_results: tuple[AccessResult, ...]
    occupancy: dict  # {"baseline": ..., "fixed": ...}
    costs: list = field(default_factory=list)
    declarations: dict = field(default_factory=dict)  # {"baseline": Declarations, "fixed": Declarations}
    tiles: dict = field(default_factory=dict)
    pipeline: dict | None = None
    comparison: dict = field(default_factory=dict)
    checklist: tuple[Item, ...] = ()

    def to_dict(self, all_details: bool = False) -> dict:
        """Every part. ``all_details``: the lane detail of every distinct instruction (see report.banks)."""
        spec = self.spec
        d = {
            "spec": spec.to_dict(),
            "arch": spec.arch.name,
            "threads": self.occupancy["fixed"]["threads"],
            "threads_source": self.occupancy["fixed"]["threads_source"],
            "parts": list(PARTS),
            "summary": summary_to_dict(self),
            "accesses": _accesses(self.results, all_details),
            "fixes": self.fixes.to_dict(),
            "fix_costs": self.costs,
            "fixed_accesses": [access_to_dict(r) for r in self.fixed_results],
            "shared_memory_bytes": {
                "baseline": spec.smem_bytes(),
                "fixed": spec.smem_bytes(self.fixes.layouts),
            },
            "declarations": {k: v.to_dict() for k, v in self.declarations.items()},
            "tiles": self.tiles,
            "pipeline": self.pipeline,
            "occupancy": self.occupancy,
            "comparison": self.comparison,
            "checklist": [i.to_dict() for i in self.checklist],
        }
        for f, fd in zip(self.fixes.buffers, d["fixes"], strict=True):
            fd["diff"] = layout_diff(f.buffer, f.baseline.layout, f.recommended.layout)
        tma = tma_to_dict(spec, self.results)  # Hopper TMA tiles: four notations, every mode compared
        if tma:
            d["tma"] = tma
        return d


def _accesses(results, all_details: bool) -> list[dict]:
    """Access documents; with ``all_details`` the distinct instructions' lane detail, DETAIL_BUDGET in all."""
    out, left = [], DETAIL_BUDGET
    for r in results:
        out.append(access_to_dict(r, all_details=left if all_details else False))
        left -= out[-1].get("details_summary", {}).get("detailed", 0)
    return out


def _rule(console: Console, n: int) -> None:
    console.print(Rule(f"{n}. {PARTS[n - 1]}", align="left"))


def render(console: Console, rep: AnalyzeReport, *, brief: bool = False, lanes: bool = False) -> None:
    """The summary (the verdict first), then the seven parts and the checklist; ``brief``: the same headings, a
    few lines each; ``lanes``: part 1 with every access's lane -> address -> bank table."""
    spec = rep.spec
    head = Text()
    head.append(f"{printable(spec.name or spec.source)}\n", style="bold")
    head.append(f"arch {spec.arch.name} (CC {spec.arch.cc[0]}.{spec.arch.cc[1]})")
    o = rep.occupancy["fixed"]
    head.append(f", {o['threads']} threads ({-(-o['threads'] // 32)} warps)")
    if not spec.threads and spec.kernel is None:
        head.append(" [default: no threads: in the spec]", style="yellow")
    consts = {k: v for k, v in spec.constants.items() if k not in ("THREADS", "STAGES")}
    if consts:
        head.append(", " + ", ".join(f"{printable(k)}={printable(v)}" for k, v in consts.items()))
    for b in spec.buffers:
        st = f", {b.stage_count} stages" if b.stage_count > 1 else ""
        head.append(
            f"\n  {printable(b.name)}: {b.dtype} {list(b.shape)}, {b.layout.describe()}{st}, {b.bytes()} bytes"
        )
    console.print(Panel(head, title="smemtile analyze", title_align="left"))

    render_summary(console, rep, lanes_hint=not lanes)
    _part1(console, rep, brief, lanes)
    _part2(console, rep, brief)
    render_tma(console, spec, rep.results, "2b")  # type: ignore[arg-type]  # TMA tiles only: every mode compared
    _part3(console, rep, brief)
    _part4(console, rep, brief)
    _part5(console, rep, brief)
    _part6(console, rep, brief)
    _part7(console, rep, brief)
    _checklist(console, rep, brief)


def _part1(console: Console, rep: AnalyzeReport, brief: bool, lanes: bool) -> None:
    _rule(console, 1)
    if not brief:
        console.print(
            Text(
                "A warp's request is split into phases (groups of lanes served together); a phase "
                "takes as many wavefronts as its busiest bank has distinct 4-byte words (bank = byte "
                "address / 4 mod 32; lanes reading one word share it).",
                style="dim",
            )
        )
    for r in rep.results:
        console.print(summary_line(r))
        if not brief:
            for line in phase_lines(r):
                console.print(line)
            if lanes:
                console.print(lane_table(r))
            console.print()


def _part2(console: Console, rep: AnalyzeReport, brief: bool) -> None:
    _rule(console, 2)
    if not rep.fixes.buffers:
        console.print(
            "No buffer is addressed through logical coordinates (raw byte addresses): there is no layout "
            "to change. Edit the addresses themselves."
        )
    costs = {c["buffer"]: c for c in rep.costs}
    for f in rep.fixes.buffers:
        c = costs[f.buffer.name]
        accesses = [a.name for a in rep.spec.accesses if a.buffer == f.buffer.name and not a.raw]
        if not brief:
            rows, styles = [], []
            for opt in c["options"]:
                cand = {"baseline": f.baseline, "padding": f.padding, "swizzle": f.swizzle}[opt["option"]]
                label = opt["layout"] if opt["option"] != "baseline" else f"baseline ({opt['layout']})"
                row = [
                    label + (" *" if opt["recommended"] else ""),
                    f"{opt['extra_bytes']} B",
                    str(opt["blocks_per_sm"]),
                    f"{opt['wavefronts']}/{opt['ideal']}",
                ]
                st = ["", "", "", ""]
                for name in accesses:
                    w, i, deg = cand.per_access.get(name, (0, 0, 1.0))
                    row.append(f"{w}/{i}" + ("" if w == i else f" ({deg:g}x)"))
                    st.append("red" if name in opt["worse"] else "green" if deg == 1 else "yellow")
                rows.append(row)
                styles.append(st)
            heads = ["option", "extra smem", "blocks/SM", "total wf"] + [printable(a) for a in accesses]
            title = Text(
                f"{printable(f.buffer.name)}: rows stay {f.align_bytes}-byte aligned; each option re-run "
                f"through the bank model ({f.tried} tried)",
                style="bold",
            )
            console.print(Grid(title, heads, rows, styles, left=1))
        style = "green" if f.recommended.conflict_free else "yellow"
        console.print(
            plain(
                f"Recommended for {f.buffer.name}: {f.recommended.layout.describe()} — {f.reason}",
                style=style,
            )
        )
        if f.needed:
            rec = next(o for o in c["options"] if o["recommended"])
            console.print(
                plain(
                    f"Gain and cost: {c['gain']}; +{rec['extra_bytes']} bytes, blocks/SM "
                    f"{c['blocks_before']} -> {rec['blocks_per_sm']}"
                )
            )
        for w in c["warnings"]:
            console.print(plain(f"warning: {w['text']}", style="bold yellow"))
        console.print()


def _part3(console: Console, rep: AnalyzeReport, brief: bool) -> None:
    _rule(console, 3)
    decl = rep.declarations["fixed"]
    what = (
        "the fixed layouts"
        if rep.fixes.layouts and any(f.needed for f in rep.fixes.buffers)
        else "the layouts"
    )
    form = (
        f"{decl.total_bytes} bytes: over the {decl.static_limit}-byte static limit, so dynamic shared memory "
        "with the opt-in attribute"
        if decl.dynamic
        else f"{decl.total_bytes} bytes: static __shared__ arrays"
    )
    console.print(plain(f"Exact declarations for {what} ({form}):", style="bold"))
    console.print(plain("\n".join(decl.lines()), style="cyan"), soft_wrap=True)  # code: never wrapped
    if not decl.fits:
        console.print(
            plain(
                f"warning: {decl.total_bytes} bytes per block do not fit {rep.spec.arch.name} (opt-in "
                f"maximum {rep.spec.arch.smem_optin_per_block})",
                style="bold red",
            )
        )
    if brief:
        return
    for f in rep.fixes.buffers:
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
        if f.needed:
            console.print(diagram(f.buffer, f.baseline.layout, base_hot, max_rows=8))
        console.print(diagram(f.buffer, f.recommended.layout, hot, max_rows=8))
    console.print(
        Text(
            "Cells the worst instruction of the most conflicted access touches: red where their bank "
            "delivers more than one distinct word, green where it delivers one.",
            style="dim",
        )
    )


def _part4(console: Console, rep: AnalyzeReport, brief: bool) -> None:
    _rule(console, 4)
    t = rep.tiles
    console.print(
        plain(
            f"This block: {t['threads']} threads, {t['smem_bytes']} bytes of shared memory, "
            f"{t['regs']} registers/thread ({t['regs_source']})."
        )
    )
    if t.get("ptxas") and not brief:
        p = t["ptxas"]
        console.print(
            plain(
                f"ptxas: {p['registers']} registers, {p['spills']} bytes spilled, "
                f"{p['static_smem_bytes']} bytes static shared memory"
            )
        )
    if "missing" in t:
        console.print(plain(t["missing"], style="yellow"))
    else:
        unit = t.get("unit", "")
        this = t["this"]
        rank = f"#{this['model_rank']}" if this.get("model_rank") else "not ranked"
        pred = f", {this['predicted']:.1f} {unit} predicted" if this.get("predicted") else ""
        total = f" of {t['ranked_total']}" if t.get("ranked_total") else ""
        console.print(
            plain(
                f"The tile model for {_problem_text(t['problem'])}: this tile ({this['label']}) is "
                f"{rank}{total}{pred}; {this['model_reason']}"
            )
        )
        if not brief:
            rows = [
                [
                    f"#{c['model_rank']}" if c.get("model_rank") else "-",
                    c["label"],
                    f"{c['predicted']:.1f}" if c.get("predicted") is not None else "-",
                    c.get("model_reason", ""),
                ]
                for c in t["ranked"]
            ]
            console.print(
                Grid(
                    Text(f"Top {len(rows)} ({t['command']})", style="bold"),
                    ["rank", "tile", unit, "why"],
                    rows,
                    left=4,
                    wrap_last=True,
                )
            )
    if brief:
        return
    budget = t["register_budget"]
    cells = [
        [
            f"{b['regs_from']}-{b['regs_to']}",
            str(b["blocks_per_sm"]),
            "<- this block" if b["regs_from"] <= t["regs"] <= b["regs_to"] else "",
        ]
        for b in budget
    ]
    console.print(
        Grid(
            Text(
                "Blocks per SM against registers per thread (this block's threads and shared memory):",
                style="bold",
            ),
            ["registers", "blocks/SM", ""],
            cells,
            left=2,
        )
    )


def _problem_text(p: dict) -> str:
    return ", ".join(f"{k}={printable(v)}" for k, v in p.items())


def _part5(console: Console, rep: AnalyzeReport, brief: bool) -> None:
    _rule(console, 5)
    p = rep.pipeline
    if p is None:
        console.print("Single stage and no cp.async: nothing to pipeline.")
        return
    s = p["stages"]
    ring = ", ".join(f"{r['buffer']} {r['stages']} x {r['stage_bytes']} B" for r in p["ring"]) or "none"
    console.print(
        plain(
            f"{s} stage(s); ring: {ring}; {p['stage_bytes']} bytes per stage, {p['smem_bytes']} bytes "
            f"per block in all (+{p['extra_bytes_over_one_stage']} over one stage)."
        )
    )
    if p["cp_async"] and brief:
        console.print(
            plain(
                f"cp.async: wait_group({p['wait_group']}), {p['barriers_per_iteration']} barrier(s) per "
                "iteration (the loop: without --brief)"
            )
        )
    elif p["cp_async"]:
        c = p["commits"]
        console.print(
            plain(
                f"cp.async protocol: {c['prologue']} commit(s) in the prologue, {c['per_iteration']} per "
                f"iteration; wait_group({p['wait_group']}); {p['barriers_per_iteration']} barrier(s) per "
                "iteration"
                + (
                    f"; ring index: read {p['ring_index']['read']}, write {p['ring_index']['write']}"
                    if p["ring_index"]
                    else ""
                )
            )
        )
        for cp in p["copies"]:
            console.print(
                plain(
                    f"  {cp['access']}: {cp['per_thread']} cp.async of {cp['width']} B per thread per "
                    f"tile ({cp['bytes']} bytes per tile into {cp['buffer']})"
                )
            )
    if brief:
        return
    by = p["by_stages"]
    console.print(
        plain(
            "Shared memory and blocks/SM by stage count: "
            + "; ".join(
                f"{k} stage(s): {v['smem_bytes']} B, {v['blocks_per_sm']} blocks/SM" for k, v in by.items()
            )
        )
    )
    for item in p.get("checked", []):
        console.print(plain(f"  compiled kernel: {item['id']}: {item['status']} — {item['reason']}"))
    console.print(plain("\n".join(p["code"]), style="cyan"), soft_wrap=True)  # code: never wrapped


def _part6(console: Console, rep: AnalyzeReport, brief: bool) -> None:
    _rule(console, 6)
    o = rep.occupancy
    for name in ("fixed",) if brief else ("baseline", "fixed"):
        x = o[name]
        console.print(
            plain(
                f"{name}: {x['smem_bytes']} B shared memory per block ({x['static_smem']} static, {x['dynamic_smem']} "
                f"dynamic), {x['threads']} threads, {x['regs']} registers -> {x['active_blocks']} blocks/SM, "
                f"{x['active_warps']} warps, occupancy {100 * x['occupancy']:.0f}% (limiter: {x['limiter']})"
            )
        )
    f = o["fixed"]
    if not brief:
        console.print(plain(f"threads: {f['threads_source']}; registers: {f['regs_source']}", style="dim"))
    stated = next((i.reason for i in rep.checklist if i.id == "two_blocks" and i.status == PASS), "")
    for name in ("baseline", "fixed"):
        x = o[name]
        if x["active_blocks"] >= 2 or (name == "baseline" and o["fixed"]["active_blocks"] < 2):
            continue
        if x["active_blocks"] == 1 and stated and "by design" in stated:
            console.print(plain(f"note: {name}: {stated}", style="dim"))
            continue
        console.print(
            plain(
                f"warning: {name}: {x['active_blocks']} block(s) per SM (limited by {x['limiter']}): a "
                "barrier then idles the whole SM and one block's warps must hide all latency",
                style="bold yellow",
            )
        )


def _part7(console: Console, rep: AnalyzeReport, brief: bool) -> None:
    _rule(console, 7)
    c = rep.comparison
    rows, styles = [], []
    for a in c["accesses"]:
        b, f = a["before"], a["after"]
        rows.append(
            [
                a["access"],
                f"{b['wavefronts']}/{b['ideal']}",
                f"{b['degree']:g}x",
                f"{f['wavefronts']}/{f['ideal']}",
                f"{f['degree']:g}x",
                str(b["total"]),
                str(f["total"]),
            ]
        )
        worse = f["total"] > b["total"]
        styles.append(
            [
                "",
                "",
                "",
                "",
                "red" if worse else "green" if f["degree"] == 1 else "yellow",
                "",
                "red" if worse else "",
            ]
        )
    tw = c["total_wavefronts"]
    rows.append(["all accesses", "", "", "", "", str(tw["before"]), str(tw["after"])])
    styles.append([""] * 7)
    if not brief:
        console.print(
            Grid(
                Text(
                    "Worst instruction (wavefronts/ideal) and total wavefronts over every instruction:",
                    style="bold",
                ),
                ["access", "before", "", "after", "", "total before", "total after"],
                rows,
                styles,
                left=1,
            )
        )
    pct = 100 * (tw["before"] - tw["after"]) / max(1, tw["before"])
    sm, bl = c["smem_bytes"], c["blocks_per_sm"]
    console.print(
        plain(
            f"Total wavefronts {tw['before']} -> {tw['after']} ({pct:.0f}% fewer; ideal "
            f"{c['ideal_wavefronts']}); shared memory {sm['before']} -> {sm['after']} bytes; blocks/SM "
            f"{bl['before']} -> {bl['after']}"
        )
    )
    if brief:
        return
    for f in rep.fixes.buffers:
        diff = layout_diff(f.buffer, f.baseline.layout, f.recommended.layout)
        if not diff:
            continue
        console.print(Rule(f"declaration of {printable(f.buffer.name)}", style="dim", align="left"))
        for ln in diff:
            add, rem = (
                ln.startswith("+") and not ln.startswith("+++"),
                ln.startswith("-") and not ln.startswith("---"),
            )
            console.print(plain(ln, style="green" if add else "red" if rem else "dim"), soft_wrap=True)


def _checklist(console: Console, rep: AnalyzeReport, brief: bool) -> None:
    console.print(Rule("Review checklist", align="left"))
    items = rep.checklist
    counts = {s: sum(1 for i in items if i.status == s) for s in (PASS, FAIL, "n/a")}
    console.print(
        plain(
            f"{counts[PASS]} pass, {counts[FAIL]} fail, {counts['n/a']} n/a"
            + (
                " (evaluated on the generated kernel)"
                if rep.spec.kernel is not None
                else " (evaluated on the spec: what it cannot answer is n/a, with why)"
            )
        )
    )
    for i in items:
        if brief and i.status != FAIL:
            continue
        style = {PASS: "green", FAIL: "bold red"}.get(i.status, "dim")
        t = Text()
        t.append(f"[{i.status}] ", style=style)
        t.append(f"{i.text}: ", style="bold" if i.status == FAIL else "")
        t.append(printable(i.reason))
        console.print(t)
