"""smemtile.triton: prune drops what cannot fit (the stated shared-memory formula against the opt-in limit, the
register estimate), ranks with the tile model and the K-mask penalty, keeps k; configs / configs_as_dicts build a
ranked space; Triton itself is optional (one ImportError line), and the autotune hook runs on a GPU."""

from __future__ import annotations

import sys
import types

import pytest

import smemtile.triton as st
from smemtile.errors import SpecError


def cfg(bm, bn, bk, warps=8, stages=3, group=8):
    return {
        "BLOCK_SIZE_M": bm,
        "BLOCK_SIZE_N": bn,
        "BLOCK_SIZE_K": bk,
        "GROUP_SIZE_M": group,
        "num_warps": warps,
        "num_stages": stages,
    }


class FakeTensor:
    def __init__(self, dtype: str):
        self.dtype = dtype


def args(m, n, k, dtype="torch.bfloat16"):
    return {
        "a_ptr": FakeTensor(dtype),
        "b_ptr": FakeTensor(dtype),
        "c_ptr": FakeTensor(dtype),
        "M": m,
        "N": n,
        "K": k,
    }


SPACE = [
    cfg(bm, bn, bk, w, s)
    for bm in (64, 128, 256)
    for bn in (64, 128, 256)
    for bk in (32, 64, 128)
    for w in (4, 8)
    for s in (3, 4, 5)
]


def test_shared_memory_formula_against_the_opt_in_limit():
    # (BM*BK + BK*BN) * 2 bytes * stages: 128x256x64 bf16 is 196608 B at 4 stages, 245760 B at 5 (limit 232448)
    rows = st.rank([cfg(128, 256, 64, 8, 4), cfg(128, 256, 64, 8, 5)], 4096, 4096, 4096, "bf16", "sm_90")
    by_stages = {r["knobs"]["stages"]: r for r in rows}
    assert by_stages[4]["smem_bytes"] == 196608 and by_stages[4]["kept"]
    assert by_stages[5]["smem_bytes"] == 245760 and not by_stages[5]["kept"]
    assert "required 245760, limit 232448" in by_stages[5]["reason"]
    # the same tile fits on sm_80 (163 KB opt-in) at 3 stages only: 147456 B
    rows80 = st.rank([cfg(128, 256, 64, 8, 3), cfg(128, 256, 64, 8, 4)], 4096, 4096, 4096, "bf16", "sm_80")
    assert [r["kept"] for r in sorted(rows80, key=lambda r: r["knobs"]["stages"])] == [True, False]


def test_registers_that_cannot_fit_are_dropped():
    # 256x256 over 4 warps: a 256x64 fp32 accumulator tile per warp is 512 registers a thread
    rows = st.rank([cfg(256, 256, 16, 4, 2), cfg(128, 128, 32, 4, 3)], 4096, 4096, 4096, "f16")
    big = next(r for r in rows if r["knobs"]["bm"] == 256)
    assert big["smem_bytes"] == 32768 and not big["kept"]
    assert "registers" in big["reason"]
    assert rows[0]["kept"] and rows[0]["knobs"]["bm"] == 128


def test_a_block_k_that_does_not_divide_k_is_penalised():
    a, b = cfg(128, 128, 32, 4, 4), cfg(128, 128, 64, 4, 4)
    rows = st.rank([a, b], 6000, 5000, 4000, "bf16")  # 4000 = 125 x 32, not a multiple of 64
    odd = {r["knobs"]["bk"]: r for r in rows}
    assert odd[32]["k_divides"] and not odd[64]["k_divides"]
    assert odd[64]["predicted_tflops"] == pytest.approx(odd[64]["model_tflops"] * 34 / 131)
    assert odd[32]["predicted_tflops"] == odd[32]["model_tflops"]
    even = {r["knobs"]["bk"]: r for r in st.rank([a, b], 6000, 5000, 4096, "bf16")}
    assert even[64]["k_divides"] and even[64]["predicted_tflops"] == even[64]["model_tflops"]
    # on 6000x5000x4000 every one of prune's 8 has a BLOCK_K that divides K
    kept = st.prune(SPACE, args(6000, 5000, 4000))
    assert len(kept) == 8 and all(4000 % c["BLOCK_SIZE_K"] == 0 for c in kept)


def test_padding_waste_is_in_the_model_time():
    rows = st.rank([cfg(128, 128, 32, 4, 4), cfg(256, 128, 32, 8, 4)], 4100, 4096, 4096, "bf16")
    pad = {r["knobs"]["bm"]: r["pad_eff"] for r in rows}
    assert pad[128] == pytest.approx(4100 / (33 * 128)) and pad[256] == pytest.approx(4100 / (17 * 256))


def test_prune_keeps_k_best_first_and_returns_the_given_objects():
    kept = st.prune(SPACE, args(8192, 8192, 8192))
    assert len(kept) == 8 and all(any(c is s for s in SPACE) for c in kept)
    ranked = [r["config"] for r in st.rank(SPACE, 8192, 8192, 8192, "bf16") if r["kept"]]
    assert kept == ranked[:8]
    assert len(st.pruner(k=3)(SPACE, args(8192, 8192, 8192))) == 3
    # M, N, K may come as keyword arguments of the call, and under other names
    p = st.pruner(k=2, M="m", N="n", K="k", dtype="f16")
    assert len(p(SPACE, {"m": 1024}, n=1024, k=1024)) == 2


def test_prune_reads_the_dtype_from_the_first_tensor():
    fp32 = st.rank([cfg(64, 64, 32, 4, 3)], 4096, 4096, 4096, "torch.float32")
    assert fp32[0]["smem_bytes"] == (64 * 32 + 32 * 64) * 4 * 3  # ranked as tf32: 4-byte elements
    assert st.model_dtype("torch.float32") == "tf32" and st.model_dtype("torch.bfloat16") == "bf16"
    assert st.prune(SPACE, args(4096, 4096, 4096, "torch.float16"))


@pytest.mark.parametrize(
    "call, where",
    [
        (lambda: st.prune(SPACE, {"a": FakeTensor("torch.bfloat16"), "N": 8, "K": 8}), "'M'"),
        (lambda: st.prune(SPACE, {"M": 8, "N": 8, "K": 8}), "dtype"),
        (lambda: st.rank(SPACE, 64, 64, 64, "complex64"), "dtype"),
        (lambda: st.rank([{"BLOCK_SIZE_M": 64}], 64, 64, 64, "bf16"), "BLOCK_SIZE_N"),
        (lambda: st.pruner(k=0), "k"),
    ],
)
def test_bad_input_is_one_line(call, where):
    with pytest.raises(SpecError) as e:
        call()
    assert "\n" not in str(e.value) and where in str(e.value)


def test_configs_as_dicts_is_a_ranked_space_that_fits():
    d = st.configs_as_dicts(6000, 5000, 4000, "bf16", top=8)
    assert len(d) == 8
    for c in d:
        assert 4000 % c["BLOCK_SIZE_K"] == 0
        assert (c["BLOCK_SIZE_M"] * c["BLOCK_SIZE_K"] + c["BLOCK_SIZE_K"] * c["BLOCK_SIZE_N"]) * 2 * c[
            "num_stages"
        ] <= 232448
    ranked = [r["config"] for r in st.rank(d, 6000, 5000, 4000, "bf16")]
    assert ranked == d  # prune ranks them in the same order
    assert st.configs_as_dicts(4096, 4096, 4096, "f16", top=3) != st.configs_as_dicts(
        64, 4096, 4096, "f16", top=3
    )


def test_configs_without_triton_is_one_import_error_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton raises ImportError
    with pytest.raises(ImportError) as e:
        st.configs(4096, 4096, 4096, "bf16")
    assert str(e.value) == st.TRITON_MISSING and "pip install 'smemtile[triton]'" in str(e.value)


def test_configs_builds_triton_config_objects(monkeypatch):
    class Config:
        def __init__(self, kwargs, num_warps=4, num_stages=3):
            self.kwargs, self.num_warps, self.num_stages = kwargs, num_warps, num_stages

    monkeypatch.setitem(sys.modules, "triton", types.SimpleNamespace(Config=Config))
    out = st.configs(4096, 4096, 4096, "bf16", top=4)
    want = st.configs_as_dicts(4096, 4096, 4096, "bf16", top=4)
    assert [(c.kwargs["BLOCK_SIZE_M"], c.kwargs["BLOCK_SIZE_K"], c.num_warps, c.num_stages) for c in out] == [
        (d["BLOCK_SIZE_M"], d["BLOCK_SIZE_K"], d["num_warps"], d["num_stages"]) for d in want
    ]
    assert st.prune(out, args(4096, 4096, 4096)) == out  # Config objects rank like their dicts


@pytest.mark.gpu
def test_prune_inside_triton_autotune():
    torch = pytest.importorskip("torch")
    triton = pytest.importorskip("triton")
    from bench import bench_triton_prune as b

    space = [
        triton.Config(
            {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 8},
            num_warps=w,
            num_stages=s,
        )
        for bm, bn, bk, w, s in b.search_space()
    ]
    tuned = triton.autotune(
        configs=space, key=["M", "N", "K"], prune_configs_by={"early_config_prune": st.pruner(k=2)}
    )(b.matmul_kernel)
    m, n, k = 512, 384, 200
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

    def grid(meta):
        return (triton.cdiv(m, meta["BLOCK_SIZE_M"]) * triton.cdiv(n, meta["BLOCK_SIZE_N"]),)

    tuned[grid](
        a, w, c, m, n, k, a.stride(0), a.stride(1), w.stride(0), w.stride(1), c.stride(0), c.stride(1)
    )
    ref = a.float() @ w.float()
    assert float((c.float() - ref).abs().max()) / float(ref.abs().max()) < 2e-2
    assert len(tuned.cache) == 1
