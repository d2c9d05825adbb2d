"""Issue 31 item 4: smemtile/gpu/ on cuda.core, checked once on the GPU against the driver API it replaced.

For a few configurations of every family (multi-step plans, more than 48 KiB of dynamic shared memory, clusters,
tensor maps, and a sub-view layout whose C map is inactive) the new path (``smemtile.gpu.run.LoadedKernel``:
cuda.core) and the old one (the driver-API calls ``smemtile/gpu/run.py`` made before, written out below) must
give the same numbers:

- the kernel's registers, static and local memory, active blocks per SM, active clusters on the GPU;
- the output of one run of the plan on the same inputs (bit for bit) and the check against the reference;
- the bytes of every tensor map (a kernel copies its ``__grid_constant__`` 128-byte parameter out): cuda.core's
  TensorMapDescriptor against cuTensorMapEncodeTiled (an inactive map is a placeholder now, zeros before: no
  kernel reads it, so it is reported, not compared);
- timing: the medians of both event-timed loops (L2 flushed the same way) within the noise (15 %, twice the
  difference of two old runs, or 2 us);
- the device's fields (name, cc, SMs, clocks, bus, L2), the UUID and driver version ``tune`` keys on, the
  alignment of cuda.core's allocations (256 B, what pointer_align reads), and the registers the driver's JIT gives
  a PTX kernel (``inspect``'s cap: cuLibraryLoadData with line info against cuModuleLoadDataEx).

    python -m bench.check_cuda_core --out $OUT        # on the GPU; exit 1 on any difference

Writes ``$OUT/check_cuda_core.json`` (every row with both values) and prints one line per row.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

DUMP_MAP = r"""
struct __align__(64) Map128 { unsigned long long v[16]; };
extern "C" __global__ void dump_map(const __grid_constant__ Map128 m, unsigned long long* out) {
  if (threadIdx.x < 16) out[threadIdx.x] = m.v[threadIdx.x];
}
"""

PTX_KERNEL = r"""
extern "C" __global__ void scale(float* y, const float* x, int n) {
  __shared__ float s[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : 0.f;
  __syncthreads();
  if (i < n) y[i] = 2.f * s[threadIdx.x ^ 1];
}
"""


# ---- the old path: the driver-API calls of smemtile/gpu/run.py before cuda.core --------------------------------
def _d():
    from cuda.bindings import driver

    return driver


def ok(res, what: str):
    d = _d()
    err, *values = res if isinstance(res, tuple) else (res,)
    if int(err) != 0:
        raise RuntimeError(f"{what} failed: {d.cuGetErrorName(err)[1]}")
    return None if not values else values[0] if len(values) == 1 else tuple(values)


def old_encode(t, address: int):
    """cuTensorMapEncodeTiled exactly as before (an inactive map: a zero-filled CUtensorMap)."""
    from smemtile.model.dtypes import TMA_DTYPES

    d = _d()
    if not t.active:
        return d.CUtensorMap()
    u64, u32 = d.cuuint64_t, d.cuuint32_t
    return ok(
        d.cuTensorMapEncodeTiled(
            getattr(d.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{TMA_DTYPES[t.dtype]}"),
            len(t.dims),
            address,
            [u64(x) for x in t.dims],
            [u64(x) for x in t.strides],
            [u32(x) for x in t.box],
            [u32(1)] * len(t.dims),
            d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            getattr(d.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{t.swizzle.upper()}"),
            d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        ),
        f"cuTensorMapEncodeTiled({t.name})",
    )


def old_launch_config(step, stream=0):
    d = _d()
    cfg = d.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = step.grid
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = step.block
    cfg.sharedMemBytes = step.dynamic_smem_bytes
    cfg.hStream = d.CUstream(stream)
    attr = d.CUlaunchAttribute()
    attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = step.cluster
    cfg.attrs = [attr]
    cfg.numAttrs = 1
    return cfg


class OldKernel:
    """The same cubin through cuModuleLoadData / cuFuncGetAttribute / cuOccupancy* / cuLaunchKernel(Ex)."""

    def __init__(self, k, dev):
        d = _d()
        self.k = k
        self.module = ok(d.cuModuleLoadData(k.compiled.cubin), "cuModuleLoadData")
        self.func = ok(d.cuModuleGetFunction(self.module, k.compiled.lowered[k.expr].encode()), "main")
        self.funcs = {
            s.kernel: ok(d.cuModuleGetFunction(self.module, s.kernel.encode()), s.kernel)
            for s in k.shape.steps
            if not s.main
        }
        a = d.CUfunction_attribute
        self.registers = int(ok(d.cuFuncGetAttribute(a.CU_FUNC_ATTRIBUTE_NUM_REGS, self.func), "REGS"))
        self.static_smem = int(
            ok(d.cuFuncGetAttribute(a.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, self.func), "SH")
        )
        self.local_bytes = int(
            ok(d.cuFuncGetAttribute(a.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, self.func), "LOC")
        )
        dyn = k.shape.dynamic_smem_bytes
        if dyn > k.cfg.arch.static_smem_max:
            attr = a.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            ok(d.cuFuncSetAttribute(self.func, attr, dyn), "cuFuncSetAttribute")
        self.driver_blocks = int(
            ok(d.cuOccupancyMaxActiveBlocksPerMultiprocessor(self.func, k.threads, dyn), "cuOccupancy")
        )
        self.driver_clusters = self.driver_blocks * dev.sm_count
        if k.shape.cluster_size > 1:
            main = next(s for s in k.shape.steps if s.main)
            cfg = old_launch_config(main)
            self.driver_clusters = int(ok(d.cuOccupancyMaxActiveClusters(self.func, cfg), "clusters"))

    def params(self, step, args):
        """The new path's bound arguments of ``step`` as the driver API took them: (values, ctypes types)."""
        vals, types = [], []
        plans = {t.name: t for t in self.k.shape.tensor_maps}
        for (value, _), a in zip(step.args, args, strict=True):
            if isinstance(value, str) and value in plans:
                t = plans[value]
                vals.append(old_encode(t, self.k._addrs[t.array]))
                types.append(None)
            elif type(a) is int:
                vals.append(a)
                types.append(ctypes.c_void_p)
            else:
                vals.append(a.value)
                types.append(type(a))
        return tuple(vals), tuple(types)

    def launch(self) -> None:
        d = _d()
        for _, step, args, _ in self.k._launches:
            if not step.main and step.kernel not in self.funcs:
                self.funcs[step.kernel] = ok(
                    _d().cuModuleGetFunction(self.module, step.kernel.encode()), step.kernel
                )
            f = self.func if step.main else self.funcs[step.kernel]
            p = self.params(step, args)
            if step.cluster != (1, 1, 1):
                res = d.cuLaunchKernelEx(old_launch_config(step), f, p, 0)
            else:
                res = d.cuLaunchKernel(
                    f, *step.grid, *step.block, step.dynamic_smem_bytes, d.CUstream(0), p, 0
                )
            ok((res[0],) if isinstance(res, tuple) else (res,), f"cuLaunchKernel({step.kernel})")

    def time(self, runs: int, l2_bytes: int) -> float:
        """The old LoadedKernel.time loop: driver events on the null stream, cuMemsetD8Async L2 flush."""
        d = _d()
        start, end = ok(d.cuEventCreate(0), "ev"), ok(d.cuEventCreate(0), "ev")
        scratch = ok(d.cuMemAlloc(2 * l2_bytes), "cuMemAlloc") if l2_bytes else None
        try:
            for _ in range(3):
                self.launch()
            ok(d.cuCtxSynchronize(), "sync")
            ts = []
            for i in range(runs):
                if scratch is not None:
                    ok(d.cuMemsetD8Async(scratch, i & 0xFF, 2 * l2_bytes, d.CUstream(0)), "memset")
                ok(d.cuEventRecord(start, d.CUstream(0)), "record")
                self.launch()
                ok(d.cuEventRecord(end, d.CUstream(0)), "record")
                ok(d.cuEventSynchronize(end), "sync")
                ts.append(float(ok(d.cuEventElapsedTime(start, end), "elapsed")))
        finally:
            d.cuEventDestroy(start)
            d.cuEventDestroy(end)
            if scratch is not None:
                d.cuMemFree(scratch)
        return statistics.median(ts)

    def close(self) -> None:
        _d().cuModuleUnload(self.module)


# ---- the comparisons ------------------------------------------------------------------------------------------
ROWS: list[dict] = []


def row(what: str, old, new, same: bool | None = None, note: str = "") -> None:
    same = (old == new) if same is None else same
    ROWS.append({"what": what, "old": old, "new": new, "same": bool(same), "note": note})
    print(f"{'ok  ' if same else 'DIFF'} {what}: old {old!r} new {new!r} {note}".rstrip(), flush=True)


def configs(arch: str):
    """(label, configuration, offsets or None) of the rows; one that does not configure is reported and skipped."""
    from smemtile.families import FAMILIES, configure
    from smemtile.families.base import subview_case

    wanted = []
    for name, fam in FAMILIES.items():
        size = dict((getattr(fam, "test_sizes", None) or [{}])[0])
        wanted.append((f"{name} {size}", name, size))
    wanted += [
        ("sgemm SPLIT_K=4", "sgemm", {"SPLIT_K": 4, "M": 128, "N": 128, "K": 256}),
        ("hgemm SPLIT_K=4", "hgemm", {"SPLIT_K": 4, "M": 256, "N": 128, "K": 512}),
        ("wgmma_gemm CLUSTER=1 bf16", "wgmma_gemm", {"M": 256, "N": 512, "K": 256, "CLUSTER": 1}),
        (
            "wgmma_gemm CLUSTER=2 f16",
            "wgmma_gemm",
            {"M": 256, "N": 512, "K": 256, "CLUSTER": 2, "dtype": "f16"},
        ),
        ("wgmma_gemm sub-view (inactive C map)", "wgmma_gemm", {"M": 256, "N": 512, "K": 256}),
    ]
    out = []
    for label, name, params in wanted:
        try:
            cfg = configure(name, params, {}, "sm_90a" if name == "wgmma_gemm" else arch)
        except Exception as e:
            print(f"skip {label}: {e.__class__.__name__}: {e}", flush=True)
            continue
        if "sub-view" in label:
            cfg, offsets = subview_case(FAMILIES[name], cfg)
            out.append((label, cfg, offsets))
        else:
            out.append((label, cfg, None))
    return out


def check_config(label: str, cfg, offsets, dev, dump) -> None:
    from smemtile.families import FAMILIES
    from smemtile.gpu.run import DeviceBuffer, LoadedKernel, compare, launch, launch_config

    fam = FAMILIES[cfg.family]
    k = LoadedKernel(cfg, dev)
    old = OldKernel(k, dev)
    try:
        for f in ("registers", "static_smem", "local_bytes", "driver_blocks", "driver_clusters"):
            row(f"{label}: {f}", getattr(old, f), getattr(k, f))
        inputs = fam.make_inputs(cfg, np.random.default_rng(5))
        ref = fam.reference(cfg, inputs)
        outs = {}
        for path in ("old", "new"):
            k.prepare(dict(inputs), offsets)
            (old.launch if path == "old" else k.launch)()
            k.synchronize()
            raw = k.output()
            outs[path] = (
                raw,
                compare(ref, fam.decode_output(cfg, raw), fam.tolerance_for(cfg), exact=fam.exact),
            )
            outs[path] += (k.wrote_outside(),)
        (ro, co, wo), (rn, cn, wn) = outs["old"], outs["new"]
        bitwise = np.array_equal(ro.view(np.uint8), rn.view(np.uint8))
        racy = int(cfg.params.get("SPLIT_K", 1)) > 1  # split K adds partial sums atomically: any order
        note = "(split K: atomic adds in any order, compared by the check)" if racy and not bitwise else ""
        row(
            f"{label}: output bytes",
            "old run",
            "new run",
            bitwise or (racy and co.correct and cn.correct),
            note,
        )
        if racy:
            row(
                f"{label}: check",
                [co.correct, wo],
                [cn.correct, wn],
                note=f"({co.max_rel_error} / {cn.max_rel_error})",
            )
        else:
            row(f"{label}: check", [co.correct, co.max_rel_error, wo], [cn.correct, cn.max_rel_error, wn])
        # the tensor maps of the last bind, byte for byte
        plans = {t.name: t for t in k.shape.tensor_maps}
        for name, desc in k._maps.items():
            t = plans[name]
            buf = DeviceBuffer(128)
            buf.fill(0)
            launch(dump["new"], launch_config((1, 1, 1), (32, 1, 1)), (desc, buf.addr))
            k.synchronize()
            out_new = buf.to_array((16,), np.uint64)
            buf.fill(0)
            d = _d()
            params = ((old_encode(t, k._addrs[t.array]), buf.addr), (None, ctypes.c_void_p))
            ok(d.cuLaunchKernel(dump["old"], 1, 1, 1, 32, 1, 1, 0, d.CUstream(0), params, 0)[0], "dump")
            k.synchronize()
            out_old = buf.to_array((16,), np.uint64)
            buf.free()
            same = bytes(out_old) == bytes(out_new)
            if t.active:
                row(f"{label}: tensor map {name} bytes", bytes(out_old).hex(), bytes(out_new).hex(), same)
            else:
                row(f"{label}: inactive map {name}", "zeros", "placeholder", True, "(no kernel reads it)")
        if offsets is None:
            runs = 50
            t_old = old.time(runs, dev.l2_bytes or 0)
            t_new = k.time(target_s=0.3, min_runs=runs, max_runs=runs).median_ms
            t_old2 = old.time(runs, dev.l2_bytes or 0)  # the old path again: the noise between two runs
            ratio = t_new / t_old
            noise = max(0.15 * t_old, 2 * abs(t_old2 - t_old), 0.002)  # 15 %, twice old-vs-old, or 2 us
            row(
                f"{label}: median ms",
                round(t_old, 5),
                round(t_new, 5),
                abs(t_new - t_old) <= noise,
                f"(old again {t_old2:.5f}; new/old {ratio:.3f})",
            )
    finally:
        old.close()
        k.close()


def check_device(dev) -> None:
    from smemtile.families.base import pointer_align
    from smemtile.gpu.run import DeviceBuffer
    from smemtile.gpu.tune import GpuRunner, _driver_version

    d = _d()
    h = ok(d.cuDeviceGet(dev.index), "cuDeviceGet")
    attr = d.CUdevice_attribute

    def exact(name):
        return int(ok(d.cuDeviceGetAttribute(getattr(attr, f"CU_DEVICE_ATTRIBUTE_{name}"), h), name))

    def get(name):  # the clocks and sizes: 0 (an attribute a driver dropped) reads as unknown
        return exact(name) or None

    raw = ok(d.cuDeviceGetName(256, h), "name")
    row("device name", raw.split(b"\x00")[0].decode(), dev.name)
    row("device cc", (exact("COMPUTE_CAPABILITY_MAJOR"), exact("COMPUTE_CAPABILITY_MINOR")), dev.cc)
    for name, field in (
        ("MULTIPROCESSOR_COUNT", "sm_count"),
        ("CLOCK_RATE", "clock_khz"),
        ("MEMORY_CLOCK_RATE", "mem_clock_khz"),
        ("GLOBAL_MEMORY_BUS_WIDTH", "bus_width_bits"),
        ("L2_CACHE_SIZE", "l2_bytes"),
    ):
        row(f"device {field}", get(name), getattr(dev, field))
    u = bytes(ok(d.cuDeviceGetUuid(h), "uuid").bytes).hex()
    old_uuid = f"GPU-{u[:8]}-{u[8:12]}-{u[12:16]}-{u[16:20]}-{u[20:32]}"
    row("tune uuid", old_uuid, GpuRunner._uuid(SimpleNamespace(dev=dev)))
    row("tune driver version", int(ok(d.cuDriverGetVersion(), "version")), _driver_version())
    bufs = [DeviceBuffer(n) for n in (1, 3, 100, 4097, 1 << 20, 3 << 20)]
    row("allocation alignment", [256] * len(bufs), [pointer_align(b.addr) for b in bufs])
    for b in bufs:
        b.free()
    from smemtile.gpu.device import _ATTRIBUTES, device_attributes
    from smemtile.gpu.inspect import plain_registers
    from smemtile.gpu.nvrtc import compile_ptx

    names = dict(_ATTRIBUTES, cc_major="COMPUTE_CAPABILITY_MAJOR", cc_minor="COMPUTE_CAPABILITY_MINOR")
    old_attrs = {
        f: int(ok(d.cuDeviceGetAttribute(getattr(attr, f"CU_DEVICE_ATTRIBUTE_{a}"), h), a))
        for f, a in names.items()
    }
    old_attrs["sm_count"] = get("MULTIPROCESSOR_COUNT")
    row("--arch auto: device_attributes", old_attrs, device_attributes(dev.index))
    ptx = compile_ptx(PTX_KERNEL, dev.arch_name, filename="scale.cu")
    mod = ok(
        d.cuModuleLoadDataEx(ptx.encode() + b"\x00", 1, [d.CUjit_option.CU_JIT_GENERATE_LINE_INFO], [1]),
        "cuModuleLoadDataEx",
    )
    f = ok(d.cuModuleGetFunction(mod, b"scale"), "scale")
    regs = int(ok(d.cuFuncGetAttribute(d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, f), "regs"))
    d.cuModuleUnload(mod)
    row("PTX JIT registers (inspect's cap)", regs, plain_registers(ptx, "scale", dev.index))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("."))
    args = ap.parse_args(argv)
    from smemtile.gpu.nvrtc import compile_cubin
    from smemtile.gpu.run import Module, open_device

    t0 = time.perf_counter()
    dev = open_device(0)
    check_device(dev)
    cubin = compile_cubin(DUMP_MAP, [], dev.arch_name, filename="dump_map.cu").cubin
    new_mod = Module(cubin)
    d = _d()
    old_mod = ok(d.cuModuleLoadData(cubin), "cuModuleLoadData")
    dump = {"new": new_mod.kernel("dump_map"), "old": ok(d.cuModuleGetFunction(old_mod, b"dump_map"), "dump")}
    for label, cfg, offsets in configs(dev.arch_name):
        try:
            check_config(label, cfg, offsets, dev, dump)
        except Exception as e:  # one configuration's failure is a row, the others still run
            row(f"{label}: ran", "ok", f"{e.__class__.__name__}: {e}", False)
    bad = [r for r in ROWS if not r["same"]]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "check_cuda_core.json").write_text(
        json.dumps({"device": dev.to_dict(), "rows": ROWS, "differences": len(bad)}, indent=1, default=str)
    )
    print(f"{len(ROWS)} rows, {len(bad)} differences, {time.perf_counter() - t0:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
