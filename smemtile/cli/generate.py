"""``smemtile generate``: the CUDA source for a spec's kernel family, how to launch it, and the review checklist."""

from __future__ import annotations

from pathlib import Path

import click

from smemtile.cli.common import console, emit_json, json_option
from smemtile.families.registry import NAMES


def _write_atomic(path: Path, text: str, spec: str | None = None) -> None:
    """Write ``text`` to ``path`` safely (smemtile.fileio: O_EXCL temporary file, fsync, rename; refuses the
    input spec and device nodes; keeps an existing file's mode)."""
    from smemtile.fileio import write_text_atomic

    write_text_atomic(
        path, text, key="-o", inputs=[spec] if spec and str(spec) != "-" else (), make_parents=True
    )


@click.command(
    "generate",
    short_help="The CUDA kernel of a kernel spec, with its launch helper.",
    epilog="""\b
Examples:
  smemtile generate samples/sgemm_float4.yaml -o kernel.cu
  smemtile generate samples/transpose_32x32.yaml --variant baseline
  smemtile generate samples/transpose_32x32.yaml --diff
  smemtile generate samples/sgemm_float4.yaml --json
  smemtile generate samples/sgemm_float4.yaml --arch sm_75 -o sgemm_turing.cu
  smemtile tiles 4096 4096 4096 --top 1 --format yaml | smemtile generate - -o kernel.cu
""",
)
@click.argument("spec", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    help="Write the .cu here (atomically) instead of stdout.",
)
@click.option(
    "--variant",
    type=click.Choice(["fixed", "baseline"]),
    default="fixed",
    show_default=True,
    help="fixed: the layouts the fix search recommends; baseline: the spec's own layouts.",
)
@click.option(
    "--diff", is_flag=True, help="Show baseline and fixed side by side with the changed lines highlighted."
)
@click.option(
    "--arch",
    default=None,
    help="Generate for this architecture instead of the spec's (e.g. sm_80; sm_75 selects the register-staged "
    "pipeline).",
)
@click.option("--no-compile", is_flag=True, help="Skip the NVRTC compile (no ptxas numbers, no occupancy).")
@click.option(
    "--name",
    default=None,
    metavar="NAME",
    help="Call the launch helper launch_NAME() (a C identifier; default: the family's name). Several generated "
    "files can be #included in one translation unit (kernels and instantiations are include-guarded); two "
    "configurations of one family there need two names.",
)
@json_option
def command(spec, output, variant, diff, arch, no_compile, name, as_json):
    """Generate a standalone CUDA kernel for SPEC's `kernel:` family ({families}).

    The .cu holds an analysis header (bank conflicts per access before/after, shared memory per block, ptxas
    registers/spills, occupancy), the kernel template with the chosen shared-memory layout, its explicit
    instantiation (also the NVRTC name expression) and a host launch helper that calls cudaFuncSetAttribute
    when the dynamic shared memory exceeds 48 KB. It compiles on its own:
    nvcc -arch=sm_90 -std=c++17 -Xcicc --sharedmem32=0 -c out.cu (the option: the machine code verify measures).

    The kernel is compiled with NVRTC for the spec's arch first: ptxas' static shared memory must equal the
    contract's formula. A configuration that breaks the family's contract (e.g. BM*BN != threads*TM*TN,
    cp.async before sm_80, too much shared memory) is refused with one line and exit code 2.
    The command ends with the review checklist (pass / fail / n/a, each with its reason).

    --json prints the launch description: kernel, file, name_expression, grid, block, dynamic_smem_bytes,
    params (and layouts, banks, ptxas, occupancy, checklist).
    """
    from smemtile import api
    from smemtile.errors import SpecError
    from smemtile.fileio import check_outputs, output_option, printable

    output = output_option(output, "-o")  # `-o -` is stdout; `-o ''` is refused, never stdout by accident
    check_outputs({"-o": output}, {"SPEC": spec})
    res = api.load_spec(spec, arch=arch, first=True)  # `tiles ... --format yaml | generate -`: the first spec
    if res.documents > 1:
        click.echo(
            f"smemtile: note: {'<stdin>' if str(spec) == '-' else printable(spec)} holds {res.documents} "
            "specs; generating the first (smemtile tiles --top 1 gives one)",
            err=True,
        )
    if res.config is None:
        raise SpecError(
            "the spec has no kernel: section, so there is no kernel to generate (add kernel: {family: NAME, "
            f"and its problem keys}}; families: {', '.join(NAMES)}; smemtile samples lists kernel specs)",
            source=str(spec),
        )
    result = api.generate(
        res, variant=variant, compile=not no_compile, diff=diff, name=name, origin=Path(spec).name
    )
    if output:
        _write_atomic(Path(output), result.source, spec)
    if as_json:
        doc = result.to_dict()
        doc["file"] = str(Path(output).resolve()) if output else None
        emit_json(doc)
        return
    built = result.report
    gk = built.kernel
    con = console()
    if diff:
        sources = result.diff_sources
        _side_by_side(con, sources["baseline"], sources["fixed"])
    elif not output:
        click.echo(result.source, nl=False)
    _summary(con, gk, built, output, variant)


command.help = (command.help or "").replace("{families}", ", ".join(NAMES))  # the registry's


def _side_by_side(con, base: str, fixed: str) -> None:
    """Changed lines only (with 2 lines of context), baseline left, fixed right, changes in colour."""
    import difflib

    from rich.table import Table
    from rich.text import Text

    a, b = base.splitlines(), fixed.splitlines()
    table = Table(title="baseline vs fixed (changed lines)", show_lines=False, expand=True)
    table.add_column("baseline", overflow="fold", ratio=1)
    table.add_column("fixed", overflow="fold", ratio=1)
    for group in difflib.SequenceMatcher(None, a, b).get_grouped_opcodes(2):
        for tag, i1, i2, j1, j2 in group:
            left, right = a[i1:i2], b[j1:j2]
            n = max(len(left), len(right))
            for k in range(n):
                lt = left[k] if k < len(left) else ""
                rt = right[k] if k < len(right) else ""
                style = None if tag == "equal" else ("red", "green")
                table.add_row(
                    Text(lt, style=style[0] if style else "dim"), Text(rt, style=style[1] if style else "dim")
                )
        table.add_row(Text("…", style="dim"), Text("…", style="dim"))
    con.print(table)


def _summary(con, gk, built, output, variant) -> None:
    from rich.console import Console
    from rich.table import Table

    # the source went to stdout: keep it clean (pipeable) and put the summary on stderr
    err = Console(stderr=True, highlight=False) if not output else con
    d = gk.to_dict(file=output)
    lines = [
        f"[bold]{d['family']}[/bold] ({variant}) for {d['arch']}: {gk.name_expression}",
        f"grid {tuple(d['grid'])}, block {tuple(d['block'])}, dynamic shared memory {d['dynamic_smem_bytes']} B "
        f"(total {d['smem_bytes']} B per block)",
    ]
    from rich.markup import escape

    lines += [escape(n) for n in d.get("notes", [])]  # e.g. the tile model's pick when the spec gives no tile
    if "ptxas" in gk.extra:
        p = gk.extra["ptxas"]
        lines.append(
            f"ptxas: {p['registers']} registers, {p['spills']} B spilled, {p['static_smem_bytes']} B static smem"
        )
    if "occupancy" in gk.extra:
        o = gk.extra["occupancy"]
        lines.append(
            f"occupancy: {o['active_blocks']} block{'s' if o['active_blocks'] != 1 else ''}/SM, {o['occupancy']:.0%}, limited by {o['limiter']}"
        )
    if built.compile_note:
        lines.append(built.compile_note)
    if output:
        lines.append(f"wrote {output}")
    for ln in lines:
        err.print(ln)
    t = Table(title="review checklist", expand=True)
    t.add_column("", no_wrap=True)
    t.add_column("item", ratio=2)
    t.add_column("reason", ratio=3)
    colour = {"pass": "green", "fail": "red", "n/a": "dim"}
    for i in built.checklist:
        t.add_row(f"[{colour[i.status]}]{i.status}[/]", i.text, i.reason)
    err.print(t)
