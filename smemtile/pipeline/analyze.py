"""``smemtile analyze``: the resolved spec's bank analysis and fixes, judged on what the kernel really issues."""

from __future__ import annotations

from smemtile.families import FAMILIES
from smemtile.model.analysis import analyze_spec
from smemtile.model.tma import check as check_tma
from smemtile.pipeline.fixes import fix_report, variants
from smemtile.pipeline.specs import Resolved
from smemtile.report.analyze import AnalyzeReport, build_report


def analyze(res: Resolved, regs: int | None = None) -> AnalyzeReport:
    """The analyze report; for a kernel spec the fixed variant is the one ``generate`` builds. A TMA tile that
    breaks a hardware rule fails first (exit 1, smemtile.model.tma)."""
    check_tma(res.spec)
    fixes = fix_report(res)
    if res.config is None:
        return build_report(res.spec, regs, fixes=fixes)
    fixed = variants(res, fixes)["fixed"]
    return build_report(
        res.spec, regs, fixes=fixes, fixed_results=analyze_spec(FAMILIES[fixed.family].spec(fixed))
    )
