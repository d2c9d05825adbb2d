"""The CLI is a thin client of the Python API (issue 31): every command that has an API function parses its
options, calls ``smemtile.api.<function>`` and renders what it returns. Each test replaces the API function
with a fake (monkeypatch) and checks that the command passes its options through and prints the fake's result,
and that its exit code follows the result; so a command that computes its answer by another path fails here.
A static check holds the same for the imports: no such command module calls the pipeline entry point itself."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import ROOT, run_cli

from smemtile import api
from smemtile.api_results import (
    AnalyzeResult,
    GenerateResult,
    InspectResult,
    OccupancyResult,
    TilesResult,
    TuneResult,
    VerifyResult,
)

SAMPLE = str(ROOT / "samples" / "transpose_32x32.yaml")


class Calls:
    """A fake API function: records each call's arguments and returns ``result``."""

    def __init__(self, result):
        self.result, self.calls = result, []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return self.result


def fake(monkeypatch, name: str, result) -> Calls:
    f = Calls(result)
    monkeypatch.setattr(api, name, f)
    return f


def _fits(blocks: int) -> dict:
    return {"active_blocks": blocks, "limiter": "warps", "arch": "sm_90", "reason": "too big"}


# ---- analyze -------------------------------------------------------------------------------------------------
def test_analyze_json_is_the_api_result(monkeypatch):
    rep = SimpleNamespace(occupancy={"baseline": _fits(2), "fixed": _fits(2)})
    f = fake(monkeypatch, "analyze", AnalyzeResult({"marker": "from the api", "n": [1, 2]}, report=rep))
    r = run_cli("analyze", SAMPLE, "--json", "--regs", "96", "--no-compile")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"marker": "from the api", "n": [1, 2]}
    ((args, kwargs),) = f.calls
    assert str(args[0]) == SAMPLE and kwargs == {"regs": 96, "compile": False}


def test_analyze_exit_code_follows_the_result(monkeypatch):
    rep = SimpleNamespace(occupancy={"baseline": _fits(1), "fixed": _fits(0)})
    fake(monkeypatch, "analyze", AnalyzeResult({"marker": 1}, report=rep))
    r = run_cli("analyze", SAMPLE, "--json")
    assert r.returncode == 1
    assert json.loads(r.stdout) == {"marker": 1}
    assert "the fixed block cannot launch: 0 blocks fit on an sm_90 SM: too big" in r.stderr


def test_analyze_text_renders_the_results_report(monkeypatch):
    seen = []
    rep = SimpleNamespace(occupancy={"baseline": _fits(1), "fixed": _fits(1)})
    fake(monkeypatch, "analyze", AnalyzeResult({}, report=rep))
    import smemtile.report.analyze as ra

    monkeypatch.setattr(ra, "render", lambda con, report, **kw: seen.append((report, kw)))
    r = run_cli("analyze", SAMPLE, "--brief")
    assert r.returncode == 0, r.stderr
    assert seen == [(rep, {"brief": True, "lanes": False})]


# ---- occupancy -----------------------------------------------------------------------------------------------
def test_occupancy_passes_parsed_options_and_prints_the_result(monkeypatch):
    doc = {"active_blocks": 3, "clusters": {"cluster": 2, "active_clusters": 7, "sms": 9, "source": "x"}}
    f = fake(monkeypatch, "occupancy", OccupancyResult(doc, report=SimpleNamespace(active_blocks=3)))
    argv = [
        "--arch",
        "sm_90",
        "--threads",
        "256",
        "--regs",
        "64",
        "--smem-dynamic",
        "48K",
        "--carveout",
        "50%",
    ]
    r = run_cli("occupancy", *argv, "--cluster", "2", "--sms", "9", "--no-opt-in", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == doc
    ((_, kw),) = f.calls
    assert kw["arch"].name == "sm_90"
    assert {k: v for k, v in kw.items() if k != "arch"} == {
        "threads": 256,
        "regs": 64,
        "smem_static": 0,
        "smem_dynamic": 48 * 1024,
        "carveout": 50,
        "opt_in": False,
        "cluster": 2,
        "sms": 9,
    }


def test_occupancy_exit_1_when_the_result_has_no_block(monkeypatch):
    rep = SimpleNamespace(active_blocks=0, arch="sm_90", reason="255 registers x 1024 threads")
    fake(
        monkeypatch,
        "occupancy",
        OccupancyResult({"active_blocks": 0, "clusters": {"cluster": 1}}, report=rep),
    )
    r = run_cli("occupancy", "--threads", "1024", "--regs", "255", "--json")
    assert r.returncode == 1
    assert json.loads(r.stdout)["active_blocks"] == 0
    assert "0 blocks fit on an sm_90 SM: 255 registers x 1024 threads" in r.stderr


# ---- tiles ---------------------------------------------------------------------------------------------------
class FakeTiles(TilesResult):
    def yaml_specs(self, top=None):
        return f"# yaml from the api, top {self.top}\n"


def test_tiles_gemm_passes_options_and_prints_the_result(monkeypatch):
    f = fake(monkeypatch, "tiles", FakeTiles({"candidates": [{"label": "api"}]}, report=None, top=3))
    r = run_cli("tiles", "1024", "2048", "512", "--dtype", "f16", "--arch", "sm_80", "--top", "3", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"candidates": [{"label": "api"}]}
    ((args, kw),) = f.calls
    assert args == ("1024", "2048", "512")
    assert kw == {
        "family": None,
        "dtype": "f16",
        "arch": "sm_80",
        "top": 3,
        "rejected": 8,
        "vendor": None,
        "gpu": None,
        "sms": None,
        "triton": False,
    }
    r = run_cli("tiles", "1024", "2048", "512", "--top", "3", "--format", "yaml")
    assert r.stdout == "# yaml from the api, top 3\n"


def test_tiles_family_passes_its_model_options(monkeypatch):
    f = fake(monkeypatch, "tiles", FakeTiles({"family": "stencil2d", "candidates": []}, top=2, rejected=0))
    r = run_cli("tiles", "--family", "stencil2d", "512", "256", "--radius", "3", "--top", "2", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"family": "stencil2d", "candidates": []}
    ((args, kw),) = f.calls
    assert args == ("512", "256") and kw["family"] == "stencil2d" and kw["radius"] == 3 and kw["top"] == 2


# ---- generate ------------------------------------------------------------------------------------------------
def test_generate_json_and_output_are_the_api_result(monkeypatch, tmp_path):
    doc = {"kernel": "k", "file": None, "variant": "baseline"}
    f = fake(monkeypatch, "generate", GenerateResult(doc, source="// the api's .cu\n", report=None))
    out = tmp_path / "k.cu"
    r = run_cli(
        "generate",
        SAMPLE,
        "--variant",
        "baseline",
        "--no-compile",
        "--name",
        "mine",
        "-o",
        str(out),
        "--json",
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {**doc, "file": str(out.resolve())}
    assert out.read_text() == "// the api's .cu\n"
    ((args, kw),) = f.calls
    assert args[0].source == SAMPLE  # the spec the command loaded (through api.load_spec)
    assert kw == {
        "variant": "baseline",
        "compile": False,
        "diff": False,
        "name": "mine",
        "origin": "transpose_32x32.yaml",
    }


# ---- verify --------------------------------------------------------------------------------------------------
def test_verify_prints_the_result_and_exits_1_on_a_wrong_variant(monkeypatch):
    rows = [
        {"variant": "fixed", "name_expression": "k<1>", "correct": False, "mismatch_text": "3 of 9 differ"}
    ]
    f = fake(monkeypatch, "verify", VerifyResult({"variants": rows}, report={"variants": rows}))
    r = run_cli("verify", SAMPLE, "--json", "--seed", "7", "--variant", "fixed", "--stages", "2")
    assert r.returncode == 1
    assert json.loads(r.stdout) == {"variants": rows}
    assert "fixed variant (k<1>) is wrong: 3 of 9 differ" in r.stderr
    ((args, kw),) = f.calls
    assert str(args[0]) == SAMPLE
    assert kw == {
        "compile_only": False,
        "device": 0,
        "seed": 7,
        "variants": ("fixed",),
        "stages": (2,),
        "ncu": False,
        "ncu_save": None,
    }


# ---- inspect -------------------------------------------------------------------------------------------------
def test_inspect_prints_the_result_and_exits_3_without_a_device(monkeypatch):
    rep = SimpleNamespace(no_device="no CUDA GPU: the listing only")
    f = fake(monkeypatch, "inspect", InspectResult({"kernel": "from the api"}, report=rep))
    k = ROOT / "samples" / "kernels" / "histogram.cu"
    r = run_cli(
        "inspect", str(k), "--grid", "4,2", "--block", "256", "--smem", "1K", "--blocks", "3", "--json"
    )
    assert r.returncode == 3
    assert json.loads(r.stdout) == {"kernel": "from the api"}
    assert "no CUDA GPU: the listing only" in r.stderr
    ((args, kw),) = f.calls
    assert Path(args[0]) == k
    assert (kw["grid"], kw["block"], kw["smem"], kw["blocks"], kw["warps"], kw["mode"]) == (
        (4, 2),
        (256,),
        1024,
        3,
        4,
        "auto",
    )


# ---- tune ----------------------------------------------------------------------------------------------------
def test_tune_dry_run_is_the_api_result(monkeypatch):
    doc = {"dry_run": True, "problems": [], "spec": "from the api"}
    f = fake(monkeypatch, "tune", TuneResult(doc, report=doc))
    r = run_cli("tune", SAMPLE, "--top", "2", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == doc
    ((args, kw),) = f.calls
    assert [str(a) for a in args[0]] == [SAMPLE] and kw["top"] == 2 and kw["dry_run"] is True


# ---- the same, statically ------------------------------------------------------------------------------------
# command module -> the pipeline entry points its API function calls (the command must not call them itself)
ENTRY_POINTS = {
    "analyze": {"smemtile.pipeline.analyze", "smemtile.pipeline.specs"},
    "generate": {"smemtile.pipeline.build", "smemtile.pipeline.fixes", "smemtile.pipeline.specs"},
    "verify": {"smemtile.pipeline.verify", "smemtile.pipeline.fixes", "smemtile.gpu.microkernel"},
    "inspect": {"smemtile.pipeline.inspect", "smemtile.gpu.inspect"},
    "occupancy": {"smemtile.model.occupancy:occupancy", "smemtile.model.occupancy:active_clusters"},
    "tiles": {"recommend", "family_tiles", "json_doc", "family_json_doc", "family_yaml_specs"},
    "tune": {"plan_problems"},
}


def _uses(path: Path) -> set[str]:
    """Modules imported (``mod`` and ``mod:name``) and attribute names used in a module."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out |= {f"{node.module}:{a.name}" for a in node.names}
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
    return out


@pytest.mark.parametrize("command", sorted(ENTRY_POINTS))
def test_commands_call_the_api_not_the_pipeline(command):
    used = _uses(ROOT / "smemtile" / "cli" / f"{command}.py")
    assert "smemtile" in used and "api" in used, f"smemtile/cli/{command}.py does not call smemtile.api"
    assert command in used  # api.<command>(...)
    bypass = sorted(ENTRY_POINTS[command] & used)
    assert not bypass, f"smemtile/cli/{command}.py calls the pipeline itself: {bypass}"


# ---- on a GPU: the commands' real runs go through the API as well ---------------------------------------------
def _shape(doc):
    """A document's keys and value types (times and clocks differ from run to run; the structure does not)."""
    if isinstance(doc, dict):
        return {k: _shape(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_shape(v) for v in doc[:1]]
    return type(doc).__name__ if doc is not None else None


@pytest.mark.gpu
def test_verify_on_the_gpu_is_the_api_run():
    import smemtile

    r = run_cli("verify", SAMPLE, "--json")
    assert r.returncode == 0, r.stderr
    cli, v = json.loads(r.stdout), smemtile.verify(SAMPLE)
    assert v.correct is True and cli["correct"] is True
    assert (
        [x["variant"] for x in cli["variants"]] == [x["variant"] for x in v.variants] == ["baseline", "fixed"]
    )
    assert [x["name_expression"] for x in cli["variants"]] == [x["name_expression"] for x in v.variants]
    assert list(cli) == list(v.to_dict())


@pytest.mark.gpu
def test_tune_on_the_gpu_is_the_api_run(tmp_path):
    import smemtile

    argv = [
        "tune",
        SAMPLE,
        "--top",
        "1",
        "--cache",
        str(tmp_path / "c.jsonl"),
        "-o",
        str(tmp_path / "w.yaml"),
    ]
    r = run_cli(*argv, "--json")
    assert r.returncode == 0, r.stderr
    cli = json.loads(r.stdout)
    t = smemtile.tune(SAMPLE, top=1, cache=tmp_path / "c.jsonl", out=tmp_path / "w2.yaml")  # from the cache
    assert t["run"]["counts"]["cached"] >= 1
    assert sorted(x["label"] for x in t["rows"]) == sorted(x["label"] for x in cli["rows"])
    assert t["winner_spec"] == str(tmp_path / "w2.yaml") and (tmp_path / "w2.yaml").read_text().startswith(
        "# smemtile tune "
    )
    assert set(t.to_dict()) == set(cli)


# ---- report: smemtile.report_page (the name `report` is the rendering package) ---------------------------------
def test_report_prints_the_api_result_and_exits_1_when_a_block_cannot_launch(monkeypatch, tmp_path):
    from smemtile.api_results import ReportResult

    rep = SimpleNamespace(occupancy={"baseline": _fits(1), "fixed": _fits(0)})
    done = {"output": str(tmp_path / "p.html"), "bytes": 7, "sections": ["summary"], "figures": 2}
    f = fake(monkeypatch, "report_page", ReportResult(done, analysis=AnalyzeResult({}, report=rep)))
    r = run_cli("report", SAMPLE, "-o", str(tmp_path / "p.html"), "--json", "--no-compile")
    assert r.returncode == 1 and json.loads(r.stdout) == done
    assert "the fixed block cannot launch" in r.stderr
    ((args, kwargs),) = f.calls
    assert str(args[0]) == SAMPLE and str(args[1]) == str(tmp_path / "p.html")
    assert kwargs == {"regs": None, "compile": False}
    used = _uses(ROOT / "smemtile" / "cli" / "report.py")
    assert "report_page" in used and not ({"smemtile.pipeline.analyze", "smemtile.pipeline.specs"} & used)


def test_report_page_writes_the_commands_page(tmp_path):
    import smemtile

    r = smemtile.report_page(SAMPLE, tmp_path / "api.html", compile=False)
    cli = run_cli("report", SAMPLE, "-o", str(tmp_path / "cli.html"), "--no-compile", "--json")
    assert cli.returncode == 0, cli.stderr
    doc = json.loads(cli.stdout)
    assert (tmp_path / "api.html").read_bytes() == (tmp_path / "cli.html").read_bytes()
    assert {k: v for k, v in r.to_dict().items() if k != "output"} == {
        k: v for k, v in doc.items() if k != "output"
    }
    assert r.analysis.worst_conflict_degree == 8.0  # the sample's 8-way column reads
    with pytest.raises(smemtile.SpecError, match="takes a .html file name"):
        smemtile.report_page(SAMPLE, tmp_path / "page.txt")
