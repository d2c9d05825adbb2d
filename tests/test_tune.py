"""smemtile tune: plan, cache, resume, skipped configurations, summary and the CLI, with a NULL device (no GPU)
and, when a GPU is present, one real small sweep."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from conftest import ROOT, run_cli

from smemtile.cli import main
from smemtile.errors import CompileError, SpecError
from smemtile.families import FAMILIES
from smemtile.gpu import tune as tune_mod
from smemtile.gpu.tune import ResultCache, cache_key
from smemtile.model.analysis import analyze_spec
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
        # the fix search's layout for each tile shape (pad 1, or a swizzle where PACK needs aligned pairs)
        assert all(r.conflict_free for r in analyze_spec(FAMILIES["transpose"].spec(cfg)))


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
    text = " ".join(r.output.split())
    assert "local: 1 GPU worker on here; 5 configurations: 5 timed, 0 from the cache, 0 skipped" in text
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

    def describe(self) -> dict:
        return {
            "host": "here",
            "pid": 1,
            "uuid": "NULL-0",
            "arch": "sm_90",
            "device": self.dev.to_dict(),
            "env": self.env,
        }


@pytest.mark.gpu
def test_real_sweep_on_the_gpu(tmp_path):
    doc = sgemm_doc(256, 256, 128)
    from smemtile.gpu.tune import GpuRunner

    runner = GpuRunner(0, 1)
    _, _, cands = plan(copy.deepcopy(doc), "s.yaml", top=2, arch=runner.arch.name)
    rows = sweep(doc, "s.yaml", "sgemm", cands, runner, ResultCache(tmp_path / "c.jsonl"))
    assert summarize(rows)["best"]["correct"] is True


def test_cli_several_problems_from_shapes(tmp_path, monkeypatch):
    """--shapes: every shape of every spec is one problem, each with its own rows, summary and winner spec."""
    monkeypatch.setattr(tune_mod, "GpuRunner", lambda device, seed: _NullGpu())
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(sgemm_doc()))
    shapes = tmp_path / "shapes.yaml"
    shapes.write_text("- {M: 256, N: 256, K: 128}\n- {M: 512, N: 256, K: 256}\n")
    outdir = tmp_path / "tuned"
    args = [
        "tune",
        str(spec),
        "--shapes",
        str(shapes),
        "--top",
        "1",
        "--cache",
        str(tmp_path / "c.jsonl"),
        "-o",
        str(outdir),
        "--json",
    ]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert [p["problem"]["M"] for p in d["problems"]] == [256, 512]
    assert d["run"]["counts"]["timed"] == sum(len(p["rows"]) for p in d["problems"]) >= 4
    assert d["run"]["counts"]["cached"] == 0 and d["run"]["failures"] == []
    for p in d["problems"]:
        best = resolve(yaml.safe_load(Path(p["winner_spec"]).read_text())).config
        assert Path(p["winner_spec"]).parent == outdir and best.problem["M"] == p["problem"]["M"]
        assert p["summary"]["best"]["label"] == min(p["rows"], key=lambda r: r["time_ms"])["label"]


def test_cli_bad_shapes_and_executor_flags_exit_2_one_line(tmp_path):
    shapes = tmp_path / "shapes.yaml"
    shapes.write_text("- {M: 256, Q: 3}\n")
    r = run_cli("tune", str(SGEMM), "--shapes", str(shapes), "--dry-run")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "--shapes" in r.stderr and "'Q'" in r.stderr and "allowed: M, N, K" in r.stderr
    for args, word in (
        (["--executor", "ray"], "--executor"),
        (["--gpus", "0"], "--gpus"),
        (["--executor", "local", "--gpus", "2"], "--gpus"),
    ):
        r = CliRunner().invoke(main, ["tune", str(SGEMM), *args])
        assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and word in r.output, r.output


def test_cli_dask_missing_is_one_line_exit_2(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    r = CliRunner().invoke(main, ["tune", str(SGEMM), "--executor", "dask", "--simulate"])
    assert r.exit_code == 2 and "pip install 'smemtile[cluster]'" in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_dry_run_of_several_specs_lists_each_problem():
    r = run_cli("tune", str(SGEMM), str(TRANSPOSE), "--dry-run", "--top", "2", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert [p["family"] for p in d["problems"]] == ["sgemm", "transpose"] and d["dry_run"]


# ---- the streamed sweep (smemtile.pipeline.schedule) on an in-process fake cluster --------------------------


class _DevRunner:
    """One fake GPU: time = 1 + 0.01 x (the candidate's place in ``order``) times the device's ``factor``."""

    def __init__(self, uuid: str, order: list[str], factor: float = 1.0, clock: int = 1980, throttle=None):
        self.uuid, self.order, self.factor, self.clock, self.seed = uuid, order, factor, clock, 1
        self.throttle = throttle
        self.arch = get_arch("sm_90")
        self.env = {"device": "FAKE", "uuid": uuid}
        self.calls: list[str] = []

    def describe(self) -> dict:
        return {
            "host": "h",
            "pid": 1,
            "uuid": self.uuid,
            "arch": "sm_90",
            "device": {"name": "FAKE"},
            "env": self.env,
        }

    def measure(self, cfg) -> dict:
        label = shape_label(cfg.params)
        self.calls.append(label)
        t = (1 + 0.01 * self.order.index(label)) * self.factor
        return {
            "status": "ok",
            "time_ms": t,
            "unit": "tflops",
            "value": 1 / t,
            "device_uuid": self.uuid,
            "sm_clock_mhz": self.clock,
            "throttle": self.throttle,
        }


class _FakeCluster:
    """The executor interface over threads: one fake GPU per slot. ``die`` = {slot: n}: that slot's n-th timing
    never returns and the slot leaves the cluster (a killed worker); a fresh worker on the same GPU rejoins."""

    name, seed, cpu_workers = "fake", 1, 2

    def __init__(self, runners: list, die: dict | None = None):
        from concurrent.futures import ThreadPoolExecutor

        from smemtile.pipeline.executors import Slot

        self.make_slot = lambda i, r: Slot(f"gpu{i}", f"addr{i}-{len(self.all)}", r.describe(), r.env)
        self.all: list = []
        self.runners = runners
        for i, r in enumerate(runners):
            self.all.append(self.make_slot(i, r))
        self.die, self.count, self.left, self.joined = dict(die or {}), {}, [], []
        self.cpu = ThreadPoolExecutor(2)

    def slots(self):
        return [s for s in self.all if not s.dead]

    def poll(self):
        left, joined = self.left, self.joined
        self.left, self.joined = [], []
        for s in self.all:
            if s.name in left and not s.dead:
                s.dead = True
        self.all += joined
        return joined, left

    def prepare(self, doc, source, family, cand, arch):
        from smemtile.pipeline.tune import prepare

        return self.cpu.submit(prepare, doc, source, family, cand, arch)

    def compile(self, cfg):
        from concurrent.futures import Future

        f = Future()
        f.set_result({"compiled": None, "compile_s": 0.0})
        return f

    def time(self, slot, cfg, compiled):
        import threading
        from concurrent.futures import Future

        from smemtile.gpu.tune import measure_row

        f = Future()
        n = self.count[slot.address] = self.count.get(slot.address, 0) + 1
        i = int(slot.name[3:])
        if self.die.get(slot.name) == n:
            del self.die[slot.name]
            self.left.append(slot.name)
            self.joined.append(self.make_slot(i, self.runners[i]))
            return f  # never completes: its worker is gone
        threading.Thread(target=lambda: f.set_result(measure_row(self.runners[i], cfg))).start()
        return f

    def restart(self, slot):
        return False

    def close(self):
        self.cpu.shutdown()


@functools.lru_cache(maxsize=1)
def _planned() -> tuple:
    from smemtile.pipeline.tune import plan_problems

    return tuple(plan_problems([("s.yaml", sgemm_doc())], None, top=3, arch="sm_90"))


def _problems() -> list[dict]:
    """One SGEMM problem, its model top 3 and the spec's own configuration (planned once: the ranker is slow)."""
    return list(_planned())


def test_a_worker_dying_mid_run_loses_only_its_in_flight_candidate(tmp_path):
    from smemtile.pipeline.schedule import tune_problems

    problems = _problems()
    order = [shape_label(c.params) for c in problems[0]["candidates"]][::-1]
    runners = [_DevRunner("FAKE-0", order), _DevRunner("FAKE-1", order)]
    ex = _FakeCluster(runners, die={"gpu1": 2})
    res = tune_problems(problems, ex, ResultCache(tmp_path / "c.jsonl"), retime_margin=0)
    rows = res["rows"][0]
    assert all(r["status"] == "ok" for r in rows) and len(rows) == len(order)
    c = res["counts"]
    assert c["requeued"] == 1 and c["workers_lost"] == 1 and c["timed"] == len(order)
    assert [e["event"] for e in res["events"]][:1] == ["worker left"]
    # the lost candidate was timed once, on a live worker; the best is the sequential sweep's
    assert sorted(runners[0].calls + runners[1].calls) == sorted(order)
    seq = summarize(
        sweep(
            sgemm_doc(),
            "s.yaml",
            "sgemm",
            problems[0]["candidates"],
            _DevRunner("FAKE-0", order),
            ResultCache(None),
        )
    )
    assert summarize(rows)["best"]["label"] == seq["best"]["label"] == problems[0]["candidates"][-1].label


def test_throttled_results_are_retimed_and_winners_compared_on_one_device(tmp_path):
    from smemtile.pipeline.schedule import tune_problems

    problems = _problems()
    labels = [shape_label(c.params) for c in problems[0]["candidates"]]
    # device 1 runs 3% faster, but NVML says it is slowed down (and its clock is low): its results are outliers
    hot = _DevRunner("FAKE-1", labels, factor=0.97, clock=1500, throttle=["hw_slowdown"])
    runners = [_DevRunner("FAKE-0", labels), hot]
    res = tune_problems(problems, _FakeCluster(runners), ResultCache(tmp_path / "c.jsonl"))
    rows = res["rows"][0]
    assert res["counts"]["outliers"] == len(hot.calls) >= 1  # every result of FAKE-1, timed again elsewhere
    assert all(r["device_uuid"] == "FAKE-0" for r in rows)  # re-timed on the other device
    assert all(r["first_timing"]["device_uuid"] == "FAKE-1" for r in rows if r.get("retimed"))
    assert shape_label(summarize(rows)["best"]["params"]) == labels[0]


def test_close_rivals_timed_on_another_device_are_timed_again_on_the_best_s(tmp_path):
    from smemtile.pipeline.schedule import tune_problems

    problems = _problems()
    labels = [shape_label(c.params) for c in problems[0]["candidates"]]
    fast = _DevRunner("FAKE-1", labels, factor=0.9)  # a faster device: its results look 10% better
    runners = [_DevRunner("FAKE-0", labels), fast]
    res = tune_problems(problems, _FakeCluster(runners), ResultCache(tmp_path / "c.jsonl"), retime_margin=0.2)
    rows = res["rows"][0]
    best = summarize(rows)["best"]
    assert shape_label(best["params"]) == labels[0]  # on one device the true order shows again
    retimed = [r for r in rows if r.get("retimed")]
    assert retimed and all(r["device_uuid"] == best["device_uuid"] for r in retimed)
    assert res["counts"]["retimed"] == len(retimed)


def test_two_runs_sharing_a_cache_never_time_an_entry_twice(tmp_path):
    import threading

    from smemtile.pipeline.schedule import tune_problems

    problems = _problems()
    labels = [shape_label(c.params) for c in problems[0]["candidates"]]
    runners = [_DevRunner("FAKE-0", labels)]
    results = []

    def one():
        results.append(tune_problems(problems, _FakeCluster(runners), ResultCache(tmp_path / "c.jsonl")))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(runners[0].calls) == sorted(labels)  # each configuration timed once in all
    assert sum(r["counts"]["timed"] for r in results) == len(labels)
    assert [r["label"] for r in results[0]["rows"][0]] == [r["label"] for r in results[1]["rows"][0]]


def test_local_executor_compiles_in_a_process_pool(tmp_path):
    """--executor local with 2 compile processes gives the sequential sweep's rows and winner."""
    from smemtile.gpu.tune import SimulatedRunner
    from smemtile.pipeline.executors import make_executor
    from smemtile.pipeline.schedule import tune_problems

    problems = _problems()
    ex = make_executor("local", runner="smemtile.gpu.tune:SimulatedRunner", seed=1, compile_workers=2)
    try:
        ex.start()
        res = tune_problems(problems, ex, ResultCache(tmp_path / "c.jsonl"))
    finally:
        ex.close()
    seq = sweep(
        sgemm_doc(), "s.yaml", "sgemm", problems[0]["candidates"], SimulatedRunner(0, 1), ResultCache(None)
    )
    assert [(r["label"], r["time_ms"]) for r in res["rows"][0]] == [(r["label"], r["time_ms"]) for r in seq]
    assert res["counts"]["compiled"] == res["counts"]["timed"] == len(seq)
