"""`inspect`'s front on the CPU: the PTX reader, the arguments, the declarations, the emulator's instruction
semantics, and the command's errors (one line, the documented exit code). Real NVRTC compiles, no GPU."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from smemtile.cli import main
from smemtile.errors import SpecError
from smemtile.gpu.nvrtc import compile_ptx
from smemtile.model import ptx
from smemtile.model.cuda_decl import constants, shared_declarations
from smemtile.model.inspect_args import load_args
from smemtile.model.ptx_emu import EmulationError, emulate, shared_layout

TRANSPOSE = """#define TILE 32
__global__ void transpose(float* out, const float* in, int n) {
  __shared__ float tile[TILE][TILE];
  int x = blockIdx.x * TILE + threadIdx.x;
  int y = blockIdx.y * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += 8)
    tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * n + x];
  __syncthreads();
  for (int j = 0; j < TILE; j += 8)
    out[(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];
}
"""


@dataclass
class S:
    blocks: int = 1
    warps: int = 1
    executions: int = 64


@pytest.fixture(scope="module")
def tptx() -> str:
    return compile_ptx(TRANSPOSE, "sm_90", filename="t.cu")


def _run(src: str, name: str, args: list, *, grid=(1, 1, 1), block=(32, 1, 1), smem=0, sample=None):
    text = compile_ptx(src, "sm_90", filename="k.cu")
    entry = ptx.find_entry(text, name)
    instrs = ptx.shared_instructions(text, entry)
    params = ptx.entry_params(text, entry)
    kargs = load_args(args, params, {})
    recs, meta = emulate(
        text,
        entry,
        instrs,
        grid=grid,
        block=block,
        dynamic_smem=smem,
        args=kargs,
        params=params,
        sample=sample or S(),
    )
    return instrs, recs, meta


# ---- the PTX reader ---------------------------------------------------------------------------------------------


def test_entries_params_and_shared_variables(tptx):
    (entry,) = ptx.entry_names(tptx)
    assert entry == "_Z9transposePfPKfi" and ptx.demangle_function(entry) == "transpose"
    assert ptx.entry_params(tptx, entry) == [
        (".u64", f"{entry}_param_0"),
        (".u64", f"{entry}_param_1"),
        (".u32", f"{entry}_param_2"),
    ]
    assert ptx.shared_arrays(tptx, entry) == {"_ZZ9transposePfPKfiE4tile": 4096}


def test_shared_instructions_have_source_lines_and_the_array(tptx):
    instrs = ptx.shared_instructions(tptx, ptx.find_entry(tptx, "transpose"))
    assert [(i.op, i.width, i.line, i.array) for i in instrs] == [("store", 4, 7, "tile")] * 4 + [
        ("load", 4, 10, "tile")
    ] * 4
    assert [i.index for i in instrs] == list(range(8))
    lines = tptx.splitlines()
    for i in instrs:  # ptx_line points at the instruction itself
        assert " ".join(lines[i.ptx_line - 1].split()).rstrip(";") == i.text
    assert instrs[5].addr.endswith("+32") and instrs[0].space == "shared" and instrs[0].file.endswith("t.cu")


def test_vector_ldmatrix_atomics_generic_and_cp_async_are_listed():
    src = """
    __global__ void k(float* g, unsigned* h, const float* src) {
      __shared__ __align__(16) float a[256];
      __shared__ unsigned bins[64];
      __shared__ __align__(16) unsigned short m[64][8];
      float4 v = *reinterpret_cast<float4*>(&a[threadIdx.x * 4 % 256]);
      atomicAdd(&bins[threadIdx.x % 64], 1u);
      float* p = threadIdx.x & 1 ? a : g;   // generic: shared or global only at run time
      p[threadIdx.x] = v.x;
      unsigned addr = (unsigned)__cvta_generic_to_shared(&m[threadIdx.x % 64][0]);
      unsigned r0, r1, r2, r3;
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                   : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
      unsigned d = (unsigned)__cvta_generic_to_shared(&a[threadIdx.x % 64 * 4]);
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(d), "l"(src + threadIdx.x * 4));
      h[threadIdx.x] = r0 + r1 + r2 + r3 + (unsigned)v.y;
    }"""
    text = compile_ptx(src, "sm_90", filename="k.cu")
    instrs = ptx.shared_instructions(text, ptx.find_entry(text, "k"))
    kinds = {(i.op, i.width, i.matrices, i.trans, i.space) for i in instrs}
    assert ("load", 16, 1, False, "shared") in kinds  # ld.shared.v4.f32
    assert ("ldmatrix", 16, 4, True, "shared") in kinds
    assert ("cp.async", 16, 1, False, "shared") in kinds
    assert any(i.op in ("atom", "red") and i.array == "bins" for i in instrs)
    assert any(i.space == "generic" and i.op == "store" for i in instrs)


def test_demangle_variables_and_functions():
    assert ptx.demangle_variable("_ZZ9transposePfS_E4tile") == "tile"
    assert ptx.demangle_variable("_ZZ4kernvE4tile_0") == "tile"
    assert ptx.demangle_variable("_ZN2ns4bufsE") == "bufs"
    assert ptx.demangle_variable("plain") == "plain"
    assert ptx.demangle_function("_ZN2ns6kernelEPf") == "ns::kernel"
    assert ptx.demangle_function("_Z4gemmILi32EEvPf") == "gemm"
    assert ptx.demangle_function("my_c_kernel") == "my_c_kernel"


def test_find_entry_names_the_kernels_when_unknown(tptx):
    with pytest.raises(
        SpecError, match=r"--kernel: no kernel 'nope'; kernels: transpose \(_Z9transposePfPKfi\)"
    ):
        ptx.find_entry(tptx, "nope")
    assert ptx.find_entry(tptx, "_Z9transposePfPKfi") == ptx.find_entry(tptx, None) == "_Z9transposePfPKfi"


def test_compile_error_is_one_line_with_file_and_line():
    from smemtile.errors import CompileError

    with pytest.raises(CompileError) as e:
        compile_ptx("__global__ void k() {\n  undeclared = 1;\n}\n", "sm_90", filename="bad.cu")
    assert str(e.value) == 'bad.cu:2: error: identifier "undeclared" is undefined'


# ---- arguments and declarations ---------------------------------------------------------------------------------


PARAMS = [(".u64", "p0"), (".u64", "p1"), (".u32", "p2")]


def test_args_yaml_with_expressions():
    a = load_args(
        "args: [{name: o, dtype: f32, count: N * N}, {name: i, dtype: f32, count: 8, fill: iota},"
        " {name: n, value: N + 1}]\n",
        PARAMS,
        {"N": 32},
    )
    assert [(x.kind, x.dtype, x.count, x.fill, x.value) for x in a] == [
        ("array", "f32", 1024, "zeros", 0),
        ("array", "f32", 8, "iota", 0),
        ("scalar", "i32", 0, "zeros", 33),
    ]


@pytest.mark.parametrize(
    "text, message",
    [
        ("[{name: o, dtype: f32, count: 4}]", "1 arguments given, the kernel takes 3"),
        ("[{name: o, count: 4}, {name: i, dtype: f32}, {name: n, value: 1}]", "an array needs dtype"),
        (
            "[{name: o, dtype: f33, count: 4}, {name: i, dtype: f32}, {name: n, value: 1}]",
            "unknown dtype 'f33'",
        ),
        (
            "[{name: o, dtype: f32, cont: 4}, {name: i, dtype: f32}, {name: n, value: 1}]",
            "did you mean 'count'",
        ),
        (
            "[{name: o, dtype: f32, count: 4}, {name: i, dtype: f32}, {name: n, dtype: f32, count: 2}]",
            "needs a pointer parameter but the kernel's parameter is .u32",
        ),
        (
            "[{name: o, dtype: f32, count: 4}, {name: i, dtype: f32}, {name: n, dtype: f64, value: 1}]",
            "dtype f64 is 8 bytes but the kernel's parameter is .u32",
        ),
        (
            "[{name: o, dtype: f32, count: 4}, {name: i, dtype: f32, fill: noise}, {name: n, value: 1}]",
            "unknown fill 'noise'; allowed: zeros, ones, iota, random",
        ),
        (
            "[{name: o, dtype: f32, count: '__import__(1)'}, {name: i, dtype: f32}, {name: n, value: 1}]",
            "count",
        ),
    ],
)
def test_bad_args_are_one_line(text, message):
    with pytest.raises(SpecError) as e:
        load_args(text + "\n", PARAMS, {})
    assert message in str(e.value) and "\n" not in str(e.value)


def test_declarations_with_defines_templates_and_vectors():
    src = """#define TILE 32
    template <int BM = 64, int BK = 8> __global__ void k() {
      __shared__ float tile[TILE][TILE + 1], row[TILE];
      __shared__ __align__(16) float4 v[BM][BK / 4];
      extern __shared__ double dyn[];
      __shared__ float q[UNKNOWN];
    }"""
    d = shared_declarations(src, {"BK": 16})
    assert (
        d["tile"].dims == (32, 33) and d["tile"].dim_text == ("TILE", "TILE + 1") and d["tile"].dtype == "f32"
    )
    assert d["row"].shape == (32,)
    assert d["v"].dims == (64, 4) and d["v"].shape == (64, 16) and d["v"].vector == 4
    assert d["dyn"].extern and d["dyn"].dtype == "f64" and d["dyn"].dims is None
    assert d["q"].dims is None and "pass --define" in d["q"].reason
    assert constants(src, {"BK": 16}) == {"TILE": 32, "BM": 64, "BK": 16}


# ---- the emulator -----------------------------------------------------------------------------------------------


def test_emulated_transpose_addresses(tptx):
    entry = ptx.find_entry(tptx, "transpose")
    instrs = ptx.shared_instructions(tptx, entry)
    params = ptx.entry_params(tptx, entry)
    args = load_args(
        [
            {"name": "o", "dtype": "f32", "count": 4096},
            {"name": "i", "dtype": "f32", "count": 4096},
            {"name": "n", "value": 64},
        ],
        params,
        {},
    )
    recs, meta = emulate(
        tptx,
        entry,
        instrs,
        grid=(2, 2, 1),
        block=(32, 8, 1),
        dynamic_smem=0,
        args=args,
        params=params,
        sample=S(blocks=2, warps=2),
    )
    assert meta["executions"] == {i: 4 for i in range(8)} and meta["dropped"] == 0
    warp1 = [r for r in recs if r.block == (1, 0, 0) and r.warp == 1]
    st0 = next(r for r in warp1 if r.instr == 0)
    assert st0.active == 0xFFFFFFFF and st0.addresses == tuple(128 + 4 * lane for lane in range(32))  # row 1
    ld7 = next(r for r in warp1 if r.instr == 7)  # tile[lane][1 + 24]
    assert ld7.addresses == tuple(128 * lane + 4 * 25 for lane in range(32))


def test_divergence_predicates_and_loops():
    src = """__global__ void k(int* out, const int* in) {
      __shared__ int s[1024];
      int t = threadIdx.x;
      if (t % 3 == 0) { s[t * 2] = in[t]; s[t * 2 + 64] = in[t + 32]; }
      else { s[t + 256] = in[t + 64]; }
      for (int i = 0; i < t % 4; ++i) s[512 + t * 4 + i] = i;
      out[t] = s[(t * 7) % 1024];
    }"""
    args = [{"name": "o", "dtype": "i32", "count": 32}, {"name": "i", "dtype": "i32", "count": 96}]
    instrs, recs, meta = _run(src, "k", args)
    third = sum(1 << t for t in range(32) if t % 3 == 0)
    guarded = [r for r in recs if r.active == third]  # s[t * 2]: only the t % 3 == 0 lanes
    assert len(guarded) == 1 and guarded[0].addresses[3] == 4 * 6 and guarded[0].addresses[1] == 0
    loop = [r for r in recs if r.addresses[1] == 4 * 516]  # the loop body, lane 1's first iteration
    (body,) = {r.instr for r in loop}
    runs = [r for r in recs if r.instr == body]
    assert [bin(r.active).count("1") for r in runs] == [24, 16, 8] and meta["executions"][body] == 3
    assert runs[2].addresses[3] == 4 * (512 + 3 * 4 + 2)
    last = next(r for r in recs if r.instr == len(instrs) - 1)
    assert last.active == 0xFFFFFFFF and last.addresses[:4] == (0, 28, 56, 84)


def test_shared_memory_holds_what_the_warp_stored_and_shfl_moves_lanes():
    src = """__global__ void k(int* out) {
      __shared__ int idx[32];
      __shared__ float v[1024];
      int t = threadIdx.x;
      idx[t] = (t * 5) % 32;
      __syncwarp();
      int j = __shfl_xor_sync(0xffffffff, idx[t], 1);
      out[t] = (int)v[j * 32];
    }"""
    instrs, recs, _ = _run(src, "k", [{"name": "o", "dtype": "i32", "count": 32}])
    gather = [r for r in recs if instrs[r.instr].array == "v"]
    assert len(gather) == 1
    want = [4 * 32 * (((lane ^ 1) * 5) % 32) for lane in range(32)]
    assert list(gather[0].addresses) == [a + shared_layout_base(instrs) for a in want]


def shared_layout_base(instrs) -> int:
    return 128  # idx[32] (128 bytes) is laid out first, v[] follows at its 4-byte alignment


def test_dynamic_shared_memory_follows_the_static_and_bounds_are_checked():
    src = """extern __shared__ float dyn[];
    __global__ void k(float* out, int pitch) {
      __shared__ float st[8];
      st[threadIdx.x % 8] = 1.0f;
      out[threadIdx.x] = dyn[threadIdx.x * pitch] + st[0];
    }"""
    args = [{"name": "o", "dtype": "f32", "count": 32}, {"name": "p", "value": 2}]
    instrs, recs, _ = _run(src, "k", args, smem=256)
    text = compile_ptx(src, "sm_90", filename="k.cu")
    lay = shared_layout(text, ptx.find_entry(text, "k"))
    assert sorted(lay.values()) == [(0, 32), (32, 0)]
    dyn = next(r for r in recs if instrs[r.instr].array == "extern")
    assert dyn.addresses[:3] == (32, 40, 48)
    with pytest.raises(
        EmulationError, match=r"lane 16 addresses shared byte 160, outside the 160-byte shared"
    ):
        _run(src, "k", args, smem=128)


def test_an_address_from_an_unknown_instruction_names_it():
    src = """__global__ void k(float* out, const float* in) {
      __shared__ float s[64];
      unsigned j;
      asm("bfind.u32 %0, %1;" : "=r"(j) : "r"(threadIdx.x));  // bfind: not modelled, and it feeds the address
      out[threadIdx.x] = s[j & 63] + in[0];
    }"""
    with pytest.raises(
        EmulationError, match=r"the address of `ld.shared.f32 .* depends on line \d+ `bfind.u32"
    ):
        _run(
            src, "k", [{"name": "o", "dtype": "f32", "count": 32}, {"name": "i", "dtype": "f32", "count": 32}]
        )


def test_step_bound_cuts_the_warp_short_with_a_note():
    src = """__global__ void k(int* out, int n) {
      __shared__ int s[32];
      volatile int* v = s;  // volatile: one load and one store per iteration
      for (int i = 0; i < n; ++i) v[threadIdx.x] += i;
      out[threadIdx.x] = s[0];
    }"""
    text = compile_ptx(src, "sm_90", filename="k.cu")
    entry = ptx.find_entry(text, "k")
    instrs, params = ptx.shared_instructions(text, entry), ptx.entry_params(text, entry)
    args = load_args([{"name": "o", "dtype": "i32", "count": 32}, {"name": "n", "value": 10**9}], params, {})
    recs, meta = emulate(
        text,
        entry,
        instrs,
        grid=(1,),
        block=(32,),
        dynamic_smem=0,
        args=args,
        params=params,
        sample=S(executions=8),
        max_steps=5000,
    )
    assert len(meta["notes"]) == 1 and "stopped after 5000 PTX instructions" in meta["notes"][0]
    assert meta["dropped"] > 0 and len(recs) == 8 * len({r.instr for r in recs})


def test_integer_semantics_of_the_emulator():
    src = """__global__ void k(int* out, int a, unsigned b) {
      __shared__ int s[4096];
      int t = threadIdx.x;
      int v[8] = {(a - t) / 3, (a - t) % 3, (int)((b >> (t % 8)) & 7u), min(t, 5) + max(-t, -9),
                  __popc(t * 11), __clz(t + 1), (int)(((unsigned)t * 2654435761u) >> 28), __brev(t) >> 27};
      for (int q = 0; q < 8; ++q) s[(q * 256 + (v[q] & 255)) & 4095] = q;
      __syncthreads();
      out[t] = s[t * 33];
    }"""
    instrs, recs, _ = _run(
        src,
        "k",
        [
            {"name": "o", "dtype": "i32", "count": 32},
            {"name": "a", "value": 7},
            {"name": "b", "value": 0xDEADBEEF},
        ],
    )
    got = {}
    for r in recs[:-1]:  # the stores; the last record is the read
        for lane in range(32):
            got.setdefault(r.addresses[lane] // 4 // 256, []).append(r.addresses[lane] // 4 % 256)
    t = np.arange(32)
    tl = list(range(32))
    want = [
        np.trunc((7 - t) / 3).astype(int),
        np.fmod(7 - t, 3),
        (0xDEADBEEF >> (t % 8)) & 7,
        np.minimum(t, 5) + np.maximum(-t, -9),
        [bin(x * 11).count("1") for x in tl],
        [32 - (x + 1).bit_length() for x in tl],
        (t * 2654435761 % 2**32) >> 28,
        [int(f"{x:032b}"[::-1], 2) >> 27 for x in tl],
    ]
    for q in range(8):
        assert got[q] == [int(x) & 255 for x in want[q]], q


# ---- the command ------------------------------------------------------------------------------------------------


def _cli(*args):
    return CliRunner().invoke(main, ["inspect", *args])


def test_listing_without_a_gpu_exits_3_with_one_line(tmp_path, monkeypatch):
    import smemtile.pipeline.inspect as pi

    monkeypatch.setattr(pi, "_has_gpu", lambda device: False)
    f = tmp_path / "t.cu"
    f.write_text(TRANSPOSE)
    r = _cli(str(f), "--grid", "2,2", "--block", "32,8", "--json")
    assert r.exit_code == 3
    doc = json.loads(r.stdout)
    assert doc["mode"] == "listing" and doc["no_device"].startswith("no GPU here")
    assert [(x["line"], x["count"], x["arrays"]) for x in doc["lines"]] == [
        (7, 4, ["tile"]),
        (10, 4, ["tile"]),
    ]
    r = _cli(str(f), "--grid", "2,2", "--block", "32,8")
    assert r.exit_code == 3 and "Shared-memory instructions per source line" in r.stdout
    assert (
        r.stderr.strip().splitlines()[-1].startswith("smemtile: error: no GPU here")
        and "--simulate" in r.stderr
    )


@pytest.mark.parametrize(
    "extra, code, message",
    [
        (["--kernel", "nope"], 2, "no kernel 'nope'; kernels: transpose"),
        (["--grid", "0"], 2, "--grid: expected X[,Y[,Z]] with positive integers"),
        (["--block", "64,32"], 2, "2048 threads per block; at most 1024"),
        (["--simulate"], 2, "the kernel takes 3 parameters (0:.u64, 1:.u64, 2:.u32): give --args"),
        (["--smem", "lots"], 2, "--smem: expected a byte size"),
        (["--simulate", "--gpu"], 2, "give --simulate or --gpu, not both"),
        (["--arch", "sm_99"], 2, "--arch: 'sm_99' is not an architecture NVRTC compiles for"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, extra, code, message):
    f = tmp_path / "t.cu"
    f.write_text(TRANSPOSE)
    r = _cli(str(f), "--grid", "2,2", "--block", "32,8", *extra)
    assert r.exit_code == code, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr
    assert list(tmp_path.iterdir()) == [f]  # nothing written


def test_compile_error_exit_2_names_file_and_line(tmp_path):
    f = tmp_path / "bad.cu"
    f.write_text("__global__ void k(float* o) {\n  o[0] = missing;\n}\n")
    r = _cli(str(f), "--simulate")
    assert r.exit_code == 2
    assert r.stderr.strip() == f'smemtile: error: {f}:2: error: identifier "missing" is undefined'


def test_ptx_input_is_taken_as_is(tmp_path, tptx):
    f = tmp_path / "t.ptx"
    f.write_text(tptx)
    args = tmp_path / "a.yaml"
    args.write_text(
        "args: [{name: o, dtype: f32, count: 4096}, {name: i, dtype: f32, count: 4096}, "
        "{name: n, value: 64}]\n"
    )
    r = _cli(str(f), "--grid", "2,2", "--block", "32,8", "--args", str(args), "--simulate", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["lines"][0]["line"] == 10 and doc["lines"][0]["worst_conflict_degree"] == 32
    assert doc["no_fix"] == {"tile": "no `__shared__ ... tile[...]` declaration found in the source"}


# ---- the GPU path, with the GPU module replaced by the emulator (the contract, not the device) -----------------


class _FakeGpu:
    """smemtile.gpu.inspect's interface: record() answers with the emulator, shifted by a window base, and
    ncu_per_line() with fixed counters."""

    from smemtile.model.ptx_instrument import Sample  # noqa: F401 - the real Sample type

    def __init__(self, shift: int, measured: dict):
        self.shift, self.measured, self.calls = shift, measured, []

    def record(self, ptx_text, entry, instrs, *, grid, block, dynamic_smem, args, sample, device=0):
        from smemtile.model.inspect_args import WarpRecord

        self.calls.append(("record", sample))
        params = ptx.entry_params(ptx_text, entry)
        recs, meta = emulate(
            ptx_text,
            entry,
            instrs,
            grid=grid,
            block=block,
            dynamic_smem=dynamic_smem,
            args=args,
            params=params,
            sample=sample,
        )
        moved = [
            WarpRecord(
                r.instr,
                r.block,
                r.warp,
                r.active,
                tuple(a + self.shift if r.active >> k & 1 else 0 for k, a in enumerate(r.addresses)),
            )
            for r in recs
        ]
        syms = {s: off + self.shift for s, (off, _) in shared_layout(ptx_text, entry).items()}
        return moved, {**meta, "symbols": syms}

    def ncu_per_line(self, ptx_text, entry, *, grid, block, dynamic_smem, args, device=0):
        self.calls.append(("ncu", grid))
        return self.measured


def test_gpu_mode_uses_the_recording_rebased_and_ncu_beside_it(tmp_path, monkeypatch):
    import smemtile.pipeline.inspect as pi

    f = tmp_path / "t.cu"
    f.write_text(TRANSPOSE)
    # ncu, whole grid (4 blocks x 8 warps x 4 instructions per line): line 10 as predicted (32 per execution),
    # line 7 not (2 per execution, predicted 1)
    fake = _FakeGpu(
        256,
        {
            (str(f), 10): {"wavefronts": 32 * 128, "ideal": 128, "instructions": 128},
            (str(f), 7): {"wavefronts": 2 * 128, "ideal": 128, "instructions": 128},
        },
    )
    monkeypatch.setattr(pi, "_gpu_module", lambda: fake)
    monkeypatch.setattr(pi, "_has_gpu", lambda device: True)
    args = [
        {"name": "o", "dtype": "f32", "count": 4096},
        {"name": "i", "dtype": "f32", "count": 4096},
        {"name": "n", "value": 64},
    ]
    res = pi.inspect(f, grid=(2, 2), block=(32, 8), args=args, ncu=True, sample=pi.Sample(blocks=4, warps=8))
    assert res.mode == "gpu" and [c[0] for c in fake.calls] == ["record", "ncu"]
    assert fake.calls[0][1].__class__.__name__ == "Sample" and fake.calls[0][1].blocks == 4
    assert res.arrays["tile"].base == 256  # the recording's symbol offset, not the emulator's layout
    top = res.lines[0]
    assert top.line == 10 and top.wavefronts == 32 * 4 * 8 * 4 and top.instrs[0].result.rows is not None
    assert res.fixes[0].fix.recommended.layout.pad == 1
    doc = res.to_dict()
    by = {ln["line"]: ln for ln in doc["lines"]}
    assert by[10]["match"] == "yes" and by[10]["ncu"]["wavefronts"] == 4096
    assert (
        by[7]["match"] == "no"
        and by[7]["explanation"] == "measured 256 wavefronts over the whole grid, predicted 128"
    )
    # a partial sample compares wavefronts per execution and says what it covers
    part = pi.inspect(f, grid=(2, 2), block=(32, 8), args=args, ncu=True, sample=pi.Sample(blocks=1, warps=2))
    by = {ln["line"]: ln for ln in part.to_dict()["lines"]}
    assert by[10]["match"] == "yes"
    assert by[7]["match"] == "no" and by[7]["explanation"].startswith(
        "the sample covers 8 of ncu's 128 executions; measured 2.00 wavefronts per execution over the grid, "
        "predicted 1.00"
    )


def test_generic_accesses_are_recorded_only_where_they_hit_shared_memory():
    src = """__global__ void k(float* g) {
      __shared__ float a[64];
      float* p = threadIdx.x & 1 ? a : g;  // generic: shared on odd lanes, global on even ones
      p[threadIdx.x] = 1.0f;
      __syncthreads();
      g[threadIdx.x] = a[threadIdx.x ^ 1];
    }"""
    instrs, recs, _ = _run(src, "k", [{"name": "g", "dtype": "f32", "count": 64}])
    gen = [i.index for i in instrs if i.space == "generic"]
    assert gen
    rec = [r for r in recs if r.instr in gen]
    assert len(rec) == 1 and rec[0].active == 0xAAAAAAAA
    assert [rec[0].addresses[lane] for lane in (0, 1, 3, 31)] == [0, 4, 12, 124]


def test_defines_reach_nvrtc_and_the_declaration(tmp_path):
    import smemtile.pipeline.inspect as pi

    f = tmp_path / "t.cu"
    f.write_text("#ifndef TILE\n#define TILE 16\n#endif\n" + TRANSPOSE.replace("#define TILE 32\n", ""))
    args = [
        {"name": "o", "dtype": "f32", "count": 4096},
        {"name": "i", "dtype": "f32", "count": 4096},
        {"name": "n", "value": 64},
    ]
    res = pi.inspect(f, grid=(2, 2), block=(32, 8), args=args, defines=["TILE=32"], mode="simulate")
    assert res.arrays["tile"].size == 4096 and res.arrays["tile"].buffer.shape == (32, 32)
    assert res.lines[0].instrs[0].worst == 32
    small = pi.inspect(f, grid=(2, 2), block=(16, 16), args=args, mode="listing")
    assert small.arrays["tile"].size == 1024 and small.arrays["tile"].buffer.shape == (16, 16)
    with pytest.raises(SpecError, match="--define: '1X' is not a macro name; use NAME=VALUE"):
        pi.inspect(f, defines=["1X=2"], mode="listing")


def test_cuda_headers_are_found(tmp_path):
    import smemtile.pipeline.inspect as pi

    if not pi.cuda_include_dirs():
        pytest.skip("no CUDA headers (cuda_fp16.h) on this machine")
    f = tmp_path / "h.cu"
    f.write_text(
        "#include <cuda_fp16.h>\n__global__ void k(__half* o) {\n  __shared__ __half s[64];\n"
        "  s[threadIdx.x] = o[threadIdx.x];\n  __syncthreads();\n  o[threadIdx.x] = __hadd(s[threadIdx.x ^ 1], "
        "s[threadIdx.x]);\n}\n"
    )
    res = pi.inspect(f, block=(64,), args=[{"name": "o", "dtype": "f16", "count": 64}], mode="simulate")
    assert res.arrays["s"].buffer.dtype == "f16" and {r.instr.op for r in res.reports} == {"load", "store"}
    assert all(r.worst == 1 for r in res.reports)  # 2-byte lanes, consecutive: one wavefront


def test_warps_read_what_other_warps_stored_before_the_barrier():
    src = """__global__ void k(float* out) {
      __shared__ int perm[64];
      __shared__ float v[64 * 32];
      if (threadIdx.x < 32) { perm[threadIdx.x] = 31 - threadIdx.x; perm[32 + threadIdx.x] = threadIdx.x; }
      __syncthreads();
      out[threadIdx.x] = v[perm[threadIdx.x] * 32];   // warp 1 reads the indices warp 0 wrote
    }"""
    instrs, recs, _ = _run(
        src, "k", [{"name": "o", "dtype": "f32", "count": 64}], block=(64,), sample=S(warps=2)
    )
    (gather,) = [i.index for i in instrs if i.array == "v"]
    by_warp = {r.warp: r.addresses for r in recs if r.instr == gather}
    assert by_warp[0] == tuple(256 + 4 * 32 * (31 - lane) for lane in range(32))  # after perm's 256 bytes
    assert by_warp[1] == tuple(256 + 4 * 32 * lane for lane in range(32))


_SIGNED = """__global__ void k(int* out, int a, int b) {
  __shared__ int s[2048];
  int t = threadIdx.x;
  int x = (int)((unsigned)a * (unsigned)t - (unsigned)b);
  int v[8] = {x / 7, x % 7, a >> (t % 31), (int)((unsigned)a >> (t % 31)), (int)((unsigned)a * (unsigned)b),
              (int)(((long long)a * (long long)b) >> 32), a < b ? t : -t, (int)(((unsigned)a ^ (unsigned)b) % 13u)};
  for (int q = 0; q < 8; ++q) s[q * 256 + (v[q] & 255)] = q;
  __syncthreads();
  out[t] = s[t * 33];
}"""


def _i32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >= 1 << 31 else x


def _c_div(x: int, y: int) -> int:  # C truncates toward zero
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y > 0) else -q


@pytest.fixture(scope="module")
def signed_ptx() -> tuple:
    text = compile_ptx(_SIGNED, "sm_90", filename="k.cu")
    entry = ptx.find_entry(text, "k")
    return text, entry, ptx.shared_instructions(text, entry), ptx.entry_params(text, entry)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a=st.integers(-(2**31), 2**31 - 1), b=st.integers(-(2**31), 2**31 - 1))
def test_emulated_integer_arithmetic_is_cs_for_any_operands(signed_ptx, a, b):
    text, entry, instrs, params = signed_ptx
    args = load_args(
        [{"name": "o", "dtype": "i32", "count": 32}, {"name": "a", "value": a}, {"name": "b", "value": b}],
        params,
        {},
    )
    recs, _ = emulate(
        text, entry, instrs, grid=(1,), block=(32,), dynamic_smem=0, args=args, params=params, sample=S()
    )
    got: dict[int, list[int]] = {}
    for r in recs[:-1]:  # the stores (the last record is the read)
        for lane in range(32):
            got.setdefault(r.addresses[lane] // 1024, []).append(r.addresses[lane] // 4 % 256)
    for q, f in enumerate(
        [
            lambda t: _c_div(_i32(a * t - b), 7),
            lambda t: _i32(a * t - b) - 7 * _c_div(_i32(a * t - b), 7),
            lambda t: a >> (t % 31),
            lambda t: (a & 0xFFFFFFFF) >> (t % 31),
            lambda t: _i32(a * b),
            lambda t: _i32((a * b) >> 32),
            lambda t: t if a < b else -t,
            lambda t: ((a ^ b) & 0xFFFFFFFF) % 13,
        ]
    ):
        assert got[q] == [f(t) & 255 for t in range(32)], q


def test_a_call_not_inlined_is_noted(tmp_path):
    import smemtile.pipeline.inspect as pi

    f = tmp_path / "c.cu"
    f.write_text(
        "__device__ __noinline__ float load_any(const float* p, int i) { return p[i]; }\n"
        "__global__ void k(float* out) {\n  __shared__ float s[256];\n  s[threadIdx.x] = threadIdx.x;\n"
        "  __syncthreads();\n  out[threadIdx.x] = load_any(s, threadIdx.x ^ 1);\n}\n"
    )
    res = pi.inspect(f, block=(64,), args=[{"name": "o", "dtype": "f32", "count": 64}], mode="simulate")
    assert res.notes == [
        "the kernel calls load_any (_Z8load_anyPKfi) without inlining it: its 1 shared-memory instruction is "
        "listed on its own source lines (the emulator follows the call)"
    ]
    assert res.to_dict()["notes"] == res.notes
    # the callee's generic load is followed through the call: lane l reads s[l ^ 1] on line 1
    (st, ld) = sorted(res.reports, key=lambda r: r.instr.index)
    assert (st.instr.op, ld.instr.op, ld.instr.space, ld.instr.function, ld.instr.line) == (
        "store",
        "load",
        "shared",  # NVVM specialises the callee for its one caller's shared pointer
        "_Z8load_anyPKfi",
        1,
    )
    assert ld.array == "s" and [a // 4 for a in ld.recorded[0].addresses] == [t ^ 1 for t in range(32)]
    assert ld.executions == 2 and ld.worst == 1


# ---- device functions called without inlining ----------------------------------------------------------------

CALLS = """__device__ __noinline__ int slot(int t) {
  if (t & 1) return (t * 33) & 1023;
  return t;
}
__device__ __noinline__ float read_slot(const float* s, int t) { return s[slot(t)]; }
__global__ void k(float* out) {
  __shared__ float s[1024];
  for (int i = threadIdx.x; i < 1024; i += 32) s[i] = i;
  __syncthreads();
  float v = 0.f;
  if (threadIdx.x < 16) v = read_slot(s, threadIdx.x);
  out[threadIdx.x] = v;
}
"""


def test_nested_divergent_calls_run_with_the_callers_lanes():
    """A call inside a branch runs with that branch's lanes; a nested call's result comes back through .param;
    the callee's branches reconverge before it returns, so its load is one warp access."""
    instrs, recs, meta = _run(CALLS, "k", [{"name": "o", "dtype": "f32", "count": 32}])
    (ld,) = [i for i in instrs if i.op == "load"]
    assert ld.function == "_Z9read_slotPKfi" and ld.line == 5
    (rec,) = [r for r in recs if r.instr == ld.index]
    assert rec.active == 0xFFFF
    assert [a // 4 for a in rec.addresses[:16]] == [(t * 33) & 1023 if t & 1 else t for t in range(16)]
    assert rec.addresses[16:] == (0,) * 16 and meta["executions"][ld.index] == 1


_HAND_PTX = """
.version 8.0
.target sm_90
.address_size 64
.func (.param .b32 f_ret) f(.param .b32 f_a)
{
  .reg .b32 %r<3>;
  ld.param.b32 %r1, [f_a];
  { .param .b32 p0; .param .b32 q0;
  st.param.b32 [p0+0], %r1;
  call.uni (q0), f, (p0);
  ld.param.b32 %r2, [q0+0]; }
  st.param.b32 [f_ret+0], %r2;
  ret;
}
.visible .entry CALLER(.param .u64 k_p)
{
  .reg .b32 %r<3>;
  .reg .b64 %rd<2>;
  mov.u32 %r1, %tid.x;
  ld.param.u64 %rd1, [k_p];
  { .param .b32 p0; .param .b32 q0;
  st.param.b32 [p0+0], %r1;
  CALL;
  ld.param.b32 %r2, [q0+0]; }
  ret;
}
"""


@pytest.mark.parametrize(
    "call, message",
    [
        ("call.uni (q0), f, (p0)", "calls f recursively (or more than 32 calls deep): not emulated"),
        ("call.uni (q0), %rd1, (p0), proto", "(an indirect call through a function pointer) is not emulated"),
    ],
)
def test_recursion_and_indirect_calls_stop_with_the_instruction_named(call, message):
    text = _HAND_PTX.replace("CALLER", "k").replace("CALL", call)
    kargs = load_args([{"name": "p", "dtype": "f32", "count": 4}], ptx.entry_params(text, "k"), {})
    with pytest.raises(EmulationError) as e:
        emulate(
            text,
            "k",
            [],
            grid=(1, 1, 1),
            block=(32, 1, 1),
            dynamic_smem=0,
            args=kargs,
            params=ptx.entry_params(text, "k"),
            sample=S(),
        )
    assert message in str(e.value) and f"`{call}`" in str(e.value) and "PTX line" in str(e.value)


LOOPS = """__device__ INLINE float column_sum(const float* s, int c, int rows) {
  float a = 0.f;
  for (int r = 0; r < rows; ++r) a += s[r * 33 + (c ^ r)];
  return a;
}
__device__ INLINE void scatter(float* s, int t, float v) {
  if (t % 3 == 0) return;
  s[(t * 5) % 1056] = v;
}
__global__ void k(float* out, int rows) {
  __shared__ float s[1056];
  for (int i = threadIdx.x; i < 1056; i += blockDim.x) s[i] = i;
  __syncthreads();
  if (threadIdx.x % 4 != 1) scatter(s, threadIdx.x, 1.f);
  __syncthreads();
  out[threadIdx.x] = threadIdx.x < 48 ? column_sum(s, threadIdx.x, rows) : 0.f;
}
"""


def test_calls_emulate_as_the_inlined_code_does():
    """The same kernel with its functions __noinline__ and __forceinline__: every warp access (lanes, addresses,
    order) is the same, through a loop and an early return inside the callees and divergent call sites."""

    def accesses(inline: str):
        instrs, recs, _ = _run(
            LOOPS.replace("INLINE", inline),
            "k",
            [{"name": "o", "dtype": "f32", "count": 64}, {"name": "rows", "value": 7}],
            block=(64, 1, 1),
            sample=S(blocks=1, warps=2, executions=1000),
        )
        op = {i.index: i.op for i in instrs}
        return [(op[r.instr], r.warp, r.active, r.addresses) for r in recs], instrs

    called, instrs = accesses("__noinline__")
    inlined, _ = accesses("__forceinline__")
    assert {i.function for i in instrs} == {"", "_Z10column_sumPKfii", "_Z7scatterPfif"}
    # init 17 + 16 times, one scatter store per warp, 7 column loads per warp (warp 1: lanes 32-47)
    assert called == inlined and len(called) == 17 + 16 + 2 + 2 * 7
