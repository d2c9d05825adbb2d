"""The shared ranking loop (pipeline/rank.py) on a toy model: tiers, penalties, both tie modes, one candidate per
shape, rejections from screen and predict, and the reasons' context."""

from __future__ import annotations

import pytest

from smemtile.families.tile_model import ModelOption, Prediction, Rejection, TieRule, TileModel
from smemtile.pipeline.rank import dedupe, order, rank

CHAIN_1PCT = TieRule(0.01, "chain", "ties within 1%")


class Toy:
    """Candidates (shape, stages, time, tier, penalty, tie); shape 'bad' fails the rules, time None fits nothing."""

    options = (ModelOption("R", "--radius", "a model key"),)

    def __init__(self, cands, rule=CHAIN_1PCT):
        self.cands, self.tie_rule, self.seen = cands, rule, None

    def space(self, problem, arch):
        self.seen = (problem, arch)
        return list(self.cands)

    def screen(self, c):
        return Rejection("rules", f"{c[0]}: broken") if c[0] == "bad" else None

    def predict(self, c, gpu):
        if c[2] is None:
            return Rejection("occupancy", "no block fits")
        return Prediction(c[2], tier=c[3], penalty=c[4], tie=c[5])

    def shape_key(self, c):
        return c[0]

    def explain(self, e, top, ranked):
        return f"#{e.rank} {e.pred.order_time / top.pred.order_time:.2f}x #1 of {len(ranked)}"

    def provenance(self):
        return {"gpu": "toy"}


def labels(r):
    return [(e.cand[0], e.cand[1]) for e in r.ranked]


def test_rank_orders_by_tier_then_time_with_penalty_and_keeps_one_per_shape():
    m = Toy(
        [
            ("a", 2, 10.0, 0, 0.0, (1,)),
            ("a", 3, 9.0, 0, 0.0, (1,)),  # the faster stages of shape a wins
            ("b", 2, 8.0, 1, 0.0, (0,)),  # tier 1: after every tier-0 candidate though faster
            ("c", 2, 9.5, 0, 0.2, (0,)),  # 9.5 x 1.2 = 11.4: after a
            ("bad", 2, 1.0, 0, 0.0, ()),
            ("d", 2, None, 0, 0.0, ()),
        ]
    )
    r = rank(m, {"n": 1}, "sm_90", None)
    assert labels(r) == [("a", 3), ("c", 2), ("b", 2)]
    assert [e.rank for e in r.ranked] == [1, 2, 3]
    assert r.ranked[1].reason == "#2 1.27x #1 of 3"
    assert [(x.cand[0], x.rejection.kind) for x in r.rejected] == [("bad", "rules"), ("d", "occupancy")]
    assert [(x.cand[:2], x.rejection.result.cand[:2]) for x in r.dominated] == [(("a", 2), ("a", 3))]
    assert r.counts == {
        "generated": 6,
        "ranked": 3,
        "rejected": 2,
        "dominated": 1,
        "rejected_rules": 1,
        "rejected_occupancy": 1,
    }
    assert m.seen == ({"n": 1}, "sm_90") and r.provenance == {"gpu": "toy"}
    assert isinstance(m, TileModel)


def test_chain_ties_are_ordered_by_the_tie_key_then_the_space_order():
    m = Toy(
        [
            ("a", 2, 10.00, 0, 0.0, (2,)),
            ("b", 2, 10.05, 0, 0.0, (1,)),  # within 1% of a: the tie key puts it first
            ("c", 2, 10.09, 0, 0.0, (1,)),  # within 1% of a (the group's first), same key: space order
            ("d", 2, 10.20, 0, 0.0, (0,)),  # 2% over a: a new group
        ]
    )
    assert labels(rank(m, {}, "sm_90", None)) == [("b", 2), ("c", 2), ("a", 2), ("d", 2)]
    m0 = Toy(m.cands, TieRule(0.0, "chain"))
    assert labels(rank(m0, {}, "sm_90", None)) == [("a", 2), ("b", 2), ("c", 2), ("d", 2)]


def test_bucket_ties_round_the_log_time():
    m = Toy([("a", 2, 1.0000, 0, 0.0, (1,)), ("b", 2, 1.0010, 0, 0.0, (0,)), ("c", 2, 1.02, 0, 0.0, (0,))])
    m.tie_rule = TieRule(0.005, "bucket")
    assert labels(rank(m, {}, "sm_90", None)) == [("b", 2), ("a", 2), ("c", 2)]
    with pytest.raises(ValueError, match="chain or bucket"):
        order([], TieRule(0.1, "other"))


def test_dedupe_counts_alike():
    m = Toy([("bad", 2, 1.0, 0, 0.0, ()), ("bad", 3, 1.0, 0, 0.0, ()), ("ok", 2, 1.0, 0, 0.0, ())])
    r = rank(m, {}, "sm_90", None)
    d = dedupe(r.rejected, key=lambda x: (x.cand[0], x.rejection.kind))
    assert [(x.cand[:2], x.alike) for x in d] == [(("bad", 2), 2)]
