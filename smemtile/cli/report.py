"""`smemtile report SPEC -o report.html`: the analysis as one self-contained page with its figures."""

from __future__ import annotations

from pathlib import Path

import click

from smemtile.cli.common import emit_json, json_option
from smemtile.fileio import printable


@click.command(
    "report",
    short_help="One self-contained HTML page of a spec's analysis.",
    epilog="""\b
Examples:
  smemtile report samples/gemm_a_column.yaml -o report.html
  smemtile report samples/hgemm_bf16.yaml -o gemm.html --no-compile
  smemtile report samples/transpose_32x32.yaml -o tile.html --json
""",
)
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path, allow_dash=True))
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The page to write (a .html file; written atomically, never over the spec).",
)
@click.option(
    "--regs",
    type=click.IntRange(1, 255),
    help="Registers per thread for the occupancy curves (default as analyze: ptxas' count for a kernel "
    "spec, else the spec's regs, else 64, stated as an assumption).",
)
@click.option(
    "--no-compile", is_flag=True, help="Kernel specs: do not compile with NVRTC (registers are then assumed)."
)
@json_option
def command(spec: Path, output: Path, regs: int | None, no_compile: bool, as_json: bool) -> None:
    """Write SPEC's analysis as one self-contained HTML page: bank heatmaps of each access's worst instruction
    before and after the fix, the padding or swizzle as a grid, the occupancy curves with this kernel marked, the
    tile ranking where a tile model applies, the declarations and the checklist. Inline SVG, no script, nothing
    fetched: the file opens anywhere, offline."""
    from smemtile import api

    result = api.report_page(spec, output, regs=regs, compile=not no_compile)
    done, rep = result.to_dict(), result.analysis.report
    if as_json:
        emit_json(done)
    else:
        click.echo(f"wrote {printable(done['output'])} ({done['bytes']} bytes, {done['figures']} figures)")
    from smemtile.cli.analyze import check_launch

    check_launch(rep)  # as analyze: the page is written, and a block that cannot launch exits 1
