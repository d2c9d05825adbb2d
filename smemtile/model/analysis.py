"""Evaluate a spec's accesses into per-lane addresses and run the bank model on every instruction.

One instruction = one warp x one combination of the loop variables in ``over``. Arrays are shaped
``[instructions, lanes]``; nothing here loops over lanes in Python.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from smemtile.errors import SpecError
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
    rows: np.ndarray | None = field(default=None, repr=False)  # [I, 32] logical row (2-D buffers)
    cols: np.ndarray | None = field(default=None, repr=False)  # [I, 32] logical col (or 1-D index)

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
    """Addresses and wavefronts of every instruction of ``access`` (with an optional layout override)."""
    buf = spec.buffer(access.buffer)
    lay = layout if layout is not None else buf.layout
    env, warp, loops = instruction_env(spec, access)
    n = warp.shape[0]
    where = f"accesses.{access.name}"
    rows = cols = None
    # elements one lane's access covers (an ldmatrix/stmatrix lane supplies a 16-byte row address)
    elems = (16 if access.op in ("ldmatrix", "stmatrix") else access.width) // buf.elem_bytes
    active = None
    if access.active is not None:
        active = _full(access.active(env), n) != 0
        keep = active.any(axis=1)  # an instruction no lane takes part in moves nothing: left out
        if not keep.any():
            raise SpecError(
                "no lane is active in any instruction ('active' is 0 everywhere)",
                key=where,
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
    if access.addresses is not None:
        addr = _full(np.asarray(access.addresses), n)
    elif access.address is not None:
        addr = _full(access.address(env), n)
    else:
        if access.index is not None:
            cols = _full(access.index(env), n)
            limit = buf.shape[0]
            _bounds(cols, 0, limit - elems + 1, "index", where, buf, warp, loops, spec.source, active)
            off = lay.swizzle(cols) if lay.swizzle is not None else cols
        else:
            rows = _full(access.row(env), n)
            cols = _full(access.col(env), n)
            _bounds(rows, 0, buf.shape[0], "row", where, buf, warp, loops, spec.source, active)
            _bounds(cols, 0, buf.shape[1] - elems + 1, "col", where, buf, warp, loops, spec.source, active)
            if active is not None:  # idle lanes' coordinates are never used
                rows, cols = np.where(active, rows, 0), np.where(active, cols, 0)
            if elems > 1 and ((cols % elems) != 0).any():
                i, lane = (int(x) for x in np.argwhere(cols % elems != 0)[0])
                raise SpecError(
                    f"col {int(cols[i, lane])} at lane {lane} is not a multiple of {elems}: a "
                    f"{access.width}-byte access of {buf.dtype} needs aligned vectors",
                    key=where,
                    source=spec.source,
                )
            off = lay.offset(rows, cols, buf.shape[1])
        addr = off * buf.elem_bytes
    if active is not None:
        addr = np.where(active, addr, 0)
    total = buf.bytes(lay) // buf.stages
    span = elems * buf.elem_bytes  # bytes one lane touches
    bad = (addr < 0) | (addr + span > total)
    if bad.any():
        i, lane = (int(x) for x in np.argwhere(bad)[0])
        raise SpecError(
            f"byte offset {int(addr[i, lane])} at lane {lane} ({span} bytes) is outside {buf.name} "
            f"(0..{total - 1}, {total} bytes)",
            key=where,
            source=spec.source,
        )
    src = None
    if access.source is not None:
        src = _full(access.source(env), n) * buf.elem_bytes
    try:
        bank = analyze_addresses(addr, access.op, access.width, access.matrices, sources=src, active=active)
    except SpecError as e:
        raise SpecError(str(e).split(": ", 1)[-1], key=where, source=spec.source) from None
    return AccessResult(access, buf, lay, bank, warp, loops, rows, cols)


def _bounds(
    v: np.ndarray,
    lo: int,
    hi: int,
    what: str,
    where: str,
    buf: Buffer,
    warp,
    loops,
    source: str,
    active: np.ndarray | None = None,
) -> None:
    bad = (v < lo) | (v >= hi)
    if active is not None:
        bad &= active
    if bad.any():
        i, lane = (int(x) for x in np.argwhere(bad)[0])
        ctx = ", ".join([f"warp {int(warp[i])}"] + [f"{k}={x}" for k, x in loops[i].items()])
        raise SpecError(
            f"{what} = {int(v[i, lane])} is outside {buf.name} {list(buf.shape)} at lane {lane} "
            f"({ctx}); allowed {lo}..{hi - 1}",
            key=where,
            source=source,
        )


def analyze_spec(spec: KernelSpec, layouts: dict[str, Layout] | None = None) -> tuple[AccessResult, ...]:
    """Every access of the spec, with per-buffer layout overrides (used by the fix search)."""
    layouts = layouts or {}
    return tuple(analyze_access(spec, a, layouts.get(a.buffer)) for a in spec.accesses)
