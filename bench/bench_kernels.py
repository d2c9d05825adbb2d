"""The fair benchmark of the generated kernels (issue 20): SGEMM against cuBLAS, the calibration sweep of the tile
model, and the standard Triton matmul on the configurations `smemtile tiles --format triton` exports (timed like
the SGEMM: alternating rounds with torch.matmul, the same flush, median).

Every SGEMM configuration is built and launched exactly as ``smemtile verify`` does it: the family's
configuration (``smemtile.families.configure``, the fix search's layouts), the generated body compiled by NVRTC
for the device's arch (``smemtile.gpu.run.LoadedKernel``), launched step by step through the family's launch
plan (split K's C = beta*C step included, inside the timed region). The only difference to ``verify``: the
plan's arrays are torch tensors (``bind``), so that the reference reads the very same A and B. The generated
body is taken for one canonical problem (4096^3): it differs between problems only by a comment of the host
helper, and one cubin per configuration serves every shape.

Correctness first: each configuration runs the family's small test sizes against numpy float64
(``LoadedKernel.check``, poisoned output), and at every timed size its output is compared with torch float64
on the GPU (max |C - ref| / max |ref| <= the family's tolerance, every element written).

Reference: cuBLAS SGEMM (TF32 off) through torch.matmul and through ``cublasSgemm_v2`` called directly
(ctypes on torch's libcublas, default math mode); the faster of the two is the reference. Timing: alternating
rounds (ours..., torch, cublas; the order reversed every round), >= 15 rounds, a 512 MiB memset before every
timed call (outside the events), CUDA events around the call alone; median and spread = (p90 - p10) / median.

    python -m bench.bench_kernels build                       # CPU: NVRTC cubins of every config (carry .cache)
    python -m bench.bench_kernels run --out $OUT --steps bench,sweep,triton   # on the GPU
    python -m bench.bench_kernels list                        # the cases, shapes and configurations (no GPU)
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import glob
import json
import math
import os
import statistics
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from bench.timing import environment, stats, tee_log, time_rounds  # noqa: E402

FLUSH_BYTES = 512 << 20
CANONICAL = {"M": 4096, "N": 4096, "K": 4096}
CANONICAL_RAGGED = (
    4095,
    4097,
    1023,
)  # any K or N not a multiple of 4 renders the same text (RAGGED, session 4)
CACHE = ROOT / ".cache" / "tiles_nvrtc"  # carried to the GPU machine (ignored by git)
A_PAD = 4  # the fix search's As layout for every sgemm configuration here (checked by `build`)


# ---- what is measured ---------------------------------------------------------------------------------------------
def cfg_label(p: dict) -> str:
    z = f" sk{p['SPLIT_K']}" if p.get("SPLIT_K", 1) > 1 else ""
    rp = f" rp{p['REPACK']}" if p.get("REPACK") else ""  # REPACK forced on (1) or off (2); absent: auto
    return (
        f"{p['BM']}x{p['BN']}x{p['BK']} {p['TM']}x{p['TN']} s{p['STAGES']} mb{p['MIN_BLOCKS']}"
        f"{' av0' if p.get('A_VEC', 1) == 0 else ''}{z}{rp}"
    )


def _c(bm, bn, bk, tm, tn, st, mb, sk=1, **kw) -> dict:
    d = {"BM": bm, "BN": bn, "BK": bk, "TM": tm, "TN": tn, "STAGES": st, "MIN_BLOCKS": mb, **kw}
    if sk > 1:
        d["SPLIT_K"] = sk
    return d


# The plans live in the family's task.yaml (smemtile/families/sgemm/task.yaml, also run by ``python -m bench.run
# sgemm PLAN``): the calibration pool (one cubin each, measured on every shape where it is sensible, see
# applicable()) and the shapes of the calibration sweep: the model's constants are fitted on FIT only; HELD_OUT is
# never used to fit.
def _task() -> dict:
    from smemtile.families import FAMILIES
    from smemtile.families.task import load

    return load(type(FAMILIES["sgemm"]).__module__)


def _shapes(sizes: list[dict]) -> list[tuple[int, int, int]]:
    return [(s["M"], s["N"], s["K"]) for s in sizes]


_PLANS = _task()["plans"]
POOL: list[dict] = [c["params"] for c in _PLANS["sweep"]["groups"][0]["configs"]]
# SGEMM variants for the 4096^3 / 8192^3 targets (run in the fair bench next to the default and tiles' pick; run 2,
# run 1 measured 11 others: bench/results/h200_issue20_run1.json)
VARIANTS: list[dict] = [c["params"] for c in _PLANS["bench"]["groups"][1]["configs"]]
FIT = _shapes(_PLANS["sweep"]["groups"][0]["shapes"])

# Session 5: unaligned shapes never measured before, swept after REPACK's constants were frozen (one skinny M below
# REPACK's threshold, where the unaligned loops run)
HELD_OUT_REPACK = [
    (3071, 5119, 2045),
    (5001, 2999, 4093),
    (1279, 1283, 1285),
    (511, 6143, 3071),
    (192, 8191, 4093),
    (6143, 6141, 3069),
    (2045, 2043, 8191),
]
HELD_OUT = [s for s in _shapes(_task()["heldout"]) if s not in HELD_OUT_REPACK]

# The fair bench's cases: the targets of issue 20.
CASES = [
    ("square 4096", (4096, 4096, 4096)),
    ("square 8192", (8192, 8192, 8192)),
    ("ragged 4095x4097x1023", (4095, 4097, 1023)),
    ("ragged 2999x3001x3003", (2999, 3001, 3003)),
    ("skinny M 64x8192x4096", (64, 8192, 4096)),
    ("skinny N 8192x64x4096", (8192, 64, 4096)),
    ("deep K 1024x1024x32768", (1024, 1024, 32768)),
]


CASE_EXTRAS = {
    "skinny N 8192x64x4096": [_c(64, 64, 16, 4, 8, 3, 4, 4)],
    "ragged 4095x4097x1023": [_c(128, 128, 8, 8, 16, 3, 2)],
}


def applicable(p: dict, shape: tuple[int, int, int], sms: int = 132) -> bool:
    """Whether the sweep measures configuration ``p`` on ``shape``: the tile overhangs M and N by at most half,
    and split K only where the grid without it is under two blocks per SM with >= 8 K steps per slice."""
    m, n, k = shape
    for size, tile in ((m, p["BM"]), (n, p["BN"])):
        if tile > 32 and 1 - size / (math.ceil(size / tile) * tile) > 0.5:
            return False
    z = p.get("SPLIT_K", 1)
    if z > 1:
        tiles = math.ceil(m / p["BM"]) * math.ceil(n / p["BN"])
        if tiles >= 2 * sms or k < z * p["BK"] * 8:
            return False
    return True


# ---- configurations (CPU) -------------------------------------------------------------------------------------
def configure_sgemm(params: dict, shape: tuple[int, int, int], arch: str = "sm_90"):
    from smemtile.families import configure

    m, n, k = shape
    return configure("sgemm", {**params, "M": m, "N": n, "K": k}, {"As": {"pad": A_PAD}}, arch)


_SOURCES: dict[tuple, str] = {}


def canonical_shape(shape=None) -> tuple[int, int, int]:
    """The problem a configuration's text is rendered for: the generated kernel depends on the shape only
    through whether K or N is a multiple of 4 and what the family's auto parameters resolve to there (RAGGED,
    REPACK: pinned by :func:`canonical_config`), so one aligned and one unaligned canonical problem stand for
    every shape."""
    return (
        CANONICAL_RAGGED
        if shape is not None and (shape[1] % 4 or shape[2] % 4)
        else tuple(CANONICAL.values())
    )


def canonical_config(params: dict, arch: str = "sm_90", shape=None):
    """``params`` at ``shape``'s canonical problem, the family's auto parameters (RAGGED, REPACK) pinned to what
    they resolve to at ``shape`` itself."""
    from smemtile.families import FAMILIES

    cfg = configure_sgemm(params, shape or tuple(CANONICAL.values()), arch)
    return configure_sgemm({**params, **FAMILIES["sgemm"].auto_values(cfg)}, canonical_shape(shape), arch)


def canonical_source(params: dict, arch: str = "sm_90", shape=None) -> str:
    """The generated body of :func:`canonical_config` (one cubin per configuration, alignment class and resolved
    autos), always rendered from this tree: the NVRTC cache is keyed by the source text, so a kernel change can
    never be timed with a cubin of the old text (session 3 found a `sources.json` read back here doing exactly
    that)."""
    from smemtile.codegen.render import body

    cfg = canonical_config(params, arch, shape)
    key = (json.dumps(cfg.params, sort_keys=True), arch, canonical_shape(shape))
    if key not in _SOURCES:
        _SOURCES[key] = body(cfg)
    return _SOURCES[key]


def tiles_pick(shape: tuple[int, int, int]) -> dict:
    """``smemtile tiles M N K --top 1``'s configuration (the sgemm family's parameters)."""
    from smemtile.families.sgemm.tiles import params_of
    from smemtile.pipeline.tiles import recommend

    return params_of(recommend(*shape, "f32", "sm_90").ranked[0].cfg)


def default_params() -> dict:
    from smemtile.families import FAMILIES

    fam = FAMILIES["sgemm"]
    d = fam.defaults()
    return {k: d[k] for k in ("BM", "BN", "BK", "TM", "TN", "STAGES", "MIN_BLOCKS")}


def sample_params() -> dict:
    """The tile of samples/sgemm_default.yaml (with the family's derived MIN_BLOCKS)."""
    from smemtile.pipeline.specs import load

    p = load(ROOT / "samples" / "sgemm_default.yaml").config.params
    return {k: p[k] for k in ("BM", "BN", "BK", "TM", "TN", "STAGES", "MIN_BLOCKS")}


def generate_pick(shape: tuple[int, int, int]) -> dict:
    """What ``smemtile generate`` builds for a ``kernel:`` spec of this problem without a tile."""
    from smemtile.pipeline.specs import resolve

    cfg = resolve(
        {"arch": "sm_90", "kernel": {"family": "sgemm", "M": shape[0], "N": shape[1], "K": shape[2]}}
    )
    p = cfg.config.params
    out = {k: p[k] for k in ("BM", "BN", "BK", "TM", "TN", "STAGES", "MIN_BLOCKS")}
    if p.get("SPLIT_K", 1) > 1:
        out["SPLIT_K"] = p["SPLIT_K"]
    return out


def all_configs(extra_files: list[Path] = ()) -> list[dict]:
    """Every configuration the GPU run may need: the pool, the variants, the default, tiles' and generate's
    picks for every shape, and those listed in ``extra_files`` (JSON lists of parameter dicts)."""
    seen, out = set(), []
    cands = [*POOL, *VARIANTS, default_params(), sample_params()]
    for _, shape in CASES:
        cands += [tiles_pick(shape), generate_pick(shape)]
    for f in extra_files:
        cands += [e.get("params", e) for e in json.loads(Path(f).read_text())]
    for p in cands:
        key = cfg_label(p)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


BUILD_SHAPES = (None, CANONICAL_RAGGED, (1000, 1001, 333), (2047, 4093, 2050))  # aligned; unaligned K and N
# (REPACK on), small (REPACK off); N alone (RAGGED resolves by K too)


def _build_one(params: dict, shapes=BUILD_SHAPES) -> tuple[str, str, dict]:
    """The texts of a configuration for ``shapes`` compiled (one per alignment class and resolved autos)."""
    from smemtile.gpu.run import compile_config

    srcs, what = {}, []
    try:
        for shape in shapes:
            src = canonical_source(params, shape=shape)
            if src in srcs.values():
                continue
            cfg = canonical_config(params, shape=shape)
            srcs[(canonical_shape(shape), json.dumps(cfg.params, sort_keys=True))] = src
            r = compile_config(cfg, source=src)
            res = next(iter(r.resources.values()))
            what.append(f"{res.registers} regs, {res.spills} B spilled")
        return cfg_label(params), " / ".join(dict.fromkeys(what)), srcs
    except Exception as e:  # report, never abort the batch
        return cfg_label(params), f"FAILED {type(e).__name__}: {str(e).splitlines()[0]}", srcs


def cmd_build(args) -> None:
    """Compile every configuration into the NVRTC cache (CPU; run with the device's NVRTC, see NOTES) and check
    that the fix search's layouts are the ones used here."""
    from concurrent.futures import ProcessPoolExecutor

    from smemtile.gpu.nvrtc import nvrtc_version
    from smemtile.pipeline.fixes import variants
    from smemtile.pipeline.specs import resolve

    os.environ["SMEMTILE_CACHE_DIR"] = str(CACHE)
    cfgs = all_configs(args.extra)
    jobs = [(p, BUILD_SHAPES) for p in cfgs]
    if args.shapes:  # only what a run of these sweep shapes and the fair bench needs (one text per class)
        from smemtile.families import FAMILIES

        small = [(t["M"], t["N"], t["K"]) for t in FAMILIES["sgemm"].test_sizes]
        sweep = [tuple(map(int, x.split("x"))) for x in args.shapes]
        extra = [e.get("params", e) for f in args.extra for e in json.loads(Path(f).read_text())]
        picks = {cfg_label(p) for _, shape in CASES for p in (tiles_pick(shape), generate_pick(shape))}
        picks |= {cfg_label(p) for p in (*VARIANTS, default_params(), sample_params(), *extra)}
        jobs = []
        for p in cfgs:
            shapes = [s for s in sweep if applicable(p, s) or cfg_label(p) in picks]
            if cfg_label(p) in picks:
                shapes += [None, *small, *(shape for _, shape in CASES)]
            if shapes:
                jobs.append((p, tuple(shapes)))
        cfgs = [p for p, _ in jobs]
    print(f"NVRTC {nvrtc_version()}: {len(cfgs)} configurations into {CACHE}", flush=True)
    for p in cfgs[: args.check_layouts]:
        doc = {
            "arch": "sm_90",
            "tile": {k: v for k, v in p.items() if k not in ("STAGES",)},
            "stages": p["STAGES"],
            "kernel": {"family": "sgemm", **CANONICAL},
        }
        lay = variants(resolve(doc))["fixed"].layouts
        got = {k: v.to_dict() for k, v in lay.items()}
        assert got == {"As": {"pad": A_PAD}, "Bs": {"pad": 0}}, (cfg_label(p), got)
    sources = {}
    with ProcessPoolExecutor(args.jobs) as ex:
        for label, what, srcs in ex.map(_build_one, *zip(*jobs, strict=True)):
            sources.update(
                {f"{label} @ {'x'.join(map(str, shape))} {pin}": src for (shape, pin), src in srcs.items()}
            )
            print(f"  {label:<36} {what}", flush=True)
    (CACHE / "sources.json").write_text(json.dumps(sources))  # a record of what was built; never read back
    if args.strip_ptx:  # the carried cache needs the cubins only
        for f in (CACHE / "nvrtc").glob("*.json"):
            doc = json.loads(f.read_text())
            if doc.get("ptx"):
                doc["ptx"] = ""
                f.write_text(json.dumps(doc))
    size = sum(f.stat().st_size for f in (CACHE / "nvrtc").glob("*.json"))
    print(f"cache: {size / 1e6:.1f} MB")


def cmd_list(args) -> None:
    print(f"pool: {len(POOL)} configurations; variants: {len(VARIANTS)}")
    for name, shapes in (("fit", FIT), ("held out", HELD_OUT)):
        for s in shapes:
            print(f"  {name:<8} {s}: {sum(applicable(p, s) for p in POOL)} pool configurations")
    for name, shape in CASES:
        print(
            f"  case {name}: tiles #1 {cfg_label(tiles_pick(shape))}; generate {cfg_label(generate_pick(shape))}"
        )


# ---- GPU side -------------------------------------------------------------------------------------------------
class Cublas:
    """``cublasSgemm_v2`` called directly (ctypes, torch's libcublas), default math mode (no TF32), null stream."""

    def __init__(self):
        import torch

        torch.matmul(torch.ones(8, 8, device="cuda"), torch.ones(8, 8, device="cuda"))  # loads libcublas
        names = ["libcublas.so.13", "libcublas.so.12", "libcublas.so"]
        roots = [os.path.dirname(os.path.dirname(torch.__file__))]
        for r in roots:
            names += glob.glob(os.path.join(r, "nvidia", "*", "lib", "libcublas.so*"))
        lib = None
        for n in names:
            try:
                lib = ctypes.CDLL(n)
                break
            except OSError:
                continue
        if lib is None:
            raise RuntimeError("libcublas not found")
        self.lib = lib
        self.handle = ctypes.c_void_p()
        assert lib.cublasCreate_v2(ctypes.byref(self.handle)) == 0
        assert lib.cublasSetMathMode(self.handle, 0) == 0  # CUBLAS_DEFAULT_MATH: no TF32
        assert lib.cublasSetStream_v2(self.handle, ctypes.c_void_p(0)) == 0
        lib.cublasSgemm_v2.argtypes = [
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_int,
        ]
        self.alpha, self.beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
        self.name = n

    def sgemm(self, a, b, c) -> None:
        """Row-major C[M,N] = A[M,K] @ B[K,N] as column-major C^T = B^T A^T."""
        m, k = a.shape
        n = b.shape[1]
        st = self.lib.cublasSgemm_v2(
            self.handle,
            0,
            0,
            n,
            m,
            k,
            ctypes.byref(self.alpha),
            b.data_ptr(),
            n,
            a.data_ptr(),
            k,
            ctypes.byref(self.beta),
            c.data_ptr(),
            n,
        )
        if st != 0:
            raise RuntimeError(f"cublasSgemm_v2 returned {st}")


def load(params: dict, shape, dev):
    from smemtile.gpu.run import LoadedKernel

    return LoadedKernel(
        configure_sgemm(params, shape, dev.arch_name), dev, source=canonical_source(params, shape=shape)
    )


class Problem:
    """A, B (random normal, fp32), C, the float64 reference on the GPU, for one shape."""

    def __init__(self, torch, shape, seed: int = 0, a=None, b=None):
        m, n, k = shape
        g = torch.Generator(device="cuda").manual_seed(seed)
        self.torch, self.shape = torch, shape
        # given A and B (e.g. views off a 16-byte boundary) are used as they are
        self.a = a if a is not None else torch.randn(m, k, device="cuda", generator=g)
        self.b = b if b is not None else torch.randn(k, n, device="cuda", generator=g)
        self.c = torch.empty(m, n, device="cuda")
        self.c2 = torch.empty(m, n, device="cuda")
        ref = self.a.double() @ self.b.double()
        self.scale = float(ref.abs().max())
        self.ref = ref

    def error(self, c) -> float:
        t = self.torch
        if not bool(t.isfinite(c).all()):
            return float("inf")
        return float((c.double() - self.ref).abs().max()) / self.scale

    def run(self, kern) -> float:
        """One launch of ``kern`` (a LoadedKernel) on A, B into C poisoned with NaN first; its error."""
        kern.bind({"A": self.a.data_ptr(), "B": self.b.data_ptr(), "C": self.c.data_ptr()})
        self.c.fill_(float("nan"))
        kern.launch()
        self.torch.cuda.synchronize()
        return self.error(self.c)

    def free(self) -> None:
        del self.a, self.b, self.c, self.c2, self.ref


_SMALL: dict[int, tuple] = {}


def small_checks(params: dict, dev, log) -> dict:
    """The family's test sizes (ragged, alpha/beta, K = 1) against numpy float64, as verify checks."""
    import numpy as np

    from smemtile.families import FAMILIES, configure
    from smemtile.gpu.run import LoadedKernel

    fam = FAMILIES["sgemm"]
    worst, n = 0.0, 0
    for size in fam.test_sizes:
        shape = (size["M"], size["N"], size["K"])
        cfg = configure("sgemm", {**params, **size}, {"As": {"pad": A_PAD}}, dev.arch_name)
        k = LoadedKernel(cfg, dev, source=canonical_source(params, shape=shape))
        try:
            if n not in _SMALL:  # fresh random inputs per size, the float64 reference once
                inputs = fam.make_inputs(cfg, np.random.default_rng(100 + n))
                _SMALL[n] = (inputs, fam.reference(cfg, inputs))
            res = k.check(dict(_SMALL[n][0]), _SMALL[n][1])
        finally:
            k.close()
        n += 1
        worst = max(worst, res.max_rel_error)
        if not res.correct:
            log(f"    small check {shape} FAILED: {res.mismatch.describe() if res.mismatch else res}")
            return {"correct": False, "sizes": n, "max_rel_error": worst}
    return {"correct": True, "sizes": n, "max_rel_error": worst}


def step_bench(ctx, rounds: int, variants: bool, log) -> list[dict]:
    torch, dev, flush, cublas = ctx["torch"], ctx["dev"], ctx["flush"], ctx["cublas"]
    from smemtile.families import FAMILIES

    tol = FAMILIES["sgemm"].tolerance
    entries = []
    checked: dict[str, dict] = {}
    for name, shape in CASES:
        m, n, k = shape
        flops = 2.0 * m * n * k
        picks = {"default": default_params(), "tiles #1": tiles_pick(shape), "generate": generate_pick(shape)}
        if shape[0] >= 2048 and shape[1] >= 2048:  # the shipped sample's tile (samples/sgemm_default.yaml)
            picks["sample"] = sample_params()
        ours: dict[str, dict] = {}
        for role, p in picks.items():
            ours.setdefault(cfg_label(p), {"params": p, "roles": []})["roles"].append(role)
        for p in CASE_EXTRAS.get(name, []):  # the best measured in the sweeps, where tiles' pick is not it
            ours.setdefault(cfg_label(p), {"params": p, "roles": []})["roles"].append("best swept")
        if variants and shape[0] >= 4096 and shape[1] >= 4096:
            for p in VARIANTS:
                ours.setdefault(cfg_label(p), {"params": p, "roles": []})["roles"].append("variant")
        prob = Problem(torch, shape)
        fns, meta = {}, {}
        for label, o in ours.items():
            try:
                if label not in checked:
                    checked[label] = small_checks(o["params"], dev, log)
                kern = load(o["params"], shape, dev)
                err = prob.run(kern)
                meta[label] = {
                    "registers": kern.registers,
                    "spill_bytes": kern.local_bytes,
                    "blocks_per_sm": kern.driver_blocks,
                    "threads": kern.threads,
                    "grid": list(kern.shape.grid),
                    "name_expression": kern.expr,
                    "rel_err_fp64": err,
                    "small_checks": checked[label],
                    "roles": o["roles"],
                    "params": o["params"],
                }
                if err <= tol and checked[label]["correct"]:
                    fns[label] = kern.launch
                    ctx["keep"].append(kern)
                else:
                    log(f"  {name} {label}: WRONG (err {err:.2e}); not timed")
            except Exception as e:
                meta[label] = {
                    "error": f"{type(e).__name__}: {e}",
                    "roles": o["roles"],
                    "params": o["params"],
                }
                log(f"  {name} {label}: FAILED {type(e).__name__}: {e}")
        refs = {}

        def torch_mm(p=prob):
            torch.matmul(p.a, p.b, out=p.c2)

        refs["torch.matmul"] = torch_mm
        if cublas is not None:

            def cublas_mm(p=prob):
                cublas.sgemm(p.a, p.b, p.c2)

            refs["cublasSgemm"] = cublas_mm
        ref_err = {}
        for rname, fn in refs.items():
            prob.c2.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            ref_err[rname] = prob.error(prob.c2)
        times = time_rounds({**fns, **refs}, torch, rounds, flush)
        st = {kk: stats(v) for kk, v in times.items()}
        best_ref = min(refs, key=lambda r: st[r]["median_ms"])
        ref_ms = st[best_ref]["median_ms"]
        for label in ours:
            e = {"case": name, "shape": list(shape), "config": label, **meta.get(label, {})}
            if label in st:
                e.update(
                    ours_ms=st[label]["median_ms"],
                    ours_tflops=flops / st[label]["median_ms"] / 1e9,
                    ours_spread=st[label]["spread"],
                    ours_stats=st[label],
                    reference=best_ref,
                    reference_ms=ref_ms,
                    reference_tflops=flops / ref_ms / 1e9,
                    reference_spread=st[best_ref]["spread"],
                    ratio=ref_ms / st[label]["median_ms"],
                )
            entries.append(e)
        entries.append(
            {
                "case": name,
                "shape": list(shape),
                "references": {
                    r: {**st[r], "tflops": flops / st[r]["median_ms"] / 1e9, "rel_err_fp64": ref_err[r]}
                    for r in refs
                },
            }
        )
        for kern in ctx["keep"]:
            kern.close()
        ctx["keep"].clear()
        prob.free()
        torch.cuda.empty_cache()
        rows = sorted(
            (e for e in entries if e.get("case") == name and "ratio" in e), key=lambda e: -e["ratio"]
        )
        for e in rows:
            log(
                f"  {name:<24} {e['config']:<34} {e['ours_tflops']:6.1f} vs {e['reference_tflops']:5.1f} "
                f"{e['ratio']:.3f}x ({','.join(e['roles'])}; spread {e['ours_spread']:.1%}/{e['reference_spread']:.1%})"
            )
    return entries


def time_quick(fn, torch, flush, runs: int) -> list[float]:
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(runs):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e))
    return out


def step_sweep(
    ctx, shapes: list[tuple[str, tuple]], pool: list[dict], log, deadline: float, extra: dict | None = None
) -> dict:
    """Every applicable pool configuration on every shape: checked against float64 at that size, then timed
    (1 warm-up, 5 runs, 3 for calls over 20 ms; the 512 MiB memset before each), with both references."""
    torch, dev, flush, cublas = ctx["torch"], ctx["dev"], ctx["flush"], ctx["cublas"]
    from smemtile.families import FAMILIES

    tol = FAMILIES["sgemm"].tolerance
    out = {}
    for role, shape in shapes:
        if time.time() > deadline:
            log(f"  sweep: out of time before {shape}")
            break
        m, n, k = shape
        flops = 2.0 * m * n * k
        prob = Problem(torch, shape, seed=1)
        rows = []
        for rname in ("torch.matmul", "cublasSgemm"):
            if rname == "cublasSgemm" and cublas is None:
                continue
            fn = (
                (lambda p=prob: torch.matmul(p.a, p.b, out=p.c2))
                if rname == "torch.matmul"
                else (lambda p=prob: cublas.sgemm(p.a, p.b, p.c2))
            )
            ts = time_quick(fn, torch, flush, 7)
            rows.append(
                {
                    "reference": rname,
                    "time_ms": statistics.median(ts),
                    "times": ts,
                    "tflops": flops / statistics.median(ts) / 1e9,
                }
            )
        mine, seen = [], set()
        for p in [*pool, *(extra or {}).get(tuple(shape), [])]:
            if cfg_label(p) not in seen:
                seen.add(cfg_label(p))
                mine.append(p)
        for p in mine:
            if p in pool and not applicable(p, shape, dev.sm_count):
                continue
            if time.time() > deadline:
                log(f"  sweep: out of time in {shape}")
                break
            row = {"config": cfg_label(p), "params": p}
            try:
                kern = load(p, shape, dev)
                try:
                    kern.bind({"A": prob.a.data_ptr(), "B": prob.b.data_ptr(), "C": prob.c.data_ptr()})
                    prob.c.fill_(float("nan"))
                    kern.launch()
                    torch.cuda.synchronize()
                    err = prob.error(prob.c)
                    row.update(
                        registers=kern.registers,
                        spill_bytes=kern.local_bytes,
                        blocks_per_sm=kern.driver_blocks,
                        threads=kern.threads,
                        rel_err_fp64=err,
                        correct=err <= tol,
                    )
                    if err <= tol:
                        first = time_quick(kern.launch, torch, flush, 1)[0]
                        ts = [first, *time_quick(kern.launch, torch, flush, 2 if first > 20 else 4)]
                        med = statistics.median(ts)
                        row.update(time_ms=med, times=ts, tflops=flops / med / 1e9)
                finally:
                    kern.close()
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
            rows.append(row)
        ok = sorted((r for r in rows if "tflops" in r and "config" in r), key=lambda r: -r["tflops"])
        refs = [r for r in rows if "reference" in r]
        best_ref = max((r["tflops"] for r in refs), default=float("nan"))
        log(
            f"  sweep {role:<8} {m}x{n}x{k}: {len(ok)} timed; best {ok[0]['config'] if ok else None} "
            f"{ok[0]['tflops'] if ok else 0:.1f} TFLOP/s; reference {best_ref:.1f}"
        )
        out[f"{m}x{n}x{k}"] = {"role": role, "shape": list(shape), "rows": rows}
        prob.free()
        torch.cuda.empty_cache()
    return out


# ---- Triton -----------------------------------------------------------------------------------------------------
TRITON_SHAPES = [
    ("f16", (4096, 4096, 4096)),
    ("f16", (8192, 8192, 8192)),
    ("bf16", (4096, 12288, 4096)),
    ("bf16", (8192, 8192, 8192)),
]  # the last one: never used to calibrate (run 2 validation)
# A conventional Hopper search space for the tutorial kernel (as a user would write it by hand).
CONVENTIONAL = [
    (128, 256, 64, 3, 8),
    (256, 128, 64, 3, 8),
    (128, 128, 64, 4, 8),
    (128, 128, 64, 3, 4),
    (128, 256, 32, 4, 8),
    (256, 128, 32, 4, 8),
    (128, 128, 32, 4, 4),
    (64, 256, 64, 4, 4),
    (128, 64, 64, 4, 4),
    (64, 128, 64, 4, 4),
    (128, 128, 128, 3, 8),
    (64, 64, 64, 5, 4),
]


def triton_space() -> list[tuple[int, int, int, int, int]]:
    """(BM, BN, BK, stages, warps): a factorial on 128x128, ablations on the larger and smaller tiles."""
    out = []
    for bk in (16, 32, 64, 128):
        for st in (3, 4) if bk == 16 else (2, 3, 4, 5):
            for w in (4, 8):
                out.append((128, 128, bk, st, w))
    for bm, bn in ((128, 256), (256, 128)):
        for bk in (32, 64, 128):
            for st in (3, 4):
                out.append((bm, bn, bk, st, 8))
        out.append((bm, bn, 64, 3, 4))
    for bm, bn in ((64, 256), (128, 64), (64, 128), (256, 64)):
        for st in (3, 4):
            out.append((bm, bn, 64, st, 4))
    return sorted(set(out) | set(CONVENTIONAL))


try:  # the GPU machine has Triton; the CPU steps (build, list) do not need it
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the machine
    triton = tl = None

if triton is not None:

    @triton.jit
    def matmul_kernel(
        a_ptr,
        b_ptr,
        c_ptr,
        M,
        N,
        K,
        stride_am,
        stride_ak,
        stride_bk,
        stride_bn,
        stride_cm,
        stride_cn,
        BLOCK_SIZE_M: tl.constexpr,
        BLOCK_SIZE_N: tl.constexpr,
        BLOCK_SIZE_K: tl.constexpr,
        GROUP_SIZE_M: tl.constexpr,
    ):
        # The Triton tutorial's matmul (03-matrix-multiplication.py): grouped ordering, tl.dot, fp32 accumulator.
        pid = tl.program_id(axis=0)
        num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
        num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
        num_pid_in_group = GROUP_SIZE_M * num_pid_n
        group_id = pid // num_pid_in_group
        first_pid_m = group_id * GROUP_SIZE_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
        pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
        pid_n = (pid % num_pid_in_group) // group_size_m
        offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
        offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
        offs_k = tl.arange(0, BLOCK_SIZE_K)
        a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
        b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
        accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
            accumulator = tl.dot(a, b, accumulator)
            a_ptrs += BLOCK_SIZE_K * stride_ak
            b_ptrs += BLOCK_SIZE_K * stride_bk
        c = accumulator.to(c_ptr.dtype.element_ty)
        offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
        offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
        c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        tl.store(c_ptrs, c, mask=c_mask)


def triton_kernel():
    return matmul_kernel


def _meta(c) -> dict:
    bm, bn, bk, st, w = c
    return {
        "BLOCK_SIZE_M": bm,
        "BLOCK_SIZE_N": bn,
        "BLOCK_SIZE_K": bk,
        "GROUP_SIZE_M": 8,
        "num_warps": w,
        "num_stages": st,
    }


def _triton_warm(job) -> str:
    """Worker process: compile one (dtype, shape, config) into Triton's on-disk cache without launching."""
    dname, (m, n, k), c = job
    try:
        import torch

        dt = getattr(torch, {"f16": "float16", "bf16": "bfloat16"}[dname])
        triton_kernel().warmup(dt, dt, dt, m, n, k, k, 1, n, 1, n, 1, grid=(1,), **_meta(c))
        return "ok"
    except Exception as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def step_triton(ctx, configs_per_shape: dict, log, deadline: float, workers: int = 14) -> dict:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    torch = ctx["torch"]
    jobs, seen = [], set()  # one compile per dtype and config (every shape here specialises alike)
    for dname, shape in TRITON_SHAPES:
        for c in configs_per_shape[(dname, shape)]:
            if (dname, c) not in seen:
                seen.add((dname, c))
                jobs.append((dname, shape, c))
    t0 = time.time()
    warm = {}
    try:
        with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as ex:
            for j, r in zip(jobs, ex.map(_triton_warm, jobs), strict=True):
                warm[(j[0], j[2])] = r
    except Exception as e:
        log(f"  triton: parallel warm-up failed ({type(e).__name__}: {e}); compiling in the timed process")
    log(
        f"  triton: {len(jobs)} compiles in {time.time() - t0:.1f} s "
        f"({sum(v == 'ok' for v in warm.values())} ok)"
    )
    out = {"triton": triton.__version__, "compile_s": time.time() - t0, "shapes": {}}
    for dname, shape in TRITON_SHAPES:
        if time.time() > deadline:
            log(f"  triton: out of time before {dname} {shape}")
            break
        m, n, k = shape
        rows = _triton_shape(torch, dname, shape, configs_per_shape[(dname, shape)], warm, deadline)
        ok = sorted((r for r in rows if "tflops" in r and "config" in r), key=lambda r: -r["tflops"])
        log(
            f"  triton {dname} {m}x{n}x{k}: torch {rows[0]['tflops']:.0f}; best {ok[0]['config'] if ok else None} "
            f"{ok[0]['tflops'] if ok else 0:.0f} TFLOP/s of {len(ok)} timed"
        )
        out["shapes"][f"{dname} {m}x{n}x{k}"] = {"dtype": dname, "shape": list(shape), "rows": rows}
        torch.cuda.empty_cache()
    return out


def _triton_shape(
    torch, dname: str, shape, configs, warm: dict, deadline: float = math.inf, rounds: int = 15
) -> list[dict]:
    """torch.matmul and every configuration: checked against fp32 torch, then timed in alternating rounds with
    the same 512 MiB flush before each call as the SGEMM bench (median, spread = (p90 - p10) / median)."""
    kern = triton_kernel()
    m, n, k = shape
    dt = getattr(torch, {"f16": "float16", "bf16": "bfloat16"}[dname])
    a = torch.randn(m, k, device="cuda", dtype=dt)
    b = torch.randn(k, n, device="cuda", dtype=dt)
    c = torch.empty(m, n, device="cuda", dtype=dt)
    ref = a.float() @ b.float()
    scale = float(ref.abs().max())
    flops = 2.0 * m * n * k
    fns, rows = {"torch.matmul": lambda: torch.matmul(a, b)}, []
    for cc in configs:
        if time.time() > deadline:
            break
        row = {"config": list(cc), "warm": warm.get((dname, cc))}
        meta = _meta(cc)
        grid = (triton.cdiv(m, cc[0]) * triton.cdiv(n, cc[1]),)

        def run(meta=meta, grid=grid):
            kern[grid](
                a,
                b,
                c,
                m,
                n,
                k,
                a.stride(0),
                a.stride(1),
                b.stride(0),
                b.stride(1),
                c.stride(0),
                c.stride(1),
                **meta,
            )

        try:
            c.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
            err = float((c.float() - ref).abs().max()) / scale
            row["rel_err"] = err
            if not math.isfinite(err) or err > 2e-2:
                row["error"] = f"wrong result: rel err {err}"
            else:
                fns[json.dumps(list(cc))] = run
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        rows.append(row)
    # alternating rounds (order reversed every round), the 512 MiB memset before every call, as for SGEMM
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    times = time_rounds(fns, torch, rounds, flush)
    st = {key: stats(v) for key, v in times.items()}
    for row in rows:
        key = json.dumps(row["config"])
        if key in st:
            row.update(
                ms=st[key]["median_ms"],
                p10_ms=st[key]["p10_ms"],
                p90_ms=st[key]["p90_ms"],
                spread=st[key]["spread"],
                tflops=flops / st[key]["median_ms"] / 1e9,
            )
    r = st["torch.matmul"]
    rows.insert(
        0,
        {
            "reference": "torch.matmul",
            "ms": r["median_ms"],
            "p10_ms": r["p10_ms"],
            "p90_ms": r["p90_ms"],
            "spread": r["spread"],
            "tflops": flops / r["median_ms"] / 1e9,
        },
    )
    del flush
    return rows


# ---- run ----------------------------------------------------------------------------------------------------------
def versions(torch, dev) -> dict:
    env = environment()
    smi = env["nvidia_smi"]
    try:
        import triton

        tv = triton.__version__
    except ImportError:
        tv = None
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": dev.name,
        "sms": dev.sm_count,
        "nvidia_smi": smi,
        "driver": smi.split(",")[0].strip() if smi else None,
        "cuda_driver_api": env["cuda_driver_api"],
        "versions": {
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "triton": tv,
            "cuda-bindings": env["cuda_bindings"],
            "nvrtc": env["nvrtc"],
        },
        "commit": os.environ.get("SMEMTILE_COMMIT", "unknown"),
        "reference": "faster of torch.matmul (allow_tf32 False) and cublasSgemm_v2 (default math), same A and B",
        "timing": f"{FLUSH_BYTES >> 20} MiB memset before every timed call (outside the events), alternating "
        "rounds, order reversed every round; median, spread = (p90 - p10) / median",
    }


def cmd_run(args) -> None:
    import torch

    from smemtile.gpu.run import open_device

    t_start = time.time()
    deadline = t_start + args.budget_s
    args.out.mkdir(parents=True, exist_ok=True)
    log = tee_log(args.out / "log.txt")

    os.environ.setdefault("SMEMTILE_CACHE_DIR", str(CACHE))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.zeros(1, device="cuda")
    dev = open_device(0)
    try:
        cublas = Cublas()
    except Exception as e:
        log(f"direct cuBLAS unavailable: {e}")
        cublas = None
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    ctx = {"torch": torch, "dev": dev, "flush": flush, "cublas": cublas, "keep": []}
    head = versions(torch, dev)
    log(json.dumps(head))
    steps = args.steps.split(",")
    extra: dict[tuple, list[dict]] = {}  # JSON list of {"shape": [M, N, K], "params": {...}}
    for e in json.loads(Path(args.extra_pool).read_text()) if args.extra_pool else []:
        extra.setdefault(tuple(e["shape"]), []).append(e["params"])
    swept: set[tuple] = set()

    def save(name: str, doc: dict) -> None:
        (args.out / name).write_text(json.dumps({**head, **doc}, indent=1, default=str))

    for step in steps:
        t0 = time.time()
        try:
            if step == "bench":
                save("h200.json", {"entries": step_bench(ctx, args.rounds, args.variants, log)})
            elif step == "sweep":
                shapes = [("held_out", s) for s in HELD_OUT + HELD_OUT_REPACK] + (
                    [("fit", s) for s in FIT] if args.fit else []
                )
                if args.shapes:  # only these (e.g. the ragged ones after a kernel change)
                    shapes = [(r, s) for r, s in shapes if "x".join(map(str, s)) in args.shapes]
                swept |= {s for _, s in shapes}
                res = step_sweep(ctx, shapes, POOL, log, deadline, extra)
                save("sweep_h200.json", {"pool": len(POOL), "shapes": res})
            elif step == "extra":  # only the extra configurations of the shapes not swept in this run
                shapes = [("held_out", s) for s in HELD_OUT] + [("fit", s) for s in FIT]
                shapes = [(r, s) for r, s in shapes if s in extra and s not in swept]
                res = step_sweep(ctx, shapes, [], log, deadline, extra)
                save("sweep_extra_h200.json", {"pool": 0, "shapes": res})
            elif step == "triton":
                space = (
                    [tuple(x) for x in json.loads(Path(args.triton_configs).read_text())]
                    if args.triton_configs
                    else triton_space()
                )
                per = {(d, s): space for d, s in TRITON_SHAPES}
                save(
                    "triton_h200.json",
                    {"space": [list(c) for c in space], **step_triton(ctx, per, log, deadline)},
                )
        except Exception as e:
            log(f"step {step} FAILED: {type(e).__name__}: {e}\n{traceback.format_exc()}")
        log(f"step {step}: {time.time() - t0:.1f} s (total {time.time() - t_start:.1f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="compile every configuration into the NVRTC cache (CPU)")
    b.add_argument("--jobs", type=int, default=2)
    b.add_argument("--extra", type=Path, nargs="*", default=[])
    b.add_argument(
        "--check-layouts", type=int, default=6, help="check the fix search's layouts on the first N"
    )
    b.add_argument("--strip-ptx", action="store_true")
    b.add_argument("--shapes", nargs="*", default=[], help="build only for these sweep shapes and the bench")
    sub.add_parser("list", help="shapes and configurations")
    r = sub.add_parser("run", help="measure on the GPU")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--steps", default="bench,sweep,triton")
    r.add_argument("--rounds", type=int, default=15)
    r.add_argument("--variants", action="store_true", help="the SGEMM variants at 4096^3 / 8192^3 too")
    r.add_argument("--fit", action="store_true", help="sweep the fitting shapes too")
    r.add_argument("--extra-pool", help="JSON list of extra sgemm configurations for the sweep")
    r.add_argument("--shapes", nargs="*", default=[], help="sweep only these MxNxK")
    r.add_argument("--triton-configs", help="JSON list of [BM, BN, BK, stages, warps] (default: the space)")
    r.add_argument("--budget-s", type=float, default=400.0)
    args = ap.parse_args()
    {"build": cmd_build, "list": cmd_list, "run": cmd_run}[args.cmd](args)


if __name__ == "__main__":
    main()
