"""What every GEMM family shares: C = alpha * A @ B + beta * C over a problem with M, N, K, alpha, beta, a
block tile BM x BN x BK and (where the family has it) SPLIT_K. The families (sgemm, hgemm, wgmma_gemm) derive
from :class:`GemmFamily` and keep only what is theirs."""

from __future__ import annotations

import numpy as np

from smemtile.families.base import Family, KernelConfig


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
