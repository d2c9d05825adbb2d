"""smemtile inside Triton's autotuner: model first, measure second.

    import triton, smemtile.triton

    @triton.autotune(configs=my_configs, key=["M", "N", "K"],
                     prune_configs_by={"early_config_prune": smemtile.triton.prune})
    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, ...): ...

``prune(configs, named_args, **kwargs)`` runs before anything compiles (compilation is most of autotuning's
time). For the call's M, N, K and the element type of its first tensor argument it

  1. drops a configuration whose shared memory cannot fit:
        smem = (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * elem_bytes * num_stages  >  the arch's opt-in limit
     (232448 bytes on sm_90: ``smemtile archs``), or whose registers cannot (fp32 accumulators of the warp tile
     plus fragments over 255 per thread, or no block fits an SM: smemtile.model.gemm_model);
  2. ranks the rest by the tile model's predicted time for tensor-core tiles as Triton runs them (roofline x the
     efficiency the standard Triton matmul measured on the H200 per tile, BLOCK_K bytes, stages and warps,
     model/data/triton_h200.json; BLOCK_M / BLOCK_N padding waste is in that time: the grid is ceil(M/BM) x
     ceil(N/BN) whole tiles) x three terms of the shape, fitted on the same measurements
     (smemtile.model.gemm_fit says why each exists):
       - wave: the model's whole-wave quantisation is softened (a partly filled last wave runs faster);
       - epilogue: with one block per SM a block's pipeline fill and C store are exposed, ~ 2048 / K;
       - unaligned: N or K not a multiple of 16 (Triton's divisibility specialisation) makes the tutorial kernel
         load that operand one element at a time; the time then follows the scalar loads per thread per k step
         (fewer is faster), their reuse (a larger BLOCK_M for an unaligned N) and the warps.
     A BLOCK_K that does not divide K is not penalised beyond its padded last step: the kernel masks its K loads in
     every iteration anyway (measured: 2 %, within the noise);
  3. keeps the best ``k`` (default 8), best first; ``pruner(k=4)`` makes a prune with another k.

Configurations are ``triton.Config`` objects (``kwargs`` with BLOCK_SIZE_M/N/K or BLOCK_M/N/K, GROUP_SIZE_M;
``num_warps``, ``num_stages``) or plain dicts of the same keys, returned as given. ``configs(M, N, K, dtype)``
builds a ranked search space from the tile model's candidates (``configs_as_dicts`` without Triton installed).
fp32 inputs are ranked as tf32 (what ``tl.dot`` does with them by default). Triton is imported only by
``configs``; nothing here imports CUDA.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable
from typing import Any

from smemtile.errors import SpecError

DEFAULT_K = 8

# the names a configuration may use for each knob (Triton's tutorial uses BLOCK_SIZE_*)
_KEYS = {
    "bm": ("BLOCK_SIZE_M", "BLOCK_M"),
    "bn": ("BLOCK_SIZE_N", "BLOCK_N"),
    "bk": ("BLOCK_SIZE_K", "BLOCK_K"),
    "group": ("GROUP_SIZE_M", "GROUP_M"),
}
_TORCH_DTYPES = {
    "bfloat16": "bf16",
    "float16": "f16",
    "half": "f16",
    "float32": "tf32",
    "float": "tf32",
    "float8_e4m3fn": "f8e4m3",
    "float8_e5m2": "f8e5m2",
    "int8": "i8",
}
_DTYPES = {
    "bf16": "bf16",
    "f16": "f16",
    "fp16": "f16",
    "f32": "tf32",
    "fp32": "tf32",
    "tf32": "tf32",
    "f8e4m3": "f8e4m3",
    "f8e5m2": "f8e5m2",
    "i8": "i8",
    "bfloat16": "bf16",
    "float16": "f16",
    "float32": "tf32",
}

TRITON_MISSING = (
    "smemtile.triton.configs needs Triton: pip install 'smemtile[triton]' (configs_as_dicts works without it)"
)


# ---- reading configurations ---------------------------------------------------------------------------------------
def knobs(config: Any) -> dict:
    """``{"bm", "bn", "bk", "group", "warps", "stages"}`` of a triton.Config or a dict (SpecError naming the key
    when one is missing)."""
    if isinstance(config, dict):
        kw, warps, stages = config, config.get("num_warps", 4), config.get("num_stages", 3)
    else:
        kw = getattr(config, "kwargs", None)
        if not isinstance(kw, dict):
            raise SpecError(f"expected a triton.Config or a dict, got {type(config).__name__}", key="configs")
        warps, stages = getattr(config, "num_warps", 4), getattr(config, "num_stages", 3)
    out = {}
    for knob, names in _KEYS.items():
        v = next((kw[n] for n in names if n in kw), None)
        if v is None and knob == "group":
            v = 1
        if v is None:
            raise SpecError(f"a configuration has no {names[0]} (or {names[1]}): {dict(kw)}", key="configs")
        out[knob] = int(v)
    out["warps"], out["stages"] = int(warps or 4), int(stages or 1)
    return out


def smem_bytes(k: dict, elem: int) -> int:
    """(BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * elem * num_stages: the operand ring of the tutorial kernel."""
    return (k["bm"] * k["bk"] + k["bk"] * k["bn"]) * elem * k["stages"]


def model_dtype(dtype: Any) -> str:
    """The tile model's dtype for a string (``"bf16"``, ``"f16"``, ``"f32"``) or a torch / triton dtype."""
    text = str(dtype).lower().rsplit(".", 1)[-1]
    if text in _DTYPES:
        return _DTYPES[text]
    if text in _TORCH_DTYPES:
        return _TORCH_DTYPES[text]
    raise SpecError(
        f"unknown dtype {dtype!r}; choose one of bf16, f16, f32 (ranked as tf32), f8e4m3, f8e5m2, i8",
        key="dtype",
    )


# ---- the ranking --------------------------------------------------------------------------------------------------
def rank(configs: Iterable[Any], M: int, N: int, K: int, dtype: Any, arch: str = "sm_90") -> list[dict]:
    """Every configuration with the model's verdict, kept ones best first, then the dropped ones:
    ``{"config", "knobs", "kept", "reason", "smem_bytes", "predicted_tflops", "model_tflops", "k_divides",
    "scalar_loads", "terms", "pad_eff", "score"}``. ``predicted_tflops`` is ``model_tflops`` (the tile model's) x
    the shape terms, ``terms`` their factors ``{"wave", "epilogue", "unaligned"}``; ``scalar_loads``: elements
    each thread loads one at a time per k step (0 when N and K are multiples of 16). A configuration the model cannot score (e.g. a tile that does not split over its warps
    in mma shapes) is kept after the scored ones, in the given order."""
    from smemtile.model.arch import get_arch
    from smemtile.model.gemm_fit import correction, shape_features
    from smemtile.model.gemm_model import evaluate, load_calibration
    from smemtile.model.gemm_tiles import TileConfig, make_problem

    dt = model_dtype(dtype)
    p = make_problem(M, N, K, dt, arch)
    limit = get_arch(p.arch).smem_optin_per_block
    terms = load_calibration("triton_h200.json")["triton_terms"] if p.vendor == "nvidia" else None
    rows, cfgs = [], []
    for i, c in enumerate(configs):
        kn = knobs(c)
        row = {
            "index": i,
            "config": c,
            "knobs": kn,
            "smem_bytes": smem_bytes(kn, p.elem),
            "kept": True,
            "reason": "",
            "predicted_tflops": None,
            "model_tflops": None,
            "k_divides": p.k % kn["bk"] == 0,
            "scalar_loads": None,
            "terms": None,
            "pad_eff": None,
            "score": 0.0,
        }
        if row["smem_bytes"] > limit:
            row.update(
                kept=False,
                reason=f"out of resource: shared memory, required {row['smem_bytes']}, limit "
                f"{limit} on {p.arch}; reduce BLOCK_K or num_stages",
            )
        else:
            cfgs.append(
                (row, TileConfig(kn["bm"], kn["bn"], kn["bk"], kn["warps"], kn["stages"], kn["group"]))
            )
        rows.append(row)
    scored, rejected = evaluate(p, [t for _, t in cfgs], prune_padding=False)
    by_cfg: dict = {}
    for s in scored:
        by_cfg.setdefault(s.cfg, s)
    why: dict = {}
    for r in rejected:
        why.setdefault(r.cfg, r)
    for row, t in cfgs:
        s = by_cfg.get(t)
        if s is not None:
            f = shape_features(p.m, p.n, p.k, t.bm, t.bn, t.bk, t.warps, s.blocks_per_sm, s.wave_eff)
            row["scalar_loads"] = f["scalar_loads"]
            row["terms"] = _term_factors(terms, f)
            row["model_tflops"] = s.tflops
            row["predicted_tflops"] = s.tflops * (math.exp(correction(terms, f)) if terms else 1.0)
            row["pad_eff"] = s.pad_eff
            row["score"] = row["predicted_tflops"]
            continue
        r = why.get(t)
        if r is not None and r.kind in ("registers", "occupancy", "shared_memory"):
            row.update(kept=False, reason=r.reason)
        else:
            row["reason"] = (
                f"not scored by the model ({r.reason if r is not None else 'no score'}); kept last"
            )
    kept = sorted((r for r in rows if r["kept"]), key=lambda r: (-r["score"], r["index"]))
    return kept + [r for r in rows if not r["kept"]]


def _term_factors(terms: dict | None, f: dict) -> dict:
    """Each shape term's factor on the predicted throughput (1.0: no effect)."""
    if not terms:
        return {"wave": 1.0, "epilogue": 1.0, "unaligned": 1.0}
    from smemtile.model.gemm_fit import correction

    no = {"wave_exponent": 0.0, "exposed_epilogue": 0.0}
    return {
        "wave": math.exp(terms["wave_exponent"] * f["wave"]),
        "epilogue": math.exp(terms["exposed_epilogue"] * f["epilogue"]),
        "unaligned": math.exp(correction({**no, "unaligned": terms.get("unaligned")}, f)),
    }


def _problem_from_args(named_args: dict, names: tuple[str, str, str]) -> tuple[int, int, int]:
    out = []
    for n in names:
        v = named_args.get(n)
        if v is None:
            raise SpecError(
                f"the kernel call has no argument {n!r}; name the kernel's M, N, K arguments with "
                f"smemtile.triton.pruner(M=..., N=..., K=...)",
                key="named_args",
            )
        out.append(int(v))
    return out[0], out[1], out[2]


def _dtype_from_args(named_args: dict) -> str:
    for v in named_args.values():
        dt = getattr(v, "dtype", None)
        if dt is not None and not isinstance(v, (int, float)):
            return model_dtype(dt)
    raise SpecError(
        "no tensor argument to read the element type from; pass smemtile.triton.pruner(dtype=...)",
        key="named_args",
    )


def _device_arch() -> str:
    """The arch of the GPU torch would use (only when torch is already imported), else sm_90."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}"
    except Exception:
        pass
    return "sm_90"


def pruner(
    k: int = DEFAULT_K,
    *,
    arch: str | None = None,
    dtype: Any = None,
    M: str = "M",
    N: str = "N",
    K: str = "K",
) -> Callable:
    """An ``early_config_prune`` that keeps the model's best ``k``. ``arch``: the target (default: torch's
    current GPU, else sm_90); ``dtype``: the element type (default: the first tensor argument's); ``M``/``N``/``K``:
    the kernel's argument names for the problem size."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise SpecError(f"k must be a positive integer, got {k!r}", key="k")

    def early_config_prune(configs, named_args, **kwargs):
        args = {**(named_args or {}), **kwargs}
        m, n, kk = _problem_from_args(args, (M, N, K))
        dt = dtype if dtype is not None else _dtype_from_args(args)
        rows = rank(configs, m, n, kk, dt, arch or _device_arch())
        return [r["config"] for r in rows if r["kept"]][:k]

    early_config_prune.k = k  # type: ignore[attr-defined]
    return early_config_prune


prune = pruner(DEFAULT_K)
prune.__doc__ = """``early_config_prune(configs, named_args, **kwargs)`` for ``@triton.autotune``: drops the
configurations that cannot fit (shared memory, registers) and keeps the model's best 8, best first."""


# ---- building a search space --------------------------------------------------------------------------------------
def configs_as_dicts(
    M: int, N: int, K: int, dtype: Any = "bf16", arch: str = "sm_90", top: int = 8
) -> list[dict]:
    """The tile model's best ``top`` Triton configurations for the tutorial matmul, best first, as dicts
    ``{"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages"}``; every
    candidate of ``smemtile tiles M N K --format triton`` (no split K: the tutorial kernel has none) with each
    tile's stages and warps, ranked as ``prune`` ranks (the shape terms included)."""
    from smemtile.model.gemm_tiles import candidates, make_problem

    if not isinstance(top, int) or top < 1:
        raise SpecError(f"top must be a positive integer, got {top!r}", key="top")
    dt = model_dtype(dtype)
    p = make_problem(M, N, K, dt, arch)
    space, seen = [], set()
    for c in candidates(p):
        key = (c.bm, c.bn, c.bk, c.warps, c.stages, c.group_m)
        if c.split_k > 1 or key in seen or c.bm * c.bn > 256 * 256 or _overhangs(p, c):
            continue
        seen.add(key)
        space.append(
            {
                "BLOCK_SIZE_M": c.bm,
                "BLOCK_SIZE_N": c.bn,
                "BLOCK_SIZE_K": c.bk,
                "GROUP_SIZE_M": c.group_m,
                "num_warps": c.warps,
                "num_stages": c.stages,
            }
        )
    rows = [r for r in rank(space, p.m, p.n, p.k, dt, p.arch) if r["kept"] and r["predicted_tflops"]]
    return [dict(r["config"]) for r in rows[:top]]


def _overhangs(p, c) -> bool:
    """A tile more than half padding along M or N when a smaller one exists (the tile model's padding rule)."""
    for size, tile in ((p.m, c.bm), (p.n, c.bn)):
        if tile > 16 and 1.0 - size / (math.ceil(size / tile) * tile) > 0.5:
            return True
    return False


def configs(M: int, N: int, K: int, dtype: Any = "bf16", arch: str = "sm_90", top: int = 8) -> list:
    """``configs_as_dicts`` as ``triton.Config`` objects for ``@triton.autotune(configs=...)`` (ImportError with
    the install line when Triton is missing)."""
    try:
        import triton
    except ImportError:
        raise ImportError(TRITON_MISSING) from None
    out = []
    for d in configs_as_dicts(M, N, K, dtype, arch, top):
        kw = {k: v for k, v in d.items() if k not in ("num_warps", "num_stages")}
        out.append(triton.Config(kw, num_warps=d["num_warps"], num_stages=d["num_stages"]))
    return out
