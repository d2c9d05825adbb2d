"""``smemtile tiles --family NAME SIZES...``: a kernel family's own candidates (a family whose tile model ranks
for its own problem sizes, not M N K), ranked by its model through the one ranking loop
(:func:`smemtile.pipeline.rank.rank`), with its rejections, and the exports (YAML specs, JSON); the help text
of those families' options (from the registry: each tile model's ``options`` and ``tiles_examples``). No
printing."""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from smemtile.errors import SpecError
from smemtile.families import FAMILIES
from smemtile.families.tile_model import ModelOption
from smemtile.model.arch import get_arch
from smemtile.model.sizes import parse_size
from smemtile.model.tiling_gpus import get_gpu
from smemtile.pipeline.rank import rank

# ---- tiles --family NAME ROWS COLS: a kernel family's own candidates, ranked by its model ----------------------


def _gemm(fam) -> bool:
    """A GEMM family: ranked through ``tiles M N K`` (the dtype and arch imply which)."""
    return bool(getattr(fam, "tile_contract", None) or getattr(fam, "tiles_for", None))


def ranked_families() -> list[str]:
    """Families whose tile model presents its own candidates for ``tiles --family`` (sizes other than M N K)."""
    return [name for name, fam in FAMILIES.items() if fam.tile_model is not None and not _gemm(fam)]


def gemm_families() -> list[str]:
    """Families ranked through ``tiles M N K`` (the dtype and arch imply which)."""
    return [name for name, fam in FAMILIES.items() if _gemm(fam)]


def model_options() -> dict[str, tuple[str, ModelOption]]:
    """Every problem option a family's tile model ranks for, by its name: (the family, the option)."""
    out: dict[str, tuple[str, ModelOption]] = {}
    for name in ranked_families():
        for opt in FAMILIES[name].tile_model.options:
            out.setdefault(opt.name, (name, opt))
    return out


def __getattr__(name: str):
    # KEY_OPTIONS: the options that give a tile model's problem keys that are not sizes (the CLI's spelling of
    # each), computed when asked for: it lists every family, which imports them all (analyze needs one)
    if name == "KEY_OPTIONS":
        return {k: opt.option for k, (_, opt) in model_options().items()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class FamilyTileReport:
    """A family's candidates for one problem: ranked by its model, the rejected ones with the family's reasons,
    and where the model's numbers come from."""

    family: str
    problem: dict  # the family's problem keys, then its ranker keys (the stencil's R)
    arch: str
    gpu: dict  # name, key, sms, dram_gbps
    ranked: tuple
    rejected: tuple  # dicts: params, label, kind, reason
    provenance: dict
    tile_keys: tuple = ()  # the model's options that go into each candidate's tile (R)
    tie_rule: str = ""  # the model's tie rule in words (TieRule.text)

    @property
    def rate_unit(self) -> str:
        """What the candidates' rate is quoted in: TFLOP/s for a compute-bound family (its scored rows carry
        tflops), GB/s for the memory families (also set against a device copy)."""
        return "TFLOP/s" if self.ranked and getattr(self.ranked[0], "tflops", None) else "GB/s"

    @property
    def counts(self) -> dict:
        out = {
            "candidates": len(self.ranked) + len(self.rejected),
            "ranked": len(self.ranked),
            "rejected": len(self.rejected),
        }
        for r in self.rejected:
            out[f"rejected_{r['kind']}"] = out.get(f"rejected_{r['kind']}", 0) + 1
        return out

    def tile(self, s) -> dict:
        """The ``tile:`` of a candidate's spec, in the family's parameter order."""
        t = {**s.params_dict(), **{k: self.problem[k] for k in self.tile_keys}}
        names = [p.name for p in FAMILIES[self.family].params]
        return {k: t[k] for k in names if k in t}

    def to_dict(self, top: int | None = None, rejected: int | None = None) -> dict:
        return {
            "family": self.family,
            "problem": dict(self.problem),
            "arch": self.arch,
            "gpu": dict(self.gpu),
            "unit": self.rate_unit,
            "model": self.provenance.get("model"),
            "calibration": dict(self.provenance),
            "counts": self.counts,
            "candidates": [{**s.to_dict(), "tile": self.tile(s)} for s in self.ranked[:top]],
            "rejected": [dict(r) for r in self.rejected[:rejected]],
        }


def _size(v, key: str, lo: int = 1) -> int:
    text = str(v).strip()
    try:
        iv = int(text) if text.lstrip("-").isdigit() else parse_size(text, key=key)
    except (ValueError, SpecError):
        raise SpecError(f"expected a positive integer such as 8192 or 8K, got {v!r}", key=key) from None
    if not lo <= iv <= 2**31 - 1:
        raise SpecError(f"must be between {lo} and 2^31-1, got {iv}", key=key)
    return iv


def family_tiles(
    family: str,
    sizes,
    *,
    dtype: str | None = None,
    keys: dict | None = None,
    arch: str | None = None,
    gpu: str | None = None,
) -> FamilyTileReport:
    """``tiles --family FAMILY SIZES...``: the family's tile model ranked for the problem, with its rejections.
    ``sizes``: the family's integer problem keys in order; ``dtype``: its dtype problem key (a family without one
    takes f32 only); ``keys``: the model's options by name (``ModelOption.name``: the CLI's option gives it)."""
    fam = FAMILIES[family]
    ints = fam.size_keys()  # leading dimensions are not sizes: the ranking is for the dense layout
    names = " ".join(pk.name.upper() for pk in ints)
    if len(sizes) != len(ints):
        raise SpecError(f"--family {family} takes {len(ints)} sizes ({names}), got {len(sizes)}", key="sizes")
    problem: dict = {pk.name: _size(v, pk.name.upper()) for pk, v in zip(ints, sizes, strict=True)}
    choice = next((pk for pk in fam.problem_keys if pk.name == "dtype"), None)
    # no --dtype: the family's own default dtype, f32 for a family without the key
    dt = str(dtype or (choice.default if choice is not None else "f32")).lower()
    if choice is not None:
        if dt not in choice.choices:
            raise SpecError(f"{family} moves {', '.join(choice.choices)}, not {dt!r}", key="--dtype")
        problem["dtype"] = dt
    elif dt != "f32":
        raise SpecError(f"{family} computes in fp32 only; drop --dtype {dt}", key="--dtype")
    given = {k: v for k, v in (keys or {}).items() if v is not None}
    opts = {o.name: o for o in fam.tile_model.options}
    spell = {k: opt.option for k, (_, opt) in model_options().items()}
    for k, o in opts.items():
        if o.required and k not in given:
            raise SpecError(
                f"--family {family} needs {o.option} (its {k}: the model ranks for one {k})", key=o.option
            )
    for k, v in given.items():
        flag = spell.get(k, k)
        if k not in opts:
            raise SpecError(f"{flag} is not a {family} setting", key=flag)
        problem[k] = _size(v, flag, 0 if 0 in opts[k].choices else 1)
        par = next((q for q in fam.params if q.name == k), None)
        allowed = par.allowed if par is not None and par.allowed is not None else opts[k].choices or None
        if allowed is not None and problem[k] not in allowed:
            doc = f" ({par.doc})" if par is not None else ""
            raise SpecError(
                f"{problem[k]} is not allowed; allowed: {', '.join(map(str, allowed))}{doc}", key=flag
            )
    need = tuple(k for k in opts if k in problem)  # the options given (an optional one may be left out)
    a = get_arch(arch or "sm_90")
    g = get_gpu(gpu, a.base)
    try:
        ranker = fam.ranker(problem, a, gpu, rank=rank)  # the family's view, ranked by the one loop
    except ValueError as e:
        raise SpecError(str(e)) from None
    rejected = sorted(ranker.rejections(), key=lambda r: {"spills": 0, "occupancy": 1}.get(r["kind"], 2))
    return FamilyTileReport(
        family,
        problem,
        a.name,
        {"name": g.name, "key": g.key, "sms": g.sms, "dram_gbps": g.dram_gbps},
        tuple(ranker.ranked),
        tuple(rejected),
        ranker.provenance(),
        need,
        ranker.model.tie_rule.text,
    )


def family_command_line(rep: FamilyTileReport) -> str:
    fam = FAMILIES[rep.family]
    sizes = "".join(f" {rep.problem[pk.name]}" for pk in fam.size_keys())
    extra = f" --dtype {rep.problem['dtype']}" if "dtype" in rep.problem else ""
    opts = {o.name: o.option for o in fam.tile_model.options}
    extra += "".join(f" {opts.get(k, k)} {rep.problem[k]}" for k in rep.tile_keys)
    return f"smemtile tiles --family {rep.family}{sizes}{extra} --arch {rep.arch}"


def family_spec_doc(rep: FamilyTileReport, s) -> dict:
    """A kernel spec (the YAML contract) for one candidate: ``generate`` and ``verify`` take it unchanged."""
    fam = FAMILIES[rep.family]
    size = "x".join(str(rep.problem[pk.name]) for pk in fam.size_keys())
    if not size:  # a family ranked by named problem keys: the ones the ranking was asked for
        size = " ".join(f"{k} {rep.problem[k]}" for k in rep.tile_keys)
    dt = f" {rep.problem['dtype']}" if "dtype" in rep.problem else ""
    ratio = f", {s.copy_ratio:.3f}x a device copy" if s.copy_ratio else ""
    rate = f"{s.tflops:.0f} TFLOP/s" if rep.rate_unit == "TFLOP/s" else f"{s.gbps:.0f} GB/s"
    return {
        "name": f"{rep.family}{dt} {size}, {s.label}: smemtile tiles #{s.rank} of {len(rep.ranked)} "
        f"({rate} predicted on the {rep.gpu['name']}{ratio})",
        "arch": rep.arch,
        "tile": rep.tile(s),
        "kernel": {
            "family": rep.family,
            **{pk.name: rep.problem[pk.name] for pk in fam.problem_keys if pk.name in rep.problem},
        },
    }


def family_yaml_specs(rep: FamilyTileReport, top: int) -> str:
    docs = []
    for s in rep.ranked[:top]:
        body = yaml.safe_dump(family_spec_doc(rep, s), sort_keys=False, default_flow_style=None, width=120)
        docs.append(f"# {family_command_line(rep)}: #{s.rank}: {s.reason}\n{body}")
    return "---\n".join(docs)


def family_json_doc(rep: FamilyTileReport, top: int, rejected: int) -> dict:
    d = rep.to_dict(top=top, rejected=rejected)
    d["command"] = family_command_line(rep)
    return d


# ---- the help text of tiles --family, from the registry ---------------------------------------------------------


def _either(names: list[str]) -> str:
    return " or ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + " or " + names[-1]


def _sizes(fam) -> str:
    return " ".join(pk.name.upper() for pk in fam.size_keys())


def _dtypes(fam) -> tuple[str, ...]:
    return next((pk.choices for pk in fam.problem_keys if pk.name == "dtype"), ())


def family_help() -> str:
    """``--family``: what each family ranks (its sizes, dtypes and options), then the GEMM families."""
    own = []
    for name in ranked_families():
        fam = FAMILIES[name]
        extra = [f"--dtype {'|'.join(_dtypes(fam))}"] if _dtypes(fam) else []
        extra += [o.option for o in fam.tile_model.options]
        own.append(f"{name} ({', '.join([_sizes(fam), *extra])})")
    gemm = gemm_families()
    text = f"The kernel family: {_either(own)} rank their own configurations"
    if gemm:
        text += f"; {_either(gemm)} ({_sizes(FAMILIES[gemm[0]])}) must be the one --dtype/--arch imply"
    return text + "."


def simt_family() -> str | None:
    """The GEMM family without a dtype choice: the SIMT f32 one (``--dtype f32``, the default)."""
    return next((n for n, fam in FAMILIES.items() if _gemm(fam) and not _dtypes(fam)), None)


def dtype_help_families() -> str:
    """The end of ``--dtype``'s help: the dtypes of the families that rank their own configurations."""
    parts = []
    for name in ranked_families():
        dts = _dtypes(FAMILIES[name])
        if dts:
            parts.append(
                f"with --family {name}: {', '.join(dts[:-1])} or {dts[-1]}" if len(dts) > 1 else dts[0]
            )
    return "; ".join(parts)


def option_help(opt: ModelOption) -> str:
    """A model option's help: the families whose model takes it, then its own words."""
    fams = [n for n in ranked_families() if any(o.name == opt.name for o in FAMILIES[n].tile_model.options)]
    return f"--family {_either(fams)}: {opt.help}"


def option_misuse(name: str) -> str:
    """What a model option given without its family says (``--radius`` on a GEMM)."""
    fam, opt = model_options()[name]
    return f"{opt.option} is the {fam} family's (use --family {fam} {_sizes(FAMILIES[fam])} {opt.option} {opt.name})"


def tiles_examples() -> list[str]:
    """The examples each family's tile model gives (``tiles_examples``): the GEMM families' first (the M N K
    form), then the others, each in registry order."""
    out: list[str] = []
    for name in [*gemm_families(), *(n for n in FAMILIES if n not in gemm_families())]:
        fam = FAMILIES[name]
        out += list(getattr(fam.tile_model, "tiles_examples", ()) or getattr(fam, "tiles_examples", ()))
    return out
