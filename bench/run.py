"""One runner over the families' plans: ``python -m bench.run FAMILY PLAN`` builds and times what the family's
``task.yaml`` plan lists (``smemtile/families/<name>/task.yaml``, read through ``smemtile.families.task``).

For every shape of the plan, every configuration is built the way a user builds it: a spec of the family with the
configuration's tile (``kernel: {family, problem}``), resolved and fixed as ``smemtile generate`` / ``verify`` do
(the fix search's layouts; a plan entry may give its own ``layouts``), the generated body compiled with NVRTC for
the device, launched through the family's launch plan (``smemtile.gpu.run.LoadedKernel``). ``ranked`` entries take
the family's tile model's ranking for that shape (``Family.ranker``: the model's top N, optionally N more at evenly
spaced ranks). Nothing here knows a family: what differs lives in the task file.

Correctness first: each configuration runs the family's ``test_sizes`` (the timed configuration's parameters and
layouts at each small problem it accepts) and the timed problem itself against the family's float64 reference,
outputs poisoned (``LoadedKernel.check``). A configuration that is refused, fails to build or is wrong is recorded
and never timed.

Timing (``bench/timing.py``): per shape, the family's reference (``reference:`` in the task file: ``matmul`` =
torch.matmul on operands of the problem's sizes and dtype, TF32 and reduced-precision reductions off; ``copy`` =
cuMemcpyDtoDAsync of the bytes the kernel moves, half read, half written; ``conv2d`` = torch.nn.functional.conv2d,
cuDNN with its autotuner, on channels_last tensors of the problem's n h w c k r s stride pad and dtype) and every correct configuration in
alternating rounds (order reversed every round), a 512 MiB tensor zeroed before every timed call outside the CUDA
events; median, p10/p90 and spread = (p90 - p10) / median; ratio = reference median / ours.

    python -m bench.run FAMILY PLAN --dry-run            # what it would build and time (no GPU, no compiler)
    python -m bench.run FAMILY PLAN --compile-only       # NVRTC builds here: registers, spills (no GPU)
    python -m bench.run FAMILY PLAN --out bench/results/F_P_h200.json [--rounds 20] [--commit SHA]   # GPU

Writes one JSON document (rewritten after every shape, so a run cut short keeps what it measured): ``family``,
``plan``, ``date``, ``commit``, ``model_data`` (sha256 of the family folder's data files), ``versions``,
``method``, ``cases`` [{``case``, ``family``, ``problem``, ``params``
(problem parameters such as a radius), ``role`` ("fit" for plan sweep, "held_out" for plan heldout), ``work``
{unit, amount}, ``bytes`` or ``flop``, ``reference`` {kind, median_ms, ..., rate}, ``copy`` (= reference, for
kind copy), ``configs`` [{``label``, ``params``, ``layouts``, ``name_expression``, ``problem``, ``predicted`` {rank, of,
tflops or gbps, time_us, reason},
``small_checks``, ``correct``, ``max_rel_error``, ``registers``, ``static_smem_bytes``, ``local_bytes``,
``blocks_per_sm``, ``launch``, ``median_ms`` ... ``spread``, ``tflops`` or ``gbps``, ``ratio``, ``ratio_rounds``}]}]:
the case shape bench_memory.py wrote, which the memory models' fitting code reads.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from smemtile.errors import SmemtileError, SpecError

FLUSH_BYTES = 512 << 20
ROLES = {"sweep": "fit", "heldout": "held_out"}  # the fitting code's names for the calibration plans
REF = "(reference)"  # the reference's key among the timed functions (no plan label has parentheses around it)


# ---- the plan, resolved (CPU) -------------------------------------------------------------------------------
@dataclass
class Entry:
    """One configuration of one case: built (``cfg``) or refused (``error``)."""

    label: str
    params: dict
    layouts: dict | None
    problem: dict  # the case's problem with the entry's own problem keys (an hgemm column-major B)
    cfg: object = None
    predicted: dict | None = None
    error: str | None = None
    checks: list = field(default_factory=list)  # (test size, its configuration or None when refused)


@dataclass
class Case:
    name: str
    problem: dict
    keys: dict  # parameters that describe the problem (Family.problem_params)
    entries: list[Entry]


def spread_ranks(n: int, top: int, spread: int) -> list[int]:
    """Indices into a ranked list of ``n``: the first ``top``, then ``spread`` evenly spaced over the rest (the
    last included); every index when ``n <= top + spread``."""
    if n <= top + spread:
        return list(range(n))
    if spread == 0:
        return list(range(top))
    if spread == 1:
        return [*range(top), n - 1]
    rest = n - top
    return list(range(top)) + [top + round(i * (rest - 1) / (spread - 1)) for i in range(spread)]


def case_name(fam, problem: dict, keys: dict, fmt: str | None = None) -> str:
    """The task file's ``case_name`` over the problem (defaults filled) and its parameters, else the family's name,
    the sizes and the other keys given."""
    if fmt:
        from smemtile.families.base import check_problem

        try:
            own = {k: v for k, v in fam.defaults().items() if k in fam.problem_params}
            return fmt.format(**{**own, **check_problem(fam, problem), **keys})
        except (KeyError, IndexError, ValueError) as e:
            raise SpecError(f"{fmt!r} names {e} that the problem does not have", key="case_name") from None
    sizes = [pk.name for pk in fam.size_keys()]
    head = "x".join(str(problem[k]) for k in sizes if k in problem)
    rest = [f"{k}={v}" for k, v in {**problem, **keys}.items() if k not in sizes]
    return " ".join([fam.name, head, *rest]).strip()


def build(fam, params: dict, problem: dict, arch: str, layouts: dict | None):
    """The configuration a user gets: ``layouts`` when the plan gives them, else the fixed variant of the spec
    ``{tile: params, kernel: {family, **problem}}`` (what ``generate`` and ``verify`` build)."""
    from smemtile.families import configure

    if layouts is not None:
        return configure(fam, {**params, **problem}, layouts, arch)
    from smemtile.pipeline.fixes import variants
    from smemtile.pipeline.specs import resolve

    tile = dict(params)
    if not set(tile) - set(fam.problem_params):  # no tile: the family's defaults (not the model's pick)
        tile = {**configure(fam, {**params, **problem}, None, arch).params, **params}
    doc: dict = {"arch": arch, "tile": tile, "kernel": {"family": fam.name, **problem}}
    if "STAGES" in tile and "STAGES" in {p.name for p in fam.params}:
        doc["stages"] = tile.pop("STAGES")
    return variants(resolve(doc, f"<{fam.name} plan>"))["fixed"]


def _ranker(fam, problem: dict, arch: str):
    """The tile model's ranking as ``smemtile tune`` reads it (``top(k)``, a Candidate per configuration)."""
    try:
        from smemtile.pipeline.tiles import ranker_for
    except ImportError:  # a tree before the one ranking loop: the family's own ranker
        return fam.ranker(problem, arch, None)
    return ranker_for(fam, problem, arch, None)


def _ranked(fam, spec: dict, problem: dict, keys: dict, arch: str) -> list[Entry]:
    from smemtile.families.base import check_problem

    # the problem as `smemtile tune` hands it to the model: every key with its default, leading dimensions if given
    full = {
        pk.name: problem.get(pk.name, pk.default)
        for pk in fam.problem_keys
        if not pk.dense or pk.name in problem
    }
    ranker = _ranker(fam, {**full, **keys}, arch)
    if ranker is None:
        raise SpecError(f"{fam.name} has no tile model: a plan cannot rank its configurations", key="ranked")
    top, spread = spec.get("top"), spec.get("spread", 0)
    unit, amount = fam.work(check_problem(fam, problem))
    everything = ranker.top(10**9)
    idx = range(len(everything)) if top is None else spread_ranks(len(everything), top, spread)
    out = []
    for i in idx:
        params = {**everything[i], **keys}
        cand = ranker(params, "model")
        rank = cand.model_rank if cand.model_rank is not None else i + 1
        pred = {"rank": rank, "of": len(everything), unit: cand.predicted, "reason": cand.model_reason}
        if cand.predicted:  # the predicted time of one launch, from the model's rate and the problem's work
            pred["time_us"] = amount / (cand.predicted * (1e12 if unit == "tflops" else 1e9)) * 1e6
        out.append(Entry(cand.label, params, None, dict(problem), predicted=pred))  # the model's own label
    return out


def resolve_plan(
    fam,
    plan: dict,
    task: dict,
    arch: str,
    *,
    only: str = "",
    small: bool = True,
    first: int = 0,
    limit: int = 0,
) -> list[Case]:
    """Every case of the plan with its configurations built (CPU: configure, fix search, launch plan); ``only``:
    the cases whose name holds this text; ``first``: the first N shapes; ``limit``: N configurations per case."""
    from smemtile.families import configure, split_params
    from smemtile.families.base import ContractViolation, check_problem

    dense = {pk.name for pk in fam.problem_keys if pk.dense}
    cases = []
    for group in plan["groups"]:
        for shape in group["shapes"]:
            keys, problem = split_params(fam, dict(shape), "shape")
            name = case_name(fam, problem, keys, task.get("case_name"))
            same = next((c for c in cases if c.name == name), None)
            if (only and only not in name) or (first and same is None and len(cases) >= first):
                continue
            entries: list[Entry] = []
            for spec in group["configs"]:
                if "ranked" in spec:
                    entries += _ranked(fam, spec["ranked"], problem, keys, arch)
                    continue
                own = {**problem, **spec.get("problem", {})}
                entries.append(
                    Entry(spec["label"], {**spec.get("params", {}), **keys}, spec.get("layouts"), own)
                )
            # one entry per label (the timed functions are keyed by it); a shape in several groups is one case,
            # timed in the same rounds
            have = {x.label for x in same.entries} if same is not None else set()
            entries = [x for x in entries if not (x.label in have or have.add(x.label))]
            if limit:
                entries = entries[: max(0, limit - (len(same.entries) if same else 0))]
            for e in entries:
                try:
                    e.cfg = build(fam, e.params, e.problem, arch, e.layouts)
                except SmemtileError as err:
                    e.error = f"refused: {err}"
                    continue
                if not small:
                    continue
                layouts = dict(e.cfg.layouts)
                base = {k: v for k, v in e.problem.items() if k not in dense}
                for size in task["test_sizes"]:
                    try:
                        scfg = configure(fam, {**e.params, **base, **size}, layouts, arch)
                    except ContractViolation:  # a test size this configuration cannot take (another dtype)
                        scfg = None
                    e.checks.append((size, scfg))
            if same is not None:
                same.entries += entries
            else:
                cases.append(Case(name, check_problem(fam, problem), keys, entries))
    return cases


# ---- what is printed and compiled without a GPU ----------------------------------------------------------------
def describe(fam, cases: list[Case], reference: dict) -> list[str]:
    lines = []
    for case in cases:
        unit, amount = fam.work(case.problem)
        lines.append(
            f"{case.name}: reference {reference['kind']}, {amount:.4g} {'flop' if unit == 'tflops' else 'B'}"
        )
        for e in case.entries:
            label = f"#{e.predicted['rank']} {e.label}" if e.predicted else e.label  # the model's rank first
            if e.error:
                lines.append(f"  {label:32s} {e.error}")
                continue
            launch = fam.launch(e.cfg)
            lay = " ".join(f"{k}:{v.template_args()}" for k, v in sorted(e.cfg.layouts.items()))
            main = next(s for s in launch.steps if s.main)
            checks = sum(1 for _, s in e.checks if s is not None)
            lines.append(
                f"  {label:32s} {fam.name_expression(e.cfg)}  grid {list(main.grid)} block {list(main.block)}"
                f" smem {main.dynamic_smem_bytes} [{lay}] checks {checks}/{len(e.checks)}"
            )
    return lines


def _key(cfg) -> tuple[str, str]:
    from smemtile.families import FAMILIES

    return FAMILIES[cfg.family].name_expression(cfg), cfg.arch.name


def sources(cases: list[Case]) -> dict[tuple[str, str], str]:
    """One kernel text per (name expression, arch): the generated body of the first configuration that has it.
    Bodies of one expression differ between problems only by the host helper's comment, so one cubin serves
    every shape and test size (what ``--compile-only`` builds is what the run loads: cache hits)."""
    from smemtile.codegen.render import body

    out: dict[tuple[str, str], str] = {}
    for case in cases:
        for e in case.entries:
            if e.cfg is None:
                continue
            for cfg in [e.cfg, *(s for _, s in e.checks if s is not None)]:
                key = _key(cfg)
                if key not in out:
                    out[key] = body(cfg)
    return out


def _compile(job) -> tuple[str, dict | str]:
    cfg, text = job
    from smemtile.gpu.run import compile_config

    expr = _key(cfg)[0]
    t0 = time.perf_counter()
    try:
        r = compile_config(cfg, source=text)
    except SmemtileError as e:
        return expr, f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    res = r.resources.get(expr)
    info = {"seconds": round(time.perf_counter() - t0, 2)}
    if res is not None:
        info.update(res.to_dict() if hasattr(res, "to_dict") else {"resources": str(res)})
    return expr, info


def compile_jobs(cases: list[Case]) -> list[tuple]:
    """One build per distinct kernel (name expression + arch): the timed ones and their checks."""
    texts = sources(cases)
    first: dict[tuple, object] = {}
    for case in cases:
        for e in case.entries:
            for cfg in [e.cfg, *(s for _, s in e.checks if s is not None)] if e.cfg is not None else []:
                first.setdefault(_key(cfg), cfg)
    return [(cfg, texts[key]) for key, cfg in first.items()]


def compile_all(cases: list[Case], workers: int, log=print) -> dict[str, dict | str]:
    jobs = compile_jobs(cases)
    if workers > 1 and len(jobs) > 1:
        with ProcessPoolExecutor(workers) as ex:
            done = list(ex.map(_compile, jobs))
    else:
        done = [_compile(j) for j in jobs]
    for expr, info in done:
        log(f"  built {expr}: {info}")
    return dict(done)


# ---- the GPU run ----------------------------------------------------------------------------------------------
class Copy:
    """Reference ``copy``: cuMemcpyDtoDAsync of ``nbytes`` (bytes read + written = twice that)."""

    def __init__(self, nbytes: int):
        from smemtile.gpu.run import DeviceBuffer

        self.src, self.dst, self.nbytes = DeviceBuffer(nbytes), DeviceBuffer(nbytes), nbytes
        self.src.poison()

    def __call__(self) -> None:
        from cuda.bindings import driver as d

        (err,) = d.cuMemcpyDtoDAsync(self.dst.ptr, self.src.ptr, self.nbytes, d.CUstream(0))
        assert int(err) == 0, err

    def close(self) -> None:
        self.src.free()
        self.dst.free()


class Matmul:
    """Reference ``matmul``: torch.matmul(A, B, out=C) on operands of the problem's sizes and dtype (cuBLAS)."""

    def __init__(self, torch, reference: dict, problem: dict):
        from smemtile.model.dtypes import get_dtype

        m, n, k = (int(problem[s]) for s in reference["sizes"])
        dname = str(problem.get(reference["dtype"], reference["dtype"]))
        dt = getattr(torch, get_dtype(dname).torch)
        g = torch.Generator(device="cuda").manual_seed(0)
        self.a = torch.randn(m, k, device="cuda", generator=g).to(dt)
        self.b = torch.randn(k, n, device="cuda", generator=g).to(dt)
        self.c = torch.empty(m, n, device="cuda", dtype=dt)
        self.torch = torch

    def __call__(self) -> None:
        self.torch.matmul(self.a, self.b, out=self.c)

    def close(self) -> None:
        del self.a, self.b, self.c


class Conv2d:
    """Reference ``conv2d``: torch.nn.functional.conv2d (cuDNN, its autotuner on) on channels_last tensors of the
    problem's sizes and dtype (``n h w c k r s stride pad`` as the family's integer problem keys; bias and ReLU
    when the problem sets them), into a preallocated channels_last output."""

    def __init__(self, torch, reference: dict, problem: dict, ints: dict):
        from smemtile.model.dtypes import get_dtype

        q = ints
        dname = str(problem.get(reference["dtype"], reference["dtype"]))
        dt = getattr(torch, get_dtype(dname).torch)
        g = torch.Generator(device="cuda").manual_seed(0)
        cl = torch.channels_last
        self.x = (
            torch.randn(q["n"], q["c"], q["h"], q["w"], device="cuda", generator=g)
            .to(dt)
            .to(memory_format=cl)
        )
        self.w = (
            torch.randn(q["k"], q["c"], q["r"], q["s"], device="cuda", generator=g)
            .to(dt)
            .to(memory_format=cl)
        )
        self.bias = (
            torch.randn(q["k"], device="cuda", generator=g).to(dt) if int(problem.get("bias", 0)) else None
        )
        self.relu = bool(int(problem.get("relu", 0)))
        self.stride, self.pad = int(q["stride"]), int(q["pad"])
        torch.backends.cudnn.benchmark = (
            True  # cuDNN picks its fastest algorithm for the shape (warm-up rounds)
        )
        self.torch = torch

    def __call__(self) -> None:
        y = self.torch.nn.functional.conv2d(self.x, self.w, self.bias, stride=self.stride, padding=self.pad)
        if self.relu:
            y.relu_()

    def close(self) -> None:
        del self.x, self.w, self.bias


class Sdpa:
    """Reference ``sdpa``: torch.nn.functional.scaled_dot_product_attention on [batch, heads, seq, head_dim] views
    (``transpose(1, 2)``, no copy) of [batch, seq, heads, head_dim] tensors of the problem's sizes and dtype (the
    flash_attn family's layout), ``is_causal`` and ``scale`` as the problem sets them (top-left aligned, as the
    family's mask). torch picks its fastest backend for the device (FlashAttention-2, cuDNN or memory-efficient);
    ``backend`` in the reference (flash, cudnn, efficient, math) pins one through torch.nn.attention.sdpa_kernel.
    ``backend_used`` names what the pinned context allowed (torch does not report its own pick)."""

    BACKENDS = {
        "flash": "FLASH_ATTENTION",
        "cudnn": "CUDNN_ATTENTION",
        "efficient": "EFFICIENT_ATTENTION",
        "math": "MATH",
    }

    def __init__(self, torch, reference: dict, problem: dict, ints: dict):
        from smemtile.model.dtypes import get_dtype

        q = ints
        dname = str(problem.get(reference["dtype"], reference["dtype"]))
        dt = getattr(torch, get_dtype(dname).torch)
        g = torch.Generator(device="cuda").manual_seed(0)
        b, h, d = q["batch"], q["heads"], q["head_dim"]

        def bshd(seq):
            return torch.randn(b, seq, h, d, device="cuda", generator=g).to(dt).transpose(1, 2)

        self.q, self.k, self.v = bshd(q["seq_q"]), bshd(q["seq_kv"]), bshd(q["seq_kv"])
        self.causal = bool(int(q.get("causal", 0)))
        scale = float(problem.get("scale", 0.0) or 0.0)
        self.scale = scale if scale != 0.0 else None  # None: torch's default 1/sqrt(head_dim), the family's
        self.backend = reference.get("backend")
        self.backend_used = self.backend or "default dispatch (fastest available)"
        self.torch = torch

    def _call(self):
        return self.torch.nn.functional.scaled_dot_product_attention(
            self.q, self.k, self.v, is_causal=self.causal, scale=self.scale
        )

    def __call__(self) -> None:
        if self.backend is None:
            self._call()
            return
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(getattr(SDPBackend, self.BACKENDS[self.backend])):
            self._call()

    def close(self) -> None:
        del self.q, self.k, self.v


def reference_fn(fam, torch, reference: dict, problem: dict, amount: float):
    """The timed reference of ``reference['kind']`` for one problem (the task file's ``reference:``)."""
    kind = reference["kind"]
    if kind == "copy":
        return Copy(int(amount // 2))
    if kind == "conv2d":
        return Conv2d(torch, reference, problem, fam.problem_ints(problem))
    if kind == "sdpa":
        return Sdpa(torch, reference, problem, fam.problem_ints(problem))
    return Matmul(torch, reference, problem)


def torch_setup():
    import torch

    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    return torch


def run_case(
    fam,
    case: Case,
    reference: dict,
    dev,
    rounds: int,
    torch,
    flush,
    log,
    check_timed: bool,
    texts: dict | None = None,
) -> dict:
    """One case on the device: checks, then the reference and every correct configuration in alternating rounds.
    ``texts``: the kernel text per (name expression, arch) (:func:`sources`; default: each configuration's own)."""
    from bench.timing import stats, time_rounds
    from smemtile.gpu.run import LoadedKernel

    rng = np.random.default_rng(20)
    unit, amount = fam.work(case.problem)
    rows, loaded = [], {}
    small_refs: dict[tuple, tuple] = {}
    timed_refs: dict[str, tuple] = {}
    for e in case.entries:
        row: dict = {"label": e.label, "params": e.params, "problem": e.problem}
        if e.predicted:
            row["predicted"] = e.predicted
        if e.error:
            rows.append({**row, "correct": False, "error": e.error})
            continue
        cfg = e.cfg
        row.update(
            params=dict(cfg.params),
            layouts={k: v.to_dict() for k, v in cfg.layouts.items()},
            name_expression=fam.name_expression(cfg),
        )
        k = None
        try:
            small = []
            for si, (size, scfg) in enumerate(e.checks):
                if scfg is None:
                    small.append({"problem": size, "skipped": "the family refuses this configuration there"})
                    continue
                k = LoadedKernel(scfg, dev, source=(texts or {}).get(_key(scfg)))
                try:
                    key = (si, json.dumps(scfg.problem, sort_keys=True, default=str))
                    if key not in small_refs:
                        sin = fam.make_inputs(scfg, rng)
                        small_refs[key] = (sin, fam.reference(scfg, sin))
                    chk = k.check(*small_refs[key])
                finally:
                    k.close()
                small.append({"problem": size, "correct": chk.correct, "max_rel_error": chk.max_rel_error})
            row["small_checks"] = small
            k = LoadedKernel(cfg, dev, source=(texts or {}).get(_key(cfg)))
            if check_timed:
                key = json.dumps(cfg.problem, sort_keys=True, default=str)
                if key not in timed_refs:  # once per problem: the reference does not depend on the tile
                    t0 = time.perf_counter()
                    tin = fam.make_inputs(cfg, rng)
                    timed_refs[key] = (tin, fam.reference(cfg, tin))
                    log(f"  reference at the timed size: {time.perf_counter() - t0:.1f} s")
                chk = k.check(*timed_refs[key])
                ok, err = chk.correct, chk.max_rel_error
            else:
                k.prepare(fam.make_inputs(cfg, rng))
                ok, err = True, None
            row.update(
                correct=ok and all(s.get("correct", True) for s in small),
                max_rel_error=err,
                registers=k.registers,
                static_smem_bytes=k.static_smem,
                local_bytes=k.local_bytes,
                blocks_per_sm=k.driver_blocks,
                launch=k.shape.to_dict(),
            )
            if row["correct"]:
                loaded[e.label] = k
            else:
                k.close()
                log(f"  {e.label}: WRONG (timed size ok={ok}, err {err}; small {small})")
        except Exception as ex:  # a configuration that fails to build or run is data, not a crash
            row.update(correct=False, error=f"{type(ex).__name__}: {str(ex)[:400]}")
            log(f"  {e.label}: {row['error']}")
            if k is not None and e.label not in loaded:
                k.close()
        rows.append(row)
    ref_fn = reference_fn(fam, torch, reference, case.problem, amount)
    try:
        fns = {REF: ref_fn, **{label: k.launch for label, k in loaded.items()}}
        times = time_rounds(fns, torch, rounds, flush, warmup=3)
    finally:
        ref_fn.close()
        for k in loaded.values():
            k.close()
    scale = 1e12 if unit == "tflops" else 1e9
    rs = stats(times[REF])
    rs[unit] = amount / (rs["median_ms"] * 1e-3) / scale
    for row in rows:
        if row["label"] not in loaded:
            continue
        ts = times[row["label"]]
        st = stats(ts)
        row.update(
            st,
            **{unit: amount / (st["median_ms"] * 1e-3) / scale},
            ratio=rs["median_ms"] / st["median_ms"],
            ratio_rounds=statistics.median(r / t for r, t in zip(times[REF], ts, strict=True)),
        )
    out = {
        "case": case.name,
        "family": fam.name,
        "problem": case.problem,
        "params": case.keys,
        "work": {"unit": unit, "amount": amount},
        ("bytes" if unit == "gbps" else "flop"): amount,
        "reference": {"kind": reference["kind"], **rs},
        "configs": rows,
    }
    if reference["kind"] == "copy":
        out["copy"] = out["reference"]
    return out


def model_data_sha256(fam) -> dict:
    """The data files in the family's folder as this run read them (its tile model's calibration: the plan's
    predictions come from these), by file name."""
    from smemtile.families.task import FILE, task_path

    folder = task_path(type(fam).__module__).parent
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()[:16]
        for p in sorted(folder.iterdir())
        if p.suffix in (".json", ".yaml") and p.name != FILE
    }


def versions(dev) -> dict:
    from bench.timing import environment

    env = environment()
    return {
        "gpu": dev.name,
        "cc": f"{dev.cc[0]}.{dev.cc[1]}",
        "sm_count": dev.sm_count,
        "nvidia_smi": env["nvidia_smi"],
        "cuda_driver": env["cuda_driver_api"],
        "cuda_bindings": env["cuda_bindings"],
        "nvrtc": env["nvrtc"],
        "numpy": np.__version__,
        "python": sys.version.split()[0],
    }


# ---- command line ---------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    ap.add_argument("family", help="a registered family (smemtile.families.FAMILIES)")
    ap.add_argument("plan", help="a plan of the family's task.yaml (smoke, bench, sweep, heldout, ...)")
    ap.add_argument("--dry-run", action="store_true", help="list what would be built and timed (no GPU)")
    ap.add_argument("--compile-only", action="store_true", help="build every kernel with NVRTC (no GPU)")
    ap.add_argument("--only", default="", help="only the cases whose name contains this text")
    ap.add_argument("--first", type=int, default=0, help="only the first N shapes of the plan (0: all)")
    ap.add_argument("--limit", type=int, default=0, help="at most this many configurations per case (0: all)")
    ap.add_argument("--no-small", action="store_true", help="skip the checks at the family's test sizes")
    ap.add_argument("--no-timed-check", action="store_true", help="skip the check at the timed size")
    ap.add_argument(
        "--arch", default="", help="target (default: the plan's, else the device's or the family's)"
    )
    ap.add_argument(
        "--rounds", type=int, default=0, help="alternating rounds (>= 15; default: the plan's or 20)"
    )
    ap.add_argument("--out", type=Path, help="the results file (JSON), e.g. bench/results/NAME.json")
    ap.add_argument("--commit", default="", help="the commit the run measures (recorded)")
    ap.add_argument(
        "--workers",
        type=int,
        default=min(8, os.cpu_count() or 1),
        help="parallel NVRTC builds (default: up to 8)",
    )
    a = ap.parse_args(argv)
    try:
        return _main(a)
    except SmemtileError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code


def _load(a):
    from smemtile.families import get_family
    from smemtile.families.task import load

    fam = get_family(a.family)
    task = load(type(fam).__module__)
    if task is None:
        raise SpecError(f"{fam.name} has no task.yaml", key="family")
    if a.plan not in task["plans"]:
        raise SpecError(
            f"{a.plan!r} is not a plan of {fam.name}; known: {', '.join(task['plans'])}", key="plan"
        )
    plan = task["plans"][a.plan]
    if plan.get("reference") is not None:  # the plan's own reference replaces the task's
        task = {**task, "reference": plan["reference"]}
    if task["reference"] is None:
        raise SpecError(f"{fam.name}'s task.yaml names no reference to time against", key="reference")
    return fam, task, plan


def _main(a) -> int:
    fam, task, plan = _load(a)
    arch = a.arch or plan["arch"] or fam.default_arch
    rounds = a.rounds or plan["rounds"] or 20
    if rounds < 15:
        raise SpecError(f"{rounds} rounds; a timed run takes at least 15", key="--rounds")
    t0 = time.perf_counter()
    pick = {"only": a.only, "small": not a.no_small, "first": a.first, "limit": a.limit}
    cases = resolve_plan(fam, plan, task, arch, **pick)
    n = sum(len(c.entries) for c in cases)
    print(
        f"{fam.name} plan {a.plan} ({plan['about']}): {len(cases)} shapes, {n} configurations, arch {arch} "
        f"({time.perf_counter() - t0:.1f} s to resolve)",
        flush=True,
    )
    if a.dry_run:
        for line in describe(fam, cases, task["reference"]):
            print(line)
        print(f"{len(compile_jobs(cases))} kernels to build")
        return 0
    if a.compile_only:
        built = compile_all(cases, a.workers)
        bad = [e for e, info in built.items() if isinstance(info, str)]
        print(f"{len(built)} kernels built, {len(bad)} failed")
        return 1 if bad else 0
    from smemtile.gpu.run import open_device

    torch = torch_setup()
    dev = open_device(torch.cuda.current_device())
    if not a.arch and not plan["arch"] and dev.arch_name != arch and not arch.startswith(dev.arch_name):
        arch = dev.arch_name  # the device's own target when the plan names none and the default does not fit
        cases = resolve_plan(fam, plan, task, arch, **pick)
    compile_all(cases, a.workers, log=lambda s: None)  # cache hits when prebuilt
    texts = sources(cases)
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - start:7.1f} s] {msg}", flush=True)

    doc = {
        "what": f"python -m bench.run {fam.name} {a.plan}: {plan['about']}",
        "family": fam.name,
        "plan": a.plan,
        "role": ROLES.get(a.plan, a.plan),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": a.commit,
        "arch": arch,
        "family_source_sha256": hashlib.sha256(fam.source().encode()).hexdigest()[:16],
        "model_data": model_data_sha256(fam),
        "versions": versions(dev),
        "method": {
            "rounds": rounds,
            "flush_bytes": FLUSH_BYTES,
            "order": "alternating, reversed every other round",
            "timing": "bench/timing.py: torch CUDA events around each call, a 512 MiB tensor zeroed before it "
            "(outside the events)",
            "reference": task["reference"],
            "spread": "(p90 - p10) / median",
        },
        "cases": [],
    }
    for case in cases:
        log(f"{case.name}: {len(case.entries)} configurations")
        res = run_case(
            fam, case, task["reference"], dev, rounds, torch, flush, log, not a.no_timed_check, texts
        )
        doc["cases"].append({**res, "role": doc["role"]})
        torch.cuda.empty_cache()
        if a.out:
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(json.dumps(doc, indent=1, default=str))
        ref = res["reference"]
        unit = res["work"]["unit"]
        log(f"  reference {ref[unit]:.1f} {unit} ({ref['median_ms']:.4f} ms, spread {ref['spread']:.1%})")
        for r in sorted(res["configs"], key=lambda r: -r.get("ratio", 0)):
            if "ratio" in r:
                log(f"  {r['label']:32s} {r[unit]:8.1f} {unit}  {r['ratio']:.3f}x  spread {r['spread']:5.1%}")
            else:
                log(f"  {r['label']:32s} not timed: {r.get('error') or 'wrong'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
