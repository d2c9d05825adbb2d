"""The shared-memory bank model: how a warp's instruction is split into wavefronts (sm_70 and later).

Shared memory has 32 banks of 4-byte words; one wavefront serves at most one distinct word per bank, and
lanes that read the same word share it (broadcast). The hardware first splits the warp into **phases**
(groups of lanes that are processed together); each phase takes as many wavefronts as its most-loaded bank
has distinct words, and the instruction takes the sum over its phases. The phases below were fitted to,
and are checked against, Nsight Compute on an H200 (tests/data/bank_catalogue_fitted.json):

    op / width               phases (lanes)                         measured example
    load, store  1, 2, 4 B   one phase: lanes 0-31                  stride-32 words: 32 wavefronts
    load, store  8 B         halves: 0-15, 16-31                    consecutive: 2
    load  8 B, merged        one phase, if every lane pair (2k, 2k+1) reads one address     pairs: 1
    load, store 16 B         quarters: 0-7, 8-15, 16-23, 24-31      consecutive: 4
    load 16 B, merged        halves, if every lane quad (4k..4k+3) reads at most 2 addresses  uniform: 2
    ldmatrix .xN             matrix m: lanes 8m..8m+7 (their 16-byte row addresses); other lanes ignored
    stmatrix .xN (sm_90)     as ldmatrix (a store; see below)        x4 rows 128 B apart: 32
    cp.async 4, 8, 16 B      see below

Stores never merge (a uniform 16-byte store takes 4 wavefronts).

**stmatrix** is the store twin of ldmatrix: matrix m's eight 16-byte row addresses come from lanes 8m..8m+7,
and it takes ldmatrix's phases (one per matrix, the busiest bank's distinct words), never merged. Written down
as a hypothesis first, its predictions for the 13 stmatrix patterns of bench/catalogue_heldout.yaml were
committed (bench/results/heldout_predictions.json), then measured on the H200 with ``smemtile measure``: all 13
exact (x1/x2/x4, .trans, strides 16-256 B, swizzled, repeated matrices; bench/results/heldout_summary.md). Its
wavefronts are counted in ncu's ``..._op_st`` counter. ``ideal_wavefronts`` is the number of
phases: what the same instruction costs without any bank conflict. ``ncu_ideal`` is the value Nsight
Compute subtracts in its ``bank_conflicts`` counter (it differs for cp.async, where ncu assumes one
wavefront per 128 bytes).

**cp.async (the shared-memory write side) depends on where the data comes from.** L1 and shared memory are
the same 32 banks, and the copy first reads its source words from L1. Fitted to the 52 measurable cp.async
patterns of bench/ncu_bank_catalogue.py (rounds 1-4; 44 exact, the 8 others have random sources, see below):

1. *read groups*: the lanes' source words are read from L1 in wavefronts, greedily in lane order, a lane whole or
   not at all; a source byte ``s`` sits in bank ``s // 4 % 32`` and lanes that need different words of one bank
   go to different read wavefronts. Each read wavefront is a *group* (e.g. four quarter-warps from four rows of
   A, all at the same offset in their lines: four groups; 32 lanes from one 128-byte line: one group);
2. *beats*: consecutive groups are packed into beats of at most 128 bytes of data (4-byte copies: four 32-byte
   groups share a beat; 16-byte copies: one full group per beat); beats run one after another;
3. inside a beat a group needs one *round* per word stacked in its busiest bank (no broadcast: two lanes that
   write the same word take two rounds); each round occupies one wavefront slot, and a slot serves each bank
   at most once across all groups of the beat; a group starts at least one slot after the previous group
   started and finishes at least one slot after it finished (a pipeline with in-order completion).

The instruction's wavefronts are the slots of its beats. So a 4-byte copy whose four quarter-warps each write
8 words of one bank (banks 0-3) from four rows takes 8 + 3 = 11 wavefronts (the SIMT GEMM's A copy), 32 if all four
stacked the same bank, and 8 if the 32 sources sat in one line. ``ideal_wavefronts`` is the same schedule with
every group one round deep. Without source addresses the model assumes the coalesced copy (lane ``l`` reads
bytes ``l * width`` onward of a 128-byte-aligned source). Where most lanes read different random lines the
model is off by 1-3 wavefronts, mostly short (where lines sit in L1's banks is not visible to it).

Loads, stores and ldmatrix are vectorised over ``[instructions, lanes, words]``; the cp.async schedule runs once
per distinct (addresses, sources) instruction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from smemtile.errors import SpecError
from smemtile.model.arrays import unique_sorted

BANKS = 32
BANK_BYTES = 4
LANES = 32
OPS = ("load", "store", "ldmatrix", "stmatrix", "cp.async")
WIDTHS = {
    "load": (1, 2, 4, 8, 16),
    "store": (1, 2, 4, 8, 16),
    "ldmatrix": (16,),
    "stmatrix": (16,),
    "cp.async": (4, 8, 16),
}
MATRIX_OPS = ("ldmatrix", "stmatrix")  # 8x8 b16 matrices: lane 8m+r gives row r of matrix m (16 bytes)


@dataclass(frozen=True)
class PhaseDetail:
    """One phase of one instruction: the lanes served together and the words each bank had to deliver."""

    phase: int
    lanes: tuple[int, ...]
    wavefronts: int
    words_per_bank: tuple[int, ...]  # 32 entries: distinct words requested from each bank
    # wavefront index -> lanes that receive data in it (a lane of an 8/16-byte access can span two)
    lanes_by_wavefront: tuple[tuple[int, ...], ...]
    # cp.async only: the phase is a group of lanes whose sources were read together (one read wavefront, from
    # these 128-byte global lines); its rounds run in these wavefront slots (see the module docstring)
    slots: tuple[int, ...] = ()
    source_lines: tuple[int, ...] | None = None
    beat: int | None = None

    def to_dict(self) -> dict:
        d = {
            "phase": self.phase,
            "lanes": list(self.lanes),
            "wavefronts": self.wavefronts,
            "words_per_bank": list(self.words_per_bank),
            "lanes_by_wavefront": [list(x) for x in self.lanes_by_wavefront],
        }
        if self.source_lines is not None:
            d.update(slots=list(self.slots), source_lines=list(self.source_lines), beat=self.beat)
        return d


@dataclass(frozen=True)
class BankResult:
    """Wavefronts of ``I`` instructions of one access (same op and width, different addresses)."""

    op: str
    width: int
    matrices: int
    addresses: np.ndarray = field(repr=False)  # [I, 32] byte offsets
    active: np.ndarray = field(repr=False)  # [I, 32] bool: lanes whose address is used
    phase_of_lane: np.ndarray = field(repr=False)  # [I, 32] phase index per lane
    wavefronts: np.ndarray  # [I]
    ideal_wavefronts: np.ndarray  # [I]
    merged: np.ndarray = field(repr=False)  # [I] bool: the load used the merged (wider) phases
    sources: np.ndarray | None = field(default=None, repr=False)  # cp.async: [I, 32] global byte offsets

    @property
    def conflict_degree(self) -> np.ndarray:
        """wavefronts / ideal: 1.0 means conflict-free; 32.0 is the classic column read of a 32-wide tile."""
        return self.wavefronts / self.ideal_wavefronts

    @property
    def ncu_ideal(self) -> np.ndarray:
        """The ideal wavefronts Nsight Compute assumes (bank_conflicts = wavefronts - this)."""
        if self.op == "cp.async":
            return np.full_like(self.wavefronts, max(1, LANES * self.width // 128))
        return self.ideal_wavefronts

    @property
    def worst(self) -> int:
        """Index of the instruction with the most wavefronts (first one on ties)."""
        return int(np.argmax(self.wavefronts))

    def words(self) -> np.ndarray:
        return _words(self.addresses, self.width)

    def detail(self, i: int) -> tuple[PhaseDetail, ...]:
        """The explicit calculation for instruction ``i``: phases, per-bank word counts, lanes per wavefront."""
        words = self.words()[i]  # [32, nw]
        if self.op == "cp.async":
            return _cp_async_detail(words, self.sources[i], self.active[i])
        out = []
        for ph in unique_sorted(self.phase_of_lane[i][self.active[i]]):
            lanes = np.flatnonzero((self.phase_of_lane[i] == ph) & self.active[i])
            w = unique_sorted(words[lanes])
            banks = w % BANKS
            per_bank = np.bincount(banks, minlength=BANKS)
            # rank of each word within its bank = the wavefront that delivers it
            rank = {}
            for b in range(BANKS):
                for r, word in enumerate(np.sort(w[banks == b])):
                    rank[int(word)] = r
            nwf = int(per_bank.max())
            by_wf: list[set[int]] = [set() for _ in range(nwf)]
            for lane in lanes:
                for word in words[lane]:
                    by_wf[rank[int(word)]].add(int(lane))
            out.append(
                PhaseDetail(
                    phase=int(ph),
                    lanes=tuple(int(x) for x in lanes),
                    wavefronts=nwf,
                    words_per_bank=tuple(int(x) for x in per_bank),
                    lanes_by_wavefront=tuple(tuple(sorted(s)) for s in by_wf),
                )
            )
        return tuple(out)


def _words(addresses: np.ndarray, width: int) -> np.ndarray:
    """[I, 32] byte offsets -> [I, 32, nw] 4-byte word indices touched by each lane."""
    nw = max(1, width // BANK_BYTES)
    return (addresses // BANK_BYTES)[..., None] + np.arange(nw, dtype=np.int64)


def _unique_per_group(values: np.ndarray) -> np.ndarray:
    """values [I, G, k] -> [I, G] number of distinct values in each group."""
    s = np.sort(values, axis=-1)
    return 1 + (np.diff(s, axis=-1) != 0).sum(axis=-1)


LINE_BYTES = 128  # global line: the unit in which cp.async data arrives and is written
BEAT_BYTES = 128  # data written to shared memory per beat


@dataclass(frozen=True)
class _CpGroup:
    lanes: tuple[int, ...]
    lines: tuple[int, ...]  # global 128-byte lines the group reads
    beat: int
    per_bank: tuple[int, ...]  # words written to each bank (no broadcast)
    slots: tuple[int, ...]  # slot of each round


def _read_groups(sources: np.ndarray, width: int, on: list[bool]) -> list[list[int]]:
    """The read side: lanes whose source words can be read from L1's banks together (one read wavefront).

    L1 and shared memory are the same 32 banks of 4-byte words; a source byte ``s`` sits in bank ``s // 4 % 32``
    and two lanes conflict when they need different words of one bank. Read wavefronts are filled greedily in
    lane order, a lane whole (all its words) or not at all.
    """
    nw = max(1, width // BANK_BYTES)
    pending = [lane for lane in range(LANES) if on[lane]]
    first = (sources // BANK_BYTES).tolist()
    groups = []
    while pending:
        used: dict[int, int] = {}
        take, rest = [], []
        for lane in pending:
            ws = range(first[lane], first[lane] + nw)
            if all(used.get(w % BANKS, w) == w for w in ws):
                for w in ws:
                    used[w % BANKS] = w
                take.append(lane)
            else:
                rest.append(lane)
        groups.append(take)
        pending = rest
    return groups


def _cp_async_schedule(
    words: np.ndarray, sources: np.ndarray, active: np.ndarray | None = None
) -> tuple[int, int, list[_CpGroup]]:
    """One instruction: words [32, nw], sources [32] -> (wavefronts, ideal wavefronts, groups with their slots)."""
    on = [True] * LANES if active is None else active.tolist()
    members = _read_groups(sources, words.shape[1] * BANK_BYTES, on)
    nw = words.shape[1]
    beats: list[list[int]] = []
    size = BEAT_BYTES + 1
    for gi, lanes in enumerate(members):
        b = len(lanes) * nw * BANK_BYTES
        if size + b > BEAT_BYTES:
            beats.append([])
            size = 0
        beats[-1].append(gi)
        size += b
    bank_of = (words % BANKS).tolist()
    groups: list[_CpGroup] = []
    total = ideal = 0
    for bi, beat in enumerate(beats):
        busy: dict[int, int] = {}  # slot -> bank mask
        prev_first = prev_last = -1
        end = 0
        for gi in beat:
            per_bank = [0] * BANKS
            for lane in members[gi]:
                for b in bank_of[lane]:
                    per_bank[b] += 1
            depth = max(per_bank)
            slots = []
            t = prev_first  # rounds: a round k holds the banks with more than k words
            for k in range(depth):
                mask = sum(1 << b for b in range(BANKS) if per_bank[b] > k)
                s = t + 1
                if k == depth - 1:
                    s = max(s, prev_last + 1)
                while busy.get(s, 0) & mask:
                    s += 1
                busy[s] = busy.get(s, 0) | mask
                slots.append(s)
                t = s
            prev_first, prev_last = slots[0], slots[-1]
            end = max(end, prev_last + 1)
            lines = tuple(sorted({int(sources[lane]) // LINE_BYTES for lane in members[gi]}))
            groups.append(
                _CpGroup(tuple(members[gi]), lines, bi, tuple(per_bank), tuple(total + x for x in slots))
            )
        total += end
        ideal += len(beat)
    return total, ideal, groups


def _cp_async_detail(words: np.ndarray, sources: np.ndarray, active: np.ndarray) -> tuple[PhaseDetail, ...]:
    _, _, groups = _cp_async_schedule(words, sources, active)
    out = []
    for gi, g in enumerate(groups):
        # round k of the group: the k-th word of each bank, in lane order
        seen = [0] * BANKS
        by_round: list[set[int]] = [set() for _ in g.slots]
        for lane in g.lanes:
            for w in words[lane]:
                b = int(w) % BANKS
                by_round[seen[b]].add(lane)
                seen[b] += 1
        out.append(
            PhaseDetail(
                phase=gi,
                lanes=g.lanes,
                wavefronts=len(g.slots),
                words_per_bank=g.per_bank,
                lanes_by_wavefront=tuple(tuple(sorted(x)) for x in by_round),
                slots=g.slots,
                source_lines=g.lines,
                beat=g.beat,
            )
        )
    return tuple(out)


_CP_SCHEDULES: dict[int, dict[bytes, tuple[int, int, np.ndarray]]] = {}  # width -> key -> schedule


def _cp_async(
    a: np.ndarray, width: int, sources: np.ndarray, active: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[I, 32] addresses, sources and active lanes -> (wavefronts [I], ideal [I], group per lane [I, 32], -1 idle)."""
    words = _words(a, width)
    n = a.shape[0]
    wf = np.zeros(n, dtype=np.int64)
    ideal = np.zeros(n, dtype=np.int64)
    phase = np.zeros_like(a)
    cache = _CP_SCHEDULES.setdefault(width, {})
    if len(cache) > 1 << 16:
        cache.clear()
    # only the banks of the shared words, the banks of the source words and which lanes read the same source
    # word matter: instructions equal in those share a result (in this call, and in every later one of the
    # process with the same width: the fix search schedules the same instructions for many layouts)
    sw = np.where(active, sources // BANK_BYTES, -1)
    same_src = np.where(active, (sw[:, :, None] == sw[:, None, :]).argmax(axis=2), -1)
    key_arr = np.concatenate([words.reshape(n, -1) % BANKS, sw % BANKS, same_src, active], axis=1)
    for i in range(n):
        key = key_arr[i].tobytes()
        if key not in cache:
            total, best, groups = _cp_async_schedule(words[i], sources[i], active[i])
            ph = np.full(LANES, -1, dtype=np.int64)
            for gi, g in enumerate(groups):
                ph[list(g.lanes)] = gi
            cache[key] = (total, best, ph)
        wf[i], ideal[i], phase[i] = cache[key]
    return wf, ideal, phase


def _check_sources(sources, n: int, width: int, active: np.ndarray) -> np.ndarray:
    if sources is None:
        return np.broadcast_to(np.arange(LANES, dtype=np.int64) * width, (n, LANES)).copy()
    src = np.asarray(sources, dtype=np.int64)
    if src.ndim == 1:
        src = src[None, :]
    if src.ndim != 2 or src.shape[1] != LANES or src.shape[0] not in (1, n):
        raise SpecError(f"expected 32 source addresses per instruction, got shape {src.shape}", key="source")
    src = np.broadcast_to(src, (n, LANES)).copy()
    if ((src < 0) & active).any():
        lane = int(np.argwhere((src < 0) & active)[0][1])
        raise SpecError(f"negative global source address for lane {lane}", key="source")
    src = np.where(active, src, 0)
    bad = src % width != 0
    if bad.any():
        i, lane = (int(x) for x in np.argwhere(bad)[0])
        raise SpecError(
            f"lane {lane} source {int(src[i, lane])} is not aligned to {width} bytes (cp.async needs aligned sources)",
            key="source",
        )
    return src


def check_access(op: str, width: int, matrices: int = 4) -> None:
    """Raise SpecError unless (op, width, matrices) is an instruction the hardware has."""
    if op not in OPS:
        raise SpecError(f"unknown op {op!r}; allowed: {', '.join(OPS)}", key="op")
    if width not in WIDTHS[op]:
        raise SpecError(
            f"width {width} is not valid for {op}; allowed: {', '.join(map(str, WIDTHS[op]))}", key="width"
        )
    if op in MATRIX_OPS and matrices not in (1, 2, 4):
        raise SpecError(f"{op} matrices must be 1, 2 or 4, got {matrices}", key="matrices")


def analyze_addresses(
    addresses, op: str, width: int, matrices: int = 4, sources=None, active=None
) -> BankResult:
    """Wavefronts for each instruction of ``addresses`` ([I, 32] or [32] byte offsets from a 128-byte-aligned base).

    ``sources`` (cp.async only; [I, 32] or [32]) are the global byte offsets each lane copies from, relative to
    a 128-byte-aligned base; None means the coalesced copy ``lane * width``. ``active`` ([I, 32] or [32] bool)
    marks the lanes that take part (predicated-off lanes neither read nor write); None means all of them.
    Misaligned addresses (not a multiple of ``width``; 16 for ldmatrix/stmatrix rows) raise SpecError: the hardware
    faults on them.
    """
    check_access(op, width, matrices)
    a = np.asarray(addresses, dtype=np.int64)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or a.shape[1] != LANES:
        raise SpecError(f"expected 32 addresses per instruction, got shape {a.shape}", key="addresses")
    lane_ids = np.arange(LANES)
    if active is None:
        active = np.ones_like(a, dtype=bool)
    else:
        active = np.broadcast_to(np.asarray(active, dtype=bool), a.shape).copy()
        if not active.any(axis=1).all():
            raise SpecError("every instruction needs at least one active lane", key="addresses")
    if op in MATRIX_OPS:
        active &= lane_ids < 8 * matrices
    if ((a < 0) & active).any():
        lane = int(np.argwhere((a < 0) & active)[0][1])
        raise SpecError(f"negative shared-memory address for lane {lane}", key="addresses")
    a = np.where(active, a, np.where(a < 0, 0, a))  # idle lanes' addresses are never used
    align = 16 if op in MATRIX_OPS else width
    bad = (a % align != 0) & active
    if bad.any():
        i, lane = (int(x) for x in np.argwhere(bad)[0])
        raise SpecError(
            f"lane {lane} address {int(a[i, lane])} is not aligned to {align} bytes (misaligned {op} faults)",
            key="addresses",
        )

    n = a.shape[0]
    merged = np.zeros(n, dtype=bool)
    if op == "cp.async":
        src = _check_sources(sources, n, width, active)
        wavefronts, ideal, phase = _cp_async(a, width, src, active)
        return BankResult(
            op=op,
            width=width,
            matrices=matrices,
            addresses=a,
            active=active,
            phase_of_lane=phase,
            wavefronts=wavefronts,
            ideal_wavefronts=ideal,
            merged=merged,
            sources=src,
        )
    if sources is not None:
        raise SpecError(f"source addresses only apply to cp.async, not {op}", key="source")
    if op in MATRIX_OPS or (op in ("load", "store") and width == 16):
        phase = np.broadcast_to(lane_ids // 8, a.shape).copy()
        if op == "load" and width == 16:
            # halves when every lane quad needs at most two 16-byte chunks (measured: uniform, broadcast pairs)
            # (an idle lane counts as a copy of its quad's active lanes: it asks for nothing)
            quads = np.where(active, a, -1).reshape(n, 8, 4)
            quads = np.where(quads < 0, quads.max(axis=2, keepdims=True), quads)
            merged = (_unique_per_group(quads) <= 2).all(axis=1)
            phase[merged] = lane_ids // 16
    elif width == 8:
        phase = np.broadcast_to(lane_ids // 16, a.shape).copy()
        if op == "load":
            merged = ((a[:, 0::2] == a[:, 1::2]) | ~active[:, 0::2] | ~active[:, 1::2]).all(axis=1)
            phase[merged] = 0
    else:
        phase = np.zeros_like(a)

    words = _words(a, width).reshape(n, -1)  # [I, 32 * nw]
    ph = np.repeat(phase, words.shape[1] // LANES, axis=1)
    act = np.repeat(active, words.shape[1] // LANES, axis=1)
    # sort (phase, word) keys per instruction; inactive lanes sort last and are dropped
    key = np.where(act, (ph << 40) | words, np.int64(1) << 62)
    key.sort(axis=1)
    distinct = np.ones_like(key, dtype=bool)
    distinct[:, 1:] = key[:, 1:] != key[:, :-1]  # broadcast of identical words is free
    distinct &= key != (np.int64(1) << 62)
    # distinct words per (instruction, phase, bank); a phase takes as many wavefronts as its busiest bank
    slot = (np.arange(n)[:, None] * 8 + (key >> 40) % 8) * BANKS + (key & ((1 << 40) - 1)) % BANKS
    counts = np.bincount(slot[distinct], minlength=n * 8 * BANKS).reshape(n, 8, BANKS)
    per_phase = counts.max(axis=2)
    wavefronts = per_phase.sum(axis=1)
    ideal = (per_phase > 0).sum(axis=1)
    return BankResult(
        op=op,
        width=width,
        matrices=matrices,
        addresses=a,
        active=active,
        phase_of_lane=phase,
        wavefronts=wavefronts,
        ideal_wavefronts=ideal,
        merged=merged,
    )
