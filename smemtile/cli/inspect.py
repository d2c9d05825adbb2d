"""`smemtile inspect KERNEL.cu`: the user's own kernel, per source line, with the lanes, the banks and the fix."""

from __future__ import annotations

from pathlib import Path

import click

from smemtile.cli.common import emit_json, json_option
from smemtile.errors import NoDevice, SpecError


def _dims(value: str, key: str) -> tuple[int, ...]:
    parts = [p.strip() for p in str(value).split(",")]
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise SpecError(f"expected X[,Y[,Z]] with positive integers, got {value!r}", key=key)
    return tuple(int(p) for p in parts)


@click.command("inspect", short_help="Your own kernel: banks per source line, and the fix.")
@click.argument("kernel_file", metavar="KERNEL", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--kernel",
    "kernel",
    help="The kernel's name (demangled, e.g. my_kernel, or mangled); needed when the file has several.",
)
@click.option("--grid", default="1", show_default=True, help="Grid dimensions X[,Y[,Z]].")
@click.option("--block", default="32", show_default=True, help="Block dimensions X[,Y[,Z]].")
@click.option("--smem", default="0", show_default=True, help="Dynamic shared memory per block (49152, 48K).")
@click.option(
    "--args",
    "args",
    type=click.Path(dir_okay=False, path_type=Path),
    help="ARGS.yaml: the kernel's arguments in parameter order ({name, dtype, count, fill} for arrays, "
    "{name, value} for scalars; counts and values may be expressions over --define constants).",
)
@click.option(
    "--define",
    "-D",
    "defines",
    multiple=True,
    metavar="NAME=VALUE",
    help="A macro for NVRTC and the declarations' sizes (repeatable).",
)
@click.option("--arch", default="sm_90", show_default=True, help="The architecture NVRTC compiles for.")
@click.option(
    "--simulate", is_flag=True, help="Emulate the sampled warps' address arithmetic on the CPU (no GPU)."
)
@click.option("--gpu", "use_gpu", is_flag=True, help="Record on the GPU (the default when one is present).")
@click.option(
    "--ncu",
    is_flag=True,
    help="Also profile the uninstrumented kernel with Nsight Compute and put "
    "its wavefronts per source line beside the prediction, with a match column.",
)
@click.option(
    "--blocks",
    "n_blocks",
    type=click.IntRange(1, 4096),
    default=2,
    show_default=True,
    help="Sample: the first N blocks in linear order.",
)
@click.option(
    "--warps",
    "n_warps",
    type=click.IntRange(1, 32),
    default=4,
    show_default=True,
    help="Sample: warps 0..W-1 of each sampled block.",
)
@click.option(
    "--executions",
    "n_exec",
    type=click.IntRange(1, 1 << 20),
    default=64,
    show_default=True,
    help="Sample: the first N executions per instruction per sampled warp.",
)
@click.option(
    "--max-steps",
    type=click.IntRange(1000, 1 << 30),
    default=None,
    help="--simulate: PTX instructions per warp before the emulator stops (default 2,000,000).",
)
@click.option(
    "--emit-spec",
    "emit_spec",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the recorded accesses as a spec FILE.yaml that `smemtile analyze` takes.",
)
@click.option("--no-lanes", is_flag=True, help="Leave out the lane -> address -> bank tables.")
@click.option("--device", type=click.IntRange(0, 63), default=0, show_default=True, help="GPU ordinal.")
@click.option(
    "--export",
    "export",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write one self-contained HTML page (FILE.html): per source line the table, the worst "
    "instruction's lanes x banks heatmap, the fix with the same instruction before and after.",
)
@json_option
def command(
    kernel_file: Path,
    kernel: str | None,
    grid: str,
    block: str,
    smem: str,
    args: Path | None,
    defines: tuple[str, ...],
    arch: str,
    simulate: bool,
    use_gpu: bool,
    ncu: bool,
    n_blocks: int,
    n_warps: int,
    n_exec: int,
    max_steps: int | None,
    emit_spec: Path | None,
    no_lanes: bool,
    device: int,
    export: Path | None,
    as_json: bool,
) -> None:
    """Inspect your own kernel: every shared-memory instruction with its source line and __shared__ array, the
    wavefronts each costs (L1 Wavefronts Shared, Ideal, Excessive, as Nsight Compute names them) per source line,
    costliest first, the lane -> address -> bank table of the costliest instruction, and for each array whose
    declaration it can read, the new declaration (padding or swizzle) with the re-derived table.

    The kernel (.cu through NVRTC with -lineinfo, or .ptx as is) is compiled, never run on the host. The
    addresses come from the GPU (recorded for a sample of warps) or, with --simulate, from a CPU emulator of
    the sampled warps' PTX. Without a GPU and without --simulate it prints the listing and exits 3.

    \b
    Examples:
      smemtile inspect samples/kernels/transpose_naive.cu --grid 32,32 --block 32,8 \\
          --args samples/kernels/transpose_naive.args.yaml --simulate
      smemtile inspect samples/kernels/sgemm_tiled.cu --grid 16,16 --block 16,16 \\
          --args samples/kernels/sgemm_tiled.args.yaml --simulate --emit-spec tiled.yaml
      smemtile inspect samples/kernels/histogram.cu --grid 4 --block 256 \\
          --args samples/kernels/histogram.args.yaml --json
    """
    from smemtile import api
    from smemtile.model.sizes import parse_size

    if simulate and use_gpu:
        raise SpecError("give --simulate or --gpu, not both", key="--simulate")
    if ncu and simulate:
        raise SpecError("--ncu measures on the GPU; it cannot go with --simulate", key="--ncu")
    mode = "simulate" if simulate else "gpu" if use_gpu or ncu else "auto"
    if export is not None:
        from smemtile.pipeline.page import check_output

        for p in (kernel_file, args, emit_spec):
            if p is not None:
                check_output(export, p, key="--export")
    result = api.inspect(
        kernel_file,
        kernel=kernel,
        grid=_dims(grid, "--grid"),
        block=_dims(block, "--block"),
        smem=parse_size(smem, key="--smem"),
        args=args,
        defines=defines,
        arch=arch,
        mode=mode,
        ncu=ncu,
        blocks=n_blocks,
        warps=n_warps,
        executions=n_exec,
        emit_spec=emit_spec,
        max_steps=max_steps,
        device=device,
    )
    res = result.report
    if export is not None:  # first: a page that cannot be written is the one line, before any output
        from smemtile.fileio import write_text_atomic
        from smemtile.report.pages_inspect import inspect_page

        inputs = [p for p in (kernel_file, args) if p is not None]
        write_text_atomic(export, inspect_page(res), key="--export", inputs=inputs)
    if as_json:
        emit_json(result.to_dict())
    else:
        from smemtile.report.inspect import render
        from smemtile.report.text import make_console

        render(make_console(), res, lanes=not no_lanes)
    if res.no_device:
        raise NoDevice(res.no_device)
