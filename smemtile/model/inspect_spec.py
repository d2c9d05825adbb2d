"""The recorded accesses of an inspected kernel as a spec that ``smemtile analyze`` takes (``--emit-spec``).

Per modelled instruction, the first sampled block's records become one access:

* when every record has all 32 lanes active, the sampled warps executed it equally often and the byte offset
  is affine, ``off = c0 + c1 * lane + c2 * warp + c3 * k`` (``k`` the execution number), the access is written
  with expressions: ``row``/``col`` of the declared array (``E // COLS``, ``E % COLS`` with ``E`` the element
  offset), so analyze's fix search works on it, or ``address:`` for an array without a declaration;
* otherwise each distinct (addresses, active lanes) pattern becomes a raw access (``addresses:`` and, when some
  lanes are idle, ``active:`` from the mask), at most ``MAX_PATTERNS`` per instruction.
"""

from __future__ import annotations

import numpy as np

from smemtile.model.inspect_explain import ArrayInfo, InstrReport

MAX_PATTERNS = 32
MAX_ACCESSES = 256


def _affine(recs) -> tuple[list[int], list[int], int] | None:
    """(coefficients [c0, lane, warp, k], warps, K) when the records are an affine rectangle, else None."""
    if any(r.active != 0xFFFFFFFF for r in recs):
        return None
    per: dict[int, list] = {}
    for r in recs:
        per.setdefault(r.warp, []).append(r)
    counts = {len(v) for v in per.values()}
    if len(counts) != 1:
        return None
    k_n = counts.pop()
    rows, y = [], []
    for w, rs in per.items():
        for k, r in enumerate(rs):
            for lane in range(32):
                rows.append((1, lane, w, k))
                y.append(r.addresses[lane])
    a = np.asarray(rows, dtype=np.float64)
    b = np.asarray(y, dtype=np.float64)
    c, *_ = np.linalg.lstsq(a, b, rcond=None)
    ci = [int(round(x)) for x in c]
    if not (np.asarray(rows, dtype=np.int64) @ np.asarray(ci, dtype=np.int64) == np.asarray(y)).all():
        return None
    return ci, sorted(per), k_n


def _expr(c: list[int], scale: int = 1) -> str:
    """c0 + c1*lane + c2*warp + c3*k, divided by ``scale`` (exactly), as spec expression text."""
    terms = []
    for coef, name in zip(c, ("", "lane", "warp", "k"), strict=True):
        v = coef // scale
        if v == 0:
            continue
        terms.append(f"{v}" if not name else (name if v == 1 else f"{v} * {name}"))
    return " + ".join(terms) or "0"


def emit_spec(
    reports: list[InstrReport], arrays: dict[str, ArrayInfo], *, arch: str, threads: int, kernel: str
) -> dict:
    """The spec document (see the module docstring); its buffers are the arrays the accesses touch."""
    buffers: dict[str, dict] = {}
    accesses: list[dict] = []
    first_block = None
    for r in sorted(reports, key=lambda r: r.instr.index):
        if r.result is None:
            continue
        ar = r.result
        recs_all = _records_of(r)
        if first_block is None and recs_all:
            first_block = recs_all[0].block
        recs = [x for x in recs_all if x.block == (first_block or recs_all[0].block)] or recs_all
        info = arrays.get(r.array or "")
        structured = info is not None and info.buffer is not None and ar.buffer is info.buffer
        if structured:
            buf = info.buffer
            bname, base = buf.name, info.base
            buffers[bname] = {"name": bname, "dtype": buf.dtype, "shape": list(buf.shape)}
        else:
            bname = "shared_window"
            base = 0
            top = max((a + 16 for x in recs for a in x.addresses), default=128)
            old = buffers.get(bname, {"shape": [128]})["shape"][0]
            buffers[bname] = {"name": bname, "dtype": "u8", "shape": [max(old, (top + 127) // 128 * 128)]}
        ins = r.instr
        common = {"op": ar.access.op, "width": ar.access.width, "buffer": bname}
        if ar.access.op in ("ldmatrix", "stmatrix"):
            common.update(matrices=ins.matrices, trans=ins.trans)
        where = f"{ins.file.rsplit('/', 1)[-1]}:{ins.line}" if ins.file else f"PTX line {ins.ptx_line}"
        note = f"{where} {ins.text}"
        # ldmatrix .x1/.x2 use only lanes 0-7 / 0-15: the raw form keeps the others' (unused) addresses at 0
        aff = _affine(recs) if ar.access.op not in ("ldmatrix", "stmatrix") or ins.matrices == 4 else None
        if aff is not None:
            c, warps, k_n = aff
            c = [c[0] - base, *c[1:]]
            d = {"name": f"i{ins.index}", **common, "warps": warps, "note": note}
            if k_n > 1:
                d["over"] = {"k": [0, k_n]}
            eb = info.buffer.elem_bytes if structured else 1
            if structured and all(x % eb == 0 for x in c):
                e = _expr(c, eb)
                if len(info.buffer.shape) == 1:
                    d["index"] = e
                else:
                    d["row"], d["col"] = f"({e}) // {info.buffer.cols}", f"({e}) % {info.buffer.cols}"
            else:
                d["address"] = _expr(c)
            accesses.append(d)
            continue
        patterns: dict[tuple, int] = {}
        lanes = (
            8 * ins.matrices if ar.access.op in ("ldmatrix", "stmatrix") else 32
        )  # the lanes that give addresses
        for x in recs:
            key = (
                tuple(a - base if x.active >> k & 1 and k < lanes else 0 for k, a in enumerate(x.addresses)),
                x.active,
            )
            patterns[key] = patterns.get(key, 0) + 1
        for n, ((addrs, active), count) in enumerate(list(patterns.items())[:MAX_PATTERNS]):
            d = {
                "name": f"i{ins.index}_p{n}",
                **common,
                "warps": [0],
                "addresses": list(addrs),
                "note": f"{note} ({count} of {len(recs)} recorded executions)",
            }
            if active != 0xFFFFFFFF:
                d["active"] = f"({active} >> lane) & 1"
            accesses.append(d)
    return {
        "name": f"inspect {kernel}",
        "description": "recorded by smemtile inspect: one access per shared-memory instruction",
        "arch": arch,
        "threads": max(32, -(-threads // 32) * 32),
        "buffers": list(buffers.values()),
        "accesses": accesses[:MAX_ACCESSES],
    }


def _records_of(r: InstrReport):
    return list(r.recorded)
