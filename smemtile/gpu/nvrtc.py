"""Compile CUDA C++ to cubin with NVRTC (``cuda.bindings.nvrtc``, imported lazily); no GPU needed.

One function, :func:`compile_cubin`: source + name expressions + arch in, cubin + lowered names + the ptxas
report out. ptxas runs with ``-v`` so registers, spills, stack frame and static shared memory are read from the
log per entry function. NVRTC may return a log without those lines (seen on the H200 machine: cached results);
then the numbers are ``None`` and a loaded module's function attributes are the source of truth.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import asdict, dataclass, field

from smemtile.errors import CompileError, NoDevice

DEFAULT_OPTIONS = ("--std=c++17", "--ptxas-options=-v")


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reported for one entry function."""

    registers: int | None
    spill_stores: int | None
    spill_loads: int | None
    stack_frame: int | None
    static_smem_bytes: int | None
    barriers: int | None

    @property
    def spills(self) -> int | None:
        if self.spill_stores is None or self.spill_loads is None:
            return None
        return self.spill_stores + self.spill_loads

    def to_dict(self) -> dict:
        d = asdict(self)
        d["spills"] = self.spills
        return d


@dataclass(frozen=True)
class CompileResult:
    cubin: bytes
    arch: str
    lowered: dict[str, str]  # name expression -> mangled name
    log: str
    resources: dict[str, KernelResources] = field(default_factory=dict)  # keyed by name expression
    nvrtc_version: str = ""

    def to_dict(self) -> dict:
        return {
            "arch": self.arch,
            "cubin_bytes": len(self.cubin),
            "lowered": self.lowered,
            "resources": {k: v.to_dict() for k, v in self.resources.items()},
            "nvrtc_version": self.nvrtc_version,
        }


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise NoDevice(f"NVRTC is unavailable ({e}); pip install cuda-python nvidia-cuda-nvrtc") from e
    return nvrtc


def _check(nvrtc, result, what: str) -> None:
    if int(result) != 0:
        _, msg = nvrtc.nvrtcGetErrorString(result)
        raise CompileError(f"NVRTC {what} failed: {msg.decode() if isinstance(msg, bytes) else msg}")


def nvrtc_version() -> str:
    nvrtc = _nvrtc()
    err, major, minor = nvrtc.nvrtcVersion()
    _check(nvrtc, err, "version")
    return f"{major}.{minor}"


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas_log(log: str) -> dict[str, KernelResources]:
    """Per mangled entry name: the numbers of ``ptxas -v``. Missing fields are ``None`` (0 for unset smem)."""
    out: dict[str, dict] = {}
    current: str | None = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            current = m.group(1)
            out.setdefault(current, {})
        elif m := _PROPS.search(line):
            current = m.group(1)
            out.setdefault(current, {})
        elif current is not None and (m := _FRAME.search(line)):
            out[current].update(stack_frame=int(m[1]), spill_stores=int(m[2]), spill_loads=int(m[3]))
        elif current is not None and (m := _USED.search(line)):
            bar, smem = _BARRIERS.search(line), _SMEM.search(line)
            out[current].update(
                registers=int(m[1]),
                barriers=int(bar[1]) if bar else 0,
                static_smem_bytes=int(smem[1]) if smem else 0,
            )
    fields = ("registers", "spill_stores", "spill_loads", "stack_frame", "static_smem_bytes", "barriers")
    return {k: KernelResources(**{f: v.get(f) for f in fields}) for k, v in out.items()}


def compile_cubin(
    source: str,
    name_expressions: list[str] | tuple[str, ...],
    arch: str,
    *,
    headers: dict[str, str] | None = None,
    options: tuple[str, ...] = (),
    filename: str = "kernel.cu",
) -> CompileResult:
    """Compile ``source`` to a cubin for ``arch`` (``sm_80``, ``sm_90``, ...) instantiating ``name_expressions``.

    ``headers`` maps include names to their text (NVRTC has no file system search path of its own).
    Raises :class:`CompileError` with the compiler log when NVRTC or ptxas rejects the code.
    NVRTC can answer from its cache with a log that lacks the ptxas report; then it compiles once more with
    a unique macro defined (a cache miss) so that registers, spills and shared memory are known.
    """
    res = _compile(source, name_expressions, arch, headers=headers, options=options, filename=filename)
    complete = all(
        r is not None and r.registers is not None and r.spills is not None
        for r in (res.resources.get(e) for e in name_expressions)
    )
    if not complete and name_expressions:
        nonce = f"-DSMEMTILE_NVRTC_NONCE={uuid.uuid4().hex[:16]}"
        res = _compile(
            source, name_expressions, arch, headers=headers, options=(*options, nonce), filename=filename
        )
    return res


def _compile(
    source: str,
    name_expressions: list[str] | tuple[str, ...],
    arch: str,
    *,
    headers: dict[str, str] | None = None,
    options: tuple[str, ...] = (),
    filename: str = "kernel.cu",
) -> CompileResult:
    nvrtc = _nvrtc()
    hdr_names = [n.encode() for n in (headers or {})]
    hdr_srcs = [s.encode() for s in (headers or {}).values()]
    err, prog = nvrtc.nvrtcCreateProgram(
        source.encode(), filename.encode(), len(hdr_names), hdr_srcs, hdr_names
    )
    _check(nvrtc, err, "create program")
    try:
        for expr in name_expressions:
            (err,) = nvrtc.nvrtcAddNameExpression(prog, expr.encode())
            _check(nvrtc, err, f"name expression {expr!r}")
        arch_flag = arch if arch.startswith("sm_") else f"sm_{arch}"
        opts = [o.encode() for o in (*DEFAULT_OPTIONS, f"-arch={arch_flag}", *options)]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        err, size = nvrtc.nvrtcGetProgramLogSize(prog)
        _check(nvrtc, err, "log size")
        buf = b" " * size
        (err,) = nvrtc.nvrtcGetProgramLog(prog, buf)
        log = buf.rstrip(b"\x00 ").decode(errors="replace")
        if int(status) != 0:
            first = next(
                (ln for ln in log.splitlines() if "error" in ln), log.strip().splitlines()[0] if log else ""
            )
            raise CompileError(f"{filename} for {arch_flag}: {first.strip()}\n{log}")
        lowered: dict[str, str] = {}
        for expr in name_expressions:
            err, name = nvrtc.nvrtcGetLoweredName(prog, expr.encode())
            _check(nvrtc, err, f"lowered name of {expr!r}")
            lowered[expr] = name.decode() if isinstance(name, bytes) else name
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(nvrtc, err, "cubin size")
        cubin = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        _check(nvrtc, err, "cubin")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    by_mangled = parse_ptxas_log(log)
    resources = {expr: by_mangled[name] for expr, name in lowered.items() if name in by_mangled}
    return CompileResult(
        cubin=cubin,
        arch=arch_flag,
        lowered=lowered,
        log=log,
        resources=resources,
        nvrtc_version=nvrtc_version(),
    )
