"""Compare shared-memory wavefronts per SASS instruction, measured by Nsight Compute, with the bank model.

Each LDS / STS / LDSM / LDGSTS (with its width) is matched to the family's accesses (its spec, the ones
``analyze`` prints) of the same op and width; where several accesses share an op and width the group's sums are
compared. Pure Python and numpy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from smemtile.gpu.ncu_parse import REL_TOL, SassRow, classify


def repeats_per_block(cfg) -> int:
    """How often each access runs per block (the family says: e.g. once per K tile)."""
    from smemtile.families import FAMILIES

    return FAMILIES[cfg.family].repeats_per_block(cfg)


# ---- SASS -> (op, width) ------------------------------------------------------------------------------------


@dataclass
class ModelAccess:
    name: str
    op: str
    width: int
    instructions: int  # per block and repetition, warp instructions with an active lane
    wavefronts: int  # their sum
    ideal: int
    ncu_ideal: int  # what ncu subtracts for its conflict count (cp.async: 1 per 128 bytes)
    # mean wavefronts of each unrolled instruction of the kernel source (first axis of the contract arrays)
    slot_means: list[float]
    repeats: float = 1.0  # how often one block runs it (the family's repeats_per_block, or access_repeats)

    @property
    def mean(self) -> float:
        return self.wavefronts / self.instructions if self.instructions else 0.0

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["mean"] = self.mean
        return d


def model_accesses(cfg) -> list[ModelAccess]:
    """The family's accesses for ``cfg``, analysed: per access the instructions one block issues per
    repetition, their wavefronts, the mean per unrolled instruction of the source (one loop-variable
    combination, averaged over warps), and how many repetitions a block runs."""
    from smemtile.codegen.analysis import access_results
    from smemtile.families import FAMILIES

    reps, own = repeats_per_block(cfg), FAMILIES[cfg.family].access_repeats(cfg)
    out = []
    for r in access_results(cfg):
        b = r.bank
        w, ideal = b.wavefronts.astype(np.int64), b.ideal_wavefronts.astype(np.int64)
        if r.access.op == "cp.async":
            lanes = b.active.sum(axis=1)
            ncu_ideal = np.maximum(1, -(-lanes * r.access.width // 128))
        else:
            ncu_ideal = ideal
        slots: dict[tuple, list[int]] = {}
        for i, loop in enumerate(r.loop_values):
            slots.setdefault(tuple(sorted(loop.items())), []).append(i)
        means = sorted({round(float(w[ix].sum()) / len(ix), 6) for ix in slots.values()})
        out.append(
            ModelAccess(
                r.access.name,
                r.access.op,
                r.access.width,
                int(len(w)),
                int(w.sum()),
                int(ideal.sum()),
                int(ncu_ideal.sum()),
                means,
                float(own.get(r.access.name, reps)),
            )
        )
    return out


# ---- comparison ---------------------------------------------------------------------------------------------


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return False
    return bool(abs(a - b) <= REL_TOL * max(1.0, abs(b)))


def _fmt_num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def compare(cfg, rows: list[SassRow], metrics: dict[str, float]) -> dict:
    """Measured vs model, per SASS instruction, per (op, width) group and for the whole kernel."""
    from smemtile.families import FAMILIES

    fam = FAMILIES[cfg.family]
    launch = fam.launch(cfg)
    blocks = int(np.prod(launch.grid))
    model = model_accesses(cfg)

    # Shared-memory SASS instructions that ran. ptxas places `@!PT LDS RZ, [RZ]` next to LDGSTS: issued (so
    # counted by smsp__inst_executed_op_shared_ld) but with no thread predicated on and no wavefront.
    sass = []
    other = []
    placeholders: dict[str, float] = {}
    for r in rows:
        c = classify(r.source)
        if c is None:
            if (r.wavefronts or 0) > 0:
                other.append(r)
            continue
        if r.executed <= 0:
            continue
        if r.predicated_on_threads == 0 or re.match(r"^\{?\s*@!PT\b", r.source):
            placeholders[c.op] = placeholders.get(c.op, 0.0) + r.executed
            continue
        sass.append((r, c))

    keys = sorted({(c.op, c.width) for _, c in sass} | {(m.op, m.width) for m in model})
    groups = []
    instructions = []
    all_match = True
    for op, width in keys:
        accs = [m for m in model if (m.op, m.width) == (op, width)]
        members = [(r, c) for r, c in sass if (c.op, c.width) == (op, width)]
        invisible = bool(members) and all(c.bypass for _, c in members)
        # LDGSTS whose shared wavefronts the source counters do not attribute to the instruction
        unattributed = (
            op == "cp.async"
            and not invisible
            and bool(members)
            and all(not r.wavefronts for r, _ in members)
            and any(m.wavefronts for m in accs)
        )
        exec_meas = sum(r.executed for r, _ in members)
        wf_meas = sum(r.wavefronts or 0.0 for r, _ in members)
        ideal_meas = (
            sum(r.ideal or 0.0 for r, _ in members) if all(r.ideal is not None for r, _ in members) else None
        )
        exec_model = sum(m.instructions * m.repeats for m in accs) * blocks
        wf_model = sum(m.wavefronts * m.repeats for m in accs) * blocks
        ncu_ideal_model = sum(m.ncu_ideal * m.repeats for m in accs) * blocks
        mapping = "exact" if len(accs) == 1 else ("ambiguous" if accs else "unmapped")
        if not members:
            mapping = "not in SASS"
        g = {
            "op": op,
            "width": width,
            "opcodes": sorted({c.opcode for _, c in members}),
            "accesses": [m.name for m in accs],
            "mapping": mapping,
            "sass_instructions": len(members),
            "executed": {"measured": exec_meas, "model": exec_model},
            "wavefronts": {"measured": wf_meas, "model": wf_model},
            "wavefronts_per_instruction": {
                "measured": _ratio(wf_meas, exec_meas),
                "model": _ratio(wf_model, exec_model),
            },
            "conflicts_per_instruction": {
                "measured": _ratio(wf_meas - ideal_meas, exec_meas) if ideal_meas is not None else None,
                "model": _ratio(wf_model - ncu_ideal_model, exec_model),
            },
        }
        if invisible:
            g["note"] = (
                "cp.async.cg (LDGSTS ...BYPASS) shared-memory writes: the hardware wavefront counters count none "
                "of them (bench/ncu_bank_catalogue.py), so the source view's number is not a measurement: "
                "not compared"
            )
        elif unattributed:
            g["note"] = (
                "ncu's source counters attribute no shared wavefronts to these LDGSTS: compared through the "
                "kernel cp.async total (hardware counters) only"
            )
        elif mapping == "ambiguous":
            g["note"] = (
                f"{len(accs)} accesses ({', '.join(m.name for m in accs)}) share op {op} and width {width} B, so "
                "SASS instructions cannot be told apart: the sums over the group are compared"
                + (
                    f", and each instruction with the {_fmt_num(accs[0].slot_means[0])} wf/inst they all predict"
                    if len({v for m in accs for v in m.slot_means}) == 1
                    else ""
                )
            )
        elif mapping == "unmapped":
            g["note"] = "shared-memory instructions that no contract access describes"
        elif mapping == "not in SASS":
            g["note"] = "the contract lists this access but no executed SASS instruction has its op and width"
        g["invisible"] = invisible
        g["comparable"] = not (invisible or unattributed)
        g["match"] = None
        if g["comparable"]:
            g["match"] = bool(
                members and accs and _close(exec_meas, exec_model) and _close(wf_meas, wf_model)
            )
            all_match &= g["match"]
        groups.append(g)

        # Per instruction.
        for r, c in members:
            per = _ratio(r.wavefronts, r.executed)
            conf = _ratio(
                (r.wavefronts - r.ideal) if r.wavefronts is not None and r.ideal is not None else None,
                r.executed,
            )
            row = {
                "address": r.address,
                "offset": r.offset,
                "sass": r.source,
                "opcode": c.opcode,
                "op": op,
                "width": width,
                "executed": r.executed,
                "wavefronts": r.wavefronts,
                "wavefronts_per_instruction": per,
                "conflicts_per_instruction": conf,
                "n_way": r.n_way,
                "access_size_bits": r.access_size_bits,
                "access": None,
                "model_wavefronts_per_instruction": None,
                "model_conflicts_per_instruction": None,
                "match": None,
            }
            if mapping == "exact" and g["comparable"]:
                m = accs[0]
                cands = sorted(set(m.slot_means) | {round(m.mean, 6)})
                hit = next((v for v in cands if _close(per, v)), None)
                row["access"] = m.name
                row["model_wavefronts_per_instruction"] = hit if hit is not None else m.mean
                row["model_conflicts_per_instruction"] = (m.wavefronts - m.ncu_ideal) / m.instructions
                if len(cands) > 1:
                    row["model_values"] = cands
                row["match"] = hit is not None
                all_match &= row["match"]
            elif mapping == "ambiguous":
                row["access"] = " | ".join(m.name for m in accs)
                values = sorted({v for m in accs for v in m.slot_means})
                row["model_values"] = values
                if len(values) == 1 and g["comparable"]:
                    # every candidate access predicts the same number: each instruction is checked against it
                    row["model_wavefronts_per_instruction"] = values[0]
                    row["model_conflicts_per_instruction"] = sum(
                        m.wavefronts - m.ncu_ideal for m in accs
                    ) / sum(m.instructions for m in accs)
                    row["match"] = _close(per, values[0])
                    all_match &= row["match"]
            elif not g["comparable"]:
                row["access"] = accs[0].name if len(accs) == 1 else " | ".join(m.name for m in accs)
                row["model_wavefronts_per_instruction"] = _ratio(wf_model, exec_model)
            instructions.append(row)

    instructions.sort(key=lambda r: r["offset"] or r["address"])
    comparable = [g for g in groups if g["comparable"]]
    per_block = {
        "measured": sum(g["wavefronts"]["measured"] for g in comparable) / blocks,
        "model": sum(g["wavefronts"]["model"] for g in comparable) / blocks,
        "what": "shared-memory wavefronts per block, summed over the comparable instructions",
    }
    totals = _totals(model, groups, metrics, blocks, placeholders, sass)
    for t in totals.values():
        if t.get("match") is not None:
            all_match &= t["match"]
    return {
        "problem": dict(cfg.problem),
        "blocks": blocks,
        "repeats_per_block": repeats_per_block(cfg),
        "model": [m.to_dict() for m in model],
        "instructions": instructions,
        "groups": groups,
        "totals": totals,
        "wavefronts_per_block": per_block,
        "other_shared_wavefronts": [r.to_dict() for r in other],
        "placeholders": placeholders,
        "metrics": metrics,
        "match": bool(all_match),
    }


def _totals(
    model: list[ModelAccess],
    groups: list[dict],
    met: dict[str, float],
    blocks: int,
    placeholders: dict[str, float],
    sass: list,
) -> dict:
    """Kernel-level hardware counters vs the model, per direction. Instructions issued with no thread predicated
    on (ptxas placeholders) are taken out of the measured instruction counts.

    With 16-byte cp.async.cg copies in the kernel, the store counter holds a few wavefronts that no SASS
    instruction of the source view accounts for (H200: 54-98 per small SIMT GEMM launch, none in kernels without
    them); those are reported as unattributed and the comparison uses the attributed ones."""
    bypass = any(c.op == "cp.async" and c.bypass for _, c in sass)

    def model_sum(ops, invisible_ok=False):
        wf = inst = conf = 0
        for m in model:
            if m.op not in ops:
                continue
            g = next((g for g in groups if (g["op"], g["width"]) == (m.op, m.width)), None)
            if g is not None and g["invisible"] and not invisible_ok:
                continue  # not counted by the hardware
            wf += m.wavefronts * m.repeats * blocks
            inst += m.instructions * m.repeats * blocks
            conf += (m.wavefronts - m.ncu_ideal) * m.repeats * blocks
        return wf, inst, conf

    W = "l1tex__data_pipe_lsu_wavefronts_mem_shared"
    C = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared"
    out = {}
    ld_inst = st_inst = None
    if "smsp__inst_executed_op_shared_ld.sum" in met:
        ld_inst = met["smsp__inst_executed_op_shared_ld.sum"] + met.get(
            "smsp__inst_executed_op_ldsm.sum", 0.0
        )
        ld_inst -= placeholders.get("load", 0.0) + placeholders.get("ldmatrix", 0.0)
    if "smsp__inst_executed_op_shared_st.sum" in met:
        st_inst = met["smsp__inst_executed_op_shared_st.sum"] - placeholders.get("store", 0.0)
    rows = [
        ("load", ("load", "ldmatrix"), met.get(f"{W}_op_ld.sum"), ld_inst, met.get(f"{C}_op_ld.sum")),
        ("store", ("store",), met.get(f"{W}_op_st.sum"), st_inst, met.get(f"{C}_op_st.sum")),
    ]
    tot = met.get(f"{W}.sum")
    if tot is not None and "smsp__inst_executed_op_ldgsts.sum" in met:
        # No per-op wavefront counter for LDGSTS: all shared wavefronts minus loads, stores and misc (barriers,
        # cp.async waits); the .cg 16-byte path is not counted at all, so its instructions are left out too.
        cp_wf = tot - sum(met.get(f"{W}_op_{k}.sum", 0.0) for k in ("ld", "st", "misc"))
        cp_inst = met["smsp__inst_executed_op_ldgsts.sum"] - met.get(
            "smsp__sass_inst_executed_op_ldgsts_cache_bypass.sum", 0.0
        )
        cp_inst -= placeholders.get("cp.async", 0.0)
        rows.append(("cp.async", ("cp.async",), cp_wf, cp_inst, met.get(f"{C}_op_ldgsts.sum")))
    for name, ops, wf, inst, conf in rows:
        mwf, minst, mconf = model_sum(ops)
        if not inst and not minst:
            continue  # neither the kernel nor the model has this kind of access
        t = {
            "instructions": {"measured": inst, "model": minst},
            "wavefronts": {"measured": wf, "model": mwf},
            "wavefronts_per_instruction": {"measured": _ratio(wf, inst), "model": _ratio(mwf, minst)},
            "conflicts_per_instruction": {"measured": _ratio(conf, inst), "model": _ratio(mconf, minst)},
        }
        if inst is None or wf is None:
            t["match"] = None
        elif name == "cp.async":
            # derived by subtraction, with a remainder the catalogue microkernels do not show: informational
            t["match"] = None
            t["note"] = (
                "derived (all shared wavefronts minus load, store and misc ones; .cg 16-byte copies left out): "
                "shown for reference, not used for the verdict"
            )
        else:
            t["match"] = _close(inst, minst) and _close(wf, mwf)
            attributed = sum(r.wavefronts or 0.0 for r, c in sass if c.op in ops)
            extra = wf - attributed
            if sass and bypass and extra > 0 and not t["match"]:
                t["unattributed_wavefronts"] = extra
                t["match"] = _close(inst, minst) and _close(attributed, mwf)
                t["note"] = (
                    f"{extra:.0f} wavefronts of this counter belong to no SASS instruction in the source view (seen "
                    "only with cp.async.cg copies in the kernel); compared without them"
                )
        if placeholders.get(name) or (name == "load" and placeholders.get("ldmatrix")):
            t["placeholders_left_out"] = placeholders.get(name, 0.0) + (
                placeholders.get("ldmatrix", 0.0) if name == "load" else 0.0
            )
        out[name] = t
    return out


# ---- running ncu --------------------------------------------------------------------------------------------
