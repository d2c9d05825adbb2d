"""A CPU emulator of a kernel's address arithmetic: the sampled warps of a PTX entry, 32 lanes in lockstep.

It returns what the GPU recording returns (one :class:`WarpRecord` per execution of a shared-memory
instruction by a sampled warp) so the bank model, the fix and the spec never ask which one they have.

What it models:
- registers as numpy arrays of 32 lanes (integers as their bit patterns in int64, floats in float64,
  predicates as bools); integer, predicate, conversion and basic float instructions are evaluated exactly
  (``add sub mul[.lo/.hi/.wide] mad mul24 mad24 div rem min max abs neg shl shr and or xor not cnot lop3 bfe bfi
  prmt popc clz brev shf setp selp slct cvt cvta isspacep mov shfl vote activemask``);
- special registers (``%tid %ntid %ctaid %nctaid %laneid %warpid %nwarpid``, clocks read 0);
- control flow with a program counter per lane: each step runs the lowest PC's lanes together (a branch
  splits them; they reconverge where their PCs meet again), ``ret``/``exit`` retire lanes, barriers are no-ops
  inside a warp; the sampled warps of a block run one after another from barrier to barrier, so each reads
  what the others stored before the ``bar.sync`` (warps outside the sample store nothing);
- memory: ``ld.param`` reads the arguments; a pointer argument is a buffer whose loads return its bytes: the
  caller's own array, or its ``fill`` exactly as the GPU gets it (:func:`smemtile.model.inspect_args.fill_values`:
  data-dependent addresses agree with the GPU's); shared memory is one byte array per block (the emulated
  warps' stores are read back, the rest is zero); other stores are ignored (the caller's arrays are never
  written).
An instruction it does not know writes *poison*: harmless while it only feeds data, but an address, a branch
predicate or a loop bound computed from it stops the emulation with that instruction named.
Work is bounded: ``max_steps`` instructions per warp (the warp is cut short with a note).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

from smemtile.errors import SpecError
from smemtile.model.inspect_args import KernelArg, WarpRecord
from smemtile.model.inspect_caller import host_bytes
from smemtile.model.ptx import (
    Body,
    Statement,
    functions,
    parse_body,
    parse_call,
    parse_function,
    shared_alignments,
    shared_arrays,
)
from smemtile.model.spec import DTYPES

LANES = 32
GLOBAL_BASE = 1 << 40  # argument k's buffer starts at GLOBAL_BASE + k * GLOBAL_STRIDE (a generic address)
GLOBAL_STRIDE = 1 << 34
SHARED_GENERIC = 1 << 47  # generic address of shared window offset 0 (cvta.shared adds it)
MAX_STEPS = 2_000_000
_LANE = np.arange(LANES, dtype=np.int64)


class EmulationError(SpecError):
    """The kernel needs something the emulator does not model (named in the message). Exit 1."""

    exit_code = 1


@dataclass(frozen=True)
class Poison:
    """The value of an instruction the emulator does not evaluate."""

    stmt: Statement

    def __str__(self) -> str:
        return f"line {self.stmt.ptx_line} `{self.stmt.text}`"


def shared_layout(ptx: str, entry: str) -> dict[str, tuple[int, int]]:
    """PTX symbol -> (offset in the CTA's shared window, size): static variables in declaration order at their
    alignment, then the dynamic ``extern`` ones (size 0: they run to the end of the window) aligned to 16."""
    sizes, aligns = shared_arrays(ptx, entry), shared_alignments(ptx, entry)
    out, off = {}, 0
    for sym, size in sizes.items():
        if size:
            a = max(aligns.get(sym, 1), 1)
            off = (off + a - 1) // a * a
            out[sym] = (off, size)
            off += size
    dyn = (off + 15) // 16 * 16
    for sym, size in sizes.items():
        if not size:
            out[sym] = (dyn, 0)
    return out


# special registers keep their names when a called function's registers are renamed
_SPECIAL = re.compile(
    r"%(?:tid|ntid|ctaid|nctaid|laneid|warpid|nwarpid|clock|clock64|clock_hi|globaltimer(?:_lo|_hi)?|smid|nsmid|"
    r"gridid|dynamic_smem_size|total_smem_size|aggr_smem_size|lanemask_(?:eq|le|lt|ge|gt)|envreg\d+|pm\d+(?:_64)?|"
    r"clusterid|nclusterid|cluster_ctaid|cluster_nctaid|cluster_ctarank|cluster_nctarank|is_explicit_cluster|"
    r"current_graph_exec|reserved_smem_offset_\w+)$"
)
_REG = re.compile(r"%[A-Za-z_$][\w$]*")
MAX_PROGRAM = 400_000  # statements of the entry with every call inlined
MAX_DEPTH = 32  # nested calls


def program(ptx: str, entry: str) -> Body:
    """The entry with every call of a device function that has a body inlined, as the emulator runs it: the
    callee's registers, labels and local ``.param`` names get a suffix per call site, its formal parameters
    become the call's argument names, its ``ret`` a branch past its body (so the warp's lanes reconverge after
    the call as they do on the GPU). The statements keep their PTX line, text and source position, so a
    shared-memory instruction of the callee is recorded under its own index and line. A recursive call stops
    with the instruction named; an indirect call, or one of a function without a body (``vprintf``), stays a
    ``call``."""
    funcs = functions(ptx)
    if not funcs:
        return parse_body(ptx, entry)
    bodies: dict[str, Body] = {}
    out: list[Statement] = []
    labels: dict[str, int] = {}
    counter = iter(range(1, 1 << 62))

    def emit(body: Body, suffix: str, formals: dict[str, str], stack: tuple[str, ...], ret_label: str | None):
        at: dict[int, list[str]] = {}
        for lab, k in body.labels.items():
            at.setdefault(k, []).append(lab)
        own = set(body.labels)

        def reg(m: re.Match) -> str:
            r = m.group(0)
            return r if not suffix or _SPECIAL.match(r) else r + suffix

        def param(name: str) -> str:
            return formals.get(name, name + suffix if suffix else name)

        def operand(o: str, st: Statement) -> str:
            if o in own:
                return o + suffix
            if o.startswith("[") and st.opcode.split(".")[0] in ("ld", "st") and ".param" in "." + st.opcode:
                inner = o[1:-1]
                name, sep, off = inner.partition("+")
                return f"[{param(name.strip())}{sep}{off}]"
            return _REG.sub(reg, o)

        def renamed(st: Statement, **kw) -> Statement:
            pred = _REG.sub(reg, st.predicate) if st.predicate else ""
            ops = tuple(operand(o, st) for o in st.operands)
            return Statement(
                st.ptx_line,
                kw.get("predicate", pred),
                kw.get("opcode", st.opcode),
                kw.get("operands", ops),
                st.text,
                st.file,
                st.line,
            )

        for i, st in enumerate(body.statements):
            for lab in at.get(i, ()):
                labels[lab + suffix] = len(out)
            head = st.opcode.split(".")[0]
            if head == "call":
                callee, rets, argv = parse_call(st)
                f = funcs.get(callee)
                if f is not None:
                    if callee in stack or len(stack) >= MAX_DEPTH:
                        raise EmulationError(
                            f"PTX line {st.ptx_line}: `{st.text}` calls {callee} recursively (or more than "
                            f"{MAX_DEPTH} calls deep): not emulated"
                        )
                    inner = f"${next(counter)}"
                    end = f"$smt_ret{inner}"
                    fm = dict(zip(f.returns, (param(r) for r in rets), strict=False))
                    fm.update(zip(f.params, (param(a) for a in argv), strict=False))
                    if st.predicate:  # @%p call: the lanes without %p skip the body
                        neg = st.predicate[2:] if st.predicate.startswith("@!") else "!" + st.predicate[1:]
                        out.append(
                            renamed(st, predicate="@" + _REG.sub(reg, neg), opcode="bra.uni", operands=(end,))
                        )
                    if callee not in bodies:
                        bodies[callee] = parse_function(ptx, callee)
                    emit(bodies[callee], inner, fm, (*stack, callee), end)
                    labels[end] = len(out)
                    continue
            if head == "ret" and ret_label is not None:
                out.append(renamed(st, opcode="bra.uni", operands=(ret_label,)))
                continue
            out.append(renamed(st))
            if len(out) > MAX_PROGRAM:
                raise EmulationError(
                    f"the kernel with its calls inlined has more than {MAX_PROGRAM} PTX instructions: not emulated"
                )
        for lab in at.get(len(body.statements), ()):
            labels[lab + suffix] = len(out)

    emit(parse_body(ptx, entry), "", {}, (), None)
    return Body(tuple(out), labels)


@functools.lru_cache(maxsize=1024)
def _bits(t: str) -> int:
    m = re.search(r"(\d+)", t)
    return int(m.group(1)) if m else 32


@functools.lru_cache(maxsize=4096)
def _head(opcode: str) -> str:
    return opcode.split(".", 1)[0]


@functools.lru_cache(maxsize=4096)
def _typ(opcode: str) -> str:
    for p in reversed(opcode.split(".")):
        if re.fullmatch(r"(?:[bsuf]\d+|pred|f16x2|bf16x2|bf16)", p):
            return p
    return "b32"


def _as_int(v: np.ndarray, bits: int, signed: bool) -> np.ndarray:
    if v.dtype == np.float64:
        v = (v.astype(np.float32).view(np.int32).astype(np.int64) if bits <= 32 else v.view(np.int64)).copy()
    elif v.dtype == np.bool_:
        v = v.astype(np.int64)
    if bits >= 64:
        return v.astype(np.int64)
    m = (1 << bits) - 1
    v = v & m
    if signed:
        v = np.where(v >= 1 << (bits - 1), v - (1 << bits), v)
    return v


def _as_float(v: np.ndarray, bits: int) -> np.ndarray:
    if v.dtype == np.float64:
        return v
    if bits == 32:
        return (v & 0xFFFFFFFF).astype(np.uint32).view(np.float32).astype(np.float64)
    if bits == 64:
        return v.astype(np.int64).view(np.float64)
    return v.astype(np.float64)


def _norm(v: np.ndarray, t: str) -> np.ndarray:
    """A result of type ``t`` as stored in a register."""
    if t == "pred":
        return v.astype(bool)
    if t.startswith("f") and t[1:].isdigit() and t != "f16":
        return np.asarray(v, dtype=np.float64) if t in ("f32", "f64") else v
    return _as_int(np.asarray(v, dtype=np.int64) if v.dtype != np.float64 else v, _bits(t), False)


class _Warp:
    """One warp's state and its interpreter loop."""

    def __init__(self, emu: Emulator, block: tuple[int, int, int], warp: int, smem: np.ndarray | None = None):
        self.emu = emu
        self.block = block
        self.warp = warp
        bx, by, bz = emu.block_dim
        tid = warp * LANES + _LANE
        self.present = tid < bx * by * bz
        self.tid = (tid % bx, tid // bx % by, tid // (bx * by))
        self.regs: dict[str, object] = {}
        self.param_space: dict[tuple[str, int], object] = {}  # a call's .param arguments and return values
        # the block's shared memory (shared by its emulated warps); whole 16-byte words for aligned views
        self.smem = smem if smem is not None else np.zeros(-(-emu.window // 16) * 16, dtype=np.uint8)

    # ---- operands -----------------------------------------------------------------------------------------
    def read(self, op: str, st: Statement) -> np.ndarray | Poison:
        op = op.strip()
        if op.startswith("{"):
            raise EmulationError(f"a vector operand where a scalar was expected: {st.text}")
        neg = op.startswith("!")
        if neg:
            op = op[1:]
        if op.startswith("%"):
            v = self.regs.get(op)
            if v is None:
                v = self.special(op, st)
            if neg and not isinstance(v, Poison):
                v = ~np.asarray(v, dtype=bool)
            return v
        return self.emu.immediate(op, st)

    def special(self, name: str, st: Statement) -> np.ndarray:
        base, _, axis = name.partition(".")
        k = "xyz".find(axis) if axis else 0
        e = self.emu
        full = lambda x: np.full(LANES, x, dtype=np.int64)  # noqa: E731
        if base == "%tid":
            return self.tid[k].astype(np.int64)
        if base == "%ntid":
            return full(e.block_dim[k])
        if base == "%ctaid":
            return full(self.block[k])
        if base == "%nctaid":
            return full(e.grid[k])
        if base == "%laneid":
            return _LANE.copy()
        if base == "%warpid":
            return full(self.warp)
        if base == "%nwarpid":
            return full(-(-e.block_dim[0] * e.block_dim[1] * e.block_dim[2] // LANES))
        if base in ("%clock", "%clock64", "%globaltimer", "%smid", "%nsmid", "%gridid"):
            return full(0)
        if base in ("%dynamic_smem_size", "%total_smem_size"):
            return full(e.dynamic_smem if base == "%dynamic_smem_size" else e.window)
        if base == "%lanemask_lt":
            return (1 << _LANE) - 1
        if base == "%lanemask_eq":
            return 1 << _LANE
        # a register never written yet (a loop-carried value before its first definition reads 0 in PTX's
        # uninitialised-register semantics; NVVM emits none of those for valid code)
        return np.zeros(LANES, dtype=np.int64)

    def write(self, dst: str, v, mask: np.ndarray) -> None:
        dst = dst.strip()
        if "|" in dst:  # setp p|q: q gets the complement
            p, q = dst.split("|")
            self.write(p, v, mask)
            if not isinstance(v, Poison):
                self.write(q, ~v, mask)
            return
        if dst == "_":
            return
        old = self.regs.get(dst)
        if isinstance(v, Poison):
            self.regs[dst] = v
            return
        full = mask.all()
        if full or old is None or isinstance(old, Poison):
            self.regs[dst] = v if not isinstance(v, np.ndarray) or full else np.where(mask, v, 0 * v)
            return
        if old.dtype != v.dtype:
            old = old.astype(v.dtype)
        self.regs[dst] = np.where(mask, v, old)

    # ---- the loop -----------------------------------------------------------------------------------------
    def run(self, sink):
        """A generator: runs the warp, pausing (yield) at each barrier all its live lanes reach, so that the
        block's other emulated warps catch up first; returns the steps taken (``max_steps + 1``: cut short)."""
        body = self.emu.body
        stmts = body.statements
        n = len(stmts)
        pc = np.zeros(LANES, dtype=np.int64)
        live = self.present.copy()
        steps = 0
        while live.any():
            cur = int(pc[live].min())
            if cur >= n:
                break
            group = live & (pc == cur)
            st = stmts[cur]
            steps += 1
            if steps > self.emu.max_steps:
                return steps
            mask = group
            if st.predicate:
                p = self.read(st.predicate[1:], st)
                if isinstance(p, Poison):
                    raise EmulationError(
                        f"PTX line {st.ptx_line}: the guard of `{st.text}` depends on {p}, which "
                        "the emulator does not evaluate"
                    )
                mask = group & np.asarray(p, dtype=bool)
            head = _head(st.opcode)
            nxt = cur + 1
            if head == "bra":
                target = body.labels.get(st.operands[0].strip())
                if target is None:
                    raise EmulationError(f"PTX line {st.ptx_line}: branch to an unknown label in `{st.text}`")
                pc[mask] = target
                pc[group & ~mask] = nxt
                continue
            if head == "brx":  # an indirect branch: where each lane goes is not modelled
                raise EmulationError(
                    f"PTX line {st.ptx_line}: `{st.text}` (an indirect branch) is not emulated"
                )
            if head in ("ret", "exit", "trap"):
                live &= ~mask
                pc[group & ~mask] = nxt
                continue
            if mask.any():
                self.emu.execute(self, st, mask, sink)
            pc[group] = nxt
            if head in ("bar", "barrier") and "arrive" not in st.opcode and (group == live).all():
                yield steps  # __syncthreads(): the other warps of the block run up to it before this one goes on
        return steps


class Emulator:
    """The kernel's entry, launch and arguments; :meth:`run` emulates the sampled warps."""

    def __init__(
        self,
        ptx: str,
        entry: str,
        instrs,
        *,
        grid,
        block,
        dynamic_smem: int,
        args: list[KernelArg],
        params: list[tuple[str, str]],
        max_steps: int = MAX_STEPS,
        seed: int = 0,
    ):
        from smemtile.model import ptx_ops  # the instruction semantics

        self.ops = ptx_ops
        self.body = program(ptx, entry)
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.block_dim = tuple(block) + (1,) * (3 - len(block))
        self.dynamic_smem = int(dynamic_smem)
        self.layout = shared_layout(ptx, entry)
        static = max((o + s for o, s in self.layout.values()), default=0)
        dyn = max((o for o, s in self.layout.values() if s == 0), default=(static + 15) // 16 * 16)
        self.window = max(static, dyn + self.dynamic_smem, 16)
        self.max_steps = max_steps
        self.seed = seed
        self.index = {(i.ptx_line, i.text): i.index for i in instrs}
        self.params = {}
        self.buffers: list[
            tuple[int, int, KernelArg, int]
        ] = []  # (base, bytes, argument, parameter position)
        self._caller_bytes: dict[int, np.ndarray] = {}
        for k, ((ptype, name), a) in enumerate(zip(params, args, strict=True)):
            if a.kind == "array":
                base = GLOBAL_BASE + k * GLOBAL_STRIDE
                self.params[name] = (base, ptype)
                self.buffers.append((base, a.count * DTYPES[a.dtype], a, k))
            else:
                self.params[name] = (a.value, ptype)

    def caller_bytes(self, arg: KernelArg) -> np.ndarray:
        """The bytes of a caller's host array (read only; the emulator never writes to it)."""
        raw = self._caller_bytes.get(id(arg))
        if raw is None:
            raw = self._caller_bytes[id(arg)] = host_bytes(arg)
        return raw

    def immediate(self, op: str, st: Statement):
        return self.ops.immediate(self, op, st)

    def execute(self, w: _Warp, st: Statement, mask: np.ndarray, sink) -> None:
        self.ops.execute(self, w, st, mask, sink)

    def run(self, sample) -> tuple[list[WarpRecord], dict]:
        """Records of the first ``sample.blocks`` blocks (linear order) x warps ``0..sample.warps-1``, at most
        ``sample.executions`` per instruction per warp; and {"executions": {index: count}, "dropped": n,
        "notes": [...]}, the same summary the GPU recording returns."""
        gx, gy, gz = self.grid
        bx, by, bz = self.block_dim
        warps = -(-bx * by * bz // LANES)
        records: list[WarpRecord] = []
        executions: dict[int, int] = {}
        notes: list[str] = []
        dropped = 0
        for b in range(min(sample.blocks, gx * gy * gz)):
            block = (b % gx, b // gx % gy, b // (gx * gy))
            smem = np.zeros(-(-self.window // 16) * 16, dtype=np.uint8)
            running = []
            for wi in range(min(sample.warps, warps)):
                counts: dict[int, int] = {}

                def sink(index: int, active: int, addrs: np.ndarray, _block=block, _wi=wi, _c=counts) -> None:
                    nonlocal dropped
                    _c[index] = _c.get(index, 0) + 1
                    executions[index] = executions.get(index, 0) + 1
                    if _c[index] <= sample.executions:
                        records.append(WarpRecord(index, _block, _wi, active, tuple(addrs.tolist())))
                    else:
                        dropped += 1

                running.append((wi, _Warp(self, block, wi, smem).run(sink)))
            while (
                running
            ):  # barrier to barrier, warp after warp: a warp reads what the others stored before it
                still = []
                for wi, gen in running:
                    try:
                        next(gen)
                        still.append((wi, gen))
                    except StopIteration as done:
                        if done.value > self.max_steps:
                            notes.append(
                                f"block {block} warp {wi}: stopped after {self.max_steps} PTX instructions "
                                "(the emulator's bound); its later accesses are missing"
                            )
                running = still
        return records, {"executions": executions, "dropped": dropped, "notes": notes}


def emulate(
    ptx: str,
    entry: str,
    instrs,
    *,
    grid,
    block,
    dynamic_smem: int,
    args: list[KernelArg],
    params: list[tuple[str, str]],
    sample,
    max_steps: int = MAX_STEPS,
) -> tuple[list[WarpRecord], dict]:
    """Emulate the sampled warps of ``entry`` on the CPU; the same result shape as the GPU ``record``."""
    emu = Emulator(
        ptx,
        entry,
        instrs,
        grid=grid,
        block=block,
        dynamic_smem=dynamic_smem,
        args=args,
        params=params,
        max_steps=max_steps,
    )
    return emu.run(sample)
