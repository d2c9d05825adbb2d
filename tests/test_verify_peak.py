"""`verify`'s "of peak": a family that names the FP32 or memory peak is divided by it; a tensor-core family (hgemm,
wgmma_gemm: ``Family.peak is None``) is never divided by the FP32 FMA peak, and the report says where its real
comparison is (cuBLAS, bench/)."""

from __future__ import annotations

import pytest

from smemtile.families import FAMILIES
from smemtile.report.verify import render

PEAK = {
    "tflops": 66.9,
    "tflops_basis": "132 SMs x 128 FP32 lanes x 2 (FMA) x 1980 MHz",
    "gbps": 4814.3,
    "gbps_basis": "2 x 3201 MHz x 6016-bit bus",
}


def doc(family: str, unit: str, value: float, fraction: float | None) -> dict:
    occ = {"model": {"active_blocks": 1, "occupancy": 0.125}, "driver": {"active_blocks": 1}, "agree": True}
    rows = [
        {
            "variant": v,
            "layout_text": "dense",
            "registers": 168,
            "spills": 0,
            "static_smem_bytes": 0,
            "occupancy": occ,
            "correct": True,
            "max_rel_error": 1e-3,
            "time_ms": 0.18,
            unit: value,
            "peak_fraction": fraction,
            "timing": {"runs": 20},
        }
        for v in ("baseline", "fixed")
    ]
    return {
        "spec": "s.yaml",
        "family": family,
        "problem": {"M": 4096, "N": 4096, "K": 4096},
        "arch": "sm_90a",
        "device": {"name": "NVIDIA H200", "arch": "sm_90", "index": 0, "peak": PEAK},
        "compile_only": False,
        "variants": rows,
    }


@pytest.mark.parametrize("family", ["hgemm", "wgmma_gemm"])
def test_tensor_core_families_are_not_divided_by_the_fp32_peak(family, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert FAMILIES[family].peak is None  # the family names no peak the driver can give
    render(doc(family, "tflops", 752.6, None))
    out = capsys.readouterr().out
    assert f"of peak: none for {family}" in out and "vs cuBLAS: see bench/" in out
    assert "66.9 TFLOP/s" not in out and "1125%" not in out  # 752.6 / 66.9 would be 11x "of peak"
    row = next(ln for ln in out.splitlines() if "baseline" in ln)
    assert "752.6" in row and row.rstrip(" │").endswith("-")


def test_fp32_family_keeps_its_peak(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert FAMILIES["sgemm"].peak == "fp32"
    render(doc("sgemm", "tflops", 48.0, 48.0 / 66.9))
    out = capsys.readouterr().out
    assert (
        "peak 66.9 TFLOP/s: 132 SMs x 128 FP32 lanes" in out and "72%" in out and "of peak: none" not in out
    )


def test_memory_family_keeps_its_peak(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    render(doc("transpose", "gbps", 4000.0, 4000.0 / 4814.3))
    out = capsys.readouterr().out
    assert "peak 4814.3 GB/s" in out and "83%" in out and "of peak: none" not in out
