"""flash_attn PATH 1 (the sm_90a kernel flash_attn_wgmma) without a GPU: configuration and refusals, the launch plan
and its tensor maps, the accesses conflict-free under the TMA swizzle, NVRTC builds without spills whose PTX holds
wgmma and cp.async.bulk.tensor, sm_80 still builds PATH 0 from the same file, the ranking on sm_90a."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import nvcc, nvcc_path, run_cli

from smemtile.families import FAMILIES, configure
from smemtile.families.base import ContractViolation, refusal
from smemtile.families.flash_attn import hopper

ROOT = Path(__file__).resolve().parents[1]
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


def test_the_schedule_by_hand():
    # one head, seq 384 causal: items of 3, 2, 1 KV tiles (BM = BN = 128), 2 SMs, a tile 1 s, no item cost
    q = {"batch": 1, "heads": 1, "seq_q": 384, "seq_kv": 384, "causal": 1, "head_dim": 128}
    assert hopper.item_lengths(q, 128) == [3, 2, 1]
    assert hopper.schedule_time(q, 128, 1.0, 0.0, 2, False) == 3.0  # list: SM0 3; SM1 2 then 1
    assert hopper.schedule_time(q, 128, 1.0, 0.0, 2, True) == 4.0  # round-robin: CTA 0 runs items 0 and 2
    assert hopper.schedule_time(q, 128, 1.0, 0.5, 2, False) == 4.0  # SM1: 2.5 then 1.5
    nc = {**q, "causal": 0, "heads": 5}  # 15 items of 3 tiles on 2 SMs: 8 waves
    assert hopper.schedule_time(nc, 128, 1.0, 0.25, 2, False) == 8 * 3.25


def test_the_fit_recovers_known_constants():
    from smemtile.families.flash_attn import fit

    def row(seq, causal, key_rate, item_s, pers=0):
        q = {"batch": 2, "heads": 3, "seq_q": seq, "seq_kv": seq, "causal": causal, "head_dim": 128}
        r = {"case": f"s{seq}c{causal}", "q": q, "bn": 128, "persistent": pers, "key": f"k{key_rate}p{pers}"}
        return {**r, "seconds": fit._time(r, key_rate, item_s)}

    rows = [row(s, c, 500.0, 2e-6) for s in (1024, 4096) for c in (0, 1)] + [row(2048, 0, 300.0, 2e-6)]
    rows += [row(s, 0, 450.0, 0.5e-6, 1) for s in (1024, 8192)]
    got = fit.fit(rows)
    assert got["item_s"] == {"0": 2e-6, "1": 0.5e-6}
    assert got["rates"]["k500.0p0"] == pytest.approx(500.0, rel=1e-4)
    assert got["rates"]["k300.0p0"] == pytest.approx(300.0, rel=1e-4)
    assert got["rates"]["k450.0p1"] == pytest.approx(450.0, rel=1e-4)
    assert fit.score(got, rows)["median_abs_error"] < 1e-4


def test_the_shipped_calibration_reproduces_its_fit_rows_and_ranks_the_measured_best():
    from smemtile.families.flash_attn import fit

    cal = hopper.load_calibration()
    rows = [r for p in fit.run_paths(cal) for r in fit.rows_of(p)]
    assert all(p.is_relative_to(ROOT) for p in fit.run_paths(cal))
    assert len(rows) == cal["fit"]["rows"] == 82
    sc = fit.score(cal, rows)
    assert sc["median_abs_error"] == pytest.approx(cal["fit"]["median_abs_error"], abs=1e-4)
    assert sc["median_abs_error"] < 0.01
    for case, s in sc["shapes"].items():
        assert s["top1_regret"] < 0.02 and s["spearman"] > 0.95, (case, s)
    # every configuration tiles ranks on sm_90a at head_dim 64 and 128 has a fitted rate
    keys = {
        hopper.cal_key(hd, bn, st, ov, 0)
        for hd in (64, 128)
        for bn in hopper.BNS
        for st in hopper.STAGES
        for ov in hopper.OVERLAPS
        if hopper.smem_formula(hd, bn, st) <= 232448
    }
    keys |= {hopper.cal_key(hd, bn, st, ov, 1) for hd in (64, 128) for bn, st, ov in hopper.PERSISTENT_KEYS}
    assert keys == set(cal["rates"]), keys ^ set(cal["rates"])


def test_another_sm_90a_gpu_orders_by_the_h200_rates_without_claiming_them():
    h200 = FAM.ranker({"batch": 4, "heads": 32, "seq_q": 8192, "head_dim": 128}, "sm_90a", None)
    h100 = FAM.ranker({"batch": 4, "heads": 32, "seq_q": 8192, "head_dim": 128}, "sm_90a", "h100")
    assert h100.top(3) == h200.top(3)  # the same SM count and per-SM rates: the same order
    assert h200.provenance()["calibrated"] is True and h100.provenance()["calibrated"] is False
    assert "not measured on this GPU" in h100.provenance()["model"]
    assert not any(s.measured for s in h100.ranked) and all(s.transferred for s in h100.ranked)


def test_a_persistent_tile_carries_the_gpu_s_sm_count():
    from smemtile.families.flash_attn.tiles import FaTile, FlashAttnTileModel
    from smemtile.model.arch import get_arch
    from smemtile.model.tiling_gpus import get_gpu

    m = FlashAttnTileModel(FAM)
    m.space({"batch": 4, "heads": 32, "seq_q": 8192, "head_dim": 128}, get_arch("sm_90a"))
    gpu = get_gpu("h100", "sm_90", sms=114)  # an H100 PCIe's 114 SMs
    pers = dict(m.predict(FaTile(128, 128, 2, 1, 1, 1), gpu).result.params)
    assert pers["PERSISTENT"] == 1 and pers["SMS"] == 114
    assert "SMS" not in dict(m.predict(FaTile(128, 128, 2, 1, 1, 0), gpu).result.params)
