"""Run a generated kernel on the GPU: detect the device, load the cubin, read the driver's numbers, launch,
check against the family's float64 reference and time it. ``cuda.core`` is imported lazily, only here.

Everything goes through ``cuda.core`` (no torch / cupy): the device and its properties, memory (``Buffer``), copies
and fills on the legacy default stream, the loaded cubin (``ObjectCode``/``Kernel``), the kernel's attributes and
occupancy, launches (``LaunchConfig``, clusters included), CUDA events for timing and tensor maps
(``TensorMapDescriptor``). ``cuda.bindings.driver`` remains only for what ``cuda.core`` lacks; each such call says
what is missing in a comment (``# cuda.core lacks: ...``), and a test holds the list. Registers, static shared
memory and local memory come from the loaded kernel's attributes (NVRTC on the H200 machine may return an empty
ptxas log on a cached compile).

    dev = open_device(0)                     # NoDevice (exit 3) without a GPU
    k = LoadedKernel(cfg, dev)               # cfg built for dev.arch
    res = k.check(problem_inputs)            # CheckResult: correct, max_rel_error, first mismatch
    t = k.time()                             # Timing: median ms of enough runs after a warm-up, L2 flushed
"""

from __future__ import annotations

import ctypes
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from smemtile.errors import CompileError, NoDevice, SmemtileError
from smemtile.model.arch import FP32_LANES_PER_SM
from smemtile.model.dtypes import C_TYPES, DTYPES, TMA_DTYPES


# ---- the CUDA libraries, imported lazily ----------------------------------------------------------------------
def _core():
    """The ``cuda.core`` package (NoDevice, exit 3, when it cannot be imported)."""
    try:
        import cuda.core as core
    except Exception as e:  # not installed or a broken install
        raise NoDevice(f"no CUDA GPU: cuda.core unavailable ({e.__class__.__name__}: {e})") from None
    return core


def _driver():
    """``cuda.bindings.driver``, for the few calls cuda.core lacks (each call site says which)."""
    try:
        from cuda.bindings import driver
    except Exception as e:  # not installed or a broken install
        raise NoDevice(
            f"no CUDA GPU: CUDA Python bindings unavailable ({e.__class__.__name__}: {e})"
        ) from None
    return driver


def _err_name(driver, err) -> str:
    try:
        name = driver.cuGetErrorName(err)[1]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # pragma: no cover - defensive
        return str(err)


def _ok(res, what: str, exc=RuntimeError):
    """Unpack a cuda.bindings result tuple, raising ``exc`` with the error name on failure."""
    driver = _driver()
    err, *values = res if isinstance(res, tuple) else (res,)
    if int(err) != 0:
        raise exc(f"{what} failed: {_err_name(driver, err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _reason(e: BaseException) -> str:
    """One line of a cuda.core exception (its CUDA error name and text)."""
    text = str(e).strip().splitlines()
    return text[0] if text else e.__class__.__name__


def _call(what: str, fn, *args, exc=RuntimeError, **kwargs):
    """``fn(*args, **kwargs)`` (a cuda.core call); its failure raised as ``exc("WHAT failed: REASON")``, one line."""
    try:
        return fn(*args, **kwargs)
    except SmemtileError:
        raise
    except Exception as e:
        raise exc(f"{what} failed: {_reason(e)}") from None


def _stream(stream=0):
    """The cuda.core Stream for ``stream``: 0 / None is the legacy default stream (what the null stream of the
    driver API is), a cuda.core Stream is itself, anything else a foreign stream handle (an int)."""
    core = _core()
    if stream is None or (isinstance(stream, int) and stream == 0):
        legacy = getattr(core, "LEGACY_DEFAULT_STREAM", None)
        return legacy if legacy is not None else core.Device().default_stream
    if isinstance(stream, core.Stream):
        return stream
    return core.Stream.from_handle(int(stream))


# ---- the device -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Device:
    index: int
    name: str
    cc: tuple[int, int]
    arch_name: str  # sm_XY
    sm_count: int
    context: Any = field(repr=False, compare=False)  # the cuda.core Context (the device's primary context)
    clock_khz: int | None = None  # SM clock the driver reports (the boost clock)
    mem_clock_khz: int | None = None
    bus_width_bits: int | None = None
    l2_bytes: int | None = None
    core: Any = field(default=None, repr=False, compare=False)  # the cuda.core Device

    def peak(self) -> dict:
        """Peak FP32 FMA throughput and DRAM bandwidth from the driver's clocks and the SM's FP32 lanes."""
        lanes = FP32_LANES_PER_SM.get(self.cc)
        out: dict = {}
        if lanes and self.clock_khz:
            out["tflops"] = self.sm_count * lanes * 2 * self.clock_khz * 1e3 / 1e12
            out["tflops_basis"] = (
                f"{self.sm_count} SMs x {lanes} FP32 lanes x 2 (FMA) x {self.clock_khz / 1e3:.0f} MHz"
            )
        if self.mem_clock_khz and self.bus_width_bits:
            out["gbps"] = 2 * self.mem_clock_khz * 1e3 * self.bus_width_bits / 8 / 1e9
            out["gbps_basis"] = (
                f"2 x {self.mem_clock_khz / 1e3:.0f} MHz x {self.bus_width_bits}-bit bus "
                "(the datasheet figure; a device copy reaches ~90% of it)"
            )
        return out

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "name": self.name,
            "cc": f"{self.cc[0]}.{self.cc[1]}",
            "arch": self.arch_name,
            "sm_count": self.sm_count,
            "clock_mhz": _mhz(self.clock_khz),
            "memory_clock_mhz": _mhz(self.mem_clock_khz),
            "bus_width_bits": self.bus_width_bits,
            "l2_bytes": self.l2_bytes,
            "peak": self.peak(),
        }

    def set_current(self) -> None:
        """Make this device's primary context current on the calling thread (cuda.core keeps one Device object
        per thread: the calling thread's is the one made current)."""
        _call(f"making device {self.index} current", lambda: _core().Device(self.index).set_current())

    def synchronize(self, what: str = "cuCtxSynchronize (the kernel faulted?)", exc=RuntimeError) -> None:
        _call(what, lambda: _core().Device(self.index).sync(), exc=exc)


def _mhz(khz: int | None) -> float | None:
    return None if khz is None else khz / 1e3


def _no_driver(e: BaseException) -> NoDevice:
    core_error = e.__class__.__name__ == "CUDAError"  # the driver answered: no device, or a broken one
    if core_error:
        return NoDevice(f"no CUDA GPU: cuInit failed ({_reason(e).split(':')[0]})")
    return NoDevice(f"no CUDA GPU: no CUDA driver ({e.__class__.__name__}: {e})")


def device_count() -> int:
    """Number of CUDA devices; raises NoDevice("no CUDA GPU: ...") when there is none or no driver."""
    core = _core()
    try:
        count = len(core.Device.get_all_devices())
    except Exception as e:  # libcuda cannot be loaded, or cuInit fails
        raise _no_driver(e) from None
    if not count:
        raise NoDevice("no CUDA GPU: the driver reports 0 devices")
    return int(count)


def open_device(index: int = 0) -> Device:
    """Make device ``index``'s primary context current and describe the device."""
    core = _core()
    count = device_count()
    if not 0 <= index < count:
        raise NoDevice(f"no CUDA GPU: device {index} requested but {count} found")
    dev = _call(f"opening device {index}", core.Device, index, exc=NoDevice)
    _call(f"making device {index} current", dev.set_current, exc=NoDevice)
    props = dev.properties

    def maybe(name: str) -> int | None:  # properties newer drivers may drop (the clocks are deprecated)
        try:
            v = int(getattr(props, name))
        except Exception:
            return None
        return v or None

    cc = dev.compute_capability
    major, minor = int(cc[0]), int(cc[1])
    return Device(
        index,
        str(dev.name),
        (major, minor),
        f"sm_{major}{minor}",
        int(props.multiprocessor_count),
        dev.context,
        maybe("clock_rate"),
        maybe("memory_clock_rate"),
        maybe("global_memory_bus_width"),
        maybe("l2_cache_size"),
        dev,
    )


def synchronize(what: str = "cuCtxSynchronize (the kernel faulted?)", exc=RuntimeError) -> None:
    """Wait for the current device (cuda.core ``Device.sync``): a kernel's fault raises ``exc``, one line."""
    _call(what, _core().Device().sync, exc=exc)


# ---- memory ---------------------------------------------------------------------------------------------------
class DeviceBuffer:
    """Device memory (a cuda.core ``Buffer`` of the current device's memory resource) that frees itself.

    ``ptr`` and ``addr`` are the device address as an int; copies and fills run on the legacy default stream and
    are complete when the call returns."""

    def __init__(self, nbytes: int):
        core = _core()
        self.nbytes = int(max(nbytes, 1))
        self.buffer = _call(
            f"allocating {self.nbytes} bytes", core.Device().allocate, self.nbytes, stream=_stream()
        )
        self.ptr: int | None = int(self.buffer.handle)

    @classmethod
    def from_array(cls, a: np.ndarray) -> DeviceBuffer:
        a = np.ascontiguousarray(a)
        buf = cls(a.nbytes)
        if a.nbytes:
            buf._copy(a, to_device=True)
        return buf

    def _copy(self, host: np.ndarray, *, to_device: bool) -> None:
        """``host.nbytes`` bytes between the start of this buffer and ``host`` (C-contiguous), then a sync."""
        if int(host.nbytes) > self.nbytes:
            raise ValueError(f"{host.nbytes} bytes do not fit a {self.nbytes}-byte device buffer")
        (copy_to_device if to_device else copy_to_host)(self.addr, host)

    def fill(self, value: int) -> None:
        """Every byte set to ``value`` (0..255), complete when this returns."""
        s = _stream()
        _call(f"filling {self.nbytes} bytes", self.buffer.fill, int(value), stream=s)
        _call("filling (stream sync)", s.sync)

    def fill_async(self, value: int, stream=0) -> None:
        """Every byte set to ``value`` (0..255), queued on ``stream``."""
        _call(f"filling {self.nbytes} bytes", self.buffer.fill, int(value), stream=_stream(stream))

    def poison(self) -> None:
        """Fill with 0xFF bytes: NaN in f32, f16 and bf16, so an element never written shows up."""
        self.fill(0xFF)

    def to_array(self, shape, dtype) -> np.ndarray:
        out = np.empty(shape, dtype=dtype)
        if out.nbytes:
            self._copy(out, to_device=False)
        return out

    @property
    def addr(self) -> int:
        return int(self.ptr)

    def free(self) -> None:
        if self.ptr is not None:
            try:
                self.buffer.close()
            finally:
                self.ptr = None
                self.buffer = None

    def __del__(self):  # pragma: no cover - best effort
        try:
            self.free()
        except Exception:
            pass


def _host_copy(address: int, host: np.ndarray, to_device: bool) -> None:
    core = _core()
    n = int(host.nbytes)
    if not n:
        return
    if not host.flags.c_contiguous:
        raise ValueError("a host copy needs a C-contiguous array")
    s = _stream()
    dev_view = core.Buffer.from_handle(int(address), n)  # non-owning views: the copy is exactly n bytes
    host_view = core.Buffer.from_handle(int(host.ctypes.data), n)
    if to_device:
        _call("copying to the device", dev_view.copy_from, host_view, stream=s)
    else:
        _call("copying from the device", dev_view.copy_to, host_view, stream=s)
    _call("copying (stream sync)", s.sync)


def copy_to_device(address: int, host: np.ndarray) -> None:
    """``host``'s bytes to device memory at ``address`` (cuda.core Buffer copy, complete on return)."""
    _host_copy(address, host, True)


def copy_to_host(address: int, out: np.ndarray) -> None:
    """``out.nbytes`` bytes of device memory at ``address`` into ``out`` (complete on return)."""
    _host_copy(address, out, False)


# ---- modules, kernels, launches, events -----------------------------------------------------------------------
class Module:
    """A loaded image: a cubin (cuda.core ``ObjectCode.from_cubin``) or PTX text, JIT-compiled by the driver with
    line info. Kernels by name as cuda.core ``Kernel`` objects."""

    def __init__(self, image: bytes | str, *, line_info: bool = True, what: str = "loading the module"):
        core = _core()
        self._library = None
        self._code = None
        if isinstance(image, str):
            # cuda.core lacks: JIT options for PTX (ObjectCode.from_ptx takes none; -lineinfo needs
            # CU_JIT_GENERATE_LINE_INFO), so the PTX is loaded with cuLibraryLoadData and its kernels wrapped
            # with cuda.core's Kernel.from_handle.
            d = _driver()
            opts = [d.CUjit_option.CU_JIT_GENERATE_LINE_INFO] if line_info else []
            vals = [1] if line_info else []
            self._library = _ok(
                d.cuLibraryLoadData(image.encode() + b"\x00", opts, vals, len(opts), [], [], 0),
                "loading the PTX (driver JIT)",
                CompileError,
            )
        else:
            self._code = _call(what, core.ObjectCode.from_cubin, bytes(image), exc=CompileError)

    def kernel(self, name: str):
        """The cuda.core Kernel ``name`` (a mangled name for C++ entries); CompileError when it is not there."""
        core = _core()
        if self._library is not None:
            d = _driver()
            # cuda.core lacks: looking a kernel up in a library it did not load (see __init__)
            handle = _ok(
                d.cuLibraryGetKernel(self._library, name.encode()),
                f"cuLibraryGetKernel({name})",
                CompileError,
            )
            return _call(f"wrapping kernel {name}", core.Kernel.from_handle, int(handle), exc=CompileError)
        if self._code is None:
            raise CompileError(f"kernel {name}: the module is closed")
        return _call(f"getting kernel {name}", self._code.get_kernel, name, exc=CompileError)

    def close(self) -> None:
        self._code = None  # cuda.core unloads the library once no Kernel refers to it
        if self._library is not None:
            lib, self._library = self._library, None
            try:
                _driver().cuLibraryUnload(lib)  # cuda.core lacks: unloading a library it did not load
            except Exception:  # pragma: no cover - best effort
                pass


def kernel_attributes(kernel) -> dict[str, int]:
    """Registers per thread, static shared memory and local memory of a loaded kernel (the driver's numbers)."""
    a = kernel.attributes
    return {
        "registers": int(_call("reading NUM_REGS", getattr, a, "num_regs")),
        "static_smem": int(_call("reading SHARED_SIZE_BYTES", getattr, a, "shared_size_bytes")),
        "local_bytes": int(_call("reading LOCAL_SIZE_BYTES", getattr, a, "local_size_bytes")),
    }


def set_max_dynamic_smem(
    kernel, nbytes: int, device_index: int, what: str | None = None, exc=RuntimeError
) -> None:
    """Allow ``nbytes`` of dynamic shared memory per block (needed above 48 KiB)."""
    d = _driver()
    attr = d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    # cuda.core lacks: a setter (Kernel.attributes is read-only): cuKernelSetAttribute on the Kernel's CUkernel
    _ok(
        d.cuKernelSetAttribute(attr, int(nbytes), kernel.handle, d.CUdevice(int(device_index))),
        what or "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
        exc,
    )


def driver_function(kernel):
    """The CUfunction of a cuda.core Kernel in the current context, for callers of the driver API."""
    d = _driver()
    # cuda.core lacks: a CUfunction (Kernel.handle is the context-independent CUkernel)
    return _ok(d.cuKernelGetFunction(kernel.handle), "cuKernelGetFunction")


def launch_config(grid, block, dynamic_smem: int = 0, cluster=(1, 1, 1)):
    """cuda.core LaunchConfig of a launch given in blocks (as cuLaunchKernelEx takes it): with a cluster, cuda.core
    counts the grid in clusters, so each grid dimension is divided by the cluster's."""
    core = _core()
    grid, block, cluster = (
        tuple(int(x) for x in grid),
        tuple(int(x) for x in block),
        tuple(int(x) for x in cluster),
    )
    if cluster == (1, 1, 1):
        return core.LaunchConfig(grid=grid, block=block, shmem_size=int(dynamic_smem))
    if any(g % c for g, c in zip(grid, cluster, strict=True)):
        raise ValueError(f"grid {list(grid)} is not a whole number of clusters {list(cluster)}")
    return core.LaunchConfig(
        grid=tuple(g // c for g, c in zip(grid, cluster, strict=True)),
        cluster=cluster,
        block=block,
        shmem_size=int(dynamic_smem),
    )


def kernel_args(values, types) -> tuple:
    """cuda.core launch arguments from (value, ctypes type) pairs: a pointer (``c_void_p``) as a Python int (cuda.core
    passes an int as a pointer-sized value), a scalar as an instance of its ctypes type (passed with that type's
    size), anything else (a TensorMapDescriptor, by value) as it is."""
    out = []
    for v, t in zip(values, types, strict=True):
        if t is None:
            out.append(v)
        elif t is ctypes.c_void_p:
            out.append(int(v))
        elif t in (ctypes.c_float, ctypes.c_double):
            out.append(t(float(v)))
        else:
            out.append(t(int(v)))
    return tuple(out)


def launch(kernel, config, args: tuple, stream=0, what: str = "cuLaunchKernel", exc=RuntimeError) -> None:
    """One launch of a cuda.core Kernel (``args`` from :func:`kernel_args`) on ``stream``."""
    core = _core()
    _call(what, core.launch, _stream(stream), config, kernel, *args, exc=exc)


class EventTimer:
    """Two timing CUDA events (cuda.core) around work queued on a stream; :meth:`ms` is the time between them."""

    def __init__(self, stream=0):
        core = _core()
        self.stream = _stream(stream)
        opts = core.EventOptions(timing_enabled=True)
        dev = core.Device()
        self.start = _call("cuEventCreate", dev.create_event, options=opts)
        self.end = _call("cuEventCreate", dev.create_event, options=opts)

    def __enter__(self) -> EventTimer:
        _call("cuEventRecord", self.stream.record, self.start)
        return self

    def __exit__(self, *exc) -> None:
        _call("cuEventRecord", self.stream.record, self.end)

    def ms(self) -> float:
        _call("cuEventSynchronize", self.end.sync)
        return float(_call("cuEventElapsedTime", lambda: self.end - self.start))

    def close(self) -> None:
        for e in (self.start, self.end):
            try:
                e.close()
            except Exception:  # pragma: no cover - best effort
                pass


@dataclass
class Mismatch:
    index: tuple[int, ...]
    expected: float
    got: float
    count: int
    text: str = ""  # a mismatch that is not one element's value (e.g. bytes written outside the array)

    def to_dict(self) -> dict:
        d = {"index": list(self.index), "expected": self.expected, "got": self.got, "count": self.count}
        return {**d, "text": self.text} if self.text else d

    def describe(self) -> str:
        if self.text:
            return self.text
        return f"first bad index {tuple(self.index)}: expected {self.expected!r}, got {self.got!r} ({self.count} bad elements)"


@dataclass
class CheckResult:
    correct: bool
    max_rel_error: float
    tolerance: float
    mismatch: Mismatch | None = None

    def to_dict(self) -> dict:
        return {
            "correct": self.correct,
            "max_rel_error": self.max_rel_error,
            "tolerance": self.tolerance,
            "first_mismatch": self.mismatch.to_dict() if self.mismatch else None,
        }


@dataclass
class Timing:
    median_ms: float
    min_ms: float
    max_ms: float
    runs: int
    warmup_runs: int
    l2_flush_bytes: int = 0  # written before every timed launch (outside the events) so L2 starts cold

    def to_dict(self) -> dict:
        return {
            "median_ms": self.median_ms,
            "min_ms": self.min_ms,
            "max_ms": self.max_ms,
            "runs": self.runs,
            "warmup_runs": self.warmup_runs,
            "l2_flush_bytes": self.l2_flush_bytes,
        }


def compare(ref: np.ndarray, got: np.ndarray, tolerance: float, *, exact: bool = False) -> CheckResult:
    """Max error relative to max |ref|; exact (bitwise) for copies (a family with exact = True)."""
    if got.shape != ref.shape:
        raise ValueError(f"shape {got.shape} != reference {ref.shape}")
    if exact:
        a = np.ascontiguousarray(got).view(np.uint8).reshape(*got.shape, -1)
        b = np.ascontiguousarray(ref.astype(got.dtype, copy=False)).view(np.uint8).reshape(*ref.shape, -1)
        bad = (a != b).any(axis=-1)
        err = 0.0 if not bad.any() else float("inf")
    else:
        g = got.astype(np.float64)
        scale = max(float(np.abs(ref).max()) if ref.size else 0.0, 1e-30)
        with np.errstate(invalid="ignore"):
            rel = np.abs(g - ref) / scale
        finite = np.isfinite(g)
        bad = ~finite | (rel > tolerance)
        err = float(rel[finite].max()) if finite.all() and rel.size else (float("inf") if rel.size else 0.0)
    if not bad.any():
        return CheckResult(True, err, tolerance)
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    exp, val = ref[idx], got[idx]
    to_py = (lambda x: float(x)) if got.dtype.kind == "f" else (lambda x: int(x))  # noqa: E731
    return CheckResult(False, err, tolerance, Mismatch(idx, to_py(exp), to_py(val), int(bad.sum())))


def _ctype(decl_type: str):
    t = decl_type.replace("const ", "").strip()
    if t.endswith("*"):
        return ctypes.c_void_p
    found = C_TYPES[t]  # KeyError: a kernel parameter type the table does not know
    return getattr(ctypes, DTYPES[found[0]].ctypes)


def compile_config(cfg, *, source: str | None = None):
    """NVRTC-compile the generated body of ``cfg`` (exactly what ``generate`` writes, minus the header
    comment); ``source`` replaces it (A/B experiments on a modified kernel)."""
    from smemtile.codegen.render import body
    from smemtile.families import FAMILIES
    from smemtile.gpu.nvrtc import compile_cubin

    fam = FAMILIES[cfg.family]
    return compile_cubin(
        source if source is not None else body(cfg),
        [fam.name_expression(cfg)],
        cfg.arch.name,
        filename=f"{fam.name}.cu",
    )


def _tma_dtype(dtype: str) -> str:
    """CU_TENSOR_MAP_DATA_TYPE_* of a spec dtype: the one table the generated helper uses too (fp8 as UINT8)."""
    return TMA_DTYPES[dtype]


_TMA_BYTES = {  # bytes of one element of each CU_TENSOR_MAP_DATA_TYPE_* the table uses
    "UINT8": 1, "UINT16": 2, "UINT32": 4, "INT32": 4, "UINT64": 8, "INT64": 8,
    "FLOAT16": 2, "BFLOAT16": 2, "FLOAT32": 4, "TFLOAT32": 4, "FLOAT64": 8,
}  # fmt: skip


class _ArrayAt:
    """A device array at a raw address, seen through ``__cuda_array_interface__`` (v3: shape outermost first,
    strides in bytes): how cuda.core's StridedMemoryView (and so its tensor maps) takes memory it did not make."""

    def __init__(self, address: int, shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int):
        self.__cuda_array_interface__ = {
            "shape": tuple(int(x) for x in shape),
            "strides": tuple(int(x) for x in strides),
            "typestr": f"<u{itemsize}",
            "data": (int(address), False),
            "version": 3,
        }


def _tensor_map_enums():
    try:
        from cuda.core import _tensor_map as tm  # the enums are not re-exported at the top of cuda.core 1.2
    except ImportError:  # pragma: no cover - a later layout
        import cuda.core as tm
    return tm


def _encode_tensor_map(t, address: int, spare: int | None = None):
    """A cuda.core TensorMapDescriptor for one planned map (smemtile.families.base.TensorMapPlan) over
    ``address``: what cuTensorMapEncodeTiled gives for the plan's dims (innermost first), byte strides, box,
    swizzle, element strides 1, no interleave, L2 promotion 256B, no OOB fill. An inactive map (the kernel does
    not use it) is a valid 16-byte map over ``spare`` (a 256-byte-aligned scratch buffer): cuda.core cannot make
    the zero-filled CUtensorMap the driver API passed, and no kernel reads it."""
    from cuda.core.utils import StridedMemoryView

    tm = _tensor_map_enums()
    dtype = "UINT8" if not t.active else _tma_dtype(t.dtype)
    size = _TMA_BYTES[dtype]
    if t.active:
        dims, strides, box = tuple(t.dims), (size, *t.strides), tuple(t.box)
    else:
        dims, strides, box, address = (16,), (1,), (16,), int(spare)
    # cuda.core's views are row-major (outermost dimension first), the driver's lists innermost first;
    # stream_ptr -1: no synchronisation (None is refused: "stream=None is ambiguous with view()", H200 run)
    array = _ArrayAt(address, dims[::-1], strides[::-1], size)
    make = getattr(StridedMemoryView, "from_cuda_array_interface", None)
    view = _call(
        f"viewing {t.name}'s array",
        (lambda: make(array, stream_ptr=-1))
        if make is not None
        else (lambda: StridedMemoryView(array, stream_ptr=-1)),
    )
    swizzle = "NONE" if t.swizzle.upper() == "NONE" or not t.active else f"SWIZZLE_{t.swizzle.upper()}"
    encode = getattr(view, "as_tensor_map", None)
    if encode is None:  # a cuda.core before StridedMemoryView.as_tensor_map: the classmethod it wraps
        encode = lambda *a, **kw: _core().TensorMapDescriptor._from_tiled(view, *a, **kw)  # noqa: E731
    return _call(
        f"cuTensorMapEncodeTiled({t.name}: dims {list(t.dims)}, strides {list(t.strides)}, box "
        f"{list(t.box)}, {t.swizzle})",
        encode,
        box[::-1],
        data_type=getattr(tm.TensorMapDataType, dtype),
        interleave=tm.TensorMapInterleave.NONE,
        swizzle=getattr(tm.TensorMapSwizzle, swizzle),
        l2_promotion=tm.TensorMapL2Promotion.L2_256B,
        oob_fill=tm.TensorMapOOBFill.NONE,
    )


class LoadedKernel:
    """A family configuration compiled for the current device, loaded, with its driver-side numbers.

    Launches follow the family's launch plan (:meth:`Family.launch`), step by step, exactly as the generated
    host helper does: the same grid, block, dynamic shared memory and arguments. ``kernel`` is the main kernel
    (a cuda.core Kernel), ``module`` the loaded cubin (:class:`Module`)."""

    def __init__(self, cfg, device: Device, *, source: str | None = None):
        from smemtile.families import FAMILIES

        self.cfg, self.device = cfg, device
        self.fam = FAMILIES[cfg.family]
        self.expr = self.fam.name_expression(cfg)
        self.compiled = compile_config(cfg, source=source)
        self.module = Module(self.compiled.cubin, what="cuModuleLoadData")
        self.kernel = self.module.kernel(self.compiled.lowered[self.expr])
        self.shape = self.fam.launch(cfg)
        self._funcs = {s.kernel: self.module.kernel(s.kernel) for s in self.shape.steps if not s.main}
        attrs = kernel_attributes(self.kernel)
        self.registers = attrs["registers"]
        self.static_smem = attrs["static_smem"]
        self.local_bytes = attrs["local_bytes"]
        self.threads = self.shape.threads
        dyn = self.shape.dynamic_smem_bytes
        if dyn > cfg.arch.static_smem_max:
            set_max_dynamic_smem(self.kernel, dyn, device.index)
        occ = self.kernel.occupancy
        self.driver_blocks = int(
            _call("cuOccupancy", occ.max_active_blocks_per_multiprocessor, self.threads, dyn)
        )
        # clusters of the whole GPU that can be resident at once (cuOccupancyMaxActiveClusters; without clusters
        # every block is its own cluster: blocks per SM x SMs)
        self.driver_clusters = self.driver_blocks * device.sm_count
        if self.shape.cluster_size > 1:
            main = next(s for s in self.shape.steps if s.main)
            config = launch_config(main.grid, main.block, main.dynamic_smem_bytes, main.cluster)
            self.driver_clusters = int(
                _call("cuOccupancyMaxActiveClusters", occ.max_active_clusters, config, stream=_stream())
            )
        self._buffers: dict[str, DeviceBuffer] = {}
        self._workspace: DeviceBuffer | None = None
        self._spare: DeviceBuffer | None = None
        self._maps: dict = {}
        self._addrs: dict[str, int] = {}
        self._launches: list | None = None
        self._layouts: dict = {}

    @property
    def func(self):
        """The main kernel as a driver-API CUfunction of the current context, for callers of the driver API (e.g.
        bench/bench_wgmma.py's cuOccupancyMaxActiveClusters sweep)."""
        return driver_function(self.kernel)

    # ---- ptxas (compile-time) numbers, for cross-checking -------------------------------------------------
    @property
    def ptxas(self):
        return self.compiled.resources.get(self.expr)

    def model_occupancy(self):
        from smemtile.model.occupancy import occupancy

        return occupancy(
            self.cfg.arch, self.threads, self.registers, self.static_smem, self.shape.dynamic_smem_bytes
        )

    # ---- inputs and launch -------------------------------------------------------------------------------
    def prepare(self, inputs: dict[str, np.ndarray], offsets: dict[str, int] | None = None) -> None:
        """Lay the arrays out as the user has them and bind the plan's arguments: each array in its own
        allocation with its leading dimension from the problem (``lda``, ``ld_in``, ...) and, from ``offsets``,
        that many elements after the allocation's start (a sub-view at an odd address). The arrays the kernel
        reads hold the family's make_inputs; every other byte (between rows, before the offset, whole output
        arrays) is poison, so an element never written, or one read that must not be, shows up as NaN."""
        import numpy as _np

        from smemtile.families.base import NUMPY_DTYPES, array_layout

        for b in self._buffers.values():
            b.free()
        fam, cfg = self.fam, self.cfg
        bufs: dict[str, DeviceBuffer] = {}
        self._layouts = {}
        for arg in fam.host_args:
            if not arg.array:
                continue
            lay = array_layout(fam, cfg, arg, int((offsets or {}).get(arg.name, 0)))
            dtype = _np.dtype(NUMPY_DTYPES[fam.array_dtype(cfg, arg)])
            self._layouts[arg.name] = (lay, dtype)
            if arg.role == "out" or not fam.reads(cfg, arg.name):
                bufs[arg.name] = DeviceBuffer(lay.elems * dtype.itemsize)
                bufs[arg.name].poison()
            else:
                host = _np.ascontiguousarray(inputs[arg.name], dtype=dtype)
                shape = fam.array_shape(cfg, arg)
                if host.shape != shape:
                    raise ValueError(f"{arg.name}: input shape {host.shape}, the plan expects {shape}")
                bufs[arg.name] = DeviceBuffer.from_array(lay.scatter(host))
        self._buffers = bufs
        self.bind(
            {
                name: b.addr + self._layouts[name][0].offset * self._layouts[name][1].itemsize
                for name, b in bufs.items()
            }
        )

    def bind(self, pointers: dict[str, int]) -> None:
        """Bind the plan's arguments to device arrays by name (``prepare`` binds its own; a benchmark may pass
        arrays it allocated, e.g. torch tensors' ``data_ptr()``): the plan evaluated for these pointers'
        alignment (as the generated helper evaluates it), tensor maps encoded, steps ready to launch."""
        from smemtile.families.base import pointer_align

        fam, cfg = self.fam, self.cfg
        addrs = {name: int(p) for name, p in pointers.items()}
        self.shape = fam.launch(cfg, align={name: pointer_align(a) for name, a in addrs.items()})
        need = self.shape.workspace_bytes
        if need and (self._workspace is None or self._workspace.nbytes < need):
            if self._workspace is not None:
                self._workspace.free()
            self._workspace = DeviceBuffer(need)  # the plan's workspace: this kernel object owns it
        for w in self.shape.workspace:  # a region of the workspace, or (not in use) the user's array
            addrs[w.name] = self._workspace.addr + w.offset if w.active else addrs.get(w.fallback, 0)
        self._addrs = dict(addrs)  # every bound argument's device address (arrays and workspace regions)
        if any(not t.active for t in self.shape.tensor_maps) and self._spare is None:
            self._spare = DeviceBuffer(256)  # what an inactive map points at (never read)
        spare = self._spare.addr if self._spare is not None else None
        self._maps = {t.name: _encode_tensor_map(t, addrs[t.array], spare) for t in self.shape.tensor_maps}
        scalars = {a.name: a for a in fam.host_args if not a.array}
        launches = []
        for step in self.shape.steps:
            vals, types = [], []
            for value, ctype in step.args:
                if isinstance(value, str) and value in self._maps:  # a tensor map, passed by value
                    vals.append(self._maps[value])
                    types.append(None)
                    continue
                if isinstance(value, str) and value in addrs:
                    vals.append(addrs[value])
                elif isinstance(value, str) and value in scalars:
                    vals.append(float(cfg.problem[value]))
                else:
                    vals.append(int(value))
                types.append(_ctype(ctype))
            if not step.main and step.kernel not in self._funcs:  # a step this layout's plan adds
                self._funcs[step.kernel] = self.module.kernel(step.kernel)
            kernel = self.kernel if step.main else self._funcs[step.kernel]
            config = launch_config(step.grid, step.block, step.dynamic_smem_bytes, step.cluster)
            launches.append((kernel, step, kernel_args(vals, types), config))
        self._launches = launches

    def launch(self, stream=0, only=None) -> None:
        """Every step of the plan, in order, on ``stream`` (``only``: a predicate on the step, e.g. the repacking
        steps alone)."""
        assert self._launches is not None, "prepare() first"
        for kernel, step, args, config in self._launches:
            if only is None or only(step):
                launch(kernel, config, args, stream, f"cuLaunchKernel({step.kernel})")

    def _launch_config(self, step, stream):
        """The driver API's CUlaunchConfig of ``step`` (default: the main kernel) with its cluster size, for
        callers of the driver API (bench/bench_wgmma.py's cluster sweep); launches here use cuda.core."""
        # cuda.core lacks: a CUlaunchConfig for driver-API callers (LaunchConfig is its own type)
        d = _driver()
        step = step if step is not None else next(s for s in self.shape.steps if s.main)
        cfg = d.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = step.grid
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = step.block
        cfg.sharedMemBytes = step.dynamic_smem_bytes
        cfg.hStream = d.CUstream(stream)
        attr = d.CUlaunchAttribute()
        attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = step.cluster
        cfg.attrs = [attr]
        cfg.numAttrs = 1
        return cfg

    def synchronize(self) -> None:
        self.device.synchronize("cuCtxSynchronize (the kernel faulted?)")

    def output(self, arg_name: str | None = None) -> np.ndarray:
        """The output array as the kernel left it (logical shape, taken out of the user's layout)."""
        arg = (
            self.fam.output_arg()
            if arg_name is None
            else next(a for a in self.fam.host_args if a.name == arg_name)
        )
        lay, dtype = self._layouts[arg.name]
        flat = self._buffers[arg.name].to_array((lay.elems,), dtype)
        self._last_flat = (arg.name, lay, flat)
        return np.ascontiguousarray(lay.view(flat)).reshape(self.fam.array_shape(self.cfg, arg))

    def wrote_outside(self) -> bool:
        """After :meth:`output`: whether the kernel changed a byte of the output's allocation outside its
        logical elements (between rows, before the offset, after the last row)."""
        _, lay, flat = self._last_flat
        return not lay.outside_untouched(flat)

    def check_layout(
        self, inputs: dict[str, np.ndarray], reference: np.ndarray, cfg, offsets: dict[str, int]
    ) -> CheckResult:
        """:meth:`check` with the same compiled kernel on another layout of the same problem (``cfg``: the
        problem with other leading dimensions, e.g. smemtile.families.base.subview_case); the dense layout is
        bound again afterwards is up to the caller (:meth:`prepare`)."""
        if self.fam.name_expression(cfg) != self.expr:
            raise ValueError(f"{self.fam.name_expression(cfg)} is not the loaded {self.expr}")
        own = self.cfg
        self.cfg = cfg
        try:
            return self.check(inputs, reference, offsets)
        finally:
            self.cfg = own

    def check(
        self, inputs: dict[str, np.ndarray], reference: np.ndarray, offsets: dict[str, int] | None = None
    ) -> CheckResult:
        """One run of the plan on ``inputs`` laid out as the user has them (``offsets``: a sub-view), outputs
        poisoned, compared with ``reference``; bytes of the output's allocation outside its elements must stay
        untouched."""
        self.prepare(inputs, offsets)
        self.launch()
        self.synchronize()
        got = self.fam.decode_output(self.cfg, self.output())
        res = compare(reference, got, self.fam.tolerance_for(self.cfg), exact=self.fam.exact)
        if res.correct and self.wrote_outside():
            return CheckResult(
                False,
                res.max_rel_error,
                res.tolerance,
                Mismatch((), 0.0, 0.0, 1, "wrote outside the output's rows (between rows or past the end)"),
            )
        return res

    def time(
        self,
        *,
        warmup_s: float = 0.2,
        target_s: float = 1.0,
        min_runs: int = 20,
        max_runs: int = 500,
        flush_l2: bool = True,
    ) -> Timing:
        """CUDA events around each launch (the legacy default stream) after a warm-up; median of enough runs.

        With ``flush_l2`` a scratch buffer of twice the L2 size is written before every timed launch (outside
        the events), so each run starts with the inputs out of L2, as in a real pipeline."""
        timer = EventTimer()
        l2 = self.device.l2_bytes or 0
        scratch = DeviceBuffer(2 * l2) if flush_l2 and l2 else None
        try:
            warm = 0
            t0 = time.perf_counter()
            while warm < 3 or time.perf_counter() - t0 < warmup_s:
                self.launch()
                warm += 1
                if warm % 8 == 0:
                    self.synchronize()
            self.synchronize()
            est_s = max((time.perf_counter() - t0) / warm, 1e-6)
            runs = int(min(max(min_runs, target_s / est_s), max_runs))
            ts = []
            for i in range(runs):
                if scratch is not None:
                    scratch.fill_async(i & 0xFF)
                with timer:
                    self.launch()
                ts.append(timer.ms())
        finally:
            timer.close()
            if scratch is not None:
                scratch.free()
        return Timing(
            statistics.median(ts), min(ts), max(ts), len(ts), warm, scratch.nbytes if scratch else 0
        )

    def close(self) -> None:
        for b in self._buffers.values():
            b.free()
        self._buffers = {}
        for b in (self._workspace, self._spare):
            if b is not None:
                b.free()
        self._workspace = self._spare = None
        self._maps, self._launches, self._funcs = {}, None, {}
        self.kernel = None  # no Kernel left: cuda.core unloads the cubin's library
        if self.module is not None:
            try:
                self.module.close()
            finally:
                self.module = None


def check_config(cfg, dev, rng) -> CheckResult:
    """Build ``cfg`` on ``dev``, run its plan once on the family's random inputs (drawn from ``rng``) with poisoned
    outputs, and compare with the family's float64 reference (what ``verify`` checks)."""
    from smemtile.families import FAMILIES

    fam = FAMILIES[cfg.family]
    inputs = fam.make_inputs(cfg, rng)
    k = LoadedKernel(cfg, dev)
    try:
        return k.check(inputs, fam.reference(cfg, inputs))
    finally:
        k.close()
