"""flash_attn on the GPU (marked gpu; the lead runs it on the H200): every task-file test size through the generated
C++ helper (`smemtile generate`, nvcc, a user's main() calling launch_flash_attn()) against the float64 reference,
several tiles (32- and 128-key tiles, 128-row blocks, 1 and 3 stages), dense and the refused odd sub-view; through
the Python launcher (smemtile.gpu.run): o and lse against the reference, and the layouts the helper promises beyond
the token rows: a packed QKV tensor [b, s, 3, h, d], q as a head slice of a wider tensor, k and v as [b, h, s, d]
tensors, o with padded heads, one K / V head shared by all heads (stride 0); torch's SDPA math backend on the same
inputs when torch is installed; the issue's command line, tiles -> verify.

    SMEMTILE_FORCE_GPU_TESTS=1 python -m pytest -q -n 0 -p no:cacheprovider tests/test_flash_attn_gpu.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import nvcc_path, run_cli
from test_helper_gpu import run_helpers

from smemtile.families import FAMILIES
from smemtile.families.flash_attn import LSE_TOLERANCE, FlashAttn, attention, default_scale
from smemtile.model.bf16 import to_float64
from smemtile.pipeline.fixes import variants
from smemtile.pipeline.specs import resolve

FAM = FAMILIES["flash_attn"]
ISSUE = "--batch 4 --heads 32 --seq 8192 --head-dim 128 --dtype bf16".split()
# tiles besides the defaults (64 x 64, 2 stages, 4 warps): 32-key tiles, 128-row blocks with 128-key tiles in 3
# stages, no ring (1 stage), 128 x 64
TILES = [
    {"BN": 32},
    {"BM": 128, "BN": 128, "STAGES": 3},
    {"STAGES": 1},
    {"BM": 128, "BN": 64, "STAGES": 2},
]


def _cfg(tile: dict, problem: dict, arch: str | None = None):
    return variants(
        resolve(
            {"arch": arch or FAM.default_arch, "tile": tile, "kernel": {"family": "flash_attn", **problem}}
        )
    )["fixed"]


def _configs() -> list:
    sizes = list(FAM.test_sizes)
    out = [_cfg({"BM": 64}, p) for p in sizes]  # the defaults (a parameter given: no model pick)
    out += [_cfg({}, p) for p in sizes]  # the tile model's #1 for each
    for i, t in enumerate(TILES):  # each tile on two sizes
        out += [_cfg(t, sizes[i % len(sizes)]), _cfg(t, sizes[(i + 3) % len(sizes)])]
    return out


def _device():
    from smemtile.gpu.run import open_device

    return open_device(0)


@pytest.mark.gpu
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_every_test_size_through_the_generated_helper(tmp_path):
    failures, report = run_helpers(_configs(), tmp_path, layouts=True)
    out_dir = os.environ.get("SMEMTILE_TEST_REPORT")
    if out_dir:
        (Path(out_dir) / "flash_attn_gpu.json").write_text(json.dumps(report, indent=1, default=str))
    assert not failures, failures
    ran = [r for r in report if r.get("correct")]
    assert len(ran) >= 2 * len(FAM.test_sizes)
    assert any(r["refused_by_plan"] and r["refused"] for r in report)  # 1 element in: not 16-byte aligned


@pytest.mark.gpu
def test_o_and_lse_through_the_python_launcher():
    """Dense token rows (and the test sizes' padded rows): o within the family's tolerance, lse within
    LSE_TOLERANCE (natural log) of the float64 reference, every row."""
    from smemtile.gpu.run import LoadedKernel

    dev, bad = _device(), []
    for i, p in enumerate(FAM.test_sizes):
        for tile in ({"BM": 64}, TILES[i % len(TILES)]):
            cfg = _cfg(tile, p)
            k = LoadedKernel(cfg, dev)
            try:
                x = FAM.make_inputs(cfg, np.random.default_rng(i))
                res = k.check(x, FAM.reference(cfg, x))
                lse = k.output("lse").astype(np.float64)
            finally:
                k.close()
            err = float(np.abs(lse - FAM.reference_lse(cfg, x)).max())
            if not res.correct or not err <= LSE_TOLERANCE:
                bad.append((FAM.name_expression(cfg), p, res.max_rel_error, err))
    assert not bad, bad


class _Strided(FlashAttn):
    """The family with the kernel's twelve strides given (the layouts the generated helper takes that the
    problem's token rows do not describe); the launch plan evaluates them as the helper passes them."""

    def __init__(self, strides: dict[str, int]):
        self.strides = strides

    def problem_ints(self, problem: dict) -> dict[str, int]:
        return {**super().problem_ints(problem), **self.strides}


def _run_layout(dev, cfg, layout: dict, rng) -> tuple[float, float, bool]:
    """Run ``cfg`` with q, k, v, o laid out as ``layout`` says: array -> (allocation, offset, sb, ss, sh) in
    elements; arrays naming one allocation share it (a packed QKV tensor). Returns (o's max relative error, lse's
    max error, whether every element of o's allocation outside o is still poison)."""
    from smemtile.gpu.run import DeviceBuffer, LoadedKernel

    q = FAM.problem_ints(cfg.problem)
    b, h, d, dt = q["batch"], q["heads"], q["head_dim"], cfg.problem["dtype"]
    from smemtile.model.bf16 import bf16_bits as _bf16_bits

    bits = np.uint16
    logical = {
        "q": rng.standard_normal((b, q["seq_q"], h, d), dtype=np.float32),
        "k": rng.standard_normal((b, q["seq_kv"], h, d), dtype=np.float32),
        "v": rng.standard_normal((b, q["seq_kv"], h, d), dtype=np.float32),
    }
    raw = {
        n: (_bf16_bits(a) if dt == "bf16" else a.astype(np.float16).view(bits)) for n, a in logical.items()
    }
    sizes: dict[str, int] = {}
    for name, (alloc, off, sb, ss, sh) in layout.items():
        seq = q["seq_q"] if name in ("q", "o") else q["seq_kv"]
        last = off + (b - 1) * sb + (seq - 1) * ss + (h - 1) * sh + d
        sizes[alloc] = max(sizes.get(alloc, 0), last)
    flats = {a: np.full(n, 0xFFFF, dtype=bits) for a, n in sizes.items()}

    def view(name):
        alloc, off, sb, ss, sh = layout[name]
        seq = q["seq_q"] if name in ("q", "o") else q["seq_kv"]
        st = tuple(2 * s for s in (sb, ss, sh, 1))
        return np.lib.stride_tricks.as_strided(flats[alloc][off:], shape=(b, seq, h, d), strides=st)

    for name in ("q", "k", "v"):
        view(name)[...] = raw[name]  # a shared head (stride 0) writes the same values again
    bufs = {a: DeviceBuffer.from_array(f) for a, f in flats.items()}
    lse_buf = DeviceBuffer(4 * b * h * q["seq_q"])
    lse_buf.poison()
    strides = {
        f"{n}_{s}": layout[n][2 + i] for n in ("q", "k", "v", "o") for i, s in enumerate(("sb", "ss", "sh"))
    }
    k = LoadedKernel(cfg, dev)
    try:
        k.fam = _Strided(strides)
        ptrs = {n: bufs[layout[n][0]].addr + 2 * layout[n][1] for n in ("q", "k", "v", "o")}
        k.bind({**ptrs, "lse": lse_buf.addr})
        k.launch()
        k.synchronize()
        o_alloc = layout["o"][0]
        flats[o_alloc] = bufs[o_alloc].to_array(flats[o_alloc].shape, bits)
        lse = lse_buf.to_array((b, h, q["seq_q"]), np.float32).astype(np.float64)
    finally:
        k.close()
        for buf in (*bufs.values(), lse_buf):
            buf.free()
    got = np.array(view("o"))
    _, off, sb, ss, sh = layout["o"]
    ix = [np.arange(n).reshape([-1 if j == i else 1 for j in range(4)]) for i, n in enumerate(got.shape)]
    mask = np.ones(flats[o_alloc].shape, dtype=bool)
    mask[(off + ix[0] * sb + ix[1] * ss + ix[2] * sh + ix[3]).ravel()] = False  # o's own elements
    untouched = bool((flats[o_alloc][mask] == 0xFFFF).all())
    t = {n: to_float64(raw[n] if dt == "bf16" else raw[n].view(np.float16), dt) for n in raw}
    if layout["k"][4] == 0:  # one K / V head for every head: the values the kernel reads
        t["k"], t["v"] = np.repeat(t["k"][:, :, -1:], h, 2), np.repeat(t["v"][:, :, -1:], h, 2)
    ref_o, ref_lse = attention(t["q"], t["k"], t["v"], q["causal"], default_scale(d, cfg.problem["scale"]))
    o = to_float64(got, "bf16") if dt == "bf16" else got.view(np.float16).astype(np.float64)
    return float(np.abs(o - ref_o).max() / np.abs(ref_o).max()), float(np.abs(lse - ref_lse).max()), untouched


@pytest.mark.gpu
@pytest.mark.parametrize(
    "problem",
    [
        {"batch": 2, "heads": 3, "seq_q": 100, "head_dim": 128, "causal": 1},
        {"batch": 1, "heads": 2, "seq_q": 129, "head_dim": 64, "dtype": "f16"},
    ],
)
def test_the_layouts_the_helper_takes(problem):
    """A packed QKV tensor; q as heads 1..h of a wider tensor, k and v as [b, h, s, d] tensors, o with 8 elements
    of padding after each head; one K / V head shared by every head (k_sh = v_sh = 0)."""
    q = {"seq_kv": problem["seq_q"], **problem}
    h, s, d = q["heads"], q["seq_q"], q["head_dim"]
    hd = h * d
    dense = (0, s * hd, hd, d)
    layouts = {
        "packed qkv": {
            "q": ("qkv", 0, s * 3 * hd, 3 * hd, d),
            "k": ("qkv", hd, s * 3 * hd, 3 * hd, d),
            "v": ("qkv", 2 * hd, s * 3 * hd, 3 * hd, d),
            "o": ("o", *dense),
        },
        "views": {
            "q": ("q", d, s * (h + 2) * d, (h + 2) * d, d),
            "k": ("k", 0, h * s * d, d, s * d),
            "v": ("v", 0, h * s * d, d, s * d),
            "o": ("o", 0, s * h * (d + 8), h * (d + 8), d + 8),
        },
        "shared kv head": {
            "q": ("q", *dense),
            "k": ("k", 0, s * d, d, 0),
            "v": ("v", 0, s * d, d, 0),
            "o": ("o", *dense),
        },
    }
    dev, bad = _device(), []
    for tile in ({"BM": 64}, {"BM": 128, "BN": 128, "STAGES": 3}):
        cfg = _cfg(tile, problem)
        for name, lay in layouts.items():
            err, lse_err, untouched = _run_layout(dev, cfg, lay, np.random.default_rng(7))
            if not (err <= FAM.tolerance_for(cfg) and lse_err <= LSE_TOLERANCE and untouched):
                bad.append((name, FAM.name_expression(cfg), err, lse_err, untouched))
    assert not bad, bad


@pytest.mark.gpu
def test_against_torch_sdpa_math_backend():
    """The same inputs through torch.nn.functional.scaled_dot_product_attention's math backend (fp32 upcast of the
    16-bit inputs): ours within the family's tolerance of it, as of the float64 reference."""
    torch = pytest.importorskip("torch")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from smemtile.gpu.run import LoadedKernel

    dev, bad = _device(), []
    for i, p in enumerate(FAM.test_sizes[:5]):
        cfg = _cfg({"BM": 64}, p)
        q = FAM.problem_ints(cfg.problem)
        x = FAM.make_inputs(cfg, np.random.default_rng(i))
        k = LoadedKernel(cfg, dev)
        try:
            res = k.check(x, FAM.reference(cfg, x))
            ours = FAM.decode_output(cfg, k.output()).astype(np.float64)
        finally:
            k.close()
        qt, kt, vt, _ = FAM._tensors(cfg, x)

        def t(a):  # [b, s, h, d] float64 -> [b, h, s, d] fp32 on the GPU (exact: 16-bit values)
            return torch.tensor(a, dtype=torch.float32, device="cuda").transpose(1, 2)

        with sdpa_kernel(SDPBackend.MATH):
            ref = torch.nn.functional.scaled_dot_product_attention(
                t(qt),
                t(kt),
                t(vt),
                is_causal=bool(q["causal"]),
                scale=default_scale(q["head_dim"], p.get("scale", 0)),
            )
        ref = ref.transpose(1, 2).reshape(ours.shape).double().cpu().numpy()
        err = float(np.abs(ours - ref).max() / np.abs(ref).max())
        if not res.correct or err > FAM.tolerance_for(cfg):
            bad.append((p, res.max_rel_error, err))
    assert not bad, bad


@pytest.mark.gpu
def test_the_issue_command_is_correct_on_the_gpu():
    """`smemtile tiles --family flash_attn ... --top 1 --format yaml | smemtile verify -` (the issue's problem;
    PATH 0 on sm_90a until PATH 1 lands), causal and not."""
    for extra in ([], ["--causal", "1"]):
        t = run_cli(
            "tiles",
            "--family",
            "flash_attn",
            *ISSUE,
            *extra,
            "--arch",
            "sm_90a",
            "--top",
            "1",
            "--format",
            "yaml",
        )
        assert t.returncode == 0, t.stderr
        v = run_cli("verify", "-", "--json", input=t.stdout, process=True)
        assert v.returncode == 0, v.stderr[-2000:]
        doc = json.loads(v.stdout)
        assert doc["correct"] is True and doc["spills"] == 0, doc
        assert doc["max_rel_error"] <= FAM.TOLERANCE_BF16 and doc["tflops"] > 0
