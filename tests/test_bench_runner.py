"""bench/run.py, the one runner over the families' plans: for every registered family the dry run lists exactly
what a user's build gives (the spec of the tile, resolved and fixed as ``generate`` does it), the compile-only path
builds it with NVRTC, bad input is one line with exit 2; bench/ edits no ``sys.path``. The timed run is marked gpu."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench import run as runner
from smemtile.families import FAMILIES
from smemtile.families.task import load

ROOT = Path(__file__).resolve().parents[1]
NAMES = sorted(FAMILIES)


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = runner.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _user_config(name: str, problem: dict):
    """What `smemtile generate` builds for a spec of the family's default tile at this problem."""
    from smemtile.families import configure
    from smemtile.pipeline.fixes import variants
    from smemtile.pipeline.specs import resolve

    fam = FAMILIES[name]
    tile = dict(configure(fam, problem, None, fam.default_arch).params)
    doc = {"arch": fam.default_arch, "tile": tile, "kernel": {"family": name, **problem}}
    if "STAGES" in tile:
        doc["stages"] = tile.pop("STAGES")
    return variants(resolve(doc, "<test>"))["fixed"]


@pytest.mark.parametrize("name", NAMES)
def test_dry_run_lists_what_a_user_builds(name, capsys):
    fam = FAMILIES[name]
    plan = load(type(fam).__module__)["plans"]["smoke"]
    shapes = [s for g in plan["groups"] for s in g["shapes"]]
    rc, out, err = _run(capsys, name, "smoke", "--dry-run")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"{name} plan smoke (") and f"{len(shapes)} shapes" in lines[0]
    for shape in shapes:
        cfg = _user_config(name, shape)
        launch = fam.launch(cfg)
        main = next(s for s in launch.steps if s.main)
        row = next(ln for ln in lines if ln.strip().startswith("default "))
        assert fam.name_expression(cfg) in row and f"grid {list(main.grid)} block {list(main.block)}" in row
        taken, sizes = map(int, re.search(r" checks (\d+)/(\d+)$", row).groups())
        assert sizes == len(fam.test_sizes) and 1 <= taken <= sizes  # the test sizes this tile accepts
    built = int(re.search(r"^(\d+) kernels to build$", out, re.M).group(1))
    assert built >= 1  # the timed kernel, plus one per test size whose generated body differs


@pytest.mark.parametrize("name", NAMES)
def test_dry_run_of_the_bench_plan_resolves_the_models_picks(name, capsys):
    fam = FAMILIES[name]
    rc, out, err = _run(capsys, name, "bench", "--dry-run", "--no-small", "--first", "1", "--limit", "2")
    assert rc == 0, err
    rows = [ln for ln in out.splitlines() if ln.startswith("  ")]
    assert len(rows) == 2 and all(fam.name in ln or "refused" in ln for ln in rows)
    assert any(ln.strip().startswith("#1 ") for ln in rows), "the tile model's #1 is in the bench plan"
    assert not any("refused" in ln for ln in rows if ln.strip().startswith("#")), (
        "the model ranks what it builds"
    )


@pytest.mark.parametrize("name", NAMES)
def test_compile_only_builds_the_smoke_plan_with_nvrtc(name, capsys):
    pytest.importorskip("cuda.bindings")
    rc, out, err = _run(capsys, name, "smoke", "--compile-only", "--no-small")
    assert rc == 0, out + err
    assert re.search(r"^1 kernels built, 0 failed$", out, re.M), out
    built = next(ln for ln in out.splitlines() if ln.startswith("  built "))
    assert "'registers': " in built and "'spills': 0" in built


def test_spread_ranks():
    assert runner.spread_ranks(10, 3, 24) == list(range(10))
    assert runner.spread_ranks(100, 12, 24)[:12] == list(range(12))
    got = runner.spread_ranks(100, 12, 24)
    assert len(got) == 36 and got[-1] == 99 and got == sorted(set(got))
    assert runner.spread_ranks(100, 5, 0) == list(range(5)) and runner.spread_ranks(100, 2, 1) == [0, 1, 99]


@pytest.mark.parametrize(
    "argv, words",
    [
        (
            ["sgemm", "nosuch", "--dry-run"],
            "plan: 'nosuch' is not a plan of sgemm; known: smoke, bench, sweep",
        ),
        (["sgem", "smoke", "--dry-run"], "unknown kernel family 'sgem' (did you mean 'sgemm'?)"),
        (["sgemm", "smoke", "--rounds", "5"], "--rounds: 5 rounds; a timed run takes at least 15"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, words):
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and words in err and err.count("\n") == 1, err


def test_bench_edits_no_sys_path():
    """bench/ imports the installed package (run as python -m bench.NAME from the repo root)."""
    edits = re.compile(r"sys\.path\s*(\.\s*(insert|append|extend)|\[|\+?=)|PYTHONPATH\W*(=|:)")
    found = []
    for path in sorted((ROOT / "bench").rglob("*")):
        if "results" in path.relative_to(ROOT / "bench").parts or path.suffix not in (".py", ".sh", ".md"):
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if edits.search(line):
                found.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not found, "\n".join(found)
    for edit in (
        "sys.path.insert(0, str(ROOT))",
        "PYTHONPATH=. python bench/x.py",
        'env={"PYTHONPATH": root}',
    ):
        assert edits.search(edit), edit
    assert not edits.search("nothing edits `sys.path` or `PYTHONPATH`")


def test_the_second_copy_of_the_hgemm_contract_is_gone():
    assert not (ROOT / "bench" / "bench_hgemm.py").exists()
    for path in (ROOT / "bench").glob("*.py"):
        text = path.read_text()
        assert "def default_swizzle" not in text and "class Variant" not in text, path


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_smoke_plan_on_the_gpu(name, tmp_path, capsys):
    """The smoke plan timed on the device: checked at every test size and the timed size, then timed against the
    family's reference in the same rounds; the results file has the shape the fitting code reads."""
    out = tmp_path / f"{name}_smoke.json"
    rc, text, err = _run(capsys, name, "smoke", "--rounds", "15", "--out", str(out))
    assert rc == 0, text + err
    doc = json.loads(out.read_text())
    assert doc["family"] == name and doc["plan"] == "smoke" and doc["versions"]["gpu"]
    for case in doc["cases"]:
        unit = case["work"]["unit"]
        assert case["reference"]["median_ms"] > 0 and case["reference"][unit] > 0
        for row in case["configs"]:
            assert row["correct"], row
            assert all(s.get("correct", True) for s in row["small_checks"])
            assert row["median_ms"] > 0 and row["ratio"] > 0 and row[unit] > 0 and row["spread"] >= 0


# ---- the results file, without a GPU: run_case with the device parts replaced ---------------------------------
class _FakeKernel:
    """LoadedKernel's surface run_case uses: it 'checks' by running the family's own reference on the inputs."""

    loaded: list = []  # (name expression, the kernel text it was given)

    def __init__(self, cfg, dev, *, source=None):
        fam = FAMILIES[cfg.family]
        self.cfg, self.shape = cfg, fam.launch(cfg)
        _FakeKernel.loaded.append((fam.name_expression(cfg), source))
        self.registers, self.static_smem, self.local_bytes, self.driver_blocks = 64, 0, 0, 2
        self.closed = False

    def check(self, inputs, reference):
        from smemtile.gpu.run import CheckResult

        return CheckResult(True, 0.0, 1e-5)

    def prepare(self, inputs):
        pass

    def launch(self):
        pass

    def close(self):
        self.closed = True


class _FakeReference:
    def __init__(self, *args):
        pass

    def __call__(self):
        pass

    def close(self):
        pass


def _fake_run(monkeypatch, name: str, plan: dict) -> dict:
    """bench.run's case for ``plan`` on a pretend device: every kernel twice as slow as the reference in the rounds
    (ratio 0.5), the ranked ones slower down the ranking."""
    import bench.timing
    import smemtile.gpu.run

    fam = FAMILIES[name]
    task = load(type(fam).__module__)
    monkeypatch.setattr(smemtile.gpu.run, "LoadedKernel", _FakeKernel)
    monkeypatch.setattr(runner, "Copy", _FakeReference)
    monkeypatch.setattr(runner, "Matmul", _FakeReference)

    def rounds(fns, torch, n, flush, warmup=2):
        return {k: [1.0 if k == runner.REF else 2.0 + i] * n for i, k in enumerate(fns)}

    monkeypatch.setattr(bench.timing, "time_rounds", rounds)
    (case,) = runner.resolve_plan(fam, plan, task, fam.default_arch, small=True)
    texts = runner.sources([case])
    _FakeKernel.loaded = []
    res = runner.run_case(fam, case, task["reference"], None, 15, None, None, lambda s: None, True, texts)
    # every kernel loaded with the one text of its name expression (what --compile-only built)
    assert _FakeKernel.loaded and all(src == texts[(e, fam.default_arch)] for e, src in _FakeKernel.loaded)
    assert len(runner.compile_jobs([case])) == len(texts) == len({e for e, _ in _FakeKernel.loaded})
    return {"family": name, "plan": "heldout", "cases": [{**res, "role": "held_out"}]}


def _plan(shape: dict, *configs: dict) -> dict:
    return {
        "about": "test",
        "arch": None,
        "rounds": None,
        "groups": [{"shapes": [shape], "configs": list(configs)}],
    }


def test_results_of_a_sgemm_plan_read_by_the_sweep_fit(monkeypatch):
    from bench import tune_h200

    doc = _fake_run(
        monkeypatch, "sgemm", _plan({"M": 96, "N": 80, "K": 40}, {"label": "default"}, {"ranked": {"top": 2}})
    )
    (case,) = doc["cases"]
    assert case["case"] == "sgemm 96x80x40" and case["work"] == {
        "unit": "tflops",
        "amount": 2.0 * 96 * 80 * 40,
    }
    assert case["reference"]["median_ms"] == 1.0 and case["flop"] == 2.0 * 96 * 80 * 40
    labels = [r["label"] for r in case["configs"]]
    assert labels[0] == "default" and "predicted" not in case["configs"][0]
    assert [r["predicted"]["rank"] for r in case["configs"][1:]] == [1, 2]  # the model's labels, ranks apart
    for i, r in enumerate(case["configs"]):
        assert r["correct"] and r["median_ms"] == 2.0 + (i + 1) and r["ratio"] == 1.0 / (3.0 + i)
        assert len(r["small_checks"]) == len(FAMILIES["sgemm"].test_sizes)
    rows = tune_h200.runner_rows(doc, "x.json")
    from bench.bench_kernels import cfg_label

    assert [r["label"] for r in rows] == [cfg_label(r["params"]) for r in case["configs"]]
    assert all(r["shape"] == (96, 80, 40) for r in rows)
    assert rows[0]["t"] == 3.0e-3 and rows[0]["threads"] == FAMILIES["sgemm"].threads(rows[0]["p"])
    assert rows[0]["ref"] == case["reference"]["tflops"] and rows[0]["role"] == "held_out"


def test_results_of_a_heldout_plan_are_scored(monkeypatch, tmp_path):
    from bench import bench_memory, gemm_spearman

    doc = _fake_run(monkeypatch, "transpose", _plan({"rows": 256, "cols": 320}, {"ranked": {"top": 4}}))
    (case,) = doc["cases"]
    assert case["case"] == "transpose f32 256x320"  # the task file's case_name: bench_memory's names
    assert case["copy"] == case["reference"] and case["bytes"] == 2 * 256 * 320 * 4
    assert [r["predicted"]["rank"] for r in case["configs"]] == [1, 2, 3, 4]
    assert all(r["predicted"]["time_us"] > 0 and r["predicted"]["gbps"] > 0 for r in case["configs"])
    path = tmp_path / "heldout.json"
    path.write_text(json.dumps(doc))
    rows, copies, _ = bench_memory.transpose_rows([path])  # what the transpose fit reads
    assert sorted(r["label"] for r in rows) == sorted(r["label"] for r in case["configs"])
    assert copies == [(float(case["bytes"]), 1000.0)] and all(r["case"] == case["case"] for r in rows)
    (score,) = bench_memory.score_spearman(path)
    from smemtile.model.fitting import spearman

    measured = [r["gbps"] for r in case["configs"]]  # slower down the ranking (the pretend device)
    assert measured == sorted(measured, reverse=True)
    want = spearman([r["predicted"]["gbps"] for r in case["configs"]], measured)
    assert (
        score["timed"] == 4 and score["spearman"] == pytest.approx(want) and score["pick_measured_rank"] == 1
    )
    assert score["median_ratio_error"] is None and score["median_time_error"] >= 0

    doc = _fake_run(
        monkeypatch, "hgemm", _plan({"M": 128, "N": 128, "K": 64, "dtype": "f16"}, {"ranked": {"top": 3}})
    )
    rows = gemm_spearman.rows_of(doc)
    assert [r["rank"] for r in rows] == [1, 2, 3] and all(r["shape"] == [128, 128, 64, "f16"] for r in rows)
    got = gemm_spearman.score(rows)["128 x 128 x 64 x f16"]
    assert got["n"] == 3 and got["top1"] == rows[0]["label"]


def test_case_names_come_from_the_task_file():
    sten, sg = FAMILIES["stencil2d"], FAMILIES["sgemm"]
    assert runner.case_name(sten, {"ny": 64, "nx": 96}, {}, "stencil R{R} {ny}x{nx}") == "stencil R1 64x96"
    assert (
        runner.case_name(sten, {"ny": 64, "nx": 96}, {"R": 3}, "stencil R{R} {ny}x{nx}") == "stencil R3 64x96"
    )
    assert runner.case_name(sg, {"M": 8, "N": 16, "K": 4, "beta": 0.5}, {}) == "sgemm 8x16x4 beta=0.5"
    from smemtile.errors import SpecError

    with pytest.raises(SpecError, match=r"case_name: '\{rows\}x\{cols\}' names 'rows'"):
        runner.case_name(sg, {"M": 8, "N": 16, "K": 4}, {}, "{rows}x{cols}")
