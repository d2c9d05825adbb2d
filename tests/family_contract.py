"""The contract every kernel family keeps, as functions of the family (``tests/test_family_contract.py`` runs them
over the registry; a new family gets them without a line of test code; the dummy family test runs them on a
family written into a temporary folder).

Each check returns nothing and raises AssertionError (or the family's own error) with the family named."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

from smemtile.codegen.render import launch_helper, render
from smemtile.families import FAMILIES, configure, reconfigure
from smemtile.families.base import ContractViolation, Family

GRID = re.compile(r"const long long gx = (.*), gy = (.*), gz = (.*);")
IDENT = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")
CPP_WORDS = {"long", "int", "unsigned", "size_t", "sizeof", "float", "double", "char", "short"}
MAX_REFERENCE_ELEMENTS = 1 << 16  # the CPU reference runs on the task file's sizes up to this many outputs


def defaults(fam: Family, problem: dict | None = None):
    """The family's default configuration for ``problem`` (its first test size by default) on its arch."""
    p = dict(problem if problem is not None else fam.test_sizes[0])
    return configure(fam, p, {}, fam.default_arch)


def check_task_sizes(fam: Family) -> None:
    assert fam.test_sizes, f"{fam.name}: no test sizes (task.yaml)"
    for p in fam.test_sizes:
        cfg = defaults(fam, p)  # each configures (the grid fits CUDA's limits)
        assert fam.launch(cfg).steps, f"{fam.name}: {p}: an empty launch plan"


def check_compiles(fam: Family) -> dict:
    """NVRTC builds the defaults for the family's arch; ptxas' registers are read for the main kernel."""
    from smemtile.pipeline.build import compile_config

    cfg = defaults(fam)
    res = compile_config(cfg)
    r = res.resources.get(fam.name_expression(cfg))
    assert r is not None and r.registers, f"{fam.name}: ptxas gave no registers: {res.log[:400]}"
    assert not r.spills, f"{fam.name}: the defaults spill {r.spills} bytes"
    return {"registers": r.registers}


def helper_grids(fam: Family, cfg, problems: list[dict], tmp: Path) -> list[tuple[int, int, int]]:
    """The grids the generated C++ helper computes for ``problems`` (dense layout, 256-byte aligned pointers):
    its grid expressions and the conditions guarding them, compiled with g++ and run."""
    helper = launch_helper(cfg)
    body = helper[helper.index(f"inline cudaError_t launch_{fam.name}(") :]
    body = body[: (body + "\n").index("\n}\n")]  # the first (leading-dimension) overload
    grids = GRID.findall(body)
    assert grids, f"{fam.name}: no grid expression in the helper"
    requires = re.findall(r"\n    if \((!\(.*\)|.* < 1.*)\) return cudaErrorInvalidValue;", body)
    conds = []
    for gx, _, _ in grids:
        m = re.search(r"\n    if \((.*)\) \{\n        const long long gx = " + re.escape(gx), body)
        conds.append(m.group(1) if m else "1")
    names = sorted(
        {n for g in grids for e in g for n in IDENT.findall(e)}
        | {n for c in (*conds, *requires) for n in IDENT.findall(c)},
    )
    names = [n for n in names if n not in CPP_WORDS and not n.endswith("LL")]
    lines = ["#include <cstdio>", "int main() {"]
    for p in problems:
        ints = fam.problem_ints(reconfigure(cfg, problem=p, check=False).problem)
        decl = []
        for n in names:
            if n in ints:
                decl.append(f"long long {n} = {int(ints[n])};")
            elif n.endswith("_align"):
                decl.append(f"long long {n} = 256;")
            else:
                raise AssertionError(f"{fam.name}: the helper's grid uses {n!r}, which is no problem key")
        lines.append("  { " + " ".join(decl) + " " + " ".join(f"(void){n};" for n in names))
        refused = " || ".join(f"({r})" for r in requires) or "0"
        lines.append(f'    if ({refused}) printf("refused\\n"); else {{')
        for (gx, gy, gz), cond in zip(grids, conds, strict=True):
            lines.append(
                f'    if ({cond}) printf("%lld %lld %lld\\n", (long long)({gx}), (long long)({gy}), '
                f"(long long)({gz}));"
            )
        lines.append("  }}")
    lines += ["  return 0;", "}"]
    src = tmp / f"{fam.name}_grid.cpp"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp / f"{fam.name}_grid"
    subprocess.run(["g++", "-O0", "-o", str(exe), str(src)], check=True, capture_output=True, text=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return [ln.strip() if ln.strip() == "refused" else tuple(map(int, ln.split())) for ln in out.splitlines()]


def check_helper_grid(fam: Family, tmp: Path) -> int:
    """The generated helper's grid equals the plan's (Family.launch) over the task file's test and bench sizes."""
    if shutil.which("g++") is None:
        raise AssertionError("needs g++")
    cfg = defaults(fam)
    # the parameters left at auto resolve for the generated problem; the helper keeps them for every size
    cfg = reconfigure(cfg, params=fam.auto_values(cfg))
    problems = [*fam.test_sizes, *fam.bench_sizes]
    got = helper_grids(fam, cfg, problems, tmp)
    want: list = []
    for p in problems:
        try:
            want += [s.grid for s in fam.launch(reconfigure(cfg, problem=p)).steps]
        except ContractViolation:  # the plan refuses this problem for this build: the helper must refuse it
            want.append("refused")
    assert got == want, f"{fam.name}: helper grids {got} != plan {want}"
    assert any(w != "refused" for w in want), f"{fam.name}: every size refused"
    return len(want)


def check_reference(fam: Family) -> int:
    """The CPU reference runs on the small test sizes and gives the output array's shape, finite and repeatable."""
    n = 0
    for p in fam.test_sizes:
        cfg = defaults(fam, p)
        out = fam.output_arg()
        shape = fam.array_shape(cfg, out)
        if int(np.prod(shape)) > MAX_REFERENCE_ELEMENTS:
            continue
        x = fam.make_inputs(cfg, np.random.default_rng(0))
        ref = np.asarray(fam.reference(cfg, x))
        assert ref.shape == tuple(shape), f"{fam.name}: {p}: reference {ref.shape} != {tuple(shape)}"
        assert np.isfinite(ref.astype(np.float64)).all(), f"{fam.name}: {p}: the reference is not finite"
        again = np.asarray(fam.reference(cfg, fam.make_inputs(cfg, np.random.default_rng(0))))
        assert np.array_equal(ref, again), f"{fam.name}: {p}: the reference is not repeatable"
        n += 1
    assert n, f"{fam.name}: no test size small enough for the CPU reference"
    return n


def check_generates(cfg) -> None:
    gk = render(cfg)
    fam = FAMILIES.get(cfg.family)
    name = fam.name if fam is not None else cfg.family
    assert f"launch_{name}(" in gk.source, f"{name}: no launcher in the generated source"
    assert gk.source.endswith(gk.body)


def check_ranked(fam: Family) -> int | None:
    """Every configuration the family's tile model ranks (``smemtile tune``'s view, at its first bench size)
    configures and generates; None when the family has no tile model."""
    if getattr(fam, "tile_model", None) is None:
        return None
    problem = {pk.name: pk.default for pk in fam.problem_keys if not pk.dense} | dict(fam.bench_sizes[0])
    ranker = fam.ranker(problem, fam.default_arch, None)
    top = ranker.top(10**6)
    assert top, f"{fam.name}: the tile model ranks nothing for {problem}"
    for params in top:
        check_generates(configure(fam, {**params, **problem}, {}, fam.default_arch))
    return len(top)


def check_calibration(fam: Family, rel: float = 1e-4) -> int | None:
    """The family's calibration rebuilds from its recorded results (``<family>.fit.reproduce()``: the stored
    constants and the refit agree within ``rel``); None when the family ships no fit."""
    import importlib

    try:
        fit = importlib.import_module(f"{type(fam).__module__}.fit")
    except ModuleNotFoundError:
        return None
    stored, refit = fit.reproduce()
    n = _close(stored, refit, rel, fam.name)
    assert n, f"{fam.name}: reproduce() compared nothing"
    return n


def _close(a, b, rel: float, where: str) -> int:
    """Numbers compared in two nested structures (mappings, sequences, numbers, strings)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{where}: keys {sorted(a)} != {sorted(b)}"
        return sum(_close(a[k], b[k], rel, f"{where}.{k}") for k in a)
    if isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), f"{where}: lengths differ"
        return sum(_close(x, y, rel, f"{where}[{i}]") for i, (x, y) in enumerate(zip(a, b, strict=True)))
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        assert abs(float(a) - float(b)) <= rel * max(1.0, abs(float(a))), f"{where}: stored {a}, refit {b}"
        return 1
    assert a == b, f"{where}: stored {a!r}, refit {b!r}"
    return 0
