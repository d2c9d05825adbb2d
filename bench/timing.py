"""What the GPU benchmarks share: ours and the reference timed in alternating rounds (order reversed every
round, so a drifting power-capped clock hits both alike), a 512 MiB write before every timed call (outside the
CUDA events, so L2 starts cold), and the summary statistics every results file records."""

from __future__ import annotations

import statistics
import time


def stats(ts: list[float]) -> dict:
    """Median, extremes, p10/p90 and spread = (p90 - p10) / median of a list of milliseconds."""
    q = statistics.quantiles(ts, n=10) if len(ts) >= 2 else [ts[0]] * 9
    med = statistics.median(ts)
    return {
        "median_ms": med,
        "min_ms": min(ts),
        "max_ms": max(ts),
        "p10_ms": q[0],
        "p90_ms": q[-1],
        "spread": (q[-1] - q[0]) / med,
        "runs": len(ts),
    }


def time_rounds(fns: dict, torch, rounds: int, flush, *, warmup: int = 2) -> dict[str, list[float]]:
    """Milliseconds per call of each ``fns[name]()`` over ``rounds`` alternating rounds; ``flush`` (a torch
    tensor of 512 MiB) is zeroed before each call, outside the events."""
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {k: [] for k in names}
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        evs = []
        for name in order:
            flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fns[name]()
            e.record()
            evs.append((name, s, e))
        torch.cuda.synchronize()
        for name, s, e in evs:
            times[name].append(s.elapsed_time(e))
    return times


def environment() -> dict:
    """What every results file records of the machine: ``nvidia-smi``'s line (driver, max SM clock, power
    limit; "" without it), the CUDA driver API version, cuda-bindings' and NVRTC's versions. Each benchmark
    files them under its own keys."""
    import subprocess

    import cuda.bindings
    from cuda.bindings import driver, nvrtc

    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        smi = ""
    drv = driver.cuDriverGetVersion()[1]
    nv = nvrtc.nvrtcVersion()
    return {
        "nvidia_smi": smi,
        "cuda_driver_api": f"{drv // 1000}.{drv % 1000 // 10}",
        "cuda_bindings": getattr(cuda.bindings, "__version__", "?"),
        "nvrtc": f"{nv[1]}.{nv[2]}",
    }


def tee_log(path, mode: str = "a"):
    """``log(line)``: print the line (flushed) and append it to ``path`` (flushed), so a run cut short by its
    time limit still leaves its log."""
    f = open(path, mode)  # noqa: SIM115 (kept open for the run; the process exit closes it)

    def log(s: str) -> None:
        print(s, flush=True)
        f.write(s + "\n")
        f.flush()

    return log


def sustained(fn, torch, seconds: float = 1.5) -> dict:
    """Launch fn back to back for `seconds` (no flush) while NVML samples the SM clock, power and the clock-event
    reasons every 10 ms; medians over the second half (the clock settles at the power cap). Says whether a kernel
    runs at 1980 MHz or is held back by the 700 W cap, which sets the mma.sync ceiling for that kernel."""
    import threading

    try:
        import pynvml
    except ImportError:
        return {"error": "pynvml missing"}
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    samples, stop = [], threading.Event()

    def sample():
        while not stop.is_set():
            samples.append(
                (
                    time.perf_counter(),
                    pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                    pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                    pynvml.nvmlDeviceGetCurrentClocksEventReasons(h),
                )
            )
            time.sleep(0.01)

    th = threading.Thread(target=sample, daemon=True)
    s0, e0 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    th.start()
    t0 = time.perf_counter()
    calls = 0
    s0.record()
    while time.perf_counter() - t0 < seconds:
        for _ in range(20):
            fn()
        calls += 20
        if calls % 200 == 0:  # keep the launch queue short
            torch.cuda.current_stream().synchronize()
    e0.record()
    torch.cuda.synchronize()
    stop.set()
    th.join()
    half = [x for x in samples if x[0] - t0 > seconds / 2]
    reasons = 0
    for x in half:
        reasons |= int(x[3])
    return {
        "ms_per_call": s0.elapsed_time(e0) / calls,
        "calls": calls,
        "sm_clock_mhz": statistics.median(x[1] for x in half) if half else None,
        "power_w": statistics.median(x[2] for x in half) if half else None,
        "clock_event_reasons": hex(reasons),
        "sw_power_cap": bool(reasons & 0x4),
        "hw_slowdown": bool(reasons & 0x8),
        "samples": len(half),
    }
