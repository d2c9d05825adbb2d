"""The Hopper GEMM family (wgmma_gemm): configuration rules, the launch plan (grid, clusters, tensor maps), its
shared-memory accesses under the TMA 128B swizzle, the tiles ranking that feeds generate/verify, the generated
helper (cudaLaunchKernelEx, cuTensorMapEncodeTiled), nvcc builds for sm_90a (slow) and GPU checks (gpu)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import yaml
from conftest import nvcc, nvcc_path, run_cli

from smemtile.codegen.analysis import bank_table
from smemtile.codegen.render import launch_helper, render
from smemtile.families import FAMILIES, ContractViolation, configure
from smemtile.families.wgmma_gemm import bf16_bits, bf16_value, smem_formula

FAM = FAMILIES["wgmma_gemm"]


def cfg(**kw):
    return configure("wgmma_gemm", kw, {}, "sm_90a")


def test_defaults_and_stages_from_the_budget():
    c = cfg()
    p = c.params
    assert (p["BM"], p["BN"], p["CONSUMERS"], p["CLUSTER"], p["WS"], p["EPI"], p["SETMAXNREG"]) == (
        128,
        256,
        2,
        2,
        1,
        2,
        1,
    )
    # 1024 slack + 4 x (128 + 256) x 128 B + half the 128 x 256 bf16 C tile (EPI 2) + 8 mbarriers
    assert p["STAGES"] == 4 and p["EPI"] == 2 and FAM.smem_bytes(c) == 1024 + 4 * 49152 + 32768 + 64 == 230464
    assert cfg(EPI=1).params["STAGES"] == 3  # the whole tile staged: one stage less
    assert cfg(EPI=0).params["STAGES"] == 4
    assert cfg(BN=128).params["STAGES"] == 6
    assert smem_formula({**p, "STAGES": 5}) > 232448
    assert FAM.threads(p) == 384
    assert cfg(WS=0).params["INFLIGHT"] == 0 and cfg(WS=0).params["SETMAXNREG"] == 0
    assert cfg(CONSUMERS=1, BM=64).params["SETMAXNREG"] == 0


@pytest.mark.parametrize(
    ("params", "arch", "needle"),
    [
        ({}, "sm_90", "need sm_90a"),
        ({}, "sm_80", "need sm_90a"),
        ({"BM": 256, "BN": 256}, "sm_90a", "256 fp32 accumulators per thread"),
        ({"BM": 64, "CONSUMERS": 2}, "sm_90a", "BM / CONSUMERS = 64 / 2 must be 64 or 128"),
        ({"STAGES": 5}, "sm_90a", "at most 4 fit"),
        ({"STAGES": 4, "EPI": 1}, "sm_90a", "at most 3 fit"),
        ({"WS": 0, "INFLIGHT": 1}, "sm_90a", "INFLIGHT must be 0"),
        ({"SETMAXNREG": 1, "CONSUMERS": 1, "BM": 64}, "sm_90a", "SETMAXNREG is for 2 consumer warpgroups"),
        ({"BN": 64, "CLUSTER": 2, "BM": 128}, "sm_90a", None),  # 32 B rows per CTA: whole 8-row atoms; EPI 1
        ({"BN": 192, "EPI": 2}, "sm_90a", "BN = 192 cannot"),
        ({"dtype": "f32"}, "sm_90a", "not one of f16, bf16"),
    ],
)
def test_contract(params, arch, needle):
    if needle is None:
        configure("wgmma_gemm", params, {}, arch)
        return
    with pytest.raises(ContractViolation) as e:
        configure("wgmma_gemm", params, {}, arch)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_a_layout_the_kernel_does_not_build_is_refused():
    with pytest.raises(
        ContractViolation, match="As: the kernel's tensor maps and wgmma descriptors use TMA 128B"
    ):
        configure("wgmma_gemm", {}, {"As": {"swizzle": [3, 3, 3]}}, "sm_90a")


def test_launch_plan_grid_clusters_and_tensor_maps():
    plan = FAM.launch(cfg(M=8192, N=8192, K=8192))
    assert plan.grid == (132, 1, 1) and plan.cluster == (2, 1, 1) and plan.block == (384, 1, 1)
    assert plan.steps[0].cluster == (2, 1, 1)
    maps = {t.name: t for t in plan.tensor_maps}
    assert (
        maps["tmA"].dims == (8192, 8192) and maps["tmA"].box == (64, 128) and maps["tmA"].strides == (16384,)
    )
    assert maps["tmB"].box == (64, 128)  # each CTA of the pair loads half of the 256 B rows
    assert maps["tmC"].box == (64, 64) and maps["tmC"].active
    # not persistent: one cluster per pair of 128-row tiles
    assert FAM.launch(cfg(M=8192, N=8192, K=8192, PERSISTENT=0)).grid == (32 * 32 * 2, 1, 1)
    # dense K = 1023 (lda = 1023: rows TMA cannot read): A and B repacked into rows of 1024 elements first, the
    # tensor maps over the copies; C rows not 16-byte aligned (ldc = 4097: no tmC, masked stores)
    plan = FAM.launch(cfg(M=4095, N=4097, K=1023))
    assert [s.kernel for s in plan.steps][:2] == ["smemtile_wgmma_repack"] * 2
    maps = {t.name: t for t in plan.tensor_maps}
    assert maps["tmA"].dims == (1023, 4095) and maps["tmA"].strides == (2048,) and maps["tmA"].array == "Ap"
    assert not maps["tmC"].active
    ws = {w.name: w for w in plan.workspace}
    assert ws["Ap"].active and ws["Ap"].nbytes == 4095 * 1024 * 2 and ws["Bp"].nbytes == 4097 * 1024 * 2
    main = next(s for s in plan.steps if s.main)
    args = dict(zip(FAM.signature, (v for v, _ in main.args), strict=True))
    assert args["int c_tma"] == 0 and args["int ldc"] == 4097
    # the user's own leading dimension 1024 (a padded A and B): no copy, the maps read the arrays themselves
    padded = FAM.launch(cfg(M=4095, N=4097, K=1023, lda=1024, ldb=1024))
    assert [s.main for s in padded.steps] == [True] and padded.workspace_bytes == 0
    assert {t.name: t.strides for t in padded.tensor_maps}["tmA"] == (2048,)
    # a 16-byte aligned leading dimension at an address 2 bytes off: repacked; C at such an address: no TMA store
    odd = FAM.launch(cfg(M=256, N=256, K=256), align={"A": 2, "B": 256, "C": 2})
    assert [s.kernel for s in odd.steps][0] == "smemtile_wgmma_repack" and len(odd.steps) == 2
    assert not {t.name: t for t in odd.tensor_maps}["tmC"].active
    assert FAM.launch(cfg(M=100, N=64, K=64)).grid == (2, 1, 1)  # one cluster for the single pair of tiles
    assert plan.to_dict()["tensor_maps"][0]["name"] == "tmA"


def test_accesses_conflict_free_under_128b():
    for c in (cfg(), cfg(EPI=1), cfg(BN=128), cfg(BM=256, BN=128), cfg(EPI=0), cfg(CONSUMERS=1, BM=64, WS=0)):
        rows = bank_table(c)
        assert rows and all(r.wavefronts == r.ideal for r in rows), [
            (r.name, r.wavefronts, r.ideal) for r in rows
        ]
        spec = FAM.spec(c)
        assert {b.name: b.layout.tma for b in spec.buffers if b.name != "bars"} == {
            b: "128B" for b in ("As", "Bs", "Cs") if b in {x.name for x in spec.buffers}
        }


def test_inputs_reference_and_bf16_codec():
    x = np.array([1.0, -2.5, 3.14159, 1e-3, 65504.0], dtype=np.float32)
    back = bf16_value(bf16_bits(x))
    assert np.allclose(back, x, rtol=2**-8) and back[1] == -2.5
    c = cfg(M=33, N=17, K=21)
    inputs = FAM.make_inputs(c, np.random.default_rng(0))
    assert inputs["A"].shape == (33, 21) and inputs["B"].shape == (17, 21)  # dense: the user's arrays
    ref = FAM.reference(c, inputs)
    a = bf16_value(inputs["A"]).astype(np.float64)
    b = bf16_value(inputs["B"]).astype(np.float64)
    assert ref.shape == (33, 17) and np.allclose(ref, a @ b.T)
    f16 = configure("wgmma_gemm", {"M": 8, "N": 8, "K": 8, "dtype": "f16"}, {}, "sm_90a")
    assert FAM.make_inputs(f16, np.random.default_rng(0))["A"].dtype == np.float16


def test_tiles_rank_this_family_and_feed_verify(tmp_path):
    p = run_cli(
        "tiles",
        "8192",
        "8192",
        "8192",
        "--dtype",
        "bf16",
        "--arch",
        "sm_90a",
        "--top",
        "1",
        "--format",
        "yaml",
    )
    assert p.returncode == 0, p.stderr
    doc = yaml.safe_load(p.stdout)
    assert doc["arch"] == "sm_90a" and doc["kernel"]["family"] == "wgmma_gemm"
    assert doc["kernel"]["CLUSTER"] in (1, 2) and doc["stages"] >= 2
    spec = tmp_path / "h.yaml"
    spec.write_text(p.stdout)
    g = run_cli("generate", str(spec), "--json")
    assert g.returncode == 0, g.stderr
    import json

    gen = json.loads(g.stdout)
    assert gen["cluster"] == [doc["kernel"]["CLUSTER"], 1, 1] and gen["launch"]["tensor_maps"]
    t = run_cli(
        "tiles", "8192", "8192", "8192", "--dtype", "bf16", "--arch", "sm_90a", "--json", "--top", "100"
    )
    ranked = json.loads(t.stdout)["candidates"]
    assert {(c["cfg"]["cluster"], c["cfg"]["ws"]) for c in ranked} >= {(1, 1), (2, 1), (2, 0)}


def test_helper_uses_the_plan():
    h = launch_helper(cfg(M=8192, N=8192, K=8192))
    assert (
        "cudaLaunchKernelEx(&config, kernel, M, N, K, tmA, tmB, tmC, C, ldc, (int((ldc % 8) == 0) & "
        "int(C_align >= 16)));" in h
    )
    assert "attr[0].val.clusterDim.x = 2;" in h
    assert 'cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled"' in h
    assert h.count("CU_TENSOR_MAP_SWIZZLE_128B") == 3 and "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16" in h
    # tmC only where C rows are 16-byte aligned; A and B repacked where TMA cannot read their rows
    assert "if ((int((ldc % 8) == 0) & int(C_align >= 16))) {" in h
    assert "if ((int(((long long)lda % 8) != 0) | int((long long)A_align < 16))) {" in h
    assert "const long long A_align = smemtile_align_of(A);" in h
    assert (
        "return launch_wgmma_gemm(M, N, K, A, (K), B, (K), C, (N), stream, workspace, workspace_bytes);" in h
    )


@pytest.mark.slow
def test_generated_cu_builds_for_sm_90a_and_its_ptx_has_wgmma_and_tma():
    if nvcc_path() is None:
        pytest.skip("nvcc not found")
    src = render(cfg(M=8192, N=8192, K=8192)).source
    obj = nvcc(src, ["-arch=sm_90a", "-c"])
    assert obj.returncode == 0, obj.stderr[-2000:]
    ptx = nvcc(src, ["-arch=sm_90a", "-ptx"], suffix=".cu")
    assert ptx.returncode == 0, ptx.stderr[-2000:]


@pytest.mark.slow
def test_nvrtc_ptx_holds_wgmma_tma_multicast_and_no_spills():
    from smemtile.pipeline.build import build

    b = build(cfg(M=8192, N=8192, K=8192))
    if b.compiled is None:
        pytest.skip(b.compile_note)
    ptx = b.compiled.ptx
    for needle in (
        r"wgmma\.mma_async\.sync\.aligned\.m64n256k16\.f32\.bf16\.bf16",
        r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\.mbarrier::complete_tx::bytes\.multicast",
        r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta",
        r"setmaxnreg\.inc",
        r"stmatrix",
        r"mbarrier\.try_wait\.parity",
    ):
        assert re.search(needle, ptx), needle
    assert b.kernel.extra["ptxas"]["spills"] == 0
    assert all(i.status != "fail" for i in b.checklist)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_correct_on_the_gpu(dtype):
    from smemtile.gpu.run import LoadedKernel, open_device

    dev = open_device(0)
    if dev.cc != (9, 0):
        pytest.skip("wgmma needs an sm_90 GPU")
    for size in FAM.test_sizes:
        c = configure("wgmma_gemm", {**size, "dtype": dtype}, {}, "sm_90a")
        k = LoadedKernel(c, dev)
        try:
            inputs = FAM.make_inputs(c, np.random.default_rng(1))
            res = k.check(inputs, FAM.reference(c, inputs))
        finally:
            k.close()
        assert res.correct, (size, res.mismatch.describe() if res.mismatch else res.max_rel_error)
        assert k.driver_clusters >= 1
