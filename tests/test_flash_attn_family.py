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
from smemtile.model.bf16 import bf16_bits as _bf16_bits
from smemtile.model.bf16 import to_float64

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
        "path 1": ({}, {"PATH": 1}, "PATH 1 (wgmma, TMA, setmaxnreg) needs sm_90a"),
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
    # no --dtype: the family's default (bf16), not the SIMT GEMM's f32
    r = run_cli("tiles", "--family", "flash_attn", *ISSUE[:8], "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["problem"]["dtype"] == "bf16"
    r = run_cli("tiles", "--family", "flash_attn", *ISSUE[:8], "--dtype", "f32")
    assert r.returncode == 2 and "flash_attn moves f16, bf16, not 'f32'" in r.stderr, r.stderr


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


# ---- the kernel's numbers on the CPU: the PTX emulator with the data of the tensor-core instructions ---------------
# smemtile's emulator (inspect --simulate) evaluates addresses, integer and float arithmetic, cp.async's copies into
# shared memory and shuffles; ldmatrix's registers, mma.sync and the 16-bit pair conversions it leaves as poison,
# and it drops global stores. _tensor_data adds them as the PTX ISA defines them (lane l = 4g + t: ldmatrix gives
# lane l row g, columns 2t, 2t+1 of matrix m in register m, .trans the transpose; m16n8k16's A registers a0..a3 hold
# (row g | g+8, k 2t.. | 8+2t..) in that order, B's b0, b1 (k 2t.. | 8+2t.., column g), C's c0..c3 (row g | g+8,
# column 2t, 2t+1)) and records the global stores. The same extension runs the hgemm kernel, measured correct on
# the H200, to numpy's product: a check of the extension against the hardware, by way of that kernel.


def _tensor_data(monkeypatch, dtype: str) -> dict:
    import smemtile.model.ptx_ops as po
    from smemtile.model.ptx_emu import Poison

    _bfi_fixed(monkeypatch)
    stores: dict[int, int] = {}
    orig = po.execute
    lanes = np.arange(32)
    g, t = lanes // 4, lanes % 4

    def half(h):  # 16-bit patterns -> values
        h = np.asarray(h, np.int64) & 0xFFFF
        if dtype == "bf16":
            return to_float64(h.astype(np.uint16), "bf16")
        return h.astype(np.uint16).view(np.float16).astype(np.float64)

    def pack(x):  # fp32 values -> 16-bit patterns, round to nearest even
        x = np.asarray(x, np.float32)
        bits = _bf16_bits(x) if dtype == "bf16" else x.astype(np.float16).view(np.uint16)
        return bits.astype(np.int64)

    def u32(v):
        v = np.asarray(v)
        if v.dtype.kind == "f":
            return v.astype(np.float32).view(np.uint32).astype(np.int64)
        return v.astype(np.int64) & 0xFFFFFFFF

    def f32(v):
        v = np.asarray(v)
        return (
            v.astype(np.float64) if v.dtype.kind == "f" else u32(v).astype(np.uint32).view(np.float32) * 1.0
        )

    def regs(w, op, st):
        out = [w.read(d, st) for d in po._dsts(op)]
        assert not any(isinstance(x, Poison) for x in out), st.text
        return [np.asarray(x) for x in out]

    c_at = [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]

    def execute(emu, w, st, mask, sink):
        parts = po._parts(st.opcode)
        ops = st.operands
        if parts[0] == "mma":
            a, b, c = (regs(w, op, st) for op in ops[1:])
            am, bm, cm = np.zeros((16, 16)), np.zeros((16, 8)), np.zeros((16, 8))
            for r, (row, col) in enumerate([(g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8)]):
                am[row, col], am[row, col + 1] = half(u32(a[r])), half(u32(a[r]) >> 16)
            for r, k0 in enumerate([2 * t, 2 * t + 8]):
                bm[k0, g], bm[k0 + 1, g] = half(u32(b[r])), half(u32(b[r]) >> 16)
            for r, (row, col) in enumerate(c_at):
                cm[row, col] = f32(c[r])
            d = (am @ bm + cm).astype(np.float32).astype(np.float64)
            for r, dst in enumerate(po._dsts(ops[0])):
                w.write(dst, d[c_at[r]], mask)
            return None
        if parts[0] == "cvt" and ("bf16x2" in parts or "f16x2" in parts):  # d = {hi: a, lo: b}
            hi, lo = f32(w.read(ops[1], st)), f32(w.read(ops[2], st))
            return w.write(ops[0], (pack(hi) << 16) | pack(lo), mask)
        if parts[0] == "ldmatrix":
            orig(emu, w, st, mask, sink)  # the addresses, recorded as before
            off, on = po._shared_offsets(emu, st, po._addr(w, ops[1], st), mask, "shared", 16)
            # words[k, l]: 4-byte word k of the row lane l addresses
            words = np.array([po._smem_read(w, off + 4 * k, on, 4) for k in range(4)])

            def h16(m, r, c):  # element (r, c) of matrix m, per lane (r, c: lane arrays)
                return (words[c // 2, 8 * m + r] >> (16 * (c % 2))) & 0xFFFF

            for m, dst in enumerate(po._dsts(ops[0])):
                v = (
                    h16(m, 2 * t, g) | (h16(m, 2 * t + 1, g) << 16)
                    if "trans" in parts
                    else words[t, 8 * m + g]
                )
                w.write(dst, v, mask)
            return None
        if parts[0] == "st" and "global" in parts:
            at = [i for i, o in enumerate(ops) if o.startswith("[")][0]
            a = po._addr(w, ops[at], st)
            size = max(po._bits(po._typ(st.opcode)) // 8, 1)
            for k, src in enumerate(po._dsts(ops[at + 1])):
                v = np.asarray(w.read(src, st))
                bits = u32(v) if v.dtype.kind == "f" else v.astype(np.int64)
                for lane in np.flatnonzero(mask):
                    for byte in range(size):
                        stores[int(a[lane]) + k * size + byte] = int(bits[lane] >> (8 * byte)) & 0xFF
            return None
        return orig(emu, w, st, mask, sink)

    monkeypatch.setattr(po, "execute", execute)
    return stores


def _emulate(fam, cfg, inputs: dict, outputs: dict, tmp_path, monkeypatch) -> dict:
    """Every block of ``cfg``'s launch emulated on the CPU; ``outputs``: array name -> (numpy dtype, elements).
    Returns each output as the kernel left it (0xFF where it stored nothing)."""
    from smemtile.codegen.render import render
    from smemtile.model.ptx_emu import GLOBAL_BASE, GLOBAL_STRIDE
    from smemtile.pipeline.inspect import Sample, inspect

    stores = _tensor_data(monkeypatch, cfg.problem["dtype"])
    q = fam.problem_ints(cfg.problem)
    names = [d.rsplit(" ", 1)[1] for d in fam.signature]
    args = []
    for name in names:
        if name in inputs:
            args.append(np.ascontiguousarray(inputs[name]).view(np.uint16).ravel())
        elif name in outputs:
            args.append(np.zeros(outputs[name][1], outputs[name][0]))
        else:
            args.append(float(cfg.problem[name]) if name in ("scale", "alpha", "beta") else int(q[name]))
    (tmp_path / "k.cu").write_text(render(cfg).source)
    plan = fam.launch(cfg)
    res = inspect(
        tmp_path / "k.cu",
        kernel=fam.kernel,
        grid=plan.grid,
        block=plan.block,
        smem=plan.dynamic_smem_bytes,
        args=args,
        arch="sm_90",
        mode="simulate",
        sample=Sample(
            blocks=plan.grid[0] * plan.grid[1] * plan.grid[2], warps=plan.block[0] // 32, executions=1
        ),
        max_steps=10**8,
    )
    assert not res.meta.get("notes"), res.meta["notes"]
    out = {}
    for name, (dt, n) in outputs.items():
        base = GLOBAL_BASE + names.index(name) * GLOBAL_STRIDE
        raw = np.full(n * np.dtype(dt).itemsize, 0xFF, np.uint8)
        for a, v in stores.items():
            if base <= a < base + raw.size:
                raw[a - base] = v
        out[name] = raw.view(dt)
    assert sum(a.nbytes for a in out.values()) >= len(stores)  # no store outside the outputs
    return out


def test_the_emulated_tensor_core_data_reproduce_hgemm(tmp_path, monkeypatch):
    """hgemm (row-major B: ldmatrix.trans; bf16 C: cvt.rn.bf16x2) emulated with _tensor_data: numpy's product."""
    fam = FAMILIES["hgemm"]
    prob = {"M": 64, "N": 64, "K": 64, "dtype": "bf16", "c_dtype": "bf16", "beta": 0.0}
    cfg = configure(fam, {"BM": 64, "BN": 64, "BK": 32, "WM": 32, "WN": 32, "STAGES": 2, **prob}, {}, "sm_90")
    x = fam.make_inputs(cfg, np.random.default_rng(1))
    got = _emulate(fam, cfg, {"A": x["A"], "B": x["B"]}, {"C": (np.uint16, 64 * 64)}, tmp_path, monkeypatch)
    ref = fam.reference(cfg, x)
    err = np.abs(to_float64(got["C"], "bf16").reshape(ref.shape) - ref).max() / np.abs(ref).max()
    assert err < fam.tolerance_for(cfg), err


@pytest.mark.parametrize(
    "problem, params",
    [
        ({"batch": 1, "heads": 1, "seq_q": 50, "seq_kv": 100, "head_dim": 64, "causal": 1}, {"BN": 32}),
        (
            {"batch": 1, "heads": 1, "seq_q": 40, "seq_kv": 77, "head_dim": 128, "dtype": "f16"},
            {"BN": 32, "STAGES": 3},
        ),
    ],
)
def test_the_emulated_kernel_computes_o_and_lse(problem, params, tmp_path, monkeypatch):
    """The compiled flash_attn, every warp of every block emulated with _tensor_data: o within the tolerance (as
    the numpy schedule), every element stored, lse within LSE_TOLERANCE; a causal diagonal with the seq_kv tail,
    and a 3-stage ring that wraps (3 KV tiles) at head_dim 128."""
    from smemtile.families.flash_attn import LSE_TOLERANCE

    cfg = _cfg(problem, params)
    q = FAM.problem_ints(cfg.problem)
    x = FAM.make_inputs(cfg, np.random.default_rng(5))
    n = q["batch"] * q["seq_q"] * q["heads"] * q["head_dim"]
    outs = {"o": (np.uint16, n), "lse": (np.float32, q["batch"] * q["heads"] * q["seq_q"])}
    got = _emulate(FAM, cfg, x, outs, tmp_path, monkeypatch)
    ref = FAM.reference(cfg, x)
    o = got["o"].view(np.float16) if cfg.problem["dtype"] == "f16" else got["o"]
    o = FAM.decode_output(cfg, o.reshape(ref.shape)).astype(np.float64)
    assert np.isfinite(o).all()  # every element written (unwritten bytes are 0xFF: NaN)
    err = np.abs(o - ref).max() / np.abs(ref).max()
    assert err < FAM.tolerance_for(cfg) / 2, err
    lse = got["lse"].reshape(q["batch"] * q["heads"], q["seq_q"]).astype(np.float64)
    assert np.abs(lse - FAM.reference_lse(cfg, x)).max() < LSE_TOLERANCE


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


def test_tiles_ranks_path_1_on_sm_90a_and_the_spec_generates_a_file_nvcc_builds():
    t = run_cli(
        "tiles", "--family", "flash_attn", *ISSUE, "--arch", "sm_90a", "--top", "1", "--format", "yaml"
    )
    assert t.returncode == 0, t.stderr
    assert "PATH: 1" in t.stdout and "seq_q: 8192" in t.stdout
    g = run_cli("generate", "-", "--json", input=t.stdout)
    assert g.returncode == 0, g.stderr
    doc = json.loads(g.stdout)
    assert doc["kernel"] == "flash_attn" and doc["grid"] == [64 * 4 * 32, 1, 1]  # PATH 1: one CTA per item
    j = run_cli("tiles", "--family", "flash_attn", *ISSUE, "--arch", "sm_90a", "--format", "json")
    cal = json.loads(j.stdout)["calibration"]
    assert cal["calibrated"] is True and cal["gpu"] == "NVIDIA H200" and "fitted" in cal["model"]
    # sm_80 (no PATH 1, no calibration of PATH 0): stated as uncalibrated
    j = run_cli("tiles", "--family", "flash_attn", *ISSUE, "--arch", "sm_80", "--format", "json")
    cal = json.loads(j.stdout)["calibration"]
    assert cal["calibrated"] is False and "not calibrated" in cal["model"] and "no held-out" in cal["model"]
    if nvcc_path() is None:
        pytest.skip("nvcc not installed")
    from smemtile.codegen.render import render
    from smemtile.pipeline.fixes import variants
    from smemtile.pipeline.specs import resolve

    cfg = variants(resolve(yaml.safe_load(t.stdout)))["fixed"]
    src = render(cfg).source
    r = nvcc(src, ["-arch=sm_90a", "-std=c++17", "-Xcicc", "--sharedmem32=0", "-c"])
    assert r.returncode == 0, r.stderr[-2000:]
    # the issue's check on the artefact: nvcc's own PTX of the generated file holds the wgmma and the TMA loads
    p = nvcc(src, ["-arch=sm_90a", "-std=c++17", "-ptx"], output=True)
    assert p.returncode == 0 and p.output, p.stderr[-2000:]
    assert "wgmma.mma_async.sync.aligned.m64n128k16" in p.output
    assert "cp.async.bulk.tensor.4d.shared::cluster.global" in p.output and "setmaxnreg.inc" in p.output


def test_path0_constants_refit_from_the_h200_rows_and_rank_the_measured_best_first():
    from smemtile.families.flash_attn import fit
    from smemtile.families.flash_attn import tiles as T

    got = fit.fit_path0()
    assert got["rows"] == 20 and got["TILE_SYNC_KEYS"] == T.TILE_SYNC_KEYS
    assert abs(got["MMA_SYNC_EFF"] - T.MMA_SYNC_EFF) < 0.005 and got["rms_log_error"] < 0.05
    # on each measured shape the model's #1 is the configuration measured fastest (128x128, 2 stages, 8 warps)
    rows = fit.path0_rows()
    for prob in {json.dumps(p, sort_keys=True) for p, _, _ in rows}:
        p = json.loads(prob)
        best = min((t, key) for q, key, t in rows if q == p)[1]
        ranker = FAM.ranker(p, "sm_90", None)
        top = ranker.top(1)[0]
        assert (top["BM"], top["BN"], top["STAGES"], top["WARPS"]) == best == (128, 128, 2, 8), (p, top)


def test_the_python_api_takes_the_problem_keys_by_their_python_names():
    from smemtile import api
    from smemtile.errors import SpecError

    # the CLI's --head-dim / --seq / --seq-kv as head_dim, seq (or seq_q), seq_kv; the dtype defaults to bf16
    r = api.tiles(family="flash_attn", batch=4, heads=32, seq=8192, head_dim=128, arch="sm_90a", top=1)
    d = r.to_dict()
    assert d["problem"] == {"dtype": "bf16", "batch": 4, "heads": 32, "seq_q": 8192, "head_dim": 128}
    assert d["calibration"]["calibrated"] is True
    d = api.tiles(family="flash_attn", batch=1, heads=2, seq_q=100, seq_kv=300, head_dim=64, causal=1, top=1)
    assert d.to_dict()["problem"]["seq_kv"] == 300 and d.to_dict()["problem"]["causal"] == 1
    with pytest.raises(SpecError, match="head_size"):
        api.tiles(family="flash_attn", batch=1, heads=2, seq=64, head_size=64)


def test_the_tiles_table_shows_tflops_for_attention_and_no_copy_ratio():
    r = run_cli("tiles", "--family", "flash_attn", *ISSUE, "--arch", "sm_90a", "--top", "2")
    assert r.returncode == 0, r.stderr
    head = next(ln for ln in r.stdout.splitlines() if ln.split()[:2] == ["#", "configuration"])
    assert "TFLOP/s" in head and "GB/s" not in head and "x copy" not in head, head
