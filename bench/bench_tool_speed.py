"""Issue 28 item 7, the tool's own speed on the 2-core machine (no GPU): whole commands as a user runs them.

    python -m bench.bench_tool_speed [--runs 5] [--record bench/results/tool_speed.json]

* ``analyze`` of every shipped sample against importing its own dependencies (numpy, yaml, click, rich): the
  target is within 2x;
* ``tiles`` of every family (``tiles M N K`` per GEMM family, ``tiles --family`` for the others): under 1 s;
* ``generate`` of a sample with the compile cache off, against the NVRTC time inside it: NVRTC should dominate.

Each figure is the median of ``--runs`` runs (one warm-up first) of ``python -m smemtile ...`` with Python's
bytecode cache on (PYTHONDONTWRITEBYTECODE removed from the environment: this machine sets it, and then every run
compiles every module again; the warm-up writes the .pyc files) and the user's caches as a second run finds them:
the warm-up also fills the compile cache and analyze's answer cache (smemtile/pipeline/disk_memo.py: the tile
ranking of a kernel spec's problem), so the analyze figures are those of a user re-running a spec, not of its
very first run (``analyze_cold`` records that one: a fresh answer cache, the compile cache still warm). The machine's load average is recorded at the
start and at the end: the other work on a shared machine slows every figure alike, the ratios less."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEPS = "import numpy, yaml, click, rich.console"
TILES = {
    "sgemm": "4096 4096 4096",
    "hgemm": "4096 4096 4096 --dtype f16",
    "wgmma_gemm": "4096 4096 4096 --dtype bf16 --arch sm_90a",
    "transpose": "--family transpose 8192 8192 --dtype f16",
    "stencil2d": "--family stencil2d 8192 8192 --radius 2",
    "conv2d": "--family conv2d --n 32 --h 56 --w 56 --c 64 --k 64 --r 3 --s 3 --dtype bf16",
    "flash_attn": "--family flash_attn --batch 4 --heads 32 --seq 8192 --head-dim 128 --dtype bf16 --arch sm_90a",
}
GENERATE = ("samples/sgemm_float4.yaml", "samples/transpose_32x32.yaml", "samples/hgemm_bf16.yaml")
NVRTC_PROBE = """
import sys, time
import smemtile.gpu.nvrtc as nv
from smemtile.cli import run
orig, spent = nv._compile, [0.0]
def timed(*a, **k):
    t = time.perf_counter(); r = orig(*a, **k); spent[0] += time.perf_counter() - t; return r
nv._compile = timed
sys.argv = ["smemtile", "generate", sys.argv[1], "-o", sys.argv[2]]
try:
    run()
except SystemExit:
    pass
print("NVRTC_S", spent[0], file=sys.stderr)
"""


def env() -> dict:
    e = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    e["COLUMNS"] = "100"
    return e


def timed(cmd: list[str], runs: int, extra: dict | None = None) -> dict:
    out = []
    for i in range(runs + 1):
        t = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, env={**env(), **(extra or {})}, capture_output=True, check=False)
        if i:  # the first run warms the bytecode and file caches
            out.append(time.perf_counter() - t)
    return {"median_s": round(statistics.median(out), 3), "runs_s": [round(x, 3) for x in out]}


def generate_once(py: list[str], spec: str, out: Path) -> tuple[float, float]:
    """(wall seconds, NVRTC seconds inside it) of one ``generate SPEC -o OUT`` with the compile cache off."""
    t = time.perf_counter()
    p = subprocess.run(
        [*py, "-c", NVRTC_PROBE, spec, str(out)],
        cwd=ROOT,
        env={**env(), "SMEMTILE_COMPILE_CACHE": "0"},
        capture_output=True,
        text=True,
    )
    total = time.perf_counter() - t
    line = next((ln for ln in p.stderr.splitlines() if ln.startswith("NVRTC_S")), None)
    if line is None:
        raise SystemExit(f"generate {spec} failed:\n{p.stderr[-2000:]}")
    return total, float(line.split()[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--record", type=Path)
    a = ap.parse_args()
    py = [sys.executable]
    doc: dict = {
        "what": __doc__.split("\n\n")[1].strip(),
        "machine": f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start",
        "load_average": {"start": [round(x, 2) for x in os.getloadavg()]},  # 1, 5, 15 minutes
        "python": sys.version.split()[0],
        "date": time.strftime("%Y-%m-%d"),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
    }
    deps = timed([*py, "-c", DEPS], a.runs)
    doc["import_deps"] = {"command": f"python -c '{DEPS}'", **deps}
    doc["analyze"] = {}
    for s in sorted((ROOT / "samples").glob("*.yaml")):
        r = timed([*py, "-m", "smemtile", "analyze", f"samples/{s.name}"], a.runs)
        r["x_deps"] = round(r["median_s"] / deps["median_s"], 2)
        doc["analyze"][s.name] = r
        print(f"analyze {s.name:28} {r['median_s']:.3f} s  {r['x_deps']:.2f}x the imports", flush=True)
    doc["analyze_cold"] = {}  # every run computes its answers (SMEMTILE_ANSWER_CACHE=0): a spec's first run
    for s in sorted((ROOT / "samples").glob("*.yaml")):
        r = timed(
            [*py, "-m", "smemtile", "analyze", f"samples/{s.name}"], a.runs, {"SMEMTILE_ANSWER_CACHE": "0"}
        )
        r["x_deps"] = round(r["median_s"] / deps["median_s"], 2)
        doc["analyze_cold"][s.name] = r
        print(f"analyze (no answer cache) {s.name:28} {r['median_s']:.3f} s  {r['x_deps']:.2f}x", flush=True)
    doc["tiles"] = {}
    for fam, args in TILES.items():
        r = timed([*py, "-m", "smemtile", "tiles", *args.split()], a.runs)
        doc["tiles"][fam] = {"command": f"smemtile tiles {args}", **r}
        print(f"tiles {fam:12} {r['median_s']:.3f} s", flush=True)
    doc["generate"] = {}
    out = Path(tempfile.gettempdir()) / "smemtile_tool_speed.cu"
    for s in GENERATE:
        totals, nvrtcs = [], []
        for i in range(a.runs + 1):  # the first run warms the bytecode and file caches
            total, nvrtc = generate_once(py, s, out)
            if i:
                totals.append(total)
                nvrtcs.append(nvrtc)
        total, nvrtc = statistics.median(totals), statistics.median(nvrtcs)
        share = statistics.median(n / t for n, t in zip(nvrtcs, totals, strict=True))
        doc["generate"][s] = {
            "total_s": round(total, 3),
            "nvrtc_s": round(nvrtc, 3),
            "nvrtc_share": round(share, 2),
            "runs_total_s": [round(x, 3) for x in totals],
            "runs_nvrtc_s": [round(x, 3) for x in nvrtcs],
        }
        print(f"generate {s:32} {total:.2f} s, NVRTC {nvrtc:.2f} s ({share:.0%})", flush=True)
    doc["load_average"]["end"] = [round(x, 2) for x in os.getloadavg()]
    if a.record:
        a.record.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
