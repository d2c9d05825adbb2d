"""Read a kernel's PTX: its entries, parameters, ``__shared__`` variables and shared-memory instructions.

Pure text processing (no CUDA). The PTX is split into statements (``;``-terminated, possibly spanning lines),
labels and ``.loc`` directives; each statement keeps the 1-based PTX line it starts on and the source position
of the nearest preceding ``.loc`` (``.file N "path"`` names the file).

A *shared-memory instruction* is any data access that can touch the CTA's shared window:

    op              PTX forms                                         width (bytes per lane)
    load / store    ld/st.shared[::cta] (.v2/.v4 vectors), generic    type size x vector length
                    ld/st with no state space (shared or not is
                    known only at run time: ``space == "generic"``)
    ldmatrix        ldmatrix.sync.aligned.m8n8.xN[.trans].shared.b16  16 (one row address per lane)
    stmatrix        stmatrix.sync.aligned.m8n8.xN[.trans].shared.b16  16
    cp.async        cp.async.{ca,cg}.shared.global [dst], [src], N    N (the shared side is the destination)
    cp.async.bulk   cp.async.bulk[.tensor].* with a shared operand    size operand if literal, else 0
    atom / red      atom/red.shared.* (and generic atom/red)          type size

The array an instruction touches is found by following the address register back through its definitions
to a ``.shared`` symbol (``mov``/``cvta`` of the symbol, then ``add``/``mad``/``shl``/... on it); a symbol is
shown demangled (``_ZZ9transposePfS_E4tile`` -> ``tile``), a dynamic ``.extern .shared`` one as ``extern``.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass

from smemtile.errors import SpecError

OPS = ("load", "store", "ldmatrix", "stmatrix", "cp.async", "cp.async.bulk", "atom", "red")


@dataclass(frozen=True)
class SharedInstr:
    """One shared-memory instruction of a kernel, in PTX order (``index`` is its record id)."""

    index: int
    ptx_line: int
    text: str
    op: str
    width: int
    matrices: int
    trans: bool
    space: str
    addr: str
    file: str
    line: int
    array: str | None
    predicate: str = ""
    function: str = ""  # the (mangled) non-inlined device function it sits in; "" for the entry's own

    def to_dict(self) -> dict:
        d = {f: getattr(self, f) for f in self.__dataclass_fields__}
        if not self.function:
            del d["function"]
        return d


@dataclass(frozen=True)
class Statement:
    """One PTX instruction of an entry: ``opcode`` is the dotted mnemonic, ``operands`` split at top level."""

    ptx_line: int
    predicate: str  # "@%p1", "@!%p1" or ""
    opcode: str
    operands: tuple[str, ...]
    text: str
    file: str
    line: int


@dataclass(frozen=True)
class Body:
    """An entry's instructions and where its labels point (label -> index of the next instruction)."""

    statements: tuple[Statement, ...]
    labels: dict[str, int]


_TYPE_BYTES = {"8": 1, "16": 2, "32": 4, "64": 8, "128": 16}
_STATE_SPACES = ("shared", "global", "local", "param", "const", "tex")
_ENTRY = re.compile(r"\.entry\s+([\w$.]+)\s*\(")
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', re.M)
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)")
_LABEL = re.compile(r"^\s*([$%\w.]+)\s*:(?!:)")
_SHARED_DECL = re.compile(
    r"(\.extern\s+)?\.shared\s+(?:\.align\s+(\d+)\s+)?\.(\w+)\s+([\w$.]+)\s*(\[[^;]*\])?\s*;"
)
_PRED = re.compile(r"^@(!?%[\w$]+)\s+")


def _strip_comments(ptx: str) -> str:
    """Comments removed, newlines kept (so line numbers still hold)."""
    ptx = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), ptx, flags=re.S)
    return re.sub(r"//[^\n]*", "", ptx)


def entry_names(ptx: str) -> list[str]:
    """The (mangled) names of the kernel entries, in PTX order."""
    return _ENTRY.findall(_strip_comments(ptx))


def _entry_span(text: str, entry: str) -> tuple[int, int, int]:
    """(start of the params ``(``, start of the body ``{``, end after the matching ``}``) in comment-free text."""
    for m in _ENTRY.finditer(text):
        if m.group(1) == entry:
            break
    else:
        raise SpecError(
            f"no kernel entry {entry!r} in the PTX; entries: {', '.join(entry_names(text)) or 'none'}"
        )
    lbrace = text.index("{", m.end())
    depth = 0
    for i in range(lbrace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return m.end() - 1, lbrace, i + 1
    raise SpecError(f"the PTX body of {entry!r} is not closed (unbalanced braces)")


def entry_params(ptx: str, entry: str) -> list[tuple[str, str]]:
    """[(PTX type such as ``.u64``/``.u32``/``.f32``/``.b8``, parameter name)] in order."""
    text = _strip_comments(ptx)
    start, lbrace, _ = _entry_span(text, entry)
    params = text[start:lbrace]
    params = params[: params.rfind(")")] if ")" in params else params
    out = []
    for m in re.finditer(r"\.param\s+(?:\.align\s+\d+\s+)?(?:\.ptr\s+\S+\s+)?(\.\w+)\s+([\w$.]+)", params):
        out.append((m.group(1), m.group(2)))
    return out


def split_operands(text: str) -> tuple[str, ...]:
    """Operands split at commas outside ``{}``, ``[]`` and ``()``."""
    out, depth, cur = [], 0, []
    for c in text:
        if c in "{[(":
            depth += 1
        elif c in "}])":
            depth -= 1
        if c == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
    last = "".join(cur).strip()
    if last:
        out.append(last)
    return tuple(out)


def _files(text: str) -> dict[int, str]:
    return {int(m.group(1)): m.group(2) for m in _FILE.finditer(text)}


@dataclass(frozen=True)
class Function:
    """A ``.func`` with a body: its return and parameter ``.param`` names in order, and where its body is."""

    name: str
    returns: tuple[str, ...]
    params: tuple[str, ...]
    lbrace: int
    end: int


_FUNC = re.compile(r"\.func\s+")
_PARAM_NAME = re.compile(r"\.param\s+(?:\.align\s+\d+\s+)?(?:\.ptr\s+\S+\s+)?\.\w+\s+([\w$.]+)")


def _matching(text: str, i: int, open_: str, close: str) -> int:
    """The index after the ``close`` that matches the ``open_`` at ``i`` (the end of ``text`` if none)."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_:
            depth += 1
        elif text[j] == close:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def _paren(text: str, i: int) -> int:
    """The index after the ``)`` matching the ``(`` at ``i``."""
    return _matching(text, i, "(", ")")


def _close(text: str, lbrace: int) -> int:
    return _matching(text, lbrace, "{", "}")


def functions(ptx: str) -> dict[str, Function]:
    """Every device function of the module that has a body (declarations such as ``vprintf``'s have none)."""
    text = _strip_comments(ptx)
    out: dict[str, Function] = {}
    for m in _FUNC.finditer(text):
        i = m.end()
        returns: tuple[str, ...] = ()
        if text.startswith("(", i):
            j = _paren(text, i)
            returns = tuple(_PARAM_NAME.findall(text[i:j]))
            i = j
        n = re.match(r"\s*([\w$.]+)\s*", text[i:])
        if not n:
            continue
        name, i = n.group(1), i + n.end()
        params: tuple[str, ...] = ()
        if text.startswith("(", i):
            j = _paren(text, i)
            params = tuple(_PARAM_NAME.findall(text[i:j]))
            i = j
        rest = re.match(r"[^;{]*", text[i:])
        k = i + (rest.end() if rest else 0)
        if k < len(text) and text[k] == "{":
            out[name] = Function(name, returns, params, k, _close(text, k))
    return out


def parse_call(st: Statement) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(callee, return parameters, argument parameters) of a ``call`` statement; the callee is a register for
    an indirect call."""
    ops = [o.strip() for o in st.operands]
    k = next((i for i, o in enumerate(ops) if not o.startswith("(")), None)
    if k is None:
        return "", (), ()

    def names(o: str) -> tuple[str, ...]:
        return tuple(x.strip() for x in split_operands(o.strip()[1:-1])) if o.startswith("(") else ()

    rets = names(ops[k - 1]) if k > 0 else ()
    args = names(ops[k + 1]) if k + 1 < len(ops) else ()
    return ops[k], rets, args


def called_functions(ptx: str, entry: str) -> list[str]:
    """The device functions with a body that ``entry`` reaches through ``call`` (directly or not), in the order
    they are first called."""
    funcs = functions(ptx)
    out: list[str] = []
    todo = [parse_body(ptx, entry)]
    while todo:
        body = todo.pop(0)
        for st in body.statements:
            if st.opcode.split(".")[0] != "call":
                continue
            callee = parse_call(st)[0]
            if callee in funcs and callee not in out:
                out.append(callee)
                todo.append(parse_function(ptx, callee))
    return out


def parse_function(ptx: str, name: str) -> Body:
    """A device function's instructions and labels, as :func:`parse_body` reads an entry's."""
    text = _strip_comments(ptx)
    f = functions(ptx).get(name)
    if f is None:
        raise SpecError(f"no device function {name!r} with a body in the PTX")
    return _parse_span(text, f.lbrace, f.end)


def parse_body(ptx: str, entry: str) -> Body:
    """The entry's instructions with their PTX lines and ``.loc`` source positions, and its labels."""
    text = _strip_comments(ptx)
    _, lbrace, end = _entry_span(text, entry)
    return _parse_span(text, lbrace, end)


def _parse_span(text: str, lbrace: int, end: int) -> Body:
    files = _files(text)
    first_line = text.count("\n", 0, lbrace) + 1
    body = text[lbrace + 1 : end - 1]
    # .loc directives carry no ';': take them out line by line, remembering (line, file, source line)
    locs: list[tuple[int, str, int]] = []
    lines = body.split("\n")
    for k, ln in enumerate(lines):
        if m := _LOC.match(ln):
            locs.append((first_line + k, files.get(int(m.group(1)), ""), int(m.group(2))))
            lines[k] = ""
    body = "\n".join(lines)
    line_starts = [0] + [i + 1 for i, c in enumerate(body) if c == "\n"]
    loc_lines = [loc[0] for loc in locs]
    statements: list[Statement] = []
    labels: dict[str, int] = {}
    pos = 0
    for piece in body.split(";"):
        offset, pos = pos, pos + len(piece) + 1
        rest = piece
        while True:  # scope braces and labels before the instruction (a vector operand's {..} comes later)
            if m := _LABEL.match(rest):
                labels[m.group(1)] = len(statements)
            elif m := re.match(r"\s*[{}]", rest):
                pass
            else:
                break
            offset += m.end()
            rest = rest[m.end() :]
        stripped = rest.strip()
        if not stripped or stripped.startswith("."):
            continue  # declarations (.reg, .shared, .local, .pragma, .param)
        offset += len(rest) - len(rest.lstrip())
        ptx_line = first_line + bisect_right(line_starts, offset) - 1
        k = bisect_right(loc_lines, ptx_line) - 1
        src_file, src_line = (locs[k][1], locs[k][2]) if k >= 0 else ("", 0)
        stmt = " ".join(stripped.split())
        pred = ""
        if m := _PRED.match(stmt):
            pred = "@" + m.group(1)
            stmt_body = stmt[m.end() :]
        else:
            stmt_body = stmt
        opcode, _, ops = stmt_body.partition(" ")
        statements.append(Statement(ptx_line, pred, opcode, split_operands(ops), stmt, src_file, src_line))
    return Body(tuple(statements), labels)


def shared_arrays(ptx: str, entry: str) -> dict[str, int]:
    """PTX symbol of each ``.shared`` variable the entry can see -> its size in bytes (extern ones: 0)."""
    text = _strip_comments(ptx)
    _entry_span(text, entry)  # the entry must exist
    out: dict[str, int] = {}
    # module-scope variables (outside every entry body) and the entry's own (demoted) ones
    for m in _SHARED_DECL.finditer(text):
        if not _inside_other_entry(text, m.start(), entry):
            out[m.group(4)] = 0 if m.group(1) or not m.group(5) else _decl_size(m.group(3), m.group(5))
    return out


def _inside_other_entry(text: str, pos: int, entry: str) -> bool:
    for m in _ENTRY.finditer(text):
        if m.group(1) == entry:
            continue
        _, lb, end = _entry_span(text, m.group(1))
        if lb <= pos < end:
            return True
    return False


def shared_alignments(ptx: str, entry: str) -> dict[str, int]:
    """PTX symbol of each ``.shared`` variable -> its ``.align`` (1 when not given)."""
    text = _strip_comments(ptx)
    return {
        m.group(4): int(m.group(2) or 1)
        for m in _SHARED_DECL.finditer(text)
        if not _inside_other_entry(text, m.start(), entry)
    }


def _decl_size(ty: str, dims: str) -> int:
    bits = re.sub(r"\D", "", ty)
    size = _TYPE_BYTES.get(bits, 1)
    for d in re.findall(r"\[(\d*)\]", dims):
        size *= int(d) if d else 0
    return size


def demangle_variable(symbol: str) -> str:
    """The source name of a PTX variable symbol: ``_ZZ9transposePfS_E4tile`` -> ``tile``, ``_ZN2ns4tileE`` ->
    ``tile``; an unmangled name is returned as is."""
    if symbol.startswith("_ZZ"):
        m = re.search(r"E(\d+)([A-Za-z_]\w*)$", symbol)
        if m:
            n, rest = int(m.group(1)), m.group(2)
            if len(rest) >= n:
                return rest[:n]
    if symbol.startswith("_ZN"):
        names = _source_names(symbol[3:])
        if names:
            return names[-1]
    return symbol


def _source_names(s: str) -> list[str]:
    out, i = [], 0
    while i < len(s) and s[i].isdigit():
        j = i
        while j < len(s) and s[j].isdigit():
            j += 1
        n = int(s[i:j])
        out.append(s[j : j + n])
        i = j + n
    return out


def demangle_function(symbol: str) -> str:
    """The (qualified) source name of a kernel: ``_Z6kernelPfS_`` -> ``kernel``, ``_ZN2ns1kEv`` ->
    ``ns::k``, a template ``_Z4gemmILi32EEvPf`` -> ``gemm``; ``extern "C"`` names are returned as is."""
    if symbol.startswith("_ZN"):
        names = _source_names(symbol[3:])
        return "::".join(names) if names else symbol
    if symbol.startswith("_Z"):
        names = _source_names(symbol[2:])
        return names[0] if names else symbol
    return symbol


def _type_bytes(parts: list[str]) -> int:
    for p in reversed(parts):
        m = re.fullmatch(r"[bsuf](\d+)(x2)?", p)
        if m and m.group(1) in _TYPE_BYTES:
            return _TYPE_BYTES[m.group(1)] * (2 if m.group(2) else 1)
        if p in ("bf16x2", "f16x2"):
            return 4
        if p == "bf16":
            return 2
    return 0


def _brackets(operands: tuple[str, ...]) -> list[str]:
    return [o[1:-1].strip() for o in operands if o.startswith("[") and o.endswith("]")]


def _classify(st: Statement) -> tuple[str, str, int, int, bool, str] | None:
    """(op, space, width, matrices, trans, addr) for a shared-memory instruction, else None."""
    parts = st.opcode.split(".")
    head = parts[0]
    spaces = {p.split("::")[0] for p in parts[1:]} & set(_STATE_SPACES)
    brackets = _brackets(st.operands)
    if not brackets:
        return None
    vec = next((int(p[1:]) for p in parts if re.fullmatch(r"v\d+", p)), 1)
    if head in ("ld", "st", "atom", "red"):
        if spaces and "shared" not in spaces:
            return None
        op = {"ld": "load", "st": "store"}.get(head, head)
        return op, "shared" if spaces else "generic", _type_bytes(parts) * vec, 1, False, brackets[0]
    if head in ("ldmatrix", "stmatrix"):
        matrices = next((int(p[1:]) for p in parts if p in ("x1", "x2", "x4")), 1)
        return head, "shared", 16, matrices, "trans" in parts, brackets[0]
    if head == "cp" and len(parts) > 1 and parts[1] == "async":
        if len(parts) > 2 and parts[2] == "bulk":
            names = [p.split("::")[0] for p in parts[3:] if p.split("::")[0] in _STATE_SPACES]
            if "shared" not in names:
                return None
            addr = brackets[names.index("shared")] if names.index("shared") < len(brackets) else brackets[0]
            size = next((int(o) for o in st.operands if re.fullmatch(r"\d+", o)), 0)
            return "cp.async.bulk", "shared", size, 1, False, addr
        if "shared" not in spaces:
            return None
        size = next((int(o) for o in st.operands[2:3] if re.fullmatch(r"\d+", o)), 0)
        return "cp.async", "shared", size, 1, False, brackets[0]
    return None


def _register_of(addr: str) -> tuple[str, int]:
    """``%rd4+16`` -> ("%rd4", 16); ``sym+128`` -> ("sym", 128)."""
    m = re.fullmatch(r"\s*([%\w$.]+)\s*(?:([+-])\s*(-?\s*(?:0x[0-9a-fA-F]+|\d+)))?\s*", addr)
    if not m:
        return addr.strip(), 0
    off = int(m.group(3).replace(" ", ""), 0) if m.group(3) else 0
    return m.group(1), -off if m.group(2) == "-" else off


def _array_of(
    addr: str, defs: dict[str, list[Statement]], arrays: dict[str, int], externs: set[str]
) -> str | None:
    """The shared array an address expression reaches through the definitions of its registers."""
    root, _ = _register_of(addr)
    found: set[str] = set()
    seen: set[str] = set()
    todo = [root]
    while todo and len(seen) < 400:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in arrays:
            found.add(name)
            continue
        for st in defs.get(name, ()):
            head = st.opcode.split(".")[0]
            if head in ("ld", "atom", "ldmatrix", "setp"):
                continue  # a loaded value is data, not a base address
            for o in st.operands[1:]:
                r, _ = _register_of(o)
                if r.startswith("%") or r in arrays:
                    todo.append(r)
    if len(found) != 1:
        return None
    sym = found.pop()
    return "extern" if sym in externs else demangle_variable(sym)


def definitions(statements: tuple[Statement, ...]) -> dict[str, list[Statement]]:
    """Register -> the statements that write it (the first operand of a non-store instruction)."""
    defs: dict[str, list[Statement]] = {}
    for st in statements:
        head = st.opcode.split(".")[0]
        if head in ("st", "red", "bra", "bar", "ret", "exit", "stmatrix", "cp", "membar", "fence"):
            continue
        if st.operands:
            for r in (
                re.findall(r"%[\w$]+", st.operands[0].strip("{}"))
                if st.operands[0].startswith("{")
                else [st.operands[0]]
            ):
                defs.setdefault(r.strip(), []).append(st)
    return defs


def shared_instructions(ptx: str, entry: str) -> list[SharedInstr]:
    """Every shared-memory instruction of ``entry`` in PTX order (see the module docstring), then those of the
    device functions it calls without inlining (:func:`called_functions`; ``function`` names theirs)."""
    arrays = shared_arrays(ptx, entry)
    text = _strip_comments(ptx)
    externs = {m.group(4) for m in _SHARED_DECL.finditer(text) if m.group(1) or not m.group(5)}
    bodies = [("", parse_body(ptx, entry))]
    bodies += [(name, parse_function(ptx, name)) for name in called_functions(ptx, entry)]
    out: list[SharedInstr] = []
    for function, body in bodies:
        defs = definitions(body.statements)
        for st in body.statements:
            c = _classify(st)
            if c is None:
                continue
            op, space, width, matrices, trans, addr = c
            text_ = st.text[:-1] if st.text.endswith(";") else st.text
            out.append(
                SharedInstr(
                    index=len(out),
                    ptx_line=st.ptx_line,
                    text=text_,
                    op=op,
                    width=width,
                    matrices=matrices,
                    trans=trans,
                    space=space,
                    addr=addr,
                    file=st.file,
                    line=st.line,
                    array=_array_of(addr, defs, arrays, externs),
                    predicate=st.predicate,
                    function=function,
                )
            )
    return out


def find_entry(ptx: str, kernel: str | None) -> str:
    """The mangled entry named ``kernel`` (its demangled name, qualified name or mangled name); the only entry
    when ``kernel`` is None. Unknown: a :class:`SpecError` listing the kernels."""
    names = entry_names(ptx)
    if not names:
        raise SpecError("the PTX has no kernel entry (.entry)", key="--kernel")
    listing = ", ".join(f"{demangle_function(n)} ({n})" if demangle_function(n) != n else n for n in names)
    if kernel is None:
        if len(names) == 1:
            return names[0]
        raise SpecError(f"several kernels, name one; kernels: {listing}", key="--kernel")
    hits = [n for n in names if kernel in (n, demangle_function(n), demangle_function(n).split("::")[-1])]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise SpecError(f"no kernel {kernel!r}; kernels: {listing}", key="--kernel")
    raise SpecError(
        f"{kernel!r} names several kernels (overloads); give the mangled name: {listing}", key="--kernel"
    )
