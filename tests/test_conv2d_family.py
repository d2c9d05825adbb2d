"""The conv2d family without a GPU: its float64 reference against a direct loop, the GEMM view the kernel computes
(the gather's tap walk, emulated exactly as conv2d.cu advances it) against the reference, the launch plan and its
refusals, the bank analysis of the gather tile, NVRTC builds without spills for sm_80 and sm_90, the tile model's
ranking through the CLI to a spec `verify` takes. The GPU half is tests/test_conv2d_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from conftest import run_cli

from smemtile.families import FAMILIES, configure
from smemtile.families.base import ContractViolation, refusal
from smemtile.families.conv2d import out_size
from smemtile.model.bf16 import to_float64

FAM = FAMILIES["conv2d"]


def _cfg(problem: dict, params: dict | None = None, arch: str = "sm_90"):
    return configure(FAM, {**(params or {}), **problem}, {}, arch)


def _direct(x, f, stride, pad):
    """y[n, p, q, k] by the definition, one output element at a time (tiny sizes only)."""
    n, h, w, c = x.shape
    k, r, s, _ = f.shape
    p_, q_ = out_size(h, r, stride, pad), out_size(w, s, stride, pad)
    y = np.zeros((n, p_, q_, k))
    for b in range(n):
        for i in range(p_):
            for j in range(q_):
                for kk in range(k):
                    acc = 0.0
                    for a in range(r):
                        for e in range(s):
                            ih, iw = i * stride - pad + a, j * stride - pad + e
                            if 0 <= ih < h and 0 <= iw < w:
                                acc += float(x[b, ih, iw] @ f[kk, a, e])
                    y[b, i, j, kk] = acc
    return y


@pytest.mark.parametrize(
    "problem",
    [
        {"n": 2, "h": 5, "w": 6, "c": 3, "k": 4, "r": 3, "s": 3, "pad": 1},
        {"n": 1, "h": 7, "w": 5, "c": 2, "k": 3, "r": 3, "s": 2, "stride": 2, "pad": 0},
        {"n": 1, "h": 9, "w": 9, "c": 4, "k": 2, "r": 5, "s": 5, "stride": 2, "pad": 2, "bias": 1, "relu": 1},
    ],
)
def test_reference_is_the_convolution(problem):
    cfg = _cfg(problem)
    q = FAM.problem_ints(cfg.problem)
    x = FAM.make_inputs(cfg, np.random.default_rng(1))
    ref = FAM.reference(cfg, x)
    xs = to_float64(x["x"], "bf16").reshape(q["n"], q["h"], q["w"], q["c"])
    fs = to_float64(x["f"], "bf16").reshape(q["k"], q["r"], q["s"], q["c"])
    want = _direct(xs, fs, q["stride"], q["pad"])
    if problem.get("bias"):
        want = want + x["bias"].astype(np.float64)
    if problem.get("relu"):
        want = np.maximum(want, 0.0)
    assert ref.shape == (want.size // q["k"], q["k"])
    np.testing.assert_allclose(ref, want.reshape(ref.shape), rtol=1e-12, atol=1e-12)
    assert (ref != 0).any() and (not problem.get("relu") or (ref == 0).any())


def _gather_a(cfg, x2d: np.ndarray) -> np.ndarray:
    """The A matrix (n*p*q x r*s*c) as conv2d.cu's gather fills As: every output pixel's image origin, and for
    each 8-element chunk the tap (c, s, r) walked from kg = a_col in steps of BK (Tap::advance), each element of a
    chunk walked on by one (the VEC 1 path; VEC 8 chunks never cross a tap). Zero where a tap falls outside."""
    q = FAM.problem_ints(cfg.problem)
    n, h, w, c, r, s, st, pad = (q[k] for k in ("n", "h", "w", "c", "r", "s", "stride", "pad"))
    p_, q_ = out_size(h, r, st, pad), out_size(w, s, st, pad)
    m_total, kg_total, bk = n * p_ * q_, r * s * c, cfg.params["BK"]
    a = np.zeros((m_total, -(-kg_total // bk) * bk))

    def advance(tap, step):
        cc, ss, rr = tap
        cc += step
        while cc >= c:
            cc -= c
            ss += 1
            if ss == s:
                ss, rr = 0, rr + 1
        return cc, ss, rr

    for m in range(m_total):
        img, rem = divmod(m, p_ * q_)
        h0, w0 = rem // q_ * st - pad, rem % q_ * st - pad
        for col in range(0, bk, 8):
            rs = col // c
            tap = (col - rs * c, rs % s, rs // s)
            for kt in range(a.shape[1] // bk):
                t = tap
                for e in range(8):
                    cc, ss, rr = t
                    ih, iw = h0 + rr, w0 + ss
                    if rr < r and 0 <= ih < h and 0 <= iw < w:
                        a[m, kt * bk + col + e] = x2d[(img * h + ih) * w + iw, cc]
                    t = advance(t, 1)
                tap = advance(tap, bk)
    return a[:, :kg_total]


@pytest.mark.parametrize("i", range(len(FAM.test_sizes)))
def test_the_kernels_gemm_view_is_the_reference(i):
    """A (the gather) @ B (the filter rows) is the reference on every test size: the GEMM view, the tap walk and
    the layouts of x and f are the convolution."""
    cfg = _cfg(FAM.test_sizes[i])
    dt = cfg.problem["dtype"]
    x = FAM.make_inputs(cfg, np.random.default_rng(2))
    a = _gather_a(cfg, to_float64(x["x"], dt))
    y = a @ to_float64(x["f"], dt).T
    if int(cfg.problem["bias"]):
        y = y + x["bias"].astype(np.float64)
    if int(cfg.problem["relu"]):
        y = np.maximum(y, 0.0)
    np.testing.assert_allclose(y, FAM.reference(cfg, x), rtol=1e-9, atol=1e-9)


def test_launch_plan_and_its_refusals():
    cfg = _cfg({"n": 32, "h": 28, "w": 28, "c": 128, "k": 128, "r": 3, "s": 3, "pad": 1})
    plan = FAM.launch(cfg)
    assert plan.grid == (32 * 28 * 28 // 128, 1, 1) and plan.block == (256, 1, 1)
    assert plan.dynamic_smem_bytes == 4 * (128 + 128) * 32 * 2
    args = dict(
        zip([d.rsplit(" ", 1)[1] for d in FAM.signature], [v for v, _ in plan.steps[0].args], strict=True)
    )
    assert (args["P"], args["Q"], args["pad"], args["ldx"], args["ldf"], args["ldy"]) == (
        28,
        28,
        1,
        128,
        1152,
        128,
    )
    assert FAM.auto_values(cfg) == {"VEC": 8}
    # pad same = (r - 1) // 2; a 1x1 filter pads nothing, a 7x7 three
    assert FAM.problem_ints(_cfg({"r": 1, "s": 1}).problem)["pad"] == 0
    assert FAM.problem_ints(_cfg({"r": 7, "s": 7}).problem)["pad"] == 3
    with pytest.raises(ContractViolation, match="square filter"):
        _cfg({"r": 3, "s": 1})
    # 16-byte gathers refuse a misaligned pointer or pitch; the element gather takes them
    assert "16-byte aligned" in refusal(FAM, cfg, {"x": 1})
    odd = _cfg({"c": 128, "ldx": 131, "r": 1, "s": 1})
    assert FAM.auto_values(odd) == {"VEC": 1} and refusal(FAM, odd, {"x": 1, "f": 1, "y": 1}) is None
    with pytest.raises(ContractViolation, match="VEC=8"):
        _cfg({"c": 3}, {"VEC": 8})
    with pytest.raises(ContractViolation, match="padded image holds the filter"):
        _cfg({"h": 2, "w": 2, "r": 5, "s": 5, "pad": 0})
    with pytest.raises(ContractViolation, match="sm_80"):
        _cfg({}, arch="sm_75")


def test_the_gather_tile_is_conflict_free_under_the_swizzle_and_the_fragments_conflict_dense():
    from smemtile.model.analysis import analyze_spec
    from smemtile.model.layout import Layout

    cfg = _cfg({"n": 32, "h": 28, "w": 28, "c": 128, "k": 128, "r": 3, "s": 3, "pad": 1})
    assert {b: str(v.swizzle) for b, v in cfg.layouts.items()} == {
        "As": "Swizzle<2,3,3>",
        "Bs": "Swizzle<2,3,3>",
    }

    def worst(c):
        return {
            r.access.name: (int(r.bank.wavefronts.max()), int(r.bank.ideal_wavefronts.max()))
            for r in analyze_spec(FAM.spec(c))
        }

    assert worst(cfg) == {"A_gather": (8, 8), "B_copy": (8, 8), "A_frag": (4, 4), "B_frag": (4, 4)}
    dense = configure(FAM, dict(cfg.problem), {"As": Layout(), "Bs": Layout()}, "sm_90")
    assert worst(dense) == {"A_gather": (8, 8), "B_copy": (8, 8), "A_frag": (16, 4), "B_frag": (16, 4)}


SHIPPED = [
    ({}, {}),  # the defaults (VEC 8)
    ({"c": 3, "r": 7, "s": 7, "stride": 2, "bias": 1, "relu": 1}, {}),  # VEC 1 (element gather), epilogue
    ({"dtype": "f16", "y_dtype": "f32"}, {"BK": 64, "STAGES": 3}),
    ({"y_dtype": "f16", "bias": 1}, {"BM": 256, "BN": 128, "WM": 64, "WN": 64}),
    ({}, {"BM": 128, "BN": 128, "WM": 64, "WN": 64, "MIN_BLOCKS": 2}),
    ({"c": 13}, {"BM": 64, "BN": 64, "WM": 32, "WN": 32}),
]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize(("problem", "params"), SHIPPED)
def test_nvrtc_builds_without_spills(problem, params, arch):
    from smemtile.pipeline.build import compile_config

    cfg = _cfg(problem, params, arch)
    r = compile_config(cfg).resources[FAM.name_expression(cfg)]
    assert r.registers > 0 and not r.spills, (FAM.name_expression(cfg), r)


def test_tiles_ranks_and_writes_a_spec_verify_takes(tmp_path):
    out = run_cli(
        "tiles", "--family", "conv2d", "--n", "32", "--h", "28", "--w", "28", "--c", "128", "--k", "128",
        "--r", "3", "--s", "3", "--pad", "1", "--dtype", "bf16", "--arch", "sm_80", "--top", "3", "--format", "yaml",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert len(docs) == 3
    spec = docs[0]
    assert spec["kernel"] == {
        "family": "conv2d", "n": 32, "h": 28, "w": 28, "c": 128, "k": 128, "r": 3, "s": 3, "pad": 1,
        "dtype": "bf16",
    }  # fmt: skip
    path = tmp_path / "pick.yaml"
    path.write_text(out.stdout.split("---")[0])
    v = run_cli("verify", str(path), "--compile-only", "--json")
    assert v.returncode == 0, v.stderr
    import json

    doc = json.loads(v.stdout)
    assert doc["spills"] == 0 and doc["registers"] > 0
    one = [
        "--n",
        "32",
        "--h",
        "56",
        "--w",
        "56",
        "--c",
        "256",
        "--k",
        "64",
        "--r",
        "1",
        "--s",
        "1",
        "--pad",
        "0",
    ]
    table = run_cli("tiles", "--family", "conv2d", *one, "--dtype", "bf16")
    assert table.returncode == 0 and "TFLOP/s predicted" in table.stdout, table.stderr
    # the JSON names the same unit as the table (a compute-bound family: TFLOP/s, no device-copy GB/s)
    j = json.loads(run_cli("tiles", "--family", "conv2d", *one, "--dtype", "bf16", "--json").stdout)
    assert j["unit"] == "TFLOP/s" and j["candidates"][0]["tflops"] > 0


def test_tile_model_states_it_is_not_calibrated_on_conv():
    ranker = FAM.ranker(
        {"n": 32, "h": 14, "w": 14, "c": 256, "k": 256, "r": 3, "s": 3, "dtype": "bf16"}, "sm_90", None
    )
    prov = ranker.provenance()
    assert prov["calibrated"] is False and "not yet calibrated on conv" in prov["model"]
    top = ranker.ranked[0]
    assert top.tflops > 0 and top.gather >= 1.0 and top.rank == 1
    # the element gather costs issue slots: a 3-channel stem ranks slower per flop than its 16-byte twin
    stem = FAM.ranker(
        {"n": 32, "h": 224, "w": 224, "c": 3, "k": 64, "r": 7, "s": 7, "stride": 2}, "sm_90", None
    )
    assert stem.ranked and all(s.gather > 1.0 for s in stem.ranked)


def test_the_ranked_picks_of_every_bench_size_build_without_spills():
    """The tile model's top 3 at every ResNet-50 layer of the task file (what `tiles` and the bench plan ship)
    compile for sm_90 without spills: the rules refuse the tiles whose gather passes and accumulators exceed the
    register cap (tiles.gather_registers)."""
    from smemtile.pipeline.build import compile_config

    done = set()
    for b in FAM.bench_sizes:
        problem = {**b, "dtype": "bf16"}
        for p in FAM.ranker(problem, "sm_90", None).top(3):
            cfg = configure(FAM, {**p, **problem}, {}, "sm_90")
            expr = FAM.name_expression(cfg)
            if expr in done:
                continue
            done.add(expr)
            r = compile_config(cfg).resources[expr]
            assert r.registers > 0 and not r.spills, (expr, r)
    assert len(done) >= 5


def test_the_compiled_kernels_shared_addresses_are_the_familys_expressions(tmp_path):
    """The generated kernel, compiled by NVRTC and its PTX emulated on the CPU (``smemtile inspect --simulate``):
    every cp.async and ldmatrix a sampled warp executes writes or reads exactly the lane addresses the family's
    spec expressions give (A_gather / B_copy / A_frag / B_frag, in any of the STAGES slots), each of them is
    executed, and every one is at its ideal wavefronts: `analyze` describes this kernel, not a model of it."""
    from smemtile.codegen.render import render
    from smemtile.model.analysis import analyze_spec
    from smemtile.pipeline.inspect import Sample, inspect

    problem = {"n": 2, "h": 8, "w": 8, "c": 32, "k": 128, "r": 3, "s": 3, "pad": 1}
    cfg = _cfg(problem, {"BM": 128})
    (tmp_path / "k.cu").write_text(render(cfg).source)
    q = FAM.problem_ints(cfg.problem)
    values = {**{k.upper(): q[k] for k in "nhwckrs"}, "stride": 1, "pad": 1, "P": 8, "Q": 8}
    values |= {"ldx": q["ldx"], "ldf": q["ldf"], "ldy": q["ldy"]}
    arrays = {
        "x": ("bf16", 2 * 8 * 8 * 32),
        "f": ("bf16", 128 * 288),
        "bias": ("f32", 128),
        "y": ("bf16", 128 * 128),
    }
    args = []
    for decl in FAM.signature:
        name = decl.rsplit(" ", 1)[1]
        if name in arrays:
            args.append({"name": name, "dtype": arrays[name][0], "count": arrays[name][1], "fill": "random"})
        else:
            args.append({"name": name, "value": values[name]})
    plan = FAM.launch(cfg)
    res = inspect(
        tmp_path / "k.cu",
        kernel="conv2d",
        grid=plan.grid,
        block=plan.block,
        smem=plan.dynamic_smem_bytes,
        args={"args": args},
        arch="sm_90",
        mode="simulate",
        sample=Sample(blocks=1, warps=8, executions=64),
    )
    p = cfg.params
    stage, a_bytes = (p["BM"] + p["BN"]) * p["BK"] * 2, p["BM"] * p["BK"] * 2
    want: dict[str, set] = {"cp.async": set(), "ldmatrix": set()}
    first: dict[str, set] = {"cp.async": set(), "ldmatrix": set()}
    for r in analyze_spec(FAM.spec(cfg)):
        base = 0 if r.access.buffer == "As" else a_bytes
        op = "ldmatrix" if r.access.op == "ldmatrix" else "cp.async"
        for w, addrs in zip(r.warp, r.bank.addresses, strict=True):
            for s in range(p["STAGES"]):
                want[op].add((int(w), tuple(int(a) + base + s * stage for a in addrs)))
            first[op].add((int(w), tuple(int(a) + base for a in addrs)))
    got: dict[str, set] = {"cp.async": set(), "ldmatrix": set()}
    for rep in res.reports:
        op = "ldmatrix" if rep.instr.op.startswith("ldmatrix") else rep.instr.op
        assert op in got, rep.instr.op  # the kernel's only shared-memory instructions
        for rec in rep.recorded:
            assert rec.active == 0xFFFFFFFF
            got[op].add((rec.warp, tuple(int(a) for a in rec.addresses)))
    for op in got:
        assert got[op] and got[op] <= want[op], (op, sorted(got[op] - want[op])[:2])
        assert first[op] <= got[op], (
            op,
            sorted(first[op] - got[op])[:2],
        )  # every access of the first tile ran
    lines = {r.instr.line: r for r in res.reports}
    assert all(r.excessive == 0 for r in lines.values()), [
        (r.instr.line, r.excessive) for r in lines.values()
    ]


# ---- PATH 1: conv2d_wgmma (sm_90a) ----------------------------------------------------------------------------------
RESNET_3X3 = {"n": 32, "h": 28, "w": 28, "c": 128, "k": 128, "r": 3, "s": 3, "pad": 1}


def _wg(problem: dict, params: dict | None = None, arch: str = "sm_90a"):
    return _cfg(problem, {"PATH": 1, **(params or {})}, arch)


def test_wgmma_path_launch_plan_and_its_refusals():
    cfg = _wg(RESNET_3X3)  # the path's defaults: 128 x 256 over two consumers, BK 64, 4 stages
    p = cfg.params
    assert (p["BM"], p["BN"], p["BK"], p["STAGES"], p["CONSUMERS"]) == (128, 256, 64, 4, 2)
    assert FAM.name_expression(cfg) == (
        "conv2d_wgmma<smemtile::bf16, smemtile::bf16, 128, 256, 4, 2, 8, false, false>"
    )
    plan = FAM.launch(cfg)
    assert plan.grid == (32 * 28 * 28 // 128 * 1, 1, 1) and plan.block == (384, 1, 1)
    assert plan.dynamic_smem_bytes == 1024 + 4 * (128 + 256) * 64 * 2 + 16 * 4 == 197696
    assert plan.cluster == (1, 1, 1) and not plan.tensor_maps and not plan.workspace
    # the same arguments as conv2d's (one signature: the generated instantiation and helper are the family's)
    assert [t for _, t in plan.steps[0].args] == FAM.param_types(cfg, FAM.calls(cfg)[0])
    one = _wg(RESNET_3X3, {"BN": 128, "CONSUMERS": 1, "STAGES": 5, "GROUP_M": 4})
    assert FAM.launch(one).block == (256, 1, 1) and FAM.launch(one).grid == (196, 1, 1)
    assert FAM.name_expression(one).endswith("128, 128, 5, 1, 4, false, false>")
    # PATH 0 is untouched by the new parameters
    assert FAM.name_expression(_cfg(RESNET_3X3)).startswith("conv2d<")
    refused = [
        ({}, "sm_90", "needs wgmma"),
        ({}, "sm_80", "needs wgmma"),
        ({"BK": 32}, "sm_90a", "BK = 64"),
        ({"BM": 64, "CONSUMERS": 2}, "sm_90a", "must be 64 or 128 rows"),
        ({"BN": 256, "CONSUMERS": 1}, "sm_90a", "256 fp32 accumulators"),
        ({"BN": 192}, "sm_90a", "not allowed|must be 64, 128 or 256"),
        ({"STAGES": 5}, "sm_90a", "exceeds the sm_90a opt-in limit"),
        ({"VEC": 1}, "sm_90a", "VEC 1"),
    ]
    for params, arch, needle in refused:
        with pytest.raises(ContractViolation, match=needle):
            _wg(RESNET_3X3, params, arch)
    with pytest.raises(ContractViolation, match="use PATH 0"):
        _wg({"c": 13})  # the element gather is PATH 0's
    assert "PATH 0" in refusal(FAM, cfg, {"x": 1})  # a misaligned pointer: 16-byte gathers only
    assert refusal(FAM, cfg, {"x": 8, "f": 8, "y": 8}) is None  # 16 bytes in: taken


def test_wgmma_path_accesses_are_conflict_free_under_the_128b_swizzle():
    """The producer's cp.async into the 128B-swizzled stages (chunk j of row r at j ^ r % 8) and the wgmma
    core-matrix reads are all at their ideal wavefronts; a dense tile conflicts 8-way on the reads."""
    from smemtile.model.analysis import analyze_spec
    from smemtile.model.layout import Layout

    for params in ({}, {"BN": 128, "CONSUMERS": 1}):
        cfg = _wg(RESNET_3X3, params)
        assert all(lay == Layout.for_tma("128B", 2) for b, lay in cfg.layouts.items() if b != "bars")
        got = {
            r.access.name: (int(r.bank.wavefronts.max()), int(r.bank.ideal_wavefronts.max()))
            for r in analyze_spec(FAM.spec(cfg))
        }
        assert got == {"A_gather": (4, 4), "B_copy": (4, 4), "A_wgmma": (4, 4), "B_wgmma": (4, 4)}, got
    with pytest.raises(ContractViolation, match="128B-swizzled"):
        configure(FAM, {"PATH": 1, **RESNET_3X3}, {"As": Layout()}, "sm_90a")


@pytest.mark.parametrize(
    ("problem", "params"),
    [
        (RESNET_3X3, {}),
        ({"dtype": "f16", "y_dtype": "f32", "bias": 1, "relu": 1}, {"BN": 128, "CONSUMERS": 1, "STAGES": 5}),
        ({"y_dtype": "f16", "r": 1, "s": 1}, {"BM": 64, "BN": 64, "CONSUMERS": 1, "STAGES": 3}),
    ],
)
def test_wgmma_path_nvrtc_builds_without_spills_and_its_ptx_holds_the_pipeline(problem, params):
    import re

    from smemtile.pipeline.build import build

    b = build(_wg(problem, params))
    if b.compiled is None:
        pytest.skip(b.compile_note)
    ptx = b.compiled.ptx
    bn = b.kernel.config.params["BN"]
    for needle in (
        rf"wgmma\.mma_async\.sync\.aligned\.m64n{bn}k16\.f32\.(bf16|f16)",
        r"cp\.async\.cg\.shared\.global",
        r"cp\.async\.mbarrier\.arrive\.noinc\.shared::cta\.b64",
        r"fence\.proxy\.async\.shared::cta",
        r"mbarrier\.try_wait\.parity",
    ):
        assert re.search(needle, ptx), needle
    assert b.kernel.extra["ptxas"]["spills"] == 0
    assert all(i.status != "fail" for i in b.checklist), [i for i in b.checklist if i.status == "fail"]


@pytest.mark.slow
def test_wgmma_path_generated_file_builds_with_nvcc_for_sm_90a_and_the_file_for_sm_80():
    """nvcc standalone: the generated PATH 1 file (kernel + instantiation + launch_conv2d()) for sm_90a, its PTX
    with wgmma and cp.async; a PATH 0 file for sm_80 (the same conv2d.cu text, conv2d_wgmma not instantiated).
    Both compiles go through conftest.nvcc's disk cache (keyed by the generated text, arguments, nvcc version)."""
    import re

    from conftest import nvcc, nvcc_path

    from smemtile.codegen.render import render

    if nvcc_path() is None:
        pytest.skip("nvcc not installed")
    for name, cfg, arch in (
        ("wg", _wg(RESNET_3X3), "sm_90a"),
        ("mma", _cfg(RESNET_3X3, {}, "sm_80"), "sm_80"),
    ):
        source = render(cfg).source
        for flag in ("-c", "-ptx"):
            r = nvcc(source, ["-std=c++17", f"-arch={arch}", flag], output=flag == "-ptx")
            assert r.returncode == 0, r.stderr[-2000:]
        ptx = r.output
        if name == "wg":
            assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n256k16\.f32\.bf16\.bf16", ptx)
            assert "cp.async.mbarrier.arrive.noinc" in ptx and "cp.async.cg.shared.global" in ptx
        else:
            assert "wgmma" not in ptx and "mma.sync.aligned.m16n8k16" in ptx


def test_the_tile_model_ranks_the_wgmma_path_only_when_enabled(monkeypatch):
    """RANK_WGMMA off (until the H200 run): sm_90a ranks the mma.sync tiles only (the tile model's GPU is sm_90's
    H200). On: PATH 1 candidates rank first on sm_90a where the problem has 16-byte gathers, never on sm_90 or for
    c % 8 != 0, and the #1 configures to conv2d_wgmma."""
    import smemtile.families.conv2d as conv2d
    from smemtile.pipeline.tiles import ranker_for

    def ranked(problem, arch):
        return ranker_for(FAM, problem, arch, None).ranked

    off = ranked(RESNET_3X3, "sm_90a")
    assert off and not any(dict(s.params).get("PATH") for s in off)
    assert [s.label for s in off[:5]] == [s.label for s in ranked(RESNET_3X3, "sm_90")[:5]]
    monkeypatch.setattr(conv2d, "RANK_WGMMA", True)
    on = ranked(RESNET_3X3, "sm_90a")
    paths = [dict(s.params).get("PATH", 0) for s in on]
    n_wg = sum(paths)
    assert n_wg >= 4 and paths[:n_wg] == [1] * n_wg  # the tier above the mma.sync tiles
    assert all(s.label.startswith("wgmma 128x") and s.threads in (256, 384) for s in on[:n_wg])
    top = dict(on[0].params)
    cfg = configure(FAM, {**top, **RESNET_3X3}, {}, "sm_90a")
    assert FAM.name_expression(cfg).startswith("conv2d_wgmma<")
    # k = 64: a 128 x 64 tile beats BN 128 / 256 (half or three quarters of those would be padding)
    small_k = ranked({**RESNET_3X3, "h": 56, "w": 56, "c": 64, "k": 64}, "sm_90a")
    assert dict(small_k[0].params)["BN"] == 64
    assert not any(dict(s.params).get("PATH") for s in ranked(RESNET_3X3, "sm_90"))
    assert not any(dict(s.params).get("PATH") for s in ranked({**RESNET_3X3, "c": 13}, "sm_90a"))


def test_wgmma_min_blocks_is_refused_where_the_blocks_cannot_reside():
    """PATH 1's MIN_BLOCKS caps the registers at __launch_bounds__: 128x64 over one consumer (64 accumulators)
    fits two blocks (ptxas 13.0: 96 registers, no spills) and is named with it; three spill (80-register cap) and
    128x128 over two consumers at two made ptxas fail: both are refused with the reason."""
    prob = {"n": 32, "h": 28, "w": 28, "c": 128, "k": 128, "r": 3, "s": 3, "pad": 1, "dtype": "bf16"}
    tile = {"PATH": 1, "BM": 128, "BN": 64, "CONSUMERS": 1, "STAGES": 4}
    ok = configure("conv2d", {**tile, "MIN_BLOCKS": 2, **prob}, None, "sm_90a")
    assert FAM.name_expression(ok).endswith(", false, false, 2>")
    assert FAM.name_expression(configure("conv2d", {**tile, **prob}, None, "sm_90a")).endswith(
        ", false, false>"
    )
    for bad in ({**tile, "STAGES": 3, "MIN_BLOCKS": 3}, {**tile, "BN": 128, "CONSUMERS": 2, "MIN_BLOCKS": 2}):
        with pytest.raises(ContractViolation, match="MIN_BLOCKS .* resident blocks do not fit"):
            configure("conv2d", {**bad, **prob}, None, "sm_90a")
