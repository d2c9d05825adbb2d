"""``smemtile tune``: what to time (the family's model top-k, the spec's own configuration, any extra space,
for every spec and every --shapes entry), the configuration of each candidate, and the one-process sweep.

    family, problem, cands = plan(doc, source, top=6)
    rows = sweep(doc, source, family, cands, runner, cache)     # runner: smemtile.gpu.tune.GpuRunner
    summary = summarize(rows)

    problems = plan_problems([(path, doc), ...], shapes, top=6)  # many problems, for the streamed sweep on
    result = smemtile.pipeline.schedule.tune_problems(problems, executor, cache)   # many GPUs (executors.py)

The runner launches each candidate through its family's launch plan (the generated helper's). A failing
candidate is a skipped row with its reason, never an abort; deterministic failures are cached.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from smemtile.errors import SmemtileError, SpecError
from smemtile.families import FAMILIES, KernelConfig, get_family, reconfigure
from smemtile.families.base import Candidate
from smemtile.fileio import printable
from smemtile.model.spec import load_yaml

MAX_SHAPES = 256  # --shapes entries (times the specs: the problems planned and tuned); docs/spec.md, Budgets


def load_docs(path: str | Path, text: str | None = None) -> list[dict]:
    """Every YAML document of a file (a spec, or a stream of specs from ``smemtile tiles --format yaml``);
    ``text``: its text when already read (``-`` is stdin, which can be read only once)."""
    from smemtile.pipeline.specs import read_spec_text

    name = "<stdin>" if str(path) == "-" else printable(path)
    return load_yaml(read_spec_text(path) if text is None else text, name, multi=True)


def family_of(doc: dict, source: str) -> str:
    kernel = doc.get("kernel") if isinstance(doc, dict) else None
    if not isinstance(kernel, dict) or "family" not in kernel:
        raise SpecError(
            "the spec has no kernel: {family: ...} section, so there is nothing to tune", source=source
        )
    fam = get_family(kernel["family"])
    if not _tunable(fam.name):
        tunable = [n for n in FAMILIES if _tunable(n)]
        raise SpecError(
            f"tune knows the families {', '.join(tunable)}, not {fam.name!r} (it has no tile model)",
            key="kernel.family",
            source=source,
        )
    return fam.name


@functools.cache
def _tunable(family: str) -> bool:
    """Whether ``family`` has a tile model (asked once per process: building a ranker runs the model)."""
    from smemtile.pipeline.tiles import ranker_for

    fam = FAMILIES[family]
    return (
        ranker_for(fam, {pk.name: pk.default for pk in fam.problem_keys if not pk.dense}, "sm_90", None)
        is not None
    )


def family_params(doc: dict, family: str) -> dict:
    """The family's template parameters a spec document sets (tile, constants, stages, kernel section)."""
    names = {p.name for p in get_family(family).params}
    out: dict[str, Any] = {}
    for sec in ("tile", "constants"):
        out.update({k: v for k, v in (doc.get(sec) or {}).items() if k in names and isinstance(v, int)})
    if "STAGES" in names and isinstance(doc.get("stages"), int):
        out["STAGES"] = doc["stages"]
    out.update({k: v for k, v in (doc.get("kernel") or {}).items() if k in names and isinstance(v, int)})
    return out


def problem_of(doc: dict, family: str) -> dict:
    keys = get_family(family).problem_keys
    kernel = doc.get("kernel") or {}  # a leading dimension the spec leaves out stays dense (derived)
    return {pk.name: kernel.get(pk.name, pk.default) for pk in keys if not pk.dense or pk.name in kernel}


def respec(doc: dict, family: str, params: dict, layouts: dict | None = None, source: str = "<spec>") -> dict:
    """``doc`` with ``params`` as its configuration (tile, stages) and, when given, the buffers' ``layouts``:
    a spec that resolves to exactly that configuration. The spec's own accesses and buffers are dropped (they
    described the old tile); the buffers come back as the family's with the layouts."""
    new = copy.deepcopy(doc)
    full = {**family_params(doc, family), **params}
    stages = full.pop("STAGES", None)
    for sec in ("constants", "kernel"):
        for k in list(full):
            (new.get(sec) or {}).pop(k, None)
    for key in ("threads", "accesses", "buffers"):
        new.pop(key, None)
    new["tile"] = full
    if stages is not None:
        new["stages"] = stages
    if layouts:
        from smemtile.pipeline.specs import resolve

        cfg = reconfigure(resolve(new, source).config, layouts=layouts)
        new["buffers"] = [b.to_doc() for b in FAMILIES[family].spec(cfg).buffers]
    return new


def plan(
    doc: dict,
    source: str,
    *,
    top: int,
    space: list[dict] | None = None,
    arch: str | None = None,
    gpu: str | None = None,
) -> tuple[str, dict, list[Candidate]]:
    """(family, problem, candidates): the model's top ``top``, then the spec's own configuration, then the
    space's, without duplicates. Every candidate carries the model's rank and prediction where it has one."""
    family = family_of(doc, source)
    fam = get_family(family)
    problem = problem_of(doc, family)
    arch = arch or str(doc.get("arch", "sm_90"))
    # the template parameters a family's model reads as part of the problem (the stencil's radius R)
    keys = {k: v for k, v in family_params(doc, family).items() if k in fam.problem_params}
    from smemtile.pipeline.tiles import ranker_for

    scorer = ranker_for(fam, {**problem, **keys}, arch, gpu)
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
        bad = [k for k, v in params.items() if isinstance(v, bool) or not isinstance(v, int)]
        if bad:
            raise SpecError(
                f"space entry {i}: {bad[0]} must be a whole number, got {params[bad[0]]!r}", key="--space"
            )
        add(params, "space")
    return family, problem, list(out.values())


def space_entries(path: str | Path, text: str | None = None) -> list[dict]:
    """A --space file: a list of parameter mappings, {space: [...]}, or a stream of specs."""
    docs = load_docs(path, text)
    if len(docs) == 1 and isinstance(docs[0], dict) and "space" in docs[0]:
        docs = docs[0]["space"]
    elif len(docs) == 1 and isinstance(docs[0], list):
        docs = docs[0]
    if not isinstance(docs, list):
        raise SpecError("expected a list of parameter mappings", key="--space", source=str(path))
    return list(docs)


def shape_entries(path: str | Path, text: str | None = None) -> list[dict]:
    """A --shapes file: a YAML list of problem mappings (``[{M: 4096, N: 4096, K: 4096}, ...]``) or
    ``{shapes: [...]}``; each entry sets some of the family's problem keys of every SPEC (at most
    ``MAX_SHAPES``)."""
    docs = load_docs(path, text)
    body = docs[0] if len(docs) == 1 else docs
    if isinstance(body, dict) and "shapes" in body:
        body = body["shapes"]
    if not isinstance(body, list) or not body or not all(isinstance(e, dict) for e in body):
        raise SpecError(
            "expected a non-empty list of problem mappings such as {M: 4096, N: 4096, K: 4096}",
            key="--shapes",
            source=str(path),
        )
    if len(body) > MAX_SHAPES:
        raise SpecError(
            f"{len(body)} shapes; at most {MAX_SHAPES} per run (split the file)",
            key="--shapes",
            source=str(path),
        )
    return body


def with_shape(doc: dict, family: str, shape: dict, source: str, index: int) -> dict:
    """``doc`` with the problem keys of ``shape`` (a --shapes entry) set in its kernel section."""
    allowed = [pk.name for pk in get_family(family).problem_keys]
    unknown = [k for k in shape if k not in allowed]
    if unknown:
        raise SpecError(
            f"shape {index}: {family} has no problem key {unknown[0]!r}; allowed: {', '.join(allowed)}",
            key="--shapes",
            source=source,
        )
    for k, v in shape.items():  # a number, or a word such as a dtype name; `0o10` or `1e3` is text in YAML
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, float, str))
            or (isinstance(v, str) and not v.isidentifier())
        ):
            raise SpecError(
                f"shape {index}: {k}: {printable(str(v))!r} is not a whole number (write e.g. {k}: 4096)",
                key="--shapes",
                source=source,
            )
    new = copy.deepcopy(doc)
    new["kernel"] = {**new["kernel"], **shape}
    return new


def plan_problems(
    specs: list[tuple[str, dict]],
    shapes: list[dict] | None,
    *,
    top: int,
    space: list[dict] | None = None,
    arch: str | None = None,
    shapes_source: str = "--shapes",
) -> list[dict]:
    """One entry per problem (every spec, times every --shapes entry): ``{"spec", "doc", "family", "problem",
    "candidates"}``, each spec document validated first (bad input is exit 2)."""
    from smemtile.pipeline.specs import resolve

    out = []
    for source, doc in specs:
        family = family_of(doc, source)
        for i, shape in enumerate(shapes or [None]):
            d = doc if shape is None else with_shape(doc, family, shape, shapes_source, i)
            try:
                resolve(d, source)
            except SpecError as e:
                if shape is None:
                    raise
                raise SpecError(f"shape {i} {shape}: {e}", key="--shapes", source=shapes_source) from None
            fam, problem, cands = plan(d, source, top=top, space=space, arch=arch)
            out.append({"spec": source, "doc": d, "family": fam, "problem": problem, "candidates": cands})
    return out


def config_for(doc: dict, source: str, family: str, cand: Candidate, arch) -> KernelConfig:
    """The KernelConfig of ``cand`` for ``arch`` with the layouts the fix search picks for it (on what the
    kernel issues); parameters the model chose stay the tool's, so a spilling one may be relaxed."""
    from smemtile.pipeline.fixes import variants
    from smemtile.pipeline.specs import resolve

    base = resolve({k: v for k, v in doc.items() if k != "accesses"}, source)
    cfg = reconfigure(base.config, params=cand.params, arch=arch)
    if cand.source == "model":  # the model's numbers are suggestions the family may relax (Family.relax)
        cfg = replace(cfg, suggested=tuple(cand.params))
    res = replace(base, spec=FAMILIES[family].spec(cfg), config=cfg)
    return variants(res)["fixed"]


def sweep(
    doc: dict,
    source: str,
    family: str,
    cands: list[Candidate],
    runner,
    cache,
    *,
    force: bool = False,
    progress: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Measure every candidate one after another in this process (or take it from the cache); a failing one
    is a skipped row, never an abort. ``smemtile.pipeline.schedule.tune_problems`` is the same on many
    workers. Each key is claimed while it is measured, so a second process sharing the cache waits for the
    result instead of timing it again."""
    from smemtile.gpu.tune import cache_key, measure_row

    rows = []
    for cand in cands:
        row = candidate_row(cand)
        prep = prepare(doc, source, family, cand, runner.arch)
        if "refused" in prep:
            rows.append({**row, "status": "skipped", "reason": prep["refused"], "cached": False})
            progress and progress(rows[-1])
            continue
        cfg = prep["cfg"]
        row.update(name_expression=prep["name_expression"], layouts=prep["layouts"])
        key = cache_key(cfg, runner.env, runner.seed, source=prep["source_hash"])
        with cache.claim(key) as hit:
            if hit is not None and not force:
                rows.append({**row, **hit, "cached": True})
            else:
                m = measure_row(runner, cfg)
                m.pop("broken", None)
                if m.pop(
                    "cacheable", True
                ):  # with the problem and label: `tiles --export` marks measured points
                    cache.put(key, {**m, "label": row.get("label"), "problem": dict(cfg.problem)})
                rows.append({**row, **m, "cached": False})
        progress and progress(rows[-1])
    return rows


def candidate_row(cand: Candidate) -> dict[str, Any]:
    """The part of a result row that comes from the plan."""
    return {
        "label": cand.label,
        "params": cand.params,
        "source": cand.source,
        "model_rank": cand.model_rank,
        "predicted": cand.predicted,
        "model_reason": cand.model_reason,
    }


def prepare(doc: dict, source: str, family: str, cand: Candidate, arch) -> dict:
    """The configuration to compile for ``cand`` (pure Python, run on any CPU worker): ``{"cfg", "name_expression",
    "layouts", "source_hash"}``, or ``{"refused": reason}`` when the family refuses it."""
    from smemtile.gpu.tune import source_hash

    key = json.dumps([doc, source, family, cand.params, cand.source, repr(arch)], sort_keys=True, default=str)
    if key not in _PREPARED:
        try:
            cfg = config_for(doc, source, family, cand, arch)
            out = {
                "cfg": cfg,
                "name_expression": FAMILIES[family].name_expression(cfg),
                "source_hash": source_hash(cfg),
                "layouts": {k: v.to_dict() for k, v in cfg.layouts.items()},
            }
        except SmemtileError as e:
            out = {"refused": f"configuration refused: {e}"}
        if len(_PREPARED) >= 4096:  # a long-lived worker keeps the most recent ones
            del _PREPARED[next(iter(_PREPARED))]
        _PREPARED[key] = out
    return dict(_PREPARED[key])


# prepare()'s results in this process: the fix search is deterministic and slow (~0.3 s), and a worker that
# outlives one run (a dask:// cluster) prepares the same candidates again on a resume or the next run
_PREPARED: dict[str, dict] = {}


def summarize(rows: list[dict]) -> dict:
    """Best configuration, measured vs model ranking (Spearman; ties reported as ties), the model's top-1."""
    from smemtile.model.fitting import spearman

    ok = sorted((r for r in rows if r.get("status") == "ok"), key=lambda r: r["time_ms"])
    for i, r in enumerate(ok):
        r["measured_rank"] = i + 1
    out: dict[str, Any] = {
        "measured": len(ok),
        "skipped": sum(r.get("status") != "ok" for r in rows),
        "best": ok[0] if ok else None,
    }
    scored = [r for r in ok if r.get("predicted") is not None]
    preds = [r["predicted"] for r in scored]
    out["rank_correlation_n"] = len(scored)
    if len(scored) >= 3 and len(set(preds)) > 1:
        out["rank_correlation"] = spearman(preds, [-r["time_ms"] for r in scored])
        out["rank_correlation_note"] = None
    else:
        out["rank_correlation"] = None
        out["rank_correlation_note"] = (
            "the model predicts the same value for every measured configuration (a "
            "tie): no ranking to correlate"
            if len(scored) >= 3
            else "fewer than 3 measured configurations with a prediction"
        )
    ranked = [r for r in ok if r.get("model_rank") is not None]
    if ok and ranked:
        top1 = min(ranked, key=lambda r: r["model_rank"])
        gap = top1["time_ms"] / ok[0]["time_ms"] - 1
        out["model_top1"] = {
            "label": top1["label"],
            "model_rank": top1["model_rank"],
            "measured_rank": top1["measured_rank"],
            "slower_than_best": gap,
            "within_10pct": gap <= 0.10,
        }
    else:
        out["model_top1"] = None
    return out
