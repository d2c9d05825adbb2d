"""What the GPU benchmarks share: ours and the reference timed in alternating rounds (order reversed every
round, so a drifting power-capped clock hits both alike), a 512 MiB write before every timed call (outside the
CUDA events, so L2 starts cold), and the summary statistics every results file records."""

from __future__ import annotations

import statistics


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
