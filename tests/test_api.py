"""The Python API (smemtile.api): every result's to_dict() is exactly the CLI's --json document for the same
input (every sample for analyze; occupancy, tiles, generate, tune --dry-run, verify --compile-only calls), specs as
a path, a YAML string or a dict give the same answer, bad input is one SpecError line, import smemtile loads no
CUDA, and the notebook view is escaped HTML."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT, SAMPLES, run_cli

import smemtile
from smemtile.errors import NoDevice, OutOfResources, SpecError


def _without(doc, key: str):
    if isinstance(doc, dict):
        return {k: _without(v, key) for k, v in doc.items() if k != key}
    if isinstance(doc, list):
        return [_without(v, key) for v in doc]
    return doc


def cli_json(*args: str) -> dict:
    r = run_cli(*args, "--json")
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_analyze_matches_cli_json_for_every_sample(sample):
    path = str(sample)
    want = cli_json("analyze", path)
    r = smemtile.analyze(path)
    assert r.to_dict() == want
    assert r.worst_conflict_degree == max(a["conflict_degree"] for a in want["accesses"])
    assert r.layouts == {f["buffer"]: f["recommended"]["describe"] for f in want["fixes"]}


def test_spec_as_path_yaml_string_and_dict_agree():
    path = ROOT / "samples" / "gemm_a_column.yaml"
    text = path.read_text()
    by_path = smemtile.analyze(path).to_dict()
    by_text = smemtile.analyze(text).to_dict()
    by_dict = smemtile.analyze(yaml.safe_load(text)).to_dict()
    for d in (by_text, by_dict):
        assert d["accesses"] == by_path["accesses"]
        assert d["fixes"] == by_path["fixes"]
    worst = max(a["conflict_degree"] for a in by_path["accesses"])
    assert worst == 32.0  # the column read of the 32-float rows
    assert smemtile.analyze(text).layouts == {"As": "pad 1"}
    assert by_text["spec"]["source"] == "<string>" and by_dict["spec"]["source"] == "<dict>"


@pytest.mark.parametrize("name", ["ldmatrix_f16.yaml", "transpose_32x32.yaml", "sgemm_default.yaml"])
def test_fix_is_analyze_fixes(name):
    path = str(ROOT / "samples" / name)
    f = smemtile.fix(path)
    a = smemtile.analyze(path, compile=False)
    assert f.to_dict()["fixes"] == a.to_dict()["fixes"]
    assert f.layouts == a.layouts


def test_fix_values():
    f = smemtile.fix(str(ROOT / "samples" / "ldmatrix_f16.yaml"))
    assert f.layouts == {"As": "Swizzle<3,3,3>"}
    assert f.to_dict()["layouts"]["As"]["swizzle"] == [3, 3, 3]
    assert smemtile.fix(str(ROOT / "samples" / "transpose_32x32.yaml")).layouts == {"tile": "pad 1"}


@pytest.mark.parametrize(
    "kwargs, argv",
    [
        (
            {"arch": "sm_90", "threads": 256, "regs": 64, "smem_dynamic": "48K"},
            ["--arch", "sm_90", "--threads", "256", "--regs", "64", "--smem-dynamic", "48K"],
        ),
        (
            {"arch": "sm_86", "threads": 128, "regs": 96, "smem_dynamic": 40960, "opt_in": False},
            ["--arch", "sm_86", "--threads", "128", "--regs", "96", "--smem-dynamic", "40960", "--no-opt-in"],
        ),
        (
            {"arch": "sm_80", "threads": 256, "regs": 32, "smem_static": "8K", "carveout": 50},
            [
                "--arch",
                "sm_80",
                "--threads",
                "256",
                "--regs",
                "32",
                "--smem-static",
                "8K",
                "--carveout",
                "50",
            ],
        ),
        (
            {"arch": "sm_90", "threads": 128, "regs": 168, "smem_dynamic": "200K", "cluster": 2},
            [
                "--arch",
                "sm_90",
                "--threads",
                "128",
                "--regs",
                "168",
                "--smem-dynamic",
                "200K",
                "--cluster",
                "2",
            ],
        ),
    ],
)
def test_occupancy_matches_cli(kwargs, argv):
    r = smemtile.occupancy(**kwargs)
    assert r.to_dict() == cli_json("occupancy", *argv)
    assert r.active_blocks == r.to_dict()["active_blocks"] >= 1


def test_occupancy_values_and_a_block_that_does_not_fit_is_data():
    r = smemtile.occupancy(arch="sm_90", threads=256, regs=64, smem_dynamic="48K")
    assert (r.active_blocks, r.limiter) == (4, "shared_memory")  # 4 x (48K + 1K reserved) of 228K
    assert r.occupancy == 0.5
    big = smemtile.occupancy(arch="sm_90", threads=1024, regs=255)
    assert big.active_blocks == 0 and big.to_dict()["reason"]


@pytest.mark.parametrize(
    "args, kwargs, argv",
    [
        (
            (4096, 4096, 4096),
            {"dtype": "f32", "arch": "sm_90", "top": 5},
            ["4096", "4096", "4096", "--dtype", "f32", "--arch", "sm_90", "--top", "5"],
        ),
        (
            (8192, 8192, 1024),
            {"dtype": "f16", "arch": "sm_90"},
            ["8192", "8192", "1024", "--dtype", "f16", "--arch", "sm_90"],
        ),
        ((6000, 5000, 4000), {"dtype": "bf16"}, ["6000", "5000", "4000", "--dtype", "bf16"]),
        (
            (),
            {"family": "transpose", "rows": 8192, "cols": 8192, "dtype": "f16", "top": 3},
            ["--family", "transpose", "8192", "8192", "--dtype", "f16", "--top", "3"],
        ),
        (
            (4096, 4096),
            {"family": "stencil2d", "radius": 4, "top": 4},
            ["--family", "stencil2d", "4096", "4096", "--radius", "4", "--top", "4"],
        ),
    ],
)
def test_tiles_match_cli(args, kwargs, argv):
    r = smemtile.tiles(*args, **kwargs)
    assert r.to_dict() == cli_json("tiles", *argv)
    assert r.best == r.to_dict()["candidates"][0]
    assert r.best["rank"] == 1


def test_tiles_yaml_specs_are_the_cli_yaml():
    r = run_cli("tiles", "--family", "transpose", "4096", "4096", "--top", "2", "--format", "yaml")
    assert smemtile.tiles(family="transpose", rows=4096, cols=4096, top=2).yaml_specs() == r.stdout
    docs = list(yaml.safe_load_all(r.stdout))
    assert len(docs) == 2 and docs[0]["kernel"]["family"] == "transpose"


@pytest.mark.parametrize("variant", ["fixed", "baseline"])
def test_generate_matches_cli(variant):
    path = str(ROOT / "samples" / "transpose_32x32.yaml")
    g = smemtile.generate(path, variant=variant)
    want = cli_json("generate", path, "--variant", variant)
    assert g.to_dict() == want
    r = run_cli("generate", path, "--variant", variant)
    assert g.source == r.stdout  # the .cu the command prints
    assert g.name_expression in g.source


def test_generate_writes_the_source(tmp_path):
    g = smemtile.generate(ROOT / "samples" / "stencil_halo.yaml", compile=False)
    out = g.write(tmp_path / "k" / "stencil.cu")
    assert open(out).read() == g.source
    assert g.to_dict()["family"] == "stencil2d"


def test_tune_dry_run_matches_cli():
    path = str(ROOT / "samples" / "transpose_32x32.yaml")
    t = smemtile.tune(path, top=3, dry_run=True)
    assert t.to_dict() == cli_json("tune", path, "--top", "3", "--dry-run")
    assert t.to_dict()["dry_run"] is True and len(t.candidates) >= 3


@pytest.mark.parametrize("name", ["stencil_halo.yaml", "gemm_a_column.yaml"])
def test_verify_compile_only_matches_cli(name):
    path = str(ROOT / "samples" / name)
    v = smemtile.verify(path, compile_only=True)
    # the microkernel document times its own compile ("seconds"): everything else is equal
    assert _without(v.to_dict(), "seconds") == _without(cli_json("verify", path, "--compile-only"), "seconds")
    assert v.correct is None  # nothing ran
    assert {r["variant"] for r in v.variants} == {"baseline", "fixed"}


def test_inspect_matches_cli():
    k = ROOT / "samples" / "kernels"
    argv = [
        str(k / "transpose_naive.cu"),
        "--kernel",
        "transpose",
        "--grid",
        "32,32",
        "--block",
        "32,8",
        "--args",
        str(k / "transpose_naive.args.yaml"),
        "--simulate",
    ]
    r = smemtile.inspect(
        argv[0], kernel="transpose", grid=(32, 32, 1), block=(32, 8, 1), args=argv[8], mode="simulate"
    )
    assert r.to_dict() == cli_json("inspect", *argv)
    assert r.no_device is None and r["kernel"] == "transpose"


def test_gpu_parts_raise_no_device_without_a_gpu():
    from conftest import gpu_available

    if gpu_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(NoDevice):
        smemtile.verify(str(ROOT / "samples" / "transpose_32x32.yaml"))
    with pytest.raises(NoDevice):
        smemtile.tune(str(ROOT / "samples" / "transpose_32x32.yaml"), top=1)
    with pytest.raises(NoDevice):
        smemtile.occupancy(arch="auto", threads=256, regs=32)


@pytest.mark.parametrize(
    "call, where",
    [
        (lambda: smemtile.analyze({"arch": "sm_99", "buffers": [], "accesses": []}), "arch"),
        (lambda: smemtile.analyze("no/such/spec.yaml"), "no/such/spec.yaml"),
        (lambda: smemtile.analyze("arch: [unclosed"), "<string>"),
        (lambda: smemtile.analyze(42), "spec"),
        (lambda: smemtile.occupancy(threads=256, regs=64, smem_dynamic="48Q"), "smem_dynamic"),
        (lambda: smemtile.occupancy(threads="256", regs=64), "threads"),
        (lambda: smemtile.tiles(4096, 4096, dtype="f16"), "sizes"),
        (lambda: smemtile.tiles(4096, 4096, 4096, dtype="f99"), "--dtype"),
        (lambda: smemtile.tiles(family="transpose", rows=8192), "sizes"),
        (lambda: smemtile.tiles(family="transpose", rows=8, cols=8, dtype="f64"), "--dtype"),
        (lambda: smemtile.generate(str(ROOT / "samples" / "gemm_a_column.yaml")), "kernel:"),
        (
            lambda: smemtile.generate(str(ROOT / "samples" / "transpose_32x32.yaml"), variant="best"),
            "variant",
        ),
    ],
)
def test_bad_input_is_one_spec_error_line(call, where):
    with pytest.raises(SpecError) as e:
        call()
    msg = str(e.value)
    assert "\n" not in msg and where in msg, msg


def test_empty_ranking_is_out_of_resources(monkeypatch):
    """No configuration fits: OutOfResources with the first rejection's reason (the CLI's exit 1)."""
    from dataclasses import replace

    from smemtile.pipeline import tiles as pt

    real = pt.recommend

    def nothing_fits(*a, **kw):
        rep = real(*a, **kw)
        return replace(rep, ranked=())

    monkeypatch.setattr(pt, "recommend", nothing_fits)
    with pytest.raises(OutOfResources) as e:
        smemtile.tiles(4096, 4096, 4096, dtype="f16")
    assert str(e.value).startswith("no configuration fits sm_90: ") and "\n" not in str(e.value)


def test_import_smemtile_loads_no_cuda_and_the_api_is_lazy():
    code = (
        "import sys, smemtile\n"
        "assert 'smemtile.api' not in sys.modules\n"
        "f = smemtile.analyze; smemtile.triton; smemtile.kernel_tuner; smemtile.tiles\n"
        "assert 'smemtile.api' in sys.modules\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('cuda', 'triton', 'kernel_tuner', 'torch')]\n"
        "assert not bad, bad\n"
        "assert callable(f) and smemtile.SpecError.exit_code == 2\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    with pytest.raises(AttributeError):
        smemtile.no_such_thing  # noqa: B018


def test_repr_html_is_an_escaped_table():
    spec = {
        "arch": "sm_90",
        "threads": 32,
        "name": "<b>x</b>",
        "buffers": [{"name": "S", "dtype": "f32", "shape": [32, 32]}],
        "accesses": [{"name": "col", "buffer": "S", "op": "load", "width": 4, "row": "lane", "col": "0"}],
    }
    r = smemtile.analyze(spec)
    page = r._repr_html_()  # the report page (smemtile.report.html) where it exists, else a table
    assert page.lstrip().startswith("<") and "col" in page and "32" in page  # the 32-way column read
    assert "<b>x</b>" not in page
    sample = ROOT / "samples" / "transpose_32x32.yaml"
    results = [
        smemtile.fix(spec),
        smemtile.occupancy(threads=128, regs=32),
        smemtile.tiles(2048, 2048, 2048, top=2),
        smemtile.generate(sample, compile=False),
        smemtile.tune(sample, top=1, dry_run=True),
    ]
    for result in results:
        html = result._repr_html_()
        assert "<table" in html and "<script" not in html
    assert "<b>x</b>" not in smemtile.fix(spec)._repr_html_()


def test_family_tiles_render():
    html = smemtile.tiles(family="transpose", rows=64, cols=64)._repr_html_()
    assert "<table" in html and "T" in html


def test_to_dict_is_a_copy():
    r = smemtile.occupancy(threads=128, regs=32)
    d = r.to_dict()
    d["active_blocks"] = -1
    assert r.active_blocks == r.to_dict()["active_blocks"] != -1


# ---- smemtile.kernel_tuner ----------------------------------------------------------------------------------------
def _kt_instance(export: dict, params: dict) -> str:
    """The source Kernel Tuner compiles for ``params``: its #defines (grid, block, every tune parameter,
    kernel_tuner), ``#line 1``, then the kernel source (kernel_tuner.util.prepare_kernel_string)."""
    import math

    cols, rows = export["problem_size"]
    grid = (math.ceil(cols / params["block_size_x"]), math.ceil(rows / params["block_size_x"]), 1)
    defines = {
        "grid_size_x": grid[0],
        "grid_size_y": grid[1],
        "grid_size_z": 1,
        "block_size_x": params["block_size_x"],
        "block_size_y": params["block_size_y"],
        "block_size_z": 1,
        **params,
        "kernel_tuner": 1,
    }
    return "".join(f"#define {k} {v}\n" for k, v in defines.items()) + "#line 1\n" + export["kernel_source"]


def test_kernel_tuner_export_is_tune_kernel_arguments():
    import numpy as np

    import smemtile.kernel_tuner as skt

    e = skt.export("transpose", {"rows": 1000, "cols": 777}, dtype="f32")
    assert e["kernel_name"] == "smemtile_transpose_kt" and f"{e['kernel_name']}(" in e["kernel_source"]
    assert e["problem_size"] == (777, 1000)  # x: columns (TILE per block), y: rows
    a_in, a_out, *scalars = e["arguments"]
    assert a_in.shape == (1000, 777) and a_in.dtype == np.float32 and a_out.shape == (777, 1000)
    assert [int(s) for s in scalars] == [1000, 777, 777, 1000]  # rows, cols, ld_in, ld_out
    assert all(isinstance(s, np.int32) for s in scalars)
    assert np.array_equal(e["answer"][1], a_in.T) and e["answer"][0] is None
    assert e["block_size_names"][:2] == ["block_size_x", "block_size_y"]
    assert e["tune_params"]["block_size_x"] == [32, 64, 128]
    # the restriction is the family's contract: TILE * BLOCK_ROWS <= 1024 threads, BLOCK_ROWS divides TILE
    ok = e["restrictions"]
    base = {"block_size_x": 64, "block_size_y": 8, "smem_pad": 1, "vec": 0, "launch_order": 1}
    assert ok(base)
    assert not ok({**base, "block_size_x": 128, "block_size_y": 16})  # 2048 threads
    assert not ok({**base, "block_size_x": 32, "block_size_y": 32, "vec": 8})  # 8 floats = 32 B vectors
    f16 = skt.export("transpose", {"rows": 64, "cols": 64}, dtype="bf16")
    assert f16["arguments"][0].dtype == np.uint16 and "unsigned short" in f16["kernel_source"]


@pytest.mark.parametrize(
    "params",
    [
        {"block_size_x": 64, "block_size_y": 8, "smem_pad": 1, "vec": 0, "launch_order": 0},
        {"block_size_x": 32, "block_size_y": 32, "smem_pad": 0, "vec": 1, "launch_order": 1},
        {"block_size_x": 128, "block_size_y": 4, "smem_pad": 0, "vec": 4, "launch_order": 1},
    ],
)
def test_kernel_tuner_instances_compile_like_the_family(params):
    import smemtile.kernel_tuner as skt
    from smemtile.families import FAMILIES, configure
    from smemtile.gpu.nvrtc import compile_cubin

    e = skt.export("transpose", {"rows": 1000, "cols": 777}, dtype="f16")
    assert e["restrictions"](params)
    r = compile_cubin(
        _kt_instance(e, params), [e["kernel_name"]], "sm_90", options=tuple(e["compiler_options"])
    )
    res = r.resources[e["kernel_name"]]
    cfg = configure(
        "transpose",
        {
            "TILE": params["block_size_x"],
            "BLOCK_ROWS": params["block_size_y"],
            "VEC": params["vec"],
            "GROUP": params["launch_order"],
            "rows": 1000,
            "cols": 777,
            "dtype": "f16",
        },
        {"tile": {"pad": params["smem_pad"]}},
        "sm_90",
    )
    plan = FAMILIES["transpose"].launch(cfg)
    assert (
        res.static_smem_bytes == plan.static_smem_bytes
    )  # TILE x (TILE + PAD) x 2 bytes: the family's formula
    assert plan.block[:2] == (params["block_size_x"], params["block_size_y"])
    assert plan.grid[:2] == (-(-777 // params["block_size_x"]), -(-1000 // params["block_size_x"]))
    assert res.spill_stores == 0


def test_kernel_tuner_bad_input_and_missing_package(monkeypatch):
    import smemtile.kernel_tuner as skt

    for call, where in (
        (lambda: skt.export("sgemm", {"rows": 8, "cols": 8}), "family"),
        (lambda: skt.export("transpose", {"rows": 8}), "problem"),
        (lambda: skt.export("transpose", {"rows": 8, "cols": 8}, dtype="f64"), "dtype"),
    ):
        with pytest.raises(SpecError) as e:
            call()
        assert where in str(e.value) and "\n" not in str(e.value)
    monkeypatch.setitem(sys.modules, "kernel_tuner", None)
    with pytest.raises(ImportError) as e:
        skt.tune("transpose", {"rows": 64, "cols": 64})
    assert "pip install 'smemtile[kernel_tuner]'" in str(e.value)


def test_kernel_tuner_builds_the_space_and_the_instances_compile():
    """With Kernel Tuner installed (no GPU needed): its search space under the exported restriction is the
    family's valid set, and the source its prepare_kernel_string makes for a point compiles with NVRTC."""
    pytest.importorskip("kernel_tuner")
    from kernel_tuner import util
    from kernel_tuner.searchspace import Searchspace

    import smemtile.kernel_tuner as skt
    from smemtile.gpu.nvrtc import compile_cubin

    e = skt.export("transpose", {"rows": 1000, "cols": 777}, dtype="f16")
    space = Searchspace(e["tune_params"], e["restrictions"], 1024, e["block_size_names"])
    points = [dict(zip(e["tune_params"], v, strict=True)) for v in space.list]
    assert 0 < len(points) < 360 and all(e["restrictions"](p) for p in points)
    assert all(p["block_size_x"] * p["block_size_y"] <= 1024 for p in points)
    for p in points[:: max(1, len(points) // 3)][:3]:
        threads, grid = util.setup_block_and_grid(
            e["problem_size"], (e["grid_div_x"], e["grid_div_y"], None), p, e["block_size_names"]
        )
        assert tuple(threads[:2]) == (p["block_size_x"], p["block_size_y"])
        assert tuple(grid[:2]) == (-(-777 // p["block_size_x"]), -(-1000 // p["block_size_x"]))
        name, src = util.prepare_kernel_string(
            e["kernel_name"], e["kernel_source"], p, grid, threads, e["block_size_names"], e["lang"], None
        )
        r = compile_cubin(src, [name], "sm_90", options=tuple(e["compiler_options"]))
        assert (
            r.resources[name].static_smem_bytes == p["block_size_x"] * (p["block_size_x"] + p["smem_pad"]) * 2
        )


@pytest.mark.gpu
def test_kernel_tuner_runs_a_short_tune_kernel():
    kernel_tuner = pytest.importorskip("kernel_tuner")
    import smemtile.kernel_tuner as skt

    e = skt.export("transpose", {"rows": 2048, "cols": 1536}, dtype="f32")
    e["tune_params"] = {
        "block_size_x": [32, 64],
        "block_size_y": [8],
        "smem_pad": [0, 1],
        "vec": [0],
        "launch_order": [1],
    }
    results, env = kernel_tuner.tune_kernel(**e, iterations=3, quiet=True)
    assert len(results) == 4  # every point passes the family's contract and the answer check
    assert all(r["time"] > 0 for r in results)
    assert {(r["block_size_x"], r["smem_pad"]) for r in results} == {(32, 0), (32, 1), (64, 0), (64, 1)}


# ---- every CLI option is reachable from Python (the CLI is a client of these functions) ---------------------------
def test_tiles_triton_is_the_cli_triton_list():
    r = run_cli("tiles", "8192", "8192", "1024", "--dtype", "f16", "--format", "triton", "--top", "4")
    t = smemtile.tiles(8192, 8192, 1024, dtype="f16", top=4, triton=True)
    assert t.triton_configs() == r.stdout and r.stdout.count("triton.Config(") == 4
    with pytest.raises(SpecError):
        smemtile.tiles(family="transpose", rows=64, cols=64).triton_configs()


def test_generate_name_and_diff_match_cli():
    path = str(ROOT / "samples" / "sgemm_float4.yaml")
    g = smemtile.generate(path, name="mine", diff=True, compile=False)
    assert g.to_dict() == cli_json("generate", path, "--name", "mine", "--diff", "--no-compile")
    assert "launch_mine(" in g.source and "launch_sgemm(" not in g.source
    src = g.diff_sources
    assert src["fixed"] == g.source and src["baseline"] != g.source  # the fixed variant, and the baseline's
    assert "launch_mine(" in src["baseline"]
    with pytest.raises(SpecError) as e:
        smemtile.generate(path, name="9lives")
    assert "C identifier" in str(e.value)
    assert smemtile.generate(path, compile=False).diff_sources is None


def test_generate_takes_the_first_spec_of_a_stream(tmp_path):
    stream = run_cli(
        "tiles", "--family", "transpose", "4096", "4096", "--top", "2", "--format", "yaml"
    ).stdout
    f = tmp_path / "two.yaml"
    f.write_text(stream)
    with pytest.raises(SpecError) as e:
        smemtile.generate(f, compile=False)
    assert "2 YAML documents" in str(e.value)
    g = smemtile.generate(f, compile=False, first=True)
    first, second = yaml.safe_load_all(stream)
    assert g["params"]["BLOCK_ROWS"] == first["tile"]["BLOCK_ROWS"] != second["tile"]["BLOCK_ROWS"]
    assert smemtile.load_spec(f, first=True).documents == 2
    assert (
        "from two.yaml:" in g.source
        and "from other.yaml:" in smemtile.generate(f, compile=False, first=True, origin="other.yaml").source
    )


def test_occupancy_refuses_clusters_before_sm_90():
    with pytest.raises(SpecError) as e:
        smemtile.occupancy(arch="sm_80", threads=128, regs=32, cluster=2)
    assert "sm_90 or later" in str(e.value) and "cluster" in str(e.value)
    assert smemtile.occupancy(arch="sm_80", threads=128, regs=32, cluster=1)["clusters"]["cluster"] == 1


def test_inspect_sample_bounds_match_cli():
    k = ROOT / "samples" / "kernels"
    argv = [str(k / "sgemm_tiled.cu"), "--grid", "16,16", "--block", "16,16", "--args"]
    argv += [str(k / "sgemm_tiled.args.yaml"), "--simulate", "--blocks", "1", "--warps", "2"]
    argv += ["--executions", "8", "--max-steps", "100000"]
    r = smemtile.inspect(
        argv[0],
        grid=(16, 16),
        block=(16, 16),
        args=argv[6],
        mode="simulate",
        blocks=1,
        warps=2,
        executions=8,
        max_steps=100000,
    )
    assert r.to_dict() == cli_json("inspect", *argv)
    assert (
        r.to_dict()
        != smemtile.inspect(argv[0], grid=(16, 16), block=(16, 16), args=argv[6], mode="simulate").to_dict()
    )  # the bounds change what is recorded


def test_tune_several_specs_and_files_match_cli(tmp_path):
    a, b = str(ROOT / "samples" / "sgemm_float4.yaml"), str(ROOT / "samples" / "transpose_32x32.yaml")
    t = smemtile.tune([a, b], top=2, dry_run=True)
    assert t.to_dict() == cli_json("tune", a, b, "--top", "2", "--dry-run")
    assert [p["family"] for p in t["problems"]] == ["sgemm", "transpose"]
    shapes = tmp_path / "shapes.yaml"
    shapes.write_text("[{M: 1024, N: 1024, K: 1024}, {M: 2048, N: 512, K: 256}]\n")
    s = smemtile.tune(a, top=1, shapes=shapes, dry_run=True)
    assert s.to_dict() == cli_json("tune", a, "--top", "1", "--shapes", str(shapes), "--dry-run")
    as_list = smemtile.tune(
        a, top=1, shapes=[{"M": 1024, "N": 1024, "K": 1024}, {"M": 2048, "N": 512, "K": 256}], dry_run=True
    )
    assert as_list.to_dict() == s.to_dict() and len(s["problems"]) == 2


def _steady(doc):
    """A tune document without what changes from run to run: times, process ids, the files it wrote."""
    drop = {"wall_s", "compile_s", "pid", "cache", "winner_spec"}
    if isinstance(doc, dict):
        return {k: _steady(v) for k, v in doc.items() if k not in drop}
    if isinstance(doc, list):
        return [_steady(v) for v in doc]
    return doc


def test_tune_simulated_run_matches_cli_and_writes_the_winner(tmp_path):
    """No GPU needed: simulated devices with made-up deterministic times; the winner spec is written where
    ``out`` says, as ``-o`` does, and progress sees every candidate."""
    path = str(ROOT / "samples" / "transpose_32x32.yaml")
    seen = []
    t = smemtile.tune(
        path, top=2, simulate=True, cache=tmp_path / "a.jsonl", out=tmp_path / "a.yaml", progress=seen.append
    )
    argv = ["tune", path, "--top", "2", "--simulate", "--cache", str(tmp_path / "b.jsonl")]
    want = cli_json(*argv, "-o", str(tmp_path / "b.yaml"))
    assert t["winner_spec"] == str(tmp_path / "a.yaml") and want["winner_spec"] == str(tmp_path / "b.yaml")
    assert (tmp_path / "a.yaml").read_text() == (tmp_path / "b.yaml").read_text()
    assert _steady(t.to_dict()) == _steady(want)
    assert t.best["label"] == want["summary"]["best"]["label"]
    assert seen[0] == {"total": 2, "done": 0} and seen[-1]["done"] == 2 and seen[-1]["total"] == 2
    again = smemtile.tune(path, top=2, simulate=True, cache=tmp_path / "a.jsonl")
    assert "winner_spec" not in again.to_dict()  # out=None: nothing written
    assert again["run"]["counts"]["cached"] == 2  # the cache it was given


def test_results_make_their_document_once_on_first_use():
    from smemtile.api_results import AnalyzeResult

    made = []
    r = AnalyzeResult(lambda: made.append(1) or {"accesses": [], "fixed_accesses": [], "fixes": []})
    assert made == []
    assert r.to_dict() == {"accesses": [], "fixed_accesses": [], "fixes": []} and r["fixes"] == []
    assert made == [1] and r.worst_conflict_degree == 1.0
    with pytest.raises(AttributeError):
        r.no_such_field  # noqa: B018
