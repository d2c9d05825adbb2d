"""The element types smemtile knows: one row per dtype, every per-dtype fact in one place.

Pure data (no CUDA import). The other modules derive their lookups from ``DTYPES``:

- ``bytes``: storage size of one element (tf32 is stored as 32 bits, fp8 as 8).
- ``ctype``: the CUDA C++ type a declaration uses (``cuda_fp16.h`` / ``cuda_bf16.h`` / ``cuda_fp8.h`` types, from
  ``include``); ``storage_ctype``: the plain type of a kernel that only moves the bits (16-bit floats as
  ``unsigned short``); ``kernel_ctype``: the type smemtile's tensor-core kernels instantiate with
  (``smemtile::f16`` / ``smemtile::bf16``, the raw 16-bit patterns).
- ``numpy``: the numpy dtype of host arrays (bf16 and fp8 travel as raw bits); ``ctypes``: the ``ctypes`` type of
  a scalar kernel argument of this dtype; ``torch``: the ``torch.dtype`` attribute name, None where torch has none.
- ``tma`` / ``tma_enum``: the ``CUtensorMapDataType`` (``CU_TENSOR_MAP_DATA_TYPE_<tma>``) of an array of this
  dtype and its value in ``cuda.h`` (CUDA 13.0: UINT8 = 0, UINT16, UINT32, INT32, UINT64, INT64, FLOAT16,
  FLOAT32, FLOAT64, BFLOAT16, FLOAT32_FTZ, TFLOAT32, TFLOAT32_FTZ, ...). The driver has no signed 8/16-bit or
  fp8 map type: those arrays are copied as UINT8 / UINT16 (a TMA copy moves bits, it converts nothing).
- ``feature``: the key of ``smemtile.model.arch.FEATURES`` the dtype needs (None: plain storage everywhere).
- ``mma_k``: the K of one ``mma.sync`` instruction (PTX ISA 9.0, warp-level matrix shapes), None where no
  tensor-core tile takes the dtype; ``mma_out_bytes``: bytes of the C element a matrix-multiply tile over the
  dtype writes (f32 SIMT and tf32 write f32, f16/bf16 and fp8 write 16 bits, i8 accumulates and writes i32);
  the dtypes with it set are those the tile model ranks (``RANKED``). ``rate``: the key of the peak-throughput
  tables (both fp8 formats share ``fp8``).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from smemtile.errors import SpecError


@dataclass(frozen=True)
class DType:
    name: str  # spec name: "f16"
    bytes: int
    kind: str  # "float", "int" (signed) or "uint"
    ctype: str
    storage_ctype: str
    numpy: str
    ctypes: str
    tma: str
    tma_enum: int
    torch: str | None = None
    kernel_ctype: str | None = None  # None: smemtile's kernels take the ctype itself
    include: str | None = None
    feature: str | None = None
    mma_k: int | None = None
    mma_out_bytes: int | None = None
    rate: str | None = None  # None: the name

    @property
    def bits(self) -> int:
        return 8 * self.bytes

    @property
    def device_ctype(self) -> str:
        """The C++ type smemtile's kernels take for this dtype."""
        return self.kernel_ctype or self.ctype

    @property
    def rate_key(self) -> str:
        return self.rate or self.name


# CUtensorMapDataType values (cuda.h, CUDA 13.0); tests/test_dtypes.py parses the header to check them.
TMA_ENUMS: dict[str, int] = {
    "UINT8": 0,
    "UINT16": 1,
    "UINT32": 2,
    "INT32": 3,
    "UINT64": 4,
    "INT64": 5,
    "FLOAT16": 6,
    "FLOAT32": 7,
    "FLOAT64": 8,
    "BFLOAT16": 9,
    "FLOAT32_FTZ": 10,
    "TFLOAT32": 11,
    "TFLOAT32_FTZ": 12,
}


# One row per dtype, columns separated by "|", "-" = none. The order is the order users see in "allowed: ..."
# messages. Columns: name | bytes | kind | ctype | storage_ctype | kernel_ctype | include | numpy | ctypes | tma |
# torch | feature | mma_k | mma_out_bytes | rate
_TABLE = """
f64    | 8 | float | double             | double             | -              | -           | float64 | c_double | FLOAT64  | float64       | -    | -  | - | -
f32    | 4 | float | float              | float              | -              | -           | float32 | c_float  | FLOAT32  | float32       | -    | -  | 4 | -
tf32   | 4 | float | float              | float              | -              | -           | float32 | c_float  | TFLOAT32 | float32       | tf32 | 8  | 4 | -
f16    | 2 | float | __half             | unsigned short     | smemtile::f16  | cuda_fp16.h | float16 | c_uint16 | FLOAT16  | float16       | -    | 16 | 2 | -
bf16   | 2 | float | __nv_bfloat16      | unsigned short     | smemtile::bf16 | cuda_bf16.h | uint16  | c_uint16 | BFLOAT16 | bfloat16      | bf16 | 16 | 2 | -
f8e4m3 | 1 | float | __nv_fp8_e4m3      | unsigned char      | -              | cuda_fp8.h  | uint8   | c_uint8  | UINT8    | float8_e4m3fn | fp8  | 32 | 2 | fp8
f8e5m2 | 1 | float | __nv_fp8_e5m2      | unsigned char      | -              | cuda_fp8.h  | uint8   | c_uint8  | UINT8    | float8_e5m2   | fp8  | 32 | 2 | fp8
i64    | 8 | int   | long long          | long long          | -              | -           | int64   | c_int64  | INT64    | int64         | -    | -  | - | -
i32    | 4 | int   | int                | int                | -              | -           | int32   | c_int32  | INT32    | int32         | -    | -  | - | -
i16    | 2 | int   | short              | short              | -              | -           | int16   | c_int16  | UINT16   | int16         | -    | -  | - | -
i8     | 1 | int   | signed char        | signed char        | -              | -           | int8    | c_int8   | UINT8    | int8          | -    | 32 | 4 | -
u64    | 8 | uint  | unsigned long long | unsigned long long | -              | -           | uint64  | c_uint64 | UINT64   | uint64        | -    | -  | - | -
u32    | 4 | uint  | unsigned           | unsigned           | -              | -           | uint32  | c_uint32 | UINT32   | uint32        | -    | -  | - | -
u16    | 2 | uint  | unsigned short     | unsigned short     | -              | -           | uint16  | c_uint16 | UINT16   | uint16        | -    | -  | - | -
u8     | 1 | uint  | unsigned char      | unsigned char      | -              | -           | uint8   | c_uint8  | UINT8    | uint8         | -    | -  | - | -
"""


def _parse(row: str) -> DType:
    c = [None if x == "-" else x for x in (x.strip() for x in row.split("|"))]
    name, nbytes, kind, ctype, storage, kernel, include, numpy, ctypes_, tma, torch, feature, k, out, rate = c
    return DType(
        name=name,
        bytes=int(nbytes),
        kind=kind,
        ctype=ctype,
        storage_ctype=storage,
        numpy=numpy,
        ctypes=ctypes_,
        tma=tma,
        tma_enum=TMA_ENUMS[tma],
        torch=torch,
        kernel_ctype=kernel,
        include=include,
        feature=feature,
        mma_k=int(k) if k else None,
        mma_out_bytes=int(out) if out else None,
        rate=rate,
    )


DTYPES: dict[str, DType] = {d.name: d for d in map(_parse, _TABLE.strip().splitlines())}

# derived views (one source: the rows above)
DTYPE_BYTES: dict[str, int] = {n: d.bytes for n, d in DTYPES.items()}
NUMPY_DTYPES: dict[str, str] = {n: d.numpy for n, d in DTYPES.items()}
TMA_DTYPES: dict[str, str] = {n: d.tma for n, d in DTYPES.items()}
DTYPE_FEATURES: dict[str, str] = {n: d.feature for n, d in DTYPES.items() if d.feature}
RANKED: tuple[str, ...] = tuple(n for n, d in DTYPES.items() if d.mma_out_bytes)  # the tile model's dtypes
INCLUDES: dict[str, str] = {n: d.include for n, d in DTYPES.items() if d.include}

# PTX scalar type -> the spec dtype of the same width and signedness (.b = untyped bits: unsigned)
PTX_DTYPES: dict[str, str] = {
    ".u8": "u8",
    ".s8": "i8",
    ".b8": "u8",
    ".u16": "u16",
    ".s16": "i16",
    ".b16": "u16",
    ".u32": "u32",
    ".s32": "i32",
    ".b32": "u32",
    ".u64": "u64",
    ".s64": "i64",
    ".b64": "u64",
    ".f16": "f16",
    ".bf16": "bf16",
    ".f32": "f32",
    ".f64": "f64",
}

# C/C++ spelling in a declaration -> (spec dtype, scalars per element): what a user's kernel may declare
C_TYPES: dict[str, tuple[str, int]] = {
    "float": ("f32", 1),
    "double": ("f64", 1),
    "int": ("i32", 1),
    "unsigned": ("u32", 1),
    "unsigned int": ("u32", 1),
    "uint32_t": ("u32", 1),
    "int32_t": ("i32", 1),
    "short": ("i16", 1),
    "unsigned short": ("u16", 1),
    "char": ("i8", 1),
    "signed char": ("i8", 1),
    "unsigned char": ("u8", 1),
    "uint8_t": ("u8", 1),
    "int8_t": ("i8", 1),
    "long long": ("i64", 1),
    "unsigned long long": ("u64", 1),
    "int64_t": ("i64", 1),
    "uint64_t": ("u64", 1),
    "half": ("f16", 1),
    "__half": ("f16", 1),
    "__nv_bfloat16": ("bf16", 1),
    "nv_bfloat16": ("bf16", 1),
    "__half2": ("f16", 2),
    "half2": ("f16", 2),
    "__nv_bfloat162": ("bf16", 2),
    "uint16_t": ("u16", 1),
    "int16_t": ("i16", 1),
}
for _base, _dt in (("float", "f32"), ("int", "i32"), ("uint", "u32"), ("double", "f64"), ("short", "i16")):
    for _n in (2, 4):
        C_TYPES[f"{_base}{_n}"] = (_dt, _n)
del _base, _dt, _n


def get_dtype(name: object, *, key: str = "dtype", source: str | None = None) -> DType:
    """The row of ``name``; SpecError naming ``key`` and the allowed values (and the closest name) otherwise."""
    if isinstance(name, str) and name in DTYPES:
        return DTYPES[name]
    close = difflib.get_close_matches(name, DTYPES, n=1) if isinstance(name, str) else []
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise SpecError(f"unknown dtype {name!r}{hint}; allowed: {', '.join(DTYPES)}", key=key, source=source)


def c_type_dtype(ctype: str) -> tuple[str, int] | None:
    """(spec dtype, scalars per element) of a C++ type name: a declaration spelling (``C_TYPES``), a row's
    ``ctype`` (``__nv_fp8_e4m3``) or the type smemtile's kernels take (``smemtile::f16``); None when unknown."""
    t = ctype.replace("const ", "").strip()
    if t in C_TYPES:
        return C_TYPES[t]
    for d in DTYPES.values():
        if t in (d.ctype, d.kernel_ctype):
            return d.name, 1
    return None


def ctype_bytes(ctype: str) -> int:
    """Bytes of one element of the C++ type ``ctype`` (KeyError when the table does not know it)."""
    found = c_type_dtype(ctype)
    if found is None:
        raise KeyError(ctype)
    return DTYPES[found[0]].bytes * found[1]
