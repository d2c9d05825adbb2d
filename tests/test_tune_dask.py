"""``smemtile tune --executor dask`` on a local Dask cluster of processes (CPU only): two simulated GPU workers
(smemtile.gpu.tune.SimulatedRunner: deterministic times) and one compile worker. Checks the scheduling (both
GPUs time, every row lands), the winners against the sequential sweep's, cache resume, a worker killed with
SIGKILL mid-timing (its candidate re-queued, the run complete) and the CLI against a running scheduler."""

from __future__ import annotations

import importlib.util
import json
import threading

import pytest
import yaml
from click.testing import CliRunner
from conftest import ROOT

from smemtile.cache import ResultCache
from smemtile.cli import main
from smemtile.gpu.tune import SimulatedRunner
from smemtile.pipeline.executors import DaskExecutor  # imports dask only when a cluster starts
from smemtile.pipeline.schedule import tune_problems
from smemtile.pipeline.tune import plan_problems, summarize, sweep

# found, not imported: importing distributed costs every xdist worker ~2 s while the tests are collected
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("distributed") is None, reason="distributed is not installed"
)

SIM = "smemtile.gpu.tune:SimulatedRunner"


def sgemm_doc() -> dict:
    doc = yaml.safe_load((ROOT / "samples" / "sgemm_float4.yaml").read_text())
    doc["kernel"].update(M=512, N=512, K=256)
    return doc


@pytest.fixture(scope="module")
def setup():
    """A local cluster as ``--executor dask --gpus 2 --simulate`` starts it (gpu0, gpu1, cpu0), started while
    this process plans one SGEMM problem and runs the sequential sweep (the same simulated times)."""
    ex = DaskExecutor(None, 2, SIM, 1, runner_options={"delay_s": 0.05}, compile_workers=1)
    started = threading.Thread(target=ex.start)
    started.start()
    problems = plan_problems([("s.yaml", sgemm_doc())], None, top=2, arch="sm_90")
    seq = [
        summarize(
            sweep(p["doc"], "s.yaml", "sgemm", p["candidates"], SimulatedRunner(0, 1), ResultCache(None))
        )["best"]["label"]
        for p in problems
    ]
    started.join()
    yield ex, problems, seq
    ex.close()


def test_both_gpus_time_and_the_winners_are_the_sequential_runs(setup, tmp_path):
    cluster, problems, sequential = setup
    assert sorted(s.name for s in cluster.slots()) == ["gpu0", "gpu1"]
    assert {s.uuid for s in cluster.slots()} == {"SIM-0", "SIM-1"}  # CUDA_VISIBLE_DEVICES pinned per worker
    res = tune_problems(problems, cluster, ResultCache(tmp_path / "c.jsonl"))
    rows = [r for per in res["rows"] for r in per]
    assert len(rows) == sum(len(p["candidates"]) for p in problems) and all(r["status"] == "ok" for r in rows)
    assert {r["worker"] for r in rows} == {"gpu0", "gpu1"}
    assert {r["device_uuid"] for r in rows} == {"SIM-0", "SIM-1"}
    assert [summarize(per)["best"]["label"] for per in res["rows"]] == sequential
    c = res["counts"]
    assert c["compiled"] == c["prepared"] == len(rows) and c["cached"] == 0 and c["requeued"] == 0
    # resumed: everything comes from the cache (keyed by the device that timed it), nothing is timed
    again = tune_problems(problems, cluster, ResultCache(tmp_path / "c.jsonl"))
    assert again["counts"]["timed"] == 0 and again["counts"]["cached"] == len(rows)
    assert [summarize(per)["best"]["label"] for per in again["rows"]] == sequential


def test_cli_against_a_running_scheduler(setup, tmp_path):
    cluster, problems, _ = setup
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(problems[0]["doc"]))
    address = cluster.client.scheduler.address.split("://", 1)[1]
    args = [
        "tune",
        str(spec),
        "--top",
        "2",
        "--executor",
        f"dask://{address}",
        "--simulate",
        "--cache",
        str(tmp_path / "c.jsonl"),
        "-o",
        str(tmp_path / "best.yaml"),
        "--json",
    ]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["executor"] == "dask" and len(d["devices"]) == 2 and len(d["problems"]) == 1
    assert d["winner_spec"] == str(tmp_path / "best.yaml") and (tmp_path / "best.yaml").is_file()
    assert d["run"]["counts"]["timed"] == len(d["rows"]) == len(problems[0]["candidates"])
    assert {r["worker"] for r in d["rows"]} == {"gpu0", "gpu1"}


def test_a_killed_worker_s_candidate_is_requeued(setup, tmp_path):
    """gpu1 kills its own process (SIGKILL) while timing: the run still times every candidate."""
    cluster, problems, sequential = setup
    address = cluster.client.scheduler.address
    ex = DaskExecutor(
        address, 2, SIM, 1, runner_options={"delay_s": 0.05, "crash_marker": str(tmp_path / "m")}
    )
    ex.start()
    try:
        res = tune_problems(problems, ex, ResultCache(tmp_path / "c.jsonl"))
    finally:
        ex.close()
    assert (tmp_path / "m").exists()  # it did die
    rows = [r for per in res["rows"] for r in per]
    assert all(r["status"] == "ok" for r in rows) and res["failures"] == []
    c = res["counts"]
    assert c["workers_lost"] == 1 and c["requeued"] >= 1
    assert "worker left" in [e["event"] for e in res["events"]]
    assert [summarize(per)["best"]["label"] for per in res["rows"]] == sequential
