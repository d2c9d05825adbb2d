"""The TMA section of ``analyze``: each TMA tile's mode in four notations, the bank table under every mode, the
widest mode the rows allow and why (data from ``smemtile.model.tma``)."""

from __future__ import annotations

from rich.console import Console
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from smemtile.model.tma import ALIGN, TmaBuffer, tma_report
from smemtile.report.text import Fit, esc, plain


def tma_section(spec, results) -> list[TmaBuffer]:
    return tma_report(spec, results)


def tma_to_dict(spec, results) -> list[dict]:
    return [t.to_dict() for t in tma_report(spec, results)]


def notation_table(t: TmaBuffer) -> Fit:
    """The buffer's mode as CuTe, TMA, the wgmma descriptor and Triton write it."""
    n = t.notations
    w, tr = n.wgmma, n.triton
    tab = Table(
        title=f"{esc(t.name)}: {t.mode} in four notations ({t.dtype}, {t.row_bytes}-byte rows)",
        title_justify="left",
    )
    tab.add_column("ecosystem", no_wrap=True)
    tab.add_column("how it is written", overflow="fold")
    tab.add_row(
        "CuTe", f"{n.byte_swizzle} on the byte address = {n.element_swizzle} on {t.dtype} element offsets"
    )
    tab.add_row(
        "TMA tensor map",
        f"{n.tma[0]} (= {n.tma[1]}) in cuTensorMapEncodeTiled; tile base aligned to {ALIGN[t.mode]} bytes",
    )
    tab.add_row(
        "wgmma descriptor",
        f"layout type {w['layout_type']} ({w['layout_name']}, bits 62-63); K-major: "
        f"SBO {w['sbo_bytes']} B, LBO {w['lbo']}; base offset 0; +{w['k_step_bytes']} B start address per "
        "k-step",
    )
    if tr["swizzle_byte_width"]:
        tri = (
            f"NVMMASharedLayout(swizzle_byte_width={tr['swizzle_byte_width']}) = SwizzledSharedLayout(vec="
            f"{tr['vec']}, perPhase={tr['per_phase']}, maxPhase={tr['max_phase']}, order=[1, 0])"
        )
    else:
        tri = "NVMMASharedLayout(swizzle_byte_width=0): no swizzle (vec 1, perPhase 1, maxPhase 1)"
    tab.add_row("Triton", tri)
    return Fit(tab)


def mode_table(t: TmaBuffer) -> Fit:
    """Wavefronts (worst instruction / ideal) of the buffer's accesses under each mode."""
    tab = Table(title=f"{esc(t.name)}: the same accesses under each mode", title_justify="left")
    tab.add_column("mode", no_wrap=True)
    tab.add_column("TMA box", no_wrap=True)
    tab.add_column("wgmma atom", no_wrap=True)
    tab.add_column("align", justify="right", no_wrap=True)
    names = list(t.modes[0].per_access) if t.modes else []
    for name in names:
        tab.add_column(esc(name), justify="right", no_wrap=True)
    tab.add_column("total wavefronts", justify="right", no_wrap=True)
    for m in t.modes:
        label = m.mode + (" *" if m.mode == t.recommended else "") + (" (spec)" if m.mode == t.mode else "")
        cells = [
            label,
            "ok" if m.tma_legal else "too wide",
            "yes" if m.canonical else "no",
            f"{ALIGN[m.mode]} B",
        ]
        for name in names:
            w, i = m.per_access[name]
            cells.append(Text(f"{w}/{i}", style="green" if w == i else "red"))
        cells.append(f"{m.wavefronts} (ideal {m.ideal})")
        tab.add_row(*cells)
    return Fit(tab)


def render_tma(console: Console, spec, results, number: int) -> None:
    """The section, when the spec has TMA tiles (nothing otherwise)."""
    report = tma_report(spec, results)
    if not report:
        return
    console.print(Rule(f"{number}. TMA / wgmma layouts (Hopper)", align="left"))
    console.print(
        Text(
            "TMA writes whole boxes through the async proxy (no lane addresses); the rows below are the "
            "lane accesses of each tile under every mode, through the same bank model.",
            style="dim",
        )
    )
    for t in report:
        console.print(notation_table(t))
        console.print(mode_table(t))
        style = "green" if t.recommended == t.mode else "yellow"
        head = "keep" if t.recommended == t.mode else f"use {t.recommended} instead of {t.mode}:"
        console.print(plain(f"Recommended: {head} {t.recommended} — {t.reason}", style=style))
        console.print()
