"""``smemtile occupancy``: how many blocks fit on an SM, what limits them, what one more would need."""

from __future__ import annotations

import contextlib
import csv
import json
import sys

import click
import numpy as np

from smemtile.cli.common import arch_option, console, emit_json, json_option, parse_int
from smemtile.errors import OutOfResources, SpecError
from smemtile.model.sizes import parse_size

COLUMNS = ("arch", "threads", "regs", "static_smem", "dynamic_smem", "carveout", "opt_in")
def _size(text: str, key: str) -> int:
    if str(text).strip().startswith("-"):
        raise SpecError(f"must not be negative, got {text.strip()}", key=key)
    return parse_size(text, key=key)


def _carveout(text: str | None, key: str = "--carveout") -> int | None:
    if text is None or not str(text).strip() or str(text).strip().lower() == "default":
        return None
    c = parse_int(str(text).strip().rstrip("%"), key)
    if not 0 <= c <= 100:
        raise SpecError(f"must be a percent 0..100 (or empty for the default), got {text}", key=key)
    return c


@click.command(
    "occupancy",
    epilog="""\b
Examples:
  smemtile occupancy --arch sm_90 --threads 256 --regs 64 --smem-dynamic 48K
  smemtile occupancy --arch sm_86 --threads 128 --regs 96 --smem-dynamic 64K --no-opt-in
  smemtile occupancy --arch sm_80 --threads 256 --regs 32 --smem-static 8K --carveout 50 --json
  smemtile occupancy --batch configs.csv --json

\b
--batch CSV, one configuration per line (a header line naming the columns is optional):
  arch,threads,regs,static_smem,dynamic_smem[,carveout[,opt_in]]
  sm_90,256,64,0,48K,,1
  sm_80,128,255,0,0,50,0
carveout: percent, empty = the default (maximum shared memory); opt_in: 1 (default) or 0.

\b
Exit codes: 0 fits; 1 not even one block fits (the report says why); 2 bad input; 3 no GPU for --arch auto.
A batch exits 0 whatever its rows report: a row with 0 blocks is data, with its reason.""",
)
@arch_option()
@click.option("--threads", metavar="N", help="Threads per block (1..1024).")
@click.option("--regs", metavar="N", help="Registers per thread (0..255), e.g. from `ptxas -v` or cuFuncGetAttribute(NUM_REGS).")
@click.option("--smem-static", metavar="SIZE", default="0", show_default=True, help="Static shared memory per block (49152, 48K).")
@click.option("--smem-dynamic", metavar="SIZE", default="0", show_default=True, help="Dynamic shared memory per block at launch.")
@click.option(
    "--carveout",
    metavar="PCT",
    help="Preferred shared-memory carveout, percent of the SM's maximum (cudaFuncAttributePreferredSharedMemory"
    "Carveout); the driver rounds it up to a size the SM supports. Default: the maximum.",
)
@click.option(
    "--opt-in/--no-opt-in",
    default=True,
    show_default=True,
    help="The kernel raised cudaFuncAttributeMaxDynamicSharedMemorySize to the opt-in maximum; with --no-opt-in "
    "the 48 KB default per block applies.",
)
@click.option("--batch", "batch", type=click.Path(dir_okay=False), help="CSV file of configurations ('-' = stdin).")
@json_option
def command(arch, threads, regs, smem_static, smem_dynamic, carveout, opt_in, batch, as_json) -> None:
    """How many blocks of a kernel fit on one SM, exactly as the CUDA driver computes it.

    Prints active blocks and warps per SM, occupancy, the binding limiter(s), the block limit of every
    resource (warps, registers, shared memory, blocks) and what-if hints: the most registers per thread and
    dynamic shared memory that keep the current block count, and what one more block would need.
    """
    from smemtile.gpu.device import resolve_arch
    from smemtile.model.occupancy import occupancy

    if batch is not None:
        if threads is not None or regs is not None:
            raise SpecError("--batch takes every configuration from the CSV; drop --threads/--regs", key="--batch")
        return _batch(batch, as_json)
    if threads is None or regs is None:
        raise SpecError("--threads and --regs are required (or --batch FILE.csv)", key="occupancy")
    a = resolve_arch(arch)
    r = occupancy(
        a,
        parse_int(threads, "--threads"),
        parse_int(regs, "--regs"),
        _size(smem_static, "--smem-static"),
        _size(smem_dynamic, "--smem-dynamic"),
        _carveout(carveout),
        opt_in,
    )
    if as_json:
        emit_json(r.to_dict())
    else:
        from smemtile.report.occupancy import render_occupancy

        console().print(render_occupancy(r, a))
    if r.active_blocks == 0:
        raise OutOfResources(f"0 blocks fit on an {r.arch} SM: {r.reason}")


def _batch(path: str, as_json: bool) -> None:
    from smemtile.gpu.device import resolve_arch
    from smemtile.model.occupancy import invalid_rows, occupancy_batch

    lines, cols = _read_csv(path)
    name = "<stdin>" if path == "-" else path
    archs: dict[str, object] = {}
    for i, text in enumerate(cols["arch"]):
        key = text.strip()
        if key not in archs:
            try:
                archs[key] = resolve_arch(key)
            except SpecError as e:
                raise SpecError(str(e), source=f"{name}:{lines[i]}") from None
    per_row = [archs[t.strip()] for t in cols["arch"]]
    threads = _ints(cols["threads"], "threads", name, lines)
    regs = _ints(cols["regs"], "regs", name, lines)
    static = _sizes(cols["static_smem"], "static_smem", name, lines)
    dynamic = _sizes(cols["dynamic_smem"], "dynamic_smem", name, lines)
    carve = _ints([t if t.strip() else "-1" for t in cols["carveout"]], "carveout", name, lines, _carveout_cell)
    opt = _flags(cols["opt_in"], name, lines)
    bad = invalid_rows(threads, regs, static, dynamic, carve)
    if bad is not None:
        mask, key, msg = bad
        i = int(np.argmax(mask))
        value = cols[key][i].strip()
        raise SpecError(f"{msg}, got {value}", source=f"{name}:{lines[i]}", key=key)
    res = occupancy_batch(per_row, threads, regs, static, dynamic, carve, opt)
    if as_json:
        # One row per line: readable, and the C JSON encoder (json's indent mode is pure Python, 7x slower).
        rows = res.to_dicts()
        encode = json.JSONEncoder(check_circular=False).encode
        sys.stdout.write("[\n" + ",\n".join(map(encode, rows)) + "\n]\n")
    else:
        from smemtile.report.occupancy import render_batch

        sys.stdout.write(render_batch(res))


def _read_csv(path: str) -> tuple[list[int], dict[str, list[str]]]:
    """Columns of strings and the file line of each row; a header line (naming ``arch``) is optional."""
    name = "<stdin>" if path == "-" else path
    try:
        with (open(path, encoding="utf-8", newline="") if path != "-" else contextlib.nullcontext(sys.stdin)) as f:
            rows = [(n, r) for n, r in enumerate(csv.reader(f), 1) if r and (len(r) > 1 or r[0].strip())]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise SpecError(f"cannot read: {getattr(e, 'strerror', None) or e}", source=name) from None
    rows = [(n, r) for n, r in rows if not (r[0][:1] in "# \t" and r[0].lstrip().startswith("#"))]
    order = list(COLUMNS)
    if rows and rows[0][1][0].strip().lower() == "arch":
        header = [c.strip().lower() for c in rows[0][1]]
        unknown = [c for c in header if c not in COLUMNS]
        missing = [c for c in COLUMNS[:5] if c not in header]
        if unknown or missing:
            what = f"unknown column {unknown[0]!r}" if unknown else f"missing column {missing[0]!r}"
            raise SpecError(f"{what}; columns: {', '.join(COLUMNS)}", source=f"{name}:{rows[0][0]}")
        order, rows = header, rows[1:]
    if not rows:
        raise SpecError("no configurations (expected lines arch,threads,regs,static_smem,dynamic_smem)", source=name)
    lines = [n for n, _ in rows]
    width = len(order)
    for n, r in rows:
        if not 5 <= len(r) <= width:
            expect = "5 to 7" if width == len(COLUMNS) and order == list(COLUMNS) else f"5 to {width}"
            raise SpecError(f"expected {expect} columns ({','.join(order)}), got {len(r)}", source=f"{name}:{n}")
    table = [r if len(r) == width else r + [""] * (width - len(r)) for _, r in rows]
    by_name = dict(zip(order, (list(c) for c in zip(*table, strict=True)), strict=True))
    cols = {c: by_name.get(c) or [""] * len(lines) for c in COLUMNS}
    return lines, cols


def _column(texts: list[str], key: str, name: str, lines: list[int], parse) -> np.ndarray:
    out = np.empty(len(texts), dtype=np.int64)
    for i, t in enumerate(texts):
        try:
            out[i] = parse(t, key)
        except SpecError as e:
            raise SpecError(str(e), source=f"{name}:{lines[i]}") from None
    return out


def _ints(texts: list[str], key: str, name: str, lines: list[int], parse=None) -> np.ndarray:
    try:  # fast path: plain integers, the common case for 100,000-line files
        return np.array(texts, dtype=np.int64)
    except (ValueError, OverflowError):
        return _column(texts, key, name, lines, parse or parse_int)


def _carveout_cell(text: str, key: str) -> int:
    c = _carveout(text, key)
    return -1 if c is None else c


def _sizes(texts: list[str], key: str, name: str, lines: list[int]) -> np.ndarray:
    try:
        return np.array(texts, dtype=np.int64)  # negatives are caught by invalid_rows with their line
    except (ValueError, OverflowError):
        return _column(texts, key, name, lines, _size)


_FLAGS = {"": 1, "1": 1, "true": 1, "yes": 1, "0": 0, "false": 0, "no": 0}


def _flags(texts: list[str], name: str, lines: list[int]) -> np.ndarray:
    vals = [_FLAGS.get(t.strip().lower()) for t in texts]
    if None in vals:
        i = vals.index(None)
        raise SpecError(f"expected 1 or 0, got {texts[i]!r}", source=f"{name}:{lines[i]}", key="opt_in")
    return np.array(vals, dtype=bool)
