"""Issue 20, "Spearman between predicted and measured >= 0.7 per family", for the tensor-core families: the
tile model of ``hgemm`` (the roofline with hgemm's measured factors, smemtile/families/hgemm/calibration_h200.yaml,
from 4096^3, 8192^3, 64x8192x4096 and 4095x4097x1023) and of ``wgmma_gemm`` (the roofline with its measured
tile efficiency, families/wgmma_gemm/tiles.py, from 4096^3 and 8192^3) over their whole ranked lists, on shapes
none of their runs measured.

The measurement is the family's ``heldout`` plan (its task.yaml: the held-out shapes; per shape the candidates
``smemtile tiles`` ranks, the model's top 12 and 24 at evenly spaced ranks of the rest, the last included;
wgmma_gemm ranks 24 tile shapes: all of them), each built as ``generate`` builds the printed spec, checked against
float64 and timed with cuBLAS in the same alternating rounds::

    python -m bench.run hgemm heldout --out $OUT/hgemm_spearman.json        # on the GPU (bench/README.md)
    python -m bench.gemm_spearman score $OUT/hgemm_spearman.json            # no GPU: the score, into the file

``score`` gives per shape the Spearman of predicted and measured TFLOP/s, over the whole sample and over the
top 12, the #1's gap to the best measured and the median |error|. It reads the runner's results and the rows
this script's own runs wrote before (bench/results/hgemm_h200_session4_spearman.json).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def rows_of(doc: dict) -> list[dict]:
    """The scored rows: a runner results file's ranked, correct, timed configurations (``predicted`` from the
    model, ``tflops`` measured), or the ``rows`` of this script's earlier runs as they are."""
    if "rows" in doc:
        return doc["rows"]
    out = []
    for case in doc["cases"]:
        p = case["problem"]
        shape = [p["M"], p["N"], p["K"], p["dtype"]]
        for r in case["configs"]:
            pred = r.get("predicted")
            if not pred or pred.get("tflops") is None or "tflops" not in r:
                continue
            out.append(
                {
                    "shape": shape,
                    "label": r["label"],
                    "rank": pred["rank"],
                    "of": pred["of"],
                    "predicted_tflops": pred["tflops"],
                    "measured_tflops": r["tflops"],
                    "ratio": r["ratio"],
                    "spread": r["spread"],
                    "correct": r["correct"],
                    "registers": r.get("registers"),
                    "rel_err": r.get("max_rel_error"),
                }
            )
    return out


def score(rows: list[dict]) -> dict:
    """Per shape: Spearman (predicted vs measured TFLOP/s) over the correct rows and over the model's top 12, the
    #1's gap to the best measured, the median |predicted / measured - 1|."""
    from smemtile.model.fitting import spearman

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
    doc["score"] = score(rows_of(doc))
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
    s = sub.add_parser("score", help="Spearman and the #1's gap per shape, into the results file")
    s.add_argument("results", type=Path)
    args = ap.parse_args()
    cmd_score(args)


if __name__ == "__main__":
    main()
