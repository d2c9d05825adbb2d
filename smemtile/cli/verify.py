"""`smemtile verify SPEC`: compile the baseline and fixed kernels with NVRTC, run, check, time, compare."""

from __future__ import annotations

from pathlib import Path

import click

from smemtile.cli.common import emit_json, json_option
from smemtile.errors import VerificationFailed

VARIANTS = ("baseline", "fixed")


@click.command("verify", short_help="Compile, run, check and time a spec on the GPU.")
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path, allow_dash=True))
@json_option
@click.option(
    "--compile-only",
    is_flag=True,
    help="No GPU: compile for the spec's arch and report ptxas numbers "
    "(registers, spills, static shared memory) and the model's occupancy with them.",
)
@click.option(
    "--device", "device", type=click.IntRange(0), default=0, show_default=True, help="CUDA device index."
)
@click.option("--seed", type=int, default=1234, show_default=True, help="Seed of the random inputs.")
@click.option(
    "--variant",
    "variants",
    type=click.Choice(VARIANTS),
    multiple=True,
    help="Only this variant (repeatable; default both).",
)
@click.option(
    "--stages",
    "stages",
    type=click.IntRange(1, 8),
    multiple=True,
    help="Also run the fixed layout with this many shared-memory stages (repeatable), beside the spec's own: "
    "e.g. --stages 1 --stages 2 for 1 vs N stages (families with a STAGES parameter).",
)
@click.option(
    "--ncu",
    "use_ncu",
    is_flag=True,
    help="Also run each variant once under Nsight Compute (--clock-control none, a small problem of whole "
    "tiles) and put the measured shared-memory wavefronts and bank conflicts per SASS instruction beside the "
    "model's. Without ncu on PATH it says so in one line and carries on.",
)
@click.option(
    "--ncu-save",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="With --ncu: keep each variant's ncu report and its source/raw CSV pages in this folder.",
)
@click.option(
    "--export",
    "export",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the per-variant table as one self-contained HTML page (FILE.html).",
)
def command(
    spec: Path,
    as_json: bool,
    compile_only: bool,
    device: int,
    seed: int,
    variants: tuple[str, ...],
    stages: tuple[int, ...] = (),
    use_ncu: bool = False,
    ncu_save: Path | None = None,
    export: Path | None = None,
) -> None:
    """Compile SPEC's kernel (baseline layout and the recommended fix), run it, check it, time it.

    On a GPU each variant is compiled for the device's own architecture, loaded, and its registers, static
    shared memory and local memory are read from the driver; the driver's occupancy is compared with the
    model's. It then runs once on random inputs with a poisoned output, compares with the family's float64
    numpy reference, and times it with CUDA events (median after a warm-up). The headline is the speed-up
    of the fixed layout over the baseline.

    With --ncu each variant is also profiled by Nsight Compute at a small problem size: every shared-memory
    SASS instruction (LDS, STS, LDSM, LDGSTS) is matched to the family's access of the same op and
    width, and its measured wavefronts per executed instruction are compared with the bank model; where
    several accesses share an op and width the sums over them are compared. Kernel-level load and store
    wavefronts per instruction (hardware counters) are compared too. The JSON gets an `ncu` key.

    \b
    Exit codes: 0 correct; 1 a variant computed a wrong result; 2 bad spec; 3 no CUDA GPU.
    (--ncu never changes the exit code; a model/measurement mismatch shows as `ncu.match: false`.)

    \b
    Examples:
      smemtile verify samples/transpose_32x32.yaml
      smemtile verify samples/transpose_32x32.yaml --ncu
      smemtile verify samples/sgemm_float4.yaml --compile-only --json
      smemtile verify samples/sgemm_float4.yaml --stages 2 --stages 3
    """
    from smemtile import api

    if export is not None:
        from smemtile.pipeline.page import check_output

        check_output(export, spec, key="--export")
    result = api.verify(
        spec,
        compile_only=compile_only,
        device=device,
        seed=seed,
        variants=variants,
        stages=stages,
        ncu=use_ncu,
        ncu_save=ncu_save,
    )
    doc = result.report  # the pipeline's document (the renderers and the page take it as it is)
    if result.microkernel:
        _export(doc, export, spec)
        if as_json:
            emit_json(result.to_dict())
        else:
            from smemtile.report.microkernel import render as render_micro

            render_micro(doc)
        return
    if compile_only and use_ncu:
        click.echo("smemtile: --ncu needs a GPU run; ignored with --compile-only", err=True)
    _export(doc, export, spec)
    if as_json:
        emit_json(result.to_dict())
    else:
        from smemtile.report.verify import render

        render(doc)
    bad = [r for r in doc["variants"] if r.get("correct") is False]
    if bad:
        r = bad[0]
        raise VerificationFailed(
            f"{r['variant']} variant ({r['name_expression']}) is wrong: {r['mismatch_text']}"
        )


def _export(doc: dict, path: Path | None, spec: Path) -> None:
    """``--export FILE.html``: the variants' page, written atomically (a wrong result still gets its page)."""
    if path is None:
        return
    from smemtile.fileio import write_text_atomic
    from smemtile.report.pages_verify import verify_page

    write_text_atomic(path, verify_page(doc), key="--export", inputs=[spec] if str(spec) != "-" else ())
