"""A Python caller's own kernel arguments for ``smemtile.inspect(..., args=[...])``.

An item of ``args`` that is not a mapping is the caller's own object, checked against the entry's PTX parameter
at its position (one :class:`SpecError` naming the parameter when it does not fit):

- a device array (``__cuda_array_interface__``, as torch, CuPy and Numba give it, or DLPack on a CUDA device):
  the kernel gets its device pointer; nothing is copied and nothing but the kernel writes to it (the recording
  writes only to its own buffer). It must be C-contiguous.
- a host array (a numpy array, or anything ``numpy.asarray`` views without a copy: DLPack on the CPU,
  ``__array_interface__``): copied to the device before the launch and back into the caller's array after it
  (when the array is writeable), so the caller sees the kernel's results. The CPU emulator reads its bytes and
  never writes them.
- a Python or numpy number for a scalar parameter: an ``int`` (or ``bool``) for an integer parameter, an
  ``int`` or ``float`` for a floating-point one; it must fit the parameter's width.

Pure Python (DLPack capsules are read with ``ctypes``; no CUDA import).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import numpy as np

from smemtile.errors import SpecError
from smemtile.model.inspect_args import _SCALAR_DTYPE, KernelArg

__all__ = ["DeviceArray", "caller_arg", "host_bytes", "is_caller_array"]

# numpy dtype -> spec dtype (bool travels as u8)
_SPEC_OF_NUMPY = {
    "float64": "f64",
    "float32": "f32",
    "float16": "f16",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint64": "u64",
    "uint32": "u32",
    "uint16": "u16",
    "uint8": "u8",
    "bool": "u8",
}
_POINTER_TYPES = (".u64", ".b64", ".s64")
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
# DLPack (code, bits) -> spec dtype; code 0 int, 1 uint, 2 float, 4 bfloat, 6 bool
_DL_DTYPES = {
    (0, 8): "i8",
    (0, 16): "i16",
    (0, 32): "i32",
    (0, 64): "i64",
    (1, 8): "u8",
    (1, 16): "u16",
    (1, 32): "u32",
    (1, 64): "u64",
    (2, 16): "f16",
    (2, 32): "f32",
    (2, 64): "f64",
    (4, 16): "bf16",
    (6, 8): "u8",
}


@dataclass(frozen=True)
class DeviceArray:
    """A caller's device array: its pointer and size; ``owner`` keeps the caller's object (and a DLPack capsule)
    alive while the kernel uses the pointer."""

    pointer: int
    nbytes: int
    readonly: bool = False
    owner: object = field(default=None, compare=False, repr=False)


def is_caller_array(arg: KernelArg) -> bool:
    return arg.kind == "array" and arg.data is not None


def host_bytes(arg: KernelArg) -> np.ndarray:
    """The bytes of a caller's host array (C order) as a read-only uint8 view or copy."""
    if isinstance(arg.data, DeviceArray):
        raise SpecError(
            "a device array: the CPU emulator reads host arrays (pass a numpy array, or record on the GPU)",
            key=arg.name,
        )
    raw = np.ascontiguousarray(arg.data).reshape(-1).view(np.uint8)
    raw = raw.view()
    raw.flags.writeable = False
    return raw


def _where(i: int, ptx_type: str) -> str:
    return f"args[{i}] (parameter {i}, {ptx_type})"


def caller_arg(i: int, obj: object, ptx_type: str) -> KernelArg:
    """The :class:`KernelArg` for the caller's object ``obj`` at parameter ``i`` of PTX type ``ptx_type``."""
    key = _where(i, ptx_type)
    name = f"arg{i}"
    if isinstance(obj, (bool, int, float, np.bool_, np.integer, np.floating)):
        return _scalar(name, obj, ptx_type, key)
    device = _device_array(obj, key)
    host = None if device is not None else _host_array(obj)
    if device is None and host is None:
        raise SpecError(
            f"an argument of type {type(obj).__name__} is not a kernel argument: pass a device array (torch, CuPy: "
            "__cuda_array_interface__ or DLPack), a numpy array, a number, or a mapping {name, dtype, count, fill} "
            "/ {name, value}",
            key=key,
        )
    if ptx_type not in _POINTER_TYPES:
        raise SpecError(
            f"an array, but the kernel's parameter is {ptx_type} (a scalar): pass a number", key=key
        )
    if device is not None:
        dev, dtype, count = device
        return KernelArg(name=name, kind="array", dtype=dtype, count=count, fill="caller", data=dev)
    dtype = _SPEC_OF_NUMPY.get(host.dtype.name)
    if dtype is None:
        raise SpecError(
            f"a numpy array of {host.dtype}; allowed element types: {', '.join(_SPEC_OF_NUMPY)}", key=key
        )
    return KernelArg(name=name, kind="array", dtype=dtype, count=int(host.size), fill="caller", data=host)


def _scalar(name: str, v, ptx_type: str, key: str) -> KernelArg:
    if ptx_type not in _SCALAR_DTYPE:
        raise SpecError(
            f"the kernel's parameter is {ptx_type} (a struct or array by value): not supported", key=key
        )
    dtype = _SCALAR_DTYPE[ptx_type]
    is_float = isinstance(v, (float, np.floating))
    if ptx_type[1] == "f":
        if dtype == "f16":
            raise SpecError("a half-precision parameter: pass it as a mapping {name, value}", key=key)
        return KernelArg(name=name, kind="scalar", dtype=dtype, value=float(v))
    if is_float:
        raise SpecError(f"{v!r} is a float but the kernel's parameter is {ptx_type} (an integer)", key=key)
    value = int(v)
    bits = int(ptx_type[2:])
    if not -(1 << (bits - 1)) <= value < (1 << bits):
        raise SpecError(f"{value} does not fit the kernel's {bits}-bit parameter {ptx_type}", key=key)
    return KernelArg(name=name, kind="scalar", dtype=dtype, value=value)


def _host_array(obj) -> np.ndarray | None:
    """A numpy view of a host array (no copy), else None."""
    if isinstance(obj, np.ndarray):
        return obj
    dl = getattr(obj, "__dlpack_device__", None)
    if dl is not None and hasattr(obj, "__dlpack__"):
        try:
            kind = int(dl()[0])
        except Exception:  # noqa: BLE001 - a foreign object's protocol
            kind = None
        if kind == _DL_CPU:
            return np.from_dlpack(obj)
    if hasattr(obj, "__array_interface__"):
        return np.asarray(obj)
    return None


def _contiguous(shape, strides, itemsize: int) -> bool:
    want = itemsize
    for n, s in zip(reversed(shape), reversed(strides), strict=True):
        if n > 1 and s != want:
            return False
        want *= n
    return True


def _device_array(obj, key: str) -> tuple[DeviceArray, str, int] | None:
    """(the device array, its spec dtype, its element count) of a CUDA array, else None."""
    cai = getattr(type(obj), "__cuda_array_interface__", None) is not None or _has_cai(obj)
    if cai:
        d = obj.__cuda_array_interface__
        if d.get("mask") is not None:
            raise SpecError("a masked device array is not supported", key=key)
        dt = np.dtype(d["typestr"])
        dtype = _SPEC_OF_NUMPY.get(dt.name)
        if dtype is None or dt.byteorder == ">":
            raise SpecError(f"a device array of {d['typestr']}: not a type the kernel takes", key=key)
        shape = tuple(int(n) for n in d["shape"])
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        strides = d.get("strides")
        if strides is not None and not _contiguous(shape, strides, dt.itemsize):
            raise SpecError("a non-contiguous device array: pass a contiguous one (.contiguous())", key=key)
        ptr, ro = d["data"]
        return DeviceArray(int(ptr or 0), count * dt.itemsize, bool(ro), obj), dtype, count
    dl = getattr(obj, "__dlpack_device__", None)
    if dl is None or not hasattr(obj, "__dlpack__"):
        return None
    try:
        kind = int(dl()[0])
    except Exception:  # noqa: BLE001 - a foreign object's protocol
        return None
    if kind not in (_DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED):
        return None
    return _from_dlpack(obj, key)


def _has_cai(obj) -> bool:
    try:
        return isinstance(obj.__cuda_array_interface__, dict)
    except Exception:  # noqa: BLE001 - e.g. torch raises for bf16 or for a CPU tensor
        return False


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


def _from_dlpack(obj, key: str) -> tuple[DeviceArray, str, int]:
    """Read a (legacy, unversioned) DLPack capsule's tensor; the capsule stays unconsumed (its deleter runs when
    it is collected) and is kept alive with the object."""
    try:
        capsule = obj.__dlpack__(stream=1)  # the legacy default stream, where the kernel is launched
    except (TypeError, RuntimeError, BufferError):  # a producer that takes no stream (e.g. a CPU one)
        capsule = obj.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    try:
        ptr = get(capsule, b"dltensor")
    except ValueError:
        raise SpecError("a DLPack capsule this reader does not know (not 'dltensor')", key=key) from None
    t = _DLTensor.from_address(ptr)
    dtype = _DL_DTYPES.get((t.dtype.code, t.dtype.bits)) if t.dtype.lanes == 1 else None
    if dtype is None:
        raise SpecError(
            f"a device array of DLPack type code {t.dtype.code}, {t.dtype.bits} bits, {t.dtype.lanes} lanes: "
            "not a type the kernel takes",
            key=key,
        )
    shape = tuple(int(t.shape[k]) for k in range(t.ndim))
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    itemsize = t.dtype.bits // 8
    if t.strides:
        strides = tuple(int(t.strides[k]) * itemsize for k in range(t.ndim))
        if not _contiguous(shape, strides, itemsize):
            raise SpecError("a non-contiguous device array: pass a contiguous one (.contiguous())", key=key)
    pointer = int(t.data or 0) + int(t.byte_offset)
    return DeviceArray(pointer, count * itemsize, False, (obj, capsule)), dtype, count
