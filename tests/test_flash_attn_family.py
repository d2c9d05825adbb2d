"""The flash_attn family without a GPU: its float64 reference against a naive softmax, a numpy model of the kernel's
schedule (row blocks, KV tiles, the causal stop, masks, exp2 online softmax, 16-bit P) against the reference within
the stated tolerance, the work count, the launch plan and its refusals (one line, exit 2 through the CLI), the bank
analysis (conflict-free under the family's swizzle, 8-way dense), the compiled kernel's shared addresses (PTX emulated
on the CPU) against the family's expressions, NVRTC builds without spills, the tiles -> generate pipeline and nvcc.
The GPU half is tests/test_flash_attn_gpu.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from conftest import nvcc, nvcc_path, run_cli

from smemtile.families import FAMILIES, configure
from smemtile.families.base import ContractViolation, refusal
from smemtile.families.flash_attn import attention, default_scale, visible_pairs
from smemtile.families.hgemm import _bf16_bits, to_float64

FAM = FAMILIES["flash_attn"]
ISSUE = "--batch 4 --heads 32 --seq 8192 --head-dim 128 --dtype bf16".split()


def _cfg(problem: dict, params: dict | None = None, arch: str = "sm_90"):
    return configure(FAM, {**(params or {}), **problem}, {}, arch)


def _naive(q, k, v, causal, scale):
    """o and lse one query row at a time, by the definition (tiny sizes only)."""
    b, sq, h, d = q.shape
    o, lse = np.zeros_like(q), np.zeros((b, h, sq))
    for bi in range(b):
        for hi in range(h):
            for i in range(sq):
                keys = range(min(i + 1, k.shape[1])) if causal else range(k.shape[1])
                s = np.array([scale * float(q[bi, i, hi] @ k[bi, j, hi]) for j in keys])
                w = np.exp(s) / np.exp(s).sum()
                o[bi, i, hi] = sum(wj * v[bi, j, hi] for wj, j in zip(w, keys, strict=True))
                lse[bi, hi, i] = np.log(np.exp(s).sum())
    return o, lse


@pytest.mark.parametrize("sq, skv, causal", [(5, 7, 0), (7, 5, 1), (6, 6, 1), (1, 3, 0)])
def test_reference_is_the_softmax_by_definition(sq, skv, causal):
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((2, n, 3, 8)) for n in (sq, skv, skv))
    o, lse = attention(q, k, v, causal, 0.3)
    o2, lse2 = _naive(q, k, v, causal, 0.3)
    assert np.allclose(o, o2, atol=1e-12) and np.allclose(lse, lse2, atol=1e-12)


def test_reference_reads_only_the_heads_of_padded_token_rows():
    """q_ss > heads*head_dim: the columns past the heads (k and v of a packed QKV row) do not change o."""
    p = {"batch": 1, "heads": 2, "seq_q": 9, "head_dim": 64, "dtype": "f16"}
    dense, padded = _cfg(p), _cfg({**p, "q_ss": 384, "k_ss": 136})
    x = FAM.make_inputs(padded, np.random.default_rng(0))
    assert x["q"].shape == (9, 384) and x["k"].shape == (9, 136)
    trimmed = {n: a[:, :128] for n, a in x.items()}
    assert np.array_equal(FAM.reference(padded, x), FAM.reference(dense, trimmed))


def test_work_counts_the_visible_pairs():
    assert visible_pairs(4, 4, 0) == 16
    assert visible_pairs(4, 4, 1) == 10  # 1 + 2 + 3 + 4
    assert visible_pairs(6, 3, 1) == 1 + 2 + 3 + 3 * 3  # rows past seq_kv see every key
    assert visible_pairs(3, 6, 1) == 6  # top-left: row i sees keys 0..i only
    unit, flops = FAM.work({"batch": 2, "heads": 3, "seq_q": 6, "seq_kv": 3, "head_dim": 64, "causal": 1})
    assert unit == "tflops" and flops == 4 * 2 * 3 * 64 * 15


def _round(x: np.ndarray, dt: str) -> np.ndarray:
    x = x.astype(np.float32)
    return to_float64(_bf16_bits(x), "bf16") if dt == "bf16" else x.astype(np.float16).astype(np.float64)


def _schedule(cfg, inputs) -> np.ndarray:
    """flash_attn.cu's schedule in numpy: row blocks of BM, KV tiles of BN up to the causal stop (min(seq_kv, q0 +
    BM)), masked tails and diagonal, S and O in fp32, the exp2 online softmax with scale*log2(e), P rounded to the
    input type before P V, o = O / l rounded on the store."""
    qt, kt, vt, q = FAM._tensors(cfg, inputs)
    dt, bm, bn = cfg.problem["dtype"], cfg.params["BM"], cfg.params["BN"]
    sq, skv, causal = q["seq_q"], q["seq_kv"], q["causal"]
    sl2 = np.float32(default_scale(q["head_dim"], cfg.problem["scale"]) * 1.4426950408889634)
    out = np.zeros_like(qt)
    for b in range(q["batch"]):
        for h in range(q["heads"]):
            for q0 in range(0, sq, bm):
                rows = np.arange(q0, q0 + bm)
                qb = np.zeros((bm, q["head_dim"]), np.float32)
                qb[: min(bm, sq - q0)] = qt[b, q0 : q0 + bm, h]
                m = np.full(bm, -np.inf, np.float32)
                l_ = np.zeros(bm, np.float32)
                acc = np.zeros((bm, q["head_dim"]), np.float32)
                kv_end = min(skv, q0 + bm) if causal else skv
                for kv0 in range(0, kv_end, bn):
                    kb = np.zeros((bn, q["head_dim"]), np.float32)
                    vb = np.zeros((bn, q["head_dim"]), np.float32)
                    kb[: min(bn, skv - kv0)] = kt[b, kv0 : kv0 + bn, h]
                    vb[: min(bn, skv - kv0)] = vt[b, kv0 : kv0 + bn, h]
                    t = (qb @ kb.T) * sl2
                    cols = np.arange(kv0, kv0 + bn)
                    t[:, cols >= skv] = -np.inf
                    if causal:
                        t[cols[None, :] > rows[:, None]] = -np.inf
                    mx = np.maximum(m, t.max(axis=1))
                    use = np.where(mx == -np.inf, 0, mx)
                    corr = np.exp2(m - use)
                    p = np.exp2(t - use[:, None])
                    l_ = l_ * corr + p.sum(axis=1)
                    m = mx
                    acc = acc * corr[:, None] + _round(p, dt).astype(np.float32) @ vb
                keep = slice(0, min(bm, sq - q0))
                out[b, q0 : q0 + bm, h] = _round(acc / l_[:, None], dt)[keep]
    return out.reshape(q["batch"] * sq, q["heads"] * q["head_dim"])


@pytest.mark.parametrize("i", range(6))
def test_the_kernels_schedule_is_the_reference_within_the_tolerance(i):
    """Every test size, with its blocks and tiles as the defaults cut them (and 32-key tiles, 128-row blocks for
    two): the schedule's error is under half the stated tolerance, the 16-bit P dominating it."""
    params = [{}, {"BN": 32}, {}, {"BM": 128}, {"BN": 128}, {}][i]
    cfg = _cfg(FAM.test_sizes[i], params)
    x = FAM.make_inputs(cfg, np.random.default_rng(i))
    ref = FAM.reference(cfg, x)
    err = np.abs(_schedule(cfg, x) - ref).max() / np.abs(ref).max()
    assert err < FAM.tolerance_for(cfg) / 2, (i, err)


def test_launch_plan_and_its_refusals():
    cfg = _cfg({"batch": 2, "heads": 3, "seq_q": 129, "seq_kv": 40, "head_dim": 64, "causal": 1})
    plan = FAM.launch(cfg)
    assert plan.grid == (3, 6, 1) and plan.block == (128, 1, 1)
    assert plan.dynamic_smem_bytes == (64 * 64 + 2 * 2 * 64 * 64) * 2 and plan.static_smem_bytes == 0
    assert FAM.name_expression(cfg).startswith(
        "flash_attn<smemtile::bf16, 64, 64, 64, 2, 4, 1, 0, 0, 3, 3, 3,"
    )
    # BM and WARPS go together; the user's one decides
    assert _cfg({"head_dim": 64}, {"BM": 128}).params["WARPS"] == 8
    assert _cfg({"head_dim": 64}, {"WARPS": 8}).params["BM"] == 128
    refused = {
        "head_dim": ({"head_dim": 96}, {}, "head_dim 96 is not supported"),
        "path 1": ({}, {"PATH": 1}, "PATH 1 (the sm_90a wgmma/TMA kernel) is reserved"),
        "warps": ({}, {"BM": 128, "WARPS": 4}, "BM = 128 must be 16 * WARPS"),
        "token rows": ({"heads": 2, "head_dim": 64, "q_ss": 64}, {}, "q_ss = 64 is below heads * head_dim"),
        "sm_75": ({}, {}, "needs sm_80 or newer"),
    }
    for what, (prob, par, msg) in refused.items():
        with pytest.raises(ContractViolation, match="^flash_attn: ") as e:
            _cfg({"batch": 1, "heads": 2, "seq_q": 64, **prob}, par, "sm_75" if what == "sm_75" else "sm_90")
        assert msg in str(e.value) and "\n" not in str(e.value), (what, str(e.value))
    # the helper's preconditions: 16-byte aligned arrays, strides that are multiples of 8 elements
    assert "16-byte aligned" in refusal(FAM, cfg, {"k": 4})
    assert refusal(FAM, cfg, {"q": 8}) is None  # 8 bf16 elements = 16 bytes in
    with pytest.raises(ContractViolation, match="every stride a multiple of 8 elements"):
        _cfg({**cfg.problem, "v_ss": 196})


def test_refusals_through_the_cli_are_one_line_exit_2():
    for doc, msg in (
        ("kernel: {family: flash_attn, head_dim: 96}", "head_dim 96 is not supported"),
        ("tile: {PATH: 1}\nkernel: {family: flash_attn}", "PATH 1"),
    ):
        r = run_cli("generate", "-", input=f"arch: sm_90\n{doc}\n")
        assert r.returncode == 2 and msg in r.stderr, (r.returncode, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    r = run_cli("tiles", "--family", "flash_attn", *ISSUE[:6], "--head-dim", "96")
    assert r.returncode == 2 and "96" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_the_tiles_are_conflict_free_under_the_swizzle_and_8_way_dense():
    from smemtile.model.analysis import analyze_spec
    from smemtile.model.layout import Layout

    for hd in (64, 128):
        cfg = _cfg({"head_dim": hd, "causal": 1})
        res = {r.access.name: r.bank for r in analyze_spec(FAM.spec(cfg))}
        assert set(res) == {"Q_copy", "K_copy", "V_copy", "Q_frag", "K_frag", "V_frag"}
        assert all((b.wavefronts == b.ideal_wavefronts).all() for b in res.values()), hd
        dense = configure(FAM, {"head_dim": hd}, {b: Layout() for b in ("Qs", "Ks", "Vs")}, "sm_90")
        res = {r.access.name: r.bank for r in analyze_spec(FAM.spec(dense))}
        for name in ("Q_frag", "K_frag", "V_frag"):
            assert (res[name].wavefronts / res[name].ideal_wavefronts).max() == 8, (hd, name)


def test_the_sample_analyzes_conflict_free():
    r = run_cli("analyze", "samples/flash_attn_hd128.yaml", "--json")
    assert r.returncode == 0, r.stderr
    acc = json.loads(r.stdout)["accesses"]
    assert len(acc) == 6 and all(a["wavefronts"] == a["ideal_wavefronts"] for a in acc), acc


def _bfi_fixed(monkeypatch):
    """The PTX emulator reads bfi's position and length from operands 3 and 4 (smemtile/model/ptx_ops.py); PTX's
    ``bfi.b32 d, a, b, c, d`` has them in operands 2 and 3 (c, d; a inserted into b). This kernel's index math
    compiles to bfi: the test evaluates it with the operands the ISA names until the emulator does."""
    import smemtile.model.ptx_ops as po

    orig = po._int_op

    def fixed(head, parts, t, x, st):
        if head != "bfi":
            return orig(head, parts, t, x, st)
        bits = 64 if t.endswith("64") else 32
        pos, ln = np.minimum(x[2] & 0xFF, 63), np.minimum(x[3] & 0xFF, 63)
        m = ((np.int64(1) << ln) - 1) << pos
        return (po._as_int(x[1], bits, False) & ~m) | ((po._as_int(x[0], bits, False) << pos) & m)

    monkeypatch.setattr(po, "_int_op", fixed)


def test_the_compiled_kernels_shared_addresses_are_the_familys_expressions(tmp_path, monkeypatch):
    """The generated kernel, compiled by NVRTC and its PTX emulated on the CPU (``smemtile inspect --simulate``):
    every cp.async and ldmatrix a sampled warp executes writes or reads exactly the lane addresses the family's
    spec expressions give (in any of the STAGES slots), each of the first tile's is executed, and none has
    excessive wavefronts: `analyze` describes this kernel."""
    from smemtile.codegen.render import render
    from smemtile.model.analysis import analyze_spec
    from smemtile.pipeline.inspect import Sample, inspect

    _bfi_fixed(monkeypatch)
    cfg = _cfg({"batch": 1, "heads": 1, "seq_q": 64, "seq_kv": 200, "head_dim": 64, "causal": 0})
    (tmp_path / "k.cu").write_text(render(cfg).source)
    q = FAM.problem_ints(cfg.problem)
    sizes = {"q": 64 * 64, "k": 200 * 64, "v": 200 * 64, "o": 64 * 64, "lse": 64}
    args = []
    for decl in FAM.signature:
        name = decl.rsplit(" ", 1)[1]
        if name in sizes:
            dt = "f32" if name == "lse" else "bf16"
            args.append({"name": name, "dtype": dt, "count": sizes[name], "fill": "random"})
        elif name == "scale":
            args.append({"name": name, "value": 0.0})
        else:
            args.append({"name": name, "value": q[name]})
    plan = FAM.launch(cfg)
    res = inspect(
        tmp_path / "k.cu",
        kernel="flash_attn",
        grid=plan.grid,
        block=plan.block,
        smem=plan.dynamic_smem_bytes,
        args={"args": args},
        arch="sm_90",
        mode="simulate",
        sample=Sample(blocks=1, warps=4, executions=64),
    )
    p = cfg.params
    q_bytes, k_bytes = p["BM"] * 64 * 2, p["BN"] * 64 * 2
    base = {"Qs": 0, "Ks": q_bytes, "Vs": q_bytes + k_bytes}
    want: dict[str, set] = {"cp.async": set(), "ldmatrix": set()}
    first: dict[str, set] = {"cp.async": set(), "ldmatrix": set()}
    for r in analyze_spec(FAM.spec(cfg)):
        op = "ldmatrix" if r.access.op == "ldmatrix" else "cp.async"
        stages = 1 if r.access.buffer == "Qs" else p["STAGES"]
        for w, addrs in zip(r.warp, r.bank.addresses, strict=True):
            for s in range(stages):
                want[op].add((int(w), tuple(int(a) + base[r.access.buffer] + s * 2 * k_bytes for a in addrs)))
            first[op].add((int(w), tuple(int(a) + base[r.access.buffer] for a in addrs)))
    got: dict[str, set] = {"cp.async": set(), "ldmatrix": set()}
    for rep in res.reports:
        op = "ldmatrix" if rep.instr.op.startswith("ldmatrix") else rep.instr.op
        assert op in got, rep.instr.op  # the kernel's only shared-memory instructions
        for rec in rep.recorded:
            assert rec.active == 0xFFFFFFFF
            got[op].add((rec.warp, tuple(int(a) for a in rec.addresses)))
    for op in got:
        assert got[op] and got[op] <= want[op], (op, sorted(got[op] - want[op])[:2])
        assert first[op] <= got[op], (op, sorted(first[op] - got[op])[:2])
    assert all(r.excessive == 0 for r in res.reports), [(r.instr.line, r.excessive) for r in res.reports]


@pytest.mark.parametrize(
    "problem, params, arch",
    [
        ({"head_dim": 64}, {}, "sm_80"),
        ({"head_dim": 128, "causal": 1}, {}, "sm_90"),
        ({"head_dim": 128, "causal": 1, "dtype": "f16"}, {"BM": 128, "BN": 128, "STAGES": 3}, "sm_90"),
    ],
)
def test_nvrtc_builds_without_spills(problem, params, arch):
    from smemtile.pipeline.build import compile_config

    cfg = _cfg(problem, params, arch)
    r = compile_config(cfg).resources[FAM.name_expression(cfg)]
    assert 0 < r.registers <= 255 and not r.spills, r


def test_tiles_ranks_path_0_on_sm_90a_and_the_spec_generates_a_file_nvcc_builds():
    t = run_cli(
        "tiles", "--family", "flash_attn", *ISSUE, "--arch", "sm_90a", "--top", "1", "--format", "yaml"
    )
    assert t.returncode == 0, t.stderr
    assert "PATH: 0" in t.stdout and "seq_q: 8192" in t.stdout
    g = run_cli("generate", "-", "--json", input=t.stdout)
    assert g.returncode == 0, g.stderr
    doc = json.loads(g.stdout)
    assert doc["kernel"] == "flash_attn" and doc["grid"][1] == 4 * 32
    j = run_cli("tiles", "--family", "flash_attn", *ISSUE, "--arch", "sm_90a", "--format", "json")
    cal = json.loads(j.stdout)["calibration"]
    assert cal["calibrated"] is False and "not yet calibrated" in cal["model"]
    if nvcc_path() is None:
        pytest.skip("nvcc not installed")
    from smemtile.codegen.render import render
    from smemtile.pipeline.fixes import variants
    from smemtile.pipeline.specs import resolve

    cfg = variants(resolve(yaml.safe_load(t.stdout)))["fixed"]
    src = render(cfg).source
    r = nvcc(src, ["-arch=sm_90", "-std=c++17", "-c"])
    assert r.returncode == 0, r.stderr[-2000:]
