"""``smemtile tune``'s sweep: compile, check and time each candidate on the GPU, cached on disk and resumable.

    runner = GpuRunner(device=0)                       # NoDevice (exit 3) without a GPU
    cache = ResultCache(default_cache_path())
    rows = sweep(doc, source, family, candidates, runner, cache, progress=callback)
    summary = summarize(rows)

The cache is a JSON-lines file; each line is one measured (or deterministically failed) configuration under a
key that hashes everything that can change the result: the kernel source and headers, the name expression
(template parameters and layouts), the problem, the device and its arch, the driver and NVRTC versions, the
timing settings and the seed. A line is appended and flushed as soon as a configuration is done, so an
interrupted sweep resumes where it stopped. Failures that may be transient (a launch error) are recorded in the
sweep but not cached; compile errors, contract violations and wrong results are cached as skipped.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from smemtile.cache import ResultCache, default_cache_path  # noqa: F401 (the sweep's cache, re-exported)
from smemtile.errors import CompileError, SmemtileError, SpecError
from smemtile.model.tiling_plan import Candidate, respec

TIMING = {"warmup_s": 0.1, "target_s": 0.4, "min_runs": 10, "max_runs": 300}
SPILL_LIMIT = 64  # bytes of local memory per thread above which a lower MIN_BLOCKS is tried (sgemm)
SCHEMA = 1


def source_hash(family: str) -> str:
    from smemtile.codegen import FAMILIES
    from smemtile.codegen.render import kernel_source

    src, headers = kernel_source(family)
    h = hashlib.sha256(src.encode())
    for name in sorted(headers):
        h.update(name.encode() + headers[name].encode())
    h.update(FAMILIES[family].file.encode())
    return h.hexdigest()[:16]


def cache_key(cfg, env: dict, seed: int) -> str:
    from smemtile.codegen import FAMILIES

    doc = {"schema": SCHEMA, "source": source_hash(cfg.family), "expr": FAMILIES[cfg.family].name_expression(cfg),
           "problem": cfg.problem, "arch": cfg.arch.name, "env": env, "timing": TIMING, "seed": seed}  # fmt: skip
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


class GpuRunner:
    """Compiles for the device's arch, checks against the family's reference, times with CUDA events."""

    def __init__(self, device: int = 0, seed: int = 1234):
        from smemtile.gpu.run import open_device
        from smemtile.model.arch import get_arch

        self.dev = open_device(device)
        self.arch = get_arch(self.dev.arch_name)
        self.seed = seed
        self._data: dict[str, tuple] = {}
        self.env = self._environment()

    def _environment(self) -> dict:
        from smemtile import __version__
        from smemtile.gpu.nvrtc import nvrtc_version
        from smemtile.gpu.run import _driver

        err, ver = _driver().cuDriverGetVersion()
        return {"device": self.dev.name, "cc": f"{self.dev.cc[0]}.{self.dev.cc[1]}", "sms": self.dev.sm_count,
                "driver": int(ver) if int(err) == 0 else None, "nvrtc": nvrtc_version(), "smemtile": __version__}  # fmt: skip

    def _inputs(self, cfg) -> tuple[dict, Any]:
        import numpy as np

        from smemtile.codegen import FAMILIES

        key = json.dumps(cfg.problem, sort_keys=True, default=str)
        if key not in self._data:
            fam = FAMILIES[cfg.family]
            inputs = fam.make_inputs(cfg.problem, np.random.default_rng(self.seed))
            self._data = {
                key: (inputs, fam.reference(cfg.problem, inputs))
            }  # one problem at a time in memory
        return self._data[key]

    def measure(self, cfg) -> dict:
        from smemtile.codegen import configure
        from smemtile.gpu.run import LoadedKernel

        inputs, reference = self._inputs(cfg)
        k = LoadedKernel(cfg, self.dev)
        lowered = None
        # The model's MIN_BLOCKS (a __launch_bounds__ register cap) can make ptxas spill; step it down until
        # the kernel keeps its registers (the driver's local-memory size tells, also when NVRTC's log is empty).
        while cfg.family == "sgemm" and k.local_bytes > SPILL_LIMIT and cfg.params["MIN_BLOCKS"] > 1:
            spilled = k.local_bytes
            k.close()
            params = {**cfg.params, **cfg.problem, "MIN_BLOCKS": cfg.params["MIN_BLOCKS"] - 1}
            cfg = configure(cfg.family, params, cfg.layouts, cfg.arch)
            lowered = f"MIN_BLOCKS lowered to {cfg.params['MIN_BLOCKS']} ({spilled} B of local memory before)"
            k = LoadedKernel(cfg, self.dev)
        try:
            row = {"min_blocks_note": lowered, "name_expression_run": k.expr, "registers": k.registers, "spill_bytes": k.local_bytes, "static_smem": k.static_smem,
                   "dynamic_smem": k.shape.dynamic_smem_bytes, "blocks_per_sm": k.driver_blocks,
                   "threads": k.threads}  # fmt: skip
            chk = k.check(dict(inputs), reference)
            row.update(correct=chk.correct, max_rel_error=chk.max_rel_error)
            if not chk.correct:
                return {**row, "status": "skipped", "cacheable": True,
                        "reason": f"wrong result: {chk.mismatch.describe() if chk.mismatch else 'mismatch'}"}  # fmt: skip
            t = k.time(**TIMING)
            unit, value = k.fam.elapsed_metric(cfg.problem, t.median_ms / 1e3)
            return {**row, "status": "ok", "time_ms": t.median_ms, "min_ms": t.min_ms, "max_ms": t.max_ms,
                    "runs": t.runs, "unit": unit, "value": value}  # fmt: skip
        finally:
            k.close()


def config_for(doc: dict, source: str, family: str, cand: Candidate, arch):
    """The KernelConfig of ``cand`` for ``arch``: the spec's fix search picks the layouts; when the spec's own
    accesses do not fit the new tile, the layouts recommended for the spec's own configuration are kept."""
    from smemtile.codegen import configure, from_spec
    from smemtile.model.spec import spec_from_dict

    try:
        cfg = from_spec(spec_from_dict(respec(doc, family, cand.params), source), "fixed")
    except SpecError:
        base = from_spec(spec_from_dict(doc, source), "fixed", check=False)
        cfg = configure(family, {**base.params, **cand.params, **base.problem}, base.layouts, base.arch)
    return configure(family, {**cfg.params, **cfg.problem}, cfg.layouts, arch, check=True)


def sweep(doc: dict, source: str, family: str, cands: list[Candidate], runner, cache: ResultCache, *,
          force: bool = False, progress: Callable[[dict], None] | None = None) -> list[dict]:  # fmt: skip
    """Measure every candidate (or take it from the cache); a failing one is a skipped row, never an abort."""
    from smemtile.codegen import FAMILIES

    rows = []
    for cand in cands:
        row: dict[str, Any] = {"label": cand.label, "params": cand.params, "source": cand.source,
                               "model_rank": cand.model_rank, "predicted": cand.predicted,
                               "model_reason": cand.model_reason}  # fmt: skip
        try:
            cfg = config_for(doc, source, family, cand, runner.arch)
        except SmemtileError as e:
            rows.append(
                {**row, "status": "skipped", "reason": f"configuration refused: {e}", "cached": False}
            )
            progress and progress(rows[-1])
            continue
        row["name_expression"] = FAMILIES[family].name_expression(cfg)
        row["layouts"] = {k: v.to_dict() for k, v in cfg.layouts.items()}
        key = cache_key(cfg, runner.env, runner.seed)
        hit = None if force else cache.get(key)
        if hit is not None:
            rows.append({**row, **hit, "cached": True})
        else:
            try:
                m = runner.measure(cfg)
            except CompileError as e:
                m = {
                    "status": "skipped",
                    "reason": f"compile error: {str(e).splitlines()[0]}",
                    "cacheable": True,
                }
            except Exception as e:  # a launch or driver failure: record, do not cache, carry on
                m = {"status": "skipped", "reason": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                     "cacheable": False}  # fmt: skip
            if m.pop("cacheable", True):
                cache.put(key, m)
            rows.append({**row, **m, "cached": False})
        progress and progress(rows[-1])
    return rows


def summarize(rows: list[dict]) -> dict:
    """Best configuration, measured vs model ranking (Spearman), where the model's top-1 landed."""
    from smemtile.model.tiling_model import spearman

    ok = sorted((r for r in rows if r.get("status") == "ok"), key=lambda r: r["time_ms"])
    for i, r in enumerate(ok):
        r["measured_rank"] = i + 1
    out: dict[str, Any] = {"measured": len(ok), "skipped": sum(r.get("status") != "ok" for r in rows),
                           "best": ok[0] if ok else None}  # fmt: skip
    scored = [r for r in ok if r.get("predicted") is not None]
    out["rank_correlation"] = spearman([r["predicted"] for r in scored], [-r["time_ms"] for r in scored]) if len(
        scored) >= 3 else None  # fmt: skip
    out["rank_correlation_n"] = len(scored)
    ranked = [r for r in ok if r.get("model_rank") is not None]
    if ok and ranked:
        top1 = min(ranked, key=lambda r: r["model_rank"])
        gap = top1["time_ms"] / ok[0]["time_ms"] - 1
        out["model_top1"] = {"label": top1["label"], "model_rank": top1["model_rank"],
                             "measured_rank": top1["measured_rank"], "slower_than_best": gap,
                             "within_10pct": gap <= 0.10}  # fmt: skip
    else:
        out["model_top1"] = None
    return out
