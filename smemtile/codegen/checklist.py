"""The review checklist of issue 5, evaluated for one generated kernel: each item pass / fail / n/a with a reason.

Facts come from the configuration (layouts, stages, shared memory), the bank table of the family's accesses,
the kernel source itself (the pipeline statements are looked up in the text, not assumed), and, when known,
the ptxas report and the occupancy model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from smemtile.codegen import FAMILIES
from smemtile.codegen.render import GeneratedKernel

PASS, FAIL, NA = "pass", "fail", "n/a"


@dataclass(frozen=True)
class Item:
    id: str
    text: str
    status: str
    reason: str

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _sgemm_pipeline(src: str, stages: int, cp_async: bool) -> list[Item]:
    start = src.find("int read_slot = 0, write_slot")
    end = src.find("cp_async_wait<0>()", start)
    loop = src[start:end] if cp_async and start >= 0 else ""
    items = []
    if not cp_async:
        why = "no cp.async: register double-buffering (loads to registers, one barrier per K step)"
        for id_, text in (
            ("commit_group", "cp.async.commit_group after all copies of a tile"),
            ("wait_group", "cp.async.wait_group(N) with the right N for the stage count"),
        ):
            items.append(Item(id_, text, NA, why))
        items.append(
            Item(
                "barrier_after_wait",
                "a barrier after the wait and before reading the newly filled buffer",
                PASS,
                "the shared stores of the next tile are followed by __syncthreads() before it is read",
            )
        )
        items.append(
            Item(
                "ring_index",
                "the ring-buffer index advances every iteration",
                PASS if "slot ^= 1;" in src else FAIL,
                "two slots: slot ^= 1 once per K step",
            )
        )
        return items
    # The K loops (an unmasked steady-state loop and a masked one for the rest): each must keep the protocol.
    loops = [c for c in re.split(r"\n\s*for \(", loop)[1:] if "compute(" in c] or [""]
    issue_then_commit = all(
        re.search(r"issue(?:_fast|_tile)?\([^;]*\);\s*smemtile::cp_async_commit\(\);", c) for c in loops
    )
    items.append(
        Item(
            "commit_group",
            "cp.async.commit_group after all copies of a tile",
            PASS if issue_then_commit else FAIL,
            "issue() copies the whole A and B tile, then one commit_group per tile (also when empty, so the group "
            "count stays uniform)",
        )
    )
    has_wait = all("cp_async_wait<STAGES - 2>()" in c for c in loops)
    items.append(
        Item(
            "wait_group",
            "cp.async.wait_group(N) with the right N for the stage count",
            PASS if has_wait else FAIL,
            f"wait_group({stages - 2}) with {stages} stages: {stages - 1} tiles are in flight before the wait, "
            f"so at most {stages - 2} may stay pending for tile kt to be complete",
        )
    )
    wait_then_bar = all(
        re.search(r"cp_async_wait<STAGES - 2>\(\);[^\n]*\n\s*__syncthreads\(\);", c) for c in loops
    )
    items.append(
        Item(
            "barrier_after_wait",
            "a barrier after the wait and before reading the newly filled buffer",
            PASS if wait_then_bar else FAIL,
            "__syncthreads() right after wait_group: every thread's copies of tile kt have landed before compute "
            "reads slot kt % STAGES, and every thread has finished tile kt-1 before its slot is refilled",
        )
    )
    advances = all(
        "read_slot = (read_slot + 1 == STAGES)" in c and "write_slot = (write_slot + 1 == STAGES)" in c
        for c in loops
    )
    items.append(
        Item(
            "ring_index",
            "the ring-buffer index advances every iteration",
            PASS if advances else FAIL,
            f"read slot kt % {stages} and write slot (kt + {stages - 1}) % {stages} both advance once per K step",
        )
    )
    return items


def evaluate(gk: GeneratedKernel, *, ncu: dict | None = None) -> list[Item]:
    """The checklist for ``gk`` (``ncu``: measured wavefronts per access, from ``verify --ncu``, when known)."""
    cfg = gk.config
    fam = FAMILIES[cfg.family]
    src = gk.source
    items: list[Item] = []

    inner = [b for b in gk.banks if b.inner_loop]
    items.append(
        Item(
            "bank_index",
            "bank index derived for every shared-memory access of the inner loop",
            PASS if inner else FAIL,
            "; ".join(f"{b.name}: {b.wavefronts}/{b.ideal} wavefronts ({b.degree:g}x)" for b in gk.banks),
        )
    )

    padded = {k: v for k, v in cfg.layouts.items() if v.pad}
    base = {b.name: b for b in (gk.banks_baseline or [])}
    if not padded:
        items.append(
            Item("pad_dimension", "padding on the dimension that caused the conflict", NA, "no padding")
        )
    else:
        reasons, ok = [], True
        for name, lay in padded.items():
            fixed = [b for b in gk.banks if b.buffer == name]
            fixed = [b for b in fixed if b.name in base]
            was = [base[b.name] for b in fixed]
            helped = any(w.degree > b.degree for w, b in zip(was, fixed, strict=True))
            if was and not helped:
                ok = False
                reasons.append(f"{name}: pad {lay.pad} removes no conflict (costs shared memory for nothing)")
            else:
                reasons.append(
                    f"{name}: pad {lay.pad} on the row stride, the dimension the conflicting lanes differ in "
                    + ", ".join(
                        f"{w.name} {w.degree:g}x -> {b.degree:g}x" for w, b in zip(was, fixed, strict=True)
                    )
                )
        items.append(
            Item(
                "pad_dimension",
                "padding on the dimension that caused the conflict",
                PASS if ok else FAIL,
                "; ".join(reasons),
            )
        )

    raw = re.findall(r"\b(?:As|Bs|tile)\s*\[\s*[^\]]*\*", src)
    uses_offset = src.count("::offset(") > 0
    items.append(
        Item(
            "padded_stride",
            "every index computation uses the padded stride",
            PASS if uses_offset and not raw else FAIL,
            "every shared access goes through SmemTile<ROWS, COLS, PAD, B, M, S>::offset(row, col), stride COLS + PAD"
            if not raw
            else f"raw index arithmetic found: {raw[0]}",
        )
    )

    if cfg.family == "sgemm":
        items += _sgemm_pipeline(src, cfg.params["STAGES"], bool(cfg.params["CP_ASYNC"]))
    else:
        why = "single-stage tile, no cp.async"
        items += [
            Item("commit_group", "cp.async.commit_group after all copies of a tile", NA, why),
            Item("wait_group", "cp.async.wait_group(N) with the right N for the stage count", NA, why),
            Item(
                "barrier_after_wait",
                "a barrier after the wait and before reading the newly filled buffer",
                PASS if "__syncthreads();" in src else FAIL,
                "one __syncthreads() between filling the tile and reading it",
            ),
            Item("ring_index", "the ring-buffer index advances every iteration", NA, "one buffer, no ring"),
        ]

    dyn = gk.launch.dynamic_smem_bytes
    if dyn > 48 * 1024:
        has = "cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize" in src
        items.append(
            Item(
                "func_set_attribute",
                "cudaFuncSetAttribute for more than 48 KB of dynamic shared memory",
                PASS if has else FAIL,
                f"{dyn} bytes dynamic: the launch helper raises MaxDynamicSharedMemorySize first",
            )
        )
    else:
        items.append(
            Item(
                "func_set_attribute",
                "cudaFuncSetAttribute for more than 48 KB of dynamic shared memory",
                NA,
                f"{dyn} bytes dynamic ({gk.launch.static_smem_bytes} static): within the 48 KiB default",
            )
        )

    limit = cfg.arch.smem_optin_per_block
    ptx = (gk.extra or {}).get("ptxas") or {}
    ptx_note = ""
    if ptx and ptx.get("static_smem_bytes") is not None:
        ptx_note = f"; ptxas reports {ptx['static_smem_bytes']} bytes static"
    stages = fam.stages(cfg.params)
    items.append(
        Item(
            "smem_total",
            "total shared memory per block (padding and stages included) within the allocation",
            PASS if gk.smem_bytes <= limit else FAIL,
            f"{gk.smem_bytes} bytes ({stages} stage(s), padding included) <= {limit} ({cfg.arch.name} opt-in){ptx_note}"
            if gk.smem_bytes <= limit
            else f"{gk.smem_bytes} bytes > {limit} ({cfg.arch.name} opt-in)",
        )
    )

    if ncu:
        items.append(Item("ncu", "conflicts confirmed by ncu", PASS, str(ncu)))
    else:
        items.append(
            Item("ncu", "conflicts confirmed by ncu", NA, "not measured yet: run `smemtile verify --ncu`")
        )

    occ = (gk.extra or {}).get("occupancy")
    if occ is None:
        items.append(
            Item(
                "two_blocks",
                "at least 2 blocks per SM or a stated reason",
                NA,
                "registers unknown (not compiled)",
            )
        )
    else:
        blocks = occ["active_blocks"]
        if blocks >= 2:
            items.append(
                Item(
                    "two_blocks",
                    "at least 2 blocks per SM or a stated reason",
                    PASS,
                    f"{blocks} blocks/SM ({occ['limiter']}-limited)",
                )
            )
        else:
            reason = _one_block_reason(cfg, occ)
            items.append(
                Item(
                    "two_blocks",
                    "at least 2 blocks per SM or a stated reason",
                    PASS if reason else FAIL,
                    reason or f"{blocks} block/SM, limited by {occ['limiter']}",
                )
            )
    return items


def _one_block_reason(cfg, occ: dict) -> str | None:
    """A stated reason for 1 block per SM, when the configuration chose it on purpose."""
    if cfg.family == "sgemm" and cfg.params.get("MIN_BLOCKS", 2) == 1:
        return (
            f"1 block/SM by design (MIN_BLOCKS=1): a {cfg.params['TM']}x{cfg.params['TN']} register tile per thread "
            f"needs more than 128 registers here; {occ['active_warps']} warps/SM with "
            f"{cfg.params['TM'] * cfg.params['TN']} independent FMAs each keep the FMA pipes busy"
        )
    return None
