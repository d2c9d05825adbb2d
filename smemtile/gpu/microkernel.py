"""Run synthesized microkernels (``smemtile.codegen.microkernel``): compile with NVRTC, check the SASS, time
with clock64(), count wavefronts with Nsight Compute, and put it all beside the bank model.

    verify_spec(spec, {"baseline": {}, "fixed": fix_spec(spec).layouts}, compile_only=False, use_ncu=True)
    measure_patterns(patterns, arch, use_ncu=True)     # `smemtile measure`: one module, many patterns

Per access the document gives the model's wavefronts per instruction (the mean over the access's
instructions), the measured cycles per instruction (median over warps, blocks and 3 launches of clock64()
around the loop), and with ncu the measured shared-memory wavefronts per instruction: all shared wavefronts
minus the ``op_misc`` ones (cp.async's commit/wait) divided by the instructions the kernel issued with an
active lane (known exactly from the launch). ncu always runs with ``--clock-control none``; each launch is
profiled with one block. 16-byte ``cp.async.cg`` writes are invisible to ncu's shared-memory counters
(bench/ncu_bank_catalogue.py), so microkernels copy with ``.ca`` unless told otherwise.

CUDA is imported lazily; nothing here prints except the ``--target`` runner that ncu profiles.
"""

from __future__ import annotations

import csv
import ctypes
import importlib.util
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from smemtile.codegen.microkernel import Instr, Module, Pattern, build_module, pattern_from_result
from smemtile.errors import VerificationFailed
from smemtile.model.arch import Arch, get_arch

TIMED_LAUNCHES = 3
AGREE_TOL = 0.1  # wavefronts per instruction: counts are exact; this absorbs cp.async's first-touch L1 misses
NCU_TIMEOUT_S = 300


# ---- SASS --------------------------------------------------------------------------------------------------

_SIZE = {1: ".U8", 2: ".U16", 4: "", 8: ".64", 16: ".128"}
_MAT = {1: "", 2: ".2", 4: ".4"}


def expected_sass(instr: Instr) -> str:
    """The SASS opcode the PTX should become on sm_80..sm_90 (checked on the H200's cubins)."""
    if instr.op in ("load", "store"):
        return ("LDS" if instr.op == "load" else "STS") + _SIZE[instr.width]
    if instr.op in ("ldmatrix", "stmatrix"):
        return f"{'LDSM' if instr.op == 'ldmatrix' else 'STSM'}.16.{'MT88' if instr.trans else 'M88'}{_MAT[instr.matrices]}"
    if instr.cache == "cg":
        return "LDGSTS.E.BYPASS.128"
    return "LDGSTS.E" + {4: "", 8: ".64", 16: ".128"}[instr.width]


def find_disassembler() -> tuple[str, str] | None:
    """(kind, path) of cuobjdump or nvdisasm: on PATH, under $CUDA_HOME or /usr/local/cuda, or in the
    nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm wheels; None when there is none."""
    for tool in ("cuobjdump", "nvdisasm"):
        found = shutil.which(tool)
        roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
        cands = [found] + [str(Path(r) / "bin" / tool) for r in roots if r]
        spec = importlib.util.find_spec("nvidia")
        for base in (spec.submodule_search_locations or []) if spec else []:
            cands += [str(p) for p in sorted(Path(base).glob(f"*/bin/{tool}"))]
        for c in cands:
            if c and os.path.isfile(c) and os.access(c, os.X_OK):
                return tool, c
    return None


_OPCODE = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?((?:LDSM|STSM|LDGSTS|LDS|STS)(?:\.\w+)*)\b")


def sass_opcodes(cubin: bytes, tool: tuple[str, str]) -> dict[str, list[str]]:
    """Function name -> its shared-memory opcodes (LDS, STS, LDSM, STSM, LDGSTS), predicated-off ``@!PT`` left out."""
    kind, path = tool
    with tempfile.TemporaryDirectory(prefix="smemtile_sass_") as d:
        f = Path(d) / "module.cubin"
        f.write_bytes(cubin)
        cmd = [path, "--dump-sass", str(f)] if kind == "cuobjdump" else [path, "-c", str(f)]
        text = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    out: dict[str, list[str]] = {}
    cur = None
    for line in text.splitlines():
        m = re.search(r"Function : (\S+)", line) or re.search(r"^\s*\.text\.(\w+):", line)
        if m:
            cur = m.group(1)
            out.setdefault(cur, [])
            continue
        m = _OPCODE.match(line)
        if cur and m and (m.group(1) or "").strip() != "@!PT":
            out[cur].append(m.group(2))
    return out


def check_sass(module: Module, cubin: bytes) -> dict:
    """Every kernel's shared-memory opcodes against the expected one; says when no disassembler is there."""
    tool = find_disassembler()
    if tool is None:
        return {
            "available": False,
            "tool": None,
            "ok": None,
            "kernels": {},
            "note": "SASS not checked: no cuobjdump or nvdisasm found",
        }
    try:
        ops = sass_opcodes(cubin, tool)
    except (OSError, subprocess.SubprocessError) as e:
        return {
            "available": False,
            "tool": tool[0],
            "ok": None,
            "kernels": {},
            "note": f"SASS not checked: {e}",
        }
    kernels = {}
    for x in module.launches:
        if x.kernel in kernels:
            continue
        want = expected_sass(x.pattern.instr)
        found = ops.get(x.kernel, [])
        counts = {k: found.count(k) for k in dict.fromkeys(found)}
        ok = bool(found) and set(found) == {want} and len(found) >= x.per_iteration
        kernels[x.kernel] = {"expected": want, "found": counts, "ok": ok}
    ok = all(k["ok"] for k in kernels.values())
    note = (
        f"SASS checked with {tool[0]}: every kernel issues only its expected opcode"
        if ok
        else f"SASS checked with {tool[0]}: "
        + "; ".join(
            f"{n} expected {k['expected']}, found {k['found'] or 'none'}"
            for n, k in kernels.items()
            if not k["ok"]
        )
    )
    return {"available": True, "tool": tool[0], "ok": ok, "kernels": kernels, "note": note}


# ---- compile -----------------------------------------------------------------------------------------------


def compile_module(module: Module):
    from smemtile.gpu.nvrtc import compile_cubin

    return compile_cubin(
        module.source, list(module.kernels), module.arch, filename="smemtile_microkernels.cu"
    )


_PTX_SHARED = re.compile(r"^\s*(?:@%?\w+\s+)?((?:ld|st)\.shared|ldmatrix|stmatrix|cp\.async\.c[ag])\S*\s.*;")


def ptx_by_kernel(module: Module) -> dict[str, list[str]]:
    """Kernel -> its distinct shared-memory PTX instructions (register names normalised), from NVRTC's PTX."""
    from smemtile.gpu.nvrtc import _check, _nvrtc, out_buffer

    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(module.source.encode(), b"smemtile_microkernels.cu", 0, [], [])
    _check(nvrtc, err, "create program")
    try:
        opts = [b"--std=c++17", f"-arch=compute_{module.arch.split('_')[1]}".encode()]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        _check(nvrtc, status, "compile (PTX)")
        err, size = nvrtc.nvrtcGetPTXSize(prog)
        _check(nvrtc, err, "PTX size")
        buf = out_buffer(size)  # never b" " * size (see smemtile.gpu.nvrtc.out_buffer)
        (err,) = nvrtc.nvrtcGetPTX(prog, buf)
        _check(nvrtc, err, "PTX")
        buf = bytes(buf)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    out: dict[str, list[str]] = {}
    cur = None
    for line in buf.rstrip(b"\x00 ").decode(errors="replace").splitlines():
        m = re.search(r"\.entry\s+(\w+)", line)
        if m:
            cur = m.group(1)
            out[cur] = []
            continue
        if cur and _PTX_SHARED.match(line):
            text = re.sub(r"%r[d]?\d+", "%r", re.sub(r"%p\d+", "%p", line.strip()))
            if text not in out[cur]:
                out[cur].append(text)
    return out


# ---- the GPU run -------------------------------------------------------------------------------------------


class _Loaded:
    """The module's cubin loaded on the current context, with one device copy of each launch's tables."""

    def __init__(self, module: Module, cubin: bytes):
        from smemtile.gpu.run import DeviceBuffer, kernel_attributes, set_max_dynamic_smem
        from smemtile.gpu.run import Module as LoadedModule

        self.module = module
        self.handle = LoadedModule(cubin, what="cuModuleLoadData")
        self.funcs = {k: self.handle.kernel(k) for k in module.kernels}  # cuda.core Kernels
        attrs = {k: kernel_attributes(f) for k, f in self.funcs.items()}
        self.registers = {k: a["registers"] for k, a in attrs.items()}
        self.local_bytes = {k: a["local_bytes"] for k, a in attrs.items()}
        big = max(x.smem_bytes for x in module.launches)
        if big > 48 * 1024:
            device = _current_device()
            for k, f in self.funcs.items():
                set_max_dynamic_smem(f, big, device, k)
        gbytes = max(x.global_bytes for x in module.launches)
        self.gsrc = DeviceBuffer(gbytes)
        self.gsrc.fill(1)
        self.tables = [
            (
                DeviceBuffer.from_array(np.ascontiguousarray(x.addr)),
                DeviceBuffer.from_array(x.on),
                DeviceBuffer.from_array(x.warp_on),
                DeviceBuffer.from_array(np.ascontiguousarray(x.src)),
            )
            for x in module.launches
        ]

    def run(self, index: int, blocks: int) -> np.ndarray:
        """Launch ``module.launches[index]`` on ``blocks`` blocks; the cycles of every (block, warp), -1 idle."""
        from smemtile.gpu.run import DeviceBuffer, kernel_args, launch, launch_config, synchronize

        x = self.module.launches[index]
        warps = x.threads // 32
        cycles = DeviceBuffer(blocks * warps * 8)
        sink = DeviceBuffer(blocks * x.threads * 4)
        a, on, won, src = self.tables[index]
        P, U = ctypes.c_void_p, ctypes.c_uint
        args = kernel_args(
            (a.addr, on.addr, won.addr, src.addr, self.gsrc.addr, x.iterations, 0, cycles.addr, sink.addr),
            (P, P, P, P, P, U, U, P, P),
        )
        try:
            config = launch_config((blocks, 1, 1), (x.threads, 1, 1), x.smem_bytes)
            launch(self.funcs[x.kernel], config, args, 0, f"cuLaunchKernel({x.kernel})")
            try:
                synchronize("cuCtxSynchronize")
            except RuntimeError as e:
                raise VerificationFailed(f"microkernel {x.kernel} ({x.pattern.label}) faulted: {e}") from None
            return cycles.to_array((blocks, warps), np.int64)
        finally:
            cycles.free()
            sink.free()

    def close(self) -> None:
        for t in self.tables:
            for b in t:
                b.free()
        self.gsrc.free()
        try:
            self.handle.close()
        except Exception:  # pragma: no cover - best effort
            pass


def _current_device() -> int:
    from smemtile.gpu.run import _core

    return int(_core().Device().device_id)


def time_launches(loaded: _Loaded, blocks: int) -> dict[str, dict]:
    """Label -> cycles per instruction (median over warps, blocks and TIMED_LAUNCHES launches, after a warm-up)."""
    module = loaded.module
    per_label: dict[str, list[float]] = {}
    for label in module.labels:
        idx = [i for i, x in enumerate(module.launches) if x.pattern.label == label]
        for i in idx:
            loaded.run(i, blocks)  # warm-up (and the first check that nothing faults)
        samples = []
        for _ in range(TIMED_LAUNCHES):
            cyc = np.zeros((blocks, module.launches[idx[0]].threads // 32), dtype=np.float64)
            inst = np.zeros(cyc.shape[1], dtype=np.float64)
            for i in idx:
                x = module.launches[i]
                c = loaded.run(i, blocks)
                cyc += np.where(c >= 0, c, 0)
                inst += x.active_slots() * x.iterations * x.repeats
            on = inst > 0
            samples += list((cyc[:, on] / inst[on]).ravel())
        per_label[label] = samples
    return {
        k: {
            "cycles_per_instruction": statistics.median(v),
            "cycles_min": min(v),
            "cycles_max": max(v),
            "samples": len(v),
        }
        for k, v in per_label.items()
    }


# ---- Nsight Compute ----------------------------------------------------------------------------------------


def _save_plan(module: Module, cubin: bytes, folder: Path) -> None:
    (folder / "module.cubin").write_bytes(cubin)
    plan = [
        {
            "kernel": x.kernel,
            "threads": x.threads,
            "smem_bytes": x.smem_bytes,
            "iterations": x.iterations,
            "global_bytes": x.global_bytes,
        }
        for x in module.launches
    ]
    (folder / "plan.json").write_text(json.dumps({"kernels": list(module.kernels), "launches": plan}))
    np.savez(
        folder / "tables.npz",
        **{
            f"{k}{i}": getattr(x, k)
            for i, x in enumerate(module.launches)
            for k in ("addr", "on", "warp_on", "src")
        },
    )


class _PlannedLaunch:
    """A launch read back from a saved plan (the --target runner has no Pattern objects)."""

    def __init__(self, d: dict, tables, i: int):
        self.kernel, self.threads, self.smem_bytes = d["kernel"], d["threads"], d["smem_bytes"]
        self.iterations, self.global_bytes = d["iterations"], d["global_bytes"]
        self.addr, self.on, self.warp_on, self.src = (
            tables[f"{k}{i}"] for k in ("addr", "on", "warp_on", "src")
        )
        self.pattern = type("P", (), {"label": d["kernel"]})()


def _target(folder: str, device: str) -> int:
    """Under ncu: load the saved module and run every launch once, with one block, in plan order."""
    from smemtile.gpu.run import open_device

    open_device(int(device))
    f = Path(folder)
    plan = json.loads((f / "plan.json").read_text())
    tables = np.load(f / "tables.npz")
    launches = tuple(_PlannedLaunch(d, tables, i) for i, d in enumerate(plan["launches"]))
    module = Module("", "", tuple(plan["kernels"]), launches)  # type: ignore[arg-type]
    loaded = _Loaded(module, (f / "module.cubin").read_bytes())
    try:
        for i in range(len(launches)):
            loaded.run(i, 1)
    finally:
        loaded.close()
    return 0


def find_ncu() -> str | None:
    return shutil.which("ncu")


def parse_ncu_rows(text: str, names) -> list[dict[str, float]]:
    """Every profiled ``smk_*`` launch of ``ncu --csv --page raw`` in order: metric -> value."""
    start = text.find('"ID"')
    if start < 0:
        raise ValueError("no header row in ncu's output")
    rows = []
    for r in csv.DictReader(io.StringIO(text[start:])):
        if not str(r.get("Kernel Name", "")).startswith("smk_"):
            continue  # the units row and anything else
        vals = {}
        for n in names:
            try:
                vals[n] = float(str(r.get(n, "")).replace(",", ""))
            except ValueError:
                pass
        rows.append(vals)
    return rows


# instruction counters per op (names from `ncu --query-metrics --chip gh100` on the H200; stmatrix has only an
# sm__ counter)
INSTRUCTION_COUNTERS = {
    "load": "smsp__inst_executed_op_shared_ld.sum",
    "store": "smsp__inst_executed_op_shared_st.sum",
    "ldmatrix": "smsp__inst_executed_op_ldsm.sum",
    "cp.async": "smsp__inst_executed_op_ldgsts.sum",
    "stmatrix": "sm__sass_inst_executed_op_shared_stsm.sum",
}


def profile(
    module: Module, cubin: bytes, device: int = 0, attempts: int = 2, failures: list[str] | None = None
) -> list[dict[str, float]]:
    """Each launch once under ncu (one block); raw counters per launch, in launch order. A failed ncu run is
    tried once more (the profiler can fail transiently; its error goes to ``failures``); the last is raised."""
    from smemtile.gpu.ncu import NcuError

    for attempt in range(attempts):
        try:
            return _profile_once(module, cubin, device)
        except NcuError as e:
            if attempt + 1 == attempts:
                raise
            if failures is not None:
                failures.append(str(e))
    raise AssertionError("unreachable")


def _profile_once(module: Module, cubin: bytes, device: int) -> list[dict[str, float]]:
    from smemtile.gpu.ncu import NcuError
    from smemtile.gpu.ncu_parse import METRICS

    metrics = tuple(dict.fromkeys((*METRICS, *INSTRUCTION_COUNTERS.values())))
    exe = find_ncu()
    if exe is None:
        raise NcuError("ncu not found on PATH")
    with tempfile.TemporaryDirectory(prefix="smemtile_mk_") as d:
        _save_plan(module, cubin, Path(d))
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        cmd = [
            exe,
            "--clock-control",
            "none",
            "--target-processes",
            "all",
            "-k",
            "regex:^smk_",
            "--metrics",
            ",".join(metrics),
            "--csv",
            "--page",
            "raw",
            "--print-units",
            "base",
            sys.executable,
            "-m",
            "smemtile.gpu.microkernel",
            "--target",
            d,
            str(device),
        ]
        try:
            p = subprocess.run(
                cmd, capture_output=True, text=True, env=env, timeout=NCU_TIMEOUT_S + 2 * len(module.launches)
            )
        except subprocess.TimeoutExpired:
            raise NcuError("ncu timed out") from None
    if p.returncode != 0:
        lines = (p.stderr or p.stdout).strip().splitlines()
        # a Python traceback of the profiled child: its innermost frames and the error, not only the last line
        frames = [ln.strip() for ln in lines if ln.lstrip().startswith('File "')][-4:]
        tail = [*frames, *lines[-3:]]
        raise NcuError(f"ncu exited {p.returncode}: {' | '.join(tail)}")
    try:
        rows = parse_ncu_rows(p.stdout, metrics)
    except ValueError as e:
        raise NcuError(f"{e}: {' | '.join((p.stderr or p.stdout).strip().splitlines()[-3:])}") from None
    if len(rows) != len(module.launches):
        raise NcuError(
            f"expected {len(module.launches)} profiled launches, ncu reported {len(rows)}: "
            + " | ".join((p.stderr or p.stdout).strip().splitlines()[-3:])
        )
    return rows


def ncu_by_label(module: Module, rows: list[dict[str, float]]) -> dict[str, dict]:
    """Label -> measured wavefronts per instruction (summed over the label's launches, one block each)."""
    W = "l1tex__data_pipe_lsu_wavefronts_mem_shared"
    out: dict[str, dict] = {}
    for x, r in zip(module.launches, rows, strict=True):
        o = out.setdefault(
            x.pattern.label,
            {
                "wavefronts": 0.0,
                "ld": 0.0,
                "st": 0.0,
                "misc": 0.0,
                "instructions_expected": 0,
                "instructions_counted": 0.0,
                "model_wavefronts": 0,
            },
        )
        n = x.iterations * x.repeats
        o["wavefronts"] += r.get(f"{W}.sum", 0.0) - r.get(f"{W}_op_misc.sum", 0.0)
        o["ld"] += r.get(f"{W}_op_ld.sum", 0.0)
        o["st"] += r.get(f"{W}_op_st.sum", 0.0)
        o["misc"] += r.get(f"{W}_op_misc.sum", 0.0)
        o["instructions_expected"] += x.instructions * n
        o["model_wavefronts"] += x.model_wavefronts * n
        o["instructions_counted"] += r.get(INSTRUCTION_COUNTERS[x.pattern.instr.op], float("nan"))
    for label, o in out.items():
        x = module.launches_of(label)[0]
        n = o["instructions_expected"]
        o["wavefronts_per_instruction"] = o["wavefronts"] / n if n else None
        o["model_wavefronts_per_instruction"] = o["model_wavefronts"] / n if n else None
        countable = not (x.pattern.instr.op == "cp.async" and x.pattern.instr.cache == "cg")
        o["countable"] = countable
        diff = (
            None
            if o["wavefronts_per_instruction"] is None
            else abs(o["wavefronts_per_instruction"] - o["model_wavefronts_per_instruction"])
        )
        o["agree"] = (diff is not None and diff <= AGREE_TOL) if countable else None
        c = o["instructions_counted"]
        o["instructions_counted"] = None if c != c else c  # NaN: the counter was not reported
        o["note"] = (
            None if countable else "cp.async.cg (L1 bypass): ncu counts none of its shared-memory writes"
        )
    return out


# ---- verify: a spec without a kernel ------------------------------------------------------------------------


def _layout_text(layouts: dict) -> str:
    return "; ".join(f"{k}: {v.describe()}" for k, v in layouts.items()) or "as declared"


def spec_patterns(spec, variants: dict) -> tuple[list[Pattern], dict[str, dict]]:
    """Every access of every variant as a Pattern (the model's instructions), plus each variant's layouts."""
    from smemtile.model.analysis import analyze_spec

    threads = 32 * spec.warps
    pats, lays = [], {}
    for v, layouts in variants.items():
        results = analyze_spec(spec, layouts or None)
        lays[v] = {r.access.buffer: r.layout for r in results}
        pats += [pattern_from_result(r, variant=v, threads=threads, source=spec.source) for r in results]
    return pats, lays


def _row(p: Pattern, module: Module, compiled, ptx: dict | None, sass: dict, buffer: str) -> dict:
    launches = module.launches_of(p.label)
    kernels = list(dict.fromkeys(x.kernel for x in launches))
    res = [compiled.resources.get(k) for k in kernels] if compiled is not None else []
    on = p.active.any(axis=1)
    row: dict[str, Any] = {
        "variant": p.variant,
        "access": p.name,
        "buffer": buffer,
        "op": p.instr.op,
        "width": p.instr.width,
        "instruction": p.instr.describe(),
        "ptx_instruction": p.instr.ptx,
        "kernels": kernels,
        "instructions": int(on.sum()),
        "warps": len(set(p.warp.tolist())),
        "model_wavefronts": float(p.wavefronts[on].mean()),
        "model_worst": int(p.wavefronts[on].max()),
        "model_ideal": float(p.ideal[on].mean()),
        "registers": max((r.registers for r in res if r and r.registers is not None), default=None),
        "spills": max((r.spills for r in res if r and r.spills is not None), default=None),
        "sass": {k: sass["kernels"][k] for k in kernels if k in sass.get("kernels", {})} or None,
        "cycles_per_instruction": None,
        "ncu_wavefronts": None,
        "agree": None,
    }
    if p.instr.op in ("ldmatrix", "stmatrix"):
        row.update(matrices=p.instr.matrices, trans=p.instr.trans)
    if p.instr.op == "cp.async":
        row["cache"] = p.instr.cache
    if ptx is not None:
        row["ptx"] = list(dict.fromkeys(line for k in kernels for line in ptx.get(k, [])))
    return row


def verify_spec(spec, variants: dict, *, compile_only: bool, device: int = 0, use_ncu: bool = False) -> dict:
    """Measure every access of ``spec`` (a spec without ``kernel:``) in each layout variant with microkernels.

    ``variants`` maps a name to buffer layouts (``{"baseline": {}, "fixed": fix_spec(spec).layouts}``).
    compile_only: NVRTC for the spec's arch on the CPU, registers and the PTX of each access, no GPU.
    Otherwise the module is built for the GPU's own arch (NoDevice, exit 3, without one), timed, and with
    ``use_ncu`` profiled. Patterns the hardware cannot issue raise SpecError (exit 2) before compiling.
    """
    import time

    t_start = time.perf_counter()
    pats, lays = spec_patterns(spec, variants)
    module = build_module(pats, spec.arch)  # refusals for the spec's own arch, before any GPU work
    dev = None
    if not compile_only:
        from smemtile.gpu.run import open_device

        dev = open_device(device)  # NoDevice -> exit 3
        arch = get_arch(dev.arch_name)
        if arch.name != spec.arch.name:
            module = build_module(pats, arch)
    compiled = compile_module(module)
    sass = check_sass(module, compiled.cubin)
    ptx = ptx_by_kernel(module) if compile_only else None
    buffers = {a.name: a.buffer for a in spec.accesses}
    rows = [_row(p, module, compiled, ptx, sass, buffers[p.name]) for p in pats]
    blocks = None
    ncu_doc: dict[str, Any] | None = None
    if dev is not None:
        blocks = dev.sm_count
        loaded = _Loaded(module, compiled.cubin)
        try:
            times = time_launches(loaded, blocks)
            for r, p in zip(rows, pats, strict=True):
                r.update(times[p.label])
                r["registers"] = max(loaded.registers[k] for k in r["kernels"])
                r["local_bytes"] = max(loaded.local_bytes[k] for k in r["kernels"])
        finally:
            loaded.close()
        t_ncu = time.perf_counter()
        if use_ncu:
            ncu_doc = _ncu_rows(module, compiled.cubin, device, rows, pats)
            ncu_doc["seconds"] = time.perf_counter() - t_ncu
    doc = _document(spec, module, compiled, sass, rows, lays, dev, blocks, compile_only, ncu_doc)
    doc["seconds"] = time.perf_counter() - t_start  # the whole verify, ncu included when asked for
    return doc


def _ncu_rows(module: Module, cubin: bytes, device: int, rows: list[dict], pats: list[Pattern]) -> dict:
    from smemtile.gpu.ncu import NcuError, ncu_version

    exe = find_ncu()
    if exe is None:
        return {"available": False, "error": "ncu not found on PATH", "agree": None}
    failures: list[str] = []
    try:
        by = ncu_by_label(module, profile(module, cubin, device, failures=failures))
    except (NcuError, ValueError, OSError) as e:
        return {
            "available": True,
            "error": str(e),
            "agree": None,
            "version": ncu_version(exe),
            "retried_after": failures,
        }
    for r, p in zip(rows, pats, strict=True):
        m = by[p.label]
        r.update(
            ncu_wavefronts=m["wavefronts_per_instruction"],
            agree=m["agree"],
            ncu_instructions=m["instructions_counted"],
            instructions_expected=m["instructions_expected"],
            ncu_ld_st=[m["ld"], m["st"]],
            ncu_note=m["note"],
        )
    flags = [r["agree"] for r in rows if r["agree"] is not None]
    return {
        "available": True,
        "version": ncu_version(exe),
        "clock_control": "none",
        "blocks": 1,
        "agree": all(flags) if flags else None,
        "error": None,
        "retried_after": failures,
    }


def _document(spec, module, compiled, sass, rows, lays, dev, blocks, compile_only, ncu_doc) -> dict:
    from smemtile.codegen.microkernel import IN_FLIGHT, TARGET_INSTRUCTIONS

    speed: dict[str, float] = {}
    by = {(r["variant"], r["access"]): r for r in rows}
    for (v, a), r in by.items():
        b = by.get(("baseline", a))
        if v == "fixed" and b and b.get("cycles_per_instruction") and r.get("cycles_per_instruction"):
            speed[a] = b["cycles_per_instruction"] / r["cycles_per_instruction"]
            r["speedup"] = speed[a]
    regs = [r["registers"] for r in rows if r.get("registers") is not None]
    return {
        "spec": spec.source,
        "name": spec.name,
        "mode": "microkernel",
        "compile_only": compile_only,
        "arch": module.arch,
        "spec_arch": spec.arch.name,
        "device": dev.to_dict() if dev is not None else None,
        "method": {
            "threads": 32 * spec.warps,
            "blocks": blocks,
            "instructions_per_warp": TARGET_INSTRUCTIONS,
            "in_flight": IN_FLIGHT,
            "timed_launches": TIMED_LAUNCHES,
            "cp_async_cache": "ca",
            "timing": "clock64() around the loop per warp; cycles per instruction, median over warps, "
            "blocks and launches",
        },
        "nvrtc_version": compiled.nvrtc_version,
        "registers": max(regs) if regs else None,
        "sass_check": {k: v for k, v in sass.items() if k != "kernels"},
        "variants": [
            {
                "variant": v,
                "layouts": {k: x.to_dict() for k, x in lay.items()},
                "layout_text": _layout_text(lay),
                "accesses": [r for r in rows if r["variant"] == v],
            }
            for v, lay in lays.items()
        ],
        "accesses": rows,
        "speedup": speed or None,
        "fixed_no_worse": (all(x >= 0.97 for x in speed.values()) if speed else None),
        "ncu": ncu_doc,
        "agree": None if ncu_doc is None else ncu_doc.get("agree"),
    }


# ---- measure: a catalogue ----------------------------------------------------------------------------------


def predict(patterns: list[Pattern]) -> list[dict]:
    """The model's side of each catalogue pattern (no CUDA)."""
    out = []
    for p in patterns:
        i = p.instr
        d: dict[str, Any] = {
            "name": p.name,
            "op": i.op,
            "width": i.width,
            "addresses": p.addresses[0].tolist(),
        }
        if i.op in ("ldmatrix", "stmatrix"):
            d.update(matrices=i.matrices, trans=i.trans)
        if i.op == "cp.async":
            d["cache"] = i.cache
            d["global"] = p.sources[0].tolist()
        if not p.active.all():
            d["active_lanes"] = np.flatnonzero(p.active[0]).tolist()
        d["note"] = p.note
        d["model"] = {"wavefronts": int(p.wavefronts[0]), "ideal": int(p.ideal[0])}
        out.append(d)
    return out


def measure_patterns(patterns: list[Pattern], arch: Arch, *, device: int = 0, use_ncu: bool = True) -> dict:
    """Predictions, then on the GPU: cycles per instruction and (with ncu) wavefronts per instruction."""
    from smemtile.gpu.ncu import ncu_version
    from smemtile.gpu.run import open_device

    rows = predict(patterns)
    build_module(patterns, arch)  # refusals for the catalogue's arch before touching the GPU
    dev = open_device(device)
    darch = get_arch(dev.arch_name)
    module = build_module(patterns, darch)
    compiled = compile_module(module)
    sass = check_sass(module, compiled.cubin)
    loaded = _Loaded(module, compiled.cubin)
    try:
        times = time_launches(loaded, dev.sm_count)
    finally:
        loaded.close()
    ncu: dict[str, Any] = {"available": False, "error": "ncu not found on PATH"}
    by: dict[str, dict] = {}
    if use_ncu and find_ncu():
        from smemtile.gpu.ncu import NcuError

        failures: list[str] = []
        try:
            by = ncu_by_label(module, profile(module, compiled.cubin, device, failures=failures))
            ncu = {
                "available": True,
                "version": ncu_version(),
                "clock_control": "none",
                "error": None,
                "retried_after": failures,
            }
        except (NcuError, ValueError, OSError) as e:
            ncu = {"available": True, "error": str(e), "retried_after": failures}
    elif not use_ncu:
        ncu = {"available": False, "error": "not requested"}
    for d, p in zip(rows, patterns, strict=True):
        m = by.get(p.label)
        kern = module.launches_of(p.label)[0].kernel
        d["measured"] = {
            "wavefronts_per_instruction": m["wavefronts_per_instruction"] if m else None,
            "instructions": m["instructions_counted"] if m else None,
            "instructions_expected": m["instructions_expected"] if m else None,
            "wavefronts_ld_st": [m["ld"], m["st"]] if m else None,
            "sass": sass["kernels"].get(kern, {}).get("found"),
            **times[p.label],
        }
        d["agree"] = m["agree"] if m else None
    flags = [d["agree"] for d in rows if d["agree"] is not None]
    return {
        "device": dev.to_dict(),
        "arch": darch.name,
        "ncu": ncu,
        "sass_check": {k: v for k, v in sass.items() if k != "kernels"},
        "nvrtc_version": compiled.nvrtc_version,
        "agreed": sum(flags),
        "compared": len(flags),
        "patterns": rows,
    }


if __name__ == "__main__":  # pragma: no cover - runs on a GPU under ncu
    if len(sys.argv) == 4 and sys.argv[1] == "--target":
        raise SystemExit(_target(sys.argv[2], sys.argv[3]))
    print("usage: python -m smemtile.gpu.microkernel --target PLAN_DIR DEVICE", file=sys.stderr)
    raise SystemExit(2)
