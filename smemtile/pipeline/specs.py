"""Specs resolved against kernel families: the one place a spec with ``kernel:`` becomes a configuration.

``resolve`` turns a spec document into a :class:`Resolved`: the spec every command analyses and, for a kernel
spec, the family's configuration. A kernel spec's buffers and accesses are the family's own (its
:meth:`~smemtile.families.base.Family.spec`): the spec may omit them; if it gives them they must match (a
buffer's dtype and shape, an access's op, width and every lane's address), else one error names the first
difference. A ``tile:`` constant the family does not have is refused with the known ones.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from smemtile.errors import SpecError
from smemtile.families import FAMILIES, KernelConfig, configure, get_family, reconfigure, split_params
from smemtile.families.base import ContractViolation, Family
from smemtile.fileio import SPEC_BUDGET, printable, read_text
from smemtile.model.analysis import AccessResult, analyze_spec
from smemtile.model.arch import Arch
from smemtile.model.layout import Layout
from smemtile.model.spec import KernelSpec, load_yaml, spec_from_dict

MAX_SPEC_BYTES = SPEC_BUDGET  # a spec is small: anything larger is refused before it is read


@dataclass(frozen=True)
class Resolved:
    """A spec ready for every command: ``spec`` is what is analysed; ``config`` the family's configuration
    (its baseline layouts are the spec's) when the spec has ``kernel:``."""

    spec: KernelSpec
    doc: dict
    config: KernelConfig | None = None
    documents: int = 1  # YAML documents in the file (``load(first=True)`` took the first of a stream)

    @property
    def family(self) -> Family | None:
        return FAMILIES[self.config.family] if self.config is not None else None

    @property
    def source(self) -> str:
        return self.spec.source


def read_spec_text(path: str | Path) -> str:
    """The spec's text through ``smemtile.fileio.read_text`` (the one reader: a regular file, at most 1 MiB,
    strict UTF-8; FIFOs and devices refused before anything is opened)."""
    return read_text(path, what="spec")


def load(path: str | Path, *, arch: Arch | str | None = None, first: bool = False) -> Resolved:
    """Read, validate and resolve a spec file (``arch`` overrides the spec's architecture). ``first``: a stream
    of specs (``smemtile tiles --format yaml``) resolves to its first document (``documents`` says how many
    there were: the caller says so); otherwise a stream is refused with one line."""
    text = read_spec_text(path)
    name = "<stdin>" if str(path) == "-" else printable(path)
    docs = load_yaml(text, name, multi=True)
    if len(docs) > 1 and not first:
        raise SpecError(
            f"holds {len(docs)} YAML documents (a stream of specs); give one spec (e.g. smemtile "
            "tiles ... --top 1 --format yaml)",
            source=name,
        )
    doc = docs[0] if docs else None
    if not isinstance(doc, dict):
        raise SpecError("the spec must be a YAML mapping with arch, buffers and accesses", source=name)
    return replace(resolve(doc, name, arch=arch), documents=len(docs))


def resolve(doc: dict, source: str = "<spec>", *, arch: Arch | str | None = None) -> Resolved:
    if arch is not None:
        doc = {**doc, "arch": arch.name if isinstance(arch, Arch) else str(arch)}
    if doc.get("kernel") is None:
        return Resolved(spec_from_dict(doc, source), doc)
    # A kernel spec: its head (arch, tile, kernel, stages, threads) picks the configuration; its buffers and
    # accesses, if any, are read with every constant of the family in scope and must match the family's.
    head = spec_from_dict({k: v for k, v in doc.items() if k not in ("buffers", "accesses")}, source)
    try:
        cfg = kernel_config(head, doc, check=False, retarget=arch is not None)
        fam = FAMILIES[cfg.family]
        _check_config(fam, cfg, head.threads)  # the configuration first: its errors say the most
        retargeted = bool(cfg.notes)
        layouts = _user_layouts(doc, fam, cfg, source, stages_may_differ=retargeted)
        cfg = reconfigure(cfg, layouts=layouts, check=False)
        _check_config(fam, cfg, head.threads)
    except ContractViolation as e:
        raise SpecError(str(e), source=source) from None
    if doc.get("accesses") is not None:
        if retargeted:  # the spec's accesses describe the kernel for its own arch, not this one
            cfg = replace(
                cfg,
                notes=(
                    *cfg.notes,
                    f"the spec's accesses describe the {doc.get('arch')} kernel; "
                    f"the {cfg.arch.name} kernel's own accesses are used",
                ),
            )
        else:
            _check_accesses(doc, fam, cfg, source)
    out = replace(
        fam.spec(cfg),
        source=source,
        name=head.name,
        description=head.description,
        regs=head.regs,
        kernel=head.kernel,
    )
    return Resolved(out, doc, cfg)


def _check_config(fam: Family, cfg: KernelConfig, threads: int | None) -> None:
    configure(
        fam,
        {**{k: v for k, v in cfg.params.items() if k not in cfg.defaulted}, **cfg.problem},
        cfg.layouts,
        cfg.arch,
        threads=threads,
    )


def kernel_config(spec: KernelSpec, doc: dict, *, check: bool = True, retarget: bool = False) -> KernelConfig:
    """The family configuration a kernel spec's head describes (dense layouts). ``retarget``: the arch was
    overridden, so the family may adapt parameters the arch cannot do (with a note)."""
    fam = get_family(spec.kernel.family)
    names = [p.name for p in fam.params]
    params: dict[str, Any] = {}
    for k, v in spec.tile.items():
        if k not in names:
            close = difflib.get_close_matches(k, names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ContractViolation(
                f"{fam.name} has no parameter {k!r}{hint}; its parameters: {', '.join(names)}",
                key=f"tile.{k}",
            )
        params[k] = v
    for k in doc.get("constants") or {}:  # a family parameter may also be given as a constant
        if k in names and k not in params:
            params[k] = spec.constants[k]
    if "stages" in doc and "STAGES" in names:
        if "STAGES" in params and params["STAGES"] != spec.stages:
            raise ContractViolation(
                f"stages: {spec.stages} but tile.STAGES = {params['STAGES']}", key="stages"
            )
        params["STAGES"] = spec.stages
    tparams, problem = split_params(fam, dict(spec.kernel.params), "kernel")
    for k, v in tparams.items():
        if k in params and params[k] != v:
            raise ContractViolation(f"{k} = {v} but tile.{k} = {params[k]}", key=f"kernel.{k}")
        params[k] = v
    notes: list[str] = []
    suggested: tuple[str, ...] = ()
    if not set(params) - set(fam.problem_params):  # no tile given: the family's tile model picks one
        kept = dict(params)
        params, notes = _model_pick(fam, problem, spec.arch, kept)
        params = {**params, **kept}
        suggested = tuple(k for k in params if k not in kept)
    if retarget:
        params, more = fam.retarget(params, spec.arch)
        notes = [*notes, *more]
    return configure(
        fam,
        {**params, **problem},
        {},
        spec.arch,
        threads=spec.threads if check else None,
        check=check,
        notes=tuple(notes),
        suggested=suggested,
    )


def _model_pick(fam: Family, problem: dict, arch: Arch, kept: dict | None = None) -> tuple[dict, list[str]]:
    """The tile model's #1 for the problem (the family's ranker, as `smemtile tiles` ranks), with the reason;
    ``kept``: the family's problem parameters the spec gave (a stencil's R), part of the problem here."""
    full = {
        pk.name: problem.get(pk.name, pk.default)
        for pk in fam.problem_keys
        if not pk.dense or pk.name in problem
    } | (kept or {})
    try:
        ranker = fam.ranker(full, arch.name, None)
        top = ranker.top(1) if ranker is not None else []
    except SpecError:
        top = []
    if not top:
        return {}, []
    first = ranker(top[0], "model")  # the ranker's own account of its #1 (as `smemtile tune` reads it)
    why = first.model_reason or "the model's #1"
    unit, digits = ("TFLOP/s", 1) if fam.work(full)[0] == "tflops" else ("GB/s", 0)
    pred = f", {first.predicted:.{digits}f} {unit} predicted" if first.predicted else ""
    size = ", ".join(f"{k}={v}" for k, v in full.items() if isinstance(v, int))
    pick = ", ".join(f"{k}={v}" for k, v in top[0].items())
    return dict(top[0]), [
        f"no tile given: the tile model's #1 for {size} ({pick}{pred}; {why}); set tile: to choose another"
    ]


def _user_layouts(
    doc: dict, fam: Family, cfg: KernelConfig, source: str, *, stages_may_differ: bool = False
) -> dict[str, Layout]:
    """The layouts of the spec's own buffers, read with the family's constants; each buffer must be one of
    the family's, with its dtype, shape and stages (not the stages when ``--arch`` retargeted them)."""
    if not doc.get("buffers"):
        return {}
    own_doc = fam.spec_doc(cfg)
    mine_doc = {**own_doc, "buffers": doc["buffers"], "accesses": None, "kernel": {"family": fam.name}}
    mine_doc["constants"] = {**own_doc.get("constants", {}), **_helpers(doc, own_doc)}
    mine = spec_from_dict(mine_doc, source).buffers
    own = {b.name: b for b in fam.spec(cfg).buffers}
    for b in mine:
        where = f"buffers.{b.name}"
        if b.name not in own:
            raise SpecError(
                f"the {fam.name} kernel has no buffer {b.name!r}; its buffers: {', '.join(own)}",
                key=where,
                source=source,
            )
        o = own[b.name]
        for what, m, t in (
            ("dtype", b.dtype, o.dtype),
            ("shape", list(b.shape), list(o.shape)),
            ("stages", b.stages, o.stages),
        ):
            if m != t and not (what == "stages" and stages_may_differ):
                raise SpecError(
                    f"{what} {m} does not match the {fam.name} kernel's {t} for this configuration "
                    "(omit buffers: to use the kernel's, or give only the layout)",
                    key=f"{where}.{what}",
                    source=source,
                )
    return {b.name: b.layout for b in mine}


def _helpers(doc: dict, own_doc: dict) -> dict:
    """The spec's own constants that are not the family's (names its access expressions may use)."""
    fam_names = set(own_doc.get("tile", {})) | set(own_doc.get("constants", {})) | {"THREADS"}
    return {k: v for k, v in (doc.get("constants") or {}).items() if k not in fam_names}


def _check_accesses(doc: dict, fam: Family, cfg: KernelConfig, source: str) -> None:
    """The spec's own accesses, evaluated against the family's buffers, must equal the family's lane for lane."""
    own_doc = fam.spec_doc(cfg)
    mine_doc = copy.deepcopy(own_doc)
    mine_doc["accesses"] = doc["accesses"]
    mine_doc["constants"] = {**own_doc.get("constants", {}), **_helpers(doc, own_doc)}
    mine = {r.access.name: r for r in analyze_spec(spec_from_dict(mine_doc, source))}
    own = {r.access.name: r for r in analyze_spec(fam.spec(cfg))}
    for name in own:
        if name not in mine:
            raise SpecError(
                f"the {fam.name} kernel's access {name!r} is missing; list all of "
                f"{', '.join(own)} or omit accesses: to use the kernel's own",
                key="accesses",
                source=source,
            )
    for name, r in mine.items():
        where = f"accesses.{name}"
        if name not in own:
            raise SpecError(
                f"the {fam.name} kernel has no access {name!r}; its accesses: {', '.join(own)}",
                key=where,
                source=source,
            )
        why = _difference(r, own[name])
        if why:
            raise SpecError(
                f"does not match the {fam.name} kernel's own access: {why} (omit accesses: to use "
                "the kernel's; `smemtile generate --json` prints them as kernel_accesses)",
                key=where,
                source=source,
            )


def _difference(mine: AccessResult, own: AccessResult) -> str | None:
    a, b = mine.access, own.access
    for what in ("buffer", "op", "width", "matrices", "trans"):
        if getattr(a, what) != getattr(b, what) and (
            what not in ("matrices", "trans") or a.op in ("ldmatrix", "stmatrix")
        ):
            return f"{what} {getattr(a, what)} where the kernel has {getattr(b, what)}"
    ma, mb = mine.bank, own.bank
    if ma.addresses.shape != mb.addresses.shape:
        return f"{ma.addresses.shape[0]} instructions where the kernel issues {mb.addresses.shape[0]}"

    def order(r: AccessResult) -> np.ndarray:  # instructions by (warp, loop values): the loops' order is free
        keys = [(int(r.warp[i]), tuple(sorted(r.loop_values[i].items()))) for i in range(len(r.warp))]
        return np.array(sorted(range(len(keys)), key=keys.__getitem__))

    if sorted(map(tuple, (sorted(x.items()) for x in mine.loop_values))) != sorted(
        map(tuple, (sorted(x.items()) for x in own.loop_values))
    ):
        return "its loop variables or their ranges differ from the kernel's"
    ia, ib = order(mine), order(own)
    act_a, act_b = ma.active[ia], mb.active[ib]
    adr_a, adr_b = ma.addresses[ia], mb.addresses[ib]
    for arr, what in ((act_a != act_b, "active lanes"), (np.where(act_b, adr_a != adr_b, False), "address")):
        if arr.any():
            j, lane = (int(x) for x in np.argwhere(arr)[0])
            i = int(ib[j])
            return (
                f"instruction {i} ({own.label(i)}), lane {lane}: {what} differs "
                f"(spec byte {int(adr_a[j, lane])}, kernel byte {int(adr_b[j, lane])})"
            )
    if (ma.sources is None) != (mb.sources is None) or (
        ma.sources is not None and np.where(act_b, ma.sources[ia] != mb.sources[ib], False).any()
    ):
        return "the cp.async source offsets differ"
    return None
