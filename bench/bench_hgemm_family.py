"""The hgemm family beyond its plans (issue 19): the tile model's calibration rebuilt from the recorded runs, the
clocks and power a kernel runs at, and small checks for compute-sanitizer.

The timed runs themselves are the family's plans: ``python -m bench.run hgemm bench`` (the defaults and tiles'
picks against cuBLAS, what phases 2 and 3 measured), ``... hgemm sweep`` (the tilings phase 1 measured, which the
factors below come from), ``... hgemm heldout`` (the rank test), ``... hgemm shipped``; bench/README.md.

``calibrate`` (no GPU): smemtile/families/hgemm/calibration_h200.yaml's factors recomputed from the runs it cites
(bench/results/hgemm_h200.json, hgemm_family_h200.json, hgemm_family_h200_run6.json); tests/test_hgemm_family.py
checks that the shipped file is what this computes.

``power``: the clock and power each kernel runs at back to back (NVML, 1.5 s each; the phase-1 hypothesis that
the 700 W cap, not stalls, holds mma.sync near 0.6x): ours (the spec as ``verify`` builds it), cuBLAS, and a
registers-only mma.sync loop (8 warps per SM, 16 independent accumulators per warp, no memory traffic).

``sanitize``: small problems through ``LoadedKernel.check`` (for compute-sanitizer memcheck / racecheck).

    python -m bench.bench_hgemm_family calibrate [--json $OUT/calibration.json]     # no GPU
    python -m bench.bench_hgemm_family power t.yaml --json $OUT/power.json
    compute-sanitizer --tool memcheck python -m bench.bench_hgemm_family sanitize
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from smemtile.families.hgemm.fit import calibrate  # the family's fit: what reproduce() checks

ROOT = Path(__file__).resolve().parents[1]


# small problems for the sanitizers: the 4-byte register copies (ALIGN 2) and the 2-byte ones (ALIGN 1, the
# family's choice for odd K), bf16 C, masked K tail, split K with column-major B, f16 C, and odd K and N (row-major
# B, the N edge, bf16 C). Run 6 ran the first two and the last with ALIGN 2 (then the default): 0 errors, 0 hazards
SANITIZE = [
    ({"ALIGN": 2}, {"M": 130, "N": 136, "K": 45, "beta": 0.5}),
    ({"ALIGN": 2}, {"M": 130, "N": 136, "K": 45, "beta": 0.5, "dtype": "bf16", "c_dtype": "bf16"}),
    ({"ALIGN": 1}, {"M": 130, "N": 136, "K": 45, "beta": 0.5}),
    ({"BM": 128, "BN": 128, "STAGES": 3}, {"M": 300, "N": 264, "K": 104, "dtype": "bf16"}),
    (
        {"BM": 64, "BN": 64, "WM": 32, "WN": 32, "SPLIT_K": 2},
        {"M": 64, "N": 200, "K": 512, "b_layout": "col"},
    ),
    ({}, {"M": 256, "N": 128, "K": 96, "c_dtype": "f16", "alpha": 0.5}),
    ({"STAGES": 3, "ALIGN": 2}, {"M": 200, "N": 131, "K": 1023, "dtype": "bf16", "c_dtype": "bf16"}),
]
MMA_REGS = r"""
extern "C" __global__ void __launch_bounds__(256, 1) mma_regs(float* out, int iters) {
    // registers only: 16 independent m16n8k16 accumulators per warp, operands that are not constants
    unsigned h = (threadIdx.x + 1u) * 2654435761u, a[4], b[2];
    for (int i = 0; i < 4; ++i) { h = h * 1664525u + 1013904223u; a[i] = (h & 0x80008000u) | 0x3c003c00u | (h & 0x03ff03ffu); }
    for (int i = 0; i < 2; ++i) { h = h * 1664525u + 1013904223u; b[i] = (h & 0x80008000u) | 0x3c003c00u | (h & 0x03ff03ffu); }
    float acc[16][4] = {};
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int j = 0; j < 16; ++j)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                         "{%8,%9}, {%0,%1,%2,%3};\n"
                         : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    float s = 0.f;
    for (int j = 0; j < 16; ++j) s += acc[j][0] + acc[j][1] + acc[j][2] + acc[j][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"""


def config_of(spec: str, arch: str | None = None, **problem):
    """The configuration `smemtile verify SPEC` runs (the fixed variant), for ``arch``, problem keys changed."""
    from smemtile.families import reconfigure
    from smemtile.pipeline.fixes import variants
    from smemtile.pipeline.specs import load

    cfg = variants(load(spec))["fixed"]
    return reconfigure(cfg, arch=arch or cfg.arch, problem=problem or None)


# ---- calibration of the tile model's hgemm factors (CPU, from the recorded runs) --------------------------------
# phase 1 run 3 (commit 10517bf): 13 tilings, stages 3-5, skinny, split K; phase 2 runs 4-5: the family's picks,
# 3 vs 4 stages; phase 3 run 6: picks, 3 vs 4 stages, skinny (BK 128, split K), the register copies


# ---- GPU ----------------------------------------------------------------------------------------------------------
def torch_setup():
    import torch

    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    return torch


def operands(torch, cfg, seed: int = 0):
    m, n, k = (int(cfg.problem[x]) for x in "MNK")
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[cfg.problem["dtype"]]
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=g).to(dt)
    b = torch.randn(k, n, device="cuda", generator=g).to(dt)
    return a, b


def run_ours(torch, k, a, b, cfg):
    """Bind ours to a, b and a fresh C of c_dtype; (launch function, C tensor, column-major B storage)."""
    cdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[cfg.problem["c_dtype"]]
    m, n = a.shape[0], b.shape[1]
    bb = b.t().contiguous() if cfg.problem["b_layout"] == "col" else b
    c = torch.full((m, n), float("nan"), device="cuda", dtype=cdt)
    k.bind({"A": a.data_ptr(), "B": bb.data_ptr(), "C": c.data_ptr()})
    return k.launch, c, bb


def power(spec: str) -> dict:
    from bench.timing import sustained
    from smemtile.gpu.nvrtc import compile_cubin
    from smemtile.gpu.run import LoadedKernel, open_device

    torch = torch_setup()
    dev = open_device(torch.cuda.current_device())
    cfg = config_of(spec, dev.arch_name)
    a, b = operands(torch, cfg)
    k = LoadedKernel(cfg, dev)
    launch, _, _ = run_ours(torch, k, a, b, cfg)
    flop = 2.0 * a.shape[0] * b.shape[1] * a.shape[1]
    out = {"spec": spec, "flop": flop}
    for name, fn in (("ours", launch), ("cuBLAS", lambda: torch.matmul(a, b))):
        out[name] = sustained(fn, torch)
        out[name]["tflops"] = flop / out[name]["ms_per_call"] / 1e9
    from cuda.bindings import driver as d

    res = compile_cubin(MMA_REGS, [], dev.arch_name, filename="mma_regs.cu")
    mod = d.cuModuleLoadData(res.cubin)[1]
    func = d.cuModuleGetFunction(mod, b"mma_regs")[1]
    blocks, iters = dev.sm_count, 16384
    buf = torch.empty(blocks * 256, device="cuda")
    import ctypes

    args = ((buf.data_ptr(), iters), (ctypes.c_void_p, ctypes.c_int))

    def regs():
        d.cuLaunchKernel(func, blocks, 1, 1, 256, 1, 1, 0, d.CUstream(0), args, 0)

    out["mma_regs"] = sustained(regs, torch)
    out["mma_regs"]["tflops"] = (
        blocks * 8 * iters * 16 * 2 * 16 * 8 * 16 / out["mma_regs"]["ms_per_call"] / 1e9
    )
    out["mma_regs"]["registers"] = next(iter(res.resources.values())).registers if res.resources else None
    k.close()
    return out


def sanitize_configs(arch: str) -> list:
    from smemtile.families import FAMILIES, configure, reconfigure

    fam = FAMILIES["hgemm"]
    out = []
    for params, problem in SANITIZE:
        cfg = configure(fam, {**params, **problem}, {}, arch)
        out.append(reconfigure(cfg, layouts=fam.default_layouts(cfg)))  # the kernel's swizzles
    return out


def sanitize() -> int:
    import numpy as np

    from smemtile.families import FAMILIES
    from smemtile.gpu.run import check_config, open_device

    dev = open_device(0)
    fam = FAMILIES["hgemm"]
    bad = 0
    for (_params, problem), cfg in zip(SANITIZE, sanitize_configs(dev.arch_name), strict=True):
        chk = check_config(cfg, dev, np.random.default_rng(3))
        bad += not chk.correct
        print(
            f"{fam.name_expression(cfg)} {problem}: correct={chk.correct} max_rel_error={chk.max_rel_error:.1e} "
            f"ALIGN {fam.align(cfg)}"
        )
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("power", "sanitize", "calibrate"))
    ap.add_argument("specs", nargs="*")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.mode == "sanitize":
        return sanitize()
    if args.mode == "calibrate":
        doc = calibrate()
        if args.json:
            args.json.write_text(json.dumps(doc, indent=1, default=list))
        print(json.dumps(doc["calibration"], indent=1))
        for f in doc["skinny_fit"]:
            print(
                f"{f['dtype']:5} {f['config']:<34} measured {f['measured_ms'] * 1e3:6.1f} us, model "
                f"{f['model_ms'] * 1e3:6.1f} us"
            )
        return 0
    if len(args.specs) != 1:
        ap.error("power takes one spec")
    doc = power(args.specs[0])
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1))
    for name in ("ours", "cuBLAS", "mma_regs"):
        r = doc[name]
        print(
            f"{name:<9} {r.get('tflops', 0):7.1f} TFLOP/s at {r.get('sm_clock_mhz')} MHz, "
            f"{r.get('power_w') or 0:.0f} W, reasons {r.get('clock_event_reasons')}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
