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


@pytest.mark.parametrize("name", NAMES)
def test_every_ranked_configuration_configures_and_generates(name):
    fam = FAMILIES[name]
    n = fc.check_ranked(fam)
    assert n is None and fam.tile_model is None or n >= 1


@pytest.mark.parametrize("name", NAMES)
def test_the_calibration_rebuilds_from_its_results(name):
    """``<family>/fit.py``'s reproduce(): the shipped constants refitted from bench/results agree within 1e-4 (a
    family whose model has no fitted constants ships no fit module: its test says so)."""
    n = fc.check_calibration(FAMILIES[name])
    if n is None:
        pytest.skip(f"{name} ships no fit (its model's factors are stated with their provenance, not fitted)")
    assert n >= 1
