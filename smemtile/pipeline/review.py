"""Parts of ``analyze`` that read the spec as a kernel would run it: the cp.async stage loop (part 5) and the
review checklist of a spec that has no generated kernel (a kernel spec's checklist is the family's, evaluated
on the compiled kernel by ``smemtile.codegen.checklist``). Same item ids and texts as that checklist; an item
the spec cannot answer (it has addresses, not code) says ``n/a`` and why, never ``pass``.

The stage loop (``STAGES`` copies of the tile in a ring; cp.async groups complete in commit order)::

    prologue   for s in 0 .. STAGES-2: copy tile s into slot s; commit          -> STAGES-1 groups in flight
    loop t     wait_group(STAGES-2)       tile t has landed (at most STAGES-2 newer groups still pending)
               __syncthreads()            every thread's copies are visible, and every warp is done with
                                          slot (t-1) % STAGES, the one refilled next
               copy tile t+STAGES-1 into slot (t+STAGES-1) % STAGES; commit (an empty group past the end keeps
                                          the count: wait_group counts groups, not tiles)
               compute on slot t % STAGES
    drain      wait_group(0)

One barrier per iteration suffices with two or more stages; a single stage needs a second barrier before the
next copy overwrites the tile that is being read.
"""

from __future__ import annotations

from smemtile.families.base import FAIL, NA, PASS, Item
from smemtile.model.analysis import AccessResult
from smemtile.model.layout import Layout
from smemtile.model.spec import KernelSpec

TEXT = {
    "bank_index": "bank index derived for every shared-memory access of the inner loop",
    "pad_dimension": "padding on the dimension that caused the conflict",
    "padded_stride": "every index computation uses the padded stride",
    "commit_group": "cp.async.commit_group after all copies of a tile",
    "wait_group": "cp.async.wait_group(N) with the right N for the stage count",
    "barrier_after_wait": "a barrier after the wait and before reading the newly filled buffer",
    "ring_index": "the ring-buffer index advances every iteration",
    "func_set_attribute": "cudaFuncSetAttribute for more than 48 KB of dynamic shared memory",
    "smem_total": "total shared memory per block (padding and stages included) within the allocation",
    "ncu": "conflicts confirmed by ncu",
    "two_blocks": "at least 2 blocks per SM or a stated reason",
}


def stage_count(spec: KernelSpec) -> int:
    """The ring depth: the deepest buffer (``stages:`` or a 3-D shape), else the spec's ``stages``."""
    return max([b.stage_count for b in spec.buffers] + [spec.stages])


def pipeline_part(
    spec: KernelSpec, results: tuple[AccessResult, ...], layouts: dict[str, Layout], blocks_for_smem
) -> dict | None:
    """Part 5 for specs with stages or cp.async (None otherwise). ``blocks_for_smem(bytes) -> (blocks, limiter)``
    is the occupancy of the spec's block with that much shared memory (the caller knows threads and registers)."""
    copies = [r for r in results if r.access.op == "cp.async"]
    stages = stage_count(spec)
    if not copies and stages == 1:
        return None
    ring_names = {b.name for b in spec.buffers if b.stage_count > 1} or {r.access.buffer for r in copies}
    ring = [b for b in spec.buffers if b.name in ring_names]
    per_stage = sum(b.bytes(layouts.get(b.name)) // b.stage_count for b in ring)
    other = spec.smem_bytes(layouts) - per_stage * stages
    copy_rows = []
    for r in copies:
        n_warps = max(1, len(set(r.warp.tolist())))
        copy_rows.append(
            {
                "access": r.access.name,
                "buffer": r.access.buffer,
                "width": r.access.width,
                "per_thread": len(r.bank.wavefronts) // n_warps,  # instructions each thread issues per tile
                "bytes": int(r.bank.active.sum()) * r.access.width,  # bytes the analysed warps copy per tile
            }
        )
    by_stages = {}
    for s in sorted({1, 2, stages, stages + 1}):
        blocks, limiter = blocks_for_smem(other + per_stage * s)
        by_stages[s] = {"smem_bytes": other + per_stage * s, "blocks_per_sm": blocks, "limiter": limiter}
    cp = bool(copies)
    wait = max(0, stages - 2)
    d = {
        "stages": stages,
        "cp_async": cp,
        "ring": [
            {
                "buffer": b.name,
                "stage_bytes": b.bytes(layouts.get(b.name)) // b.stage_count,
                "stages": b.stage_count,
            }
            for b in ring
        ],
        "copies": copy_rows,
        "stage_bytes": per_stage,
        "smem_bytes": other + per_stage * stages,
        "extra_bytes_over_one_stage": per_stage * (stages - 1),
        "by_stages": by_stages,
        "commits": {"prologue": max(0, stages - 1), "per_iteration": 1} if cp else None,
        "wait_group": wait if cp else None,
        "barriers_per_iteration": 1 if stages >= 2 else 2,
        "ring_index": {"read": f"t % {stages}", "write": f"(t + {stages - 1}) % {stages}"}
        if stages > 1
        else None,
        "code": stage_loop(stages, [b.name for b in ring], [c["access"] for c in copy_rows], cp),
    }
    return d


def stage_loop(stages: int, buffers: list[str], copies: list[str], cp_async: bool) -> list[str]:
    """The loop to write, with the spec's names (see the module docstring for why each line is there)."""
    ring = ", ".join(buffers) or "the tile"
    fill = ", ".join(copies) or "the copies"
    if not cp_async:
        return [
            f"// {stages} slots of {ring}, filled through registers (no cp.async on this architecture or in the spec)",
            "load_tile_to_registers(0); store_registers_to_slot(0); __syncthreads();",
            "for (int t = 0; t < num_tiles; ++t) {",
            "    if (t + 1 < num_tiles) load_tile_to_registers(t + 1);  // global loads in flight during compute",
            f"    compute(t % {stages});",
            f"    if (t + 1 < num_tiles) store_registers_to_slot((t + 1) % {stages});",
            "    __syncthreads();  // the next slot is complete, and nobody still reads the one refilled after",
            "}",
        ]
    helpers = [
        '__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\\n" ::); }',
        "template <int N> __device__ __forceinline__ void cp_async_wait() {",
        '    asm volatile("cp.async.wait_group %0;\\n" ::"n"(N));',
        "}",
    ]
    if stages == 1:
        return helpers + [
            f"// one slot of {ring}: the copy ({fill}) and the compute cannot overlap",
            "for (int t = 0; t < num_tiles; ++t) {",
            f"    copy_tile(t);          // {fill}",
            "    cp_async_commit();",
            "    cp_async_wait<0>();    // the tile has landed",
            "    __syncthreads();       // every thread's copies are visible",
            "    compute();",
            "    __syncthreads();       // nobody still reads the tile the next copy overwrites",
            "}",
        ]
    return helpers + [
        f"constexpr int STAGES = {stages};  // ring of {ring}",
        "for (int s = 0; s < STAGES - 1; ++s) {  // prologue: STAGES - 1 tiles in flight",
        f"    if (s < num_tiles) copy_tile(s, s);  // {fill} into slot s",
        "    cp_async_commit();                     // one group per tile, even an empty one",
        "}",
        "for (int t = 0; t < num_tiles; ++t) {",
        f"    cp_async_wait<STAGES - 2>();  // wait_group {stages - 2}: tile t has landed",
        "    __syncthreads();              // visible to all; slot (t - 1) % STAGES is free",
        "    int next = t + STAGES - 1;",
        "    if (next < num_tiles) copy_tile(next, next % STAGES);",
        "    cp_async_commit();",
        "    compute(t % STAGES);          // read slot t % STAGES",
        "}",
        "cp_async_wait<0>();  // drain before the ring is reused or the block exits",
    ]


def spec_checklist(
    spec: KernelSpec,
    results,
    fixed_results,
    layouts: dict[str, Layout],
    decl,
    occ: dict | None,
    pipe: dict | None,
    unpadded: dict[str, tuple] | None = None,
) -> list[Item]:
    """The review checklist on a spec (no generated kernel). ``decl`` is the fixed layout's Declarations,
    ``occ`` the fixed variant's occupancy, ``unpadded`` per padded buffer of the spec: (access, degree with the
    spec's padding, degree without it) triples."""
    items: list[Item] = []
    inner = [r for r in results if r.access.role == "inner"]
    counted = inner or list(results)
    why = "; ".join(f"{r.access.name}: {r.wavefronts}/{r.ideal} wavefronts ({r.degree:g}x)" for r in counted)
    scope = "" if inner else " (no access has role: inner, so every access counts)"
    items.append(
        Item(
            "bank_index",
            TEXT["bank_index"],
            PASS if counted else FAIL,
            (why + scope) if counted else "the spec has no access",
        )
    )

    before = {r.access.name: r for r in results}
    reasons, status = [], NA
    for b in spec.buffers:
        lay = layouts.get(b.name, b.layout)
        if not lay.pad:
            continue
        pairs = [(before[r.access.name], r) for r in fixed_results if r.access.buffer == b.name]
        if lay != b.layout:  # the fix pads: it must lower a conflict
            helped = any(w.degree > f.degree for w, f in pairs)
            status = PASS if helped and status != FAIL else FAIL
            reasons.append(
                f"{b.name}: pad {lay.pad} on the row stride: "
                + ", ".join(f"{w.access.name} {w.degree:g}x -> {f.degree:g}x" for w, f in pairs)
            )
    for name, trips in (unpadded or {}).items():  # the spec's own padding: does it remove anything?
        helped = any(without > with_ for _, with_, without in trips)
        status = FAIL if not helped else (PASS if status != FAIL else FAIL)
        reasons.append(
            f"{name}: the spec's padding "
            + ("removes " if helped else "removes no conflict: ")
            + ", ".join(f"{a} {without:g}x -> {with_:g}x" for a, with_, without in trips)
        )
    items.append(Item("pad_dimension", TEXT["pad_dimension"], status, "; ".join(reasons) or "no padding"))

    strides = [
        f"{b.name} {b.cols + layouts.get(b.name, b.layout).pad}" for b in spec.buffers if len(b.shape) > 1
    ]
    items.append(
        Item(
            "padded_stride",
            TEXT["padded_stride"],
            NA,
            "a spec gives addresses, not index code: write the indices as part 3 prints them (row "
            f"strides in elements: {', '.join(strides) or 'none'})",
        )
    )

    if pipe is None or not pipe["cp_async"]:
        why = (
            "no cp.async in the spec"
            if pipe is None or pipe["stages"] == 1
            else "stages without cp.async: copies through registers (part 5)"
        )
        for key in ("commit_group", "wait_group", "barrier_after_wait", "ring_index"):
            items.append(Item(key, TEXT[key], NA, why))
    else:
        s = pipe["stages"]
        code = "a spec has no code to inspect: "
        items += [
            Item(
                "commit_group",
                TEXT["commit_group"],
                NA,
                code + f"commit once per tile ({max(0, s - 1)} in the prologue, 1 per iteration; part 5)",
            ),
            Item(
                "wait_group", TEXT["wait_group"], NA, code + f"{s} stage(s) need wait_group({max(0, s - 2)})"
            ),
            Item(
                "barrier_after_wait",
                TEXT["barrier_after_wait"],
                NA,
                code
                + f"__syncthreads() right after the wait ({pipe['barriers_per_iteration']} per iteration)",
            ),
            Item(
                "ring_index",
                TEXT["ring_index"],
                NA,
                code
                + (
                    f"read slot {pipe['ring_index']['read']}, write slot {pipe['ring_index']['write']}"
                    if pipe["ring_index"]
                    else "one slot: no ring"
                ),
            ),
        ]

    if decl.dynamic:
        items.append(
            Item(
                "func_set_attribute",
                TEXT["func_set_attribute"],
                PASS,
                f"{decl.total_bytes} bytes: part 3 declares them extern __shared__ and raises "
                "cudaFuncAttributeMaxDynamicSharedMemorySize before the launch",
            )
        )
    else:
        items.append(
            Item(
                "func_set_attribute",
                TEXT["func_set_attribute"],
                NA,
                f"{decl.total_bytes} bytes: within the {decl.static_limit}-byte static limit",
            )
        )

    limit = spec.arch.smem_optin_per_block
    stages = max([b.stage_count for b in spec.buffers] + [1])
    items.append(
        Item(
            "smem_total",
            TEXT["smem_total"],
            PASS if decl.fits else FAIL,
            f"{decl.total_bytes} bytes ({stages} stage(s), padding included), {spec.arch.name} opt-in "
            f"limit {limit}",
        )
    )
    items.append(
        Item(
            "ncu",
            TEXT["ncu"],
            NA,
            "not measured here: `smemtile verify --ncu SPEC` runs every access on the GPU",
        )
    )
    if occ is None:
        items.append(Item("two_blocks", TEXT["two_blocks"], NA, "no occupancy (see part 6)"))
    else:
        ok = occ["active_blocks"] >= 2
        note = (
            f"; registers {occ['regs_source']}"
            if not str(occ.get("regs_source", "")).startswith("given")
            else ""
        )
        items.append(
            Item(
                "two_blocks",
                TEXT["two_blocks"],
                PASS if ok else FAIL,
                f"{occ['active_blocks']} block(s)/SM, limited by {occ['limiter']}{note}",
            )
        )
    return items
