"""The stencil2d tile model's data file, ``smemtile/model/data/stencil_h200.json`` (no GPU).

    PYTHONPATH=. python bench/fit_stencil.py table     # NVRTC + the bank model for every candidate, R = 1..4
    PYTHONPATH=. python bench/fit_stencil.py fit       # the constants from the H200 runs, scored on the held-out

``table``: every candidate of ``smemtile.model.tiling_stencil.candidates()`` the family's rules accept, at each
radius, compiled with NVRTC for sm_90 as ``verify`` builds it (dense tile): registers and spilled bytes, and the
shared-memory wavefronts of one block from the bank model on the family's own accesses. Written into the data
file under ``candidates`` (with the compiler and the sha256 of stencil2d.cu they were computed from).

``fit``: the stencil cases of ``bench/results/memory_h200_run1.json`` and ``run3.json`` (H200, 15 and 20
alternating rounds against a device copy timed in the same rounds). Every 4096^2 measurement is labelled ``fit``,
every 8192^2 one ``held_out``: the constants are fitted on the first only (``tiling_stencil.fit``), then both are
scored. Each row keeps the blocks per SM it ran with (run 1's kernel text had slightly different registers);
the copy's measured times at both sizes are the reference curve (the copy is not the fitted kernel).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from smemtile.families import FAMILIES, configure  # noqa: E402
from smemtile.model import tiling_stencil as ts  # noqa: E402

DATA = ROOT / "smemtile" / "model" / "data" / ts.DATA_FILE
RUNS = (("run1", ROOT / "bench" / "results" / "memory_h200_run1.json"),
        ("run3", ROOT / "bench" / "results" / "memory_h200_run3.json"))  # fmt: skip
FIT_N, HELD_N, SMS = 4096, 8192, 132


def source_sha() -> str:
    return hashlib.sha256(FAMILIES["stencil2d"].source().encode()).hexdigest()[:16]


def _one(job: tuple[int, dict]) -> tuple[int, str, list | None]:
    from smemtile.model.analysis import analyze_spec
    from smemtile.pipeline.build import compile_config

    r, p = job
    fam = FAMILIES["stencil2d"]
    cfg = configure(fam, {**p, "R": r, "ny": 4096, "nx": 4096}, check=False)
    if fam.problems(cfg, accesses=False):
        return r, ts.label(p), None
    res = compile_config(cfg).resources[fam.name_expression(cfg)]
    wf = sum(int(a.bank.wavefronts.sum()) for a in analyze_spec(fam.spec(cfg)))
    return r, ts.label(p), [int(res.registers), int(res.spills or 0), wf]


def table(workers: int) -> dict:
    from smemtile.gpu.nvrtc import nvrtc_version

    jobs = [(r, p) for r in ts.RADII for p in ts.candidates()]
    out: dict = {str(r): {} for r in ts.RADII}
    with ProcessPoolExecutor(workers) as ex:
        for r, lab, row in ex.map(_one, jobs, chunksize=8):
            if row is not None:
                out[str(r)][lab] = row
    return {"compiler": f"NVRTC {nvrtc_version()} (nvidia-cuda-nvrtc 13.0.88), sm_90, dense tile",
            "source_sha256": source_sha(), "rows": out}  # fmt: skip


def measured_rows() -> list[dict]:
    fam = FAMILIES["stencil2d"]
    from smemtile.model.analysis import analyze_spec

    rows = []
    for run, path in RUNS:
        d = json.loads(path.read_text())
        for case in d["cases"]:
            if case["family"] != "stencil2d":
                continue
            n = case["problem"]["ny"]
            for x in case["configs"]:
                if x["label"].startswith("sample") or not x["correct"]:
                    continue  # the sample is the default configuration with an explicit dense layout
                p = dict(x["params"])
                r = p.pop("R")
                cfg = configure(fam, {**p, "R": r, "ny": n, "nx": n})
                wf = sum(int(a.bank.wavefronts.sum()) for a in analyze_spec(fam.spec(cfg)))
                rows.append({"run": run, "commit": d["commit"], "R": r, "params": p, "label": ts.label(p),
                             "ny": n, "nx": case["problem"]["nx"], "time_us": x["median_ms"] * 1e3,
                             "copy_us": case["copy"]["median_ms"] * 1e3, "ratio": x["ratio"],
                             "spread": x["spread"], "blocks_per_sm": x["blocks_per_sm"], "wavefronts_block": wf,
                             "set": "fit" if n == FIT_N else "held_out"})  # fmt: skip
    return rows


def spearman(a: list[float], b: list[float]) -> float:
    from smemtile.model.tiling_model import spearman as sp

    return float(sp(a, b))


def fit(cand: dict) -> dict:
    rows = measured_rows()
    fit_rows = [r for r in rows if r["set"] == "fit"]
    held = [r for r in rows if r["set"] == "held_out"]
    consts = ts.fit(fit_rows, SMS)
    e_signed = ts.errors(fit_rows, consts, SMS)
    e_fit = [abs(e) for e in e_signed]
    mid = statistics.median(e_signed)
    e_held = ts.errors(held, consts, SMS)
    for r, e in zip(held, e_held, strict=True):
        r["error"] = e
    copy: dict[float, list[float]] = {}
    for r in rows:
        copy.setdefault(8.0 * r["ny"] * r["nx"], []).append(r["copy_us"])
    measured: dict = {}
    for r in rows:
        key = f"{r['ny']}x{r['nx']}"
        measured.setdefault(str(r["R"]), {}).setdefault(r["label"], {}).setdefault(key, []).append(r["ratio"])
    for per in measured.values():
        for lab in per:
            per[lab] = {k: statistics.median(v) for k, v in per[lab].items()}
    doc = {
        "what": "constants of the stencil2d model, smemtile.model.tiling_stencil: time = t0 + smax_p(copy(bytes), "
        "rounds x L + wavefronts per SM / rate)",
        "gpu": "NVIDIA H200",
        "gpu_key": "h200",
        "sms": SMS,
        "archs": ["sm_90"],
        "run": ", ".join(str(p.relative_to(ROOT)) for _, p in RUNS),
        "commit": ", ".join(sorted({r["commit"] for r in rows})),
        "date": "2026-11-30",
        "method": "relative time error, least squares over the rows labelled fit (every stencil measurement at "
        f"{FIT_N}^2, R 1-4, runs 1 and 3: 48 rows), L, rate, WARPS and p on a refined grid, t0 >= 0 in "
        f"closed form; the rows labelled held_out ({HELD_N}^2, 48 rows) never fitted, only scored "
        "(bench/fit_stencil.py fit). Each row keeps the blocks per SM it ran with; wavefronts from "
        "smemtile's bank model on the family's accesses. The form: of six tried (with or without the "
        "occupancy term min(1, warps / WARPS), with or without a per-round tail term), the one with the "
        "lowest leave-one-configuration-out error on the fit rows (an exploratory script, not kept: 1.9 % "
        "median; without the occupancy term 2.7 %). The held-out rows were not a clean test of that choice: the form without the "
        "occupancy term had been scored on them first (1.4 % median error against this one's 4.2 %, "
        "which predicts the 8192^2 times about 4 % long), the tail terms were tried after that, and "
        "the 8192^2 ratios were in bench/NOTES.md throughout",
        "fit_shapes": [f"stencil R1-4 {FIT_N}^2"],
        "held_out_shapes": [f"stencil R1-4 {HELD_N}^2"],
        "min_fit_bytes": 8.0 * FIT_N * FIT_N,
        "copy": {"points": [[b, statistics.median(v)] for b, v in sorted(copy.items())]},
        "model": consts,
        "fit_median_error": statistics.median(e_fit),
        "fit_max_error": max(e_fit),
        "tie_band": statistics.median(abs(e - mid) for e in e_signed),
        "held_out_median_error": statistics.median(abs(e) for e in e_held),
        "held_out_max_error": max(abs(e) for e in e_held),
        "compiler": cand["compiler"],
        "source_sha256": cand["source_sha256"],
        "measured": measured,
        "held_out": [],
        "candidates": cand["rows"],
    }
    for (
        r_
    ) in ts.RADII:  # per radius: the model's order of the measured configurations against the measured one
        hr = [r for r in held if r["R"] == r_]
        pred = [float(ts.model_time_us(*ts.fit_inputs(r, SMS), consts)) for r in hr]
        meas = [r["time_us"] for r in hr]
        ranked, _ = ts.rank_stencil(HELD_N, HELD_N, r_, calibration=doc)
        order = {s.label: s.rank for s in ranked}
        by_label: dict[str, list[float]] = {}
        for r in hr:
            by_label.setdefault(r["label"], []).append(r["ratio"])
        med = {k: statistics.median(v) for k, v in by_label.items()}
        best = max(med, key=med.get)
        pick = min(med, key=lambda k: order.get(k, 10**9))
        doc["held_out"].append({
            "case": f"stencil R{r_} {HELD_N}^2", "model_1": ranked[0].label,
            "model_1_measured": ranked[0].label in med, "pick_among_measured": pick, "pick_rank": order.get(pick),
            "pick_ratio": med[pick], "best": best, "best_ratio": med[best], "pick_vs_best": med[pick] / med[best],
            "default_rank": order.get(ts.label(ts.DEFAULTS)), "spearman": spearman(pred, meas),
            "median_error": statistics.median(abs(r["error"]) for r in hr),
            "max_error": max(abs(r["error"]) for r in hr),
        })  # fmt: skip
    return doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("table", "fit"))
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    old = json.loads(DATA.read_text()) if DATA.exists() else {}
    if a.what == "table":
        cand = table(a.workers)
        doc = {**old, "compiler": cand["compiler"], "source_sha256": cand["source_sha256"],
               "candidates": cand["rows"]}  # fmt: skip
    else:
        doc = fit(
            {"compiler": old["compiler"], "source_sha256": old["source_sha256"], "rows": old["candidates"]}
        )
    text = json.dumps(doc, indent=1)
    text = re.sub(
        r"\[\s+([-\d.e+]+),\s+([-\d.e+]+)(?:,\s+([-\d.e+]+))?\s+\]",  # short lists on one line
        lambda m: "[" + ", ".join(g for g in m.groups() if g is not None) + "]",
        text,
    )
    DATA.write_text(text + "\n")
    print(json.dumps({k: v for k, v in doc.items() if k not in ("candidates", "measured")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
