"""``smemtile tune``'s GPU side: the runner that compiles, checks and times one configuration, and the cache.

    runner = GpuRunner(device=0)                       # NoDevice (exit 3) without a GPU
    cache = ResultCache(default_cache_path())
    rows = smemtile.pipeline.tune.sweep(doc, source, family, candidates, runner, cache, progress=callback)

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
from typing import Any

from smemtile.cache import ResultCache, default_cache_path  # noqa: F401 (the sweep's cache, re-exported)

TIMING = {"warmup_s": 0.1, "target_s": 0.4, "min_runs": 10, "max_runs": 300}
SPILL_LIMIT = 64  # bytes of local memory per thread above which a lower MIN_BLOCKS is tried (sgemm)
SCHEMA = 1


def source_hash(cfg) -> str:
    """Hash of exactly what is compiled for ``cfg`` (the generated body: kernel, header, launch plan)."""
    from smemtile.codegen.render import body

    return hashlib.sha256(body(cfg).encode()).hexdigest()[:16]


def cache_key(cfg, env: dict, seed: int) -> str:
    from smemtile.families import FAMILIES

    doc = {"schema": SCHEMA, "source": source_hash(cfg), "expr": FAMILIES[cfg.family].name_expression(cfg),
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

        from smemtile.families import FAMILIES

        key = json.dumps([cfg.family, cfg.problem, cfg.params], sort_keys=True, default=str)
        if key not in self._data:
            fam = FAMILIES[cfg.family]
            inputs = fam.make_inputs(cfg, np.random.default_rng(self.seed))
            self._data = {key: (inputs, fam.reference(cfg, inputs))}  # one problem at a time in memory
        return self._data[key]

    def measure(self, cfg) -> dict:
        from smemtile.gpu.run import LoadedKernel

        k = LoadedKernel(cfg, self.dev)
        lowered = None
        # A register cap the model chose can make ptxas spill; take the family's fallbacks while the kernel
        # keeps spilling (the driver's local-memory size tells, also when NVRTC's log is empty).
        while k.local_bytes > SPILL_LIMIT:
            step = k.fam.relax(cfg, k.local_bytes)
            if step is None:
                break
            spilled = k.local_bytes
            k.close()
            cfg, why = step
            lowered = f"{why} ({spilled} B of local memory before)"
            k = LoadedKernel(cfg, self.dev)
        inputs, reference = self._inputs(cfg)
        try:
            row = {"min_blocks_note": lowered, "name_expression_run": k.expr, "registers": k.registers,
                   "spill_bytes": k.local_bytes, "static_smem": k.static_smem,
                   "dynamic_smem": k.shape.dynamic_smem_bytes, "blocks_per_sm": k.driver_blocks,
                   "threads": k.threads}  # fmt: skip
            chk = k.check(dict(inputs), reference)
            row.update(correct=chk.correct, max_rel_error=chk.max_rel_error)
            if not chk.correct:
                return {**row, "status": "skipped", "cacheable": True,
                        "reason": f"wrong result: {chk.mismatch.describe() if chk.mismatch else 'mismatch'}"}  # fmt: skip
            t = k.time(**TIMING)
            unit, amount = k.fam.work(cfg.problem)
            value = amount / (t.median_ms / 1e3) / (1e12 if unit == "tflops" else 1e9)
            return {**row, "status": "ok", "time_ms": t.median_ms, "min_ms": t.min_ms, "max_ms": t.max_ms,
                    "runs": t.runs, "unit": unit, "value": value}  # fmt: skip
        finally:
            k.close()
