"""The tile model of flash_attn (``smemtile tiles --family flash_attn --batch 4 --heads 32 --seq 8192 --head-dim 128
--dtype bf16 [--seq-kv N] [--causal 1]``; ``smemtile tune``, ``generate`` without a tile).

On sm_90a the candidates are PATH 1's (the sm_90a kernel): BN 64 / 128 x STAGES 2-4 x OVERLAP 0-2 with one CTA per
work item, and the persistent grid at BN 128, 2 stages, OVERLAP 1 / 2; they are timed by ``hopper.predict_time``,
**calibrated on the H200** (``flash_attn_h200.json``, fitted by ``flash_attn/fit.py``; its provenance and held-out
error are what ``tiles --explain`` prints). Elsewhere (sm_80, sm_86, sm_89, sm_90 without the ``a``) PATH 0's: BM 64
or 128 (WARPS = BM / 16: each warp owns 16 query rows), BN 32 / 64 / 128, STAGES 1 / 2 / 3, ranked by the issue /
latency model below, **not calibrated**: two constants (MMA_SYNC_EFF, TILE_SYNC_KEYS: a KV tile's fixed cost in
keys' worth of mma time, which makes BN 128 beat BN 64 by the measured ~20 %) are fitted on the 20 PATH 0 rows of
bench/results/session10/flash_attn_path0_bench_h200_run2.json (``python -m smemtile.families.flash_attn.fit path0``:
in-sample rms 4.6 %), no shape was held out, the rest are estimates (the provenance says so and the ranking prints no
expected error). Its #1 at head dim 128 on the H200, 128x128 s2 w8, measured 0.94-0.985x FlashAttention-2 there
(the earlier #1, 128x64 s3: 0.78-0.82x).
Screened by the family's rules (shared memory against the opt-in limit) and a register estimate (> 255: ptxas would
spill).

Per KV tile of BN keys, one warp issues (counted from flash_attn.cu's loop):

    mma.sync      2 * HD * BN / 128          (S = Q K^T and O += P V, m16n8k16 each)
    ldmatrix.x4   2 * HD * BN / 256
    ALU           ~SOFTMAX_INSTR per S element a thread holds (BN / 2 of them: scale, max, subtract, sum, pack)
                  + HD / 2 (the O rescale) + TILE_INSTR (loop, barrier, copies' addresses)
    ex2 (MUFU)    BN / 2 per thread: a warp instruction occupies the scheduler's MUFU pipe MUFU_CYCLES cycles

A warp scheduler issues one instruction a cycle; one mma.sync.m16n8k16 keeps its tensor pipe busy MMA_CYCLES
cycles. The tile's tensor fraction is ``mma * MMA_CYCLES / max(mma * MMA_CYCLES, issued, ex2 * MUFU_CYCLES)``
(1.0 at head_dim 128 and BN >= 64; ~0.75 at head_dim 64: the softmax is a larger share). A block-tile's compute time
is its 4 * BM * BN * HD flops at the SM's tensor peak x MMA_SYNC_EFF (mma.sync's share of the dense peak the GPU
table gives) x that fraction x the warp factor ``w / (w + WARP_HIDE)`` (w: resident warps per scheduler: one warp
stalls on its own softmax chain), or, when longer, its shared-memory traffic at SMEM_BYTES_PER_CLK: every warp
reads the whole K and V tile by ldmatrix (16 query rows per warp: 16 flops per byte read, so the reads alone take
half the dense tensor peak's time) and the copies write them once. The KV copies' latency LOAD_LATENCY_S is hidden by the STAGES - 1 tiles in flight and by
the other blocks on the SM: per tile ``max(b * t1, t1 + max(0, latency - (STAGES - 1) * b * t1))`` (t1: the
block-tile with the SM to itself, b blocks per SM). The blocks are list-scheduled onto
SMs x blocks_per_sm slots: the makespan is max(total tiles / slots, the longest block) (causal blocks run longest
first). DRAM: q, k, v, o and lse once; L2: every block's K and V tiles. The parts combine by the GEMM model's rule
(the binding part + OVERLAP x the others + the launch).

For scale only (not a calibration: another kernel): torch's FlashAttention-2 backend, the same mma.sync schedule,
ran 324-354 TFLOP/s at the bench shapes on this H200 (bf16, head_dim 128;
bench/results/session10/sdpa_backends_h200_run1.jsonl); the model's #1 predicts 310-321 there.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from smemtile.errors import SpecError
from smemtile.families.base import Candidate, KernelConfig
from smemtile.families.tile_model import (
    ModelOption,
    Prediction,
    Ranked,
    Ranking,
    Rejection,
    SizesModel,
    TieRule,
)
from smemtile.model.arch import Arch

SOURCE = "smemtile/families/flash_attn/tiles.py"
PARAMS = ("BM", "BN", "STAGES", "WARPS", "PATH", "OVERLAP", "PERSISTENT")
BMS, BNS, STAGES = (64, 128), (32, 64, 128), (1, 2, 3)

# estimates, not fitted (see the module text)
MMA_CYCLES = 4  # issue cycles one mma.sync.m16n8k16 occupies a scheduler's tensor pipe (sm_80 / sm_90)
MMA_SYNC_EFF = (
    0.81  # mma.sync's attainable share of the dense tensor peak (sm_90's table peak is wgmma's): fitted
)
SOFTMAX_INSTR = 6  # ALU instructions per S element per thread
TILE_INSTR = 24  # per KV tile per warp: loop, barrier, copy addresses, mask test
TILE_SYNC_KEYS = (
    34  # a KV tile's fixed cost (waits, barriers, the O rescale) in keys' worth of mma time: fitted
)
MUFU_CYCLES = 8  # a warp's ex2.approx on the MUFU pipe (16 results a clock per SM: 4 per scheduler)
WARP_HIDE = 0.35  # w / (w + WARP_HIDE): one resident warp per scheduler reaches ~74 % of its issue rate
SMEM_BYTES_PER_CLK = 128  # shared-memory bandwidth of an SM (one 128-byte wavefront a clock)
LOAD_LATENCY_S = 0.6e-6  # a KV tile's cp.async from L2 / DRAM until wait_group returns
REG_BASE = 40  # registers besides the fragments and accumulators (addresses, m, l, indices)
OVERLAP = 0.15  # the GEMM model's share of the non-binding parts that does not overlap
LAUNCH_S = 4e-6


def registers(hd: int, bn: int) -> int:
    """Registers per thread: Q fragments (HD/4), the O accumulator (HD/2), S (BN/2) and its 16-bit copy P (BN/4),
    + REG_BASE (ptxas 13.0, sm_90: 174 at HD 128 / BN 64, 246 at HD 128 / BN 128, 127 at HD 64 / BN 64)."""
    return hd // 4 + hd // 2 + bn // 2 + bn // 4 + REG_BASE


def label(p: dict) -> str:
    if p.get("PATH") == 1:
        pers = " persistent" if p.get("PERSISTENT") else ""
        return f"p1 {p['BM']}x{p['BN']} s{p['STAGES']} o{p['OVERLAP']}{pers}"
    return f"{p['BM']}x{p['BN']} s{p['STAGES']} w{p['WARPS']}"


@dataclass(frozen=True)
class FaTile:
    bm: int
    bn: int
    stages: int
    path: int = 0
    overlap: int = 1
    persistent: int = 0

    def params(self) -> dict:
        return {
            "BM": self.bm,
            "BN": self.bn,
            "STAGES": self.stages,
            "WARPS": self.bm // 16,
            "PATH": self.path,
            "OVERLAP": self.overlap,
            "PERSISTENT": self.persistent,
        }


@dataclass(frozen=True)
class FaScored:
    """One ranked flash_attn configuration as ``tiles --family`` prints it."""

    params: tuple  # ((name, value), ...) of PARAMS
    label: str
    threads: int
    registers: int
    blocks_per_sm: int
    smem_bytes: int
    time_us: float
    tflops: float  # visible (query, key) pairs x 4 x head_dim / predicted time
    gbps: float  # q, k, v, o bytes / predicted time
    tensor_fraction: float  # the tile's mma share of its issue (module text)
    bound: str
    copy_ratio: float | None = None
    calibrated: bool = False
    transferred: bool = False  # PATH 1 on another sm_90a GPU: the H200's per-SM rates
    measured: bool = False
    rank: int = 0
    reason: str = ""

    def params_dict(self) -> dict:
        return dict(self.params)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["params"] = self.params_dict()
        return d


def tensor_fraction(hd: int, bn: int) -> float:
    mma = 2 * hd * bn / 128
    ldsm = 2 * hd * bn / 256
    issued = mma + ldsm + SOFTMAX_INSTR * bn / 2 + hd / 2 + TILE_INSTR
    mufu = bn / 2 * MUFU_CYCLES
    tensor = mma * MMA_CYCLES
    return tensor / max(tensor, issued, mufu)


class FlashAttnTileModel(SizesModel):
    """flash_attn's TileModel: (BM, BN, STAGES) of PATH 0, screened by the family's rules and a register
    estimate, predicted by the issue / latency / wave model of the module text (not calibrated)."""

    options = (
        ModelOption("batch", "--batch", "flash_attn: batch."),
        ModelOption("heads", "--heads", "flash_attn: attention heads."),
        ModelOption(
            "seq_q", "--seq", "flash_attn: query sequence length (and the key length unless --seq-kv)."
        ),
        ModelOption(
            "seq_kv", "--seq-kv", "flash_attn: key / value sequence length (default --seq).", required=False
        ),
        ModelOption("head_dim", "--head-dim", "flash_attn: head dimension, 64 or 128.", (64, 128)),
        ModelOption("causal", "--causal", "flash_attn: 1 for the causal mask (default 0).", (0, 1), False),
    )
    tiles_examples = (
        "smemtile tiles --family flash_attn --batch 4 --heads 32 --seq 8192 --head-dim 128 --dtype bf16 --arch sm_90a "
        "--top 3",
    )
    tie_rule = TieRule(
        0.01,
        "bucket",
        "ties (within 1 % predicted) go to less shared memory (fewer stages: on the H200 2 stages measured as fast "
        "as 3 or 4 at BN 128 on both paths), then, on PATH 1, one CTA per item",
    )

    def __init__(self, fam=None):
        self.fam = fam
        self.problem: dict = {}
        self.arch = None
        self.gpu = None
        self._path1_used = False

    # ---- the protocol --------------------------------------------------------------------------------------
    def space(self, problem: dict, arch) -> list:
        from smemtile.model.arch import get_arch

        fam = self.fam
        a = arch if isinstance(arch, Arch) else get_arch(arch)
        from smemtile.families.base import ranked_problem

        self.problem = ranked_problem(fam, problem)
        self.arch = a
        if a.cc < (8, 0):
            raise SpecError(
                f"flash_attn needs sm_80 or newer (cp.async, bf16 mma.sync); {a.name} has neither",
                key="--arch",
            )
        hd = fam.problem_ints(self.problem)["head_dim"]
        if hd not in (64, 128):
            raise SpecError(
                f"head_dim {hd} is not supported: the kernel is built for 64 and 128", key="--head-dim"
            )
        if a.lacks("wgmma") is None:  # sm_90a: PATH 1 (flash_attn_wgmma; hopper.py's part of the model)
            from smemtile.families.flash_attn import hopper

            return [
                FaTile(hopper.BM, bn, st, 1, ov)
                for bn in hopper.BNS
                for st in hopper.STAGES
                for ov in hopper.OVERLAPS
            ] + [FaTile(hopper.BM, bn, st, 1, ov, 1) for bn, st, ov in hopper.PERSISTENT_KEYS]
        return [FaTile(bm, bn, st) for bm in BMS for bn in BNS for st in STAGES]

    def screen(self, cand) -> Rejection | None:
        from smemtile.families import configure

        p = cand.params()
        hd = self.fam.problem_ints(self.problem)["head_dim"]
        try:
            cfg = configure(self.fam, {**p, **self.problem}, {}, self.arch, check=False)
            bad = self.fam.problems(cfg, accesses=False)
        except SpecError as e:
            bad = [str(e)]
        if bad:
            kind = "shared_memory" if "shared memory" in bad[0] else "rules"
            return self._reject(p, kind, f"flash_attn: {bad[0]}")
        regs = registers(hd, cand.bn)
        if cand.path == 0 and regs > 255:
            return self._reject(
                p,
                "spills",
                f"flash_attn: ~{regs} registers per thread at head_dim {hd}, BN {cand.bn} (255 cap)",
            )
        return None

    @staticmethod
    def _reject(p: dict, kind: str, reason: str) -> Rejection:
        return Rejection(kind, reason, {"params": p, "label": label(p), "kind": kind, "reason": reason})

    def predict(self, cand, gpu):
        from smemtile.families import configure
        from smemtile.model.occupancy import occupancy

        fam, p = self.fam, cand.params()
        q = fam.problem_ints(self.problem)
        if cand.path == 1:
            return self._predict_path1(cand, gpu, q)
        hd, bm, bn = q["head_dim"], cand.bm, cand.bn
        cfg = configure(fam, {**p, **self.problem}, {}, self.arch, check=False)
        threads, smem = fam.threads(p), fam.smem_bytes(cfg)
        regs = registers(hd, bn)
        occ = occupancy(self.arch, threads, regs, 0, smem)
        bpsm = occ.active_blocks
        if bpsm < 1:
            return self._reject(p, "occupancy", f"flash_attn: no block fits an SM ({occ.limiter})")
        g = gpu
        peak_sm = g.peak(self.problem["dtype"]) * 1e12 / g.sms
        frac = tensor_fraction(hd, bn)
        w = bpsm * threads / 32 / 4  # resident warps per scheduler
        eff = MMA_SYNC_EFF * frac * w / (w + WARP_HIDE)
        # one block-tile with the SM to itself: its mma time, or its shared-memory traffic (every warp ldmatrix's
        # the whole K and V tile; the copies write them once) at SMEM_BYTES_PER_CLK, whichever is longer
        t_mma = 4.0 * bm * (bn + TILE_SYNC_KEYS) * hd / (peak_sm * eff)
        smem_tile = (threads // 32 + 1) * 2 * bn * hd * 2
        t_smem = smem_tile / (SMEM_BYTES_PER_CLK * g.clock_ghz * 1e9)
        t1 = max(t_mma, t_smem)
        # per block while bpsm blocks share the SM: its tensor share, or its own tile and the part of the copy's
        # latency that its STAGES - 1 tiles in flight (at the shared rate) do not cover
        t_c = bpsm * t1
        t_tile = max(t_c, t1 + max(0.0, LOAD_LATENCY_S - (cand.stages - 1) * t_c))
        rows = -(-q["seq_q"] // bm)
        per_row = [
            -(-(min(q["seq_kv"], (i + 1) * bm) if q["causal"] else q["seq_kv"]) // bn) for i in range(rows)
        ]
        bh = q["batch"] * q["heads"]
        total = sum(per_row) * bh
        slots = g.sms * bpsm
        makespan_tiles = max(total / slots, max(per_row))
        if not q["causal"]:
            makespan_tiles = math.ceil(rows * bh / slots) * per_row[0]
        compute = makespan_tiles * t_tile
        item = 2
        nbytes = (
            item * hd * q["heads"] * q["batch"] * (2 * q["seq_q"] + 2 * q["seq_kv"]) + 4 * bh * q["seq_q"]
        )
        l2 = total * bn * hd * item * 2 / (g.l2_gbps * 1e9)
        parts = {"compute": compute, "dram": nbytes / (g.dram_gbps * 1e9), "l2": l2}
        bound = max(parts, key=parts.get)
        t = parts[bound] + OVERLAP * (sum(parts.values()) - parts[bound]) + LAUNCH_S
        if bound == "compute" and t_tile > t_c * 1.001:
            bound = "latency"
        elif bound == "compute" and t_smem > t_mma:
            bound = "shared-memory"
        flops = fam.work(self.problem)[1]
        s = FaScored(
            tuple((k, p[k]) for k in PARAMS),
            label(p),
            threads,
            regs,
            bpsm,
            smem,
            t * 1e6,
            flops / t / 1e12,
            nbytes / t / 1e9,
            frac,
            bound,
        )
        return Prediction(t, tie=(smem, label(p)), terms={"bound": bound, "tensor": frac}, result=s)

    def _predict_path1(self, cand, gpu, q):
        """PATH 1 (sm_90a): hopper.predict_time at the H200 calibration's rate and item cost for the configuration
        (flash_attn_h200.json) on the H200, else an estimate from the GPU table's peak."""
        from smemtile.families import configure
        from smemtile.families.flash_attn import hopper

        fam, p = self.fam, cand.params()
        if cand.persistent:  # the persistent grid keeps one CTA on each of this GPU's SMs
            p["SMS"] = gpu.sms
        cfg = configure(fam, {**p, **self.problem}, {}, self.arch, check=False)
        # the H200's rates: measured there; on another sm_90a GPU (the same SM: H100) they order the candidates
        cal = self.path1_cal
        own = cal is not None and gpu.key == cal.get("gpu_key")
        self._path1_used = own
        t, fitted = hopper.predict_time({**q, "dtype": self.problem["dtype"]}, cand, gpu, cal)
        measured = fitted and own
        t += LAUNCH_S
        flops = fam.work(self.problem)[1]
        item = 2
        nbytes = item * q["head_dim"] * q["heads"] * q["batch"] * (2 * q["seq_q"] + 2 * q["seq_kv"])
        s = FaScored(
            tuple((k, p[k]) for k in PARAMS) + ((("SMS", p["SMS"]),) if cand.persistent else ()),
            label(p),
            hopper.THREADS,
            168,
            1,
            fam.smem_bytes(cfg),
            t * 1e6,
            flops / t / 1e12,
            nbytes / t / 1e9,
            1.0,
            "compute",
            calibrated=measured,
            measured=measured,
            transferred=fitted and not own,
        )
        return Prediction(
            t,
            tie=(cand.stages, cand.persistent, label(p)),
            terms={"bound": "compute", "tensor": 1.0},
            result=s,
        )

    @property
    def path1_cal(self) -> dict | None:
        from smemtile.families.flash_attn import hopper

        return hopper.load_calibration()  # read once per process

    def explain(self, entry: Ranked, top: Ranked, ranked) -> str:
        s, t = entry.pred.result, top.pred.result
        why = (
            f"{s.bound}-bound, tensor share {s.tensor_fraction:.2f}, {s.blocks_per_sm} block(s)/SM "
            "(uncalibrated issue/latency/wave model)"
        )
        if dict(s.params).get("PATH") == 1:
            why = (
                "PATH 1 (TMA + wgmma, sm_90a): KV loop rate and item cost fitted on the H200 (flash_attn_h200.json)"
                if s.calibrated
                else "PATH 1 (TMA + wgmma, sm_90a): the H200's fitted per-SM KV-loop rates and item costs (the same "
                "SM), not measured on this GPU: they order the candidates; the times are not a promise"
                if s.transferred
                else "PATH 1 (TMA + wgmma, sm_90a): KV loop at an estimated share of this GPU's table peak; "
                "uncalibrated"
            )
        if s is t:
            return f"best: {s.tflops:.1f} TFLOP/s predicted; {why}"
        return f"{s.time_us / t.time_us - 1.0:+.1%} vs #1: {s.tflops:.1f} TFLOP/s; {why}"

    def provenance(self) -> dict:
        cal = self.path1_cal
        if self.arch is not None and self.arch.lacks("wgmma") is None and cal:
            from smemtile.families.flash_attn import hopper

            sources = {
                "source": "smemtile/families/flash_attn/hopper.py",
                "file": f"smemtile/families/flash_attn/{hopper.DATA_FILE}",
                "date": cal.get("date"),
                "runs": cal.get("run"),
                "commit": cal.get("commit"),
            }
            held = cal.get("held_out_median_error")
            if not self._path1_used:  # another sm_90a GPU: the H200's per-SM rates order the candidates
                return {
                    "model": "PATH 1 (flash_attn/hopper.py schedule_time) at the H200 calibration's per-SM KV-loop "
                    "rates and item costs, applied to this GPU's SM count (the same SM); not measured on this GPU",
                    **sources,
                    "gpu": f"none measured here ({cal.get('gpu')}'s rates)",
                    "calibrated": False,
                    "expected_error": None,
                    "expected_error_of": f"none on this GPU (the H200's held-out median: {held})",
                }
            return {
                "model": "PATH 1: items (q tile, batch * head) list-scheduled one CTA per SM (or round-robin on a "
                "persistent grid), each n_kv tiles x 4 BM BN HD flops at the configuration's fitted KV-loop rate + "
                "a fitted per-item cost (flash_attn/hopper.py schedule_time)",
                **sources,
                "gpu": cal.get("gpu"),
                "calibrated": True,
                "expected_error": held,
                "expected_error_of": (
                    "median |time error|, held out: " + ", ".join(cal.get("held_out_shapes", []))
                    if held is not None
                    else "none yet: the held-out shapes are not scored (median |time error| on the fit rows: "
                    f"{cal['fit']['median_abs_error']:.2%})"
                ),
            }
        return {
            "model": "issue / latency / wave model of flash_attn.cu's PATH 0 loop (mma.sync, ex2, softmax ALU "
            "per KV tile); not calibrated: MMA_SYNC_EFF and TILE_SYNC_KEYS fitted on 20 H200 rows (4 shapes, "
            "head dim 128; in-sample rms 4.6 %, flash_attn/fit.py path0), no held-out shapes measured, the other "
            f"constants estimates ({SOURCE})",
            "source": SOURCE,
            "gpu": "none (uncalibrated estimates)",
            "date": None,
            "runs": "none (no flash_attn run recorded yet)",
            "commit": None,
            "calibrated": False,
            "expected_error": None,
            "expected_error_of": "none measured: no flash_attn run is recorded yet",
        }

    # ---- what the commands built on the ranking ask ----------------------------------------------------------
    @staticmethod
    def scored(entry: Ranked) -> FaScored:
        return replace(entry.pred.result, rank=entry.rank, reason=entry.reason)

    def configure(self, entry: Ranked) -> KernelConfig:
        from smemtile.families import configure

        return configure(self.fam, {**self.scored(entry).params_dict(), **self.problem}, {}, self.arch)

    def ranker(self, ranking: Ranking, rerank=None) -> Ranker:
        return Ranker(self, ranking)


class Ranker:
    """A flash_attn ranking for one problem as ``tune`` (``top``, calling it with a configuration) and ``tiles
    --family`` (``ranked``, ``rejections``, ``provenance``) read it; ``generate`` without a tile uses #1."""

    def __init__(self, model: FlashAttnTileModel, ranking: Ranking):
        self.fam, self.model = model.fam, model
        self.problem = dict(model.problem)
        self.ranked = [model.scored(e) for e in ranking.ranked]
        self._rejected = [r.rejection.result for r in ranking.rejected]
        self._provenance = dict(ranking.provenance)

    def top(self, k: int) -> list[dict]:
        return [s.params_dict() for s in self.ranked[:k]]

    def __call__(self, params: dict, src: str) -> Candidate:
        full = {**self.fam.defaults(), **params}
        if full.get("PATH") == 1:
            full["BM"], full["WARPS"] = 128, 8
        elif "BM" in params and "WARPS" not in params:
            full["WARPS"] = full["BM"] // 16
        want = {
            k: full[k] for k in PARAMS
        }  # SMS (the GPU's SM count on a persistent tile) is not the tile's shape
        s = next((s for s in self.ranked if {k: v for k, v in s.params if k != "SMS"} == want), None)
        if s is None:
            return Candidate(label(full), params, src, None, None, "outside the model's ranking")
        return Candidate(label(full), params, src, s.rank, s.tflops, s.reason)

    def rejections(self) -> list[dict]:
        return list(self._rejected)

    def provenance(self) -> dict:
        return dict(self._provenance)
