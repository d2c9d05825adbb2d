"""Rich rendering of occupancy results and of the architecture table. No calculation happens here."""

from __future__ import annotations

import json

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from smemtile.model.arch import FIELD_SOURCES, Arch
from smemtile.model.occupancy import LIMIT_BITS, LIMITERS, UNLIMITED, BatchOccupancy, OccupancyResult
from smemtile.report.text import Fit

_LABEL = {
    "warps": "warps",
    "registers": "registers",
    "shared_memory": "shared memory",
    "blocks": "blocks",
    "barriers": "barriers",
}

_SHORT = {
    "warps": "warps",
    "registers": "regs",
    "shared_memory": "smem",
    "blocks": "blocks",
    "barriers": "barriers",
}


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n // 1024} KiB" if n and n % 1024 == 0 else f"{n:,} B"


def _blocks(n: int | None) -> str:
    return "no limit" if n is None else str(n)


def render_occupancy(r: OccupancyResult, arch: Arch) -> Group:
    """The answer first, then every limit with the allocation behind it, then what-if hints."""
    a = r.allocation
    carve = "default carveout" if r.carveout is None else f"carveout {r.carveout} %"
    head = Text()
    head.append(f"{r.arch}", style="bold")
    head.append(
        f" · {r.threads} threads · {r.regs} registers/thread · {_bytes(r.smem_static)} static + "
        f"{_bytes(r.smem_dynamic)} dynamic shared memory · {'opt-in' if r.opt_in else '48 KB default limit'} · "
        f"{carve}\n"
    )
    style = "bold red" if r.active_blocks == 0 else "bold green"
    head.append(f"{r.active_blocks} blocks/SM", style=style)
    head.append(f" · {r.active_warps} of {r.max_warps_per_sm} warps · occupancy ")
    head.append(f"{r.occupancy:.1%}", style=style)
    head.append(" · limited by " + ", ".join(_LABEL[x] for x in r.limiters))
    if r.reason:
        head.append(f"\ncannot run: {r.reason}", style="red")

    t = Table(
        title="Blocks per SM each resource allows (* binds)",
        title_justify="left",
        box=box.SIMPLE,
        show_edge=False,
        pad_edge=False,
    )
    t.add_column("limit", no_wrap=True)
    t.add_column("blocks/SM", justify="right", no_wrap=True)
    t.add_column("one block uses")
    t.add_column("the SM has")
    wpb = a["warps_per_block"]
    rows = {
        "warps": (f"{wpb} warps", f"{r.max_warps_per_sm} warps"),
        "registers": (
            f"{a['regs_per_block']:,} ({a['regs_per_warp']:,}/warp)",
            f"{arch.regs_per_sm:,} ({arch.sub_partitions} x {arch.regs_per_sm // arch.sub_partitions:,})",
        ),
        "shared_memory": (
            f"{a['smem_per_block']:,} B"
            + (f" (incl. {a['smem_reserved_per_block']:,} rsvd)" if a["smem_reserved_per_block"] else ""),
            f"{a['smem_per_sm']:,} B carveout",
        ),
        "blocks": ("1", f"{arch.max_blocks_per_sm}"),
        "barriers": ("1", f"{arch.barrier_factor * arch.max_blocks_per_sm}"),
    }
    for name in ("warps", "registers", "shared_memory", "blocks", "barriers"):
        if name == "barriers" and name not in r.limiters:
            continue  # never lower than the block limit with one barrier per block; noise unless the driver flags it
        binding = name in r.limiters
        t.add_row(
            _LABEL[name] + (" *" if binding else ""),
            _blocks(r.limits[name]),
            *rows[name],
            style="bold" if binding else None,
        )
    return Group(head, Text(""), Fit(t), Text(""), _what_if(r))


def _what_if(r: OccupancyResult) -> Text:
    w = r.what_if
    out = Text("What if\n", style="bold")
    if r.active_blocks:
        b = r.active_blocks
        out.append(
            f"  · up to {w['max_regs_per_thread']} registers per thread keep {b} blocks/SM (now {r.regs})\n"
        )
        if w["max_dynamic_smem"] is not None:
            out.append(
                f"  · up to {_bytes(w['max_dynamic_smem'])} of dynamic shared memory keep {b} blocks/SM "
                f"(now {_bytes(r.smem_dynamic)})\n"
            )
    nxt = w["next_block"]
    verb = "to run at all" if r.active_blocks == 0 else f"for {nxt['blocks']} blocks/SM"
    if not nxt["possible"]:
        why = [
            f"{_LABEL[k]} allow at most {v['max_blocks_per_sm']}"
            for k, v in nxt["needs"].items()
            if k in ("blocks", "barriers")
        ]
        out.append(
            f"  · {verb}: not possible on this architecture" + (f" ({'; '.join(why)})" if why else "") + "\n"
        )
        return out
    needs = []
    for k, v in nxt["needs"].items():
        if k == "registers":
            needs.append(f"at most {v['max_regs_per_thread']} registers per thread (now {v['now']})")
        elif k == "shared_memory":
            if v["max_dynamic_smem"] is None:
                needs.append("less static shared memory (dynamic alone cannot make room)")
                continue
            total = f", {_bytes(v['max_smem_per_block'])} per block with the static" if r.smem_static else ""
            needs.append(
                f"at most {_bytes(v['max_dynamic_smem'])} of dynamic shared memory{total} "
                f"(now {_bytes(r.smem_dynamic)})"
            )
        elif k == "warps":
            needs.append(f"at most {v['max_threads']} threads per block (now {v['now']})")
    out.append(f"  · {verb}: " + " and ".join(needs) + "\n")
    return out


_BATCH_HEAD = (
    "#",
    "arch",
    "threads",
    "regs",
    "static",
    "dynamic",
    "carve",
    "opt",
    "blk",
    "warps",
    "occ",
    "limiter",
)


def _batch_format(index_width: int) -> str:
    """One aligned line per configuration; under 80 columns for up to 99 rows (plain text: fast for 10^6)."""
    return f"{{:>{max(1, index_width)}}} {{:<6}} {{:>7}} {{:>4}} {{:>6}} {{:>7}} {{:>5}} {{:>3}} {{:>3}} {{:>5}} {{:>4}}  {{}}\n"


def batch_header(index_width: int) -> str:
    return _batch_format(index_width).format(*_BATCH_HEAD)


def _columns(res: BatchOccupancy, bits: list[int]) -> list:
    """The per-row values both batch renderings print, as Python lists (one column each)."""
    return [
        res.arch,
        res.threads.tolist(),
        res.regs.tolist(),
        res.smem_static.tolist(),
        res.smem_dynamic.tolist(),
        res.carveout.tolist(),
        res.opt_in.tolist(),
        res.active_blocks.tolist(),
        res.active_warps.tolist(),
        res.occupancy.tolist(),
        bits,
    ]


def batch_lines(res: BatchOccupancy, start: int = 1, index_width: int = 1) -> str:
    """The lines of ``res``, numbered from ``start`` (a chunk of a streamed batch)."""
    fmt = _batch_format(index_width)
    bits = res.limiting_factors.tolist()
    names = {b: next((n for n in LIMITERS if b & LIMIT_BITS[n]), "blocks") for b in set(bits)}
    rows = zip(*_columns(res, bits), strict=True)
    out = []
    for i, (a, th, rg, s, d, c, o, b, w, occ, lim) in enumerate(rows, start):
        limiter = ("cannot run: " if b == 0 else "") + _SHORT[names[lim]]
        out.append(
            fmt.format(
                i,
                a,
                th,
                rg,
                s,
                d,
                "-" if c < 0 else f"{c}%",
                "yes" if o else "no",
                b,
                w,
                f"{occ:.0%}",
                limiter,
            )
        )
    return "".join(out)


_ROW_JSON = (
    '{{"arch": {}, "threads": {}, "regs": {}, "static_smem": {}, "dynamic_smem": {}, "carveout": {}, '
    '"opt_in": {}, "active_blocks": {}, "active_warps": {}, "occupancy": {!r}, "limiter": {}, "limiters": {}, '
    '"limits": {{' + ", ".join(f'"{k}": {{}}' for k in LIMITERS) + "}}{}}}"
)


def batch_json(res: BatchOccupancy) -> str:
    """The rows of ``res`` as JSON objects joined by ``,\\n``: the documents of ``res.to_dicts()`` (a test
    holds them equal), formatted directly because building and encoding a million dicts takes half a minute."""
    bits = res.limiting_factors.tolist()
    per_bits = {}
    for b in set(bits):
        names = [n for n in LIMITERS if b & LIMIT_BITS[n]] or ["blocks"]
        reason = f', "reason": "cannot run: {names[0].replace("_", " ")} limit is 0 blocks"'
        per_bits[b] = (json.dumps(names[0]), json.dumps(names), reason)
    arch = {a: json.dumps(a) for a in set(res.arch)}
    limits = [["null" if v == UNLIMITED else str(v) for v in res.limits[k].tolist()] for k in LIMITERS]
    rows = zip(*_columns(res, bits), *limits, strict=True)
    fmt = _ROW_JSON.format
    out = []
    for a, th, rg, s, d, c, o, b, w, occ, lb, *lim in rows:
        limiter, limiters, reason = per_bits[lb]
        out.append(
            fmt(
                arch[a],
                th,
                rg,
                s,
                d,
                "null" if c < 0 else c,
                "true" if o else "false",
                b,
                w,
                occ,
                limiter,
                limiters,
                *lim,
                "" if b else reason,
            )
        )
    return ",\n".join(out)


def render_batch(res: BatchOccupancy) -> str:
    """One aligned line per input configuration, in input order, under a header line."""
    width = len(str(len(res)))
    return batch_header(width) + batch_lines(res, 1, width)


def render_archs(archs: list[Arch]) -> Group:
    """The architecture table, then where each column comes from."""
    t = Table(
        title="Architectures (per SM unless noted)",
        title_justify="left",
        show_edge=False,
        box=box.SIMPLE,
        pad_edge=False,
        padding=(0, 1),
        collapse_padding=True,
    )
    heads = (
        "arch",
        "CC",
        "threads",
        "blocks",
        "smem\nKB",
        "opt-in\nKB",
        "rsvd\nB",
        "unit\nB",
        "carveouts KB",
    )
    for col in heads:
        wrap = col == "carveouts KB"
        t.add_column(col, justify="left" if col in ("arch", "carveouts KB") else "right", no_wrap=not wrap)
    for a in archs:
        t.add_row(
            a.name,
            f"{a.cc[0]}.{a.cc[1]}",
            str(a.max_threads_per_sm),
            str(a.max_blocks_per_sm),
            str(a.smem_per_sm // 1024),
            str(a.smem_optin_per_block // 1024),
            str(a.smem_reserved_per_block),
            str(a.smem_alloc_unit),
            " ".join(map(str, a.carveouts_kb)),
        )
    src = Text("\nSources\n", style="bold")
    for field, s in FIELD_SOURCES.items():
        src.append(f"  {field}: ", style="bold")
        src.append(f"{s}\n")
    for a in archs:
        notes: dict[str, list[str]] = {}
        for field, s in a.sources:
            notes.setdefault(s, []).append(field)
        for s, fields in notes.items():
            src.append(f"  {a.name} ", style="bold")
            src.append(f"{', '.join(fields)}: {s}\n")
    common = (
        "All: 65,536 registers per SM and per block, allocated per warp in units of 256 over 4 sub-partitions,"
        " 255 per thread; 1024 threads per block; 48 KB of shared memory per block unless the kernel opts in; "
        "32 banks x 4 bytes."
    )
    return Group(Fit(t), src, Text(common))
