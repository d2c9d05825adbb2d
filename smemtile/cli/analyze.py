"""`smemtile analyze SPEC`: bank tables, conflict degree, verified fixes, declarations, occupancy."""

from __future__ import annotations

from pathlib import Path

import click

from smemtile.cli.common import emit_json, json_option
from smemtile.errors import SpecError
from smemtile.fileio import printable


@click.command("analyze")
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path))
@json_option
@click.option(
    "--brief", is_flag=True, help="One line per access and the fix table; no lane tables or diagrams."
)
@click.option(
    "--all-instructions",
    is_flag=True,
    help="With --json: the lane detail of every instruction, not only the worst one of each access.",
)
@click.option(
    "--regs",
    type=click.IntRange(1, 255),
    help="Registers per thread for the occupancy section "
    "(default: the spec's regs, else 64, stated as an assumption).",
)
@click.option(
    "--export",
    "export",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also save the report as FILE.svg or FILE.html.",
)
def command(
    spec: Path, as_json: bool, brief: bool, all_instructions: bool, regs: int | None, export: Path | None
) -> None:
    """Show how the hardware serves each shared-memory access of SPEC, and the cheapest fix.

    For every access (every warp, every loop value) it prints the wavefronts per instruction exactly as
    Nsight Compute counts them, the lane -> address -> bank table of the worst instruction, then padding
    and swizzle fixes verified by the same model, the __shared__ declarations, a bank diagram, a
    before/after diff and the occupancy of the block.

    \b
    Examples:
      smemtile analyze samples/gemm_a_column.yaml
      smemtile analyze samples/transpose_32x32.yaml --brief
      smemtile analyze samples/ldmatrix_f16.yaml --json | jq '.accesses[0].conflict_degree'
      smemtile analyze samples/gemm_a_column.yaml --export report.html
    """
    from smemtile.pipeline.analyze import analyze
    from smemtile.pipeline.specs import load
    from smemtile.report.analyze import render

    if export is not None and export.suffix.lower() not in (".svg", ".html"):
        raise SpecError(f"takes a .svg or .html file name, got {printable(export.name)!r}", key="--export")
    rep = analyze(load(spec), regs=regs)
    if as_json:
        emit_json(rep.to_dict(all_details=all_instructions))
    else:
        from smemtile.report.text import make_console

        render(make_console(), rep, brief=brief)
    if export is not None:
        _export(rep, brief, export, spec)


def _export(rep, brief: bool, path: Path, spec: Path) -> None:
    """The report rendered again at the export's own width (not the terminal's), written safely (fileio)."""
    from smemtile.fileio import write_text_atomic
    from smemtile.report.analyze import render
    from smemtile.report.text import export_console

    con = export_console()
    render(con, rep, brief=brief)
    text = con.export_svg(title="smemtile analyze") if path.suffix.lower() == ".svg" else con.export_html()
    write_text_atomic(path, text, key="--export", inputs=[spec])
