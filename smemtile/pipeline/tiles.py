"""``smemtile tiles``: the tile model's ranking with the families' rules, and its exports: ``triton.Config``
lists, YAML specs (for generate / verify / tune / analyze) and plain dictionaries for JSON. ``tiles --family``
with a memory-bound family (transpose, stencil2d): that family's candidates ranked by its own model. No
printing."""

from __future__ import annotations

import yaml

from smemtile.errors import SpecError
from smemtile.families import FAMILIES
from smemtile.model.arch import get_arch
from smemtile.model.tiling import Problem, Scored, TileReport
from smemtile.model.tiling import recommend as _recommend

# dtype -> the kernel family that generates (and screens) the tiles on NVIDIA
TILE_FAMILIES = {"f32": "sgemm", "f16": "hgemm", "bf16": "hgemm"}


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
    """The ranking of ``smemtile.model.tiling.recommend``, candidates checked by the family that generates them
    (fp32: sgemm, f16/bf16: hgemm). ``triton``: the tensor-core tiles as Triton runs them (no family's rules;
    ranked with the Triton efficiency measured on the H200), for ``--format triton``. ``repack``: sgemm's REPACK
    forced on or off (None: its auto rule)."""
    if triton and str(dtype).lower() != "f32":
        return _recommend(m, n, k, dtype, arch, vendor=vendor, gpu=gpu, sms=sms)
    own = _own_ranking(dtype, arch, vendor)
    if own is not None:  # a family that ranks its own configurations for this target (wgmma on sm_90a)
        return own.tile_report(m, n, k, str(dtype).lower(), str(arch), gpu=gpu, sms=sms)
    contract = None
    if (
        str(dtype).lower() in TILE_FAMILIES
        and (vendor or "nvidia").lower() == "nvidia"
        and not str(arch or "").startswith("gfx")
    ):
        try:
            a = get_arch(arch or "sm_90")
        except SpecError:
            a = None  # make_problem reports the bad arch
        if a is not None:
            dims = {}
            for key, v in (("M", m), ("N", n), ("K", k)):
                try:
                    dims[key] = max(1, int(str(v)))
                except ValueError:
                    dims[key] = 1  # make_problem reports it
            contract = FAMILIES[TILE_FAMILIES[str(dtype).lower()]].tile_contract(a, dims)
    return _recommend(m, n, k, dtype, arch, vendor=vendor, gpu=gpu, sms=sms, contract=contract, repack=repack)


def _own_ranking(dtype, arch, vendor):
    """The family whose ``tiles_for(dtype, arch)`` claims this target (it ranks and screens its own candidates)."""
    if (vendor or "nvidia").lower() != "nvidia" or arch is None:
        return None
    return next(
        (
            f
            for f in FAMILIES.values()
            if hasattr(f, "tiles_for") and f.tiles_for(str(dtype).lower(), str(arch))
        ),
        None,
    )


def command_line(p: Problem) -> str:
    vendor = " --vendor amd" if p.vendor == "amd" else ""
    return f"smemtile tiles {p.m} {p.n} {p.k} --dtype {p.dtype} --arch {p.arch}{vendor}"


def triton_configs(report: TileReport, top: int) -> str:
    """A Python list of ``triton.Config`` for ``@triton.autotune(configs=...)``, best first: #1 is the one to
    use. On NVIDIA the tensor-core tiles are ranked by the roofline model times the efficiency the standard Triton
    matmul measured on the H200 (``smemtile/model/data/triton_h200.json``), which also breaks its ties."""
    from smemtile.model.tiling import TIE_RULE

    p = report.problem
    cal = report.calibration or {}
    lines = [
        f"# {command_line(p)} --format triton ({p.gpu.name}, {p.gpu.sms} {'CUs' if p.vendor == 'amd' else 'SMs'}): "
        f"top {min(top, len(report.ranked))} of {len(report.ranked)} by the smemtile tile model; #1 is the one to use"
    ]
    if p.simt:
        lines.append(
            "# fp32: ranked for SIMT FFMA (the sgemm family); tl.dot needs BLOCK_SIZE_K >= 16 and uses "
            "TF32 unless input_precision='ieee'"
        )
    elif p.vendor == "nvidia":
        lines.append(
            f"# ranked by the roofline model x the efficiency measured for (tile, warps, BLOCK_SIZE_K, "
            f"num_stages) with the standard Triton matmul on the {cal.get('gpu', 'H200')} "
            f"({cal.get('sweeps', ['?'])[0]}); expected error: {cal.get('expected_error', '?')}"
        )
        lines.append(f"# {TIE_RULE}")
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
    """A spec (YAML contract of DESIGN.md) for one candidate. fp32 on NVIDIA carries ``kernel: {family: sgemm}``,
    f16/bf16 on sm_80+ ``kernel: {family: hgemm}`` with its swizzled buffers, so generate / verify / tune run
    them; other tensor-core tiles (tf32, f16 before sm_80) carry their fragment reads for ``analyze``."""
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
    if p.simt:  # the sgemm family: its buffers and accesses are its own (`smemtile analyze` prints them)
        doc["tile"] = {"BM": c.bm, "BN": c.bn, "BK": c.bk, "TM": c.tm, "TN": c.tn}
        doc["stages"] = c.stages
        doc["kernel"] = {
            "family": "sgemm",
            "M": p.m,
            "N": p.n,
            "K": p.k,
            "GROUP_M": c.group_m,
            "MIN_BLOCKS": c.min_blocks,
        }
        if c.split_k > 1:  # the K slices add into C with atomics after the launch plan's C = beta * C
            doc["kernel"]["SPLIT_K"] = c.split_k
        return doc
    fam = FAMILIES.get(TILE_FAMILIES.get(p.dtype, ""))
    body = fam.tile_spec(p, s) if fam is not None and hasattr(fam, "tile_spec") else None
    if body is not None:  # the family generates this tile: its parameters, problem and real swizzled buffers
        doc.update(body)
        return doc
    wm = _warps_m(s)
    wtm, wtn = c.bm // wm, c.bn // (c.warps // wm)
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


def _warps_m(s: Scored) -> int:
    c = s.cfg
    ok = [
        wm
        for wm in (1, 2, 4, 8)
        if c.warps % wm == 0
        and c.bm % wm == 0
        and (c.bm // wm) % 16 == 0
        and c.bn % (c.warps // wm) == 0
        and (c.bn // (c.warps // wm)) % 8 == 0
    ]
    return min(ok, key=lambda wm: (c.bm // wm + c.bn // (c.warps // wm), -(c.bm // wm)))


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
    own = _own_ranking(str(dtype).lower(), arch, vendor)
    if own is not None:
        return own.name
    if (vendor or "nvidia").lower() != "nvidia" or str(arch or "").startswith("gfx"):
        return None
    return TILE_FAMILIES.get(str(dtype).lower())


# ``tiles --family``: re-exported for the callers that import them from here
from smemtile.pipeline.tiles_family import (  # noqa: E402
    KEY_OPTIONS,
    FamilyTileReport,
    family_command_line,
    family_json_doc,
    family_spec_doc,
    family_tiles,
    family_yaml_specs,
    ranked_families,
)

__all__ = [
    "KEY_OPTIONS",
    "FamilyTileReport",
    "family_command_line",
    "family_json_doc",
    "family_spec_doc",
    "family_tiles",
    "family_yaml_specs",
    "ranked_families",
]
