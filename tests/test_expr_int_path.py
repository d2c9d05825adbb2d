"""The Python-int evaluation of an expression (model.expr, the fast path for scalar sizes and launch formulas)
answers exactly what the numpy evaluation answers: the same value and type, or it defers to numpy (whose value
or error then stands). Random expressions over every operator, with values up to and past the 2**48 bound."""

from __future__ import annotations

import random

import numpy as np
import pytest

from smemtile.errors import SpecError
from smemtile.model.expr import LIMIT, _Fallback, evaluate, parse_expr

BINOPS = ["+", "-", "*", "//", "%", "&", "|", "^", "<<", ">>"]
CMPS = ["<", "<=", ">", ">=", "==", "!="]
NAMES = ["a", "b", "c"]


def _expr(rng: random.Random, depth: int) -> str:
    r = rng.random()
    if depth <= 0 or r < 0.25:
        if rng.random() < 0.5:
            return rng.choice(NAMES)
        return str(rng.choice([0, 1, 2, 3, 7, 8, 31, 62, 63, 1 << 20, (1 << 47) - 1, 1 << 47, LIMIT - 1]))
    if r < 0.35:
        return f"{rng.choice(['-', '+', '~'])}({_expr(rng, depth - 1)})"
    if r < 0.45:
        return f"({_expr(rng, depth - 1)} {rng.choice(CMPS)} {_expr(rng, depth - 1)})"
    if r < 0.55:
        fn = rng.choice(["min", "max", "cdiv"])
        n = 2 if fn == "cdiv" else rng.choice([2, 3])
        return f"{fn}({', '.join(_expr(rng, depth - 1) for _ in range(n))})"
    if r < 0.6:
        return f"({_expr(rng, depth - 1)}) ** {rng.choice([0, 1, 2, 3, 5, 16, 64])}"
    return f"({_expr(rng, depth - 1)} {rng.choice(BINOPS)} {_expr(rng, depth - 1)})"


def _value(rng: random.Random) -> int:
    return rng.choice(
        [
            0,
            1,
            -1,
            2,
            3,
            -7,
            32,
            100,
            4096,
            -4096,
            1 << 30,
            (1 << 47) - 1,
            -(1 << 47),
            LIMIT - 1,
            -(LIMIT - 1),
        ]
        + [LIMIT, -LIMIT, 1 << 62, rng.randrange(-(1 << 20), 1 << 20)]
    )


def _numpy(e, env):
    try:
        return ("value", e._fn(env))
    except (SpecError, OverflowError) as err:
        return ("error", type(err), str(err))


@pytest.mark.parametrize("seed", range(8))
def test_int_path_matches_numpy(seed):
    rng = random.Random(seed)
    answered = 0
    for _ in range(1500):
        text = _expr(rng, rng.randrange(1, 5))
        try:
            e = parse_expr(text)
        except SpecError:
            continue
        env = {n: _value(rng) for n in NAMES}
        want = _numpy(e, env)
        if e._int is None:  # a bare name: numpy's evaluation returns the bound value itself
            continue
        try:
            got = e._int(env)
        except _Fallback:
            got = None
        if got is not None:
            answered += 1
            assert want[0] == "value", (text, env, want)
            assert type(got) is type(want[1]) is np.int64, (text, env, got, want)
            assert int(got) == int(want[1]), (text, env, got, want)
        # through __call__: numpy's own answer whenever the int path defers
        try:
            via = ("value", e(env))
        except (SpecError, OverflowError) as err:
            via = ("error", type(err), str(err))
        if want[0] == "value":
            assert via[0] == "value" and int(via[1]) == int(want[1]) and type(via[1]) is type(want[1])
        else:
            assert via == want, (text, env, via, want)
    assert answered > 300  # the fast path does take the ordinary cases


def test_arrays_take_the_numpy_path():
    e = parse_expr("lane * 4 + k // 2")
    lane = np.arange(32, dtype=np.int64)
    out = e({"lane": lane, "k": 6})
    assert isinstance(out, np.ndarray) and out.tolist() == [4 * i + 3 for i in range(32)]
    assert int(e({"lane": 5, "k": 6})) == 23  # scalars: the int path, same value
    assert type(e({"lane": 5, "k": 6})) is np.int64


def test_errors_are_numpy_s():
    with pytest.raises(SpecError, match="division by zero"):
        evaluate("K // (N - N)", {"K": 4, "N": 3})
    with pytest.raises(SpecError, match="value too large"):
        evaluate("A * A", {"A": 1 << 30})
    with pytest.raises(SpecError, match="shift count outside 0..62"):
        evaluate("1 << S", {"S": 63})
    assert evaluate("cdiv(M, BM) * BM", {"M": 4097, "BM": 128}) == 4224
