"""Distributed tuning, scaling (issues 17 and 18): one sweep on 1, 2 (, 4, 8) GPUs through ``smemtile tune
--executor dask``, a GPU worker killed mid-run, the resume; and, without GPUs, a simulated run on 1, 2, 4 and 8
GPU workers with the per-candidate time measured on the GPUs.

    python -m bench.tune_scaling gpu --out /tmp/out --shape 2048x2048x4096     # issue 17 (x2 kind)
    python -m bench.tune_scaling gpu --out /tmp/out --sweep issue18 --gpus 1,2,4,8   # x8 kind
    python -m bench.tune_scaling simulate --out bench/results --measured bench/results/tune_scaling_h200x2.json

``gpu``: each point runs the command as a user does (``python3 -m smemtile tune SPEC... [--shapes S] --top 63
--executor dask --gpus N --json``) with its own empty NVRTC and tune caches (so every candidate is compiled and
timed), and takes the wall time of the whole command (cluster start, planning, compiles, timing, the winners'
re-timing). Then ``tune samples/sgemm_default.yaml --top 6 --executor dask --gpus 2`` with the process on the
second GPU killed (SIGKILL) once two results have streamed into the cache file, and the same command again on the
same cache (the resume: nothing should be timed).

``simulate``: a local cluster of SimulatedRunner workers (no GPU) sleeps the median per-candidate time measured
by ``gpu`` on 1 GPU (scaled by --time-scale) and compiles nothing (the x8 machine has 128 cores for compiles);
prepares run for real (a warm-up run first fills the compile worker's prepare memo, so the points measure the
GPU side). It measures the scheduler's overhead and the speed-up on 1, 2, 4, 8 workers for ISSUE18 (2 SGEMM and
2 bf16 tensor-core problems, 256 candidates), every candidate taking the same time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "samples" / "sgemm_default.yaml"
# issue 18's sweep: 2 SGEMM and 2 bf16 tensor-core (hgemm) problems, 64 candidates each (the model's top 63 + the
# spec's own): 256 candidates in one run
ISSUE18 = (
    ["samples/sgemm_default.yaml", "samples/hgemm_bf16.yaml"],
    [{"M": 4096, "N": 4096, "K": 4096}, {"M": 8192, "N": 8192, "K": 2048}],
)


def stats(xs: list[float]) -> dict | None:
    xs = [x for x in xs if isinstance(x, (int, float))]
    if not xs:
        return None
    return {"n": len(xs), "median": statistics.median(xs), "min": min(xs), "max": max(xs), "sum": sum(xs)}


def summarize_run(doc: dict) -> dict:
    """What a scaling point records from ``tune --json``: per problem its winner, over all rows the counts and
    the statistics of compile and measure times, clocks and spreads."""
    rows = [r for p in doc["problems"] for r in p["rows"]]
    ok = [r for r in rows if r.get("status") == "ok"]
    per_worker: dict[str, int] = {}
    for r in ok:
        per_worker[r.get("worker", "?")] = per_worker.get(r.get("worker", "?"), 0) + 1
    winners = []
    for p in doc["problems"]:
        best = p["summary"]["best"]
        good = sorted((r for r in p["rows"] if r.get("status") == "ok"), key=lambda r: r["time_ms"])
        winners.append(
            {
                "spec": p["spec"],
                "problem": p["problem"],
                "winner": best and best["label"],
                "winner_ms": best and best["time_ms"],
                "winner_device": best and best.get("device_uuid"),
                "top5": [(r["label"], round(r["time_ms"], 4), r.get("worker")) for r in good[:5]],
            }
        )
    return {
        "candidates": len(rows),
        "ok": len(ok),
        "winner": winners[0]["winner"] if len(winners) == 1 else None,
        "winners": winners,
        "per_worker": per_worker,
        "counts": doc["run"]["counts"],
        "failures": doc["run"]["failures"],
        "engine_wall_s": doc["run"]["wall_s"],
        "compile_s": stats([r.get("compile_s") for r in rows]),
        "measure_s": stats([r.get("measure_s") for r in ok]),
        "sm_clock_mhz": stats([r.get("sm_clock_mhz") for r in ok]),
        "spread": stats([r.get("spread") for r in ok]),
        "retimed": [
            {
                "label": r["label"],
                "why": r.get("retimed"),
                "first": r.get("first_timing"),
                "now_ms": r["time_ms"],
            }
            for r in rows
            if r.get("retimed")
        ],
        "devices": [{k: s.get(k) for k in ("name", "host", "uuid")} for s in doc["devices"]],
    }


def shown(cmd: list[str], work: Path) -> str:
    """The command as recorded: python3, the spec relative to the repository, the scratch folder as $WORK."""
    text = " ".join(["python3", *cmd[1:]])
    return text.replace(str(ROOT) + "/", "").replace(str(work), "$WORK")


def cli_point(gpus: int, top: int, work: Path, specs: list[str], shapes: Path | None) -> dict:
    env = {**os.environ, "SMEMTILE_CACHE_DIR": str(work / f"cache{gpus}")}  # empty NVRTC cache: compile all
    cmd = [
        sys.executable,
        "-m",
        "smemtile",
        "tune",
        *specs,
        "--top",
        str(top),
        "--executor",
        "dask",
        "--gpus",
        str(gpus),
        "--cache",
        str(work / f"tune{gpus}.jsonl"),
        "-o",
        str(work / f"best{gpus}"),
        "--json",
        *(["--shapes", str(shapes)] if shapes else []),
    ]
    if len(specs) == 1 and not shapes:
        cmd[cmd.index("-o") + 1] += ".yaml"  # one problem: -o is the winner's file
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=3000)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        return {"gpus": gpus, "wall_s": wall, "error": p.stderr[-2000:]}
    return {"gpus": gpus, "wall_s": wall, "command": shown(cmd, work), **summarize_run(json.loads(p.stdout))}


def gpu_pids(uuid: str, index: int, exclude: int) -> list[int]:
    """Processes holding a context on the GPU ``uuid`` (nvidia-smi: the GPU worker pinned to it); where
    nvidia-smi lists none (a VM), the processes with /dev/nvidia<index> open and no other GPU's node."""
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"],
        capture_output=True,
        text=True,
    ).stdout
    pids = [int(ln.split(",")[0]) for ln in out.splitlines() if ln.strip().endswith(uuid)]
    if pids:
        return pids
    found = []
    for pid in (int(d) for d in os.listdir("/proc") if d.isdigit() and int(d) not in (exclude, os.getpid())):
        try:
            nodes = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        except OSError:
            continue
        gpus = {n for n in nodes if n.startswith("/dev/nvidia") and n[11:].isdigit()}
        if gpus == {f"/dev/nvidia{index}"}:
            found.append(pid)
    return found


def kill_and_resume(top: int, work: Path, uuid1: str) -> dict:
    """``tune SPEC --executor dask --gpus 2`` (the spec's default problem); once two results are in the cache
    file, the process on the second GPU is killed (SIGKILL); then the same command on the same cache."""
    env = {**os.environ, "SMEMTILE_CACHE_DIR": str(work / "cache_kill")}
    cache = work / "tune_kill.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "smemtile",
        "tune",
        str(SPEC),
        "--top",
        str(top),
        "--executor",
        "dask",
        "--gpus",
        "2",
        "--cache",
        str(cache),
        "-o",
        str(work / "best_kill.yaml"),
        "--json",
    ]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    killed: dict = {}
    while p.poll() is None and not killed:
        lines = len(cache.read_text().splitlines()) if cache.exists() else 0
        if lines >= 2:
            pids = gpu_pids(uuid1, 1, p.pid)
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            killed = {"pids": pids, "after_results": lines, "t_s": time.perf_counter() - t0}
        time.sleep(0.05)
    stdout, stderr = p.communicate(timeout=300)
    first = {"wall_s": time.perf_counter() - t0, "rc": p.returncode, "killed": killed}
    if p.returncode == 0:
        d = json.loads(stdout)
        first.update(summarize_run(d), events=d["run"]["events"])
    else:
        first["error"] = stderr[-2000:]
    t1 = time.perf_counter()
    q = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    again = {"wall_s": time.perf_counter() - t1, "rc": q.returncode}
    if q.returncode == 0:
        again.update(summarize_run(json.loads(q.stdout)))
    else:
        again["error"] = q.stderr[-2000:]
    return {"command": shown(cmd, work), "first": first, "resume": again}


def gpu(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="tune_scaling_"))
    doc: dict = {
        "date": time.strftime("%Y-%m-%d"),
        "spec": str(SPEC.relative_to(ROOT)),
        "top": args.top,
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    try:
        import dask
        import distributed

        doc["dask"] = {"dask": dask.__version__, "distributed": distributed.__version__}
        doc["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True
        ).stdout.strip()
    except Exception as e:  # recorded, not fatal
        doc["setup_error"] = repr(e)
    path = out / args.name

    def save() -> None:
        path.write_text(json.dumps(doc, indent=1, default=str))

    specs, shape_list = ISSUE18 if args.sweep == "issue18" else ([str(SPEC.relative_to(ROOT))], None)
    if args.shape:
        m, n, k = (int(x) for x in args.shape.lower().split("x"))
        shape_list = [{"M": m, "N": n, "K": k}]
    shapes = None
    if shape_list:
        shapes = work / "shapes.yaml"
        shapes.write_text("".join(f"- {{M: {s['M']}, N: {s['N']}, K: {s['K']}}}\n" for s in shape_list))
        doc["shapes"] = shape_list
    doc["specs"] = specs
    doc["points"] = []
    for g in (int(x) for x in args.gpus.split(",")):
        doc["points"].append(cli_point(g, args.top, work, specs, shapes))
        save()
        print(
            json.dumps(
                {k: v for k, v in doc["points"][-1].items() if k in ("gpus", "wall_s", "winner", "error")}
            ),
            flush=True,
        )
    ok = [p for p in doc["points"] if "error" not in p]
    if ok and ok[0]["gpus"] == 1:
        for p in ok:
            p["speedup"] = ok[0]["wall_s"] / p["wall_s"]
            p["engine_speedup"] = ok[0]["engine_wall_s"] / p["engine_wall_s"]
        doc["same_winners"] = len({json.dumps([w["winner"] for w in p["winners"]]) for p in ok}) == 1
    p1 = next((p for p in ok if p["gpus"] == 1), None)
    p2 = next((p for p in ok if p["gpus"] == 2), None)
    if p1 and p2:
        doc["speedup_2_over_1"] = p1["wall_s"] / p2["wall_s"]
        doc["engine_speedup_2_over_1"] = p1["engine_wall_s"] / p2["engine_wall_s"]
        doc["same_winner"] = p1["winners"] == p2["winners"] or [w["winner"] for w in p1["winners"]] == [
            w["winner"] for w in p2["winners"]
        ]
    save()
    if args.kill_top and p2 and len(p2["devices"]) == 2:
        doc["kill"] = kill_and_resume(args.kill_top, work, p2["devices"][1]["uuid"])
        save()
    print(json.dumps({k: doc.get(k) for k in ("speedup_2_over_1", "engine_speedup_2_over_1", "same_winner")}))


def simulate(args) -> None:
    """1, 2, 4, 8 simulated GPU workers on one persistent local cluster, the measured per-candidate time."""
    import yaml

    from smemtile.cache import ResultCache
    from smemtile.pipeline.executors import DaskExecutor
    from smemtile.pipeline.schedule import tune_problems
    from smemtile.pipeline.tune import plan_problems, summarize

    measured = json.loads(Path(args.measured).read_text()) if args.measured else None
    per = args.delay
    if measured:
        per = next(p for p in measured["points"] if p["gpus"] == 1)["measure_s"]["median"]
    delay = per * args.time_scale
    counts = [int(x) for x in args.workers.split(",")]
    specs, shapes = ISSUE18
    docs = [(spec, yaml.safe_load((ROOT / spec).read_text())) for spec in specs]
    problems = plan_problems(docs, shapes, top=args.top, arch="sm_90")
    n = sum(len(p["candidates"]) for p in problems)
    ex = DaskExecutor(
        None,
        max(counts),
        "smemtile.gpu.tune:SimulatedRunner",
        1,
        runner_options={"delay_s": delay},
        compile_workers=args.compile_workers,
    )
    ex.start()
    address = ex.client.scheduler.address
    res = {
        "date": time.strftime("%Y-%m-%d"),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "candidates": n,
        "sweep": {"specs": specs, "shapes": shapes},
        "measured_per_candidate_s": per,
        "time_scale": args.time_scale,
        "delay_s": delay,
        "compile_workers": args.compile_workers,
        "points": [],
    }
    work = Path(tempfile.mkdtemp(prefix="tune_sim_"))
    try:
        # warm-up (not measured): the compile worker's prepare memo, so the points below measure the GPU side
        warm = DaskExecutor(
            address, max(counts), "smemtile.gpu.tune:SimulatedRunner", 1, runner_options={"delay_s": 0}
        )
        warm.start()
        t0 = time.perf_counter()
        tune_problems(problems, warm, ResultCache(None))
        res["warmup_prepare_s"] = time.perf_counter() - t0
        warm.close()
        for k in counts:
            sub = DaskExecutor(
                address, k, "smemtile.gpu.tune:SimulatedRunner", 1, runner_options={"delay_s": delay}
            )
            sub.start()
            t0 = time.perf_counter()
            out = tune_problems(problems, sub, ResultCache(work / f"c{k}.jsonl"))
            wall = time.perf_counter() - t0
            sub.close()
            winners = [summarize(rows)["best"]["label"] for rows in out["rows"]]
            ideal = n * delay / k
            res["points"].append(
                {
                    "gpus": k,
                    "wall_s": wall,
                    "ideal_s": ideal,
                    "efficiency": ideal / wall,
                    "winners": winners,
                    "counts": out["counts"],
                }
            )
            print(json.dumps({"gpus": k, "wall_s": round(wall, 2), "ideal_s": round(ideal, 2)}), flush=True)
    finally:
        ex.close()
    one = res["points"][0]["wall_s"]
    for p in res["points"]:
        p["speedup"] = one / p["wall_s"]
    res["same_winners"] = len({tuple(p["winners"]) for p in res["points"]}) == 1
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / args.name).write_text(json.dumps(res, indent=1, default=str))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    g = sub.add_parser("gpu")
    g.add_argument("--out", required=True)
    g.add_argument("--name", default="tune_scaling_h200x2.json")
    g.add_argument("--top", type=int, default=63, help="the model's top K (+ the spec's own: 64 candidates)")
    g.add_argument("--kill-top", type=int, default=6, help="the killed-worker sweep's top K (0: skip)")
    g.add_argument("--shape", help="MxNxK of the scaling points (default: the sweep's own problems)")
    g.add_argument("--gpus", default="1,2", help="the points: GPU counts, 1 first (1,2,4,8 on the x8 kind)")
    g.add_argument(
        "--sweep",
        choices=("default", "issue18"),
        default="default",
        help="default: samples/sgemm_default.yaml; issue18: 2 SGEMM + 2 hgemm problems (256 candidates)",
    )
    s = sub.add_parser("simulate")
    s.add_argument("--out", required=True)
    s.add_argument("--name", default="tune_scaling_simulated_x8.json")
    s.add_argument("--measured", help="the gpu run's JSON: its 1-GPU median per-candidate time")
    s.add_argument("--delay", type=float, default=1.0, help="per-candidate time without --measured")
    s.add_argument("--time-scale", type=float, default=1.0)
    s.add_argument("--workers", default="1,2,4,8")
    s.add_argument("--top", type=int, default=63)
    s.add_argument("--compile-workers", type=int, default=1)
    args = ap.parse_args()
    gpu(args) if args.mode == "gpu" else simulate(args)


if __name__ == "__main__":
    main()
