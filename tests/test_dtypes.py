"""The one dtype table (smemtile.model.dtypes): sizes agree with numpy and ctypes, TMA enums with cuda.h, and every
family's dtype choices and C++ types are rows of it."""

from __future__ import annotations

import ctypes
import os
import re
from pathlib import Path

import numpy as np
import pytest

from smemtile.errors import SpecError
from smemtile.families import FAMILIES, configure
from smemtile.model.arch import FEATURES
from smemtile.model.dtypes import (
    C_TYPES,
    DTYPE_BYTES,
    DTYPE_FEATURES,
    DTYPES,
    PTX_DTYPES,
    RANKED,
    TMA_ENUMS,
    c_type_dtype,
    ctype_bytes,
    get_dtype,
)


def _cuda_h() -> Path | None:
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "include" / "cuda.h").is_file():
            return Path(root) / "include" / "cuda.h"
    return None


@pytest.mark.parametrize("name", list(DTYPES))
def test_row_sizes_agree_with_numpy_and_ctypes(name):
    d = DTYPES[name]
    assert d.name == name and DTYPE_BYTES[name] == d.bytes
    assert np.dtype(d.numpy).itemsize == d.bytes
    assert ctypes.sizeof(getattr(ctypes, d.ctypes)) == d.bytes
    # the TMA type moves the same number of bytes per element
    tma_bytes = {"8": 1, "16": 2, "32": 4, "64": 8}[re.search(r"(8|16|32|64)", d.tma).group(1)]
    assert tma_bytes == d.bytes, (name, d.tma)
    assert d.kind in ("float", "int", "uint")
    if d.kind != "float":  # integers: numpy's signedness is the row's
        assert np.dtype(d.numpy).kind == ("i" if d.kind == "int" else "u")
        assert np.issubdtype(np.dtype(d.numpy), np.signedinteger) == (d.kind == "int")
    # the declaration C type maps back to this row (tf32 is declared as float)
    assert c_type_dtype(d.ctype)[0] == (name if name != "tf32" else "f32")
    assert ctype_bytes(d.ctype) == d.bytes and ctype_bytes(d.storage_ctype) == d.bytes
    assert ctype_bytes(d.device_ctype) == d.bytes


def test_real_float_numpy_types():
    # those numpy holds natively are real floats; bf16 and fp8 travel as raw unsigned bits of their width
    for name in ("f64", "f32", "tf32", "f16"):
        assert np.dtype(DTYPES[name].numpy).kind == "f"
    for name in ("bf16", "f8e4m3", "f8e5m2"):
        assert np.dtype(DTYPES[name].numpy).kind == "u"


def test_tma_enums_are_the_cuda_header_values():
    header = _cuda_h()
    if header is None:
        pytest.skip("cuda.h not found (CUDA_HOME, CUDA_PATH, /usr/local/cuda)")
    text = header.read_text(errors="replace")
    body = re.search(r"typedef\s+enum\s+CUtensorMapDataType_enum\s*\{(.*?)\}", text, re.S)
    assert body, "CUtensorMapDataType_enum not in cuda.h"
    values, nxt = {}, 0
    for m in re.finditer(r"CU_TENSOR_MAP_DATA_TYPE_(\w+)\s*(?:=\s*(0x[0-9a-fA-F]+|\d+))?", body.group(1)):
        nxt = int(m.group(2), 0) if m.group(2) else nxt
        values[m.group(1)] = nxt
        nxt += 1
    assert values["UINT8"] == 0 and values["BFLOAT16"] == 9 and values["TFLOAT32"] == 11
    for name, v in TMA_ENUMS.items():
        assert values[name] == v, name
    for d in DTYPES.values():
        assert values[d.tma] == d.tma_enum, d.name


def test_fp8_travels_as_uint8_in_tma():
    # the driver has no fp8 map type: both formats are copied as bytes (as the generated helper does)
    for name in ("f8e4m3", "f8e5m2", "u8", "i8"):
        assert DTYPES[name].tma == "UINT8" and DTYPES[name].tma_enum == 0


def test_features_are_arch_features():
    assert DTYPE_FEATURES == {"bf16": "bf16", "tf32": "tf32", "f8e4m3": "fp8", "f8e5m2": "fp8"}
    for feature in DTYPE_FEATURES.values():
        assert feature in FEATURES


def test_ranked_dtypes_have_mma_facts():
    assert RANKED == ("f32", "tf32", "f16", "bf16", "f8e4m3", "f8e5m2", "i8")
    for name in RANKED[1:]:
        d = DTYPES[name]
        assert d.mma_k * d.bytes == 32  # one mma.sync k-slice is 32 bytes of A per row
    assert DTYPES["f32"].mma_k is None


def test_ptx_types_map_to_rows_of_the_same_width():
    for ptx, name in PTX_DTYPES.items():
        bits = int(re.search(r"\d+", ptx).group())
        assert DTYPES[name].bits == bits, ptx
        assert (
            DTYPES[name].kind
            == {"s": "int", "u": "uint", "b": "uint", "f": "float", "bf": "float"}[
                re.match(r"\.([a-z]+)", ptx).group(1)
            ]
        )


def test_c_types_name_rows():
    for spelling, (name, lanes) in C_TYPES.items():
        assert name in DTYPES and lanes in (1, 2, 4), spelling
    assert ctype_bytes("float4") == 16 and ctype_bytes("__half2") == 4 and ctype_bytes("const char") == 1
    assert c_type_dtype("smemtile::bf16") == ("bf16", 1)
    assert c_type_dtype("struct Foo") is None
    with pytest.raises(KeyError):
        ctype_bytes("struct Foo")


def test_get_dtype_refuses_with_allowed_values():
    assert get_dtype("bf16").bytes == 2
    with pytest.raises(SpecError) as e:
        get_dtype("bf61", key="buffers.As.dtype")
    msg = str(e.value)
    assert msg.startswith("buffers.As.dtype: unknown dtype 'bf61'") and "did you mean 'bf16'" in msg
    assert msg.endswith("allowed: " + ", ".join(DTYPES)) and "\n" not in msg
    with pytest.raises(SpecError, match="unknown dtype 3;"):
        get_dtype(3)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_family_dtype_is_a_row(family):
    fam = FAMILIES[family]
    choices = [pk for pk in fam.problem_keys if pk.name.endswith("dtype")]
    for pk in choices:
        assert pk.kind == "choice" and pk.choices, pk.name
        for c in pk.choices:
            assert c in DTYPES or c == "same", (pk.name, c)  # same: the input's dtype (a row itself)
    keys = {pk.name for pk in choices}
    for a in fam.host_args:
        if a.array:
            assert a.dtype in DTYPES or a.dtype in keys, (a.name, a.dtype)
    # every configuration of the family's dtype choices: arrays, C++ placeholders and workspaces are rows
    combos = [{}]
    for pk in choices:
        combos = [{**c, pk.name: v} for c in combos for v in pk.choices]
    seen = 0
    for combo in combos:
        for size in fam.test_sizes[:1] or ({},):
            try:
                cfg = configure(family, {**size, **combo}, arch=fam.default_arch)
            except SpecError:  # a combination the family refuses (e.g. a C type it does not pair)
                continue
            seen += 1
            for a in fam.host_args:
                if a.array:
                    assert fam.array_dtype(cfg, a) in DTYPES
            for ct in fam.ctypes(cfg).values():
                assert c_type_dtype(ct) is not None, ct
            for w in fam.workspaces(cfg):
                assert ctype_bytes(w.ctype) > 0
    assert seen, family
