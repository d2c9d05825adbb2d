#!/usr/bin/env python3
"""Time the analysis and the fix search of full GEMM specs inside the process (targets: < 50 ms, < 100 ms).

    python -m bench.bench_analyze [--record]

Median of 20 runs after 3 warm-ups; --record writes bench/results/analyze_cpu.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from smemtile.model.analysis import analyze_spec  # noqa: E402
from smemtile.model.fix import fix_spec  # noqa: E402
from smemtile.model.spec import load_spec  # noqa: E402

SPECS = ["sgemm_float4.yaml", "gemm_a_column.yaml", "gemm_a_column_cpasync.yaml", "ldmatrix_f16.yaml"]


def _median_ms(fn, n: int = 20) -> float:
    for _ in range(3):
        fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args()
    rows = []
    for name in SPECS:
        spec = load_spec(ROOT / "samples" / name)
        results = analyze_spec(spec)
        n_inst = sum(len(r.bank.wavefronts) for r in results)
        t_an = _median_ms(lambda spec=spec: analyze_spec(spec))
        t_fix = _median_ms(lambda spec=spec, results=results: fix_spec(spec, results))
        tried = sum(f.tried for f in fix_spec(spec, results).buffers)
        rows.append(
            {
                "spec": name,
                "instructions": n_inst,
                "analyze_ms": round(t_an, 2),
                "fix_search_ms": round(t_fix, 2),
                "layouts_tried": tried,
            }
        )
        print(
            f"{name:30s} {n_inst:5d} instructions  analyze {t_an:6.2f} ms (target 50)  "
            f"fix search {t_fix:6.2f} ms over {tried} layouts (target 100)"
        )
    if a.record:
        doc = {
            "date": dt.date.today().isoformat(),
            "machine": f"{platform.processor() or platform.machine()}, "
            f"Python {platform.python_version()}, numpy {np.__version__}",
            "results": rows,
        }
        out = ROOT / "bench" / "results" / "analyze_cpu.json"
        out.write_text(json.dumps(doc, indent=1) + "\n")
        print("wrote", out.relative_to(ROOT))


if __name__ == "__main__":
    main()
