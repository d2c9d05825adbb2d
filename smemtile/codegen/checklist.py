"""The review checklist, evaluated on one generated kernel: each item pass / fail / n/a, always with the reason.

Facts come from the artefact itself where they can: the bank table of the family's accesses (the expressions
``analyze`` uses and ``verify --ncu`` measures), the generated host helper text, the compiled PTX (the cp.async
protocol: commit and wait_group counts, a barrier after each wait) and ptxas' resource report. An item that
cannot be decided from the artefact says ``n/a`` and why, never ``pass``.
"""

from __future__ import annotations

from smemtile.codegen.render import GeneratedKernel
from smemtile.families import FAMILIES
from smemtile.families.base import FAIL, NA, PASS, Item


def evaluate(gk: GeneratedKernel, *, ptx: str | None = None, ncu: dict | None = None) -> list[Item]:
    """The checklist for ``gk``; ``ptx`` is the compiled PTX (None: not compiled), ``ncu`` the measured
    wavefronts from ``verify --ncu`` when known."""
    cfg = gk.config
    fam = FAMILIES[cfg.family]
    items: list[Item] = []

    inner = [b for b in gk.banks if b.inner_loop]
    items.append(
        Item(
            "bank_index",
            "bank index derived for every shared-memory access of the inner loop",
            PASS if inner else FAIL,
            "; ".join(f"{b.name}: {b.wavefronts}/{b.ideal} wavefronts ({b.degree:g}x)" for b in gk.banks)
            + " (from the family's access expressions, the ones `analyze` prints)"
            if inner
            else "the family lists no inner-loop access",
        )
    )

    padded = {k: v for k, v in cfg.layouts.items() if v.pad}
    base = {b.name: b for b in (gk.banks_baseline or [])}
    if not padded:
        items.append(
            Item("pad_dimension", "padding on the dimension that caused the conflict", NA, "no padding")
        )
    elif not base:
        items.append(
            Item(
                "pad_dimension",
                "padding on the dimension that caused the conflict",
                NA,
                "no baseline to compare with",
            )
        )
    else:
        reasons, ok = [], True
        for name, lay in padded.items():
            pairs = [(base[b.name], b) for b in gk.banks if b.buffer == name and b.name in base]
            helped = any(w.degree > b.degree for w, b in pairs)
            if pairs and not helped:
                ok = False
                reasons.append(
                    f"{name}: pad {lay.pad} removes no conflict (it costs shared memory for nothing)"
                )
            else:
                reasons.append(
                    f"{name}: pad {lay.pad} on the row stride: "
                    + ", ".join(f"{w.name} {w.degree:g}x -> {b.degree:g}x" for w, b in pairs)
                )
        items.append(
            Item(
                "pad_dimension",
                "padding on the dimension that caused the conflict",
                PASS if ok else FAIL,
                "; ".join(reasons),
            )
        )

    items.append(
        Item(
            "padded_stride",
            "every index computation uses the padded stride",
            NA,
            "not decidable from the generated source: the family's template indexes every shared buffer through "
            "SmemTile<ROWS, COLS, PAD, B, M, S>::offset (stride COLS + PAD); `smemtile verify` checks the results "
            "and `verify --ncu` the wavefronts of this layout on a GPU",
        )
    )

    items += fam.pipeline_items(cfg, ptx)

    dyn = gk.launch.dynamic_smem_bytes
    text = "cudaFuncSetAttribute for more than 48 KB of dynamic shared memory"
    if dyn > cfg.arch.static_smem_max:
        has = "cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize" in gk.snippet
        items.append(
            Item(
                "func_set_attribute",
                text,
                PASS if has else FAIL,
                f"{dyn} bytes dynamic: the generated {gk.helper}() raises "
                "MaxDynamicSharedMemorySize before the launch"
                if has
                else f"{dyn} bytes dynamic but the helper never raises the limit",
            )
        )
    else:
        items.append(
            Item(
                "func_set_attribute",
                text,
                NA,
                f"{dyn} bytes dynamic ({gk.launch.static_smem_bytes} static): within the 48 KiB default",
            )
        )

    limit = cfg.arch.smem_optin_per_block
    ptxas = (gk.extra or {}).get("ptxas") or {}
    stages = fam.stages(cfg.params)
    reason = (
        f"{gk.smem_bytes} bytes ({stages} stage(s), padding included), {cfg.arch.name} opt-in limit {limit}"
    )
    status = PASS if gk.smem_bytes <= limit else FAIL
    if ptxas.get("static_smem_bytes") is not None:
        same = ptxas["static_smem_bytes"] == gk.launch.static_smem_bytes
        reason += (
            f"; ptxas reports {ptxas['static_smem_bytes']} bytes static, the formula "
            f"{gk.launch.static_smem_bytes}"
        )
        status = status if same else FAIL
    else:
        reason += "; ptxas' number unknown (not compiled)"
    items.append(
        Item(
            "smem_total",
            "total shared memory per block (padding and stages included) within the allocation",
            status,
            reason,
        )
    )

    if ncu:
        items.append(Item("ncu", "conflicts confirmed by ncu", PASS if ncu.get("match") else FAIL, str(ncu)))
    else:
        items.append(
            Item("ncu", "conflicts confirmed by ncu", NA, "not measured here: run `smemtile verify --ncu`")
        )

    occ = (gk.extra or {}).get("occupancy")
    text = "at least 2 blocks per SM or a stated reason"
    if occ is None:
        items.append(Item("two_blocks", text, NA, "registers unknown (not compiled)"))
    elif occ["active_blocks"] >= 2:
        items.append(
            Item("two_blocks", text, PASS, f"{occ['active_blocks']} blocks/SM ({occ['limiter']}-limited)")
        )
    else:
        why = fam.one_block_reason(cfg, occ)
        items.append(
            Item(
                "two_blocks",
                text,
                PASS if why else FAIL,
                why or f"{occ['active_blocks']} block/SM, limited by {occ['limiter']}",
            )
        )
    return items
