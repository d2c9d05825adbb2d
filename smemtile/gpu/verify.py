"""The verify pipeline: compile-only (NVRTC), on a GPU (run, check, time), and under Nsight Compute.

Returns plain documents (dicts) that ``smemtile.report.verify`` renders; CUDA is imported lazily inside.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from smemtile.report.verify import document as _document
from smemtile.report.verify import layout_text as _layout_text


def warn(msg: str) -> None:
    print(msg, file=sys.stderr)


# ---- variants -----------------------------------------------------------------------------------------------


def stage_variants(sp, stages: tuple[int, ...], source: str) -> dict:
    """``fixed-s{N}``: the fixed layout with N shared-memory stages (checked like any configuration)."""
    from smemtile.codegen import FAMILIES, configure, from_spec
    from smemtile.errors import SpecError

    if not stages:
        return {}
    fixed = from_spec(sp, "fixed")
    names = [p.name for p in FAMILIES[fixed.family].params]
    if "STAGES" not in names:
        raise SpecError(f"--stages: kernel family {fixed.family} has no STAGES parameter (its parameters: "
                        f"{', '.join(names)})", source=source)  # fmt: skip
    out = {}
    for n in dict.fromkeys(stages):
        try:
            out[f"fixed-s{n}"] = configure(fixed.family, {**fixed.params, "STAGES": n, **fixed.problem},
                                           fixed.layouts, fixed.arch, check=True)  # fmt: skip
        except SpecError as e:
            raise SpecError(f"--stages {n}: {e}", source=source) from None
    return out


# ---- compile only -------------------------------------------------------------------------------------------


def compile_only(spec: Path, cfgs: dict) -> dict:
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


def on_gpu(spec: Path, cfgs: dict, device: int, seed: int) -> dict:
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
    peak = dev.peak()
    rows = []
    for variant, cfg in dcfgs.items():
        k = LoadedKernel(cfg, dev)
        try:
            chk = k.check(dict(inputs), reference)
            timing = k.time(target_s=0.5)  # median of >= 20 runs; keeps one verify of a sample under 10 s
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
                "peak_fraction": (value / peak[unit]) if peak.get(unit) else None,
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


def with_ncu(spec: Path, cfgs: dict, doc: dict, device: int, save: Path | None) -> dict:
    """Each variant once under ncu at a small problem; measured vs model per SASS instruction."""
    from smemtile.codegen import configure
    from smemtile.gpu import ncu as N
    from smemtile.model.arch import get_arch

    exe = N.find_ncu()
    if exe is None:
        warn("smemtile: ncu (Nsight Compute) not found on PATH: --ncu skipped")
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
            warn(f"smemtile: ncu failed for the {variant} variant: {e}")
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


