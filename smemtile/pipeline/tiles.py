"""``smemtile tiles``: the GEMM tile ranking of the family that generates the tiles (or the model's own), and its
exports: ``triton.Config`` lists, YAML specs (for generate / verify / tune / analyze) and plain dictionaries for
JSON. ``tiles --family`` with a family that ranks its own candidates (sizes other than M N K): that family's
ranking (pipeline.tiles_family). No printing."""

from __future__ import annotations

from dataclasses import replace

import yaml

from smemtile.errors import SpecError
from smemtile.families import FAMILIES
from smemtile.families.gemm import GemmFamily, GemmTileModel
from smemtile.model.arch import get_arch
from smemtile.model.gemm_model import warp_tile
from smemtile.model.gemm_tiles import Problem, Scored, TileReport
from smemtile.pipeline.rank import rank


def gemm_family(dtype, arch, vendor) -> GemmFamily | None:
    """The family whose tiles ``tiles M N K`` ranks for this dtype and target (each GEMM family declares it:
    ``tiles_for``); None: the model's ranking alone (AMD, tf32, fp8, int8, 16-bit before sm_80)."""
    vend = (vendor or "nvidia").lower()
    if vend != "nvidia" or str(arch or "").startswith("gfx"):
        return None
    try:
        a = get_arch(arch or "sm_90")
    except SpecError:
        return None  # make_problem reports the bad arch
    dt = str(dtype).lower()
    return next(
        (
            f
            for f in FAMILIES.values()
            if isinstance(f, GemmFamily) and f.tile_model is not None and f.tiles_for(dt, a, vend)
        ),
        None,
    )


def recommend(
    m,
    n,
    k,
    dtype: str = "f32",
    arch: str | None = None,
    *,
    vendor: str | None = None,
    gpu: str | None = None,
    sms: int | None = None,
    triton: bool = False,
    repack: bool | None = None,
) -> TileReport:
    """The GEMM ranking of ``smemtile tiles M N K``: the tiles of the family that generates them for this dtype
    and target (:func:`gemm_family`), screened by its rules, or the model's own tensor / matrix-core tiles;
    through the one ranking loop (smemtile.pipeline.rank). ``triton``: the tensor-core tiles as Triton runs
    them (no family's rules; ranked with the Triton efficiency measured on the H200), for ``--format triton``.
    ``repack``: a SIMT family's REPACK forced on or off (None: its auto rule)."""
    dt = str(dtype).lower()
    fam = None if (triton and dt != "f32") else gemm_family(dt, arch, vendor)
    model = fam.tile_model(fam) if fam is not None else GemmTileModel()
    problem = {
        "M": m,
        "N": n,
        "K": k,
        "dtype": dtype,
        "vendor": vendor,
        "gpu": gpu,
        "sms": sms,
        "repack": repack,
    }
    report = model.report(rank(model, problem, arch, None))
    seam = next(
        (
            x
            for f in FAMILIES.values()
            if isinstance(f, GemmFamily) and (x := f.tiles_seam(report.problem)) is not None
        ),
        None,
    )
    return replace(report, seam=seam) if seam is not None else report


def ranker_for(fam, problem: dict, arch: str, gpu: str | None):
    """``smemtile tune``'s view of ``fam``'s tile model for ``problem`` (None: the family has none), ranked
    through the one ranking loop."""
    return fam.ranker(problem, arch, gpu, rank=rank) if fam.tile_model is not None else None


def command_line(p: Problem) -> str:
    vendor = " --vendor amd" if p.vendor == "amd" else ""
    return f"smemtile tiles {p.m} {p.n} {p.k} --dtype {p.dtype} --arch {p.arch}{vendor}"


def triton_configs(report: TileReport, top: int) -> str:
    """A Python list of ``triton.Config`` for ``@triton.autotune(configs=...)``, best first: #1 is the one to
    use. On NVIDIA the tensor-core tiles are ranked by the roofline model times the efficiency the standard Triton
    matmul measured on the H200 (``smemtile/model/data/triton_h200.json``), which also breaks its ties."""
    p = report.problem
    cal = report.calibration or {}
    lines = [
        f"# {command_line(p)} --format triton ({p.gpu.name}, {p.gpu.sms} {'CUs' if p.vendor == 'amd' else 'SMs'}): "
        f"top {min(top, len(report.ranked))} of {len(report.ranked)} by the smemtile tile model; #1 is the one to use"
    ]
    if p.simt:
        lines.append(f"# {report.texts.get('triton', 'fp32: ranked for SIMT FFMA')}")
    elif p.vendor == "nvidia":
        lines.append(
            f"# ranked by the roofline model x the efficiency measured for (tile, warps, BLOCK_SIZE_K, "
            f"num_stages) with the standard Triton matmul on the {cal.get('gpu', 'H200')} "
            f"({cal.get('sweeps', ['?'])[0]}); expected error: {cal.get('expected_error', '?')}"
        )
        lines.append(f"# {report.texts.get('ties', '')}")
    else:
        lines.append(
            "# AMD: the matrix-core roofline model (no measurement here); waves_per_eu by the "
            "memory/compute-bound rule, each with its reason"
        )
    if any(s.cfg.split_k > 1 for s in report.ranked[:top]):
        lines.append(
            "# SPLIT_K > 1: a split-K matmul (each program adds its K slice into C, e.g. tl.atomic_add "
            "into an fp32 C zeroed first); the tutorial kernel has no SPLIT_K"
        )
    lines += ["import triton", "", "configs = ["]
    for s in report.ranked[:top]:
        c = s.cfg
        kw = {
            "BLOCK_SIZE_M": c.bm,
            "BLOCK_SIZE_N": c.bn,
            "BLOCK_SIZE_K": max(c.bk, 16),
            "GROUP_SIZE_M": c.group_m,
        }
        if c.split_k > 1:
            kw["SPLIT_K"] = c.split_k
        if p.vendor == "amd":
            kw["waves_per_eu"] = c.waves_per_eu
        args = ", ".join(f'"{k}": {v}' for k, v in kw.items())
        lines.append(
            f"    triton.Config({{{args}}}, num_warps={c.warps}, num_stages={c.stages}),"
            f"  # #{s.rank} {s.tflops:.1f} TFLOP/s predicted: {s.reason}"
        )
    lines.append("]")
    return "\n".join(lines) + "\n"


def spec_doc(p: Problem, s: Scored, total: int) -> dict:
    """A spec (YAML contract of DESIGN.md) for one candidate. A tile a family generates carries that family's
    body (``tile_spec``: ``kernel: {family: ...}`` with its own buffers), so generate / verify / tune run it; other
    tensor-core tiles (tf32, f16 before sm_80) carry their fragment reads for ``analyze``."""
    if p.vendor != "nvidia":
        raise SpecError(
            "YAML specs describe NVIDIA kernels (the spec's arch table); use --format triton or json for AMD",
            key="--format",
        )
    c = s.cfg
    doc: dict = {
        "name": f"{p.dtype} GEMM {c.bm}x{c.bn}x{c.bk} tile, smemtile tiles #{s.rank} of {total} "
        f"({s.tflops:.1f} TFLOP/s predicted on {p.gpu.name})"
    }
    doc["arch"] = p.arch
    doc["threads"] = s.threads
    doc["regs"] = s.regs  # the model's estimate; `smemtile verify --compile-only` reads the real count
    owner = getattr(s.cfg, "family", None)
    if owner in FAMILIES:  # a candidate the family ranked itself: its own spec body
        doc.update(FAMILIES[owner].tile_spec(p, s))
        return doc
    fam = gemm_family(p.dtype, p.arch, p.vendor)
    if fam is not None and not issubclass(fam.tile_model, GemmTileModel):
        fam = None  # that family ranks its own candidates (this tile is the generic model's)
    body = fam.tile_spec(p, s) if fam is not None else None
    if body is not None:  # the family generates this tile: its parameters, problem and real swizzled buffers
        doc.update(body)
        return doc
    wtm, wtn = warp_tile(c.bm, c.bn, c.warps)
    wm = c.bm // wtm
    doc["tile"] = {"BM": c.bm, "BN": c.bn, "BK": c.bk}
    doc["constants"] = {"WARPS_M": wm, "WM": wtm, "WN": wtn}
    doc["stages"] = c.stages
    dt = "f16" if p.dtype == "f16" else ("bf16" if p.dtype == "bf16" else "f32")
    doc["buffers"] = [
        {"name": "As", "dtype": dt, "shape": ["BM", "BK"], "stages": c.stages},
        {"name": "Bs", "dtype": dt, "shape": ["BK", "BN"], "stages": c.stages},
    ]
    if p.elem == 2:
        doc["accesses"] = [
            {
                "name": "a_frag",
                "buffer": "As",
                "op": "ldmatrix",
                "matrices": 4,
                "row": "(warp % WARPS_M) * WM + 16 * i + lane % 16",
                "col": "kk * 16 + (lane // 16) * 8",
                "over": {"i": [0, "WM // 16"], "kk": [0, "BK // 16"]},
            },
            {
                "name": "b_frag",
                "buffer": "Bs",
                "op": "ldmatrix",
                "matrices": 2,
                "trans": True,
                "row": "kk * 16 + lane % 16",
                "col": "(warp // WARPS_M) * WN + 8 * j",
                "over": {"j": [0, "WN // 8"], "kk": [0, "BK // 16"]},
            },
        ]
    else:  # tf32: 4-byte fragments read with 32-bit loads (one row per lane group)
        doc["accesses"] = [
            {
                "name": "a_frag",
                "buffer": "As",
                "op": "load",
                "width": 4,
                "row": "(warp % WARPS_M) * WM + 16 * i + lane // 4",
                "col": "kk * 8 + lane % 4",
                "over": {"i": [0, "WM // 16"], "kk": [0, "BK // 8"]},
            },
        ]
    return doc


def yaml_specs(report: TileReport, top: int) -> str:
    """A multi-document YAML stream, one spec per candidate, best first (``--top 1``: a single spec file)."""
    p = report.problem
    docs = []
    for s in report.ranked[:top]:
        body = yaml.safe_dump(
            spec_doc(p, s, len(report.ranked)), sort_keys=False, default_flow_style=None, width=120
        )
        docs.append(f"# {command_line(p)}: #{s.rank}: {s.reason}\n{body}")
    return "---\n".join(docs)


def json_doc(report: TileReport, top: int, rejected: int) -> dict:
    d = report.to_dict(top=top, rejected=rejected)
    d["command"] = command_line(report.problem)
    return d


def implied_gemm_family(dtype: str, arch: str | None, vendor: str | None) -> str | None:
    """The family ``tiles M N K`` ranks for this dtype and target (None: a model-only ranking, no family)."""
    fam = gemm_family(dtype, arch, vendor)
    return fam.name if fam is not None else None


# ``tiles --family``: re-exported for the callers that import them from here
from smemtile.pipeline.tiles_family import (  # noqa: E402
    FamilyTileReport,
    family_command_line,
    family_json_doc,
    family_spec_doc,
    family_tiles,
    family_yaml_specs,
    ranked_families,
)


def __getattr__(name: str):
    if name == "KEY_OPTIONS":  # tiles_family's, computed when asked for (it imports every family)
        from smemtile.pipeline import tiles_family

        return tiles_family.KEY_OPTIONS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "gemm_family",
    "ranker_for",
    "recommend",
    "FamilyTileReport",
    "family_command_line",
    "family_json_doc",
    "family_spec_doc",
    "family_tiles",
    "family_yaml_specs",
    "ranked_families",
]
