"""Every family in the registry keeps the contract (tests/family_contract.py): its task sizes configure, NVRTC
builds its defaults without spills, the generated helper's grids equal the plan's over its test and bench sizes,
its CPU reference runs on the small sizes. A family added to the registry is tested here with no new test code.
The GPU half (correct through the generated helper over the test sizes) is tests/test_helper_gpu.py."""

from __future__ import annotations

import shutil

import family_contract as fc
import pytest

from smemtile.families import FAMILIES

NAMES = list(FAMILIES)


@pytest.mark.parametrize("name", NAMES)
def test_task_sizes_configure(name):
    fc.check_task_sizes(FAMILIES[name])


@pytest.mark.parametrize("name", NAMES)
def test_defaults_compile_without_spills(name):
    assert fc.check_compiles(FAMILIES[name])["registers"] > 0


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to run the helper's grid expressions")
@pytest.mark.parametrize("name", NAMES)
def test_helper_grid_equals_the_plan(name, tmp_path):
    fam = FAMILIES[name]
    assert fc.check_helper_grid(fam, tmp_path) >= len(fam.test_sizes) + len(fam.bench_sizes)


@pytest.mark.parametrize("name", NAMES)
def test_cpu_reference_on_small_sizes(name):
    assert fc.check_reference(FAMILIES[name]) >= 1
