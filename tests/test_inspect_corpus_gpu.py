"""The inspect corpus on the GPU (marked ``gpu``, skipped without a device): the recorded addresses equal the
CPU emulator's for every kernel (the fills are the same bytes on both, so data-dependent addresses agree), and ``inspect --ncu`` agrees with Nsight
Compute's wavefronts on every source line where the sample covers the executions ncu counts.

On the H200: ``python3 -m pytest -q -n 0 -p no:cacheprovider -m gpu tests/test_inspect_corpus_gpu.py``."""

from __future__ import annotations

import shutil

import pytest

from smemtile.pipeline.inspect import Sample
from tests.test_inspect_corpus import CORPUS, _run

pytestmark = pytest.mark.gpu

# every fill is computed on the host from (seed, parameter, index): the GPU and the emulator see the same data
SAME_DATA = sorted(CORPUS)


def _relative(res) -> dict:
    """instr -> [(block, warp, active, offsets from the array's base)] of every record of the entry's own
    instructions (the GPU recording does not yet see inside device functions called without inlining)."""
    out: dict[int, list] = {}
    for r in res.reports:
        if r.instr.function:
            continue
        base = res.arrays[r.array].base if r.array in res.arrays else 0
        out[r.instr.index] = sorted(
            (
                x.block,
                x.warp,
                x.active,
                tuple(a - base if x.active >> k & 1 else 0 for k, a in enumerate(x.addresses)),
            )
            for x in r.recorded
        )
    return out


@pytest.mark.parametrize("name", SAME_DATA)
def test_gpu_records_equal_the_emulator(name):
    gpu = _run(name, mode="gpu")
    cpu = _run(name, mode="simulate")
    assert gpu.mode == "gpu" and gpu.meta["recorded"] > 0
    assert _relative(gpu) == _relative(cpu)
    assert {r.instr.index: r.executions for r in gpu.reports if not r.instr.function} == {
        r.instr.index: r.executions for r in cpu.reports if not r.instr.function
    }


def _full_sample(name) -> Sample:
    """Every block and warp of the launch, with as many executions per warp as the emulator sees in block 0 (so
    the record buffer stays small: it holds blocks x warps x instructions x executions slots)."""
    c = CORPUS[name]
    blocks = 1
    for g in c["grid"]:
        blocks *= g
    threads = 1
    for b in c["block"]:
        threads *= b
    warps = -(-threads // 32)
    cpu = _run(name, sample=Sample(blocks=1, warps=warps, executions=1 << 16))
    per: dict[tuple[int, int], int] = {}
    for r in cpu.reports:
        for x in r.recorded:
            per[(r.instr.index, x.warp)] = per.get((r.instr.index, x.warp), 0) + 1
    return Sample(blocks=blocks, warps=warps, executions=max(per.values(), default=1))


# Measured on the H200 (bench/results/session7/pytest_gpu_h200_run3.txt) and explained in inspect's output, not yet
# agreeing: xfail(strict) so that either a fix or a new disagreement shows up.
KNOWN_DISAGREEMENTS = {
    "reduction": "line 12, whole grid recorded: ncu measured 8512 wavefronts, predicted 9024; the output says ptxas "
    "merged the line's 24 PTX shared instructions into 23 SASS ones and predicates them (11776 SASS executions "
    "against 2304 recorded PTX ones): test_inspect_corpus.test_ncu_disagreement_says_ptxas_merged_an_instruction",
    "sgemm_tiled": "line 15: the sample covers 4096 of ncu's 655360 executions and the grid's warps differ (1.20 "
    "wavefronts per execution measured over the grid against the sample's prediction)",
    "cp_async_gather": "line 14 (H200, 2026-12-02): ncu measured 56 wavefronts, predicted 32: ptxas predicates the "
    "`if (t < 64)` 16-byte cp.async.cg, so all 8 warps of each of the 4 blocks issue the LDGSTS (32 SASS executions "
    "against the 8 recorded PTX ones); 32 = 8 x 4 wavefronts of the active warps, and the 24 warps with no lane "
    "on add one each (56); the output says the counts differ and why",
}


@pytest.mark.skipif(shutil.which("ncu") is None, reason="ncu (Nsight Compute) not on PATH")
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_DISAGREEMENTS[n]))
        if n in KNOWN_DISAGREEMENTS
        else n
        for n in sorted(CORPUS)
    ],
)
def test_ncu_agrees_per_line(name):
    # the whole grid is recorded (totals compared), but for the 256-block SGEMM, whose warps all do the same:
    # its sampled warps' wavefronts per execution are the grid's
    sample = None if name == "sgemm_tiled" else _full_sample(name)
    res = _run(name, mode="gpu", ncu=True, sample=sample)
    doc = res.to_dict()
    compared = [ln for ln in doc["lines"] if ln["match"] != "-"]
    assert compared, doc["lines"]
    # every line not compared says why (a device function's lines, 16-byte cp.async.cg, no ncu row)
    assert all(ln["explanation"] for ln in doc["lines"] if ln["match"] == "-"), doc["lines"]
    bad = [(ln["line"], ln["explanation"]) for ln in compared if ln["match"] != "yes"]
    assert not bad, bad
