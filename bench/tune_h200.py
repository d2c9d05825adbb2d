"""Calibrate the tile model on measured sweeps (CPU; issue 20). The measurements come from bench/bench_kernels.py
on the GPU (``run --steps sweep,triton``); this script fits the model's constants and writes them, with their
provenance, beside the models that read them (``--out DIR`` writes both there instead):

* ``sgemm_h200.json`` (smemtile/families/sgemm/): the SIMT model (``smemtile.families.sgemm.tiles.simt_time``). Fitted by weighted least
  squares on log(predicted / measured time) over the FIT shapes only (weights favour each shape's fastest
  configurations, where the ranking matters, and every shape counts alike); the register-need formula by least
  squares on the builds that no __launch_bounds__ cap held back. The HELD_OUT shapes are never used to fit:
  they are scored afterwards (error, Spearman, the rank of ``smemtile tiles``' #1 among the measured ones).
* ``triton_h200.json`` (smemtile/model/data/): the efficiency of the standard Triton matmul per (tile, warps, BK bytes, stages),
  relative to the tensor-core roofline model, and the shape terms smemtile.triton applies (wave, exposed epilogue,
  unaligned N / K), fitted over every measured configuration of the sweeps given (smemtile.model.gemm_fit).

    python -m bench.tune_h200 --sweeps bench/results/sweep_h200_run1.json [...] --triton bench/results/triton_h200_run1.json [...]
    python -m bench.tune_h200 --triton bench/results/triton_h200_run{1,2,3}.json \
        bench/results/session7/triton_prune_h200.json     # the shipped Triton calibration (its "sweeps")
    python -m bench.tune_h200 --evaluate          # the held-out table of the installed calibration
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
from pathlib import Path

from smemtile.families.sgemm.fit import (  # noqa: E402
    error_summary,
    fit_simt,
    loso,
    measured_tiles,
    score,
)
from smemtile.families.sgemm.fit import load_rows as family_load_rows  # noqa: E402
from smemtile.families.sgemm.tiles import params_of  # noqa: E402

# the SIMT fit is the family's (smemtile/families/sgemm/fit.py: what reproduce() checks against the shipped
# constants); this script adds the sweep files, the held-out scoring and the data file it writes
from smemtile.model.gemm_fit import fit_triton  # noqa: E402  (the Triton factors: gemm_fit.reproduce checks them)

ROOT = Path(__file__).resolve().parents[1]

DATA = ROOT / "smemtile" / "model" / "data"  # triton_h200.json
SGEMM_DATA = ROOT / "smemtile" / "families" / "sgemm"  # sgemm_h200.json, next to the model that reads it


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def load_rows(paths: list[Path]) -> list[dict]:
    """The family's reader (smemtile.families.sgemm.fit.load_rows) over bench_kernels' sweep files and
    bench.run's results files (python -m bench.run sgemm sweep / heldout)."""
    return family_load_rows(paths, other=lambda d, path: runner_rows(d, path) if "cases" in d else None)


def runner_rows(doc: dict, path: str) -> list[dict]:
    """The timed rows of a ``python -m bench.run sgemm PLAN`` results file, as :func:`load_rows` keeps them (the
    reference: the case's cuBLAS timing in the same rounds)."""
    from bench.bench_kernels import cfg_label
    from smemtile.families import FAMILIES

    fam = FAMILIES["sgemm"]
    out = []
    for case in doc["cases"]:
        p = case["problem"]
        shape = (p["M"], p["N"], p["K"])
        for r in case["configs"]:
            if "median_ms" not in r:
                continue
            out.append(
                {
                    "role": case["role"],
                    "shape": shape,
                    "p": r["params"],
                    "b": r["blocks_per_sm"],
                    "t": r["median_ms"] * 1e-3,
                    "threads": fam.threads(r["params"]),
                    "regs": r["registers"],
                    "spill": r["local_bytes"],
                    "tflops": r["tflops"],
                    "ref": case["reference"]["tflops"],
                    "label": cfg_label(r["params"]),  # the sweeps' labels (the model's #1 is looked up by it)
                    "file": path,
                }
            )
    return out


def tiles_top1(rows: list[dict]) -> dict:
    """For every shape: ``smemtile tiles``' #1 over the whole candidate space (installed calibration), whether
    it was measured, and its gap to the best measured configuration."""
    from bench.bench_kernels import cfg_label
    from smemtile.pipeline.tiles import recommend

    out = {}
    for shape in sorted({r["shape"] for r in rows}):
        sr = {r["label"]: r for r in rows if r["shape"] == shape}
        rep = recommend(*shape, "f32", "sm_90")
        top = rep.ranked[0]
        label = cfg_label(params_of(top.cfg))
        best = max(r["tflops"] for r in sr.values())
        got = sr.get(label)
        out["x".join(map(str, shape))] = {
            "tiles_top1": label,
            "predicted_tflops": top.tflops,
            "measured_tflops": got["tflops"] if got else None,
            "gap_to_best": best / got["tflops"] - 1 if got else None,
            "best_measured": max(sr.values(), key=lambda r: r["tflops"])["label"],
            "best_tflops": best,
            "top3": [cfg_label(params_of(s.cfg)) for s in rep.ranked[:3]],
        }
    return out


# The local correction's width in log2 units of M, N, K (sigma), the weight of the tile's global mean residual
# against the nearby shapes' (prior), and how far an unaligned shape sits from an aligned one: chosen by
# leave-one-fitting-shape-out (``--loso``), never on the held-out shapes.


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweeps", type=Path, nargs="*", default=[])
    ap.add_argument("--triton", type=Path, nargs="*", default=[], help="Triton sweep files (all fitted)")
    ap.add_argument("--evaluate", action="store_true", help="score the installed calibration on --sweeps")
    ap.add_argument(
        "--out", type=Path, help="write the data files here (default: where the package keeps them)"
    )
    ap.add_argument(
        "--skip", nargs="*", default=[], help="shapes MxNxK left out (e.g. measured with an older kernel)"
    )
    ap.add_argument(
        "--loso", action="store_true", help="leave-one-fitting-shape-out scores of the local correction"
    )
    ap.add_argument(
        "--picks",
        type=Path,
        help="write the installed model's top 3 per held-out shape (an "
        "--extra-pool file for bench_kernels.py: every #1 gets measured) and exit",
    )
    ap.add_argument(
        "--held-out-from",
        type=Path,
        nargs="*",
        default=[],
        help="the held-out rows come from these sweeps only (a validation run after the fit)",
    )
    ap.add_argument(
        "--rescore",
        action="store_true",
        help="score the installed constants on --held-out-from and update only its error fields",
    )
    args = ap.parse_args()
    if args.picks:
        from bench.bench_kernels import HELD_OUT
        from smemtile.pipeline.tiles import recommend

        picks = [
            {"shape": list(s), "params": params_of(c.cfg)}
            for s in HELD_OUT
            for c in recommend(*s, "f32", "sm_90").ranked[:3]
        ]
        args.picks.write_text(json.dumps(picks, indent=1) + "\n")
        print(f"{len(picks)} picks -> {args.picks}")
        return
    rows = [r for r in load_rows(args.sweeps) if "x".join(map(str, r["shape"])) not in args.skip]
    if (
        args.held_out_from
    ):  # score only on these (measured after the model was frozen); older held-out rows go
        rows = [r for r in rows if r["role"] == "fit"] + [
            r for r in load_rows(args.held_out_from) if r["role"] == "held_out"
        ]
    now = datetime.date.today().isoformat()
    if args.loso:
        grid = [{}] + [
            {"sigma": s, "prior": p, "unaligned_distance": 2.0}
            for s in (0.5, 0.75, 1.0, 1.5, 2.0)
            for p in (0.1, 0.3, 1.0)
        ]
        res = loso(rows, grid)
        for name, v in sorted(res.items(), key=lambda kv: (-kv[1]["within_5"], kv[1]["mean_gap"])):
            print(
                f"{name:<60} within 5%: {v['within_5']}/{len(v['per_shape'])} within 10%: {v['within_10']} "
                f"mean gap {v['mean_gap']:.3f} max {v['max_gap']:.3f} min Spearman {v['min_spearman']:.2f}"
            )
        (args.out or SGEMM_DATA).joinpath("loso.json").write_text(json.dumps(res, indent=1))
        return
    if (
        args.rescore
    ):  # the installed (frozen) constants scored on --held-out-from: only the error fields change
        from smemtile.families.sgemm.tiles import constants as simt_constants

        path = (args.out or SGEMM_DATA) / "sgemm_h200.json"
        doc = json.loads(path.read_text())
        q = simt_constants()
        held = score([r for r in rows if r["role"] == "held_out"], q)
        doc["held_out_sweeps"] = [str(p) for p in args.held_out_from]
        doc["held_out_shapes"] = sorted(held["shapes"])
        doc["error"]["held_out"] = error_summary(held)
        doc["per_shape"]["held_out"] = held["shapes"]
        doc["held_out_tiles_top1"] = tiles_top1([r for r in rows if r["role"] == "held_out"])
        path.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"held-out median {held['median']:.3f} p90 {held['p90']:.3f} ({held['n']} configurations)")
        return
    if args.evaluate:
        from smemtile.families.sgemm.tiles import constants as simt_constants

        q = simt_constants()
        doc = {
            "fit": score([r for r in rows if r["role"] == "fit"], q),
            "held_out": score([r for r in rows if r["role"] == "held_out"], q),
            "tiles_top1": tiles_top1([r for r in rows if r["role"] == "held_out"]),
        }
        print(json.dumps(doc, indent=1, default=str))
        return
    if rows:
        q, info = fit_simt(rows)
        fit_s = score([r for r in rows if r["role"] == "fit"], q)
        held = score([r for r in rows if r["role"] == "held_out"], q)
        doc = {
            "what": "constants of the SIMT (sgemm) tile model, smemtile.model.tiling_model.simt_time",
            "gpu": "NVIDIA H200",
            "gpu_key": "h200",
            "sms": 132,
            "arch": "sm_90",
            "sweeps": [str(p) for p in args.sweeps],
            "held_out_sweeps": [str(p) for p in args.held_out_from],
            "commit": commit(),
            "date": now,
            "method": "weighted least squares on log(predicted / measured time) over the fitting shapes only "
            "(bench/tune_h200.py); the held-out shapes are scored after the fit, never fitted",
            "fit_shapes": sorted(fit_s["shapes"]),
            "held_out_shapes": sorted(held["shapes"]),
            "constants": q,
            "fit_info": info,
            "measured_tiles": measured_tiles(rows),
            "error": {"fit": error_summary(fit_s), "held_out": error_summary(held)},
            "per_shape": {"fit": fit_s["shapes"], "held_out": held["shapes"]},
        }
        q["local_bias"].pop("_memo", None)
        doc["local_correction"] = (
            "per fitting shape and tile, the model's mean log(predicted / measured); a problem "
            "divides out their Gaussian-weighted mean (sigma in log2 M, N, K), shrunk toward "
            "the tile's mean; sigma, prior and the unaligned distance chosen by "
            "leave-one-fitting-shape-out (bench/tune_h200.py --loso), not on held-out shapes"
        )
        ((args.out or SGEMM_DATA) / "sgemm_h200.json").write_text(json.dumps(doc, indent=1) + "\n")
        print(
            f"sgemm: fit median {fit_s['median']:.3f} p90 {fit_s['p90']:.3f}; held-out median "
            f"{held['median']:.3f} p90 {held['p90']:.3f}"
        )
    if args.triton:
        t = fit_triton(args.triton)
        left_out = t["criterion_leave_one_shape_out"]
        doc = {
            "what": "efficiency of the standard Triton matmul (tutorial kernel: tl.dot, GROUP_SIZE_M) per "
            "tile, warps, BK bytes x stages, relative to the tensor-core roofline model (log-linear), and the "
            "shape terms smemtile.triton applies (smemtile/model/gemm_fit.py)",
            "gpu": "NVIDIA H200",
            "gpu_key": "h200",
            "arch": "sm_90",
            "sweeps": [str(p) for p in args.triton],
            "held_out": "none: every shape of the sweeps is fitted; criterion_leave_one_shape_out scores each "
            "shape with a fit that left it out",
            "commit": commit(),
            "date": now,
            "kernel": "bench/bench_kernels.py matmul_kernel (Triton 3.6, triton.testing.do_bench median)",
            "command": "python -m bench.tune_h200 --triton " + " ".join(str(p) for p in args.triton),
            "expected_error": f"rms {t['rms_log_error_in_sample']:.0%} (log error of the prediction over the "
            f"{t['observations']} measured configurations it was fitted on)",
            "criterion_summary": {
                "in_sample": sum(v["within_5pct"] for v in t["criterion_in_sample"].values()),
                "leave_one_shape_out": sum(v["within_5pct"] for v in left_out.values()),
                "shapes": len(left_out),
            },
            **t,
        }
        ((args.out or DATA) / "triton_h200.json").write_text(json.dumps(doc, indent=1) + "\n")
        print(
            f"triton: {t['observations']} observations, rms log error {t['rms_log_error_in_sample']:.3f}; #1 within "
            f"5 % of its top 8 on {doc['criterion_summary']['in_sample']} of {len(left_out)} shapes in-sample, "
            f"{doc['criterion_summary']['leave_one_shape_out']} leaving each out"
        )


if __name__ == "__main__":
    main()
