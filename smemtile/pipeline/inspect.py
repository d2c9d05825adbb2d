"""``inspect``: a user's own kernel, per source line, with the lanes, the banks and the fix.

    KERNEL.cu --NVRTC -lineinfo--> PTX --> shared-memory instructions (source line, array, op, width)
                                     --> records of the sampled warps (GPU: smemtile.gpu.inspect.record;
                                         CPU: the emulator, smemtile.model.ptx_emu)
                                     --> bank model per instruction and line, fix per array, spec

Without a GPU and without ``simulate`` the result is the listing (mode ``listing``, ``no_device`` says what
runs here); the CLI prints it and exits 3. The user's source is compiled, never executed on the host.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from smemtile.errors import CompileError, NoDevice, SpecError
from smemtile.fileio import printable, read_text
from smemtile.model import ptx as ptxmod
from smemtile.model.cuda_decl import SharedDecl, constants, shared_declarations
from smemtile.model.inspect_args import KernelArg, load_args
from smemtile.model.inspect_caller import DeviceArray
from smemtile.model.inspect_explain import ArrayFix, ArrayInfo, InstrReport, LineReport, explain, fixes, lines
from smemtile.model.spec import Buffer

MODES = ("auto", "listing", "simulate", "gpu")
NO_DEVICE = (
    "no GPU here: listed the shared-memory instructions (compile + PTX listing); run with --simulate "
    "for the CPU emulator of the sampled warps' addresses, or on a machine with a GPU"
)


@dataclass(frozen=True)
class Sample:
    """The bounds of what is recorded (the GPU recording's own Sample has the same fields)."""

    blocks: int = 2
    warps: int = 4
    executions: int = 64

    def __post_init__(self):
        for name in ("blocks", "warps", "executions"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise SpecError(f"must be a positive integer, got {v!r}", key=f"sample.{name}")

    def to_dict(self) -> dict:
        return {"blocks": self.blocks, "warps": self.warps, "executions": self.executions}


@dataclass
class InspectResult:
    """Everything ``inspect`` found; :meth:`to_dict` is the ``--json`` document."""

    source: str
    kernel: str
    entry: str
    arch: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem: int
    mode: str
    sample: Sample
    instrs: list[ptxmod.SharedInstr]
    arrays: dict[str, ArrayInfo]
    args: list[KernelArg] = field(default_factory=list)
    reports: list[InstrReport] = field(default_factory=list)
    lines: list[LineReport] = field(default_factory=list)
    fixes: list[ArrayFix] = field(default_factory=list)
    no_fix: dict[str, str] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    ncu: dict | None = None
    spec: dict | None = None
    emitted: str | None = None
    no_device: str | None = None
    ptx: str = field(default="", repr=False)
    source_text: str = field(default="", repr=False)
    notes: list[str] = field(default_factory=list)

    def line_of(self, file: str, line: int) -> LineReport | None:
        return next((x for x in self.lines if x.file == file and x.line == line), None)

    def to_dict(self) -> dict:
        from smemtile.report.inspect import result_to_dict

        return result_to_dict(self)


def _defines(defines) -> tuple[dict[str, str], dict[str, int]]:
    """``N=V`` strings (or a mapping) -> (macros for NVRTC, integer constants for the declarations)."""
    macros: dict[str, str] = {}
    items = (
        defines.items() if isinstance(defines, dict) else [str(d).partition("=")[::2] for d in defines or ()]
    )
    for name, value in items:
        name = str(name).strip()
        if not name.isidentifier():
            raise SpecError(f"{printable(name)!r} is not a macro name; use NAME=VALUE", key="--define")
        macros[name] = str(value).strip() if str(value).strip() else "1"
    ints = {}
    for k, v in macros.items():
        try:
            ints[k] = int(v, 0)
        except ValueError:
            pass
    return macros, ints


def _dims3(v, key: str, limit: int) -> tuple[int, int, int]:
    t = tuple(int(x) for x in (v if isinstance(v, (tuple, list)) else [v]))
    if not 1 <= len(t) <= 3 or any(x < 1 for x in t):
        raise SpecError(f"{v!r}: give 1 to 3 positive integers X[,Y[,Z]]", key=key)
    t = t + (1,) * (3 - len(t))
    if key == "--block" and t[0] * t[1] * t[2] > limit:
        raise SpecError(f"{t[0] * t[1] * t[2]} threads per block; at most {limit}", key=key)
    return t


def compile_source(path: str | os.PathLike, arch: str, macros: dict[str, str]) -> tuple[str, str]:
    """(PTX, source text): ``.ptx`` is taken as is, anything else goes through NVRTC with ``-lineinfo``. A compile
    error is one line with file:line (exit 2)."""
    text = read_text(path, what="kernel source", key="KERNEL")
    if str(path).endswith(".ptx"):
        return text, ""
    from smemtile.gpu.nvrtc import compile_ptx

    folder = os.path.dirname(os.path.abspath(path))
    try:
        dirs = (folder, *cuda_include_dirs())
        return compile_ptx(text, arch, filename=str(path), defines=macros, include_dirs=dirs), text
    except CompileError as e:
        first = str(e).splitlines()[0]
        if "--gpu-architecture" in first:
            raise SpecError(
                f"{arch!r} is not an architecture NVRTC compiles for (e.g. sm_80, sm_90, sm_90a)",
                key="--arch",
            ) from None
        raise SpecError(first) from None


def cuda_include_dirs() -> list[str]:
    """The first folder holding the CUDA headers (cuda_fp16.h, mma.h, ...): $CUDA_HOME / $CUDA_PATH,
    /usr/local/cuda[-X.Y], or an nvidia wheel's include folder; NVRTC itself searches none."""
    import glob

    roots = [
        os.environ.get("CUDA_HOME"),
        os.environ.get("CUDA_PATH"),
        "/usr/local/cuda",
        *sorted(glob.glob("/usr/local/cuda-*"), reverse=True),
    ]
    dirs = [os.path.join(r, "include") for r in roots if r]
    try:
        import nvidia

        dirs += [d for base in nvidia.__path__ for d in sorted(glob.glob(os.path.join(base, "*", "include")))]
    except ImportError:
        pass
    return [d for d in dirs if os.path.isfile(os.path.join(d, "cuda_fp16.h"))][:1]


def _arrays(ptx: str, entry: str, decls: dict[str, SharedDecl], smem: int) -> dict[str, ArrayInfo]:
    """The entry's shared arrays keyed as SharedInstr.array names them ("extern" for dynamic shared memory)."""
    from smemtile.model.ptx_emu import shared_layout

    out = {}
    for sym, (base, size) in shared_layout(ptx, entry).items():
        name = ptxmod.demangle_variable(sym)
        key = "extern" if size == 0 else name
        decl = decls.get(name)
        buf, note = None, ""
        if decl is None:
            note = f"no `__shared__ ... {name}[...]` declaration found in the source"
        elif decl.dtype is None:
            note = decl.reason
        elif decl.extern:
            if smem <= 0:
                note = "extern (dynamic) shared memory: give --smem BYTES to size it"
            else:
                buf = Buffer(name, decl.dtype, (smem // Buffer(name, decl.dtype, (1,)).elem_bytes,))
                size = smem
        elif decl.shape is None:
            note = decl.reason
        else:
            shape = decl.shape
            if len(shape) > 2:  # rows counted across the leading dimensions; padding stays per row
                shape = (math.prod(shape[:-1]), shape[-1])
            buf = Buffer(name, decl.dtype, tuple(shape))
            if buf.bytes() != size:
                buf, note = None, f"the declaration reads {buf.bytes()} bytes but the PTX has {size}"
        out[key] = ArrayInfo(name, base, size, decl, buf, note, sym)
    return out


def inspect(
    kernel_file: str | os.PathLike,
    *,
    kernel: str | None = None,
    grid=(1, 1, 1),
    block=(32, 1, 1),
    smem: int = 0,
    args=None,
    defines=(),
    arch: str = "sm_90",
    mode: str = "auto",
    ncu: bool = False,
    sample: Sample | None = None,
    emit_spec: str | os.PathLike | None = None,
    max_steps: int | None = None,
    device: int = 0,
) -> InspectResult:
    """Inspect ``kernel`` of ``kernel_file`` (.cu or .ptx) launched with ``grid``/``block``/``smem`` and ``args``
    (an ARGS.yaml path, YAML text, or a list of {name, dtype, count, fill} / {name, value} mappings, in which
    a Python caller may put its own arrays and numbers: :mod:`smemtile.model.inspect_caller`; the GPU launch
    uses a device array's pointer and copies a numpy array there and back, the emulator only reads them).

    ``mode``: ``simulate`` (the CPU emulator), ``gpu`` (record on the device), ``listing`` (no run), or ``auto``
    (the GPU when there is one, else the listing with ``no_device`` set)."""
    if mode not in MODES:
        raise SpecError(f"unknown mode {mode!r}; allowed: {', '.join(MODES)}", key="mode")
    sample = sample or Sample()
    grid3, block3 = _dims3(grid, "--grid", 1 << 31), _dims3(block, "--block", 1024)
    if smem < 0:
        raise SpecError("must be at least 0", key="--smem")
    macros, ints = _defines(defines)
    if str(arch).strip().lower() == "auto":  # the GPU's own (NoDevice, exit 3, without one)
        from smemtile.gpu.device import device_arch

        arch = device_arch(device).name
    ptx, source = compile_source(kernel_file, arch, macros)
    entry = ptxmod.find_entry(ptx, kernel)
    instrs = ptxmod.shared_instructions(ptx, entry)
    params = ptxmod.entry_params(ptx, entry)
    env = constants(source, ints) if source else dict(ints)
    decls = shared_declarations(source, ints) if source else {}
    arrays = _arrays(ptx, entry, decls, smem)
    res = InspectResult(
        str(kernel_file),
        ptxmod.demangle_function(entry),
        entry,
        arch,
        grid3,
        block3,
        smem,
        "listing",
        sample,
        instrs,
        arrays,
        ptx=ptx,
        source_text=source,
    )
    res.notes = _call_notes(ptx, entry, instrs)
    if mode == "listing":
        return res
    if mode == "auto":
        mode = "gpu" if _has_gpu(device) else "listing"
        if mode == "listing":
            res.no_device = NO_DEVICE + (
                "; --emit-spec needs recorded accesses: nothing was written" if emit_spec else ""
            )
            return res
    if args is None and params:
        names = ", ".join(f"{n.rsplit('_param_', 1)[-1]}:{t}" for t, n in params)
        raise SpecError(
            f"the kernel takes {len(params)} parameters ({names}): give --args ARGS.yaml", key="--args"
        )
    res.args = load_args(args, params, env)
    if mode == "simulate" and any(isinstance(a.data, DeviceArray) for a in res.args):
        res.args = _host_copies(res.args, device)  # the emulator reads a device array's contents on the host
    before = _host_copies(res.args, device) if ncu else res.args  # ncu runs on the inputs the recording got
    if mode == "simulate":
        from smemtile.model.ptx_emu import MAX_STEPS, emulate

        records, meta = emulate(
            ptx,
            entry,
            instrs,
            grid=grid3,
            block=block3,
            dynamic_smem=smem,
            args=res.args,
            params=params,
            sample=sample,
            max_steps=max_steps or MAX_STEPS,
        )
    else:
        own = [i for i in instrs if not i.function]  # the recording instruments the entry's own instructions
        if len(own) < len(instrs):
            res.notes.append(GPU_CALL_NOTE)
        records, meta = _record_gpu(ptx, entry, own, grid3, block3, smem, res.args, sample, device)
        arrays = res.arrays = _rebase(arrays, meta.get("symbols") or {})
    res.mode = mode
    res.meta = {"recorded": len(records), **meta}
    res.reports = explain(instrs, records, meta.get("executions", {}), arrays)
    res.lines = lines(res.reports)
    res.fixes, res.no_fix = fixes(res.reports, arrays)
    from smemtile.model.inspect_spec import emit_spec as build_spec

    res.spec = build_spec(
        res.reports, arrays, arch=arch, threads=block3[0] * block3[1] * block3[2], kernel=res.kernel
    )
    if ncu:
        res.ncu = _ncu(res, before, device)
    if emit_spec is not None:
        _write_spec(res, emit_spec, [kernel_file] + ([args] if isinstance(args, (str, Path)) else []))
    return res


def _call_notes(ptx: str, entry: str, instrs: list[ptxmod.SharedInstr]) -> list[str]:
    """A note per device function the kernel calls without inlining: where its shared-memory instructions are."""
    notes = []
    for name in ptxmod.called_functions(ptx, entry):
        n = sum(1 for i in instrs if i.function == name)
        what = (
            f"its {n} shared-memory instruction{'s are' if n != 1 else ' is'} listed on its own source lines"
            if n
            else "it has no shared-memory instructions"
        )
        notes.append(
            f"the kernel calls {ptxmod.demangle_function(name)} ({name}) without inlining it: {what} (the "
            "emulator follows the call)"
        )
    return notes


GPU_CALL_NOTE = (
    "the GPU recording does not yet see inside device functions called without inlining: their instructions "
    "are not recorded (--simulate emulates them; __forceinline__ records them on the GPU)"
)


def _rebase(arrays: dict[str, ArrayInfo], symbols: dict[str, int]) -> dict[str, ArrayInfo]:
    """The arrays at the window offsets the GPU reported for their symbols (the recording's own layout)."""
    return {
        k: dataclasses.replace(a, base=int(symbols[a.symbol])) if a.symbol in symbols else a
        for k, a in arrays.items()
    }


def _has_gpu(device: int) -> bool:
    try:
        from smemtile.gpu.device import device_attributes

        device_attributes(device)
        return True
    except NoDevice:
        return False


def _gpu_module():
    try:
        from smemtile.gpu import inspect as gpu_inspect
    except ImportError as e:
        raise NoDevice(
            f"the GPU recording (smemtile.gpu.inspect) is not available here ({e}); use --simulate"
        ) from None
    return gpu_inspect


def _record_gpu(ptx, entry, instrs, grid, block, smem, args, sample: Sample, device: int):
    g = _gpu_module()
    gs = g.Sample(blocks=sample.blocks, warps=sample.warps, executions=sample.executions)
    return g.record(
        ptx, entry, instrs, grid=grid, block=block, dynamic_smem=smem, args=args, sample=gs, device=device
    )


def _host_copies(args: list[KernelArg], device: int) -> list[KernelArg]:
    """The arguments with every caller's array replaced by a host copy of its contents (the caller's arrays
    themselves are left to the launch)."""
    if not any(a.data is not None for a in args):
        return args
    g = _gpu_module() if any(isinstance(a.data, DeviceArray) for a in args) else None
    out = []
    for a in args:
        if a.data is None:
            out.append(a)
        elif isinstance(a.data, DeviceArray):
            out.append(dataclasses.replace(a, data=g.snapshot(a, device)))
        else:
            out.append(dataclasses.replace(a, data=np.array(a.data, copy=True).reshape(-1)))
    return out


def _ncu(res: InspectResult, args: list[KernelArg], device: int) -> dict:
    """Measured wavefronts per source line (Nsight Compute, uninstrumented kernel, on ``args``: the inputs as
    they were before the recording) keyed "file:line"."""
    g = _gpu_module()
    measured = g.ncu_per_line(
        res.ptx,
        res.entry,
        grid=res.grid,
        block=res.block,
        dynamic_smem=res.dynamic_smem,
        args=args,
        device=device,
    )
    out = {}
    for (file, line), v in measured.items():
        out[f"{os.path.basename(file)}:{line}"] = dict(v)
    return out


def _write_spec(res: InspectResult, path, inputs) -> None:
    import yaml

    from smemtile.fileio import write_text_atomic

    text = "# written by smemtile inspect; `smemtile analyze` this file\n" + yaml.safe_dump(
        res.spec, sort_keys=False, default_flow_style=None, width=100
    )
    write_text_atomic(path, text, key="--emit-spec", inputs=[str(p) for p in inputs])
    res.emitted = str(path)


__all__ = ["Sample", "InspectResult", "inspect"]
