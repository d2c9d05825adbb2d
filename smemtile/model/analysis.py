"""Evaluate a spec's accesses into per-lane addresses and run the bank model on every instruction.

One instruction = one warp x one combination of the loop variables in ``over``. Arrays are shaped
``[instructions, lanes]``; nothing here loops over lanes in Python.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field

import numpy as np

from smemtile.errors import SpecError
from smemtile.fileio import printable
from smemtile.model.banks import BankResult, analyze_addresses
from smemtile.model.layout import Layout
from smemtile.model.spec import Access, Buffer, KernelSpec


@dataclass(frozen=True)
class AccessResult:
    access: Access
    buffer: Buffer
    layout: Layout
    bank: BankResult
    warp: np.ndarray = field(repr=False)  # [I] warp index of each instruction
    loop_values: tuple[dict, ...] = field(repr=False)  # [I] loop variable values
    # [I, 32] logical row (2-D buffers; a 3-D buffer's row counted across stages: stage * rows + row, so that
    # Layout.offset(rows, cols) is the element offset for any layout)
    rows: np.ndarray | None = field(default=None, repr=False)
    cols: np.ndarray | None = field(default=None, repr=False)  # [I, 32] logical col (or 1-D index)
    stages: np.ndarray | None = field(default=None, repr=False)  # [I, 32] stage of a 3-D buffer

    @functools.cached_property
    def distinct(self) -> tuple[np.ndarray, np.ndarray]:
        """(first, inverse): the index of one instruction per distinct (coordinates or addresses, active lanes,
        sources) and, per instruction, which of those it repeats. Identical instructions have identical
        wavefronts under every layout, so the fix search models each distinct one once."""
        coords = [x for x in (self.rows, self.cols) if x is not None] or [self.bank.addresses]
        key = np.concatenate(
            [*coords, self.bank.active.astype(np.int64)]
            + ([self.bank.sources] if self.bank.sources is not None else []),
            axis=1,
        )
        key = np.ascontiguousarray(key)
        # one 64-bit hash per instruction sorts fast; rows that share a hash are compared exactly below
        h = key @ _hash_weights(key.shape[1])
        _, first, inv = np.unique(h, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
        if not (key[first][inv] == key).all():  # a hash collision: fall back to the exact (slower) unique
            _, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
            inv = inv.reshape(-1)
        return first, inv

    @property
    def where(self) -> str:
        """How errors and reports name this access: the access and its buffer."""
        return f"access {self.access.name} of buffer {self.buffer.name}"

    @property
    def worst(self) -> int:
        return self.bank.worst

    @property
    def wavefronts(self) -> int:
        return int(self.bank.wavefronts[self.worst])

    @property
    def ideal(self) -> int:
        return int(self.bank.ideal_wavefronts[self.worst])

    @property
    def degree(self) -> float:
        return float(self.bank.conflict_degree.max())

    @property
    def conflict_free(self) -> bool:
        return bool((self.bank.wavefronts == self.bank.ideal_wavefronts).all())

    def label(self, i: int) -> str:
        parts = [f"warp {int(self.warp[i])}"] + [f"{k}={v}" for k, v in self.loop_values[i].items()]
        return ", ".join(parts)


@functools.cache
def _hash_weights(n: int) -> np.ndarray:
    """``n`` fixed weights in 1..2**20 (the top bits of a golden-ratio Weyl sequence) for the instructions' hash;
    any weights give the same answer (rows sharing a hash are compared exactly), good ones rarely collide.
    Computed without numpy.random (whose import costs more than the hashing)."""
    i = np.arange(1, n + 1, dtype=np.uint64)
    w = ((i * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(44)).astype(np.int64) + 1
    w.flags.writeable = False  # shared by every call
    return w


def instruction_env(spec: KernelSpec, access: Access) -> tuple[dict, np.ndarray, tuple[dict, ...]]:
    """The variables of every instruction: lane, warp, tid and loop variables as [I, 32] int64 arrays."""
    warps = access.warps if access.warps is not None else tuple(range(spec.warps))
    loop_names = [v for v, _ in access.over]
    combos = list(itertools.product(*[vals for _, vals in access.over])) or [()]
    n = len(warps) * len(combos)
    lane = np.broadcast_to(np.arange(32, dtype=np.int64), (n, 32))
    warp = np.repeat(np.asarray(warps, dtype=np.int64), len(combos))
    env: dict = dict(spec.constants)
    env.update(lane=lane, warp=warp[:, None], tid=warp[:, None] * 32 + lane)
    combo_arr = np.asarray(combos * len(warps), dtype=np.int64).reshape(n, len(loop_names))
    for j, name in enumerate(loop_names):
        env[name] = combo_arr[:, j : j + 1]
    loops = tuple(dict(zip(loop_names, map(int, c), strict=True)) for c in combos) * len(warps)
    return env, warp, loops


def _full(v, n: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(v, dtype=np.int64), (n, 32)).copy()


def analyze_access(spec: KernelSpec, access: Access, layout: Layout | None = None) -> AccessResult:
    """Addresses and wavefronts of every instruction of ``access`` (with an optional layout override).

    Every error names the access, its buffer, the lane and the instruction (warp and loop values)."""
    buf = spec.buffer(access.buffer)
    lay = layout if layout is not None else buf.layout
    fail = _Failure(spec, access, buf)
    c = _coordinates(spec, access, buf, fail)
    n, warp, loops, active, rows, cols, stages, addr = (
        c["n"],
        c["warp"],
        c["loops"],
        c["active"],
        c["rows"],
        c["cols"],
        c["stages"],
        c["addr"],
    )
    fail.warp, fail.loops = warp, loops
    elems = (16 if access.op in ("ldmatrix", "stmatrix") else access.width) // buf.elem_bytes
    if addr is None:
        if rows is None:
            off = lay.swizzle(cols) if lay.swizzle is not None else cols
        else:
            off = lay.offset(rows, cols, buf.cols)
        addr = off * buf.elem_bytes
    if active is not None:
        addr = np.where(active, addr, 0)
    total = buf.bytes(lay) // buf.stages  # accesses address the first stage of a buffer with `stages:`
    span = elems * buf.elem_bytes  # bytes one lane touches
    fail.check(
        (addr < 0) | (addr + span > total),
        None,
        lambda i, lane: (
            f"byte offset {int(addr[i, lane])} ({span} bytes) is outside 0..{total - 1} ({total} bytes)"
        ),
    )
    align = 16 if access.op in ("ldmatrix", "stmatrix") else access.width
    fail.check(
        addr % align != 0,
        active,
        lambda i, lane: (
            f"address {int(addr[i, lane])} is not aligned to {align} bytes: a misaligned {access.op} faults"
        ),
    )
    src = None
    if access.source is not None:
        if "src" not in c:
            c["src"] = _full(access.source(c["env"]), n) * buf.elem_bytes
        src = c["src"]
        fail.check(
            src % access.width != 0,
            active,
            lambda i, lane: (
                f"source {int(src[i, lane])} is not aligned to {access.width} bytes (cp.async "
                "needs aligned sources)"
            ),
        )
    try:
        bank = analyze_addresses(addr, access.op, access.width, access.matrices, sources=src, active=active)
    except SpecError as e:
        raise SpecError(
            f"{str(e).split(': ', 1)[-1]} in {fail.what}", key=fail.key, source=spec.source
        ) from None
    return AccessResult(access, buf, lay, bank, warp, loops, rows, cols, stages)


# the layout-independent half of analyze_access (the instructions' coordinates, from the access's expressions),
# kept per process for the last few accesses: the fix search analyses the same access under many layouts (a plain
# dict, emptied when full: safe to share with the tune executor's thread)
_COORDS: dict[tuple, dict] = {}
COORDS_KEPT = 32


def _coordinates(spec: KernelSpec, access: Access, buf, fail: _Failure) -> dict:
    """Per instruction: warp, loop values, active lanes and the logical coordinates (rows across the stages of
    a 3-D buffer, cols) or, for a raw access, the byte addresses; every check that needs no layout done. Cached
    on everything it reads: the access, the buffer's shape and element type, the warps and the constants."""
    try:
        key = (access, buf.name, buf.dtype, buf.shape, buf.stages, spec.warps, tuple(spec.constants.items()))
        c = _COORDS.get(key)
    except TypeError:  # an unhashable part: not cached
        key, c = None, None
    if c is not None:
        return c
    env, warp, loops = instruction_env(spec, access)
    n = warp.shape[0]
    rows = cols = stages = addr = None
    # elements one lane's access covers (an ldmatrix/stmatrix lane supplies a 16-byte row address)
    elems = (16 if access.op in ("ldmatrix", "stmatrix") else access.width) // buf.elem_bytes
    active = None
    if access.active is not None:
        active = _full(access.active(env), n) != 0
        keep = active.any(axis=1)  # an instruction no lane takes part in moves nothing: left out
        if not keep.any():
            raise SpecError(
                f"no lane is active in any instruction ('active' is 0 everywhere) in {fail.what}",
                key=fail.key,
                source=spec.source,
            )
        if not keep.all():
            env = {
                k: (v[keep] if isinstance(v, np.ndarray) and v.ndim == 2 and v.shape[0] == n else v)
                for k, v in env.items()
            }
            warp = warp[keep]
            loops = tuple(lp for lp, k in zip(loops, keep, strict=True) if k)
            active, n = active[keep], int(keep.sum())
    fail.warp, fail.loops = warp, loops
    if access.addresses is not None:
        addr = _full(np.asarray(access.addresses), n)
    elif access.address is not None:
        addr = _full(access.address(env), n)
    elif access.index is not None:
        cols = _full(access.index(env), n)
        fail.bounds(cols, 0, buf.shape[0] - elems + 1, "index", active)
    else:
        rows = _full(access.row(env), n)
        cols = _full(access.col(env), n)
        fail.bounds(rows, 0, buf.rows, "row", active)
        fail.bounds(cols, 0, buf.cols - elems + 1, "col", active)
        if access.stage is not None:  # 3-D [stage, row, col]: rows counted across the stages
            stages = _full(access.stage(env), n)
            fail.bounds(stages, 0, buf.shape[0], "stage", active)
        if active is not None:  # idle lanes' coordinates are never used
            rows, cols = np.where(active, rows, 0), np.where(active, cols, 0)
            stages = None if stages is None else np.where(active, stages, 0)
        if stages is not None:
            rows = stages * buf.rows + rows
        if elems > 1:
            fail.check(
                (cols % elems) != 0,
                None,
                lambda i, lane: (
                    f"has col {int(cols[i, lane])}, not a multiple of {elems}: a "
                    f"{access.width}-byte access of {buf.dtype} needs aligned vectors"
                ),
            )
    c = {
        "n": n,
        "warp": warp,
        "loops": loops,
        "active": active,
        "rows": rows,
        "cols": cols,
        "stages": stages,
        "addr": addr,
        "env": env,
    }
    if key is not None:
        if len(_COORDS) >= COORDS_KEPT:
            _COORDS.clear()
        _COORDS[key] = c
    return c


class _Failure:
    """Errors of one access, naming the access, its buffer, the lane and the instruction."""

    def __init__(self, spec: KernelSpec, access: Access, buf: Buffer):
        self.source = spec.source
        self.key = f"accesses.{printable(access.name)}"
        self.what = f"access {printable(access.name)} of buffer {printable(buf.name)}"
        self.shape = f"{printable(buf.name)} {list(buf.shape)}"
        self.warp: np.ndarray | None = None
        self.loops: tuple = ()

    def __call__(self, message: str, i: int, lane: int) -> SpecError:
        """``message`` about lane ``lane`` of instruction ``i``, e.g. "address 8 is not aligned to 16 bytes"."""
        ctx = ", ".join([f"warp {int(self.warp[i])}"] + [f"{k}={x}" for k, x in self.loops[i].items()])
        return SpecError(f"lane {lane} {message} ({self.what}, {ctx})", key=self.key, source=self.source)

    def check(self, bad: np.ndarray, active: np.ndarray | None, message) -> None:
        """Raise for the first active lane where ``bad`` holds; ``message(i, lane)`` says what is wrong there."""
        if active is not None:
            bad = bad & active
        if bad.any():
            i, lane = (int(x) for x in np.argwhere(bad)[0])
            raise self(message(i, lane), i, lane)

    def bounds(self, v: np.ndarray, lo: int, hi: int, what: str, active: np.ndarray | None) -> None:
        self.check(
            (v < lo) | (v >= hi),
            active,
            lambda i, lane: f"has {what} = {int(v[i, lane])}, outside {self.shape}; allowed {lo}..{hi - 1}",
        )


def analyze_spec(spec: KernelSpec, layouts: dict[str, Layout] | None = None) -> tuple[AccessResult, ...]:
    """Every access of the spec, with per-buffer layout overrides (used by the fix search)."""
    layouts = layouts or {}
    return tuple(analyze_access(spec, a, layouts.get(a.buffer)) for a in spec.accesses)
