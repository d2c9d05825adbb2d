"""`smemtile measure CATALOGUE.yaml`: many access patterns as microkernels in one module, measured on the GPU."""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

import click

from smemtile.cli.common import emit_json, json_option
from smemtile.errors import SpecError


@click.command("measure", short_help="Measure a catalogue of access patterns on the GPU.")
@click.argument("catalogue", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the JSON document (predictions, and measurements unless --predict-only) to FILE.",
)
@click.option(
    "--predict-only",
    is_flag=True,
    help="No GPU: only the bank model's predictions (record them before measuring).",
)
@click.option("--no-ncu", is_flag=True, help="Time with clock64() only; do not count wavefronts with ncu.")
@click.option("--device", type=click.IntRange(0), default=0, show_default=True, help="CUDA device index.")
@json_option
def command(
    catalogue: Path, out: Path | None, predict_only: bool, no_ncu: bool, device: int, as_json: bool
) -> None:
    """Measure shared-memory wavefronts of every pattern in CATALOGUE on the GPU, beside the bank model.

    Each pattern is one warp-wide shared-memory instruction. All of them are compiled into one module with
    NVRTC (inline PTX, SASS opcode checked when cuobjdump or nvdisasm is there); each runs in one-warp
    blocks, 2048 instructions a warp, timed with clock64(), and once more under Nsight Compute
    (--clock-control none), whose shared-memory wavefront counters divided by the instructions issued give
    the measured wavefronts per instruction. The JSON has, per pattern, the addresses, the model's
    `wavefronts` and the `measured` numbers: the way to check the model on a new GPU and to extend
    tests/data/. Disagreements are data (`agree: false`), not an error: the exit code stays 0.

    \b
    The catalogue (YAML):
      arch: sm_90                   # the target: cp.async needs sm_80, stmatrix sm_90 (default sm_90)
      description: what it tests    # optional
      patterns:                     # one warp instruction each
        - name: ld16_stride48       # unique
          op: load                  # load | store | ldmatrix | stmatrix | cp.async
          width: 16                 # bytes per lane: 1 2 4 8 16 (cp.async 4 8 16; matrices: 16)
          address: "lane * 48"      # byte offset per lane, an expression over lane
          note: three 16-byte chunks apart
        - {name: x2t, op: ldmatrix, matrices: 2, trans: true, address: "(lane % 8) * 96 + (lane // 8) * 16"}
        - {name: half, op: load, width: 4, addresses: [0, 128, ...], active: "lane < 16"}   # 32 integers
        - {name: cp, op: cp.async, width: 16, cache: ca, address: "lane * 16", source: "lane * 528"}
    Keys: name, op, width, address | addresses, source (cp.async: global byte offset per lane, default
    lane * width), matrices (1, 2, 4), trans, cache (cp.async: ca, or cg for 16 bytes; ncu cannot count
    .cg writes), active (lanes take part where non-zero), note. Offsets are from a 1024-byte-aligned base.

    \b
    Exit codes: 0 measured (or predicted); 2 bad catalogue or a pattern the hardware cannot issue;
    3 no CUDA GPU (use --predict-only).

    \b
    Examples:
      smemtile measure samples/catalogues/heldout.yaml --predict-only --out predictions.json
      smemtile measure samples/catalogues/heldout.yaml --out measured.json
    """
    from smemtile.codegen.microkernel import catalogue_patterns
    from smemtile.fileio import check_outputs, output_option, printable, read_text, write_text_atomic
    from smemtile.model.spec import load_yaml

    if out is not None and str(out) == "-":  # `--out -`: the JSON document on stdout
        as_json = True
    out = output_option(out, "--out")
    # the one reader (a regular file or FIFO, 1 MiB, strict UTF-8) and the one YAML loader (duplicate keys,
    # 010, alias bombs refused); --out never replaces the catalogue
    check_outputs({"--out": out}, {"CATALOGUE": catalogue})
    raw = load_yaml(read_text(catalogue, what="catalogue"), printable(catalogue))
    arch, patterns = catalogue_patterns(raw, str(catalogue))
    names = [p.name for p in patterns]
    head = {
        "catalogue": str(catalogue),
        "description": str((raw or {}).get("description", "")),
        "date": _dt.date.today().isoformat(),
        "model": "smemtile.model.banks",
    }
    if out is not None and not (out.parent if str(out.parent) else Path(".")).is_dir():
        raise SpecError(f"folder {printable(out.parent)!r} does not exist", key="--out")
    if predict_only:
        from smemtile.codegen.microkernel import build_module
        from smemtile.gpu.microkernel import predict

        build_module(patterns, arch)  # the same refusals as a real run
        doc = {
            **head,
            "about": "bank-model predictions, recorded before any measurement",
            "arch": arch.name,
            "patterns": predict(patterns),
        }
    else:
        from smemtile.gpu.microkernel import measure_patterns

        doc = {
            **head,
            "about": "shared-memory wavefronts per instruction measured by microkernels "
            "(smemtile measure) beside the bank model's prediction",
            **measure_patterns(patterns, arch, device=device, use_ncu=not no_ncu),
        }
    assert [p["name"] for p in doc["patterns"]] == names
    if out is not None:  # fileio: no device, FIFO or catalogue; a symlink kept; mode 0666 & ~umask
        write_text_atomic(out, json.dumps(doc, indent=1) + "\n", key="--out", inputs=[catalogue])
    if as_json:
        emit_json(doc)
    else:
        from smemtile.report.microkernel import render_measure

        render_measure(doc)
        if out is not None:
            click.echo(f"wrote {out}")
