"""The report page of every sample in a real browser: Debian's headless Chromium (``.ci/run`` installs it), driven
through the DevTools protocol (tests/cdp_browser.py). Each page loads with no console error and no uncaught
exception, every section has its figures with their labels, laid out at a real size, nothing overflows the
window, and a 1280 x 2000 screenshot is taken, decoded (pillow) and checked: not blank, the expected size, the
heatmaps' colours on the first screen. Skipped where Chromium is not installed."""

from __future__ import annotations

import io
import json
import os
import queue
import threading
from pathlib import Path

import numpy as np
import pytest
from cdp_browser import Browser, find_chromium
from click.testing import CliRunner

from smemtile.cli import main
from smemtile.report.svg import ONE, RAMP

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "samples").glob("*.yaml"))
EXE = find_chromium()
pytestmark = pytest.mark.skipif(
    EXE is None, reason="no chromium (CI installs Debian's: apt-get install chromium)"
)
WIDTH, HEIGHT = 1280, 2000
HEAT = [tuple(int(c[k : k + 2], 16) for k in (1, 3, 5)) for c in (ONE, *RAMP)]  # a heatmap cell's colours

# What the page tells the test, evaluated in the page after it loaded (the page itself runs no script).
PROBE = """JSON.stringify({
  toc: [...document.querySelectorAll('nav a')].map(a => a.getAttribute('href')),
  scrollWidth: document.documentElement.scrollWidth,
  code: [...document.querySelectorAll('pre code')].map(c => c.innerText),
  sections: [...document.querySelectorAll('section')].map(s => ({
    id: s.id, text: s.innerText.slice(0, 4000),
    svgs: [...s.querySelectorAll('svg')].map(v => {
      const r = v.getBoundingClientRect();
      const t = v.querySelector(':scope > title');
      return {label: v.getAttribute('aria-label') || '', title: t ? t.textContent : '', figure: v.dataset.figure,
              variant: v.dataset.variant || '', access: v.dataset.access || '', texts: v.querySelectorAll('text').length,
              width: r.width, height: r.height};
    })}))
})"""


def test_report_pages_in_chromium(tmp_path):
    """One browser for every page (one test, so pytest-xdist never starts it twice); the checks below."""
    pytest.importorskip("PIL", reason="pillow decodes the screenshots (pip install -e '.[test]')")
    results = _load_all(tmp_path)
    check_the_error_detector_sees_errors(results)
    check_no_console_errors(results)
    check_every_figure_is_present_with_its_labels(results)
    check_screenshots_are_the_window_and_not_blank(results)
    check_export_pages(results)


def _load_all(folder: Path) -> dict:
    """Every page written and loaded: the browser starts first and loads each page in a thread of its own while
    the next one is written (the browser waits on its pipe, this process writes pages: the two overlap)."""
    browser = Browser(EXE, WIDTH, HEIGHT)
    jobs: queue.Queue = queue.Queue()
    out: dict = {}
    failed: list[BaseException] = []

    def serve() -> None:
        while (job := jobs.get()) is not None:
            name, path, probe = job
            try:
                out[name] = browser.load(path.as_uri(), probe)
            except BaseException as e:  # re-raised below, once the pages are written
                failed.append(e)
                return

    loader = threading.Thread(target=serve, daemon=True)
    loader.start()
    try:
        for spec in SAMPLES:
            path = folder / f"{spec.stem}.html"
            r = CliRunner().invoke(main, ["report", str(spec), "-o", str(path), "--no-compile"])
            assert r.exit_code == 0, r.output
            jobs.put((spec.stem, path, PROBE))
        for name, path in _exports(folder).items():
            jobs.put((name, path, PROBE))
        bad = folder / "control.html"  # the detector must see an error where there is one
        bad.write_text(
            "<!DOCTYPE html><html><body><p>control</p><script>console.error('control-console');"
            "throw new Error('control-throw')</script></body></html>"
        )
        jobs.put(("control", bad, "document.body.innerText"))
    finally:
        jobs.put(None)
        loader.join()
        browser.close()
    if failed:
        raise failed[0]
    keep = os.environ.get("SMEMTILE_SCREENSHOTS")  # a folder to keep the screenshots in, to look at them
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for name, r in out.items():
            (Path(keep) / f"{name}.png").write_bytes(r["png"])
    return out


def _exports(folder: Path) -> dict:
    """The --export pages of tiles (GEMM and --family), inspect --simulate, verify --compile-only (where NVRTC
    is), tune --dry-run and a tune run (a synthetic run document: measuring needs a GPU)."""
    from test_export_pages import INSPECT, TRANSPOSE, _synthetic_run

    from smemtile.report.pages_tune import tune_page

    runs = {
        "tiles": ["tiles", "1024", "1024", "1024", "--top", "8"],
        "tiles-family": ["tiles", "--family", "transpose", "4096", "4096", "--top", "8"],
        "inspect": ["inspect", *INSPECT],
        "verify": ["verify", TRANSPOSE, "--compile-only"],
        "tune-plan": ["tune", TRANSPOSE, "--top", "4", "--dry-run"],
    }
    out = {}
    for name, args in runs.items():
        path = folder / f"export-{name}.html"
        r = CliRunner().invoke(main, [*args, "--export", str(path)], env={"SMEMTILE_CACHE_DIR": str(folder)})
        if name == "verify" and r.exit_code == 3:  # no NVRTC here
            continue
        assert r.exit_code == 0, (name, r.output)
        out[f"export-{name}"] = path
    path = folder / "export-tune-run.html"
    path.write_text(tune_page(_synthetic_run()))
    out["export-tune-run"] = path
    return out


# the figures each --export page has (data-figure), as the browser lays them out
EXPORT_FIGURES = {
    "export-tiles": ["tiles"],
    "export-tiles-family": ["tiles"],
    "export-inspect": ["lanes-banks"] * 3,  # the conflicted line's worst instruction; the fix before, after
    "export-verify": ["verify-occupancy"],
    "export-tune-plan": ["tune-plan"],
    "export-tune-run": ["tune-scatter"],
}


def check_export_pages(results):
    names = {n for n in results if n.startswith("export-")}
    assert names == set(EXPORT_FIGURES) - ({"export-verify"} - names) and len(names) >= 5, names
    for name in names:
        doc = json.loads(results[name]["value"])
        assert doc["toc"] == [f"#{s['id']}" for s in doc["sections"]], name
        assert doc["scrollWidth"] <= WIDTH, (name, doc["scrollWidth"])
        svgs = [v for s in doc["sections"] for v in s["svgs"]]
        assert [v["figure"] for v in svgs] == EXPORT_FIGURES[name], name
        for v in svgs:
            assert v["label"] and v["title"] == v["label"] and v["texts"] > 0, (name, v)
            assert v["width"] > 150 and v["height"] > 60, (name, v)
    inspect = json.loads(results["export-inspect"]["value"])
    fixes = {s["id"]: s for s in inspect["sections"]}["fixes"]["svgs"]
    assert [v["variant"] for v in fixes] == ["before", "after"] and fixes[0]["access"] == fixes[1]["access"]
    run = {s["id"]: s for s in json.loads(results["export-tune-run"]["value"])["sections"]}["problem1"]
    assert "Spearman rank correlation 0.900" in run["text"]


def check_the_error_detector_sees_errors(results):
    errors = " | ".join(results["control"]["errors"])
    assert "control-console" in errors and "control-throw" in errors


def check_no_console_errors(results):
    assert len([n for n in results if not n.startswith("export-")]) == len(SAMPLES) + 1 >= 12
    for name, r in results.items():
        if name != "control":
            assert r["errors"] == [], (name, r["errors"])


def check_every_figure_is_present_with_its_labels(results):
    for name, r in results.items():
        if name == "control" or name.startswith("export-"):
            continue
        doc = json.loads(r["value"])
        sections = {s["id"]: s for s in doc["sections"]}
        assert doc["toc"] == [f"#{k}" for k in sections], name
        assert doc["scrollWidth"] <= WIDTH, (name, doc["scrollWidth"])  # tables wrap, figures scale
        for s in doc["sections"]:
            for v in s["svgs"]:
                assert v["label"] and v["title"] == v["label"] and v["texts"] > 0, (name, s["id"], v)
                assert v["width"] > 150 and v["height"] > 60, (name, s["id"], v)  # laid out, not collapsed
        heat = sections["heatmaps"]["svgs"]
        lanes = [v for v in heat if v["figure"] == "lanes-banks"]
        assert lanes and all("wavefronts" in v["label"] and "lanes x banks" in v["label"] for v in lanes)
        assert {v["access"] for v in lanes if v["variant"] == "after"} <= {v["access"] for v in lanes}
        assert len([v for v in heat if v["figure"] == "buffer-words"]) == len(lanes), name
        assert sections["layouts"]["svgs"], name
        occ = sections["occupancy"]["svgs"]
        assert [v["figure"] for v in occ] == ["occupancy"] * 3 and "Limiter:" in sections["occupancy"]["text"]
        assert all("this kernel" in v["label"] for v in occ)
        tiles = sections["tiles"]
        assert len(tiles["svgs"]) == 1 or "Not applicable" in tiles["text"], name
    # where a tile model ranks the problem, the plot is there
    for name in ("hgemm_bf16", "sgemm_default", "sgemm_float4", "wgmma_gemm_bf16"):
        tiles = {s["id"]: s for s in json.loads(results[name]["value"])["sections"]}["tiles"]
        assert [v["figure"] for v in tiles["svgs"]] == ["tiles"], name
    # the declarations copy as the analysis writes them: the text a selection of the block gives, line for line
    from smemtile.pipeline.analyze import analyze
    from smemtile.pipeline.specs import load

    decl = analyze(load(ROOT / "samples" / "gemm_a_column.yaml"), compile=False).declarations["fixed"]
    assert json.loads(results["gemm_a_column"]["value"])["code"][0] == "\n".join(decl.lines())
    # the 32-way access and its fix, side by side
    heat = {s["id"]: s for s in json.loads(results["gemm_a_column"]["value"])["sections"]}["heatmaps"]["svgs"]
    a_col = [v["variant"] for v in heat if v["access"] == "a_col" and v["figure"] == "lanes-banks"]
    assert a_col == ["before", "after"]


def check_screenshots_are_the_window_and_not_blank(results):
    from PIL import Image, ImageStat

    for name, r in results.items():
        img = Image.open(io.BytesIO(r["png"]))
        img.load()
        assert img.size == (WIDTH, HEIGHT), name
        rgb = img.convert("RGB")
        var = ImageStat.Stat(rgb.convert("L")).var[0]
        if name == "control":  # one line of text on white: what "blank" looks like to this check
            assert var < 200, var
            continue
        assert var > 200, (name, var)  # text, tables and figures, not one colour
        colours = rgb.getcolors(WIDTH * HEIGHT)
        assert len(colours) > 50, name
        if name.startswith("export-"):  # their first screen is a table or a plot (check_export_pages)
            continue
        # the first screen shows a heatmap: cells in the bank-load colours (green one word, yellow to red more)
        counts = np.array([n for n, _ in colours])
        rgbs = np.array([c for _, c in colours], dtype=int)  # (colours, 3) against (HEAT, 3): per channel
        near = (np.abs(rgbs[:, None, :] - np.array(HEAT)[None, :, :]).max(axis=2) < 12).any(axis=1)
        heat = int(counts[near].sum())
        assert heat > 1000, (name, heat)
