"""``smemtile tune``'s device side: the runners that compile, check and time one configuration, the cache key,
and the small functions a worker process runs (one process per GPU when the sweep is spread over a cluster).

    runner = GpuRunner(device=0)                 # NoDevice (exit 3) without a GPU
    compiled = compile_cfg(cfg)                  # NVRTC on any CPU, no device: the compile workers' task
    row = runner.measure(cfg, compiled)          # load, check against the reference, time; never compiles twice

A runner is any object with ``arch``, ``env``, ``seed``, ``measure(cfg, compiled=None)``, ``describe()`` and
``compiler`` (the importable ``module:function`` that compiles a configuration on a CPU, or None when
``measure`` compiles by itself). :class:`SimulatedRunner` is one with no GPU: deterministic times from the
name expression, for the tests and for trying a cluster's wiring (``tune --simulate``).

The cache key hashes everything that changes a time: the generated source, the name expression (template
parameters and layouts), the problem, the arch, the device's name, UUID, compute capability, SM count and
clocks (maximum SM and memory clocks; application clocks and power limit where NVML answers), the driver and
NVRTC versions, the NVRTC options, the timing settings and the seed. Every measured row also records where
and how it was timed: host, device UUID, the SM clock read just after the timed runs, the throttle reasons
NVML gave then, and the spread of the runs ((max - min) / median).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import signal
import socket
import time
from typing import Any

from smemtile.cache import ResultCache, default_cache_path  # noqa: F401 (the sweep's cache, re-exported)
from smemtile.errors import CompileError

TIMING = {"warmup_s": 0.1, "target_s": 0.4, "min_runs": 10, "max_runs": 300}
SPILL_LIMIT = (
    64  # bytes of local memory per thread above which a lower MIN_BLOCKS is tried (a family with MIN_BLOCKS)
)
SCHEMA = 1
# NVML clock-event reasons that mean a slowed device (thermal, hardware slowdown, power brake), not the
# ordinary power cap a busy H200 sits at (SwPowerCap 0x4, left out on purpose).
THROTTLE_BITS = {0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "power_brake"}


def source_hash(cfg) -> str:
    """Hash of exactly what is compiled for ``cfg`` (the generated body: kernel, header, launch plan)."""
    from smemtile.codegen.render import body

    return hashlib.sha256(body(cfg).encode()).hexdigest()[:16]


def cache_key(cfg, env: dict, seed: int, *, source: str | None = None) -> str:
    """The key of ``cfg`` timed on the device ``env`` describes; ``source``: ``source_hash(cfg)`` if known."""
    from smemtile.families import FAMILIES

    doc = {
        "schema": SCHEMA,
        "source": source or source_hash(cfg),
        "expr": FAMILIES[cfg.family].name_expression(cfg),
        "problem": cfg.problem,
        "arch": cfg.arch.name,
        "env": env,
        "timing": TIMING,
        "seed": seed,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def compile_cfg(cfg):
    """NVRTC-compile ``cfg`` (no device needed); the result travels to the GPU worker that times it."""
    from smemtile.gpu.run import compile_config

    return compile_config(cfg)


def _adopt(cfg, compiled) -> None:
    """Make a cubin compiled elsewhere (another process or host) the NVRTC disk cache's answer for ``cfg``, so
    loading it here compiles nothing. Only a result of this very NVRTC version is adopted (the cache key names
    it); with the compile cache off (SMEMTILE_COMPILE_CACHE=0) the kernel is compiled here again."""
    from smemtile.codegen.render import body
    from smemtile.families import FAMILIES
    from smemtile.gpu import nvrtc

    if compiled is None or compiled.nvrtc_version != nvrtc.nvrtc_version() or nvrtc.cache_dir() is None:
        return
    # the arguments smemtile.gpu.run.compile_config passes, so the key is the one it will look up
    key = nvrtc._cache_key(body(cfg), [FAMILIES[cfg.family].name_expression(cfg)], cfg.arch.name, None, ())
    if nvrtc._cache_get(key) is None:
        nvrtc._cache_put(key, compiled)


def _driver_version() -> int | None:
    """The CUDA driver's version as cuDriverGetVersion gives it (1000 x major + 10 x minor, e.g. 13000)."""
    try:
        from cuda.core import system

        major, minor = system.get_user_mode_driver_version()[:2]
        return 1000 * int(major) + 10 * int(minor)
    except Exception:  # cuda.core without cuda.core.system's driver version (before 1.2)
        from smemtile.gpu.run import _driver

        err, ver = _driver().cuDriverGetVersion()  # cuda.core lacks: the driver version (older releases)
        return int(ver) if int(err) == 0 else None


class GpuRunner:
    """Compiles for the device's arch, checks against the family's reference, times with CUDA events."""

    compiler = "smemtile.gpu.tune:compile_cfg"

    def __init__(self, device: int = 0, seed: int = 1234):
        from smemtile.gpu.run import open_device
        from smemtile.model.arch import get_arch

        self.dev = open_device(device)
        self.arch = get_arch(self.dev.arch_name)
        self.seed = seed
        self._data: dict[str, tuple] = {}
        self.uuid = self._uuid()
        self._nvml = _Nvml(self.uuid)
        self.env = self._environment()

    def _uuid(self) -> str | None:
        """``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` (as nvidia-smi writes it) from cuda.core's Device.uuid."""
        try:
            text = str(self.dev.core.uuid).lower()
        except Exception:  # an older cuda.core, or no answer
            return None
        h = re.sub(r"[^0-9a-f]", "", text.removeprefix("gpu-"))
        if len(h) != 32:
            return None
        return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"

    def _environment(self) -> dict:
        from smemtile import __version__
        from smemtile.gpu.nvrtc import DEFAULT_OPTIONS, nvrtc_version

        return {
            "device": self.dev.name,
            "uuid": self.uuid,
            "cc": f"{self.dev.cc[0]}.{self.dev.cc[1]}",
            "sms": self.dev.sm_count,
            "clock_khz": self.dev.clock_khz,
            "mem_clock_khz": self.dev.mem_clock_khz,
            **self._nvml.settings(),
            "driver": _driver_version(),
            "nvrtc": nvrtc_version(),
            "nvrtc_options": list(DEFAULT_OPTIONS),
            "smemtile": __version__,
        }

    def describe(self) -> dict:
        """Who times here: host, process, the device (as ``Device.to_dict`` plus its UUID) and the key's env."""
        return {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "uuid": self.uuid,
            "arch": self.arch.name,
            "device": {**self.dev.to_dict(), "uuid": self.uuid},
            "env": self.env,
        }

    def _bind(self) -> None:
        """Make the device's context current on this thread (a pool may run the next task on another one)."""
        self.dev.set_current()

    def healthy(self) -> bool:
        """False once the context is broken (a sticky error such as an illegal address): restart the process."""
        try:
            self._bind()
            self.dev.synchronize()
            return True
        except Exception:
            return False

    def _inputs(self, cfg) -> tuple[dict, Any]:
        """The inputs of ``cfg`` and the reference output. The inputs are made again for every configuration
        (a family may derive some from its parameters), but the float64 reference, the expensive part (a
        4096^3 SGEMM is 137 GFLOP on the CPU), is reused while the inputs are equal: ``Family.reference`` is a
        function of the problem and the inputs."""
        import numpy as np

        from smemtile.families import FAMILIES

        fam = FAMILIES[cfg.family]
        key = json.dumps([cfg.family, cfg.problem], sort_keys=True, default=str)
        inputs = fam.make_inputs(cfg, np.random.default_rng(self.seed))
        held = self._data.get(key)
        same = held is not None and held[0].keys() == inputs.keys()
        if same:
            same = all(
                a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)
                for a, b in ((inputs[n], held[0][n]) for n in inputs)
            )
        if not same:
            self._data = {key: (inputs, fam.reference(cfg, inputs))}  # one problem at a time in memory
        return self._data[key]

    def measure(self, cfg, compiled=None) -> dict:
        from smemtile.gpu.run import LoadedKernel

        t_start = time.perf_counter()
        self._bind()
        _adopt(cfg, compiled)
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
            row = {
                "min_blocks_note": lowered,
                "name_expression_run": k.expr,
                "registers": k.registers,
                "spill_bytes": k.local_bytes,
                "static_smem": k.static_smem,
                "dynamic_smem": k.shape.dynamic_smem_bytes,
                "blocks_per_sm": k.driver_blocks,
                "threads": k.threads,
                "host": socket.gethostname(),
                "device_uuid": self.uuid,
            }
            chk = k.check(dict(inputs), reference)
            row.update(correct=chk.correct, max_rel_error=chk.max_rel_error)
            if not chk.correct:
                return {
                    **row,
                    "status": "skipped",
                    "cacheable": True,
                    "reason": f"wrong result: {chk.mismatch.describe() if chk.mismatch else 'mismatch'}",
                }
            t = k.time(**TIMING)
            sm_mhz, throttle = self._nvml.now()  # right after the timed runs, while the clocks still tell
            unit, amount = k.fam.work(cfg.problem)
            value = amount / (t.median_ms / 1e3) / (1e12 if unit == "tflops" else 1e9)
            return {
                **row,
                "status": "ok",
                "time_ms": t.median_ms,
                "min_ms": t.min_ms,
                "max_ms": t.max_ms,
                "spread": (t.max_ms - t.min_ms) / t.median_ms,
                "runs": t.runs,
                "unit": unit,
                "value": value,
                "sm_clock_mhz": sm_mhz,
                "throttle": throttle,
                "measure_s": time.perf_counter() - t_start,
            }
        finally:
            k.close()


class _Nvml:
    """The SM clock and throttle reasons of one device through NVML (nvidia-ml-py), found by UUID since
    CUDA_VISIBLE_DEVICES renumbers CUDA's devices but not NVML's. Everything is None without NVML."""

    def __init__(self, uuid: str | None):
        self.nv = self.handle = None
        if uuid is None:
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self.handle = pynvml.nvmlDeviceGetHandleByUUID(uuid.encode())
            self.nv = pynvml
        except Exception:  # no nvidia-ml-py, no NVML library, or a device NVML does not know
            self.nv = self.handle = None

    def _call(self, name: str, *args):
        try:
            return getattr(self.nv, name)(self.handle, *args)
        except Exception:
            return None

    def settings(self) -> dict:
        """What the operator set that changes times: application clocks and the power limit."""
        if self.nv is None:
            return {}
        power = self._call("nvmlDeviceGetPowerManagementLimit")
        return {
            "app_sm_clock_mhz": self._call("nvmlDeviceGetApplicationsClock", self.nv.NVML_CLOCK_SM),
            "power_limit_w": power / 1000 if power else None,
        }

    def now(self) -> tuple[int | None, list[str] | None]:
        if self.nv is None:
            return None, None
        sm = self._call("nvmlDeviceGetClockInfo", self.nv.NVML_CLOCK_SM)
        bits = self._call("nvmlDeviceGetCurrentClocksEventReasons")
        if bits is None:
            bits = self._call("nvmlDeviceGetCurrentClocksThrottleReasons")
        reasons = None if bits is None else [name for bit, name in THROTTLE_BITS.items() if bits & bit]
        return sm, reasons


class SimulatedRunner:
    """A device that times nothing: each configuration's time is a deterministic function of its name
    expression and problem, optionally after sleeping ``delay_s`` (a stand-in for the timed runs).

    The device is the worker's CUDA_VISIBLE_DEVICES entry (``SIM-<n>``). ``throttled`` lists such entries
    that report a 30% lower SM clock and 1.3x the time, as a hot device would. Fault injection: with
    ``crash_marker`` (a file path) the first worker of device ``1`` to time something while that file does not
    exist creates it and kills its own process (SIGKILL) mid-timing, as a crashed worker would die."""

    compiler = "smemtile.gpu.tune:simulated_compile"

    def __init__(
        self,
        device: int = 0,
        seed: int = 1234,
        *,
        delay_s: float = 0.0,
        throttled: tuple[str, ...] = (),
        crash_marker: str | None = None,
    ):
        from smemtile.model.arch import get_arch

        visible = os.environ.get("CUDA_VISIBLE_DEVICES", str(device)).split(",")[0] or str(device)
        self.uuid = f"SIM-{visible}"
        self.arch = get_arch("sm_90")
        self.seed = seed
        self.delay_s = float(delay_s)
        self.hot = visible in {str(x) for x in throttled}
        self.crash_marker = crash_marker if visible == "1" else None
        self.env = {"device": "SIMULATED", "uuid": self.uuid, "driver": 0, "nvrtc": "none", "smemtile-sim": 1}

    def describe(self) -> dict:
        dev = {"index": 0, "name": "SIMULATED", "arch": "sm_90", "sm_count": 132, "uuid": self.uuid}
        return {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "uuid": self.uuid,
            "arch": "sm_90",
            "device": dev,
            "env": self.env,
        }

    def healthy(self) -> bool:
        return True

    def measure(self, cfg, compiled=None) -> dict:
        from smemtile.families import FAMILIES

        if self.crash_marker and not os.path.exists(self.crash_marker):
            open(self.crash_marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        if self.delay_s:
            time.sleep(self.delay_s)
        fam = FAMILIES[cfg.family]
        expr = fam.name_expression(cfg)
        h = int(hashlib.sha256(json.dumps([expr, cfg.problem], default=str).encode()).hexdigest()[:8], 16)
        t = 0.1 + (h % 10_000) / 1000 * (1.3 if self.hot else 1.0)
        unit, amount = fam.work(cfg.problem)
        value = amount / (t / 1e3) / (1e12 if unit == "tflops" else 1e9)
        return {
            "status": "ok",
            "time_ms": t,
            "min_ms": t * 0.99,
            "max_ms": t * 1.02,
            "spread": 0.03,
            "runs": 10,
            "unit": unit,
            "value": value,
            "registers": 64,
            "spill_bytes": 0,
            "host": socket.gethostname(),
            "device_uuid": self.uuid,
            "sm_clock_mhz": 1386 if self.hot else 1980,
            "throttle": None,
            "name_expression_run": expr,
        }


def simulated_compile(cfg, delay_s: float = 0.0):
    """What :class:`SimulatedRunner` compiles: nothing (after ``delay_s``)."""
    if delay_s:
        time.sleep(delay_s)
    return None


# ---- what a worker process runs (one runner per process, kept between tasks) --------------------------------

_RUNNERS: dict[str, Any] = {}


def load_object(spec: str):
    """``module:attr`` -> the object (a runner class or a compile function)."""
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


def worker_runner(spec: str, seed: int, options: dict | None = None):
    """This process's runner for ``spec`` (device 0: the worker sees only its own GPU), made once."""
    key = json.dumps([spec, seed, options or {}], sort_keys=True)
    if key not in _RUNNERS:
        _RUNNERS[key] = load_object(spec)(0, seed, **(options or {}))
    return _RUNNERS[key]


def worker_describe(spec: str, seed: int, options: dict | None = None) -> dict:
    return worker_runner(spec, seed, options).describe()


def worker_compile(compiler: str | None, cfg, options: dict | None = None) -> dict:
    """Compile on a CPU worker: ``{"compiled": result, "compile_s": s}`` or ``{"error": first line}``."""
    t0 = time.perf_counter()
    if compiler is None:
        return {"compiled": None, "compile_s": 0.0}
    try:
        out = load_object(compiler)(cfg, **(options or {}))
    except CompileError as e:
        return {"error": f"compile error: {str(e).splitlines()[0]}", "compile_s": time.perf_counter() - t0}
    return {"compiled": out, "compile_s": time.perf_counter() - t0}


def measure_row(runner, cfg, compiled=None) -> dict:
    """``runner.measure`` as a row, never an exception for a fault of the candidate: a compile error is a
    cacheable skip; a launch or driver failure is a skip not cached, with ``broken`` when the context died."""
    try:
        return runner.measure(cfg) if compiled is None else runner.measure(cfg, compiled)
    except CompileError as e:
        return {"status": "skipped", "reason": f"compile error: {str(e).splitlines()[0]}", "cacheable": True}
    except Exception as e:  # a launch or driver failure: record, do not cache, carry on
        first = str(e).splitlines()[0] if str(e) else ""
        return {
            "status": "skipped",
            "reason": f"{type(e).__name__}: {first}",
            "cacheable": False,
            "broken": not getattr(runner, "healthy", lambda: True)(),
        }


def worker_measure(spec: str, seed: int, options: dict | None, cfg, compiled: dict | None) -> dict:
    runner = worker_runner(spec, seed, options)
    return measure_row(runner, cfg, (compiled or {}).get("compiled"))
