"""Expressions are whitelisted and bounded; spec errors are one line naming file, key and allowed values."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ROOT, run_cli
from hypothesis import given
from hypothesis import strategies as st

from smemtile.errors import SpecError
from smemtile.model.expr import evaluate, parse_expr
from smemtile.model.spec import parse_spec


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('true')",
        "lane.real",
        "(lambda: 1)()",
        "9**9**9",
        "2**65",
        "1 << 100",
        "open('x')",
        "lane if 1 else 2",
        "[1,2]",
        "'a'",
        "1.5",
        "x",
        "min(lane)",
        "abs(lane)",
        "1 < lane < 3",
        "cdiv(lane)",
        "2**47 * 2**47 + lane",
        "2**40 << 10",
        "lane and 1",
        "not lane",
    ],
)
def test_rejected(text):
    with pytest.raises(SpecError):
        e = parse_expr(text, allowed={"lane"})
        e({"lane": np.arange(32)})


def test_comparisons_cdiv_and_cpp():
    env = {"lane": np.arange(32), "M": 1000}
    e = parse_expr("(lane < 4) + (lane >= 30) * 2 + cdiv(M, 128)", allowed=set(env))
    lane = np.arange(32)
    assert (e(env) == (lane < 4) + (lane >= 30) * 2 + 8).all()
    # the C++ text evaluates to the same value for the non-negative operands of launch formulas
    assert (
        parse_expr("cdiv(M, BM) * min(S, 4)").cpp({"BM": 128, "S": 2})
        == "(((M + 128 - 1) / 128) * (2 < 4 ? 2 : 4))"
    )


def test_values():
    env = {"lane": np.arange(32), "BK": 32, "k": 3}
    e = parse_expr(
        "(lane ^ (lane >> 3)) * (BK + 1) + k % 4 - min(lane, 7) + max(2, 3) ** 2", allowed=set(env)
    )
    lane = np.arange(32)
    assert (e(env) == (lane ^ (lane >> 3)) * 33 + 3 - np.minimum(lane, 7) + 9).all()
    assert evaluate("BM // 8 * 2", {"BM": 128}) == 32


@given(st.integers(-1000, 1000), st.integers(1, 1000))
def test_floor_semantics_match_python(a, b):
    assert evaluate(f"({a}) // {b} + ({a}) % {b}", {}) == a // b + a % b


def test_division_by_zero_is_an_error():
    with pytest.raises(SpecError, match="division by zero"):
        evaluate("4 // (2 - 2)", {})


MINIMAL = (
    "arch: sm_90\nbuffers: [{name: S, dtype: f32, shape: [32, 32]}]\n"
    "accesses: [{name: a, buffer: S, op: load, row: lane, col: 0}]\n"
)


@pytest.mark.parametrize(
    "text, needle",
    [
        (MINIMAL.replace("arch: sm_90", "arch: sm_91"), "unknown architecture 'sm_91'; known: sm_70"),
        (MINIMAL.replace("buffers:", "bufers:"), "did you mean 'buffers'"),
        (MINIMAL.replace("dtype: f32", "dtype: fp32"), "unknown dtype 'fp32'"),
        (
            MINIMAL.replace("op: load", "op: lod"),
            "unknown op 'lod'; allowed: load, store, ldmatrix, stmatrix, cp.async",
        ),
        (
            MINIMAL.replace("row: lane", "row: lane + 1"),
            "accesses.a: lane 31 has row = 32, outside S [32, 32]; allowed 0..31 (access a of buffer S, warp 0)",
        ),
        (MINIMAL.replace("row: lane", "row: lanes"), "unknown name 'lanes'"),
        (MINIMAL.replace("op: load", "op: load, width: 3"), "width 3 is not valid for load"),
        (MINIMAL + "threads: 2048\n", "out of range"),
        ("arch: sm_90\nbuffers: [{name: S\n", "malformed YAML at line"),
        (MINIMAL.replace("shape: [32, 32]", "shape: [0, 32]"), "out of range"),
    ],
)
def test_spec_errors(text, needle):
    from smemtile.model.analysis import analyze_spec

    with pytest.raises(SpecError) as e:
        analyze_spec(parse_spec(text, source="t.yaml"))
    msg = str(e.value)
    assert needle in msg and msg.startswith("t.yaml") and "\n" not in msg


def test_raw_form_from_design_is_accepted_exactly():
    spec = parse_spec((ROOT / "samples" / "raw_addresses.yaml").read_text())
    assert [a.name for a in spec.accesses] == ["v4_stride2", "ldsm"]
    assert spec.accesses[1].matrices == 4 and len(spec.accesses[1].addresses) == 32


@pytest.mark.parametrize(
    "content, needle",
    [
        ("accesses: [", "malformed YAML"),
        ("arch: sm_90\nbuffers: []\naccesses: []\n", "buffers: must be a non-empty list"),
        (
            "arch: sm_90\nbuffers: [{name: S, dtype: f32, shape: [32, 32]}]\naccesses: [{name: a, buffer: S, "
            "row: '9**9**9', col: 0}]\n",
            "exponent",
        ),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(tmp_path, content, needle):
    f = tmp_path / "bad.yaml"
    f.write_text(content)
    r = run_cli("analyze", str(f))
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""


def test_cli_missing_file(tmp_path):
    r = run_cli("analyze", str(tmp_path / "nope.yaml"), "--json")
    assert r.returncode == 2 and "no such spec" in r.stderr and r.stdout == ""
