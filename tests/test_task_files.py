"""Each family's task.yaml (smemtile/families/task.py): the sizes it holds are the ones the family modules held as
literals before (recorded here), every plan names only the family's own parameters, problem keys and buffers,
and a malformed file is refused with one line naming the file and the key."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest

from smemtile.errors import SpecError
from smemtile.families import FAMILIES, configure
from smemtile.families import task as task_mod
from smemtile.families.base import Family

# the class attributes the family modules held before issue 28 moved them into task.yaml (copied verbatim)
LITERALS = {
    "sgemm": (
        (
            {"M": 128, "N": 128, "K": 64},
            {"M": 257, "N": 131, "K": 77, "beta": 0.5},
            {"M": 1000, "N": 1001, "K": 333, "alpha": 0.75, "beta": -1.25},
            {"M": 33, "N": 4, "K": 1},
            {"M": 512, "N": 384, "K": 1024, "beta": 1.0},
        ),
        ({"M": 4096, "N": 4096, "K": 4096}, {"M": 8192, "N": 8192, "K": 8192}),
    ),
    "transpose": (
        (
            {"rows": 32, "cols": 32},
            {"rows": 1000, "cols": 777},
            {"rows": 33, "cols": 2049},
            {"rows": 1, "cols": 5},
            {"rows": 513, "cols": 257, "dtype": "f16"},
            {"rows": 456, "cols": 264},
        ),
        ({"rows": 8192, "cols": 8192},),
    ),
    "stencil2d": (
        ({"ny": 64, "nx": 64}, {"ny": 1000, "nx": 999}, {"ny": 7, "nx": 300}, {"ny": 1, "nx": 1}),
        ({"ny": 8192, "nx": 8192},),
    ),
    "hgemm": (
        (
            {"M": 256, "N": 128, "K": 64},
            {"M": 257, "N": 131, "K": 77, "beta": 0.5},
            {"M": 1000, "N": 1000, "K": 333, "alpha": 0.75, "beta": -1.25, "dtype": "bf16"},
            {"M": 33, "N": 4, "K": 1, "b_layout": "col"},
            {"M": 512, "N": 384, "K": 1024, "c_dtype": "f16"},
            {"M": 300, "N": 264, "K": 1023, "beta": 0.5, "dtype": "bf16", "c_dtype": "bf16"},
        ),
        (
            {"M": 4096, "N": 4096, "K": 4096},
            {"M": 8192, "N": 8192, "K": 8192},
            {"M": 64, "N": 8192, "K": 4096},
            {"M": 4095, "N": 4097, "K": 1023},
        ),
    ),
    "wgmma_gemm": (
        (
            {"M": 256, "N": 512, "K": 256},
            {"M": 257, "N": 129, "K": 72},
            {"M": 1000, "N": 1001, "K": 333, "dtype": "f16"},
            {"M": 4095, "N": 4097, "K": 1023},
            {"M": 64, "N": 8, "K": 8},
        ),
        (
            {"M": 4096, "N": 4096, "K": 4096},
            {"M": 8192, "N": 8192, "K": 8192},
            {"M": 4095, "N": 4097, "K": 1023},
        ),
    ),
}


def _typed(sizes):
    return [[(k, type(v).__name__, v) for k, v in s.items()] for s in sizes]


@pytest.mark.parametrize("name", sorted(LITERALS))
def test_sizes_equal_the_removed_literals(name):
    fam = FAMILIES[name]
    test, bench = LITERALS[name]
    assert fam.test_sizes == test and fam.bench_sizes == bench
    assert type(fam).test_sizes == test  # read on the class as well
    assert _typed(fam.test_sizes) == _typed(test) and _typed(fam.bench_sizes) == _typed(
        bench
    )  # 1.0 stays a float


def test_every_registered_family_has_a_task_file():
    assert set(LITERALS) <= set(FAMILIES)
    for name, fam in FAMILIES.items():
        path = task_mod.task_path(type(fam).__module__)
        assert path is not None and path.name == "task.yaml" and path.parent.name == name, name
        doc = task_mod.load(type(fam).__module__)
        assert fam.test_sizes and fam.bench_sizes and doc["heldout"], name
        assert {"smoke", "bench", "sweep", "heldout"} <= set(doc["plans"]), name
        assert doc["reference"]["kind"] in task_mod.REFERENCE_KINDS, name


def test_sizes_are_fresh_copies():
    fam = FAMILIES["sgemm"]
    fam.test_sizes[0]["M"] = -1
    task_mod.load(type(fam).__module__)["test_sizes"][0]["M"] = -2
    assert fam.test_sizes[0]["M"] == 128


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_plans_name_only_the_familys_keys(name):
    fam = FAMILIES[name]
    doc = task_mod.load(type(fam).__module__)
    params = {p.name for p in fam.params}
    problem = {pk.name for pk in fam.problem_keys}
    buffers = {b["name"] for b in fam.buffers(configure(fam, {}, None, fam.default_arch))}
    for size in [*doc["test_sizes"], *doc["bench_sizes"], *doc["heldout"]]:
        assert set(size) <= problem | set(fam.problem_params), (name, size)
    if doc["reference"]["kind"] == "matmul":
        keys = [*doc["reference"]["sizes"], doc["reference"]["dtype"]]
        assert set(keys) - {"f32"} <= problem, keys
    for plan_name, plan in doc["plans"].items():
        assert plan["about"], (name, plan_name)
        for group in plan["groups"]:
            for shape in group["shapes"]:
                assert set(shape) <= problem | set(fam.problem_params), (name, plan_name, shape)
            labels = [c["label"] for c in group["configs"] if "label" in c]
            assert len(labels) == len(set(labels)), (name, plan_name, labels)
            for c in group["configs"]:
                assert set(c.get("params", {})) <= params, (name, plan_name, c)
                assert set(c.get("problem", {})) <= problem, (name, plan_name, c)
                assert set(c.get("layouts", {})) <= buffers, (name, plan_name, c)


def test_the_sgemm_plans_carry_the_bench_pool():
    """The calibration pool and the fit / held-out shapes are the ones the model's data file names."""
    import json

    doc = task_mod.load(type(FAMILIES["sgemm"]).__module__)
    # the model's data file, wherever the package keeps it (model/data or the family's folder)
    data = json.loads(next(Path(task_mod.__file__).parents[1].rglob("sgemm_h200.json")).read_text())
    sweep = doc["plans"]["sweep"]["groups"][0]
    assert {f"{s['M']}x{s['N']}x{s['K']}" for s in sweep["shapes"]} == set(data["fit_shapes"])
    held = {f"{s['M']}x{s['N']}x{s['K']}" for s in doc["heldout"]}
    assert set(data["held_out_shapes"]) <= held and not held & set(data["fit_shapes"])
    assert len(sweep["configs"]) == 63 and doc["plans"]["heldout"]["groups"][0]["configs"] == sweep["configs"]


def _parse(text: str, tmp_path: Path):
    from smemtile.model.spec import load_yaml

    path = tmp_path / "task.yaml"
    return task_mod.parse(load_yaml(textwrap.dedent(text), str(path)), path)


GOOD = """
test_sizes: [{M: 8, N: 8, K: 8}]
bench_sizes: [{M: 64, N: 64, K: 64}]
"""


@pytest.mark.parametrize(
    "text, key, words",
    [
        ("bench_sizes: [{M: 1}]\n", "test_sizes", "non-empty list"),
        ("test_sizes: []\nbench_sizes: [{M: 1}]\n", "test_sizes", "non-empty list"),
        (GOOD + "tests: 1\n", "task.tests", "allowed: about, test_sizes"),
        ("test_sizes: [{M: [1]}]\nbench_sizes: [{M: 1}]\n", "test_sizes[0].M", "number or a name"),
        ("test_sizes: [{M: true}]\nbench_sizes: [{M: 1}]\n", "test_sizes[0].M", "number or a name"),
        (GOOD + "reference: {kind: fft}\n", "reference.kind", "allowed: matmul, copy"),
        (GOOD + "reference: {kind: matmul, sizes: [M, N]}\n", "reference.sizes", "three problem keys"),
        (GOOD + "reference: {kind: copy, bytes: 4}\n", "reference.bytes", "unknown key"),
        (GOOD + "case_name: [rows]\n", "case_name", "format text"),
        (GOOD + "plans: {p: {configs: [{label: a}]}}\n", "plans.p.shapes", "missing"),
        (GOOD + "plans: {p: {shapes: sizes, configs: [{label: a}]}}\n", "plans.p.shapes", "names no list"),
        (GOOD + "plans: {p: {shapes: bench_sizes, configs: []}}\n", "plans.p.configs", "non-empty list"),
        (GOOD + "plans: {p: {shapes: bench_sizes, configs: [{}]}}\n", "plans.p.configs[0]", "needs a label"),
        (
            GOOD + "plans: {p: {shapes: bench_sizes, configs: [{label: a, params: {BM: x}}]}}\n",
            "plans.p.configs[0].params.BM",
            "whole number",
        ),
        (
            GOOD + "plans: {p: {shapes: bench_sizes, configs: [{ranked: {top: 2}, params: {BM: 1}}]}}\n",
            "plans.p.configs[0]",
            "drop params",
        ),
        (
            GOOD + "plans: {p: {shapes: bench_sizes, configs: [{ranked: {best: 2}}]}}\n",
            "plans.p.configs[0].ranked.best",
            "allowed: top, spread",
        ),
        (
            GOOD + "plans: {p: {shapes: bench_sizes, configs: [{label: a, layouts: {As: {pads: 1}}}]}}\n",
            "plans.p.configs[0].layouts.As.pads",
            "allowed: pad, swizzle",
        ),
        (
            GOOD + "plans: {p: {groups: [{shapes: bench_sizes}]}}\n",
            "plans.p.groups[0].configs",
            "missing",
        ),
        (
            GOOD + "plans: {p: {groups: [], shapes: bench_sizes}}\n",
            "plans.p",
            "not both",
        ),
    ],
)
def test_malformed_task_files_are_refused_with_the_key(tmp_path, text, key, words):
    with pytest.raises(SpecError) as e:
        _parse(text, tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and str(tmp_path / "task.yaml") in msg
    assert f": {key}: " in msg and words in msg, msg


def test_a_good_file_resolves_named_lists(tmp_path):
    doc = _parse(
        GOOD + "heldout: [{M: 3, N: 5, K: 7}]\nplans: {p: {shapes: heldout, configs: [{label: default}]}}\n",
        tmp_path,
    )
    assert doc["plans"]["p"]["groups"] == [
        {"shapes": [{"M": 3, "N": 5, "K": 7}], "configs": [{"label": "default"}]}
    ]
    assert doc["reference"] is None and doc["test_sizes"] == [{"M": 8, "N": 8, "K": 8}]


def test_a_new_family_folder_gets_its_sizes_from_its_task_file(tmp_path, monkeypatch):
    pkg = tmp_path / "seventh_family"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from smemtile.families.base import Family\n\nclass Seventh(Family):\n    name = 'seventh'\n"
    )
    (pkg / "task.yaml").write_text("test_sizes: [{n: 3}, {n: 1000}]\nbench_sizes: [{n: 65536}]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("seventh_family")
    try:
        assert mod.Seventh().test_sizes == ({"n": 3}, {"n": 1000}) and mod.Seventh.bench_sizes == (
            {"n": 65536},
        )
        (pkg / "task.yaml").write_text("test_sizes: 3\n")  # cached: read once per file
        assert mod.Seventh().test_sizes == ({"n": 3}, {"n": 1000})
    finally:
        sys.modules.pop("seventh_family", None)


def test_a_broken_task_file_names_itself(tmp_path, monkeypatch):
    pkg = tmp_path / "broken_family"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from smemtile.families.base import Family\n\nclass Broken(Family):\n    name = 'broken'\n"
    )
    (pkg / "task.yaml").write_text("test_sizes: [{n: 3}]\nbench_sizes: {n: 4}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("broken_family")
    try:
        with pytest.raises(
            SpecError, match=r"broken_family/task.yaml: bench_sizes: must be a non-empty list"
        ):
            mod.Broken().bench_sizes  # noqa: B018
    finally:
        sys.modules.pop("broken_family", None)


def test_without_a_task_file_the_sizes_are_empty():
    class Local(Family):  # defined in this test module: no family folder, no task file
        name = "local"

    class Own(Family):
        name = "own"
        test_sizes = ({"n": 1},)

    assert Local().test_sizes == () and Local.bench_sizes == () and Family.test_sizes == ()
    assert Own().test_sizes == ({"n": 1},) and Own().bench_sizes == ()


def test_a_plan_may_name_its_own_reference(tmp_path):
    """flash_attn's ``fastest`` plan times against torch's default SDPA dispatch, the task's other plans against
    FlashAttention-2; a bad plan reference is refused like the task's."""
    from smemtile.families.flash_attn import FlashAttn
    from smemtile.families.task import load, parse

    task = load(FlashAttn.__module__)
    assert task["reference"] == {"kind": "sdpa", "dtype": "dtype", "backend": "flash"}
    assert task["plans"]["fastest"]["reference"] == {"kind": "sdpa", "dtype": "dtype"}
    assert task["plans"]["bench"]["reference"] is None
    import yaml

    doc = yaml.safe_load((Path(sys.modules[FlashAttn.__module__].__file__).parent / "task.yaml").read_text())
    doc["plans"]["fastest"]["reference"] = {"kind": "nope"}
    with pytest.raises(SpecError, match="'nope' is not known"):
        parse(doc, tmp_path / "task.yaml")
