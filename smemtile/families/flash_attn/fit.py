"""The flash_attn PATH 1 tile model's fitting: the constants of ``flash_attn_h200.json`` from H200 measurements.

``python -m smemtile.families.flash_attn.fit fit RUN.json [RUN.json ...]`` fits, per configuration (head_dim, BN,
STAGES, OVERLAP, PERSISTENT), the KV loop's rate and, per grid kind (one CTA per item / persistent), the cost of a
work item outside its loop, minimising the squared log time error of :func:`hopper.schedule_time` over the runs'
rows (a grid over the item cost, a golden-section search of each rate: separable, deterministic), and writes the
JSON. ``score CAL.json RUN.json ...`` prints the error of the shipped constants on other runs (held-out shapes)
and the ranking quality per shape (Spearman). Pure numpy, no CUDA.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

from smemtile.families.flash_attn import hopper

SMS = 132  # the H200's SMs: every run was measured on it
ROOT = Path(__file__).resolve().parents[3]  # the repository (bench/results)


def rows_of(path: str | Path) -> list[dict]:
    """The PATH 1 rows of a bench.run results file: problem, key, measured seconds, the case's reference."""
    doc = json.loads(Path(path).read_text())
    out = []
    for case in doc["cases"]:
        for c in case["configs"]:
            p = c["params"]
            if p.get("PATH") != 1 or not c.get("correct", True) or c.get("median_ms") is None:
                continue
            prob = {**case["problem"], **c.get("problem", {})}
            q = {
                "batch": prob["batch"],
                "heads": prob["heads"],
                "seq_q": prob["seq_q"],
                "seq_kv": prob.get("seq_kv") or prob["seq_q"],
                "head_dim": prob["head_dim"],
                "causal": prob.get("causal", 0),
            }
            out.append(
                {
                    "case": case["case"],
                    "q": q,
                    "bn": p["BN"],
                    "key": hopper.cal_key(
                        q["head_dim"], p["BN"], p["STAGES"], p["OVERLAP"], p.get("PERSISTENT", 0)
                    ),
                    "persistent": p.get("PERSISTENT", 0),
                    "seconds": c["median_ms"] * 1e-3,
                    "source": str(path),
                }
            )
    return out


def _time(row: dict, rate_tflops: float, item_s: float) -> float:
    t_tile = hopper.tile_flops(row["q"]["head_dim"], row["bn"]) / (rate_tflops * 1e12 / SMS)
    return hopper.schedule_time(row["q"], row["bn"], t_tile, item_s, SMS, bool(row["persistent"]))


def _sq_err(rows: list[dict], rate: float, item_s: float) -> float:
    return sum(math.log(_time(r, rate, item_s) / r["seconds"]) ** 2 for r in rows)


def _best_rate(rows: list[dict], item_s: float) -> tuple[float, float]:
    """Golden-section search of log(rate) in [100, 2000] TFLOP/s: (rate, squared log error)."""
    lo, hi = math.log(100.0), math.log(2000.0)
    g = (math.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = _sq_err(rows, math.exp(a), item_s), _sq_err(rows, math.exp(b), item_s)
    for _ in range(40):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = _sq_err(rows, math.exp(a), item_s)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = _sq_err(rows, math.exp(b), item_s)
    x = (lo + hi) / 2
    return math.exp(x), _sq_err(rows, math.exp(x), item_s)


ITEM_GRID_S = tuple(i * 0.25e-6 for i in range(0, 41))  # 0 .. 10 us


def fit(rows: list[dict], item_grid: dict | None = None) -> dict:
    """{"rates": {key: TFLOP/s}, "item_s": {"0": s, "1": s}} minimising the squared log error; ``item_grid``: the
    item costs tried per grid kind ("0", "1"; default :data:`ITEM_GRID_S` for both)."""
    by_key: dict[str, list[dict]] = {}
    for r in rows:
        by_key.setdefault(r["key"], []).append(r)
    rates, item = {}, {}
    for pers in (0, 1):
        keys = [k for k, rs in by_key.items() if rs[0]["persistent"] == pers]
        if not keys:
            continue
        best = None
        for item_s in (item_grid or {}).get(str(pers), ITEM_GRID_S):
            got = {k: _best_rate(by_key[k], item_s) for k in keys}
            total = sum(e for _, e in got.values())
            if best is None or total < best[0]:
                best = (total, item_s, {k: r for k, (r, _) in got.items()})
        _, item[str(pers)], fitted = best
        rates.update(fitted)
    return {"rates": dict(sorted(rates.items())), "item_s": item}


def run_paths(cal: dict) -> list[Path]:
    """The results files the calibration names (its ``run`` field), from the repository root."""
    return [ROOT / r.split(" (")[0] for r in cal["run"].split(", ")]


def reproduce(*, full: bool = False) -> tuple[dict, dict]:
    """(stored, refit): the shipped constants and the same fit again on the rows of the runs it names. Without
    ``full`` the item costs stay at the stored values and only the rates are searched again (seconds); ``full``
    repeats the grid over the item costs too (about a minute)."""
    cal = hopper.load_calibration()
    rows = [r for p in run_paths(cal) for r in rows_of(p)]
    grid = None if full else {k: (v,) for k, v in cal["item_s"].items()}
    got = fit(rows, grid)
    return {"rates": cal["rates"], "item_s": cal["item_s"]}, got


def errors(cal: dict, rows: list[dict]) -> list[dict]:
    """Per row: predicted / measured - 1 with ``cal``'s constants (rows whose key it lacks are skipped)."""
    out = []
    for r in rows:
        if r["key"] not in cal["rates"]:
            continue
        t = _time(r, cal["rates"][r["key"]], cal["item_s"][str(r["persistent"])])
        out.append({"case": r["case"], "key": r["key"], "error": t / r["seconds"] - 1.0})
    return out


def spearman(xs: list[float], ys: list[float]) -> float:
    rx, ry = np.argsort(np.argsort(xs)), np.argsort(np.argsort(ys))
    return float(np.corrcoef(rx, ry)[0, 1]) if len(xs) > 2 else float("nan")


def score(cal: dict, rows: list[dict]) -> dict:
    """Median |time error|, and per shape the Spearman of predicted against measured time and the measured time
    of the model's #1 against the best measured (the ranking's regret)."""
    errs = errors(cal, rows)
    shapes: dict[str, list] = {}
    for r, e in zip([r for r in rows if r["key"] in cal["rates"]], errs, strict=True):
        shapes.setdefault(r["case"], []).append((r["seconds"] * (1 + e["error"]), r["seconds"], r["key"]))
    return _summary([e["error"] for e in errs], {case: _shape_score(pts) for case, pts in shapes.items()})


def _shape_score(pts: list[tuple]) -> dict:
    """One shape's (predicted, measured, key) points: their Spearman and the model's #1's regret."""
    pred, meas = [p for p, _, _ in pts], [m for _, m, _ in pts]
    return {
        "configs": len(pts),
        "spearman": round(spearman(pred, meas), 3),
        "top1_regret": round(min(pts)[1] / min(meas) - 1.0, 4),
    }


def _summary(errs: list[float], per: dict) -> dict:
    med = float(np.median([abs(e) for e in errs])) if errs else float("nan")
    return {"rows": len(errs), "median_abs_error": round(med, 4), "shapes": per}


# ---- PATH 0 (mma.sync): two constants of tiles.py's issue model ----------------------------------------------
PATH0_RUN = "bench/results/session10/flash_attn_path0_bench_h200_run2.json"


def path0_rows(path: str | Path | None = None) -> list[tuple[dict, tuple[int, int, int, int], float]]:
    """(problem, (BM, BN, STAGES, WARPS), measured seconds) of a PATH 0 bench run, each configuration once per
    case."""
    doc = json.loads(Path(path or ROOT / PATH0_RUN).read_text())
    rows = []
    for case in doc["cases"]:
        seen = set()
        for c in case["configs"]:
            p = c["params"]
            key = (p["BM"], p["BN"], p["STAGES"], p["WARPS"])
            if p.get("PATH", 0) == 0 and key not in seen and c.get("median_ms"):
                seen.add(key)
                rows.append((case["problem"], key, c["median_ms"] * 1e-3))
    return rows


def path0_times(rows) -> list[float]:
    """tiles.py's predicted seconds of each PATH 0 row on the H200 (the module's constants as they are now)."""
    from smemtile.families import FAMILIES
    from smemtile.families.flash_attn import tiles as T
    from smemtile.model.arch import get_arch
    from smemtile.model.tiling_gpus import get_gpu

    fam, gpu, arch = FAMILIES["flash_attn"], get_gpu(None, "sm_90"), get_arch("sm_90")
    out = []
    for prob, (bm, bn, st, _w), _ in rows:
        m = T.FlashAttnTileModel(fam)
        m.space(prob, arch)
        out.append(m.predict(T.FaTile(bm, bn, st), gpu).time_s)
    return out


def score_path0(rows) -> dict:
    """PATH 0's model against a run it was not fitted on: median |time error|, and per shape the Spearman of
    predicted against measured time and the measured time of the model's #1 against the best measured."""
    pred = path0_times(rows)
    shapes: dict[str, list] = {}
    for (prob, key, meas), t in zip(rows, pred, strict=True):
        shapes.setdefault(json.dumps(prob, sort_keys=True), []).append((t, meas, key))
    per = {case: {**_shape_score(pts), "top1": list(min(pts)[2])} for case, pts in shapes.items()}
    return _summary([t / r[2] - 1.0 for t, r in zip(pred, rows, strict=True)], per)


def fit_path0(rows=None, sync_keys=range(0, 81, 2)) -> dict:
    """tiles.py's TILE_SYNC_KEYS (a grid) and MMA_SYNC_EFF (for each, the geometric-mean scale that centres the
    log errors) minimising the squared log time error of PATH 0's predictions on the H200 rows; the module's
    constants are restored afterwards. Returns the pair and the rms log error."""
    from smemtile.families.flash_attn import tiles as T

    rows = rows or path0_rows()
    saved = (T.TILE_SYNC_KEYS, T.MMA_SYNC_EFF)

    best = None
    try:
        for k in sync_keys:
            T.TILE_SYNC_KEYS, T.MMA_SYNC_EFF = k, 0.62
            shift = float(np.mean([math.log(t / r[2]) for t, r in zip(path0_times(rows), rows, strict=True)]))
            T.MMA_SYNC_EFF = 0.62 * math.exp(shift)
            err = sum(math.log(t / r[2]) ** 2 for t, r in zip(path0_times(rows), rows, strict=True))
            if best is None or err < best[0]:
                best = (err, k, T.MMA_SYNC_EFF)
    finally:
        T.TILE_SYNC_KEYS, T.MMA_SYNC_EFF = saved
    err, k, eff = best
    return {
        "TILE_SYNC_KEYS": k,
        "MMA_SYNC_EFF": eff,
        "rms_log_error": math.sqrt(err / len(rows)),
        "rows": len(rows),
    }


def main(argv: list[str]) -> int:
    if argv[:1] == ["path0"]:
        print(json.dumps(fit_path0(path0_rows(argv[1]) if len(argv) > 1 else None), indent=1))
        return 0
    if argv[:1] == ["path0-score"] and len(argv) == 2:
        print(json.dumps(score_path0(path0_rows(argv[1])), indent=1))
        return 0
    if len(argv) < 2 or argv[0] not in ("fit", "score"):
        print(
            "usage: python -m smemtile.families.flash_attn.fit fit RUN.json ... | score CAL.json RUN.json ... | "
            "path0 [RUN.json] | path0-score RUN.json"
        )
        return 2
    if argv[0] == "fit":
        rows = [r for p in argv[1:] for r in rows_of(p)]
        cal = fit(rows)
        cal["fit"] = score(cal, rows)
        print(json.dumps(cal, indent=1))
        return 0
    cal = json.loads(Path(argv[1]).read_text())
    rows = [r for p in argv[2:] for r in rows_of(p)]
    print(json.dumps(score(cal, rows), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
