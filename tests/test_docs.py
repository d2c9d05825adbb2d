"""docs/spec.md documents every key the parser accepts, every example in it parses and analyses, its family
tables are the registry's, its budgets are the code's constants, and the README links it."""

from __future__ import annotations

import re
import sys

import pytest
from conftest import ROOT

from smemtile.model.analysis import analyze_spec
from smemtile.model.spec import ACCESS_KEYS, BUFFER_KEYS, LAYOUT_KEYS, PROBLEM_KEYS, TOP_KEYS, load_yaml
from smemtile.pipeline.specs import resolve

DOC = ROOT / "docs" / "spec.md"
TEXT = DOC.read_text()
EXAMPLES = re.findall(r"```yaml\n(.*?)```", TEXT, flags=re.S)


def section(title: str) -> str:
    """The text of the '## title' section."""
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", TEXT, flags=re.S | re.M)
    assert m, f"docs/spec.md has no section {title!r}"
    return m.group(1)


def table_keys(text: str) -> list[str]:
    """Keys in the first column of the section's first table (rows like '| `key` | ...')."""
    return re.findall(r"^\| `([^`]+)` \|", text, flags=re.M)


@pytest.mark.parametrize(
    "title, keys",
    [
        ("Top-level keys", TOP_KEYS),
        ("Buffers", BUFFER_KEYS),
        ("Layouts", LAYOUT_KEYS),
        ("Accesses", ACCESS_KEYS),
        ("`problem:`", PROBLEM_KEYS),
    ],
)
def test_every_key_the_parser_accepts_is_documented(title, keys):
    documented = table_keys(section(title))
    assert sorted(set(documented)) == sorted(keys), (
        f"docs/spec.md '{title}' lists {documented}, the parser {keys}"
    )


def test_there_are_examples_of_every_form():
    assert len(EXAMPLES) >= 8
    joined = "\n".join(EXAMPLES)
    for needle in (
        "stage:",
        "swizzle:",
        "addresses:",
        "active:",
        "source:",
        "role:",
        "problem:",
        "kernel:",
        "over:",
    ):
        assert needle in joined, needle


@pytest.mark.parametrize("n", range(len(EXAMPLES)))
def test_every_example_parses_and_analyses(n):
    doc = load_yaml(EXAMPLES[n], f"docs/spec.md example {n}")
    res = resolve(doc, f"docs/spec.md example {n}")
    results = analyze_spec(res.spec)
    assert results and all(r.wavefronts >= r.ideal >= 1 for r in results)


def test_the_first_example_says_what_the_doc_says():
    res = resolve(load_yaml(EXAMPLES[0], "x"), "x")
    (r,) = analyze_spec(res.spec)
    assert (r.wavefronts, r.ideal) == (32, 1)
    assert "32 wavefronts (ideal 1), a 32-way conflict; `pad 1` removes it" in TEXT
    from smemtile.model.fix import fix_spec

    assert fix_spec(res.spec).buffers[0].recommended.layout.describe() == "pad 1"


def test_family_tables_match_the_registry():
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import families
    finally:
        sys.path.pop(0)
    assert families.current(TEXT) == families.tables(), "run `python docs/families.py --write`"
    from smemtile.families import FAMILIES

    for name, fam in FAMILIES.items():
        assert f"#### `{name}`" in TEXT
        for p in fam.params:
            assert f"| `{p.name}` | {p.default} |" in TEXT


def test_budgets_are_the_code_constants():
    from smemtile import cache, fileio
    from smemtile.cli import occupancy as occ_cli
    from smemtile.model import expr, spec
    from smemtile.report import banks, text

    budgets = section("Budgets")
    for needle in (
        f"{fileio.SPEC_BUDGET} bytes",
        f"per access and in all | {spec.MAX_INSTRUCTIONS:,} |",
        f"| {spec.MAX_BUFFERS} / {spec.MAX_ACCESSES} |",
        f"| YAML nesting depth | {spec.MAX_YAML_DEPTH} |",
        f"below 2**{expr.LIMIT_BITS}",
        f"{expr.MAX_LEN} characters / {expr.MAX_DEPTH} levels",
        f"{fileio.LINE_BUDGET} bytes",
        f"{cache.CACHE_BUDGET} bytes",
        f"{occ_cli.CHUNK_ROWS:,}",
        f"{text.MIN_WIDTH} to {text.MAX_WIDTH} columns",
        f"{text.EXPORT_WIDTH} columns",
        f"{banks.DETAIL_BUDGET:,} per report",
    ):
        assert needle in budgets, needle


def test_archs_in_the_doc_are_the_table():
    from smemtile.model.arch import ARCHS, FEATURES, known_targets

    arch = section("Architectures")
    for name in known_targets():
        assert f"`{name}`" in arch or name in " ".join(ARCHS), name
    for name in ARCHS:
        assert name in arch
    for feature, (cc, suffix, _) in FEATURES.items():
        assert f"sm_{cc[0]}{cc[1]}{suffix}" in arch, feature


def test_readme_links_the_spec_doc():
    assert "docs/spec.md" in (ROOT / "README.md").read_text()
