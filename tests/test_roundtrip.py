"""Round trips are lossless: spec -> to_doc -> YAML text -> spec gives the same spec and the same analysis
(hypothesis over random buffers, layouts, loop ranges with steps and access expressions), and every family's
published document (generate --json's `spec` / `kernel_accesses`) parses as a spec."""

from __future__ import annotations

import numpy as np
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from smemtile.families import FAMILIES, configure
from smemtile.model.analysis import analyze_spec
from smemtile.model.spec import spec_from_dict

DTYPES = {"f32": 4, "f16": 2, "u8": 1, "f64": 8}


@st.composite
def specs(draw) -> dict:
    dtype = draw(st.sampled_from(sorted(DTYPES)))
    rows = draw(st.sampled_from([8, 16, 32, 64]))
    cols = draw(st.sampled_from([16, 32, 64]))
    layout = draw(
        st.sampled_from([None, {"pad": 1}, {"pad": 4}, {"swizzle": [2, 0, 3]}, {"swizzle": [3, 2, 3]}])
    )
    threads = draw(st.sampled_from([32, 64, 128]))
    buf = {"name": "S", "dtype": dtype, "shape": ["ROWS", cols]}
    if layout is not None:
        buf["layout"] = layout
    if draw(st.booleans()):
        buf["stages"] = draw(st.integers(2, 3))
    step = draw(st.integers(1, 3))
    acc = {
        "name": "a",
        "buffer": "S",
        "op": draw(st.sampled_from(["load", "store"])),
        "width": DTYPES[dtype],
        "row": draw(st.sampled_from(["(lane + k) % ROWS", "warp % ROWS", "lane // 4 + 0 * k"])),
        "col": draw(st.sampled_from(["lane % 16", "(lane * 3) % 16", "min(lane, 15)"])),
        "over": {"k": [0, draw(st.integers(1, 6)), step]},
    }
    if draw(st.booleans()):
        acc["active"] = "lane < 24"
    if draw(st.booleans()):
        acc["role"] = "inner"
    return {
        "arch": draw(st.sampled_from(["sm_80", "sm_90"])),
        "threads": threads,
        "tile": {"ROWS": rows},
        "buffers": [buf],
        "accesses": [acc],
    }


@settings(max_examples=40, deadline=None)
@given(specs())
def test_spec_round_trips_through_yaml(doc):
    try:
        s1 = spec_from_dict(doc)
        a1 = analyze_spec(s1)
    except Exception as e:  # a drawn spec the parser refuses is fine; only SpecError may say so
        assert type(e).__name__ == "SpecError", e
        return
    text = yaml.safe_dump(s1.to_doc(), sort_keys=True)
    s2 = spec_from_dict(yaml.safe_load(text))
    assert s2.to_doc() == s1.to_doc()
    a2 = analyze_spec(s2)
    for x, y in zip(a1, a2, strict=True):
        assert np.array_equal(x.bank.addresses, y.bank.addresses) and np.array_equal(
            x.bank.wavefronts, y.bank.wavefronts
        )
        assert x.loop_values == y.loop_values


def test_loop_step_survives_to_dict():
    s = spec_from_dict(
        {
            "arch": "sm_90",
            "buffers": [{"name": "S", "dtype": "f32", "shape": [32, 32]}],
            "accesses": [{"name": "a", "buffer": "S", "row": "k", "col": "lane", "over": {"k": [0, 32, 8]}}],
        }
    )
    assert s.accesses[0].to_dict()["over"] == {"k": [0, 32, 8]}
    assert [lv["k"] for lv in analyze_spec(s)[0].loop_values] == [0, 8, 16, 24]


def test_every_family_document_parses_as_a_spec():
    for fam in FAMILIES.values():
        cfg = configure(fam, {}, {}, fam.default_arch)
        doc = yaml.safe_load(yaml.safe_dump(fam.spec_doc(cfg)))
        spec = spec_from_dict(doc)
        assert [a.name for a in spec.accesses] == [a["name"] for a in fam.accesses(cfg)]
        assert spec.to_doc()["accesses"] == spec_from_dict(spec.to_doc()).to_doc()["accesses"]
