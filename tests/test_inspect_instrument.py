"""inspect's PTX rewriter (smemtile.model.ptx_instrument) without a GPU: the rewritten PTX of real kernels (NVRTC)
assembles with ptxas for sm_90, keeps the user's code and shared memory, and the record buffer decodes; plus the
parser of ncu's per-line source page and the argument fills (smemtile.gpu.inspect, CPU parts)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from smemtile.errors import SpecError
from smemtile.model import ptx_instrument as PI
from smemtile.model.ptx import SharedInstr, entry_names, shared_instructions

PTXAS = shutil.which("ptxas") or next((p for p in ["/usr/local/cuda/bin/ptxas"] if Path(p).exists()), None)

KERNELS = {
    "transpose": r"""
extern "C" __global__ void transpose(const float* in, float* out, int n) {
  __shared__ float tile[32][32];
  int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
  tile[threadIdx.y][threadIdx.x] = in[y * n + x];
  __syncthreads();
  out[(blockIdx.x * 32 + threadIdx.y) * n + blockIdx.y * 32 + threadIdx.x] = tile[threadIdx.x][threadIdx.y];
}
""",
    "widths": r"""
extern "C" __global__ void widths(int* o, const int* in) {
  __shared__ __align__(16) char buf[4096];
  int t = threadIdx.x;
  buf[t] = (char)in[t];
  ((short*)buf)[t + 64] = (short)in[t];
  ((int*)buf)[t + 128] = in[t];
  ((long long*)buf)[t + 128] = (long long)in[t];
  ((float2*)buf)[t + 256] = make_float2(in[t], 1.f);
  ((int4*)buf)[t + 128] = make_int4(t, t, t, t);
  ((char2*)buf)[t + 32] = make_char2(t, t);
  ((char4*)buf)[t + 32] = make_char4(t, t, t, t);
  buf[3] = 7;
  __syncthreads();
  int4 v = ((int4*)buf)[t ^ 1];
  float2 f = ((float2*)buf)[t ^ 3];
  o[t] = buf[t ^ 5] + ((short*)buf)[t] + ((int*)buf)[t] + ((long long*)buf)[t] + v.x * v.y + v.z * v.w + (int)(f.x * f.y)
       + ((char2*)buf)[t].y + ((char4*)buf)[t].z + buf[17];
  unsigned a = (unsigned)__cvta_generic_to_shared(buf + t * 4);
  unsigned r;
  asm volatile("ld.shared.u32 %0, [%1+8];" : "=r"(r) : "r"(a));
  o[t + 64] = r;
}
""",
    "mma_ops": r"""
extern "C" __global__ void mma_ops(int* o, const int* g) {
  __shared__ __align__(128) unsigned short tile[64 * 64];
  extern __shared__ __align__(16) int dyn[];
  int t = threadIdx.x;
  unsigned a = (unsigned)__cvta_generic_to_shared(tile + (t % 16) * 64 + (t / 16) * 8);
  unsigned r0, r1, r2, r3;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: "r"((unsigned)__cvta_generic_to_shared(dyn + t)), "l"(g + t));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"((unsigned)__cvta_generic_to_shared(dyn + 256 + 4 * t)), "l"(g + 4 * t));
  asm volatile("cp.async.wait_all;");
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(r0), "=r"(r1) : "r"(a));
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};" :: "r"(a), "r"(r0), "r"(r1), "r"(r2), "r"(r3));
  atomicAdd(&dyn[t % 7], 1);
  int old = atomicMax(&dyn[t % 5 + 8], t);
  __syncthreads();
  o[t] = dyn[t] + old + r0 + r3;
}
""",
    "generic": r"""
__device__ __noinline__ float load_any(const float* p, int i) { return p[i]; }
extern "C" __global__ void generic(float* out, float* p, int sel) {
  __shared__ float s[256];
  s[threadIdx.x] = threadIdx.x;
  __syncthreads();
  float* q = sel ? s : p;
  q[threadIdx.x ^ 1] += 1.0f;
  out[threadIdx.x] = q[threadIdx.x] + load_any(s, threadIdx.x);
}
""",
    "pred": r"""
extern "C" __global__ void pred(int* o, int n) {
  __shared__ int s[256];
  int t = threadIdx.x;
  s[t] = t;
  __syncthreads();
  int v = 0;
  if (t < n) v = s[(t * 3) & 255];
  unsigned a = (unsigned)__cvta_generic_to_shared(s + t);
  asm volatile("{\n\t.reg .pred %%pp;\n\tsetp.lt.u32 %%pp, %1, 7;\n\t@%%pp st.shared.u32 [%0], %1;\n\t"
               "@!%%pp st.shared.u32 [%0+4], %1;\n}" :: "r"(a), "r"(t));
  o[t] = v + s[t ^ 2];
}
""",
    "loops": r"""
extern "C" __global__ void loops(float* out, const int* sel, int iters) {
  __shared__ float s[32 * 33];
#pragma unroll 1
  for (int i = threadIdx.x; i < 32 * 33; i += blockDim.x) s[i] = i;
  __syncthreads();
  float acc = 0.f;
#pragma unroll 1
  for (int k = 0; k < iters; ++k) {
    if (sel[k] & 1) acc += s[(threadIdx.x * 33 + k) % (32 * 33)];
    else acc -= s[(threadIdx.x + k) % (32 * 33)];
  }
  if (acc > 0.f) return;
  out[threadIdx.x] = acc;
}
""",
    "dynamic": r"""
extern "C" __global__ void dynamic(double* o) {
  extern __shared__ double dsm[];
  dsm[threadIdx.x] = threadIdx.x;
  __syncthreads();
  o[threadIdx.x] = dsm[(threadIdx.x * 2) % blockDim.x];
}
""",
}


def compile_ptx(name: str) -> str:
    from smemtile.gpu.nvrtc import compile_cubin

    return compile_cubin(KERNELS[name], [], "sm_90", options=("-lineinfo",), filename=f"{name}.cu").ptx


instructions = shared_instructions  # smemtile.model.ptx's list: what inspect instruments


def ptxas(ptx: str, tmp_path: Path) -> subprocess.CompletedProcess:
    src = tmp_path / "k.ptx"
    src.write_text(ptx)
    return subprocess.run(
        [PTXAS, "-arch=sm_90", "-v", str(src), "-o", str(tmp_path / "k.cubin")],
        capture_output=True,
        text=True,
        timeout=120,
    )


def smem_bytes(log: str) -> dict[str, int]:
    out, cur = {}, None
    for line in log.splitlines():
        if m := re.search(r"Compiling entry function '([^']+)'", line):
            cur = m.group(1)
        elif cur and (m := re.search(r"(\d+) bytes smem", line)):
            out[cur] = int(m.group(1))
        elif cur and "Used" in line and "registers" in line:
            out.setdefault(cur, 0)
    return out


def _added(line: str) -> bool:
    return bool(re.search(r"smt_|SMT_|smemtile: |" + PI.PARAM, line))


def split_instrumented(out: str) -> tuple[list[str], list[str], list[str]]:
    """(the text before the prologue, the recording copy, the user's statements after ``$SMT_PLAIN:``)."""
    lines = out.split("\n")
    pro = next(i for i, ln in enumerate(lines) if "smemtile: recording prologue" in ln)
    copy = next(i for i, ln in enumerate(lines) if "smemtile: the recording copy" in ln)
    plain = lines.index("$SMT_PLAIN:")
    return lines[:pro], lines[copy + 1 : plain - 2], lines[plain + 1 :]


def strip_sites(copy: list[str]) -> list[str]:
    """The recording copy without its sites and with its labels named back."""
    out, skipping = [], False
    for ln in copy:
        if "// smemtile: record instruction" in ln:
            skipping = True
        elif skipping and re.match(r"\$SMT_SKIP_\d+:$", ln):
            skipping = False
        elif not skipping:
            out.append(re.sub(r"(\$L__\w+?)_smt\b", r"\1", ln))
    return out


@pytest.mark.skipif(PTXAS is None, reason="ptxas not installed")
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_instrumented_ptx_assembles_and_keeps_the_kernel(name, tmp_path):
    ptx = compile_ptx(name)
    (entry,) = [e for e in entry_names(ptx) if e == name]
    listed = instructions(ptx, entry)
    instrs = [i for i in listed if not i.function]  # a device function's (generic's load_any) is not recorded
    assert instrs, "the kernel has shared-memory instructions"
    assert len(listed) - len(instrs) == (name == "generic")
    out = PI.instrument(ptx, entry, listed, PI.Sample(blocks=3, warps=2, executions=5))
    # every instruction of the entry that can reach shared memory got a recording site, each before its line
    sites = re.findall(r"// smemtile: record instruction (\d+)", out)
    assert [int(s) for s in sites] == list(range(len(instrs)))
    for ins in instrs:
        block = out.split(f"$SMT_SKIP_{ins.index}:\n", 1)[1].split("\n", 1)[0]
        assert PI._norm_text(block).startswith(PI._norm_text(ins.text).rstrip(","))
    # the user's code is untouched: the text before the prologue (less the added lines) and the statements after
    # $SMT_PLAIN give the original back; the recording copy is the same statements with its sites in front
    head, copy, plain = split_instrumented(out)
    original = ptx.split("\n")
    assert original[len(original) - len(plain) :] == plain
    kept = [ln.rstrip(",") for ln in head if not _added(ln)]
    assert kept == [ln.rstrip(",") for ln in original[: len(original) - len(plain)]]
    statements, top_decls, depth = [], [], 0  # the body's statements, up to its closing brace
    for ln in plain:
        code = ln.split("//", 1)[0]
        if depth == 0 and code.strip().startswith((".reg", ".shared", ".local")):
            top_decls.append(ln)  # outside every { } scope: declared once, before the copy
        depth += code.count("{") - code.count("}")
        if depth < 0:
            break
        statements.append(ln)
    assert [ln for ln in strip_sites(copy) if ln.strip()] == [
        ln for ln in statements if ln.strip() and ln not in top_decls
    ]
    assert f".param .u64 {PI.PARAM}\n)" in out
    a, b = ptxas(ptx, tmp_path), ptxas(out, tmp_path)
    assert a.returncode == 0, a.stderr
    assert b.returncode == 0, b.stderr[-2000:]
    # the recording allocates no shared memory and leaves the kernel's own as it was
    assert smem_bytes(b.stderr) == smem_bytes(a.stderr)


def test_ops_and_forms_covered():
    """The corpus above exercises what the rewriter must handle (a guard against the kernels drifting)."""
    seen = set()
    for name in KERNELS:
        ptx = compile_ptx(name)
        for ins in instructions(ptx, name):
            base = PI._ADDR.match(ins.addr).group(1)
            form = "sym" if not base.startswith("%") else ("r64" if base.startswith("%rd") else "r32")
            seen |= {(ins.op, ins.width, ins.space), ("form", form), ("pred", bool(ins.predicate))}
    for want in [
        ("load", 1, "shared"),
        ("store", 2, "shared"),
        ("store", 4, "shared"),
        ("store", 8, "shared"),
        ("store", 16, "shared"),
        ("load", 16, "shared"),
        ("ldmatrix", 16, "shared"),
        ("stmatrix", 16, "shared"),
        ("cp.async", 4, "shared"),
        ("cp.async", 16, "shared"),
        ("atom", 4, "shared"),
        ("load", 4, "generic"),
        ("store", 4, "generic"),
        ("form", "sym"),
        ("form", "r64"),
        ("form", "r32"),
        ("pred", True),
    ]:
        assert want in seen, want


def test_generic_access_checks_the_space_and_guard_is_honoured():
    ptx = compile_ptx("generic")
    out = PI.instrument(ptx, "generic", instructions(ptx, "generic"), PI.Sample())
    # q[i ^ 1] += 1 (a generic ld and st) and q[i]; the __noinline__ helper's load is in a .func, not the entry
    assert out.count("isspacep.shared") == 3
    ptx = compile_ptx("pred")
    instrs = instructions(ptx, "pred")
    out = PI.instrument(ptx, "pred", instrs, PI.Sample())
    guarded = [i for i in instrs if i.predicate]
    assert [i.predicate for i in guarded] == ["@%pp", "@!%pp"]
    for ins in guarded:
        skip = f"bra \t$SMT_SKIP_{ins.index};"
        flipped = "@!%pp" if ins.predicate == "@%pp" else "@%pp"
        assert f"{flipped} {skip}" in out


def test_sample_bounds_and_symbols_in_the_prologue():
    ptx = compile_ptx("transpose")
    out = PI.instrument(
        ptx, "transpose", instructions(ptx, "transpose"), PI.Sample(blocks=3, warps=5, executions=7)
    )
    assert "setp.lt.u32 \t%smt_p0, %smt_r5, 3;" in out
    assert "setp.lt.and.u32 \t%smt_p0, %smt_r7, 5, %smt_p0;" in out
    assert "setp.ge.u32 \t%smt_p3, %smt_r5, 7;" in out
    assert PI.shared_symbols(ptx, "transpose") == ["_ZZ9transposeE4tile"]


def test_shared_symbols_skip_what_the_entry_does_not_use():
    ptx = compile_ptx("mma_ops")
    assert PI.shared_symbols(ptx, "mma_ops") == ["dyn", "_ZZ7mma_opsE4tile"]  # module scope first
    two = compile_ptx("transpose") + "\n.extern .shared .align 16 .b8 unused_dyn[];\n"
    assert "unused_dyn" not in PI.shared_symbols(two, "transpose")


def test_errors_are_one_line():
    ptx = compile_ptx("transpose")
    instrs = instructions(ptx, "transpose")
    with pytest.raises(SpecError, match="no entry 'nope'.*transpose"):
        PI.instrument(ptx, "nope", instrs, PI.Sample())
    once = PI.instrument(ptx, "transpose", instrs, PI.Sample())
    with pytest.raises(SpecError, match="already instrumented"):
        PI.instrument(once, "transpose", instrs, PI.Sample())
    bad = SharedInstr(**{**instrs[0].to_dict(), "addr": "%rd1*4"})
    with pytest.raises(SpecError, match="address operand"):
        PI.instrument(ptx, "transpose", [bad], PI.Sample())
    gone = SharedInstr(**{**instrs[0].to_dict(), "text": "st.shared.f32 [%rd99], %f9"})
    with pytest.raises(SpecError, match="is not in the entry"):
        PI.instrument(ptx, "transpose", [gone], PI.Sample())
    with pytest.raises(SpecError, match="sample.warps"):
        PI.Sample(warps=0)
    with pytest.raises(SpecError) as e:
        PI.instrument(ptx, "nope", instrs, PI.Sample())
    assert "\n" not in str(e.value)


# ---- decoding -----------------------------------------------------------------------------------------------


def _buffer(layout: PI.BufferLayout, symbols: list[int], slots: dict, counts: dict) -> bytes:
    words = np.zeros(layout.nbytes // 4, np.uint32)
    words[:4] = [PI.MAGIC, layout.n_instr, len(symbols), 4096]
    words[4 : 4 + len(symbols)] = symbols
    s = layout.sample
    for (b, w, k), c in counts.items():
        words[layout.count_off + (b * s.warps + w) * layout.n_instr + k] = c
    for (b, w, k, e), (mask, addrs) in slots.items():
        at = layout.slot_off + PI.SLOT_WORDS * (((b * s.warps + w) * layout.n_instr + k) * s.executions + e)
        words[at : at + 4] = [k + 1, mask, e, b * s.warps + w]
        words[at + 4 : at + 36] = addrs
    return words.tobytes()


def test_layout_numbers():
    lay = PI.BufferLayout(3, 2, PI.Sample(blocks=2, warps=4, executions=8))
    assert lay.count_off == 32 and lay.n_counters == 24 and lay.slot_off == 64
    assert lay.n_slots == 192 and lay.nbytes == 4 * (64 + 36 * 192)


def test_decode_synthetic_buffer():
    sample = PI.Sample(blocks=2, warps=2, executions=3)
    lay = PI.BufferLayout(2, 2, sample)
    base = 0x400
    col = [base + 128 * lane for lane in range(32)]  # tile[lane][0]: one bank, 32 rows
    half = [base + 2048 + 4 * lane if lane < 16 else 0 for lane in range(32)]
    raw = PI.decode_raw(
        _buffer(
            lay,
            [base, base + 4096],
            {(0, 0, 1, 0): (0xFFFFFFFF, col), (1, 1, 0, 2): (0x0000FFFF, half)},
            {(0, 0, 1): 1, (1, 1, 0): 5, (0, 1, 0): 2},
        ),
        lay,
        ["tile", "dyn"],
    )
    assert raw.ran and raw.dynamic_smem == 4096
    assert raw.symbols == {"tile": base, "dyn": base + 4096}
    assert raw.instr.tolist() == [1, 0] and raw.block.tolist() == [0, 1] and raw.warp.tolist() == [0, 1]
    assert raw.execution.tolist() == [0, 2] and raw.active.tolist() == [0xFFFFFFFF, 0xFFFF]
    assert raw.executions == {0: 7, 1: 1}
    assert raw.dropped == 2  # warp (1, 1) executed instruction 0 five times, three were recorded
    assert PI.window_base(raw) == base
    off = PI.lane_addresses(raw, _instrs(("load", 1), ("store", 1)))
    assert off[0].tolist() == [128 * lane for lane in range(32)]
    assert off[1].tolist() == [2048 + 4 * lane for lane in range(16)] + [0] * 16
    assert PI.block_index(7, (3, 2, 2)) == (1, 0, 1)


def _instrs(*ops):
    return [
        SharedInstr(k, 1, "x", op, 16 if "matrix" in op else 4, m, False, "shared", "%r1", "", 0, None)
        for k, (op, m) in enumerate(ops)
    ]


def test_decode_ldmatrix_keeps_only_row_address_lanes():
    sample = PI.Sample(blocks=1, warps=1, executions=1)
    lay = PI.BufferLayout(1, 1, sample)
    addrs = [0x400 + 16 * lane for lane in range(32)]
    raw = PI.decode_raw(
        _buffer(lay, [0x400], {(0, 0, 0, 0): (0xFFFFFFFF, addrs)}, {(0, 0, 0): 1}), lay, ["t"]
    )
    off = PI.lane_addresses(raw, _instrs(("ldmatrix", 2)))
    assert off[0].tolist() == [16 * lane for lane in range(16)] + [0] * 16


def test_decode_rejects_inconsistent_buffers():
    sample = PI.Sample(blocks=1, warps=1, executions=2)
    lay = PI.BufferLayout(1, 0, sample)
    buf = bytearray(_buffer(lay, [], {(0, 0, 0, 1): (1, [0] * 32)}, {(0, 0, 0): 2}))
    at = 4 * (lay.slot_off + PI.SLOT_WORDS * 1)
    buf[at + 8 : at + 12] = (0).to_bytes(4, "little")  # slot 1 claims to be execution 0
    with pytest.raises(ValueError, match="inconsistent"):
        PI.decode_raw(bytes(buf), lay, [])
    with pytest.raises(ValueError, match="layout needs"):
        PI.decode_raw(bytes(buf[:-4]), lay, [])
    empty = PI.decode_raw(bytes(lay.nbytes), lay, [])
    assert not empty.ran and len(empty.instr) == 0


# ---- smemtile.gpu.inspect, CPU parts ------------------------------------------------------------------------

CUDA_SASS_PAGE = """\
"Kernel Name","transpose"
"File Name","/tmp/x/transpose.cu"
"Line No","Source","Address","Source","Instructions Executed","L1 Wavefronts Shared Excessive","L1 Wavefronts Shared","L1 Wavefronts Shared Ideal"
"4","  tile[threadIdx.y][threadIdx.x] = in[y * n + x];","","","64","0","32","32"
"","","0x7f0000000100","      LDG.E R2, desc[UR4][R2.64]","32","0","0","0"
"","","0x7f0000000110","      STS [R5], R2","32","0","32","32"
"7","  out[...] = tile[threadIdx.x][threadIdx.y];","","","64","992","1024","32"
"","","0x7f0000000200","      LDS R7, [R6]","32","992","1024","32"
"","","0x7f0000000210","      STG.E desc[UR4][R8.64], R7","32","0","0","0"
"8","}","","","0","0","0","0"
"""


def test_parse_cuda_sass_source_page():
    from smemtile.gpu.inspect import parse_source_lines

    lines = parse_source_lines(CUDA_SASS_PAGE)
    assert set(lines) == {("/tmp/x/transpose.cu", 4), ("/tmp/x/transpose.cu", 7)}
    assert lines[("/tmp/x/transpose.cu", 7)] == {
        "wavefronts": 1024,
        "ideal": 32,
        "instructions": 32,
        "sass": ["LDS"],
    }
    assert lines[("/tmp/x/transpose.cu", 4)]["sass"] == ["STS"]
    with pytest.raises(ValueError, match="Line No"):
        parse_source_lines('"Address","Source"\n"0x1","LDS R1, [R2]"\n')
    # another ncu's spelling: "File Path" and "Function Name" rows, '-' for what a row lacks, two files
    other = (
        CUDA_SASS_PAGE.replace('"Kernel Name","transpose"', '"Function Name","transpose"')
        .replace('"File Name"', '"File Path"')
        .replace('"","","0x7f0000000200"', '"-","","0x7f0000000200"')
        .replace('"8","}"', '"File Path","/tmp/x/other.cuh"\n"3","x"')
        + '"","","0x7f0000000300","      STS.128 [R1+0x10], R4","8","24","32","8"\n'
    )
    got = parse_source_lines(other)
    assert got[("/tmp/x/transpose.cu", 7)] == lines[("/tmp/x/transpose.cu", 7)]
    assert got[("/tmp/x/other.cuh", 3)] == {
        "wavefronts": 32,
        "ideal": 8,
        "instructions": 8,
        "sass": ["STS.128"],
    }


def test_ncu_files_renamed_to_the_ptx_files():
    from smemtile.gpu.inspect import _to_ptx_files

    ptx = '.file\t1 "transpose.cu"\n'
    got = _to_ptx_files(
        {("/tmp/x/transpose.cu", 7): {"wavefronts": 1, "ideal": 1, "instructions": 1, "sass": []}}, ptx
    )
    assert list(got) == [("transpose.cu", 7)]


def test_host_array_fills():
    from smemtile.gpu.inspect import host_array
    from smemtile.model.inspect_args import KernelArg

    assert host_array(KernelArg("a", "array", "f32", 5, "iota"), 0).tolist() == [0, 1, 2, 3, 4]
    assert host_array(KernelArg("a", "array", "u8", 300, "iota"), 0)[257] == 1
    assert host_array(KernelArg("a", "array", "bf16", 2, "ones"), 0).tolist() == [0x3F80, 0x3F80]
    r = host_array(KernelArg("a", "array", "f32", 1000, "random"), 0)
    assert r.dtype == np.float32 and -1 <= r.min() < -0.9 and 0.9 < r.max() < 1
    assert (
        r.astype(np.float64) * 2**23 == np.round(r.astype(np.float64) * 2**23)
    ).all()  # on the 2**-23 grid
    i = host_array(KernelArg("a", "array", "i32", 1000, "random"), 0)
    assert i.min() >= 0 and i.max() <= 255 and len(set(i.tolist())) > 200
    assert host_array(KernelArg("a", "array", "i8", 1000, "random"), 0).max() <= 127
    assert not host_array(KernelArg("a", "array", "f64", 4, "zeros"), 0).any()
    # a function of (seed, position, index): the same array again, another for another position or seed
    a = KernelArg("a", "array", "f32", 1000, "random")
    assert (host_array(a, 3) == host_array(a, 3)).all()
    assert (host_array(a, 3) != host_array(a, 4)).mean() > 0.99
    assert (host_array(a, 3, seed=1) != host_array(a, 3)).mean() > 0.99


FAKE_NCU = r"""#!/usr/bin/env python3
import sys
from pathlib import Path

args = sys.argv[1:]
if "-i" in args:
    sys.stdout.write(Path(__file__).with_name("page.csv").read_text())
elif "-o" in args:
    Path(__file__).with_name("argv.txt").write_text("\n".join(args))
    if "--kernel-name-base" not in args:
        sys.exit(1)
    Path(args[args.index("-o") + 1] + ".ncu-rep").write_text("report")
else:
    sys.exit(2)
"""


def _fake_ncu(tmp_path, page: str, *, fail: bool = False):
    exe = tmp_path / "ncu"
    exe.write_text(
        FAKE_NCU if not fail else "#!/bin/sh\necho '==ERROR== the kernel was not profiled' >&2\nexit 7\n"
    )
    exe.chmod(0o755)
    (tmp_path / "page.csv").write_text(page)
    return str(exe)


def test_ncu_per_line_plumbing_with_a_stand_in_ncu(tmp_path):
    """The command ncu_per_line runs, the report it reads and the file names it returns (ncu replaced by a
    script that writes the report and prints a saved-format page)."""
    from smemtile.gpu.inspect import ncu_per_line
    from smemtile.model.inspect_args import KernelArg

    ptx = compile_ptx("transpose")
    page = CUDA_SASS_PAGE.replace("/tmp/x/transpose.cu", "/elsewhere/transpose.cu")
    args = [
        KernelArg("in", "array", "f32", 4096, "random"),
        KernelArg("out", "array", "f32", 4096),
        KernelArg("n", "scalar", "i32", value=64),
    ]
    got = ncu_per_line(
        ptx,
        "transpose",
        grid=(2, 2),
        block=(32, 32),
        dynamic_smem=0,
        args=args,
        ncu=_fake_ncu(tmp_path, page),
        save_dir=tmp_path / "saved",
    )
    file = instructions(ptx, "transpose")[1].file  # the PTX's .file path (NVRTC makes it absolute)
    assert file.endswith("/transpose.cu") and file != "/elsewhere/transpose.cu"
    assert set(got) == {(file, 4), (file, 7)} and got[(file, 7)]["wavefronts"] == 1024  # renamed to it
    argv = (tmp_path / "argv.txt").read_text().split("\n")
    assert argv[:2] == ["--clock-control", "none"] and "SourceCounters" in argv
    assert argv[argv.index("-k") + 1] == "transpose" and argv[argv.index("--import-source") + 1] == "yes"
    assert argv[-2:][0] == "smemtile.gpu.inspect_launch"
    assert (tmp_path / "saved" / "inspect_source.csv").read_text() == page


def test_ncu_errors_are_one_line(tmp_path, monkeypatch):
    from smemtile.gpu import inspect as GI

    ptx = compile_ptx("transpose")
    kw = dict(grid=1, block=32, dynamic_smem=0, args=[])
    monkeypatch.setattr(GI, "find_ncu", lambda: None)
    with pytest.raises(GI.NcuUnavailable) as e:
        GI.ncu_per_line(ptx, "transpose", **kw)
    assert e.value.exit_code == 3 and "\n" not in str(e.value)
    with pytest.raises(GI.NcuFailed, match="ncu exited 7: ==ERROR== the kernel was not profiled") as e:
        GI.ncu_per_line(ptx, "transpose", ncu=_fake_ncu(tmp_path, "", fail=True), **kw)
    assert e.value.exit_code == 1
    with pytest.raises(GI.NcuFailed, match="cannot read ncu's source page: no 'Line No' header"):
        GI.ncu_per_line(ptx, "transpose", ncu=_fake_ncu(tmp_path, '"Address","Source"\n'), **kw)


def test_launcher_spec_round_trip_and_bad_spec(tmp_path, capsys):
    from smemtile.gpu import inspect_launch
    from smemtile.gpu.inspect import launch_spec
    from smemtile.model.inspect_args import KernelArg

    args = [KernelArg("in", "array", "bf16", 10, "iota"), KernelArg("n", "scalar", "f32", value=2.5)]
    spec = launch_spec(
        tmp_path / "k.ptx",
        "k",
        grid=(3, 2),
        block=64,
        dynamic_smem=70000,
        args=args,
        param_types=[".u64", ".f32"],
    )
    assert spec["grid"] == [3, 2, 1] and spec["block"] == [64, 1, 1] and spec["dynamic_smem"] == 70000
    assert inspect_launch._args(json.loads(json.dumps(spec["args"]))) == args
    (tmp_path / "bad.json").write_text("{")
    assert inspect_launch.main([str(tmp_path / "bad.json")]) == 2
    assert "bad launch spec" in capsys.readouterr().err
    with pytest.raises(SpecError, match="--grid"):
        launch_spec(tmp_path / "k.ptx", "k", grid=(0,), block=1, dynamic_smem=0, args=[], param_types=[])


# ---- the corpus of inspect (samples/kernels) ----------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
CORPUS = sorted((ROOT / "samples" / "kernels").glob("*.args.yaml"))


def corpus_launch(args_yaml: Path) -> dict:
    """The launch the first line of a corpus ARGS.yaml gives (``# smemtile inspect K.cu --grid ... --args ...``)."""
    import shlex

    words = shlex.split(args_yaml.read_text().splitlines()[0].lstrip("# "))
    assert words[:2] == ["smemtile", "inspect"], args_yaml
    opts, defines = {}, []
    i = 3
    while i < len(words):
        if words[i] == "--define":
            defines.append(words[i + 1])
        else:
            opts[words[i]] = words[i + 1]
        i += 2
    dims = lambda s: tuple(int(x) for x in s.split(","))  # noqa: E731
    return {
        "kernel_file": ROOT / words[2],
        "kernel": opts.get("--kernel"),
        "grid": dims(opts.get("--grid", "1")),
        "block": dims(opts.get("--block", "32")),
        "smem": int(opts.get("--smem", 0)),
        "args": ROOT / opts["--args"],
        "defines": defines,
    }


def corpus_ptx(launch: dict) -> tuple[str, str]:
    from smemtile.model.ptx import find_entry
    from smemtile.pipeline.inspect import _defines, compile_source

    ptx, _ = compile_source(launch["kernel_file"], "sm_90", _defines(launch["defines"])[0])
    return ptx, find_entry(ptx, launch["kernel"])


@pytest.mark.skipif(PTXAS is None, reason="ptxas not installed")
@pytest.mark.parametrize("args_yaml", CORPUS, ids=lambda p: p.name.split(".")[0])
def test_corpus_kernels_instrument_and_assemble(args_yaml, tmp_path):
    ptx, entry = corpus_ptx(corpus_launch(args_yaml))
    instrs = shared_instructions(ptx, entry)
    assert instrs
    out = PI.instrument(ptx, entry, instrs, PI.Sample())
    own = [i for i in instrs if not i.function]  # device functions' instructions are not instrumented
    assert own and len(re.findall(r"// smemtile: record instruction", out)) == len(own)
    a, b = ptxas(ptx, tmp_path), ptxas(out, tmp_path)
    assert a.returncode == 0 and b.returncode == 0, b.stderr[-2000:]
    assert smem_bytes(b.stderr) == smem_bytes(a.stderr)


def test_corpus_is_there():
    assert len(CORPUS) >= 12, [p.name for p in CORPUS]


@pytest.mark.skipif(PTXAS is None, reason="ptxas not installed")
def test_a_late_top_level_declaration_is_declared_once_before_both_copies(tmp_path):
    ptx = compile_ptx("transpose")
    first = next(ln for ln in ptx.split("\n") if ln.strip().startswith("ld.param"))
    ptx = ptx.replace(first, first + "\n\t.reg .b32 \t%late<2>;\n\tmov.u32 \t%late0, 5;", 1)
    assert ptxas(ptx, tmp_path).returncode == 0
    out = PI.instrument(ptx, "transpose", shared_instructions(ptx, "transpose"), PI.Sample())
    assert out.count("%late<2>") == 1 and out.count("mov.u32 \t%late0, 5;") == 2
    assert out.index("%late<2>") < out.index("smemtile: recording prologue")
    b = ptxas(out, tmp_path)
    assert b.returncode == 0, b.stderr[-1000:]


# ---- what the recording costs (issue 29's speed bar) --------------------------------------------------------
# Measured on the H200 before the fix: +56 % on the 4096^2 SGEMM of bench/bench_inspect_overhead.py. ptxas gave
# the plain and the instrumented kernel the same 128 registers and the warps outside the sample the same main
# loop: the time went to the sampled warps, whose every site waited for an atomic's old value (37 sites x 512
# iterations, ~0.3 us each), so blocks 0 and 1 ran past the rest of the grid. Now a site past the bound costs a
# local load, a vote and a fire-and-forget red; these tests hold the registers, spills and the fast path.


def ptxas_usage(log: str, entry: str) -> dict[str, int]:
    """registers, stack frame, spill stores/loads and static shared memory of ``entry`` from ``ptxas -v``."""
    out, cur = {}, None
    for line in log.splitlines():
        if m := re.search(r"Compiling entry function '([^']+)'", line):
            cur = m.group(1)
        elif cur == entry and (
            m := re.search(
                r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes "
                r"spill loads",
                line,
            )
        ):
            out.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        elif cur == entry and (m := re.search(r"Used (\d+) registers", line)):
            out["registers"] = int(m.group(1))
            out["smem"] = int(m.group(1)) if (m := re.search(r"(\d+) bytes smem", line)) else 0
    assert {"registers", "stack", "spill_stores"} <= set(out), log
    return out


def bench_sgemm() -> tuple[str, str]:
    import importlib.util

    from smemtile.gpu.nvrtc import compile_cubin

    spec = importlib.util.spec_from_file_location(
        "bench_overhead", ROOT / "bench" / "bench_inspect_overhead.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ptx = compile_cubin(mod.SGEMM, [], "sm_90", options=("-lineinfo",), filename="sgemm_tiled.cu").ptx
    return ptx, mod.ENTRY


def _cost_case(case: str) -> tuple[str, str, int, int]:
    """(PTX, entry, threads per block, dynamic shared bytes) of the bench's SGEMM or a corpus kernel."""
    if case == "bench_sgemm":
        ptx, entry = bench_sgemm()
        return ptx, entry, 256, 0
    launch = corpus_launch(ROOT / "samples" / "kernels" / f"{case}.args.yaml")
    ptx, entry = corpus_ptx(launch)
    return ptx, entry, int(np.prod(launch["block"])), launch["smem"]


REGISTER_BOUND = ["bench_sgemm", "sgemm_tiled", "sgemm_float4"]  # kernels whose registers set their occupancy


@pytest.mark.skipif(PTXAS is None, reason="ptxas not installed")
@pytest.mark.parametrize("case", [*REGISTER_BOUND, "ldmatrix_gemm", "reduction"])
def test_recording_keeps_registers_occupancy_and_spills(case, tmp_path):
    from smemtile.model.arch import get_arch
    from smemtile.model.occupancy import occupancy_batch

    ptx, entry, threads, dynamic = _cost_case(case)
    instrs = shared_instructions(ptx, entry)
    a = ptxas(ptx, tmp_path)
    assert a.returncode == 0, a.stderr[-2000:]
    plain = ptxas_usage(a.stderr, entry)
    # as inspect's record() does: the plain kernel's registers are the recording's cap (.maxnreg)
    out = PI.instrument(ptx, entry, instrs, PI.Sample(), max_registers=plain["registers"])
    assert f"\n.maxnreg {plain['registers']}\n" in out.split(".entry", 1)[1].split("{", 1)[0]
    b = ptxas(out, tmp_path)
    assert b.returncode == 0, b.stderr[-2000:]
    inst = ptxas_usage(b.stderr, entry)
    # no spills anywhere; the only local memory is the sampled warps' scratch (one count per instruction, the
    # warp's two buffer addresses and its index), never touched by the other warps
    assert plain["spill_stores"] == plain["spill_loads"] == 0 and plain["stack"] == 0
    assert inst["spill_stores"] == inst["spill_loads"] == 0
    assert inst["stack"] == PI._local_offsets(len(instrs))[3] == (4 * len(instrs) + 7) // 8 * 8 + 24
    assert inst["smem"] == plain["smem"]
    if case in REGISTER_BOUND:  # at most the plain kernel's registers: the same allocation per warp
        assert inst["registers"] <= plain["registers"], (plain, inst)
        assert -(-inst["registers"] * 32 // 256) == -(-plain["registers"] * 32 // 256)
    occ = occupancy_batch(
        get_arch("sm_90"),
        [threads] * 2,
        [plain["registers"], inst["registers"]],
        [plain["smem"]] * 2,
        [dynamic] * 2,
    )
    assert occ.active_blocks[0] == occ.active_blocks[1] > 0, (plain, inst)


def _site_text(out: str, k: int) -> str:
    start = out.index(f"// smemtile: record instruction {k} (")
    return out[start : out.index(f"$SMT_SKIP_{k}:", start)]


_VALUE_ATOMIC = re.compile(r"\batom\.[\w.]*global[\w.]*\s+%")  # an atomic with a destination register


def _site_ops(text: str) -> list[str]:
    return [ln.split()[0] for ln in text.split("\n")[1:] if ln.strip() and not ln.strip().endswith(":")]


def _site_parts(site: str, k: int) -> tuple[str, str, str]:
    """(head: up to the whole warp's redux; count: the shared tail; part: the partial warp's way)."""
    head, rest = site.split(f"$SMT_COUNT_{k}:", 1)
    count, part = rest.split(f"$SMT_PART_{k}:", 1)
    return head, count, part


def test_no_site_waits_for_an_atomic_and_sites_are_short():
    """No recording site holds an atomic that returns a value (the waits that made the sampled blocks late) or a
    shuffle. The first site of a straight run of statements counts for the run: its execution number from its
    lanes' counts with one ``redux``, one ``red`` per instruction of the run, and, before the bound, its slot;
    the others take that number and, past the bound, cost one uniform branch."""
    ptx, entry = bench_sgemm()
    instrs = shared_instructions(ptx, entry)
    sample = PI.Sample(blocks=2, warps=4, executions=64)
    out = PI.instrument(ptx, entry, instrs, sample)
    lay = PI.buffer_layout(instrs, PI.shared_symbols(ptx, entry), sample)
    cb, sb, bw, size = PI._local_offsets(len(instrs))
    assert len(instrs) == 37 and size == 176  # 37 counts, 2 addresses, the index
    assert f".local .align 8 .b8 \t{PI.LOCAL}[{size}];" in out
    # the sampled warps' scratch: zeroed counts, &counter[b, w, 0], &slot[b, w, 0, 0], b*W + w
    assert f"add.s64 \t%smt_rd1, %smt_rd1, {4 * lay.count_off};" in out
    assert f"mul.wide.u32 \t%smt_rd1, %smt_r4, {4 * PI.SLOT_WORDS * 64};" in out
    assert f"st.local.u32 \t[{PI.LOCAL}+{bw}], %smt_r10;" in out
    added = "\n".join(ln for ln in out.split("\n") if "%smt_" in ln)  # the lines the recording added
    assert not _VALUE_ATOMIC.search(added) and "shfl" not in added
    # the k0 loop's body is one run: 4 scalar stores and a float4 store, bar.sync, 32 float4 loads
    followers = [
        int(m) for m in re.findall(r"record instruction (\d+) \(\w+\), counted with instruction 0\n", out)
    ]
    assert followers == list(range(1, 37))
    head, count, part = _site_parts(_site_text(out, 0), 0)
    assert f"ld.local.u32 \t%smt_r5, [{PI.LOCAL}+0];" in head
    assert head.count("redux.sync.max.u32 \t%smt_r5, %smt_r5, 0xffffffff;") == 1
    assert "setp.ne.u32 \t%smt_p3, %smt_r1, 0xffffffff;" in head and "global" not in head
    assert [
        int(x) for x in re.findall(r"@%smt_p2 red\.global\.add\.u32 \t\[%smt_rd1\+(\d+)\], 1;", count)
    ] == [4 * k for k in range(37)]
    assert re.findall(r"\bld\.[\w.]*global", head + count + part) == ["ld.relaxed.gpu.global"]
    assert "ld.relaxed.gpu.global" in part and "vote.sync.any.pred" in part
    before_stores, stores = count.split("@!%smt_p4 bra.uni \t$SMT_SKIP_0;", 1)
    past = _site_ops(head) + _site_ops(before_stores)
    assert len(past) <= 13 + 37, past  # past the bound: a local load, a redux, the run's reds
    assert len(_site_ops(head) + _site_ops(count)) <= 36 + 37
    assert (
        "st.local.u32 \t[__smt_seen+0], %smt_r6;" in stores
        and "st.global.u32 \t[%smt_rd3+16], %smt_r0;" in stores
    )
    for k in followers:
        site = _site_text(out, k)
        ops = _site_ops(site)
        assert ops[0] == "@!%smt_p4" and site.split("\n")[1].strip() == f"@!%smt_p4 bra.uni \t$SMT_SKIP_{k};"
        assert len(ops) <= 26, ops  # before the bound: the head's e, the lane's word, the leader's header
        assert (
            f"ld.local.u32 \t%smt_r5, [{PI.LOCAL}+0];" in site and "red." not in site and "redux" not in site
        )
        assert f"add.s32 \t%smt_r6, %smt_r5, {k * 64};" in site
        assert not re.search(r"\bld\.[\w.]*global|vote|\bbra\b(?!\.uni)", site), site
    # the statements after $SMT_PLAIN (every warp outside the sample) hold nothing of the recording
    assert not re.search(r"smt_|SMT_|_smemtile", out.split("$SMT_PLAIN:", 1)[1])


def test_runs_of_statements_and_what_breaks_them():
    assert not PI._breaks(
        ["\tbar.sync \t0;", "\tld.shared.f32 \t%f1, [%r4];", "\t.loc\t1 5 3", "\t@%p1 add.s32 %r1, %r1, 1;"]
    )
    for line in [
        "$L__BB0_2:",
        "\t@%p1 bra \t$L__BB0_2;",
        "\tbra.uni \t$L__BB0_3;",
        "\tret;",
        "\texit;",
        "\tcall.uni foo, (%r1);",
        "\t@!%p2 ret;",
    ]:
        assert PI._breaks(["\tmov.u32 \t%r1, 0;", line]), line
    # the guarded pair of the "pred" kernel and generic accesses count on their own
    for name in ("pred", "generic"):
        ptx = compile_ptx(name)
        instrs = instructions(ptx, name)
        out = PI.instrument(ptx, name, instrs, PI.Sample())
        for ins in instrs:
            if ins.predicate or ins.space != "shared":
                assert f"// smemtile: record instruction {ins.index} ({ins.op})\n" in out


@pytest.mark.parametrize("args_yaml", CORPUS, ids=lambda p: p.name.split(".")[0])
def test_corpus_sites_hold_no_value_atomic(args_yaml):
    ptx, entry = corpus_ptx(corpus_launch(args_yaml))
    instrs = [i for i in shared_instructions(ptx, entry) if not i.function]
    out = PI.instrument(ptx, entry, instrs, PI.Sample())
    added = "\n".join(ln for ln in out.split("\n") if "%smt_" in ln)  # the lines the recording added
    assert "red.global" in added and not _VALUE_ATOMIC.search(added) and "shfl" not in added
    for k in range(len(instrs)):
        site = _site_text(out, k)
        assert not _VALUE_ATOMIC.search(site) and "shfl" not in site
        if m := re.search(r"counted with instruction (\d+)\n", site):  # its head counts it
            assert f"red.global.add.u32 \t[%smt_rd1+{4 * k}], 1;" in _site_text(out, int(m.group(1)))
            assert "red." not in site
    # every instruction is counted exactly once: by its own site or by the head of its run
    reds = sorted(int(x) // 4 for x in re.findall(r"red\.global\.add\.u32 \t\[%smt_rd1\+(\d+)\]", out))
    assert reds == list(range(len(instrs)))


# ---- the site's counting, run lane by lane --------------------------------------------------------------


class _SiteRunner:
    """Runs one recording site's PTX text for a warp with a given active mask: 32 lanes, each with its own
    ``.local`` scratch, one global memory; lanes at the same statement run together (the lowest first), so
    ``activemask``/``vote``/``redux`` see the lanes that run them. Only the statements a site uses."""

    def __init__(self, site: str, local_size: int, cb: int, sb: int, bw: int, counter: int, slots: int, regs):
        self.lines = [
            ln.strip() for ln in site.split("\n")[1:] if ln.strip() and not ln.strip().startswith("//")
        ]
        self.labels = {ln[:-1]: j for j, ln in enumerate(self.lines) if ln.endswith(":")}
        self.local = [dict.fromkeys(range(0, local_size, 4), 0) for _ in range(32)]
        for lane in range(32):
            self.local[lane].update({cb: counter, sb: slots, bw: 5})
        self.mem: dict[int, int] = {}
        self.regs = regs  # the kernel's registers the address code reads: name -> per-lane values

    def _val(self, lane: int, r: dict, op: str) -> int:
        op = op.strip()
        if op == "%laneid":
            return lane
        if op.startswith("%"):
            return r[op] if op in r else self.regs[op][lane]
        return int(op, 0)

    def _addr(self, lane: int, r: dict, op: str) -> tuple[str, int]:
        m = re.fullmatch(r"\[([%\w$]+)\+?(-?\d*)\]", op.strip())
        base, off = m.group(1), int(m.group(2) or 0)
        return ("local", off) if base == PI.LOCAL else ("global", r[base] + off)

    def run(self, mask: int) -> None:
        pcs = {lane: 0 for lane in range(32) if mask >> lane & 1}
        regs = {lane: {} for lane in pcs}
        while pcs:
            pc = min(pcs.values())
            lanes = [ln for ln, p in pcs.items() if p == pc]
            if pc >= len(self.lines):
                break
            line = self.lines[pc].rstrip(";")
            for ln in lanes:
                pcs[ln] = pc + 1
            if line.endswith(":"):
                continue
            m = re.match(r"(@!?%[\w]+)?\s*(\S+)\s*(.*)", line)
            guard, op, rest = m.group(1), m.group(2), m.group(3)
            ops = [o.strip() for o in re.split(r",(?![^\[]*\])", rest)] if rest else []
            run = []
            for ln in lanes:
                if guard:
                    v = regs[ln][guard.lstrip("@!")]
                    if v == guard.startswith("@!"):
                        continue
                run.append(ln)
            group = sum(1 << ln for ln in lanes)
            for ln in run:
                self._step(ln, regs[ln], op, ops, group, [regs[x] for x in lanes], pcs)

    def _step(self, lane, r, op, ops, group, group_regs, pcs):
        u32 = 0xFFFFFFFF
        v = lambda o: self._val(lane, r, o)  # noqa: E731
        if op in ("bra", "bra.uni"):
            pcs[lane] = self.labels[ops[0]]
        elif op == "activemask.b32":
            r[ops[0]] = group
        elif op.startswith("ld.local"):
            r[ops[0]] = self.local[lane][self._addr(lane, r, ops[1])[1]]
        elif op.startswith("st.local"):
            self.local[lane][self._addr(lane, r, ops[0])[1]] = v(ops[1])
        elif op.startswith("ld.relaxed.gpu.global"):
            r[ops[0]] = self.mem.get(self._addr(lane, r, ops[1])[1], 0)
        elif op.startswith("st.global"):
            self.mem[self._addr(lane, r, ops[0])[1]] = v(ops[1]) & u32
        elif op == "red.global.add.u32":
            a = self._addr(lane, r, ops[0])[1]
            self.mem[a] = self.mem.get(a, 0) + v(ops[1])
        elif op == "mov.u32":
            r[ops[0]] = v(ops[1])
        elif op.startswith("setp."):
            cmp = op.split(".")[1]
            a, b = v(ops[1]) & u32, v(ops[2]) & u32
            r[ops[0]] = {"ne": a != b, "eq": a == b, "ge": a >= b, "lt": a < b}[cmp]
        elif op == "redux.sync.max.u32":
            assert v(ops[2]) & u32 == group, "redux by a warp that is not whole"
            r[ops[0]] = max(g.get(ops[1], None) if ops[1] in g else 0 for g in group_regs)
        elif op == "vote.sync.any.pred":
            r[ops[0]] = any(g[ops[1]] for g in group_regs)
        elif op == "brev.b32":
            r[ops[0]] = int(f"{v(ops[1]) & u32:032b}"[::-1], 2)
        elif op == "bfind.shiftamt.u32":
            x = v(ops[1]) & u32
            r[ops[0]] = 31 - (x.bit_length() - 1) if x else u32
        elif op in ("add.s32", "add.s64"):
            r[ops[0]] = v(ops[1]) + v(ops[2])
        elif op == "mul.wide.u32":
            r[ops[0]] = v(ops[1]) * v(ops[2])
        elif op == "cvt.u32.u64":
            r[ops[0]] = v(ops[1]) & u32
        else:
            raise AssertionError(f"the site runner does not know {op}")


@pytest.mark.parametrize("target", ["sm_90", "sm_75"])
def test_site_counting_exact_for_whole_partial_and_disjoint_warps(target):
    """Run one site of the bench SGEMM's instrumented PTX lane by lane through a sequence of active masks
    (whole warps, a half, the other half, one lane, a tail) past the bound: every execution before the bound
    gets its own slot, numbered in order, with the lanes that ran it and their addresses; the counter ends at
    the number of executions. sm_75 (no redux) takes the partial warp's way every time."""
    ptx, entry = bench_sgemm()
    ptx = re.sub(r"\.target\s+sm_\d+", f".target {target}", ptx, count=1)
    instrs = shared_instructions(ptx, entry)
    E = 5
    out = PI.instrument(ptx, entry, instrs, PI.Sample(blocks=2, warps=4, executions=E))
    assert ("redux.sync" in out) == (target == "sm_90")
    run = [0, 5, 36]  # the head of the k0 loop's run and two of the instructions it counts for
    site = "\n".join(_site_text(out, k) + f"$SMT_SKIP_{k}:" for k in run)
    cb, sb, bw, size = PI._local_offsets(len(instrs))
    counter, slots = 1 << 20, 1 << 24
    regs = {f"%rd{j}": [0x400 + 16 * lane + j for lane in range(32)] for j in range(100)}
    regs.update({f"%r{j}": [0x400 + 4 * lane + j for lane in range(32)] for j in range(200)})
    runner = _SiteRunner(site, size, cb, sb, bw, counter, slots, regs)
    masks = [0xFFFFFFFF, 0x0000FFFF, 0xFFFF0000, 0x1, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]
    for mask in masks:
        runner.run(mask)
    assert [runner.mem.get(counter + 4 * k) for k in range(len(instrs))] == [len(masks)] * len(instrs)
    stride = 4 * PI.SLOT_WORDS
    for k in run:
        one = _site_text(out, k)
        m = re.search(r"cvt\.u32\.u64 \t%smt_r0, (%\w+);\n\tadd\.s32 \t%smt_r0, %smt_r0, (-?\d+);", one)
        addr_reg, offset = (
            m.group(1),
            int(m.group(2)),
        )  # the SGEMM's shared addresses: 64-bit register + offset
        for e, mask in enumerate(masks[:E]):
            at = slots + (k * E + e) * stride
            assert [runner.mem.get(at + 4 * j) for j in range(4)] == [k + 1, mask, e, 5], (k, e, hex(mask))
            for lane in range(32):
                want = (regs[addr_reg][lane] + offset) & 0xFFFFFFFF if mask >> lane & 1 else None
                assert runner.mem.get(at + 16 + 4 * lane) == want
    written = {a for a in runner.mem if a >= slots}
    assert len(written) == len(run) * sum(4 + bin(m).count("1") for m in masks[:E])  # nothing else
    assert max(written) < slots + (max(run) * E + E) * stride  # nothing past the bound
