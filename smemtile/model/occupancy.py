"""Occupancy exactly as the CUDA driver computes it: active blocks per SM and what limits them.

The calculation follows ``cuda_occupancy.h`` (CUDA 13.0) step by step, vectorised over numpy arrays so one
code path serves a single query and a 100,000-row batch. Per block, with ``w = ceil(threads / 32)`` warps:

- warps:      ``max_warps_per_sm // w``
- registers:  a warp gets ``roundup(regs * 32, 256)`` registers; the block must fit ``regs_per_block`` even with
              its warps rounded up to the 4 sub-partitions; each sub-partition holds
              ``(regs_per_sm / 4) // per_warp`` warps, so the limit is ``4 * that // w``
- shared mem: ``alloc = roundup(static + dynamic + reserved, unit)``. It must fit the per-block limit (48 KB
              default, or the opt-in maximum when the kernel raised ``MaxDynamicSharedMemorySize``, plus the
              reserved 1 KB). The SM's shared memory is the carveout (percent of the maximum, rounded *up* to a
              size the SM supports); when one block does not fit the carveout the driver uses the smallest
              supported size that holds it. The limit is ``smem_per_sm // alloc``.
- blocks:     the hardware's resident-block limit; from CC 9.0 also the barrier limit (never lower with one
              barrier per block, but reported as a co-limiter on CC 12.x as the driver does).

Resources a kernel does not use (0 registers, 0 bytes of shared memory) impose no limit: ``UNLIMITED``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from smemtile.model.arch import Arch
from smemtile.model.memo import memo

UNLIMITED = 2**31 - 1  # the header's INT_MAX: this resource does not limit the block count
STATIC_SMEM_MAX = 48 * 1024  # ptxas rejects more statically declared shared memory per kernel
DEFAULT_CARVEOUT = -1  # cudaSharedmemCarveoutDefault: the SM keeps its maximum shared memory

# Limiter names in reporting order, with the header's cudaOccLimitingFactor bits.
LIMITERS: tuple[str, ...] = ("shared_memory", "registers", "warps", "blocks", "barriers")
LIMIT_BITS: dict[str, int] = {"warps": 1, "registers": 2, "shared_memory": 4, "blocks": 8, "barriers": 16}


def _roundup(x: np.ndarray, unit: np.ndarray | int) -> np.ndarray:
    return -(-x // unit) * unit


class _ArchColumns:
    """Per-row architecture constants gathered from a few Arch rows (no per-row Python objects)."""

    def __init__(self, archs: Sequence[Arch], index: np.ndarray):
        def col(attr: str) -> np.ndarray:
            return np.array([getattr(a, attr) for a in archs], dtype=np.int64)[index]

        for attr in (
            "max_threads_per_block",
            "max_warps_per_sm",
            "max_blocks_per_sm",
            "regs_per_sm",
            "regs_per_block",
            "max_regs_per_thread",
            "reg_alloc_unit",
            "sub_partitions",
            "warp_size",
            "smem_per_sm",
            "smem_optin_per_block",
            "smem_default_per_block",
            "smem_reserved_per_block",
            "smem_alloc_unit",
            "barrier_factor",
        ):
            setattr(self, attr, col(attr))
        width = max(len(a.carveouts_kb) for a in archs)
        big = np.iinfo(np.int64).max
        table = np.full((len(archs), width), big, dtype=np.int64)
        for i, a in enumerate(archs):
            table[i, : len(a.carveouts)] = a.carveouts
        self.carveouts = table[index]

    def align_up(self, size: np.ndarray) -> np.ndarray:
        """The smallest carveout that holds ``size`` bytes (cudaOccAlignUpShmemSizeVoltaPlus)."""
        ok = self.carveouts >= size[:, None]
        pick = np.argmax(ok, axis=1)  # rows with no carveout large enough are never used by the caller
        return self.carveouts[np.arange(len(size)), pick]


def _limits(
    cols: _ArchColumns,
    threads: np.ndarray,
    regs: np.ndarray,
    smem_static: np.ndarray,
    smem_dynamic: np.ndarray,
    carveout: np.ndarray,
    opt_in: np.ndarray,
) -> dict[str, np.ndarray]:
    """Every per-resource block limit and the allocations behind them, one row per configuration."""
    warps = -(-threads // cols.warp_size)

    # Warps: a block occupies whole warps.
    lim_warps = np.where(
        threads > cols.max_threads_per_block, 0, cols.max_warps_per_sm // np.maximum(warps, 1)
    )

    # Registers: allocated per warp in units of 256. The hardware's per-block check assumes the warps are spread
    # over all 4 sub-partitions, so it rounds the warp count up to a multiple of 4.
    regs_per_warp = _roundup(regs * cols.warp_size, cols.reg_alloc_unit)
    regs_per_block = regs_per_warp * warps
    regs_assumed = regs_per_warp * _roundup(warps, cols.sub_partitions)
    regs_bad = (
        (regs_assumed > cols.regs_per_block)
        | (regs_per_block > cols.regs_per_block)
        | (regs > cols.max_regs_per_thread)
    )
    warps_per_sub = (cols.regs_per_sm // cols.sub_partitions) // np.maximum(regs_per_warp, 1)
    lim_regs = np.where(
        regs_bad,
        0,
        np.where(regs_per_warp > 0, warps_per_sub * cols.sub_partitions // np.maximum(warps, 1), UNLIMITED),
    )

    # Shared memory. The kernel's MaxDynamicSharedMemorySize attribute is the opt-in maximum minus its static
    # shared memory when it opted in, else what the 48 KB default leaves (the driver's value for a fresh
    # function: 49152 - static, read on the H200, bench/results/occupancy_driver_h200.json).
    smem_alloc = _roundup(smem_static + cols.smem_reserved_per_block + smem_dynamic, cols.smem_alloc_unit)
    per_block_cap = np.where(opt_in, cols.smem_optin_per_block, cols.smem_default_per_block)
    max_dynamic = np.maximum(per_block_cap - smem_static, 0)
    max_usage = smem_static + cols.smem_reserved_per_block + max_dynamic
    block_limit = (
        np.where(
            max_usage > cols.smem_default_per_block, cols.smem_optin_per_block, cols.smem_default_per_block
        )
        + cols.smem_reserved_per_block
    )
    static_too_big = smem_static > STATIC_SMEM_MAX
    dynamic_too_big = smem_dynamic > max_dynamic
    total_too_big = smem_alloc > block_limit
    smem_bad = static_too_big | dynamic_too_big | total_too_big
    pref = np.where(carveout < 0, cols.smem_per_sm, carveout * cols.smem_per_sm // 100)
    pref = cols.align_up(pref)
    fits = pref >= smem_alloc
    smem_per_sm = np.where(fits, pref, cols.align_up(np.where(fits | smem_bad, 0, smem_alloc)))
    lim_smem = np.where(
        smem_bad, 0, np.where(smem_alloc > 0, smem_per_sm // np.maximum(smem_alloc, 1), UNLIMITED)
    )

    lim_blocks = cols.max_blocks_per_sm
    active = np.minimum(np.minimum(lim_regs, lim_smem), np.minimum(lim_warps, lim_blocks))
    flags = (
        (active == lim_warps) * LIMIT_BITS["warps"]
        + (active == lim_regs) * LIMIT_BITS["registers"]
        + (active == lim_smem) * LIMIT_BITS["shared_memory"]
        + (active == lim_blocks) * LIMIT_BITS["blocks"]
    )
    # From CC 9.0 the driver also counts block barriers (one per ordinary kernel).
    has_bars = cols.barrier_factor > 0
    lim_bars = np.where(has_bars, lim_blocks * cols.barrier_factor, UNLIMITED)
    active = np.minimum(active, lim_bars)
    flags = flags + (has_bars & (active == lim_bars)) * LIMIT_BITS["barriers"]

    return {
        "active_blocks": active,
        "limiting_factors": flags,
        "warps": lim_warps,
        "registers": lim_regs,
        "shared_memory": lim_smem,
        "blocks": np.broadcast_to(lim_blocks, active.shape),
        "barriers": lim_bars,
        "warps_per_block": warps,
        "regs_per_warp": regs_per_warp,
        "regs_per_block": regs_per_block,
        "regs_assumed_per_block": regs_assumed,
        "smem_per_block": smem_alloc,
        "smem_block_limit": block_limit,
        "max_dynamic_smem": max_dynamic,
        "smem_per_sm": np.where(smem_bad, pref, smem_per_sm),
        "static_too_big": static_too_big,
        "dynamic_too_big": dynamic_too_big,
        "total_too_big": total_too_big,
    }


def _as_int64(x, n: int) -> np.ndarray:
    a = np.asarray(x, dtype=np.int64)
    return np.broadcast_to(a, (n,)) if a.ndim == 0 else a


def _columns(arch: Arch | Sequence[Arch], n: int) -> _ArchColumns:
    if isinstance(arch, Arch):
        return _ArchColumns([arch], np.zeros(n, dtype=np.int64))
    lut: dict[int, int] = {}
    rows: list[Arch] = []
    index = np.empty(n, dtype=np.int64)
    for i, a in enumerate(arch):
        j = lut.get(id(a))
        if j is None:
            j = lut[id(a)] = len(rows)
            rows.append(a)
        index[i] = j
    return _ArchColumns(rows, index)


def limits_batch(
    arch: Arch | Sequence[Arch],
    threads,
    regs,
    smem_static=0,
    smem_dynamic=0,
    carveout=DEFAULT_CARVEOUT,
    opt_in=True,
) -> dict[str, np.ndarray]:
    """Vectorised core: every limit, the active blocks and the header's limiting-factor bits per row.

    ``arch`` is one Arch for all rows or a sequence with one Arch per row; ``carveout`` is a percent, -1 for
    the default. Inputs are assumed valid (see ``validate``); sizes are bytes.
    """
    threads = np.atleast_1d(np.asarray(threads, dtype=np.int64))
    n = len(threads)
    return _limits(
        _columns(arch, n),
        threads,
        _as_int64(regs, n),
        _as_int64(smem_static, n),
        _as_int64(smem_dynamic, n),
        _as_int64(carveout, n),
        np.broadcast_to(np.asarray(opt_in, dtype=bool), (n,)),
    )


@dataclass(frozen=True)
class BatchOccupancy:
    """Occupancy of many configurations: numpy arrays in input order."""

    arch: tuple[str, ...]
    threads: np.ndarray
    regs: np.ndarray
    smem_static: np.ndarray
    smem_dynamic: np.ndarray
    carveout: np.ndarray
    opt_in: np.ndarray
    active_blocks: np.ndarray
    active_warps: np.ndarray
    occupancy: np.ndarray
    limiting_factors: np.ndarray
    limits: dict[str, np.ndarray] = field(repr=False)

    def __len__(self) -> int:
        return len(self.threads)

    def to_dicts(self) -> list[dict]:
        """One contract dict per row (``active_blocks``, ``active_warps``, ``occupancy``, ``limiter``, ...)."""
        names = {bits: _limiter_names(bits) for bits in sorted(set(self.limiting_factors.tolist()))}
        lim = [[None if v == UNLIMITED else v for v in self.limits[k].tolist()] for k in LIMITERS]
        limit_dicts = [dict(zip(LIMITERS, t, strict=True)) for t in zip(*lim, strict=True)]
        out = []
        cols = zip(
            self.arch,
            self.threads.tolist(),
            self.regs.tolist(),
            self.smem_static.tolist(),
            self.smem_dynamic.tolist(),
            [None if c < 0 else c for c in self.carveout.tolist()],
            self.opt_in.tolist(),
            self.active_blocks.tolist(),
            self.active_warps.tolist(),
            self.occupancy.tolist(),
            self.limiting_factors.tolist(),
            limit_dicts,
            strict=True,
        )
        for a, t, r, s, d, c, o, b, w, occ, bits, limits in cols:
            ls = names[bits]
            row = {
                "arch": a,
                "threads": t,
                "regs": r,
                "static_smem": s,
                "dynamic_smem": d,
                "carveout": c,
                "opt_in": o,
                "active_blocks": b,
                "active_warps": w,
                "occupancy": occ,
                "limiter": ls[0],
                "limiters": list(ls),
                "limits": limits,
            }
            if b == 0:
                row["reason"] = f"cannot run: {ls[0].replace('_', ' ')} limit is 0 blocks"
            out.append(row)
        return out


def _limiter_names(bits: int) -> list[str]:
    return [name for name in LIMITERS if bits & LIMIT_BITS[name]]


def occupancy_batch(
    arch: Arch | Sequence[Arch],
    threads,
    regs,
    smem_static=0,
    smem_dynamic=0,
    carveout=DEFAULT_CARVEOUT,
    opt_in=True,
) -> BatchOccupancy:
    """Occupancy of many configurations at once (vectorised; 100,000 rows take milliseconds).

    ``arch``: one Arch, or one per row. ``carveout``: percent per row, -1 = default. ``opt_in``: bool per row.
    """
    threads = np.atleast_1d(np.asarray(threads, dtype=np.int64))
    n = len(threads)
    regs, smem_static, smem_dynamic, carveout = (
        _as_int64(x, n) for x in (regs, smem_static, smem_dynamic, carveout)
    )
    opt_in = np.broadcast_to(np.asarray(opt_in, dtype=bool), (n,))
    cols = _columns(arch, n)
    lim = _limits(cols, threads, regs, smem_static, smem_dynamic, carveout, opt_in)
    names = (arch.name,) * n if isinstance(arch, Arch) else tuple(a.name for a in arch)
    active = lim["active_blocks"]
    warps = active * lim["warps_per_block"]
    return BatchOccupancy(
        arch=names,
        threads=threads,
        regs=regs,
        smem_static=smem_static,
        smem_dynamic=smem_dynamic,
        carveout=carveout,
        opt_in=opt_in,
        active_blocks=active,
        active_warps=warps,
        occupancy=warps / cols.max_warps_per_sm,
        limiting_factors=lim["limiting_factors"],
        limits={k: lim[k] for k in LIMITERS},
    )


# --------------------------------------------------------------------------------------------------------------
# Input checks: bad input is an error (exit 2); a configuration that cannot run is a result with 0 blocks.


def invalid_rows(threads, regs, smem_static, smem_dynamic, carveout) -> tuple[np.ndarray, str, str] | None:
    """The first failing check over arrays: (bad-row mask, key, message), or None when every row is valid."""
    checks = (
        (np.asarray(threads) < 1, "threads", "must be at least 1"),
        (np.asarray(threads) > 1024, "threads", "must be at most 1024 per block"),
        (np.asarray(regs) < 0, "regs", "must not be negative"),
        (np.asarray(regs) > 255, "regs", "must be at most 255 per thread"),
        (np.asarray(smem_static) < 0, "static_smem", "must not be negative"),
        (np.asarray(smem_dynamic) < 0, "dynamic_smem", "must not be negative"),
        ((np.asarray(carveout) < -1) | (np.asarray(carveout) > 100), "carveout", "must be a percent 0..100"),
    )
    found = [(mask, key, msg) for mask, key, msg in checks if np.any(mask)]
    if not found:
        return None
    first = min(found, key=lambda f: int(np.argmax(f[0])))
    return first


def validate(threads: int, regs: int, smem_static: int, smem_dynamic: int, carveout: int | None) -> None:
    """Raise SpecError (exit 2) naming the bad value; sizes are bytes, ``carveout`` a percent or None."""
    from smemtile.errors import SpecError

    bad = invalid_rows(threads, regs, smem_static, smem_dynamic, -1 if carveout is None else carveout)
    if bad is not None:
        _, key, msg = bad
        value = {
            "threads": threads,
            "regs": regs,
            "static_smem": smem_static,
            "dynamic_smem": smem_dynamic,
        }.get(key, carveout)
        raise SpecError(f"{msg}, got {value}", key=key)


# --------------------------------------------------------------------------------------------------------------
# One configuration: the full answer with the reason for 0 blocks and what-if hints.


@dataclass(frozen=True)
class OccupancyResult:
    """Occupancy of one kernel configuration on one architecture. Sizes are bytes."""

    arch: str
    threads: int
    regs: int
    smem_static: int
    smem_dynamic: int
    carveout: int | None
    opt_in: bool
    active_blocks: int
    active_warps: int
    max_warps_per_sm: int
    occupancy: float  # active warps / max warps per SM, 0..1
    limiters: tuple[str, ...]  # every binding limit, as the driver's limitingFactors reports them
    limits: dict[str, int | None]  # blocks per SM each resource allows; None = not limited by it
    allocation: dict[str, int]  # what one block is charged: warps, registers, shared memory (+ the SM's)
    what_if: dict  # most registers / dynamic shared memory that keep the block count; what one more needs
    reason: str | None = None  # why 0 blocks fit, when they do not

    @property
    def limiter(self) -> str:
        return self.limiters[0]

    def to_dict(self) -> dict:
        return {
            "arch": self.arch,
            "threads": self.threads,
            "regs": self.regs,
            "static_smem": self.smem_static,
            "dynamic_smem": self.smem_dynamic,
            "carveout": self.carveout,
            "opt_in": self.opt_in,
            "active_blocks": self.active_blocks,
            "active_warps": self.active_warps,
            "max_warps_per_sm": self.max_warps_per_sm,
            "occupancy": self.occupancy,
            "limiter": self.limiter,
            "limiters": list(self.limiters),
            "limits": dict(self.limits),
            "allocation": dict(self.allocation),
            "what_if": self.what_if,
            "reason": self.reason,
        }


_RESULTS: dict[tuple, OccupancyResult] = {}


def occupancy(
    arch: Arch,
    threads: int,
    regs: int,
    smem_static: int = 0,
    smem_dynamic: int = 0,
    carveout: int | None = None,
    opt_in: bool = True,
) -> OccupancyResult:
    """Active blocks per SM of a kernel with ``threads`` per block and ``regs`` registers per thread.

    ``carveout``: preferred shared-memory carveout in percent (None = the driver's default, the maximum).
    ``opt_in``: the kernel raised ``cudaFuncAttributeMaxDynamicSharedMemorySize`` to the opt-in maximum; when
    False the 48 KB default per block applies. Raises SpecError for invalid input; a configuration that
    cannot run returns 0 blocks with ``reason`` set.

    Answered once per process for each input (the what-if searches run the vectorised model a few hundred
    times; analyze asks again for the same kernel); each caller gets its own copy of the mappings inside.
    """
    args = (arch, threads, regs, smem_static, smem_dynamic, carveout, opt_in)
    key = tuple((type(v), v) for v in args)  # an unhashable input: validate() names what is wrong with it
    hit = memo(_RESULTS, key, lambda: _occupancy(*args))
    return replace(
        hit, limits=dict(hit.limits), allocation=dict(hit.allocation), what_if=copy.deepcopy(hit.what_if)
    )


def _occupancy(
    arch: Arch,
    threads: int,
    regs: int,
    smem_static: int = 0,
    smem_dynamic: int = 0,
    carveout: int | None = None,
    opt_in: bool = True,
) -> OccupancyResult:
    validate(threads, regs, smem_static, smem_dynamic, carveout)
    c = DEFAULT_CARVEOUT if carveout is None else carveout
    lim = {
        k: int(v[0])
        for k, v in limits_batch(arch, threads, regs, smem_static, smem_dynamic, c, opt_in).items()
    }
    blocks = lim["active_blocks"]
    limiters = tuple(_limiter_names(lim["limiting_factors"]))
    from smemtile.model.occupancy_whatif import WhatIf, zero_reason  # what-if searches reuse limits_batch

    what = WhatIf(arch, threads, regs, smem_static, smem_dynamic, c, opt_in)
    what_if: dict = {}
    if blocks > 0:
        what_if["keep_blocks"] = blocks
        what_if["max_regs_per_thread"] = what.max_regs(blocks)
        d = what.max_dynamic(blocks)
        what_if["max_dynamic_smem"] = d
        what_if["max_smem_per_block"] = None if d is None else smem_static + d
    what_if["next_block"] = what.next_block(blocks, lim)
    return OccupancyResult(
        arch=arch.name,
        threads=threads,
        regs=regs,
        smem_static=smem_static,
        smem_dynamic=smem_dynamic,
        carveout=carveout,
        opt_in=opt_in,
        active_blocks=blocks,
        active_warps=blocks * lim["warps_per_block"],
        max_warps_per_sm=arch.max_warps_per_sm,
        occupancy=blocks * lim["warps_per_block"] / arch.max_warps_per_sm,
        limiters=limiters,
        limits={k: None if lim[k] == UNLIMITED else lim[k] for k in LIMITERS},
        allocation={
            "warps_per_block": lim["warps_per_block"],
            "regs_per_warp": lim["regs_per_warp"],
            "regs_per_block": lim["regs_per_block"],
            "regs_assumed_per_block": lim["regs_assumed_per_block"],
            "smem_per_block": lim["smem_per_block"],
            "smem_reserved_per_block": arch.smem_reserved_per_block,
            "smem_block_limit": lim["smem_block_limit"],
            "max_dynamic_smem_attribute": lim["max_dynamic_smem"],
            "smem_per_sm": lim["smem_per_sm"],
        },
        what_if=what_if,
        reason=zero_reason(arch, threads, regs, smem_static, smem_dynamic, opt_in, lim)
        if blocks == 0
        else None,
    )


# --------------------------------------------------------------------------------------------------------------
# Thread-block clusters (sm_90+): how many clusters the whole GPU holds at once.

# cuOccupancyMaxActiveClusters measured on the H200 (132 SMs, 2026-11-30) for the TMA + wgmma GEMM family's
# default kernel (1 block of 384 threads per SM, 225 KB of shared memory), identical in two runs: (gpu, cluster size) -> clusters
# (bench/results/wgmma_h200.json, "max_active_clusters"). 4 and 8 fall short of 132 / size: the GPCs' SM counts.
MEASURED_CLUSTERS: dict[tuple[str, int], int] = {("h200", 2): 66, ("h200", 4): 30, ("h200", 8): 15}


def active_clusters(blocks_per_sm: int, cluster: int, sms: int, gpu: str | None = None) -> dict:
    """Clusters of ``cluster`` CTAs resident on the GPU at once, with where the number comes from.

    A cluster's CTAs run together on the SMs of one GPC, so a GPC of ``g`` SMs holds ``floor(g * blocks / cluster)``
    of them and the GPU the sum over its GPCs. The GPC sizes are not public, so without a measurement this is
    the upper bound ``floor(sms * blocks / cluster)`` (exact for cluster 1). ``gpu`` ("h200") picks a measured
    value of ``cuOccupancyMaxActiveClusters`` when one is recorded for one block per SM."""
    if cluster < 1 or blocks_per_sm < 0 or sms < 1:
        raise ValueError(f"cluster {cluster}, blocks per SM {blocks_per_sm}, SMs {sms}: out of range")
    bound = sms * blocks_per_sm // cluster
    measured = MEASURED_CLUSTERS.get((str(gpu or "").lower(), cluster)) if blocks_per_sm == 1 else None
    if cluster == 1:
        return {"active_clusters": bound, "cluster": 1, "source": "blocks per SM x SMs (clusters of 1)"}
    if measured is not None:
        return {
            "active_clusters": measured,
            "cluster": cluster,
            "upper_bound": bound,
            "source": f"cuOccupancyMaxActiveClusters measured on the {gpu} (bench/results/wgmma_h200.json)",
        }
    return {
        "active_clusters": bound,
        "cluster": cluster,
        "upper_bound": bound,
        "source": "upper bound floor(SMs x blocks per SM / cluster): the GPC sizes are not known; the driver's "
        "cuOccupancyMaxActiveClusters can be lower",
    }
