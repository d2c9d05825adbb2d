"""The report page without a browser: it parses, fetches nothing, and its figures carry the numbers the
analysis prints (heatmaps before and after the same instruction, the occupancy marker, the tile ranking)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from smemtile.cli import main
from smemtile.model.layout import Layout
from smemtile.pipeline.analyze import analyze
from smemtile.pipeline.page import page, tile_ranking
from smemtile.pipeline.specs import load
from smemtile.report.figures_banks import bank_loads, layout_grid, same_instruction
from smemtile.report.html import SECTIONS, pairs, report_html

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "samples").glob("*.yaml"))
VOID = {"meta", "br", "hr", "img", "input", "link", "wbr", "col", "area", "base", "source"}
SVG_EMPTY = {"rect", "line", "polyline", "circle"}  # written self-closed


class Page(HTMLParser):
    """Tags with their attributes, in order; nesting checked (every element closed where it was opened)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.stack: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()

    def figures(self, **want) -> list[dict]:
        return [a for t, a in self.tags if t == "svg" and all(a.get(k) == v for k, v in want.items())]


def parse(text: str) -> Page:
    p = Page()
    p.feed(text)
    p.close()
    assert not p.errors and not p.stack, (p.errors[:3], p.stack[-3:])
    return p


class _Pages(Mapping):
    """sample name -> (resolved spec, analysis, page text), each built when a test first asks for it (then kept):
    a pytest-xdist worker that runs one sample's tests builds that page, not all of them."""

    def __init__(self) -> None:
        self._paths = {p.stem: p for p in SAMPLES}
        self._built: dict[str, tuple] = {}

    def __getitem__(self, name: str) -> tuple:
        if name not in self._built:
            res = load(self._paths[name])  # KeyError for a name that is no sample
            rep = analyze(res, compile=False)
            self._built[name] = (res, rep, page(res, rep))
        return self._built[name]

    def __iter__(self):
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


_PAGES = _Pages()


@pytest.fixture(scope="session")
def pages() -> Mapping:
    return _PAGES


_PARSED: dict[int, Page] = {}


def parsed(text: str) -> Page:
    """``parse``, once per page text."""
    if id(text) not in _PARSED:
        _PARSED[id(text)] = parse(text)
    return _PARSED[id(text)]


def test_every_sample_page_parses_and_fetches_nothing(pages):
    assert len(pages) >= 11
    for name, (_, _rep, text) in pages.items():
        p = parsed(text)
        assert "http://" not in text and "https://" not in text, name
        assert not [t for t, _ in p.tags if t in ("script", "link", "img", "iframe", "object")], name
        for t, a in p.tags:
            for k in ("src", "href"):
                assert k not in a or a[k].startswith("#"), (name, t, a)
        csp = [a for t, a in p.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
        assert csp and "default-src 'none'" in csp[0]["content"]
        ids = {a["id"] for _, a in p.tags if "id" in a}
        toc = [a["href"][1:] for t, a in p.tags if t == "a"]
        assert toc == [k for k, _ in SECTIONS] and set(toc) <= ids, name  # the contents link every section
        for svg in p.figures():
            assert svg.get("role") == "img" and svg.get("aria-label"), (name, svg)


def test_heatmaps_before_and_after_the_same_instruction(pages):
    checked = 0
    for name, (_, rep, text) in pages.items():
        p = parsed(text)
        for r, a in pairs(rep):
            before = p.figures(
                **{"data-figure": "lanes-banks", "data-variant": "before", "data-access": r.access.name}
            )
            after = p.figures(
                **{"data-figure": "lanes-banks", "data-variant": "after", "data-access": r.access.name}
            )
            assert len(before) == 1, (name, r.access.name)
            assert int(before[0]["data-wavefronts"]) == r.wavefronts  # the worst instruction
            if a is None:
                assert not after, (name, r.access.name)
                continue
            j = same_instruction(r, r.worst, a)
            assert j is not None and len(after) == 1, (name, r.access.name)
            assert a.warp[j] == r.warp[r.worst] and a.loop_values[j] == r.loop_values[r.worst]
            assert int(after[0]["data-wavefronts"]) == int(a.bank.wavefronts[j])
            words = p.figures(**{"data-figure": "buffer-words", "data-access": r.access.name})
            assert [w["data-variant"] for w in words] == ["before", "after"]
            checked += 1
    assert checked >= 10
    # every conflicted access whose buffer the fix changes has its pair
    conflicted = [
        (n, r.access.name)
        for n, (_, rep, _) in pages.items()
        for r, a in pairs(rep)
        if not r.conflict_free and a is not None
    ]
    assert ("gemm_a_column", "a_col") in conflicted and ("hgemm_bf16", "B_frag") in conflicted


def test_gemm_a_column_shows_the_32_way_conflict_and_its_fix(pages):
    _, rep, text = pages["gemm_a_column"]
    p = parsed(text)
    b = p.figures(**{"data-access": "a_col", "data-figure": "lanes-banks", "data-variant": "before"})[0]
    a = p.figures(**{"data-access": "a_col", "data-figure": "lanes-banks", "data-variant": "after"})[0]
    assert (b["data-wavefronts"], b["data-ideal"]) == ("32", "1")
    assert (a["data-wavefronts"], a["data-ideal"]) == ("1", "1")  # the same instruction under pad 1
    r = next(r for r in rep.results if r.access.name == "a_col")
    load_, phase, _ = bank_loads(r, r.worst)
    assert (load_[:, 0] == 32).all() and load_[:, 1:].sum() == 0  # every lane in bank 0, 32 distinct words
    assert set(phase.tolist()) == {0}
    fixed = next(x for x in rep.fixed_results if x.access.name == "a_col")
    load_, _, _ = bank_loads(fixed, same_instruction(r, r.worst, fixed))
    assert (load_.max(axis=1) == 1).all() and sorted(load_.argmax(axis=1).tolist()) == list(range(32))
    assert "pad 1" in text and "32-way" in text


def test_swizzle_and_tma_grids_are_the_permutation():
    from smemtile.model.spec import Buffer

    buf = Buffer("As", "f16", (64, 64))
    svg = str(layout_grid(buf, Layout.of({"swizzle": [3, 3, 3]}), "As"))
    cells = re.findall(r"row (\d+), chunk (\d+) -&gt; stored in row (\d+), chunk (\d+)", svg)
    assert len(cells) == 8 * 8
    assert all(
        int(dc) == int(c) ^ (int(r) % 8) and r == dr for r, c, dr, dc in cells
    )  # Swizzle<3,3,3>: c ^ r
    tma = str(layout_grid(Buffer("Bs", "bf16", (64, 64)), Layout.for_tma("64B", 2), "Bs"))
    cells = re.findall(r"row (\d+), chunk (\d+) -&gt; stored in row (\d+), chunk (\d+)", tma)
    assert cells and all(int(dc) == int(c) ^ (int(r) % 4) for r, c, _, dc in cells)  # 64B: chunk ^= line % 4
    pad = str(layout_grid(Buffer("T", "f32", (64, 64)), Layout(pad=1), "T"))
    assert "row 1, element 0: bank 1" in pad and "row 0, element 64: bank 0 (padding)" in pad


def _occupancy_cli(o: dict) -> float:
    r = CliRunner().invoke(
        main,
        [
            "occupancy",
            "--arch",
            o["arch"],
            "--threads",
            str(o["threads"]),
            "--regs",
            str(o["regs"]),
            "--smem-static",
            str(o["static_smem"]),
            "--smem-dynamic",
            str(o["dynamic_smem"]),
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["occupancy"]


@pytest.mark.parametrize("name", ["gemm_a_column", "hgemm_bf16", "wgmma_gemm_bf16", "raw_addresses"])
def test_occupancy_marker_is_smemtile_occupancy(pages, name):
    _, rep, text = pages[name]
    want = _occupancy_cli(rep.occupancy["fixed"])
    p = parsed(text)
    curves = p.figures(**{"data-figure": "occupancy"})
    assert sorted(c["data-curve"] for c in curves) == ["registers", "shared_memory", "threads"]
    marks = [a for t, a in p.tags if t == "circle" and a.get("data-marker") == "this"]
    assert len(marks) == 3 and all(abs(float(m["data-occupancy"]) - want) < 1e-6 for m in marks)
    o = rep.occupancy["fixed"]
    assert [float(m["data-x"]) for m in marks] == [
        o["threads"],
        o["regs"],
        o["static_smem"] + o["dynamic_smem"],
    ]
    assert f"Limiter: <b>{o['limiter'].replace('_', ' ')}</b>" in text


def test_tile_ranking_plotted_where_a_model_applies(pages):
    res, rep, text = pages["hgemm_bf16"]
    ranking = tile_ranking(res, rep)
    assert ranking["unit"] == "TFLOP/s" and len(ranking["candidates"]) == 16
    p = parsed(text)
    assert len(p.figures(**{"data-figure": "tiles"})) == 1
    bars = [a for t, a in p.tags if t == "circle" and "data-rank" in a]
    assert [int(b["data-rank"]) for b in bars] == list(range(1, 17))
    assert [float(b["data-predicted"]) for b in bars] == [
        round(c["predicted"], 3) for c in ranking["candidates"]
    ]
    res, rep, _ = pages["sgemm_default"]
    r = tile_ranking(res, rep)
    assert (
        r["candidates"] and r["candidates"][0]["error"] and 0 < r["candidates"][0]["error"] < 1
    )  # sgemm's band
    for name in ("gemm_a_column", "raw_addresses"):
        _, _, text = pages[name]
        assert not parsed(text).figures(**{"data-figure": "tiles"})
        assert "Not applicable: no problem size" in text


def test_report_html_without_the_full_ranking_uses_the_analysis_top(pages):
    _, rep, _ = pages["sgemm_default"]
    p = parse(report_html(rep))
    dots = [a for t, a in p.tags if t == "circle" and "data-rank" in a]
    assert [d["data-rank"] for d in dots] == [
        "1",
        "2",
        "3",
        "spec",
    ]  # analyze's top 3, then the spec's own tile
    assert (
        rep.tiles["this"]["model_rank"] is None
    )  # sgemm ranks s2 of this tile: the spec's s3 is scored apart
    assert float(dots[-1]["data-predicted"]) == round(rep.tiles["this"]["predicted"], 3)


def test_cli_report_and_analyze_export(tmp_path):
    spec = ROOT / "samples" / "gemm_a_column.yaml"
    out = tmp_path / "r.html"
    r = CliRunner().invoke(main, ["report", str(spec), "-o", str(out), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["output"] == str(out) and doc["bytes"] == len(out.read_bytes()) and doc["figures"] >= 9
    exp = tmp_path / "a.html"
    r = CliRunner().invoke(main, ["analyze", str(spec), "--export", str(exp)])
    assert r.exit_code == 0, r.output
    assert exp.read_text() == out.read_text()  # the same page
    svg = tmp_path / "a.svg"
    r = CliRunner().invoke(main, ["analyze", str(spec), "--export", str(svg)])
    assert r.exit_code == 0, r.output
    root = ET.fromstring(svg.read_bytes())
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    variants = [
        (g.get("data-access"), g.get("data-variant"), g.get("data-wavefronts"))
        for g in root.iter("{http://www.w3.org/2000/svg}svg")
        if g.get("data-figure")
    ]
    assert ("a_col", "before", "32") in variants and ("a_col", "after", "1") in variants


@pytest.mark.parametrize("name", ["report.htm", "report.svg", "report"])
def test_report_refuses_an_output_that_is_not_html(tmp_path, name):
    r = CliRunner().invoke(
        main, ["report", str(ROOT / "samples" / "gemm_a_column.yaml"), "-o", str(tmp_path / name)]
    )
    assert r.exit_code == 2
    assert len(r.output.strip().splitlines()) == 1 and ".html" in r.output and "Traceback" not in r.output
    assert not list(tmp_path.iterdir())


def test_report_refuses_to_overwrite_the_spec(tmp_path):
    spec = tmp_path / "spec.html"
    text = (ROOT / "samples" / "gemm_a_column.yaml").read_text()
    spec.write_text(text)
    for args in (["report", str(spec), "-o", str(spec)], ["analyze", str(spec), "--export", str(spec)]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2, r.output
        assert "input spec" in r.output or "is the input" in r.output
        assert spec.read_text() == text and sorted(p.name for p in tmp_path.iterdir()) == ["spec.html"]


def test_styles_stay_inside_the_page_element(pages):
    """A notebook shows the page through ``_repr_html_``: its CSS must not restyle the notebook around it."""
    _, _, text = pages["gemm_a_column"]
    css = re.search(r"<style>(.*?)</style>", text, re.S)[1]
    selectors = [sel.strip() for rule in re.findall(r"([^{}]+)\{[^{}]*\}", css) for sel in rule.split(",")]
    assert len(selectors) > 20
    assert all(s.startswith(".smemtile-report") for s in selectors if s not in ("html", "body")), selectors
    assert '<main class="smemtile-report">' in text


def test_a_block_that_cannot_launch_gets_its_page_and_exit_1(tmp_path):
    spec = tmp_path / "big.yaml"
    spec.write_text(
        "arch: sm_90\nthreads: 1024\nregs: 255\nbuffers:\n  - {name: As, dtype: f32, shape: [128, 32]}\n"
        "accesses:\n  - {name: a_col, buffer: As, op: load, width: 4, row: lane, col: k, "
        "over: {k: [0, 32]}}\n"
    )
    out = tmp_path / "big.html"
    r = CliRunner().invoke(main, ["report", str(spec), "-o", str(out)])
    assert r.exit_code == 1 and "cannot launch: 0 blocks" in r.output
    text = out.read_text()
    marks = [a for t, a in parsed(text).tags if t == "circle" and a.get("data-marker") == "this"]
    assert [float(m["data-occupancy"]) for m in marks] == [0.0, 0.0, 0.0]
    assert "The block cannot launch: 1024 threads x 255 registers need 262,144 registers" in text


def test_declarations_are_plain_text_blocks(pages):
    """A <pre><code> holding exactly the declarations' lines (escaped, nothing inside but text): copies cleanly."""
    from html import unescape

    for name, (_, rep, text) in pages.items():
        blocks = re.findall(r"<pre><code>(.*?)</code></pre>", text, re.S)
        assert blocks and "<" not in blocks[0], name
        assert unescape(blocks[0]) == "\n".join(rep.declarations["fixed"].lines()), name
