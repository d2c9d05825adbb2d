"""flash_attn PATH 1 (the sm_90a kernel flash_attn_wgmma) without a GPU: configuration and refusals, the launch plan
and its tensor maps, the accesses conflict-free under the TMA swizzle, NVRTC builds without spills whose PTX holds
wgmma and cp.async.bulk.tensor, sm_80 still builds PATH 0 from the same file, the ranking on sm_90a."""

from __future__ import annotations

import json

import pytest
from conftest import nvcc, nvcc_path, run_cli

from smemtile.families import FAMILIES, configure
from smemtile.families.base import ContractViolation, refusal
from smemtile.families.flash_attn import hopper

FAM = FAMILIES["flash_attn"]
ISSUE = ("--batch", "4", "--heads", "32", "--seq", "8192", "--head-dim", "128", "--dtype", "bf16")


def _cfg(problem: dict, params: dict | None = None, arch: str = "sm_90a"):
    return configure(FAM, {**(params or {}), **problem}, {}, arch)


def test_sm_90a_defaults_to_path_1_and_path_0_values_keep_path_0():
    cfg = _cfg({"batch": 1, "heads": 2, "seq_q": 300, "head_dim": 128})
    p = cfg.params
    assert (p["PATH"], p["BM"], p["BN"], p["STAGES"], p["OVERLAP"]) == (1, 128, 128, 2, 1)
    assert FAM.threads(p) == 384
    assert FAM.name_expression(cfg) == "flash_attn_wgmma<smemtile::bf16, 128, 128, 2, 0, 1>"
    assert _cfg({"head_dim": 64}, {"WARPS": 4}).params["PATH"] == 0
    assert _cfg({"head_dim": 64}, {"BN": 32}).params["PATH"] == 0
    assert _cfg({"head_dim": 64}, {"PATH": 0}).params["PATH"] == 0
    assert configure(FAM, {"head_dim": 64}, {}, "sm_90").params["PATH"] == 0


def test_launch_plan_tensor_maps_and_smem():
    cfg = _cfg({"batch": 2, "heads": 3, "seq_q": 300, "seq_kv": 200, "head_dim": 128, "causal": 1})
    plan = FAM.launch(cfg)
    assert plan.grid == (3 * 2 * 3, 1, 1) and plan.block == (384, 1, 1)
    assert plan.dynamic_smem_bytes == 1024 + 128 * 128 * 2 + 2 * 2 * 128 * 128 * 2 + 8 * (2 + 4 * 2)
    maps = {m.name: m for m in plan.tensor_maps}
    hd = 3 * 128
    assert maps["tm_q"].dims == (128, 300, 3, 2) and maps["tm_q"].box == (64, 128, 1, 1)
    assert maps["tm_q"].strides == (hd * 2, 128 * 2, 300 * hd * 2)
    assert maps["tm_k"].dims == (128, 200, 3, 2) and maps["tm_k"].box == (64, 128, 1, 1)
    assert all(m.swizzle == "128B" and m.active and m.dtype == "bf16" for m in maps.values())
    sig = FAM.kernel_signature(cfg)
    assert sig[5:8] == tuple(f"const __grid_constant__ smemtile::TensorMap tm_{a}" for a in "qkv")
    packed = _cfg(
        {"batch": 1, "heads": 2, "seq_q": 64, "head_dim": 64, "q_ss": 384, "k_ss": 384, "v_ss": 384}
    )
    assert {m.name: m for m in FAM.launch(packed).tensor_maps}["tm_k"].strides[0] == 384 * 2


def test_refusals_are_one_line():
    refused = {
        "sm_90": ({}, {"PATH": 1}, "sm_90", "needs sm_90a"),
        "bm": ({}, {"PATH": 1, "BM": 64}, "sm_90a", "PATH 1 fixes BM at 128"),
        "bn": ({}, {"PATH": 1, "BN": 32}, "sm_90a", "64 or 128 keys"),
        "stages": ({}, {"PATH": 1, "STAGES": 1}, "sm_90a", "2 to 4 stages"),
        "smem": ({"head_dim": 128}, {"PATH": 1, "STAGES": 4}, "sm_90a", "opt-in limit"),
        "path0 stages 4": ({}, {"PATH": 0, "STAGES": 4}, "sm_90", "1 to 3 stages"),
    }
    for what, (prob, par, arch, msg) in refused.items():
        with pytest.raises(ContractViolation, match="^flash_attn: ") as e:
            _cfg({"batch": 1, "heads": 2, "seq_q": 64, **prob}, par, arch)
        assert msg in str(e.value) and "\n" not in str(e.value), (what, str(e.value))
    cfg = _cfg({"batch": 1, "heads": 2, "seq_q": 64, "head_dim": 64})
    assert "16-byte aligned" in refusal(FAM, cfg, {"k": 4})
    assert refusal(FAM, cfg, {"o": 2}) is None  # o: 2-byte stores where it is not 4-byte aligned


def test_the_tma_tiles_are_read_conflict_free():
    from smemtile.model.analysis import analyze_spec

    for hd, bn in ((64, 64), (128, 128), (128, 64)):
        cfg = _cfg({"batch": 1, "heads": 2, "seq_q": 256, "head_dim": hd}, {"BN": bn})
        res = {r.access.name: r.bank for r in analyze_spec(FAM.spec(cfg))}
        assert set(res) == {"Q_wgmma", "K_wgmma", "V_wgmma"}
        assert all((b.wavefronts == b.ideal_wavefronts).all() for b in res.values()), (hd, bn)


@pytest.mark.parametrize(
    "hd, bn, stages, overlap, causal", [(128, 128, 2, 1, 0), (64, 128, 3, 2, 1), (128, 64, 4, 0, 1)]
)
def test_nvrtc_builds_sm_90a_without_spills_and_the_ptx_holds_wgmma_and_tma(hd, bn, stages, overlap, causal):
    from smemtile.pipeline.build import compile_config

    cfg = _cfg(
        {"batch": 1, "heads": 2, "seq_q": 256, "head_dim": hd, "causal": causal},
        {"BN": bn, "STAGES": stages, "OVERLAP": overlap},
    )
    res = compile_config(cfg)
    r = res.resources[FAM.name_expression(cfg)]
    assert 0 < r.registers <= 168 and not r.spills, r
    ptx = res.ptx
    if ptx:
        assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor.4d" in ptx and "setmaxnreg" in ptx


def test_sm_80_still_builds_path_0_from_the_same_file():
    from smemtile.pipeline.build import compile_config

    cfg = configure(FAM, {"head_dim": 64, "batch": 1, "heads": 2, "seq_q": 128}, {}, "sm_80")
    assert cfg.params["PATH"] == 0
    r = compile_config(cfg).resources[FAM.name_expression(cfg)]
    assert not r.spills


def test_tiles_top_1_on_sm_90a_is_path_1_and_its_generated_file_builds_with_nvcc():
    t = run_cli(
        "tiles", "--family", "flash_attn", *ISSUE, "--arch", "sm_90a", "--top", "1", "--format", "yaml"
    )
    assert t.returncode == 0, t.stderr
    assert "PATH: 1" in t.stdout and "OVERLAP: 1" in t.stdout and "BN: 128" in t.stdout
    j = run_cli("tiles", "--family", "flash_attn", *ISSUE, "--arch", "sm_90a", "--format", "json")
    assert j.returncode == 0, j.stderr
    g = run_cli("generate", "-", "--json", input=t.stdout)
    assert g.returncode == 0, g.stderr
    assert json.loads(g.stdout)["grid"] == [64 * 128, 1, 1]
    if nvcc_path() is None:
        pytest.skip("nvcc not installed")
    src = run_cli("generate", "-", input=t.stdout)
    assert src.returncode == 0, src.stderr
    r = nvcc(src.stdout, ["-arch=sm_90a", "-std=c++17", "-Xcicc", "--sharedmem32=0", "-c"])
    assert r.returncode == 0, r.stderr[-2000:]


def test_the_model_is_near_the_standalone_timings_it_was_set_from():
    from smemtile.families.flash_attn import visible_pairs

    # (batch, heads, seq, causal, TFLOP/s measured with OVERLAP 1: bench/results/session10/fa_sm90_standalone_h200_run1.txt)
    for b, h, s, c, meas in ((16, 16, 4096, 0, 674), (4, 32, 8192, 0, 706), (4, 32, 8192, 1, 644)):
        q = {"batch": b, "heads": h, "seq_q": s, "seq_kv": s, "causal": c, "head_dim": 128}
        t = hopper.predict_time(q, 128, 1, 638.0, 132)
        got = 4 * b * h * 128 * visible_pairs(s, s, c) / t / 1e12
        assert abs(got / meas - 1) < 0.12, (b, h, s, c, got, meas)
