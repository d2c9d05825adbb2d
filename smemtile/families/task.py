"""A family's task file (``smemtile/families/<name>/task.yaml``): its sizes and plans as data.

The file holds what a family is tested and benchmarked on, and nothing else:

* ``test_sizes``: small problems the correctness checks run (ragged edges, alpha/beta, other dtypes);
* ``bench_sizes``: the problems its headline numbers are measured at;
* ``heldout``: problems its tile model was validated on after it was frozen (none of them was fitted);
* ``reference``: what a benchmark times the family against in the same process (``kind: matmul`` with the
  problem keys of its sizes and dtype, ``kind: copy``: a device copy of the bytes the kernel moves, or ``kind:
  conv2d``: torch.nn.functional.conv2d on channels_last tensors of the problem's n h w c k r s stride pad);
* ``case_name``: how a results file names one shape (a format text over the problem's keys, e.g.
  ``"transpose {dtype} {rows}x{cols}"``; the fitting code joins runs of one shape by it);
* ``plans``: named lists of shapes and configurations ``python -m bench.run FAMILY PLAN`` builds and times.

A configuration without ``layouts`` gets the fix search's (what ``generate`` builds from the spec of its tile);
``layouts: {}`` keeps the family's own (dense, or the swizzles the kernel fixes). A plan::

    plans:
      smoke:
        about: one line
        shapes: [{M: 1024, N: 1024, K: 1024}]     # problem values; or the name of a list above: bench_sizes
        configs:                                   # every configuration on every shape (or groups: a list
                                                   # of {shapes, configs}, for configurations only some take)
          - {label: default}                       # the family's defaults
          - {label: "128x64", params: {BM: 128, BN: 64}, layouts: {As: {pad: 4}}}  # {}: the family's own
          - {ranked: {top: 12, spread: 24}}        # the tile model's ranking, sampled (spread: evenly spaced)

Pure: YAML through the spec reader, no CUDA. Read once per file (cached); a malformed file is refused with one
line naming the file and the key (:class:`smemtile.errors.SpecError`, exit 2).
"""

from __future__ import annotations

import copy
import functools
import sys
from pathlib import Path
from typing import Any

from smemtile.errors import SpecError

FILE = "task.yaml"
TOP_KEYS = ("about", "test_sizes", "bench_sizes", "heldout", "reference", "case_name", "plans")
SIZE_LISTS = ("test_sizes", "bench_sizes", "heldout")
# a plan's reference: its own, replacing the task's
PLAN_KEYS = ("about", "shapes", "configs", "groups", "arch", "rounds", "reference")
GROUP_KEYS = ("shapes", "configs")
CONFIG_KEYS = ("label", "params", "layouts", "ranked", "problem")
RANKED_KEYS = ("top", "spread")
REFERENCE_KINDS = {
    "matmul": ("kind", "sizes", "dtype"),
    "copy": ("kind",),
    "conv2d": ("kind", "dtype"),
    # torch scaled_dot_product_attention; backend pins one (bench/run.py)
    "sdpa": ("kind", "dtype", "backend"),
}
_SCALARS = (int, float, str)


def _fail(path: Path, key: str, message: str):
    raise SpecError(message, source=str(path), key=key)


def _mapping(path: Path, key: str, value: Any, allowed: tuple[str, ...] | None = None) -> dict:
    if not isinstance(value, dict):
        _fail(path, key, f"must be a mapping, got {type(value).__name__}")
    for k in value:
        if not isinstance(k, str):
            _fail(path, key, f"keys must be names, got {k!r}")
        if allowed is not None and k not in allowed:
            _fail(path, f"{key}.{k}", f"unknown key; allowed: {', '.join(allowed)}")
    return value


def _size(path: Path, key: str, value: Any) -> dict:
    """One problem: a mapping of problem keys to numbers or names (dtype: f16)."""
    _mapping(path, key, value)
    if not value:
        _fail(path, key, "a problem needs at least one key (e.g. M: 1024)")
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, _SCALARS):
            _fail(path, f"{key}.{k}", f"must be a number or a name, got {v!r}")
    return value


def _sizes(path: Path, key: str, value: Any, *, required: bool) -> list[dict]:
    if value is None and not required:
        return []
    if not isinstance(value, list) or (required and not value):
        _fail(path, key, "must be a non-empty list of problems (mappings such as {M: 128, N: 128, K: 64})")
    return [_size(path, f"{key}[{i}]", v) for i, v in enumerate(value)]


def _config(path: Path, key: str, value: Any) -> dict:
    _mapping(path, key, value, CONFIG_KEYS)
    if "ranked" in value:
        ranked = _mapping(path, f"{key}.ranked", value["ranked"], RANKED_KEYS)
        for k, v in ranked.items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                _fail(path, f"{key}.ranked.{k}", f"must be a whole number >= 0, got {v!r}")
        if "params" in value:
            _fail(path, key, "a ranked entry takes its parameters from the tile model; drop params")
    elif "label" not in value:
        _fail(path, key, "needs a label (or ranked: {top: N})")
    if "label" in value and not isinstance(value["label"], str):
        _fail(path, f"{key}.label", f"must be text, got {value['label']!r}")
    for sec in ("params", "problem"):
        if value.get(sec):
            _size(path, f"{key}.{sec}", value[sec])
    if "params" in value:
        for k, v in value["params"].items():
            if isinstance(v, bool) or not isinstance(v, int):
                _fail(path, f"{key}.params.{k}", f"must be a whole number, got {v!r}")
    if "layouts" in value:
        for b, lay in _mapping(path, f"{key}.layouts", value["layouts"]).items():
            _mapping(path, f"{key}.layouts.{b}", lay, ("pad", "swizzle", "tma_swizzle"))
    return value


def _group(path: Path, key: str, value: Any, lists: dict[str, list[dict]]) -> dict:
    """shapes x configs: every configuration on every shape."""
    for need in ("shapes", "configs"):
        if need not in value:
            _fail(path, f"{key}.{need}", "missing")
    shapes = value["shapes"]
    if isinstance(shapes, str):
        if shapes not in lists:
            _fail(path, f"{key}.shapes", f"names no list; allowed: {', '.join(SIZE_LISTS)} or a list")
        shapes = lists[shapes]
    shapes = _sizes(path, f"{key}.shapes", shapes, required=True)
    if not isinstance(value["configs"], list) or not value["configs"]:
        _fail(path, f"{key}.configs", "must be a non-empty list of configurations")
    configs = [_config(path, f"{key}.configs[{i}]", c) for i, c in enumerate(value["configs"])]
    return {"shapes": shapes, "configs": configs}


def _plan(path: Path, key: str, value: Any, lists: dict[str, list[dict]]) -> dict:
    """A plan: ``shapes`` and ``configs`` (one group), or ``groups``: a list of them (configurations that only
    some shapes take)."""
    _mapping(path, key, value, PLAN_KEYS)
    for k in ("about", "arch"):
        if k in value and not isinstance(value[k], str):
            _fail(path, f"{key}.{k}", f"must be text, got {value[k]!r}")
    if "rounds" in value and (isinstance(value["rounds"], bool) or not isinstance(value["rounds"], int)):
        _fail(path, f"{key}.rounds", f"must be a whole number, got {value['rounds']!r}")
    if "groups" in value:
        if "shapes" in value or "configs" in value:
            _fail(path, key, "takes groups or shapes and configs, not both")
        if not isinstance(value["groups"], list) or not value["groups"]:
            _fail(path, f"{key}.groups", "must be a non-empty list of {shapes, configs}")
        groups = [
            _group(path, f"{key}.groups[{i}]", _mapping(path, f"{key}.groups[{i}]", g, GROUP_KEYS), lists)
            for i, g in enumerate(value["groups"])
        ]
    else:
        groups = [_group(path, key, value, lists)]
    return {
        "about": value.get("about", ""),
        "arch": value.get("arch"),
        "rounds": value.get("rounds"),
        "groups": groups,
        # what this plan times against instead of the task's reference (one family, two goals: attention's sm_80
        # path against FlashAttention-2, its sm_90a path against torch's fastest backend)
        "reference": _reference(path, value["reference"]) if "reference" in value else None,
    }


def _reference(path: Path, value: Any) -> dict:
    _mapping(path, "reference", value)
    kind = value.get("kind")
    if kind not in REFERENCE_KINDS:
        _fail(path, "reference.kind", f"{kind!r} is not known; allowed: {', '.join(REFERENCE_KINDS)}")
    _mapping(path, "reference", value, REFERENCE_KINDS[kind])
    if kind == "matmul":
        sizes = value.get("sizes")
        if not (isinstance(sizes, list) and len(sizes) == 3 and all(isinstance(s, str) for s in sizes)):
            _fail(path, "reference.sizes", "must name the three problem keys of M, N and K, e.g. [M, N, K]")
        if not isinstance(value.get("dtype"), str):
            _fail(path, "reference.dtype", "must name a problem key or a dtype (f32)")
    return value


def parse(doc: Any, path: Path) -> dict:
    """The validated task document (plans' named shape lists resolved); SpecError on the first bad key."""
    _mapping(path, "task", doc, TOP_KEYS)
    out: dict[str, Any] = {"about": doc.get("about", "")}
    for key in SIZE_LISTS:
        out[key] = _sizes(path, key, doc.get(key), required=key != "heldout")
    out["reference"] = _reference(path, doc["reference"]) if "reference" in doc else None
    out["case_name"] = doc.get("case_name")
    if out["case_name"] is not None and not isinstance(out["case_name"], str):
        _fail(path, "case_name", f"must be a format text over the problem's keys, got {out['case_name']!r}")
    plans = _mapping(path, "plans", doc.get("plans") or {})
    out["plans"] = {name: _plan(path, f"plans.{name}", p, out) for name, p in plans.items()}
    return out


@functools.cache
def _load(path: str) -> dict:
    from smemtile.model.spec import load_yaml

    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise SpecError(f"cannot read the task file ({e.strerror})", source=path) from None
    return parse(load_yaml(text, path), p)


def task_path(module: str) -> Path | None:
    """The task file of the family defined in ``module`` (a family package's folder), or None."""
    mod = sys.modules.get(module)
    file = getattr(mod, "__file__", None)
    if not file or Path(file).name != "__init__.py":
        return None
    path = Path(file).parent / FILE
    return path if path.is_file() else None


def load(module: str) -> dict | None:
    """The parsed task file of the family defined in ``module`` (a copy: callers may change it), or None."""
    path = task_path(module)
    return None if path is None else copy.deepcopy(_load(str(path)))


class TaskSizes:
    """A ``Family`` class attribute read from the family's task file (``test_sizes = TaskSizes()``): a tuple of
    problem mappings, ``()`` for a family without a task file. A subclass may still set the attribute itself."""

    def __set_name__(self, owner, name: str) -> None:
        self.key = name

    def __get__(self, obj, owner=None) -> tuple[dict, ...]:
        cls = owner if obj is None else type(obj)
        path = task_path(cls.__module__)
        if path is None:
            return ()
        return tuple(dict(s) for s in _load(str(path))[self.key])
