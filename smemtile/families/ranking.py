"""The one ranking loop every family's tile model goes through (``smemtile tiles``, ``tune``, the API, and a
family's own pick for a spec without a tile). Pure, in the families layer so that a family may call it;
``smemtile.pipeline.rank`` is the pipeline's name for it.

enumerate (``model.space``) -> screen (``model.screen``: the family's rules) -> predict (``model.predict`` or
``model.predict_all``) -> keep the best of each shape (models with ``shape_key``) -> order (tier, predicted time x
(1 + penalty), the tie rule's groups ordered by the ``tie`` key, then the candidate's place in the space) ->
rank numbers and reasons (``model.explain``). The model interface is :mod:`smemtile.families.tile_model`.
No CUDA, no printing.
"""

from __future__ import annotations

import math
from dataclasses import replace

from smemtile.families.tile_model import (
    Prediction,
    Ranked,
    Ranking,
    Rejected,
    Rejection,
    TieRule,
    shape_of,
)

__all__ = ["order", "rank"]


def _bucket(t: float, band: float) -> float:
    return round(math.log(t) / math.log(1.0 + band)) if band > 0 and t > 0 else t


def order(entries: list[Ranked], rule: TieRule) -> list[Ranked]:
    """``entries`` in ranking order under ``rule`` (see the module docstring)."""
    if rule.mode == "bucket":
        return sorted(
            entries,
            key=lambda e: (e.pred.tier, _bucket(e.pred.order_time, rule.band), e.pred.tie, e.index),
        )
    if rule.mode != "chain":
        raise ValueError(f"tie rule mode {rule.mode!r}: chain or bucket")
    srt = sorted(entries, key=lambda e: (e.pred.tier, e.pred.order_time, e.index))
    out: list[Ranked] = []
    i = 0
    while i < len(srt):
        first = srt[i]
        j = i + 1
        while (
            j < len(srt)
            and srt[j].pred.tier == first.pred.tier
            and srt[j].pred.order_time <= first.pred.order_time * (1.0 + rule.band)
        ):
            j += 1
        out += sorted(srt[i:j], key=lambda e: (e.pred.tie, e.index))
        i = j
    return out


def _pick_key(e: Ranked, rule: TieRule) -> tuple:
    t = _bucket(e.pred.order_time, rule.band) if rule.mode == "bucket" else e.pred.order_time
    pick = e.pred.pick if e.pred.pick is not None else e.pred.tie
    return (e.pred.tier, t, pick, e.index)


def rank(model, problem: dict, arch, gpu) -> Ranking:
    """Every candidate of ``model.space(problem, arch)``: ranked best first, or rejected with the reason."""
    rule: TieRule = model.tie_rule
    cands = list(model.space(problem, arch))
    rejected: list[tuple[int, object, Rejection]] = []
    kept: list[tuple[int, object]] = []
    for i, c in enumerate(cands):
        why = model.screen(c)
        if why is not None:
            rejected.append((i, c, why))
        else:
            kept.append((i, c))
    batch = getattr(model, "predict_all", None)
    preds = (
        batch([c for _, c in kept], gpu) if batch is not None else [model.predict(c, gpu) for _, c in kept]
    )
    entries: list[Ranked] = []
    for (i, c), p in zip(kept, preds, strict=True):
        if isinstance(p, Rejection):
            rejected.append((i, c, p))
        elif isinstance(p, Prediction):
            entries.append(Ranked(c, p, index=i))
        else:
            raise TypeError(f"{type(model).__name__}.predict returned {type(p).__name__}")
    dominated: list[Rejected] = []
    if getattr(model, "shape_key", None) is not None:
        best: dict = {}
        for e in entries:
            k = shape_of(model, e.cand)
            if k not in best or _pick_key(e, rule) < _pick_key(best[k], rule):
                best[k] = e
        winners = {id(e) for e in best.values()}
        dominated = [
            Rejected(e.cand, Rejection("dominated", "", best[shape_of(model, e.cand)]))
            for e in entries
            if id(e) not in winners
        ]
        entries = [e for e in entries if id(e) in winners]
    ranked = order(entries, rule)
    out: list[Ranked] = []
    top = ranked[0] if ranked else None
    numbered = [replace(e, rank=n + 1) for n, e in enumerate(ranked)]
    for e in numbered:
        out.append(replace(e, reason=model.explain(e, numbered[0], numbered) if top is not None else ""))
    rejected.sort(key=lambda x: x[0])
    rej = [Rejected(c, r) for _, c, r in rejected]
    counts = {"generated": len(cands), "ranked": len(out), "rejected": len(rej), "dominated": len(dominated)}
    for r in rej:
        counts[f"rejected_{r.rejection.kind}"] = counts.get(f"rejected_{r.rejection.kind}", 0) + 1
    return Ranking(tuple(out), tuple(rej), tuple(dominated), counts, dict(model.provenance()))


def dedupe(rejected, key) -> list[Rejected]:
    """One entry per ``key(rejected)`` (shape, kind, reason), ``alike`` counting the others, in first-seen order."""
    seen: dict = {}
    for r in rejected:
        k = key(r)
        cur = seen.get(k)
        seen[k] = r if cur is None else replace(cur, alike=cur.alike + 1)
    return list(seen.values())
