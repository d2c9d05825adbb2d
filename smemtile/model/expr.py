"""Index expressions from specs, parsed with a whitelist and evaluated on numpy arrays. Never ``eval``.

Allowed: integers, names (lane, warp, tid, loop variables, named constants), ``+ - * // % ** & | ^ << >>``,
unary ``- + ~``, comparisons ``< <= > >= == !=`` (1 or 0), ``min(a, b, ...)``, ``max(a, b, ...)``,
``cdiv(a, b)`` (ceiling division), parentheses.

Integer semantics are exact: every operand and every result must stay below 2**48 in magnitude, checked
*before* an operation could wrap int64 (``2**47 * 2**47`` is refused, never silently 0). ``**`` takes a
constant exponent of at most 64 and shifts at most 62 bits, so no expression can take unbounded time or memory
(``9**9**9`` is refused before anything is computed). ``//`` and ``%`` floor as in Python.

The same parsed expression also renders as C++ (:meth:`Expr.cpp`), so a launch formula written once here is
what the Python launcher evaluates and what the generated host helper computes.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

import numpy as np

from smemtile.errors import SpecError

MAX_LEN = 400
MAX_DEPTH = 40
LIMIT = 1 << 48
LIMIT_BITS = 48

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
_CMPOPS: dict[type, tuple[str, Callable]] = {
    ast.Lt: ("<", np.less),
    ast.LtE: ("<=", np.less_equal),
    ast.Gt: (">", np.greater),
    ast.GtE: (">=", np.greater_equal),
    ast.Eq: ("==", np.equal),
    ast.NotEq: ("!=", np.not_equal),
}
_UNARY: dict[type, tuple[str, Callable]] = {
    ast.USub: ("-", np.negative),
    ast.UAdd: ("+", np.positive),
    ast.Invert: ("~", np.invert),
}
FUNCS = ("min", "max", "cdiv")
ALLOWED_TEXT = (
    "integers, names, + - * // % ** & | ^ << >>, < <= > >= == !=, min(), max(), cdiv(), parentheses"
)


@dataclass(frozen=True)
class Expr:
    """A parsed expression. ``names`` are the free variables it uses."""

    text: str
    names: frozenset[str]
    _fn: Callable = field(default=None, repr=False, compare=False)  # type: ignore[assignment]
    _cpp: Callable = field(default=None, repr=False, compare=False)  # type: ignore[assignment]
    _int: Callable | None = field(default=None, repr=False, compare=False)

    def __call__(self, env: Mapping[str, object]) -> np.ndarray:
        """Evaluate with ``env`` mapping names to ints or int64 arrays (broadcast together)."""
        if self._int is not None:
            try:
                return self._int(env)
            except _Fallback:
                pass
        return self._fn(env)

    def cpp(self, values: Mapping[str, int] | None = None, name_fmt: str = "{}") -> str:
        """C++ text of the expression: names in ``values`` become integer literals, other names stay
        identifiers (host variables), written through ``name_fmt`` (``"(long long){}"`` widens them).
        ``//`` and ``%`` become C++ ``/`` and ``%``, which agree with Python's floor semantics for the
        non-negative operands launch formulas have."""
        return self._cpp((values or {}, name_fmt))

    def to_dict(self) -> str:
        return self.text


def parse_expr(
    text: object,
    *,
    allowed: AbstractSet[str] | None = None,
    key: str = "expression",
    source: str | None = None,
) -> Expr:
    """Parse ``text`` (a string or an int). ``allowed`` limits the names it may use."""
    if isinstance(text, bool):
        raise SpecError(f"expected an integer expression, got {text!r}", key=key, source=source)
    if isinstance(text, (int, np.integer)):
        value = int(text)
        if abs(value) >= LIMIT:
            raise SpecError(f"{value} is too large (|value| < 2**{LIMIT_BITS})", key=key, source=source)
        return Expr(str(value), frozenset(), lambda env, v=value: np.int64(v), lambda ctx, v=value: str(v))
    if not isinstance(text, str):
        raise SpecError(
            f"expected an integer expression string, got {type(text).__name__} {text!r}",
            key=key,
            source=source,
        )
    if len(text) > MAX_LEN:
        raise SpecError(f"expression longer than {MAX_LEN} characters", key=key, source=source)
    try:
        expr, order = _parse_any(text, key, source)
    except SpecError:  # the same error the check with ``allowed`` raises first
        return _parse(text, allowed, key, source)[0]
    if allowed is not None:
        for name in order:  # the first unknown name in the order the parser meets them (as _parse reports it)
            if name not in allowed:
                raise SpecError(
                    f"unknown name {name!r} in {text!r}; known: {_known(allowed)}", key=key, source=source
                )
    return expr


@functools.lru_cache(maxsize=16384)
def _parse_any(text: str, key: str, source: str | None) -> tuple[Expr, tuple[str, ...]]:
    """``_parse`` with any names allowed, cached: a family's spec is parsed again for every configuration the
    tile models and the fix search try, with the same texts, keys and sources (errors are never cached)."""
    return _parse(text, None, key, source)


def _parse(
    text: str, allowed: AbstractSet[str] | None, key: str, source: str | None
) -> tuple[Expr, tuple[str, ...]]:
    """(the expression, its names in the order the parser meets them)."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        msg = getattr(e, "msg", None) or type(e).__name__
        raise SpecError(
            f"cannot parse {text!r}: {msg}; allowed: {ALLOWED_TEXT}", key=key, source=source
        ) from None

    names: dict[str, None] = {}  # ordered

    def fail(msg: str) -> SpecError:
        return SpecError(f"{msg} in {text!r}; allowed: {ALLOWED_TEXT}", key=key, source=source)

    def build(node: ast.AST, depth: int) -> tuple[Callable, Callable]:
        """(numpy evaluator, C++ renderer) of ``node``."""
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
            return (lambda env: v), (lambda vals, s=str(node.value): s)
        if isinstance(node, ast.Name):
            if allowed is not None and node.id not in allowed:
                raise SpecError(
                    f"unknown name {node.id!r} in {text!r}; known: {_known(allowed)}", key=key, source=source
                )
            names.setdefault(node.id)
            ident = node.id

            def cpp_name(ctx, ident=ident):
                vals, fmt = ctx
                return str(int(vals[ident])) if ident in vals else fmt.format(ident)

            return (lambda env: env[ident]), cpp_name
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            sym, f = _UNARY[type(node.op)]
            inner, inner_cpp = build(node.operand, depth + 1)
            return (lambda env: f(np.asarray(inner(env), dtype=np.int64))), (
                lambda vals: f"({sym}{inner_cpp(vals)})"
            )
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            sym, f = _BINOPS[type(node.op)]
            (left, lcpp), (right, rcpp) = build(node.left, depth + 1), build(node.right, depth + 1)
            if sym == "**":
                if (
                    not isinstance(node.right, ast.Constant)
                    or not isinstance(node.right.value, int)
                    or isinstance(node.right.value, bool)
                    or not 0 <= node.right.value <= 64
                ):
                    raise fail("the exponent of ** must be a constant from 0 to 64")
                n = node.right.value

                def pow_cpp(vals, n=n):
                    return "(" + " * ".join([lcpp(vals)] * n) + ")" if n else "1"

                return _binop(sym, f, left, right, fail), pow_cpp
            cpp_sym = "/" if sym == "//" else sym
            return _binop(sym, f, left, right, fail), (lambda vals: f"({lcpp(vals)} {cpp_sym} {rcpp(vals)})")
        if isinstance(node, ast.Compare):
            if len(node.ops) != 1 or type(node.ops[0]) not in _CMPOPS:
                raise fail("a comparison takes two operands (a < b)")
            sym, f = _CMPOPS[type(node.ops[0])]
            (left, lcpp), (right, rcpp) = build(node.left, depth + 1), build(node.comparators[0], depth + 1)

            def cmp(env, f=f, left=left, right=right):
                return f(
                    np.asarray(left(env), dtype=np.int64), np.asarray(right(env), dtype=np.int64)
                ).astype(np.int64)

            return cmp, (lambda vals: f"int({lcpp(vals)} {sym} {rcpp(vals)})")
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCS or node.keywords:
                raise fail("only min(a, b, ...), max(a, b, ...) and cdiv(a, b) may be called")
            fname = node.func.id
            if fname == "cdiv" and len(node.args) != 2 or fname != "cdiv" and len(node.args) < 2:
                raise fail(f"{fname}() takes {'two' if fname == 'cdiv' else 'at least two'} arguments")
            built = [build(a, depth + 1) for a in node.args]
            args = [b[0] for b in built]
            cpps = [b[1] for b in built]
            if fname == "cdiv":
                num, den = args

                def cdiv(env, num=num, den=den):
                    a = np.asarray(num(env), dtype=np.int64)
                    b = np.asarray(den(env), dtype=np.int64)
                    if (b == 0).any():
                        raise fail("division by zero")
                    return -np.floor_divide(-a, b)

                return cdiv, (lambda vals: f"(({cpps[0](vals)} + {cpps[1](vals)} - 1) / {cpps[1](vals)})")
            f = np.minimum if fname == "min" else np.maximum
            op = "<" if fname == "min" else ">"

            def call(env, f=f, args=args):
                out = np.asarray(args[0](env), dtype=np.int64)
                for a in args[1:]:
                    out = f(out, a(env))
                return out

            def call_cpp(vals, op=op):
                out = cpps[0](vals)
                for c in cpps[1:]:
                    b = c(vals)
                    out = f"({out} {op} {b} ? {out} : {b})"
                return out

            return call, call_cpp
        raise fail(f"{type(node).__name__} is not allowed")

    fn, cpp = build(tree, 0)
    return Expr(text.strip(), frozenset(names), fn, cpp, _int_root(tree.body)), tuple(names)


class _Fallback(Exception):
    """The Python-int evaluation cannot vouch for its answer: numpy's evaluation decides (value or error)."""


_SAFE = (
    1 << 47
)  # results below this are far from every bound the numpy evaluation checks (2**48, its log test)


def _int_root(node: ast.AST) -> Callable | None:
    """The same expression over plain Python ints (the common case: sizes, launch formulas), ~20x faster than
    numpy on scalars. It answers only where numpy's evaluation succeeds with the same value (the value as
    numpy's scalar, np.int64): any name bound to something else than an int below 2**48, any operand or result
    near a bound (2**47), a zero divisor or a shift count outside 0..62 raises :class:`_Fallback`, and the
    numpy evaluation runs instead (its value, or its error). A bare name is returned as numpy's evaluation
    returns it (the bound value itself), so it needs no second path."""
    if isinstance(node, ast.Name):
        return None
    inner = _int_node(node)
    return lambda env: np.int64(inner(env))


def _int_node(node: ast.AST) -> Callable:
    if isinstance(node, ast.Constant):
        v = int(node.value)
        return lambda env: v
    if isinstance(node, ast.Name):
        ident = node.id

        def name(env):
            v = env[ident]
            if type(v) is not int or not -LIMIT < v < LIMIT:
                raise _Fallback
            return v

        return name
    if isinstance(node, ast.UnaryOp):
        x = _int_node(node.operand)
        if isinstance(node.op, ast.USub):
            return lambda env: -x(env)
        if isinstance(node.op, ast.UAdd):
            return lambda env: +x(env)
        return lambda env: ~x(env)
    if isinstance(node, ast.BinOp):
        return _int_binop(type(node.op), _int_node(node.left), _int_node(node.right))
    if isinstance(node, ast.Compare):
        f = _INT_CMP[type(node.ops[0])]
        left, right = _int_node(node.left), _int_node(node.comparators[0])
        return lambda env: int(f(left(env), right(env)))
    fname = node.func.id  # a Call: min, max or cdiv (the numpy build refused anything else)
    args = [_int_node(a) for a in node.args]
    if fname == "cdiv":
        num, den = args

        def cdiv(env):
            a, b = num(env), den(env)
            if b == 0:
                raise _Fallback
            return -((-a) // b)

        return cdiv
    pick = min if fname == "min" else max
    return lambda env: pick([a(env) for a in args])


_INT_CMP = {
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
}


def _int_binop(op: type, left: Callable, right: Callable) -> Callable:
    def operands(env):
        a, b = left(env), right(env)
        if not (-LIMIT < a < LIMIT and -LIMIT < b < LIMIT):
            raise _Fallback  # numpy refuses it ("value too large")
        return a, b

    def bounded(out):
        if not -_SAFE < out < _SAFE:
            raise _Fallback  # near 2**48: numpy's checks decide
        return out

    if op is ast.Add:
        return lambda env: bounded(sum(operands(env)))
    if op is ast.Sub:

        def sub(env):
            a, b = operands(env)
            return bounded(a - b)

        return sub
    if op is ast.Mult:

        def mul(env):
            a, b = operands(env)
            return bounded(a * b)

        return mul
    if op is ast.Pow:  # the exponent is a constant 0..64 (checked when parsed)

        def pow_(env):
            a, b = operands(env)
            return bounded(a**b)

        return pow_
    if op in (ast.FloorDiv, ast.Mod):
        floor = op is ast.FloorDiv

        def div(env):
            a, b = operands(env)
            if b == 0:
                raise _Fallback
            return a // b if floor else a % b

        return div
    if op in (ast.LShift, ast.RShift):
        left_shift = op is ast.LShift

        def shift(env):
            a, b = operands(env)
            if not 0 <= b <= 62:
                raise _Fallback
            return bounded(a << b) if left_shift else a >> b

        return shift
    bit = {ast.BitAnd: lambda a, b: a & b, ast.BitOr: lambda a, b: a | b, ast.BitXor: lambda a, b: a ^ b}[op]

    def bits(env):
        a, b = operands(env)
        return bit(a, b)

    return bits


def _log2(x: np.ndarray) -> float:
    m = float(np.abs(x).max(initial=0))
    return float(np.log2(m)) if m > 0 else float("-inf")


def _binop(sym: str, f: Callable, left: Callable, right: Callable, fail: Callable) -> Callable:
    def run(env):
        a = np.asarray(left(env), dtype=np.int64)
        b = np.asarray(right(env), dtype=np.int64)
        if (np.abs(a) >= LIMIT).any() or (np.abs(b) >= LIMIT).any():
            raise fail("value too large")
        if sym in ("//", "%") and (b == 0).any():
            raise fail("division by zero")
        if sym in ("<<", ">>") and ((b < 0) | (b > 62)).any():
            raise fail("shift count outside 0..62")
        # bound every result before computing it: int64 must never wrap
        if sym == "**" and _log2(a) * int(b.max(initial=0)) >= LIMIT_BITS:
            raise fail("value too large")
        if sym == "*" and _log2(a) + _log2(b) >= LIMIT_BITS:
            raise fail("value too large")
        if sym == "<<" and _log2(a) + int(b.max(initial=0)) >= LIMIT_BITS:
            raise fail("value too large")
        out = f(a, b)
        if sym in ("+", "-", "**", "*") and (np.abs(out) >= LIMIT).any():
            raise fail("value too large")
        return out

    return run


def _known(allowed: AbstractSet[str], shown: int = 24) -> str:
    """The first ``shown`` known names, sorted (a spec may have thousands of constants: the line stays short)."""
    names = sorted(allowed)
    more = f", ... ({len(names) - shown} more)" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def evaluate(
    text: object, env: Mapping[str, object], *, key: str = "expression", source: str | None = None
) -> int:
    """Parse and evaluate ``text`` to one Python int with scalar ``env`` (constants, shapes)."""
    if type(text) is int and -LIMIT < text < LIMIT:
        return text  # what parse_expr's literal evaluates to (a spec's sizes are mostly plain integers)
    # env.keys(): a view, so the names check is O(1) per name (set(env) made a spec's constants cost quadratic)
    e = parse_expr(text, allowed=env.keys(), key=key, source=source)
    v = e(env)
    if type(v) is int:
        return v  # a name bound to a Python int: np.asarray(v) would give it back unchanged
    v = np.asarray(v)
    if v.ndim != 0:
        raise SpecError(f"{text!r} must not depend on lane or loop variables here", key=key, source=source)
    return int(v)
