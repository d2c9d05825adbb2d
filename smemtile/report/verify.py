"""The rich rendering of the `verify` document (built by smemtile.pipeline.verify)."""

from __future__ import annotations

# ---- the document and its rendering -------------------------------------------------------------------------


def _fmt(x, spec: str = "", none: str = "-") -> str:
    if x is None:
        return none
    return format(x, spec) if spec else str(x)


def render(doc: dict) -> None:
    from rich.table import Table

    from smemtile.report.text import Fit, esc, make_console

    con = make_console()
    where = (
        f"{esc(doc['device']['name'])} ({doc['device']['arch']}, device {doc['device']['index']})"
        if doc["device"]
        else f"{doc['arch']} (compile only, no GPU used)"
    )
    prob = esc(", ".join(f"{k}={v}" for k, v in doc["problem"].items()))
    con.print(f"[bold]smemtile verify[/] {esc(doc['spec'])}: {doc['family']} {prob} on {where}")
    unit = "tflops" if "tflops" in doc["variants"][0] else "gbps"
    t = Table(show_lines=False)
    for col in ("variant", "layout", "regs", "spills", "static smem", "occ. model", "occ. driver"):
        text = col in ("variant", "layout")  # text folds; numbers are never folded (Fit stacks instead)
        t.add_column(col, justify="left" if text else "right", overflow="fold", no_wrap=not text)
    if not doc["compile_only"]:
        for col in (
            "correct",
            "max rel err",
            "median ms",
            "TFLOP/s" if unit == "tflops" else "GB/s",
            "of peak",
        ):
            t.add_column(col, justify="right", no_wrap=True)
    for r in doc["variants"]:
        model = r["occupancy"]["model"] or {}
        drv = r["occupancy"]["driver"]
        occ_m = f"{model['active_blocks']} blk {model['occupancy']:.0%}" if model else "-"
        cells = [
            esc(r["variant"]),
            esc(r["layout_text"]),
            _fmt(r["registers"]),
            _fmt(r["spills"]) + (f" ({r['local_bytes']} B local)" if r.get("local_bytes") else ""),
            _fmt(r["static_smem_bytes"], "", "-") + " B",
            occ_m,
        ]
        if drv:
            mark = "" if r["occupancy"]["agree"] else " [red]!= model[/]"
            cells.append(f"{drv['active_blocks']} blk{mark}")
        else:
            cells.append("-")
        if not doc["compile_only"]:
            ok = "[green]yes[/]" if r["correct"] else "[red]NO[/]"
            frac = r.get("peak_fraction")
            cells += [
                ok,
                f"{r['max_rel_error']:.2e}",
                f"{r['time_ms']:.4f}",
                f"{r.get(unit, 0):.1f}",
                f"{frac:.0%}" if frac is not None else "-",
            ]
        t.add_row(*cells)
    con.print(Fit(t))
    for r in doc["variants"]:
        if r.get("compile_note"):
            con.print(f"  {esc(r['variant'])}: {esc(r['compile_note'])}")
        if r.get("static_smem_note"):
            con.print(f"  [yellow]{esc(r['variant'])}: {esc(r['static_smem_note'])}[/]")
        if r.get("occupancy") and r["occupancy"].get("driver") and not r["occupancy"]["agree"]:
            m = r["occupancy"]["model"]
            con.print(
                f"  [red]{r['variant']}: occupancy model says {m['active_blocks']} blocks/SM, "
                f"the driver {r['occupancy']['driver']['active_blocks']}[/]"
            )
        if r.get("mismatch_text"):
            con.print(f"  [red]{esc(r['variant'])}: {esc(r['mismatch_text'])}[/]")
        for lay in (
            r.get("user_layouts") or ()
        ):  # the user's layout and a sub-view, as the generated helper takes them
            if lay.get("refused"):
                state = f"refused before launch, as the helper refuses it: {esc(lay['refused'])}"
            elif lay.get("correct"):
                state = f"[green]correct[/] (max rel. error {lay['max_rel_error']:.2e})"
            else:
                bad = (lay.get("first_mismatch") or {}).get("text") or "wrong values"
                state = f"[red]WRONG[/]: {esc(bad)}"
            con.print(f"  {esc(r['variant'])}: {esc(lay['layout'])}: {state}")
        cl = r.get("clusters")
        if cl and cl["cluster"] != [1, 1, 1]:  # cluster launches: how many clusters the whole GPU holds
            con.print(
                f"  {esc(r['variant'])}: clusters of {cl['cluster'][0]}x{cl['cluster'][1]}x{cl['cluster'][2]}: "
                f"{cl['driver']} active clusters per GPU (cuOccupancyMaxActiveClusters), model {cl['model']}"
                + ("" if cl["agree"] else f" ({esc(cl['model_source'])})")
            )
    if doc.get("speedup"):
        b = next(r for r in doc["variants"] if r["variant"] == "baseline")
        f = next(r for r in doc["variants"] if r["variant"] == "fixed")
        flush = f["timing"].get("l2_flush_bytes", 0)
        con.print(
            f"[bold]fixed vs baseline: {doc['speedup']:.2f}x[/] ({b['time_ms']:.4f} ms -> {f['time_ms']:.4f} ms, "
            f"median of {f['timing']['runs']} runs"
            + (f", L2 flushed before each ({flush / 2**20:.0f} MiB written)" if flush else "")
            + ")"
        )
    for name, x in (doc.get("stages_vs_fixed") or {}).items():
        con.print(f"{name} vs fixed: {x:.2f}x (time of fixed / time of {name})")
    peak = (doc.get("device") or {}).get("peak") or {}
    timed = [r for r in doc["variants"] if r.get(unit) is not None]
    no_peak = unit == "tflops" and peak.get(unit) and all(r.get("peak_fraction") is None for r in timed)
    if not doc["compile_only"] and timed and no_peak:
        # the family names no peak the driver can give (tensor cores: mma.sync, wgmma): dividing by the FP32 FMA
        # peak would overstate it many times over, so there is no "of peak" and the comparison is cuBLAS's
        con.print(
            f"of peak: none for {esc(doc['family'])} (its tensor-core peak is not the FP32 FMA peak the driver's "
            "clocks give); vs cuBLAS: see bench/ (python -m bench.run FAMILY bench)"
        )
    elif not doc["compile_only"] and peak.get(unit):
        con.print(
            f"peak {peak[unit]:.1f} {'TFLOP/s' if unit == 'tflops' else 'GB/s'}: {peak[unit + '_basis']}"
        )
    elif doc["compile_only"]:
        con.print(
            "compile only: registers, spills and static shared memory are ptxas' numbers for "
            f"{doc['arch']}; run without --compile-only on a GPU to check and time."
        )
    if doc.get("ncu") and doc["ncu"].get("available"):
        _render_ncu(con, doc["ncu"])


def _n(x, digits: int = 3) -> str:
    """A count or ratio: integers without decimals, others with up to ``digits`` decimals."""
    if x is None:
        return "-"
    if abs(x - round(x)) < 1e-9:
        return str(int(round(x)))
    return f"{x:.{digits}f}".rstrip("0")


def _mark(m) -> str:
    return "n/a" if m is None else ("[green]yes[/]" if m else "[red]NO[/]")


def _render_ncu(con, n: dict) -> None:
    from rich.table import Table

    from smemtile.report.text import Fit, esc

    con.print(
        f"[bold]ncu[/] ({esc(n.get('version') or 'Nsight Compute')}, --clock-control none): shared-memory wavefronts "
        "and bank conflicts per warp instruction, measured vs the bank model"
    )
    for variant, r in n["variants"].items():
        if r.get("error"):
            con.print(f"  [red]{esc(variant)}: ncu failed: {esc(r['error'])}[/]")
            continue
        prob = esc(
            ", ".join(f"{k}={v}" for k, v in r["problem"].items() if k not in ("alpha", "beta", "dtype"))
        )
        reps = f" x {r['repeats_per_block']} K steps" if r["repeats_per_block"] > 1 else ""
        t = Table(
            title=f"{esc(variant)} ({esc(r['layout_text'])}): {prob}, {r['blocks']} blocks{reps}",
            title_justify="left",
        )
        for col in (
            "SASS",
            "access",
            "executed",
            "wf/inst ncu",
            "wf/inst model",
            "confl/inst ncu",
            "confl/inst model",
            "match",
        ):
            text = col in ("SASS", "access")
            t.add_column(col, justify="left" if text else "right", overflow="fold", no_wrap=not text)
        for label, row, count in _collapse(r["instructions"]):
            t.add_row(
                esc(label if count == 1 else f"{count} x {label}"),
                esc(row["access"] or "-"),
                _n(row["executed"]),
                _n(row["wavefronts_per_instruction"]),
                _n(row["model_wavefronts_per_instruction"])
                if row["model_wavefronts_per_instruction"] is not None
                else ("sum below" if row.get("model_values") else "-"),
                _n(row["conflicts_per_instruction"]),
                _n(row["model_conflicts_per_instruction"]),
                _mark(row["match"]) if row["access"] and row["match"] is not None else "-",
            )
        t.add_section()
        for g in r["groups"]:
            if not g["sass_instructions"] and not g["accesses"]:
                continue
            t.add_row(
                f"all {'/'.join(g['opcodes']) or g['op']} ({g['op']} {g['width']} B)",
                esc(", ".join(g["accesses"]) or "-"),
                f"{_n(g['executed']['measured'])} / {_n(g['executed']['model'])}",
                _n(g["wavefronts_per_instruction"]["measured"]),
                _n(g["wavefronts_per_instruction"]["model"]),
                _n(g["conflicts_per_instruction"]["measured"]),
                _n(g["conflicts_per_instruction"]["model"]),
                _mark(g["match"]),
            )
        t.add_section()
        for name, k in r["totals"].items():
            t.add_row(
                f"kernel {name} (hardware counters)",
                "",
                f"{_n(k['instructions']['measured'])} / {_n(k['instructions']['model'])}",
                _n(k["wavefronts_per_instruction"]["measured"]),
                _n(k["wavefronts_per_instruction"]["model"]),
                _n(k["conflicts_per_instruction"]["measured"]),
                _n(k["conflicts_per_instruction"]["model"]),
                _mark(k["match"]),
            )
        con.print(Fit(t, min_width=110))  # narrower: SASS offsets and opcodes would be folded mid-word
        for g in r["groups"]:
            if g.get("note") and (g["sass_instructions"] or g["accesses"]):
                con.print(f"  {esc(variant)}, {g['op']} {g['width']} B: {esc(g['note'])}")
        for name, k in r["totals"].items():
            if k.get("placeholders_left_out"):
                con.print(
                    f"  {esc(variant)}, kernel {esc(name)}: {_n(k['placeholders_left_out'])} issued instructions with no "
                    "thread predicated on (ptxas' `@!PT LDS RZ, [RZ]` next to LDGSTS) left out of the count"
                )
            if k.get("note"):
                con.print(f"  {esc(variant)}, kernel {esc(name)}: {esc(k['note'])}")
        if r.get("target") and r["target"].get("correct") is False:
            con.print(f"  [red]{esc(variant)}: the profiled launch computed a wrong result[/]")
        if r["match"]:
            con.print(
                f"  {esc(variant)}: ncu and the model [green]agree[/] on every comparable shared-memory instruction"
            )
        else:
            bad = sorted(
                {
                    i["opcode"] + (f" ({i['access']})" if i["access"] else "")
                    for i in r["instructions"]
                    if i["match"] is False
                }
            )
            bad += [f"kernel {k}" for k, t in r["totals"].items() if t["match"] is False]
            bad += [f"all {g['op']} {g['width']} B" for g in r["groups"] if g["match"] is False and not bad]
            con.print(f"  [red]{esc(variant)}: ncu and the model DISAGREE on {esc(', '.join(bad))}[/]")
    cmp = n.get("fixed_vs_baseline")
    if cmp:
        wb, wf = cmp["wavefronts_per_block"]["baseline"], cmp["wavefronts_per_block"]["fixed"]
        con.print(
            f"shared-memory wavefronts per block: baseline {_n(wb['measured'])} -> fixed {_n(wf['measured'])} "
            f"measured (model {_n(wb['model'])} -> {_n(wf['model'])})"
        )
        if cmp["fixed_costs_more"]:
            con.print(
                "  [yellow]the fixed layout costs this kernel more shared-memory wavefronts than the baseline: "
                "the spec's accesses do not describe the kernel's own (see the contract's accesses)[/]"
            )


def _collapse(rows: list[dict]):
    """Consecutive instructions with the same opcode, access and numbers as one line (address range)."""

    def key(r):
        return (
            r["opcode"],
            r["access"],
            r["executed"],
            r["wavefronts_per_instruction"],
            r["model_wavefronts_per_instruction"],
            r["conflicts_per_instruction"],
            r["match"],
        )

    i = 0
    while i < len(rows):
        j = i
        while j + 1 < len(rows) and key(rows[j + 1]) == key(rows[i]):
            j += 1
        first = rows[i].get("offset") or rows[i]["address"]
        last = rows[j].get("offset") or rows[j]["address"]
        where = first if i == j else f"{first}..{last}"
        label = f"{where} {rows[i]['opcode']}" if where else rows[i]["opcode"]
        yield label, rows[i], j - i + 1
        i = j + 1
