"""The answer first: the one verdict table ``analyze`` opens with, and its ``summary`` JSON key.

    per access   op, worst / ideal wavefronts, the conflict degree, the recommended fix of its buffer and that
                 fix's cost (extra bytes, blocks per SM before -> after), the worst wavefronts after the fix
    saving       wavefronts per block (every warp, every loop value) before -> after, and the ideal
    occupancy    blocks per SM, warps, occupancy and the limiter of the fixed block
    bank strips  conflicted accesses only: the bank each lane of the worst instruction hits, 16 lanes a line,
                 the lanes of the busiest bank marked

Everything is read from the report's own parts (``comparison``, ``fix_costs``, ``occupancy``): the summary
cannot disagree with the seven parts it stands in front of.
"""

from __future__ import annotations

import numpy as np
from rich.console import Console
from rich.rule import Rule
from rich.text import Text

from smemtile.model.analysis import AccessResult
from smemtile.report.banks import Grid, instruction_detail, lane_rows
from smemtile.report.text import plain, printable


def _degree(deg: float) -> str:
    if deg <= 1:
        return "none"
    return f"{deg:g}-way" if float(deg).is_integer() else f"{deg:.2f}x"


def op_text(ar: AccessResult) -> str:
    a = ar.access
    if a.op in ("ldmatrix", "stmatrix"):
        return f"{a.op} x{a.matrices}{'.trans' if a.trans else ''}"
    return f"{a.op} {a.width} B"


def summary_to_dict(rep) -> dict:
    """The verdict as data: one row per access, the saving, the occupancy line (``analyze --json``'s
    ``summary``)."""
    costs = {c["buffer"]: c for c in rep.costs}
    fixes = {f.buffer.name: f for f in rep.fixes.buffers}
    after = {a["access"]: a["after"] for a in rep.comparison["accesses"]}
    rows = []
    for r in rep.results:
        a = r.access
        f = fixes.get(a.buffer)
        row = {
            "access": a.name,
            "buffer": a.buffer,
            "op": op_text(r),
            "wavefronts": r.wavefronts,
            "ideal_wavefronts": r.ideal,
            "conflict_degree": round(r.degree, 4),
            "worst_instruction": r.label(r.worst),
            "fix": None,
            "fix_extra_bytes": 0,
            "blocks_per_sm": None,
            "after": after.get(a.name),
        }
        if f is None:
            row["fix_reason"] = "raw byte addresses: no layout to change"
        elif not f.needed:
            row["fix_reason"] = "the buffer has no conflict"
        else:
            rec = next(o for o in costs[a.buffer]["options"] if o["recommended"])
            row.update(
                fix=f.recommended.layout.describe(),
                fix_extra_bytes=rec["extra_bytes"],
                blocks_per_sm={"before": costs[a.buffer]["blocks_before"], "after": rec["blocks_per_sm"]},
            )
        rows.append(row)
    c = rep.comparison
    tw = c["total_wavefronts"]
    o = rep.occupancy["fixed"]
    b = rep.occupancy["baseline"]
    conflicted = [r for r in rep.results if not r.conflict_free]
    return {
        "accesses": rows,
        "conflicted": [r.access.name for r in conflicted],
        "total_wavefronts": {"before": tw["before"], "after": tw["after"], "ideal": c["ideal_wavefronts"]},
        "saved_fraction": round((tw["before"] - tw["after"]) / max(1, tw["before"]), 4),
        "shared_memory_bytes": dict(c["smem_bytes"]),
        "blocks_per_sm": dict(c["blocks_per_sm"]),
        "occupancy": {
            "active_blocks": o["active_blocks"],
            "active_warps": o["active_warps"],
            "occupancy": o["occupancy"],
            "limiter": o["limiter"],
            "regs": o["regs"],
            "regs_source": o["regs_source"],
        },
        "launches": b["active_blocks"] > 0 and o["active_blocks"] > 0,
        "bank_strips": [strip_to_dict(r) for r in conflicted],
    }


def strip_to_dict(ar: AccessResult) -> dict:
    """The worst instruction of ``ar``: the first bank each lane hits (None: inactive) and the busiest bank."""
    i = ar.worst
    lanes = lane_rows(ar, i)
    per_bank = np.zeros(32, dtype=np.int64)
    for ph in instruction_detail(ar, i):
        per_bank = np.maximum(per_bank, np.asarray(ph.words_per_bank))
    hot = int(per_bank.argmax())
    return {
        "access": ar.access.name,
        "instruction": ar.label(i),
        "wavefronts": int(ar.bank.wavefronts[i]),
        "ideal_wavefronts": int(ar.bank.ideal_wavefronts[i]),
        "banks": [r["banks"][0] if r["active"] else None for r in lanes],
        "busiest_bank": hot,
        "busiest_bank_words": int(per_bank[hot]),
        "hot_lanes": [r["lane"] for r in lanes if r["active"] and hot in r["banks"]],
    }


def bank_strip(ar: AccessResult) -> list[Text]:
    """Two lines of 16 lanes: the (first) bank each lane of the worst instruction hits; the lanes of the busiest
    bank in red. A title line says which instruction and what the busiest bank delivers."""
    s = strip_to_dict(ar)
    words = s["busiest_bank_words"]
    out = [
        plain(
            f"{ar.access.name} @ {s['instruction']}: {s['wavefronts']}/{s['ideal_wavefronts']} wavefronts; "
            f"bank {s['busiest_bank']}: {words} distinct word{'s' if words != 1 else ''} (red)",
            style="bold",
        )
    ]
    hot = set(s["hot_lanes"]) if words > 1 else set()
    for start in (0, 16):
        t = Text(f"  lanes {start:2d}-{start + 15:2d} -> banks:")
        for lane in range(start, start + 16):
            bank = s["banks"][lane]
            t.append(" ")
            t.append(" ." if bank is None else f"{bank:2d}", style="bold red" if lane in hot else "")
        out.append(t)
    return out


def render_summary(console: Console, rep, lanes_hint: bool = True) -> None:
    """The verdict table, the saving, the occupancy line and the bank strips of the conflicted accesses."""
    s = summary_to_dict(rep)
    console.print(Rule("Summary", align="left"))
    rows, styles = [], []
    for a in s["accesses"]:
        deg = a["conflict_degree"]
        af = a["after"]
        worse = af is not None and af["degree"] > max(1.0, deg)
        if a["fix"] is None or (deg <= 1 and not worse):  # a conflict-free access needs no fix of its own
            fix, extra, blocks = ("raw: edit" if a.get("fix_reason", "").startswith("raw") else "-"), "-", "-"
        else:
            bl = a["blocks_per_sm"]
            fix, extra, blocks = a["fix"], f"+{a['fix_extra_bytes']}", f"{bl['before']}->{bl['after']}"
        changed = af is not None and (af["wavefronts"], af["ideal"]) != (
            a["wavefronts"],
            a["ideal_wavefronts"],
        )
        after = f" -> {af['wavefronts']}/{af['ideal']}" if changed else ""
        rows.append(
            [
                printable(a["access"]),
                a["op"],
                f"{a['wavefronts']}/{a['ideal_wavefronts']}{after}",
                _degree(deg),
                fix,
                extra,
                blocks,
            ]
        )
        bad = "bold red" if deg >= 4 else "bold yellow" if deg > 1 else "green"
        good = "red" if worse else "green" if af and af["degree"] <= 1 else "yellow"
        styles.append(["bold", "", good, bad, "bold" if fix not in ("-", "raw: edit") else "dim", "", ""])
    console.print(
        Grid(None, ["access", "op", "wavefronts", "degree", "fix", "+bytes", "blk/SM"], rows, styles, left=2)
    )
    tw = s["total_wavefronts"]
    sm, bl = s["shared_memory_bytes"], s["blocks_per_sm"]
    saving = Text("Saving: ", style="bold")
    extra = sm["after"] - sm["before"]
    saving.append(
        f"{tw['before']} -> {tw['after']} wavefronts per block ({100 * s['saved_fraction']:.0f}% "
        f"fewer, ideal {tw['ideal']}); {extra:+d} B smem"
    )
    console.print(saving)
    o = s["occupancy"]
    regs = "assumed" if str(o["regs_source"]).startswith("assumed") else "given"
    occ = Text("Occupancy: ", style="bold")
    occ.append(
        f"blocks/SM {bl['before']} -> {bl['after']}, {100 * o['occupancy']:.0f}%, limiter {o['limiter']} "
        f"({o['regs']} regs, {regs})",
        style="bold red" if o["active_blocks"] == 0 else "",
    )
    console.print(occ)
    if not s["launches"]:
        console.print(plain("The block cannot launch: 0 blocks fit on an SM (see part 6).", style="bold red"))
    for r in rep.results:
        if not r.conflict_free:
            for line in bank_strip(r):
                console.print(line)
    if lanes_hint and s["conflicted"]:
        console.print(
            Text("Every lane's address and bank: --lanes; the calculation: part 1 below.", style="dim")
        )
    console.print()
