"""Render a configuration into a standalone ``.cu``: analysis header, kernel template, instantiation, launcher.

The body is the family's ``.cu`` with ``smem_layout.cuh`` inlined, the explicit instantiation and a host launch
helper (guarded by ``__CUDACC_RTC__``). The body is exactly what ``verify`` and ``tune`` compile with NVRTC, and
it compiles on its own with nvcc (``nvcc -arch=sm_90 -std=c++17 -Xcicc --sharedmem32=0 -c out.cu``: the
machine code verify measures).

The launch helper is rendered from the family's launch plan (:meth:`Family.calls`): the grid, block, guards and
integer arguments are the same expressions the Python launcher evaluates, written as C++ over the helper's
arguments (template parameters substituted), so the helper and ``--json`` cannot disagree. Steps before the
kernel (split K's C = beta*C) are launched by the helper too.

One translation unit may ``#include`` several generated files (two families, or two configurations of one
family): the inlined shared header and each family's kernel text are include-guarded, each instantiation is
guarded by its configuration, and the launch helper is ``launch_<name>()`` with ``name`` the family's unless
given (``smemtile generate --name NAME``); two configurations of one family need two names.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from typing import Any

from smemtile.codegen.analysis import AccessBanks, bank_table
from smemtile.errors import SpecError
from smemtile.families import FAMILIES, KernelConfig, LaunchConfig
from smemtile.families.base import GRID_LIMITS, KERNELS, WORKSPACE_ALIGN, Family, kernel_file
from smemtile.model.dtypes import TMA_DTYPES
from smemtile.model.expr import parse_expr

HEADER_FILE = "smem_layout.cuh"
_INCLUDE = re.compile(r'^#include "smem_layout\.cuh"\s*$', re.M)


def header_text() -> str:
    return kernel_file(HEADER_FILE).read_text()


def kernel_source(family: str) -> tuple[str, dict[str, str]]:
    """The family's .cu text and the headers it includes (for NVRTC)."""
    return FAMILIES[family].source(), {HEADER_FILE: header_text()}


def inline_headers(text: str) -> str:
    body = header_text().replace("#pragma once\n", "")
    return _INCLUDE.sub(
        lambda _: f"// ---- {HEADER_FILE} (inlined) ----\n{body.strip()}\n// ---- end {HEADER_FILE} ----",
        text,
    )


@dataclass(frozen=True)
class GeneratedKernel:
    config: KernelConfig
    name_expression: str
    launch: LaunchConfig
    smem_bytes: int
    header: str  # the analysis comment block
    body: str  # kernel + instantiation + host helper: what NVRTC compiles
    snippet: str  # the host launch helper
    banks: list[AccessBanks]
    banks_baseline: list[AccessBanks] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # compile + occupancy, when known
    name: str = ""  # the launch helper is launch_<name>() ("": the family's name)
    origin: str = ""  # the spec it came from (the header's first line)

    @property
    def helper(self) -> str:
        """The C++ name of the host launch helper."""
        return f"launch_{self.name or self.config.family}"

    def named(self, name: str | None) -> GeneratedKernel:
        """The same kernel with its launch helper called ``launch_<name>()`` (``generate --name``): the device
        code, what NVRTC compiles, is unchanged; only the host helper's names and the header's mentions."""
        name = helper_name(self.config, name)
        if name == (self.name or self.config.family):
            return self
        header = _header(
            self.config,
            self.banks,
            self.banks_baseline,
            self.launch,
            self.smem_bytes,
            self.extra,
            self.origin,
            name,
        )
        return replace(
            self,
            name=name,
            header=header,
            body=body(self.config, name=name),
            snippet=launch_helper(self.config, name=name),
        )

    @property
    def source(self) -> str:
        """The standalone .cu a user gets."""
        return f"{self.header}\n\n{self.body}"

    def to_dict(self, file: str | None = None) -> dict:
        fam = FAMILIES[self.config.family]
        return {
            "kernel": fam.kernel,
            "family": fam.name,
            "file": file,
            "name_expression": self.name_expression,
            "grid": list(self.launch.grid),
            "block": list(self.launch.block),
            "cluster": list(self.launch.cluster),
            "dynamic_smem_bytes": self.launch.dynamic_smem_bytes,
            "static_smem_bytes": self.launch.static_smem_bytes,
            "smem_bytes": self.smem_bytes,
            "launch": self.launch.to_dict(),
            "launch_helper": self.helper,
            "needs_func_set_attribute": self.launch.dynamic_smem_bytes > self.config.arch.static_smem_max,
            "params": {**self.config.params, **self.config.problem},
            "layouts": {k: v.to_dict() for k, v in self.config.layouts.items()},
            "arch": self.config.arch.name,
            "notes": list(self.config.notes),
            "banks": [b.to_dict() for b in self.banks],
            # the kernel's own shared-memory accesses in the spec language: this document parses as a spec
            "kernel_accesses": fam.accesses(self.config),
            "spec": fam.spec_doc(self.config),
            "banks_baseline": None
            if self.banks_baseline is None
            else [b.to_dict() for b in self.banks_baseline],
            **self.extra,
        }


def _c_type(fam: Family, cfg: KernelConfig, ctype: str) -> str:
    return ctype.format(**fam.ctypes(cfg))


ALIGN_FN = """#ifndef SMEMTILE_HOST_ALIGN_OF
#define SMEMTILE_HOST_ALIGN_OF
// The byte alignment of a pointer as the launch plans see it: the largest power of two <= 256 dividing it.
static inline long long smemtile_align_of(const void* p) {
    const unsigned long long a = (unsigned long long)p;
    return (a & 255ull) == 0 ? 256 : (long long)(a & (~a + 1ull));
}
#endif"""


def _names(texts, plain: set[str]) -> set[str]:
    """Every name the launch expressions ``texts`` use; a text in ``plain`` (an array, workspace or map argument,
    e.g. an array named ``in``, which is no expression) is a name as it stands."""
    return set().union(*({t} if t in plain else parse_expr(t).names for t in texts))


NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")  # a launch helper's name: launch_<NAME>, a C identifier


def helper_name(cfg: KernelConfig, name: str | None) -> str:
    """The NAME of ``launch_<NAME>()``: ``name`` when it is a C identifier (SpecError otherwise), else the
    family's name (the default: two configurations of one family in one translation unit need two names)."""
    if name is None or name == "":
        return cfg.family
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise SpecError(
            f"{name!r} is not a C identifier; allowed: a letter or _, then letters, digits or _ (at most 64), "
            "the helper becomes launch_<NAME>()",
            key="--name",
        )
    return name


def launch_helper(cfg: KernelConfig, *, name: str | None = None) -> str:
    """The C++ host helper ``launch_<name>(...)`` (``name`` defaults to the family's): every step of the family's
    launch plan, rendered from the expressions :meth:`Family.launch` evaluates; then the dense overload (no
    leading dimensions)."""
    fam = FAMILIES[cfg.family]
    helper = f"launch_{helper_name(cfg, name)}"
    host = {a.name for a in fam.host_args}
    # template parameters become literals; the helper's own arguments (M, rows, ...) stay run-time values
    consts = {k: v for k, v in fam.constants(cfg).items() if k not in host}
    params = ", ".join(f"{_c_type(fam, cfg, a.ctype)} {a.name}" for a in fam.host_args)
    expr = fam.name_expression(cfg)
    plan = fam.launch(cfg)
    ints = [a.name for a in fam.host_args if a.ctype == "int"]
    maps = fam.tensor_maps(cfg)
    map_names = {t.name for t in maps}
    works = fam.workspaces(cfg)
    calls = fam.calls(cfg)
    reqs = fam.requires(cfg)
    plain = host | map_names | {w.name for w in works}
    in_works = _names((x for w in works for x in (w.when, w.elems)), plain)
    used = in_works | _names(
        [e for e, _ in reqs]
        + [x for c in calls for x in (c.when, *c.grid, *c.block, *c.cluster, *c.args)]
        + [x for t in maps for x in (t.when, *t.stride_exprs, *t.dims, *t.box)],
        plain,
    )
    aligns = {arr: n for arr, n in fam.align_names().items() if n in used}
    work_aligns = sorted(n for n in aligns.values() if n in in_works)
    # nothing problem-specific here: the body (what NVRTC compiles and caches) is the same for every size
    lines = [ALIGN_FN, ""] if aligns else []
    lines += _workspace_size_lines(fam, works, consts, ints, work_aligns, helper) if works else []
    lds = [a for a in fam.host_args if a.array and a.ld]
    lines += [
        f"// Launch plan of {fam.name} (smemtile.families.{fam.name}): the same expressions `smemtile generate --json`,",
        "// `verify` and `tune` evaluate (the header above gives their values for the spec's problem).",
        "// Returns the first CUDA error (an invalid size gives cudaErrorInvalidValue before anything runs).",
    ]
    if lds:
        lines.append(
            "// Layout: "
            + "; ".join(
                f"{a.name} is {' x '.join(a.shape)} row-major, element (r, c) at {a.name}[r * {a.ld} + c]"
                for a in lds
            )
            + " (leading dimensions in elements, as cuBLAS takes them)."
        )
    for _e, rule in reqs:
        lines.append(f"// Requires {_clean(rule)}; otherwise cudaErrorInvalidValue.")
    for line in fam.layout_rules(cfg):
        lines.append(f"// {_clean(line)}")
    if works:
        lines += [
            f"// workspace: device memory of at least {helper}_workspace_bytes(...) bytes, 256-byte aligned,",
            "// not used by another launch at the same time; nullptr: the helper allocates it on the stream",
            "// (cudaMallocAsync) and frees it after the launches (cudaFreeAsync).",
        ]
        tail = ", cudaStream_t stream = 0, void* workspace = nullptr, size_t workspace_bytes = 0"
    else:
        tail = ", cudaStream_t stream = 0"
    lines.append(f"inline cudaError_t {helper}({params}{tail}) {{")
    if ints:
        lines.append(f"    if ({' || '.join(f'{n} < 1' for n in ints)}) return cudaErrorInvalidValue;")
    for arr, n in aligns.items():
        lines.append(f"    const long long {n} = smemtile_align_of({arr});")
    for e, rule in reqs:
        lines.append(
            f"    if (!({parse_expr(e).cpp(consts, '(long long){}')})) return cudaErrorInvalidValue;  // {_clean(rule)}"
        )
    lines.append("    cudaError_t err = cudaSuccess;")
    if works:
        lines += _workspace_lines(fam, works, ints, work_aligns, helper)
    if maps:
        lines += _tensor_map_lines(fam, cfg, maps, consts)
    work = {w.name: w for w in works}
    for call in calls:
        guard_expr = parse_expr(call.when)
        if guard_expr.names <= set(consts):  # decided by the template parameters: emit the step or not
            if not int(guard_expr(consts)):
                continue
            when = "1"
        else:
            when = guard_expr.cpp(consts, "(long long){}")
        grid = [parse_expr(g).cpp(consts, "(long long){}") for g in call.grid]
        block = [parse_expr(b).cpp(consts) for b in call.block]
        types = fam.param_types(cfg, call)
        args = [
            _workspace_arg(work[a], t)
            if a in work
            else a
            if a in host or a in map_names
            else parse_expr(a).cpp(consts)
            for a, t in zip(call.args, types, strict=True)
        ]
        cluster = [parse_expr(c).cpp(consts) for c in call.cluster]
        guard = when not in ("1", "int(1)")
        ind = "        "
        if call.doc:
            lines.append(f"    // {call.doc}")
        lines.append(f"    if ({when}) {{" if guard else "    {")
        lines.append(f"{ind}const long long gx = {grid[0]}, gy = {grid[1]}, gz = {grid[2]};")
        lines.append(
            f"{ind}if (gx < 1 || gx > {GRID_LIMITS[0]}LL || gy < 1 || gy > {GRID_LIMITS[1]} || gz < 1 || "
            f"gz > {GRID_LIMITS[2]}) return cudaErrorInvalidConfiguration;"
        )
        dims = f"dim3((unsigned)gx, (unsigned)gy, (unsigned)gz), dim3({', '.join(block)})"
        if call.main:
            lines.append(f"{ind}auto kernel = {expr};")
            lines.append(
                f"{ind}const size_t smem = {plan.dynamic_smem_bytes};  // dynamic shared memory, bytes"
            )
            if plan.dynamic_smem_bytes > cfg.arch.static_smem_max:
                lines.append(
                    f"{ind}// more than 48 KiB of dynamic shared memory: the kernel must opt in first"
                )
                lines.append(
                    f"{ind}err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, "
                    "(int)smem);"
                )
                lines.append(f"{ind}if (err != cudaSuccess) return err;")
            if cluster != ["1", "1", "1"]:  # a cluster launch: cudaLaunchKernelEx with the cluster dimension
                lines += [
                    f"{ind}cudaLaunchConfig_t config = {{}};",
                    f"{ind}config.gridDim = dim3((unsigned)gx, (unsigned)gy, (unsigned)gz);",
                    f"{ind}config.blockDim = dim3({', '.join(block)});",
                    f"{ind}config.dynamicSmemBytes = smem;",
                    f"{ind}config.stream = stream;",
                    f"{ind}cudaLaunchAttribute attr[1];",
                    f"{ind}attr[0].id = cudaLaunchAttributeClusterDimension;",
                    f"{ind}attr[0].val.clusterDim.x = {cluster[0]};",
                    f"{ind}attr[0].val.clusterDim.y = {cluster[1]};",
                    f"{ind}attr[0].val.clusterDim.z = {cluster[2]};",
                    f"{ind}config.attrs = attr;",
                    f"{ind}config.numAttrs = 1;",
                    f"{ind}err = cudaLaunchKernelEx(&config, kernel, {', '.join(args)});",
                    f"{ind}if (err != cudaSuccess) return err;",
                ]
            else:
                lines.append(f"{ind}kernel<<<{dims}, smem, stream>>>({', '.join(args)});")
        else:
            lines.append(f"{ind}{call.kernel}<<<{dims}, 0, stream>>>({', '.join(args)});")
        lines.append(f"{ind}err = cudaGetLastError();")
        lines.append(f"{ind}if (err != cudaSuccess) return err;")
        lines.append("    }")
    lines += ["    return cudaSuccess;", "}"]
    if lds:
        lines += ["", *_dense_overload(fam, cfg, tail, helper)]
    return "\n".join(lines)


def _dense_overload(fam: Family, cfg: KernelConfig, tail: str, helper: str) -> list[str]:
    """``launch_<name>(...)`` without the leading dimensions: the dense layout, forwarded to the full helper."""
    dense = fam.dense_layout(cfg.problem)
    ld_names = {a.ld for a in fam.host_args if a.array and a.ld}
    keep = [a for a in fam.host_args if a.name not in ld_names]
    params = ", ".join(f"{_c_type(fam, cfg, a.ctype)} {a.name}" for a in keep)
    fwd = [f"({parse_expr(dense[a.name]).cpp()})" if a.name in ld_names else a.name for a in fam.host_args]
    extra = ", stream, workspace, workspace_bytes" if "workspace" in tail else ", stream"
    what = ", ".join(f"{n} = {dense[n]}" for n in sorted(ld_names, key=[a.name for a in fam.host_args].index))
    return [
        f"// Dense arrays ({what}): the same launch.",
        f"inline cudaError_t {helper}({params}{tail}) {{",
        f"    return {helper}({', '.join(fwd)}{extra});",
        "}",
    ]


def _workspace_arg(w, ctype: str) -> str:
    """A workspace as a kernel argument: a parameter that only reads (``const``) gets the user's array when the
    workspace is not in use; one that writes gets the workspace itself (its step runs only when it is in use)."""
    return f"({w.name} ? {w.name} : {w.fallback})" if w.fallback and "const" in ctype else w.name


def _workspace_size_lines(
    fam: Family, works: list, consts: dict, ints: list[str], aligns: list[str], helper: str
) -> list[str]:
    """``launch_<name>_workspace_bytes(sizes..., offsets)``: the regions laid out as Family.launch lays them out
    (each at a multiple of WORKSPACE_ALIGN), written once; the helper takes the offsets from it. Where a region
    depends on the pointers' alignment (``A_align``), the size takes it as a trailing argument whose default, 1,
    is the worst case: the size returned then serves any pointers."""
    lines = [
        f"// Bytes of workspace {helper}() needs for a problem (0: none). Regions: "
        + "; ".join(f"{w.name} ({_clean(w.doc)})" for w in works)
        + ".",
        "// offsets (optional): each region's byte offset, (size_t)-1 where it is not used."
        + (
            f" {', '.join(aligns)}: the arrays' pointer alignment (default 1: enough for any pointer)."
            if aligns
            else ""
        ),
        f"inline size_t {helper}_workspace_bytes({', '.join(f'int {n}' for n in ints)}, "
        "size_t* offsets = nullptr" + "".join(f", long long {n} = 1" for n in aligns) + ") {",
        "    size_t total = 0;",
    ]
    for i, w in enumerate(works):
        when = parse_expr(w.when).cpp(consts, "(long long){}")
        elems = parse_expr(w.elems).cpp(consts, "(long long){}")
        lines += [
            f"    if (offsets) offsets[{i}] = (size_t)-1;",
            f"    if ({when}) {{",
            f"        total = (total + {WORKSPACE_ALIGN - 1}) / {WORKSPACE_ALIGN} * {WORKSPACE_ALIGN};",
            f"        if (offsets) offsets[{i}] = total;",
            f"        total += (size_t)({elems}) * sizeof({w.ctype});",
            "    }",
        ]
    return lines + ["    return total;", "}", ""]


def _workspace_lines(fam: Family, works: list, ints: list[str], aligns: list[str], helper: str) -> list[str]:
    ind = "    "
    lines = [
        f"{ind}size_t ws_off[{len(works)}];",
        f"{ind}const size_t ws_need = {helper}_workspace_bytes({', '.join([*ints, 'ws_off', *aligns])});",
        f"{ind}struct Owned {{  // a workspace this call allocated, freed on the stream when the call returns",
        f"{ind}    void* ptr;",
        f"{ind}    cudaStream_t stream;",
        f"{ind}    ~Owned() {{ if (ptr) cudaFreeAsync(ptr, stream); }}",
        f"{ind}}} owned{{nullptr, stream}};",
        f"{ind}if (ws_need > 0 && workspace == nullptr) {{",
        f"{ind}    err = cudaMallocAsync(&owned.ptr, ws_need, stream);",
        f"{ind}    if (err != cudaSuccess) return err;",
        f"{ind}    workspace = owned.ptr;",
        f"{ind}}} else if (workspace_bytes < ws_need) {{",
        f"{ind}    return cudaErrorInvalidValue;",
        f"{ind}}}",
    ]
    for i, w in enumerate(works):
        lines.append(
            f"{ind}{w.ctype}* {w.name} = ws_off[{i}] == (size_t)-1 ? nullptr : reinterpret_cast<{w.ctype}*>"
            f"(static_cast<char*>(workspace) + ws_off[{i}]);  // {_clean(w.doc)}"
        )
    return lines


def _tensor_map_lines(fam: Family, cfg: KernelConfig, maps, consts: dict) -> list[str]:
    """C++ that encodes the plan's TMA descriptors with the driver's cuTensorMapEncodeTiled, reached through the
    runtime's entry-point query (no -lcuda), from the same expressions the Python launcher evaluates."""
    ind = "    "
    arrays = {a.name: a for a in fam.host_args if a.array}
    fallback = {w.name: w.fallback for w in fam.workspaces(cfg)}
    out = [
        f"{ind}// TMA descriptors (CUtensorMap, passed by value as __grid_constant__ kernel parameters)",
        f"{ind}static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;",
        f"{ind}if (encode == nullptr) {{",
        f"{ind}    cudaDriverEntryPointQueryResult found;",
        f'{ind}    err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&encode), '
        "12000, cudaEnableDefault, &found);",
        f"{ind}    if (err != cudaSuccess) return err;",
        f"{ind}    if (found != cudaDriverEntryPointSuccess || encode == nullptr) return cudaErrorNotSupported;",
        f"{ind}}}",
    ]
    for t in maps:
        src = arrays[t.array] if t.array in arrays else arrays[fallback[t.array]]
        dtype = TMA_DTYPES[fam.array_dtype(cfg, src)]
        # a map over a workspace region reads the user's array where the region is not in use
        ptr = (
            f"(void*){t.array}"
            if t.array in arrays
            else f"({t.array} ? (void*){t.array} : (void*){fallback[t.array]})"
        )
        dims = ", ".join(f"(cuuint64_t)({parse_expr(d).cpp(consts)})" for d in t.dims)
        rank = len(t.dims)
        strides = ", ".join(
            f"(cuuint64_t)({parse_expr(x).cpp(consts, '(long long){}')})" for x in t.stride_exprs
        )
        box = ", ".join(f"(cuuint32_t)({parse_expr(b).cpp(consts)})" for b in t.box)
        unit = ", ".join(["1"] * rank)
        when = parse_expr(t.when).cpp(consts)
        if t.doc:
            out.append(f"{ind}// {t.name}: {_clean(t.doc)}")
        out += [
            f"{ind}smemtile::TensorMap {t.name} = {{}};",
            f"{ind}if ({when}) {{",
            f"{ind}    const cuuint64_t dims[{rank}] = {{{dims}}};",
            f"{ind}    const cuuint64_t strides[{rank - 1}] = {{{strides}}};",
            f"{ind}    const cuuint32_t box[{rank}] = {{{box}}};",
            f"{ind}    const cuuint32_t unit[{rank}] = {{{unit}}};",
            f"{ind}    if (encode(reinterpret_cast<CUtensorMap*>(&{t.name}), CU_TENSOR_MAP_DATA_TYPE_{dtype}, {rank}, "
            f"{ptr}, dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, "
            f"CU_TENSOR_MAP_SWIZZLE_{t.swizzle.upper()}, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, "
            "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)",
            f"{ind}        return cudaErrorInvalidValue;",
            f"{ind}}}",
        ]
    return out


def instantiation(cfg: KernelConfig) -> str:
    fam = FAMILIES[cfg.family]
    types = ", ".join(_c_type(fam, cfg, d.rsplit(" ", 1)[0].strip()) for d in fam.kernel_signature(cfg))
    return f"template __global__ void {fam.name_expression(cfg)}({types});"


def kernel_guard(family: str) -> str:
    """The include guard of a family's kernel text in generated files (the kernel file itself is unchanged)."""
    return f"SMEMTILE_KERNELS_{family.upper()}_CU"


def instance_guard(cfg: KernelConfig) -> str:
    """The guard of one configuration's explicit instantiation (a specialization is instantiated once per
    translation unit, however many generated files of it are included)."""
    expr = FAMILIES[cfg.family].name_expression(cfg)
    return f"SMEMTILE_INSTANCE_{hashlib.sha256(expr.encode()).hexdigest()[:16].upper()}"


def body(cfg: KernelConfig, *, name: str | None = None) -> str:
    """Kernel text (header inlined) + explicit instantiation + host helper: what NVRTC and nvcc compile.

    Several generated files can be ``#include``d in one translation unit: the shared header and the family's
    kernel text are include-guarded, the instantiation is guarded by its configuration, and the launch helper is
    ``launch_<name>()`` (the family's name unless ``name``: two configurations of one family need two names)."""
    fam = FAMILIES[cfg.family]
    guard, inst = kernel_guard(fam.name), instance_guard(cfg)
    return "\n".join(
        [
            f"#ifndef {guard}  // the family's kernels ({KERNELS}/{fam.file}): once per translation unit",
            f"#define {guard}",
            inline_headers(fam.source()).rstrip(),
            f"#endif  // {guard}",
            "",
            "// ---- instantiation ----",
            f"#ifndef {inst}  // this configuration's instantiation: once per translation unit",
            f"#define {inst}",
            instantiation(cfg),
            f"#endif  // {inst}",
            "",
            "#if !defined(__CUDACC_RTC__)  // host launch helper: nvcc only",
            *(
                [
                    "#include <cuda.h>  // CUtensorMap, cuTensorMapEncodeTiled's types",
                    "#include <cudaTypedefs.h>",
                ]
                if fam.tensor_maps(cfg)
                else []
            ),
            launch_helper(cfg, name=name),
            "#endif",
            "",
        ]
    )


def _clean(text: str) -> str:
    """One line of a C++ comment: no control characters, no comment terminators."""
    text = "".join(ch if ch.isprintable() else " " for ch in str(text))
    return text.replace("*/", "* /").replace("\\", "/")


def _header(
    cfg: KernelConfig,
    banks,
    base_banks,
    plan: LaunchConfig,
    smem: int,
    extra: dict,
    origin: str,
    name: str | None = None,
) -> str:
    from smemtile import __version__

    fam = FAMILIES[cfg.family]
    helper = f"launch_{helper_name(cfg, name)}"
    frm = f" from {_clean(origin)}" if origin else ""
    auto = fam.auto_values(cfg)
    out = [
        f"// Generated by smemtile {__version__}{frm}: family {fam.name}, {cfg.arch.name}.",
        f"// Instantiation (NVRTC name expression): {fam.name_expression(cfg)}",
        "// Parameters: "
        + ", ".join(
            f"{k}={v}" + (f" (auto: {auto[k]})" if k in auto else "")
            for k, v in {**cfg.params, **cfg.problem}.items()
        ),
        "// Shared-memory layouts:",
    ]
    spec = fam.spec(cfg)
    for b in spec.buffers:
        note = next((x.get("note", "") for x in fam.buffers(cfg) if x["name"] == b.name), "")
        dims = " x ".join(map(str, b.shape))
        out.append(f"//   {b.name} [{dims}] {b.dtype}: {b.layout.describe()}  ({_clean(note)})")
    for note in cfg.notes:
        out.append(f"// Note: {_clean(note)}")
    out.append(
        "// Bank conflicts (worst instruction; wavefronts / ideal), the accesses `smemtile analyze` reports:"
    )
    base = {b.name: b for b in (base_banks or [])}
    for b in banks:
        before = base.get(b.name)
        was = f"{before.degree:g}x ({before.wavefronts}/{before.ideal}) -> " if before else ""
        out.append(
            f"//   {b.name:<15} {b.op:<8} {b.width:>2} B  {b.role:<8}  {was}{b.degree:g}x ({b.wavefronts}/{b.ideal})"
        )
    stages = fam.stages(cfg.params)
    out.append(
        f"// Shared memory per block: {smem} bytes ({stages} stage{'s' if stages > 1 else ''}, padding included; "
        f"{'static' if plan.dynamic_smem_bytes == 0 else 'dynamic'}); {cfg.arch.name} opt-in limit "
        f"{cfg.arch.smem_optin_per_block}."
    )
    if extra.get("ptxas"):
        r = extra["ptxas"]
        nvrtc = f", NVRTC {extra['nvrtc_version']}" if extra.get("nvrtc_version") else ""
        out.append(
            f"// ptxas ({cfg.arch.name}{nvrtc}): {r['registers']} registers, {r['spills']} bytes spilled, "
            f"{r['static_smem_bytes']} bytes static shared memory."
        )
    if extra.get("occupancy"):
        o = extra["occupancy"]
        s = "s" if o["active_blocks"] != 1 else ""
        out.append(
            f"// Occupancy: {o['active_blocks']} block{s}/SM, {o['active_warps']} warps ({o['occupancy']:.0%}), "
            f"limited by {o['limiter']}."
        )
    steps = " then ".join(
        f"{s.kernel.split('<')[0]} grid {tuple(s.grid)} block {tuple(s.block)}" for s in plan.steps
    )
    out.append(
        f"// Launch: {steps}; dynamic shared memory {plan.dynamic_smem_bytes} bytes ({helper}() below)."
    )
    out += [
        f"// Build: nvcc -arch={cfg.arch.name} -std=c++17 -Xcicc --sharedmem32=0 -c <this file>. The option gives nvcc"
        " NVRTC's",
        "// 64-bit shared-memory pointers, so the program runs the machine code `smemtile verify` measured (without it",
        "// nvcc's differs: an fp32 GEMM pick at 4096^3 ran 47.5 against 48.7 TFLOP/s on the H200).",
        "// One translation unit may #include several generated files: the kernels and instantiations are guarded;",
        "// two configurations of one family need two helper names (smemtile generate --name NAME: launch_NAME()).",
    ]
    if plan.cluster != (1, 1, 1):
        out.append(
            f"// Clusters of {plan.cluster} CTAs (cudaLaunchKernelEx with cudaLaunchAttributeClusterDimension)."
        )
    docs = {w.name: w.doc for w in fam.workspaces(cfg)} if plan.workspace else {}
    for w in plan.workspace:
        if w.active:
            out.append(
                f"// Workspace {w.name}: {w.nbytes} bytes at offset {w.offset} ({_clean(docs[w.name])}); "
                f"{plan.workspace_bytes} in all ({helper}_workspace_bytes())."
            )
    for t in plan.tensor_maps:
        out.append(
            f"// TMA map {t.name}: {t.array} dims {list(t.dims)}, "
            + (f"row stride {t.strides[0]} B" if len(t.strides) == 1 else f"strides {list(t.strides)} B")
            + ", box "
            f"{list(t.box)}, SWIZZLE_{t.swizzle.upper()}" + ("" if t.active else " (not used: zero-filled)")
        )
    return "\n".join(out)


def render(
    cfg: KernelConfig,
    *,
    baseline: KernelConfig | None = None,
    extra: dict | None = None,
    origin: str = "",
    name: str | None = None,
) -> GeneratedKernel:
    """The standalone source and launch description of ``cfg`` (``baseline``: the unfixed variant to compare;
    ``name``: the launch helper is ``launch_<name>()``, the family's name by default)."""
    fam = FAMILIES[cfg.family]
    plan = fam.launch(cfg)
    smem = fam.smem_bytes(cfg)
    banks = bank_table(cfg)
    base_banks = bank_table(baseline) if baseline is not None else None
    extra = dict(extra or {})
    name = helper_name(cfg, name)
    return GeneratedKernel(
        cfg,
        fam.name_expression(cfg),
        plan,
        smem,
        _header(cfg, banks, base_banks, plan, smem, extra, origin, name),
        body(cfg, name=name),
        launch_helper(cfg, name=name),
        banks,
        base_banks,
        extra,
        "" if name == cfg.family else name,
        origin,
    )
