"""smemtile tune: plan, cache, resume, skipped configurations, summary and the CLI, with a NULL device (no GPU)
and, when a GPU is present, one real small sweep."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from click.testing import CliRunner
from conftest import ROOT, run_cli

from smemtile.cli import main
from smemtile.errors import CompileError, SpecError
from smemtile.gpu import tune as tune_mod
from smemtile.gpu.tune import ResultCache, cache_key
from smemtile.model.arch import get_arch
from smemtile.pipeline.specs import resolve
from smemtile.pipeline.tune import config_for, plan, respec, space_entries, summarize, sweep

SGEMM = ROOT / "samples" / "sgemm_float4.yaml"
TRANSPOSE = ROOT / "samples" / "transpose_32x32.yaml"


def sgemm_doc(m=512, n=512, k=256) -> dict:
    doc = yaml.safe_load(SGEMM.read_text())
    doc["kernel"].update(M=m, N=n, K=k)
    return doc


def shape_label(p: dict) -> str:
    """What NullRunner keys its failures by: the tile shape, including the split-K count."""
    return f"{p.get('BM')}x{p.get('BN')}x{p.get('BK')} {p.get('TM')}x{p.get('TN')} s{p.get('STAGES')} k{p.get('SPLIT_K', 1)}"


class NullRunner:
    """Measures nothing: a deterministic time from the tile shape (bigger register tiles are faster)."""

    def __init__(self, fail: dict | None = None, interrupt_at: int | None = None):
        self.arch = get_arch("sm_90")
        self.env = {"device": "NULL", "driver": 13000, "nvrtc": "13.0"}
        self.seed = 1
        self.calls: list[str] = []
        self.fail = fail or {}
        self.interrupt_at = interrupt_at

    def measure(self, cfg) -> dict:
        p = cfg.params
        label = shape_label(p)
        self.calls.append(label)
        if self.interrupt_at is not None and len(self.calls) == self.interrupt_at:
            raise KeyboardInterrupt
        if label in self.fail:
            raise self.fail[label]
        t = 1.0 / (p["TM"] * p["TN"]) + 0.001 * p["BK"] + 0.0001 * p["STAGES"]
        return {
            "status": "ok",
            "time_ms": t,
            "unit": "tflops",
            "value": 1 / t,
            "registers": 100,
            "spill_bytes": 0,
        }


def test_plan_has_model_top_k_then_the_spec_and_the_space():
    doc = sgemm_doc()
    family, problem, cands = plan(doc, "s.yaml", top=4, space=[{"BM": 64, "BN": 64, "TM": 4, "TN": 4}])
    assert family == "sgemm" and problem["M"] == 512
    assert [c.source for c in cands] == ["model"] * 4 + ["spec", "space"]
    assert [c.model_rank for c in cands[:4]] == [1, 2, 3, 4]
    assert all(c.predicted for c in cands[:4])
    with pytest.raises(SpecError):
        plan(doc, "s.yaml", top=2, space=[{"BQ": 3}])


def test_space_accepts_the_yaml_specs_of_smemtile_tiles(tmp_path):
    r = run_cli("tiles", "512", "512", "256", "--top", "3", "--format", "yaml")
    assert r.returncode == 0, r.stderr
    (tmp_path / "space.yaml").write_text(r.stdout)
    entries = space_entries(tmp_path / "space.yaml")
    assert len(entries) == 3 and all(e["kernel"]["family"] == "sgemm" for e in entries)
    family, _, cands = plan(sgemm_doc(), "s.yaml", top=0, space=entries)
    # the spec's own configuration first, then each tiles pick not equal to it
    assert cands[0].source == "spec" and [c.source for c in cands[1:]] == ["space"] * (len(cands) - 1)
    assert 3 <= len(cands) <= 4


def test_every_candidate_configures_and_respec_round_trips():
    doc = sgemm_doc()
    _, _, cands = plan(doc, "s.yaml", top=6)
    arch = get_arch("sm_90")
    for c in cands:
        cfg = config_for(doc, "s.yaml", "sgemm", c, arch)
        for k, v in c.params.items():
            assert cfg.params[k] == v
        new = respec(doc, "sgemm", c.params, cfg.layouts)
        back = resolve(new).config  # the winner spec resolves to exactly that configuration
        assert {k: back.params[k] for k in c.params} == c.params and back.layouts == cfg.layouts


def test_transpose_plan_and_configs():
    doc = yaml.safe_load(TRANSPOSE.read_text())
    family, _, cands = plan(doc, "t.yaml", top=4)
    assert family == "transpose" and len(cands) >= 4
    for c in cands:
        cfg = config_for(doc, "t.yaml", family, c, get_arch("sm_90"))
        assert cfg.layouts["tile"].pad == 1  # the fix search's layout survives a new tile shape


def test_sweep_summary_and_rank_correlation(tmp_path):
    doc = sgemm_doc()
    _, _, cands = plan(doc, "s.yaml", top=6)
    rows = sweep(doc, "s.yaml", "sgemm", cands, NullRunner(), ResultCache(tmp_path / "c.jsonl"))
    s = summarize(rows)
    assert s["measured"] == len(cands) and s["best"]["status"] == "ok"
    assert -1.0 <= s["rank_correlation"] <= 1.0
    t1 = s["model_top1"]
    assert t1["model_rank"] == 1 and t1["measured_rank"] >= 1 and t1["slower_than_best"] >= 0


def test_failures_are_skipped_with_reasons_and_only_deterministic_ones_cached(tmp_path):
    doc = sgemm_doc()
    _, _, cands = plan(doc, "s.yaml", top=4)
    labels = [shape_label(c.params) for c in cands]
    assert len(set(labels)) == len(labels)
    runner = NullRunner(
        fail={labels[0]: CompileError("ptxas: too many resources"), labels[1]: RuntimeError("launch")}
    )
    cache = ResultCache(tmp_path / "c.jsonl")
    rows = sweep(doc, "s.yaml", "sgemm", cands, runner, cache)
    assert rows[0]["status"] == "skipped" and "compile error" in rows[0]["reason"]
    assert rows[1]["status"] == "skipped" and "RuntimeError" in rows[1]["reason"]
    assert all(r["status"] == "ok" for r in rows[2:])
    again = NullRunner()
    rows2 = sweep(doc, "s.yaml", "sgemm", cands, again, ResultCache(tmp_path / "c.jsonl"))
    assert again.calls == [labels[1]]  # the compile error was cached, the launch error is retried
    assert rows2[0]["cached"] and rows2[0]["status"] == "skipped"


def test_an_interrupted_sweep_resumes(tmp_path):
    doc = sgemm_doc()
    _, _, cands = plan(doc, "s.yaml", top=5)
    path = tmp_path / "c.jsonl"
    with pytest.raises(KeyboardInterrupt):
        sweep(doc, "s.yaml", "sgemm", cands, NullRunner(interrupt_at=3), ResultCache(path))
    assert len(path.read_text().splitlines()) == 2
    path.write_text(path.read_text() + '{"key": "cut sh')  # a line cut short by the interrupt is ignored
    runner = NullRunner()
    rows = sweep(doc, "s.yaml", "sgemm", cands, runner, ResultCache(path))
    assert len(runner.calls) == len(cands) - 2
    assert [r["cached"] for r in rows[:2]] == [True, True]
    runner2 = NullRunner()
    sweep(doc, "s.yaml", "sgemm", cands, runner2, ResultCache(path), force=True)
    assert len(runner2.calls) == len(cands)


def test_cache_key_covers_source_params_arch_and_versions(monkeypatch):
    from smemtile.families import configure

    cfg = configure("sgemm", {"M": 256, "N": 256, "K": 256}, {"As": {"pad": 4}}, "sm_90")
    env = {"device": "X", "driver": 13000, "nvrtc": "13.0"}
    k0 = cache_key(cfg, env, 1)
    assert k0 == cache_key(cfg, dict(env), 1)
    assert k0 != cache_key(cfg, {**env, "driver": 13010}, 1)
    assert k0 != cache_key(cfg, {**env, "nvrtc": "13.1"}, 1)
    assert k0 != cache_key(configure("sgemm", {"M": 256, "N": 256, "K": 256, "BK": 16}, {}, "sm_90"), env, 1)
    assert k0 != cache_key(
        configure("sgemm", {"M": 256, "N": 256, "K": 256}, {"As": {"pad": 4}}, "sm_80"), env, 1
    )
    monkeypatch.setattr(tune_mod, "source_hash", lambda cfg: "changed")
    assert k0 != cache_key(cfg, env, 1)


# ---- CLI -----------------------------------------------------------------------------------------------------


def test_cli_dry_run_needs_no_gpu():
    r = run_cli("tune", str(SGEMM), "--dry-run", "--top", "3", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["dry_run"] and len(d["candidates"]) >= 3 and d["family"] == "sgemm"


def test_cli_bad_input_exits_2_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("arch: sm_90\nbuffers: []\n")
    for args in ([str(bad)], [str(ROOT / "samples" / "gemm_a_column.yaml")], [str(SGEMM), "--top", "x"]):
        r = run_cli("tune", *args, "--dry-run")
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_cli_end_to_end_with_a_null_device(tmp_path, monkeypatch):
    monkeypatch.setattr(tune_mod, "GpuRunner", lambda device, seed: _NullGpu())
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(sgemm_doc()))
    out = tmp_path / "best.yaml"
    args = ["tune", str(spec), "--top", "4", "--cache", str(tmp_path / "c.jsonl"), "-o", str(out)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "Spearman" in r.output and "model's top-1" in r.output and "best:" in r.output
    best = resolve(yaml.safe_load(out.read_text())).config
    assert best.family == "sgemm" and best.params["TM"] * best.params["TN"] == 64
    r2 = CliRunner().invoke(main, [*args, "--json"])
    d = json.loads(r2.output)
    assert all(row["cached"] for row in d["rows"]) and d["summary"]["best"] and d["winner_spec"] == str(out)


class _NullGpu(NullRunner):
    def __init__(self):
        super().__init__()

        class _Dev:
            name, arch_name, sm_count, cc = "NULL", "sm_90", 132, (9, 0)

            def to_dict(self):
                return {"name": self.name, "arch": self.arch_name, "sm_count": self.sm_count, "index": 0}

        self.dev = _Dev()


@pytest.mark.gpu
def test_real_sweep_on_the_gpu(tmp_path):
    doc = sgemm_doc(256, 256, 128)
    from smemtile.gpu.tune import GpuRunner

    runner = GpuRunner(0, 1)
    _, _, cands = plan(copy.deepcopy(doc), "s.yaml", top=2, arch=runner.arch.name)
    rows = sweep(doc, "s.yaml", "sgemm", cands, runner, ResultCache(tmp_path / "c.jsonl"))
    assert summarize(rows)["best"]["correct"] is True
