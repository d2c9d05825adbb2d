"""Family ``flash_attn`` (``flash_attn.cu``): attention forward, O = softmax(scale * Q K^T [+ causal mask]) V, with
the online (streaming) softmax, fp16 / bf16 in, fp32 accumulation, and the log-sum-exp of every row (issue 32).

Spec (YAML)::

    arch: sm_80
    tile: {BM: 64, BN: 64, STAGES: 2, WARPS: 4}    # any parameter below; the rest take their defaults
    kernel: {family: flash_attn, batch: 4, heads: 32, seq_q: 8192, head_dim: 128, causal: 1, dtype: bf16}

Problem: ``batch``, ``heads``, ``seq_q``, ``seq_kv`` (default: seq_q; ``tiles --seq`` sets seq_q, ``--seq-kv``
the other), ``head_dim`` (64 or 128), ``causal`` (0 / 1: query i sees keys j <= i, top-left aligned as torch's
``scaled_dot_product_attention(is_causal=True)``), ``dtype`` (bf16, f16), ``scale`` (0, the default, means
1/sqrt(head_dim)).

Arrays (FlashAttention's layout): q [batch, seq_q, heads, head_dim], k and v [batch, seq_kv, heads, head_dim], o
like q, head_dim contiguous; element (b, i, h, d) of q at ``q[b*q_sb + i*q_ss + h*q_sh + d]`` (strides in
elements; k, v, o have their own). lse: float32 [batch, heads, seq_q] contiguous, natural log (FlashAttention's
softmax_lse). The generated helper and the kernel take any strides that are multiples of 8 (a packed QKV tensor
[b, s, 3, h, d]: q_ss = 3*h*d and k = q + h*d; a sub-view; a [b, h, s, d] tensor read as [b, s, h, d]: q_ss = d,
q_sh = s*d; a k_sh of 0 shares one K head between all heads). The problem (what smemtile's own launcher lays out
for verify and the tests, and what a spec can say) is the token-row view: q, k, v as 2-D arrays of batch*seq rows
of ``q_ss`` (``k_ss``, ``v_ss``) elements, >= heads*head_dim (the heads first; a packed QKV row holds k and v after
them), with q_sh = head_dim and q_sb = seq*q_ss; o dense (derived: :meth:`FlashAttn.problem_ints`). The framework's
arrays are 2-D with at most one leading dimension: the helper has no dense overload (it takes all twelve strides).

PATH 0 (sm_80+, runs on sm_90): the FlashAttention-2 schedule, as kernels/flash_attn.cu's header derives it: each
of WARPS warps owns 16 query rows (BM = 16 * WARPS); Q is copied once (cp.async) and held in registers as mma
A-fragments; K and V tiles of BN keys stream through a STAGES-deep cp.async ring; S = Q K^T and O += P V by
mma.sync.m16n8k16 (P converted to 16-bit A-fragments in registers); masks for the seq_kv tail and the causal
diagonal; fully masked causal tiles are skipped. PATH 1 (sm_90a, the default there): the FlashAttention-3 kernel
flash_attn_wgmma (TMA, wgmma, setmaxnreg; BM 128, 384 threads), whose half of the family is hopper.py.

Accesses (below, written once as spec expressions; flash_attn.cu's header comment derives them): the Q, K and V
copies (cp.async 16 B, one row of HD elements per CPR = HD/8 lanes), the Q A-fragments (ldmatrix.x4, once), the
K B-fragments (ldmatrix.x4: K^T is a column-major B) and the V B-fragments (ldmatrix.x4.trans). With dense rows
of 128 or 256 bytes every ldmatrix phase is 8-way (8 rows at one column land on one bank quad);
``Swizzle<3,3,log2(HD)-3>`` (16-byte chunk c of row r at c ^ r % 8 in its 128-byte group) makes every copy and
fragment load conflict-free at no memory cost: the family's default layouts. ``smemtile analyze
samples/flash_attn_hd128.yaml`` shows them conflict-free (without the sample's ``layout:`` entries: the 8-way
conflicts and the fix search's options).

Launch: grid = (ceil(seq_q / BM), batch * heads, 1), block = 32 * WARPS threads, dynamic shared memory
(BM*HD + 2*STAGES*BN*HD) * 2 bytes (with padding: its rows).

Tolerance (max |o - ref| / max |ref| against the float64 reference of the same 16-bit inputs): the products in
S are exact in fp32 and summed in fp32 (head_dim 128: ~1e-6 relative); ex2.approx is within 2^-22. What counts
is 16-bit rounding, twice: P is rounded to the input type before P V (each weight within half an ulp: 2^-9 bf16,
2^-11 f16, relative) and o is rounded on the store (half an ulp of o). A numpy model of exactly that schedule and
rounding (tests/test_flash_attn_family.py) gives 1.7e-3 to 2.7e-3 (bf16) and 2.5e-4 (f16) at the test sizes, about
one half-ulp of max |o| plus the averaged P errors (the compiled kernel, emulated on the CPU there, gives the same); the tolerances leave ~4x for what the model leaves out (the
mma's fp32 summation order, ex2.approx): bf16 1e-2, f16 2e-3. lse is fp32 from exact products: 1e-3 absolute in
natural-log units (GPU tests: LSE_TOLERANCE).
"""

from __future__ import annotations

import numpy as np

from smemtile.families.base import (
    Family,
    HostArg,
    Item,
    KernelCall,
    KernelConfig,
    Param,
    ProblemKey,
    cp_async_ring_items,
    swizzle_proof_item,
)
from smemtile.model.arch import Arch
from smemtile.model.bf16 import bf16_bits as _bf16_bits
from smemtile.model.bf16 import to_float64
from smemtile.model.layout import Layout, swizzle_for

T_CTYPES = {"f16": "smemtile::f16", "bf16": "smemtile::bf16"}
HEAD_DIMS = (64, 128)
CHUNK = 8  # elements per 16-byte copy (2-byte elements)
BUFFERS = ("Qs", "Ks", "Vs")
ARRAYS = ("q", "k", "v", "o")
STRIDES = tuple(f"{a}_{s}" for a in ARRAYS for s in ("sb", "ss", "sh"))  # the kernel's order
SEQ_STRIDES = ("q_ss", "k_ss", "v_ss")  # problem keys: the token strides of the inputs (o is dense there)
LSE_TOLERANCE = 1e-3  # absolute, natural-log units (fp32 lse from exact products; GPU tests)


def visible_pairs(seq_q: int, seq_kv: int, causal: int) -> int:
    """(query, key) pairs the softmax sees: seq_q*seq_kv, or with the top-left causal mask (key j <= query i)
    sum_i min(i + 1, seq_kv)."""
    if not causal:
        return seq_q * seq_kv
    n = min(seq_q, seq_kv)
    return n * (n + 1) // 2 + (seq_q - n) * seq_kv


def default_scale(head_dim: int, scale: float) -> float:
    """The scale the kernel uses: ``scale``, or 1/sqrt(head_dim) for 0."""
    return float(scale) if float(scale) != 0.0 else 1.0 / float(np.sqrt(head_dim))


def attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: int, scale: float, rows: int = 1024
) -> tuple[np.ndarray, np.ndarray]:
    """float64 attention of [batch, seq, heads, d] arrays: (o [batch, seq_q, heads, d], lse [batch, heads,
    seq_q]), with the top-left causal mask when ``causal``; the row max is subtracted before exp (stable). One
    head and ``rows`` query rows at a time: memory stays rows x seq_kv (the bench sizes' 16384^2 scores would be
    2 GiB a head)."""
    b, sq, h, _ = q.shape
    skv = k.shape[1]
    o = np.empty(q.shape[:3] + (v.shape[3],))
    lse = np.empty((b, h, sq))

    def head(bi: int, hi: int) -> None:  # writes only its own head's rows of o and lse
        kh, vh = k[bi, :, hi], v[bi, :, hi]
        for r0 in range(0, sq, rows):
            s = (q[bi, r0 : r0 + rows, hi] @ kh.T) * scale
            if causal:
                i = np.arange(r0, r0 + s.shape[0])[:, None]
                s = np.where(np.arange(skv)[None, :] <= i, s, -np.inf)
            m = s.max(axis=1, keepdims=True)
            p = np.exp(s - m)
            l_ = p.sum(axis=1, keepdims=True)
            o[bi, r0 : r0 + rows, hi] = (p @ vh) / l_
            lse[bi, hi, r0 : r0 + rows] = (m + np.log(l_))[:, 0]

    heads = [(bi, hi) for bi in range(b) for hi in range(h)]
    if len(heads) > 1 and b * h * sq * skv > 1 << 24:  # large: the heads in threads (numpy releases the GIL)
        import os
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(len(heads), os.cpu_count() or 1)) as pool:
            list(pool.map(lambda bh: head(*bh), heads))
    else:
        for bh in heads:
            head(*bh)
    return o, lse


class FlashAttn(Family):
    name = "flash_attn"
    summary = "attention forward (online softmax, lse), fp16/bf16 mma.sync + ldmatrix + cp.async ring (FA2)"
    file = "flash_attn.cu"
    peak = None
    kernel = "flash_attn"
    default_arch = "sm_90"  # the H200 the benchmarks run on; the same code builds for sm_80
    signature = (
        "const {T}* q",
        "const {T}* k",
        "const {T}* v",
        "{T}* o",
        "float* lse",
        "int batch",
        "int heads",
        "int seq_q",
        "int seq_kv",
        *(f"long long {s}" for s in STRIDES),
        "float scale",
    )
    params = (
        Param("BM", 64, "query rows per block (16 per warp: BM = 16 * WARPS)", (64, 128)),
        Param("BN", 64, "keys per KV tile", (32, 64, 128)),
        Param(
            "STAGES",
            2,
            "ring depth of KV tiles: PATH 0 cp.async (K and V of a tile per stage) 1-3; PATH 1 TMA (a K and a V "
            "ring) 2-4",
            (1, 2, 3, 4),
        ),
        Param("WARPS", 4, "warps per block (each owns 16 query rows)", (4, 8)),
        Param(
            "PATH",
            0,
            "0 = mma.sync + cp.async (FlashAttention-2 schedule, sm_80+); 1 = TMA + wgmma (FlashAttention-3 "
            "schedule, sm_90a; BM 128, 384 threads; the default on sm_90a)",
            (0, 1),
        ),
        Param(
            "OVERLAP",
            1,
            "PATH 1's schedule: 0 simple, 1 softmax under the previous tile's P V wgmmas, 2 that with the two "
            "consumer warpgroups' ping-pong",
            (0, 1, 2),
        ),
        Param(
            "PERSISTENT",
            0,
            "PATH 1's grid: 0 = one CTA per work item (q tile, batch * head); 1 = at most SMS CTAs, each looping over "
            "items (the next item's Q and first K/V load under this item's epilogue). PATH 0: 0",
            (0, 1),
        ),
        Param(
            "SMS",
            132,  # the H200's cuDeviceGetAttribute(MULTIPROCESSOR_COUNT) (bench/results/occupancy_driver_h200.json)
            "CTAs a persistent grid keeps resident (one per SM: the SM count, 132 on the H200)",
            lo=1,
            hi=4096,
        ),
    )
    problem_keys = (
        ProblemKey("batch", 4, "batch"),
        ProblemKey("heads", 32, "attention heads"),
        ProblemKey("seq_q", 1024, "query sequence length"),
        # dense: absent means seq_q (the expression is not a lower bound: dense_layout leaves it out)
        ProblemKey("seq_kv", 0, "key / value sequence length (default: seq_q)", dense="seq_q"),
        ProblemKey("head_dim", 128, "head dimension (64 or 128)"),
        ProblemKey("causal", 0, "1: query i sees keys j <= i (top-left aligned)", "choice", (0, 1)),
        ProblemKey("dtype", "bf16", "q, k, v, o element type", "choice", tuple(T_CTYPES)),
        ProblemKey("scale", 0.0, "softmax scale (0: 1/sqrt(head_dim))", "float"),
        *(
            ProblemKey(
                s, 0, f"elements between tokens of {s[0]} (default heads*head_dim)", dense="heads * head_dim"
            )
            for s in SEQ_STRIDES
        ),
    )
    host_args = (
        # the token-row view smemtile's launcher allocates: batch*seq rows of q_ss elements (the heads first,
        # then whatever the user's rows hold beyond them, e.g. k and v of a packed QKV row); o dense
        HostArg("q", "const {T}*", "in", ("batch * seq_q", "q_ss"), "dtype"),
        HostArg("k", "const {T}*", "in", ("batch * seq_kv", "k_ss"), "dtype"),
        HostArg("v", "const {T}*", "in", ("batch * seq_kv", "v_ss"), "dtype"),
        HostArg("o", "{T}*", "out", ("batch * seq_q", "heads * head_dim"), "dtype"),
        HostArg("lse", "float*", "out", ("batch * heads", "seq_q"), "f32"),
        HostArg("batch", "int"),
        HostArg("heads", "int"),
        HostArg("seq_q", "int"),
        HostArg("seq_kv", "int"),
        *(HostArg(s, "long long") for s in STRIDES),
        HostArg("scale", "float"),
    )
    output = "o"
    smem_kind = "dynamic"
    tolerance = 2e-3  # f16 (module text)
    TOLERANCE_BF16 = 1e-2

    # ---- shape --------------------------------------------------------------------------------------------
    def threads(self, p: dict[str, int]) -> int:
        if p.get("PATH") == 1:
            return hopper.THREADS
        return 32 * p["WARPS"]

    def threads_message(self, p: dict[str, int], threads: int, implied: int) -> str:
        return f"threads = {threads} but WARPS = {p['WARPS']} warps need {implied}"

    def size_keys(self) -> list[ProblemKey]:
        """None positional: ``tiles --family flash_attn`` takes the problem by name (``--batch 4 --heads 32
        --seq 8192 --head-dim 128``, the tile model's options)."""
        return []

    @property
    def problem_params(self) -> tuple[str, ...]:
        return ()  # the tile model's options are problem keys, not template parameters

    def dense_layout(self, problem: dict) -> dict[str, str]:
        """None: the arrays have no leading-dimension argument of the framework's 2-D kind (the helper takes all
        twelve strides; the token strides' defaults and bounds are :meth:`problem_ints` and :meth:`violations`'),
        and seq_kv's default is not a layout."""
        return {}

    def problem_ints(self, problem: dict) -> dict[str, int]:
        """The integer keys (causal among them), seq_kv (default seq_q), the token strides (default
        heads*head_dim) and the kernel's other strides as the token-row view has them: head h at h*head_dim,
        batch b at b*seq*q_ss (the arrays smemtile's launcher lays out)."""
        dflt = {pk.name: pk.default for pk in self.problem_keys}
        out = {k: int(problem.get(k, dflt[k])) for k in ("batch", "heads", "seq_q", "head_dim")}
        out["seq_kv"] = int(problem["seq_kv"]) if "seq_kv" in problem else out["seq_q"]
        out["causal"] = int(problem.get("causal", 0))
        hd = out["heads"] * out["head_dim"]
        for a in ARRAYS:
            ss = int(problem[f"{a}_ss"]) if f"{a}_ss" in problem else hd  # o: always hd here
            seq = out["seq_q"] if a in ("q", "o") else out["seq_kv"]
            out[f"{a}_sb"], out[f"{a}_ss"], out[f"{a}_sh"] = seq * ss, ss, out["head_dim"]
        return out

    def constants(self, cfg: KernelConfig) -> dict[str, int]:
        """The family's names: HD (head_dim), CAUSAL, beside the parameters, THREADS and the problem's ints."""
        out = super().constants(cfg)
        out["HD"], out["CAUSAL"] = out["head_dim"], out["causal"]
        return out

    def ctypes(self, cfg: KernelConfig) -> dict[str, str]:
        return {"T": T_CTYPES[cfg.problem["dtype"]]}

    def stages(self, p: dict[str, int]) -> int:
        return p["STAGES"]

    def smem_bytes(self, cfg: KernelConfig) -> int:
        if cfg.params["PATH"] == 1:
            return hopper.smem_bytes(self, cfg)
        return super().smem_bytes(cfg)

    def kernel_signature(self, cfg: KernelConfig) -> tuple[str, ...]:
        if cfg.params["PATH"] == 1:
            return hopper.signature(self)
        return self.signature

    def tensor_maps(self, cfg: KernelConfig):
        if cfg.params["PATH"] == 1:
            return hopper.tensor_maps(self, cfg)
        return []

    def smem_split(self, cfg: KernelConfig) -> tuple[int, int]:
        return 0, self.smem_bytes(cfg)  # extern __shared__: dynamic at any size

    def smem_hint(self, cfg: KernelConfig) -> str:
        return "; reduce STAGES, BN or BM"

    def derive(self, params: dict[str, int], user: set[str], arch: Arch) -> dict[str, int]:
        """BM and WARPS go together (16 query rows per warp): the one the user set decides the other. On sm_90a
        PATH 1 unless the user set PATH or a value only PATH 0 takes (WARPS, BM != 128, BN 32, STAGES 1); PATH 1
        fixes BM at 128 and defaults to BN 128, 2 stages."""
        p = dict(params)
        if "PATH" not in user and arch.lacks("wgmma") is None:
            p0_only = (
                "WARPS" in user
                or ("BM" in user and p["BM"] != hopper.BM)
                or ("BN" in user and p["BN"] not in hopper.BNS)
                or ("STAGES" in user and p["STAGES"] not in hopper.STAGES)
            )
            p["PATH"] = 0 if p0_only else 1
        if p["PATH"] == 1:
            p["BM"] = p["BM"] if "BM" in user else hopper.BM
            p["WARPS"] = p["WARPS"] if "WARPS" in user else hopper.BM // 16
            p["BN"] = p["BN"] if "BN" in user else 128
            return p
        if "BM" in user and "WARPS" not in user:
            p["WARPS"] = max(1, p["BM"] // 16)
        elif "WARPS" in user and "BM" not in user:
            p["BM"] = 16 * p["WARPS"]
        return p

    # ---- contract: every static_assert of flash_attn.cu, in words ------------------------------------------------
    def violations(self, cfg: KernelConfig) -> list[str]:
        p, out = cfg.params, []
        q = self.problem_ints(cfg.problem)
        if p["PATH"] == 1:
            return hopper.violations(self, cfg)
        if p["STAGES"] > 3:
            out.append(f"STAGES = {p['STAGES']}: PATH 0's cp.async ring takes 1 to 3 stages (4 is PATH 1's)")
        if p["OVERLAP"] != 1:
            out.append(f"OVERLAP = {p['OVERLAP']} is PATH 1's schedule; PATH 0 has none (leave it at 1)")
        if p["PERSISTENT"] != 0:
            out.append("PERSISTENT = 1 is PATH 1's grid; PATH 0 runs one block per (q tile, batch * head)")
        if cfg.arch.cc < (8, 0):
            out.append(
                f"flash_attn needs sm_80 or newer (cp.async, bf16 mma.sync); {cfg.arch.name} has neither"
            )
        if q["head_dim"] not in HEAD_DIMS:
            out.append(
                f"head_dim {q['head_dim']} is not supported: the kernel is built for head dimensions "
                f"{' and '.join(map(str, HEAD_DIMS))}"
            )
        for s in SEQ_STRIDES:
            if q[s] < q["heads"] * q["head_dim"]:
                out.append(
                    f"{s} = {q[s]} is below heads * head_dim = {q['heads'] * q['head_dim']}: a token's row holds "
                    "its heads (the problem's arrays are rows of tokens; the generated helper takes any strides)"
                )
        if p["BM"] != 16 * p["WARPS"]:
            out.append(
                f"BM = {p['BM']} must be 16 * WARPS = {16 * p['WARPS']}: each warp owns 16 query rows (one m16 "
                "mma tile)"
            )
        for b in BUFFERS:
            lay = cfg.layouts.get(b)
            if lay is None:
                continue
            if lay.pad % CHUNK:
                out.append(
                    f"{b}: padding {lay.pad} must be a multiple of 8 elements: cp.async and ldmatrix rows are "
                    "16-byte aligned"
                )
            if lay.swizzled and lay.swizzle.M < 3:
                out.append(
                    f"{b}: {lay.swizzle} splits 16-byte granules; cp.async and ldmatrix move 16 bytes (M >= 3)"
                )
        return out

    def requires(self, cfg: KernelConfig) -> list[tuple[str, str]]:
        """The helper's preconditions: 16-byte aligned q, k, v, o and strides that are multiples of 8 elements
        (cp.async copies 16-byte chunks of a row). No lower bound on the strides: any layout the user's tensors
        have (a [b, h, s, d] view, a head shared through stride 0) is taken. PATH 1: TMA's (hopper.requires)."""
        if cfg.params["PATH"] == 1:
            return hopper.requires(self, cfg)
        aligned = " & ".join(f"({a}_align >= 16)" for a in ARRAYS)
        mult = " & ".join(f"(({s} % 8) == 0)" for s in STRIDES)
        return [
            (aligned, "q, k, v and o 16-byte aligned (cp.async copies 16-byte chunks of 8 elements)"),
            (mult, "every stride a multiple of 8 elements (each row of head_dim elements 16-byte aligned)"),
        ]

    def layout_rules(self, cfg: KernelConfig) -> list[str]:
        return [
            "o and lse must not overlap q, k or v (the kernel reads them while blocks write o).",
            "lse: float32 [batch, heads, seq_q] contiguous, natural-log units (FlashAttention's softmax_lse).",
            f"head_dim {self.problem_ints(cfg.problem)['head_dim']} and causal {cfg.problem['causal']} are "
            "built into this kernel; scale 0 means 1/sqrt(head_dim).",
        ]

    def name_expression(self, cfg: KernelConfig) -> str:
        if cfg.params["PATH"] == 1:
            return hopper.name_expression(self, cfg)
        return f"{self.kernel}<{', '.join(self.template_args(cfg))}>"

    def template_args(self, cfg: KernelConfig) -> list[str]:
        p, q = cfg.params, self.problem_ints(cfg.problem)
        if p["PATH"] == 1:
            return hopper.template_args(self, cfg)
        vals = [
            T_CTYPES[cfg.problem["dtype"]],
            q["head_dim"],
            p["BM"],
            p["BN"],
            p["STAGES"],
            p["WARPS"],
            q["causal"],
            p["PATH"],
            *(x for b in BUFFERS for x in cfg.layouts[b].template_args()),
        ]
        return [str(v) for v in vals]

    # ---- the kernel's shared memory, written once ---------------------------------------------------------
    def buffers(self, cfg: KernelConfig) -> list[dict]:
        if cfg.params["PATH"] == 1:
            return hopper.buffers(self, cfg)
        dt = cfg.problem["dtype"]
        return [
            {
                "name": "Qs",
                "dtype": dt,
                "shape": ["BM", "HD"],
                "note": "query tile: Qs[r][d] = q[b, q0 + r, h, d] (0 past seq_q), read into registers once",
            },
            {
                "name": "Ks",
                "dtype": dt,
                "shape": ["BN", "HD"],
                "stages": "STAGES",
                "note": "key tile: Ks[j][d] = k[b, kv0 + j, h, d] (0 past seq_kv)",
            },
            {
                "name": "Vs",
                "dtype": dt,
                "shape": ["BN", "HD"],
                "stages": "STAGES",
                "note": "value tile: Vs[j][d] = v[b, kv0 + j, h, d] (0 past seq_kv)",
            },
        ]

    def accesses(self, cfg: KernelConfig) -> list[dict]:
        if cfg.params["PATH"] == 1:
            return hopper.accesses(self, cfg)

        def copy(name, buf, var, rows, ld, what):
            c = f"(tid + {var}*THREADS)"
            row, col = f"{c} // (HD//8)", f"({c} % (HD//8)) * 8"
            return {
                "name": name,
                "buffer": buf,
                "op": "cp.async",
                "width": 16,
                "role": "copy",
                "row": row,
                "col": col,
                "over": {var: [0, f"{rows}*HD//8//THREADS"]},
                "source": f"({row}) * {ld} + {col}",
                "note": f"{what}, 16-byte cp.async.cg (zero-fill past the sequence)",
            }

        return [
            copy("Q_copy", "Qs", "i", "BM", "q_ss", "query rows q0.., once per block"),
            copy("K_copy", "Ks", "j", "BN", "k_ss", "key rows of the next KV tile"),
            copy("V_copy", "Vs", "j", "BN", "v_ss", "value rows of the next KV tile"),
            {
                "name": "Q_frag",
                "buffer": "Qs",
                "op": "ldmatrix",
                "matrices": 4,
                "role": "inner",
                "row": "warp*16 + lane % 16",
                "col": "kk*16 + (lane // 16)*8",
                "over": {"kk": [0, "HD//16"]},
                "note": "mma A operand a0..a3 of the warp's 16 rows, k16 step kk of HD (once per block)",
            },
            {
                "name": "K_frag",
                "buffer": "Ks",
                "op": "ldmatrix",
                "matrices": 4,
                "role": "inner",
                "row": "nj*16 + lane % 8 + (lane // 16)*8",
                "col": "kk*16 + ((lane // 8) % 2)*8",
                "over": {"nj": [0, "BN//16"], "kk": [0, "HD//16"]},
                "note": "S = Q K^T: b0, b1 of key tiles 2nj and 2nj+1 (K^T as column-major B), k16 step kk",
            },
            {
                "name": "V_frag",
                "buffer": "Vs",
                "op": "ldmatrix",
                "matrices": 4,
                "trans": True,
                "role": "inner",
                "row": "kk*16 + lane % 16",
                "col": "nj*16 + (lane // 16)*8",
                "over": {"kk": [0, "BN//16"], "nj": [0, "HD//16"]},
                "note": "O += P V: b0, b1 of head-dim tiles 2nj and 2nj+1 (V row-major B, .trans), keys 16kk..",
            },
        ]

    def default_layouts(self, cfg: KernelConfig) -> dict[str, Layout]:
        """The kernel's conflict-free layouts: Swizzle<3,3,log2(HD)-3> on every tile (hgemm's swizzle_for)."""
        if cfg.params["PATH"] == 1:
            return hopper.default_layouts(self, cfg)
        sw = swizzle_for(self.problem_ints(cfg.problem)["head_dim"])
        return {b: Layout(0, sw) for b in BUFFERS}

    # ---- launch -------------------------------------------------------------------------------------------
    def calls(self, cfg: KernelConfig) -> list[KernelCall]:
        if cfg.params["PATH"] == 1:
            return hopper.calls(self, cfg)
        return [
            KernelCall(
                ("q", "k", "v", "o", "lse", "batch", "heads", "seq_q", "seq_kv", *STRIDES, "scale"),
                ("cdiv(seq_q, BM)", "batch * heads", "1"),
                ("THREADS", "1", "1"),
            )
        ]

    # ---- reference -----------------------------------------------------------------------------------------
    def make_inputs(self, cfg: KernelConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
        q = self.problem_ints(cfg.problem)
        dt = cfg.problem["dtype"]

        def operand(rows, cols):  # a row's columns past heads*head_dim are data the kernel must not read
            x = rng.standard_normal((rows, cols), dtype=np.float32)
            return _bf16_bits(x) if dt == "bf16" else x.astype(np.float16)

        return {
            "q": operand(q["batch"] * q["seq_q"], q["q_ss"]),
            "k": operand(q["batch"] * q["seq_kv"], q["k_ss"]),
            "v": operand(q["batch"] * q["seq_kv"], q["v_ss"]),
        }

    def _tensors(self, cfg: KernelConfig, inputs: dict[str, np.ndarray]):
        q = self.problem_ints(cfg.problem)
        b, h, d, dt = q["batch"], q["heads"], q["head_dim"], cfg.problem["dtype"]

        def t(name, seq):
            return to_float64(np.asarray(inputs[name])[:, : h * d], dt).reshape(b, seq, h, d)

        return t("q", q["seq_q"]), t("k", q["seq_kv"]), t("v", q["seq_kv"]), q

    def reference(self, cfg: KernelConfig, inputs: dict[str, np.ndarray]) -> np.ndarray:
        """float64 attention of the 16-bit inputs (exactly the values the kernel multiplies), as o's 2-D view
        (batch*seq_q, heads*head_dim)."""
        qt, kt, vt, q = self._tensors(cfg, inputs)
        o, _ = attention(qt, kt, vt, q["causal"], default_scale(q["head_dim"], cfg.problem["scale"]))
        return o.reshape(q["batch"] * q["seq_q"], q["heads"] * q["head_dim"])

    def reference_lse(self, cfg: KernelConfig, inputs: dict[str, np.ndarray]) -> np.ndarray:
        """float64 log-sum-exp of every row, as lse's 2-D view (batch*heads, seq_q)."""
        qt, kt, vt, q = self._tensors(cfg, inputs)
        _, lse = attention(qt, kt, vt, q["causal"], default_scale(q["head_dim"], cfg.problem["scale"]))
        return lse.reshape(q["batch"] * q["heads"], q["seq_q"])

    def decode_output(self, cfg: KernelConfig, raw: np.ndarray) -> np.ndarray:
        return to_float64(raw, "bf16") if cfg.problem["dtype"] == "bf16" else raw

    def tolerance_for(self, cfg: KernelConfig) -> float:
        return self.TOLERANCE_BF16 if cfg.problem["dtype"] == "bf16" else self.tolerance

    def work(self, problem: dict) -> tuple[str, float]:
        """4 * batch * heads * head_dim flops per visible (query, key) pair: Q K^T and P V, 2 each."""
        q = self.problem_ints(problem)
        pairs = visible_pairs(q["seq_q"], q["seq_kv"], q["causal"])
        return "tflops", 4.0 * q["batch"] * q["heads"] * q["head_dim"] * pairs

    def small_problem(self, cfg: KernelConfig) -> dict:
        """Whole tiles for ncu: 2 row blocks and 4 KV tiles, 2 heads, not causal."""
        p, q = cfg.params, self.problem_ints(cfg.problem)
        return {
            "batch": 1,
            "heads": 2,
            "seq_q": 2 * p["BM"],
            "seq_kv": 4 * p["BN"],
            "head_dim": q["head_dim"],
            "causal": 0,
        }

    def kv_tiles(self, cfg: KernelConfig) -> float:
        """KV tiles a block processes, the mean over the row blocks (causal blocks stop at their diagonal)."""
        p, q = cfg.params, self.problem_ints(cfg.problem)
        bm, bn, sq, skv = p["BM"], p["BN"], q["seq_q"], q["seq_kv"]
        blocks = -(-sq // bm)
        if not q["causal"]:
            return float(-(-skv // bn))
        return sum(-(-min(skv, i * bm + bm) // bn) for i in range(blocks)) / blocks

    def repeats_per_block(self, cfg: KernelConfig) -> int:
        return max(1, round(self.kv_tiles(cfg)))

    def access_repeats(self, cfg: KernelConfig) -> dict[str, float]:
        if cfg.params["PATH"] == 1:
            return hopper.access_repeats(self, cfg)
        t = self.kv_tiles(cfg)
        return {"Q_copy": 1.0, "Q_frag": 1.0, "K_copy": t, "V_copy": t, "K_frag": t, "V_frag": t}

    def one_block_reason(self, cfg: KernelConfig, occ: dict) -> str | None:
        if cfg.params["PATH"] == 1:
            return hopper.one_block_reason(self, cfg, occ)
        p = cfg.params
        if occ.get("limiter") == "registers":
            return (
                f"1 block/SM by design: each thread holds its warp's Q fragments, a 16 x {self.problem_ints(cfg.problem)['head_dim']} "
                f"fp32 O accumulator and a 16 x {p['BN']} S tile in registers"
            )
        if occ.get("limiter") == "shared_memory":
            return (
                f"1 block/SM by design: the Q tile and {p['STAGES']} stages of K and V tiles of {p['BN']} keys "
                "(shared memory is the limiter)"
            )
        return None

    # ---- checklist from the PTX ------------------------------------------------------------------------------
    def pipeline_items(self, cfg: KernelConfig, ptx: str | None) -> list[Item]:
        if cfg.params["PATH"] == 1:
            return hopper.pipeline_items(self, cfg, ptx)
        stages = cfg.params["STAGES"]
        items = cp_async_ring_items(
            ptx,
            {max(0, stages - 2), stages - 1, 0},
            "Q, the prologue's KV tiles, the loop's",
            f"{stages} stages need {stages - 1} for Q, {max(0, stages - 2)} in the KV loop and 0 for the drain",
        )
        items.append(swizzle_proof_item(self, cfg))
        return items


from smemtile.families.flash_attn import hopper  # noqa: E402  (PATH 1; it imports this package's names lazily)
from smemtile.families.flash_attn.tiles import FlashAttnTileModel  # noqa: E402  (it imports this package first)

FlashAttn.tile_model = FlashAttnTileModel
FAMILY = FlashAttn()
