"""One launch of each named transpose configuration of a resolved bench_memory plan, plus torch's copy of the same
bytes, to run under Nsight Compute (session 6: why fp16 T128x4 P2 stays at 0.92-0.93x a copy at 8192^2 where fp32
T64x8 reaches 0.94x). The launch order is printed first (ncu numbers the kernels in that order):

    python -m bench.bench_memory --prebuild DIR --plan s6async                     # CPU
    SMEMTILE_CACHE_DIR=DIR ncu --clock-control none --metrics <list> --csv \\
        python -m bench.ncu_transpose DIR/plan.json "transpose f16 8192x8192:T128x4 P2" ... > $OUT/ncu.csv
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from bench.bench_memory import full_config, load_plan  # noqa: E402


def main() -> None:
    import torch

    from smemtile.codegen.render import body
    from smemtile.families import FAMILIES
    from smemtile.gpu.run import LoadedKernel, open_device

    cases = {c.name: c for c in load_plan(Path(sys.argv[1]))}
    dev = open_device(0)
    n = 0
    for want in sys.argv[2:]:
        name, label = want.split(":", 1)
        case = cases[name]
        if label == "copy":  # torch's elementwise copy of the same bytes (read + write)
            e = 4 if case.problem["dtype"] == "f32" else 2
            a = torch.empty(
                case.problem["rows"] * case.problem["cols"] * e // 2, dtype=torch.int16, device="cuda"
            )
            b = torch.empty_like(a)
            b.copy_(a)
            torch.cuda.synchronize()
            n += 1
            print(f"launch {n}: {name} torch copy", flush=True)
            continue
        c = next(x for x in case.configs if x.label == label)
        cfg = full_config(case, c)
        fam = FAMILIES[case.family]
        k = LoadedKernel(cfg, dev, source=body(cfg))
        k.prepare(fam.make_inputs(cfg, np.random.default_rng(1)))
        k.launch()
        k.synchronize()
        n += 1
        print(f"launch {n}: {name} {label}", flush=True)
        k.close()


if __name__ == "__main__":
    main()
