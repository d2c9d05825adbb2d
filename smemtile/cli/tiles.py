"""``smemtile tiles M N K``: ranked block-tile configurations for a GEMM, with reasons and exports;
``smemtile tiles --family NAME SIZES...``: that family's own candidates, ranked by its tile model (the families,
their sizes, dtypes, options and examples come from the registry)."""

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
from smemtile.errors import SpecError
from smemtile.pipeline import tiles_family as tf

FORMATS = ("table", "json", "yaml", "triton")
GEMM_EXAMPLES = (
    "smemtile tiles 4096 4096 4096 --dtype f32 --arch sm_90",
    "smemtile tiles 8192 8192 1024 --dtype f16 --arch sm_90 --format triton",
    "smemtile tiles 64 4096 4096 --dtype bf16 --arch gfx942 --vendor amd --top 5",
    "smemtile tiles 4096 4096 4096 --top 1 --format yaml > tile.yaml && smemtile verify tile.yaml",
)
MODEL_OPTIONS = (
    tf.model_options()
)  # name -> (family, ModelOption): the problem options the tile models rank for
_OWN = "|".join(tf.ranked_families())
HELP = f"""Recommend block tiles (BM, BN, BK), warps, stages and GROUP_SIZE_M for C[M,N] = A[M,K] @ B[K,N], or, with
    --family {_OWN}, that family's configurations for a ROWS x COLS problem.

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


def _option_type(opt):
    """A model option's click type: an integer range when its choices are consecutive integers, else a choice."""
    ch = tuple(opt.choices)
    if ch and all(isinstance(c, int) for c in ch) and list(ch) == list(range(min(ch), max(ch) + 1)):
        return click.IntRange(min(ch), max(ch))
    return click.Choice([str(c) for c in ch]) if ch else click.INT


def _model_options(f):
    """The tile models' problem options (``ModelOption``: the stencil's radius), one click option each."""
    for name, (_, opt) in reversed(MODEL_OPTIONS.items()):
        f = click.option(
            opt.option, f"model_{name}", type=_option_type(opt), default=None, help=tf.option_help(opt)
        )(f)
    return f


@click.command(
    "tiles",
    short_help="Rank tile configurations for a GEMM or a family.",
    help=HELP,
    epilog="\b\nExamples:\n" + "\n".join(f"  {x}" for x in (*GEMM_EXAMPLES, *tf.tiles_examples())),
)
@click.argument("sizes", nargs=-1, metavar="M N K | ROWS COLS")
@click.option(
    "--family",
    type=click.Choice(FAMILY_NAMES, case_sensitive=False),
    default=None,
    help=tf.family_help(),
)
@click.option(
    "--dtype",
    type=click.Choice(GEMM_DTYPES, case_sensitive=False),
    default=None,
    help=f"f32 (SIMT {tf.simt_family() or 'GEMM'}; the default), tf32, f16, bf16, f8e4m3, f8e5m2 (sm_89+) or i8 "
    f"(tensor / matrix cores); {tf.dtype_help_families()}.",
)
@_model_options
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
    **model_keys,
) -> None:
    keys = {k.removeprefix("model_"): v for k, v in model_keys.items()}
    fmt = "json" if as_json else str(fmt).lower()
    if fmt not in FORMATS:
        raise SpecError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}", key="--format")
    top_n, rej_n = top, n_rejected
    if export is not None:
        _check_export(export)
    if family is not None and str(family) in tf.ranked_families():
        return _family(
            str(family),
            sizes,
            dtype,
            keys,
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
    for k, v in keys.items():
        if v is not None:
            raise SpecError(tf.option_misuse(k), key=MODEL_OPTIONS[k][1].option)
    if len(sizes) != 3:
        fams = " or ".join(tf.ranked_families())
        raise SpecError(
            f"takes M N K (3 sizes) for a GEMM, got {len(sizes)}; ROWS COLS need --family {fams}", key="sizes"
        )
    from smemtile import api

    dtype = "f32" if dtype is None else dtype
    n_sms = sms
    if str(arch).lower() == "auto":
        arch, dev_sms = _this_gpu()
        n_sms = n_sms or dev_sms
    if family is not None:
        _check_gemm_family(str(family), dtype, arch, vendor)
    result = api.tiles(
        *sizes,
        family=family,
        dtype=dtype,
        arch=arch,
        top=top_n,
        rejected=rej_n,
        vendor=vendor,
        gpu=gpu,
        sms=n_sms,
        triton=fmt == "triton",
    )
    _render(result, fmt, explain, (export, cache_path))


def _render(result, fmt: str, explain: bool, export=(None, None)) -> None:
    """The ranking as the --format asks (the export page first: one that cannot be written is the one line)."""

    report, family = result.report, result.family
    if export[0] is not None:
        doc = result.to_dict()
        doc.pop("hopper", None)  # the page shows the ranking itself
        _export(doc, *export)
    if fmt == "json":
        emit_json(result.to_dict())
    elif fmt == "yaml":
        click.echo(result.yaml_specs(), nl=False)
    elif fmt == "triton":
        click.echo(result.triton_configs(), nl=False)
    elif family is not None:
        from smemtile.report.tiles_family import render_family_tiles

        con = console()
        con.print(render_family_tiles(report, result.top, result.rejected, width=con.width, explain=explain))
    else:
        from smemtile.report.tiles import render_tiles

        con = console()
        con.print(render_tiles(report, result.top, result.rejected, width=con.width, explain=explain))


def _this_gpu() -> tuple[str, int]:
    """``--arch auto``: this machine's GPU, its arch and SM count (NoDevice, exit 3, without one)."""
    from smemtile.gpu.device import device_attributes

    attrs = device_attributes(0)
    return f"sm_{attrs['cc_major']}{attrs['cc_minor']}", attrs["sm_count"]


def _check_gemm_family(family: str, dtype: str, arch, vendor) -> None:
    """``--family`` with M N K names the family the dtype and arch already imply (it picks nothing else)."""
    from smemtile.families import FAMILIES
    from smemtile.pipeline.tiles import implied_gemm_family

    implied = implied_gemm_family(dtype, arch, vendor)
    if family == implied:
        return
    if family not in FAMILIES:
        raise SpecError(
            f"unknown family {family!r}; tiles ranks {', '.join(tf.ranked_families())} (ROWS COLS) and "
            f"the GEMM families {', '.join(tf.gemm_families())} (M N K)",
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
    family, sizes, dtype, keys, arch, vendor, gpu, sms, top_n, rej_n, fmt, explain, export=(None, None)
) -> None:
    if fmt == "triton":
        raise SpecError("--format triton is for GEMM tiles", key="--format")
    if sms is not None or (vendor or "nvidia").lower() != "nvidia":
        raise SpecError(
            f"--family {family} ranks for an NVIDIA GPU's own SM count (no --sms, no --vendor amd)",
            key="--sms" if sms is not None else "--vendor",
        )
    if str(arch).lower() == "auto":
        arch, _ = _this_gpu()
    from smemtile import api

    sizes = tuple(sizes)
    options = {
        MODEL_OPTIONS[k][1].option.lstrip("-"): v for k, v in keys.items() if v is not None
    }  # radius=R
    result = api.tiles(
        *sizes, family=family, dtype=dtype, arch=arch, top=top_n, rejected=rej_n, gpu=gpu, **options
    )
    _render(result, fmt, explain, export)
