"""What-if hints for one occupancy query: the most registers or shared memory that keep the block count,
what one more block needs, and why a configuration fits no block at all.

Each search varies one input over all its values with the vectorised model (``limits_batch``) and holds the
rest, so the answers are exact by construction.
"""

from __future__ import annotations

import numpy as np

from smemtile.model.arch import Arch
from smemtile.model.arrays import unique_sorted
from smemtile.model.occupancy import LIMITERS, STATIC_SMEM_MAX, limits_batch


class WhatIf:
    """What-if searches: vary one input over all its values with the vectorised model, hold the rest."""

    def __init__(
        self, arch: Arch, threads: int, regs: int, static: int, dynamic: int, carveout: int, opt_in: bool
    ):
        self.arch, self.threads, self.regs = arch, threads, regs
        self.static, self.dynamic, self.carveout, self.opt_in = static, dynamic, carveout, opt_in

    def _lim(self, **vary) -> dict[str, np.ndarray]:
        args = dict(
            threads=self.threads,
            regs=self.regs,
            smem_static=self.static,
            smem_dynamic=self.dynamic,
            carveout=self.carveout,
            opt_in=self.opt_in,
        )
        args.update(vary)
        n = max(np.size(v) for v in args.values())
        args["threads"] = np.broadcast_to(np.asarray(args["threads"], dtype=np.int64), (n,))
        return limits_batch(self.arch, **args)

    @staticmethod
    def _best(values: np.ndarray, ok: np.ndarray) -> int | None:
        return int(values[ok].max()) if ok.any() else None

    def max_regs(self, blocks: int) -> int | None:
        """Most registers per thread whose register limit still allows ``blocks``."""
        r = np.arange(self.arch.max_regs_per_thread + 1)
        return self._best(r, self._lim(regs=r)["registers"] >= blocks)

    def max_dynamic(self, blocks: int) -> int | None:
        """Most dynamic shared memory whose shared-memory limit still allows ``blocks``.

        Only the ends of allocation steps can be maxima: ``k * unit - static - reserved``, and the kernel's
        MaxDynamicSharedMemorySize attribute.
        """
        a = self.arch
        top = a.smem_optin_per_block + a.smem_reserved_per_block
        d = np.arange(0, top + a.smem_alloc_unit, a.smem_alloc_unit) - self.static - a.smem_reserved_per_block
        cap = max((a.smem_optin_per_block if self.opt_in else a.smem_default_per_block) - self.static, 0)
        d = unique_sorted(np.clip(np.append(d, cap), 0, None))
        return self._best(d, self._lim(smem_dynamic=d)["shared_memory"] >= blocks)

    def max_threads(self, blocks: int) -> int | None:
        """Most threads per block whose warp and register limits still allow ``blocks``."""
        t = np.arange(1, self.arch.max_threads_per_block + 1)
        lim = self._lim(threads=t)
        return self._best(t, np.minimum(lim["warps"], lim["registers"]) >= blocks)

    def next_block(self, blocks: int, lim: dict[str, int]) -> dict:
        """What ``blocks + 1`` resident blocks need: one requirement per limit now below it, all together."""
        want = blocks + 1
        needs: dict = {}
        possible = True
        for name in LIMITERS:
            if lim[name] >= want:
                continue
            if name == "registers":
                needs[name] = {"max_regs_per_thread": self.max_regs(want), "now": self.regs}
            elif name == "shared_memory":
                d = self.max_dynamic(want)
                needs[name] = {
                    "max_dynamic_smem": d,
                    "max_smem_per_block": None if d is None else self.static + d,
                    "now": self.static + self.dynamic,
                }
            elif name == "warps":
                needs[name] = {"max_threads": self.max_threads(want), "now": self.threads}
            else:
                needs[name] = {"max_blocks_per_sm": lim[name]}
            possible = possible and all(v is not None for k, v in needs[name].items() if k.startswith("max_"))
            possible = possible and name not in ("blocks", "barriers")
        return {"blocks": want, "possible": possible, "needs": needs}


def zero_reason(
    arch: Arch, threads: int, regs: int, static: int, dynamic: int, opt_in: bool, lim: dict
) -> str:
    """One sentence on why no block fits, naming the numbers."""
    parts = []
    if lim["registers"] == 0:
        parts.append(
            f"{threads} threads x {regs} registers need {lim['regs_assumed_per_block']:,} registers per block as "
            f"allocated ({lim['regs_per_warp']} per warp, warps rounded up to {arch.sub_partitions} sub-partitions),"
            f" more than the {arch.regs_per_block:,} a block can have"
        )
    if lim["shared_memory"] == 0:
        if static > STATIC_SMEM_MAX:
            parts.append(
                f"{static:,} B of static shared memory exceeds the {STATIC_SMEM_MAX:,} B a kernel may declare "
                "statically (ptxas rejects it); allocate it as dynamic shared memory"
            )
        elif not opt_in and static + dynamic > arch.smem_default_per_block:
            parts.append(
                f"static {static:,} B + dynamic {dynamic:,} B exceeds the {arch.smem_default_per_block:,} B default"
                " per block; raise it with cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,"
                f" bytes), up to {arch.smem_optin_per_block:,} B on {arch.name}"
            )
        else:
            parts.append(
                f"static {static:,} B + dynamic {dynamic:,} B exceeds the {arch.smem_optin_per_block:,} B of shared "
                f"memory a block may use on {arch.name} (opt-in maximum)"
            )
    if lim["warps"] == 0:
        parts.append(f"{threads} threads exceed {arch.max_threads_per_block} per block")
    return "; ".join(parts) or "no block fits"
