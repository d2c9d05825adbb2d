"""One launch of each kernel variant (bench_ragged.py's builds: "" = this tree, "prev", "v16", "v18") of a few tiles
at unaligned and aligned shapes, to run under Nsight Compute. Session 3 asked why version 16 / 18 lost to the
kernel before them at 4095x4097x1023 (``--session3``); session 4 why the all-cp.async unaligned loop helps 8x8 tiles
and hurts 128x128 8x16 / 16x8 ones (the default; bench/NOTES.md):

    python -m bench.bench_ragged build                                            # CPU (carry .cache)
    ncu --clock-control none -k regex:sgemm --metrics <list> python -m bench.ncu_ragged > $OUT/ncu.txt

The launch order is printed first (ncu numbers the kernels in that order)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from bench.bench_kernels import Problem, _c  # noqa: E402
from bench.bench_ragged import _load  # noqa: E402

SESSION3 = (
    [_c(128, 128, 8, 8, 16, 3, 2), _c(128, 128, 8, 16, 8, 3, 2)],
    [(4095, 4097, 1023), (4096, 4096, 1024)],
    ["", "v16", "v18"],
)
SESSION4 = (
    [_c(128, 128, 8, 8, 16, 2, 2), _c(128, 64, 8, 8, 8, 3, 3)],
    [(4095, 4097, 1023), (4096, 4096, 1024)],
    ["", "prev"],
)


def main() -> None:
    import torch

    from smemtile.gpu.run import open_device

    CONFIGS, SHAPES, VARIANTS = SESSION3 if "--session3" in sys.argv else SESSION4
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
                print(
                    f"launch {n}: {shape} {params['TM']}x{params['TN']} {v or 'this tree'} "
                    f"err {prob.error(prob.c):.1e}",
                    flush=True,
                )
                k.close()
        prob.free()


if __name__ == "__main__":
    main()
