"""The fix search on a resolved spec: for a kernel spec, judged on what the kernel issues under each layout.

``variants(res)`` gives the ``baseline`` configuration (the spec's layouts) and the ``fixed`` one (the layouts
the fix search recommends, each one the family can build). ``analyze`` and ``generate`` both call it, so they
report the same layouts and wavefronts.
"""

from __future__ import annotations

from dataclasses import replace

from smemtile.families import FAMILIES, KernelConfig, reconfigure
from smemtile.families.base import ContractViolation
from smemtile.model.analysis import analyze_access
from smemtile.model.fix import FixReport, fix_spec, relayout_only
from smemtile.model.layout import Layout
from smemtile.pipeline.specs import Resolved


def fix_report(res: Resolved) -> FixReport:
    """Fixes for every buffer of the resolved spec (a kernel's: only layouts its family can build)."""
    if res.config is None:
        return fix_spec(res.spec)
    cfg = res.config
    fam = FAMILIES[cfg.family]

    def config_with(buffer: str, lay: Layout) -> KernelConfig | None:
        # a layout changes no grid: the launch plan's limits were checked with the spec, only the layout's rules
        # (the family's constraints, the buffers' shapes, shared memory) are checked again
        try:
            c = reconfigure(cfg, layouts={buffer: lay}, check=False)
        except ContractViolation:
            return None
        return None if fam.problems(c) else c

    if fam.layout_dependent_accesses:

        def variant(buffer: str, lay: Layout):
            c = config_with(buffer, lay)
            if c is None:
                return None
            spec = fam.spec(c)
            return [analyze_access(spec, a) for a in spec.accesses if a.buffer == buffer]

        variant.redo = True  # type: ignore[attr-defined]
    else:
        variant = relayout_only(lambda buffer, lay: config_with(buffer, lay) is not None)
    return fix_spec(res.spec, variant=variant)


def variants(res: Resolved, report: FixReport | None = None) -> dict[str, KernelConfig]:
    """{"baseline": the spec's configuration, "fixed": with the recommended layouts}."""
    cfg = res.config
    assert cfg is not None, "variants() needs a kernel spec"
    report = report if report is not None else fix_report(res)
    layouts = {b: lay for b, lay in report.layouts.items() if lay != cfg.layouts.get(b)}
    fixed = reconfigure(cfg, layouts=layouts) if layouts else cfg
    if not layouts:
        fixed = replace(
            fixed, notes=(*fixed.notes, "the spec's layouts are already the best found: fixed = baseline")
        )
    return {"baseline": cfg, "fixed": fixed}
