"""The verify pipeline: compile only (NVRTC), on a GPU (run, check, time), and under Nsight Compute.

Returns plain documents (dicts) that ``smemtile.report.verify`` renders; CUDA is imported lazily inside
``smemtile.gpu``. Every variant is launched through the family's launch plan, as the generated helper does.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from smemtile.errors import SpecError
from smemtile.families import FAMILIES, KernelConfig, reconfigure


def warn(msg: str) -> None:
    print(msg, file=sys.stderr)


def layout_text(cfg: KernelConfig) -> str:
    return "; ".join(f"{n}: {lay.describe()}" for n, lay in cfg.layouts.items())


def document(
    spec: Path, cfg: KernelConfig, rows: list[dict], *, compile_only: bool, device: dict | None
) -> dict:
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
    # stage variants (--stages): speed relative to the fixed variant with the spec's own stage count
    doc["stages_vs_fixed"] = {
        r["variant"]: f["time_ms"] / r["time_ms"]
        for r in rows
        if r["variant"].startswith("fixed-s") and f and f.get("time_ms") and r.get("time_ms")
    } or None
    doc["variants"] = rows
    return doc


# ---- variants -----------------------------------------------------------------------------------------------


def stage_variants(fixed: KernelConfig, stages: tuple[int, ...], source: str) -> dict[str, KernelConfig]:
    """``fixed-s{N}``: the fixed layout with N shared-memory stages (checked like any configuration)."""
    if not stages:
        return {}
    names = [p.name for p in FAMILIES[fixed.family].params]
    if "STAGES" not in names:
        raise SpecError(
            f"--stages: kernel family {fixed.family} has no STAGES parameter (its parameters: "
            f"{', '.join(names)})",
            source=source,
        )
    out = {}
    for n in dict.fromkeys(stages):
        try:
            out[f"fixed-s{n}"] = reconfigure(fixed, params={"STAGES": n})
        except SpecError as e:
            raise SpecError(f"--stages {n}: {e}", source=source) from None
    return out


# ---- compile only -------------------------------------------------------------------------------------------


def compile_only(spec: Path, cfgs: dict[str, KernelConfig]) -> dict:
    from smemtile.pipeline.build import build

    rows = []
    for variant, cfg in cfgs.items():
        built = build(cfg)
        cfg = built.kernel.config  # after any fallback the family took
        fam = FAMILIES[cfg.family]
        ptx = built.kernel.extra.get("ptxas") or {}
        rows.append(
            {
                "variant": variant,
                "name_expression": fam.name_expression(cfg),
                "layouts": {k: v.to_dict() for k, v in cfg.layouts.items()},
                "layout_text": layout_text(cfg),
                "launch": built.kernel.launch.to_dict(),
                "threads": built.kernel.launch.threads,
                "registers": ptx.get("registers"),
                "spills": ptx.get("spills"),
                "spill_stores": ptx.get("spill_stores"),
                "spill_loads": ptx.get("spill_loads"),
                "stack_frame": ptx.get("stack_frame"),
                "static_smem_bytes": ptx.get("static_smem_bytes"),
                "source": "ptxas",
                "occupancy": {"model": built.kernel.extra.get("occupancy"), "driver": None},
                "correct": None,
                "max_rel_error": None,
                "time_ms": None,
                "notes": list(cfg.notes),
                "compile_note": built.compile_note
                or (None if ptx else "ptxas reported no resources (cached result?)"),
                "checklist": [i.to_dict() for i in built.checklist],
            }
        )
    return document(spec, next(iter(cfgs.values())), rows, compile_only=True, device=None)


# ---- on the GPU ---------------------------------------------------------------------------------------------


def device_target(spec_arch, device_arch):
    """What a variant is built for on the device: the spec's target when it is the device's compute capability
    (sm_90a code runs on a 9.0 device, which reports sm_90), else the device's own."""
    return spec_arch if spec_arch.cc == device_arch.cc else device_arch


def on_gpu(spec: Path, cfgs: dict[str, KernelConfig], device: int, seed: int) -> dict:
    import numpy as np

    from smemtile.gpu.run import LoadedKernel, open_device
    from smemtile.model.arch import get_arch

    dev = open_device(device)  # NoDevice -> exit 3, one line
    arch = get_arch(dev.arch_name)
    dcfgs = {v: reconfigure(c, arch=device_target(c.arch, arch)) for v, c in cfgs.items()}
    first = next(iter(dcfgs.values()))
    fam = FAMILIES[first.family]
    inputs = fam.make_inputs(first, np.random.default_rng(seed))
    reference = fam.reference(first, inputs)
    peak = dev.peak()
    rows = []
    for variant, cfg in dcfgs.items():
        k = LoadedKernel(cfg, dev)
        try:
            layouts = [_subview(k, fam, cfg, inputs, reference)]
            chk = k.check(
                dict(inputs), reference
            )  # the user's layout (the problem's leading dimensions): timed
            layouts.insert(0, {"layout": _layout_name(fam, cfg, {}), **chk.to_dict()})
            sub_ok = layouts[1].get("correct") is not False
            timing = k.time(target_s=0.5)  # median of >= 20 runs; keeps one verify of a sample under 10 s
            unit, amount = fam.work(cfg.problem)
            value = amount / (timing.median_ms / 1e3) / (1e12 if unit == "tflops" else 1e9)
            model = k.model_occupancy().to_dict()
            ptx = k.ptxas.to_dict() if k.ptxas is not None else {}
            drv_warps = k.driver_blocks * ((k.threads + 31) // 32)
            max_warps = model.get("max_warps_per_sm") or arch.max_threads_per_sm // 32
            row = {
                "variant": variant,
                "name_expression": fam.name_expression(cfg),
                "layouts": {n: v.to_dict() for n, v in cfg.layouts.items()},
                "layout_text": layout_text(cfg),
                "launch": k.shape.to_dict(),
                "threads": k.threads,
                "registers": k.registers,
                "static_smem_bytes": k.static_smem,
                "local_bytes": k.local_bytes,
                # NVRTC may return a cached result with an empty ptxas log: then the driver's local memory per
                # thread is the best bound on spilled bytes.
                "spills": ptx.get("spills") if ptx.get("spills") is not None else k.local_bytes,
                "spills_source": "ptxas"
                if ptx.get("spills") is not None
                else "driver LOCAL_SIZE_BYTES (ptxas log empty)",
                "source": "driver (CU_FUNC_ATTRIBUTE_*)",
                "ptxas": ptx or None,
                "clusters": _clusters(k, model, dev),
                "occupancy": {
                    "model": model,
                    "driver": {
                        "active_blocks": k.driver_blocks,
                        "active_warps": drv_warps,
                        "occupancy": drv_warps / max_warps if max_warps else None,
                    },
                    "agree": model.get("active_blocks") == k.driver_blocks,
                },
                "correct": chk.correct and sub_ok,
                "user_layouts": layouts,  # the arrays as users lay them out: dense, then a sub-view
                "max_rel_error": chk.max_rel_error,
                "tolerance": chk.tolerance,
                "first_mismatch": chk.mismatch.to_dict() if chk.mismatch else None,
                "mismatch_text": chk.mismatch.describe() if chk.mismatch else None,
                "time_ms": timing.median_ms,
                "timing": timing.to_dict(),
                unit: value,
                "peak_fraction": (value / peak[unit]) if fam.peak and peak.get(unit) else None,
                "notes": list(cfg.notes),
            }
            if k.static_smem != k.shape.static_smem_bytes:
                row["static_smem_note"] = (
                    f"driver reports {k.static_smem} B static shared memory, the family's "
                    f"formula says {k.shape.static_smem_bytes}"
                )
        finally:
            k.close()
        rows.append(row)
    return document(spec, first, rows, compile_only=False, device=dev.to_dict())


def _layout_name(fam, cfg: KernelConfig, offsets: dict) -> str:
    """'dense (lda=K=1023, ...)' or 'sub-view (lda=1026, ..., arrays 1 element into their allocations)'."""
    ints = fam.problem_ints(cfg.problem)
    lds = ", ".join(f"{k}={ints[k]}" for k in fam.dense_layout(cfg.problem))
    if not offsets:
        return f"dense ({lds})" if lds else "dense"
    return (
        f"sub-view ({lds}; every array {max(offsets.values())} element(s) past a 256-byte aligned allocation)"
    )


def _subview(k, fam, cfg: KernelConfig, inputs: dict, reference) -> dict:
    """The same problem as a block of bigger arrays at odd addresses (the second layout a user has): correct, or
    refused exactly as the generated helper refuses it (cudaErrorInvalidValue, with the rule)."""
    from smemtile.families.base import refusal, subview_case

    sub, offsets = subview_case(fam, cfg)
    row: dict = {"layout": _layout_name(fam, sub, offsets)}
    why = refusal(fam, sub, offsets)
    if why is not None:
        return {**row, "correct": None, "refused": why}
    return {**row, **k.check_layout(dict(inputs), reference, sub, offsets).to_dict()}


def _clusters(k, model: dict, dev) -> dict:
    """Clusters resident on the whole GPU: the driver's cuOccupancyMaxActiveClusters next to the model's."""
    from smemtile.model.occupancy import active_clusters

    size = k.shape.cluster_size
    m = active_clusters(int(model.get("active_blocks") or 0), size, dev.sm_count)
    return {
        "cluster": list(k.shape.cluster),
        "driver": k.driver_clusters,
        "model": m["active_clusters"],
        "model_source": m["source"],
        "agree": m["active_clusters"] == k.driver_clusters,
    }


# ---- Nsight Compute -----------------------------------------------------------------------------------------


def ncu_config(cfg: KernelConfig, arch) -> KernelConfig:
    """What ``--ncu`` profiles for ``cfg``: the family's small problem of whole tiles, with every parameter left at
    0 = auto pinned to what it resolves to for the user's problem (a RAGGED or ALIGN parameter), so the
    profiled kernel is the one the user's problem compiles, not the one the small problem would."""
    full = reconfigure(cfg, arch=arch)
    fam = FAMILIES[cfg.family]
    return reconfigure(full, params=fam.auto_values(full), problem=fam.small_problem(full))


def with_ncu(spec: Path, cfgs: dict[str, KernelConfig], doc: dict, device: int, save: Path | None) -> dict:
    """Each variant once under ncu at a small problem; measured vs model per SASS instruction."""
    from smemtile.gpu import ncu as N
    from smemtile.model.arch import get_arch

    exe = N.find_ncu()
    if exe is None:
        warn("smemtile: ncu (Nsight Compute) not found on PATH: --ncu skipped")
        return {"available": False, "error": "ncu not found on PATH", "match": None}
    arch = get_arch(doc["device"]["arch"]) if doc.get("device") else next(iter(cfgs.values())).arch
    out: dict[str, Any] = {
        "available": True,
        "version": N.ncu_version(exe),
        "clock_control": "none",
        "variants": {},
    }
    for variant, c in cfgs.items():
        small = ncu_config(c, device_target(c.arch, arch))  # as on_gpu builds it (sm_90a on an H200)
        try:
            res = N.profile(Path(spec).stem, variant, small, device=device, ncu=exe, save_dir=save)
        except (N.NcuError, ValueError, OSError) as e:
            warn(f"smemtile: ncu failed for the {variant} variant: {e}")
            res = {"error": str(e), "match": None}
        res["layout_text"] = layout_text(small)
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
