"""The spec: a YAML description of shared-memory buffers and the accesses of a kernel's inner loop.

Validated once into frozen dataclasses; every error names the file, the key and the allowed values.
See docs/spec.md for every key and samples/ for examples.
"""

from __future__ import annotations

import difflib
import math
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from smemtile.errors import SpecError
from smemtile.fileio import printable, read_text
from smemtile.model.arch import FEATURES, Arch, get_arch
from smemtile.model.banks import WIDTHS, check_access
from smemtile.model.dtypes import DTYPE_BYTES, DTYPE_FEATURES, RANKED, get_dtype
from smemtile.model.expr import Expr, evaluate, parse_expr
from smemtile.model.layout import Layout, Swizzle
from smemtile.model.memo import memo

DTYPES = DTYPE_BYTES  # spec dtype -> bytes (smemtile.model.dtypes holds every per-dtype fact)
TOP_KEYS = (
    "name",
    "description",
    "arch",
    "threads",
    "tile",
    "constants",
    "stages",
    "kernel",
    "buffers",
    "accesses",
    "regs",
    "problem",
)
BUFFER_KEYS = ("name", "dtype", "shape", "layout", "stages", "note")
LAYOUT_KEYS = ("pad", "swizzle", "tma_swizzle", "base", "global_stride", "wgmma_swizzle")
TMA_KEYS = LAYOUT_KEYS[2:]  # a TMA tile (Hopper): smemtile.model.tma checks the hardware's rules
ACCESS_KEYS = (
    "name",
    "buffer",
    "op",
    "width",
    "row",
    "col",
    "index",
    "stage",
    "address",
    "addresses",
    "source",
    "over",
    "matrices",
    "trans",
    "warps",
    "active",
    "role",
    "note",
)
ROLES = ("copy", "inner", "epilogue", "other")  # where an access runs: tile copy, inner loop, epilogue
BUILTIN_VARS = ("lane", "warp", "tid")
MAX_INSTRUCTIONS = 1 << 16  # per access and in all (warps x loop values): bounds analyze's time and memory
MAX_BUFFERS = 64
ADDRESS_LIMIT = 1 << 32  # a raw byte offset beyond this is refused here (the buffer check names the range)
MAX_ACCESSES = 256
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_ACCESS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}")  # ASCII only: no bidi or zero-width characters
# C++ keywords and the names the printed declarations use themselves (analyze part 3)
CPP_RESERVED = frozenset(
    "alignas alignof asm auto bool break case catch char class const constexpr continue decltype default delete do "
    "double else enum explicit extern false float for friend goto if inline int long mutable namespace new noexcept "
    "nullptr operator private protected public register return short signed sizeof static struct switch template "
    "this throw true try typedef typename union unsigned using virtual void volatile while smem kernel".split()
)
DEFAULT_THREADS = 32  # without ``threads:`` one warp is analysed, and the report says so
PROBLEM_KEYS = (
    "M",
    "N",
    "K",
    "dtype",
)  # ``problem:`` of a spec without ``kernel:``: a GEMM C[M,N] = A[M,K] B[K,N]


@dataclass(frozen=True)
class Buffer:
    name: str
    dtype: str
    shape: tuple[int, ...]
    layout: Layout = Layout()
    stages: int = 1

    @property
    def elem_bytes(self) -> int:
        return DTYPES[self.dtype]

    @property
    def cols(self) -> int:
        return self.shape[-1]

    @property
    def rows(self) -> int:
        """Rows of one stage (1 for a 1-D buffer)."""
        return self.shape[-2] if len(self.shape) >= 2 else 1

    @property
    def stage_count(self) -> int:
        """Copies of the tile: the first dimension of a 3-D shape [stage, row, col], else ``stages``."""
        return self.shape[0] if len(self.shape) == 3 else self.stages

    @property
    def stage_bytes(self) -> int:
        """Bytes of one stage with the buffer's layout (padding included)."""
        return self.bytes() // self.stage_count

    def bytes(self, layout: Layout | None = None) -> int:
        """Bytes of all stages with ``layout`` (default: the buffer's own)."""
        lay = layout or self.layout
        return lay.storage_elements(self.shape) * self.elem_bytes * self.stages

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "layout": self.layout.to_dict(),
            "stages": self.stages,
            "bytes": self.bytes(),
        }

    def to_doc(self) -> dict:
        d: dict[str, Any] = {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}
        if self.layout != Layout():
            d["layout"] = self.layout.to_dict()
        if self.stages != 1:
            d["stages"] = self.stages
        return d


@dataclass(frozen=True)
class Access:
    name: str
    buffer: str
    op: str
    width: int
    row: Expr | None = None
    col: Expr | None = None
    index: Expr | None = None  # 1-D buffers: element index
    stage: Expr | None = None  # 3-D buffers [stage, row, col]: which stage (with row and col)
    address: Expr | None = None  # raw: byte offset expression
    addresses: tuple[int, ...] | None = None  # raw: 32 byte offsets
    over: tuple[tuple[str, tuple[int, ...]], ...] = ()  # loop variable -> its values
    matrices: int = 4
    trans: bool = False
    warps: tuple[int, ...] | None = None
    # cp.async: global element index each lane copies from (relative to a 128-byte-aligned array); None means
    # the coalesced copy (lane l reads the l-th `width`-byte chunk)
    source: Expr | None = None
    active: Expr | None = None  # lanes take part where this is non-zero (idle lanes neither read nor write)
    role: str = "other"  # copy | inner | epilogue | other
    note: str = ""

    @property
    def raw(self) -> bool:
        return self.addresses is not None or self.address is not None

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"name": self.name, "buffer": self.buffer, "op": self.op, "width": self.width}
        for k in ("stage", "row", "col", "index", "address", "source", "active"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v.text
        if self.addresses is not None:
            d["addresses"] = list(self.addresses)
        if self.over:
            d["over"] = {k: _range_of(v) for k, v in self.over}
        if self.op in MATRIX_OPS:
            d.update(matrices=self.matrices, trans=self.trans)
        if self.warps is not None:
            d["warps"] = list(self.warps)
        if self.role != "other":
            d["role"] = self.role
        if self.note:
            d["note"] = self.note
        return d


MATRIX_OPS = ("ldmatrix", "stmatrix")


def _range_of(values: tuple[int, ...]) -> list[int]:
    """[start, stop] or [start, stop, step] giving exactly ``values`` (the loop step is kept)."""
    if len(values) == 1:
        return [values[0], values[0] + 1]
    step = values[1] - values[0]
    out = [values[0], values[-1] + step]
    return out + [step] if step != 1 else out


@dataclass(frozen=True)
class KernelInfo:
    family: str
    params: dict = field(default_factory=dict)


@dataclass(frozen=True)
class KernelSpec:
    source: str
    arch: Arch
    buffers: tuple[Buffer, ...]
    accesses: tuple[Access, ...]
    threads: int | None = None
    constants: dict = field(default_factory=dict)
    stages: int = 1
    kernel: KernelInfo | None = None
    regs: int | None = None
    name: str = ""
    description: str = ""
    tile: dict = field(
        default_factory=dict
    )  # the `tile:` section as written (a kernel's template parameters)
    problem: dict = field(default_factory=dict)  # the `problem:` section (M, N, K, dtype), if any

    @property
    def warps(self) -> int:
        return (self.threads + 31) // 32 if self.threads else 1

    @property
    def block_threads(self) -> int:
        """Threads per block: ``threads:``, or the stated default of one warp (``DEFAULT_THREADS``)."""
        return self.threads or DEFAULT_THREADS

    def buffer(self, name: str) -> Buffer:
        return next(b for b in self.buffers if b.name == name)

    def smem_bytes(self, layouts: dict[str, Layout] | None = None) -> int:
        """Static shared memory of all buffers (stages and padding included) with optional layout overrides."""
        layouts = layouts or {}
        return sum(b.bytes(layouts.get(b.name)) for b in self.buffers)

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "name": self.name,
            "arch": self.arch.name,
            "threads": self.threads,
            "constants": dict(self.constants),
            "stages": self.stages,
            "kernel": {"family": self.kernel.family, **self.kernel.params} if self.kernel else None,
            "problem": dict(self.problem) or None,
            "buffers": [b.to_dict() for b in self.buffers],
            "accesses": [a.to_dict() for a in self.accesses],
        }

    def to_doc(self) -> dict:
        """The spec as a YAML mapping that parses back to an equal spec (constants evaluated to integers)."""
        doc: dict[str, Any] = {}
        if self.name:
            doc["name"] = self.name
        if self.description:
            doc["description"] = self.description
        doc["arch"] = self.arch.name
        if self.threads is not None:
            doc["threads"] = self.threads
        derived = {"THREADS": self.threads, "STAGES": self.stages}
        consts = {
            k: v for k, v in self.constants.items() if k not in self.tile and derived.get(k, object()) != v
        }
        if self.tile:
            doc["tile"] = dict(self.tile)
        if consts:
            doc["constants"] = consts
        if self.stages != 1:
            doc["stages"] = self.stages
        if self.regs is not None:
            doc["regs"] = self.regs
        if self.kernel is not None:
            doc["kernel"] = {"family": self.kernel.family, **self.kernel.params}
        if self.problem:
            doc["problem"] = dict(self.problem)
        if self.buffers:
            doc["buffers"] = [b.to_doc() for b in self.buffers]
        if self.accesses:
            doc["accesses"] = [a.to_dict() for a in self.accesses]
        return doc


def _unknown(keys, allowed, where: str, source: str) -> None:
    for k in keys:
        if k not in allowed:
            close = difflib.get_close_matches(str(k), allowed, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise SpecError(
                f"unknown key {k!r}{hint} allowed: {', '.join(allowed)}", key=where or None, source=source
            )


def _int(value, env: dict, key: str, source: str, lo: int | None = None, hi: int | None = None) -> int:
    v = evaluate(value, env, key=key, source=source)
    if lo is not None and v < lo or hi is not None and v > hi:
        rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise SpecError(f"{v} is out of range ({rng})", key=key, source=source)
    return v


def load_spec(path: str | Path) -> KernelSpec:
    """Read (``smemtile.fileio.read_text``: a regular file of at most 1 MiB, strict UTF-8) and validate a spec."""
    return parse_spec(read_text(path, what="spec"), source=printable(path))


_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when present: ~5x faster
MAX_YAML_DEPTH = 50
MAX_YAML_VALUES = 1 << 21  # values after aliases expand: a 1 MiB file holds ~500,000; an alias bomb billions
MAX_CONSTANTS = 4096  # tile: and constants: names together (a kernel uses a few dozen)
# YAML 1.1 reads `010` as 8 and `1:30` as 90 (base 60): both silently wrong for a size, so both are refused
_OCTAL = re.compile(r"[-+]?0[0-7_]+")
_SEXAGESIMAL = re.compile(r"[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?")
# what a YAML stream may not hold (the YAML 1.1 printable set, as yaml.reader checks it), to name its position
_NOT_YAML = re.compile("[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class _StrictLoader(_SAFE_LOADER):
    """safe_load that refuses a key given twice in one mapping (YAML would silently keep the last) and the
    YAML 1.1 numbers that read as something else than they look (``010`` is 8, ``1:30`` is 90)."""


def _mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a scalar", key_node.start_mark
            ) from None
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} given twice", key_node.start_mark
            )
        seen[key] = True
    return loader.construct_mapping(node, deep=deep)


def _number(loader: _StrictLoader, node: yaml.ScalarNode) -> Any:
    text = str(node.value)
    if _OCTAL.fullmatch(text):
        digits = text.replace("_", "").lstrip("+-")
        value = int(digits, 8)
        raise yaml.constructor.ConstructorError(
            None,
            None,
            f"{text} is a YAML 1.1 octal number ({value}); write {value}, or "
            f"{int(digits)} without the leading 0 if you meant decimal",
            node.start_mark,
        )
    if _SEXAGESIMAL.fullmatch(text):
        raise yaml.constructor.ConstructorError(
            None,
            None,
            f'{text} is a YAML 1.1 base-60 number; quote it ("{text}") or write the value',
            node.start_mark,
        )
    tag = node.tag.rsplit(":", 1)[-1]
    return loader.construct_yaml_int(node) if tag == "int" else loader.construct_yaml_float(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
_StrictLoader.add_constructor("tag:yaml.org,2002:int", _number)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _number)


def load_yaml(text: str, source: str, *, multi: bool = False) -> Any:
    """YAML (one document, or all of them with ``multi``) within the spec's budgets: every YAML file smemtile
    reads (specs, ``--space``, ``--shapes``, catalogues, stdin) goes through here. Refused, with one line:
    a key given twice, ``010``/``1:30`` (YAML 1.1 octal/base 60), nesting over ``MAX_YAML_DEPTH``, aliases
    that expand to over ``MAX_YAML_VALUES`` values (an alias bomb) or refer to themselves, and characters YAML
    forbids (a NUL byte) with their line and column. The size budget is the reader's (``fileio``)."""
    bad = _NOT_YAML.search(text)
    if bad:
        line = text.count("\n", 0, bad.start()) + 1
        column = bad.start() - (text.rfind("\n", 0, bad.start()) + 1) + 1
        raise SpecError(
            f"malformed YAML at line {line}, column {column}: character {printable(bad.group())} "
            "is not allowed in YAML",
            source=source,
        )
    depth = max_depth = 0
    for ch in text:  # flow and block nesting both open with [ { or indentation; bound the brackets cheaply
        if ch in "[{":
            depth += 1
            max_depth = max(max_depth, depth)
        elif ch in "]}":
            depth -= 1
    if max_depth > MAX_YAML_DEPTH:
        raise SpecError(
            f"YAML nested {max_depth} levels deep; a spec needs at most {MAX_YAML_DEPTH}", source=source
        )
    try:
        if multi:
            docs = [d for d in yaml.load_all(text, Loader=_StrictLoader) if d is not None]
        else:
            docs = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise SpecError(f"malformed YAML{where}: {problem}", source=source) from None
    except RecursionError:
        raise SpecError("YAML nested too deeply", source=source) from None
    deepest, values = _measure(docs, source)
    deepest -= 1 if multi else 0
    if deepest > MAX_YAML_DEPTH:  # block-style nesting (indentation), which the bracket count cannot see
        raise SpecError(
            f"YAML nested {deepest} levels deep; a spec needs at most {MAX_YAML_DEPTH}", source=source
        )
    if values > MAX_YAML_VALUES:
        raise SpecError(
            f"YAML aliases (*name) expand to over {MAX_YAML_VALUES} values; at most {MAX_YAML_VALUES} "
            "are read (an alias bomb?)",
            source=source,
        )
    return docs


def _measure(doc: Any, source: str) -> tuple[int, int]:
    """(nesting depth, values after aliases expand) of ``doc``, in time linear in its *distinct* lists and
    mappings: an alias shares its object, so each is measured once (a walk of the expanded tree would take
    exponential time on an alias bomb). A list or mapping that contains itself is refused."""
    done: dict[int, tuple[int, int]] = {}
    active: set[int] = set()
    stack: list[tuple[Any, bool]] = [(doc, False)]
    while stack:
        node, children_done = stack.pop()
        if not isinstance(node, (dict, list)) or (id(node) in done and not children_done):
            continue
        kids = list(node.values()) if isinstance(node, dict) else node
        if not children_done:
            if id(node) in active:
                raise SpecError("a YAML alias refers to a list or mapping that contains it", source=source)
            active.add(id(node))
            stack.append((node, True))
            for k in kids:
                if isinstance(k, (dict, list)):
                    if id(k) in active:
                        raise SpecError(
                            "a YAML alias refers to a list or mapping that contains it", source=source
                        )
                    stack.append((k, False))
            continue
        active.discard(id(node))
        depth, values = 1, 1 + len(node)
        for k in kids:
            if isinstance(k, (dict, list)):
                d, v = done[id(k)]
                depth, values = max(depth, d + 1), values + v - 1
        done[id(node)] = (depth, min(values, MAX_YAML_VALUES + 1))
    if not isinstance(doc, (dict, list)):
        return 0, 1
    return done[id(doc)]


def parse_spec(text: str, source: str = "<spec>") -> KernelSpec:
    doc = load_yaml(text, source)
    if not isinstance(doc, dict):
        raise SpecError("the spec must be a YAML mapping with arch, buffers and accesses", source=source)
    return spec_from_dict(doc, source)


def spec_from_dict(doc: dict, source: str = "<spec>") -> KernelSpec:
    _unknown(doc, TOP_KEYS, "", source)
    if "arch" not in doc:
        raise SpecError("missing key 'arch' (e.g. arch: sm_90)", source=source)
    arch = get_arch(doc["arch"], source=source)
    env: dict[str, int] = {}
    tile: dict[str, int] = {}
    for section in ("tile", "constants"):
        sec = doc.get(section) or {}
        if not isinstance(sec, dict):
            raise SpecError("must be a mapping of NAME: integer", key=section, source=source)
        if len(env) + len(sec) > MAX_CONSTANTS:
            raise SpecError(
                f"{len(env) + len(sec)} tile and constants names; a spec has at most {MAX_CONSTANTS}",
                key=section,
                source=source,
            )
        for k, v in sec.items():
            if not str(k).isidentifier() or k in BUILTIN_VARS:
                raise SpecError(f"invalid constant name {k!r}", key=f"{section}.{k}", source=source)
            env[str(k)] = _int(v, env, f"{section}.{k}", source)
            if section == "tile":
                tile[str(k)] = env[str(k)]
    threads = None
    if doc.get("threads") is not None:
        threads = _int(doc["threads"], env, "threads", source, 1, arch.max_threads_per_block)
        if threads % 32:
            raise SpecError(
                f"{threads} is not a multiple of 32 (whole warps are analysed)", key="threads", source=source
            )
        env.setdefault("THREADS", threads)
    stages = _int(doc.get("stages", 1), env, "stages", source, 1, 16)
    env.setdefault("STAGES", stages)
    regs = _int(doc["regs"], env, "regs", source, 1, 255) if doc.get("regs") is not None else None

    kernel = None
    if doc.get("kernel") is not None:
        k = doc["kernel"]
        if not isinstance(k, dict) or "family" not in k:
            raise SpecError(
                "must be a mapping with 'family' and the family's problem keys (e.g. {family: NAME, M: 4096, N: 4096, "
                "K: 4096}; docs/spec.md lists the families)",
                key="kernel",
                source=source,
            )
        params: dict[str, Any] = {}
        for kk, vv in k.items():
            if kk == "family":
                continue
            if not isinstance(kk, str) or not kk.isidentifier():
                raise SpecError(f"invalid parameter name {kk!r}", key="kernel", source=source)
            if isinstance(vv, (bool, float)) or (isinstance(vv, str) and vv.isidentifier() and vv not in env):
                params[str(kk)] = vv  # a flag, a scalar such as alpha, or a word such as a dtype name
            else:
                params[str(kk)] = _int(vv, env, f"kernel.{kk}", source)
        kernel = KernelInfo(str(k["family"]), params)
        for kk, vv in params.items():  # the problem's sizes (M, N, K, rows, ...) may appear in expressions
            if isinstance(vv, int) and not isinstance(vv, bool):
                env.setdefault(kk, vv)

    raw_bufs = doc.get("buffers")
    if raw_bufs is None and kernel is not None:
        raw_bufs = []  # a kernel spec may leave its buffers to the family (smemtile.pipeline fills them in)
    elif not isinstance(raw_bufs, list) or not raw_bufs:
        raise SpecError("must be a non-empty list of buffers", key="buffers", source=source)
    if len(raw_bufs) > MAX_BUFFERS:
        raise SpecError(
            f"{len(raw_bufs)} buffers; a spec has at most {MAX_BUFFERS}", key="buffers", source=source
        )
    buffers = []
    for i, b in enumerate(raw_bufs):
        buffers.append(_buffer_once(b, i, env, source))
    names = [b.name for b in buffers]
    if len(set(names)) != len(names):
        raise SpecError(f"duplicate buffer names in {names}", key="buffers", source=source)

    raw_acc = doc.get("accesses")
    if raw_acc is None and kernel is not None:
        raw_acc = []  # the family's own accesses are used (smemtile.pipeline)
    elif not isinstance(raw_acc, list) or not raw_acc:
        raise SpecError("must be a non-empty list of accesses", key="accesses", source=source)
    if len(raw_acc) > MAX_ACCESSES:
        raise SpecError(
            f"{len(raw_acc)} accesses; a spec has at most {MAX_ACCESSES}", key="accesses", source=source
        )
    by_name = {b.name: b for b in buffers}
    accesses = [_access_once(a, i, env, by_name, threads, source) for i, a in enumerate(raw_acc)]
    anames = [a.name for a in accesses]
    if len(set(anames)) != len(anames):
        raise SpecError(f"duplicate access names in {anames}", key="accesses", source=source)
    total = sum(instructions(a, threads) for a in accesses)
    if total > MAX_INSTRUCTIONS:
        raise SpecError(
            f"{total} instructions to analyse in all; at most {MAX_INSTRUCTIONS} per spec (narrow 'over' "
            "or 'warps')",
            key="accesses",
            source=source,
        )
    problem = _problem(doc, env, kernel, buffers, source)
    _check_arch(arch, buffers, accesses, problem, source)
    return KernelSpec(
        source=source,
        arch=arch,
        buffers=tuple(buffers),
        accesses=tuple(accesses),
        threads=threads,
        constants=env,
        stages=stages,
        kernel=kernel,
        regs=regs,
        name=_text(doc, "name", source),
        description=_text(doc, "description", source),
        tile=tile,
        problem=problem,
    )


def _problem(doc: dict, env: dict, kernel: KernelInfo | None, buffers: list[Buffer], source: str) -> dict:
    """``problem: {M, N, K, dtype}``: the GEMM the spec's tile serves (``analyze`` ranks tiles for it)."""
    raw = doc.get("problem")
    if raw is None:
        return {}
    if kernel is not None:
        raise SpecError(
            "a kernel spec gives its problem in kernel: (e.g. kernel: {family: NAME, M: 4096, ...})",
            key="problem",
            source=source,
        )
    if not isinstance(raw, dict):
        raise SpecError(
            "must be a mapping {M: .., N: .., K: .., dtype: ..} (a GEMM C[M,N] = A[M,K] B[K,N])",
            key="problem",
            source=source,
        )
    _unknown(raw, PROBLEM_KEYS, "problem", source)
    out: dict[str, Any] = {}
    for k in ("M", "N", "K"):
        if k not in raw:
            raise SpecError(
                f"missing key {k!r} (a GEMM C[M,N] = A[M,K] B[K,N])", key="problem", source=source
            )
        out[k] = _int(raw[k], env, f"problem.{k}", source, 1, 2**31 - 1)
    default = next((b.dtype for b in buffers if b.dtype in RANKED), "f32")  # RANKED: the tile model's dtypes
    dtype = raw.get("dtype", default)
    if not isinstance(dtype, str) or dtype not in RANKED:
        raise SpecError(
            f"unknown dtype {printable(dtype)!r}; allowed: {', '.join(RANKED)}",
            key="problem.dtype",
            source=source,
        )
    out["dtype"] = dtype
    for k in ("M", "N", "K"):
        env.setdefault(k, out[k])
    return out


def _check_arch(arch: Arch, buffers, accesses, problem: dict, source: str) -> None:
    """Refuse what ``arch`` lacks: an op (ldmatrix, cp.async, stmatrix), a dtype (bf16, tf32, fp8), TMA."""
    for b in buffers:
        feature = DTYPE_FEATURES.get(b.dtype)
        why = arch.lacks(feature) if feature else None
        if why:
            raise SpecError(
                f"{why} (buffer {printable(b.name)} is {b.dtype})",
                key=f"buffers.{printable(b.name)}.dtype",
                source=source,
            )
        if getattr(b.layout, "tma", None) is not None and arch.lacks("tma"):
            raise SpecError(
                f"{arch.lacks('tma')} (buffer {printable(b.name)} has a tma_swizzle layout)",
                key=f"buffers.{printable(b.name)}.layout",
                source=source,
            )
    for a in accesses:
        why = arch.lacks(a.op) if a.op in FEATURES else None
        if why:
            raise SpecError(
                f"{why} (access {printable(a.name)} of buffer {printable(a.buffer)})",
                key=f"accesses.{printable(a.name)}",
                source=source,
            )
    feature = DTYPE_FEATURES.get(problem.get("dtype", ""))
    why = arch.lacks(feature) if feature else None
    if why:
        raise SpecError(why, key="problem.dtype", source=source)


def instructions(access: Access, threads: int | None) -> int:
    """Instructions of one access: its warps times the combinations of its loop values."""
    n = len(access.warps) if access.warps else max(1, (threads or DEFAULT_THREADS) // 32)
    for _, vals in access.over:
        n *= len(vals)
    return n


def _text(doc: dict, key: str, source: str) -> str:
    v = doc.get(key, "")
    if v is None:
        return ""
    if not isinstance(v, (str, int)) or isinstance(v, bool):
        raise SpecError(f"must be text, got {type(v).__name__}", key=key, source=source)
    text = str(v)
    allowed = "\n\t" if key == "description" else ""  # a description may have lines; a name is one line
    for n, ch in enumerate(text):
        if ch not in allowed and (unicodedata.category(ch) in _HIDDEN or ch in "\u2028\u2029"):
            raise SpecError(
                f"character {printable(ch)} at position {n + 1} is a control or invisible character "
                "(bidi, zero-width); write plain text",
                key=key,
                source=source,
            )
    return text


_HIDDEN = ("Cc", "Cf", "Co", "Cn", "Cs")  # control, format (bidi, zero-width), private, unassigned, surrogate


_BUFFERS: dict[tuple, Buffer] = {}
_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
_UNSET = object()


def _buffer_once(b: Any, i: int, env: dict, source: str) -> Buffer:
    """:func:`_buffer`, parsed once per process for each entry and the values of the names its shape, stages and
    layout use: the tile models parse a family's buffers for every candidate, most of them with the same tile
    shape. Errors are never kept."""
    if not isinstance(b, dict):
        return _buffer(b, i, env, source)
    try:
        used = sorted(set(_NAME.findall(repr([b.get("shape"), b.get("stages"), b.get("layout")]))))
        key = (repr(b), tuple((n, env.get(n, _UNSET)) for n in used))
    except TypeError:
        return _buffer(b, i, env, source)
    return memo(_BUFFERS, key, lambda: _buffer(b, i, env, source))


def _buffer(b: Any, i: int, env: dict, source: str) -> Buffer:
    where = f"buffers[{i}]"
    if not isinstance(b, dict):
        raise SpecError("must be a mapping with name, dtype, shape", key=where, source=source)
    _unknown(b, BUFFER_KEYS, where, source)
    for req in ("name", "dtype", "shape"):
        if req not in b:
            raise SpecError(f"missing key {req!r}", key=where, source=source)
    name = str(b["name"])
    if not _IDENT.fullmatch(name) or name in CPP_RESERVED:
        why = (
            "is reserved (a C++ keyword, or a name the printed declarations use)"
            if name in CPP_RESERVED
            else "is not a C++ identifier of at most 64 characters (letters, digits, _)"
        )
        raise SpecError(
            f"buffer name {printable(name)!r} {why}: it names the __shared__ array",
            key=f"buffers[{i}].name",
            source=source,
        )
    where = f"buffers.{name}"
    dtype = str(b["dtype"])
    get_dtype(dtype, key=f"{where}.dtype", source=source)
    shape_raw = b["shape"] if isinstance(b["shape"], list) else [b["shape"]]
    if not 1 <= len(shape_raw) <= 3:
        raise SpecError(
            "shape must have 1, 2 or 3 dimensions ([elements], [rows, cols] or [stages, rows, cols])",
            key=f"{where}.shape",
            source=source,
        )
    shape = tuple(_int(s, env, f"{where}.shape", source, 1, 1 << 24) for s in shape_raw)
    lay = b.get("layout") or {}
    if not isinstance(lay, dict):
        raise SpecError(
            "must be a mapping: {pad: N} or {swizzle: [B, M, S]}", key=f"{where}.layout", source=source
        )
    _unknown(lay, LAYOUT_KEYS, f"{where}.layout", source)
    pad = _int(lay.get("pad", 0), env, f"{where}.layout.pad", source, 0, 1024)
    swz = None
    if lay.get("swizzle") is not None:
        s = lay["swizzle"]
        if not (isinstance(s, list) and len(s) == 3):
            raise SpecError(
                "must be [B, M, S] as in CuTe's Swizzle<B,M,S>", key=f"{where}.layout.swizzle", source=source
            )
        vals = [_int(x, env, f"{where}.layout.swizzle", source, 0, 12) for x in s]
        try:
            swz = Swizzle(*vals)
        except ValueError as e:
            raise SpecError(str(e), key=f"{where}.layout.swizzle", source=source) from None
    stages = _int(b.get("stages", 1), env, f"{where}.stages", source, 1, 16)
    if len(shape) == 3 and b.get("stages") is not None:
        raise SpecError(
            f"a 3-D shape [stages, rows, cols] has its {shape[0]} stages already: leave out 'stages'",
            key=f"{where}.stages",
            source=source,
        )
    if len(shape) == 3 and shape[0] > 16:
        raise SpecError(f"{shape[0]} stages; at most 16", key=f"{where}.shape", source=source)
    if math.prod(int(x) for x in shape) * stages > 1 << 24:
        raise SpecError(
            f"{list(shape)} x {stages} stages is more than {1 << 24} elements (shared memory is at most 228 KiB)",
            key=f"{where}.shape",
            source=source,
        )
    layout = Layout(pad, swz)
    if any(lay.get(k) is not None for k in TMA_KEYS):
        layout = _tma_layout(lay, dtype, pad or swz is not None, env, f"{where}.layout", source)
    buf = Buffer(name, dtype, shape, layout, stages)
    why = buf.layout.problem(shape)
    if why:
        raise SpecError(why, key=f"{where}.layout", source=source)
    return buf


def _tma_layout(lay: dict, dtype: str, other: bool, env: dict, where: str, source: str) -> Layout:
    """``{tma_swizzle: none|32B|64B|128B, base: BYTES, global_stride: BYTES, wgmma_swizzle: MODE}``."""
    if lay.get("tma_swizzle") is None:
        raise SpecError(
            "base, global_stride and wgmma_swizzle describe a TMA tile: give tma_swizzle too",
            key=where,
            source=source,
        )
    if other:
        raise SpecError(
            "tma_swizzle is the whole layout (the copy engine's): no pad or swizzle with it",
            key=where,
            source=source,
        )
    base = _int(lay.get("base", 0), env, f"{where}.base", source, 0, 1 << 24)
    gs = lay.get("global_stride")
    stride = None if gs is None else _int(gs, env, f"{where}.global_stride", source, 1, 1 << 40)
    try:
        return Layout.for_tma(
            str(lay["tma_swizzle"]),
            DTYPES[dtype],
            base=base,
            global_stride=stride,
            wgmma=None if lay.get("wgmma_swizzle") is None else str(lay["wgmma_swizzle"]),
        )
    except ValueError as e:
        raise SpecError(str(e), key=f"{where}.tma_swizzle", source=source) from None


def _over(raw: Any, env: dict, where: str, source: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise SpecError(
            "must map loop variables to [start, stop] or [start, stop, step] or a count",
            key=where,
            source=source,
        )
    out = []
    for var, rng in raw.items():
        if not str(var).isidentifier() or var in BUILTIN_VARS or var in env:
            raise SpecError(
                f"invalid loop variable name {var!r} (must not shadow lane/warp/tid or a constant)",
                key=where,
                source=source,
            )
        parts = rng if isinstance(rng, list) else [0, rng]
        if not 1 <= len(parts) <= 3:
            raise SpecError(
                "expected [start, stop] or [start, stop, step]", key=f"{where}.{var}", source=source
            )
        if len(parts) == 1:
            parts = [0, parts[0]]
        vals = [_int(x, env, f"{where}.{var}", source) for x in parts]
        step = vals[2] if len(vals) == 3 else 1
        if step == 0:
            raise SpecError("step must not be 0", key=f"{where}.{var}", source=source)
        rng_obj = range(vals[0], vals[1], step)
        if len(rng_obj) > MAX_INSTRUCTIONS:
            raise SpecError(
                f"range {vals} has {len(rng_obj)} values; at most {MAX_INSTRUCTIONS} instructions are "
                "analysed",
                key=f"{where}.{var}",
                source=source,
            )
        values = tuple(rng_obj)
        if not values:
            raise SpecError(f"range {vals} is empty", key=f"{where}.{var}", source=source)
        out.append((str(var), values))
    return tuple(out)


_ACCESSES: dict[tuple, Access] = {}


def _access_once(a: Any, i: int, env: dict, buffers: dict, threads: int | None, source: str) -> Access:
    """:func:`_access`, parsed once per process for each (entry, place, constants, threads, the buffer's name,
    dtype and shape): a kernel family's spec is parsed again for every layout the fix search tries, with the same
    accesses. Errors are never kept (the next parse raises them again, naming its own source)."""
    buf = buffers.get(str(a["buffer"])) if isinstance(a, dict) and "buffer" in a else None
    if buf is None:
        return _access(a, i, env, buffers, threads, source)
    key = (repr(a), i, threads, tuple(env.items()), buf.name, buf.dtype, buf.shape, buf.stages)
    return memo(_ACCESSES, key, lambda: _access(a, i, env, buffers, threads, source))


def _access(a: Any, i: int, env: dict, buffers: dict, threads: int | None, source: str) -> Access:
    where = f"accesses[{i}]"
    if not isinstance(a, dict):
        raise SpecError(
            "must be a mapping with name, buffer, op and row/col or addresses", key=where, source=source
        )
    _unknown(a, ACCESS_KEYS, where, source)
    name = str(a.get("name", f"access{i}"))
    # names reach C++ comments, YAML, terminals and HTML: plain words only
    if not _ACCESS_NAME.fullmatch(name):
        raise SpecError(
            f"name {printable(name)!r} is not a plain name: at most 64 letters, digits, _ . or -, "
            "starting with a letter or _",
            key=f"{where}.name",
            source=source,
        )
    where = f"accesses.{name}"
    if "buffer" not in a:
        raise SpecError("missing key 'buffer'", key=where, source=source)
    buf = buffers.get(str(a["buffer"]))
    if buf is None:
        raise SpecError(
            f"unknown buffer {a['buffer']!r}; buffers: {', '.join(buffers)}",
            key=f"{where}.buffer",
            source=source,
        )
    op = str(a.get("op", "load"))
    try:
        width = (
            16 if op in MATRIX_OPS else _int(a.get("width", buf.elem_bytes), env, f"{where}.width", source)
        )
        matrices = _int(a.get("matrices", 4), env, f"{where}.matrices", source)
        check_access(op, width, matrices)
    except SpecError as e:
        msg = str(e).split(": ", 1)[-1]
        raise SpecError(msg, key=f"{where}.{e.key or 'op'}", source=source) from None
    if op not in MATRIX_OPS and width < buf.elem_bytes:
        raise SpecError(
            f"width {width} is smaller than one {buf.dtype} element ({buf.elem_bytes} bytes); "
            f"allowed: {', '.join(str(w) for w in WIDTHS[op] if w >= buf.elem_bytes)}",
            key=f"{where}.width",
            source=source,
        )
    over = _over(a.get("over"), env, f"{where}.over", source)
    names = set(env) | set(BUILTIN_VARS) | {v for v, _ in over}
    exprs = {}
    for k in ("stage", "row", "col", "index", "address", "source", "active"):
        if a.get(k) is not None:
            exprs[k] = parse_expr(a[k], allowed=names, key=f"{where}.{k}", source=source)
    role = a.get("role", "other")
    if role not in ROLES:
        raise SpecError(
            f"unknown role {role!r}; allowed: {', '.join(ROLES)}", key=f"{where}.role", source=source
        )
    trans = a.get("trans", False)
    if not isinstance(trans, bool):
        raise SpecError(f"must be true or false, got {trans!r}", key=f"{where}.trans", source=source)
    note = a.get("note", "")
    if not isinstance(note, str):
        raise SpecError("must be text", key=f"{where}.note", source=source)
    if "source" in exprs and op != "cp.async":
        raise SpecError(
            f"'source' (the global element each lane copies) only applies to op cp.async, not {op}",
            key=f"{where}.source",
            source=source,
        )
    addresses = None
    if a.get("addresses") is not None:
        raw = a["addresses"]
        if (
            not isinstance(raw, list)
            or len(raw) != 32
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in raw)
        ):
            n = len(raw) if isinstance(raw, list) else 0
            raise SpecError(
                f"must be a list of 32 integer byte offsets, one per lane (got {n})",
                key=f"{where}.addresses",
                source=source,
            )
        far = next((j for j, x in enumerate(raw) if not -ADDRESS_LIMIT < x < ADDRESS_LIMIT), None)
        if far is not None:
            raise SpecError(
                f"lane {far} byte offset {raw[far]} is outside 0..{buf.bytes() - 1} ({buf.bytes()} "
                f"bytes of buffer {printable(buf.name)})",
                key=f"{where}.addresses",
                source=source,
            )
        addresses = tuple(raw)
    modes = [
        m
        for m in (
            ("row" in exprs or "col" in exprs),
            "index" in exprs,
            "address" in exprs,
            addresses is not None,
        )
        if m
    ]
    if len(modes) != 1:
        raise SpecError(
            "give exactly one of: row + col (2-D buffer), index (1-D buffer), address (byte "
            "expression) or addresses (32 byte offsets)",
            key=where,
            source=source,
        )
    if ("row" in exprs) != ("col" in exprs):
        raise SpecError("row and col go together", key=where, source=source)
    bname, dims = printable(buf.name), len(buf.shape)
    if "row" in exprs and dims == 1:
        raise SpecError(f"buffer {bname} is 1-D: use index instead of row/col", key=where, source=source)
    if "index" in exprs and dims != 1:
        use = "row and col" if dims == 2 else "stage, row and col"
        raise SpecError(f"buffer {bname} is {dims}-D: use {use}", key=where, source=source)
    if "row" in exprs and dims == 3 and "stage" not in exprs:
        raise SpecError(
            f"buffer {bname} is 3-D {list(buf.shape)} [stage, row, col]: give stage as well as row and col",
            key=where,
            source=source,
        )
    if "stage" in exprs and not ("row" in exprs and dims == 3):
        raise SpecError(
            f"'stage' addresses a 3-D buffer [stage, row, col] with row and col; buffer {bname} is {dims}-D",
            key=f"{where}.stage",
            source=source,
        )
    warps = None
    if a.get("warps") is not None:
        w = a["warps"] if isinstance(a["warps"], list) else [a["warps"]]
        if not w:
            raise SpecError(
                "must list at least one warp (or leave 'warps' out for all of them)",
                key=f"{where}.warps",
                source=source,
            )
        nw = (threads // 32) if threads else 1
        warps = tuple(_int(x, env, f"{where}.warps", source, 0, nw - 1) for x in w)
    n_inst = len(warps) if warps else ((threads or 32) // 32)
    for _, vals in over:
        n_inst *= len(vals)
    if n_inst > MAX_INSTRUCTIONS:
        raise SpecError(
            f"{n_inst} instructions to analyse; at most {MAX_INSTRUCTIONS} (narrow 'over' or 'warps')",
            key=where,
            source=source,
        )
    return Access(
        name=name,
        buffer=buf.name,
        op=op,
        width=width,
        row=exprs.get("row"),
        col=exprs.get("col"),
        index=exprs.get("index"),
        stage=exprs.get("stage"),
        address=exprs.get("address"),
        addresses=addresses,
        over=over,
        matrices=matrices,
        trans=trans,
        warps=warps,
        source=exprs.get("source"),
        active=exprs.get("active"),
        role=role,
        note=note,
    )
