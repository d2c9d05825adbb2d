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
def command(
    spec: Path, as_json: bool, compile_only: bool, device: int, seed: int, variants: tuple[str, ...]
) -> None:
    """Compile SPEC's kernel (baseline layout and the recommended fix), run it, check it, time it.

    On a GPU each variant is compiled for the device's own architecture, loaded, and its registers, static
    shared memory and local memory are read from the driver; the driver's occupancy is compared with the
    model's. It then runs once on random inputs with a poisoned output, compares with the family's float64
    numpy reference, and times it with CUDA events (median after a warm-up). The headline is the speed-up
    of the fixed layout over the baseline.

    \b
    Exit codes: 0 correct; 1 a variant computed a wrong result; 2 bad spec; 3 no CUDA GPU.

    \b
    Examples:
      smemtile verify samples/transpose_32x32.yaml
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
    else:
        doc = _on_gpu(spec, cfgs, device, seed)
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
