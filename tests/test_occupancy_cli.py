"""`smemtile occupancy` and `smemtile archs` as a user runs them: output, JSON contract, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT, run_cli

CONTRACT = {"active_blocks", "active_warps", "occupancy", "limiter", "limits"}
LIMIT_KEYS = {"warps", "registers", "shared_memory", "blocks"}


def one_line_error(p: subprocess.CompletedProcess, code: int) -> str:
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("smemtile: error:"), p.stderr
    return lines[0]


def test_occupancy_table():
    p = run_cli("occupancy", "--arch", "sm_90", "--threads", "256", "--regs", "64", "--smem-dynamic", "48K")
    assert p.returncode == 0, p.stderr
    assert "4 blocks/SM" in p.stdout and "50.0%" in p.stdout and "What if" in p.stdout


def test_occupancy_json_contract():
    p = run_cli(
        "occupancy",
        "--arch",
        "sm_90",
        "--threads",
        "256",
        "--regs",
        "64",
        "--smem-static",
        "0",
        "--smem-dynamic",
        "48K",
        "--carveout",
        "50",
        "--json",
    )
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert CONTRACT <= set(d) and LIMIT_KEYS <= set(d["limits"])
    assert (d["active_blocks"], d["active_warps"], d["occupancy"], d["limiter"]) == (
        2,
        16,
        0.25,
        "shared_memory",
    )
    assert d["what_if"]["next_block"]["needs"]["shared_memory"]["max_dynamic_smem"] == 44032


def test_zero_blocks_exit_1_with_report():
    p = run_cli(
        "occupancy",
        "--arch",
        "sm_86",
        "--threads",
        "128",
        "--regs",
        "32",
        "--smem-dynamic",
        "60000",
        "--no-opt-in",
        "--json",
    )
    line = one_line_error(p, 1)
    d = json.loads(p.stdout)
    assert d["active_blocks"] == 0 and d["limiter"] == "shared_memory" and d["reason"]
    assert "cudaFuncAttributeMaxDynamicSharedMemorySize" in line


@pytest.mark.parametrize(
    "args, expect",
    [
        (["--threads", "0", "--regs", "32"], "threads"),
        (["--threads", "1025", "--regs", "32"], "1024"),
        (["--threads", "128", "--regs", "256"], "255"),
        (["--threads", "128", "--regs", "abc"], "--regs"),
        (["--threads", "128", "--regs", "32", "--smem-dynamic", "-1K"], "negative"),
        (["--threads", "128", "--regs", "32", "--smem-static", "12Q"], "48K"),
        (["--threads", "128", "--regs", "32", "--carveout", "101"], "0..100"),
        (["--arch", "sm_61", "--threads", "128", "--regs", "32"], "sm_70, sm_75"),
        (["--threads", "128"], "--regs"),
    ],
)
def test_bad_input_exit_2_one_line(args, expect):
    assert expect in one_line_error(run_cli("occupancy", *args), 2)


def test_auto_without_gpu_exits_3():
    from conftest import gpu_available

    if gpu_available():
        pytest.skip("a GPU is present")
    one_line_error(run_cli("occupancy", "--arch", "auto", "--threads", "128", "--regs", "32"), 3)


BATCH = """arch,threads,regs,static_smem,dynamic_smem,carveout,opt_in
sm_90,256,64,0,48K,,1
sm_80,128,255,0,0,50,0
sm_86,1024,32,0,60000,,0
sm_75,64,32,1KiB,0
"""


def test_batch_json_in_order(tmp_path):
    f = tmp_path / "b.csv"
    f.write_text(BATCH)
    p = run_cli("occupancy", "--batch", str(f), "--json")
    assert p.returncode == 0, p.stderr  # a row with 0 blocks is data, not a failure
    rows = json.loads(p.stdout)
    assert [r["arch"] for r in rows] == ["sm_90", "sm_80", "sm_86", "sm_75"]
    assert [r["active_blocks"] for r in rows] == [4, 2, 0, 16]
    assert all(CONTRACT <= set(r) and LIMIT_KEYS <= set(r["limits"]) for r in rows)
    assert rows[1]["carveout"] == 50 and rows[1]["opt_in"] is False and rows[0]["carveout"] is None
    assert rows[2]["reason"]


def test_batch_table_and_stdin():
    p = run_cli("occupancy", "--batch", "-", input="sm_90,256,64,0,48K\nsm_90,1024,255,0,0\n")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 3 and "cannot run" in lines[2]


@pytest.mark.parametrize(
    "text, expect",
    [
        ("sm_90,256,64,0,0\nsm_90,256,300,0,0\n", ":2: regs"),
        ("sm_90,256,64,0,0\n\nsm_61,256,3,0,0\n", ":3: arch"),
        ("sm_90,256,64,0,0\nsm_90,256,3,0\n", ":2: expected 5 to 7 columns"),
        ("sm_90,256,64,0,4Q\n", ":1: dynamic_smem"),
        ("sm_90,256,64,0,-4\n", ":1: dynamic_smem: must not be negative"),
        ("sm_90,0,64,0,0\n", ":1: threads"),
        ("sm_90,256,64,0,0,,2\n", ":1: opt_in"),
        ("sm_90,256,64,0,0,x,1\n", ":1: carveout"),
        ("arch,threads,regs,smem\n", ":1: unknown column 'smem'"),
        ("# only a comment\n", "no configurations"),
    ],
)
def test_batch_malformed_names_the_line(tmp_path, text, expect):
    f = tmp_path / "bad.csv"
    f.write_text(text)
    assert expect in one_line_error(run_cli("occupancy", "--batch", str(f)), 2)


def test_batch_excludes_single_flags(tmp_path):
    f = tmp_path / "b.csv"
    f.write_text(BATCH)
    one_line_error(run_cli("occupancy", "--batch", str(f), "--threads", "64"), 2)


def test_help_teaches_with_an_example():
    p = run_cli("occupancy", "--help")
    assert p.returncode == 0
    assert "smemtile occupancy --arch sm_90 --threads 256 --regs 64" in p.stdout and "--batch" in p.stdout
    assert "Exit codes" in p.stdout
    assert "smemtile archs" in run_cli("archs", "--help").stdout


def test_archs_table_and_json():
    p = run_cli("archs")
    assert (
        p.returncode == 0
        and "sm_121" in p.stdout
        and "Sources" in p.stdout
        and "cuda_occupancy.h" in p.stdout
    )
    d = json.loads(run_cli("archs", "--json").stdout)
    assert [a["name"] for a in d][:2] == ["sm_70", "sm_75"] and len(d) == 11
    assert d[6]["smem_per_sm"] == 233472 and "H200" in d[6]["sources"]["smem_per_sm"]
    one = json.loads(run_cli("archs", "--arch", "sm_86", "--json").stdout)
    assert len(one) == 1 and one[0]["max_threads_per_sm"] == 1536


def test_model_imports_no_cuda():
    code = (
        "import sys\n"
        "from smemtile.model.occupancy import occupancy\n"
        "from smemtile.model.arch import ARCHS\n"
        "occupancy(ARCHS['sm_90'], 128, 32)\n"
        "import smemtile.report.occupancy\n"
        "assert not [m for m in sys.modules if m.startswith('cuda')], 'CUDA imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
