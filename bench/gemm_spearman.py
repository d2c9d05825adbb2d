"""Issue 20, "Spearman between predicted and measured >= 0.7 per family", for the tensor-core families: the
tile model of ``hgemm`` (the roofline with hgemm's measured factors, smemtile/families/hgemm/calibration_h200.yaml,
from 4096^3, 8192^3, 64x8192x4096 and 4095x4097x1023) and of ``wgmma_gemm`` (the roofline with its measured
tile efficiency, families/wgmma_gemm/tiles.py, from 4096^3 and 8192^3) over their whole ranked lists, on shapes
none of their runs measured.

Per shape, the candidates ``smemtile tiles M N K --dtype [--arch sm_90a]`` ranks, sampled as bench_memory.py's
plan spearman does (the model's top 12, then 24 at evenly spaced ranks of the rest, the last included; wgmma_gemm
ranks 24 tile shapes: all of them), each configured as ``generate`` builds the printed spec. On the GPU each is
checked (hgemm: against float64, bench_hgemm_family.bench_configs; wgmma_gemm: relative Frobenius error against
fp32 at most 5e-3, bf16 rounding alone gives ~1e-3, bench_wgmma.bench_shape) and timed with cuBLAS in the same
alternating rounds (512 MiB flush before every call, median, spread). ``score`` gives per shape the Spearman of predicted and measured TFLOP/s, over the whole sample
and over the top 12, the #1's gap to the best measured and the median |error|.

    python -m bench.gemm_spearman build [--family wgmma_gemm]   # CPU: NVRTC cubins into .cache/gemm_sp (carry)
    python -m bench.gemm_spearman run --family F --out $OUT/F_spearman.json     # GPU
    python -m bench.gemm_spearman score bench/results/hgemm_h200_session4_spearman.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from bench.bench_memory import spread_ranks  # noqa: E402

CACHE = ROOT / ".cache" / "gemm_sp"
ARCH = {"hgemm": "sm_90", "wgmma_gemm": "sm_90a"}
# never measured by the family's runs: a square between the fitted ones, a wide one in bf16, a deep-K one
SHAPES = {
    "hgemm": [(6144, 6144, 6144, "f16"), (2048, 8192, 4096, "bf16"), (3072, 5120, 8192, "f16")],
    "wgmma_gemm": [(6144, 6144, 6144, "bf16"), (2048, 8192, 4096, "bf16"), (3072, 5120, 8192, "f16")],
}


def plan(family: str) -> list[dict]:
    """Per shape: the sampled candidates with the model's rank and prediction, and the configuration."""
    from smemtile.families import FAMILIES, configure
    from smemtile.families.hgemm.tiles import _config, tile_params
    from smemtile.model.arch import get_arch

    fam, arch, out = FAMILIES[family], get_arch(ARCH[family]), []
    for m, n, k, dt in SHAPES[family]:
        problem = {"M": m, "N": n, "K": k, "dtype": dt}
        ranked = fam.ranker(problem, arch.name, None).report.ranked
        for i in spread_ranks(len(ranked)):
            s = ranked[i]
            if family == "hgemm":  # as tile_spec prints it: the family's swizzles, MIN_BLOCKS from the model
                params = {**tile_params(s.cfg), "MIN_BLOCKS": max(1, min(4, s.blocks_per_sm))}
                cfg = _config(fam, params, problem, arch, check=True)
            else:
                params = s.cfg.params()
                cfg = configure(fam, {**params, **problem}, {}, arch)
            out.append(
                {
                    "shape": [m, n, k, dt],
                    "label": s.cfg.label,
                    "rank": s.rank,
                    "of": len(ranked),
                    "predicted_tflops": s.tflops,
                    "params": params,
                    "cfg": cfg,
                }
            )
    return out


def cmd_build(args) -> None:
    from concurrent.futures import ProcessPoolExecutor

    os.environ["SMEMTILE_CACHE_DIR"] = str(CACHE)
    todo = plan(args.family)
    print(
        f"{args.family}: {len(todo)} configurations on {len(SHAPES[args.family])} shapes into {CACHE}",
        flush=True,
    )
    with ProcessPoolExecutor(args.jobs) as ex:
        for e, what in zip(todo, ex.map(_build_one, [e["cfg"] for e in todo]), strict=True):
            print(f"  {' x '.join(map(str, e['shape']))} #{e['rank']:<4} {e['label']:<34} {what}", flush=True)


def _build_one(cfg) -> str:
    from smemtile.gpu.run import compile_config

    try:
        res = next(iter(compile_config(cfg).resources.values()))
        return f"{res.registers} regs, {res.spills} B spilled"
    except Exception as e:  # report, never abort the batch
        return f"FAILED {type(e).__name__}: {str(e).splitlines()[0]}"


def cmd_run(args) -> None:
    import subprocess

    from bench.bench_hgemm_family import FLUSH_BYTES, bench_configs, torch_setup
    from bench.bench_wgmma import bench_shape
    from smemtile.gpu.run import open_device

    os.environ.setdefault("SMEMTILE_CACHE_DIR", str(CACHE))
    torch = torch_setup()
    dev = open_device(torch.cuda.current_device())
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    commit = (
        args.commit
        or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    )  # the device copy's git may be stale
    todo, rows = plan(args.family), []
    for shape in SHAPES[args.family]:
        mine = [e for e in todo if tuple(e["shape"]) == shape]
        cfgs = {e["label"]: e["cfg"] for e in mine}
        if args.family == "hgemm":
            ours = bench_configs(torch, dev, flush, " x ".join(map(str, shape)), cfgs, args.rounds)["ours"]
        else:  # wgmma_gemm: bench_wgmma's path (K-major B, TMA descriptors), checked against fp32
            got = bench_shape(
                shape[:3], shape[3], list(cfgs), dev, torch, flush, args.rounds, print, cfgs=cfgs
            )
            ours = {
                r["name"]: {
                    "tflops": r["tflops"],
                    "ratio": r["vs_cublas"],
                    "spread": r["spread"],
                    "correct": r["rel_error_fro"] <= 5e-3,
                    "registers": r["registers"],
                    "rel_err": r["rel_error_fro"],
                }
                for r in got
                if r["name"] != "cuBLAS"
            }
        for e in mine:
            o = ours.get(e["label"])
            if o is None:  # not loaded (reported by the bench)
                continue
            rows.append(
                {k: v for k, v in e.items() if k != "cfg"}
                | {
                    "measured_tflops": o["tflops"],
                    "ratio": o["ratio"],
                    "spread": o["spread"],
                    "correct": o["correct"],
                    "registers": o["registers"],
                    "rel_err": o["rel_err"],
                }
            )
            print(
                f"{' x '.join(map(str, shape)):<22} #{e['rank']:<4} {e['label']:<34} predicted "
                f"{e['predicted_tflops']:6.1f} measured {o['tflops']:6.1f} ({o['ratio']:.3f}x cuBLAS) "
                f"{'ok' if o['correct'] else 'WRONG'}",
                flush=True,
            )
        args.out.write_text(
            json.dumps(
                {
                    "family": args.family,
                    "commit": commit,
                    "gpu": torch.cuda.get_device_name(),
                    "rounds": args.rounds,
                    "rows": rows,
                },
                indent=1,
            )
        )
        torch.cuda.empty_cache()


def score(rows: list[dict]) -> dict:
    """Per shape: Spearman (predicted vs measured TFLOP/s) over the correct rows and over the model's top 12, the
    #1's gap to the best measured, the median |predicted / measured - 1|."""
    from smemtile.model.tiling_model import spearman

    out = {}
    for key in dict.fromkeys(" x ".join(map(str, r["shape"])) for r in rows):
        mine = sorted(
            (r for r in rows if " x ".join(map(str, r["shape"])) == key and r["correct"]),
            key=lambda r: r["rank"],
        )
        top = mine[:12]
        best = max(r["measured_tflops"] for r in mine)
        out[key] = {
            "n": len(mine),
            "of": mine[0]["of"],
            "spearman": spearman([r["predicted_tflops"] for r in mine], [r["measured_tflops"] for r in mine]),
            "spearman_top12": spearman(
                [r["predicted_tflops"] for r in top], [r["measured_tflops"] for r in top]
            ),
            "top1": mine[0]["label"],
            "top1_gap_to_best": 1 - mine[0]["measured_tflops"] / best,
            "top1_ratio_to_cublas": mine[0]["ratio"],
            "best_measured": max(mine, key=lambda r: r["measured_tflops"])["label"],
            "median_abs_error": statistics.median(
                abs(r["predicted_tflops"] / r["measured_tflops"] - 1) for r in mine
            ),
        }
    return out


def cmd_score(args) -> None:
    doc = json.loads(args.results.read_text())
    doc["score"] = score(doc["rows"])
    args.results.write_text(json.dumps(doc, indent=1))
    for key, s in doc["score"].items():
        print(
            f"{key:<24} n {s['n']:>2} of {s['of']:<4} Spearman {s['spearman']:.2f} (top 12 {s['spearman_top12']:.2f}) "
            f"#1 {s['top1']} gap {s['top1_gap_to_best']:.1%} ({s['top1_ratio_to_cublas']:.3f}x cuBLAS) "
            f"median |error| {s['median_abs_error']:.1%}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="compile every sampled configuration (CPU)")
    b.add_argument("--jobs", type=int, default=1)
    r = sub.add_parser("run", help="check and time on the GPU")
    for p in (b, r):
        p.add_argument("--family", choices=sorted(SHAPES), default="hgemm")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--rounds", type=int, default=9)
    r.add_argument("--commit", help="the commit being measured (the device copy's git HEAD can be stale)")
    s = sub.add_parser("score", help="Spearman and the #1's gap per shape, into the results file")
    s.add_argument("results", type=Path)
    args = ap.parse_args()
    {"build": cmd_build, "run": cmd_run, "score": cmd_score}[args.cmd](args)


if __name__ == "__main__":
    main()
