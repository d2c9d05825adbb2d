"""The arguments of a user's kernel for ``smemtile inspect`` (from a small YAML), and one recorded warp access.

The YAML lists the kernel's parameters in order (a bare list or ``args: [...]``)::

    args:
      - {name: out, dtype: f32, count: N * N}            # an array: a device buffer of `count` elements
      - {name: in, dtype: f32, count: N * N, fill: random}
      - {name: n, value: N}                               # a scalar; its dtype defaults to the PTX type's

``count`` and ``value`` are integers or expressions over the ``--define`` constants (the spec's whitelist,
never ``eval``); ``fill`` is one of ``zeros`` (default), ``ones``, ``iota``, ``random``. The list is checked
against the entry's PTX parameters: as many entries, a pointer (``.u64``/``.b64``) for each array, a scalar
for each ``value``.

The contents of a filled array are a function of (seed, the parameter's position, the element index) only
(:func:`fill_values`): the GPU uploads the whole array computed on the host, the CPU emulator computes the
elements a load touches, and both see the same bytes, so addresses that depend on the data agree.
``random``: floats uniform in [-1, 1) on a 2**-23 grid (exact in f32; f16 rounds them, bf16 truncates the f32),
integers uniform in [0, 256) ([0, 128) for i8), fp8 as random bytes; ``iota``: 0, 1, 2, ... wrapped to the type
(bf16: i % 256); ``ones``; ``zeros``. Python callers pass their own arrays instead
(:mod:`smemtile.model.inspect_caller`): those are the arguments' ``data``.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field

import numpy as np

from smemtile.errors import SpecError
from smemtile.fileio import printable, read_text
from smemtile.model.dtypes import DTYPES as DTYPE_INFO
from smemtile.model.expr import evaluate
from smemtile.model.spec import DTYPES, load_yaml

FILLS = ("zeros", "ones", "iota", "random")
ARG_KEYS = ("name", "dtype", "count", "fill", "value")
# the spec dtype a scalar parameter gets from its PTX type when the YAML names none
_SCALAR_DTYPE = {
    ".u8": "u8",
    ".s8": "i8",
    ".b8": "u8",
    ".u16": "u16",
    ".s16": "i16",
    ".b16": "u16",
    ".u32": "i32",
    ".s32": "i32",
    ".b32": "u32",
    ".u64": "i64",
    ".s64": "i64",
    ".b64": "u64",
    ".f16": "f16",
    ".f32": "f32",
    ".f64": "f64",
}
_PTX_BYTES = {t: DTYPES[d] for t, d in _SCALAR_DTYPE.items()}
MAX_COUNT = 1 << 32  # elements of one array (16 GiB of f32): a typo like 1e12 is refused, not allocated


@dataclass(frozen=True)
class KernelArg:
    """One kernel argument: an array (a device buffer) or a scalar."""

    name: str
    kind: str  # "array" | "scalar"
    dtype: str
    count: int = 0
    fill: str = "zeros"  # FILLS, or "caller": the caller's own array (``data``)
    value: float | int = 0
    # the caller's array (smemtile.model.inspect_caller: a numpy array or a DeviceArray), never in to_dict
    data: object = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict:
        if self.kind == "array":
            return {
                "name": self.name,
                "kind": "array",
                "dtype": self.dtype,
                "count": self.count,
                "fill": self.fill,
            }
        return {"name": self.name, "kind": "scalar", "dtype": self.dtype, "value": self.value}


@dataclass(frozen=True)
class WarpRecord:
    """One execution of one shared-memory instruction by one warp (GPU-recorded or emulated)."""

    instr: int  # SharedInstr.index
    block: tuple[int, int, int]
    warp: int  # warp index inside the block (linear thread id // 32)
    active: int  # 32-bit active mask
    addresses: tuple[int, ...]  # 32 byte offsets in the CTA's shared window (inactive lanes: 0)


def _is_text(x: object) -> bool:
    return isinstance(x, str) and ("\n" in x or x.lstrip().startswith(("[", "{", "args:")))


def load_args(
    path_or_text, entry_params: list[tuple[str, str]], constants: dict[str, int]
) -> list[KernelArg]:
    """The validated arguments for an entry with ``entry_params`` ([(PTX type, name)]); see the module doc.

    ``path_or_text``: a YAML file, YAML text, an already parsed list/mapping, or None (a kernel without
    parameters); a Python list may also hold the caller's own arrays and numbers
    (:func:`smemtile.model.inspect_caller.caller_arg`). Every problem is one :class:`SpecError` line naming the file, the entry and the allowed values.
    """
    source = "args"
    caller = isinstance(path_or_text, (list, tuple))  # Python objects: the caller's own arrays may be in it
    if path_or_text is None:
        doc: object = []
    elif isinstance(path_or_text, (list, tuple, dict)):
        doc = list(path_or_text) if isinstance(path_or_text, tuple) else path_or_text
    elif _is_text(path_or_text):
        doc = load_yaml(str(path_or_text), source)
    else:
        source = os.fspath(path_or_text)
        doc = load_yaml(read_text(source, what="arguments file", key="--args"), source)
    if isinstance(doc, dict):
        extra = sorted(set(doc) - {"args"})
        if extra:
            raise SpecError(f"unknown key {printable(extra[0])!r}; allowed: args", source=source)
        doc = doc.get("args")
    if doc is None:
        doc = []
    if not isinstance(doc, list):
        raise SpecError(
            "must be a list of the kernel's arguments in parameter order", key="args", source=source
        )
    if len(doc) != len(entry_params):
        names = ", ".join(f"{n.rsplit('_param_', 1)[-1]}:{t}" for t, n in entry_params) or "none"
        raise SpecError(
            f"{len(doc)} arguments given, the kernel takes {len(entry_params)} (PTX parameters: {names})",
            key="args",
            source=source,
        )
    return [_arg(i, a, entry_params[i][0], constants, source, caller) for i, a in enumerate(doc)]


def _arg(
    i: int, a: object, ptx_type: str, constants: dict[str, int], source: str, caller: bool = False
) -> KernelArg:
    key = f"args[{i}]"
    if not isinstance(a, dict):
        if caller and not isinstance(a, (str, list, tuple)) and a is not None:
            from smemtile.model.inspect_caller import caller_arg  # a Python caller's own array or number

            return caller_arg(i, a, ptx_type)
        raise SpecError(
            "must be a mapping {name, dtype, count, fill} or {name, value}", key=key, source=source
        )
    for k in a:
        if k not in ARG_KEYS:
            close = difflib.get_close_matches(str(k), ARG_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SpecError(
                f"unknown key {printable(k)!r}{hint}; allowed: {', '.join(ARG_KEYS)}", key=key, source=source
            )
    name = str(a.get("name", f"arg{i}"))
    key = f"args[{i}] ({printable(name)})"
    if "value" in a and "count" in a:
        raise SpecError("give count (an array) or value (a scalar), not both", key=key, source=source)
    dtype = a.get("dtype")
    if dtype is not None and dtype not in DTYPES:
        raise SpecError(
            f"unknown dtype {printable(dtype)!r}; allowed: {', '.join(DTYPES)}",
            key=f"{key}.dtype",
            source=source,
        )
    if "value" in a:
        if ptx_type not in _SCALAR_DTYPE:
            raise SpecError(
                f"the kernel's parameter is {ptx_type} (a struct or array by value): not supported",
                key=key,
                source=source,
            )
        dtype = dtype or _SCALAR_DTYPE[ptx_type]
        if DTYPES[dtype] != _PTX_BYTES[ptx_type]:
            raise SpecError(
                f"dtype {dtype} is {DTYPES[dtype]} bytes but the kernel's parameter is {ptx_type}",
                key=f"{key}.dtype",
                source=source,
            )
        value = a["value"]
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise SpecError("value must be a number or an expression", key=f"{key}.value", source=source)
        if isinstance(value, str):
            value = evaluate(value, constants, key=f"{key}.value", source=source)
        if dtype[0] in "iu" and not float(value).is_integer():
            raise SpecError(
                f"value {value} is not an integer but dtype is {dtype}", key=f"{key}.value", source=source
            )
        value = int(value) if dtype[0] in "iu" else float(value)
        return KernelArg(name=name, kind="scalar", dtype=dtype, value=value)
    if ptx_type not in (".u64", ".b64", ".s64"):
        raise SpecError(
            f"an array needs a pointer parameter but the kernel's parameter is {ptx_type}; "
            "a scalar takes value:",
            key=key,
            source=source,
        )
    if dtype is None:
        raise SpecError(f"an array needs dtype; allowed: {', '.join(DTYPES)}", key=key, source=source)
    count = a.get("count", 0)
    if isinstance(count, bool) or not isinstance(count, (int, str)):
        raise SpecError("count must be an integer or an expression", key=f"{key}.count", source=source)
    if isinstance(count, str):
        count = evaluate(count, constants, key=f"{key}.count", source=source)
    if not 0 <= count <= MAX_COUNT:
        raise SpecError(f"count {count} outside 0..{MAX_COUNT}", key=f"{key}.count", source=source)
    fill = a.get("fill", "zeros")
    if fill not in FILLS:
        raise SpecError(
            f"unknown fill {printable(fill)!r}; allowed: {', '.join(FILLS)}", key=f"{key}.fill", source=source
        )
    return KernelArg(name=name, kind="array", dtype=dtype, count=int(count), fill=fill)


# ---- the contents of a filled array (the same on the GPU and in the emulator) -----------------------------------
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_FILL_CHUNK = 1 << 22


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over uint64 lanes (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def fill_values(arg: KernelArg, position: int, index: np.ndarray, seed: int = 0) -> np.ndarray:
    """The elements ``index`` (integers in 0..count-1) of array argument ``arg``, the kernel's parameter number
    ``position``, as a numpy array of the dtype's host type (see the module docstring)."""
    info = DTYPE_INFO[arg.dtype]
    dtype = np.dtype(info.numpy)
    index = np.asarray(index, dtype=np.int64)
    if arg.fill == "zeros":
        return np.zeros(index.shape, dtype)
    if arg.fill == "ones":
        if arg.dtype == "bf16":
            return np.full(index.shape, 0x3F80, np.uint16)
        return np.ones(index.shape, dtype)
    if arg.fill == "iota":
        if arg.dtype == "bf16":
            return ((index % 256).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        if dtype.kind == "f":
            return index.astype(np.float64).astype(dtype)
        return (index.astype(np.uint64) % np.uint64(1 << (8 * dtype.itemsize))).astype(dtype)
    if arg.fill != "random":
        raise SpecError(f"unknown fill {printable(arg.fill)!r}; allowed: {', '.join(FILLS)}", key=arg.name)
    key = _mix(np.array([seed * 0x10001 + position + 1], dtype=np.uint64) * _GOLDEN)
    h = _mix(index.astype(np.uint64) * _GOLDEN + key)
    if info.kind == "float" and dtype.kind == "f" or arg.dtype == "bf16":
        x = (h >> np.uint64(40)).astype(np.float64) * 2.0**-23 - 1.0  # [-1, 1), exact in f32
        if arg.dtype == "bf16":
            return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        return x.astype(dtype)
    if info.kind == "float":  # fp8: raw bytes
        return (h >> np.uint64(56)).astype(dtype)
    shift = 57 if arg.dtype == "i8" else 56
    return (h >> np.uint64(shift)).astype(dtype)


def fill_array(arg: KernelArg, position: int, seed: int = 0) -> np.ndarray:
    """The whole array (``count`` elements) :func:`fill_values` describes, computed in chunks."""
    dtype = np.dtype(DTYPE_INFO[arg.dtype].numpy)
    n = int(arg.count)
    if arg.fill == "zeros":
        return np.zeros(n, dtype)
    out = np.empty(n, dtype)
    for lo in range(0, n, _FILL_CHUNK):
        hi = min(n, lo + _FILL_CHUNK)
        out[lo:hi] = fill_values(arg, position, np.arange(lo, hi, dtype=np.int64), seed)
    return out
