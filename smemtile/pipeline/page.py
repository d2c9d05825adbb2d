"""``smemtile report``: the data of the report page that ``analyze`` does not already hold (the full tile
ranking with its expected error, from ``pipeline.tiles``), and the page itself (``report.html``).

The tile ranking is the one ``smemtile tiles`` prints for the spec's problem: a kernel spec's family (GEMM
families through ``tiles M N K``, memory-bound ones through ``tiles --family``) or a ``problem:`` GEMM. The
expected error is a number only where the calibration gives one (a calibrated model's held-out median error);
otherwise its words are shown and the bars have no band.
"""

from __future__ import annotations

import os
from pathlib import Path

from smemtile.errors import SmemtileError, SpecError
from smemtile.families import FAMILIES
from smemtile.fileio import printable
from smemtile.pipeline.specs import Resolved
from smemtile.report.analyze import AnalyzeReport

TOP = 16  # candidates plotted


def tile_ranking(res: Resolved, rep: AnalyzeReport, top: int = TOP) -> dict:
    """``{"unit", "candidates": [{rank, label, predicted, error, measured}], "this", "total", "error_text",
    "command"}``, or ``{"missing": why}`` where no tile model applies."""
    from smemtile.pipeline import tiles as tl

    spec = rep.spec
    this = (rep.tiles or {}).get("this") or {}
    try:
        if res.config is not None:
            cfg = res.config
            fam = FAMILIES[cfg.family]
            if fam.work(cfg.problem)[0] != "tflops" or cfg.family in tl.ranked_families():
                # the sizes `tiles --family` takes (a leading dimension with a dense default is not one)
                ints = [
                    cfg.problem[pk.name]
                    for pk in fam.problem_keys
                    if pk.kind == "int" and not getattr(pk, "dense", "") and pk.name in cfg.problem
                ]
                keys = {k: cfg.params[k] for k in fam.problem_params}
                frep = tl.family_tiles(
                    cfg.family, ints, dtype=cfg.problem.get("dtype"), keys=keys, arch=spec.arch.name
                )
                return _family(frep, this, top, tl.family_command_line(frep))
            p = cfg.problem
            dtype = str(p.get("dtype", "f32"))
        elif spec.problem:
            p, dtype = spec.problem, str(spec.problem["dtype"])
        else:
            return {
                "missing": (rep.tiles or {}).get(
                    "missing", "no problem size: the spec has neither kernel: nor problem:"
                )
            }
        if (rep.tiles or {}).get("missing"):
            return {"missing": rep.tiles["missing"]}
        trep = tl.recommend(p["M"], p["N"], p["K"], dtype, spec.arch.name)
    except SmemtileError as e:
        return {"missing": f"the tile model cannot rank this problem: {str(e).splitlines()[0]}"}
    return _gemm(trep, this, top, tl.command_line(trep.problem))


def _gemm(trep, this: dict, top: int, command: str) -> dict:
    cal = trep.calibration or {}
    err = cal.get("median_error") if cal.get("applies") else None
    cands = [
        {"rank": s.rank, "label": s.cfg.label, "predicted": float(s.tflops), "error": err, "measured": None}
        for s in trep.ranked[:top]
    ]
    return {
        "unit": "TFLOP/s",
        "candidates": cands,
        "this": _this(this),
        "total": len(trep.ranked),
        "error_text": str(cal.get("expected_error", "unknown")),
        "model": str(cal.get("model", "")),
        "command": command,
    }


def _family(frep, this: dict, top: int, command: str) -> dict:
    prov = frep.provenance or {}
    err, unmeasured = prov.get("expected_error"), prov.get("expected_error_unmeasured")
    cands = []
    for s in frep.ranked[:top]:
        measured = getattr(s, "measured", None)
        e = unmeasured if (measured is False and unmeasured is not None) else err
        # a model says where it was timed (shape -> fraction of a copy) or only whether: either way a yes/no
        cands.append(
            {
                "rank": s.rank,
                "label": s.label,
                "predicted": float(s.gbps),
                "error": e,
                "measured": bool(measured),
            }
        )
    if err is not None:
        text = f"{err:.1%} ({prov.get('expected_error_of', '')})"
        if unmeasured is not None:
            text += f"; {unmeasured:.1%} for candidates never timed"
    else:
        text = "uncalibrated here: no expected error"
    return {
        "unit": "GB/s",
        "candidates": cands,
        "this": _this(this),
        "total": len(frep.ranked),
        "error_text": text,
        "model": str(prov.get("source", "")),
        "command": command,
    }


def _this(this: dict) -> dict:
    return {"label": this.get("label"), "rank": this.get("model_rank"), "predicted": this.get("predicted")}


def page(res: Resolved, rep: AnalyzeReport) -> str:
    """The whole report page (``smemtile report``, ``analyze --export FILE.html``)."""
    from smemtile.report.html import report_html

    return report_html(rep, ranking=tile_ranking(res, rep))


def check_output(output: Path, spec: Path, key: str = "-o") -> None:
    """A page goes to a new or regular ``.html`` file that is not the spec (checked before any work is done)."""
    if output.suffix.lower() != ".html":
        raise SpecError(f"takes a .html file name, got {printable(output.name)!r}", key=key)
    if str(spec) != "-":
        try:
            same = os.path.samefile(output, spec)
        except OSError:
            same = False
        if same:
            raise SpecError(
                f"{printable(output)} is the input spec; refusing to overwrite it (choose another file name)",
                key=key,
            )


def write_page(rep, res, output: Path, spec: Path, key: str = "-o") -> dict:
    """Render the page of ``rep`` and write it atomically (smemtile.fileio); what was written, for ``--json``."""
    from smemtile.fileio import write_text_atomic
    from smemtile.report.html import SECTIONS

    text = page(res, rep)
    path = write_text_atomic(output, text, key=key, inputs=[spec] if str(spec) != "-" else ())
    return {
        "output": str(path),
        "bytes": len(text.encode("utf-8", "surrogateescape")),
        "sections": [k for k, _ in SECTIONS],
        "figures": text.count("<svg "),
    }
