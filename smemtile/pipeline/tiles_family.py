"""``smemtile tiles --family NAME SIZES...``: a kernel family's own candidates (a memory-bound family: transpose,
stencil2d), ranked by its model, with its rejections, and the exports (YAML specs, JSON). No printing."""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from smemtile.errors import SpecError
from smemtile.families import FAMILIES
from smemtile.model.arch import get_arch
from smemtile.model.sizes import parse_size
from smemtile.model.tiling_gpus import get_gpu

# ---- tiles --family NAME ROWS COLS: a kernel family's own candidates, ranked by its model ----------------------

# the options that give a family's problem_params (template parameters that are part of the problem for its model)
KEY_OPTIONS = {"R": "--radius"}


def ranked_families() -> list[str]:
    """Families whose ranker presents its own candidates for ``tiles --family`` (sizes other than M N K)."""
    out = []
    for name, fam in FAMILIES.items():
        if getattr(fam, "tile_contract", None) or getattr(fam, "tiles_for", None):
            continue  # a GEMM family: ranked through ``tiles M N K``
        keys = {pk.name: pk.default for pk in fam.problem_keys if not pk.dense}
        try:
            r = fam.ranker(keys, "sm_90", None)
        except SpecError:
            r = None
        if r is not None and hasattr(r, "rejections"):
            out.append(name)
    return out


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
    tile_keys: tuple = ()  # ranker keys that go into each candidate's tile (R)

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
            "unit": "GB/s",
            "model": self.provenance.get("model"),
            "calibration": dict(self.provenance),
            "counts": self.counts,
            "candidates": [{**s.to_dict(), "tile": self.tile(s)} for s in self.ranked[:top]],
            "rejected": [dict(r) for r in self.rejected[:rejected]],
        }


def _size(v, key: str) -> int:
    text = str(v).strip()
    try:
        iv = int(text) if text.lstrip("-").isdigit() else parse_size(text, key=key)
    except (ValueError, SpecError):
        raise SpecError(f"expected a positive integer such as 8192 or 8K, got {v!r}", key=key) from None
    if not 1 <= iv <= 2**31 - 1:
        raise SpecError(f"must be between 1 and 2^31-1, got {iv}", key=key)
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
    """``tiles --family FAMILY SIZES...``: the family's ranker for the problem, with its rejections. ``sizes``:
    the family's integer problem keys in order (rows cols; ny nx); ``dtype``: its dtype problem key (a family
    without one takes f32 only); ``keys``: its ranker keys by name (``{"R": 4}``, from ``--radius``)."""
    fam = FAMILIES[family]
    ints = fam.size_keys()  # leading dimensions are not sizes: the ranking is for the dense layout
    names = " ".join(pk.name.upper() for pk in ints)
    if len(sizes) != len(ints):
        raise SpecError(f"--family {family} takes {len(ints)} sizes ({names}), got {len(sizes)}", key="sizes")
    problem: dict = {pk.name: _size(v, pk.name.upper()) for pk, v in zip(ints, sizes, strict=True)}
    dt = str(dtype or "f32").lower()
    choice = next((pk for pk in fam.problem_keys if pk.name == "dtype"), None)
    if choice is not None:
        if dt not in choice.choices:
            raise SpecError(f"{family} moves {', '.join(choice.choices)}, not {dt!r}", key="--dtype")
        problem["dtype"] = dt
    elif dt != "f32":
        raise SpecError(f"{family} computes in fp32 only; drop --dtype {dt}", key="--dtype")
    given = {k: v for k, v in (keys or {}).items() if v is not None}
    need = tuple(fam.problem_params)
    for k in need:
        if k not in given:
            raise SpecError(
                f"--family {family} needs {KEY_OPTIONS.get(k, k)} (its {k}: the model ranks for one {k})",
                key=KEY_OPTIONS.get(k, k),
            )
    for k, v in given.items():
        if k not in need:
            raise SpecError(f"{KEY_OPTIONS.get(k, k)} is not a {family} setting", key=KEY_OPTIONS.get(k, k))
        problem[k] = _size(v, KEY_OPTIONS.get(k, k))
        par = next((q for q in fam.params if q.name == k), None)
        if par is not None and par.allowed is not None and problem[k] not in par.allowed:
            raise SpecError(
                f"{problem[k]} is not allowed; allowed: {', '.join(map(str, par.allowed))} ({par.doc})",
                key=KEY_OPTIONS.get(k, k),
            )
    a = get_arch(arch or "sm_90")
    g = get_gpu(gpu, a.base)
    try:
        ranker = fam.ranker(problem, a.name, gpu)
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
    )


def family_command_line(rep: FamilyTileReport) -> str:
    fam = FAMILIES[rep.family]
    sizes = " ".join(str(rep.problem[pk.name]) for pk in fam.size_keys())
    extra = f" --dtype {rep.problem['dtype']}" if "dtype" in rep.problem else ""
    extra += "".join(f" {KEY_OPTIONS.get(k, k)} {rep.problem[k]}" for k in rep.tile_keys)
    return f"smemtile tiles --family {rep.family} {sizes}{extra} --arch {rep.arch}"


def family_spec_doc(rep: FamilyTileReport, s) -> dict:
    """A kernel spec (the YAML contract) for one candidate: ``generate`` and ``verify`` take it unchanged."""
    fam = FAMILIES[rep.family]
    size = "x".join(str(rep.problem[pk.name]) for pk in fam.size_keys())
    dt = f" {rep.problem['dtype']}" if "dtype" in rep.problem else ""
    ratio = f", {s.copy_ratio:.3f}x a device copy" if s.copy_ratio else ""
    return {
        "name": f"{rep.family}{dt} {size}, {s.label}: smemtile tiles #{s.rank} of {len(rep.ranked)} "
        f"({s.gbps:.0f} GB/s predicted on the {rep.gpu['name']}{ratio})",
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
