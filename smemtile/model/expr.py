"""Index expressions from specs, parsed with a whitelist and evaluated on numpy arrays. Never ``eval``.

Allowed: integers, names (lane, warp, tid, loop variables, named constants), + - * // % ** & | ^ << >>,
unary - + ~, min(a, b, ...), max(a, b, ...), parentheses. ``**`` takes a constant exponent of at most 64,
shifts at most 62 bits, and every intermediate value must stay below 2**48 in magnitude, so no
expression can take unbounded time or memory (``9**9**9`` is refused before anything is computed).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from smemtile.errors import SpecError

MAX_LEN = 400
MAX_DEPTH = 40
LIMIT = 1 << 48

_BINOPS: dict[type, tuple[str, Callable]] = {
    ast.Add: ("+", np.add),
    ast.Sub: ("-", np.subtract),
    ast.Mult: ("*", np.multiply),
    ast.FloorDiv: ("//", np.floor_divide),
    ast.Mod: ("%", np.mod),
    ast.Pow: ("**", np.power),
    ast.BitAnd: ("&", np.bitwise_and),
    ast.BitOr: ("|", np.bitwise_or),
    ast.BitXor: ("^", np.bitwise_xor),
    ast.LShift: ("<<", np.left_shift),
    ast.RShift: (">>", np.right_shift),
}
_UNARY: dict[type, Callable] = {ast.USub: np.negative, ast.UAdd: np.positive, ast.Invert: np.invert}
_FUNCS = {"min": np.minimum, "max": np.maximum}
ALLOWED_TEXT = "integers, names, + - * // % ** & | ^ << >>, min(), max(), parentheses"


@dataclass(frozen=True)
class Expr:
    """A parsed expression. ``names`` are the free variables it uses."""

    text: str
    names: frozenset[str]
    _fn: Callable = None  # type: ignore[assignment]

    def __call__(self, env: Mapping[str, object]) -> np.ndarray:
        """Evaluate with ``env`` mapping names to ints or int64 arrays (broadcast together)."""
        return self._fn(env)

    def to_dict(self) -> str:
        return self.text


def parse_expr(text: object, *, allowed: set[str] | frozenset[str] | None = None, key: str = "expression",
               source: str | None = None) -> Expr:
    """Parse ``text`` (a string or an int). ``allowed`` limits the names it may use."""
    if isinstance(text, bool):
        raise SpecError(f"expected an integer expression, got {text!r}", key=key, source=source)
    if isinstance(text, int):
        value = int(text)
        return Expr(str(value), frozenset(), lambda env, v=value: np.int64(v))
    if not isinstance(text, str):
        raise SpecError(f"expected an integer expression string, got {type(text).__name__} {text!r}",
                        key=key, source=source)
    if len(text) > MAX_LEN:
        raise SpecError(f"expression longer than {MAX_LEN} characters", key=key, source=source)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise SpecError(f"cannot parse {text!r}: {e.msg}; allowed: {ALLOWED_TEXT}", key=key, source=source) from None

    names: set[str] = set()

    def fail(msg: str) -> SpecError:
        return SpecError(f"{msg} in {text!r}; allowed: {ALLOWED_TEXT}", key=key, source=source)

    def build(node: ast.AST, depth: int) -> Callable:
        if depth > MAX_DEPTH:
            raise fail("expression nested too deeply")
        if isinstance(node, ast.Expression):
            return build(node.body, depth + 1)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int):
                raise fail(f"constant {node.value!r} is not an integer")
            if abs(node.value) >= LIMIT:
                raise fail(f"constant {node.value} is too large")
            v = np.int64(node.value)
            return lambda env: v
        if isinstance(node, ast.Name):
            if allowed is not None and node.id not in allowed:
                raise SpecError(
                    f"unknown name {node.id!r} in {text!r}; known: {', '.join(sorted(allowed))}",
                    key=key, source=source,
                )
            names.add(node.id)
            ident = node.id
            return lambda env: env[ident]
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            f, inner = _UNARY[type(node.op)], build(node.operand, depth + 1)
            return lambda env: f(np.asarray(inner(env), dtype=np.int64))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            sym, f = _BINOPS[type(node.op)]
            left, right = build(node.left, depth + 1), build(node.right, depth + 1)
            if sym == "**":
                if not isinstance(node.right, ast.Constant) or not isinstance(node.right.value, int) \
                        or not 0 <= node.right.value <= 64:
                    raise fail("the exponent of ** must be a constant from 0 to 64")
            return _binop(sym, f, left, right, fail)
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCS or node.keywords \
                    or len(node.args) < 2:
                raise fail("only min(a, b, ...) and max(a, b, ...) may be called")
            f = _FUNCS[node.func.id]
            args = [build(a, depth + 1) for a in node.args]

            def call(env, f=f, args=args):
                out = np.asarray(args[0](env), dtype=np.int64)
                for a in args[1:]:
                    out = f(out, a(env))
                return out

            return call
        raise fail(f"{type(node).__name__} is not allowed")

    fn = build(tree, 0)
    return Expr(text.strip(), frozenset(names), fn)


def _binop(sym: str, f: Callable, left: Callable, right: Callable, fail: Callable) -> Callable:
    def run(env):
        a = np.asarray(left(env), dtype=np.int64)
        b = np.asarray(right(env), dtype=np.int64)
        if sym in ("//", "%") and (b == 0).any():
            raise fail("division by zero")
        if sym in ("<<", ">>") and ((b < 0) | (b > 62)).any():
            raise fail("shift count outside 0..62")
        if sym == "**":
            # bound before computing: |a| ** b < LIMIT
            mag = np.abs(a).max(initial=0)
            if mag > 1 and int(b.max(initial=0)) * float(np.log2(float(mag))) >= 48:
                raise fail("value too large")
        if sym == "<<":
            mag = np.abs(a).max(initial=0)
            if mag and float(np.log2(float(mag))) + int(b.max(initial=0)) >= 48:
                raise fail("value too large")
        out = f(a, b)
        if sym in ("*", "+", "-") and (np.abs(out) >= LIMIT).any():
            raise fail("value too large")
        return out

    return run


def evaluate(text: object, env: Mapping[str, object], *, key: str = "expression", source: str | None = None) -> int:
    """Parse and evaluate ``text`` to one Python int with scalar ``env`` (constants, shapes)."""
    e = parse_expr(text, allowed=set(env), key=key, source=source)
    v = np.asarray(e(env))
    if v.ndim != 0:
        raise SpecError(f"{text!r} must not depend on lane or loop variables here", key=key, source=source)
    return int(v)
