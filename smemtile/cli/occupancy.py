"""``smemtile occupancy``: how many blocks fit on an SM, what limits them, what one more would need."""

from __future__ import annotations

import csv
import io
import sys

import click
import numpy as np

from smemtile.cli.common import arch_option, console, emit_json, json_option, parse_int
from smemtile.errors import OutOfResources, SpecError
from smemtile.fileio import printable, read_blocks
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
    short_help="Blocks per SM and the limiter, as the driver computes.",
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
@click.option("--threads", metavar="N", type=click.IntRange(1, 1024), help="Threads per block (1..1024).")
@click.option(
    "--regs",
    metavar="N",
    type=click.IntRange(0, 255),
    help="Registers per thread (0..255), e.g. from `ptxas -v` or cuFuncGetAttribute(NUM_REGS).",
)
@click.option(
    "--smem-static",
    metavar="SIZE",
    default="0",
    show_default=True,
    help="Static shared memory per block (49152, 48K).",
)
@click.option(
    "--smem-dynamic",
    metavar="SIZE",
    default="0",
    show_default=True,
    help="Dynamic shared memory per block at launch.",
)
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
@click.option(
    "--batch", "batch", type=click.Path(dir_okay=False), help="CSV file of configurations ('-' = stdin)."
)
@click.option(
    "--cluster",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="CTAs per thread-block cluster (sm_90+): also report the clusters the whole GPU holds at once.",
)
@click.option(
    "--sms",
    type=click.IntRange(1),
    default=None,
    help="SMs of the GPU for --cluster (default: the arch's GPU row, 132 for sm_90).",
)
@json_option
def command(
    arch, threads, regs, smem_static, smem_dynamic, carveout, opt_in, batch, cluster, sms, as_json
) -> None:
    """How many blocks of a kernel fit on one SM, exactly as the CUDA driver computes it.

    Prints active blocks and warps per SM, occupancy, the binding limiter(s), the block limit of every
    resource (warps, registers, shared memory, blocks) and what-if hints: the most registers per thread and
    dynamic shared memory that keep the current block count, and what one more block would need.
    """
    from smemtile import api
    from smemtile.gpu.device import resolve_arch

    if batch is not None:
        if threads is not None or regs is not None:
            raise SpecError(
                "--batch takes every configuration from the CSV; drop --threads/--regs", key="--batch"
            )
        return _batch(batch, as_json)
    if threads is None or regs is None:
        raise SpecError("--threads and --regs are required (or --batch FILE.csv)", key="occupancy")
    a = resolve_arch(arch)
    threads, regs = parse_int(threads, "--threads"), parse_int(regs, "--regs")
    static, dynamic = _size(smem_static, "--smem-static"), _size(smem_dynamic, "--smem-dynamic")
    carve = _carveout(carveout)
    size = _cluster_size(a, cluster)
    n_sms = None if sms is None else parse_int(sms, "--sms", 1)
    result = api.occupancy(
        arch=a,
        threads=threads,
        regs=regs,
        smem_static=static,
        smem_dynamic=dynamic,
        carveout=carve,
        opt_in=opt_in,
        cluster=size,
        sms=n_sms,
    )
    r, clusters = result.report, result["clusters"]
    if as_json:
        emit_json(result.to_dict())
    else:
        from smemtile.report.occupancy import render_occupancy

        console().print(render_occupancy(r, result.arch))
        if clusters["cluster"] > 1:
            console().print(
                f"clusters of {clusters['cluster']}: {clusters['active_clusters']} active per GPU "
                f"({clusters['sms']} SMs; {clusters['source']})"
            )
    if r.active_blocks == 0:
        raise OutOfResources(f"0 blocks fit on an {r.arch} SM: {r.reason}")


def _cluster_size(a, cluster) -> int:
    """--cluster, checked with the option's name (the API checks it again under its own)."""
    from smemtile.model.arch import FEATURES

    size = parse_int(cluster, "--cluster", 1)
    if size > 16:
        raise SpecError(f"{size} CTAs per cluster; at most 16 (8 portable)", key="--cluster")
    cc = FEATURES["clusters"][0]  # the arch table's first architecture with clusters
    if size > 1 and tuple(a.cc) < cc:  # no silent answer for hardware without clusters
        raise SpecError(
            f"thread-block clusters need sm_{cc[0]}{cc[1]} or later; the target is "
            f"{a.name} (leave out --cluster, or give --arch sm_90)",
            key="--cluster",
        )
    return size


MAX_BATCH_ROWS = 1_000_000  # rows of one --batch (docs/spec.md, Budgets)
CHUNK_ROWS = 20_000  # rows parsed, checked and computed at a time: memory is bounded whatever the file's size


def _batch(path: str, as_json: bool) -> None:
    """Stream the CSV in chunks through the vectorised model, in bounded memory. Pass 1 parses and checks
    every row (a bad row anywhere is exit 2 with nothing on stdout) and keeps the checked numbers, spilled to
    a temporary file (8 bytes a cell) past the first chunk; pass 2 computes and prints them chunk by chunk."""
    name = "<stdin>" if path == "-" else printable(path)
    archs: dict[str, int] = {}  # arch text -> index into table
    table: list = []
    with _Spool() as spool:
        for chunk in _chunks(read_blocks(path, what="CSV file", key="--batch"), name):
            spool.add(_arrays(chunk, name, archs, table))
            if spool.rows > MAX_BATCH_ROWS:  # linear, ~10-15 s a million rows: the documented budget
                raise SpecError(
                    f"more than {MAX_BATCH_ROWS} configurations; --batch takes at most "
                    f"{MAX_BATCH_ROWS} (split the file)",
                    source=name,
                )
        if spool.rows == 0:
            raise SpecError(
                "no configurations (expected lines arch,threads,regs,static_smem,dynamic_smem)", source=name
            )
        _emit(_unpack(spool, table), spool.rows, as_json)


def _unpack(spool, table: list):
    for a in spool:
        yield [table[i] for i in a[0].tolist()], a[1], a[2], a[3], a[4], a[5], a[6].astype(bool)


class _Spool:
    """Checked chunks, each an int64 array [7, rows] (arch index, threads, regs, static, dynamic, carveout,
    opt_in): the first kept in memory, the rest (and it) written to a temporary file once there is a second."""

    def __init__(self):
        self.kept: list[np.ndarray] = []
        self.file = None
        self.count = 0
        self.rows = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.file is not None:
            self.file.close()

    def add(self, a: np.ndarray) -> None:
        self.rows += a.shape[1]
        self.count += 1
        if self.file is None and not self.kept:
            self.kept = [a]
            return
        if self.file is None:
            import tempfile

            try:
                self.file = tempfile.TemporaryFile()
            except OSError as e:
                raise SpecError(
                    f"cannot create a temporary file for the batch: {e.strerror}", key="--batch"
                ) from None
            np.save(self.file, self.kept.pop(), allow_pickle=False)
        np.save(self.file, a, allow_pickle=False)

    def __iter__(self):
        if self.file is None:
            yield from self.kept
            return
        self.file.seek(0)
        for _ in range(self.count):
            yield np.load(self.file, allow_pickle=False)


def _emit(arrays, n: int, as_json: bool) -> None:
    from smemtile.model.occupancy import occupancy_batch
    from smemtile.report.occupancy import batch_header, batch_json, batch_lines

    out = sys.stdout
    width = len(str(n))
    out.write("[\n" if as_json else batch_header(width))
    done = 0
    for a in arrays:
        res = occupancy_batch(*a)
        if as_json:
            out.write((",\n" if done else "") + batch_json(res))  # one row per line
        else:
            out.write(batch_lines(res, start=done + 1, index_width=width))
        done += len(res)
    if as_json:
        out.write("\n]\n")


def _chunks(blocks, name: str):
    """(file line numbers, columns of strings) per about ``CHUNK_ROWS`` rows; a header line (naming ``arch``)
    is optional."""
    order: list[str] | None = None
    rows: list[list[str]] = []
    lines: list[int] = []
    for nums, block_rows in _block_rows(blocks, name):
        if order is None and block_rows:
            order = _header(block_rows[0], nums[0], name)
            if block_rows[0][0].strip().lower() == "arch":
                nums, block_rows = nums[1:], block_rows[1:]  # the header line
        rows += block_rows
        lines += nums
        if len(rows) >= CHUNK_ROWS:
            yield _table(rows, lines, order, name)
            rows, lines = [], []
    if rows:
        yield _table(rows, lines, order, name)


def _block_rows(blocks, name: str):
    """(line numbers, cells) of the configuration lines of each block of whole lines. A block without quotes,
    comments, carriage returns or short lines is split directly (fast); any other goes through the csv module,
    which skips blank and ``#`` lines."""
    base = 0
    for block in blocks:
        n_lines = block.count("\n") + (not block.endswith("\n"))
        if not ('"' in block or "#" in block or "\r" in block):
            text = block[:-1] if block.endswith("\n") else block
            rows = [ln.split(",") for ln in text.split("\n")]
            if min(map(len, rows)) > 1:
                yield range(base + 1, base + 1 + len(rows)), rows
                base += n_lines
                continue
        reader = csv.reader(io.StringIO(block, newline=""))
        nums, rows = [], []
        try:
            for r in reader:
                if not r or r[0].lstrip()[:1] == "#" or (len(r) == 1 and not r[0].strip()):
                    continue
                rows.append(r)
                nums.append(base + reader.line_num)
        except csv.Error as e:
            raise SpecError(f"not valid CSV: {e}", source=f"{name}:{base + reader.line_num}") from None
        yield nums, rows
        base += n_lines


def _header(r: list[str], n: int, name: str) -> list[str]:
    if r[0].strip().lower() != "arch":
        return list(COLUMNS)
    header = [c.strip().lower() for c in r]
    unknown = [c for c in header if c not in COLUMNS]
    missing = [c for c in COLUMNS[:5] if c not in header]
    twice = next((c for i, c in enumerate(header) if c in header[:i]), None)
    if unknown or missing or twice:
        what = (
            f"unknown column {printable(unknown[0])!r}"
            if unknown
            else f"column {twice!r} named twice"
            if twice
            else f"missing column {missing[0]!r}"
        )
        raise SpecError(f"{what}; columns: {', '.join(COLUMNS)}", source=f"{name}:{n}")
    return header


def _table(rows: list[list[str]], lines: list[int], order: list[str], name: str):
    width = len(order)
    lengths = set(map(len, rows))
    if min(lengths) < 5 or max(lengths) > width:
        n, r = next((n, r) for n, r in zip(lines, rows, strict=True) if not 5 <= len(r) <= width)
        expect = "5 to 7" if order == list(COLUMNS) else f"5 to {width}"
        raise SpecError(f"expected {expect} columns ({','.join(order)}), got {len(r)}", source=f"{name}:{n}")
    table = (
        rows if lengths == {width} else [r if len(r) == width else r + [""] * (width - len(r)) for r in rows]
    )
    by_name = dict(zip(order, (list(c) for c in zip(*table, strict=True)), strict=True))
    return lines, {c: by_name.get(c) or [""] * len(lines) for c in COLUMNS}


def _arrays(chunk, name: str, archs: dict[str, int], table: list) -> np.ndarray:
    """The checked numbers of one chunk as int64 [7, rows] (the arch as an index into ``table``, which grows
    with ``archs``, arch text -> index); SpecError naming the line otherwise."""
    from smemtile.gpu.device import resolve_arch
    from smemtile.model.occupancy import invalid_rows

    lines, cols = chunk
    for i, text in enumerate(cols["arch"]):
        if text not in archs:
            try:
                a = resolve_arch(text.strip())
            except SpecError as e:
                raise SpecError(str(e), source=f"{name}:{lines[i]}") from None
            archs[text] = next((j for j, t in enumerate(table) if t is a), len(table))
            if archs[text] == len(table):
                table.append(a)
    index = np.fromiter(map(archs.__getitem__, cols["arch"]), dtype=np.int64, count=len(lines))
    threads = _ints(cols["threads"], "threads", name, lines)
    regs = _ints(cols["regs"], "regs", name, lines)
    static = _sizes(cols["static_smem"], "static_smem", name, lines)
    dynamic = _sizes(cols["dynamic_smem"], "dynamic_smem", name, lines)
    carve = _ints(
        [t if t.strip() else "-1" for t in cols["carveout"]], "carveout", name, lines, _carveout_cell
    )
    opt = _flags(cols["opt_in"], name, lines)
    bad = invalid_rows(threads, regs, static, dynamic, carve)
    if bad is not None:
        mask, key, msg = bad
        i = int(np.argmax(mask))
        value = printable(cols[key][i].strip())
        raise SpecError(f"{msg}, got {value}", source=f"{name}:{lines[i]}", key=key)
    return np.stack([index, threads, regs, static, dynamic, carve, opt.astype(np.int64)])


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
