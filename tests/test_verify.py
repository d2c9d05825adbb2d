"""`smemtile verify`: compile-only through the NVRTC wheel, exit codes, and (marked gpu) the real run."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import ROOT, gpu_available, run_cli

from smemtile.cli import main
from smemtile.errors import NoDevice

KERNEL_SAMPLES = ["transpose_32x32.yaml", "sgemm_float4.yaml", "stencil_halo.yaml"]


def _nvrtc_ok() -> bool:
    try:
        from smemtile.gpu.nvrtc import nvrtc_version

        nvrtc_version()
        return True
    except Exception:
        return False


needs_nvrtc = pytest.mark.skipif(not _nvrtc_ok(), reason="NVRTC wheel not installed")


@needs_nvrtc
@pytest.mark.parametrize("sample", KERNEL_SAMPLES)
def test_compile_only_json(sample):
    p = run_cli("verify", f"samples/{sample}", "--compile-only", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["compile_only"] is True and doc["device"] is None
    assert [r["variant"] for r in doc["variants"]] == ["baseline", "fixed"]
    for key in (
        "registers",
        "static_smem_bytes",
        "spills",
        "occupancy",
        "correct",
        "max_rel_error",
        "time_ms",
    ):
        assert key in doc
    for r in doc["variants"]:
        assert isinstance(r["registers"], int) and 0 < r["registers"] <= 255
        assert r["spills"] == 0
        assert r["static_smem_bytes"] == r["launch"]["static_smem_bytes"]
        model = r["occupancy"]["model"]
        assert model["regs"] == r["registers"] and model["active_blocks"] >= 1
        assert r["occupancy"]["driver"] is None
    # where the analysis recommends a fix (transpose: pad 1, sgemm: As pad 4) the fixed variant's layout differs;
    # the stencil's accesses are already conflict-free, so both variants keep the dense tile
    b, f = doc["variants"]
    assert (b["layouts"] != f["layouts"]) == (sample != "stencil_halo.yaml")


@needs_nvrtc
def test_compile_only_table():
    p = run_cli("verify", "samples/transpose_32x32.yaml", "--compile-only")
    assert p.returncode == 0, p.stderr
    assert "baseline" in p.stdout and "fixed" in p.stdout and "16640" in p.stdout  # 64 x (64 + 1) x 4 B


@needs_nvrtc
def test_compile_only_one_variant():
    p = run_cli("verify", "samples/stencil_halo.yaml", "--compile-only", "--json", "--variant", "baseline")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert [r["variant"] for r in doc["variants"]] == ["baseline"] and doc["speedup"] is None


def test_analysis_only_spec_compiles_as_a_microkernel():
    """A spec without kernel: is verified through a synthesized microkernel of its own accesses."""
    p = run_cli("verify", "samples/gemm_a_column.yaml", "--compile-only", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc and "Traceback" not in p.stderr


def test_missing_file_is_bad_input():
    p = run_cli("verify", "samples/does_not_exist.yaml")
    assert p.returncode == 2


def test_no_gpu_exits_3(monkeypatch):
    import smemtile.gpu.run as run

    def fake(index=0):
        raise NoDevice("no CUDA GPU: cuInit failed (CUDA_ERROR_NO_DEVICE)")

    monkeypatch.setattr(run, "open_device", fake)
    res = CliRunner().invoke(main, ["verify", str(ROOT / "samples/transpose_32x32.yaml")])
    assert res.exit_code == 3
    assert "no CUDA GPU: cuInit failed" in res.output


@pytest.mark.skipif(gpu_available(), reason="this machine has a GPU")
def test_no_gpu_exits_3_for_real():
    p = run_cli("verify", "samples/transpose_32x32.yaml", "--json")
    assert p.returncode == 3
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "no CUDA GPU" in lines[0]


def test_compare_reports_first_bad_index():
    from smemtile.gpu.run import compare

    ref = np.arange(12, dtype=np.float64).reshape(3, 4)
    got = ref.astype(np.float32)
    assert compare(ref, got, 1e-6).correct
    got[1, 2] = np.nan
    got[2, 3] = 100
    res = compare(ref, got, 1e-6)
    assert not res.correct and res.mismatch.index == (1, 2) and res.mismatch.count == 2
    assert res.mismatch.expected == 6.0 and np.isnan(res.mismatch.got)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert compare(x, x.copy(), 0.0, exact=True).correct
    y = x.copy()
    y[0, 1] = -0.0 if x[0, 1] == 0 else 7
    bad = compare(x, y, 0.0, exact=True)
    assert not bad.correct and bad.mismatch.index == (0, 1)


@pytest.mark.gpu
@pytest.mark.parametrize("sample", KERNEL_SAMPLES)
def test_verify_on_gpu(sample):
    p = run_cli("verify", f"samples/{sample}", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["correct"] is True and doc["device"] is not None
    for r in doc["variants"]:
        assert r["correct"] and r["time_ms"] > 0 and r["registers"] > 0
        assert r["occupancy"]["driver"]["active_blocks"] >= 1
        assert ("tflops" in r) != ("gbps" in r)
    assert doc["speedup"] > 0


def test_mismatch_exits_1(monkeypatch):
    import smemtile.cli.verify as verify
    import smemtile.pipeline.verify as pipeline

    def fake(spec, cfgs, device, seed):
        row = {
            "variant": "fixed",
            "name_expression": "transpose_kernel<...>",
            "correct": False,
            "mismatch_text": "first bad index (3, 5): expected 1.5, got nan (7 bad elements)",
        }
        return {"variants": [row]}

    monkeypatch.setattr(pipeline, "on_gpu", fake)
    monkeypatch.setattr(verify, "emit_json", lambda doc: None)
    res = CliRunner().invoke(main, ["verify", str(ROOT / "samples/transpose_32x32.yaml"), "--json"])
    assert res.exit_code == 1
    assert "first bad index (3, 5): expected 1.5, got nan" in res.output


def test_device_peak_from_driver_clocks():
    """H200: 132 SMs x 128 FP32 lanes x 2 x 1980 MHz; HBM3e 2 x 3201 MHz x 6144 bits."""
    from smemtile.gpu.run import Device

    d = Device(0, "NVIDIA H200", (9, 0), "sm_90", 132, None, 1_980_000, 3_201_000, 6144, 60 * 2**20)
    peak = d.peak()
    assert peak["tflops"] == pytest.approx(66.9, abs=0.05)
    assert peak["gbps"] == pytest.approx(4917, abs=1)
    assert "132 SMs x 128 FP32 lanes" in peak["tflops_basis"]
    assert d.to_dict()["peak"] == peak and d.to_dict()["l2_bytes"] == 60 * 2**20
    # a driver without the (deprecated) clock attributes: no peak claimed
    assert Device(0, "x", (9, 0), "sm_90", 132, None).peak() == {}


def test_stage_variants_compile_only():
    r = run_cli(
        "verify",
        str(ROOT / "samples" / "sgemm_float4.yaml"),
        "--compile-only",
        "--json",
        "--stages",
        "2",
        "--stages",
        "2",
        "--variant",
        "fixed",
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    rows = {v["variant"]: v for v in doc["variants"]}
    assert set(rows) == {"fixed", "fixed-s2"}
    # shared memory scales with the stage count (the sgemm family's formula: stages x (BK x (BM+4) + BK x BN) x 4)
    assert rows["fixed-s2"]["static_smem_bytes"] == 2 * (8 * 132 + 8 * 128) * 4
    bad = run_cli("verify", str(ROOT / "samples" / "transpose_32x32.yaml"), "--compile-only", "--stages", "2")
    assert bad.returncode == 2 and "has no STAGES parameter" in bad.stderr and "Traceback" not in bad.stderr
    bad = run_cli("verify", str(ROOT / "samples" / "sgemm_float4.yaml"), "--compile-only", "--stages", "1")
    assert bad.returncode == 2 and "at least 2 stages" in bad.stderr
