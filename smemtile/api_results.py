"""The typed results of ``smemtile``'s Python API (``smemtile.api``).

Every result is a frozen dataclass holding the document the matching command prints with ``--json``
(``to_dict()`` returns it, so the CLI and the API cannot drift: tests/test_api.py compares them), the library
object behind it where there is one (``report``), a few typed properties for the values people read first, and
``_repr_html_`` so a notebook shows a small table instead of a dict.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any


def _plain(o: Any) -> Any:
    """JSON-safe values (numpy scalars and arrays, objects with ``to_dict``), as ``smemtile ... --json`` writes."""
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def normalise(doc: Any) -> Any:
    """``doc`` as it reads back from the CLI's JSON (tuples become lists, numpy values plain numbers)."""
    return json.loads(json.dumps(doc, default=_plain))


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (dict, list, tuple)):
        text = json.dumps(v, default=_plain)
        return text if len(text) <= 80 else text[:77] + "..."
    return str(v)


def html_table(title: str, rows: list[dict], columns: list[str] | None = None, note: str = "") -> str:
    """A small self-contained HTML table (every value escaped): the notebook view of a result."""
    import html  # here: the command line, a client of this module, never renders HTML tables

    columns = columns or (list(rows[0]) if rows else [])
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(r.get(c, '')))}</td>" for c in columns) + "</tr>"
        for r in rows
    )
    foot = f"<p><small>{html.escape(note)}</small></p>" if note else ""
    return (
        f'<div class="smemtile"><p><b>{html.escape(title)}</b></p>'
        f'<table border="1" style="border-collapse:collapse"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table>{foot}</div>"
    )


@dataclass(frozen=True, eq=False)
class Result:
    """Base of every API result: ``doc`` is the ``--json`` document (kept private; ``to_dict`` copies it).

    ``doc`` may be given as a function of no arguments that makes the document: it is then made on first use,
    once (the command line renders its tables from ``report`` and never pays for a document it does not print).
    """

    doc: dict = field(repr=False)

    def __post_init__(self) -> None:
        if callable(self.doc):
            object.__setattr__(self, "_make_doc", self.doc)
            object.__delattr__(self, "doc")

    def __getattr__(self, name: str) -> Any:
        make = self.__dict__.get("_make_doc") if name == "doc" else None
        if make is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        doc = make()
        object.__setattr__(self, "doc", doc)
        object.__delattr__(self, "_make_doc")
        return doc

    def to_dict(self) -> dict:
        """The document ``smemtile <command> --json`` prints for the same input (a fresh copy)."""
        return copy.deepcopy(self.doc)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.doc, indent=indent)

    def __getitem__(self, key: str) -> Any:
        return self.doc[key]

    def _repr_html_(self) -> str:
        scalars = [{"key": k, "value": v} for k, v in self.doc.items() if not isinstance(v, (dict, list))]
        return html_table(type(self).__name__, scalars, ["key", "value"])


@dataclass(frozen=True, eq=False)
class AnalyzeResult(Result):
    """``smemtile.analyze(spec)``: the bank analysis, fixes, declarations, occupancy and checklist of a spec."""

    report: Any = field(default=None, repr=False, compare=False)  # smemtile.report.analyze.AnalyzeReport
    resolved: Any = field(
        default=None, repr=False, compare=False
    )  # smemtile.pipeline.specs.Resolved: the spec it analysed

    @property
    def accesses(self) -> list[dict]:
        """One dict per access: name, buffer, op, width, wavefronts, ideal_wavefronts, conflict_degree, ..."""
        return copy.deepcopy(self.doc["accesses"])

    @property
    def worst_conflict_degree(self) -> float:
        """The largest conflict degree (wavefronts / ideal) over the spec's accesses, before any fix."""
        return max((a["conflict_degree"] for a in self.doc["accesses"]), default=1.0)

    @property
    def fixed_conflict_degree(self) -> float:
        """The same under the recommended layouts."""
        return max((a["conflict_degree"] for a in self.doc["fixed_accesses"]), default=1.0)

    @property
    def layouts(self) -> dict[str, str]:
        """Buffer -> the recommended layout, in words (``pad 1``, ``Swizzle<3,3,3>``)."""
        return {f["buffer"]: f["recommended"]["describe"] for f in self.doc["fixes"]}

    def __repr__(self) -> str:
        return (
            f"AnalyzeResult({self.doc['spec'].get('source', '?')!r}, {len(self.doc['accesses'])} accesses, "
            f"worst {self.worst_conflict_degree:g}x -> {self.fixed_conflict_degree:g}x)"
        )

    def _repr_html_(self) -> str:
        try:  # the report page, when smemtile.report.html provides one
            from smemtile.report.html import report_html  # type: ignore[import-not-found]
        except ImportError:
            report_html = None
        if report_html is not None and self.report is not None:
            return report_html(self.report)
        fixed = {a["name"]: a for a in self.doc["fixed_accesses"]}
        rows = [
            {
                "access": a["name"],
                "buffer": a["buffer"],
                "op": a["op"],
                "width": a["width"],
                "wavefronts": a["wavefronts"],
                "ideal": a["ideal_wavefronts"],
                "degree": a["conflict_degree"],
                "fixed degree": fixed.get(a["name"], {}).get("conflict_degree", ""),
            }
            for a in self.doc["accesses"]
        ]
        note = "; ".join(f"{b}: {lay}" for b, lay in self.layouts.items())
        return html_table(
            f"smemtile analyze {self.doc['spec'].get('source', '')}",
            rows,
            note=f"recommended layouts: {note}" if note else "",
        )


@dataclass(frozen=True, eq=False)
class FixResult(Result):
    """``smemtile.fix(spec)``: the fix search's answer per buffer (``fixes`` is analyze --json's ``fixes``)."""

    report: Any = field(default=None, repr=False)  # smemtile.model.fix.FixReport

    @property
    def layouts(self) -> dict[str, str]:
        return {f["buffer"]: f["recommended"]["describe"] for f in self.doc["fixes"]}

    def __repr__(self) -> str:
        return f"FixResult({self.layouts})"

    def _repr_html_(self) -> str:
        rows = [
            {
                "buffer": f["buffer"],
                "needed": f["needed"],
                "recommended": f["recommended"]["describe"],
                "wavefronts": f"{f['baseline']['total_wavefronts']} -> {f['recommended']['total_wavefronts']}",
                "extra bytes": f["recommended"]["extra_bytes"],
                "reason": f["reason"],
            }
            for f in self.doc["fixes"]
        ]
        return html_table("smemtile fix", rows)


@dataclass(frozen=True, eq=False)
class OccupancyResult(Result):
    """``smemtile.occupancy(...)``: blocks and warps per SM, the limiter, every resource's block limit."""

    report: Any = field(default=None, repr=False)  # smemtile.model.occupancy.OccupancyResult
    arch: Any = field(
        default=None, repr=False, compare=False
    )  # smemtile.model.arch.Arch: the target it was computed for

    @property
    def active_blocks(self) -> int:
        return int(self.doc["active_blocks"])

    @property
    def occupancy(self) -> float:
        return float(self.doc["occupancy"])

    @property
    def limiter(self) -> str:
        return str(self.doc["limiter"])

    def __repr__(self) -> str:
        return (
            f"OccupancyResult({self.active_blocks} blocks/SM, {self.occupancy:.0%}, "
            f"limited by {self.limiter})"
        )

    def _repr_html_(self) -> str:
        rows = [{"resource": k, "blocks": v} for k, v in self.doc["limits"].items()]
        return html_table(
            f"occupancy: {self.active_blocks} blocks/SM, {self.occupancy:.0%}",
            rows,
            note=f"limited by {self.limiter}",
        )


@dataclass(frozen=True, eq=False)
class TilesResult(Result):
    """``smemtile.tiles(...)``: ranked configurations (``candidates``, best first) and the rejected ones."""

    report: Any = field(default=None, repr=False, compare=False)  # TileReport (GEMM) or FamilyTileReport
    top: int = 10
    rejected: int = 8

    @property
    def candidates(self) -> list[dict]:
        return copy.deepcopy(self.doc["candidates"])

    @property
    def best(self) -> dict | None:
        return copy.deepcopy(self.doc["candidates"][0]) if self.doc["candidates"] else None

    @property
    def family(self) -> str | None:
        """The family that ranked its own sizes (``tiles(family=...)``), None for a GEMM ranking."""
        if self.report is not None:  # without building the document
            from smemtile.pipeline.tiles_family import FamilyTileReport

            return self.report.family if isinstance(self.report, FamilyTileReport) else None
        return self.doc.get("family")

    def yaml_specs(self, top: int | None = None) -> str:
        """The candidates as YAML specs (``smemtile tiles --format yaml``): generate / verify / tune take them."""
        from smemtile.pipeline import tiles as pt

        n = self.top if top is None else top
        if self.family is not None:
            return pt.family_yaml_specs(self.report, n)
        return pt.yaml_specs(self.report, n)

    def triton_configs(self, top: int | None = None) -> str:
        """A GEMM ranking as a Python list of ``triton.Config`` for ``@triton.autotune`` (``smemtile tiles
        --format triton``; rank it with ``tiles(..., triton=True)`` for Triton's own efficiency)."""
        from smemtile.errors import SpecError
        from smemtile.pipeline import tiles as pt

        if self.family is not None:
            raise SpecError("triton configurations are for GEMM tiles", key="triton")
        return pt.triton_configs(self.report, self.top if top is None else top)

    def __repr__(self) -> str:
        b = self.best
        label = b.get("label") if b else None
        return f"TilesResult({self.doc.get('command', '')!r}, {len(self.doc['candidates'])} shown, best {label!r})"

    def _repr_html_(self) -> str:
        if self.family is not None:
            cols = ["rank", "label", "gbps", "copy_ratio", "reason"]
        else:
            cols = ["rank", "label", "tflops", "blocks_per_sm", "smem_bytes", "bound", "reason"]
        rows = [{c: s.get(c, "") for c in cols} for s in self.doc["candidates"]]
        return html_table(
            self.doc.get("command", "smemtile tiles"),
            rows,
            note=f"{self.doc['counts'].get('rejected', 0)} rejected",
        )


@dataclass(frozen=True, eq=False)
class GenerateResult(Result):
    """``smemtile.generate(spec)``: the kernel's launch description; ``source`` is the ``.cu`` text."""

    source: str = field(default="", repr=False)
    report: Any = field(
        default=None, repr=False, compare=False
    )  # smemtile.pipeline.build.Built: kernel, checklist, compile
    sources: Any = field(
        default=None, repr=False, compare=False
    )  # diff=True: makes diff_sources on first use

    @property
    def diff_sources(self) -> dict | None:
        """With ``diff=True``: ``{"baseline": .cu, "fixed": .cu}``, the two sources ``smemtile generate --diff``
        shows side by side (the other variant's built without NVRTC); None without ``diff``."""
        if self.sources is None:
            return None
        if "_diff_sources" not in self.__dict__:
            object.__setattr__(self, "_diff_sources", self.sources())
        return dict(self.__dict__["_diff_sources"])

    @property
    def name_expression(self) -> str:
        return str(self.doc["name_expression"])

    def write(self, path) -> str:
        """Write the .cu (atomically, as ``smemtile generate -o`` does); returns the path written."""
        from smemtile.fileio import write_text_atomic

        return str(write_text_atomic(path, self.source, key="path", make_parents=True))

    def __repr__(self) -> str:
        return (
            f"GenerateResult({self.name_expression!r}, grid {tuple(self.doc['grid'])}, "
            f"block {tuple(self.doc['block'])})"
        )

    def _repr_html_(self) -> str:
        keys = (
            "family",
            "variant",
            "arch",
            "name_expression",
            "grid",
            "block",
            "dynamic_smem_bytes",
            "smem_bytes",
        )
        rows = [{"key": k, "value": self.doc.get(k)} for k in keys if k in self.doc]
        rows += [
            {"key": f"checklist: {i['text']}", "value": i["status"]} for i in self.doc.get("checklist", [])
        ]
        return html_table("smemtile generate", rows, ["key", "value"])


@dataclass(frozen=True, eq=False)
class VerifyResult(Result):
    """``smemtile.verify(spec)``: per-variant registers, occupancy, correctness and times."""

    report: Any = field(default=None, repr=False, compare=False)  # the pipeline's document, before normalise
    microkernel: bool = False  # a spec without kernel: its accesses ran as synthesized microkernels

    @property
    def variants(self) -> list[dict]:
        return copy.deepcopy(self.doc.get("variants", []))

    @property
    def correct(self) -> bool | None:
        """False if any variant computed a wrong result; None when nothing ran (compile only)."""
        seen = [r.get("correct") for r in self.doc.get("variants", []) if r.get("correct") is not None]
        return all(seen) if seen else None

    def __repr__(self) -> str:
        return f"VerifyResult({len(self.doc.get('variants', []))} variants, correct={self.correct})"

    def _repr_html_(self) -> str:
        cols = ["variant", "registers", "spills", "correct", "time_ms", "tflops", "gbps"]
        rows = [{c: r.get(c, "") for c in cols} for r in self.doc.get("variants", [])]
        return html_table("smemtile verify", rows)


@dataclass(frozen=True, eq=False)
class TuneResult(Result):
    """``smemtile.tune(spec)``: the plan (``dry_run``) or the measured candidates and the winner."""

    report: Any = field(default=None, repr=False, compare=False)  # the document, before normalise

    @property
    def candidates(self) -> list[dict]:
        return copy.deepcopy(self.doc.get("candidates", []))

    @property
    def best(self) -> dict | None:
        s = self.doc.get("summary") or {}
        return copy.deepcopy(s.get("best"))

    def __repr__(self) -> str:
        what = "plan" if self.doc.get("dry_run") else "measured"
        return f"TuneResult({what}, {len(self.doc.get('candidates', []))} candidates)"

    def _repr_html_(self) -> str:
        rows = [
            {
                "label": c.get("label"),
                "source": c.get("source"),
                "model_rank": c.get("model_rank"),
                "predicted": c.get("predicted"),
            }
            for c in self.doc.get("candidates", [])
        ]
        return html_table("smemtile tune" + (" --dry-run" if self.doc.get("dry_run") else ""), rows)


@dataclass(frozen=True, eq=False)
class InspectResult(Result):
    """``smemtile.inspect(kernel.cu, ...)``: the user's own kernel per source line (wavefronts against ideal,
    lanes and banks), the fix per shared array and the spec it implies."""

    report: Any = field(default=None, repr=False)  # smemtile.pipeline.inspect.InspectResult

    @property
    def no_device(self) -> str | None:
        """Why nothing ran (mode ``auto`` without a GPU: the listing only), else None."""
        return self.doc.get("no_device")

    def __repr__(self) -> str:
        return f"InspectResult({self.doc.get('kernel')!r}, mode {self.doc.get('mode')!r})"


@dataclass(frozen=True, eq=False)
class ReportResult(Result):
    """``smemtile.report(spec, output)``: the page written (``output``, ``bytes``, ``sections``, ``figures``:
    ``smemtile report --json``) and the analysis it shows (``analysis``, an :class:`AnalyzeResult`)."""

    analysis: Any = field(default=None, repr=False, compare=False)

    @property
    def output(self) -> str:
        return self.doc["output"]

    def __repr__(self) -> str:
        return (
            f"ReportResult({self.doc['output']!r}: {self.doc['bytes']} bytes, {self.doc['figures']} figures)"
        )
