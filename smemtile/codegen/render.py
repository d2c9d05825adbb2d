"""Render a configuration into a standalone ``.cu``: analysis header, kernel template, instantiation, launcher.

The kernel text is the family's file from ``smemtile/kernels`` with ``smem_layout.cuh`` inlined, so the output
compiles on its own with nvcc (``nvcc -arch=sm_90 -c out.cu``) and with NVRTC (host part guarded by
``__CUDACC_RTC__``). The launch helper calls ``cudaFuncSetAttribute(MaxDynamicSharedMemorySize)`` whenever the
dynamic shared memory exceeds 48 KiB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from smemtile.codegen import FAMILIES
from smemtile.codegen.analysis import AccessBanks, bank_table
from smemtile.codegen.contract import KernelConfig, Launch

HEADER_FILE = "smem_layout.cuh"
_INCLUDE = re.compile(r'^#include "smem_layout\.cuh"\s*$', re.M)


def kernel_text(filename: str) -> str:
    return resources.files("smemtile.kernels").joinpath(filename).read_text()


def kernel_source(family: str) -> tuple[str, dict[str, str]]:
    """The family's .cu text and the headers it includes (for NVRTC)."""
    fam = FAMILIES[family]
    return kernel_text(fam.file), {HEADER_FILE: kernel_text(HEADER_FILE)}


def inline_headers(text: str) -> str:
    body = kernel_text(HEADER_FILE).replace("#pragma once\n", "")
    return _INCLUDE.sub(
        lambda _: f"// ---- {HEADER_FILE} (inlined) ----\n{body.strip()}\n// ---- end {HEADER_FILE} ----",
        text,
    )


# Host-side arguments of the launch helper, per family: (C++ parameter list, kernel call arguments).
_HOST = {
    "sgemm": (
        "int M, int N, int K, float alpha, const float* A, const float* B, float beta, float* C",
        "M, N, K, alpha, A, K, B, N, beta, C, N",
        "M, N",
    ),
    "transpose": ("const {T}* in, {T}* out, int rows, int cols", "in, out, rows, cols", "rows, cols"),
    "stencil2d": (
        "const float* in, float* out, int ny, int nx, const float* coeffs",
        "in, out, ny, nx, coeffs",
        "ny, nx",
    ),
}


@dataclass(frozen=True)
class GeneratedKernel:
    config: KernelConfig
    name_expression: str
    launch: Launch
    smem_bytes: int
    source: str  # the standalone .cu
    snippet: str  # host launch code
    banks: list[AccessBanks]
    banks_baseline: list[AccessBanks] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # compile + occupancy, when known

    def to_dict(self, file: str | None = None) -> dict:
        fam = FAMILIES[self.config.family]
        return {
            "kernel": fam.kernel,
            "family": fam.name,
            "file": file,
            "name_expression": self.name_expression,
            "grid": list(self.launch.grid),
            "block": list(self.launch.block),
            "dynamic_smem_bytes": self.launch.dynamic_smem_bytes,
            "static_smem_bytes": self.launch.static_smem_bytes,
            "smem_bytes": self.smem_bytes,
            "needs_func_set_attribute": self.launch.dynamic_smem_bytes > 48 * 1024,
            "params": {**self.config.params, **self.config.problem},
            "layouts": {k: v.to_dict() for k, v in self.config.layouts.items()},
            "arch": self.config.arch.name,
            "notes": list(self.config.notes),
            "banks": [b.to_dict() for b in self.banks],
            # the kernel's own shared-memory accesses in the spec's expression language (paste into a spec)
            "kernel_accesses": [
                {"name": a.name, "buffer": a.buffer, "op": a.op, "width": a.width, **a.expr}
                for a in fam.accesses(self.config)
            ],
            "banks_baseline": None
            if self.banks_baseline is None
            else [b.to_dict() for b in self.banks_baseline],
            **self.extra,
        }


def _launch_helper(cfg: KernelConfig, expr: str, launch: Launch) -> str:
    fam = FAMILIES[cfg.family]
    params, call, _ = _HOST[fam.name]
    t = fam.template_args(cfg)[0] if fam.name == "transpose" else ""
    params = params.format(T=t)
    grid = _grid_expr(cfg)
    lines = [
        f"// Launch {expr}: grid {tuple(launch.grid)}, block {tuple(launch.block)} for the spec's problem size.",
        f"inline cudaError_t launch_{fam.name}({params}, cudaStream_t stream = 0) {{",
        f"    auto kernel = {expr};",
        f"    const dim3 grid({grid}), block({', '.join(map(str, launch.block))});",
        f"    const size_t smem = {launch.dynamic_smem_bytes};  // dynamic shared memory, bytes",
    ]
    if launch.dynamic_smem_bytes > 48 * 1024:
        lines += [
            "    // more than 48 KiB of dynamic shared memory: the kernel must opt in first",
            "    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);",
            "    if (err != cudaSuccess) return err;",
        ]
    lines += [f"    kernel<<<grid, block, smem, stream>>>({call});", "    return cudaGetLastError();", "}"]
    return "\n".join(lines)


def _grid_expr(cfg: KernelConfig) -> str:
    p = cfg.params
    if cfg.family == "sgemm":
        return f"((M + {p['BM']} - 1) / {p['BM']}) * ((N + {p['BN']} - 1) / {p['BN']})"
    if cfg.family == "transpose":
        return f"(cols + {p['TILE']} - 1) / {p['TILE']}, (rows + {p['TILE']} - 1) / {p['TILE']}"
    return f"(nx + {p['BX']} - 1) / {p['BX']}, (ny + {p['BY']} - 1) / {p['BY']}"


def _instantiation(cfg: KernelConfig, expr: str) -> str:
    fam = FAMILIES[cfg.family]
    t = fam.template_args(cfg)[0] if fam.name == "transpose" else ""
    types = [decl.rsplit(" ", 1)[0] for decl in fam.signature]  # "const float* A" -> "const float*"
    sig = ", ".join(types).replace("T*", f"{t}*") if t else ", ".join(types)
    return f"template __global__ void {expr}({sig});"


def _header(
    cfg: KernelConfig, expr: str, gk_banks, base_banks, launch: Launch, smem: int, extra: dict, origin: str
) -> str:
    from smemtile import __version__

    fam = FAMILIES[cfg.family]
    out = [
        f"// Generated by smemtile {__version__}{' from ' + origin if origin else ''}: family {fam.name}, {cfg.arch.name}.",
        f"// Instantiation (NVRTC name expression): {expr}",
        "// Parameters: " + ", ".join(f"{k}={v}" for k, v in {**cfg.params, **cfg.problem}.items()),
        "// Shared-memory layouts:",
    ]
    for b in fam.buffers(cfg):
        out.append(
            f"//   {b.name} [{b.rows} x {b.cols}] {b.dtype}: {cfg.layouts[b.name].describe()}  ({b.doc})"
        )
    for note in cfg.notes:
        out.append(f"// Note: {note}")
    out.append("// Bank conflicts (worst instruction; wavefronts / ideal):")
    base = {b.name: b for b in (base_banks or [])}
    for b in gk_banks:
        before = base.get(b.name)
        was = f"{before.degree:g}x ({before.wavefronts}/{before.ideal}) -> " if before else ""
        loop = "inner loop" if b.inner_loop else "tile copy"
        out.append(
            f"//   {b.name:<15} {b.op:<8} {b.width:>2} B  {loop:<10}  {was}{b.degree:g}x ({b.wavefronts}/{b.ideal})"
        )
    stages = fam.stages(cfg.params)
    out.append(
        f"// Shared memory per block: {smem} bytes ({stages} stage{'s' if stages > 1 else ''}, padding included; "
        f"{'static' if launch.dynamic_smem_bytes == 0 else 'dynamic'}); {cfg.arch.name} opt-in limit "
        f"{cfg.arch.smem_optin_per_block}."
    )
    if "ptxas" in extra and extra["ptxas"]:
        r = extra["ptxas"]
        out.append(
            f"// ptxas ({cfg.arch.name}): {r['registers']} registers, {r['spills']} bytes spilled, "
            f"{r['static_smem_bytes']} bytes static shared memory."
        )
    if "occupancy" in extra and extra["occupancy"]:
        o = extra["occupancy"]
        out.append(
            f"// Occupancy: {o['active_blocks']} block{'s' if o['active_blocks'] != 1 else ''}/SM, {o['active_warps']} warps ({o['occupancy']:.0%}), "
            f"limited by {o['limiter']}."
        )
    out.append(
        f"// Launch: grid {tuple(launch.grid)}, block {tuple(launch.block)}, dynamic shared memory "
        f"{launch.dynamic_smem_bytes} bytes."
    )
    return "\n".join(out)


def render(
    cfg: KernelConfig, *, baseline: KernelConfig | None = None, extra: dict | None = None, origin: str = ""
) -> GeneratedKernel:
    """The standalone source and launch description of ``cfg`` (``baseline``: the unfixed variant to compare)."""
    fam = FAMILIES[cfg.family]
    expr = fam.name_expression(cfg)
    launch = fam.launch(cfg)
    smem = fam.smem_bytes(cfg)
    banks = bank_table(fam, cfg)
    base_banks = bank_table(fam, baseline) if baseline is not None else None
    extra = dict(extra or {})
    helper = _launch_helper(cfg, expr, launch)
    body = inline_headers(kernel_text(fam.file))
    source = "\n".join(
        [
            _header(cfg, expr, banks, base_banks, launch, smem, extra, origin),
            "",
            body.rstrip(),
            "",
            "// ---- instantiation ----",
            _instantiation(cfg, expr),
            "",
            "#if !defined(__CUDACC_RTC__)  // host launch helper: nvcc only",
            helper,
            "#endif",
            "",
        ]
    )
    return GeneratedKernel(cfg, expr, launch, smem, source, helper, banks, base_banks, extra)
