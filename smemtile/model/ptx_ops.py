"""What each PTX instruction does to one warp's state, for the emulator in :mod:`smemtile.model.ptx_emu`.

Integers are evaluated exactly at their PTX width (two's complement, C's truncating ``div``/``rem``, PTX's
clamped shifts); f32/f64 arithmetic is evaluated in float64 rounded to the type (values feed only data);
f16/bf16 math, textures, tensor-core results and anything else unknown write *poison* (see ptx_emu).
"""

from __future__ import annotations

import functools
import re

import numpy as np

from smemtile.model.inspect_args import fill_values
from smemtile.model.ptx import Statement, parse_call, split_operands
from smemtile.model.ptx_emu import (
    GLOBAL_BASE,
    GLOBAL_STRIDE,
    LANES,
    SHARED_GENERIC,
    EmulationError,
    Poison,
    _as_float,
    _as_int,
    _bits,
    _norm,
    _typ,
)
from smemtile.model.spec import DTYPES

_LANE = np.arange(LANES, dtype=np.int64)
_TYPES = re.compile(r"(?:[bsuf](?:8|16|32|64)|pred)")
_NOOPS = (
    "bar",
    "barrier",
    "membar",
    "fence",
    "prefetch",
    "prefetchu",
    "griddepcontrol",
    "nanosleep",
    "discard",
    "applypriority",
    "pmevent",
    "trap",
    "brkpt",
    "setmaxnreg",
    "wgmma",
    "tcgen05",
    "cp",
)
_FLOAT1 = {
    "abs": np.abs,
    "neg": np.negative,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "rcp": lambda x: 1 / x,
    "ex2": np.exp2,
    "lg2": np.log2,
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
}
_FLOAT2 = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "min": np.fmin,
    "max": np.fmax,
    "copysign": lambda a, b: np.copysign(b, a),
}
_CMP = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "lo": np.less,
    "ls": np.less_equal,
    "hi": np.greater,
    "hs": np.greater_equal,
}


def immediate(emu, op: str, st: Statement):
    """A literal or a symbol as 32 lanes (a shared variable's address is its window offset); read-only arrays,
    parsed once per emulator."""
    cache = emu.__dict__.setdefault("_immediates", {})
    v = cache.get(op)
    if v is None:
        v = _immediate(emu, op, st)
        if isinstance(v, np.ndarray):
            v.flags.writeable = False
            cache[op] = v
    return v


def _immediate(emu, op: str, st: Statement):
    full = lambda x, dt=np.int64: np.full(LANES, x, dtype=dt)  # noqa: E731
    if re.fullmatch(r"0[fF][0-9a-fA-F]{8}", op):
        return full(np.array([int(op[2:], 16)], dtype=np.uint32).view(np.float32)[0], np.float64)
    if re.fullmatch(r"0[dD][0-9a-fA-F]{16}", op):
        return full(np.array([int(op[2:], 16)], dtype=np.uint64).view(np.float64)[0], np.float64)
    m = re.fullmatch(r"(-?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9]\d*)[uU]?", op)
    if m:
        v = (
            int(m.group(2), 16)
            if m.group(2)[:2].lower() == "0x"
            else int(m.group(2), 8 if m.group(2)[0] == "0" else 10)
        )
        v = -v if m.group(1) else v
        if v >= 1 << 63:
            v -= 1 << 64
        return full(v)
    if re.fullmatch(r"-?\d+\.\d*(?:[eE][-+]?\d+)?", op):
        return full(float(op), np.float64)
    sym, _, off = op.partition("+")
    sym = sym.strip()
    extra = int(off, 0) if off.strip().lstrip("-").isdigit() else 0
    if sym in emu.layout:
        return full(emu.layout[sym][0] + extra)
    if sym == "WARP_SZ":
        return full(32)
    return Poison(st)


@functools.lru_cache(maxsize=4096)
def _dsts(op: str) -> tuple[str, ...]:
    op = op.strip()
    return tuple(x.strip() for x in split_operands(op[1:-1])) if op.startswith("{") else (op,)


def _addr(w, op: str, st: Statement) -> np.ndarray | Poison:
    """An address operand ``[reg+off]`` / ``[sym+off]`` as int64 lanes."""
    parsed = _addr_parts(op)
    if parsed is None:
        return Poison(st)
    name, off = parsed
    base = w.read(name, st) if name.startswith("%") else immediate(w.emu, name, st)
    if isinstance(base, Poison):
        return base
    return _as_int(base, 64, True) + off


@functools.lru_cache(maxsize=4096)
def _addr_parts(op: str) -> tuple[str, int] | None:
    """``[%rd4+16]`` -> ("%rd4", 16); ``[sym+-8]`` -> ("sym", -8); None when it is not that form."""
    inner = op.strip()[1:-1].strip()
    m = re.fullmatch(r"([%\w$.]+)\s*(?:([+-])\s*(-?\s*(?:0x[0-9a-fA-F]+|\d+)))?", inner)
    if not m:
        return None
    off = int(m.group(3).replace(" ", ""), 0) if m.group(3) else 0
    return m.group(1), -off if m.group(2) == "-" else off


@functools.lru_cache(maxsize=4096)
def _space(parts: tuple[str, ...]) -> str:
    for p in parts[1:]:
        s = p.split("::")[0]
        if s in ("shared", "global", "local", "param", "const"):
            return s
    return "generic"


def _shared_offsets(emu, st: Statement, a: np.ndarray, mask: np.ndarray, space: str, size: int):
    """(offsets, lanes in shared) of an address; an offset outside the window stops the emulation."""
    if space == "shared":
        off, on = a & 0xFFFFFFFF, mask.copy()
    elif space == "generic":
        off = a - SHARED_GENERIC
        on = mask & (off >= 0) & (off < emu.window)
    else:
        return None, None
    bad = on & ((off < 0) | (off + size > emu.window))
    if bad.any():
        lane = int(np.flatnonzero(bad)[0])
        raise EmulationError(
            f"PTX line {st.ptx_line} `{st.text}`: lane {lane} addresses shared byte "
            f"{int(off[lane])}, outside the {emu.window}-byte shared window (dynamic shared "
            "memory: --smem)"
        )
    return off, on


def _record(emu, st: Statement, off: np.ndarray, on: np.ndarray, sink) -> None:
    idx = emu.index.get((st.ptx_line, st.text))
    if idx is not None and on.any():
        sink(idx, int(np.sum(1 << _LANE[on])), np.where(on, off, 0))


_VIEW = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _smem_read(w, off: np.ndarray, on: np.ndarray, size: int) -> np.ndarray:
    o = np.where(on, off, 0)
    if size in _VIEW and not (o % size).any() and len(w.smem) % size == 0:  # aligned: one gather
        return np.where(on, w.smem.view(_VIEW[size])[o // size].astype(np.int64), 0)
    v = np.zeros(LANES, dtype=np.int64)
    for b in range(size):
        v |= w.smem[o + b].astype(np.int64) << (8 * b)
    return np.where(on, v, 0)


def _smem_write(w, off: np.ndarray, on: np.ndarray, size: int, v: np.ndarray) -> None:
    idx = np.flatnonzero(on)
    for b in range(size):
        w.smem[off[idx] + b] = ((v[idx] >> (8 * b)) & 0xFF).astype(np.uint8)


def _global_bytes(emu, a: np.ndarray, size: int) -> np.ndarray:
    """``size`` (<= 8) bytes at each lane's address, little-endian, as int64 lanes: an argument buffer's bytes
    (the caller's own array, or its fill exactly as the GPU gets it), 0 outside every buffer."""
    out = np.zeros(LANES, dtype=np.int64)
    for base, nbytes, arg, position in emu.buffers:
        inside = (a >= base) & (a + size <= base + nbytes)
        if not inside.any() or arg.fill == "zeros" and arg.data is None:
            continue
        off = np.where(inside, a - base, 0)
        if arg.data is not None:  # the caller's host array, as bytes
            raw = emu.caller_bytes(arg)
            cols = off[:, None] + np.arange(size)
            got = raw[cols]
        else:
            elem = DTYPES[arg.dtype]
            n = -(-size // elem) + 1
            first = off // elem
            idx = np.minimum(first[:, None] + np.arange(n), max(arg.count - 1, 0))
            vals = fill_values(arg, position, idx.ravel(), emu.seed)
            raw = vals.view(np.uint8).reshape(LANES, n * elem)
            got = np.take_along_axis(raw, (off % elem)[:, None] + np.arange(size), axis=1)
        v = np.zeros(LANES, dtype=np.uint64)
        for b in range(size):
            v |= got[:, b].astype(np.uint64) << np.uint64(8 * b)
        out = np.where(inside, v.view(np.int64), out)
    return out


def _global_read(emu, a: np.ndarray, t: str) -> np.ndarray:
    """A load of type ``t`` from an argument buffer, as the register holds it."""
    size = max(_bits(t) // 8, 1)
    v = _global_bytes(emu, a, size)
    if t in ("f32", "f64"):
        return _as_float(v, _bits(t))
    return _norm(v, t)


def _ints(w, ops, st, bits: int, signed: bool):
    vals = []
    for o in ops:
        v = w.read(o, st)
        if isinstance(v, Poison):
            return v
        vals.append(_as_int(np.asarray(v), bits, signed))
    return vals


def _floats(w, ops, st, bits: int):
    vals = []
    for o in ops:
        v = w.read(o, st)
        if isinstance(v, Poison):
            return v
        vals.append(_as_float(np.asarray(v), bits))
    return vals


def _f_round(v: np.ndarray, t: str) -> np.ndarray:
    return v.astype(np.float32).astype(np.float64) if t == "f32" else v


def _trunc_div(a, b, rem: bool):
    b1 = np.where(b == 0, 1, b)
    q = np.abs(a) // np.abs(b1) * np.sign(a) * np.sign(b1)
    return a - q * b1 if rem else q


def _int_op(head: str, parts: list[str], t: str, x: list[np.ndarray], st: Statement) -> np.ndarray | None:
    bits, signed = _bits(t), t[0] == "s"
    mode = next((p for p in parts if p in ("lo", "hi", "wide")), "lo")
    a = x[0]
    if head in ("add", "sub"):
        return a + x[1] if head == "add" else a - x[1]
    if head in ("mul", "mad", "mul24", "mad24"):
        if head.endswith("24"):
            a, b = _as_int(a, 24, signed), _as_int(x[1], 24, signed)
        else:
            b = x[1]
        if mode == "hi":
            if bits == 64:
                p = np.array([(int(i) * int(j)) >> 64 for i, j in zip(a, b, strict=True)], dtype=object)
                r = np.array([int(v) & ((1 << 64) - 1) for v in p], dtype=np.uint64).view(np.int64)
            elif signed:
                r = (a * b) >> bits
            else:
                r = ((a.astype(np.uint64) * b.astype(np.uint64)) >> np.uint64(bits)).astype(np.int64)
        else:
            r = a * b  # int64 wraps modulo 2**64: the low bits (lo) and the 2x-wide product are exact
        if head.startswith("mad"):
            r = r + (_as_int(x[2], 2 * bits if mode == "wide" else bits, signed))
        return r
    if head in ("div", "rem"):
        return _trunc_div(a, x[1], head == "rem")
    if head in ("min", "max"):
        return np.minimum(a, x[1]) if head == "min" else np.maximum(a, x[1])
    if head == "abs":
        return np.abs(a)
    if head == "neg":
        return -a
    if head == "not":
        return ~a
    if head == "cnot":
        return (a == 0).astype(np.int64)
    if head in ("and", "or", "xor"):
        f = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[head]
        return f(_as_int(a, bits, False), _as_int(x[1], bits, False))
    if head == "shl":
        n = _as_int(x[1], 32, False)
        return np.where(n >= bits, 0, _as_int(a, bits, False) << np.minimum(n, 63))
    if head == "shr":
        n = np.minimum(_as_int(x[1], 32, False), bits)
        if signed:
            return a >> np.minimum(n, 63)
        return np.where(n >= bits, 0, _as_int(a, bits, False) >> np.minimum(n, 63))
    if head == "popc":
        u = _as_int(a, bits, False)
        return np.array([bin(int(v) & ((1 << bits) - 1)).count("1") for v in u], dtype=np.int64)
    if head == "clz":
        u = _as_int(a, bits, False)
        return np.array([bits - (int(v) & ((1 << bits) - 1)).bit_length() for v in u], dtype=np.int64)
    if head == "brev":
        u = _as_int(a, bits, False)
        return np.array([int(f"{int(v):0{bits}b}"[::-1], 2) for v in u], dtype=np.int64)
    if head == "bfe":
        pos, ln = x[1] & 0xFF, x[2] & 0xFF
        u = _as_int(a, bits, False)
        r = (u >> np.minimum(pos, 63)) & ((np.int64(1) << np.minimum(ln, 63)) - 1)
        if signed:
            top = np.where(ln > 0, (r >> np.maximum(ln - 1, 0)) & 1, 0)
            r = np.where(top == 1, r - (np.int64(1) << np.minimum(ln, 63)), r)
        return r
    if head == "bfi":
        pos, ln = x[2] & 0xFF, x[3] & 0xFF  # bfi d, a, b, pos, len: insert a into b
        m = ((np.int64(1) << np.minimum(ln, 63)) - 1) << np.minimum(pos, 63)
        return (_as_int(x[1], bits, False) & ~m) | ((_as_int(a, bits, False) << np.minimum(pos, 63)) & m)
    if head == "lop3":
        lut = int(x[3][0])
        r = np.zeros(LANES, dtype=np.int64)
        m = (1 << bits) - 1
        for i in range(8):
            if lut >> i & 1:
                r |= (
                    (a if i & 4 else ~a & m) & (x[1] if i & 2 else ~x[1] & m) & (x[2] if i & 1 else ~x[2] & m)
                )
        return r
    if head == "shf":
        n = x[2] & 0xFFFFFFFF
        n = np.minimum(n, 32) if "clamp" in parts else n & 31
        both = (_as_int(x[1], 32, False) << 32) | _as_int(a, 32, False)
        if "l" in parts:
            return ((both.astype(np.uint64) << n.astype(np.uint64)) >> np.uint64(32)).astype(np.int64)
        return (both.astype(np.uint64) >> n.astype(np.uint64)).astype(np.int64)
    if head == "prmt":
        a32, b32, c = _as_int(a, 32, False), _as_int(x[1], 32, False), x[2]
        both = (b32 << 32) | a32
        r = np.zeros(LANES, dtype=np.int64)
        for k in range(4):
            s = (c >> (4 * k)) & 0xF
            byte = (both >> (8 * (s & 7))) & 0xFF
            byte = np.where(s & 8, np.where(byte & 0x80, 0xFF, 0), byte)
            r |= byte << (8 * k)
        return r
    if head == "sad":
        return np.abs(a - x[1]) + x[2]
    return None


@functools.lru_cache(maxsize=4096)
def _parts(opcode: str) -> tuple[str, ...]:
    """An opcode's dotted parts (``ld.shared.v4.f32`` -> ld, shared, v4, f32), split once per opcode."""
    return tuple(opcode.split("."))


@functools.lru_cache(maxsize=4096)
def _vec(parts: tuple[str, ...]) -> int:
    """The vector width of a memory opcode's parts (``v2``, ``v4``; 1 without one)."""
    return next((int(p[1:]) for p in parts if re.fullmatch(r"v\d+", p)), 1)


def execute(emu, w, st: Statement, mask: np.ndarray, sink) -> None:
    parts = _parts(st.opcode)
    head = parts[0]
    ops = st.operands
    t = _typ(st.opcode)
    if head in ("ld", "ldu", "st", "atom", "red", "ldmatrix", "stmatrix") or st.opcode.startswith("cp.async"):
        return _memory(emu, w, st, parts, mask, sink)
    if head == "call":
        return _call(emu, w, st, mask)
    if head in _NOOPS or head == "mbarrier" and not ops or head in ("ret", "exit"):
        return None
    if head == "mbarrier":
        if any(p in ("try_wait", "test_wait") for p in parts):
            w.write(ops[0], np.ones(LANES, dtype=bool), mask)
        elif ops and ops[0].startswith("%"):
            w.write(ops[0], np.zeros(LANES, dtype=np.int64), mask)
        return None
    if head == "mov":
        return _mov(w, st, t, mask)
    if head in ("setp", "set"):
        return _setp(w, st, parts, t, mask)
    if head in ("selp", "slct"):
        v = [w.read(o, st) for o in ops[1:4]]
        if any(isinstance(x, Poison) for x in v):
            return w.write(ops[0], next(x for x in v if isinstance(x, Poison)), mask)
        cond = np.asarray(v[2], dtype=bool) if head == "selp" else _as_int(v[2], 32, True) >= 0
        return w.write(ops[0], _norm(np.where(cond, v[0], v[1]), t), mask)
    if head == "cvt":
        return _cvt(w, st, parts, mask)
    if head == "cvta":
        v = _ints(w, ops[1:2], st, 64, False)
        if isinstance(v, Poison):
            return w.write(ops[0], v, mask)
        to = "to" in parts
        shared = "shared" in [p.split("::")[0] for p in parts]
        r = v[0] + (0 if not shared else (-SHARED_GENERIC if to else SHARED_GENERIC))
        return w.write(ops[0], _norm(r, t), mask)
    if head == "isspacep":
        v = _ints(w, ops[1:2], st, 64, False)
        if isinstance(v, Poison):
            return w.write(ops[0], v, mask)
        if "shared" in [p.split("::")[0] for p in parts]:
            r = (v[0] >= SHARED_GENERIC) & (v[0] < SHARED_GENERIC + emu.window)
        elif "global" in parts:
            top = (
                max((pos for *_, pos in emu.buffers), default=0) + 1
            )  # buffer k sits at GLOBAL_BASE + k * STRIDE
            r = (v[0] >= GLOBAL_BASE) & (v[0] < GLOBAL_BASE + GLOBAL_STRIDE * top)
        else:
            r = np.zeros(LANES, dtype=bool)
        return w.write(ops[0], r, mask)
    if head in ("shfl", "vote", "activemask", "redux", "elect"):
        return _warp_op(w, st, parts, t, mask)
    if t in ("f32", "f64") and (head in _FLOAT1 or head in _FLOAT2 or head in ("fma", "mad")):
        x = _floats(w, ops[1:], st, _bits(t))
        if isinstance(x, Poison):
            return w.write(ops[0], x, mask)
        with np.errstate(all="ignore"):
            if head in ("fma", "mad"):
                r = x[0] * x[1] + x[2]
            elif head in _FLOAT2:
                r = _FLOAT2[head](x[0], x[1])
            else:
                r = _FLOAT1[head](x[0])
        return w.write(ops[0], _f_round(r, t), mask)
    if t == "pred" and head in ("and", "or", "xor", "not"):
        v = [w.read(o, st) for o in ops[1:]]
        if any(isinstance(x, Poison) for x in v):
            return w.write(ops[0], next(x for x in v if isinstance(x, Poison)), mask)
        b = [np.asarray(x, dtype=bool) for x in v]
        r = (
            ~b[0]
            if head == "not"
            else {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}[head](b[0], b[1])
        )
        return w.write(ops[0], r, mask)
    if t[0] in "bsu" and head not in ("addc", "subc", "madc"):
        bits = _bits(t)
        x = _ints(w, ops[1:], st, bits, t[0] == "s")
        if isinstance(x, Poison):
            return w.write(ops[0], x, mask)
        r = _int_op(head, parts, t, x, st)
        if r is not None:
            mode = "wide" in parts
            return w.write(ops[0], _norm(r, f"{t[0]}{2 * bits}" if mode else t), mask)
    for d in _dsts(ops[0]) if ops and not ops[0].startswith("[") else []:
        for dd in d.split("|"):
            if dd.startswith("%"):
                w.write(dd, Poison(st), mask)
    return None


def _mov(w, st: Statement, t: str, mask) -> None:
    d, s = st.operands[0], st.operands[1]
    if s.startswith("{"):  # pack
        parts = [w.read(x, st) for x in _dsts(s)]
        if any(isinstance(p, Poison) for p in parts):
            return w.write(d, next(p for p in parts if isinstance(p, Poison)), mask)
        k = _bits(t) // len(parts)
        r = np.zeros(LANES, dtype=np.int64)
        for i, p in enumerate(parts):
            r |= _as_int(np.asarray(p), k, False) << (k * i)
        return w.write(d, _norm(r, t), mask)
    v = w.read(s, st)
    if d.startswith("{"):  # unpack
        outs = _dsts(d)
        k = _bits(t) // len(outs)
        for i, o in enumerate(outs):
            w.write(
                o,
                v
                if isinstance(v, Poison)
                else (_as_int(np.asarray(v), _bits(t), False) >> (k * i)) & ((1 << k) - 1),
                mask,
            )
        return None
    if isinstance(v, Poison):
        return w.write(d, v, mask)
    v = np.asarray(v)
    if t in ("f32", "f64"):
        v = _as_float(v, _bits(t)) if v.dtype != np.float64 else v
    elif t == "pred":
        v = v.astype(bool)
    else:
        v = _norm(v, t)
    return w.write(d, v, mask)


def _setp(w, st: Statement, parts: list[str], t: str, mask) -> None:
    ops = st.operands
    cmp = parts[1]
    boolop = parts[2] if len(parts) > 3 and parts[2] in ("and", "or", "xor") else None
    if t[0] == "f":
        x = _floats(w, ops[1:3], st, _bits(t))
    else:
        x = _ints(w, ops[1:3], st, _bits(t), t[0] == "s")
    if isinstance(x, Poison):
        return w.write(ops[0], x, mask)
    base = cmp[:-1] if t[0] == "f" and cmp.endswith("u") and cmp[:-1] in _CMP else cmp
    if cmp == "num":
        r = ~np.isnan(x[0]) & ~np.isnan(x[1])
    elif cmp == "nan":
        r = np.isnan(x[0]) | np.isnan(x[1])
    elif base in _CMP:
        with np.errstate(all="ignore"):
            r = _CMP[base](x[0], x[1])
        if base != cmp:
            r = r | np.isnan(x[0]) | np.isnan(x[1])
    else:
        return w.write(ops[0], Poison(st), mask)
    if boolop:
        c = w.read(ops[3], st)
        if isinstance(c, Poison):
            return w.write(ops[0], c, mask)
        c = np.asarray(c, dtype=bool)
        r = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}[boolop](r, c)
    return w.write(ops[0], np.asarray(r, dtype=bool), mask)


def _cvt(w, st: Statement, parts: list[str], mask) -> None:
    types = [p for p in parts[1:] if _TYPES.fullmatch(p)]
    d, s = st.operands[0], st.operands[1]
    if len(types) < 2 or "16" in types[0] and types[0][0] == "f" or "16" in types[1] and types[1][0] == "f":
        return w.write(d, Poison(st), mask)
    dt, stype = types[0], types[1]
    v = w.read(s, st)
    if isinstance(v, Poison):
        return w.write(d, v, mask)
    v = np.asarray(v)
    if stype[0] == "f":
        x = _as_float(v, _bits(stype))
        if dt[0] == "f":
            return w.write(d, _f_round(x, dt), mask)
        rnd = {"rni": np.rint, "rmi": np.floor, "rpi": np.ceil}.get(
            next((p for p in parts if p.endswith("i")), ""), np.trunc
        )
        with np.errstate(all="ignore"):
            r = np.nan_to_num(rnd(x)).astype(np.int64)
        return w.write(d, _norm(r, dt), mask)
    x = _as_int(v, _bits(stype), stype[0] == "s")
    if dt[0] == "f":
        return w.write(d, _f_round(x.astype(np.float64), dt), mask)
    if "sat" in parts and dt[0] in "su":
        bits = _bits(dt)
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if dt[0] == "s" else (0, (1 << bits) - 1)
        x = np.clip(x, lo, hi)
    return w.write(d, _norm(x, dt), mask)


def _warp_op(w, st: Statement, parts: list[str], t: str, mask) -> None:
    ops = st.operands
    head = parts[0]
    bitmask = int(np.sum(1 << _LANE[mask]))
    if head == "activemask":
        return w.write(ops[0], np.full(LANES, bitmask, dtype=np.int64), mask)
    if head == "elect":
        leader = int(np.flatnonzero(mask)[0])
        outs = ops[0].split("|")
        if outs[0].strip() != "_":
            w.write(outs[0], np.full(LANES, leader, dtype=np.int64), mask)
        if len(outs) > 1:
            w.write(outs[1], _LANE == leader, mask)
        return None
    if head == "vote":
        p = w.read(ops[1], st)
        if isinstance(p, Poison):
            return w.write(ops[0], p, mask)
        p = np.asarray(p, dtype=bool) & mask
        kind = parts[2] if parts[1] == "sync" else parts[1]
        if kind == "ballot":
            return w.write(ops[0], np.full(LANES, int(np.sum(1 << _LANE[p])), dtype=np.int64), mask)
        on = p[mask]
        r = {"all": on.all(), "any": on.any(), "uni": on.all() or not on.any()}[kind]
        return w.write(ops[0], np.full(LANES, r, dtype=bool), mask)
    if head == "redux":
        x = _ints(w, ops[1:2], st, 32, "s32" in parts)
        if isinstance(x, Poison):
            return w.write(ops[0], x, mask)
        vals = x[0][mask]
        kind = parts[2] if parts[1] == "sync" else parts[1]
        f = {
            "add": np.sum,
            "min": np.min,
            "max": np.max,
            "and": np.bitwise_and.reduce,
            "or": np.bitwise_or.reduce,
            "xor": np.bitwise_xor.reduce,
        }.get(kind)
        if f is None:
            return w.write(ops[0], Poison(st), mask)
        return w.write(ops[0], _norm(np.full(LANES, int(f(vals)), dtype=np.int64), t), mask)
    # shfl.sync.mode.b32 d[|p], a, b, c, membermask (PTX ISA: the source lane j and its validity)
    mode = parts[2] if parts[1] == "sync" else parts[1]
    a = w.read(ops[1], st)
    bc = _ints(w, ops[2:4], st, 32, False)
    if isinstance(bc, Poison) or isinstance(a, Poison):
        return w.write(ops[0], bc if isinstance(bc, Poison) else a, mask)
    b, c = bc
    seg = (c >> 8) & 0x1F
    maxl = (_LANE & seg) | (c & 0x1F & ~seg)
    minl = _LANE & seg
    j = {"up": _LANE - b, "down": _LANE + b, "bfly": _LANE ^ b, "idx": minl | (b & 0x1F & ~seg)}[mode]
    ok = j >= maxl if mode == "up" else j <= maxl
    j = np.where(ok, j, _LANE) & 31
    outs = ops[0].split("|")
    w.write(outs[0], np.asarray(a)[j], mask)
    if len(outs) > 1:
        w.write(outs[1], ok, mask)
    return None


def _cp_async_data(emu, w, st: Statement, ops, brackets: list[int], off, on) -> None:
    """The bytes a ``cp.async [dst], [src], N[, src_size]`` copies into the block's shared memory (the source
    read as a global load reads it, the rest past ``src_size`` zero), so later shared loads see the data. A
    source address the emulator does not evaluate leaves the destination zero: it feeds data, not addresses."""
    src = _addr(w, ops[brackets[1]], st)
    lits = [o for o in ops[brackets[1] + 1 :] if re.fullmatch(r"\d+", o)]
    if isinstance(src, Poison) or not lits or not on.any():
        return
    size = int(lits[0])
    rest = ops[brackets[1] + 2 :] if brackets[1] + 2 < len(ops) else ()
    keep = np.full(LANES, size, dtype=np.int64)
    if rest and rest[0].startswith("%"):  # src-size: the bytes read from global; the others are zero
        v = w.read(rest[0], st)
        if not isinstance(v, Poison):
            keep = np.minimum(_as_int(np.asarray(v), 32, False), size)
    for c in range(0, size, 8):
        n = min(8, size - c)
        v = _global_bytes(emu, _as_int(src, 64, True) + c, n)
        for b in range(n):  # bytes at or past src-size are zero
            v = np.where(keep > c + b, v, v & ~(np.int64(0xFF) << np.int64(8 * b)))
        _smem_write(w, off + c, on, n, v)


def _param(emu, w, st: Statement, parts: list[str], addr_op: str, mask) -> None:
    """``ld.param`` of a kernel argument, and ``st.param`` / ``ld.param`` of a call's arguments and return
    values (a warp's parameter space: (name, byte offset) -> the 32 lanes' values; vectors one per element)."""
    ops = st.operands
    t = _typ(st.opcode)
    size = max(_bits(t) // 8, 1)
    name, _, off = addr_op[1:-1].strip().partition("+")
    name = name.strip()
    try:
        off = int(off.strip() or "0", 0)
    except ValueError:
        off = None
    if parts[0] == "st":
        if off is None:
            return None
        for k, src in enumerate(_dsts(ops[1])):
            v = w.read(src, st)
            key = (name, off + k * size)
            old = w.param_space.get(key)
            if isinstance(v, Poison) or old is None or isinstance(old, Poison) or mask.all():
                w.param_space[key] = v
            else:
                w.param_space[key] = np.where(mask, v, old.astype(np.asarray(v).dtype))
        return None
    val = emu.params.get(name)
    if val is not None:  # a kernel argument
        if off:
            return w.write(ops[0], Poison(st), mask)  # a struct passed by value
        return w.write(
            ops[0],
            _norm(np.full(LANES, val[0], dtype=np.int64 if isinstance(val[0], int) else np.float64), t),
            mask,
        )
    for k, d in enumerate(_dsts(ops[0])):
        v = w.param_space.get((name, off + k * size)) if off is not None else None
        if v is None or isinstance(v, Poison):
            w.write(d, v if isinstance(v, Poison) else Poison(st), mask)
            continue
        v = np.asarray(v)
        if t in ("f32", "f64"):
            v = _as_float(v, _bits(t))
        elif t == "pred":
            v = v.astype(bool)
        else:
            v = _norm(_as_int(v, _bits(t), False), t)
        w.write(d, v, mask)
    return None


def _call(emu, w, st: Statement, mask) -> None:
    """A ``call`` left by :func:`smemtile.model.ptx_emu.program`: an indirect one stops the emulation; one of a
    function without a body (``vprintf``) does nothing, and its return values are poison."""
    callee, rets, _ = parse_call(st)
    if not callee or callee.startswith("%"):
        raise EmulationError(
            f"PTX line {st.ptx_line}: `{st.text}` (an indirect call through a function pointer) is not emulated"
        )
    for r in rets:
        w.param_space[(r, 0)] = Poison(st)


def _memory(emu, w, st: Statement, parts: list[str], mask, sink) -> None:
    head = parts[0]
    ops = st.operands
    space = _space(parts)
    t = _typ(st.opcode)
    brackets = [i for i, o in enumerate(ops) if o.startswith("[")]
    if st.opcode.startswith("cp.async"):
        if not brackets or "commit_group" in parts or "wait_group" in parts or "wait_all" in parts:
            return None
        names = [p.split("::")[0] for p in parts[2:] if p.split("::")[0] in ("shared", "global")]
        k = names.index("shared") if "shared" in names else 0
        k = min(k, len(brackets) - 1)
        a = _addr(w, ops[brackets[k]], st)
        if isinstance(a, Poison):
            raise EmulationError(f"PTX line {st.ptx_line}: the address of `{st.text}` depends on {a}")
        off, on = _shared_offsets(emu, st, a, mask, "shared", 1)
        _record(emu, st, off, on, sink)
        if "bulk" not in parts and len(brackets) > 1 and names[:1] == ["shared"]:
            _cp_async_data(emu, w, st, ops, brackets, off, on)
        return None
    addr_op = ops[brackets[0]] if brackets else None
    if addr_op is None:
        return None
    if space == "param":
        return _param(emu, w, st, parts, addr_op, mask)
    a = _addr(w, addr_op, st)
    if isinstance(a, Poison):
        raise EmulationError(
            f"PTX line {st.ptx_line}: the address of `{st.text}` depends on {a}, which the "
            "emulator does not evaluate"
        )
    if head in ("ldmatrix", "stmatrix"):
        # lanes 8m..8m+7 give matrix m's row addresses; the others' are not used (recorded as 0, as on the GPU)
        matrices = next((int(p[1:]) for p in parts if p in ("x1", "x2", "x4")), 1)
        used = _LANE < 8 * matrices
        off, _ = _shared_offsets(emu, st, np.where(used, a, 0), mask & used, "shared", 16)
        _record(emu, st, np.where(used, off, 0), mask, sink)
        if head == "ldmatrix":
            for d in _dsts(ops[0]):
                w.write(d, np.zeros(LANES, dtype=np.int64), mask)
        return None
    vec = _vec(parts)
    size = max(_bits(t) // 8, 1)
    off, on = _shared_offsets(emu, st, a, mask, space, size * vec)
    if off is not None:
        _record(emu, st, off, on, sink)
    elsewhere = mask if off is None else mask & ~on
    if head in ("ld", "ldu"):
        for k, d in enumerate(_dsts(ops[0])):
            if d == "_":
                continue
            if space == "local" or space == "const":
                w.write(d, Poison(st), mask)
                continue
            v = np.zeros(LANES, dtype=np.int64) if on is None else _smem_read(w, off + k * size, on, size)
            v = _as_float(v, _bits(t)) if t[0] == "f" and t in ("f32", "f64") else _norm(v, t)
            if elsewhere.any():
                g = _global_read(emu, a + k * size, t)
                v = np.where(elsewhere, g, v)
            w.write(d, v, mask)
        return None
    if head == "st":
        if on is None or not on.any():
            return None
        for k, s in enumerate(_dsts(ops[brackets[0] + 1])):
            v = w.read(s, st)
            if isinstance(v, Poison):
                continue  # poisoned data stays zero in shared memory
            _smem_write(w, off + k * size, on, size, _as_int(np.asarray(v), _bits(t), False))
        return None
    # atom / red: shared ones update the warp's shared memory lane by lane (the hardware serialises them)
    kind = next(
        (p for p in parts[1:] if p in ("add", "inc", "dec", "exch", "cas", "min", "max", "and", "or", "xor")),
        "add",
    )
    val_ops = ops[brackets[0] + 1 :]
    vals = _ints(w, val_ops, st, _bits(t), t[0] == "s") if t[0] != "f" else _floats(w, val_ops, st, _bits(t))
    old = np.zeros(LANES, dtype=np.int64)
    if on is not None and on.any() and not isinstance(vals, Poison) and t[0] != "f":
        for lane in np.flatnonzero(on):
            o = int(off[lane])
            cur = int(_smem_read(w, np.full(LANES, o), _LANE == lane, size)[lane])
            old[lane] = cur
            b = int(vals[0][lane])
            new = {
                "add": cur + b,
                "exch": b,
                "min": min(cur, b),
                "max": max(cur, b),
                "and": cur & b,
                "or": cur | b,
                "xor": cur ^ b,
                "inc": 0 if cur >= b else cur + 1,
                "dec": b if cur == 0 or cur > b else cur - 1,
                "cas": int(vals[1][lane]) if len(vals) > 1 and cur == b else cur,
            }[kind]
            _smem_write(
                w, np.full(LANES, o), _LANE == lane, size, np.full(LANES, new & ((1 << (8 * size)) - 1))
            )
    if head == "atom" and ops[0].startswith("%"):
        w.write(ops[0], _norm(old, t) if t[0] != "f" else old.astype(np.float64), mask)
    return None
