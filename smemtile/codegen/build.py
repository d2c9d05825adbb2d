"""Configuration -> compiled, analysed kernel: the one path generate, verify, tune and the benchmarks share.

``build(cfg)`` renders the source, compiles the family's template through NVRTC for ``cfg.arch`` (when NVRTC
is importable), checks ptxas' static shared memory against the contract's formula, computes occupancy from
the real register count, and evaluates the review checklist.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from smemtile.codegen import FAMILIES
from smemtile.codegen.checklist import Item, evaluate
from smemtile.codegen.contract import KernelConfig
from smemtile.codegen.render import GeneratedKernel, kernel_source, render
from smemtile.errors import CompileError, NoDevice


@dataclass(frozen=True)
class Built:
    kernel: GeneratedKernel
    checklist: list[Item]
    compiled: object | None  # smemtile.gpu.nvrtc.CompileResult
    compile_note: str  # why it was not compiled, or ""


def compile_config(cfg: KernelConfig, source: str | None = None):
    """NVRTC-compile the family's template for ``cfg`` (kernel file + header, one name expression).

    ``source`` replaces the family's .cu text (A/B experiments on a modified kernel)."""
    from smemtile.gpu.nvrtc import compile_cubin

    fam = FAMILIES[cfg.family]
    src, headers = kernel_source(cfg.family)
    src = source if source is not None else src
    return compile_cubin(src, [fam.name_expression(cfg)], cfg.arch.name, headers=headers, filename=fam.file)


def _relax_register_cap(cfg: KernelConfig, compiled):
    """sgemm: when the default register cap (``MIN_BLOCKS=2``: at most 128 registers with 256 threads) makes
    ptxas spill, step back along what the user did not set, and say so:

    1. ``A_VEC=1 -> 0``: the float4 A copy holds its tile in registers across the math; the 4-byte cp.async copy
       holds nothing (measured on the H200 at 4096^3: BK8 with 4 stages, A_VEC=0 and 2 blocks/SM gives 0.79x
       torch, the same with A_VEC=1 and 1 block/SM 0.77x);
    2. ``MIN_BLOCKS=2 -> 1``: spilling registers of an FFMA-bound kernel costs more than the second block per SM
       buys (the register-staged sm_75 path and XOR-swizzled A reads need 140-170 registers)."""
    fam = FAMILIES[cfg.family]
    if cfg.family != "sgemm":
        return cfg, compiled
    for key, frm, to, why in (
        ("A_VEC", 1, 0, "using A_VEC=0: 4-byte cp.async for A, no A tile held in registers"),
        ("MIN_BLOCKS", 2, 1, "using MIN_BLOCKS=1: 1 block per SM with every register it needs"),
    ):
        res = compiled.resources.get(fam.name_expression(cfg))
        if res is None or not res.spills:
            break
        if key not in cfg.defaulted or cfg.params.get(key, frm) != frm:
            continue
        if key == "A_VEC" and not cfg.params.get("CP_ASYNC", 1):
            continue  # without cp.async both A copies go through registers
        cap = 65536 // (cfg.params["MIN_BLOCKS"] * fam.threads(cfg.params))
        relaxed = replace(
            cfg,
            params={**cfg.params, key: to},
            notes=(
                *cfg.notes,
                f"{key}={frm} (<= {min(cap, 255)} registers) spilled {res.spills} bytes; {why}",
            ),
        )
        cfg, compiled = relaxed, compile_config(relaxed)
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
        cfg, compiled = _relax_register_cap(cfg, compiled)
    launch = fam.launch(cfg)
    if compiled is not None:
        res = compiled.resources.get(fam.name_expression(cfg))
        if res is not None and res.registers is not None:
            extra["ptxas"] = res.to_dict()
            if res.static_smem_bytes != launch.static_smem_bytes:
                raise CompileError(
                    f"ptxas reports {res.static_smem_bytes} bytes of static shared memory but the {fam.name} contract "
                    f"says {launch.static_smem_bytes}: the kernel and its formula disagree"
                )
            from smemtile.model.occupancy import occupancy

            occ = occupancy(
                cfg.arch,
                fam.threads(cfg.params),
                res.registers,
                res.static_smem_bytes,
                launch.dynamic_smem_bytes,
            )
            extra["occupancy"] = occ.to_dict()
        extra["nvrtc_version"] = compiled.nvrtc_version
    if note:
        extra["compile_note"] = note
    gk = render(cfg, baseline=baseline, extra=extra, origin=origin)
    return Built(gk, evaluate(gk), compiled, note)
