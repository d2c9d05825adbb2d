"""What every GEMM family shares: C = alpha * A @ B + beta * C over a problem with M, N, K, alpha, beta, a
block tile BM x BN x BK and (where the family has it) SPLIT_K. The families (sgemm, hgemm, wgmma_gemm) derive
from :class:`GemmFamily` and keep only what is theirs."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from smemtile.families.base import Family, KernelConfig
from smemtile.families.tile_model import ModelOption, Prediction, Rejection, TieRule
from smemtile.model.gemm_model import MMA_TEXT_HEAD, MMA_TEXT_TAIL


def gemm_reference(
    a: np.ndarray, b: np.ndarray, c: np.ndarray | None, alpha: float, beta: float
) -> np.ndarray:
    """alpha * a @ b + beta * c in float64 (c is not read for beta = 0, as the kernels do not read it)."""
    out = alpha * (np.asarray(a, dtype=np.float64) @ np.asarray(b, dtype=np.float64))
    return out + beta * np.asarray(c, dtype=np.float64) if beta != 0.0 else out


class GemmFamily(Family):
    """Shared behaviour of the GEMM families (each still declares its own parameters, accesses and launch)."""

    def stages(self, p: dict[str, int]) -> int:
        return p["STAGES"]  # every GEMM family pipelines its K tiles through STAGES shared-memory slots

    def split_k(self, cfg: KernelConfig) -> int:
        return int(cfg.params.get("SPLIT_K", 1))

    def k_step(self, cfg: KernelConfig) -> int:
        return int(cfg.params["BK"])

    def reads(self, cfg: KernelConfig, array: str) -> bool:
        if array == "C":  # beta = 0 never reads C (nor does a split-K preparation, which writes zeros)
            return float(cfg.problem["beta"]) != 0.0
        return super().reads(cfg, array)

    def work(self, problem: dict) -> tuple[str, float]:
        return "tflops", 2.0 * problem["M"] * problem["N"] * problem["K"]

    def small_problem(self, cfg: KernelConfig) -> dict:
        """Two block tiles each way and 8 K steps per slice: every lane active, counts exact (ncu)."""
        p = cfg.params
        return {"M": 2 * p["BM"], "N": 2 * p["BN"], "K": 8 * self.k_step(cfg) * self.split_k(cfg)}

    def repeats_per_block(self, cfg: KernelConfig) -> int:
        return -(-int(cfg.problem["K"]) // (self.k_step(cfg) * self.split_k(cfg)))

    # ---- the tile model's view (smemtile tiles M N K, tune) ---------------------------------------------------
    tiles_help: str = ""  # one line for ``tiles --help``: what this family ranks

    def tiles_for(self, dtype: str, arch, vendor: str = "nvidia") -> bool:
        """Whether ``smemtile tiles M N K`` ranks this family's tiles for ``dtype`` on ``arch`` (an Arch) and
        ``vendor``; the default: none."""
        return False

    def tile_problem(self, problem: dict, gpu: str | None) -> dict:
        """The tile model's problem for one of this family's problems (``smemtile tune``, ``generate`` without a
        tile): M, N, K, the dtype, the GPU row."""
        dtype = next((pk.default for pk in self.problem_keys if pk.name == "dtype"), "f32")
        return {**{k: int(problem[k]) for k in "MNK"}, "dtype": str(problem.get("dtype", dtype)), "gpu": gpu}

    def tile_arch(self, arch: str) -> str:
        """The target this family's tiles are ranked for when ``arch`` is asked (the default: ``arch``)."""
        return arch

    def ranker(self, problem: dict, arch: str, gpu: str | None, rank=None):
        """``smemtile tune``'s view of the family's tile model for ``problem``: ``top(k)`` and a Candidate for
        any configuration, ranked by the one ranking loop (``rank``: another loop for tests; default
        :func:`smemtile.families.ranking.rank`)."""
        if self.tile_model is None:
            return None
        from smemtile.families.ranking import rank as loop

        model = self.tile_model(self)
        prob, target = self.tile_problem(problem, gpu), self.tile_arch(arch)
        return model.ranker(model.report((rank or loop)(model, prob, target, None)))

    def tiles_seam(self, problem) -> dict | None:
        """For a GEMM ranking of another family (``problem``: a gemm_tiles.Problem), what this family measured
        one target away (``smemtile tiles`` says it in one line); None: nothing to say."""
        return None


# ---- the tile model of GEMM tiles (the model-only ranking, and the base of the GEMM families' models) -----------
TIE_RULE = (
    "ties (within 0.5% predicted) go to what measured faster on the H200 (sgemm: the tile's measured "
    "speed on the fitting shapes, unmeasured tiles last; mma: the calibrated tile / BK / stages / warps "
    "efficiency), then fewer stages, then less shared memory"
)

MODEL_TEXT = {
    "simt": "calibrated sgemm model (families/sgemm/sgemm_h200.json): per K tile issue cycles x (1 + phi / "
    "(warps per scheduler^q * ILP^r)) vs shared-memory wavefronts, + barrier / blocks, latency floors, waves "
    "of b blocks per SM, register-squeeze penalty, split K's atomics",
    **MMA_TEXT_HEAD,
    "family": "a generating family's own tiles (hgemm): x its measured BK / stages factor, t_sm >= rounds x K "
    "tiles x latency / (stages-1) (L2, or DRAM below the ridge), + split K's atomics; the family's calibration file",
    **MMA_TEXT_TAIL,
}

TEXTS = {
    "kind_amd": "MFMA (wavefront 64), model only",
    "kind": "tensor-core mma tiles (the hgemm family's where it builds them, else as Triton runs them)",
    "ties": TIE_RULE,
    "model": "Model: smemtile/model/gemm_model.py states it (SIMT: the calibrated sgemm model; tensor cores: "
    "roofline x measured Triton efficiency); labels: compute-bound only above the ridge, latency-bound below it "
    "when the SMs still dominate; `--format json` has every factor.",
}


class GemmTileModel:
    """The GEMM tile model (:mod:`smemtile.model.gemm_model`) behind the TileModel protocol: the model-only
    ranking of tensor / matrix-core tiles as Triton runs them (``fam`` None), and the base of a generating
    family's model (its :meth:`rules` screen the tiles; SIMT families bring their own candidates and timing).

    ``problem``: ``M``, ``N``, ``K``, ``dtype`` and optionally ``vendor``, ``gpu``, ``sms`` (the GPU row is
    part of a GEMM problem), ``repack``; the ``gpu`` :func:`~smemtile.pipeline.rank.rank` passes is unused.
    Order: predicted time in 0.5 % buckets, ties by what measured faster, fewer stages, less shared memory,
    the label; one entry per tile shape (its best stages / MIN_BLOCKS)."""

    tie_rule = TieRule(0.005, "bucket", TIE_RULE)
    options: tuple[ModelOption, ...] = ()
    tiles_examples: tuple[
        str, ...
    ] = ()  # ``tiles --help`` lines of a family's own (the CLI has the GEMM ones)

    def __init__(self, fam: GemmFamily | None = None):
        self.fam = fam
        self.p = None
        self._scored: dict = {}

    # ---- what a family changes --------------------------------------------------------------------------
    def rules(self, arch, dims: dict):
        """The family's FamilyRules for this target and problem (None: the model's tiles alone)."""
        return None

    def candidates(self, p) -> Iterable:
        from smemtile.model.gemm_tiles import candidates

        return candidates(p)

    def kind_text(self, p) -> str:
        return TEXTS["kind_amd"] if p.vendor == "amd" else TEXTS["kind"]

    def texts(self, p) -> dict:
        return {"kind": self.kind_text(p), "ties": TIE_RULE, "model": TEXTS["model"]}

    # ---- the TileModel protocol -------------------------------------------------------------------------
    def problem(self, problem: dict, arch: str | None):
        """The validated gemm_tiles.Problem (SpecError, one line, for a bad size, dtype, arch or GPU)."""
        from dataclasses import replace

        from smemtile.errors import SpecError
        from smemtile.model.arch import get_arch
        from smemtile.model.gemm_tiles import make_problem

        m, n, k = (problem[x] for x in "MNK")
        dtype = problem.get("dtype", "f32")
        vendor = problem.get("vendor")
        contract = None
        if (vendor or "nvidia").lower() == "nvidia" and not str(arch or "").startswith("gfx"):
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
                contract = self.rules(a, dims)
        p = make_problem(m, n, k, dtype, arch, vendor, problem.get("gpu"), problem.get("sms"), contract)
        return replace(p, repack=problem.get("repack"))

    def space(self, problem: dict, arch) -> list:
        self.p = self.problem(problem, arch)
        return list(self.candidates(self.p))

    def screen(self, cand) -> Rejection | None:
        return None  # every rule is the model's (the padding rule depends on the problem's other tiles)

    def predict_all(self, cands: list, gpu) -> list:
        from smemtile.model.gemm_model import evaluate_problem
        from smemtile.model.gemm_tiles import Scored, tie_key

        out = []
        for c, x in zip(cands, evaluate_problem(self.p, cands), strict=True):
            self._scored[id(c)] = x  # its cfg carries what the score set (AMD: waves_per_eu)
            if isinstance(x, Scored):
                out.append(Prediction(x.time_s, tie=tie_key(x), result=x))
            else:
                out.append(Rejection(x.kind, x.reason, x))
        return out

    def predict(self, cand, gpu):
        return self.predict_all([cand], gpu)[0]

    def shape_key(self, cand):
        return cand.shape_key()

    def explain(self, entry, top, ranked) -> str:
        from smemtile.model.gemm_model import explain

        return explain(entry.pred.result, top.pred.result, self.p, [e.pred.result for e in ranked])

    def provenance(self) -> dict:
        from smemtile.model.gemm_model import calibration_info

        return calibration_info(self.p)

    def score(self, cfg):
        """One configuration the ranking need not hold (tune's own spec): its Scored, or its Rejected."""
        from smemtile.model.gemm_model import evaluate_each

        return evaluate_each(self.p, [cfg])[0]

    # ---- the report -------------------------------------------------------------------------------------
    def report(self, ranking):
        """The ranking as the GEMM TileReport (renderers and JSON): ranked Scored with their rank and reason,
        the rejected ones one per shape and reason (``alike`` counts the others), sorted by kind."""
        from dataclasses import replace

        from smemtile.model.gemm_tiles import Rejected, TileReport, dedupe

        ranked = [replace(e.pred.result, rank=e.rank, reason=e.reason) for e in ranking.ranked]
        rejected = dedupe([r.rejection.result for r in ranking.rejected])
        dominated: dict[tuple, Rejected] = {}
        for r in ranking.dominated:
            key = r.cand.shape_key()
            if key in dominated:
                dominated[key] = replace(dominated[key], alike=dominated[key].alike + 1)
            else:
                top = r.rejection.result.pred.result
                dominated[key] = Rejected(
                    self._scored[id(r.cand)].cfg,
                    "dominated",
                    f"same tile as {top.cfg.label}, which the model "
                    f"predicts faster or ties and wins by the stated rule",
                )
        rej = sorted(
            rejected + list(dominated.values()),
            key=lambda r: (REJECTION_ORDER.get(r.kind, 9), -r.cfg.bm * r.cfg.bn, r.cfg.label),
        )
        counts = {
            "generated": ranking.counts["generated"],
            "ranked": len(ranked),
            "rejected": sum(r.alike for r in rej),
            "rejected_shapes": len(rej),
        }
        for r in rej:
            counts[f"rejected_{r.kind}"] = counts.get(f"rejected_{r.kind}", 0) + r.alike
        assert counts["generated"] == counts["ranked"] + counts["rejected"], counts
        return TileReport(
            self.p,
            tuple(ranked),
            tuple(rej),
            counts,
            dict(ranking.provenance),
            family=self.fam.name if self.fam is not None else None,
            model_text=MODEL_TEXT,
            texts=self.texts(self.p),
        )

    def configure(self, entry) -> KernelConfig:
        """The family's KernelConfig of a ranked entry (a Ranked, or its Scored)."""
        raise NotImplementedError(f"{type(self).__name__}: the model-only ranking generates no kernel")

    def ranker(self, report):
        """``smemtile tune``'s view of the ranking (the generating families')."""
        raise NotImplementedError(f"{type(self).__name__}: the model-only ranking has no tune view")


REJECTION_ORDER = {
    "shared_memory": 0,
    "registers": 1,
    "occupancy": 2,
    "contract": 3,
    "mma_shape": 4,
    "padding": 5,
    "stages": 6,
    "dominated": 7,
}
