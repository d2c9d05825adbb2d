"""``smemtile analyze``: the seven parts of the answer for one resolved spec, then the review checklist.

    1. bank analysis       model.analysis on every instruction; the calculation (phases, the busiest bank)
    2. fix + verification  model.fix through pipeline.fixes (a kernel spec: what the kernel issues under each
                           layout), each option's cost (bytes, blocks per SM) beside its gain, and a warning for
                           an access the fix makes worse or an occupancy the fix costs
    3. declarations        report.layout: static up to the 48 KiB limit, extern + cudaFuncSetAttribute above;
                           bank diagrams
    4. tile sizes          the tile model for the spec's problem (kernel: or problem:), the real registers of a
                           kernel spec (NVRTC, pipeline.build), blocks per SM against registers for this block
    5. double buffering    pipeline.review.pipeline_part: the cp.async stage loop and what its stages cost
    6. occupancy           model.occupancy, baseline and fixed (fewer than 2 blocks per SM is warned)
    7. before/after        wavefronts per access, bytes, blocks per SM, the declarations' diff
    checklist              the family's on the compiled kernel (kernel specs), else pipeline.review's on the spec

Registers: ``--regs`` when given, else ptxas' count for a kernel spec (NVRTC), else the spec's ``regs:``, else
64 stated as an assumption. Threads: the spec's, a kernel's launch, or one warp stated as a default.
"""

from __future__ import annotations

import numpy as np

from smemtile.errors import SmemtileError
from smemtile.families import FAMILIES
from smemtile.model.analysis import AccessResult, analyze_spec
from smemtile.model.fix import FixReport
from smemtile.model.layout import Layout
from smemtile.model.occupancy import occupancy, occupancy_batch
from smemtile.model.spec import DEFAULT_THREADS, KernelSpec
from smemtile.model.tma import check as check_tma
from smemtile.pipeline import review
from smemtile.pipeline.disk_memo import remembered
from smemtile.pipeline.fixes import fix_report, variants
from smemtile.pipeline.specs import Resolved
from smemtile.report.analyze import AnalyzeReport
from smemtile.report.layout import declarations

ASSUMED_REGS = 64
COSTLY_GROWTH = 0.25  # a fix that grows its buffer by this much or more is weighed in a warning


def analyze(res: Resolved, regs: int | None = None, *, compile: bool = True) -> AnalyzeReport:
    """The analyze report; for a kernel spec the fixed variant is the one ``generate`` builds and its registers
    come from compiling it (``compile=False``: no NVRTC). A TMA tile that breaks a hardware rule fails first
    (exit 1, smemtile.model.tma)."""
    check_tma(res.spec)
    spec = res.spec
    fixes = fix_report(res)
    results = fixes.results
    built: dict = {}
    launch: dict = {}
    if res.config is None:
        fixed_results = relaid(spec, results, fixes.layouts)
    else:
        v = variants(res, fixes)
        fam = FAMILIES[v["fixed"].family]
        fixed_results = analyze_spec(fam.spec(v["fixed"]))
        built = _build(v, compile)
        launch = {k: fam.launch(c) for k, c in v.items()}
    facts = {
        name: _facts(spec, name, fixes, regs, built.get(name), launch.get(name))
        for name in ("baseline", "fixed")
    }
    occ = {name: _occupancy(spec, f) for name, f in facts.items()}
    decl = {
        "baseline": declarations(spec.buffers, {}, spec.arch),
        "fixed": declarations(spec.buffers, fixes.layouts, spec.arch),
    }
    base = facts["baseline"]

    seen: dict[int, tuple[int, str]] = {}

    def blocks_for_smem(smem: int) -> tuple[int, str]:
        if smem not in seen:
            o = occupancy(spec.arch, base["threads"], base["regs"], *_split(spec, smem))
            seen[smem] = (o.active_blocks, o.limiter)
        return seen[smem]

    costs = fix_costs(spec, fixes, results, fixed_results, blocks_for_smem)
    tiles = tiles_part(res, facts, built)
    pipe = review.pipeline_part(spec, fixed_results, fixes.layouts, blocks_for_smem)
    if res.config is not None and pipe is not None and built.get("fixed") is not None:
        pipe["checked"] = [
            i.to_dict()
            for i in built["fixed"].checklist
            if i.id in ("commit_group", "wait_group", "barrier_after_wait", "ring_index")
        ]
    if built.get("fixed") is not None:
        checklist = list(built["fixed"].checklist)
    else:
        checklist = review.spec_checklist(
            spec,
            results,
            fixed_results,
            fixes.layouts,
            decl["fixed"],
            occ["fixed"],
            pipe,
            _unpadded(spec, results),
        )
    comparison = compare(spec, results, fixed_results, decl, occ)
    return AnalyzeReport(
        spec,
        results,
        fixes,
        fixed_results,
        occ,
        costs=costs,
        declarations=decl,
        tiles=tiles,
        pipeline=pipe,
        comparison=comparison,
        checklist=tuple(checklist),
    )


def relaid(spec: KernelSpec, results: tuple[AccessResult, ...], layouts: dict[str, Layout]):
    """The spec's accesses under ``layouts``: buffers whose layout is unchanged keep their results."""
    changed = {b.name for b in spec.buffers if layouts.get(b.name, b.layout) != b.layout}
    if not changed:
        return results
    redo = {r.access.name: r for r in analyze_spec(_only(spec, changed), layouts)}
    return tuple(redo.get(r.access.name, r) for r in results)


def _only(spec: KernelSpec, buffers: set[str]) -> KernelSpec:
    from dataclasses import replace

    return replace(spec, accesses=tuple(a for a in spec.accesses if a.buffer in buffers))


def _build(v: dict, compile: bool) -> dict:
    """pipeline.build of both variants (NVRTC, disk-cached); a variant that cannot compile here is None."""
    from smemtile.pipeline.build import build

    out = {}
    for name in ("baseline", "fixed"):
        if name == "fixed" and v["fixed"] == v["baseline"] and "baseline" in out:
            out[name] = out["baseline"]
            continue
        try:
            out[name] = build(v[name], baseline=v["baseline"] if name == "fixed" else None, compile=compile)
        except SmemtileError as e:  # e.g. ptxas refuses it: the analysis stands, the registers are unknown
            out[name] = None
            out[f"{name}_error"] = str(e).splitlines()[0]
    return out


def _split(spec: KernelSpec, smem: int) -> tuple[int, int]:
    """(static, dynamic): static up to the architecture's static limit, dynamic (opt-in) above, as part 3 declares."""
    return (smem, 0) if smem <= spec.arch.static_smem_max else (0, smem)


def _facts(spec: KernelSpec, name: str, fixes: FixReport, regs: int | None, built, plan) -> dict:
    """Threads, registers and shared memory of one variant, each with where it comes from."""
    layouts = fixes.layouts if name == "fixed" else {}
    if plan is not None:
        threads, t_src = plan.threads, "the kernel's launch"
        static, dynamic = plan.static_smem_bytes, plan.dynamic_smem_bytes
    else:
        threads = spec.block_threads
        t_src = (
            "given"
            if spec.threads
            else f"default: the spec has no threads:, one warp ({DEFAULT_THREADS}) assumed"
        )
        static, dynamic = _split(spec, spec.smem_bytes(layouts))
    ptxas = (built.kernel.extra or {}).get("ptxas") if built is not None else None
    if regs is not None:
        r, r_src = regs, "given (--regs)"
    elif ptxas and ptxas.get("registers"):
        r, r_src = int(ptxas["registers"]), "from ptxas (NVRTC compile of this variant)"
    elif spec.regs is not None:
        r, r_src = spec.regs, "given (regs: in the spec)"
    else:
        why = f"; not compiled: {built.compile_note}" if built is not None and built.compile_note else ""
        r, r_src = (
            ASSUMED_REGS,
            (
                "assumed: set regs: in the spec or --regs, or read the real value with "
                f"`smemtile verify --compile-only`{why}"
            ),
        )
    return {
        "threads": threads,
        "threads_source": t_src,
        "regs": r,
        "regs_source": r_src,
        "static": static,
        "dynamic": dynamic,
        "ptxas": ptxas,
    }


def _occupancy(spec: KernelSpec, f: dict) -> dict:
    o = occupancy(spec.arch, f["threads"], f["regs"], f["static"], f["dynamic"])
    return {
        "smem_bytes": f["static"] + f["dynamic"],
        **o.to_dict(),
        "threads_source": f["threads_source"],
        "regs_source": f["regs_source"],
    }


def fix_costs(spec: KernelSpec, fixes: FixReport, results, fixed_results, blocks_for_smem) -> list[dict]:
    """Per buffer: every option's gain (wavefronts saved) and cost (bytes, blocks per SM), and warnings."""
    out = []
    base_total = spec.smem_bytes()
    before = {r.access.name: r for r in results}
    after = {r.access.name: r for r in fixed_results}
    for f in fixes.buffers:
        b0, lim0 = blocks_for_smem(base_total)
        options = []
        for label, c in (("baseline", f.baseline), ("padding", f.padding), ("swizzle", f.swizzle)):
            if c is None:
                continue
            smem = spec.smem_bytes({f.buffer.name: c.layout})
            blocks, limiter = blocks_for_smem(smem)
            worse = [k for k, v in c.per_access.items() if v[2] > f.baseline.per_access.get(k, v)[2]]
            options.append(
                {
                    "option": label,
                    "layout": c.layout.describe(),
                    "recommended": c is f.recommended,
                    "extra_bytes": c.extra_bytes,
                    "smem_bytes": smem,
                    "blocks_per_sm": blocks,
                    "limiter": limiter,
                    "wavefronts": c.wavefronts,
                    "ideal": c.ideal,
                    "saved": f.baseline.wavefronts - c.wavefronts,
                    "worse": worse,
                }
            )
        warnings = []
        rec = next(o for o in options if o["recommended"])
        for r in fixed_results:  # what the kernel issues under the fix, access by access
            if r.access.buffer != f.buffer.name or r.access.name not in before:
                continue
            w0, w1 = before[r.access.name], after[r.access.name]
            t0, t1 = int(w0.bank.wavefronts.sum()), int(w1.bank.wavefronts.sum())
            if t1 > t0:
                warnings.append(
                    {
                        "kind": "worse",
                        "text": (
                            f"the fix makes {r.access.name} worse: {w0.degree:g}x -> {w1.degree:g}x "
                            f"({t0} -> {t1} wavefronts over its {len(w1.bank.wavefronts)} instructions)"
                        ),
                    }
                )
        size = f.buffer.bytes(Layout())
        saved = rec["saved"]
        gain = (
            f"saves {saved} of {f.baseline.wavefronts} wavefronts "
            f"({100 * saved / max(1, f.baseline.wavefronts):.0f}%)"
        )
        if rec["blocks_per_sm"] < b0:
            alt = [
                o
                for o in options
                if o is not rec and o["option"] != "baseline" and o["blocks_per_sm"] >= b0 and o["saved"] > 0
            ]
            tail = (
                f"; {alt[0]['layout']} keeps {b0} blocks/SM and saves {alt[0]['saved']}"
                if alt
                else "; keep the layout if the kernel is not bound by shared memory (`smemtile verify --ncu` and "
                "`smemtile tune` measure both)"
            )
            warnings.append(
                {
                    "kind": "occupancy",
                    "text": (
                        f"{rec['layout']} {gain} but costs {rec['extra_bytes']} bytes and drops the block from {b0} to "
                        f"{rec['blocks_per_sm']} blocks/SM (limited by {rec['limiter']}){tail}"
                    ),
                }
            )
        elif rec["extra_bytes"] >= COSTLY_GROWTH * size and rec["extra_bytes"] > 0:
            warnings.append(
                {
                    "kind": "memory",
                    "text": (
                        f"{rec['layout']} {gain} but grows {f.buffer.name} by {100 * rec['extra_bytes'] / size:.0f}% "
                        f"({size} -> {size + rec['extra_bytes']} bytes); blocks/SM stay {rec['blocks_per_sm']} "
                        f"(limited by {rec['limiter']}), so here the memory is spare"
                    ),
                }
            )
        out.append(
            {
                "buffer": f.buffer.name,
                "blocks_before": b0,
                "limiter_before": lim0,
                "options": options,
                "gain": gain if f.needed else "no conflict to remove",
                "warnings": warnings,
            }
        )
    return out


def _unpadded(spec: KernelSpec, results) -> dict[str, list]:
    """For each buffer the spec pads: (access, degree with its padding, degree without) per access."""
    out = {}
    padded = {b.name: b for b in spec.buffers if b.layout.pad and len(b.shape) > 1}
    if not padded:
        return out
    plain = {n: Layout(0, b.layout.swizzle) for n, b in padded.items()}
    without = {r.access.name: r for r in analyze_spec(_only(spec, set(padded)), plain)}
    for name in padded:
        out[name] = [
            (r.access.name, r.degree, without[r.access.name].degree)
            for r in results
            if r.access.buffer == name and r.access.name in without
        ]
    return out


def tiles_part(res: Resolved, facts: dict, built: dict) -> dict:
    """Part 4: the tile model for the spec's problem, and blocks per SM against registers for this block."""
    spec = res.spec
    base = facts["fixed"]
    d: dict = {
        "threads": base["threads"],
        "threads_source": base["threads_source"],
        "regs": base["regs"],
        "regs_source": base["regs_source"],
        "smem_bytes": base["static"] + base["dynamic"],
        "register_budget": register_budget(spec, base),
    }
    if base.get("ptxas"):
        d["ptxas"] = base["ptxas"]
    if res.config is not None:
        cfg = res.config
        fam = FAMILIES[cfg.family]
        d["problem"] = {k: v for k, v in cfg.problem.items()}
        from smemtile.pipeline.tiles import ranker_for

        if fam.tile_model is None:
            d["missing"] = (
                f"the {fam.name} family has no tile model: `smemtile tune SPEC` times its configurations "
                "on a GPU"
            )
            return d
        keys = {k: cfg.params[k] for k in fam.problem_params}  # part of the problem (R)

        def ranking() -> dict:
            try:
                ranker = ranker_for(fam, {**cfg.problem, **keys}, spec.arch.base, None)
            except SmemtileError as e:
                return {"missing": f"the {fam.name} tile model cannot rank this problem: {e}"}
            if ranker is None:
                return {"missing": f"the {fam.name} family has no tile model for this problem"}
            return {
                "unit": "TFLOP/s" if fam.work(cfg.problem)[0] == "tflops" else "GB/s",
                "ranked": [ranker(p, "model").to_dict() for p in ranker.top(3)],
                "this": ranker(dict(cfg.params), "spec").to_dict(),
            }

        # the same problem, tile and package give the same ranking: kept on disk (pipeline.disk_memo)
        question = [fam.name, cfg.key()[1], cfg.key()[4], keys, spec.arch.base]
        d.update(remembered("tiles", question, ranking))
        if "missing" in d:
            return d
        d["command"] = f"smemtile tune {spec.source} --dry-run"
        return d
    if spec.problem:
        from smemtile.pipeline.tiles import command_line, recommend

        p = spec.problem
        try:
            rep = recommend(p["M"], p["N"], p["K"], p["dtype"], spec.arch.base)
        except SmemtileError as e:
            d["missing"] = f"the tile model cannot rank this problem: {e}"
            return d
        d["problem"] = dict(p)
        d["unit"] = "TFLOP/s"
        d["command"] = command_line(rep.problem)
        d["ranked"] = [
            {
                "label": s.cfg.label,
                "model_rank": s.rank,
                "predicted": round(s.tflops, 2),
                "model_reason": s.reason,
                "blocks_per_sm": s.blocks_per_sm,
                "regs": s.regs,
                "smem_bytes": s.smem_bytes,
                "threads": s.threads,
            }
            for s in rep.ranked[:3]
        ]
        t = spec.tile or spec.constants
        mine = [
            s for s in rep.ranked if (s.cfg.bm, s.cfg.bn, s.cfg.bk) == (t.get("BM"), t.get("BN"), t.get("BK"))
        ]
        if mine:
            s = mine[0]
            d["this"] = {
                "label": s.cfg.label,
                "model_rank": s.rank,
                "predicted": round(s.tflops, 2),
                "model_reason": s.reason,
            }
        else:
            d["this"] = {
                "label": "BM x BN x BK = " + " x ".join(str(t.get(k, "?")) for k in ("BM", "BN", "BK")),
                "model_rank": None,
                "predicted": None,
                "model_reason": "not among the ranked tiles (give tile: {BM, BN, BK} to place it)",
            }
        d["ranked_total"] = len(rep.ranked)
        return d
    d["missing"] = (
        "no problem size: add problem: {M: .., N: .., K: .., dtype: ..} (a GEMM) or kernel: {family: "
        "..} to rank tile shapes for it (`smemtile tiles M N K` ranks GEMM tiles)"
    )
    return d


def register_budget(spec: KernelSpec, f: dict) -> list[dict]:
    """Blocks per SM for every register count 1..255 with this block's threads and shared memory, as ranges."""
    regs = np.arange(1, spec.arch.max_regs_per_thread + 1)
    b = occupancy_batch(spec.arch, f["threads"], regs, f["static"], f["dynamic"])
    blocks = b.active_blocks.tolist()
    out: list[dict] = []
    for r, n in zip(regs.tolist(), blocks, strict=True):
        if out and out[-1]["blocks_per_sm"] == n:
            out[-1]["regs_to"] = r
        else:
            out.append({"regs_from": r, "regs_to": r, "blocks_per_sm": n})
    return out


def compare(spec: KernelSpec, results, fixed_results, decl: dict, occ: dict) -> dict:
    """Part 7: per access before -> after (worst and total wavefronts), bytes and blocks per SM."""
    after = {r.access.name: r for r in fixed_results}
    rows = []
    for r in results:
        a = after.get(r.access.name)
        if a is None:
            continue
        rows.append(
            {
                "access": r.access.name,
                "buffer": r.access.buffer,
                "before": {
                    "wavefronts": r.wavefronts,
                    "ideal": r.ideal,
                    "degree": round(r.degree, 4),
                    "total": int(r.bank.wavefronts.sum()),
                },
                "after": {
                    "wavefronts": a.wavefronts,
                    "ideal": a.ideal,
                    "degree": round(a.degree, 4),
                    "total": int(a.bank.wavefronts.sum()),
                },
            }
        )
    tb = sum(x["before"]["total"] for x in rows)
    ta = sum(x["after"]["total"] for x in rows)
    return {
        "accesses": rows,
        "total_wavefronts": {"before": tb, "after": ta},
        "ideal_wavefronts": int(sum(int(r.bank.ideal_wavefronts.sum()) for r in results)),
        "smem_bytes": {"before": decl["baseline"].total_bytes, "after": decl["fixed"].total_bytes},
        "blocks_per_sm": {"before": occ["baseline"]["active_blocks"], "after": occ["fixed"]["active_blocks"]},
        "occupancy": {"before": occ["baseline"]["occupancy"], "after": occ["fixed"]["occupancy"]},
    }
