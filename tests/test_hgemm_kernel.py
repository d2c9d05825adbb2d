"""The tensor-core GEMM's kernel text (the hgemm family's .cu, issue 19 phase 1), through the family.

CPU: every shipped configuration (the labels below, their parameters from the family's task.yaml sweep plan)
configured by the family compiles with NVRTC for sm_80 and sm_90 with 0 spills, its PTX holds ldmatrix, mma.sync
and cp.async, the kernel's static_asserts reject bad template arguments with their message (what a C++ user who
instantiates the .cu directly sees), the template's default arguments are the family's defaults, and nvcc builds a
translation unit that includes the kernel with an explicit instantiation. GPU (marked): each shipped configuration
against the family's float64 reference (``verify``'s check, output poisoned) on ragged sizes, the K tail,
alpha/beta, split K, padded and odd leading dimensions.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from smemtile.families import FAMILIES, ContractViolation, configure
from smemtile.families.task import load

pytest.importorskip("cuda.bindings.nvrtc")

FAM = FAMILIES["hgemm"]
ARCHS = ("sm_80", "sm_90")
BIG = {"M": 4096, "N": 4096, "K": 4096}
# the configurations the family ships: its task.yaml's plan "shipped" (the first is the default)
ENTRIES = {
    c["label"]: c for g in load(type(FAM).__module__)["plans"]["shipped"]["groups"] for c in g["configs"]
}
SHIPPED = tuple(ENTRIES)


def _config(label: str, arch: str, **problem):
    e = ENTRIES[label]
    return configure(FAM, {**e["params"], **BIG, **e.get("problem", {}), **problem}, e.get("layouts"), arch)


def _kernel_text() -> str:
    from smemtile.codegen.render import inline_headers

    return inline_headers(FAM.source())


def _compile(exprs: list[str], arch: str):
    from smemtile.gpu.nvrtc import compile_cubin

    return compile_cubin(_kernel_text(), exprs, arch, filename="hgemm.cu")


def _args(expr: str) -> list[str]:
    return [a.strip() for a in expr[expr.index("<") + 1 : -1].split(",")]


def _expr(args: list[str]) -> str:
    return f"{FAM.kernel}<{', '.join(args)}>"


def test_shipped_configurations_are_the_families_own():
    """Ten configurations: the default first, both B layouts, split K, the 2-byte copies (ALIGN 1); each one is
    also in the calibration sweep the model's factors were measured on, except the column-major ALIGN 1."""
    assert len(SHIPPED) == 10 and SHIPPED[0] == "256x128x32 S4 (default)"
    for arch in ARCHS:  # the first is what the family builds by default
        default = FAM.name_expression(configure(FAM, dict(BIG), None, arch))
        assert FAM.name_expression(_config(SHIPPED[0], arch)) == default
    sweep = load(type(FAM).__module__)["plans"]["sweep"]["groups"]
    swept = {c["label"]: c for g in sweep for c in g["configs"]}
    assert [lb for lb in SHIPPED if lb not in swept] == ["128x256x32 S4 B col ALIGN 1"]
    for lb in SHIPPED:
        if lb in swept:
            assert (swept[lb]["params"], swept[lb].get("problem")) == (
                ENTRIES[lb]["params"],
                ENTRIES[lb].get("problem"),
            )
    assert {e.get("problem", {}).get("b_layout", "row") for e in ENTRIES.values()} == {"row", "col"}
    assert {e["params"].get("SPLIT_K", 1) for e in ENTRIES.values()} == {1, 2, 4}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("label", SHIPPED)
def test_shipped_variant_compiles_without_spills(label, arch):
    # one input type with C in the input type, the other with fp32 C (split K: fp32 C only)
    split = ENTRIES[label]["params"].get("SPLIT_K", 1) > 1
    cfgs = [_config(label, arch, dtype="bf16", c_dtype="f32" if split else "bf16"), _config(label, arch)]
    exprs = sorted({FAM.name_expression(c) for c in cfgs})
    res = _compile(exprs, arch)
    for c in cfgs:
        e = FAM.name_expression(c)
        r = res.resources[e]
        assert r.spills == 0 and r.stack_frame == 0, (e, arch, r)
        assert r.registers * FAM.threads(c.params) * c.params["MIN_BLOCKS"] <= 65536, (e, arch, r)
        assert r.static_smem_bytes == 0  # all shared memory is dynamic: the host passes smem_bytes
    ptx = res.ptx
    for needle in (
        "ldmatrix.sync.aligned.m8n8.x4",
        "mma.sync.aligned.m16n8k16.row.col.f32",
        "cp.async.wait_group",
    ):
        assert needle in ptx, needle
    if FAM.align(cfgs[1]) == 8:
        assert "cp.async.cg.shared.global" in ptx
    if cfgs[1].problem["b_layout"] == "row":
        assert "ldmatrix.sync.aligned.m8n8.x4.trans" in ptx
    assert "hgemm_splitk_prepare" in ptx


# positions of the template arguments in the name expression (hgemm<T, TC, B_COL, BM, BN, BK, WM, WN, STAGES, ...>)
BK, WN, STAGES, SPLIT_K = 5, 7, 8, 10


@pytest.mark.parametrize(
    ("position", "value", "message"),
    [
        (BK, "16", "BK must be a multiple of 32"),
        (STAGES, "6", "STAGES (cp.async ring depth) must be 2 to 5"),
        (WN, "24", "WN must be a multiple of 16"),
        (SPLIT_K, "2", "SPLIT_K > 1 adds the K slices into C with fp32 atomics"),
    ],
)
def test_static_asserts_state_the_rule(position, value, message):
    """The .cu guards itself for a C++ user who instantiates it without the family's checks."""
    from smemtile.errors import CompileError

    args = _args(FAM.name_expression(_config(SHIPPED[0], "sm_90", dtype="bf16", c_dtype="bf16")))
    assert args[:2] == ["smemtile::bf16", "smemtile::bf16"]
    args[position] = value
    with pytest.raises(CompileError, match="static assertion failed") as e:
        _compile([_expr(args)], "sm_90")
    assert message in str(e.value)


def test_default_template_arguments_are_the_family_defaults():
    """hgemm<bf16, float> with every other argument defaulted is the family's default configuration (same
    mangled name)."""
    expr = FAM.name_expression(configure(FAM, {**BIG, "dtype": "bf16"}, None, "sm_90"))
    res = _compile(["hgemm<smemtile::bf16, float>", expr], "sm_90")
    assert res.lowered["hgemm<smemtile::bf16, float>"] == res.lowered[expr]


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
    reason="nvcc not installed",
)
def test_nvcc_builds_an_explicit_instantiation():
    from conftest import nvcc

    expr = FAM.name_expression(_config(SHIPPED[0], "sm_80", dtype="bf16", c_dtype="bf16"))
    tu = (  # the kernel file's text and an explicit instantiation: one translation unit (cached by its text)
        _kernel_text()
        + f"\ntemplate __global__ void {expr}(int, int, int, float, const smemtile::bf16*, int,\n"
        "    const smemtile::bf16*, int, float, smemtile::bf16*, int);\n"
    )
    out = nvcc(tu, ["-std=c++17", "-arch=sm_80", "-Xptxas", "-v", "-c"])
    assert out.returncode == 0, out.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in out.stderr


# ---- GPU ----------------------------------------------------------------------------------------------------------
GPU_CASES = [  # (M, N, K, alpha, beta, leading dimensions: 0 tight, 8 padded by 8 elements, -1 odd)
    (1, 8, 8, 1.0, 0.0, 0),
    (129, 264, 104, 1.0, 0.0, 0),  # ragged M, N; K tail (104 = 3 * 32 + 8)
    (389, 520, 1000, 1.0, 0.0, 8),
    (200, 296, 152, 0.5, -1.5, 8),
    (64, 64, 1, 1.0, 0.5, 0),
]
ODD = [(77, 91, 45, 1.0, 0.0, -1), (130, 270, 75, 2.0, 0.25, -1)]


def _problem(m, n, k, alpha, beta, ld, b_col: bool) -> dict:
    p = {"M": m, "N": n, "K": k, "alpha": alpha, "beta": beta}
    if ld:

        def grow(x: int) -> int:
            return x + ld if ld > 0 else (x if x % 2 else x + 1)

        p.update(lda=grow(k), ldb=grow(k if b_col else n), ldc=grow(n))
    return p


def e_align(err: Exception, label: str) -> bool:
    """The refusal is the ALIGN 8 rule of a kernel built with ALIGN 8."""
    return ENTRIES[label]["params"].get("ALIGN") == 8 and "ALIGN=8" in str(err)


@pytest.mark.gpu
@pytest.mark.parametrize("label", SHIPPED)
def test_gpu_matches_float64(label):
    import numpy as np

    from smemtile.codegen.render import body
    from smemtile.gpu.run import LoadedKernel, open_device

    dev = open_device(0)
    e = ENTRIES[label]
    b_col = e.get("problem", {}).get("b_layout") == "col"
    split = e["params"].get("SPLIT_K", 1) > 1
    rng = np.random.default_rng(19)
    cases = GPU_CASES + (ODD if e["params"].get("ALIGN") == 1 else [])
    for t in ("f16", "bf16"):
        for tc in ("f32",) if split else (t, "f32"):
            # one kernel text per type pair: the problems differ only in the helper's comment (one NVRTC build)
            text = body(_config(label, dev.arch_name, dtype=t, c_dtype=tc))
            for case in cases:
                problem = _problem(*case, b_col)
                try:
                    cfg = _config(label, dev.arch_name, dtype=t, c_dtype=tc, **problem)
                except ContractViolation as e:  # an ALIGN 8 kernel refuses K or ldb not a multiple of 8
                    assert e_align(e, label) and (problem["K"] % 8 or problem.get("ldb", 8) % 8), (
                        label,
                        case,
                    )
                    continue
                inputs = FAM.make_inputs(cfg, rng)
                k = LoadedKernel(cfg, dev, source=text)
                try:
                    res = k.check(inputs, FAM.reference(cfg, inputs))  # verify's check: output poisoned first
                finally:
                    k.close()
                assert res.correct, (label, t, tc, case, res.to_dict())
