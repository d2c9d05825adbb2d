"""Run a generated kernel on the GPU: detect the device, load the cubin, read the driver's numbers, launch,
check against the family's float64 reference and time it. ``cuda.bindings.driver`` is imported lazily.

Only the driver API is used (no torch / cupy): memory with cuMemAlloc, copies with cuMemcpyHtoD/DtoH, timing
with CUDA events on the null stream. Registers, static shared memory and local memory come from the loaded
function's attributes (NVRTC on the H200 machine may return an empty ptxas log on a cached compile).

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

from smemtile.errors import CompileError, NoDevice
from smemtile.model.arch import FP32_LANES_PER_SM
from smemtile.model.dtypes import C_TYPES, DTYPES, TMA_DTYPES


def _driver():
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


@dataclass(frozen=True)
class Device:
    index: int
    name: str
    cc: tuple[int, int]
    arch_name: str  # sm_XY
    sm_count: int
    context: Any = field(repr=False, compare=False)
    clock_khz: int | None = None  # SM clock the driver reports (the boost clock)
    mem_clock_khz: int | None = None
    bus_width_bits: int | None = None
    l2_bytes: int | None = None

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


def _mhz(khz: int | None) -> float | None:
    return None if khz is None else khz / 1e3


def device_count() -> int:
    """Number of CUDA devices; raises NoDevice("no CUDA GPU: ...") when there is none or no driver."""
    driver = _driver()
    try:
        res = driver.cuInit(0)
    except Exception as e:  # the bindings raise when libcuda cannot be loaded
        raise NoDevice(f"no CUDA GPU: no CUDA driver ({e.__class__.__name__}: {e})") from None
    err = res[0] if isinstance(res, tuple) else res
    if int(err) != 0:
        raise NoDevice(f"no CUDA GPU: cuInit failed ({_err_name(driver, err)})")
    count = _ok(driver.cuDeviceGetCount(), "cuDeviceGetCount", NoDevice)
    if not count:
        raise NoDevice("no CUDA GPU: the driver reports 0 devices")
    return int(count)


def open_device(index: int = 0) -> Device:
    """Make device ``index``'s primary context current and describe the device."""
    driver = _driver()
    count = device_count()
    if not 0 <= index < count:
        raise NoDevice(f"no CUDA GPU: device {index} requested but {count} found")
    dev = _ok(driver.cuDeviceGet(index), "cuDeviceGet", NoDevice)
    ctx = _ok(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain", NoDevice)
    _ok(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent", NoDevice)
    attr = driver.CUdevice_attribute

    def get(name: str) -> int:
        return int(_ok(driver.cuDeviceGetAttribute(getattr(attr, f"CU_DEVICE_ATTRIBUTE_{name}"), dev), name))

    def maybe(name: str) -> int | None:  # attributes newer drivers may drop (the clocks are deprecated)
        try:
            v = get(name)
        except (AttributeError, RuntimeError):
            return None
        return v or None

    major, minor = get("COMPUTE_CAPABILITY_MAJOR"), get("COMPUTE_CAPABILITY_MINOR")
    raw = _ok(driver.cuDeviceGetName(256, dev), "cuDeviceGetName")
    name = raw.split(b"\x00")[0].decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    return Device(
        index,
        name,
        (major, minor),
        f"sm_{major}{minor}",
        get("MULTIPROCESSOR_COUNT"),
        ctx,
        maybe("CLOCK_RATE"),
        maybe("MEMORY_CLOCK_RATE"),
        maybe("GLOBAL_MEMORY_BUS_WIDTH"),
        maybe("L2_CACHE_SIZE"),
    )


class DeviceBuffer:
    """cuMemAlloc'd memory that frees itself."""

    def __init__(self, nbytes: int):
        self.nbytes = int(max(nbytes, 1))
        self.ptr = _ok(_driver().cuMemAlloc(self.nbytes), f"cuMemAlloc({self.nbytes})")

    @classmethod
    def from_array(cls, a: np.ndarray) -> DeviceBuffer:
        a = np.ascontiguousarray(a)
        buf = cls(a.nbytes)
        _ok(_driver().cuMemcpyHtoD(buf.ptr, a.ctypes.data, a.nbytes), "cuMemcpyHtoD")
        return buf

    def poison(self) -> None:
        """Fill with 0xFF bytes: NaN in f32, f16 and bf16, so an element never written shows up."""
        _ok(_driver().cuMemsetD8(self.ptr, 0xFF, self.nbytes), "cuMemsetD8")

    def to_array(self, shape, dtype) -> np.ndarray:
        out = np.empty(shape, dtype=dtype)
        _ok(_driver().cuMemcpyDtoH(out.ctypes.data, self.ptr, out.nbytes), "cuMemcpyDtoH")
        return out

    @property
    def addr(self) -> int:
        return int(self.ptr)

    def free(self) -> None:
        if self.ptr is not None:
            try:
                _driver().cuMemFree(self.ptr)
            finally:
                self.ptr = None

    def __del__(self):  # pragma: no cover - best effort
        try:
            self.free()
        except Exception:
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


def _encode_tensor_map(t, address: int):
    """cuTensorMapEncodeTiled for one planned map (smemtile.families.base.TensorMapPlan) over ``address``; an
    inactive map is a zero-filled CUtensorMap (the kernel does not use it)."""
    d = _driver()
    if not t.active:
        return d.CUtensorMap()
    u64, u32 = d.cuuint64_t, d.cuuint32_t
    res = d.cuTensorMapEncodeTiled(
        getattr(d.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{_tma_dtype(t.dtype)}"),
        len(t.dims),
        address,
        [u64(x) for x in t.dims],
        [u64(x) for x in t.strides],
        [u32(x) for x in t.box],
        [u32(1)] * len(t.dims),
        d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(d.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{t.swizzle.upper()}"),
        d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    return _ok(
        res,
        f"cuTensorMapEncodeTiled({t.name}: dims {list(t.dims)}, strides {list(t.strides)}, box "
        f"{list(t.box)}, {t.swizzle})",
    )


class LoadedKernel:
    """A family configuration compiled for the current device, loaded, with its driver-side numbers.

    Launches follow the family's launch plan (:meth:`Family.launch`), step by step, exactly as the generated
    host helper does: the same grid, block, dynamic shared memory and arguments."""

    def __init__(self, cfg, device: Device, *, source: str | None = None):
        from smemtile.families import FAMILIES

        d = _driver()
        self.cfg, self.device = cfg, device
        self.fam = FAMILIES[cfg.family]
        self.expr = self.fam.name_expression(cfg)
        self.compiled = compile_config(cfg, source=source)
        self.module = _ok(d.cuModuleLoadData(self.compiled.cubin), "cuModuleLoadData", CompileError)
        lowered = self.compiled.lowered[self.expr]
        self.func = _ok(
            d.cuModuleGetFunction(self.module, lowered.encode()), "cuModuleGetFunction", CompileError
        )
        self.shape = self.fam.launch(cfg)
        self._funcs = {}
        for step in self.shape.steps:
            if not step.main:
                self._funcs[step.kernel] = _ok(
                    d.cuModuleGetFunction(self.module, step.kernel.encode()),
                    f"cuModuleGetFunction({step.kernel})",
                    CompileError,
                )
        a = d.CUfunction_attribute
        self.registers = int(_ok(d.cuFuncGetAttribute(a.CU_FUNC_ATTRIBUTE_NUM_REGS, self.func), "NUM_REGS"))
        self.static_smem = int(
            _ok(d.cuFuncGetAttribute(a.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, self.func), "SHARED")
        )
        self.local_bytes = int(
            _ok(d.cuFuncGetAttribute(a.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, self.func), "LOCAL")
        )
        self.threads = self.shape.threads
        dyn = self.shape.dynamic_smem_bytes
        if dyn > cfg.arch.static_smem_max:
            attr = a.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            _ok(
                d.cuFuncSetAttribute(self.func, attr, dyn),
                "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
            )
        self.driver_blocks = int(
            _ok(d.cuOccupancyMaxActiveBlocksPerMultiprocessor(self.func, self.threads, dyn), "cuOccupancy")
        )
        # clusters of the whole GPU that can be resident at once (cuOccupancyMaxActiveClusters; without clusters
        # every block is its own cluster: blocks per SM x SMs)
        self.driver_clusters = self.driver_blocks * device.sm_count
        if self.shape.cluster_size > 1:
            self.driver_clusters = int(
                _ok(
                    d.cuOccupancyMaxActiveClusters(self.func, self._launch_config(None, 0)),
                    "cuOccupancyMaxActiveClusters",
                )
            )
        self._buffers: dict[str, DeviceBuffer] = {}
        self._workspace: DeviceBuffer | None = None
        self._maps: dict = {}
        self._launches: list | None = None
        self._layouts: dict = {}

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
        self._maps = {t.name: _encode_tensor_map(t, addrs[t.array]) for t in self.shape.tensor_maps}
        scalars = {a.name: a for a in fam.host_args if not a.array}
        launches = []
        for step in self.shape.steps:
            vals, types = [], []
            for value, ctype in step.args:
                if isinstance(value, str) and value in self._maps:  # a CUtensorMap, passed by value
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
            func = self.func if step.main else self._funcs[step.kernel]
            launches.append((func, step, tuple(vals), tuple(types)))
        self._launches = launches

    def launch(self, stream=0) -> None:
        """Every step of the plan, in order, on ``stream``."""
        d = _driver()
        assert self._launches is not None, "prepare() first"
        for func, step, vals, types in self._launches:
            if step.cluster != (1, 1, 1):  # a cluster launch needs the launch attribute: cuLaunchKernelEx
                res = d.cuLaunchKernelEx(self._launch_config(step, stream), func, (vals, types), 0)
            else:
                res = d.cuLaunchKernel(
                    func,
                    *step.grid,
                    *step.block,
                    step.dynamic_smem_bytes,
                    d.CUstream(stream),
                    (vals, types),
                    0,
                )
            _ok((res[0],) if isinstance(res, tuple) else (res,), f"cuLaunchKernel({step.kernel})")

    def _launch_config(self, step, stream):
        """CUlaunchConfig of ``step`` (the main kernel's grid, block and shared memory) with its cluster size."""
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
        _ok(_driver().cuCtxSynchronize(), "cuCtxSynchronize (the kernel faulted?)")

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
        """CUDA events around each launch (null stream) after a warm-up; median of enough runs.

        With ``flush_l2`` a scratch buffer of twice the L2 size is written before every timed launch (outside
        the events), so each run starts with the inputs out of L2, as in a real pipeline."""
        d = _driver()
        start = _ok(d.cuEventCreate(0), "cuEventCreate")
        end = _ok(d.cuEventCreate(0), "cuEventCreate")
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
                    _ok(
                        d.cuMemsetD8Async(scratch.ptr, i & 0xFF, scratch.nbytes, d.CUstream(0)),
                        "cuMemsetD8Async",
                    )
                _ok(d.cuEventRecord(start, d.CUstream(0)), "cuEventRecord")
                self.launch()
                _ok(d.cuEventRecord(end, d.CUstream(0)), "cuEventRecord")
                _ok(d.cuEventSynchronize(end), "cuEventSynchronize")
                ts.append(float(_ok(d.cuEventElapsedTime(start, end), "cuEventElapsedTime")))
        finally:
            d.cuEventDestroy(start)
            d.cuEventDestroy(end)
            if scratch is not None:
                scratch.free()
        return Timing(
            statistics.median(ts), min(ts), max(ts), len(ts), warm, scratch.nbytes if scratch else 0
        )

    def close(self) -> None:
        for b in self._buffers.values():
            b.free()
        self._buffers = {}
        if self._workspace is not None:
            self._workspace.free()
            self._workspace = None
        if self.module is not None:
            try:
                _driver().cuModuleUnload(self.module)
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
