"""NVRTC through ctypes: the nvidia-cuda-nvrtc wheel's libnvrtc, called with the calling convention of
``cuda.bindings.nvrtc`` (each function answers a tuple, its NVRTC result first; output buffers are bytearrays).

Why: importing ``cuda.bindings.nvrtc`` imports ``cuda.bindings.driver`` and ``cuda.pathfinder`` too, about 80 ms on
the 2-core machine before NVRTC itself is loaded (``dlopen`` of libnvrtc is ~15 ms), and ``smemtile generate`` of
a small kernel compiles in well under that. Only the functions smemtile calls are here; ctypes releases the GIL
during each call, as the bindings do. :func:`load` answers ``None`` where the wheel's library is not found (or
``SMEMTILE_NVRTC_BINDINGS=1`` asks for cuda-python's bindings): then smemtile uses ``cuda.bindings.nvrtc``.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
from pathlib import Path

_P = ctypes.c_void_p  # nvrtcProgram
_STRS = ctypes.POINTER(ctypes.c_char_p)
_SIZE = ctypes.POINTER(ctypes.c_size_t)


@functools.lru_cache(maxsize=1)
def wheel_library() -> Path | None:
    """The nvidia-cuda-nvrtc wheel's libnvrtc (the library cuda-pathfinder loads first), or None."""
    for pkg in ("nvidia.cu13", "nvidia.cuda_nvrtc"):
        try:
            spec = importlib.util.find_spec(pkg)
        except (ImportError, ValueError):
            continue
        for root in (spec.submodule_search_locations or []) if spec else []:
            for lib in sorted(Path(root, "lib").glob("libnvrtc.so.*")):
                return lib
    return None


def _strings(items) -> ctypes.Array | None:
    items = list(items)
    return (ctypes.c_char_p * len(items))(*items) if items else None


def _into(buf: bytearray):
    return (ctypes.c_char * len(buf)).from_buffer(buf)


class Nvrtc:
    """The subset of ``cuda.bindings.nvrtc`` smemtile uses, on one loaded libnvrtc."""

    def __init__(self, path: Path) -> None:
        # libnvrtc opens libnvrtc-builtins by its soname at the first compile: loaded first, from the same folder,
        # it is found (cuda-pathfinder does the same; the folder is on no search path)
        for builtins in sorted(path.parent.glob("libnvrtc-builtins.so.*")):
            ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
            break
        lib = ctypes.CDLL(str(path))
        self.path = path
        self._lib = lib
        sig = {
            "nvrtcVersion": [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)],
            "nvrtcCreateProgram": [
                ctypes.POINTER(_P),
                ctypes.c_char_p,
                ctypes.c_char_p,
                ctypes.c_int,
                _STRS,
                _STRS,
            ],
            "nvrtcDestroyProgram": [ctypes.POINTER(_P)],
            "nvrtcAddNameExpression": [_P, ctypes.c_char_p],
            "nvrtcCompileProgram": [_P, ctypes.c_int, _STRS],
            "nvrtcGetLoweredName": [_P, ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p)],
            "nvrtcGetProgramLogSize": [_P, _SIZE],
            "nvrtcGetProgramLog": [_P, ctypes.c_char_p],
            "nvrtcGetPTXSize": [_P, _SIZE],
            "nvrtcGetPTX": [_P, ctypes.c_char_p],
            "nvrtcGetCUBINSize": [_P, _SIZE],
            "nvrtcGetCUBIN": [_P, ctypes.c_char_p],
        }
        for name, args in sig.items():
            f = getattr(lib, name)
            f.argtypes, f.restype = args, ctypes.c_int
        lib.nvrtcGetErrorString.argtypes, lib.nvrtcGetErrorString.restype = [ctypes.c_int], ctypes.c_char_p

    def nvrtcGetErrorString(self, result) -> tuple[int, bytes]:
        return 0, self._lib.nvrtcGetErrorString(int(result)) or b"unknown NVRTC error"

    def nvrtcVersion(self) -> tuple[int, int, int]:
        major, minor = ctypes.c_int(), ctypes.c_int()
        err = self._lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        return err, major.value, minor.value

    def nvrtcCreateProgram(self, src: bytes, name: bytes, n: int, headers, include_names) -> tuple[int, _P]:
        prog = _P()
        err = self._lib.nvrtcCreateProgram(
            ctypes.byref(prog), src, name, int(n), _strings(headers), _strings(include_names)
        )
        return err, prog

    def nvrtcDestroyProgram(self, prog: _P) -> tuple[int]:
        return (self._lib.nvrtcDestroyProgram(ctypes.byref(prog)),)

    def nvrtcAddNameExpression(self, prog: _P, expr: bytes) -> tuple[int]:
        return (self._lib.nvrtcAddNameExpression(prog, expr),)

    def nvrtcCompileProgram(self, prog: _P, n: int, options) -> tuple[int]:
        return (self._lib.nvrtcCompileProgram(prog, int(n), _strings(options)),)

    def nvrtcGetLoweredName(self, prog: _P, expr: bytes) -> tuple[int, bytes]:
        out = ctypes.c_char_p()
        err = self._lib.nvrtcGetLoweredName(prog, expr, ctypes.byref(out))
        return err, out.value or b""

    def _size(self, fn, prog: _P) -> tuple[int, int]:
        size = ctypes.c_size_t()
        err = fn(prog, ctypes.byref(size))
        return err, size.value

    def _fill(self, fn, prog: _P, buf: bytearray) -> tuple[int]:
        return (fn(prog, ctypes.cast(_into(buf), ctypes.c_char_p)),)

    def nvrtcGetProgramLogSize(self, prog):
        return self._size(self._lib.nvrtcGetProgramLogSize, prog)

    def nvrtcGetProgramLog(self, prog, buf: bytearray):
        return self._fill(self._lib.nvrtcGetProgramLog, prog, buf)

    def nvrtcGetPTXSize(self, prog):
        return self._size(self._lib.nvrtcGetPTXSize, prog)

    def nvrtcGetPTX(self, prog, buf: bytearray):
        return self._fill(self._lib.nvrtcGetPTX, prog, buf)

    def nvrtcGetCUBINSize(self, prog):
        return self._size(self._lib.nvrtcGetCUBINSize, prog)

    def nvrtcGetCUBIN(self, prog, buf: bytearray):
        return self._fill(self._lib.nvrtcGetCUBIN, prog, buf)


@functools.lru_cache(maxsize=1)
def _loaded(path: Path) -> Nvrtc:
    return Nvrtc(path)


def load() -> Nvrtc | None:
    """The ctypes NVRTC on the wheel's library; None without the wheel, when it does not load, or with
    ``SMEMTILE_NVRTC_BINDINGS=1``."""
    if os.environ.get("SMEMTILE_NVRTC_BINDINGS", "") not in ("", "0"):
        return None
    path = wheel_library()
    if path is None:
        return None
    try:
        return _loaded(path)
    except (OSError, AttributeError):  # not loadable here, or an NVRTC without one of these functions
        return None
