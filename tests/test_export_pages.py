"""``--export FILE.html`` of tiles, verify, tune and inspect, without a browser: each page parses, fetches
nothing, has its figures with their labels, and its figures and tables carry the numbers the command's --json
prints; a name that is not .html is one line and exit 2, with nothing written."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_report_page import parse

from smemtile.cli import main
from smemtile.pipeline.tune import summarize
from smemtile.report.pages_tune import tune_page

ROOT = Path(__file__).resolve().parent.parent
K = ROOT / "samples" / "kernels"
INSPECT = [
    str(K / "transpose_naive.cu"),
    "--kernel",
    "transpose",
    "--grid",
    "32,32",
    "--block",
    "32,8",
    "--args",
    str(K / "transpose_naive.args.yaml"),
    "--simulate",
    "--blocks",
    "1",
    "--warps",
    "2",
]
TRANSPOSE = str(ROOT / "samples" / "transpose_32x32.yaml")


def run(args: list[str], code: int = 0, env: dict | None = None):
    r = CliRunner().invoke(main, args, env=env)
    assert r.exit_code == code, (r.exit_code, r.output, r.exception)
    return r


def check_page(text: str) -> tuple:
    """The checks every page passes; the parsed page and its sections' ids."""
    p = parse(text)
    assert "http://" not in text and "https://" not in text
    assert not [t for t, _ in p.tags if t in ("script", "link", "img", "iframe", "object")]
    for t, a in p.tags:
        for k in ("src", "href"):
            assert k not in a or a[k].startswith("#"), (t, a)
    csp = [a for t, a in p.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0]["content"] and "script-src" not in csp[0]["content"]
    ids = [a["id"] for t, a in p.tags if t == "section"]
    toc = [a["href"][1:] for t, a in p.tags if t == "a"]
    assert toc == ids and ids  # the contents link every section, in order
    for svg in p.figures():
        assert svg.get("role") == "img" and svg.get("aria-label"), svg
    return p, ids


def section(text: str, key: str) -> str:
    m = re.search(rf'<section id="{key}">(.*?)</section>', text, re.S)
    assert m, key
    return m.group(1)


def cells(html: str) -> list[list[str]]:
    """The body rows of the first table in ``html``, as text."""
    body = re.search(r"<tbody>(.*?)</tbody>", html, re.S).group(1)
    return [
        [unescape(re.sub("<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)
    ]


# ---- tiles ----------------------------------------------------------------------------------------------------


def test_tiles_gemm_page_is_the_json_ranking(tmp_path):
    args = ["tiles", "1024", "1024", "1024", "--top", "5", "--rejected", "3"]
    doc = json.loads(run([*args, "--json"]).output)
    out = tmp_path / "tiles.html"
    env = {"SMEMTILE_CACHE_DIR": str(tmp_path / "nocache")}  # no tune cache: no measured points, no error
    run([*args, "--export", str(out)], env=env)
    text = out.read_text()
    p, ids = check_page(text)
    assert ids == ["ranking", "candidates", "rejected", "calibration"]
    (fig,) = p.figures(**{"data-figure": "tiles"})
    assert (
        fig["data-unit"] == "TFLOP/s"
        and fig["data-measured"] == "0"
        and "expected error" in fig["aria-label"]
    )
    dots = [a for t, a in p.tags if t == "circle" and "data-predicted" in a]
    assert [int(a["data-rank"]) for a in dots] == [c["rank"] for c in doc["candidates"]] == [1, 2, 3, 4, 5]
    assert [float(a["data-predicted"]) for a in dots] == [round(c["tflops"], 3) for c in doc["candidates"]]
    err = doc["calibration"]["median_error"]  # the whiskers: x (1 +- the calibration's expected error)
    assert err > 0 and f"+- {100 * err:.1f}%" in text
    rows = cells(section(text, "candidates"))
    assert [r[1] for r in rows] == [c["label"] for c in doc["candidates"]]
    assert [r[2] for r in rows] == [f"{c['tflops']:.2f}" for c in doc["candidates"]]
    rej = cells(section(text, "rejected"))
    assert [r[0] for r in rej] == [r["label"] for r in doc["rejected"]] and len(rej) == 3
    assert rej[0][2] == doc["rejected"][0]["reason"]
    cal = section(text, "calibration")
    assert doc["calibration"]["gpu"] in cal and doc["calibration"]["date"] in cal
    assert unescape(re.sub("<[^>]+>", "", cal)).count(doc["command"]) == 1
    assert "No measured results for this problem" in text


def _cache_line(key: str, label: str, value: float, problem: dict) -> str:
    row = {"status": "ok", "time_ms": 0.2, "value": value, "unit": "gbps", "label": label, "problem": problem}
    return json.dumps({"key": key, "row": row}) + "\n"


def test_tiles_family_page_marks_the_tune_cache_measurements(tmp_path):
    args = ["tiles", "--family", "transpose", "4096", "4096", "--top", "4", "--rejected", "2"]
    doc = json.loads(run([*args, "--json"]).output)
    second = doc["candidates"][1]["label"]
    cache = tmp_path / "tune.jsonl"
    cache.write_text(
        _cache_line("a", second, 3210.5, {"rows": 4096, "cols": 4096, "dtype": "f32"})
        + _cache_line("b", doc["candidates"][0]["label"], 999.0, {"rows": 8192, "cols": 8192, "dtype": "f32"})
        + _cache_line("c", "not a candidate", 123.0, {"rows": 4096, "cols": 4096, "dtype": "f32"})
    )  # only the first row is this problem's and one of its candidates
    out = tmp_path / "t.html"
    run([*args, "--export", str(out), "--cache", str(cache)])
    text = out.read_text()
    p, _ = check_page(text)
    (fig,) = p.figures(**{"data-figure": "tiles"})
    assert fig["data-unit"] == "GB/s" and fig["data-measured"] == "1" and "1 measured" in fig["aria-label"]
    marks = [a for t, a in p.tags if "data-measured" in a and t == "polyline"]
    assert [float(a["data-measured"]) for a in marks] == [3210.5]
    rows = cells(section(text, "candidates"))
    assert [r[3] for r in rows] == ["-", "3210.50", "-", "-"]  # the measured column beside the prediction
    assert [r[2] for r in rows] == [f"{c['gbps']:.1f}" for c in doc["candidates"]]
    cal = doc["calibration"]
    assert f"{cal['expected_error']:.1%}" in section(text, "calibration")


# ---- inspect --------------------------------------------------------------------------------------------------


def test_inspect_page_lines_heatmaps_and_the_fix(tmp_path):
    doc = json.loads(run(["inspect", *INSPECT, "--json"]).output)
    out = tmp_path / "i.html"
    run(["inspect", *INSPECT, "--export", str(out)])
    text = out.read_text()
    p, ids = check_page(text)
    assert ids == ["lines", "heatmaps", "fixes"]
    lines = sorted(doc["lines"], key=lambda d: -d["excessive"])
    rows = cells(section(text, "lines"))[: len(lines)]
    assert [r[0] for r in rows] == [f"transpose_naive.cu:{d['line']}" for d in lines]
    assert [r[4:7] for r in rows] == [
        [f"{d['l1_wavefronts_shared']:,.0f}", f"{d['ideal']:,.0f}", f"{d['excessive']:,.0f}"] for d in lines
    ]
    assert "tile[" in rows[0][1]  # the source text of the line
    # one heatmap per conflicted line: its worst instruction, from the recorded addresses
    conflicted = [d for d in lines if d["excessive"] > 0]
    heat = re.findall(r'<svg [^>]*data-figure="lanes-banks"[^>]*>', section(text, "heatmaps"))
    assert len(heat) == len(conflicted) == 1
    worst = max(
        (i for i in doc["instructions"] if i["line"] == conflicted[0]["line"]), key=lambda i: i["excessive"]
    )
    assert f'data-wavefronts="{worst["wavefronts_worst"]}"' in heat[0] and 'data-ideal="1"' in heat[0]
    assert f'data-access="i{worst["index"]}"' in heat[0]
    # the fix: declarations before / after and the same instruction re-derived under it
    fx = section(text, "fixes")
    f = doc["fixes"][0]
    assert unescape(f["declaration_before"][0]) in unescape(fx) and unescape(
        f["declaration_after"][0]
    ) in unescape(fx)
    pair = re.findall(r'<svg [^>]*data-figure="lanes-banks"[^>]*>', fx)
    variants = [re.search(r'data-variant="(\w+)"', s).group(1) for s in pair]
    access = {re.search(r'data-access="(\w+)"', s).group(1) for s in pair}
    waves = [int(re.search(r'data-wavefronts="(\d+)"', s).group(1)) for s in pair]
    assert variants == ["before", "after"] and len(access) == 1 and waves == [32, 1]
    assert f["recommended"]["describe"] == "pad 1"


# ---- verify ---------------------------------------------------------------------------------------------------


def test_verify_compile_only_page(tmp_path):
    r = CliRunner().invoke(main, ["verify", TRANSPOSE, "--compile-only", "--json"])
    if r.exit_code == 3:
        pytest.skip("no NVRTC here: " + r.output.strip())
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    out = tmp_path / "v.html"
    run(["verify", TRANSPOSE, "--compile-only", "--export", str(out)])
    text = out.read_text()
    p, ids = check_page(text)
    assert ids == ["variants", "kernels"]
    rows = cells(section(text, "variants"))
    assert [r[0] for r in rows] == [v["variant"] for v in doc["variants"]] == ["baseline", "fixed"]
    for row, v in zip(rows, doc["variants"], strict=True):
        m = v["occupancy"]["model"]
        assert row[5] == str(v["registers"]) and row[7] == str(v["static_smem_bytes"])
        assert row[8] == f"{m['active_blocks']} ({100 * m['occupancy']:.0f}%)"
        assert row[2] == row[3] == row[4] == row[9] == "not run"  # the GPU columns, kept for a GPU run
    (fig,) = p.figures(**{"data-figure": "verify-occupancy"})
    bars = [float(a["data-model"]) for t, a in p.tags if t == "rect" and "data-model" in a]
    assert bars == [round(v["occupancy"]["model"]["occupancy"], 4) for v in doc["variants"]]
    assert "--compile-only" in text


def test_verify_page_of_a_gpu_run_has_times_and_driver():
    """A GPU run's document (as on_gpu writes it): the timing and driver columns hold its numbers."""
    from smemtile.report.pages_verify import verify_page

    occ = {"active_blocks": 4, "occupancy": 1.0, "limiter": "registers"}
    var = [
        {
            "variant": v,
            "layout_text": "tile: pad 1",
            "correct": True,
            "time_ms": t,
            "gbps": g,
            "registers": 32,
            "spills": 0,
            "static_smem_bytes": 16640,
            "occupancy": {"model": occ, "driver": {**occ, "occupancy": d}},
            "name_expression": f"transpose<{v}>",
        }
        for v, t, g, d in (("baseline", 0.5, 1000.0, 1.0), ("fixed", 0.25, 2000.0, 0.75))
    ]
    text = verify_page(
        {
            "spec": "x.yaml",
            "family": "transpose",
            "arch": "sm_90",
            "compile_only": False,
            "variants": var,
            "speedup": 2.0,
            "occupancy_agree": False,
            "correct": True,
        }
    )
    p, _ = check_page(text)
    rows = cells(section(text, "variants"))
    assert [r[2:5] for r in rows] == [["yes", "0.5000", "1000.0 GB/s"], ["yes", "0.2500", "2000.0 GB/s"]]
    assert [r[9] for r in rows] == ["4 (100%)", "4 (75%)"]
    assert [float(a["data-driver"]) for t, a in p.tags if "data-driver" in a] == [1.0, 0.75]
    assert "2.00x the baseline" in text and "DISAGREES" in text


# ---- tune -----------------------------------------------------------------------------------------------------


def test_tune_dry_run_page_is_the_plan(tmp_path):
    args = ["tune", TRANSPOSE, "--top", "3", "--dry-run"]
    doc = json.loads(run([*args, "--json"]).output)
    out = tmp_path / "plan.html"
    run([*args, "--export", str(out)])
    text = out.read_text()
    p, ids = check_page(text)
    assert ids == ["problem1"]
    (fig,) = p.figures(**{"data-figure": "tune-plan"})
    assert fig["data-unit"] == "GB/s"
    dots = [float(a["data-predicted"]) for t, a in p.tags if t == "circle" and "data-predicted" in a]
    assert dots == [round(c["predicted"], 3) for c in doc["candidates"] if c["predicted"] is not None]
    rows = cells(section(text, "problem1"))
    assert [r[1] for r in rows] == [c["label"] for c in doc["candidates"]]
    assert "Not measured yet" in text


def _synthetic_run() -> dict:
    """A one-problem tune run document as ``tune --json`` writes it: five measured, one skipped."""
    preds = [100.0, 90.0, 80.0, 70.0, 60.0]
    times = [0.11, 0.10, 0.12, 0.13, 0.14]  # measured: #2 fastest, then #1: ranks (2, 1, 3, 4, 5)
    rows = [
        {
            "label": f"cfg{i}",
            "source": "model",
            "model_rank": i + 1,
            "predicted": p,
            "status": "ok",
            "time_ms": t,
            "value": 10 / t,
            "unit": "gbps",
        }
        for i, (p, t) in enumerate(zip(preds, times, strict=True))
    ]
    rows.append(
        {
            "label": "bad",
            "source": "space",
            "model_rank": None,
            "predicted": None,
            "status": "skipped",
            "reason": "compile error: x",
        }
    )
    d = {
        "spec": "s.yaml",
        "family": "transpose",
        "problem": {"rows": 64, "cols": 64, "dtype": "f32"},
        "arch": "sm_90",
        "device": {"name": "NVIDIA H200"},
        "candidates": [],
        "rows": rows,
        "summary": summarize(rows),
    }
    return {**d, "problems": [d]}


def test_tune_run_page_predicted_against_measured_with_spearman():
    doc = _synthetic_run()
    rho = doc["summary"]["rank_correlation"]
    n = 5  # by hand: d = (1, 1, 0, 0, 0), rho = 1 - 6 * 2 / (n (n^2 - 1))
    assert rho == pytest.approx(1 - 6 * 2 / (n * (n * n - 1))) == pytest.approx(0.9)
    text = tune_page(doc)
    p, ids = check_page(text)
    (fig,) = p.figures(**{"data-figure": "tune-scatter"})
    assert float(fig["data-spearman"]) == pytest.approx(0.9) and fig["data-points"] == "5"
    assert "Spearman rank correlation 0.900" in fig["aria-label"]
    pts = {
        a["data-label"]: (float(a["data-predicted"]), float(a["data-value"]))
        for t, a in p.tags
        if t == "circle" and "data-value" in a
    }
    assert pts == {r["label"]: (r["predicted"], round(r["value"], 3)) for r in doc["rows"][:5]}
    rows = cells(section(text, "problem1"))
    assert [r[4] for r in rows] == ["2", "1", "3", "4", "5", "-"]  # measured ranks; the skipped one has none
    assert rows[-1][-2:] == ["skipped", "compile error: x"]
    assert "measured #2" in text  # the model's #1 landed second
    assert "NVIDIA H200" in text


# ---- refusals -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["tiles", "1024", "1024", "1024"],
        ["tiles", "--family", "transpose", "4096", "4096"],
        ["verify", TRANSPOSE, "--compile-only"],
        ["tune", TRANSPOSE, "--dry-run"],
        ["inspect", *INSPECT],
    ],
)
@pytest.mark.parametrize("name", ["page.htm", "page.svg", "page"])
def test_export_refuses_a_name_that_is_not_html(tmp_path, args, name):
    out = tmp_path / name
    r = run([*args, "--export", str(out)], code=2)
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert (
        lines[-1].startswith("smemtile: error: --export: takes a .html file name")
        and "Traceback" not in r.output
    )
    assert not out.exists() and not any(tmp_path.iterdir())


def test_export_never_replaces_the_input(tmp_path):
    spec = tmp_path / "spec.html"  # a spec whose name ends .html: the page must not overwrite it
    spec.write_text(Path(TRANSPOSE).read_text())
    before = spec.read_text()
    r = run(["tune", str(spec), "--dry-run", "--export", str(spec)], code=2)
    assert "--export" in r.output and "input spec" in r.output
    assert spec.read_text() == before


def test_tune_simulated_run_page_is_the_run_json(tmp_path):
    """A whole run on the CPU (--simulate: made-up deterministic times): the page's scatter is the rows and the
    summary's Spearman correlation of the same run's --json."""
    out = tmp_path / "run.html"
    args = ["tune", TRANSPOSE, "--top", "3", "--simulate", "--cache", str(tmp_path / "c.jsonl")]
    args += ["-o", str(tmp_path / "best.yaml")]  # the winner spec into the test's folder, not the checkout
    doc = json.loads(run([*args, "--export", str(out), "--json"]).output)
    text = out.read_text()
    p, ids = check_page(text)
    assert ids == ["problem1"]
    (fig,) = p.figures(**{"data-figure": "tune-scatter"})
    ok = [r for r in doc["rows"] if r["status"] == "ok" and r.get("predicted") is not None]
    assert int(fig["data-points"]) == len(ok) >= 3
    assert float(fig["data-spearman"]) == pytest.approx(doc["summary"]["rank_correlation"], abs=1e-6)
    pts = sorted(float(a["data-value"]) for t, a in p.tags if t == "circle" and "data-value" in a)
    assert pts == sorted(round(r["value"], 3) for r in ok)
    rows = cells(section(text, "problem1"))
    assert [r[0] for r in rows] == [r["label"] for r in doc["rows"]]


def test_tiles_page_marks_what_a_tune_run_measured(tmp_path):
    """A real (simulated-GPU) `tune` run's cache rows carry their problem and label, so `tiles --export` marks
    the candidates it measured."""
    from conftest import run_cli

    cache, page = tmp_path / "tune.jsonl", tmp_path / "tiles.html"
    p = run_cli(
        "tune",
        "samples/transpose_32x32.yaml",
        "--top",
        "3",
        "--simulate",
        "--cache",
        str(cache),
        "--json",
        "-o",
        str(tmp_path / "best.yaml"),
    )
    assert p.returncode == 0, p.stderr
    p = run_cli(
        "tiles", "--family", "transpose", "8192", "8192", "--cache", str(cache), "--export", str(page)
    )
    assert p.returncode == 0, p.stderr
    html = page.read_text()
    m = re.search(r'data-measured="(\d+)"', html)
    assert m and int(m.group(1)) == 3, html[:400]
