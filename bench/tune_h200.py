"""How far is the tile model's top-1 from the tuned best? `smemtile tune`'s machinery on the H200 for the sizes of
issue 7: SGEMM at 4096^3, 8192x8192x1024, 1024x1024x8192 and the fp16 / fp32 8192^2 transposes.

For each problem: the model's top K, the spec's own configuration and a few extra shapes (so the ranking is
judged on more than the model's favourites) are compiled, checked against the float64 reference and timed
(CUDA events, median). torch.matmul (TF32 off) is timed in the same process as a reference for SGEMM.

    PYTHONPATH=. python bench/tune_h200.py --out /tmp/out [--top 6] [--quick]
    python bench/tune_h200.py --refit bench/results/tune_h200_run1.json --out bench/results   # CPU only

``--refit`` re-ranks the measured configurations of a run under other model constants (in-sample: it says
how the constants should move, not how well the moved model predicts; only a new run can say that).

Writes OUT/tune_h200.json (per problem: rows, summary with Spearman and the model's top-1 gap) and
OUT/tune_cache.jsonl (the sweep cache, so a rerun resumes).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import sys
import time
import traceback
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from smemtile.gpu.tune import GpuRunner, ResultCache  # noqa: E402
from smemtile.pipeline.tune import plan, summarize, sweep  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SGEMM_SIZES = [(4096, 4096, 4096), (8192, 8192, 1024), (1024, 1024, 8192)]
TRANSPOSES = [("f16", 8192, 8192), ("f32", 8192, 8192)]
# Shapes outside the model's favourites, so the rank correlation sees the whole range.
SGEMM_EXTRA = [
    {"BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4, "STAGES": 3},
    {"BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 8, "STAGES": 3, "MIN_BLOCKS": 1},
    {"BM": 32, "BN": 64, "BK": 8, "TM": 4, "TN": 4, "STAGES": 3},
    {"BM": 128, "BN": 64, "BK": 8, "TM": 8, "TN": 8, "STAGES": 4, "MIN_BLOCKS": 2},
]
TRANSPOSE_EXTRA = [{"TILE": 32, "BLOCK_ROWS": 32}, {"TILE": 32, "BLOCK_ROWS": 16}]


def sgemm_doc(m: int, n: int, k: int) -> dict:
    doc = yaml.safe_load((ROOT / "samples" / "sgemm_float4.yaml").read_text())
    doc["kernel"].update(M=m, N=n, K=k)
    return doc


def transpose_doc(dtype: str, rows: int, cols: int) -> dict:
    doc = yaml.safe_load((ROOT / "samples" / "transpose_32x32.yaml").read_text())
    doc["kernel"].update(rows=rows, cols=cols, dtype=dtype)
    doc["buffers"][0]["dtype"] = dtype
    for a in doc["accesses"]:
        a["width"] = 2 if dtype != "f32" else 4
    return doc


def torch_sgemm_ms(m: int, n: int, k: int) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(m, k, device="cuda")
    b = torch.randn(k, n, device="cuda")
    for _ in range(5):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    ts = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.matmul(a, b)
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    del a, b
    torch.cuda.empty_cache()
    return statistics.median(ts)


def run_one(name: str, doc: dict, runner, cache, top: int, extra: list[dict]) -> dict:
    t0 = time.time()
    family, problem, cands = plan(doc, name, top=top, space=extra, arch=runner.arch.name)

    def tick(row: dict) -> None:
        val = f"{row['value']:.1f} {row.get('unit')}" if row.get("status") == "ok" else row.get("reason")
        print(f"  [{name}] {row['label']:<34} model #{row.get('model_rank')}: {val}", flush=True)

    rows = sweep(doc, name, family, cands, runner, cache, progress=tick)
    s = summarize(rows)
    out = {"family": family, "problem": problem, "rows": rows, "summary": s, "seconds": time.time() - t0}
    if family == "sgemm":
        ms = torch_sgemm_ms(problem["M"], problem["N"], problem["K"])
        if ms:
            out["torch_fp32_ms"] = ms
            out["torch_fp32_tflops"] = 2 * problem["M"] * problem["N"] * problem["K"] / ms / 1e9
            if s["best"]:
                out["best_vs_torch"] = ms / s["best"]["time_ms"]
    t1 = s.get("model_top1") or {}
    print(f"== {name}: best {s['best']['label'] if s['best'] else None}; model top-1 measured "
          f"#{t1.get('measured_rank')} ({t1.get('slower_than_best', float('nan')):+.1%}); "
          f"Spearman {s.get('rank_correlation')}", flush=True)  # fmt: skip
    return out


def _rank_stats(pred: list[float], meas: list[float]) -> dict:
    from smemtile.model.tiling_model import spearman

    i = max(range(len(pred)), key=pred.__getitem__)
    err = statistics.mean(abs(math.log(a / b)) for a, b in zip(pred, meas, strict=True))
    return {"spearman": spearman(pred, meas), "top1_slower_than_best": max(meas) / meas[i] - 1,
            "mean_abs_log_error": err}  # fmt: skip


def refit(run: dict) -> dict:
    """Spearman, top-1 gap and error of the model on a run's measured configurations, as run and refitted."""
    import smemtile.model.tiling_model as tm
    from smemtile.families import get_family
    from smemtile.model.arch import get_arch
    from smemtile.model.tiling import TileConfig, make_problem
    from smemtile.pipeline.tiles import recommend

    fam = get_family("sgemm")
    out: dict = {"sgemm": [], "transpose": []}
    for x, lds in [(tm.SIMT_X, tm.LDS_CYCLES)] + [
        (x, c) for x in (0.1, 0.15, 0.2, 0.3) for c in (2.0, 3.0, 4.0)
    ]:
        old = tm.SIMT_X, tm.LDS_CYCLES
        tm.SIMT_X, tm.LDS_CYCLES = x, lds
        per = {}
        for name, p in run["problems"].items():
            if not name.startswith("sgemm") or "rows" not in p:
                continue
            q = p["problem"]
            prob = make_problem(
                q["M"],
                q["N"],
                q["K"],
                "f32",
                "sm_90",
                contract=fam.tile_contract(get_arch("sm_90"), {k: q[k] for k in "MNK"}),
            )
            rows = [r for r in p["rows"] if r["status"] == "ok"]
            cfgs = []
            for r in rows:
                f = {**fam.defaults(), **r["params"]}
                cfgs.append(TileConfig(f["BM"], f["BN"], f["BK"], fam.threads(f) // 32, f["STAGES"], f["GROUP_M"],
                                       f["TM"], f["TN"]))  # fmt: skip
            scored, _ = tm.evaluate(prob, cfgs)
            stats = _rank_stats([s.tflops for s in scored], [r["value"] for r in rows])
            top = recommend(q["M"], q["N"], q["K"], "f32", "sm_90").ranked[0].cfg
            stats["global_top1"] = top.label
            stats["global_top1_measured"] = any(c.shape_key() == top.shape_key() for c in cfgs)
            per[name] = stats
        tm.SIMT_X, tm.LDS_CYCLES = old
        out["sgemm"].append({"SIMT_X": x, "LDS_CYCLES": lds, "problems": per})
    for form, lat in (("min", 1e-6), ("exp", 0.4e-6), ("exp", 1e-6)):
        per = {}
        for name, p in run["problems"].items():
            if not name.startswith("transpose") or "rows" not in p:
                continue
            e = 2 if p["problem"].get("dtype") != "f32" else 4
            rows = [r for r in p["rows"] if r["status"] == "ok"]
            pred = []
            for r in rows:  # in flight from the measured blocks per SM (the registers ptxas really used)
                f = {"TILE": 64, "BLOCK_ROWS": 4, **r["params"]}
                x = r["blocks_per_sm"] * r["threads"] * (f["TILE"] // f["BLOCK_ROWS"]) * e
                need = 4131e9 / 132 * lat
                pred.append(4131 * (min(1.0, x / need) if form == "min" else 1 - math.exp(-x / need)))
            per[name] = _rank_stats(pred, [r["value"] for r in rows])
        out["transpose"].append({"form": form, "latency_s": lat, "problems": per})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--top", type=int, default=6)
    ap.add_argument("--quick", action="store_true", help="one small SGEMM only (smoke test)")
    ap.add_argument(
        "--refit", type=Path, help="re-rank a run's measurements under other model constants (CPU)"
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.refit:
        doc = {
            "what": f"in-sample refit of the tile model on {args.refit}",
            "refit": refit(json.loads(args.refit.read_text())),
        }
        (args.out / "tune_h200_refit.json").write_text(json.dumps(doc, indent=1))
        print("wrote", args.out / "tune_h200_refit.json")
        return
    runner = GpuRunner(0, 1234)
    cache = ResultCache(args.out / "tune_cache.jsonl")
    result = {"what": "smemtile tune machinery on the H200: model top-K + spec + extra shapes per problem",
              "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "device": runner.dev.to_dict(),
              "environment": runner.env, "top": args.top, "problems": {}}  # fmt: skip
    jobs = [(f"sgemm_{m}x{n}x{k}", sgemm_doc(m, n, k), SGEMM_EXTRA) for m, n, k in SGEMM_SIZES]
    jobs += [(f"transpose_{dt}_{r}x{c}", transpose_doc(dt, r, c), TRANSPOSE_EXTRA) for dt, r, c in TRANSPOSES]
    if args.quick:
        jobs = [("sgemm_512x512x256", sgemm_doc(512, 512, 256), SGEMM_EXTRA[:1])]
    for name, doc, extra in jobs:
        try:
            result["problems"][name] = run_one(name, copy.deepcopy(doc), runner, cache, args.top, extra)
        except Exception as e:  # one problem failing must not lose the others
            result["problems"][name] = {
                "error": f"{type(e).__name__}: {e}",
                "traceback": traceback.format_exc(),
            }
            print(f"== {name}: FAILED {e}", flush=True)
        (args.out / "tune_h200.json").write_text(json.dumps(result, indent=1, default=str))
    print("wrote", args.out / "tune_h200.json")


if __name__ == "__main__":
    main()
