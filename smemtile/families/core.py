"""The registry loaded: every family module imported, ``configure`` / ``reconfigure`` / ``get_family``
(``smemtile.families`` re-exports these names lazily)."""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from smemtile.families.base import (
    ContractViolation,
    Family,
    KernelConfig,
    LaunchConfig,
    check_problem,
)
from smemtile.families.registry import REGISTRY as _REGISTRY
from smemtile.model.arch import Arch, get_arch
from smemtile.model.layout import Layout


def load(module: str) -> Family:
    """The ``FAMILY`` a registry line names (a module under ``smemtile.families``)."""
    return importlib.import_module(f"smemtile.families.{module}").FAMILY


class _Families(dict):
    """The registry's families by name (a dict), each family's module imported when it is first looked up
    (``FAMILIES[name]``, ``get``, ``in`` imports nothing): analysing an hgemm spec loads hgemm, not every family.
    Anything that lists the families (iteration, ``keys``, ``values``, ``items``, ``len``, ``==``, ...) loads the
    rest first and then sees exactly the dict an eager import gave: the registry's order, then any family added
    since (tests may add one), less any deleted."""

    def __init__(self, registry: dict[str, str]):
        super().__init__()
        self._pending = dict(registry)  # name -> module, not imported yet
        self._keys = list(registry)  # the order the eager dict would have, while some are pending

    def _load(self, name: str) -> None:
        dict.__setitem__(self, name, load(self._pending.pop(name)))

    def _complete(self) -> None:
        if not self._pending and self._keys is None:
            return
        for name in list(self._pending):
            self._load(name)
        items = [(k, dict.__getitem__(self, k)) for k in self._keys]
        dict.clear(self)
        dict.update(self, items)
        self._keys = None  # a plain dict from here on

    def __getitem__(self, key):
        if key in self._pending:
            self._load(key)
        return dict.__getitem__(self, key)

    def __contains__(self, key) -> bool:
        return key in self._pending or dict.__contains__(self, key)

    def get(self, key, default=None):
        return self[key] if key in self else default

    def __setitem__(self, key, value) -> None:
        if self._keys is not None:
            self._pending.pop(key, None)
            if key not in self._keys:
                self._keys.append(key)
        dict.__setitem__(self, key, value)

    def __delitem__(self, key) -> None:
        if self._keys is None:
            dict.__delitem__(self, key)
            return
        if key not in self:
            raise KeyError(key)
        self._pending.pop(key, None)
        dict.pop(self, key, None)
        self._keys.remove(key)

    def __len__(self) -> int:
        return len(self._keys) if self._keys is not None else dict.__len__(self)

    def __reduce_ex__(self, protocol):
        return dict, (list(self.items()),)  # pickles as the plain dict an eager import gave


def _listing(name: str):
    method = getattr(dict, name)

    def listed(self, *args, **kwargs):
        self._complete()
        return method(self, *args, **kwargs)

    listed.__name__ = name
    return listed


for _name in (
    "__iter__", "__reversed__", "__repr__", "__eq__", "__ne__", "__or__", "__ror__", "__ior__",
    "keys", "values", "items", "copy", "pop", "popitem", "setdefault", "update", "clear",
):  # fmt: skip
    setattr(_Families, _name, _listing(_name))


FAMILIES: dict[str, Family] = _Families(_REGISTRY)

__all__ = [
    "FAMILIES",
    "ContractViolation",
    "Family",
    "KernelConfig",
    "LaunchConfig",
    "configure",
    "get_family",
    "reconfigure",
]


def get_family(name: object) -> Family:
    key = str(name).lower()
    if key not in FAMILIES:
        close = difflib.get_close_matches(key, FAMILIES, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ContractViolation(
            f"unknown kernel family {name!r}{hint}; known: {', '.join(FAMILIES)}", key="kernel.family"
        )
    return FAMILIES[key]


def split_params(fam: Family, values: dict[str, Any], where: str = "kernel") -> tuple[dict, dict]:
    """(template parameters, problem keys) of ``values``; any other name is refused with the known ones."""
    names = [p.name for p in fam.params]
    problem_names = [p.name for p in fam.problem_keys]
    params, problem = {}, {}
    for k, v in values.items():
        if k in names:
            params[k] = v
        elif k in problem_names:
            problem[k] = v
        else:
            known = [*names, *problem_names]
            close = difflib.get_close_matches(str(k), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ContractViolation(
                f"{fam.name} has no parameter {k!r}{hint}; known: {', '.join(known)}", key=f"{where}.{k}"
            )
    return params, problem


_DERIVED: dict[tuple, tuple[Arch, dict[str, int]]] = {}


def _derived(fam: Family, full: dict[str, int], user: set[str], arch: Arch) -> dict[str, int]:
    """``fam.derive(full, user, arch)``, computed once per process for each (values, user-set names, arch): a
    derivation is a pure function of them (hgemm's MIN_BLOCKS runs the occupancy model), and the fix search and
    the tile models configure the same parameters again for every layout or problem they try."""
    if type(fam).derive is Family.derive:
        return fam.derive(full, user, arch)  # the default derives nothing
    key = (type(fam), fam.name, tuple(full.items()), frozenset(user), arch.name)
    hit = _DERIVED.get(key)
    if hit is not None and (hit[0] is arch or hit[0] == arch):
        return dict(hit[1])
    if len(_DERIVED) > 4096:
        _DERIVED.clear()
    out = dict(fam.derive(full, user, arch))
    _DERIVED[key] = (arch, out)
    return dict(out)


def configure(
    family: str | Family,
    params: dict[str, Any] | None = None,
    layouts: dict[str, Any] | None = None,
    arch: Arch | str = "sm_90",
    *,
    threads: int | None = None,
    check: bool = True,
    notes: tuple[str, ...] = (),
    suggested: tuple[str, ...] = (),
) -> KernelConfig:
    """A validated configuration from plain values.

    ``params`` mixes template parameters (BM, TILE, ...) and problem keys (M, rows, ...); the rest take the
    family's defaults (some depend on ``arch``: Family.derive). ``layouts`` maps buffer name -> Layout (or a
    ``{pad, swizzle}`` mapping); missing buffers are dense. ``threads``, when given (a spec's ``threads:``),
    must equal what the tile implies. Raises :class:`ContractViolation` (exit 2) naming the first broken rule.
    """
    fam = family if isinstance(family, Family) else get_family(family)
    arch = arch if isinstance(arch, Arch) else get_arch(arch)
    tparams, problem = split_params(fam, dict(params or {}))
    full = fam.defaults()
    for p in fam.params:
        if p.name not in tparams:
            continue
        v = tparams[p.name]
        if isinstance(v, bool) or not isinstance(v, int):
            raise ContractViolation(f"must be a whole number, got {v!r}", key=f"{fam.name}.{p.name}")
        if p.allowed is not None and v not in p.allowed:
            raise ContractViolation(
                f"{v} is not allowed; allowed: {', '.join(map(str, p.allowed))} ({p.doc})",
                key=f"{fam.name}.{p.name}",
            )
        if p.allowed is None and not p.lo <= v <= p.hi:
            raise ContractViolation(
                f"{v} is out of range ({p.lo}..{p.hi}; {p.doc})", key=f"{fam.name}.{p.name}"
            )
        full[p.name] = v
    full = _derived(fam, full, set(tparams), arch)
    problem = check_problem(fam, problem)
    lay = {k: Layout.of(v) for k, v in (layouts or {}).items()}
    own = KernelConfig(fam.name, full, lay, arch, problem)
    for name, layout in fam.default_layouts(own).items():  # layouts the kernel fixes (a TMA swizzle mode)
        lay.setdefault(name, layout)
    for b in fam.buffers(own):
        lay.setdefault(b["name"], Layout())
    defaulted = tuple(k for k in full if k not in tparams)
    cfg = KernelConfig(
        fam.name,
        full,
        lay,
        arch,
        problem,
        notes=tuple(notes),
        defaulted=defaulted,
        suggested=tuple(k for k in suggested if k in full),
    )
    if check:
        problems = fam.problems(cfg)
        implied = fam.threads(full)
        if threads is not None and int(threads) != implied:
            problems.insert(0, fam.threads_message(full, int(threads), implied))
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise ContractViolation(f"{fam.name}: {problems[0]}{more}")
        fam.launch(cfg)  # the grid must fit CUDA's limits for this problem
    return cfg


def reconfigure(
    cfg: KernelConfig,
    *,
    params: dict | None = None,
    layouts: dict | None = None,
    arch: Arch | str | None = None,
    problem: dict | None = None,
    check: bool = True,
) -> KernelConfig:
    """``cfg`` with some values changed; parameters the user never set stay defaults (re-derived for a new
    arch), so a later fallback (Family.relax) may still change them."""
    user = {k: v for k, v in cfg.params.items() if k not in cfg.defaulted}
    return configure(
        cfg.family,
        {**user, **(params or {}), **cfg.problem, **(problem or {})},
        {**cfg.layouts, **(layouts or {})},
        arch if arch is not None else cfg.arch,
        check=check,
        notes=cfg.notes,
        suggested=cfg.suggested,
    )
