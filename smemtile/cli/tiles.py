"""``smemtile tiles M N K``: ranked block-tile configurations for a GEMM, with reasons and exports."""

from __future__ import annotations

import click

from smemtile.cli.common import console, emit_json, json_option, parse_int
from smemtile.errors import OutOfResources, SpecError

FORMATS = ("table", "json", "yaml", "triton")


@click.command(
    "tiles",
    epilog="""\b
Examples:
  smemtile tiles 4096 4096 4096 --dtype f32 --arch sm_90
  smemtile tiles 8192 8192 1024 --dtype f16 --arch sm_90 --format triton
  smemtile tiles 64 4096 4096 --dtype bf16 --arch gfx942 --vendor amd --top 5
  smemtile tiles 4096 4096 4096 --top 1 --format yaml > tile.yaml && smemtile verify tile.yaml""",
)
@click.argument("m")
@click.argument("n")
@click.argument("k")
@click.option(
    "--dtype",
    default="f32",
    show_default=True,
    help="f32 (SIMT sgemm), tf32, f16, bf16, f8e4m3, f8e5m2 (sm_89+) or i8 (tensor / matrix cores).",
)
@click.option(
    "--arch",
    default=None,
    help="sm_XX (default sm_90), auto (this GPU), or with --vendor amd gfx90a/gfx942/gfx950.",
)
@click.option("--vendor", default=None, help="nvidia or amd (default: from --arch).")
@click.option(
    "--gpu", default=None, help="GPU row for the roofline (h200, h100, a100, mi300x, ...; default per arch)."
)
@click.option("--sms", default=None, help="Override the GPU's SM (CU) count.")
@click.option("--top", default="10", show_default=True, help="How many ranked configurations to print.")
@click.option(
    "--rejected", "n_rejected", default="8", show_default=True, help="How many rejected ones to show."
)
@click.option(
    "--format", "fmt", default="table", show_default=True, help="table, json, yaml (specs) or triton."
)
@json_option
def command(m, n, k, dtype, arch, vendor, gpu, sms, top, n_rejected, fmt, as_json) -> None:
    """Recommend block tiles (BM, BN, BK), warps, stages and GROUP_SIZE_M for C[M,N] = A[M,K] @ B[K,N].

    Candidates come from the problem and the architecture (mma / SIMT shapes, smaller tiles when M or N is
    small), are pruned by per-block limits and the occupancy model (every rejection keeps its reason), and are
    ranked by a stated model: wave quantisation over the SMs, occupancy, inner-loop efficiency, arithmetic
    intensity against the roofline, DRAM traffic with and without L2 grouping, and padding waste.

    \b
    --format triton prints a list of triton.Config; yaml prints specs (one document per candidate) that
    `smemtile verify` / `generate` / `tune --space` accept; json (or --json) has every factor.
    """
    from smemtile.pipeline.tiles import recommend

    fmt = "json" if as_json else str(fmt).lower()
    if fmt not in FORMATS:
        raise SpecError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}", key="--format")
    top_n = parse_int(top, "--top", 1)
    rej_n = parse_int(n_rejected, "--rejected", 0)
    n_sms = None if sms is None else parse_int(sms, "--sms", 1)
    if (
        str(arch).lower() == "auto"
    ):  # this machine's GPU: its arch and SM count (NoDevice, exit 3, without one)
        from smemtile.gpu.device import device_attributes

        attrs = device_attributes(0)
        arch = f"sm_{attrs['cc_major']}{attrs['cc_minor']}"
        n_sms = n_sms or attrs["sm_count"]
    report = recommend(m, n, k, dtype, arch, vendor=vendor, gpu=gpu, sms=n_sms, triton=fmt == "triton")
    if not report.ranked:
        raise OutOfResources(f"no configuration fits {report.problem.arch}: {report.rejected[0].reason}"
                        if report.rejected else "no candidates")  # fmt: skip
    if fmt == "json":
        from smemtile.pipeline.tiles import json_doc

        emit_json(json_doc(report, top_n, rej_n))
    elif fmt == "yaml":
        from smemtile.pipeline.tiles import yaml_specs

        click.echo(yaml_specs(report, top_n), nl=False)
    elif fmt == "triton":
        from smemtile.pipeline.tiles import triton_configs

        click.echo(triton_configs(report, top_n), nl=False)
    else:
        from smemtile.report.tiles import render_tiles

        con = console()
        con.print(render_tiles(report, top_n, rej_n, width=con.width))
