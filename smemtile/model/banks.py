"""The shared-memory bank model: how a warp's instruction is split into wavefronts (sm_70 and later).

Shared memory has 32 banks of 4-byte words; one wavefront serves at most one distinct word per bank, and
lanes that read the same word share it (broadcast). The hardware first splits the warp into **phases**
(groups of lanes that are processed together); each phase takes as many wavefronts as its most-loaded bank
has distinct words, and the instruction takes the sum over its phases. The phases below were fitted to,
and are checked against, Nsight Compute on an H200 (tests/data/bank_catalogue.json, 139 patterns):

    op / width               phases (lanes)                         measured example
    load, store  1, 2, 4 B   one phase: lanes 0-31                  stride-32 words: 32 wavefronts
    load, store  8 B         halves: 0-15, 16-31                    consecutive: 2
    load  8 B, merged        one phase, if every lane pair (2k, 2k+1) reads one address     pairs: 1
    load, store 16 B         quarters: 0-7, 8-15, 16-23, 24-31      consecutive: 4
    load 16 B, merged        halves, if every lane quad (4k..4k+3) reads at most 2 addresses  uniform: 2
    ldmatrix .xN             matrix m: lanes 8m..8m+7 (their 16-byte row addresses); other lanes ignored
    cp.async 4, 8, 16 B      quarters (the shared-memory write side; 4-byte copies take 4 wavefronts)

Stores never merge (a uniform 16-byte store takes 4 wavefronts). ``ideal_wavefronts`` is the number of
phases: what the same instruction costs without any bank conflict. ``ncu_ideal`` is the value Nsight
Compute subtracts in its ``bank_conflicts`` counter (it differs for cp.async, where ncu assumes one
wavefront per 128 bytes).

Everything is vectorised over ``[instructions, lanes, words]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from smemtile.errors import SpecError

BANKS = 32
BANK_BYTES = 4
LANES = 32
OPS = ("load", "store", "ldmatrix", "cp.async")
WIDTHS = {"load": (1, 2, 4, 8, 16), "store": (1, 2, 4, 8, 16), "ldmatrix": (16,), "cp.async": (4, 8, 16)}


@dataclass(frozen=True)
class PhaseDetail:
    """One phase of one instruction: the lanes served together and the words each bank had to deliver."""

    phase: int
    lanes: tuple[int, ...]
    wavefronts: int
    words_per_bank: tuple[int, ...]  # 32 entries: distinct words requested from each bank
    # wavefront index -> lanes that receive data in it (a lane of an 8/16-byte access can span two)
    lanes_by_wavefront: tuple[tuple[int, ...], ...]

    def to_dict(self) -> dict:
        return {
            "phase": self.phase,
            "lanes": list(self.lanes),
            "wavefronts": self.wavefronts,
            "words_per_bank": list(self.words_per_bank),
            "lanes_by_wavefront": [list(x) for x in self.lanes_by_wavefront],
        }


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
        out = []
        for ph in np.unique(self.phase_of_lane[i][self.active[i]]):
            lanes = np.flatnonzero((self.phase_of_lane[i] == ph) & self.active[i])
            w = np.unique(words[lanes].ravel())
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


def check_access(op: str, width: int, matrices: int = 4) -> None:
    """Raise SpecError unless (op, width, matrices) is an instruction the hardware has."""
    if op not in OPS:
        raise SpecError(f"unknown op {op!r}; allowed: {', '.join(OPS)}", key="op")
    if width not in WIDTHS[op]:
        raise SpecError(
            f"width {width} is not valid for {op}; allowed: {', '.join(map(str, WIDTHS[op]))}", key="width"
        )
    if op == "ldmatrix" and matrices not in (1, 2, 4):
        raise SpecError(f"ldmatrix matrices must be 1, 2 or 4, got {matrices}", key="matrices")


def analyze_addresses(addresses, op: str, width: int, matrices: int = 4) -> BankResult:
    """Wavefronts for each instruction of ``addresses`` ([I, 32] or [32] byte offsets from a 128-byte-aligned base).

    Misaligned addresses (not a multiple of ``width``; 16 for ldmatrix rows) raise SpecError: the hardware
    faults on them.
    """
    check_access(op, width, matrices)
    a = np.asarray(addresses, dtype=np.int64)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or a.shape[1] != LANES:
        raise SpecError(f"expected 32 addresses per instruction, got shape {a.shape}", key="addresses")
    if (a < 0).any():
        lane = int(np.argwhere(a < 0)[0][1])
        raise SpecError(f"negative shared-memory address for lane {lane}", key="addresses")
    align = 16 if op == "ldmatrix" else width
    bad = a % align != 0
    lane_ids = np.arange(LANES)
    active = np.ones_like(a, dtype=bool)
    if op == "ldmatrix":
        active = np.broadcast_to(lane_ids < 8 * matrices, a.shape).copy()
        bad &= active
    if bad.any():
        i, lane = (int(x) for x in np.argwhere(bad)[0])
        raise SpecError(
            f"lane {lane} address {int(a[i, lane])} is not aligned to {align} bytes (misaligned {op} faults)",
            key="addresses",
        )

    n = a.shape[0]
    merged = np.zeros(n, dtype=bool)
    if op == "ldmatrix" or op == "cp.async" or (op in ("load", "store") and width == 16):
        phase = np.broadcast_to(lane_ids // 8, a.shape).copy()
        if op == "load" and width == 16:
            # halves when every lane quad needs at most two 16-byte chunks (measured: uniform, broadcast pairs)
            merged = (_unique_per_group(a.reshape(n, 8, 4)) <= 2).all(axis=1)
            phase[merged] = lane_ids // 16
    elif width == 8:
        phase = np.broadcast_to(lane_ids // 16, a.shape).copy()
        if op == "load":
            merged = (a[:, 0::2] == a[:, 1::2]).all(axis=1)
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
