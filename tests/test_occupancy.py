"""The occupancy model: differential tests against cuda_occupancy.h, invariants, what-if hints."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from occupancy_shim import ask, available, occ_line

from smemtile.errors import SpecError
from smemtile.model.arch import ARCHS, KB
from smemtile.model.occupancy import (
    LIMIT_BITS,
    STATIC_SMEM_MAX,
    UNLIMITED,
    limits_batch,
    occupancy,
    occupancy_batch,
)

needs_header = pytest.mark.skipif(not available(), reason="cuda_occupancy.h or g++ not available")
CONFIGS_PER_ARCH = 5000


def random_configs(arch, n: int, seed: int) -> dict[str, np.ndarray]:
    """Random configurations biased towards the edges where rounding decides the answer."""
    rng = np.random.default_rng(seed)
    threads = np.where(rng.random(n) < 0.5, rng.integers(1, 33, n) * 32, rng.integers(1, 1025, n))
    regs = np.where(
        rng.random(n) < 0.3,
        np.clip(rng.integers(0, 33, n) * 8 + rng.integers(-1, 2, n), 0, 255),
        rng.integers(0, 256, n),
    )
    static = np.where(rng.random(n) < 0.5, 0, rng.integers(0, STATIC_SMEM_MAX + 1, n))
    static = np.where(rng.random(n) < 0.05, STATIC_SMEM_MAX - rng.integers(0, 2, n), static)
    dynamic = rng.integers(0, arch.smem_optin_per_block + 4 * KB, n)
    # Near the edges: the per-block caps, and the sizes at which k blocks just fit the SM.
    k = rng.integers(1, 33, n)
    edges = np.stack(
        [
            np.full(n, arch.smem_optin_per_block) - static,
            np.full(n, arch.smem_default_per_block) - static,
            arch.smem_per_sm // k - arch.smem_reserved_per_block - static,
            rng.choice(arch.carveouts, n) // k - arch.smem_reserved_per_block - static,
        ]
    )[rng.integers(0, 4, n), np.arange(n)] + rng.integers(-arch.smem_alloc_unit, arch.smem_alloc_unit + 1, n)
    dynamic = np.where(rng.random(n) < 0.4, np.clip(edges, 0, None), dynamic)
    dynamic = np.where(rng.random(n) < 0.15, 0, dynamic)
    carveout = np.where(rng.random(n) < 0.4, -1, rng.integers(0, 101, n))
    opt_in = rng.random(n) < 0.7
    return dict(
        threads=threads, regs=regs, smem_static=static, smem_dynamic=dynamic, carveout=carveout, opt_in=opt_in
    )


@needs_header
@pytest.mark.parametrize("name", list(ARCHS))
def test_agrees_with_cuda_occupancy_h(name):
    """Every field the header returns, on thousands of random configurations per architecture."""
    arch = ARCHS[name]
    cfg = random_configs(arch, CONFIGS_PER_ARCH, seed=int(name[3:]))
    rows = zip(*(cfg[k].tolist() for k in cfg), strict=True)
    ref = np.array(ask([occ_line(arch, *row) for row in rows]))
    assert (ref[:, 0] == 0).all(), "the header rejected an input"
    lim = limits_batch(arch, **cfg)
    ours = np.stack(
        [
            lim["active_blocks"],
            lim["limiting_factors"],
            lim["registers"],
            lim["shared_memory"],
            lim["warps"],
            lim["blocks"],
            lim["barriers"],
            lim["regs_per_block"],
            lim["smem_per_block"],
        ],
        axis=1,
    )
    bad = np.flatnonzero((ours != ref[:, 1:]).any(axis=1))
    detail = [({k: cfg[k][i] for k in cfg}, ours[i].tolist(), ref[i, 1:].tolist()) for i in bad[:3]]
    assert len(bad) == 0, f"{len(bad)}/{CONFIGS_PER_ARCH} differ, e.g. {detail}"
    # The sample must exercise every limiter and the 0-block case, or agreement proves little.
    assert (lim["active_blocks"] == 0).any() and (lim["active_blocks"] >= 8).any()
    for bit in ("warps", "registers", "shared_memory", "blocks"):
        assert (lim["limiting_factors"] & LIMIT_BITS[bit]).any(), bit


def test_static_above_48k_cannot_run():
    r = occupancy(ARCHS["sm_90"], 128, 32, smem_static=STATIC_SMEM_MAX + 1)
    assert r.active_blocks == 0 and r.limiter == "shared_memory" and "dynamic" in r.reason


# --------------------------------------------------------------------------------------------------------------
# Worked examples (checked by hand against the formulas in the module docstring).


def test_sm90_256_threads_64_regs_48k():
    r = occupancy(ARCHS["sm_90"], 256, 64, 0, 48 * KB)
    # smem: 48K + 1K reserved = 50,176 B; 233,472 // 50,176 = 4. regs: 2048 per warp, 8 per sub-partition -> 32
    # warps -> 4 blocks of 8 warps. Both bind.
    assert (r.active_blocks, r.active_warps, r.occupancy) == (4, 32, 0.5)
    assert set(r.limiters) == {"shared_memory", "registers"}
    assert r.limits == {"shared_memory": 4, "registers": 4, "warps": 8, "blocks": 32, "barriers": 64}
    assert r.what_if["max_regs_per_thread"] == 64
    assert r.what_if["max_dynamic_smem"] == 233472 // 4 - 1024  # 57,344
    nxt = r.what_if["next_block"]
    assert nxt["blocks"] == 5 and nxt["possible"]
    assert nxt["needs"]["registers"]["max_regs_per_thread"] == 48
    assert nxt["needs"]["shared_memory"]["max_dynamic_smem"] == (233472 // 5) // 128 * 128 - 1024


def test_no_registers_and_no_smem_are_unlimited():
    r = occupancy(ARCHS["sm_70"], 32, 0)  # sm_70 reserves no shared memory per block
    assert r.limits["registers"] is None and r.limits["shared_memory"] is None
    assert r.active_blocks == 32 and r.limiter == "blocks"
    # From sm_80 the reserved 1 KB per block is shared memory too: 164 KB / 1 KB = 164 blocks.
    assert occupancy(ARCHS["sm_80"], 32, 0).limits["shared_memory"] == 164


def test_small_carveout_still_runs_one_block():
    # 0 % carveout but 40 KB per block: the driver picks the smallest carveout that holds one block (64 KB).
    r = occupancy(ARCHS["sm_90"], 128, 32, 0, 40 * KB, carveout=0)
    assert r.active_blocks == 1 and r.allocation["smem_per_sm"] == 64 * KB


def test_default_48k_without_opt_in():
    a = ARCHS["sm_86"]
    assert occupancy(a, 128, 32, 1024, 48 * KB - 1024, opt_in=False).active_blocks == 2
    r = occupancy(a, 128, 32, 1024, 48 * KB - 1023, opt_in=False)
    assert r.active_blocks == 0 and "cudaFuncAttributeMaxDynamicSharedMemorySize" in r.reason
    assert occupancy(a, 128, 32, 1024, 48 * KB - 1023, opt_in=True).active_blocks == 2  # 100 KB // 50,304 B


def test_too_many_registers_for_the_block():
    r = occupancy(ARCHS["sm_90"], 1024, 255)
    assert r.active_blocks == 0 and r.limiter == "registers" and "65,536" in r.reason
    assert r.what_if["next_block"]["needs"]["registers"]["max_regs_per_thread"] == 64


def test_blocks_limit_cannot_be_beaten():
    r = occupancy(ARCHS["sm_75"], 32, 16)
    assert r.active_blocks == 16 and r.limiter == "blocks"
    assert not r.what_if["next_block"]["possible"]


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(threads=0, regs=32),
        dict(threads=1025, regs=32),
        dict(threads=128, regs=256),
        dict(threads=128, regs=-1),
        dict(threads=128, regs=32, smem_dynamic=-5),
        dict(threads=128, regs=32, carveout=101),
    ],
)
def test_bad_input_raises(kwargs):
    with pytest.raises(SpecError):
        occupancy(ARCHS["sm_90"], **kwargs)


# --------------------------------------------------------------------------------------------------------------
# Invariants (hypothesis).

archs = st.sampled_from(list(ARCHS.values()))
threads_st = st.integers(1, 1024)
regs_st = st.integers(0, 255)
static_st = st.integers(0, STATIC_SMEM_MAX)
dyn_st = st.integers(0, 240 * KB)
carve_st = st.one_of(st.none(), st.integers(0, 100))


def blocks(arch, t, r, s, d, c=None, o=True) -> int:
    return int(limits_batch(arch, t, r, s, d, -1 if c is None else c, o)["active_blocks"][0])


@settings(max_examples=400, deadline=None)
@given(archs, threads_st, regs_st, st.integers(0, 255), static_st, dyn_st, st.integers(0, 64 * KB), carve_st)
def test_more_resources_never_raise_occupancy(arch, t, r, more_r, s, d, more_d, c):
    base = blocks(arch, t, r, s, d, c)
    assert blocks(arch, t, min(255, r + more_r), s, d, c) <= base
    assert blocks(arch, t, r, s, d + more_d, c) <= base
    assert blocks(arch, t, r, min(STATIC_SMEM_MAX, s + more_d), d, c) <= base
    assert blocks(arch, min(1024, t + more_r), r, s, d, c) <= base  # bigger blocks: never more of them
    assert blocks(arch, t, r, s, d, c, o=False) <= base  # without opt-in: never more
    if c is not None:
        assert blocks(arch, t, r, s, d, min(100, c + more_r)) >= base  # a bigger carveout never hurts


@settings(max_examples=150, deadline=None)
@given(archs, threads_st, regs_st, static_st, dyn_st, carve_st, st.booleans())
def test_what_if_hints_are_exact(arch, t, r, s, d, c, o):
    res = occupancy(arch, t, r, s, d, c, o)
    b = res.active_blocks
    assert 0 <= res.occupancy <= 1
    assert res.active_warps == b * -(-t // 32)
    if b == 0:
        assert res.reason
    else:
        mr = res.what_if["max_regs_per_thread"]
        assert mr >= r and blocks(arch, t, mr, s, d, c, o) == b
        if mr < 255:
            assert blocks(arch, t, mr + 1, s, d, c, o) < b
        md = res.what_if["max_dynamic_smem"]
        assert md >= d and blocks(arch, t, r, s, md, c, o) == b
        assert blocks(arch, t, r, s, md + 1, c, o) < b
    nxt = res.what_if["next_block"]
    if nxt["possible"]:
        needs = nxt["needs"]
        r2 = needs.get("registers", {}).get("max_regs_per_thread", r)
        d2 = needs.get("shared_memory", {}).get("max_dynamic_smem", d)
        t2 = needs.get("warps", {}).get("max_threads", t)
        assert blocks(arch, t2, min(r, r2), s, min(d, d2), c, o) >= b + 1


def test_batch_equals_scalar():
    rng = np.random.default_rng(7)
    names = list(ARCHS)
    per_row = [ARCHS[names[i]] for i in rng.integers(0, len(names), 300)]
    cfg = dict(
        threads=rng.integers(1, 1025, 300),
        regs=rng.integers(0, 256, 300),
        smem_static=rng.integers(0, 8 * KB, 300),
        smem_dynamic=rng.integers(0, 120 * KB, 300),
        carveout=np.where(rng.random(300) < 0.5, -1, rng.integers(0, 101, 300)),
        opt_in=rng.random(300) < 0.5,
    )
    batch = occupancy_batch(per_row, **cfg).to_dicts()
    for i, row in enumerate(batch):
        c = int(cfg["carveout"][i])
        one = occupancy(
            per_row[i],
            int(cfg["threads"][i]),
            int(cfg["regs"][i]),
            int(cfg["smem_static"][i]),
            int(cfg["smem_dynamic"][i]),
            None if c < 0 else c,
            bool(cfg["opt_in"][i]),
        ).to_dict()
        for key in ("arch", "active_blocks", "active_warps", "occupancy", "limiter", "limiters", "limits"):
            assert row[key] == one[key], (i, key)


def test_unlimited_sentinel_never_leaks_into_dicts():
    d = occupancy_batch(ARCHS["sm_90"], [64], [0]).to_dicts()[0]
    assert UNLIMITED not in d["limits"].values()
