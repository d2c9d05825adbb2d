"""The hgemm kernel family (smemtile/families/hgemm): its contract, its accesses (conflicted dense, conflict-free
under the kernel's swizzles), its spec round trip, its launch plan (split K, column-major B), its reference, the
`tiles --dtype f16|bf16` specs that generate and verify take, and (slow) nvcc and NVRTC builds with the review
checklist; (gpu) the family checked on the GPU through the same launcher `verify` uses."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from conftest import nvcc, nvcc_path, run_cli

from smemtile.codegen.analysis import bank_table
from smemtile.codegen.render import launch_helper
from smemtile.families import FAMILIES, ContractViolation, Family, configure, reconfigure
from smemtile.families.hgemm import swizzle_for, to_float64
from smemtile.families.hgemm.tiles import warp_tile
from smemtile.model.analysis import analyze_spec
from smemtile.model.spec import spec_from_dict
from smemtile.pipeline.fixes import variants
from smemtile.pipeline.specs import resolve
from smemtile.pipeline.tiles import recommend, spec_doc, yaml_specs

FAM = FAMILIES["hgemm"]
# dense tiles, given explicitly: the family's default layouts are its swizzles
DENSE = {"As": {"pad": 0}, "Bs": {"pad": 0}}


def _swizzled(params: dict, arch: str = "sm_90"):
    cfg = configure(FAM, params, {}, arch)
    return reconfigure(cfg, layouts=FAM.default_layouts(cfg))


def _degrees(cfg) -> dict:
    return {b.name: b.degree for b in bank_table(cfg)}


def test_defaults_and_arch_dependent_min_blocks():
    cfg = configure(FAM, {}, {}, "sm_90")
    p = cfg.params
    assert (p["BM"], p["BN"], p["BK"], p["WM"], p["WN"], p["STAGES"]) == (256, 128, 32, 64, 64, 4)
    assert FAM.threads(p) == 256 and p["MIN_BLOCKS"] == 1  # ~232 registers x 256 threads: one block
    four = configure(FAM, {"BM": 128, "BN": 128, "BK": 64, "STAGES": 3}, {}, "sm_90")
    assert FAM.threads(four.params) == 128 and four.params["MIN_BLOCKS"] == 2  # 2 x 98 KiB fit 228 KiB
    # sm_86 has 100 KiB per SM: the same tile fits once
    assert (
        configure(FAM, {"BM": 128, "BN": 128, "BK": 64, "STAGES": 3}, {}, "sm_86").params["MIN_BLOCKS"] == 1
    )
    assert FAM.name_expression(configure(FAM, {}, DENSE, "sm_90")) == (
        "hgemm<smemtile::f16, float, false, 256, 128, 32, 64, 64, 4, 8, 1, 1, 8, 0, 0, 0, 0, 0, 0, 0, 0>"
    )
    swz = FAM.default_layouts(cfg)  # the kernel's template defaults (hgemm_swizzle_b/_s of hgemm.cu)
    assert (str(swz["As"].swizzle), str(swz["Bs"].swizzle)) == ("Swizzle<2,3,3>", "Swizzle<3,3,4>")
    if hasattr(Family, "default_layouts"):  # configure fills layouts a spec leaves out with them
        assert cfg.layouts == swz
        assert FAM.name_expression(cfg).endswith("8, 0, 2, 3, 3, 0, 3, 3, 4>")


@pytest.mark.parametrize(
    ("params", "layouts", "arch", "needle"),
    [
        ({"BK": 16}, {}, "sm_90", "16 is not allowed; allowed: 32, 64, 128"),
        ({"WN": 24, "BN": 96}, {}, "sm_90", "WN=24 must be a multiple of 16"),
        ({"WM": 40}, {}, "sm_90", "WM=40 must be a multiple of 16"),
        ({"BN": 192, "WN": 64}, {}, "sm_90", "BN=192 must be a power of two"),
        ({"BM": 96}, {}, "sm_90", "must tile the 96x128 block tile"),
        ({"BM": 1024, "WM": 16, "BN": 64, "WN": 16}, {}, "sm_90", "a block needs 1 to 32"),
        ({"STAGES": 6}, {}, "sm_90", "6 is not allowed; allowed: 2, 3, 4, 5"),
        ({"SPLIT_K": 2, "c_dtype": "f16"}, {}, "sm_90", "c_dtype must be f32"),
        ({"ALIGN": 8, "K": 1023}, {}, "sm_90", "ALIGN=8 (16-byte cp.async) needs K and ldb"),
        ({"ALIGN": 8, "N": 4097}, {}, "sm_90", "ldb (N)"),
        ({}, {}, "sm_75", "hgemm needs sm_80 or newer"),
        ({}, {"As": {"pad": 4}}, "sm_90", "padding 4 must be a multiple of 8"),
        ({}, {"Bs": {"swizzle": [3, 2, 5]}}, "sm_90", "splits 16-byte granules"),
        ({"BK": 128, "STAGES": 5}, {}, "sm_90", "exceeds the sm_90 opt-in limit"),
        ({"BM": 64, "BN": 16, "WM": 16, "WN": 16, "BK": 32}, {}, "sm_90", "B chunks of a tile do not split"),
        ({"dtype": "f32"}, {}, "sm_90", "'f32' is not one of f16, bf16"),
        ({"c_dtype": "f64"}, {}, "sm_90", "'f64' is not one of f32, f16, bf16"),
        ({"ALIGN": 4}, {}, "sm_90", "4 is not allowed; allowed: 0, 1, 2, 8"),
        ({"b_layout": "colmajor"}, {}, "sm_90", "not one of row, col"),
        ({}, {"Cs": {"pad": 8}}, "sm_90", "unknown buffer 'Cs'"),
        ({"M": 2**31}, {}, "sm_90", "out of range"),
    ],
)
def test_contract_violations_refused(params, layouts, arch, needle):
    with pytest.raises(ContractViolation) as e:
        configure(FAM, params, layouts, arch)
    msg = str(e.value)
    assert needle in msg, msg
    assert "\n" not in msg and e.value.exit_code == 2


def test_threads_must_match_the_warp_tiles():
    with pytest.raises(ContractViolation, match="need 256"):
        configure(FAM, {}, {}, "sm_90", threads=128)


@pytest.mark.parametrize(
    ("params", "dense", "swizzles"),
    [
        ({}, {"A_frag": 4, "B_frag": 8}, ("Swizzle<2,3,3>", "Swizzle<3,3,4>")),
        ({"BK": 64, "STAGES": 3}, {"A_frag": 8, "B_frag": 8}, ("Swizzle<3,3,3>", "Swizzle<3,3,4>")),
        ({"BM": 128, "BN": 256}, {"A_frag": 4, "B_frag": 8}, ("Swizzle<2,3,3>", "Swizzle<3,3,5>")),
        ({"b_layout": "col"}, {"A_frag": 4, "B_frag": 4}, ("Swizzle<2,3,3>", "Swizzle<2,3,3>")),
        (
            {"BM": 64, "BN": 64, "BK": 64, "WM": 32, "WN": 16},
            {"A_frag": 8, "B_frag": 8},
            ("Swizzle<3,3,3>", "Swizzle<3,3,3>"),
        ),
        (
            {"BM": 64, "BN": 16, "WM": 32, "WN": 16, "BK": 128, "STAGES": 2, "M": 33, "N": 4, "K": 100},
            {"A_frag": 8, "B_frag": 2},
            ("Swizzle<3,3,4>", "Swizzle<1,3,3>"),
        ),
    ],
)
def test_accesses_conflicted_dense_and_conflict_free_swizzled(params, dense, swizzles):
    dense_cfg = configure(FAM, params, DENSE, "sm_90")
    d = _degrees(dense_cfg)
    assert {k: d[k] for k in dense} == dense
    assert d["A_copy"] == d["B_copy"] == 1  # whole 128-byte groups per copy instruction
    cfg = reconfigure(dense_cfg, layouts=FAM.default_layouts(dense_cfg))
    assert (str(cfg.layouts["As"].swizzle), str(cfg.layouts["Bs"].swizzle)) == swizzles
    assert set(_degrees(cfg).values()) == {1.0}
    # the fix search on the dense spec finds layouts as good as the kernel's (swizzle or padding)
    res = resolve(
        FAM.spec_doc(dense_cfg, accesses=False)
        | {"kernel": {"family": "hgemm", **dense_cfg.problem, **dense_cfg.params}}
    )
    assert set(_degrees(variants(res)["fixed"]).values()) == {1.0}


def test_access_expressions_match_the_kernel_header_layout():
    """Instruction counts follow the kernel's loops: A copies BM*BK/8/THREADS per thread, fragments WM/16 and
    WN/16 per k16 step; the ALIGN 1 path writes the same chunks with st.shared.v4."""
    cfg = configure(FAM, {}, {}, "sm_90")
    n = {b.name: b.instructions for b in bank_table(cfg)}
    warps = 8
    assert n == {"A_copy": warps * 4, "B_copy": warps * 2, "A_frag": warps * 4 * 2, "B_frag": warps * 4 * 2}
    ragged = configure(FAM, {"K": 1023}, {}, "sm_90")
    ops = {a["name"]: a["op"] for a in FAM.accesses(ragged)}
    assert ops["A_copy"] == ops["B_copy"] == "store" and FAM.align(ragged) == 1
    assert "source" not in FAM.accesses(ragged)[0]
    col = configure(FAM, {"N": 4097, "b_layout": "col"}, {}, "sm_90")
    assert FAM.align(col) == 8  # ldb = K for column-major B
    assert FAM.name_expression(ragged).split(", ")[12] == "1"


def test_cp_async_sources_clamp_rows_and_mask_columns():
    """The copy sources are the kernel's: rows past M read row M-1; row-major B chunks past N read column 0."""
    cfg = configure(FAM, {"M": 100, "N": 120, "K": 64}, {}, "sm_90")
    res = {r.access.name: r for r in analyze_spec(FAM.spec(cfg))}
    a = res["A_copy"].bank.sources // 2  # source bytes per instruction, lane -> elements
    assert a.max() == 99 * 64 + 24  # row 99 (= M - 1) is the last one read, never row 100+
    b = res["B_copy"].bank.sources // 2  # 16 chunks per k row: lane 15 holds n = 120 >= N, lane 14 n = 112
    assert (b[:, 15] % 120 == 0).all() and (b[:, 14] % 120 == 112).all()


@pytest.mark.parametrize("params", [{}, {"b_layout": "col", "dtype": "bf16"}, {"K": 1000, "SPLIT_K": 4}])
def test_family_spec_round_trips_through_yaml(params):
    cfg = _swizzled(params)
    doc = yaml.safe_load(yaml.safe_dump(FAM.spec_doc(cfg)))
    again = {
        r.access.name: (int(r.bank.wavefronts.max()), len(r.bank.wavefronts))
        for r in analyze_spec(spec_from_dict(doc))
    }
    assert again == {b.name: (b.wavefronts, b.instructions) for b in bank_table(cfg)}
    s1 = spec_from_dict(doc)
    assert spec_from_dict(s1.to_doc()).to_doc() == s1.to_doc()


def test_launch_plan_split_k_and_column_major_b():
    cfg = configure(
        FAM, {"M": 1000, "N": 1000, "K": 5000, "SPLIT_K": 4, "beta": 0.5, "b_layout": "col"}, {}, "sm_90"
    )
    plan = FAM.launch(cfg)
    prep, main = plan.steps
    assert prep.kernel == "hgemm_splitk_prepare" and not prep.main and main.main
    assert prep.grid == (1000, 1, 1) and prep.block == (256, 1, 1) and prep.args[0] == ("C", "float*")
    assert main.grid == (4 * 8, 1, 4) and main.block == (256, 1, 1)
    assert [a for a, _ in main.args][5:8] == [5000, "B", 5000]  # lda = K, ldb = K for column-major B
    assert (plan.static_smem_bytes, plan.dynamic_smem_bytes) == (0, 4 * (256 * 32 + 128 * 32) * 2)
    assert FAM.array_shape(cfg, next(a for a in FAM.host_args if a.name == "B")) == (1000, 5000)
    no_split = FAM.launch(
        configure(FAM, {"BM": 64, "BN": 64, "WM": 32, "WN": 32, "STAGES": 2, "BK": 32}, {}, "sm_90")
    )
    assert no_split.grid == (64 * 64, 1, 1) and len(no_split.steps) == 1
    assert no_split.dynamic_smem_bytes == 2 * (64 + 64) * 32 * 2 < 48 * 1024  # dynamic even under 48 KiB
    helper = launch_helper(cfg)
    assert "hgemm_splitk_prepare<<<" in helper and "cudaFuncAttributeMaxDynamicSharedMemorySize" in helper
    assert (
        "launch_hgemm(int M, int N, int K, float alpha, const smemtile::f16* A, const smemtile::f16* B"
        in helper
    )


def test_references_round_like_the_kernel_inputs():
    rng = np.random.default_rng(0)
    cfg = configure(FAM, {"M": 5, "N": 3, "K": 4, "alpha": 2.0, "beta": 0.5, "dtype": "bf16"}, {}, "sm_90")
    x = FAM.make_inputs(cfg, rng)
    assert x["A"].dtype == np.uint16 and x["C"].dtype == np.float32
    a, b = to_float64(x["A"], "bf16"), to_float64(x["B"], "bf16")
    assert np.allclose(FAM.reference(cfg, x), 2.0 * a @ b + 0.5 * x["C"])
    assert to_float64(np.array([0x3F80, 0xC000], np.uint16), "bf16").tolist() == [1.0, -2.0]
    # bf16 rounding is to nearest even: 1 + 2^-8 is a tie between 1 and 1 + 2^-7
    from smemtile.families.hgemm import _bf16_bits

    assert _bf16_bits(np.array([1 + 2**-8, 1 + 3 * 2**-8], np.float32)).tolist() == [0x3F80, 0x3F82]
    col = configure(FAM, {"M": 3, "N": 5, "K": 2, "b_layout": "col", "c_dtype": "f16"}, {}, "sm_90")
    y = FAM.make_inputs(col, rng)
    assert y["B"].shape == (5, 2) and y["C"].dtype == np.float16
    assert np.allclose(FAM.reference(col, y), y["A"].astype(float) @ y["B"].astype(float).T)


def test_bf16_c_travels_as_bits_and_is_checked_at_its_own_tolerance():
    cfg = configure(
        FAM, {"M": 4, "N": 6, "K": 8, "beta": 0.5, "dtype": "bf16", "c_dtype": "bf16"}, {}, "sm_90"
    )
    assert FAM.ctypes(cfg)[
        "TC"
    ] == "smemtile::bf16" and "smemtile::bf16, smemtile::bf16" in FAM.name_expression(cfg)
    x = FAM.make_inputs(cfg, np.random.default_rng(1))
    assert x["C"].dtype == np.uint16  # raw bits, like A and B
    c = to_float64(x["C"], "bf16")
    a, b = to_float64(x["A"], "bf16"), to_float64(x["B"], "bf16")
    assert np.allclose(FAM.reference(cfg, x), a @ b + 0.5 * c)
    assert np.array_equal(FAM.decode_output(cfg, x["C"]), c)
    # rounding to 8 significant bits: half an ulp is 2^-9 of a value (2e-3), so 1e-3 would fail a correct kernel
    assert FAM.tolerance_for(cfg) == 4e-3 and 2**-9 < FAM.tolerance_for(cfg)
    assert FAM.tolerance_for(reconfigure(cfg, problem={"c_dtype": "f32"})) == FAM.tolerance == 1e-3


def test_odd_leading_dimensions_take_the_measured_faster_register_copies():
    """ALIGN 0 picks 1 (2-byte loads) for odd K or ldb: 0.76x cuBLAS against ALIGN 2's 0.71x (run 6)."""
    cfg = configure(FAM, {"K": 1023}, {}, "sm_90")
    assert FAM.align(cfg) == 1 and FAM.name_expression(cfg).split(", ")[12] == "1"
    assert FAM.align(configure(FAM, {"K": 1024}, {}, "sm_90")) == 8
    four = configure(FAM, {"K": 1023, "ALIGN": 2}, {}, "sm_90")
    assert FAM.align(four) == 2
    assert "4-byte global loads" in {a["name"]: a for a in FAM.accesses(four)}["A_copy"]["note"]
    assert "2-byte global loads" in {a["name"]: a for a in FAM.accesses(cfg)}["A_copy"]["note"]


def test_tiles_rank_the_measured_depth_first_with_the_reason():
    """4 stages measured faster than the 3 the model used to tie-break to (8 of 8 comparisons, phase 2): the
    family's measured factors (calibration_h200.yaml) rank it first and the reason says so."""
    for shape in ((4096, 4096, 4096), (8192, 8192, 8192)):
        for dt in ("f16", "bf16"):
            r = recommend(*shape, dt, "sm_90")
            top = r.ranked[0]
            assert (top.cfg.bm, top.cfg.bn, top.cfg.bk, top.cfg.stages) == (256, 128, 32, 4), top.cfg.label
            assert "BK 32 / 4 stages: hgemm measured 1.000x the fastest depth" in top.reason
            assert r.calibration["file"] == "smemtile/families/hgemm/calibration_h200.yaml"
            assert r.calibration["applies"] and "hgemm" in r.calibration["model"]
    same = [s for s in r.ranked if (s.cfg.bm, s.cfg.bn) == (256, 128) and s.cfg.bk == 64]
    assert same and "measured 0.989x vs 1.000x for #1" in same[0].reason


def test_calibration_file_is_what_calibrate_computes():
    """The factors are data with provenance: recomputed here from the recorded runs they cite."""
    from smemtile.families.hgemm.fit import calibrate, reproduce
    from smemtile.families.hgemm.tiles import calibration

    shipped, doc = calibration(), calibrate()
    assert shipped["stages"] == doc["calibration"]["stages"]
    assert shipped["latency_us"] == doc["calibration"]["latency_us"]
    assert shipped["atom_gbps"] == doc["calibration"]["atom_gbps"]
    assert all(key in shipped for key in ("gpu", "date", "commit", "sources", "method", "expected_error"))
    assert doc["stage_comparisons"]["32:3"] >= 8  # 3 vs 4 stages: phase 1 and both phase 2 runs
    stored, refit = reproduce()
    assert stored == refit and stored["latency_us"] == shipped["latency_us"]


def test_tiles_rank_split_k_for_the_skinny_problem_and_specs_carry_it():
    r = recommend(64, 8192, 4096, "bf16", "sm_90")
    split = [s for s in r.ranked if s.cfg.split_k > 1]
    assert split, "split K candidates are ranked"
    s = split[0]
    d = spec_doc(r.problem, s, len(r.ranked))
    assert d["kernel"]["SPLIT_K"] == s.cfg.split_k
    cfg = variants(resolve(d))["fixed"]
    assert cfg.params["SPLIT_K"] == s.cfg.split_k and cfg.problem["c_dtype"] == "f32"
    plan = FAM.launch(cfg)
    assert plan.grid[2] == s.cfg.split_k and len(plan.steps) == 2  # C = beta * C first, then the slices


def test_tile_contract_keeps_register_copies_from_spilling():
    """ALIGN 1/2 (odd K): BK 64 beside 64x64 accumulators spills (ptxas 13.0), so the ranking leaves it out."""
    r = recommend(4095, 4097, 1023, "f16", "sm_90")
    assert all(s.cfg.bk == 32 for s in r.ranked if s.threads // 32 * 4096 <= s.cfg.bm * s.cfg.bn)
    assert any("copies through registers" in x.reason for x in r.rejected)
    assert recommend(4096, 4096, 1024, "f16", "sm_90").ranked  # aligned: no such rule


def test_warp_tile_is_the_tile_models_split():
    assert warp_tile(256, 128, 8) == (64, 64)
    assert warp_tile(128, 256, 8) == (64, 64)
    assert warp_tile(64, 64, 8) == (32, 16)  # ties: the taller warp tile
    assert warp_tile(16, 64, 8) == (16, 8)  # the only split: hgemm refuses WN 8
    assert swizzle_for(32) == swizzle_for(32) and str(swizzle_for(128)) == "Swizzle<3,3,4>"


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_tiles_rank_hgemm_configurations_and_emit_specs(dtype):
    r = recommend(4096, 4096, 4096, dtype, "sm_90")
    assert r.counts.get("rejected_contract", 0) > 0  # BK 16, WN 8, uneven copies: refused by the family
    assert all("hgemm: " in x.reason for x in r.rejected if x.kind == "contract")
    assert all(s.cfg.bk >= 32 for s in r.ranked)
    docs = list(yaml.safe_load_all(yaml_specs(r, 3)))
    assert len(docs) == 3
    for d, s in zip(docs, r.ranked[:3], strict=True):
        assert d["kernel"]["family"] == "hgemm" and d["kernel"]["dtype"] == dtype
        res = resolve(d)
        v = variants(res)
        cfg = v["fixed"]
        assert cfg.layouts == v["baseline"].layouts  # the emitted swizzles are already the best layouts
        assert "fixed = baseline" in cfg.notes[-1]
        assert (cfg.params["BM"], cfg.params["BN"], cfg.params["BK"], cfg.params["STAGES"]) == (
            s.cfg.bm,
            s.cfg.bn,
            s.cfg.bk,
            s.cfg.stages,
        )
        assert FAM.threads(cfg.params) == s.threads
        assert cfg.layouts["As"].swizzled and set(_degrees(cfg).values()) == {1.0}
    # before sm_80 hgemm does not run: the model ranks f16 tiles alone (no kernel: section)
    old = list(yaml.safe_load_all(yaml_specs(recommend(4096, 4096, 4096, "f16", "sm_75"), 1)))[0]
    assert "kernel" not in old


def test_tiles_yaml_feeds_generate(tmp_path):
    r = run_cli("tiles", "4095", "4097", "1023", "--dtype", "bf16", "--top", "1", "--format", "yaml")
    assert r.returncode == 0, r.stderr
    spec = tmp_path / "t.yaml"
    spec.write_text(r.stdout)
    g = run_cli("generate", str(spec), "--json", "--no-compile", "-o", str(tmp_path / "k.cu"))
    assert g.returncode == 0, g.stderr
    doc = json.loads(g.stdout)
    assert doc["family"] == "hgemm" and doc["params"]["K"] == 1023
    assert doc["name_expression"].split(", ")[12] == "1"  # K = 1023: the 2-byte register copies (ALIGN 1)
    assert doc["dynamic_smem_bytes"] > 0 and doc["static_smem_bytes"] == 0
    assert {b["name"]: b["degree"] for b in doc["banks"]} == {
        "A_copy": 1,
        "B_copy": 1,
        "A_frag": 1,
        "B_frag": 1,
    }


# ---- builds (slow) -----------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_tiles_pick_generates_and_builds_with_nvcc_for_sm80(tmp_path):
    """The issue's 'done when': tiles --top 1 (4096^3 bf16) -> generate -> nvcc -arch=sm_80 -c; the PTX holds
    ldmatrix, mma.sync and cp.async; 0 spills."""
    r = run_cli("tiles", "4096", "4096", "4096", "--dtype", "bf16", "--top", "1", "--format", "yaml")
    spec = tmp_path / "t.yaml"
    spec.write_text(r.stdout)
    out = tmp_path / "k.cu"
    g = run_cli("generate", str(spec), "-o", str(out), "--no-compile")
    assert g.returncode == 0, g.stderr
    src = out.read_text()
    built = nvcc(src, ["-std=c++17", "-arch=sm_80", "-Xptxas", "-v", "-c"])
    assert built.returncode == 0, built.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in built.stderr
    ptx = nvcc(src, ["-std=c++17", "-arch=sm_80", "-ptx"], suffix=".cu")
    assert ptx.returncode == 0, ptx.stderr


REGISTER_COPIES_ON_THE_CPU = r"""
#include "hgemm.cu"
#include <cstdio>
#include <cstdlib>
#include <sanitizer/asan_interface.h>
int main() {  // every start alignment (d elements past a 16-byte boundary), every valid count n
    int bad = 0;
    for (int d = 0; d < 8; ++d)
        for (int n = 0; n <= 8; ++n) {
            unsigned short* buf = static_cast<unsigned short*>(aligned_alloc(16, 64));
            for (int i = 0; i < 32; ++i) buf[i] = static_cast<unsigned short>(100 * d + i + 1);
            unsigned short* p = buf + d;
            ASAN_POISON_MEMORY_REGION(buf, 64);  // only the chunk's n valid elements may be read
            ASAN_UNPOISON_MEMORY_REGION(p, 2 * n);
            unsigned w[4];
            if (n == 8) smemtile::fetch8_words(p, w); else smemtile::fetch_masked(p, n, w);
            ASAN_UNPOISON_MEMORY_REGION(buf, 64);
            for (int e = 0; e < 8; ++e) {
                const unsigned got = (w[e / 2] >> (16 * (e % 2))) & 0xffffu;
                const unsigned want = e < n ? static_cast<unsigned>(100 * d + d + e + 1) : 0u;
                if (got != want) { printf("d %d n %d element %d: %u, want %u\n", d, n, e, got, want); ++bad; }
            }
            free(buf);
        }
    printf("%d bad\n", bad);
    return bad != 0;
}
"""


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_register_copies_assemble_every_alignment_inside_the_chunk(tmp_path):
    """fetch8_words (ALIGN 2) and fetch_masked (__host__ __device__ in hgemm.cu) run on the CPU under
    AddressSanitizer with every byte outside the chunk poisoned: the words are the chunk's elements for every
    2-byte alignment, and no load leaves the chunk (so memcheck stays clean at the ends of A and B)."""
    import subprocess

    from conftest import ROOT

    (tmp_path / "t.cu").write_text(REGISTER_COPIES_ON_THE_CPU)
    kernels = ROOT / "smemtile" / "kernels"  # hgemm.cu and smem_layout.cuh
    build = subprocess.run(
        [
            nvcc_path(),
            "-std=c++17",
            "-arch=sm_80",
            f"-I{kernels}",
            "-Xcompiler",
            "-fsanitize=address,-fno-omit-frame-pointer",
            "-o",
            str(tmp_path / "t"),
            str(tmp_path / "t.cu"),
            "-lasan",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    run = subprocess.run([str(tmp_path / "t")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "0 bad" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize(
    "params",
    [
        {"dtype": "bf16"},
        {"BM": 128, "BN": 128, "BK": 32, "STAGES": 4, "b_layout": "col"},
        {"BM": 64, "BN": 64, "WM": 32, "WN": 32, "SPLIT_K": 2, "K": 1000},
        {"K": 1023, "c_dtype": "f16"},
    ],
    ids=["default-bf16", "128x128x32-col", "splitk", "align1-f16c"],
)
def test_nvrtc_build_ptx_and_checklist(arch, params):
    pytest.importorskip("cuda.bindings.nvrtc")
    from smemtile.pipeline.build import build

    built = build(_swizzled(params, arch))
    cfg = built.kernel.config
    res = built.compiled.resources[FAM.name_expression(cfg)]
    assert res.spills == 0 and res.static_smem_bytes == 0
    assert res.registers <= 65536 // (FAM.threads(cfg.params) * cfg.params["MIN_BLOCKS"])
    ptx = built.compiled.ptx
    for needle in (
        "ldmatrix.sync.aligned.m8n8.x4",
        "mma.sync.aligned.m16n8k16.row.col.f32",
        "cp.async.wait_group",
    ):
        assert needle in ptx
    status = {i.id: i.status for i in built.checklist}
    assert "fail" not in status.values(), [i for i in built.checklist if i.status == "fail"]
    assert status["wait_group"] == status["barrier_after_wait"] == status["swizzle_proof"] == "pass"
    assert status["copy_alignment"] == ("n/a" if cfg.problem["K"] == 1023 else "pass")
    dense = build(configure(FAM, params, DENSE, arch))  # no layouts: the proof has nothing to prove
    assert {i.id: i.status for i in dense.checklist}["swizzle_proof"] == "n/a"


# ---- GPU -----------------------------------------------------------------------------------------------------


GPU_CASES = [
    ({}, {"M": 257, "N": 131, "K": 77, "beta": 0.5}),  # ALIGN 1 (K odd), ragged
    ({}, {"M": 1000, "N": 1000, "K": 336, "alpha": 0.75, "beta": -1.25, "dtype": "bf16"}),  # masked K tail
    ({"BM": 128, "BN": 128, "BK": 64, "STAGES": 3}, {"M": 300, "N": 520, "K": 2000, "b_layout": "col"}),
    ({"BM": 64, "BN": 64, "WM": 32, "WN": 32, "SPLIT_K": 3}, {"M": 64, "N": 1000, "K": 4000, "beta": 1.0}),
    ({"STAGES": 2}, {"M": 512, "N": 384, "K": 1024, "c_dtype": "f16", "dtype": "bf16"}),
    ({}, {"M": 33, "N": 4, "K": 1, "b_layout": "col"}),
    # 4-byte register copies (K and N odd, ALIGN 2) with bf16 C, the N edge of row-major B; the 2-byte ones
    (
        {"STAGES": 3, "ALIGN": 2},
        {"M": 200, "N": 131, "K": 1023, "beta": 0.5, "dtype": "bf16", "c_dtype": "bf16"},
    ),
    (
        {"BM": 128, "BN": 128},
        {"M": 300, "N": 264, "K": 333, "alpha": 0.5, "b_layout": "col", "c_dtype": "bf16"},
    ),
    ({"ALIGN": 2}, {"M": 257, "N": 131, "K": 77, "beta": 0.5}),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("params", "problem"), GPU_CASES, ids=lambda x: str(x))
def test_correct_on_the_gpu(params, problem):
    from smemtile.gpu.run import check_config, open_device

    dev = open_device(0)
    cfg = _swizzled({**params, **problem}, dev.arch_name)
    chk = check_config(cfg, dev, np.random.default_rng(7))
    assert chk.correct, chk.mismatch.describe() if chk.mismatch else chk
    limit = {"f32": 1e-5, "f16": 1e-3, "bf16": 4e-3}[problem.get("c_dtype", "f32")]
    assert chk.max_rel_error <= limit


def test_cp_async_sources_follow_the_users_leading_dimensions():
    """ALIGN 8 with K = 1023 but lda = 1024, ldb = 4104 (16-byte rows): the family accepts it, and the bank
    model's cp.async sources are the user's rows (they used the dense K and N, and the analysis refused the
    configuration as unaligned)."""
    from smemtile.model.analysis import analyze_spec

    fam = FAMILIES["hgemm"]
    problem = {"M": 4095, "N": 4097, "K": 1023, "lda": 1024, "ldb": 4104, "dtype": "f16"}
    cfg = configure(fam, {"ALIGN": 8, **problem}, {}, "sm_90")
    src = {a["name"]: a["source"] for a in fam.accesses(cfg) if "source" in a}
    assert "* lda +" in src["A_copy"] and "* ldb +" in src["B_copy"]
    res = {r.access.name: r for r in analyze_spec(fam.spec(cfg))}
    assert {"A_copy", "B_copy"} <= set(res)
