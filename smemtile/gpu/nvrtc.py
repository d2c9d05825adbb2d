"""Compile CUDA C++ to cubin with NVRTC (``cuda.bindings.nvrtc``, imported lazily); no GPU needed.

One function, :func:`compile_cubin`: source + name expressions + arch in, cubin + PTX + lowered names + the
ptxas report out. ptxas runs with ``-v`` so registers, spills, stack frame and static shared memory are read from
the log per entry function. NVRTC may return a log without those lines (seen on the H200 machine: cached
results); then the numbers are ``None`` and a loaded module's function attributes are the source of truth.

Results are cached on disk (``$SMEMTILE_CACHE_DIR/nvrtc`` or ``~/.cache/smemtile/nvrtc``), keyed by everything
that changes the output: the source, the headers, the name expressions, the options, the arch and the NVRTC
version. ``SMEMTILE_COMPILE_CACHE=0`` turns it off.

Why NVRTC directly and not cuda.core's Program (the rest of smemtile/gpu is on cuda.core): one NVRTC program
here gives both the cubin and the PTX of the same compile (``Program.compile`` makes one target per compile: two
compiles), takes our option strings as they are (``--ptxas-options=-v``, ``-arch=sm_90a``, the callers' and the
nonce's ``-D``; ``ProgramOptions`` has a field per option and no pass-through), takes headers from memory (the
``headers`` argument; ``ProgramOptions`` has include paths only) and returns the whole log, whose ptxas report
is parsed per entry, next to our own disk cache. The output buffers are fresh bytearrays (:func:`out_buffer`).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import re
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from smemtile.errors import CompileError, NoDevice

DEFAULT_OPTIONS = ("--std=c++17", "--ptxas-options=-v")
CACHE_ENTRY_BUDGET = 64 << 20  # bytes of one cached compile (cubin + PTX as text: a few MB at most)


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
    ptx: str = ""

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
    key = _cache_key(source, name_expressions, arch, headers, options)
    cached = _cache_get(key)
    if cached is not None:
        return cached
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
    _cache_put(key, res)
    return res


def cache_dir() -> Path | None:
    if os.environ.get("SMEMTILE_COMPILE_CACHE", "1") == "0":
        return None
    root = os.environ.get("SMEMTILE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "smemtile"
    )
    return Path(root) / "nvrtc"


def _cache_key(source, name_expressions, arch, headers, options) -> str:
    doc = {
        "source": source,
        "names": list(name_expressions),
        "arch": arch,
        "headers": dict(headers or {}),
        "options": [*DEFAULT_OPTIONS, *options],
        "nvrtc": _nvrtc_identity(),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


@functools.lru_cache(maxsize=1)
def _nvrtc_identity() -> str:
    """Which NVRTC compiles, for the cache key, without loading it (importing cuda.bindings.nvrtc costs ~70 ms,
    most of an analyze whose compile is a cache hit): the nvidia-cuda-nvrtc wheel's libnvrtc (path, size, mtime),
    the library cuda-pathfinder loads first; without the wheel, ``nvrtcVersion()``."""
    import importlib.util

    for pkg in ("nvidia.cu13", "nvidia.cuda_nvrtc"):
        try:
            spec = importlib.util.find_spec(pkg)
        except (ImportError, ValueError):
            continue
        for root in (spec.submodule_search_locations or []) if spec else []:
            for lib in sorted(Path(root, "lib").glob("libnvrtc.so.*")):
                st = lib.stat()
                return f"{lib}:{st.st_size}:{int(st.st_mtime)}"
    return nvrtc_version()


def _cache_get(key: str) -> CompileResult | None:
    d = cache_dir()
    if d is None:
        return None
    from smemtile.errors import SpecError
    from smemtile.fileio import read_text

    try:
        # fileio: a regular file only (a FIFO or a device planted in the cache is skipped, never opened to block),
        # bounded, strict UTF-8; anything torn, binary or foreign is a miss and the entry is written again
        doc = json.loads(
            read_text(d / f"{key}.json", what="compile cache entry", budget=CACHE_ENTRY_BUDGET, fifo=False)
        )
        return CompileResult(
            cubin=base64.b64decode(doc["cubin"]),
            arch=doc["arch"],
            lowered=doc["lowered"],
            log=doc["log"],
            resources={k: KernelResources(**v) for k, v in doc["resources"].items()},
            nvrtc_version=doc["nvrtc_version"],
            ptx=doc["ptx"],
        )
    except (SpecError, OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None  # a miss, a torn or foreign file: compile again


def _cache_put(key: str, res: CompileResult) -> None:
    d = cache_dir()
    if d is None:
        return
    doc = {
        "cubin": base64.b64encode(res.cubin).decode(),
        "arch": res.arch,
        "lowered": res.lowered,
        "log": res.log,
        "resources": {
            k: {
                f: getattr(v, f)
                for f in (
                    "registers",
                    "spill_stores",
                    "spill_loads",
                    "stack_frame",
                    "static_smem_bytes",
                    "barriers",
                )
            }
            for k, v in res.resources.items()
        },
        "nvrtc_version": res.nvrtc_version,
        "ptx": res.ptx,
    }
    from smemtile.errors import SpecError
    from smemtile.fileio import write_text_atomic

    target = d / f"{key}.json"
    try:
        if os.path.lexists(target) and not os.path.isfile(target):  # a folder, FIFO or device: not ours
            return
        # the guarded writer: O_EXCL temporary file, fsync, rename; mode 0666 & ~umask (mkstemp made 0600)
        write_text_atomic(target, json.dumps(doc), key="compile cache", make_parents=True)
    except (SpecError, OSError):
        pass  # a read-only or full cache is only slower


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
        log = _program_log(nvrtc, prog)
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
        cubin = out_buffer(size)
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        _check(nvrtc, err, "cubin")
        cubin = bytes(cubin)
        err, size = nvrtc.nvrtcGetPTXSize(prog)
        _check(nvrtc, err, "PTX size")
        ptx_buf = out_buffer(size)
        (err,) = nvrtc.nvrtcGetPTX(prog, ptx_buf)
        _check(nvrtc, err, "PTX")
        ptx = bytes(ptx_buf).rstrip(b"\x00 ").decode(errors="replace")
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
        ptx=ptx,
    )


_LOG_ERROR = re.compile(r"^(?P<file>.*?)\((?P<line>\d+)\): (?:catastrophic )?error[^:]*: (?P<msg>.*)$")


def first_error(log: str, filename: str) -> str:
    """The first error of an NVRTC log as one ``file:line: error: message`` line."""
    for ln in log.splitlines():
        if m := _LOG_ERROR.match(ln.strip()):
            return f"{m['file']}:{m['line']}: error: {m['msg'].strip()}"
    for ln in log.splitlines():
        if "error" in ln.lower():
            return ln.strip()
    return f"{filename}: NVRTC failed: {log.strip().splitlines()[0] if log.strip() else 'no log'}"


def compile_ptx(
    source: str,
    arch: str,
    *,
    filename: str = "kernel.cu",
    defines: dict[str, str] | None = None,
    include_dirs: tuple[str, ...] = (),
    options: tuple[str, ...] = (),
) -> str:
    """PTX of ``source`` for ``arch`` with ``-lineinfo`` (``.loc`` per instruction) and ``--define-macro`` per
    ``defines``; NVRTC finds ``#include "..."`` files in ``include_dirs``. A compile error raises
    :class:`CompileError` whose message is the log's first error as one line (the full log in ``.log``)."""
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), filename.encode(), 0, [], [])
    _check(nvrtc, err, "create program")
    try:
        arch_flag = arch if arch.startswith(("sm_", "compute_")) else f"sm_{arch}"
        opts = ["--std=c++17", "-lineinfo", f"-arch={arch_flag}"]
        opts += [f"--define-macro={k}={v}" for k, v in (defines or {}).items()]
        opts += [f"--include-path={d}" for d in include_dirs]
        opts += list(options)
        enc = [o.encode() for o in opts]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(enc), enc)
        log = _program_log(nvrtc, prog)
        if int(status) != 0:
            e = CompileError(first_error(log, filename))
            e.log = log
            raise e
        err, size = nvrtc.nvrtcGetPTXSize(prog)
        _check(nvrtc, err, "PTX size")
        ptx_buf = out_buffer(size)
        (err,) = nvrtc.nvrtcGetPTX(prog, ptx_buf)
        _check(nvrtc, err, "PTX")
        return bytes(ptx_buf).rstrip(b"\x00 ").decode(errors="replace")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _program_log(nvrtc, prog) -> str:
    """The NVRTC program's compile log (ptxas' report with --ptxas-options=-v, the errors on failure)."""
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    _check(nvrtc, err, "log size")
    buf = out_buffer(size)
    (err,) = nvrtc.nvrtcGetProgramLog(prog, buf)
    return bytes(buf).rstrip(b"\x00 ").decode(errors="replace")


def out_buffer(size: int) -> bytearray:
    """A fresh, writable buffer for NVRTC to fill (its log, PTX, cubin). Never ``b" " * size``: for size 1 (the
    empty log of every clean compile) that is Python's shared one-byte object b" ", and NVRTC's terminating NUL
    written into it turned every b" " of the process into b"\x00" (files written a space at a time got NULs,
    generated C++ lost its spaces)."""
    return bytearray(max(int(size), 1))
