"""The one ranking loop (:mod:`smemtile.families.ranking`, pure; it lives in the families layer so that a
family's own pick for a spec without a tile can run it too)."""

from __future__ import annotations

from smemtile.families.ranking import dedupe, order, rank

__all__ = ["dedupe", "order", "rank"]
