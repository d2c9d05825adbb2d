"""smemtile tiles: candidates, pruning with reasons, the model's invariants, exports and the CLI."""

from __future__ import annotations

import ast
import json

import pytest
import yaml
from click.testing import CliRunner

from smemtile.cli import main
from smemtile.errors import SpecError
from smemtile.families import FAMILIES
from smemtile.model.spec import spec_from_dict
from smemtile.model.tiling import make_problem
from smemtile.model.tiling_model import spearman
from smemtile.model.tiling_transpose import rank_transpose
from smemtile.pipeline.fixes import variants
from smemtile.pipeline.specs import resolve
from smemtile.pipeline.tiles import recommend, triton_configs, yaml_specs

SIZES = [(4096, 4096, 4096), (8192, 8192, 1024), (1024, 1024, 8192), (64, 4096, 4096), (4096, 32, 4096),
         (100, 100, 100), (1, 1, 1)]  # fmt: skip


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.parametrize("m,n,k", SIZES)
@pytest.mark.parametrize("dtype,arch", [("f32", "sm_90"), ("f16", "sm_90"), ("bf16", "sm_80"), ("tf32", "sm_86"),
                                        ("f32", "sm_75"), ("f16", "gfx942"), ("bf16", "gfx950")])  # fmt: skip
def test_at_least_three_candidates_every_one_within_limits(m, n, k, dtype, arch):
    r = recommend(m, n, k, dtype, arch)
    assert len(r.ranked) >= 3
    assert [s.rank for s in r.ranked] == list(range(1, len(r.ranked) + 1))
    times = [s.time_s for s in r.ranked]
    assert times == sorted(times)
    amd = arch.startswith("gfx")
    for s in r.ranked:
        c = s.cfg
        assert c.warps in (2, 4, 8) and s.blocks_per_sm >= 1 and s.reason
        assert s.threads == c.warps * (64 if amd else 32)
        assert c.group_m in (4, 8, 16)
        if dtype != "f32" or amd:
            assert c.bk >= (32 if amd else 16)
            assert c.stages >= (1 if amd or arch == "sm_75" else 2)
        if amd:
            assert 1 <= c.waves_per_eu <= 8
    for x in r.rejected:
        assert x.reason and x.kind


def test_sgemm_candidates_satisfy_the_contract_and_compile_shapes():
    r = recommend(4096, 4096, 4096, "f32", "sm_90")
    fam = FAMILIES["sgemm"]
    for s in r.ranked[:20]:
        p = s.cfg.sgemm_params()
        assert fam.threads(p) == s.threads
        assert s.cfg.min_blocks >= 1 and s.regs <= 65536 // (s.threads * s.cfg.min_blocks)
    top = r.ranked[0].cfg
    assert top.tm * top.tn >= 32, "big register tiles win at 4096^3"


def test_small_m_prefers_small_bm_and_large_n():
    r = recommend(64, 4096, 4096, "f32", "sm_90")
    assert all(s.cfg.bm <= 64 for s in r.ranked[:5])
    assert any(x.kind == "padding" and "BM=" in x.reason for x in r.rejected)
    skinny = recommend(8192, 64, 4096, "f16", "sm_90").ranked[0].cfg
    assert skinny.bm >= skinny.bn


def test_small_grid_favours_smaller_tiles():
    big = recommend(8192, 8192, 8192, "f16", "sm_90").ranked[0].cfg
    small = recommend(512, 512, 8192, "f16", "sm_90").ranked[0].cfg
    assert small.bm * small.bn < big.bm * big.bn


def test_rejections_keep_their_reasons():
    r = recommend(4096, 4096, 4096, "f16", "sm_90")
    kinds = {x.kind for x in r.rejected}
    assert {"shared_memory", "registers", "mma_shape", "dominated"} <= kinds
    smem = next(x for x in r.rejected if x.kind == "shared_memory")
    assert "out of resource: shared memory, required" in smem.reason and "limit 232448" in smem.reason
    assert r.counts["generated"] == r.counts["ranked"] + r.counts["rejected"]


def test_grouping_reduces_modelled_dram_traffic():
    s = recommend(8192, 8192, 1024, "f32", "sm_90").ranked[0]
    assert s.dram_bytes <= s.dram_bytes_ungrouped
    assert s.dram_bytes_ungrouped > 1.2 * s.dram_bytes


def test_more_sms_never_slower():
    a = recommend(2048, 2048, 2048, "f16", "sm_90", sms=66).ranked[0]
    b = recommend(2048, 2048, 2048, "f16", "sm_90", sms=132).ranked[0]
    assert b.time_s <= a.time_s


@pytest.mark.parametrize("bad", [dict(m=0), dict(dtype="f8"), dict(arch="sm_42"), dict(vendor="intel"),
                                 dict(arch="gfx942", vendor="nvidia"), dict(gpu="tpu"), dict(sms=0)])  # fmt: skip
def test_bad_input_is_a_spec_error(bad):
    args = {"m": 64, "n": 64, "k": 64, "dtype": "f32", "arch": None, "vendor": None, "gpu": None, "sms": None}
    args.update(bad)
    with pytest.raises(SpecError):
        make_problem(args["m"], args["n"], args["k"], args["dtype"], args["arch"], args["vendor"], args["gpu"],
                     args["sms"])  # fmt: skip


def test_triton_export_is_python_with_configs():
    text = triton_configs(recommend(4096, 4096, 4096, "bf16", "gfx942"), 4)
    tree = ast.parse(text)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "Config"]
    assert len(calls) == 4
    assert "waves_per_eu" in text and "num_warps=" in text and "num_stages=" in text


def test_yaml_export_round_trips_through_the_spec_and_codegen():
    r = recommend(4096, 4096, 4096, "f32", "sm_90")
    docs = list(yaml.safe_load_all(yaml_specs(r, 3)))
    assert len(docs) == 3
    for d, s in zip(docs, r.ranked[:3], strict=True):
        cfg = variants(resolve(d))["fixed"]
        assert cfg.params["BM"] == s.cfg.bm and cfg.params["GROUP_M"] == s.cfg.group_m
        assert cfg.params["STAGES"] == s.cfg.stages
    f16 = list(yaml.safe_load_all(yaml_specs(recommend(4096, 4096, 4096, "f16", "sm_90"), 2)))
    for d in f16:
        from smemtile.model.analysis import analyze_spec

        analyze_spec(spec_from_dict(d))


def test_transpose_ranking_prefers_more_bytes_in_flight_for_fp16():
    f16 = rank_transpose(8192, 8192, "f16", "sm_90")
    assert f16[0].tile // f16[0].block_rows >= 8
    assert f16[0].gbps >= f16[-1].gbps and len(f16) >= 3


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(0.866, abs=1e-3)


# ---- CLI -----------------------------------------------------------------------------------------------------


def test_cli_table_has_ranks_reasons_and_rejections():
    r = invoke("tiles", 4096, 4096, 4096, "--dtype", "f32", "--arch", "sm_90")
    assert r.exit_code == 0, r.output
    assert "best:" in r.output and "vs #1" in r.output and "rejected shapes" in r.output
    assert "TFLOP/s" in r.output


@pytest.mark.parametrize("fmt", ["json", "yaml", "triton", "table"])
def test_cli_every_format(fmt):
    r = invoke("tiles", 1024, 1024, 8192, "--format", fmt, "--top", 3)
    assert r.exit_code == 0, r.output
    if fmt == "json":
        d = json.loads(r.output)
        assert len(d["candidates"]) == 3 and d["rejected"] and d["model"]
        assert {
            "tflops",
            "waves",
            "wave_eff",
            "occupancy",
            "intensity",
            "dram_bytes_ungrouped",
            "reason",
        } <= set(d["candidates"][0])
    elif fmt == "yaml":
        assert len(list(yaml.safe_load_all(r.output))) == 3
    elif fmt == "triton":
        ast.parse(r.output)


def test_cli_json_flag_is_pure_json():
    r = invoke("tiles", 512, 512, 512, "--dtype", "f16", "--json")
    assert r.exit_code == 0
    assert json.loads(r.output)["problem"]["dtype"] == "f16"


@pytest.mark.parametrize("args", [("0", "1", "1"), ("1", "x", "1"), ("64", "64", "64", "--dtype", "f8"),
                                  ("64", "64", "64", "--format", "xml"), ("64", "64", "64", "--top", "0"),
                                  ("64", "64", "64", "--arch", "gfx942", "--vendor", "nvidia"),
                                  ("64", "64", "64", "--arch", "gfx942", "--format", "yaml")])  # fmt: skip
def test_cli_bad_input_exits_2_with_one_line(args):
    from conftest import run_cli

    r = run_cli("tiles", *args)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("smemtile: error:")


def test_sizes_accept_k_suffix_and_auto_needs_a_gpu():
    from conftest import gpu_available, run_cli

    assert make_problem("4K", "8K", "1K").m == 4096
    r = run_cli("tiles", "4K", "4K", "4K", "--arch", "auto", "--top", "1")
    assert r.returncode == (0 if gpu_available() else 3), r.stderr


def test_skinny_problem_gets_split_k_and_square_does_not():
    """Under one block per SM the recommender adds split K (64 x 8192 x 4096 on the H200: the #1 measured
    0.865x cuBLAS, bench/results/h200_skinny_tiles.json); a 4096^3 grid is several waves and never splits."""
    skinny = recommend(64, 8192, 4096, "f32", "sm_90")
    top = skinny.ranked[0]
    assert top.cfg.split_k > 1 and top.cfg.sgemm_params()["SPLIT_K"] == top.cfg.split_k
    assert "splitk" in top.cfg.label and top.waves > 0.5
    no_split = [s for s in skinny.ranked if s.cfg.split_k == 1]
    assert no_split and top.tflops > no_split[0].tflops
    square = recommend(4096, 4096, 4096, "f32", "sm_90")
    assert all(s.cfg.split_k == 1 for s in square.ranked)
