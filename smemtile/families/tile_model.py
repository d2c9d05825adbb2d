"""What a family's tile model is: the second plug-in of a family folder, beside its :class:`Family`.

A ``Family`` says what one configuration *is* (parameters, buffers, launch plan, checks); its ``TileModel`` says
which configurations to try for a problem and how fast each will run (``smemtile tiles``, ``smemtile tune``).
Each family folder holds its model (``tiles.py``) and its calibration data; the one ranking loop every family
shares is :func:`smemtile.families.ranking.rank` (``smemtile.pipeline.rank``)::

    model = FAMILIES["transpose"].tile_model
    ranking = rank(model, {"rows": 8192, "cols": 8192, "dtype": "f16"}, get_arch("sm_90"), get_gpu(None, "sm_90"))
    ranking.ranked[0].cand, ranking.ranked[0].pred.time_s, ranking.ranked[0].reason

The loop: ``space`` enumerates, ``screen`` rejects what the family cannot build (with its reason), ``predict``
times the rest (or rejects: no block fits, spills), the order is the predicted time (times ``1 + penalty``, the
model's expected error for a candidate it never measured) within ``tier``, and candidates within the tie rule's
band are ordered by their ``tie`` key (what measured faster, fewer stages, ...). With ``shape_key`` the model
keeps one candidate per tile shape (the others are reported as dominated). Pure Python, no CUDA.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Prediction:
    """A candidate's predicted time and the terms its explanation reads.

    ``tier``: lower tiers rank first whatever the time (e.g. calibrated before uncalibrated); ``penalty``: the
    fraction the order adds to ``time_s`` (an expected error: a candidate never measured ranks as if that much
    slower); ``tie``: the order of candidates whose times lie within the tie band; ``pick``: which candidate of one
    shape is kept (default ``tie``); ``terms``: the model's named numbers (the reason text, JSON); ``result``: the
    model's own scored object (its report type), carried through unchanged."""

    time_s: float
    tier: int = 0
    penalty: float = 0.0
    tie: tuple = ()
    pick: tuple | None = None
    terms: dict = field(default_factory=dict)
    result: Any = None

    @property
    def order_time(self) -> float:
        return self.time_s * (1.0 + self.penalty)


@dataclass(frozen=True)
class Rejection:
    """Why a candidate is not ranked: ``kind`` (a short class: rules, shared_memory, spills, occupancy, ...) and
    one line of ``reason`` in the family's words; ``result``: the model's own rejected object, if any."""

    kind: str
    reason: str
    result: Any = None


@dataclass(frozen=True)
class TieRule:
    """How near predictions are ordered. ``band``: relative width (0.005 = 0.5 %). ``mode``: ``chain`` (a run of
    candidates each within ``band`` of the run's first one forms a tie group) or ``bucket`` (the time rounded to
    steps of ``1 + band`` on a log scale). ``text``: the rule in words (printed with the ranking)."""

    band: float = 0.0
    mode: str = "chain"
    text: str = ""


@dataclass(frozen=True)
class ModelOption:
    """A problem key a model ranks for that is not a size (the stencil's radius): the CLI builds ``option`` from
    it, the API takes ``name``."""

    name: str
    option: str
    help: str
    choices: tuple = ()
    required: bool = True


@runtime_checkable
class TileModel(Protocol):
    """The interface :func:`smemtile.families.ranking.rank` needs (optional: ``shape_key``, ``predict_all``)."""

    tie_rule: TieRule
    options: tuple[ModelOption, ...]

    def space(self, problem: dict, arch) -> Iterable[Any]: ...

    def screen(self, cand) -> Rejection | None: ...

    def predict(self, cand, gpu) -> Prediction | Rejection: ...

    def explain(self, entry: Ranked, top: Ranked, ranked: Sequence[Ranked]) -> str: ...

    def provenance(self) -> dict: ...


class SizesModel:
    """Base of a family's tile model that ranks its own sizes (not ``tiles M N K``): ``ranker_for`` is the
    family's ``ranker`` (Family.ranker uses it), the one loop's ranking handed to the model's
    ``ranker(ranking, rerank)`` view. A subclass implements the protocol and ``ranker``."""

    @classmethod
    def ranker_for(cls, fam, problem: dict, arch, gpu: str | None, rank=None):
        """The family's ranking for ``problem`` as ``tune`` / ``generate`` / ``analyze`` read it, through the
        one ranking loop (``rank``: another loop for tests; default :func:`smemtile.families.ranking.rank`)."""
        from smemtile.families.ranking import rank as loop
        from smemtile.model.arch import Arch, get_arch
        from smemtile.model.tiling_gpus import get_gpu

        rank = rank or loop
        a = arch if isinstance(arch, Arch) else get_arch(arch)
        g = get_gpu(gpu, a.base)
        model = cls(fam)
        return model.ranker(rank(model, problem, a, g), lambda prob: rank(cls(fam), prob, a, g))


@dataclass(frozen=True)
class Ranked:
    cand: Any
    pred: Prediction
    rank: int = 0
    reason: str = ""
    index: int = 0  # the candidate's place in the model's space (the last tie key)


@dataclass(frozen=True)
class Rejected:
    cand: Any
    rejection: Rejection
    alike: int = 1  # candidates of the same shape rejected for the same reason (models with a shape_key)


@dataclass(frozen=True)
class Ranking:
    ranked: tuple[Ranked, ...]
    rejected: tuple[Rejected, ...]
    dominated: tuple[Rejected, ...]  # same shape as a ranked candidate that the order puts first
    counts: dict
    provenance: dict


def shape_of(model, cand) -> Hashable | None:
    fn = getattr(model, "shape_key", None)
    return fn(cand) if fn is not None else None
