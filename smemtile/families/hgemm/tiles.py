"""The tile model's view of hgemm (``smemtile tiles --dtype f16|bf16``, ``smemtile tune``).

A tensor-core candidate of the GEMM tile model (smemtile.model.gemm_tiles: BM, BN, BK, warps, stages,
GROUP_SIZE_M) becomes hgemm parameters with the warp tile the model itself assumes (:func:`warp_tile`,
``smemtile.model.gemm_model.warp_tile``: the split of the warps whose WM + WN is smallest, taller on ties) and the
kernel's conflict-free swizzles. The rules (:class:`Contract`) refuse what hgemm.cu's static_asserts refuse (BK 16,
WN 8, uneven copies, ...), so every ranked candidate generates; ``tile_spec`` writes the spec `generate` and
`verify` take, with MIN_BLOCKS = the blocks per SM the model counted on and SPLIT_K (fp32 C) where the model split
K. :class:`HgemmTileModel` is the family's TileModel (``Hgemm.tile_model``).

The rules also carry the family's measured factors (:func:`calibration`, ``calibration_h200.yaml``, data
with provenance, recomputed by :mod:`.fit` from the recorded runs), which the tile model applies to these
tiles only (smemtile.model.gemm_model.family_calibration):

    factor              value (H200)                          from
    BK:STAGES speed     32:4 1.0, 32:5 0.993, 64:4 0.989,     median times of the same tile, shape and run
                        64:3 0.987, 32:3 0.965, others 0.965  (phase 1 run 3, phase 2 runs 4-5)
    load latency        1.22 us (L2), 1.35 us (below ridge)   a K tile >= latency / (STAGES - 1): 3-stage runs;
                                                              the 64x8192x4096 runs through the whole model
    split K atomics     1776 GB/s                             the sgemm calibration's fp32 atomic rate

With odd leading dimensions (the register copies) a BK 64+ tile beside 64 x 64 accumulators spills under ptxas
13.0 (8-96 bytes measured here), so the contract leaves it out.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import yaml

from smemtile.errors import SpecError
from smemtile.families.base import Candidate, KernelConfig
from smemtile.families.gemm import GemmTileModel
from smemtile.model.arch import Arch, get_arch
from smemtile.model.gemm_model import FamilyRules, warp_tile
from smemtile.model.layout import Layout

__all__ = ["Contract", "HgemmTileModel", "Ranker", "calibration", "tile_params", "tile_spec", "warp_tile"]


def tile_params(c) -> dict:
    """hgemm template parameters of a tile-model candidate (TileConfig)."""
    wt = warp_tile(c.bm, c.bn, c.warps)
    wm, wn = wt if wt else (16, 8)  # no split: the contract names the broken rule
    return {
        "BM": c.bm,
        "BN": c.bn,
        "BK": c.bk,
        "WM": wm,
        "WN": wn,
        "STAGES": c.stages,
        "GROUP_M": c.group_m,
        "SPLIT_K": c.split_k,
    }


def _config(fam, params: dict, problem: dict, arch: Arch, check: bool) -> KernelConfig:
    """The configuration with the kernel's own swizzles (B column-major: Bs rows are BK long)."""
    from smemtile.families import configure
    from smemtile.families.hgemm import swizzle_for

    b_cols = params["BK"] if problem.get("b_layout") == "col" else params["BN"]
    layouts = {"As": Layout(0, swizzle_for(params["BK"])), "Bs": Layout(0, swizzle_for(b_cols))}
    return configure(fam, {**params, **problem}, layouts, arch, check=check)


CALIBRATION = "calibration_h200.yaml"


@cache
def calibration() -> dict:
    """hgemm's measured factors for the tile model (stages, load latency, split K's atomics), with provenance:
    ``calibration_h200.yaml`` next to this file (recomputed by :func:`smemtile.families.hgemm.fit.calibrate`)."""
    doc = yaml.safe_load(resources.files(__package__).joinpath(CALIBRATION).read_text())
    return {**doc, "family": "hgemm", "file": f"smemtile/families/hgemm/{CALIBRATION}"}


class Contract(FamilyRules):
    """``contract(tile) -> (broken rules, threads, smem bytes)`` for the tile model; ``calibration`` carries the
    family's measured factors (smemtile.model.gemm_model.family_calibration reads it)."""

    def __init__(self, fam, arch: Arch, problem: dict):
        self.fam, self.arch, self.problem = fam, arch, problem
        self.calibration = calibration()
        self.seen: dict[tuple, tuple] = {}

    def __call__(self, c):
        params = tile_params(c)
        key = tuple(v for k, v in params.items() if k != "GROUP_M")  # the block order breaks no rule
        if key in self.seen:
            return self.seen[key]
        try:
            cfg = _config(self.fam, {**params, "MIN_BLOCKS": 1}, self.problem, self.arch, check=False)
            bad = [f"hgemm: {b}" for b in self.fam.problems(cfg, accesses=False)]
            if (
                not bad
                and self.fam.align(cfg) != 8
                and params["BK"] > 32
                and params["WM"] * params["WN"] >= 4096
            ):
                bad = [
                    f"hgemm: registers: the copies through registers (ALIGN {self.fam.align(cfg)}: K or ldb not a "
                    f"multiple of 8) of BK {params['BK']} beside {params['WM']}x{params['WN']} accumulators spill "
                    "(ptxas 13.0: 8-96 bytes); BK 32 does not"
                ]
        except SpecError as e:
            bad = [f"hgemm: {e}"]
        out = (bad, self.fam.threads(params), 0 if bad else self.fam.smem_bytes(cfg))
        self.seen[key] = out
        return out


def tile_contract(fam, arch: Arch, problem: dict):
    """The tile model's rules (:class:`Contract`), or None where hgemm does not run (before sm_80)."""
    if arch.cc < (8, 0):
        return None
    return Contract(fam, arch, problem)


class HgemmTileModel(GemmTileModel):
    """hgemm's tiles: the generic tensor-core model screened by :class:`Contract`, with its measured factors."""

    def rules(self, arch: Arch, dims: dict):
        return tile_contract(self.fam, arch, dims)

    def configure(self, entry) -> KernelConfig:
        s = getattr(getattr(entry, "pred", None), "result", entry)
        params = {**tile_params(s.cfg), "MIN_BLOCKS": max(1, min(4, s.blocks_per_sm))}
        problem = {"M": self.p.m, "N": self.p.n, "K": self.p.k, "dtype": self.p.dtype}
        return _config(self.fam, params, problem, get_arch(self.p.arch), check=True)

    def ranker(self, report) -> Ranker:
        return Ranker(self, report)


def tile_spec(fam, p, s) -> dict | None:
    """The spec body (tile, stages, kernel, buffers with their swizzles) of a ranked candidate ``s`` of the tile
    problem ``p``; None where hgemm does not run."""
    arch = get_arch(p.arch)
    if arch.cc < (8, 0) or p.dtype not in ("f16", "bf16"):
        return None
    params = {**tile_params(s.cfg), "MIN_BLOCKS": max(1, min(4, s.blocks_per_sm))}
    cfg = _config(fam, params, {"M": p.m, "N": p.n, "K": p.k, "dtype": p.dtype}, arch, check=True)
    kernel = {
        "family": fam.name,
        "M": p.m,
        "N": p.n,
        "K": p.k,
        "dtype": p.dtype,
        "GROUP_M": params["GROUP_M"],
        "MIN_BLOCKS": params["MIN_BLOCKS"],
    }
    if params["SPLIT_K"] > 1:  # the K slices add into fp32 C with atomics (the family's default c_dtype)
        kernel["SPLIT_K"] = params["SPLIT_K"]
    return {
        "tile": {k: params[k] for k in ("BM", "BN", "BK", "WM", "WN")},
        "stages": params["STAGES"],
        "kernel": kernel,
        "buffers": [b.to_doc() for b in fam.buffer_spec(cfg).buffers],
    }


class Ranker:
    """The tile model's ranking of hgemm configurations for one problem (``smemtile tune``): ``top(k)`` and a
    Candidate for any configuration (``__call__``)."""

    def __init__(self, model: HgemmTileModel, report):
        self.model, self.fam, self.p, self.report = model, model.fam, model.p, report
        self.by_label = {s.cfg.label: s for s in self.report.ranked}

    def top(self, k: int) -> list[dict]:
        return [
            {**tile_params(s.cfg), "MIN_BLOCKS": max(1, min(4, s.blocks_per_sm))}
            for s in self.report.ranked[:k]
        ]

    def __call__(self, params: dict, src: str) -> Candidate:
        from smemtile.model.gemm_tiles import Scored, TileConfig

        full = {**self.fam.defaults(), **params}
        warps = self.fam.threads(full) // 32
        c = TileConfig(
            full["BM"],
            full["BN"],
            full["BK"],
            warps,
            full["STAGES"],
            full["GROUP_M"],
            split_k=full["SPLIT_K"],
        )
        label = f"{c.label} {full['WM']}x{full['WN']} mb{full['MIN_BLOCKS']}"
        ranked = self.by_label.get(c.label)
        same_warps = warp_tile(c.bm, c.bn, c.warps) == (full["WM"], full["WN"])
        if ranked is not None and same_warps:
            return Candidate(label, params, src, ranked.rank, ranked.tflops, ranked.reason)
        x = self.model.score(c)
        if isinstance(x, Scored):
            why = (
                "not in the model's ranking (another stages / GROUP_M of the tile ranks instead)"
                if same_warps
                else "the model scores the tile with its own warp split"
            )
            return Candidate(label, params, src, None, x.tflops, why)
        return Candidate(label, params, src, None, None, x.reason)
