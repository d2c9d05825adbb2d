"""`smemtile analyze SPEC`: the seven parts of the answer, then the review checklist."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from smemtile.cli.common import emit_json, json_option
from smemtile.errors import OutOfResources, SpecError
from smemtile.fileio import printable


@click.command("analyze", short_help="Bank conflicts of a spec, the fix, its cost.")
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path, allow_dash=True))
@json_option
@click.option(
    "--brief",
    is_flag=True,
    help="The summary, then the seven headings with a few lines each: no diagrams or code.",
)
@click.option(
    "--lanes",
    "--detail",
    "lanes",
    is_flag=True,
    help="Part 1 with the full lane -> address -> bank table of each access's worst instruction (the summary "
    "shows only a bank strip of each conflicted one).",
)
@click.option(
    "--all-instructions",
    is_flag=True,
    help="With --json: the lane detail of every distinct instruction (streamed; at most 4096 in all), not only "
    "the worst one of each access.",
)
@click.option(
    "--regs",
    type=click.IntRange(1, 255),
    help="Registers per thread for the occupancy parts (default: ptxas' count for a kernel spec, else the "
    "spec's regs, else 64, stated as an assumption).",
)
@click.option(
    "--no-compile", is_flag=True, help="Kernel specs: do not compile with NVRTC (registers are then assumed)."
)
@click.option(
    "--export",
    "export",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also save the report as FILE.svg or FILE.html.",
)
def command(
    spec: Path,
    as_json: bool,
    brief: bool,
    lanes: bool,
    all_instructions: bool,
    regs: int | None,
    no_compile: bool,
    export: Path | None,
) -> None:
    """Show how the hardware serves each shared-memory access of SPEC, the fix, and what it costs.

    First the answer: one verdict table (per access the op, worst / ideal wavefronts, the conflict degree, the
    recommended fix and its cost in bytes and blocks per SM), the saving in wavefronts per block, the occupancy
    line and, for each conflicted access, the bank each lane of its worst instruction hits. Exits 1 when the
    block cannot launch (0 blocks per SM), as `occupancy` does.

    Then seven parts, in order: (1) the bank analysis of every access (every warp, every loop value) with the
    calculation: wavefronts per instruction exactly as Nsight Compute counts them (the lane -> address ->
    bank table of the worst one with --lanes); (2) the padding and swizzle fixes, each re-run through the bank model, with
    its cost in bytes and blocks per SM and a warning when it makes another access worse; (3) the exact
    declarations (extern __shared__ and cudaFuncSetAttribute above 48 KiB) and a bank diagram; (4) the tile
    size against the tile model for the spec's problem, registers and occupancy; (5) the cp.async stage loop
    for specs with stages or cp.async; (6) occupancy; (7) before/after. Then the review checklist.

    \b
    Examples:
      smemtile analyze samples/gemm_a_column.yaml
      smemtile analyze samples/gemm_a_column.yaml --lanes
      smemtile analyze samples/transpose_32x32.yaml --brief
      smemtile analyze samples/ldmatrix_f16.yaml --json | jq '.accesses[0].conflict_degree'
      smemtile analyze samples/gemm_a_column.yaml --export report.html
    """
    from smemtile import api

    if export is not None and export.suffix.lower() not in (".svg", ".html"):
        raise SpecError(f"takes a .svg or .html file name, got {printable(export.name)!r}", key="--export")
    result = api.analyze(spec, regs=regs, compile=not no_compile)
    rep = result.report
    if as_json and all_instructions:
        stream_json(rep)
    elif as_json:
        emit_json(result.to_dict())
    else:
        from smemtile.report.analyze import render
        from smemtile.report.text import make_console

        render(make_console(), rep, brief=brief, lanes=lanes)
    if export is not None:
        _export(rep, result.resolved, export, spec)
    check_launch(rep)


def check_launch(rep) -> None:
    """Exit 1 (OutOfResources) when the spec's block, or its fixed variant, fits 0 times on an SM."""
    for name in ("baseline", "fixed"):
        o = rep.occupancy[name]
        if o["active_blocks"] == 0:
            why = f": {o['reason']}" if o.get("reason") else f" (limiter: {o['limiter']})"
            raise OutOfResources(f"the {name} block cannot launch: 0 blocks fit on an {o['arch']} SM{why}")


def _default(o: Any) -> Any:
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def stream_json(rep, out=None) -> None:
    """``--json --all-instructions``: the report with every access's ``details`` written one instruction at a
    time (compact, one per line), so memory stays bounded; at most ``DETAIL_BUDGET`` distinct instructions in
    all, and each access says how many it has, how many are detailed and how many were left out."""
    from smemtile.report.banks import DETAIL_BUDGET, details_summary, iter_details

    out = out or sys.stdout
    doc = rep.to_dict()
    import secrets

    token = f"@details-{secrets.token_hex(8)}-"
    left = DETAIL_BUDGET
    plan = []
    for k, (a, r) in enumerate(zip(doc["accesses"], rep.results, strict=True)):
        a["details_summary"] = {**details_summary(r, left), "budget": DETAIL_BUDGET}
        a["details"] = f"{token}{k}"
        n = a["details_summary"]["detailed"]
        plan.append((r, n))
        left -= n
    text = json.dumps(doc, indent=2, default=_default)
    for k, (r, n) in enumerate(plan):
        head, _, text = text.partition(json.dumps(f"{token}{k}"))
        out.write(head)
        out.write("[")
        for j, item in enumerate(iter_details(r, n)):
            out.write(("," if j else "") + "\n" + json.dumps(item, separators=(",", ":")))
        out.write("\n]")
    out.write(text)
    out.write("\n")


def _export(rep, res, path: Path, spec: Path) -> None:
    """``--export``: FILE.html is the report page (``smemtile report``'s), FILE.svg its bank heatmaps before and
    after the fix; written safely (fileio: atomic, never over the spec)."""
    if path.suffix.lower() == ".html":
        from smemtile.pipeline.page import check_output, write_page

        check_output(path, spec, key="--export")
        write_page(rep, res, path, spec, key="--export")
        return
    from smemtile.fileio import write_text_atomic
    from smemtile.report.html import report_svg

    write_text_atomic(path, report_svg(rep), key="--export", inputs=[spec] if str(spec) != "-" else ())
