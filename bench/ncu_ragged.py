"""Why version 16 / 18 lost to the kernel before them at 4095x4097x1023 (bench/NOTES.md, "Session 3,
continued"): one launch of each variant (bench_ragged.py's builds: this tree = the kernel before v16, v16, v18) of
the 128x128x8 8x16 and 16x8 tiles at an unaligned and an aligned shape, to run under Nsight Compute:

    python bench/bench_ragged.py build                                            # CPU (carry .cache)
    ncu --clock-control none -k regex:sgemm --metrics <list> python3 bench/ncu_ragged.py > $OUT/ncu.txt

The launch order is printed first (ncu numbers the kernels in that order)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_kernels import Problem, _c  # noqa: E402
from bench_ragged import _load  # noqa: E402

CONFIGS = [_c(128, 128, 8, 8, 16, 3, 2), _c(128, 128, 8, 16, 8, 3, 2)]
SHAPES = [(4095, 4097, 1023), (4096, 4096, 1024)]
VARIANTS = ["", "v16", "v18"]


def main() -> None:
    import torch

    from smemtile.gpu.run import open_device

    dev = open_device(0)
    n = 0
    for shape in SHAPES:
        prob = Problem(torch, shape, seed=3)
        for params in CONFIGS:
            for v in VARIANTS:
                k = _load(params, {}, dict(zip("MNK", shape, strict=True)), dev, v)
                k.bind({"A": prob.a.data_ptr(), "B": prob.b.data_ptr(), "C": prob.c.data_ptr()})
                k.launch()
                torch.cuda.synchronize()
                n += 1
                print(f"launch {n}: {shape} {params['TM']}x{params['TN']} {v or 'this tree'} "
                      f"err {prob.error(prob.c):.1e}", flush=True)  # fmt: skip
                k.close()
        prob.free()


if __name__ == "__main__":
    main()
