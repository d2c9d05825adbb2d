"""`smemtile report SPEC -o report.html`: the analysis as one self-contained page with its figures."""

from __future__ import annotations

import os
from pathlib import Path

import click

from smemtile.cli.common import emit_json, json_option
from smemtile.errors import OutOfResources, SpecError
from smemtile.fileio import printable


def check_output(output: Path, spec: Path, key: str = "-o") -> None:
    """A page goes to a new or regular ``.html`` file that is not the spec (checked before any work is done)."""
    if output.suffix.lower() != ".html":
        raise SpecError(f"takes a .html file name, got {printable(output.name)!r}", key=key)
    if str(spec) != "-":
        try:
            same = os.path.samefile(output, spec)
        except OSError:
            same = False
        if same:
            raise SpecError(
                f"{printable(output)} is the input spec; refusing to overwrite it (choose another file name)",
                key=key,
            )


def write_page(rep, res, output: Path, spec: Path, key: str = "-o") -> dict:
    """Render the page of ``rep`` and write it atomically (smemtile.fileio); what was written, for ``--json``."""
    from smemtile.fileio import write_text_atomic
    from smemtile.pipeline.page import page
    from smemtile.report.html import SECTIONS

    text = page(res, rep)
    path = write_text_atomic(output, text, key=key, inputs=[spec] if str(spec) != "-" else ())
    return {
        "output": str(path),
        "bytes": len(text.encode("utf-8", "surrogateescape")),
        "sections": [k for k, _ in SECTIONS],
        "figures": text.count("<svg "),
    }


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
    from smemtile.pipeline.analyze import analyze
    from smemtile.pipeline.specs import load

    check_output(output, spec)
    res = load(spec)
    rep = analyze(res, regs=regs, compile=not no_compile)
    done = write_page(rep, res, output, spec)
    if as_json:
        emit_json(done)
    else:
        click.echo(f"wrote {printable(done['output'])} ({done['bytes']} bytes, {done['figures']} figures)")
    # as analyze: the page is written, and a block that cannot launch exits 1
    for name in ("baseline", "fixed"):
        o = rep.occupancy[name]
        if o["active_blocks"] == 0:
            why = f": {o['reason']}" if o.get("reason") else f" (limiter: {o['limiter']})"
            raise OutOfResources(f"the {name} block cannot launch: 0 blocks fit on an {o['arch']} SM{why}")
