"""The occupancy model against the CUDA driver, on real compiled kernels (needs a GPU).

Compiles one register-hungry kernel with NVRTC at several register caps (``-maxrregcount``) and static
shared-memory sizes, loads each cubin four times (opt-in or not x carveout set or left at the default), reads
the registers and static shared memory from the function attributes, and asks
``cuOccupancyMaxActiveBlocksPerMultiprocessor`` about thousands of random (threads, dynamic shared memory,
carveout) configurations. Each answer is compared with ``smemtile.model.occupancy`` for the table's arch row
and for the row built from the device's own attributes (``--arch auto``).

    python -m bench.gpu_occupancy_vs_driver --configs 5000 --out $OUT/occupancy_driver.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from smemtile.model.arch import KB  # noqa: E402
from smemtile.model.occupancy import STATIC_SMEM_MAX, limits_batch  # noqa: E402

SOURCE = r"""
extern "C" __global__ void k(float* __restrict__ out, const float* __restrict__ in, int n) {
#if SWORDS > 0
    __shared__ float s[SWORDS];
#endif
    float acc[NACC];
    int t = blockIdx.x * blockDim.x + threadIdx.x;
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = in[(t + i * 977) % n];
#pragma unroll 1
    for (int r = 0; r < n; ++r) {
#pragma unroll
        for (int i = 0; i < NACC; ++i) acc[i] = fmaf(acc[i], acc[(i + 1) % NACC], acc[(i + 7) % NACC]);
    }
#if SWORDS > 0
    s[threadIdx.x % SWORDS] = acc[0];
    __syncthreads();
    acc[1] += s[(threadIdx.x + 1) % SWORDS];
#endif
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < NACC; ++i) sum += acc[i] * (float)(i + 1);
    out[t] = sum;
}
"""

# (accumulators, -maxrregcount or None, static shared floats): registers from ~16 to 255, static 0 .. 48 KB.
VARIANTS = [
    (2, None, 0),
    (8, None, 256),
    (16, None, 1000),
    (32, None, 3072),
    (64, None, 512),
    (200, 24, 0),
    (200, 32, 8192),
    (200, 40, 12288),
    (200, 56, 250),
    (200, 64, 0),
    (200, 72, 4000),
    (200, 88, 0),
    (200, 96, 12288),
    (200, 128, 2048),
    (200, 168, 0),
    (200, 200, 6000),
    (200, 255, 0),
    (200, 37, 100),
    (200, 230, 10000),
]


def check(result, what: str):
    err, *rest = result
    if int(err) != 0:
        raise RuntimeError(f"{what}: {err!r}")
    return rest[0] if len(rest) == 1 else rest


def compile_cubin(nvrtc, nacc: int, maxrreg: int | None, swords: int, arch: str) -> tuple[bytes, float]:
    t0 = time.perf_counter()
    prog = check(nvrtc.nvrtcCreateProgram(SOURCE.encode(), b"k.cu", 0, [], []), "nvrtcCreateProgram")
    opts = [f"--gpu-architecture={arch}".encode(), f"-DNACC={nacc}".encode(), f"-DSWORDS={swords}".encode()]
    if maxrreg:
        opts.append(f"--maxrregcount={maxrreg}".encode())
    err, *_ = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    if int(err) != 0:
        size = check(nvrtc.nvrtcGetProgramLogSize(prog), "log size")
        log = bytearray(
            max(size, 1)
        )  # never b" " * size: size 1 is Python's shared b" " (NVRTC writes into it)
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(f"NVRTC failed: {log.decode(errors='replace')}")
    size = check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
    buf = bytearray(size)
    check(nvrtc.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN")
    nvrtc.nvrtcDestroyProgram(prog)
    buf = bytes(buf)
    return buf, time.perf_counter() - t0


def random_configs(rng, kernels: list[dict], optin: int, smem_per_sm: int, n: int) -> list[dict]:
    """Random launches, with dynamic sizes biased to the edges where rounding decides."""
    out = []
    for _ in range(n):
        k = int(rng.integers(len(kernels)))
        static = kernels[k]["static_smem"]
        threads = int(rng.integers(1, 33) * 32 if rng.random() < 0.5 else rng.integers(1, 1025))
        r = rng.random()
        if r < 0.15:
            dyn = 0
        elif r < 0.5:
            blocks = int(rng.integers(1, 33))
            edge = [optin - static, 48 * KB - static, smem_per_sm // blocks - 1024 - static][
                int(rng.integers(3))
            ]
            dyn = max(0, edge + int(rng.integers(-128, 129)))
        else:
            dyn = int(rng.integers(0, optin + 4 * KB))
        carveout = -1 if rng.random() < 0.4 else int(rng.integers(0, 101))
        out.append(
            dict(
                kernel=k,
                threads=threads,
                dynamic_smem=dyn,
                carveout=carveout,
                opt_in=bool(rng.random() < 0.7),
            )
        )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--configs", type=int, default=5000)
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()

    from cuda.bindings import driver, nvrtc

    from smemtile.gpu.device import device_arch, device_attributes
    from smemtile.model.arch import arch_for_cc

    t_start = time.perf_counter()
    check(driver.cuInit(0), "cuInit")
    dev = check(driver.cuDeviceGet(0), "cuDeviceGet")
    ctx = check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    check(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    attrs = device_attributes(0)
    table = arch_for_cc(attrs["cc_major"], attrs["cc_minor"])
    auto = device_arch(0)
    name = check(driver.cuDeviceGetName(256, dev), "cuDeviceGetName")
    gpu = name.split(b"\0")[0].decode()
    arch_flag = f"sm_{attrs['cc_major']}{attrs['cc_minor']}"
    table_vs_device = {
        f: {"table": getattr(table, f), "device": getattr(auto, f)}
        for f in (
            "max_threads_per_sm",
            "max_blocks_per_sm",
            "smem_per_sm",
            "smem_optin_per_block",
            "smem_reserved_per_block",
            "smem_default_per_block",
            "regs_per_sm",
            "regs_per_block",
        )
    }

    fa = driver.CUfunction_attribute
    kernels = []
    for nacc, maxrreg, swords in VARIANTS:
        cubin, secs = compile_cubin(nvrtc, nacc, maxrreg, swords, arch_flag)
        fns = {}
        for opt in (True, False):
            for carve in (True, False):
                mod = check(driver.cuModuleLoadData(cubin), "cuModuleLoadData")
                fns[(opt, carve)] = check(driver.cuModuleGetFunction(mod, b"k"), "cuModuleGetFunction")
        f0 = fns[(False, False)]

        def attr(a, f=f0):
            return int(check(driver.cuFuncGetAttribute(a, f), str(a)))

        info = dict(
            nacc=nacc,
            maxrregcount=maxrreg,
            regs=attr(fa.CU_FUNC_ATTRIBUTE_NUM_REGS),
            static_smem=attr(fa.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES),
            local_bytes=attr(fa.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES),
            max_threads_per_block=attr(fa.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
            default_max_dynamic_smem=attr(fa.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES),
            default_carveout=attr(fa.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT),
            compile_s=round(secs, 3),
        )
        for carve in (True, False):  # opt in: raise the dynamic limit to the opt-in maximum minus static
            f = fns[(True, carve)]
            value = auto.smem_optin_per_block - info["static_smem"]
            check(
                driver.cuFuncSetAttribute(f, fa.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, value),
                "opt in",
            )
        info["_fns"] = fns
        kernels.append(info)
        print(
            f"kernel nacc={nacc} maxrreg={maxrreg}: {info['regs']} regs, {info['static_smem']} B static, "
            f"{info['local_bytes']} B local, {secs:.2f} s",
            flush=True,
        )

    rng = np.random.default_rng(args.seed)
    configs = random_configs(rng, kernels, auto.smem_optin_per_block, auto.smem_per_sm, args.configs)
    driver_blocks, errors = [], []
    t0 = time.perf_counter()
    for c in configs:
        k = kernels[c["kernel"]]
        f = k["_fns"][(c["opt_in"], c["carveout"] >= 0)]
        if c["carveout"] >= 0:
            attr = fa.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
            check(driver.cuFuncSetAttribute(f, attr, c["carveout"]), "carveout")
        err, n = driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(f, c["threads"], c["dynamic_smem"])
        if int(err) != 0:
            errors.append({**c, "error": repr(err)})
            n = -1
        driver_blocks.append(int(n))
    occ_s = time.perf_counter() - t0
    driver_blocks = np.array(driver_blocks)

    cols = dict(
        threads=[c["threads"] for c in configs],
        regs=[kernels[c["kernel"]]["regs"] for c in configs],
        smem_static=[kernels[c["kernel"]]["static_smem"] for c in configs],
        smem_dynamic=[c["dynamic_smem"] for c in configs],
        carveout=[c["carveout"] for c in configs],
        opt_in=[c["opt_in"] for c in configs],
    )
    model_table = limits_batch(table, **cols)["active_blocks"]
    model_auto = limits_batch(auto, **cols)["active_blocks"]
    ok = driver_blocks >= 0
    agree_table = int(((model_table == driver_blocks) & ok).sum())
    agree_auto = int(((model_auto == driver_blocks) & ok).sum())
    mismatches = [
        {
            **configs[i],
            "regs": cols["regs"][i],
            "static_smem": cols["smem_static"][i],
            "driver": int(driver_blocks[i]),
            "model": int(model_table[i]),
        }
        for i in np.flatnonzero((model_table != driver_blocks) & ok)[:50]
    ]
    by = {}
    for label, mask in {
        "zero_blocks_driver": driver_blocks == 0,
        "carveout_set": np.array(cols["carveout"]) >= 0,
        "no_opt_in": ~np.array(cols["opt_in"]),
        "threads_not_multiple_of_32": np.array(cols["threads"]) % 32 != 0,
    }.items():
        by[label] = {
            "configs": int(mask.sum()),
            "agree": int(((model_table == driver_blocks) & ok & mask).sum()),
        }

    drv_version = check(driver.cuDriverGetVersion(), "cuDriverGetVersion")
    doc = {
        "benchmark": "smemtile occupancy model vs cuOccupancyMaxActiveBlocksPerMultiprocessor",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "gpu": gpu,
        "cc": f"{attrs['cc_major']}.{attrs['cc_minor']}",
        "sm_count": attrs["sm_count"],
        "driver_version": drv_version,
        "nvrtc_version": ".".join(map(str, check(nvrtc.nvrtcVersion(), "nvrtcVersion"))),
        "python": platform.python_version(),
        "configs": len(configs),
        "driver_errors": len(errors),
        "agree_table_arch": agree_table,
        "agree_device_arch": agree_auto,
        "agreement": f"{agree_table}/{len(configs)}",
        "by_category": by,
        "table_vs_device_attributes": table_vs_device,
        "kernels": [{k: v for k, v in info.items() if k != "_fns"} for info in kernels],
        "mismatches_first_50": mismatches,
        "errors_first_20": errors[:20],
        "static_smem_max_model": STATIC_SMEM_MAX,
        "occupancy_calls_s": round(occ_s, 3),
        "total_s": round(time.perf_counter() - t_start, 2),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    summary = {
        k: doc[k] for k in ("gpu", "configs", "driver_errors", "agreement", "agree_device_arch", "total_s")
    }
    print(json.dumps(summary, indent=2))
    print("by category:", json.dumps(by))
    print(
        "table vs device:",
        json.dumps({k: v for k, v in table_vs_device.items() if v["table"] != v["device"]}),
    )
    if mismatches:
        print("first mismatches:", json.dumps(mismatches[:5]))


if __name__ == "__main__":
    main()
