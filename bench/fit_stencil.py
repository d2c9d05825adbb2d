"""The stencil2d tile model's data file, ``smemtile/families/stencil2d/stencil_h200.json`` (no GPU).

    python -m bench.fit_stencil table     # NVRTC + the bank model for every candidate, R = 1..4
    python -m bench.fit_stencil cv        # the candidate forms, leave-one-radius-out (fit rows only)
    python -m bench.fit_stencil fit       # the shipped form's constants from every fit row

``table``: every candidate of ``smemtile.families.stencil2d.tiles.candidates()`` the family's rules accept, at each
radius, compiled with NVRTC for sm_90 as ``verify`` builds it (dense tile): registers and spilled bytes, and the
shared-memory wavefronts of one block from the bank model on the family's own accesses. Written into the data
file under ``candidates`` (with the compiler and the sha256 of stencil2d.cu they were computed from).

``fit``: the stencil cases of ``bench/results/memory_h200_run1.json``, ``run3.json`` (H200, 15 and 20 alternating
rounds against a device copy timed in the same rounds; 4096^2 and 8192^2) and ``memory_h200_session4_spearman.json``
(session 4: 36 configurations per radius spanning the model's whole ranking at 8192^2, 30 rounds). Since session 4
every one of these rows is fit data (the session-4 sweep was scored as held out first, then became fit data); the
held-out test is a sweep of shapes none of these measured (``bench/bench_memory.py --plan heldout``). Each row keeps
the blocks per SM it ran with (run 1's kernel text had slightly different registers); the copy's measured times
at both sizes are the reference curve (the copy is not the fitted kernel). Wavefronts are the table's (dense tile),
the ones the model ranks with, also for the session-4 configurations the fix search padded.

``cv``: each form of ``smemtile.families.stencil2d.fit.FORMS`` fitted on three radii and scored on the fourth (every fit row of it:
median |time error|; Spearman over the session-4 sweep of that radius), written into the data file under
``form_choice``; the shipped form (``fit.FORM``) is the one with the lowest mean of the four
medians, and its leave-one-radius-out median is the expected error ``tiles`` states until a held-out sweep
replaces it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from smemtile.families import FAMILIES, configure  # noqa: E402
from smemtile.families.stencil2d import fit as sf  # noqa: E402
from smemtile.families.stencil2d import tiles as ts  # noqa: E402
from smemtile.model.fitting import spearman  # noqa: E402

DATA = Path(ts.__file__).parent / ts.DATA_FILE  # next to the model that reads it
RUNS = (
    ("run1", ROOT / "bench" / "results" / "memory_h200_run1.json"),
    ("run3", ROOT / "bench" / "results" / "memory_h200_run3.json"),
    ("session4", ROOT / "bench" / "results" / "memory_h200_session4_spearman.json"),
)
SMS, RATE_MAX = 132, 1980.0  # one shared-memory wavefront per clock at the H200's 1980 MHz


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
    return {
        "compiler": f"NVRTC {nvrtc_version()} (nvidia-cuda-nvrtc 13.0.88), sm_90, dense tile",
        "source_sha256": source_sha(),
        "rows": out,
    }


def measured_rows() -> list[dict]:
    """Every correct stencil measurement of the runs the data file names: the family's own reader."""
    return sf.measured_rows()


def cross_validate(rows: list[dict], forms=None, warps_range=range(1, 65)) -> dict:
    """Per form: fitted on three radii, scored on the fourth (median |time error| over all its rows, Spearman of
    predicted and measured times over its session-4 sweep), and the mean of the four."""
    out = {}
    for form in forms or sf.FORMS:
        per = {}
        for r_ in ts.RADII:
            train = [r for r in rows if r["R"] != r_]
            test = [r for r in rows if r["R"] == r_]
            c = sf.fit(train, SMS, warps_range, form=form, rate_max=RATE_MAX)
            e = sf.errors(test, c, SMS)
            sweep = [(r, x) for r, x in zip(test, e, strict=True) if r["run"] == "session4"]
            rho = spearman([r["time_us"] * (1 + x) for r, x in sweep], [r["time_us"] for r, _ in sweep])
            per[f"R{r_}"] = {
                "median_error": statistics.median(abs(x) for x in e),
                "spearman_sweep": rho,
                "rows": len(test),
            }
        out[form] = {
            "held_out_radius": per,
            "mean_median_error": statistics.fmean(v["median_error"] for v in per.values()),
            "mean_spearman": statistics.fmean(v["spearman_sweep"] for v in per.values()),
        }
        print(
            f"{form:46s} "
            + " ".join(f"{k} {v['median_error']:.1%}/{v['spearman_sweep']:.2f}" for k, v in per.items())
            + f"  mean {out[form]['mean_median_error']:.1%} / {out[form]['mean_spearman']:.3f}",
            flush=True,
        )
    return out


def fit(cand: dict, old: dict) -> dict:
    rows = measured_rows()
    form_choice = old.get("form_choice") or cross_validate(rows)
    consts = sf.fit(rows, SMS, form=sf.FORM, rate_max=RATE_MAX)
    e_signed = sf.errors(rows, consts, SMS)
    e_fit = [abs(e) for e in e_signed]
    mid = statistics.median(e_signed)
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
    chosen = form_choice[sf.FORM]
    shapes = sorted({(r["ny"], r["nx"]) for r in rows})
    return {
        "what": "constants of the stencil2d model, smemtile.model.tiling_stencil: time = t0 + smax_p(smax_p("
        "copy(bytes), rounds x L + wavefronts per SM / (rate x min(1, warps / WARPS)) + global-load warp "
        "instructions per SM x load), blocks per SM x block)",
        "gpu": "NVIDIA H200",
        "gpu_key": "h200",
        "sms": SMS,
        "archs": ["sm_90"],
        "run": ", ".join(str(p.relative_to(ROOT)) for _, p in RUNS),
        "commit": ", ".join(sorted({r["commit"] for r in rows})),
        "date": "2026-12-01",
        "method": "relative time error, least squares over every row of the runs (all labelled fit: R 1-4 at "
        f"4096^2 and 8192^2, {len(rows)} rows; session 4's sweep of 144 configurations spanning the ranking "
        "was scored as held out first, then became fit data), Levenberg-Marquardt for t0, L, rate (at most "
        "one wavefront per clock), p, load and block for every WARPS 1..64 (bench/fit_stencil.py fit). The "
        f"form ({sf.FORM!r}) was chosen among tiling_stencil.FORMS by leave-one-radius-out on the fit rows "
        "only (form_choice: median |time error| of the held-out radius, Spearman over its session-4 sweep); "
        "the expected error until a held-out sweep is scored is that cross-validated median",
        "fit_shapes": [
            f"stencil R1-4 {ny}^2" if ny == nx else f"stencil R1-4 {ny}x{nx}" for ny, nx in shapes
        ],
        "held_out_shapes": ["leave-one-radius-out over the fit rows (cross-validation)"],
        "min_fit_bytes": 8.0 * min(ny * nx for ny, nx in shapes),
        "copy": {"points": [[b, statistics.median(v)] for b, v in sorted(copy.items())]},
        "model": consts,
        "fit_rows": len(rows),
        "fit_median_error": statistics.median(e_fit),
        "fit_max_error": max(e_fit),
        "tie_band": statistics.median(abs(e - mid) for e in e_signed),
        "held_out_median_error": statistics.fmean(
            v["median_error"] for v in chosen["held_out_radius"].values()
        ),
        "held_out_max_error": max(v["median_error"] for v in chosen["held_out_radius"].values()),
        "form": sf.FORM,
        "form_choice": form_choice,
        "compiler": cand["compiler"],
        "source_sha256": cand["source_sha256"],
        "measured": measured,
        "candidates": cand["rows"],
    }


def write_data(doc: dict, path: Path = DATA) -> None:
    """The data file as JSON, its short numeric lists (the candidates' rows, the copy's points) on one line."""
    text = json.dumps(doc, indent=1)
    text = re.sub(
        r"\[\s+([-\d.e+]+),\s+([-\d.e+]+)(?:,\s+([-\d.e+]+))?\s+\]",  # short lists on one line
        lambda m: "[" + ", ".join(g for g in m.groups() if g is not None) + "]",
        text,
    )
    path.write_text(text + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("table", "cv", "fit"))
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    old = json.loads(DATA.read_text()) if DATA.exists() else {}
    if a.what == "table":
        cand = table(a.workers)
        doc = {
            **old,
            "compiler": cand["compiler"],
            "source_sha256": cand["source_sha256"],
            "candidates": cand["rows"],
        }
    elif a.what == "cv":
        doc = {**old, "form_choice": cross_validate(measured_rows())}
    else:
        cand = {"compiler": old["compiler"], "source_sha256": old["source_sha256"], "rows": old["candidates"]}
        doc = fit(cand, old)
    write_data(doc)
    print(
        json.dumps(
            {k: v for k, v in doc.items() if k not in ("candidates", "measured", "form_choice")}, indent=1
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
