"""``smemtile.inspect`` with the caller's own arguments (numpy arrays, device arrays, numbers) and the fills the
CPU emulator and the GPU share. CPU: real NVRTC compiles, the emulator; the GPU test at the end is marked ``gpu``.

On the H200: ``python3 -m pytest -q -n 0 -p no:cacheprovider -m gpu tests/test_inspect_caller.py``."""

from __future__ import annotations

import ctypes
import json

import numpy as np
import pytest

import smemtile
from smemtile.errors import SpecError
from smemtile.gpu.inspect import host_array  # what the GPU uploads, computed on the host (no CUDA)
from smemtile.model.inspect_args import KernelArg, fill_values
from smemtile.model.inspect_caller import DeviceArray, _from_dlpack, caller_arg

# lanes gather at data-dependent indices read through four element types: a u8 array, an i16 array, an i32
# array as int4 vectors (16-byte loads) and the bit pattern of a float array
GATHER = r"""
struct __align__(16) I4 { int x, y, z, w; };
__global__ void gather(const unsigned char* a, const short* b, const I4* c, const float* f, int* out) {
  __shared__ int s[1024];
  int t = threadIdx.x;
  s[a[t] & 255] = 1;
  s[256 + (b[t] & 255)] = 2;
  s[512 + (c[t].y & 255)] = 3;
  s[768 + ((__float_as_int(f[t]) >> 7) & 255)] = 4;
  __syncthreads();
  out[t] = s[t] + s[1023 - t];
}
"""

SCALE = r"""
__global__ void scale(float* out, const float* in, int n, float a) {
  __shared__ float s[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? in[i] : 0.f;
  __syncthreads();
  if (i < n) out[i] = a * s[(threadIdx.x * 2) % blockDim.x];
}
"""


def _kernel(tmp_path, src: str, name: str = "k.cu"):
    f = tmp_path / name
    f.write_text(src)
    return f


def _stores(res, line: int) -> list[tuple[int, ...]]:
    """Per recorded execution of the store on ``line``: the word offsets of its 32 lanes in ``s``."""
    (r,) = [r for r in res.report.reports if r.instr.line == line and r.instr.op == "store"]
    return [tuple(a // 4 for a in x.addresses) for x in r.recorded]


def test_random_fills_are_the_bytes_the_gpu_uploads(tmp_path):
    """fill: random gives the emulator the GPU's inputs: every data-dependent address is the one computed from
    the array host_array uploads, through 1-, 2-, 4- and 16-byte loads and a float's bit pattern."""
    f = _kernel(tmp_path, GATHER)
    args = [
        {"name": "a", "dtype": "u8", "count": 32, "fill": "random"},
        {"name": "b", "dtype": "i16", "count": 32, "fill": "random"},
        {"name": "c", "dtype": "i32", "count": 128, "fill": "random"},
        {"name": "f", "dtype": "f32", "count": 32, "fill": "random"},
        {"name": "out", "dtype": "i32", "count": 32},
    ]
    res = smemtile.inspect(f, block=32, args=args, mode="simulate")
    ka = res.report.args
    a, b, c, fl = (host_array(ka[k], k) for k in range(4))
    assert a.dtype == np.uint8 and b.dtype == np.int16 and c.dtype == np.int32 and fl.dtype == np.float32
    assert _stores(res, 6) == [tuple(int(x) & 255 for x in a)]
    assert _stores(res, 7) == [tuple(256 + (int(x) & 255) for x in b)]
    assert _stores(res, 8) == [tuple(512 + (int(x) & 255) for x in c.reshape(32, 4)[:, 1])]
    assert _stores(res, 9) == [tuple(768 + ((int(x) >> 7) & 255) for x in fl.view(np.int32))]
    assert len(set(_stores(res, 6)[0])) > 20  # the data really scatters the lanes
    # the element values are a function of (seed, position, index): the emulator's few equal the whole array's
    idx = np.array([5, 0, 31, 7])
    assert (fill_values(ka[3], 3, idx) == fl[idx]).all()


def test_numpy_arrays_and_numbers_through_the_emulator(tmp_path):
    f = _kernel(tmp_path, SCALE)
    inp = (np.arange(512, dtype=np.float32) * 7) % 13
    out = np.full(512, -1, np.float32)
    res = smemtile.inspect(f, grid=2, block=256, args=[out, inp, 512, 2.0], mode="simulate")
    doc = res.to_dict()
    by = {ln["line"]: ln for ln in doc["lines"]}
    # s[2 t mod 256]: lanes 0-15 and 16-31 read the same 16 even words' banks twice -> 2-way
    assert by[7]["worst_conflict_degree"] == 2 and by[5]["worst_conflict_degree"] == 1
    assert doc["records"]["recorded"] == 16  # 2 blocks x 4 warps x 2 instructions
    assert (out == -1).all()  # the emulator reads the caller's arrays and never writes them
    kinds = [(a.kind, a.dtype, a.count, a.fill, a.value) for a in res.report.args]
    assert kinds == [
        ("array", "f32", 512, "caller", 0),
        ("array", "f32", 512, "caller", 0),
        ("scalar", "i32", 0, "zeros", 512),
        ("scalar", "f32", 0, "zeros", 2.0),
    ]


def test_the_emulator_reads_the_callers_data(tmp_path):
    """A caller's index array decides the banks: lane l reads the word the caller put at l."""
    f = _kernel(tmp_path, GATHER)
    a = np.array([(7 * t) % 256 for t in range(32)], np.uint8)
    b = np.arange(32, dtype=np.int16)[::-1].copy()
    c = np.zeros((32, 4), np.int32)
    c[:, 1] = np.arange(32) * 3
    fl = np.zeros(32, np.float32)
    out = np.zeros(32, np.int32)
    res = smemtile.inspect(f, block=32, args=[a, b, c, fl, out], mode="simulate")
    assert _stores(res, 6) == [tuple((7 * t) % 256 for t in range(32))]
    assert _stores(res, 7) == [tuple(256 + 31 - t for t in range(32))]
    assert _stores(res, 8) == [tuple(512 + 3 * t for t in range(32))]
    # a non-contiguous numpy array is read in C order, as the device copy holds it
    wide = np.zeros((32, 2), np.uint8)
    wide[:, 0] = a
    res = smemtile.inspect(f, block=32, args=[wide[:, 0], b, c, fl, out], mode="simulate")
    assert _stores(res, 6) == [tuple((7 * t) % 256 for t in range(32))]


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["out", "inp", 1.5, 2.0],
            "args[2] (parameter 2, .u32): 1.5 is a float but the kernel's parameter is .u32",
        ),
        (
            ["out", "inp", "inp", 1.0],
            "args[2] (parameter 2, .u32): an array, but the kernel's parameter is .u32",
        ),
        (
            ["out", "inp", 2**40, 1.0],
            "args[2] (parameter 2, .u32): 1099511627776 does not fit the kernel's 32-bit",
        ),
        (
            ["out", 2.5, 512, 1.0],
            "args[1] (parameter 1, .u64): 2.5 is a float but the kernel's parameter is .u64",
        ),
        (["out", "inp", 512], "3 arguments given, the kernel takes 4"),
        (
            ["out", "bad", 512, 1.0],
            "args[1] (parameter 1, .u64): a numpy array of complex128; allowed element types: float64,",
        ),
        (
            ["out", object(), 512, 1.0],
            "args[1] (parameter 1, .u64): an argument of type object is not a kernel argument",
        ),
    ],
)
def test_a_wrong_caller_argument_is_one_line_naming_the_parameter(tmp_path, args, message):
    f = _kernel(tmp_path, SCALE)
    values = {"out": np.zeros(512, np.float32), "inp": np.zeros(512, np.float32), "bad": np.zeros(4, complex)}
    args = [values.get(a, a) if isinstance(a, str) else a for a in args]
    with pytest.raises(SpecError) as e:
        smemtile.inspect(f, grid=2, block=256, args=args, mode="simulate")
    assert message in str(e.value) and "\n" not in str(e.value)


class _CudaArray:
    """What torch / CuPy expose: ``__cuda_array_interface__`` (version 3)."""

    def __init__(self, shape=(4, 8), typestr="<f4", strides=None, ptr=0x7F0000001000):
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "data": (ptr, False),
            "version": 3,
            "strides": strides,
        }


def test_device_arrays_pass_their_pointer():
    a = caller_arg(0, _CudaArray(), ".u64")
    assert (a.kind, a.dtype, a.count, a.fill) == ("array", "f32", 32, "caller")
    assert isinstance(a.data, DeviceArray) and a.data.pointer == 0x7F0000001000 and a.data.nbytes == 128
    assert a.to_dict() == {"name": "arg0", "kind": "array", "dtype": "f32", "count": 32, "fill": "caller"}
    assert caller_arg(0, _CudaArray(strides=(32, 4)), ".u64").count == 32  # explicit C strides are fine
    with pytest.raises(SpecError, match=r"args\[0\] \(parameter 0, \.u64\): a non-contiguous device array"):
        caller_arg(0, _CudaArray(strides=(4, 16)), ".u64")
    with pytest.raises(SpecError, match=r"a device array of <c8: not a type the kernel takes"):
        caller_arg(0, _CudaArray(typestr="<c8"), ".u64")
    # DLPack: the capsule's tensor is read in place (numpy's own, on the CPU, checks the struct layout)
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    dev, dtype, count = _from_dlpack(host[1:], "k")
    assert (dev.pointer - host.ctypes.data, dtype, count, dev.nbytes) == (16, "f32", 8, 32)
    with pytest.raises(SpecError, match="non-contiguous"):
        _from_dlpack(host[:, ::2], "k")


def test_the_emulator_refuses_a_device_array_it_cannot_read(tmp_path, monkeypatch):
    """--simulate with a device array copies its contents to the host through the GPU module; without one the
    error is one line (the GPU module's NoDevice, exit 3)."""
    import smemtile.pipeline.inspect as pi
    from smemtile.errors import NoDevice

    class _NoGpu:
        def snapshot(self, arg, device=0):
            raise NoDevice("no CUDA GPU")

    monkeypatch.setattr(pi, "_gpu_module", lambda: _NoGpu())
    f = _kernel(tmp_path, SCALE)
    with pytest.raises(NoDevice):
        smemtile.inspect(
            f,
            grid=2,
            block=256,
            args=[_CudaArray((512,)), np.zeros(512, np.float32), 512, 1.0],
            mode="simulate",
        )

    class _Copy:
        def snapshot(self, arg, device=0):
            return np.arange(arg.count, dtype=np.float32)

    monkeypatch.setattr(pi, "_gpu_module", lambda: _Copy())
    res = smemtile.inspect(
        f, grid=2, block=256, args=[np.zeros(512, np.float32), _CudaArray((512,)), 512, 1.0], mode="simulate"
    )
    assert res.report.args[1].data.tolist()[:3] == [0.0, 1.0, 2.0] and res["mode"] == "simulate"


def test_ncu_runs_on_the_inputs_the_recording_got(tmp_path, monkeypatch):
    """With --ncu the callers' arrays are copied before the recording (which runs the kernel on them), and ncu
    gets the copies: an in-place kernel is profiled on the same inputs."""
    import smemtile.pipeline.inspect as pi
    from tests.test_inspect import _FakeGpu

    seen = {}

    class _Gpu(_FakeGpu):
        def record(self, *a, args, **kw):
            args[1].data[:] = 99  # the kernel changes the caller's array
            return super().record(*a, args=args, **kw)

        def ncu_per_line(self, ptx_text, entry, *, args, **kw):
            seen["inp"] = args[1].data.copy()
            return {}

    monkeypatch.setattr(pi, "_gpu_module", lambda: _Gpu(0, {}))
    monkeypatch.setattr(pi, "_has_gpu", lambda device: True)
    f = _kernel(tmp_path, SCALE)
    inp = np.arange(512, dtype=np.float32)
    res = smemtile.inspect(f, grid=2, block=256, args=[np.zeros(512, np.float32), inp, 512, 1.0], ncu=True)
    assert res["mode"] == "gpu" and (inp == 99).all()
    assert seen["inp"].tolist() == list(range(512))


# ---- the launch's argument handling, against a fake cuda.core (the GPU test below runs the real one) ---------


class _FakeCore:
    """The few cuda.core calls PreparedLaunch and snapshot make (smemtile.gpu.run's Device.allocate, Buffer views,
    copies, fills, LaunchConfig, launch), over host bytearrays; the "kernel" doubles the f32 array at parameter
    1 into the one at parameter 0. Device addresses are the fake's own; any other address is host memory."""

    LEGACY_DEFAULT_STREAM = None  # replaced by a _Stream in __init__

    class _Stream:
        def sync(self):
            pass

    def __init__(self):
        self.mem: dict[int, bytearray] = {}
        self.top = 0x10000
        self.launched = None
        core = self
        self.LEGACY_DEFAULT_STREAM = self._Stream()
        self.Stream = self._Stream

        class Buffer:
            def __init__(self, ptr, size):
                self.handle, self.size = int(ptr), int(size)

            @staticmethod
            def from_handle(ptr, size):
                return Buffer(ptr, size)

            def copy_from(self, src, *, stream):
                assert src.size == self.size, (src.size, self.size)
                buf, off = core._at(self.handle)
                buf[off : off + self.size] = ctypes.string_at(src.handle, self.size)

            def copy_to(self, dst, *, stream):
                assert dst.size == self.size, (dst.size, self.size)
                buf, off = core._at(self.handle)
                ctypes.memmove(dst.handle, bytes(buf[off : off + self.size]), self.size)

            def fill(self, value, *, stream):
                buf, off = core._at(self.handle)
                buf[off : off + self.size] = bytes([value]) * self.size

            def close(self):
                pass

        class Device:
            def __init__(self, index=0):
                self.device_id = index

            def allocate(self, n, *, stream):  # fresh memory is not zero: the record buffer must be zeroed
                return Buffer(core.alloc(b"\xab" * n), n)

            def sync(self):
                pass

        class LaunchConfig:
            def __init__(self, grid=None, cluster=None, block=None, shmem_size=None):
                self.grid, self.cluster, self.block, self.shmem_size = grid, cluster, block, shmem_size

        self.Buffer, self.Device, self.LaunchConfig = Buffer, Device, LaunchConfig

    def _at(self, ptr: int) -> tuple[bytearray, int]:
        for base, buf in self.mem.items():
            if base <= ptr < base + max(len(buf), 1):
                return buf, ptr - base
        raise AssertionError(f"no device memory at {ptr:#x}")

    def alloc(self, data: bytes) -> int:
        p = self.top
        self.top += len(data) + 4096
        self.mem[p] = bytearray(data)
        return p

    def launch(self, stream, config, kernel, *args):
        assert kernel == "kernel k" and config.grid == (1, 1, 1) and config.block == (32, 1, 1)
        self.launched = args
        out, off_o = self._at(args[0])
        src, off_i = self._at(args[1])
        n = args[2].value
        x = np.frombuffer(bytes(src[off_i : off_i + 4 * n]), np.float32)
        out[off_o : off_o + 4 * n] = (2 * x).tobytes()


class _FakeModule:
    def kernel(self, name):
        return f"kernel {name}"

    def close(self):
        pass


def test_the_launch_passes_device_pointers_and_copies_numpy_back(monkeypatch):
    import smemtile.gpu.inspect as gi
    import smemtile.gpu.run as gr

    core = _FakeCore()
    monkeypatch.setattr(gr, "_core", lambda: core)
    monkeypatch.setattr(gr, "open_device", lambda device=0: None)
    monkeypatch.setattr(gi, "load_module", lambda image, line_info=True: _FakeModule())
    types = [".u64", ".u64", ".u32", ".f32"]
    # a device input (its pointer goes in as is), a numpy output (copied there and back)
    src = np.arange(8, dtype=np.float32)
    ptr = core.alloc(src.tobytes())
    inp = caller_arg(1, _CudaArray((8,), ptr=ptr), ".u64")
    out = np.full(8, -1, np.float32)
    args = [caller_arg(0, out, ".u64"), inp, caller_arg(2, 8, ".u32"), caller_arg(3, 0.5, ".f32")]
    k = gi.PreparedLaunch(
        "ptx", "k", grid=1, block=32, dynamic_smem=0, args=args, param_types=types, record_nbytes=64
    )
    params = k._params  # what cuda.core's launch receives: pointers as ints, scalars as ctypes of their type
    assert params[1] == ptr and type(params[2]) is ctypes.c_uint32 and params[2].value == 8
    assert type(params[3]) is ctypes.c_float and params[3].value == 0.5
    assert params[0] != out.ctypes.data and len(params) == 5  # a device copy of the numpy array, the record
    assert bytes(core._at(params[4])[0]) == bytes(64)  # the record buffer starts zeroed
    assert (out == -1).all()
    k.launch()
    k.synchronize()
    assert core.launched == params
    assert (out == -1).all()  # nothing reaches the caller's array before copy_back
    k.copy_back()
    k.close()
    assert out.tolist() == [2.0 * i for i in range(8)]
    assert bytes(core.mem[ptr]) == src.tobytes()  # the device input is the caller's, untouched by the launch
    # a fill is uploaded as host_array computes it; a device array is read back through snapshot
    filled = KernelArg("r", "array", "f32", 8, "random")
    k = gi.PreparedLaunch(
        "ptx", "k", grid=1, block=32, dynamic_smem=0, args=[args[0], filled, *args[2:]], param_types=types
    )
    buf, _ = k.arrays["r"]
    assert bytes(core.mem[buf.addr]) == host_array(filled, 1).tobytes()
    k.close()
    assert gi.snapshot(inp).tolist() == src.tolist()


def test_ncu_launch_spec_carries_copies_of_the_callers_arrays(tmp_path, monkeypatch):
    """ncu profiles in another process: a caller's array travels as a .npy copy and comes back as its data."""
    import smemtile.gpu.inspect as gi
    from smemtile.gpu.inspect_launch import _args

    data = np.arange(6, dtype=np.int32)
    args = [caller_arg(0, data, ".u64"), KernelArg("n", "scalar", "i32", value=6)]
    spec = gi.launch_spec(
        tmp_path / "kernel.ptx",
        "k",
        grid=1,
        block=32,
        dynamic_smem=0,
        args=args,
        param_types=[".u64", ".u32"],
    )
    assert spec["args"][0]["fill"] == "caller" and spec["args"][0]["data_file"] == str(tmp_path / "arg0.npy")
    back = _args(json.loads(json.dumps(spec["args"])))
    assert back[0].data.tolist() == list(range(6)) and back[0].fill == "caller" and back[1].value == 6


# ---- on the GPU ---------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_torch_arrays_on_the_gpu_keep_the_kernels_results(tmp_path):
    """torch device arrays go in by pointer, numpy ones are copied there and back: the outputs are the plain
    kernel's (the recording writes only to its own buffer) and the recorded addresses equal the emulator's."""
    torch = pytest.importorskip("torch")
    f = _kernel(tmp_path, SCALE)
    inp = torch.arange(512, dtype=torch.float32, device="cuda") % 13
    out = torch.full((512,), -1.0, device="cuda")
    res = smemtile.inspect(f, grid=2, block=256, args=[out, inp, 512, 2.0], mode="gpu")
    torch.cuda.synchronize()
    s = inp.view(2, 256)[:, (torch.arange(256, device="cuda") * 2) % 256].reshape(-1)
    assert torch.equal(out, 2.0 * s) and torch.equal(inp, torch.arange(512, device="cuda").float() % 13)
    cpu = smemtile.inspect(
        f, grid=2, block=256, args=[np.zeros(512, np.float32), inp.cpu().numpy(), 512, 2.0], mode="simulate"
    )
    assert res.to_dict()["lines"] == cpu.to_dict()["lines"]
    # numpy through the GPU: copied back, the same values as torch's run
    host_out = np.full(512, -1, np.float32)
    smemtile.inspect(f, grid=2, block=256, args=[host_out, inp.cpu().numpy(), 512, 2.0], mode="gpu")
    assert (host_out == out.cpu().numpy()).all()
    # the uninstrumented kernel on the same inputs gives the same bits
    from smemtile.gpu.inspect import PreparedLaunch

    plain_out = np.full(512, -1, np.float32)
    args = res.report.args
    k = PreparedLaunch(
        res.report.ptx,
        res.report.entry,
        grid=(2, 1, 1),
        block=(256, 1, 1),
        dynamic_smem=0,
        args=[KernelArg("o", "array", "f32", 512, "caller", data=plain_out), *args[1:]],
        param_types=[".u64", ".u64", ".u32", ".f32"],
    )
    try:
        k.launch()
        k.synchronize()
        k.copy_back()
    finally:
        k.close()
    assert plain_out.tobytes() == out.cpu().numpy().tobytes()
