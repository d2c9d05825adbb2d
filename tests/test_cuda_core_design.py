"""Issue 31 item 4: smemtile/gpu/ goes through cuda.core; cuda.bindings.driver only where cuda.core lacks the call.

CPU tests: the source holds the design (every remaining driver call is one of the listed exceptions and says what
cuda.core lacks), nothing imports CUDA before a GPU is used, and the argument packing and launch geometry are
what cuda.core expects (its real ParamHolder packs the arguments here; no GPU needed).
"""

from __future__ import annotations

import ctypes
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
GPU = sorted((ROOT / "smemtile" / "gpu").glob("*.py"))

# The driver-API calls cuda.core 1.2 has no counterpart for (each call site says so in a comment).
DRIVER_EXCEPTIONS = {
    "cuGetErrorName",  # names the error of the calls below (run._ok)
    "cuLibraryLoadData",  # PTX with JIT options (-lineinfo): ObjectCode.from_ptx takes none
    "cuLibraryGetKernel",  # a kernel of that library
    "cuLibraryUnload",
    "cuKernelSetAttribute",  # Kernel.attributes is read-only: the dynamic shared memory limit
    "cuKernelGetFunction",  # a CUfunction for driver-API callers (benchmarks)
    "cuDriverGetVersion",  # the fallback where cuda.core.system has no driver version
}
_CALL = re.compile(r"(?:\bd|\bdriver|_driver\(\))\.(cu[A-Z]\w*)\(")


def _calls() -> dict[str, list[tuple[str, int, str]]]:
    out: dict[str, list[tuple[str, int, str]]] = {}
    for f in GPU:
        lines = f.read_text().splitlines()
        for i, line in enumerate(lines):
            for m in _CALL.finditer(line):
                out.setdefault(m.group(1), []).append((f.name, i, "\n".join(lines[max(0, i - 8) : i + 1])))
    return out


def test_gpu_modules_call_the_driver_api_only_where_cuda_core_lacks_the_call():
    calls = _calls()
    assert set(calls) <= DRIVER_EXCEPTIONS, sorted(set(calls) - DRIVER_EXCEPTIONS)
    # what cuda.core does is not hand-written any more (the calls the old run.py, inspect.py and microkernel.py made)
    for gone in ("cuMemAlloc", "cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemsetD8", "cuModuleLoadData", "cuLaunchKernel",
                 "cuLaunchKernelEx", "cuEventCreate", "cuEventElapsedTime", "cuFuncGetAttribute", "cuInit",
                 "cuOccupancyMaxActiveBlocksPerMultiprocessor", "cuOccupancyMaxActiveClusters", "cuCtxSynchronize",
                 "cuTensorMapEncodeTiled", "cuDeviceGetAttribute", "cuDevicePrimaryCtxRetain"):  # fmt: skip
        assert gone not in calls, (gone, calls.get(gone))
    # each remaining call says what cuda.core lacks, on its line or in the few lines above it
    for name, sites in calls.items():
        for file, line, context in sites:
            if name == "cuGetErrorName":  # the error text of a cuda.bindings result, not a feature
                continue
            assert "cuda.core lacks" in context, (
                f"{file}:{line + 1}: {name} without a 'cuda.core lacks' comment"
            )


def test_no_cuda_import_before_a_gpu_is_used():
    """Importing the GPU modules loads neither cuda.core nor cuda.bindings (they are imported where a GPU is
    used); nvrtc.py keeps cuda.bindings.nvrtc, imported lazily too."""
    code = (
        "import sys\n"
        "import smemtile, smemtile.gpu.run, smemtile.gpu.inspect, smemtile.gpu.tune, smemtile.gpu.device\n"
        "import smemtile.gpu.microkernel, smemtile.gpu.nvrtc, smemtile.gpu.ncu, smemtile.gpu.inspect_launch\n"
        "print(sorted(m for m in sys.modules if m.startswith('cuda')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
    for f in GPU:
        for line in f.read_text().splitlines():
            assert not re.match(r"(from cuda|import cuda)", line), (
                f"{f.name}: a top-level CUDA import: {line}"
            )


def test_nvrtc_stays_on_cuda_bindings_and_says_why():
    text = (ROOT / "smemtile" / "gpu" / "nvrtc.py").read_text()
    assert "from cuda.bindings import nvrtc" in text
    assert "cuda.core's Program" in text  # the module docstring gives the reasons


def test_launch_arguments_are_packed_as_cuda_core_passes_them():
    """smemtile.gpu.run.kernel_args through cuda.core's own ParamHolder: a pointer 8 bytes, each scalar with the
    size of its C type (a bare Python int would go as a pointer-sized value, a float as a double)."""
    handler = pytest.importorskip("cuda.core._kernel_arg_handler")
    from smemtile.gpu.run import kernel_args

    vals = [0x7F00_0000_1234, 3, 2.5, 7, 2**40 + 5, -1.25]
    types = [
        ctypes.c_void_p,
        ctypes.c_int32,
        ctypes.c_float,
        ctypes.c_uint16,
        ctypes.c_int64,
        ctypes.c_double,
    ]
    args = kernel_args(vals, types)
    holder = handler.ParamHolder(list(args))
    ptrs = (ctypes.c_void_p * len(args)).from_address(holder.ptr)
    sizes = [8, 4, 4, 2, 8, 8]
    got = [bytes((ctypes.c_ubyte * n).from_address(p)) for p, n in zip(ptrs, sizes, strict=True)]
    want = [
        (0x7F00_0000_1234).to_bytes(8, "little"),
        (3).to_bytes(4, "little"),
        np.float32(2.5).tobytes(),
        (7).to_bytes(2, "little"),
        (2**40 + 5).to_bytes(8, "little"),
        np.float64(-1.25).tobytes(),
    ]
    assert got == want
    marker = object()  # a tensor map (or any object with no ctypes type) goes through as it is
    assert kernel_args([marker], [None]) == (marker,)


def test_a_cluster_launch_counts_the_grid_in_clusters(monkeypatch):
    """cuda.core's LaunchConfig takes the grid in clusters when a cluster is given (cuLaunchKernelEx in blocks):
    launch_config divides, and refuses a grid that is not a whole number of clusters."""
    import smemtile.gpu.run as run

    seen = []

    class _Core:
        class LaunchConfig:
            def __init__(self, **kw):
                seen.append(kw)

    monkeypatch.setattr(run, "_core", lambda: _Core)
    run.launch_config((8, 3, 1), (384, 1, 1), 230464, (2, 1, 1))
    run.launch_config((8, 3, 1), (128, 1, 1), 0)
    assert seen == [
        {"grid": (4, 3, 1), "cluster": (2, 1, 1), "block": (384, 1, 1), "shmem_size": 230464},
        {"grid": (8, 3, 1), "block": (128, 1, 1), "shmem_size": 0},
    ]
    with pytest.raises(ValueError, match="whole number of clusters"):
        run.launch_config((3, 1, 1), (128, 1, 1), 0, (2, 1, 1))


def test_tensor_maps_are_described_as_cuda_core_reads_them(monkeypatch):
    """A planned map (dims innermost first, byte strides of dims 1.., box innermost first) becomes a row-major
    __cuda_array_interface__ view and as_tensor_map's row-major box with L2 promotion 256B; an inactive map a
    16-byte placeholder over the spare buffer."""
    pytest.importorskip("cuda.core.utils")
    import cuda.core.utils as cu

    import smemtile.gpu.run as run
    from smemtile.families.base import TensorMapPlan

    calls = []

    class _View:
        def __init__(self, obj):
            self.cai = obj.__cuda_array_interface__

        @classmethod
        def from_cuda_array_interface(cls, obj, stream_ptr=None):
            if stream_ptr is None:  # cuda.core 1.2.0 and 1.2.2 refuse it (the H200 run's first failure)
                raise BufferError("stream=None is ambiguous with view()")
            return cls(obj)

        def as_tensor_map(self, box, **kw):
            calls.append((self.cai, box, kw))
            return "map"

    monkeypatch.setattr(cu, "StridedMemoryView", _View)
    tm = run._tensor_map_enums()
    t = TensorMapPlan("tmA", "A", "bf16", (256, 512), (1024,), (64, 128), "128B", True)
    assert run._encode_tensor_map(t, 0x7000_0000_0000) == "map"
    cai, box, kw = calls[-1]
    assert cai["shape"] == (512, 256) and cai["strides"] == (1024, 2) and cai["typestr"] == "<u2"
    assert cai["data"] == (0x7000_0000_0000, False) and box == (128, 64)
    assert (
        kw["data_type"] == tm.TensorMapDataType.BFLOAT16 and kw["swizzle"] == tm.TensorMapSwizzle.SWIZZLE_128B
    )
    assert kw["l2_promotion"] == tm.TensorMapL2Promotion.L2_256B
    assert kw["interleave"] == tm.TensorMapInterleave.NONE and kw["oob_fill"] == tm.TensorMapOOBFill.NONE
    off = TensorMapPlan("tmC", "C", "f16", (512, 256), (1026,), (64, 64), "128B", False)
    run._encode_tensor_map(off, 0x7000_0000_0002, spare=0x7100_0000_0000)
    cai, box, kw = calls[-1]
    assert cai["shape"] == (16,) and cai["data"][0] == 0x7100_0000_0000 and box == (16,)
    assert kw["swizzle"] == tm.TensorMapSwizzle.NONE


def test_without_a_gpu_verify_still_says_no_cuda_gpu_and_exits_3():
    from tests.conftest import gpu_available

    if gpu_available():
        pytest.skip("a GPU answers here")
    out = subprocess.run(
        [sys.executable, "-m", "smemtile", "verify", "samples/transpose_32x32.yaml"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 3, (out.returncode, out.stderr)
    assert "smemtile: error: no CUDA GPU: " in out.stderr and len(out.stderr.strip().splitlines()) == 1


class _FakeCore:
    """The cuda.core surface LoadedKernel uses, over host bytearrays; launches are recorded, not run."""

    def __init__(self):
        self.mem: dict[int, bytearray] = {}
        self.top = 1 << 32
        self.launches: list = []
        self.cluster_configs: list = []
        core = self

        class Stream:
            def sync(self):
                pass

            def record(self, event):
                event.recorded += 1

        class Buffer:
            def __init__(self, ptr, size):
                self.handle, self.size = int(ptr), int(size)

            @staticmethod
            def from_handle(ptr, size):
                return Buffer(ptr, size)

            def copy_from(self, src, *, stream):
                assert src.size == self.size
                buf, off = core.at(self.handle)
                buf[off : off + self.size] = ctypes.string_at(src.handle, self.size)

            def copy_to(self, dst, *, stream):
                assert dst.size == self.size
                buf, off = core.at(self.handle)
                ctypes.memmove(dst.handle, bytes(buf[off : off + self.size]), self.size)

            def fill(self, value, *, stream):
                buf, off = core.at(self.handle)
                buf[off : off + self.size] = bytes([value]) * self.size

            def close(self):
                core.mem.pop(self.handle)

        class Event:
            recorded = 0

            def sync(self):
                pass

            def __sub__(self, other):
                return 0.25

            def close(self):
                pass

        class EventOptions:
            def __init__(self, timing_enabled=False):
                assert timing_enabled  # the events time

        class Device:
            device_id = 0

            def __init__(self, index=0):
                pass

            def allocate(self, n, *, stream):
                p = core.top
                core.top += -(-n // 256) * 256 + 256
                core.mem[p] = bytearray(b"\xab" * n)
                return Buffer(p, n)

            def sync(self):
                pass

            def create_event(self, options):
                return Event()

        class LaunchConfig:
            def __init__(self, **kw):
                self.kw = kw

        class Occupancy:
            def max_active_blocks_per_multiprocessor(self, threads, dynamic_smem):
                return 1

            def max_active_clusters(self, config, *, stream):
                core.cluster_configs.append(config.kw)
                return 66

        class Attributes:
            num_regs, shared_size_bytes, local_size_bytes = 168, 0, 0

        class Kernel:
            def __init__(self, name):
                self.name, self.attributes, self.occupancy, self.handle = name, Attributes(), Occupancy(), 1

        class ObjectCode:
            @staticmethod
            def from_cubin(data):
                assert isinstance(data, bytes) and data[:4] == b"\x7fELF"
                return ObjectCode()

            def get_kernel(self, name):
                return Kernel(name)

        self.Stream, self.Buffer, self.EventOptions, self.Device = Stream, Buffer, EventOptions, Device
        self.LaunchConfig, self.ObjectCode, self.LEGACY_DEFAULT_STREAM = LaunchConfig, ObjectCode, Stream()

    def at(self, ptr):
        for base, buf in self.mem.items():
            if base <= ptr < base + max(len(buf), 1):
                return buf, ptr - base
        raise AssertionError(f"no device memory at {ptr:#x}")

    def launch(self, stream, config, kernel, *args):
        self.launches.append((kernel.name, config.kw, args))


def test_loaded_kernel_runs_its_plan_through_cuda_core(monkeypatch):
    """A wgmma sub-view (odd leading dimensions, odd addresses: two repacking steps, a workspace, an inactive C
    map) built by NVRTC and run on a fake cuda.core: the steps in order, the cluster grid in clusters, the maps
    passed by value (the inactive one over the spare buffer), pointers as ints, scalars as ctypes; the output
    the kernel never wrote is poison; timing uses timing events; close frees every allocation."""
    pytest.importorskip("cuda.bindings.nvrtc")
    import cuda.core.utils as cu

    import smemtile.gpu.run as run
    from smemtile.families import FAMILIES, configure
    from smemtile.families.base import subview_case

    core = _FakeCore()
    monkeypatch.setattr(run, "_core", lambda: core)
    monkeypatch.setattr(run, "set_max_dynamic_smem", lambda kernel, nbytes, index, *a: seen.append(nbytes))
    seen: list = []

    class _View:
        def __init__(self, obj):
            self.cai = obj.__cuda_array_interface__

        @classmethod
        def from_cuda_array_interface(cls, obj, stream_ptr=None):
            if stream_ptr is None:  # cuda.core 1.2.0 and 1.2.2 refuse it (the H200 run's first failure)
                raise BufferError("stream=None is ambiguous with view()")
            return cls(obj)

        def as_tensor_map(self, box, **kw):
            return ("map", self.cai["shape"], self.cai["data"][0], box)

    monkeypatch.setattr(cu, "StridedMemoryView", _View)
    fam = FAMILIES["wgmma_gemm"]
    cfg, offsets = subview_case(fam, configure("wgmma_gemm", {"M": 256, "N": 512, "K": 256}, {}, "sm_90a"))
    dev = run.Device(0, "fake", (9, 0), "sm_90", 132, None, None, None, None, 1 << 20, core.Device())
    k = run.LoadedKernel(cfg, dev)
    assert (k.registers, k.driver_blocks, k.driver_clusters) == (168, 1, 66)
    assert seen == [k.shape.dynamic_smem_bytes] and seen[0] > 48 * 1024
    assert core.cluster_configs == [{"grid": (2, 1, 1), "cluster": (2, 1, 1), "block": (384, 1, 1),
                                     "shmem_size": seen[0]}]  # fmt: skip
    inputs = fam.make_inputs(cfg, np.random.default_rng(1))
    res = k.check(inputs, fam.reference(cfg, inputs), offsets)
    assert not res.correct and "got nan" in res.mismatch.describe()  # nothing ran: the poison came back
    names = [n for n, _, _ in core.launches]
    assert names[:2] == ["smemtile_wgmma_repack"] * 2 and names[2] == k.compiled.lowered[k.expr]
    _, config, args = core.launches[2]
    assert config == {"grid": (2, 1, 1), "cluster": (2, 1, 1), "block": (384, 1, 1), "shmem_size": seen[0]}
    maps = [a for a in args if isinstance(a, tuple)]
    assert [m[1] for m in maps] == [
        (256, 256),
        (512, 256),
        (16,),
    ]  # tmA, tmB over the repacked copies; tmC off
    assert maps[0][2] == k._addrs["Ap"] and maps[2][2] == k._spare.addr
    assert {type(a) for a in args if not isinstance(a, tuple)} <= {int, ctypes.c_int32, ctypes.c_int64}
    assert type(args[0]) is ctypes.c_int32 and type(args[6]) is int and args[6] == k._addrs["C"]
    t = k.time(warmup_s=0.0, target_s=0.0, min_runs=3, max_runs=3)
    assert (t.median_ms, t.runs, t.l2_flush_bytes) == (0.25, 3, 2 << 20)
    k.close()
    assert core.mem == {}  # every buffer (arrays, workspace, spare, L2 scratch) freed
