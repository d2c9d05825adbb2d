"""The generated ``.cu`` built with nvcc, as a user builds it, against the same spec through ``verify``'s NVRTC
build and against cuBLAS, in one process and the same minutes (issue 35: "the .cu a user builds with nvcc must
get the machine code verify measures").

    python -m bench.bench_helper_nvcc --out results.json [--rounds 15] [--shapes 4096,8192]

For each GEMM problem: ``smemtile.tiles(M, N, K, top=1)``'s spec, ``smemtile.generate`` of it, plus a two-line
``extern "C"`` wrapper calling the generated ``launch_<family>()`` (dense overload, legacy default stream), built
by nvcc into a shared library twice: with the header's build options (``-std=c++17 -Xcicc --sharedmem32=0``)
and without ``-Xcicc --sharedmem32=0`` (nvcc's default 32-bit shared-memory pointers). The libraries are called
through ctypes on torch's tensors; the NVRTC build is ``smemtile.gpu.run.LoadedKernel`` bound to the same
tensors; the reference is torch.matmul (cuBLAS; TF32 off for fp32). All timed in alternating rounds with the
512 MiB flush before every call (bench.timing). Every output is checked against float64 first.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.timing import environment, stats, time_rounds

OPTS = ["-std=c++17", "-Xcicc", "--sharedmem32=0"]  # the generated header's build line (codegen/render.py)
PLAIN = ["-std=c++17"]  # without the option: nvcc's own default
CASES = [("sgemm", "f32", "sm_90"), ("wgmma_gemm", "bf16", "sm_90a")]

WRAP = {
    "sgemm": 'extern "C" int smemtile_bench(int M, int N, int K, const void* A, const void* B, void* C) {\n'
    "    return (int)launch_sgemm(M, N, K, 1.0f, (const float*)A, (const float*)B, 0.0f, (float*)C, 0);\n}\n",
    "wgmma_gemm": 'extern "C" int smemtile_bench(int M, int N, int K, const void* A, const void* B, void* C) {\n'
    "    return (int)launch_wgmma_gemm(M, N, K, (const smemtile::bf16*)A, (const smemtile::bf16*)B,\n"
    "                                  (smemtile::bf16*)C, 0);\n}\n",
}


def build(source: str, arch: str, opts: list[str], work: Path, name: str) -> tuple[Path, float]:
    src = work / f"{name}.cu"
    src.write_text(source)
    lib = work / f"lib{name}.so"
    t0 = time.perf_counter()
    cmd = ["nvcc", *opts, f"-arch={arch}", "-shared", "-Xcompiler", "-fPIC", "-o", str(lib), str(src)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"nvcc failed for {name}: {p.stderr[-2000:]}")
    return lib, time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--shapes", default="4096,8192", help="square sizes, comma separated")
    ap.add_argument("--build-only", action="store_true", help="generate and build the libraries, no GPU")
    args = ap.parse_args(argv)

    import smemtile

    sizes = [int(s) for s in args.shapes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="helper_nvcc_"))
    jobs = []
    for fam, dtype, arch in CASES:
        for n in sizes:
            spec = smemtile.tiles(n, n, n, dtype=dtype, arch=arch, top=1).yaml_specs(top=1)
            gen = smemtile.generate(spec, compile=False)
            source = gen.source + "\n" + WRAP[fam]
            variants = {"nvcc": OPTS, "nvcc_plain": PLAIN} if fam == "sgemm" else {"nvcc": OPTS}
            jobs.append((fam, dtype, arch, n, spec, source, variants))
    builds = {}
    with ThreadPoolExecutor(8) as pool:
        futs = {
            (fam, n, v): pool.submit(build, source, arch, opts, work, f"{fam}_{n}_{v}")
            for fam, dtype, arch, n, spec, source, variants in jobs
            for v, opts in variants.items()
        }
        for key, f in futs.items():
            builds[key] = f.result()
    print(f"built {len(builds)} libraries in {work}", file=sys.stderr, flush=True)
    if args.build_only:
        return 0

    import torch

    from smemtile.gpu.run import LoadedKernel, open_device

    torch.backends.cuda.matmul.allow_tf32 = False
    dev = open_device(0)

    flush = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")
    out = {"what": __doc__.split("\n\n")[0], "environment": environment(), "options": OPTS, "cases": []}
    for fam, dtype, _arch, n, spec, _source, variants in jobs:
        tdt = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype]
        g = torch.Generator(device="cuda").manual_seed(n)
        a = torch.randn(n, n, device="cuda", generator=g).to(tdt)
        b = torch.randn(n, n, device="cuda", generator=g).to(tdt)
        ref = (a.double() @ b.double()).float()
        cfg = smemtile.load_spec(spec).config
        k = LoadedKernel(cfg, dev)
        outs, fns, row = (
            {},
            {},
            {"family": fam, "dtype": dtype, "shape": [n, n, n], "params": dict(cfg.params)},
        )
        for v in variants:
            lib = ctypes.CDLL(str(builds[(fam, n, v)][0]))
            lib.smemtile_bench.restype = ctypes.c_int
            lib.smemtile_bench.argtypes = [ctypes.c_int] * 3 + [ctypes.c_void_p] * 3
            c = torch.empty(n, n, device="cuda", dtype=tdt)
            outs[v] = c

            def call(lib=lib, c=c, n=n, a=a, b=b, fam=fam):
                st = lib.smemtile_bench(n, n, n, a.data_ptr(), b.data_ptr(), c.data_ptr())
                if st != 0:
                    raise RuntimeError(f"launch_{fam} returned {st}")

            fns[v] = call
            row[f"{v}_build_s"] = round(builds[(fam, n, v)][1], 1)
        c_v = torch.empty(n, n, device="cuda", dtype=tdt)
        k.bind({"A": a.data_ptr(), "B": b.data_ptr(), "C": c_v.data_ptr()})
        outs["verify_nvrtc"] = c_v
        fns["verify_nvrtc"] = lambda k=k: k.launch()
        c_t = torch.empty(n, n, device="cuda", dtype=tdt)
        outs["cublas"] = c_t
        fns["cublas"] = lambda c_t=c_t, a=a, b=b: torch.matmul(a, b, out=c_t)
        for f in fns.values():
            f()
        torch.cuda.synchronize()
        row["max_rel_error"] = {
            name: float(((o.float() - ref).abs().max() / ref.abs().max()).item()) for name, o in outs.items()
        }
        times = time_rounds(fns, torch, args.rounds, flush)
        flops = 2.0 * n**3
        row["timing"] = {name: stats(ts) for name, ts in times.items()}
        row["tflops"] = {name: flops / (s["median_ms"] * 1e-3) / 1e12 for name, s in row["timing"].items()}
        row["x_cublas"] = {name: t / row["tflops"]["cublas"] for name, t in row["tflops"].items()}
        row["nvcc_vs_verify"] = row["tflops"]["nvcc"] / row["tflops"]["verify_nvrtc"]
        out["cases"].append(row)
        print(
            f"{fam} {dtype} {n}^3: "
            + ", ".join(
                f"{name} {t:.1f} TFLOP/s ({row['x_cublas'][name]:.3f}x)" for name, t in row["tflops"].items()
            )
            + f"; nvcc/verify {row['nvcc_vs_verify']:.3f}",
            file=sys.stderr,
            flush=True,
        )
        k.close()
    Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
