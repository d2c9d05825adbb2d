"""Kernel generation: family contracts, configuration, rendering and the review checklist.

Pure Python (no CUDA import). The core entry point works from plain values so verify/tune/bench can call it::

    cfg = configure("sgemm", {"BM": 128, "BN": 128, "BK": 8, "M": 4096, "N": 4096, "K": 4096},
                    {"As": Layout(pad=4)}, "sm_90")
    kernel = render(cfg)          # smemtile.codegen.render

and :func:`from_spec` builds the same thing from a YAML spec's ``kernel:`` section.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from smemtile.codegen.contract import ContractViolation, Family, KernelConfig, TileLayout
from smemtile.codegen.sgemm import Sgemm
from smemtile.codegen.stencil2d import Stencil2d
from smemtile.codegen.transpose import Transpose
from smemtile.model.arch import Arch, get_arch

FAMILIES: dict[str, Family] = {f.name: f for f in (Sgemm(), Transpose(), Stencil2d())}

__all__ = [
    "FAMILIES",
    "ContractViolation",
    "KernelConfig",
    "TileLayout",
    "configure",
    "from_spec",
    "get_family",
]


def get_family(name: str) -> Family:
    try:
        return FAMILIES[str(name).lower()]
    except KeyError:
        raise ContractViolation(
            f"unknown kernel family {name!r}; known: {', '.join(FAMILIES)}", key="kernel.family"
        ) from None


def configure(
    family: str,
    params: dict[str, Any] | None = None,
    layouts: dict[str, Any] | None = None,
    arch: Arch | str = "sm_90",
    *,
    threads: int | None = None,
    check: bool = True,
) -> KernelConfig:
    """Build and validate a configuration from plain values.

    ``params`` mixes template parameters (BM, TILE, ...) and problem sizes (M, rows, ...); missing ones take the
    contract's defaults. ``layouts`` maps buffer name -> Layout (or dict / TileLayout); missing = dense.
    ``threads``, when given (a spec's ``threads:``), must equal what the tile implies.
    Raises :class:`ContractViolation` (exit 2) with one line naming the first broken constraint.
    """
    fam = get_family(family)
    arch = arch if isinstance(arch, Arch) else get_arch(arch)
    params = dict(params or {})
    tparams, problem = fam.defaults(), dict(fam.problem_keys)
    if fam.name == "sgemm":
        if "CP_ASYNC" not in params:
            tparams["CP_ASYNC"] = int(arch.has_cp_async)
        if not tparams["CP_ASYNC"] and "STAGES" not in params:
            tparams["STAGES"] = 2
    for k, v in params.items():
        if k in tparams:
            tparams[k] = int(v)
        elif k in problem:
            problem[k] = v
        else:
            allowed = ", ".join([*tparams, *problem])
            raise ContractViolation(f"{fam.name} has no parameter {k!r}; allowed: {allowed}", key=k)
    if fam.name == "sgemm" and "MIN_BLOCKS" not in params:
        # 2 blocks/SM (<= 128 registers with 256 threads) fit a thread tile of up to 64 accumulators; larger
        # tiles (the default 16 x 8) need about 230 registers: 1 block/SM
        tparams["MIN_BLOCKS"] = 2 if tparams["TM"] * tparams["TN"] <= 64 else 1
    cfg_layouts = {k: TileLayout.of(v) for k, v in (layouts or {}).items()}
    probe = KernelConfig(fam.name, tparams, cfg_layouts, arch, problem)
    for b in fam.buffers(probe):
        cfg_layouts.setdefault(b.name, TileLayout())
    defaulted = tuple(k for k in tparams if k not in params)
    cfg = KernelConfig(fam.name, tparams, cfg_layouts, arch, problem, defaulted=defaulted)
    if check:
        problems = fam.violations(cfg)
        implied = fam.threads(tparams)
        if threads is not None and int(threads) != implied:
            problems.insert(0, _threads_message(fam, tparams, int(threads), implied))
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise ContractViolation(f"{fam.name}: {problems[0]}{more}")
    return cfg


def _threads_message(fam: Family, p: dict[str, int], threads: int, implied: int) -> str:
    if fam.name == "sgemm":
        return (
            f"the thread layout does not cover the tile: BM*BN = {p['BM'] * p['BN']} but "
            f"threads*TM*TN = {threads * p['TM'] * p['TN']} (with TM={p['TM']}, TN={p['TN']} it needs {implied} threads)"
        )
    return f"threads = {threads} but the tile needs {implied} ({fam.name}: {_thread_formula(fam.name)})"


def _thread_formula(name: str) -> str:
    return {"transpose": "TILE * BLOCK_ROWS", "stencil2d": "BX * BY"}.get(name, "")


def from_spec(
    spec: Any, variant: str = "fixed", *, check: bool = True, arch: Arch | str | None = None
) -> KernelConfig:
    """The configuration a spec's ``kernel:`` section describes, with its own layouts (``baseline``) or the
    layouts the fix search recommends (``fixed``). ``arch`` overrides the spec's architecture."""
    kernel = getattr(spec, "kernel", None)
    if kernel is None:
        raise ContractViolation(
            "the spec has no kernel: section (e.g. kernel: {family: sgemm, M: 4096, N: 4096, K: 4096})",
            key="kernel",
        )
    fam = get_family(kernel.family)
    params: dict[str, Any] = {}
    names = {p.name for p in fam.params}
    for k, v in (getattr(spec, "constants", None) or {}).items():
        if k in names:
            params[k] = v
    stages = getattr(spec, "stages", None)
    if stages is not None and "STAGES" in names:
        params["STAGES"] = stages
    params.update({k: v for k, v in dict(kernel.params or {}).items() if k != "family"})
    layouts = {
        b.name: b.layout for b in getattr(spec, "buffers", ()) if getattr(b, "layout", None) is not None
    }
    if variant not in ("baseline", "fixed"):
        raise ContractViolation(f"variant must be baseline or fixed, got {variant!r}", key="--variant")
    if fam.name == "transpose" and "dtype" not in params:
        tile = next((b for b in getattr(spec, "buffers", ()) if b.name == "tile"), None)
        if tile is not None:
            params["dtype"] = str(tile.dtype)
    threads = getattr(spec, "threads", None)
    target = arch if arch is not None else spec.arch
    notes: list[str] = []
    if arch is not None and fam.name == "sgemm" and "CP_ASYNC" not in params:
        target_arch = target if isinstance(target, Arch) else get_arch(target)
        if not target_arch.has_cp_async and params.get("STAGES", 2) != 2:
            notes.append(
                f"{target_arch.name} has no cp.async: register double-buffering with 2 stages "
                f"(the spec asks for {params['STAGES']})"
            )
            params["STAGES"] = 2
    if variant == "fixed":
        base = configure(fam.name, params, layouts, target, check=False)
        for name, lay in _recommended_layouts(spec).items():
            trial = configure(fam.name, params, {**layouts, name: lay}, target, check=False)
            verdict = _verify_fix(fam, base, trial, name)
            if verdict is None:
                layouts[name] = lay
            else:
                notes.append(verdict)
    cfg = configure(fam.name, params, layouts, target, threads=threads, check=check)
    return replace(cfg, notes=tuple(notes)) if notes else cfg


def _verify_fix(fam: Family, base: KernelConfig, trial: KernelConfig, buffer: str) -> str | None:
    """None when the recommended layout of ``buffer`` costs no more wavefronts on the kernel's own accesses
    (the family contract's access table, i.e. what the .cu really does); otherwise why it was not taken."""
    from smemtile.codegen.analysis import bank_table

    if buffer not in trial.layouts or trial.layouts[buffer] == base.layouts.get(buffer):
        return None

    def cost(cfg: KernelConfig) -> int:
        return sum(b.wavefronts * b.instructions for b in bank_table(fam, cfg) if b.buffer == buffer)

    before, after = cost(base), cost(trial)
    if after <= before:
        return None
    return (
        f"{buffer}: the recommended {trial.layouts[buffer].describe()} was not applied: on the accesses "
        f"{fam.file} really makes it costs {after} wavefronts instead of {before} (the spec's accesses differ "
        "from the kernel's)"
    )


def _recommended_layouts(spec: Any) -> dict[str, Any]:
    """Layouts from the fix search (smemtile.model.fix.recommend)."""
    from smemtile.model.fix import recommend

    return dict(recommend(spec).layouts)
