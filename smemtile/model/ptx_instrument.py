"""Rewrite a kernel's PTX so that it records, for a bounded sample, the 32 shared addresses of its warps.

Pure text in, text out (no CUDA): :func:`instrument` is what ``inspect`` loads on the GPU, :func:`decode_raw`
reads the buffer back. The rewritten kernel takes one extra trailing parameter, ``.param .u64
_smemtile_rec_param``: a zero-filled global buffer whose layout is (32-bit little-endian words)::

    word 0               0x31544D53 ("SMT1"), written by thread 0 of block 0: the instrumented kernel ran
    word 1, 2            the number of instrumented instructions N, the number of shared symbols S
    word 3               %dynamic_smem_size as the kernel saw it
    word 4 .. 4+S        the run-time shared-window address of each shared symbol (``mov.u32 %r, sym``),
                         in the order of :func:`shared_symbols`
    COUNT_OFF ..         one counter per (sampled block b, sampled warp w, instruction k), at
                         COUNT_OFF + (b*W + w)*N + k: how often that warp executed k (all executions,
                         also those past the sample's bound)
    SLOT_OFF ..          one 36-word slot per (b, w, k, execution e < E) at
                         SLOT_OFF + 36*(((b*W + w)*N + k)*E + e):
                         [k + 1, active mask, e, b*W + w, address of lane 0 .. address of lane 31]

COUNT_OFF and SLOT_OFF are rounded up to 32 words (:class:`BufferLayout`). A slot whose first word is 0 was
never written. Inactive lanes' addresses stay 0.

The rewritten body::

    the body's declarations, the added .reg declarations (fresh names, %smt_*), the lane's .local scratch
    prologue            block linear id b, warp w (linear thread id // 32); in_sample = b < B and w < W;
                        thread 0 of block 0 writes the header
    @!in_sample bra $SMT_PLAIN      warp-uniform: every warp runs exactly one of the two copies
    the recording copy  the kernel's statements with a recording site in front of each shared instruction,
                        its labels renamed (``$L__BB0_2`` -> ``$L__BB0_2_smt``), then ``ret``; first
                        the scratch is written
    $SMT_PLAIN:         the kernel's statements exactly as written

so the warps outside the sample run the user's code unchanged (the only cost is the prologue, and whatever the
larger function costs ptxas in registers). Barriers are counted per id, not per instruction address, so
``bar.sync`` in one copy meets ``bar.sync`` in the other.

Each lane of a sampled warp keeps a small ``.local`` scratch (:data:`LOCAL`, :func:`_local_offsets`): per
instruction k the number of executions of k the warp had made when this lane last took part before the bound
(that one included), then the address of the warp's first counter, of its first slot, and b*W + w; written
once after the branch, so that no recording value stays in a register across the kernel's code (the
recording copy then needs no more registers than the kernel). A recording site (for instruction k, also
behind the instruction's own predicate guard, if it has one)::

    a generic address is checked with isspacep.shared (lanes whose address is not shared skip)
    mask = activemask; c = this lane's count of k (a local load)
    mask is all 32 lanes:  e = redux.sync.max(c): every execution leaves its number + 1 in the lanes that took
                           part, and with every lane here the largest is the warp's count
    else (a partial warp): if any active lane's c >= E (vote) the warp is past the bound; else every active
                           lane loads counter[b, w, k] (one word, one request; no atomic)
    the leader (lowest active lane) adds 1 to counter[b, w, m] with red (nothing to wait for) for k and
                           every instruction m of k's run (below)
    %smt_p4 = e < E (warp-uniform); if so: every active lane keeps e + 1 as its count of k and stores its
                           shared address a (register (+ offset) or symbol (+ offset); a generic one
                           converted with cvta.to.shared) into its word of slot (b, w, k, e); the leader
                           stores the slot's header (predicated stores: the warp does not split)
    $SMT_SKIP_k:

A run: the sites between which the statements hold no label and no control transfer (``_breaks``), none of
them guarded or generic, run as often as the first and with the same lanes. The first counts for all (its
``red``s); each later one only reads ``%smt_p4`` (one uniform branch past the bound) and, before it, takes e
from the first's count in the lane's scratch and stores its own slot. The 4096^2 SGEMM's k0 loop body is one
run of 37 sites. ptxas schedules such runs more freely, which can cost registers: :func:`instrument`'s
``max_registers`` (inspect passes the plain kernel's) caps them with ``.maxnreg``.

No site waits for an atomic's old value, and none shuffles: the slot comes from the lanes' own counts (or, for
a partial warp, one load of a counter only this warp writes), the buffer stores are never read back, and the
counter gets one ``red`` per execution, so counts past the bound stay exact. A lane's count never exceeds the
warp's, so the vote never stops a site before the bound. A partial warp's load follows the warp's own earlier
``red``s to the same word in program order (the same SM, the same L2 slice). Before, a site waited for an
atomic's old value on every execution before the bound (37 sites x 64 executions x ~290 ns on the 4096^2
SGEMM's sampled warps: the two sampled blocks finished well after the rest of the grid, +28 % kernel time);
now a run costs, past the bound, a local load, a ``redux`` and a ``red`` per instruction at its first site
and a branch at each other; before the bound, a local load and the slot's stores per site.
Targets before sm_80 (no ``redux.sync``) take the partial warp's way at every execution.

The recording writes only to its own buffer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from smemtile.errors import SpecError

MAGIC = 0x31544D53
SLOT_WORDS = 36
PARAM = "_smemtile_rec_param"
LOCAL = (
    "__smt_seen"  # per lane, per instruction: the executions of it this lane has seen (recording copy only)
)
_HEADER_WORDS = 4


@dataclass(frozen=True)
class Sample:
    """The bounds of what is recorded."""

    blocks: int = 2  # first N blocks in linear order
    warps: int = 4  # warps 0..W-1 of each sampled block
    executions: int = 64  # first N executions per instruction per sampled warp

    def __post_init__(self):
        for name in ("blocks", "warps", "executions"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise SpecError(f"must be a positive integer, got {v!r}", key=f"sample.{name}")


@dataclass(frozen=True)
class BufferLayout:
    """Where the header, the counters and the slots lie in the record buffer (in 32-bit words)."""

    n_instr: int
    n_symbols: int
    sample: Sample

    @property
    def count_off(self) -> int:
        return _round32(_HEADER_WORDS + self.n_symbols)

    @property
    def n_counters(self) -> int:
        return self.sample.blocks * self.sample.warps * self.n_instr

    @property
    def slot_off(self) -> int:
        return _round32(self.count_off + self.n_counters)

    @property
    def n_slots(self) -> int:
        return self.n_counters * self.sample.executions

    @property
    def nbytes(self) -> int:
        return 4 * (self.slot_off + SLOT_WORDS * self.n_slots)


def _round32(n: int) -> int:
    return (n + 31) // 32 * 32


# ---- the entry's text ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    params_close: int  # index (in the text) of the ')' closing the parameter list
    body_open: int  # index of the '{' opening the body
    body_close: int  # index of the matching '}'


def _find_entry(ptx: str, entry: str) -> _Entry:
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\(", ptx)
    if m is None:
        names = re.findall(r"\.entry\s+([\w$]+)", ptx)
        raise SpecError(f"no entry {entry!r} in the PTX; entries: {', '.join(names) or 'none'}", key="kernel")
    close = ptx.find(")", m.end())
    body_open = ptx.find("{", close)
    if close < 0 or body_open < 0:
        raise SpecError(f"cannot read the parameter list or body of {entry!r}", key="ptx")
    depth, i = 0, body_open
    while i < len(ptx):
        c = ptx[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return _Entry(close, body_open, i)
        elif c == "/" and ptx.startswith("//", i):  # comments may hold braces
            j = ptx.find("\n", i)
            i = len(ptx) if j < 0 else j
            continue
        i += 1
    raise SpecError(f"the body of {entry!r} is not closed", key="ptx")


_SHARED_DECL = re.compile(
    r"^\s*(?:\.extern\s+|\.visible\s+|\.weak\s+)?\.shared\s+[^;]*?([\w$]+)\s*(?:\[[^\]]*\])*\s*;", re.M
)


def shared_symbols(ptx: str, entry: str) -> list[str]:
    """The ``.shared`` symbols the entry uses (declared in its body or at module scope and referenced in the body),
    in order of declaration. Symbols the entry never references are left out: naming one would make ptxas
    allocate it in this kernel and move the others."""
    e = _find_entry(ptx, entry)
    body = ptx[e.body_open : e.body_close]
    out = []
    for m in _SHARED_DECL.finditer(ptx):
        name = m.group(1)
        if name in out:
            continue
        inside = e.body_open <= m.start() < e.body_close
        uses = len(re.findall(r"(?<![\w$%])" + re.escape(name) + r"(?![\w$])", body))
        if uses - (1 if inside else 0) > 0:
            out.append(name)
    return out


def register_bits(body: str) -> dict[str, int]:
    """Register name (or parameterised prefix like ``%rd``) -> bits, from the body's ``.reg`` declarations."""
    bits: dict[str, int] = {}
    for m in re.finditer(r"\.reg\s+\.(\w+)\s+([^;]+);", body):
        t = m.group(1)
        n = 1 if t == "pred" else int(re.sub(r"\D", "", t) or 0)
        for name in m.group(2).split(","):
            name = name.strip()
            pm = re.match(r"([%\w$]+)<\d+>$", name)
            bits[pm.group(1) if pm else name] = n
    return bits


def _reg_bits(reg: str, bits: dict[str, int]) -> int | None:
    if reg in bits:
        return bits[reg]
    m = re.match(r"(.*?)\d+$", reg)
    return bits.get(m.group(1)) if m else None


# ---- the rewrite --------------------------------------------------------------------------------------------

_ADDR = re.compile(r"^\s*([%\w$.]+)\s*(?:([+-])\s*(-?(?:0[xX][0-9a-fA-F]+|\d+)))?\s*$")
_PRED = re.compile(r"^@(!?)(%?[\w$]+)\s+")


def _norm_text(s: str) -> str:
    s = s.strip().rstrip(";").strip()
    s = _PRED.sub("", s)
    return re.sub(r"\s+", " ", s)


def _locate(lines: list[str], instr: Any, lo: int, hi: int, used: set[int]) -> int:
    """Index of the line holding ``instr`` (0-based): its ``ptx_line`` if the text matches there, else the
    nearest line in the entry with the same text."""
    want = _norm_text(instr.text)

    def same(line: str) -> bool:  # the text may stop early (a statement cut at a vector operand's brace)
        have = _norm_text(line)
        return bool(want) and (have == want or have.startswith(want.rstrip(",")))

    i = int(instr.ptx_line) - 1
    if lo <= i < hi and i not in used and same(lines[i]):
        return i
    cands = [j for j in range(lo, hi) if j not in used and same(lines[j])]
    if not cands:
        raise SpecError(
            f"instruction {instr.index} ({instr.text!r}, PTX line {instr.ptx_line}) is not in the entry",
            key="ptx",
        )
    return min(cands, key=lambda j: abs(j - i))


def _address_code(
    instr: Any, bits: dict[str, int], symbols: set[str], skip: str
) -> tuple[list[str], list[str]] | None:
    """(the check: for a generic address, lanes whose address is not shared branch to ``skip``; the
    instructions that leave the lane's shared-window address in ``%smt_r0``, emitted late in the site so that
    nothing extra stays live across the counting); None where the operand cannot address shared memory (a
    generic access through a non-shared symbol)."""
    m = _ADDR.match(instr.addr)
    if m is None:
        raise SpecError(
            f"instruction {instr.index} ({instr.text!r}): address operand {instr.addr!r} is not "
            "register+offset or symbol+offset",
            key="ptx",
        )
    base = m.group(1)
    off = (-1 if m.group(2) == "-" else 1) * int(m.group(3), 0) if m.group(3) else 0
    check: list[str] = []
    code: list[str] = []
    generic = instr.space != "shared"
    if base.startswith("%"):
        nb = _reg_bits(base, bits)
        if nb not in (32, 64):
            raise SpecError(
                f"instruction {instr.index} ({instr.text!r}): cannot tell the width of register {base}",
                key="ptx",
            )
        if generic:
            if nb != 64:
                raise SpecError(
                    f"instruction {instr.index} ({instr.text!r}): a generic address in a 32-bit register",
                    key="ptx",
                )
            check += [
                f"add.s64 \t%smt_rd3, {base}, {off};",
                "isspacep.shared \t%smt_p1, %smt_rd3;",
                f"@!%smt_p1 bra \t{skip};",
            ]
            code += [
                f"add.s64 \t%smt_rd3, {base}, {off};",
                "cvta.to.shared.u64 \t%smt_rd3, %smt_rd3;",
                "cvt.u32.u64 \t%smt_r0, %smt_rd3;",
            ]
        elif nb == 64:
            code += [f"cvt.u32.u64 \t%smt_r0, {base};", f"add.s32 \t%smt_r0, %smt_r0, {off};"]
        else:
            code += [f"add.s32 \t%smt_r0, {base}, {off};"]
    elif re.fullmatch(r"-?(?:0[xX][0-9a-fA-F]+|\d+)", base):
        if generic:
            return None
        code += [f"mov.u32 \t%smt_r0, {int(base, 0) + off};"]
    else:
        if generic and base not in symbols:
            return None  # a generic access through a global/const symbol never touches shared memory
        code += [f"mov.u32 \t%smt_r0, {base};", f"add.s32 \t%smt_r0, %smt_r0, {off};"]
    return check, code


def _local_offsets(n_instr: int) -> tuple[int, int, int, int]:
    """Byte offsets in the lane's ``.local`` scratch (:data:`LOCAL`): the per-instruction execution counts
    start at 0; then the address of this warp's first counter, of its first slot, its b*W + w; the size."""
    cb = (4 * max(n_instr, 1) + 7) // 8 * 8
    return cb, cb + 8, cb + 16, cb + 24


_CONTROL = re.compile(r"^\s*(?:@!?%?[\w$]+\s+)?(?:bra|brx|ret|exit|trap|call|brkpt)\b")


def _breaks(lines: list[str]) -> bool:
    """Whether control can enter or leave between two statements: a label or a control transfer among ``lines``."""
    for line in lines:
        code = line.split("//", 1)[0]
        if _LABEL_DEF.match(code) or _CONTROL.match(code):
            return True
    return False


def _site(
    k: int,
    instr: Any,
    layout: BufferLayout,
    addr: tuple[list[str], list[str]],
    redux: bool = True,
    members: list[int] | None = None,
) -> list[str]:
    """The recording site of instruction k. Nothing lives in registers between sites (the warp's buffer
    addresses and its index are read from the lane's local scratch), so that the recording copy needs hardly
    more registers than the kernel. No atomic returns a value: a whole warp (all 32 lanes active) takes its
    execution number from its lanes' own counts (``redux.sync.max``), a partial warp reads its counter with a
    plain load; the counter is kept by ``red`` (nothing to wait for). ``redux`` False (targets before sm_80)
    sends every execution the partial warp's way."""
    e = layout.sample.executions
    cb, sb, bw, _ = _local_offsets(layout.n_instr)
    skip, part, count = f"$SMT_SKIP_{k}", f"$SMT_PART_{k}", f"$SMT_COUNT_{k}"
    code = [f"// smemtile: record instruction {k} ({instr.op})"]
    pred = (instr.predicate or "").strip()
    if pred:
        pm = re.fullmatch(r"@(!?)(%?[\w$]+)", pred)
        if pm is None:
            raise SpecError(f"instruction {instr.index}: cannot read its guard {pred!r}", key="ptx")
        code.append(f"@{'' if pm.group(1) else '!'}{pm.group(2)} bra \t{skip};")
    check, value = addr
    code += check
    code += [
        "activemask.b32 \t%smt_r1;",
        f"ld.local.u32 \t%smt_r5, [{LOCAL}+{4 * k}];",  # this lane's count of k
        "mov.u32 \t%smt_r3, %laneid;",
    ]
    if redux:
        # every lane active: every execution so far left its count in the lanes that took part, all of them
        # here, so the largest is the warp's count (warp-uniform branch: the mask is the same in every lane)
        code += [
            "setp.ne.u32 \t%smt_p3, %smt_r1, 0xffffffff;",
            f"@%smt_p3 bra \t{part};",
            "redux.sync.max.u32 \t%smt_r5, %smt_r5, 0xffffffff;",
        ]
    else:
        code += [f"bra.uni \t{part};"]
    code += [
        f"{count}:",  # %smt_r5: this execution's number e (any value >= E past the bound), in every lane
        "brev.b32 \t%smt_r2, %smt_r1;",
        "bfind.shiftamt.u32 \t%smt_r2, %smt_r2;",  # the lowest active lane: the leader
        "setp.eq.u32 \t%smt_p2, %smt_r3, %smt_r2;",
        f"ld.local.u64 \t%smt_rd1, [{LOCAL}+{cb}];",  # &counter[b, w, 0]
        *(f"@%smt_p2 red.global.add.u32 \t[%smt_rd1+{4 * m}], 1;" for m in members or [k]),
        # %smt_p4 (uniform) stays set for the instructions this site counts for: they record the same e
        f"setp.lt.u32 \t%smt_p4, %smt_r5, {e};",
        f"@!%smt_p4 bra.uni \t{skip};",
        "add.s32 \t%smt_r6, %smt_r5, 1;",
        f"st.local.u32 \t[{LOCAL}+{4 * k}], %smt_r6;",
        f"ld.local.u64 \t%smt_rd2, [{LOCAL}+{sb}];",  # &slot[b, w, 0, 0]
        f"add.s32 \t%smt_r6, %smt_r5, {k * e};",  # the slot within the warp's: k*E + e
        f"mul.wide.u32 \t%smt_rd1, %smt_r6, {4 * SLOT_WORDS};",
        "add.s64 \t%smt_rd2, %smt_rd2, %smt_rd1;",
        *value,
        "mul.wide.u32 \t%smt_rd3, %smt_r3, 4;",
        "add.s64 \t%smt_rd3, %smt_rd2, %smt_rd3;",
        "st.global.u32 \t[%smt_rd3+16], %smt_r0;",
        *_header(k, bw),
        f"bra.uni \t{skip};",
        # a partial warp: its lanes need not hold the latest count. Past the bound if one of them says so
        # (counts only grow); else every active lane reads the counter (one word, one request): the warp's
        # own ``red``s went before it in program order, so it is the number of executions so far
        f"{part}:",
        f"setp.ge.u32 \t%smt_p3, %smt_r5, {e};",
        "vote.sync.any.pred \t%smt_p3, %smt_p3, %smt_r1;",
        f"@%smt_p3 mov.u32 \t%smt_r5, {e};",  # every lane: past the bound
        f"@%smt_p3 bra \t{count};",
        f"ld.local.u64 \t%smt_rd1, [{LOCAL}+{cb}];",
        f"ld.relaxed.gpu.global.u32 \t%smt_r5, [%smt_rd1+{4 * k}];",
        f"bra.uni \t{count};",
    ]
    return [*code, f"{skip}:"]


def _header(k: int, bw: int) -> list[str]:
    """The leader (%smt_p2) writes the slot's header at %smt_rd2 (predicated: the warp does not split)."""
    return [
        f"mov.u32 \t%smt_r7, {k + 1};",
        "@%smt_p2 st.global.u32 \t[%smt_rd2], %smt_r7;",
        "@%smt_p2 st.global.u32 \t[%smt_rd2+4], %smt_r1;",
        "@%smt_p2 st.global.u32 \t[%smt_rd2+8], %smt_r5;",
        f"ld.local.u32 \t%smt_r7, [{LOCAL}+{bw}];",
        "@%smt_p2 st.global.u32 \t[%smt_rd2+12], %smt_r7;",
    ]


def _follower(
    k: int, head: int, instr: Any, layout: BufferLayout, addr: tuple[list[str], list[str]]
) -> list[str]:
    """The site of an instruction in the same straight run of statements as ``head``'s site: it ran as often
    and with the same lanes, so it was counted there and takes the head's e (its count - 1 in this lane's
    scratch) while %smt_p4 says the head recorded; past the bound it costs one uniform branch."""
    e = layout.sample.executions
    _, sb, bw, _ = _local_offsets(layout.n_instr)
    skip = f"$SMT_SKIP_{k}"
    return [
        f"// smemtile: record instruction {k} ({instr.op}), counted with instruction {head}",
        f"@!%smt_p4 bra.uni \t{skip};",
        f"ld.local.u32 \t%smt_r5, [{LOCAL}+{4 * head}];",
        "add.s32 \t%smt_r5, %smt_r5, -1;",
        "activemask.b32 \t%smt_r1;",
        "mov.u32 \t%smt_r3, %laneid;",
        "brev.b32 \t%smt_r2, %smt_r1;",
        "bfind.shiftamt.u32 \t%smt_r2, %smt_r2;",
        "setp.eq.u32 \t%smt_p2, %smt_r3, %smt_r2;",
        f"ld.local.u64 \t%smt_rd2, [{LOCAL}+{sb}];",
        f"add.s32 \t%smt_r6, %smt_r5, {k * e};",
        f"mul.wide.u32 \t%smt_rd1, %smt_r6, {4 * SLOT_WORDS};",
        "add.s64 \t%smt_rd2, %smt_rd2, %smt_rd1;",
        *addr[1],
        "mul.wide.u32 \t%smt_rd3, %smt_r3, 4;",
        "add.s64 \t%smt_rd3, %smt_rd2, %smt_rd3;",
        "st.global.u32 \t[%smt_rd3+16], %smt_r0;",
        *_header(k, bw),
        f"{skip}:",
    ]


def _prologue(layout: BufferLayout, symbols: list[str]) -> list[str]:
    s = layout.sample
    code = [
        "// smemtile: recording prologue (block linear id, warp, in-sample predicate, header)",
        f"ld.param.u64 \t%smt_rd0, [{PARAM}];",
        "cvta.to.global.u64 \t%smt_rd0, %smt_rd0;",
        "mov.u32 \t%smt_r0, %ctaid.x;",
        "mov.u32 \t%smt_r1, %ctaid.y;",
        "mov.u32 \t%smt_r2, %ctaid.z;",
        "mov.u32 \t%smt_r3, %nctaid.x;",
        "mov.u32 \t%smt_r4, %nctaid.y;",
        "mad.lo.u32 \t%smt_r1, %smt_r2, %smt_r4, %smt_r1;",
        "mad.lo.u32 \t%smt_r5, %smt_r1, %smt_r3, %smt_r0;",  # block linear id
        "mov.u32 \t%smt_r0, %tid.x;",
        "mov.u32 \t%smt_r1, %tid.y;",
        "mov.u32 \t%smt_r2, %tid.z;",
        "mov.u32 \t%smt_r3, %ntid.x;",
        "mov.u32 \t%smt_r4, %ntid.y;",
        "mad.lo.u32 \t%smt_r1, %smt_r2, %smt_r4, %smt_r1;",
        "mad.lo.u32 \t%smt_r6, %smt_r1, %smt_r3, %smt_r0;",  # linear thread id
        "shr.u32 \t%smt_r7, %smt_r6, 5;",  # warp
        f"setp.lt.u32 \t%smt_p0, %smt_r5, {s.blocks};",
        f"setp.lt.and.u32 \t%smt_p0, %smt_r7, {s.warps}, %smt_p0;",
        f"mad.lo.u32 \t%smt_r10, %smt_r5, {s.warps}, %smt_r7;",
        "or.b32 \t%smt_r8, %smt_r5, %smt_r6;",
        "setp.eq.u32 \t%smt_p1, %smt_r8, 0;",
    ]
    words = [(0, str(MAGIC)), (1, str(layout.n_instr)), (2, str(len(symbols))), (3, "%dynamic_smem_size")]
    words += [(_HEADER_WORDS + j, sym) for j, sym in enumerate(symbols)]
    for w, value in words:
        code += [f"mov.u32 \t%smt_r9, {value};", f"@%smt_p1 st.global.u32 \t[%smt_rd0+{4 * w}], %smt_r9;"]
    return code


_DECLS = [".reg .pred \t%smt_p<5>;", ".reg .b32 \t%smt_r<11>;", ".reg .b64 \t%smt_rd<4>;"]


def instrument(ptx: str, entry: str, instrs: list, sample: Sample, max_registers: int | None = None) -> str:
    """The PTX with ``entry`` rewritten to record ``instrs`` (SharedInstr, from smemtile.model.ptx) for ``sample``
    into a trailing ``.param .u64`` buffer of :func:`buffer_layout` size. Other entries are unchanged, and so are
    the device functions the entry calls (their instructions, ``SharedInstr.function``, are left out).

    ``max_registers`` (the registers the JIT gave the plain kernel) becomes the entry's ``.maxnreg`` (or
    lowers one it has), so that the recording copy cannot raise the function's registers and lower the
    occupancy of every warp: ptxas otherwise schedules the recording copy's straight runs more freely."""
    # the entry's own instructions (they come first); those inside device functions it calls without inlining
    # are not recorded on the GPU yet (the CPU emulator follows the calls)
    instrs = [i for i in instrs if not getattr(i, "function", "")]
    e = _find_entry(ptx, entry)
    if re.search(r"%smt_|\$SMT_SKIP_|" + PARAM, ptx[e.body_open : e.body_close]):
        raise SpecError(f"{entry} is already instrumented (it uses %smt_ names)", key="ptx")
    symbols = shared_symbols(ptx, entry)
    layout = buffer_layout(instrs, symbols, sample)
    bits = register_bits(ptx[e.body_open : e.body_close])
    target = re.search(r"^\s*\.target\s+sm_(\d+)", ptx, re.M)
    redux = target is None or int(target.group(1)) >= 80  # redux.sync needs sm_80

    params = ptx[: e.params_close].rstrip()
    has_params = not params.endswith("(")
    head = params + ("," if has_params else "") + f"\n\t.param .u64 {PARAM}\n"
    pre_body = ptx[e.params_close : e.body_open + 1]
    if max_registers is not None:
        if not isinstance(max_registers, int) or max_registers < 1:
            raise SpecError(f"must be a positive integer, got {max_registers!r}", key="max_registers")
        have = re.search(r"\.maxnreg\s+(\d+)", pre_body)
        if have:
            n = min(int(have.group(1)), max_registers)
            pre_body = pre_body[: have.start()] + f".maxnreg {n}" + pre_body[have.end() :]
        else:
            pre_body = pre_body[:1] + f"\n.maxnreg {max_registers}" + pre_body[1:]
    body = ptx[e.body_open + 1 : e.body_close]
    lines = body.split("\n")

    # absolute line numbers of the body's lines, to honour SharedInstr.ptx_line
    first = ptx.count("\n", 0, e.body_open + 1)
    absolute = [""] * first + lines
    used: set[int] = set()
    sites: dict[int, list[str]] = {}
    found: list[tuple[int, int, Any, tuple[list[str], list[str]]]] = []
    syms = set(symbols)
    for k, ins in enumerate(instrs):
        if int(ins.index) != k:
            raise SpecError(f"instruction indices must be 0..N-1 in order; got {ins.index} at {k}", key="ptx")
        i = _locate(absolute, ins, first, len(absolute), used)
        used.add(i)
        addr = _address_code(ins, bits, syms, f"$SMT_SKIP_{k}")
        if addr is not None:
            found.append((i - first, k, ins, addr))
    # sites in one straight run of statements (no label, no branch, no guard, no generic check between) run
    # together, as often and with the same lanes: the first counts for all of them
    found.sort()
    heads: dict[int, int] = {}  # follower k -> its head
    members: dict[int, list[int]] = {}  # head -> the instructions it counts (itself first)
    last, head_k = -1, None
    for j, k, ins, addr in found:
        simple = not (ins.predicate or "").strip() and not addr[0]
        if head_k is not None and simple and not _breaks(lines[last + 1 : j]):
            heads[k] = head_k
            members[head_k].append(k)
        else:
            head_k = k if simple else None
            members[k] = [k]
        last = j
    for j, k, ins, addr in found:
        if k in heads:
            sites[j] = _follower(k, heads[k], ins, layout, addr)
        else:
            sites[j] = _site(k, ins, layout, addr, redux, members[k])

    # declarations right after '{', then the prologue, then the recording copy of the statements (sampled
    # warps only: the branch is warp-uniform), then the user's statements untouched (every other warp)
    start = 0
    while start < len(lines) and (not lines[start].strip() or lines[start].strip().startswith((".", "//"))):
        start += 1
    late = _late_declarations(lines, start)  # declared once, before both copies use them
    out = [*lines[:start], *(lines[j] for j in late), *("\t" + d for d in _DECLS)]
    out += [f"\t.local .align 8 .b8 \t{LOCAL}[{_local_offsets(len(instrs))[3]}];"]
    out += ["\t" + c for c in _prologue(layout, symbols)]
    cb, sb, bw, size = _local_offsets(len(instrs))
    n = layout.n_instr
    out += [
        "\t@!%smt_p0 bra \t$SMT_PLAIN;",
        "\t// smemtile: the sampled warp's scratch: no execution seen yet, its addresses",
    ]
    out += [
        f"\tmov.u32 \t%smt_r1, {LOCAL};",
        f"\tadd.s32 \t%smt_r2, %smt_r1, {4 * max(n, 1)};",
        "$SMT_ZERO:",
        "\tst.local.u32 \t[%smt_r1], 0;",
        "\tadd.s32 \t%smt_r1, %smt_r1, 4;",
        "\tsetp.lt.u32 \t%smt_p1, %smt_r1, %smt_r2;",
        "\t@%smt_p1 bra \t$SMT_ZERO;",
        f"\tmul.lo.u32 \t%smt_r4, %smt_r10, {n};",  # (b*W + w)*N
        "\tmul.wide.u32 \t%smt_rd1, %smt_r4, 4;",
        "\tadd.s64 \t%smt_rd1, %smt_rd0, %smt_rd1;",
        f"\tadd.s64 \t%smt_rd1, %smt_rd1, {4 * layout.count_off};",
        f"\tst.local.u64 \t[{LOCAL}+{cb}], %smt_rd1;",
        f"\tmul.wide.u32 \t%smt_rd1, %smt_r4, {4 * SLOT_WORDS * layout.sample.executions};",
        "\tadd.s64 \t%smt_rd1, %smt_rd0, %smt_rd1;",
        f"\tadd.s64 \t%smt_rd1, %smt_rd1, {4 * layout.slot_off};",
        f"\tst.local.u64 \t[{LOCAL}+{sb}], %smt_rd1;",
        f"\tst.local.u32 \t[{LOCAL}+{bw}], %smt_r10;",
        "\t// smemtile: the recording copy of the kernel (sampled warps)",
    ]
    out += _recording_copy(lines, start, sites, late)
    out += ["\tret;", "\t// smemtile: the kernel as written (every other warp)", "$SMT_PLAIN:"]
    out += [line for j, line in enumerate(lines) if j >= start and j not in late]
    return head + pre_body.lstrip() + "\n".join(out) + ptx[e.body_close :]


def _late_declarations(lines: list[str], start: int) -> set[int]:
    """Indices of the top-level declarations (outside every nested ``{ }``) after the first statement."""
    out, depth = set(), 0
    for j in range(start, len(lines)):
        code = lines[j].split("//", 1)[0]
        if depth == 0 and code.strip().startswith(_TOP_DECL):
            out.add(j)
        depth += code.count("{") - code.count("}")
    return out


_LABEL_DEF = re.compile(r"^\s*([$%\w.]+)\s*:(?!:)", re.M)
_TOP_DECL = (".reg", ".shared", ".local", ".param", ".const", ".global")


def _recording_copy(lines: list[str], start: int, sites: dict[int, list[str]], late: set[int]) -> list[str]:
    """The statements ``lines[start:]`` with each recording site in front of its instruction, labels renamed
    (``$L__BB0_2`` -> ``$L__BB0_2_smt``) and the top-level declarations ``late`` left out."""
    text = "\n".join(lines[start:])
    labels = sorted(
        {m.group(1) for m in _LABEL_DEF.finditer(re.sub(r"//[^\n]*", "", text))}, key=len, reverse=True
    )
    rename = (
        re.compile(r"(?<![\w$.%])(" + "|".join(re.escape(x) for x in labels) + r")(?![\w$.])")
        if labels
        else None
    )
    out: list[str] = []
    for j in range(start, len(lines)):
        line = lines[j]
        if j in sites:
            out += [c if c.endswith(":") else "\t" + c for c in sites[j]]
        if j not in late:
            out.append(rename.sub(lambda m: m.group(1) + "_smt", line) if rename else line)
    return out


def buffer_layout(instrs: list, symbols: list[str], sample: Sample) -> BufferLayout:
    """The record buffer of :func:`instrument` (the entry's own instructions)."""
    own = [i for i in instrs if not getattr(i, "function", "")]
    return BufferLayout(len(own), len(symbols), sample)


# ---- decoding -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RawRecords:
    """The buffer, decoded: one row per written slot (numpy arrays of equal length), plus the header."""

    instr: np.ndarray  # int64 [n]
    block: np.ndarray  # block linear id [n]
    warp: np.ndarray  # [n]
    execution: np.ndarray  # [n]
    active: np.ndarray  # uint32 [n]
    addresses: np.ndarray  # uint32 [n, 32], raw shared-window addresses (inactive lanes 0)
    counts: np.ndarray  # int64 [blocks, warps, N]: executions counted per sampled warp
    symbols: dict[str, int]  # shared symbol -> its run-time shared-window address
    dynamic_smem: int
    ran: bool  # the magic word was written

    @property
    def executions(self) -> dict[int, int]:
        return {k: int(v) for k, v in enumerate(self.counts.sum(axis=(0, 1)))}

    @property
    def dropped(self) -> int:
        e = self.execution_bound
        return int(np.maximum(self.counts - e, 0).sum())

    execution_bound: int = 0


def decode_raw(buf: bytes | np.ndarray, layout: BufferLayout, symbols: list[str]) -> RawRecords:
    """Read a record buffer back (the bytes the instrumented kernel left in it)."""
    words = np.frombuffer(bytes(buf) if not isinstance(buf, np.ndarray) else buf.tobytes(), dtype="<u4")
    if words.size * 4 < layout.nbytes:
        raise ValueError(f"record buffer has {words.size * 4} bytes, the layout needs {layout.nbytes}")
    s = layout.sample
    ran = int(words[0]) == MAGIC
    if ran and (int(words[1]) != layout.n_instr or int(words[2]) != len(symbols)):
        raise ValueError(
            f"record buffer header says {int(words[1])} instructions and {int(words[2])} symbols, "
            f"expected {layout.n_instr} and {len(symbols)}"
        )
    syms = {name: int(words[_HEADER_WORDS + j]) for j, name in enumerate(symbols)}
    counts = words[layout.count_off : layout.count_off + layout.n_counters].astype(np.int64)
    counts = counts.reshape(s.blocks, s.warps, layout.n_instr)
    slots = words[layout.slot_off : layout.slot_off + SLOT_WORDS * layout.n_slots].reshape(-1, SLOT_WORDS)
    written = np.nonzero(slots[:, 0])[0]
    rows = slots[written]
    # the slot's position says (b, w, k, e); its header must agree
    e_pos = written % s.executions
    k_pos = (written // s.executions) % max(layout.n_instr, 1)
    bw_pos = written // (s.executions * max(layout.n_instr, 1))
    bad = (rows[:, 0] != k_pos + 1) | (rows[:, 2] != e_pos) | (rows[:, 3] != bw_pos)
    if bad.any():
        j = int(np.nonzero(bad)[0][0])
        raise ValueError(f"record slot {int(written[j])} is inconsistent: header {rows[j, :4].tolist()}")
    return RawRecords(
        instr=k_pos.astype(np.int64),
        block=(bw_pos // s.warps).astype(np.int64),
        warp=(bw_pos % s.warps).astype(np.int64),
        execution=e_pos.astype(np.int64),
        active=rows[:, 1].astype(np.uint32),
        addresses=rows[:, 4:].astype(np.uint32),
        counts=counts,
        symbols=syms,
        dynamic_smem=int(words[3]),
        ran=ran,
        execution_bound=s.executions,
    )


def window_base(raw: RawRecords) -> int:
    """The smallest run-time address of the entry's shared symbols: byte 0 of the CTA's shared window as the
    records report it (on sm_90 the hardware's window starts after 1 KiB it reserves)."""
    return min(raw.symbols.values()) if raw.symbols else 0


def block_index(linear: int, grid: tuple[int, int, int]) -> tuple[int, int, int]:
    gx, gy, _ = grid
    return (linear % gx, linear // gx % gy, linear // (gx * gy))


def lane_addresses(raw: RawRecords, instrs: list) -> np.ndarray:
    """[n, 32] int64 byte offsets from :func:`window_base`; inactive lanes (and, for ldmatrix/stmatrix, lanes
    whose address the instruction does not use: lanes >= 8 x matrices) are 0."""
    base = window_base(raw)
    lanes = np.arange(32)
    active = ((raw.active[:, None] >> lanes.astype(np.uint32)) & 1).astype(bool)
    used = np.ones_like(active)
    for j, k in enumerate(raw.instr.tolist()):
        ins = instrs[k]
        if ins.op in ("ldmatrix", "stmatrix"):
            used[j] = lanes < 8 * int(ins.matrices)
    off = raw.addresses.astype(np.int64) - base
    return np.where(active & used, off, 0)
