"""`smemtile verify SPEC`: compile the baseline and fixed kernels with NVRTC, run, check, time, compare."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from smemtile.cli.common import emit_json, json_option
from smemtile.errors import SpecError, VerificationFailed

VARIANTS = ("baseline", "fixed")


@click.command("verify")
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path))
@json_option
@click.option(
    "--compile-only",
    is_flag=True,
    help="No GPU: compile for the spec's arch and report ptxas numbers "
    "(registers, spills, static shared memory) and the model's occupancy with them.",
)
@click.option(
    "--device", "device", type=click.IntRange(0), default=0, show_default=True, help="CUDA device index."
)
@click.option("--seed", type=int, default=1234, show_default=True, help="Seed of the random inputs.")
@click.option(
    "--variant",
    "variants",
    type=click.Choice(VARIANTS),
    multiple=True,
    help="Only this variant (repeatable; default both).",
)
@click.option(
    "--ncu",
    "use_ncu",
    is_flag=True,
    help="Also run each variant once under Nsight Compute (--clock-control none, a small problem of whole "
    "tiles) and put the measured shared-memory wavefronts and bank conflicts per SASS instruction beside the "
    "model's. Without ncu on PATH it says so in one line and carries on.",
)
@click.option(
    "--ncu-save",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="With --ncu: keep each variant's ncu report and its source/raw CSV pages in this folder.",
)
def command(
    spec: Path,
    as_json: bool,
    compile_only: bool,
    device: int,
    seed: int,
    variants: tuple[str, ...],
    use_ncu: bool = False,
    ncu_save: Path | None = None,
) -> None:
    """Compile SPEC's kernel (baseline layout and the recommended fix), run it, check it, time it.

    On a GPU each variant is compiled for the device's own architecture, loaded, and its registers, static
    shared memory and local memory are read from the driver; the driver's occupancy is compared with the
    model's. It then runs once on random inputs with a poisoned output, compares with the family's float64
    numpy reference, and times it with CUDA events (median after a warm-up). The headline is the speed-up
    of the fixed layout over the baseline.

    With --ncu each variant is also profiled by Nsight Compute at a small problem size: every shared-memory
    SASS instruction (LDS, STS, LDSM, LDGSTS) is matched to the kernel contract's access of the same op and
    width, and its measured wavefronts per executed instruction are compared with the bank model; where
    several accesses share an op and width the sums over them are compared. Kernel-level load and store
    wavefronts per instruction (hardware counters) are compared too. The JSON gets an `ncu` key.

    \b
    Exit codes: 0 correct; 1 a variant computed a wrong result; 2 bad spec; 3 no CUDA GPU.
    (--ncu never changes the exit code; a model/measurement mismatch shows as `ncu.match: false`.)

    \b
    Examples:
      smemtile verify samples/transpose_32x32.yaml
      smemtile verify samples/transpose_32x32.yaml --ncu
      smemtile verify samples/sgemm_float4.yaml --compile-only --json
    """
    from smemtile.model.spec import load_spec

    sp = load_spec(spec)
    if getattr(sp, "kernel", None) is None:
        raise SpecError(
            "the spec has no kernel: section, so there is nothing to compile or run "
            "(add e.g. kernel: {family: transpose, rows: 8192, cols: 8192})",
            source=str(spec),
        )
    from smemtile.codegen import from_spec

    chosen = variants or VARIANTS
    cfgs = {v: from_spec(sp, v) for v in chosen}
    if compile_only:
        doc = _compile_only(spec, cfgs)
        if use_ncu:
            click.echo("smemtile: --ncu needs a GPU run; ignored with --compile-only", err=True)
    else:
        doc = _on_gpu(spec, cfgs, device, seed)
        if use_ncu:
            doc["ncu"] = _ncu(spec, cfgs, doc, device, ncu_save)
    if as_json:
        emit_json(doc)
    else:
        _render(doc)
    bad = [r for r in doc["variants"] if r.get("correct") is False]
    if bad:
        r = bad[0]
        raise VerificationFailed(
            f"{r['variant']} variant ({r['name_expression']}) is wrong: {r['mismatch_text']}"
        )


# ---- compile only -------------------------------------------------------------------------------------------


def _compile_only(spec: Path, cfgs: dict) -> dict:
    from smemtile.codegen import FAMILIES
    from smemtile.codegen.build import build

    rows = []
    for variant, cfg in cfgs.items():
        fam = FAMILIES[cfg.family]
        built = build(cfg)
        extra = built.kernel.extra if hasattr(built.kernel, "extra") else {}
        ptx = extra.get("ptxas") or {}
        launch = fam.launch(cfg)
        row = {
            "variant": variant,
            "name_expression": fam.name_expression(cfg),
            "layouts": {k: v.to_dict() for k, v in cfg.layouts.items()},
            "layout_text": _layout_text(cfg),
            "launch": launch.to_dict(),
            "threads": fam.threads(cfg.params),
            "registers": ptx.get("registers"),
            "spills": ptx.get("spills"),
            "spill_stores": ptx.get("spill_stores"),
            "spill_loads": ptx.get("spill_loads"),
            "stack_frame": ptx.get("stack_frame"),
            "static_smem_bytes": ptx.get("static_smem_bytes"),
            "source": "ptxas",
            "occupancy": {"model": extra.get("occupancy"), "driver": None},
            "correct": None,
            "max_rel_error": None,
            "time_ms": None,
            "compile_note": built.compile_note
            or (None if ptx else "ptxas reported no resources (cached result?)"),
            "checklist": [_item(i) for i in built.checklist],
        }
        rows.append(row)
    first = next(iter(cfgs.values()))
    return _document(spec, first, rows, compile_only=True, device=None)


def _item(i: Any) -> Any:
    return i.to_dict() if hasattr(i, "to_dict") else str(i)


# ---- on the GPU ---------------------------------------------------------------------------------------------


def _on_gpu(spec: Path, cfgs: dict, device: int, seed: int) -> dict:
    import numpy as np

    from smemtile.codegen import FAMILIES, configure
    from smemtile.gpu.run import LoadedKernel, open_device
    from smemtile.model.arch import get_arch

    dev = open_device(device)  # NoDevice -> exit 3, one line
    arch = get_arch(dev.arch_name)
    dcfgs = {
        v: configure(c.family, {**c.params, **c.problem}, c.layouts, arch, check=True)
        for v, c in cfgs.items()
    }
    first = next(iter(dcfgs.values()))
    fam = FAMILIES[first.family]
    rng = np.random.default_rng(seed)
    inputs = fam.make_inputs(first.problem, rng)
    if first.family == "stencil2d":
        inputs["coeffs"] = fam.coefficients(first.params["R"])
    reference = fam.reference(first.problem, inputs)
    rows = []
    for variant, cfg in dcfgs.items():
        k = LoadedKernel(cfg, dev)
        try:
            chk = k.check(dict(inputs), reference)
            timing = k.time()
            unit, value = fam.elapsed_metric(cfg.problem, timing.median_ms / 1e3)
            model = k.model_occupancy().to_dict()
            ptx = k.ptxas.to_dict() if k.ptxas is not None else {}
            drv_warps = k.driver_blocks * ((k.threads + 31) // 32)
            max_warps = model.get("max_warps_per_sm") or arch.max_threads_per_sm // 32
            driver = {
                "active_blocks": k.driver_blocks,
                "active_warps": drv_warps,
                "occupancy": drv_warps / max_warps if max_warps else None,
            }
            row = {
                "variant": variant,
                "name_expression": fam.name_expression(cfg),
                "layouts": {n: v.to_dict() for n, v in cfg.layouts.items()},
                "layout_text": _layout_text(cfg),
                "launch": k.shape.to_dict(),
                "threads": k.threads,
                "registers": k.registers,
                "static_smem_bytes": k.static_smem,
                "local_bytes": k.local_bytes,
                # NVRTC may return a cached result with an empty ptxas log (HARDWARE.md): then the driver's
                # local memory per thread is the best bound on spilled bytes.
                "spills": ptx.get("spills") if ptx.get("spills") is not None else k.local_bytes,
                "spills_source": "ptxas"
                if ptx.get("spills") is not None
                else "driver LOCAL_SIZE_BYTES (ptxas log empty)",
                "source": "driver (CU_FUNC_ATTRIBUTE_*)",
                "ptxas": ptx or None,
                "occupancy": {
                    "model": model,
                    "driver": driver,
                    "agree": model.get("active_blocks") == k.driver_blocks,
                },
                "correct": chk.correct,
                "max_rel_error": chk.max_rel_error,
                "tolerance": chk.tolerance,
                "first_mismatch": chk.mismatch.to_dict() if chk.mismatch else None,
                "mismatch_text": chk.mismatch.describe() if chk.mismatch else None,
                "time_ms": timing.median_ms,
                "timing": timing.to_dict(),
                unit: value,
            }
            if k.static_smem != k.shape.static_smem_bytes:
                row["static_smem_note"] = (
                    f"driver reports {k.static_smem} B static shared memory, the contract says {k.shape.static_smem_bytes}"
                )
        finally:
            k.close()
        rows.append(row)
    return _document(spec, first, rows, compile_only=False, device=dev.to_dict())


# ---- Nsight Compute -----------------------------------------------------------------------------------------


def _ncu(spec: Path, cfgs: dict, doc: dict, device: int, save: Path | None) -> dict:
    """Each variant once under ncu at a small problem; measured vs model per SASS instruction."""
    from smemtile.codegen import configure
    from smemtile.gpu import ncu as N
    from smemtile.model.arch import get_arch

    exe = N.find_ncu()
    if exe is None:
        click.echo("smemtile: ncu (Nsight Compute) not found on PATH: --ncu skipped", err=True)
        return {"available": False, "error": "ncu not found on PATH", "match": None}
    arch = get_arch(doc["device"]["arch"]) if doc.get("device") else next(iter(cfgs.values())).arch
    out: dict[str, Any] = {"available": True, "version": N.ncu_version(exe), "clock_control": "none",
                           "variants": {}}  # fmt: skip
    for variant, c in cfgs.items():
        full = configure(c.family, {**c.params, **c.problem}, c.layouts, arch)
        small = configure(c.family, {**c.params, **c.problem, **N.small_problem(full)}, c.layouts, arch)
        try:
            res = N.profile(spec, variant, small, device=device, ncu=exe, save_dir=save)
        except (N.NcuError, ValueError, OSError) as e:
            click.echo(f"smemtile: ncu failed for the {variant} variant: {e}", err=True)
            res = {"error": str(e), "match": None}
        res["layout_text"] = _layout_text(small)
        out["variants"][variant] = res
    results = [r.get("match") for r in out["variants"].values()]
    out["match"] = None if any(m is None for m in results) else all(results)
    b, f = out["variants"].get("baseline"), out["variants"].get("fixed")
    if b and f and "wavefronts_per_block" in b and "wavefronts_per_block" in f:
        wb, wf = b["wavefronts_per_block"], f["wavefronts_per_block"]
        out["fixed_vs_baseline"] = {
            "wavefronts_per_block": {"baseline": wb, "fixed": wf},
            "fixed_costs_more": wf["measured"] > wb["measured"],
        }
    return out


# ---- the document and its rendering -------------------------------------------------------------------------


def _layout_text(cfg) -> str:
    def short(lay) -> str:
        parts = [f"pad {lay.pad}"] if lay.pad else []
        if lay.swizzled:
            parts.append(f"Swizzle<{lay.swz_b},{lay.swz_m},{lay.swz_s}>")
        return " + ".join(parts) or "dense"

    return "; ".join(f"{n}: {short(lay)}" for n, lay in cfg.layouts.items())


def _document(spec: Path, cfg, rows: list[dict], *, compile_only: bool, device: dict | None) -> dict:
    by = {r["variant"]: r for r in rows}
    head = by.get("fixed") or rows[0]
    doc: dict[str, Any] = {
        "spec": str(spec),
        "family": cfg.family,
        "arch": cfg.arch.name,
        "problem": dict(cfg.problem),
        "compile_only": compile_only,
        "device": device,
    }
    # Top-level keys of the contract: the headline (fixed) variant's numbers.
    for key in (
        "registers",
        "static_smem_bytes",
        "spills",
        "occupancy",
        "correct",
        "max_rel_error",
        "time_ms",
    ):
        doc[key] = head.get(key)
    for unit in ("tflops", "gbps"):
        if unit in head:
            doc[unit] = head[unit]
    doc["correct"] = None if compile_only else all(r["correct"] for r in rows)
    doc["occupancy_agree"] = None if compile_only else all(r["occupancy"]["agree"] for r in rows)
    b, f = by.get("baseline"), by.get("fixed")
    doc["speedup"] = (
        (b["time_ms"] / f["time_ms"]) if b and f and b.get("time_ms") and f.get("time_ms") else None
    )
    doc["variants"] = rows
    return doc


def _fmt(x, spec: str = "", none: str = "-") -> str:
    if x is None:
        return none
    return format(x, spec) if spec else str(x)


def _render(doc: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(highlight=False)
    where = (
        f"{doc['device']['name']} ({doc['device']['arch']}, device {doc['device']['index']})"
        if doc["device"]
        else f"{doc['arch']} (compile only, no GPU used)"
    )
    prob = ", ".join(f"{k}={v}" for k, v in doc["problem"].items())
    con.print(f"[bold]smemtile verify[/] {doc['spec']}: {doc['family']} {prob} on {where}")
    unit = "tflops" if "tflops" in doc["variants"][0] else "gbps"
    t = Table(show_lines=False)
    for col in ("variant", "layout", "regs", "spills", "static smem", "occ. model", "occ. driver"):
        t.add_column(col, justify="left" if col in ("variant", "layout") else "right")
    if not doc["compile_only"]:
        for col in ("correct", "max rel err", "median ms", "TFLOP/s" if unit == "tflops" else "GB/s"):
            t.add_column(col, justify="right")
    for r in doc["variants"]:
        model = r["occupancy"]["model"] or {}
        drv = r["occupancy"]["driver"]
        occ_m = f"{model['active_blocks']} blk {model['occupancy']:.0%}" if model else "-"
        cells = [
            r["variant"],
            r["layout_text"],
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
            cells += [ok, f"{r['max_rel_error']:.2e}", f"{r['time_ms']:.4f}", f"{r.get(unit, 0):.1f}"]
        t.add_row(*cells)
    con.print(t)
    for r in doc["variants"]:
        if r.get("compile_note"):
            con.print(f"  {r['variant']}: {r['compile_note']}")
        if r.get("static_smem_note"):
            con.print(f"  [yellow]{r['variant']}: {r['static_smem_note']}[/]")
        if r.get("occupancy") and r["occupancy"].get("driver") and not r["occupancy"]["agree"]:
            m = r["occupancy"]["model"]
            con.print(
                f"  [red]{r['variant']}: occupancy model says {m['active_blocks']} blocks/SM, "
                f"the driver {r['occupancy']['driver']['active_blocks']}[/]"
            )
        if r.get("mismatch_text"):
            con.print(f"  [red]{r['variant']}: {r['mismatch_text']}[/]")
    if doc.get("speedup"):
        b = next(r for r in doc["variants"] if r["variant"] == "baseline")
        f = next(r for r in doc["variants"] if r["variant"] == "fixed")
        con.print(
            f"[bold]fixed vs baseline: {doc['speedup']:.2f}x[/] ({b['time_ms']:.4f} ms -> {f['time_ms']:.4f} ms, "
            f"median of {f['timing']['runs']} runs)"
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

    con.print(
        f"[bold]ncu[/] ({n.get('version') or 'Nsight Compute'}, --clock-control none): shared-memory wavefronts "
        "and bank conflicts per warp instruction, measured vs the bank model"
    )
    for variant, r in n["variants"].items():
        if r.get("error"):
            con.print(f"  [red]{variant}: ncu failed: {r['error']}[/]")
            continue
        prob = ", ".join(f"{k}={v}" for k, v in r["problem"].items() if k not in ("alpha", "beta", "dtype"))
        reps = f" x {r['repeats_per_block']} K steps" if r["repeats_per_block"] > 1 else ""
        t = Table(
            title=f"{variant} ({r['layout_text']}): {prob}, {r['blocks']} blocks{reps}",
            title_justify="left",
        )
        for col in ("SASS", "access", "executed", "wf/inst ncu", "wf/inst model", "confl/inst ncu",
                    "confl/inst model", "match"):  # fmt: skip
            t.add_column(col, justify="left" if col in ("SASS", "access") else "right")
        for label, row, count in _collapse(r["instructions"]):
            t.add_row(
                label if count == 1 else f"{count} x {label}",
                row["access"] or "-",
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
                ", ".join(g["accesses"]) or "-",
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
        con.print(t)
        for g in r["groups"]:
            if g.get("note") and (g["sass_instructions"] or g["accesses"]):
                con.print(f"  {variant}, {g['op']} {g['width']} B: {g['note']}")
        for name, k in r["totals"].items():
            if k.get("placeholders_left_out"):
                con.print(
                    f"  {variant}, kernel {name}: {_n(k['placeholders_left_out'])} issued instructions with no "
                    "thread predicated on (ptxas' `@!PT LDS RZ, [RZ]` next to LDGSTS) left out of the count"
                )
            if k.get("note"):
                con.print(f"  {variant}, kernel {name}: {k['note']}")
        if r.get("target") and r["target"].get("correct") is False:
            con.print(f"  [red]{variant}: the profiled launch computed a wrong result[/]")
        if r["match"]:
            con.print(
                f"  {variant}: ncu and the model [green]agree[/] on every comparable shared-memory instruction"
            )
        else:
            bad = sorted({i["opcode"] + (f" ({i['access']})" if i["access"] else "")
                          for i in r["instructions"] if i["match"] is False})  # fmt: skip
            bad += [f"kernel {k}" for k, t in r["totals"].items() if t["match"] is False]
            bad += [f"all {g['op']} {g['width']} B" for g in r["groups"] if g["match"] is False and not bad]
            con.print(f"  [red]{variant}: ncu and the model DISAGREE on {', '.join(bad)}[/]")
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
        return (r["opcode"], r["access"], r["executed"], r["wavefronts_per_instruction"],
                r["model_wavefronts_per_instruction"], r["conflicts_per_instruction"], r["match"])  # fmt: skip

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
