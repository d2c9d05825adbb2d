"""``__shared__`` declarations read from CUDA source text (never compiled or executed here).

What it reads: ``__shared__ [__align__(N)|alignas(N)] T name[D1][D2]...;`` (several declarators per line
too), ``extern __shared__ T name[];``, with the sizes as integer expressions over ``#define NAME value``,
``[static] constexpr|const int NAME = value;``, template parameter defaults (``template <int BM = 128>``) and
the ``--define`` constants (which win). Vector types (``float4``, ``int2``, ``__half2``) count as their
scalar element with the last dimension multiplied. Whatever it cannot read is reported with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from smemtile.errors import SpecError
from smemtile.model.dtypes import C_TYPES
from smemtile.model.expr import evaluate

# C type -> (spec dtype, scalars per element): the dtype table's C++ spellings
CTYPES = C_TYPES

_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+([^\n]+?)[ \t]*(?://.*)?$", re.M)
_CONST = re.compile(
    r"\b(?:static\s+)?(?:constexpr|const)\s+(?:unsigned\s+|signed\s+)?(?:int|long|size_t|unsigned|"
    r"int32_t|uint32_t)\s+([A-Za-z_]\w*)\s*=\s*([^;]+);"
)
_TEMPLATE = re.compile(r"template\s*<([^>]*)>")
_TPARAM = re.compile(r"(?:int|unsigned|size_t|long|bool)\s+([A-Za-z_]\w*)\s*=\s*([^,]+)")
_SHARED = re.compile(
    r"(extern\s+)?__shared__\s+((?:__align__\s*\(\s*\d+\s*\)\s*|alignas\s*\(\s*\d+\s*\)\s*|"
    r"volatile\s+|const\s+)*)([A-Za-z_][\w:]*(?:\s+(?:int|char|short|long))*(?:\s+long)?)\s+"
    r"([^;]+);"
)


@dataclass(frozen=True)
class SharedDecl:
    """One ``__shared__`` array as written in the source."""

    name: str
    ctype: str
    dtype: str | None  # spec dtype of one scalar (None: a type it does not know)
    dims: tuple[int, ...] | None  # sizes in C elements, last one innermost (None: not readable)
    dim_text: tuple[str, ...]  # the sizes as written
    vector: int  # scalars per C element (float4: 4)
    extern: bool
    line: int  # 1-based source line
    reason: str = ""  # why dims or dtype could not be read
    qualifiers: str = ""  # as written between __shared__ and the type, e.g. "__align__(16)"

    @property
    def shape(self) -> tuple[int, ...] | None:
        """The shape in scalars of ``dtype`` (the last dimension times ``vector``)."""
        if self.dims is None:
            return None
        return (*self.dims[:-1], self.dims[-1] * self.vector)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "ctype": self.ctype,
            "dtype": self.dtype,
            "dims": list(self.dims or []),
            "dim_text": list(self.dim_text),
            "extern": self.extern,
            "line": self.line,
            "reason": self.reason,
        }


def _strip_comments(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


def constants(source: str, defines: dict[str, int] | None = None) -> dict[str, int]:
    """Integer constants the source defines (``#define``, ``constexpr``/``const`` ints, template defaults), each
    evaluated in order with those before it; ``defines`` override and unreadable ones are skipped."""
    text = _strip_comments(source)
    env: dict[str, int] = {}
    found: list[tuple[int, str, str]] = [(m.start(), m.group(1), m.group(2)) for m in _DEFINE.finditer(text)]
    found += [(m.start(), m.group(1), m.group(2)) for m in _CONST.finditer(text)]
    for t in _TEMPLATE.finditer(text):
        found += [(t.start(), m.group(1), m.group(2)) for m in _TPARAM.finditer(t.group(1))]
    fixed = dict(defines or {})
    for _, name, value in sorted(found):
        if name in fixed:
            continue
        v = _value(value, {**env, **fixed})
        if v is not None:
            env[name] = v
    return {**env, **fixed}


def _value(text: str, env: dict[str, int]) -> int | None:
    t = re.sub(r"(?<=\d)[uUlL]+\b", "", text.strip())
    t = re.sub(r"(?<![/])/(?![/])", "//", t)  # C integer division
    if t in ("true", "false"):
        return int(t == "true")
    try:
        return evaluate(t, env)
    except SpecError:
        return None


def shared_declarations(source: str, defines: dict[str, int] | None = None) -> dict[str, SharedDecl]:
    """Every ``__shared__`` array of the source by name (a later declaration of the same name wins)."""
    text = _strip_comments(source)
    env = constants(source, defines)
    out: dict[str, SharedDecl] = {}
    for m in _SHARED.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        ctype = " ".join(m.group(3).split())
        dtype, vec = CTYPES.get(ctype, (None, 1))
        for decl in m.group(4).split(","):
            d = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*((?:\[[^\]]*\]\s*)*)(?:=.*)?", decl)
            if not d:
                continue
            name, dims_text = d.group(1), tuple(x.strip() for x in re.findall(r"\[([^\]]*)\]", d.group(2)))
            reason = "" if dtype else f"element type {ctype!r} is not one smemtile models"
            dims: tuple[int, ...] | None = None
            if m.group(1):
                reason = reason or "extern (dynamic): its size is the launch's dynamic shared memory"
            elif not dims_text:
                reason = reason or "not an array"
            else:
                vals = [_value(x, env) for x in dims_text]
                if any(v is None or v <= 0 for v in vals):
                    bad = dims_text[[v is None or v <= 0 for v in vals].index(True)]
                    reason = (
                        reason or f"size [{bad}] is not a constant it can read (pass --define NAME=VALUE)"
                    )
                else:
                    dims = tuple(int(v) for v in vals)
            out[name] = SharedDecl(
                name,
                ctype,
                dtype,
                dims if not reason else None,
                dims_text,
                vec,
                bool(m.group(1)),
                line,
                reason,
                " ".join(m.group(2).split()),
            )
    return out
