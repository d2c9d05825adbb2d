"""``smemtile tiles M N K``: ranked block-tile configurations for a GEMM, with reasons and exports;
``smemtile tiles --family transpose|stencil2d ROWS COLS``: that family's own candidates, ranked by its model."""

from __future__ import annotations

from pathlib import Path

import click

from smemtile.cli.common import (
    AMD_TARGETS,
    ARCH_TARGETS,
    FAMILY_NAMES,
    GEMM_DTYPES,
    Targets,
    console,
    emit_json,
    json_option,
)
from smemtile.errors import OutOfResources, SpecError

FORMATS = ("table", "json", "yaml", "triton")


@click.command(
    "tiles",
    short_help="Rank tile configurations for a GEMM or a family.",
    epilog="""\b
Examples:
  smemtile tiles 4096 4096 4096 --dtype f32 --arch sm_90
  smemtile tiles 8192 8192 1024 --dtype f16 --arch sm_90 --format triton
  smemtile tiles 64 4096 4096 --dtype bf16 --arch gfx942 --vendor amd --top 5
  smemtile tiles 4096 4096 4096 --top 1 --format yaml > tile.yaml && smemtile verify tile.yaml
  smemtile tiles 4096 4096 4096 --dtype bf16 --arch sm_90a   # Hopper: the wgmma_gemm family
  smemtile tiles --family transpose 8192 8192 --dtype f16 --explain
  smemtile tiles --family stencil2d 8192 8192 --radius 4 --top 5
  smemtile tiles --family transpose 8K 8K --top 1 --format yaml > t.yaml
  smemtile generate t.yaml -o transpose.cu""",
)
@click.argument("sizes", nargs=-1, metavar="M N K | ROWS COLS")
@click.option(
    "--family",
    type=click.Choice(FAMILY_NAMES, case_sensitive=False),
    default=None,
    help="The kernel family: transpose (ROWS COLS, --dtype f32|f16|bf16) or stencil2d (NY NX, --radius) rank "
    "their own configurations; sgemm, hgemm or wgmma_gemm (M N K) must be the one --dtype/--arch imply.",
)
@click.option(
    "--dtype",
    type=click.Choice(GEMM_DTYPES, case_sensitive=False),
    default=None,
    help="f32 (SIMT sgemm; the default), tf32, f16, bf16, f8e4m3, f8e5m2 (sm_89+) or i8 (tensor / matrix cores); "
    "with --family transpose: f32, f16 or bf16.",
)
@click.option(
    "--radius",
    type=click.IntRange(1, 4),
    default=None,
    help="--family stencil2d: the stencil radius R (1-4).",
)
@click.option(
    "--arch",
    type=Targets(ARCH_TARGETS, ("auto", *AMD_TARGETS)),
    default=None,
    help="sm_XX (default sm_90): "
    + ", ".join(ARCH_TARGETS)
    + "; auto (this GPU); or with --vendor amd "
    + ", ".join(AMD_TARGETS)
    + ".",
)
@click.option(
    "--vendor",
    type=click.Choice(("nvidia", "amd"), case_sensitive=False),
    default=None,
    help="nvidia or amd (default: from --arch).",
)
@click.option(
    "--gpu", default=None, help="GPU row for the roofline (h200, h100, a100, mi300x, ...; default per arch)."
)
@click.option(
    "--sms", type=click.IntRange(1), default=None, help="Override the GPU's SM (CU) count (GEMM tiles)."
)
@click.option(
    "--top",
    type=click.IntRange(1),
    default=10,
    show_default=True,
    help="How many ranked configurations to print.",
)
@click.option(
    "--rejected",
    "n_rejected",
    type=click.IntRange(0),
    default=8,
    show_default=True,
    help="How many rejected ones to show.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS, case_sensitive=False),
    default="table",
    show_default=True,
    help="table, json, yaml (specs) or triton (GEMM only).",
)
@click.option(
    "--explain",
    is_flag=True,
    help="Also print where the calibration comes from: its data file, the sweeps and commits behind it, and "
    "the GPU peaks' sources.",
)
@click.option(
    "--export",
    "export",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the ranking as one self-contained HTML page (FILE.html): the dot plot with the expected "
    "error, the candidates, the rejected ones, measured points from the tune cache.",
)
@click.option(
    "--cache",
    "cache_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="--export: the tune cache whose measured results are marked (default: smemtile tune's cache).",
)
@json_option
def command(
    sizes,
    family,
    dtype,
    radius,
    arch,
    vendor,
    gpu,
    sms,
    top,
    n_rejected,
    fmt,
    explain,
    export,
    cache_path,
    as_json,
) -> None:
    """Recommend block tiles (BM, BN, BK), warps, stages and GROUP_SIZE_M for C[M,N] = A[M,K] @ B[K,N], or, with
    --family transpose|stencil2d, that family's configurations for a ROWS x COLS problem.

    GEMM: candidates come from the problem and the architecture (mma / SIMT shapes, smaller tiles when M or N is
    small), are pruned by per-block limits and the occupancy model (every rejection keeps its reason), and are
    ranked by a stated model: wave quantisation over the SMs, occupancy, inner-loop efficiency, arithmetic
    intensity against the roofline, DRAM traffic with and without L2 grouping, and padding waste.

    Memory-bound families: every configuration the family can generate is checked by the family's own rules
    (rejections keep its reason) and ranked by its model calibrated on the H200 (predicted GB/s, the fraction of
    a device copy of the same bytes, the expected error, whether the H200 runs timed it).

    \b
    --format triton prints a list of triton.Config (GEMM); yaml prints specs
    (one document per candidate) that `smemtile verify` / `generate` /
    `tune --space` accept; json (or --json) has every factor.
    """
    from smemtile.pipeline.tiles import ranked_families

    fmt = "json" if as_json else str(fmt).lower()
    if fmt not in FORMATS:
        raise SpecError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}", key="--format")
    top_n, rej_n = top, n_rejected
    if export is not None:
        _check_export(export)
    if family is not None and str(family) in ranked_families():
        return _family(
            str(family),
            sizes,
            dtype,
            radius,
            arch,
            vendor,
            gpu,
            sms,
            top_n,
            rej_n,
            fmt,
            explain,
            (export, cache_path),
        )
    if radius is not None:
        raise SpecError(
            "--radius is the stencil2d family's (use --family stencil2d NY NX --radius R)", key="--radius"
        )
    if len(sizes) != 3:
        fams = " or ".join(ranked_families())
        raise SpecError(
            f"takes M N K (3 sizes) for a GEMM, got {len(sizes)}; ROWS COLS need --family {fams}", key="sizes"
        )
    m, n, k = sizes
    dtype = "f32" if dtype is None else dtype
    n_sms = sms
    if str(arch).lower() == "auto":
        arch, dev_sms = _this_gpu()
        n_sms = n_sms or dev_sms
    if family is not None:
        _check_gemm_family(str(family), dtype, arch, vendor)
    from smemtile.pipeline.tiles import recommend

    report = recommend(m, n, k, dtype, arch, vendor=vendor, gpu=gpu, sms=n_sms, triton=fmt == "triton")
    if not report.ranked:
        raise OutOfResources(
            f"no configuration fits {report.problem.arch}: {report.rejected[0].reason}"
            if report.rejected
            else "no candidates"
        )
    if export is not None:
        from smemtile.pipeline.tiles import json_doc

        _export(json_doc(report, top_n, rej_n), export, cache_path)
    if fmt == "json":
        from smemtile.pipeline.tiles import json_doc
        from smemtile.report.tiles import hopper_seam

        doc = json_doc(report, top_n, rej_n)
        seam = hopper_seam(report)
        if seam is not None:  # sm_90 16-bit: the faster family is one target away
            doc["hopper"] = seam
        emit_json(doc)
    elif fmt == "yaml":
        from smemtile.pipeline.tiles import yaml_specs

        click.echo(yaml_specs(report, top_n), nl=False)
    elif fmt == "triton":
        from smemtile.pipeline.tiles import triton_configs

        click.echo(triton_configs(report, top_n), nl=False)
    else:
        from smemtile.report.tiles import render_tiles

        con = console()
        con.print(render_tiles(report, top_n, rej_n, width=con.width, explain=explain))


def _this_gpu() -> tuple[str, int]:
    """``--arch auto``: this machine's GPU, its arch and SM count (NoDevice, exit 3, without one)."""
    from smemtile.gpu.device import device_attributes

    attrs = device_attributes(0)
    return f"sm_{attrs['cc_major']}{attrs['cc_minor']}", attrs["sm_count"]


def _check_gemm_family(family: str, dtype: str, arch, vendor) -> None:
    """``--family`` with M N K names the family the dtype and arch already imply (it picks nothing else)."""
    from smemtile.families import FAMILIES
    from smemtile.pipeline.tiles import implied_gemm_family, ranked_families

    implied = implied_gemm_family(dtype, arch, vendor)
    if family == implied:
        return
    if family not in FAMILIES:
        raise SpecError(
            f"unknown family {family!r}; tiles ranks {', '.join(ranked_families())} (ROWS COLS) and "
            "the GEMM families sgemm, hgemm, wgmma_gemm (M N K)",
            key="--family",
        )
    target = f"--dtype {dtype} on {arch or 'sm_90'}"
    if implied is None:
        raise SpecError(
            f"no family generates {target} tiles (the ranking is the model's only); drop --family",
            key="--family",
        )
    raise SpecError(f"{target} is ranked by the {implied} family, not {family}", key="--family")


def _check_export(path: Path) -> None:
    from smemtile.fileio import printable

    if path.suffix.lower() != ".html":
        raise SpecError(f"takes a .html file name, got {printable(path.name)!r}", key="--export")


def _export(doc: dict, path: Path, cache_path: Path | None) -> None:
    """``--export FILE.html``: the ranking's page, written atomically (before the command's own output)."""
    from smemtile.fileio import write_text_atomic
    from smemtile.report.pages_tiles import measured_points, tiles_page

    inputs = [cache_path] if cache_path is not None else []
    write_text_atomic(path, tiles_page(doc, measured_points(doc, cache_path)), key="--export", inputs=inputs)


def _family(
    family, sizes, dtype, radius, arch, vendor, gpu, sms, top_n, rej_n, fmt, explain, export=(None, None)
) -> None:
    from smemtile.pipeline.tiles import family_json_doc, family_tiles, family_yaml_specs

    if fmt == "triton":
        raise SpecError("--format triton is for GEMM tiles", key="--format")
    if sms is not None or (vendor or "nvidia").lower() != "nvidia":
        raise SpecError(
            f"--family {family} ranks for an NVIDIA GPU's own SM count (no --sms, no --vendor amd)",
            key="--sms" if sms is not None else "--vendor",
        )
    if str(arch).lower() == "auto":
        arch, _ = _this_gpu()
    rep = family_tiles(family, sizes, dtype=dtype, keys={"R": radius}, arch=arch, gpu=gpu)
    if not rep.ranked:
        raise OutOfResources(
            f"no {family} configuration fits: {rep.rejected[0]['reason']}"
            if rep.rejected
            else "no candidates"
        )
    if export[0] is not None:
        _export(family_json_doc(rep, top_n, rej_n), *export)
    if fmt == "json":
        emit_json(family_json_doc(rep, top_n, rej_n))
    elif fmt == "yaml":
        click.echo(family_yaml_specs(rep, top_n), nl=False)
    else:
        from smemtile.report.tiles_family import render_family_tiles

        con = console()
        con.print(render_family_tiles(rep, top_n, rej_n, width=con.width, explain=explain))
