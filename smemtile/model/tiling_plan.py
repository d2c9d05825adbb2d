"""What ``smemtile tune`` times: the model's top candidates for a spec's kernel, the spec's own configuration and
any extra space, each with the model's rank and prediction; and the spec rewritten for one configuration.
Pure Python (no CUDA): the sweep itself lives in ``smemtile.gpu.tune``.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from smemtile.errors import SpecError

TUNABLE = ("sgemm", "transpose")


@dataclass(frozen=True)
class Candidate:
    """One configuration to time: the family's template parameters and what the model thinks of it."""

    label: str
    params: dict
    source: str  # model | spec | space
    model_rank: int | None = None  # rank in the model's full ranking (None: the model did not rank it)
    predicted: float | None = None  # TFLOP/s (sgemm) or GB/s (transpose)
    model_reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def load_docs(path: str | Path) -> list[dict]:
    """Every YAML document of a file (a spec, or a stream of specs from ``smemtile tiles --format yaml``)."""
    try:
        docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d is not None]
    except OSError as e:
        raise SpecError(f"cannot read: {e.strerror}", source=str(path)) from None
    except yaml.YAMLError as e:
        raise SpecError(f"not valid YAML: {str(e).splitlines()[0]}", source=str(path)) from None
    return docs


def family_of(doc: dict, source: str) -> str:
    kernel = doc.get("kernel") if isinstance(doc, dict) else None
    if not isinstance(kernel, dict) or "family" not in kernel:
        raise SpecError(
            "the spec has no kernel: {family: ...} section, so there is nothing to tune", source=source
        )
    fam = str(kernel["family"]).lower()
    if fam not in TUNABLE:
        raise SpecError(
            f"tune knows the families {', '.join(TUNABLE)}, not {fam!r}", key="kernel.family", source=source
        )
    return fam


def family_params(doc: dict, family: str) -> dict:
    """The family's template parameters a spec document sets (tile, constants, stages, kernel section)."""
    from smemtile.codegen import get_family

    names = {p.name for p in get_family(family).params}
    out: dict[str, Any] = {}
    for sec in ("tile", "constants"):
        out.update({k: v for k, v in (doc.get(sec) or {}).items() if k in names and isinstance(v, int)})
    if "STAGES" in names and isinstance(doc.get("stages"), int):
        out["STAGES"] = doc["stages"]
    out.update({k: v for k, v in (doc.get("kernel") or {}).items() if k in names and isinstance(v, int)})
    return out


def problem_of(doc: dict, family: str) -> dict:
    from smemtile.codegen import get_family

    keys = get_family(family).problem_keys
    return {k: (doc.get("kernel") or {}).get(k, v) for k, v in keys.items()}


def respec(doc: dict, family: str, params: dict, layouts: dict | None = None) -> dict:
    """``doc`` with ``params`` as its configuration: tile, threads, stages (also per buffer), layouts."""
    from smemtile.codegen import get_family

    fam = get_family(family)
    new = copy.deepcopy(doc)
    full = {**fam.defaults(), **family_params(doc, family), **params}
    stages = full.pop("STAGES", None)
    for sec in ("constants", "kernel"):
        for k in list(full):
            (new.get(sec) or {}).pop(k, None)
    new["tile"] = {k: v for k, v in full.items() if k != "CP_ASYNC" or k in params}
    new["threads"] = fam.threads({**full, "STAGES": stages or 1})
    if stages is not None:
        new["stages"] = stages
    for b in new.get("buffers") or []:
        if isinstance(b, dict):
            if stages is not None and "stages" in b:
                b["stages"] = stages
            lay = (layouts or {}).get(b.get("name"))
            if lay is not None:
                lay = lay.to_dict() if hasattr(lay, "to_dict") else dict(lay)
                b["layout"] = {k: v for k, v in lay.items() if v is not None}
    return new


def plan(doc: dict, source: str, *, top: int, space: list[dict] | None = None, arch: str | None = None,
         gpu: str | None = None) -> tuple[str, dict, list[Candidate]]:  # fmt: skip
    """(family, problem, candidates): the model's top ``top``, then the spec's own configuration, then the
    space's, without duplicates. Every candidate carries the model's rank and prediction where it has one."""
    from smemtile.codegen import get_family

    family = family_of(doc, source)
    fam = get_family(family)
    problem = problem_of(doc, family)
    arch = arch or str(doc.get("arch", "sm_90"))
    scorer = _sgemm_scorer(problem, arch, gpu) if family == "sgemm" else _transpose_scorer(problem, arch, gpu)
    out: dict[tuple, Candidate] = {}

    def add(params: dict, src: str) -> None:
        full = {**fam.defaults(), **params}
        key = tuple(sorted((k, v) for k, v in full.items() if k != "CP_ASYNC"))
        if key not in out:
            out[key] = scorer(params, src)

    for params in scorer.top(top):
        add(params, "model")
    add(family_params(doc, family), "spec")
    for i, entry in enumerate(space or []):
        if not isinstance(entry, dict):
            raise SpecError(f"space entry {i} must be a mapping of parameters or a spec", key="--space")
        params = family_params(entry, family) if ("kernel" in entry or "tile" in entry) else entry
        unknown = set(params) - {p.name for p in fam.params}
        if unknown:
            raise SpecError(
                f"space entry {i}: {family} has no parameter {sorted(unknown)[0]!r}", key="--space"
            )
        add(params, "space")
    return family, problem, list(out.values())


def space_entries(path: str | Path) -> list[dict]:
    """A --space file: a list of parameter mappings, {space: [...]}, or a stream of specs."""
    docs = load_docs(path)
    if len(docs) == 1 and isinstance(docs[0], dict) and "space" in docs[0]:
        docs = docs[0]["space"]
    elif len(docs) == 1 and isinstance(docs[0], list):
        docs = docs[0]
    return list(docs)


class _sgemm_scorer:
    def __init__(self, problem: dict, arch: str, gpu: str | None):
        from smemtile.model.tiling import make_problem, recommend

        self.p = make_problem(problem["M"], problem["N"], problem["K"], "f32", arch, None, gpu)
        self.report = recommend(problem["M"], problem["N"], problem["K"], "f32", arch, gpu=gpu)
        self.by_label = {s.cfg.label: s for s in self.report.ranked}

    def top(self, k: int) -> list[dict]:
        return [s.cfg.sgemm_params() for s in self.report.ranked[:k]]

    def __call__(self, params: dict, src: str) -> Candidate:
        from smemtile.codegen import get_family
        from smemtile.model.tiling import TileConfig
        from smemtile.model.tiling_model import evaluate

        full = {**get_family("sgemm").defaults(), **params}
        threads = get_family("sgemm").threads(full)
        c = TileConfig(full["BM"], full["BN"], full["BK"], threads // 32, full["STAGES"], full["GROUP_M"],
                       full["TM"], full["TN"], split_k=full.get("SPLIT_K", 1))  # fmt: skip
        label = f"{c.label} mb{full['MIN_BLOCKS']}"
        ranked = self.by_label.get(c.label)
        if ranked is not None and ranked.cfg.min_blocks == full["MIN_BLOCKS"]:
            return Candidate(label, params, src, ranked.rank, ranked.tflops, ranked.reason)
        scored, rejected = evaluate(self.p, [c])
        if scored:
            s = scored[0]
            return Candidate(label, params, src, None, s.tflops, "not in the model's ranking (another stages / "
                             "GROUP_M / MIN_BLOCKS of the tile ranks instead)")  # fmt: skip
        return Candidate(label, params, src, None, None, rejected[0].reason if rejected else "")


class _transpose_scorer:
    def __init__(self, problem: dict, arch: str, gpu: str | None):
        from smemtile.model.tiling_transpose import rank_transpose

        self.ranked = rank_transpose(int(problem["rows"]), int(problem["cols"]), str(problem.get("dtype", "f32")),
                                     arch, gpu=gpu)  # fmt: skip

    def top(self, k: int) -> list[dict]:
        return [s.params() for s in self.ranked[:k]]

    def __call__(self, params: dict, src: str) -> Candidate:
        from smemtile.codegen import get_family

        full = {**get_family("transpose").defaults(), **params}
        label = f"TILE {full['TILE']} x BLOCK_ROWS {full['BLOCK_ROWS']}"
        s = next((s for s in self.ranked if s.params() == {k: full[k] for k in ("TILE", "BLOCK_ROWS")}), None)
        if s is None:
            return Candidate(label, params, src, None, None, "outside the model's space")
        return Candidate(label, params, src, s.rank, s.gbps, s.reason)
