"""Configuration -> compiled, analysed kernel: the one path generate, verify, tune and the benchmarks share.

``build(cfg)`` renders the source, compiles exactly its body with NVRTC for ``cfg.arch`` (when NVRTC is
importable), lets the family relax parameters the user left at their default when ptxas spills, checks ptxas'
static shared memory against the family's formula, computes occupancy from the real register count, and
evaluates the review checklist on the artefact (its PTX).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from smemtile.codegen.checklist import evaluate
from smemtile.codegen.render import GeneratedKernel, body, render
from smemtile.errors import CompileError, NoDevice
from smemtile.families import FAMILIES, KernelConfig
from smemtile.families.base import Item
from smemtile.model.occupancy import occupancy


@dataclass(frozen=True)
class Built:
    kernel: GeneratedKernel
    checklist: list[Item]
    compiled: object | None  # smemtile.gpu.nvrtc.CompileResult
    compile_note: str  # why it was not compiled, or ""


def compile_config(cfg: KernelConfig, *, source: str | None = None):
    """NVRTC-compile the generated body of ``cfg`` (``source`` replaces it: A/B experiments)."""
    from smemtile.gpu.nvrtc import compile_cubin

    fam = FAMILIES[cfg.family]
    return compile_cubin(
        source if source is not None else body(cfg),
        [fam.name_expression(cfg)],
        cfg.arch.name,
        filename=f"{fam.name}.cu",
    )


def relax(cfg: KernelConfig, compiled):
    """While ptxas spills, take the family's next fallback (only parameters the user left at their default)."""
    fam = FAMILIES[cfg.family]
    for _ in range(4):
        res = compiled.resources.get(fam.name_expression(cfg))
        if res is None or not res.spills:
            break
        step = fam.relax(cfg, res.spills)
        if step is None:
            break
        nxt, why = step
        note = f"{fam.name_expression(cfg)} spilled {res.spills} bytes ({res.registers} registers); {why}"
        cfg = replace(nxt, notes=(*cfg.notes, note))
        compiled = compile_config(cfg)
    return cfg, compiled


def build(
    cfg: KernelConfig, *, baseline: KernelConfig | None = None, compile: bool = True, origin: str = ""
) -> Built:
    fam = FAMILIES[cfg.family]
    extra: dict = {}
    compiled, note = None, ""
    if compile:
        try:
            compiled = compile_config(cfg)
        except NoDevice as e:
            note = f"not compiled: {e}"
        except CompileError as e:
            if "invalid value for --gpu-architecture" in str(e):
                note = f"not compiled: this NVRTC cannot target {cfg.arch.name}"
            else:
                raise
    else:
        note = "not compiled (--no-compile)"
    if compiled is not None:
        cfg, compiled = relax(cfg, compiled)
        plan = fam.launch(cfg)
        res = compiled.resources.get(fam.name_expression(cfg))
        if res is not None and res.registers is not None:
            extra["ptxas"] = res.to_dict()
            if res.static_smem_bytes != plan.static_smem_bytes:
                raise CompileError(
                    f"ptxas reports {res.static_smem_bytes} bytes of static shared memory but the "
                    f"{fam.name} family's formula says {plan.static_smem_bytes}: the kernel and its "
                    "formula disagree"
                )
            occ = occupancy(
                cfg.arch, plan.threads, res.registers, res.static_smem_bytes, plan.dynamic_smem_bytes
            )
            extra["occupancy"] = occ.to_dict()
        extra["nvrtc_version"] = compiled.nvrtc_version
    if note:
        extra["compile_note"] = note
    gk = render(cfg, baseline=baseline, extra=extra, origin=origin)
    ptx = getattr(compiled, "ptx", None) or None
    return Built(gk, evaluate(gk, ptx=ptx), compiled, note)
