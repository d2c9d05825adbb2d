"""The hgemm review-checklist items, read from the compiled PTX (the artefact) and the bank model::

commit_group        cp.async.commit_group count in the PTX (prologue + K loops)
wait_group          every cp.async.wait_group N in the K loops is STAGES-2 (STAGES-1 tiles in flight), 0 drains
barrier_after_wait  a bar.sync follows every wait_group before the next ld.shared / ldmatrix
ring_index          n/a: the slot offsets live in registers (a stale slot is a wrong result: verify)
copy_alignment      ALIGN 8: 16-byte cp.async.cg in the PTX and lda = K, ldb multiples of 8 elements (ALIGN 2, 1: n/a)
mma_fragments       ldmatrix.x4 (.trans for row-major B) and mma.sync.m16n8k16 of the problem's dtype
swizzle_proof       every copy and fragment access at its ideal wavefronts under the buffers' layouts
"""

from __future__ import annotations

import re

from smemtile.families.base import (
    FAIL,
    NA,
    PASS,
    PIPELINE_ITEMS,
    SWIZZLE_PROOF_TEXT,
    Item,
    KernelConfig,
    barrier_follows_each_wait,
    swizzle_proof_item,
)

TEXT = {
    **dict(PIPELINE_ITEMS),  # commit_group, wait_group, barrier_after_wait, ring_index
    "copy_alignment": "16-byte copies only where sources and leading dimensions are 16-byte aligned",
    "mma_fragments": "ldmatrix.x4 fragments and mma.sync.m16n8k16 of the input type",
    "swizzle_proof": SWIZZLE_PROOF_TEXT,
}


def pipeline_items(fam, cfg: KernelConfig, ptx: str | None) -> list[Item]:
    items = (
        _from_ptx(fam, cfg, ptx)
        if ptx
        else [
            Item(i, TEXT[i], NA, "not compiled (no PTX to read): run without --no-compile")
            for i in ("commit_group", "wait_group", "barrier_after_wait", "copy_alignment", "mma_fragments")
        ]
    )
    items.insert(
        3,
        Item(
            "ring_index",
            TEXT["ring_index"],
            NA,
            "the slot offsets live in registers and are not visible in PTX; a stale slot gives wrong "
            "results, which `smemtile verify` checks on the GPU",
        ),
    )
    items.append(swizzle_proof_item(fam, cfg))
    return items


def _from_ptx(fam, cfg: KernelConfig, ptx: str) -> list[Item]:
    stages = cfg.params["STAGES"]
    waits = [int(x) for x in re.findall(r"cp\.async\.wait_group\s+(\d+)", ptx)]
    commits = len(re.findall(r"cp\.async\.commit_group", ptx))
    want = stages - 2
    steady = [w for w in waits if w != 0]
    items = [
        Item(
            "commit_group",
            TEXT["commit_group"],
            PASS if commits >= 2 else FAIL,
            f"the PTX commits {commits} groups (prologue + K loops)",
        )
    ]
    ok = bool(waits) and all(w == want for w in steady) and (want == 0 or bool(steady))
    items.append(
        Item(
            "wait_group",
            TEXT["wait_group"],
            PASS if ok else FAIL,
            f"PTX wait_group values {sorted(set(waits))}; {stages} stages need {want} in the K loop "
            f"({stages - 1} tiles in flight, at most {want} pending) and 0 for the drain",
        )
    )
    barrier_ok = barrier_follows_each_wait(ptx)
    items.append(
        Item(
            "barrier_after_wait",
            TEXT["barrier_after_wait"],
            PASS if barrier_ok else FAIL,
            "every cp.async.wait_group in the PTX is followed by bar.sync before the next ld.shared or "
            "ldmatrix"
            if barrier_ok
            else "a shared load follows a wait_group before any bar.sync",
        )
    )
    vec16 = bool(re.search(r"cp\.async\.cg\.shared\.global(\.L2::128B)?\s+\[[^]]+\],\s*\[[^]]+\],\s*16", ptx))
    if fam.align(cfg) == 8:
        good = vec16 and fam.aligned_problem(cfg)
        ldb = "K" if fam.b_col(cfg) else "N"
        items.append(
            Item(
                "copy_alignment",
                TEXT["copy_alignment"],
                PASS if good else FAIL,
                f"ALIGN 8: {'16-byte cp.async.cg in the PTX' if vec16 else 'no 16-byte cp.async in the PTX'}"
                f"; lda = K = {cfg.problem['K']}, ldb = {ldb} = {cfg.problem[ldb]} "
                f"{'are' if fam.aligned_problem(cfg) else 'are not'} multiples of 8 elements (cudaMalloc "
                "bases are 256-byte aligned; a misaligned pointer makes the kernel write NaN tiles, "
                "never fault)",
            )
        )
    else:
        how = (
            "4-byte global loads through registers (a chunk that starts 2 mod 4 bytes: two 2-byte loads "
            "around three words)"
            if fam.align(cfg) == 2
            else "2-byte global loads through registers"
        )
        items.append(
            Item(
                "copy_alignment",
                TEXT["copy_alignment"],
                NA,
                f"ALIGN {fam.align(cfg)}: K or ldb is not a multiple of 8, so the copies are {how}: any "
                "alignment, every load inside its chunk",
            )
        )
    dt = cfg.problem["dtype"]
    mma = re.search(rf"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.{dt}\.{dt}\.f32", ptx)
    trans = not fam.b_col(cfg)
    ldsm = "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    ldsm_t = "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx
    good = bool(mma) and ldsm and (ldsm_t or not trans)
    items.append(
        Item(
            "mma_fragments",
            TEXT["mma_fragments"],
            PASS if good else FAIL,
            f"PTX: mma.sync.m16n8k16 {dt} {'found' if mma else 'missing'}, ldmatrix.x4 "
            f"{'found' if ldsm else 'missing'}"
            + (f", ldmatrix.x4.trans (row-major B) {'found' if ldsm_t else 'missing'}" if trans else ""),
        )
    )
    return items
