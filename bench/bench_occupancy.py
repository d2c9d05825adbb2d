"""Benchmark: ``smemtile occupancy --batch`` on 100,000 rows (target: under 2 s end to end).

Writes bench/results/occupancy_batch.json. Run from the repo root: ``python -m bench.bench_occupancy``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from smemtile.model.arch import ARCHS  # noqa: E402
from smemtile.model.occupancy import occupancy_batch  # noqa: E402


def make_csv(path: Path, n: int, seed: int = 0, suffixed: bool = False) -> None:
    rng = np.random.default_rng(seed)
    names = np.array(list(ARCHS))[rng.integers(0, len(ARCHS), n)]
    threads = rng.integers(1, 33, n) * 32
    regs = rng.integers(16, 256, n)
    static = np.where(rng.random(n) < 0.5, 0, rng.integers(0, 48, n) * 1024)
    dynamic = rng.integers(0, 228, n) * 1024
    carve = np.where(rng.random(n) < 0.5, "", rng.integers(0, 101, n).astype(str))
    opt = rng.integers(0, 2, n)
    dyn_text = [f"{d // 1024}K" for d in dynamic.tolist()] if suffixed else dynamic.astype(str).tolist()
    lines = ["arch,threads,regs,static_smem,dynamic_smem,carveout,opt_in"]
    lines += [
        ",".join(map(str, r)) for r in zip(names, threads, regs, static, dyn_text, carve, opt, strict=True)
    ]
    path.write_text("\n".join(lines) + "\n")


def time_cli(args: list[str], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "smemtile", *args], cwd=ROOT, check=True, stdout=subprocess.DEVNULL
        )
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "occupancy_batch.json")
    args = p.parse_args()

    rng = np.random.default_rng(1)
    n = args.rows
    per_row = [ARCHS[k] for k in np.array(list(ARCHS))[rng.integers(0, len(ARCHS), n)]]
    cols = dict(
        threads=rng.integers(1, 1025, n),
        regs=rng.integers(0, 256, n),
        smem_static=rng.integers(0, 48 * 1024, n),
        smem_dynamic=rng.integers(0, 228 * 1024, n),
        carveout=rng.integers(-1, 101, n),
        opt_in=rng.random(n) < 0.5,
    )
    lib = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        occupancy_batch(per_row, **cols)
        lib.append(time.perf_counter() - t0)

    results = {"library_occupancy_batch_s": lib}
    with tempfile.TemporaryDirectory() as d:
        plain, suffixed = Path(d) / "plain.csv", Path(d) / "suffixed.csv"
        make_csv(plain, n)
        make_csv(suffixed, n, suffixed=True)
        results["cli_json_plain_csv_s"] = time_cli(
            ["occupancy", "--batch", str(plain), "--json"], args.repeat
        )
        results["cli_json_48K_style_csv_s"] = time_cli(
            ["occupancy", "--batch", str(suffixed), "--json"], args.repeat
        )
        results["cli_table_plain_csv_s"] = time_cli(["occupancy", "--batch", str(plain)], 1)

    doc = {
        "benchmark": "smemtile occupancy --batch",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "rows": n,
        "target_s": 2.0,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "numpy": np.__version__,
        },
        "median_s": {k: round(statistics.median(v), 4) for k, v in results.items()},
        "runs_s": {k: [round(x, 4) for x in v] for k, v in results.items()},
    }
    doc["meets_target"] = doc["median_s"]["cli_json_plain_csv_s"] < 2.0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc["median_s"], indent=2))


if __name__ == "__main__":
    main()
