"""The GEMM tile models behind the TileModel protocol (issue 28 items 1-2): the registry picks the family that
ranks ``tiles M N K``, every model ranks through the one loop (families.ranking), every ranked candidate
configures, and the Triton calibration reproduces from its recorded runs (the families' calibrations: the
contract test, tests/test_family_contract.py)."""

from __future__ import annotations

import pytest

from smemtile.families import FAMILIES
from smemtile.families.gemm import GemmFamily, GemmTileModel
from smemtile.families.tile_model import TileModel
from smemtile.pipeline.rank import rank
from smemtile.pipeline.tiles import gemm_family, implied_gemm_family, recommend

GEMM = [name for name, fam in FAMILIES.items() if isinstance(fam, GemmFamily)]


@pytest.mark.parametrize(
    ("dtype", "arch", "vendor", "family"),
    [
        ("f32", "sm_90", None, "sgemm"),
        ("f32", "sm_80", "nvidia", "sgemm"),
        ("f32", None, None, "sgemm"),
        ("f16", "sm_80", None, "hgemm"),
        ("bf16", "sm_90", None, "hgemm"),
        ("F16", "sm_89", None, "hgemm"),
        ("bf16", "sm_90a", None, "wgmma_gemm"),
        ("f16", "sm_90a", None, "wgmma_gemm"),
        ("f16", "sm_75", None, None),  # hgemm needs sm_80: the model's tiles alone
        ("tf32", "sm_90", None, None),
        ("f8e4m3", "sm_90", None, None),
        ("bf16", "gfx942", "amd", None),
        ("f32", "gfx942", "amd", None),
        ("f32", "sm_999", None, None),  # a bad arch: make_problem says why
    ],
)
def test_the_registry_picks_the_family_that_ranks(dtype, arch, vendor, family):
    fam = gemm_family(dtype, arch, vendor)
    assert (fam.name if fam is not None else None) == family == implied_gemm_family(dtype, arch, vendor)


def test_every_gemm_family_has_a_tile_model_and_at_most_one_claims_a_target():
    from smemtile.model.arch import get_arch

    assert set(GEMM) == {"sgemm", "hgemm", "wgmma_gemm"}
    for name in GEMM:
        model = FAMILIES[name].tile_model(FAMILIES[name])
        assert isinstance(model, TileModel) and model.provenance is not None
    for arch in ("sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_120"):
        for dtype in ("f32", "tf32", "f16", "bf16", "f8e4m3", "i8"):
            claim = [n for n in GEMM if FAMILIES[n].tiles_for(dtype, get_arch(arch), "nvidia")]
            assert len(claim) <= 1, (arch, dtype, claim)


def test_model_only_ranking_is_the_generic_model_through_the_loop():
    model = GemmTileModel()
    rep = model.report(rank(model, {"M": 4096, "N": 4096, "K": 4096, "dtype": "f16"}, "sm_90", None))
    via = recommend(4096, 4096, 4096, "f16", "sm_90", triton=True)
    assert rep.family is None and rep.to_dict() == via.to_dict()
    assert [s.rank for s in rep.ranked] == list(range(1, len(rep.ranked) + 1))
    assert rep.counts["generated"] == rep.counts["ranked"] + rep.counts["rejected"]


@pytest.mark.parametrize(
    ("family", "problem", "arch"),
    [
        ("sgemm", {"M": 4095, "N": 4097, "K": 1023}, "sm_80"),
        ("sgemm", {"M": 64, "N": 8192, "K": 4096}, "sm_90"),
        ("hgemm", {"M": 2999, "N": 3001, "K": 3003, "dtype": "f16"}, "sm_89"),
        ("wgmma_gemm", {"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16"}, "sm_90a"),
    ],
)
def test_every_ranked_candidate_configures_as_its_spec_says(family, problem, arch):
    from smemtile.pipeline.specs import resolve
    from smemtile.pipeline.tiles import spec_doc

    fam = FAMILIES[family]
    model = fam.tile_model(fam)
    ranking = rank(model, {"dtype": "f32", **problem}, arch, None)
    rep = model.report(ranking)
    assert ranking.ranked
    for e in ranking.ranked:
        cfg = model.configure(e)
        assert cfg.family == family and not fam.problems(cfg, accesses=False)
    for e, s in list(zip(ranking.ranked, rep.ranked, strict=True))[:3]:  # the spec tiles --format yaml writes
        assert (
            resolve(spec_doc(rep.problem, s, len(rep.ranked)), "tiles").config.params
            == model.configure(e).params
        )


def test_one_warp_split():
    from smemtile.families.hgemm import tiles as ht
    from smemtile.model import gemm_model

    assert ht.warp_tile is gemm_model.warp_tile
    assert gemm_model.warp_tile(256, 128, 8) == (64, 64) and gemm_model.warp_tile(128, 128, 8) == (64, 32)
    assert gemm_model.warp_tile(16, 16, 8) is None and gemm_model.warp_tile(64, 64, 4, 16, 16) == (32, 32)


def test_the_triton_calibration_reproduces():
    """The model-only ranking's factors (not a family's: the families' calibrations are the contract test's,
    tests/test_family_contract.py; hgemm's exact equality is tests/test_hgemm_family.py's)."""
    from smemtile.model.gemm_fit import reproduce as triton_reproduce

    stored, refit = triton_reproduce()
    assert stored["observations"] == refit["observations"] == 400
    assert stored["measured_pairs"] == refit["measured_pairs"]
    assert stored["rms_log_residual"] == pytest.approx(refit["rms_log_residual"], rel=1e-9)
    for kind, table in stored["factors"].items():
        assert table.keys() == refit["factors"][kind].keys()
        for key, v in table.items():
            assert v == pytest.approx(refit["factors"][kind][key], abs=1e-9), (kind, key)
