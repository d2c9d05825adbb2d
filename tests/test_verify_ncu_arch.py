"""``verify --ncu`` profiles an sm_90a spec's kernel for sm_90a on an H100 / H200, whose device reports sm_90 (the
H200 run of session 11 refused flash_attn's PATH 1 there: "needs sm_90a, not sm_90"), and a spec for another
architecture for the device's. No GPU: ncu's runner is replaced by one that records what it was given."""

from __future__ import annotations

from pathlib import Path

from smemtile.pipeline import verify as V
from smemtile.pipeline.fixes import variants
from smemtile.pipeline.specs import resolve


def _profiled(monkeypatch, spec: dict, device_arch: str) -> dict:
    from smemtile.gpu import ncu as N

    seen = {}

    def profile(stem, variant, cfg, **kw):
        seen[variant] = cfg
        return {"match": True}

    monkeypatch.setattr(N, "find_ncu", lambda: "/bin/ncu")
    monkeypatch.setattr(N, "ncu_version", lambda exe: "test")
    monkeypatch.setattr(N, "profile", profile)
    cfgs = variants(resolve(spec))
    V.with_ncu(Path("s.yaml"), cfgs, {"device": {"arch": device_arch}}, 0, None)
    return seen


def test_an_sm_90a_spec_is_profiled_for_sm_90a_on_an_sm_90_device(monkeypatch):
    spec = {
        "arch": "sm_90a",
        "tile": {"PATH": 1},
        "kernel": {"family": "flash_attn", "batch": 1, "heads": 4, "seq_q": 1024, "head_dim": 128},
    }
    seen = _profiled(monkeypatch, spec, "sm_90")
    assert {c.arch.name for c in seen.values()} == {"sm_90a"}
    assert all(c.params["PATH"] == 1 for c in seen.values())


def test_a_spec_for_another_target_is_profiled_for_the_device(monkeypatch):
    spec = {"arch": "sm_80", "kernel": {"family": "transpose", "rows": 256, "cols": 256}}
    seen = _profiled(monkeypatch, spec, "sm_90")
    assert {c.arch.name for c in seen.values()} == {"sm_90"}
