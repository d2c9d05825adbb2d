"""`inspect` on the GPU: record what the hardware sees, check that recording changes nothing, ncu per source line.

``cuda.core`` is imported lazily (through smemtile.gpu.run, which holds every CUDA call). Three entry points:

- :func:`record`: the user's PTX rewritten by :func:`smemtile.model.ptx_instrument.instrument` (one extra
  trailing ``.param .u64``: the record buffer; the registers the driver's JIT gives the plain kernel as its
  ``.maxnreg``, :func:`instrumented`), JIT-compiled by the driver (``cuLibraryLoadData`` with line info),
  launched once with the user's grid, block, dynamic shared memory and arguments; the buffer is decoded
  into :class:`~smemtile.model.inspect_args.WarpRecord` (addresses as byte offsets from the first byte of the
  kernel's shared variables, see :func:`smemtile.model.ptx_instrument.window_base`).
- :func:`check_unchanged`: the uninstrumented and the instrumented kernel on the same inputs; every array
  argument compared bit for bit afterwards.
- :func:`ncu_per_line`: the *uninstrumented* kernel under Nsight Compute (``--clock-control none``, section
  SourceCounters, source imported), launched by ``python -m smemtile.gpu.inspect_launch SPEC.json``, its source
  page (``--print-source cuda,sass``) summed per source line over the shared-memory SASS instructions.

Arguments (:class:`~smemtile.model.inspect_args.KernelArg`): arrays are device buffers filled on the host by
:func:`smemtile.model.inspect_args.fill_array` (a function of the seed, the parameter's position and the element
index: the CPU emulator reads the same bytes); scalars are passed with the ctypes type of the entry's ``.param``
type.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

import numpy as np

from smemtile.errors import NoDevice, SmemtileError, SpecError
from smemtile.fileio import write_text_atomic
from smemtile.model.dtypes import DTYPES, PTX_DTYPES
from smemtile.model.inspect_args import fill_array
from smemtile.model.inspect_caller import DeviceArray
from smemtile.model.ptx_instrument import (
    Sample,
    block_index,
    buffer_layout,
    decode_raw,
    instrument,
    lane_addresses,
    shared_symbols,
    window_base,
)

__all__ = [
    "NcuFailed",
    "NcuUnavailable",
    "Sample",
    "instrument",
    "record",
    "check_unchanged",
    "ncu_per_line",
    "LaunchFailed",
    "PreparedLaunch",
]

NCU_TIMEOUT_S = 300


class LaunchFailed(SmemtileError):
    """The kernel could not be loaded or launched, or it faulted (exit 1)."""

    exit_code = 1


_PARAM_CTYPES = {  # a PTX parameter type -> its ctypes type, from the dtype table (.f16/.bf16 travel as bits)
    t: getattr(ctypes, DTYPES[d].ctypes) for t, d in PTX_DTYPES.items() if t not in (".f16", ".bf16")
}


def host_array(arg, position: int, seed: int = 0) -> np.ndarray:
    """The initial contents of the array argument ``arg``, the kernel's parameter number ``position``: the same
    bytes the CPU emulator reads (:func:`smemtile.model.inspect_args.fill_values`)."""
    return fill_array(arg, position, seed)


def _scalar(arg, ptx_type: str):
    ct = _PARAM_CTYPES.get(ptx_type)
    if ct is None:
        raise SpecError(f"parameter type {ptx_type} is not supported for a scalar", key=f"args.{arg.name}")
    if arg.dtype == "f16":
        return int(np.float16(arg.value).view(np.uint16)), ct
    if arg.dtype == "bf16":
        return int(np.float32(arg.value).view(np.uint32) >> 16), ct
    return (float(arg.value) if ptx_type.startswith(".f") else int(arg.value)), ct


def _driver():  # for driver-API callers (bench/bench_inspect_overhead.py); nothing here calls it
    from smemtile.gpu.run import _driver as drv

    return drv()


def _ok(res, what: str, exc=LaunchFailed):
    from smemtile.gpu.run import _ok as ok

    return ok(res, what, exc)


def load_module(image: bytes | str, *, line_info: bool = True):
    """A module (:class:`smemtile.gpu.run.Module`) from PTX text (JIT-compiled by the driver, with line info) or a
    cubin."""
    from smemtile.gpu.run import Module

    if isinstance(image, str):
        return Module(image, line_info=line_info)
    return Module(image, what="cuModuleLoadData (cubin)")


class PreparedLaunch:
    """One kernel of a loaded module with its arguments on the device, ready to launch (again and again).

    ``param_types`` are the PTX types of the user's parameters (smemtile.model.ptx.entry_params); with
    ``record_nbytes`` a zeroed record buffer is passed as one more trailing ``.u64``."""

    def __init__(
        self,
        image,
        entry: str,
        *,
        grid,
        block,
        dynamic_smem: int,
        args: list,
        param_types: list[str],
        record_nbytes: int = 0,
        seed: int = 0,
        device: int = 0,
    ):
        from smemtile.gpu.run import (
            DeviceBuffer,
            kernel_args,
            launch_config,
            open_device,
            set_max_dynamic_smem,
        )

        if len(args) != len(param_types):
            raise SpecError(f"{len(args)} arguments for {len(param_types)} parameters", key="args")
        self.dev = open_device(device)
        self.grid, self.block = _dim3(grid, "grid"), _dim3(block, "block")
        self.dynamic_smem = int(dynamic_smem)
        self.module = load_module(image)
        self.kernel = self.module.kernel(entry)  # a cuda.core Kernel
        if self.dynamic_smem > 48 * 1024:
            set_max_dynamic_smem(
                self.kernel,
                self.dynamic_smem,
                self.dev.index,
                f"raising the dynamic shared memory limit to {self.dynamic_smem} bytes",
                LaunchFailed,
            )
        self.arrays: dict[str, tuple[object, np.ndarray]] = {}
        self._copy_back: list[tuple[object, np.ndarray]] = []  # (device copy, the caller's numpy array)
        vals, types = [], []
        for k, (a, t) in enumerate(zip(args, param_types, strict=True)):
            if a.kind == "array" and isinstance(a.data, DeviceArray):
                # the caller's device array: its pointer, nothing copied
                vals.append(int(a.data.pointer))
                types.append(ctypes.c_void_p)
                continue
            if a.kind == "array":
                if a.data is not None:  # the caller's host array: a device copy, copied back after the launch
                    host = np.ascontiguousarray(a.data).reshape(-1)
                else:
                    host = host_array(a, k, seed)
                buf = DeviceBuffer.from_array(host) if host.nbytes else DeviceBuffer(1)
                if a.data is not None:
                    self._copy_back.append((buf, a.data))
                else:
                    self.arrays[a.name] = (buf, host)
                vals.append(buf.addr)
                types.append(ctypes.c_void_p)
            else:
                v, ct = _scalar(a, t)
                vals.append(v)
                types.append(ct)
        self.record_buf = None
        if record_nbytes:
            self.record_buf = DeviceBuffer(record_nbytes)
            self._zero_record()
            vals.append(self.record_buf.addr)
            types.append(ctypes.c_void_p)
        self._params = kernel_args(vals, types)
        self._config = launch_config(self.grid, self.block, self.dynamic_smem)

    @property
    def func(self):
        """The kernel as a driver-API CUfunction (for callers of the driver API, e.g. bench/bench_inspect_overhead.py)."""
        from smemtile.gpu.run import driver_function

        return driver_function(self.kernel)

    def _zero_record(self) -> None:
        from smemtile.gpu.run import _call

        _call("cuMemsetD8(record buffer)", self.record_buf.fill, 0, exc=LaunchFailed)

    def launch(self) -> None:
        from smemtile.gpu.run import launch

        launch(
            self.kernel,
            self._config,
            self._params,
            0,
            f"launching with grid {self.grid}, block {self.block}, {self.dynamic_smem} B dynamic shared memory",
            LaunchFailed,
        )

    def synchronize(self) -> None:
        from smemtile.gpu.run import synchronize

        synchronize("the kernel (it faulted: an out-of-bounds access or a bad argument?)", LaunchFailed)

    def copy_back(self) -> None:
        """The kernel's results into the caller's (writeable) numpy arrays."""
        for buf, target in self._copy_back:
            if target.size and target.flags.writeable:
                target[...] = buf.to_array((target.size,), target.dtype).reshape(target.shape)

    def outputs(self) -> dict[str, np.ndarray]:
        """Every array argument as the kernel left it."""
        return {name: buf.to_array(host.shape, host.dtype) for name, (buf, host) in self.arrays.items()}

    def record_bytes(self) -> bytes:
        assert self.record_buf is not None
        return self.record_buf.to_array((self.record_buf.nbytes,), np.uint8).tobytes()

    def time_ms(self, runs: int = 20, warmup: int = 3) -> float:
        """Median of ``runs`` launches timed with CUDA events (after ``warmup`` launches)."""
        from smemtile.gpu.run import EventTimer

        timer = EventTimer()
        try:
            for _ in range(warmup):
                self.launch()
            self.synchronize()
            ts = []
            for _ in range(runs):
                if self.record_buf is not None:  # every run records the same sample from a zeroed buffer
                    self._zero_record()
                with timer:
                    self.launch()
                ts.append(timer.ms())
        finally:
            timer.close()
        return statistics.median(ts)

    def close(self) -> None:
        for buf, _ in [*self.arrays.values(), *self._copy_back]:
            buf.free()
        if self.record_buf is not None:
            self.record_buf.free()
        if self.module is not None:
            try:
                self.module.close()
            finally:
                self.module = None


def snapshot(arg, device: int = 0) -> np.ndarray:
    """A host copy of a caller's array (a device array copied to the host): what ``--ncu`` runs on, and
    what the CPU emulator reads for a device array."""
    from smemtile.gpu.run import _call, copy_to_host, open_device
    from smemtile.model.dtypes import NUMPY_DTYPES

    if not isinstance(arg.data, DeviceArray):
        return np.array(arg.data, copy=True).reshape(-1)
    out = np.empty(int(arg.count), dtype=np.dtype(NUMPY_DTYPES[arg.dtype]))
    if out.nbytes:
        open_device(device)
        _call("cuMemcpyDtoH", copy_to_host, int(arg.data.pointer), out, exc=LaunchFailed)
    return out


def _dim3(v, what: str) -> tuple[int, int, int]:
    t = (int(v),) if isinstance(v, int) else tuple(int(x) for x in v)
    if not 1 <= len(t) <= 3 or any(x < 1 for x in t):
        raise SpecError(f"must be 1 to 3 positive integers, got {v!r}", key=f"--{what}")
    return (*t, *(1,) * (3 - len(t)))  # type: ignore[return-value]


def _param_types(ptx: str, entry: str) -> list[str]:
    from smemtile.model.ptx import entry_params

    return [t for t, _ in entry_params(ptx, entry)]


def plain_registers(ptx: str, entry: str, device: int = 0) -> int:
    """The registers per thread the driver's JIT gives the uninstrumented ``entry`` (the cap
    :func:`instrumented` puts on the recording)."""
    from smemtile.gpu.run import _call, open_device

    open_device(device)
    module = load_module(ptx)
    try:
        func = module.kernel(entry)
        return int(_call("cuFuncGetAttribute", getattr, func.attributes, "num_regs", exc=LaunchFailed))
    finally:
        module.close()


def instrumented(ptx: str, entry: str, instrs: list, sample: Sample, device: int = 0) -> str:
    """:func:`instrument` with the plain kernel's registers as the cap (the same occupancy for every warp)."""
    return instrument(ptx, entry, instrs, sample, max_registers=plain_registers(ptx, entry, device))


def record(
    ptx: str,
    entry: str,
    instrs: list,
    *,
    grid,
    block,
    dynamic_smem: int,
    args: list,
    sample: Sample,
    device: int = 0,
    seed: int = 0,
) -> tuple[list, dict]:
    """Run the instrumented kernel once; the sampled warps' records and
    ``{"executions": {instr: count}, "dropped": n, "symbols": {sym: offset}, "window_base": raw address,
    "dynamic_smem": bytes the kernel saw, "record_bytes": buffer size}``."""
    from smemtile.model.inspect_args import WarpRecord

    symbols = shared_symbols(ptx, entry)
    layout = buffer_layout(instrs, symbols, sample)
    text = instrumented(ptx, entry, instrs, sample, device)
    k = PreparedLaunch(
        text,
        entry,
        grid=grid,
        block=block,
        dynamic_smem=dynamic_smem,
        args=args,
        param_types=_param_types(ptx, entry),
        record_nbytes=layout.nbytes,
        seed=seed,
        device=device,
    )
    try:
        k.launch()
        k.synchronize()
        k.copy_back()
        raw = decode_raw(k.record_bytes(), layout, symbols)
    finally:
        k.close()
    if not raw.ran:
        raise LaunchFailed("the instrumented kernel did not run (its record buffer is empty)")
    offsets = lane_addresses(raw, instrs)
    g = _dim3(grid, "grid")
    records = [
        WarpRecord(
            instr=int(raw.instr[j]),
            block=block_index(int(raw.block[j]), g),
            warp=int(raw.warp[j]),
            active=int(raw.active[j]),
            addresses=tuple(int(x) for x in offsets[j]),
        )
        for j in range(len(raw.instr))
    ]
    base = window_base(raw)
    info = {
        "executions": raw.executions,
        "dropped": raw.dropped,
        "symbols": {s: a - base for s, a in raw.symbols.items()},
        "window_base": base,
        "dynamic_smem": raw.dynamic_smem,
        "record_bytes": layout.nbytes,
        "sample": asdict(sample),
    }
    return records, info


def check_unchanged(
    ptx: str,
    entry: str,
    instrs: list,
    *,
    grid,
    block,
    dynamic_smem: int,
    args: list,
    sample: Sample,
    device: int = 0,
    seed: int = 0,
) -> dict:
    """Run the uninstrumented and the instrumented kernel on the same inputs; compare every array argument
    afterwards bit for bit. ``{"identical": bool, "arrays": {name: {"identical", "bytes", "differing_bytes"}}}``."""
    symbols = shared_symbols(ptx, entry)
    layout = buffer_layout(instrs, symbols, sample)
    kw = dict(
        grid=grid,
        block=block,
        dynamic_smem=dynamic_smem,
        args=args,
        param_types=_param_types(ptx, entry),
        seed=seed,
        device=device,
    )
    results = []
    for image, nbytes in ((ptx, 0), (instrumented(ptx, entry, instrs, sample, device), layout.nbytes)):
        k = PreparedLaunch(image, entry, record_nbytes=nbytes, **kw)
        try:
            k.launch()
            k.synchronize()
            results.append(k.outputs())
        finally:
            k.close()
    plain, recorded = results
    arrays = {}
    for name, a in plain.items():
        x, y = a.view(np.uint8), recorded[name].view(np.uint8)
        diff = int((x != y).sum())
        arrays[name] = {"identical": diff == 0, "bytes": int(x.size), "differing_bytes": diff}
    return {"identical": all(v["identical"] for v in arrays.values()), "arrays": arrays}


# ---- ncu per source line ------------------------------------------------------------------------------------


class NcuUnavailable(NoDevice):
    """ncu is not installed (exit 3)."""


class NcuFailed(SmemtileError):
    """ncu ran but did not profile the kernel, or its page could not be read (exit 1)."""

    exit_code = 1


def find_ncu() -> str | None:
    from smemtile.gpu.ncu import find_ncu as f

    return f()


def ncu_per_line(
    cubin_or_ptx: bytes | str,
    entry: str,
    *,
    grid,
    block,
    dynamic_smem: int,
    args: list,
    param_types: list[str] | None = None,
    device: int = 0,
    ncu: str | None = None,
    save_dir: Path | None = None,
    timeout: float = NCU_TIMEOUT_S,
) -> dict[tuple[str, int], dict]:
    """Nsight Compute's shared-memory counters of the uninstrumented kernel per source line:
    ``(file, line) -> {"wavefronts", "ideal", "instructions", "sass": [opcodes]}`` summed over the line's
    shared-memory SASS instructions (LDS/STS/LDSM/STSM/LDGSTS/ATOMS). ``file`` is the PTX's ``.file`` path when
    the PTX is given (ncu's own file name otherwise)."""
    ncu = ncu or find_ncu()
    if ncu is None:
        raise NcuUnavailable("ncu (Nsight Compute) not found on PATH; inspect runs without --ncu")
    if param_types is None:
        if not isinstance(cubin_or_ptx, str):
            raise SpecError("param_types are needed with a cubin", key="ncu")
        param_types = _param_types(cubin_or_ptx, entry)
    work = Path(tempfile.mkdtemp(prefix="smemtile_inspect_ncu_"))
    try:
        module = work / ("kernel.ptx" if isinstance(cubin_or_ptx, str) else "kernel.cubin")
        if isinstance(cubin_or_ptx, str):
            module.write_text(cubin_or_ptx)
        else:
            module.write_bytes(cubin_or_ptx)
        spec = launch_spec(
            module,
            entry,
            grid=grid,
            block=block,
            dynamic_smem=dynamic_smem,
            args=args,
            param_types=param_types,
            device=device,
            result=work / "result.json",
        )
        (work / "spec.json").write_text(json.dumps(spec))
        report = work / "report"
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        cmd = [
            ncu,
            "--clock-control",
            "none",
            "--target-processes",
            "all",
            "--kernel-name-base",
            "mangled",
            "-k",
            entry,
            "--launch-count",
            "1",
            "--section",
            "SourceCounters",
            "--import-source",
            "yes",
            "-f",
            "-o",
            str(report),
            sys.executable,
            "-m",
            "smemtile.gpu.inspect_launch",
            str(work / "spec.json"),
        ]
        p = _run(cmd, timeout, env)
        rep = report.with_suffix(".ncu-rep")
        if p.returncode != 0 or not rep.exists():
            tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
            raise NcuFailed(f"ncu exited {p.returncode}: {' | '.join(tail)}")
        src = _run(
            [ncu, "-i", str(rep), "--page", "source", "--csv", "--print-source", "cuda,sass"], timeout, env
        )
        if save_dir is not None:
            save_dir.mkdir(parents=True, exist_ok=True)
            write_text_atomic(
                save_dir / "inspect_source.csv", key="--ncu-save", make_parents=True, text=src.stdout
            )
            write_text_atomic(
                save_dir / "inspect_ncu.log",
                key="--ncu-save",
                make_parents=True,
                text=p.stdout + "\n--- stderr ---\n" + p.stderr,
            )
            sass = _run(
                [ncu, "-i", str(rep), "--page", "source", "--csv", "--print-source", "sass"], timeout, env
            )
            write_text_atomic(
                save_dir / "inspect_source_sass.csv", key="--ncu-save", make_parents=True, text=sass.stdout
            )  # the page verify --ncu reads
            shutil.copy(rep, save_dir / "inspect.ncu-rep")
        if src.returncode != 0:
            raise NcuFailed(f"ncu -i failed: {' '.join(src.stderr.split())[:300]}")
        try:
            lines = parse_source_lines(src.stdout)
        except ValueError as e:
            raise NcuFailed(f"cannot read ncu's source page: {e}") from None
        if isinstance(cubin_or_ptx, str):
            lines = _to_ptx_files(lines, cubin_or_ptx)
        return lines
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(cmd: list[str], timeout: float, env: dict) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise NcuFailed(f"ncu timed out after {timeout:.0f} s") from None


def launch_spec(
    module: Path,
    entry: str,
    *,
    grid,
    block,
    dynamic_smem: int,
    args: list,
    param_types: list[str],
    device: int = 0,
    seed: int = 0,
    result: Path | None = None,
) -> dict:
    """What ``python -m smemtile.gpu.inspect_launch SPEC.json`` reads. A caller's array travels as a copy of its
    contents (``arg<k>.npy`` beside the module): the profiled process cannot use the caller's pointers."""
    items = []
    for k, a in enumerate(args):
        d = a.to_dict()
        if a.kind == "array" and a.data is not None:
            path = Path(module).with_name(f"arg{k}.npy")
            np.save(path, snapshot(a, device))
            d["data_file"] = str(path)
        items.append(d)
    return {
        "module": str(module),
        "entry": entry,
        "grid": list(_dim3(grid, "grid")),
        "block": list(_dim3(block, "block")),
        "dynamic_smem": int(dynamic_smem),
        "args": items,
        "param_types": list(param_types),
        "device": device,
        "seed": seed,
        "result": str(result) if result else None,
    }


def _to_ptx_files(lines: dict, ptx: str) -> dict:
    """Rename ncu's file names to the PTX's ``.file`` paths (same path, else same base name)."""
    import re

    files = re.findall(r'^\s*\.file\s+\d+\s+"([^"]*)"', ptx, re.M)
    out: dict = {}
    for (f, ln), v in lines.items():
        same = [p for p in files if p == f] or [
            p for p in files if os.path.basename(p) == os.path.basename(f)
        ]
        key = (same[0] if len(same) == 1 else f, ln)
        if key in out:
            for m in ("wavefronts", "ideal", "instructions"):
                out[key][m] += v[m]
            out[key]["sass"] += v["sass"]
        else:
            out[key] = v
    return out


def _norm(s: str) -> str:
    import re

    return re.sub(r"[^a-z0-9]+", " ", s.lower()).strip()


def parse_source_lines(text: str) -> dict[tuple[str, int], dict]:
    """Per source line, the shared-memory counters of ``ncu -i R --page source --csv --print-source cuda,sass``.

    The page has a header whose first column is the line number (``Line No``), ``File Path`` (or ``File Name``)
    rows naming the file of the lines after them, source-line rows (a number in the first column) and, below each,
    its SASS rows (no line number, an address, the SASS text in the ``Source`` column after ``Address``). Only shared-memory SASS
    instructions (smemtile.gpu.ncu_parse.classify, plus ATOMS/STSM) are summed. Pure, tested on synthetic pages.
    """
    import csv
    import io
    import re

    from smemtile.gpu.ncu_parse import _num, classify, source_columns

    rows = list(csv.reader(io.StringIO(text)))
    hi = next(
        (i for i, r in enumerate(rows) if r and _norm(r[0]) in ("line no", "line", "#", "line number")), None
    )
    if hi is None:
        raise ValueError("no 'Line No' header (was the page printed with --print-source cuda,sass?)")
    header = [_norm(h) for h in rows[hi]]
    cols = source_columns(rows[hi])
    addr = next((i for i, h in enumerate(header) if h == "address"), None)
    if addr is None:
        raise ValueError("no SASS 'Address' column in the source page")
    sass = next((i for i in range(addr + 1, len(header)) if header[i] == "source"), None)
    if sass is None:
        raise ValueError("no SASS 'Source' column after 'Address'")
    for key in ("executed", "wavefronts"):
        if cols[key] is None:
            raise ValueError(f"the source page lacks the {key} column; columns: {rows[hi]}")
    names = ("file name", "file path")  # ncu versions differ
    file = next((r[1].strip() for r in rows[:hi] if len(r) > 1 and _norm(r[0]) in names), "")
    line = 0
    out: dict[tuple[str, int], dict] = {}
    for r in rows[hi + 1 :]:
        if not r:
            continue
        if _norm(r[0]) in names and len(r) > 1:
            file = r[1].strip()
            continue
        if r[0].strip().isdigit():
            line = int(r[0].strip())
            continue
        if len(r) <= max(addr, sass) or r[addr].strip() in ("", "-") or r[0].strip() not in ("", "-"):
            continue
        text_ = r[sass].strip()
        op = classify(text_)
        opcode = re.sub(r"^\{?\s*@!?U?P\w+\s+", "", text_).split(" ")[0]
        if op is None and not opcode.startswith(("ATOMS", "STSM", "ATOM.", "LD.", "ST.")):
            continue

        def get(key, r=r):
            i = cols[key]
            return _num(r[i]) if i is not None and i < len(r) else None

        wf = get("wavefronts")
        if op is None and not wf:
            continue  # generic LD/ST/ATOM that never touched shared memory
        ideal = get("ideal")
        if ideal is None and wf is not None and cols["excessive"] is not None:
            exc = get("excessive")
            ideal = wf - exc if exc is not None else None
        d = out.setdefault((file, line), {"wavefronts": 0, "ideal": 0, "instructions": 0, "sass": []})
        d["wavefronts"] += int(wf or 0)
        d["ideal"] += int(ideal or 0)
        d["instructions"] += int(get("executed") or 0)
        d["sass"].append(opcode)
    return out
