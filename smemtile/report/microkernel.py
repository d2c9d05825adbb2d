"""Rich rendering of the microkernel documents: ``verify`` of a spec without a kernel, and ``measure``.

Tables stay readable at 80 columns: numbers never wrap or get cut (no ``…``); names fold onto a second line.
"""

from __future__ import annotations

from typing import Any


def _n(x: Any, digits: int = 2) -> str:
    """A count or ratio: integers without decimals, others with up to ``digits`` decimals."""
    if x is None:
        return "-"
    x = float(x)
    if abs(x - round(x)) < 1e-9:
        return str(int(round(x)))
    return f"{x:.{digits}f}".rstrip("0").rstrip(".")


def _mark(m: bool | None) -> str:
    return "-" if m is None else ("[green]yes[/]" if m else "[red]NO[/]")


def _table(title: str | None = None):
    from rich import box
    from rich.table import Table

    return Table(
        box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False, collapse_padding=True
    )


def _num_col(t, name: str, width: int) -> None:
    t.add_column(name, justify="right", no_wrap=True, min_width=width, overflow="fold")


def _text_col(t, name: str) -> None:
    t.add_column(name, justify="left", overflow="fold")


def render(doc: dict, console=None) -> None:
    """Print a ``verify_spec`` document (microkernels of a spec without a ``kernel:`` section)."""
    from rich.console import Console

    con = console or Console(highlight=False)
    m = doc["method"]
    dev = doc.get("device")
    where = (
        f"{dev['name']} ({dev['arch']}, device {dev['index']})"
        if dev
        else f"{doc['arch']} (compile only, no GPU used)"
    )
    con.print(
        f"[bold]smemtile verify[/] {doc['spec']}: no kernel: section, so each access runs as a synthesized "
        f"microkernel on {where}"
    )
    blocks = f" x {m['blocks']} blocks" if m.get("blocks") else ""
    con.print(
        f"{m['threads']} threads{blocks}; every warp issues its instructions of the access "
        f"{m['instructions_per_warp']}+ times (inline PTX, {m['in_flight']} in flight); "
        f"cp.async copies use .{m['cp_async_cache']}"
    )
    con.print(doc["sass_check"]["note"])
    for v in doc["variants"]:
        con.print(f"  {v['variant']}: {v['layout_text']}")
    t = _table()
    _text_col(t, "access")
    _text_col(t, "layout")
    _num_col(t, "model wf", 5)
    if doc["compile_only"]:
        _num_col(t, "worst", 5)
        _num_col(t, "regs", 4)
        _text_col(t, "kernel")
    else:
        _num_col(t, "ncu wf", 5)
        t.add_column("agree", justify="center", no_wrap=True, min_width=5)
        _num_col(t, "cyc/inst", 8)
        _num_col(t, "speed-up", 8)
    last = None
    for r in sorted(doc["accesses"], key=lambda r: [a["access"] for a in doc["accesses"]].index(r["access"])):
        name = f"{r['access']}\n{r['instruction']}" if r["access"] != last else ""
        if r["access"] != last and last is not None:
            t.add_section()
        last = r["access"]
        cells = [name, r["variant"], _n(r["model_wavefronts"])]
        if doc["compile_only"]:
            cells += [_n(r["model_worst"]), _n(r["registers"]), "\n".join(r["kernels"])]
        else:
            sp = r.get("speedup")
            cells += [
                _n(r.get("ncu_wavefronts")),
                _mark(r.get("agree")),
                _n(r.get("cycles_per_instruction"), 1),
                f"{sp:.2f}x" if sp else "",
            ]
        t.add_row(*cells)
    con.print(t)
    con.print(
        "model wf: the bank model's wavefronts per instruction (mean over the access's instructions)"
        + (
            "; ncu wf: measured by Nsight Compute (--clock-control none); cyc/inst: clock64() per warp "
            "instruction, median over warps and blocks; speed-up: baseline cycles / fixed cycles"
            if not doc["compile_only"]
            else ""
        )
    )
    if doc["compile_only"]:
        for r in doc["accesses"]:
            if r["variant"] != doc["variants"][0]["variant"]:
                continue
            con.print(f"  {r['access']} PTX: " + "; ".join(r.get("ptx") or [r["ptx_instruction"]]))
        con.print(
            "compile only: run without --compile-only on a GPU to time each access and, with --ncu, count "
            "its wavefronts."
        )
        return
    n = doc.get("ncu")
    if n is None:
        con.print("ncu: not requested (--ncu measures the wavefronts per instruction)")
    elif n.get("error"):
        con.print(f"[yellow]ncu: {n['error']}[/]")
    elif n.get("agree") is not None:
        bad = [f"{r['variant']} {r['access']}" for r in doc["accesses"] if r.get("agree") is False]
        con.print(
            f"ncu ({n.get('version') or 'Nsight Compute'}): the model and the measurement "
            + ("[green]agree on every access[/]" if n["agree"] else f"[red]DISAGREE on {', '.join(bad)}[/]")
        )
    if n and n.get("retried_after"):
        con.print(f"[yellow]ncu failed once and was run again: {n['retried_after'][0]}[/]")
    for r in doc["accesses"]:
        if r.get("ncu_note"):
            con.print(f"  {r['variant']} {r['access']}: {r['ncu_note']}")
    if doc.get("fixed_no_worse") is False:
        worse = [a for a, x in (doc.get("speedup") or {}).items() if x < 0.97]
        con.print(f"[yellow]the fixed layout measured slower on {', '.join(worse)}[/]")


def render_measure(doc: dict, console=None) -> None:
    """Print a ``smemtile measure`` document (predictions alone, or predictions and measurements)."""
    from rich.console import Console

    con = console or Console(highlight=False)
    measured = "device" in doc
    head = (
        f"on {doc['device']['name']} ({doc['arch']})"
        if measured
        else f"predictions only ({doc['arch']}), nothing measured"
    )
    con.print(f"[bold]smemtile measure[/] {doc['catalogue']}: {len(doc['patterns'])} patterns {head}")
    t = _table()
    _text_col(t, "pattern")
    _text_col(t, "instruction")
    _num_col(t, "model", 5)
    if measured:
        _num_col(t, "ncu", 5)
        t.add_column("agree", justify="center", no_wrap=True, min_width=5)
        _num_col(t, "cyc/inst", 8)
    for p in doc["patterns"]:
        cells = [p["name"], _instr(p), _n(p["model"]["wavefronts"])]
        if measured:
            m = p.get("measured") or {}
            cells += [
                _n(m.get("wavefronts_per_instruction")),
                _mark(p.get("agree")),
                _n(m.get("cycles_per_instruction"), 1),
            ]
        t.add_row(*cells)
    con.print(t)
    if measured:
        n = doc.get("ncu") or {}
        if n.get("error"):
            con.print(f"[yellow]ncu: {n['error']}: wavefronts not measured[/]")
        con.print(
            f"agreed: {doc['agreed']} of {doc['compared']} compared patterns; {doc['sass_check']['note']}"
        )


def _instr(p: dict) -> str:
    if p["op"] in ("ldmatrix", "stmatrix"):
        return f"{p['op']}.x{p['matrices']}{'.trans' if p.get('trans') else ''}"
    if p["op"] == "cp.async":
        return f"cp.async.{p.get('cache', 'ca')} {p['width']} B"
    return f"{p['op']} {p['width']} B"
