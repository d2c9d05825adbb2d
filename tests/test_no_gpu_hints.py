"""Without a GPU, each GPU command's one line says what does run here (issue 30): exit 3, the option named."""

from __future__ import annotations

import pytest
from conftest import gpu_available, run_cli

CASES = [
    (["verify", "samples/sgemm_default.yaml"], "--compile-only"),
    (["measure", "bench/catalogue_heldout.yaml"], "--predict-only"),
    (["tune", "samples/sgemm_default.yaml", "--top", "2"], "--dry-run"),
    (
        [
            "inspect",
            "samples/kernels/transpose_naive.cu",
            "--kernel",
            "transpose",
            "--grid",
            "32,32",
            "--block",
            "32,8",
            "--args",
            "samples/kernels/transpose_naive.args.yaml",
        ],
        "--simulate",
    ),
]


@pytest.mark.skipif(gpu_available(), reason="a GPU answers here: the commands run")
@pytest.mark.parametrize("args, option", CASES, ids=[c[0][0] for c in CASES])
def test_no_gpu_line_names_what_runs_here(args, option):
    p = run_cli(*args)
    assert p.returncode == 3, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and option in lines[0] and "Traceback" not in p.stderr, p.stderr
