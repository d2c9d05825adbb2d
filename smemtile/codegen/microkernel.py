"""Synthesized shared-memory microkernels: one analysed access in, one CUDA kernel that issues exactly it out.

``verify`` of a spec without a ``kernel:`` section and ``smemtile measure`` run these. For each access (every
warp, every loop value: the model's instructions) a kernel issues the same PTX instruction at the same byte
addresses, many times, so Nsight Compute's counters and ``clock64()`` see nothing else::

    per warp w, once:  a[s] = smem_base + addr[w][s][lane]       s < S, the warp's instructions (<= 32)
                       (cp.async: g[s] = gsrc + src[w][s][lane]; idle lanes: p[s] = 0)
    __syncthreads(); t0 = clock64()
    for i < iters:     o_r = (i * R + r) & zero                  zero == 0 at run time: the compiler can
      R copies of:       INSTR(a[s] + o_r) for s < S             neither hoist nor merge the instructions
      loads: 8 results in flight, then folded into acc           (results stay live: written to `sink`)
      cp.async: commit_group, wait_group 1
    t1 = clock64(); cycles[block][w] = t1 - t0

The instruction is inline PTX (``ld.shared.v4.u32``, ``ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16``,
``cp.async.ca.shared.global`` ...), so it is the one described; ``smemtile.gpu.microkernel`` checks the SASS
opcode when a disassembler is there. The shared-memory base is rounded up to 1024 bytes (the model assumes a
128-byte-aligned buffer; TMA swizzles need 1024). Lanes an instruction leaves idle are predicated off;
``ldmatrix``/``stmatrix`` are ``.sync.aligned`` (every lane executes them), so their unused lanes (8m and up)
repeat a used lane's address, which the hardware ignores.

A pattern the hardware cannot issue is refused with SpecError before anything is compiled: a misaligned
address (the width; 16 bytes for an ldmatrix/stmatrix row), ldmatrix before sm_75, cp.async before sm_80,
stmatrix before sm_90, an ldmatrix/stmatrix instruction with an idle address lane. Pure: no CUDA, no printing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from smemtile.errors import SpecError
from smemtile.model.arch import FEATURES, Arch
from smemtile.model.banks import LANES, MATRIX_OPS, WIDTHS

TARGET_INSTRUCTIONS = 2048  # per warp and launch: enough for clean counters (bench used 1024)
MIN_PER_ITERATION = 8  # instructions per loop iteration (R copies of short slot lists)
IN_FLIGHT = 8  # loads issued before their results are folded
MAX_SLOTS = 32  # instructions per warp in one launch; longer accesses are split into several launches
ALIGN = 1024  # the shared-memory base is rounded up to this
CACHES = ("ca", "cg")


@dataclass(frozen=True)
class Instr:
    """One kind of shared-memory instruction: what the PTX is and what SASS it should become."""

    op: str
    width: int
    matrices: int = 4
    trans: bool = False
    cache: str | None = None  # cp.async only: "ca" (through L1, counted by ncu) or "cg" (16 bytes, L1 bypass)

    @property
    def key(self) -> str:
        """Short name: ld16, st4, ldsm4t, stsm2, cpa16cg."""
        if self.op in MATRIX_OPS:
            return f"{'ldsm' if self.op == 'ldmatrix' else 'stsm'}{self.matrices}{'t' if self.trans else ''}"
        if self.op == "cp.async":
            return f"cpa{self.width}{self.cache}"
        return f"{'ld' if self.op == 'load' else 'st'}{self.width}"

    @property
    def ptx(self) -> str:
        """The PTX mnemonic (operands left out)."""
        t = ".trans" if self.trans else ""
        if self.op == "ldmatrix":
            return f"ldmatrix.sync.aligned.m8n8.x{self.matrices}{t}.shared.b16"
        if self.op == "stmatrix":
            return f"stmatrix.sync.aligned.m8n8.x{self.matrices}{t}.shared.b16"
        if self.op == "cp.async":
            return f"cp.async.{self.cache}.shared.global"
        kind = "ld" if self.op == "load" else "st"
        return f"{kind}.shared." + {1: "u8", 2: "u16", 4: "u32", 8: "v2.u32", 16: "v4.u32"}[self.width]

    @property
    def regs(self) -> int:
        """32-bit data registers the instruction reads or writes."""
        if self.op in MATRIX_OPS:
            return self.matrices
        return max(1, self.width // 4) if self.op in ("load", "store") else 0

    def describe(self) -> str:
        if self.op in MATRIX_OPS:
            return f"{self.op}.x{self.matrices}{'.trans' if self.trans else ''}"
        if self.op == "cp.async":
            return f"cp.async.{self.cache} {self.width} B"
        return f"{self.op} {self.width} B"

    def to_dict(self) -> dict:
        d = {"op": self.op, "width": self.width, "ptx": self.ptx, "key": self.key}
        if self.op in MATRIX_OPS:
            d.update(matrices=self.matrices, trans=self.trans)
        if self.op == "cp.async":
            d["cache"] = self.cache
        return d


@dataclass(frozen=True)
class Pattern:
    """One access to measure: its instructions as the bank model sees them ([I, 32] per instruction)."""

    name: str
    instr: Instr
    addresses: np.ndarray = field(repr=False)  # [I, 32] byte offsets from the buffer base
    active: np.ndarray = field(repr=False)  # [I, 32] bool
    warp: np.ndarray = field(repr=False)  # [I] warp of each instruction
    wavefronts: np.ndarray = field(repr=False)  # [I] the model's
    ideal: np.ndarray = field(repr=False)  # [I]
    threads: int = 32
    sources: np.ndarray | None = field(default=None, repr=False)  # cp.async: [I, 32] global byte offsets
    variant: str = ""
    note: str = ""
    where: str = "accesses"  # errors name WHERE.NAME: accesses of a spec, patterns of a catalogue
    source: str | None = None  # the file, for errors

    @property
    def label(self) -> str:
        return f"{self.variant}/{self.name}" if self.variant else self.name


@dataclass(frozen=True)
class Launch:
    """One kernel launch: one pattern, or one part of a pattern with more than MAX_SLOTS instructions a warp."""

    pattern: Pattern = field(repr=False)
    part: int
    kernel: str
    slots: int  # S: instructions per warp in this launch (idle padding included)
    repeats: int  # R: copies of the slot list per loop iteration
    iterations: int
    addr: np.ndarray = field(repr=False)  # [warps, S, 32] uint32
    on: np.ndarray = field(repr=False)  # [warps, S] uint32 lane masks (0: padding)
    warp_on: np.ndarray = field(repr=False)  # [warps] uint32: 1 if the warp issues anything
    src: np.ndarray = field(repr=False)  # [warps, S, 32] uint32 (zeros unless cp.async)
    smem_bytes: int  # dynamic shared memory: the extent + ALIGN for the base rounding
    global_bytes: int  # cp.async source buffer
    instructions: int  # per block and launch: warp instructions with an active lane
    model_wavefronts: int  # per block and launch: their sum

    @property
    def threads(self) -> int:
        return self.pattern.threads

    @property
    def per_iteration(self) -> int:
        return self.repeats * self.slots

    def active_slots(self) -> np.ndarray:
        """[warps] instructions with an active lane per warp and slot list."""
        return (self.on != 0).sum(axis=1)

    def to_dict(self) -> dict:
        return {
            "label": self.pattern.label,
            "part": self.part,
            "kernel": self.kernel,
            "slots": self.slots,
            "repeats": self.repeats,
            "iterations": self.iterations,
            "threads": self.threads,
            "smem_bytes": self.smem_bytes,
            "instructions_per_block": self.instructions,
            "model_wavefronts_per_block": self.model_wavefronts,
        }


@dataclass(frozen=True)
class Module:
    """One CUDA source holding every kernel the launches need."""

    arch: str
    source: str = field(repr=False)
    kernels: tuple[str, ...]
    launches: tuple[Launch, ...]

    def launches_of(self, label: str) -> list[Launch]:
        return [x for x in self.launches if x.pattern.label == label]

    @property
    def labels(self) -> list[str]:
        return list(dict.fromkeys(x.pattern.label for x in self.launches))


# ---- from the model's results -----------------------------------------------------------------------------


def pattern_from_result(
    ar,
    *,
    variant: str = "",
    threads: int = 32,
    cache: str = "ca",
    where: str = "accesses",
    source: str | None = None,
) -> Pattern:
    """A Pattern from a ``smemtile.model.analysis.AccessResult`` (its bank result holds the instructions)."""
    acc, bank = ar.access, ar.bank
    instr = Instr(
        acc.op,
        acc.width,
        acc.matrices if acc.op in MATRIX_OPS else 4,
        bool(acc.trans) if acc.op in MATRIX_OPS else False,
        (cache if acc.width == 16 else "ca") if acc.op == "cp.async" else None,
    )
    return Pattern(
        acc.name,
        instr,
        np.asarray(bank.addresses, dtype=np.int64),
        np.asarray(bank.active, bool),
        np.asarray(ar.warp, dtype=np.int64),
        np.asarray(bank.wavefronts, dtype=np.int64),
        np.asarray(bank.ideal_wavefronts, dtype=np.int64),
        threads,
        None if bank.sources is None else np.asarray(bank.sources, dtype=np.int64),
        variant,
        getattr(acc, "note", "") or "",
        where,
        source,
    )


# ---- checks ------------------------------------------------------------------------------------------------


def check_pattern(p: Pattern, arch: Arch) -> None:
    """SpecError unless the hardware of ``arch`` can issue every instruction of ``p`` as given."""
    try:
        _check(p, arch)
    except SpecError as e:
        raise SpecError(str(e), key=f"{p.where}.{p.name}", source=p.source) from None


def _check(p: Pattern, arch: Arch) -> None:
    key = None
    i = p.instr
    if i.op not in WIDTHS or i.width not in WIDTHS[i.op]:
        raise SpecError(
            f"cannot synthesize {i.op} of {i.width} bytes; allowed: "
            + "; ".join(f"{o} {'/'.join(map(str, w))} B" for o, w in WIDTHS.items()),
            key=key,
        )
    why = arch.lacks(i.op) if i.op in FEATURES else None  # ldmatrix, cp.async, stmatrix
    if why:
        raise SpecError(why, key=key)
    if i.op in MATRIX_OPS and i.matrices not in (1, 2, 4):
        raise SpecError(f"{i.op} matrices must be 1, 2 or 4, got {i.matrices}", key=key)
    if (
        i.op == "cp.async"
        and i.cache not in CACHES
        or i.op == "cp.async"
        and i.cache == "cg"
        and i.width != 16
    ):
        raise SpecError(f"cp.async cache {i.cache!r}: allowed ca (4, 8, 16 B) or cg (16 B only)", key=key)
    a, on = p.addresses, p.active
    if a.ndim != 2 or a.shape[1] != LANES or on.shape != a.shape or p.warp.shape != (a.shape[0],):
        raise SpecError(f"expected [instructions, 32] addresses, got {a.shape}", key=key)
    align = 16 if i.op in MATRIX_OPS else i.width
    bad = on & ((a < 0) | (a % align != 0))
    if bad.any():
        n, lane = (int(x) for x in np.argwhere(bad)[0])
        what = "an ldmatrix/stmatrix row" if i.op in MATRIX_OPS else f"a {i.width}-byte access"
        raise SpecError(
            f"lane {lane} address {int(a[n, lane])} is not {align}-byte aligned ({what} must be); "
            "the hardware faults on it",
            key=key,
        )
    if i.op in MATRIX_OPS:
        used = on[:, : 8 * i.matrices]
        part = used.any(axis=1) & ~used.all(axis=1)
        if part.any():
            n = int(np.argmax(part))
            lane = int(np.argmin(used[n]))
            raise SpecError(
                f"{i.op} is .sync.aligned: lane {lane} gives a row address of x{i.matrices} but is "
                "idle; every lane 0..8*matrices-1 must take part",
                key=key,
            )
    if i.op == "cp.async":
        s = p.sources
        if s is None or s.shape != a.shape:
            raise SpecError("cp.async needs 32 source offsets per instruction", key=key)
        bad = on & ((s < 0) | (s % i.width != 0))
        if bad.any():
            n, lane = (int(x) for x in np.argwhere(bad)[0])
            raise SpecError(f"lane {lane} source {int(s[n, lane])} is not {i.width}-byte aligned", key=key)
    if p.threads % 32 or not 32 <= p.threads <= arch.max_threads_per_block:
        raise SpecError(
            f"threads {p.threads}: a whole number of warps up to {arch.max_threads_per_block}", key=key
        )
    if (p.warp < 0).any() or (p.warp >= p.threads // 32).any():
        raise SpecError(f"warp {int(p.warp.max())} is outside a block of {p.threads} threads", key=key)
    extent = int(np.where(on, a, 0).max()) + (16 if i.op in MATRIX_OPS else i.width)
    limit = arch.smem_optin_per_block - ALIGN
    if extent > limit:
        raise SpecError(
            f"addresses reach byte {extent}; a microkernel block has at most {limit} bytes of shared "
            f"memory on {arch.name}",
            key=key,
        )


# ---- launches ----------------------------------------------------------------------------------------------


def max_slots(instr: Instr, threads: int) -> int:
    """Slots per launch that keep the kernel in registers: S address registers (+2 per cp.async source)
    plus IN_FLIGHT * data registers and ~40 others within 65536 / threads (at most 255)."""
    budget = min(255, 65536 // threads) - 40 - IN_FLIGHT * instr.regs
    per = 3 if instr.op == "cp.async" else (2 if instr.op != "load" or instr.width < 16 else 1)
    return int(max(1, min(MAX_SLOTS, budget // per)))


def kernel_name(instr: Instr, slots: int, threads: int, pred: bool) -> str:
    return f"smk_{instr.key}_s{slots}_t{threads}{'_p' if pred else ''}"


def _launches(p: Pattern) -> list[Launch]:
    """Split p's instructions by warp into slot lists of at most max_slots, padded with idle slots."""
    i = p.instr
    warps = p.threads // 32
    by_warp = [np.flatnonzero(p.warp == w) for w in range(warps)]
    per_warp = max(len(x) for x in by_warp)
    cap = max_slots(i, p.threads)
    parts = -(-per_warp // cap)
    out = []
    for part in range(parts):
        lo = part * cap
        s_len = min(cap, per_warp - lo)
        addr = np.zeros((warps, s_len, LANES), dtype=np.int64)
        src = np.zeros_like(addr)
        on = np.zeros((warps, s_len), dtype=np.uint32)
        mask = np.zeros((warps, s_len, LANES), dtype=bool)
        wf = 0
        for w, idx in enumerate(by_warp):
            idx = idx[lo : lo + s_len]
            if not len(idx):
                continue
            a = p.addresses[idx]
            act = p.active[idx]
            if i.op in MATRIX_OPS:  # unused lanes repeat a used lane's (aligned) address
                used = 8 * i.matrices
                a = a[:, np.arange(LANES) % used]
                act = np.broadcast_to(act[:, :used].all(axis=1, keepdims=True), act.shape)
            addr[w, : len(idx)] = np.where(act, a, 0)
            mask[w, : len(idx)] = act
            if p.sources is not None:
                src[w, : len(idx)] = np.where(act, p.sources[idx], 0)
            wf += int(p.wavefronts[idx][p.active[idx].any(axis=1)].sum())
        bits = (mask.astype(np.uint64) << np.arange(LANES, dtype=np.uint64)).sum(axis=2)
        on[:] = bits.astype(np.uint32)
        warp_on = (on != 0).any(axis=1).astype(np.uint32)
        pred = bool(((on != 0) & (on != 0xFFFFFFFF)).any() or (warp_on[:, None] & (on == 0)).any())
        repeats = max(1, -(-MIN_PER_ITERATION // s_len))
        iterations = max(1, -(-TARGET_INSTRUCTIONS // (repeats * s_len)))
        extent = int(addr.max()) + (16 if i.op in MATRIX_OPS else i.width)
        smem = -(-extent // 128) * 128 + ALIGN
        gbytes = max(4096, -(-(int(src.max()) + i.width) // 256) * 256)
        out.append(
            Launch(
                p,
                part,
                kernel_name(i, s_len, p.threads, pred),
                s_len,
                repeats,
                iterations,
                addr.astype(np.uint32),
                on,
                warp_on,
                src.astype(np.uint32),
                smem,
                gbytes,
                int((on != 0).sum()),
                wf,
            )
        )
    return out


def build_module(patterns: list[Pattern], arch: Arch) -> Module:
    """Check every pattern for ``arch``, split them into launches, and write one CUDA source for all."""
    if not patterns:
        raise SpecError("nothing to measure: no accesses")
    for p in patterns:
        check_pattern(p, arch)
    launches = [x for p in patterns for x in _launches(p)]
    kernels: dict[str, str] = {}
    for x in launches:
        if x.kernel not in kernels:
            kernels[x.kernel] = kernel_source(
                x.pattern.instr, x.slots, x.repeats, x.threads, x.kernel.endswith("_p"), x.kernel
            )
    head = (
        "// Generated by smemtile (smemtile/codegen/microkernel.py): shared-memory microkernels, one PTX\n"
        "// instruction each, issued at the bank model's byte addresses. Launch: see Module.launches.\n"
    )
    return Module(arch.name, head + "\n".join(kernels.values()), tuple(kernels), tuple(launches))


# ---- CUDA source -------------------------------------------------------------------------------------------


def _asm(instr: Instr, addr: str, regs: list[str], pred: str | None, gptr: str | None) -> str:
    """One inline-PTX statement of ``instr`` at shared address ``addr`` (a C++ expression)."""
    n = instr.regs
    if instr.op == "cp.async":
        body, outs, ins = f"{instr.ptx} [%0], [%1], {instr.width};", "", [f'"r"({addr})', f'"l"({gptr})']
    elif instr.op == "stmatrix":
        vals = ",".join(f"%{k + 1}" for k in range(n))
        body, outs = f"{instr.ptx} [%0], {{{vals}}};", ""
        ins = [f'"r"({addr})'] + [f'"r"({r})' for r in regs]
    elif instr.op == "store":
        vals = ",".join(f"%{k + 1}" for k in range(n)) if n > 1 else "%1"
        body = f"{instr.ptx} [%0], {'{' + vals + '}' if n > 1 else vals};"
        outs = ""
        ins = [f'"r"({addr})'] + [
            (f'"h"((unsigned short){r})' if instr.width == 2 else f'"r"({r})') for r in regs
        ]
    else:  # load, ldmatrix
        vals = ",".join(f"%{k}" for k in range(n))
        body = f"{instr.ptx} {'{' + vals + '}' if n > 1 or instr.op == 'ldmatrix' else vals}, [%{n}];"
        outs = ", ".join(f'"{"+" if pred else "="}r"({r})' for r in regs)
        ins = [f'"r"({addr})']
    if pred is not None:  # operands are numbered outputs first, then inputs: the predicate comes last
        k = (len(regs) if outs else 0) + len(ins)
        body = f"{{ .reg .pred q; setp.ne.u32 q, %{k}, 0; @q {body} }}"
        ins = ins + [f'"r"({pred})']
    return f'asm volatile("{body}" : {outs} : {", ".join(ins)});'


def kernel_source(instr: Instr, slots: int, repeats: int, threads: int, pred: bool, name: str) -> str:
    """The ``extern "C"`` kernel issuing ``instr`` for ``slots`` addresses, ``repeats`` times per iteration."""
    S, R = slots, repeats
    cp = instr.op == "cp.async"
    loads = instr.op in ("load", "ldmatrix")
    setup = [f"    a[s] = base + addr[(warp * {S}u + s) * 32u + lane];"]
    decl = [f"  unsigned a[{S}];"]
    if pred:
        decl.append(f"  unsigned p[{S}];")
        setup.append(f"    p[s] = (on[warp * {S}u + s] >> lane) & 1u;")
    if cp:
        decl.append(f"  const char* g[{S}];")
        setup.append(f"    g[s] = gsrc + src[(warp * {S}u + s) * 32u + lane];")
    body = [f"      const unsigned o{r} = (i * {R}u + {r}u) & zero;" for r in range(R)]
    seq = [(r, s) for r in range(R) for s in range(S)]
    for g0 in range(0, len(seq), IN_FLIGHT):
        group = seq[g0 : g0 + IN_FLIGHT]
        body.append("      {")
        if loads:
            names = [[f"v{k}_{j}" for j in range(instr.regs)] for k in range(len(group))]
            init = " = 0u" if pred else ""
            body.append("      unsigned " + ", ".join(f"{v}{init}" for vs in names for v in vs) + ";")
        for k, (r, s) in enumerate(group):
            regs = names[k] if loads else (["i", "acc", "lane", "i"][: instr.regs] if instr.regs else [])
            body.append(
                "      "
                + _asm(instr, f"a[{s}] + o{r}", regs, f"p[{s}]" if pred else None, f"g[{s}]" if cp else None)
            )
        if loads:
            body.append("      acc ^= " + " + ".join(v for vs in names for v in vs) + ";")
        body.append("      }")
    if cp:
        body.append('      asm volatile("cp.async.commit_group;" ::: "memory");')
        body.append('      asm volatile("cp.async.wait_group 1;" ::: "memory");')
    drain = ['    asm volatile("cp.async.wait_all;" ::: "memory");'] if cp else []
    return "\n".join(
        [
            f'extern "C" __global__ void __launch_bounds__({threads}) {name}(',
            "    const unsigned* __restrict__ addr, const unsigned* __restrict__ on, const unsigned* __restrict__ warp_on,",
            "    const unsigned* __restrict__ src, const char* __restrict__ gsrc, unsigned iters, unsigned zero,",
            "    long long* __restrict__ cycles, unsigned* __restrict__ sink) {",
            f"  // {instr.describe()}: {S} instruction(s) per warp, {R} cop{'y' if R == 1 else 'ies'} per iteration",
            "  extern __shared__ unsigned char smk_smem[];",
            "  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;",
            f"  const unsigned base = ((unsigned)__cvta_generic_to_shared(smk_smem) + {ALIGN - 1}u) & ~{ALIGN - 1}u;",
            *decl,
            "#pragma unroll",
            f"  for (int s = 0; s < {S}; ++s) {{",
            *setup,
            "  }",
            "  const bool present = warp_on[warp] != 0u;",
            "  unsigned acc = 0u;",
            "  __syncthreads();",
            "  const long long t0 = clock64();",
            "  if (present) {",
            "    for (unsigned i = 0; i < iters; ++i) {",
            *body,
            "    }",
            *drain,
            "  }",
            "  const long long t1 = clock64();",
            "  if (lane == 0u) cycles[blockIdx.x * (blockDim.x >> 5) + warp] = present ? t1 - t0 : -1;",
            "  sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;",
            "}",
            "",
        ]
    )


# ---- catalogues (`smemtile measure`) -----------------------------------------------------------------------

CATALOGUE_KEYS = ("name", "description", "arch", "patterns")
PATTERN_KEYS = (
    "name",
    "op",
    "width",
    "address",
    "addresses",
    "source",
    "matrices",
    "trans",
    "cache",
    "active",
    "note",
)
CATALOGUE_BUFFER = 227 * 1024  # bytes a pattern may address (the largest opt-in block; checked per arch)


def catalogue_patterns(doc: object, source: str) -> tuple[Arch, list[Pattern]]:
    """A catalogue (see ``smemtile measure --help``) as Patterns of one warp, through the spec's raw form.

    Each pattern becomes one raw access of a u8 buffer, so addresses, ``source`` and ``active`` expressions
    (over ``lane``) and every check are the spec's own; errors name ``patterns.NAME.KEY``.
    """
    from smemtile.model.analysis import analyze_spec
    from smemtile.model.spec import spec_from_dict

    if not isinstance(doc, dict):
        raise SpecError(
            "a catalogue is a mapping with arch and patterns (see smemtile measure --help)", source=source
        )
    for k in doc:
        if k not in CATALOGUE_KEYS:
            raise SpecError(f"unknown key {k!r}; allowed: {', '.join(CATALOGUE_KEYS)}", source=source)
    pats = doc.get("patterns")
    if not isinstance(pats, list) or not pats:
        raise SpecError("must be a non-empty list of patterns", key="patterns", source=source)
    accesses, caches = [], {}
    for i, p in enumerate(pats):
        where = f"patterns[{i}]"
        if not isinstance(p, dict) or "name" not in p or "op" not in p:
            raise SpecError(
                "each pattern is a mapping with at least name, op and address(es)", key=where, source=source
            )
        where = f"patterns.{p['name']}"
        for k in p:
            if k not in PATTERN_KEYS:
                raise SpecError(
                    f"unknown key {k!r}; allowed: {', '.join(PATTERN_KEYS)}", key=where, source=source
                )
        cache = p.get("cache", "ca")
        if cache not in CACHES or (cache == "cg" and (p.get("op") != "cp.async" or p.get("width") != 16)):
            raise SpecError(
                f"cache {cache!r}: allowed ca, or cg for 16-byte cp.async",
                key=f"{where}.cache",
                source=source,
            )
        if "cache" in p and p["op"] != "cp.async":
            raise SpecError("cache only applies to op cp.async", key=f"{where}.cache", source=source)
        caches[str(p["name"])] = cache
        acc = {k: v for k, v in p.items() if k != "cache"}
        acc["buffer"] = "S"
        accesses.append(acc)
    spec_doc = {
        "arch": doc.get("arch", "sm_90"),
        "threads": 32,
        "buffers": [{"name": "S", "dtype": "u8", "shape": [CATALOGUE_BUFFER]}],
        "accesses": accesses,
    }
    try:
        spec = spec_from_dict(spec_doc, source)
        results = analyze_spec(spec)
    except SpecError as e:
        text = str(e)
        prefix = "".join(f"{x}: " for x in (e.source, e.key) if x)
        key = e.key.replace("accesses", "patterns", 1) if e.key else None
        raise SpecError(
            text[len(prefix) :] if text.startswith(prefix) else text, key=key, source=source
        ) from None
    return spec.arch, [
        pattern_from_result(r, cache=caches[r.access.name], where="patterns", source=source) for r in results
    ]
