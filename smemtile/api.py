"""smemtile's Python API: the pipeline's face, for notebooks and scripts.

    import smemtile
    r = smemtile.analyze("samples/gemm_a_column.yaml")       # a path, a YAML string or a dict
    r.worst_conflict_degree, r.layouts                        # 32.0, {'As': 'pad 1'}
    smemtile.occupancy(arch="sm_90", threads=256, regs=64, smem_dynamic="48K").active_blocks
    smemtile.tiles(4096, 4096, 4096, dtype="f16").best["label"]
    smemtile.tiles(family=NAME, rows=8192, cols=8192, dtype="f16").best  # a family ranks its own sizes
    smemtile.generate("samples/transpose_32x32.yaml").source  # the .cu

Each function calls the same pipeline functions as the command of the same name, in the same order, and its
result's ``to_dict()`` is exactly what ``smemtile <command> --json`` prints for the same input (checked for every
sample by tests/test_api.py). Bad input raises the project's exceptions (``smemtile.errors``: SpecError for bad
input, NoDevice without a GPU, ...), each with the one-line message the CLI prints. Nothing here prints or exits:
a configuration that does not fit is data (``active_blocks == 0``, an empty ranking raises OutOfResources as the
CLI's exit 1 does), and a wrong kernel is ``VerifyResult.correct is False``.

Nothing here imports CUDA until a function needs it (NVRTC for a kernel spec's registers, the GPU for verify and
tune): ``import smemtile`` stays cheap.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from smemtile.api_results import (
    AnalyzeResult,
    FixResult,
    GenerateResult,
    InspectResult,
    OccupancyResult,
    TilesResult,
    TuneResult,
    VerifyResult,
    normalise,
)
from smemtile.errors import OutOfResources, SpecError
from smemtile.families.registry import NAMES

SpecLike = str | os.PathLike | dict

__all__ = ["analyze", "fix", "generate", "inspect", "load_spec", "occupancy", "tiles", "tune", "verify"]


# ---- specs: a path, a YAML string or a dict ----------------------------------------------------------------------
def _is_yaml_text(text: str) -> bool:
    """A string with a newline or a ``key: value`` colon is YAML text; anything else names a file."""
    return "\n" in text or (":" in text and not os.path.exists(text))


def load_spec(spec: SpecLike, *, arch: str | None = None):
    """The resolved spec (``smemtile.pipeline.specs.Resolved``) for a path, a YAML string or a dict.

    A path is read exactly as the CLI reads it (``smemtile.fileio``: a regular file of at most 1 MiB, UTF-8);
    a YAML string or a dict is validated the same way and named ``<string>`` / ``<dict>`` in messages.
    ``arch`` overrides the spec's architecture (``smemtile generate --arch``)."""
    from smemtile.pipeline.specs import Resolved, load, resolve

    if isinstance(spec, Resolved):
        return spec
    if isinstance(spec, dict):
        return resolve(copy.deepcopy(spec), "<dict>", arch=arch)
    if isinstance(spec, os.PathLike):
        return load(Path(spec), arch=arch)
    if not isinstance(spec, str):
        raise SpecError(f"a spec is a path, a YAML string or a dict, not {type(spec).__name__}", key="spec")
    if _is_yaml_text(spec):
        from smemtile.model.spec import load_yaml

        doc = load_yaml(spec, "<string>")
        if not isinstance(doc, dict):
            raise SpecError(
                "the spec must be a YAML mapping with arch, buffers and accesses", source="<string>"
            )
        return resolve(doc, "<string>", arch=arch)
    return load(spec, arch=arch)


def _origin(spec: SpecLike) -> str:
    """The name ``generate`` writes into the .cu header (the CLI: the spec file's name)."""
    if isinstance(spec, os.PathLike) or (isinstance(spec, str) and not _is_yaml_text(spec)):
        return Path(spec).name
    return "<dict>" if isinstance(spec, dict) else "<string>"


# ---- analyze, fix ---------------------------------------------------------------------------------------------
def analyze(spec: SpecLike, *, regs: int | None = None, compile: bool = True) -> AnalyzeResult:
    """The bank analysis of every access, the verified fixes, declarations, tile sizes, the cp.async pipeline,
    occupancy and the review checklist (``smemtile analyze SPEC --json``).

    ``regs``: registers per thread for the occupancy parts (default: ptxas' count for a kernel spec, else the
    spec's ``regs:``, else 64, stated as an assumption). ``compile=False``: no NVRTC (``--no-compile``)."""
    from smemtile.pipeline.analyze import analyze as run

    if regs is not None and not (isinstance(regs, int) and 1 <= regs <= 255):
        raise SpecError(f"registers per thread must be an integer 1..255, got {regs!r}", key="regs")
    rep = run(load_spec(spec), regs=regs, compile=compile)
    return AnalyzeResult(normalise(rep.to_dict()), report=rep)


def fix(spec: SpecLike) -> FixResult:
    """The fix search's answer for every buffer: baseline, the best padding, the best swizzle and the
    recommended one (cheapest conflict-free layout that keeps cp.async / ldmatrix alignment), each re-run through
    the bank model. ``to_dict()["fixes"]`` is ``smemtile analyze --json``'s ``fixes``; ``layouts`` maps each
    buffer to its recommended layout (for a kernel spec: only layouts its family can build)."""
    from smemtile.pipeline.fixes import fix_report
    from smemtile.report.layout import layout_diff

    res = load_spec(spec)
    rep = fix_report(res)
    fixes = rep.to_dict()
    for f, fd in zip(rep.buffers, fixes, strict=True):
        fd["diff"] = layout_diff(f.buffer, f.baseline.layout, f.recommended.layout)
    doc = {
        "source": res.source,
        "fixes": fixes,
        "layouts": {name: lay.to_dict() for name, lay in rep.layouts.items()},
    }
    return FixResult(normalise(doc), report=rep)


# ---- occupancy ------------------------------------------------------------------------------------------------
def occupancy(
    *,
    arch: str = "sm_90",
    threads: int,
    regs: int,
    smem_static: int | str = 0,
    smem_dynamic: int | str = 0,
    carveout: int | None = None,
    opt_in: bool = True,
    cluster: int = 1,
    sms: int | None = None,
) -> OccupancyResult:
    """Blocks per SM exactly as the CUDA driver computes them (``smemtile occupancy ... --json``).

    Sizes take bytes or ``"48K"`` / ``"48KiB"``; ``carveout``: percent of the SM's shared memory (None: the
    driver's default, the maximum); ``opt_in=False``: the 48 KB default per block applies; ``cluster``: CTAs per
    cluster (sm_90+) for the ``clusters`` entry, over ``sms`` SMs (default: the arch's GPU row). ``arch="auto"``
    reads the GPU. A block that does not fit is data: ``active_blocks == 0`` and ``reason`` say why (the CLI exits 1)."""
    from smemtile.gpu.device import resolve_arch
    from smemtile.model.occupancy import active_clusters
    from smemtile.model.occupancy import occupancy as run
    from smemtile.model.sizes import parse_size
    from smemtile.model.tiling_gpus import get_gpu

    a = resolve_arch(arch)
    sizes = []
    for key, v in (("smem_static", smem_static), ("smem_dynamic", smem_dynamic)):
        if str(v).strip().startswith("-"):
            raise SpecError(f"must not be negative, got {str(v).strip()}", key=key)
        sizes.append(parse_size(v, key=key))
    threads = _int(threads, "threads", 0)
    regs = _int(regs, "regs", 0)
    if carveout is not None and not (isinstance(carveout, int) and 0 <= carveout <= 100):
        raise SpecError(
            f"must be a percent 0..100 (or None for the default), got {carveout!r}", key="carveout"
        )
    r = run(a, threads, regs, sizes[0], sizes[1], carveout, bool(opt_in))
    size = _int(cluster, "cluster", 1)
    if size > 16:
        raise SpecError(f"{size} CTAs per cluster; at most 16 (8 portable)", key="cluster")
    gpu = get_gpu(None, getattr(a, "base", a.name))
    n = _int(sms, "sms", 1) if sms is not None else gpu.sms
    clusters = {**active_clusters(r.active_blocks, size, n, gpu.key if sms is None else None), "sms": n}
    return OccupancyResult(normalise({**r.to_dict(), "clusters": clusters}), report=r)


def _int(v: Any, key: str, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise SpecError(f"expected an integer, got {v!r}", key=key)
    if v < lo:
        raise SpecError(f"must be at least {lo}, got {v}", key=key)
    return v


# ---- tiles ----------------------------------------------------------------------------------------------------
def tiles(
    *sizes: int | str,
    family: str | None = None,
    dtype: str | None = None,
    arch: str | None = None,
    top: int = 10,
    rejected: int = 8,
    radius: int | None = None,
    vendor: str | None = None,
    gpu: str | None = None,
    sms: int | None = None,
    **problem: int | str,
) -> TilesResult:
    """Ranked tile configurations with reasons, and the rejected ones with why (``smemtile tiles ... --json``).

    GEMM: ``tiles(M, N, K, dtype="f32"|"f16"|"bf16"|..., arch="sm_90")``. A family that ranks its own
    configurations (``tiles --family``): ``tiles(family=NAME, ...)`` with its sizes by the family's problem keys
    (or positionally), its dtype, and its model's options (``radius``). ``top`` / ``rejected``: how many of each
    the result holds (the CLI's --top, --rejected)."""
    from smemtile.pipeline import tiles as pt

    top = _int(top, "top", 1)
    rejected = _int(rejected, "rejected", 0)
    if family is not None and str(family) in pt.ranked_families():
        return _family_tiles(
            str(family), sizes, problem, dtype, radius, arch, vendor, gpu, sms, top, rejected
        )
    if problem:
        raise SpecError(
            f"unknown keyword {next(iter(problem))!r}; a GEMM takes M, N, K positionally (sizes by name "
            f"are for --family {' or '.join(pt.ranked_families())})",
            key="tiles",
        )
    if radius is not None:
        raise SpecError(f"radius is {_option_owner('--radius')}", key="radius")
    if len(sizes) != 3:
        raise SpecError(f"takes M, N, K (3 sizes) for a GEMM, got {len(sizes)}", key="sizes")
    dtype = "f32" if dtype is None else dtype
    n_sms = None if sms is None else _int(sms, "sms", 1)
    if str(arch).lower() == "auto":
        arch, dev_sms = _this_gpu()
        n_sms = n_sms or dev_sms
    if family is not None:
        implied = pt.implied_gemm_family(dtype, arch, vendor)
        if str(family) != implied:
            raise SpecError(
                f"--dtype {dtype} on {arch or 'sm_90'} is ranked by the {implied or 'tile model alone'}"
                f"{' family' if implied else ''}, not {family}",
                key="family",
            )
    report = pt.recommend(*sizes, dtype, arch, vendor=vendor, gpu=gpu, sms=n_sms)
    if not report.ranked:
        raise OutOfResources(
            f"no configuration fits {report.problem.arch}: {report.rejected[0].reason}"
            if report.rejected
            else "no candidates"
        )
    doc = pt.json_doc(report, top, rejected)
    from smemtile.report import tiles as rt

    seam = getattr(
        rt, "hopper_seam", None
    )  # sm_90 16-bit: the faster family is one target away (as the CLI says)
    hopper = seam(report) if seam is not None else None
    if hopper is not None:
        doc["hopper"] = hopper
    return TilesResult(normalise(doc), report=report, top=top)


def _option_owner(option: str) -> str:
    """Which family's model takes ``option`` (its TileModel.options), as the call that gives it."""
    from smemtile.families import FAMILIES

    for name, fam in FAMILIES.items():
        if any(o.option == option for o in getattr(fam.tile_model, "options", ()) or ()):
            sizes = ", ".join(f"{pk.name}=..." for pk in fam.size_keys())
            return f"the {name} family's (tiles(family='{name}', {sizes}, {option.lstrip('-')}=R))"
    return "no family's"


def _family_tiles(
    family, sizes, problem, dtype, radius, arch, vendor, gpu, sms, top, rejected
) -> TilesResult:
    from smemtile.families import FAMILIES
    from smemtile.pipeline import tiles as pt

    ints = [pk.name for pk in FAMILIES[family].size_keys()]  # leading dimensions are not sizes
    if problem:
        unknown = [k for k in problem if k not in ints]
        if unknown or sizes:
            raise SpecError(
                f"{family} takes its sizes as {', '.join(ints)} (by name or in that order), got "
                f"{', '.join(unknown) or 'both'}",
                key="sizes",
            )
        given = [k for k in ints if k in problem]  # in the family's order, as the CLI takes them positionally
        missing = [k for k in ints[: ints.index(given[-1])] if k not in problem] if given else ints[:2]
        if missing or len(given) < 2:
            raise SpecError(
                f"{family} needs {', '.join(missing or [k for k in ints[:2] if k not in problem])}",
                key="sizes",
            )
        sizes = tuple(problem[k] for k in given)
    if sms is not None or (vendor or "nvidia").lower() != "nvidia":
        raise SpecError(
            f"family {family} ranks for an NVIDIA GPU's own SM count (no sms, no vendor amd)",
            key="sms" if sms is not None else "vendor",
        )
    if str(arch).lower() == "auto":
        arch, _ = _this_gpu()
    rep = pt.family_tiles(family, sizes, dtype=dtype, keys={"R": radius}, arch=arch, gpu=gpu)
    if not rep.ranked:
        raise OutOfResources(
            f"no {family} configuration fits: {rep.rejected[0]['reason']}"
            if rep.rejected
            else "no candidates"
        )
    return TilesResult(normalise(pt.family_json_doc(rep, top, rejected)), report=rep, top=top)


def _this_gpu() -> tuple[str, int]:
    """``arch="auto"``: this machine's GPU, its arch and SM count (NoDevice without one)."""
    from smemtile.gpu.device import device_attributes

    attrs = device_attributes(0)
    return f"sm_{attrs['cc_major']}{attrs['cc_minor']}", attrs["sm_count"]


# ---- generate, verify -----------------------------------------------------------------------------------------
def _kernel_spec(spec: SpecLike, arch: str | None = None):
    res = load_spec(spec, arch=arch)
    if res.config is None:
        raise SpecError(
            "the spec has no kernel: section, so there is no kernel to generate (add kernel: {family: NAME, "
            f"and its problem keys}}; families: {', '.join(NAMES)}; smemtile samples lists kernel specs)",
            source=res.source,
        )
    return res


def generate(
    spec: SpecLike,
    *,
    variant: str = "fixed",
    arch: str | None = None,
    compile: bool = True,
    diff: bool = False,
) -> GenerateResult:
    """The CUDA kernel of a kernel spec (``smemtile generate SPEC --json``): ``source`` is the standalone .cu
    (analysis header, the template, its instantiation, the host launch helper), ``to_dict()`` the launch
    description (kernel, name_expression, grid, block, dynamic_smem_bytes, params, checklist, ...).

    ``variant``: ``fixed`` (the fix search's layouts) or ``baseline`` (the spec's own); ``arch`` generates for
    another architecture; ``compile=False`` skips NVRTC (no ptxas numbers); ``diff`` adds a unified diff
    against the other variant."""
    from smemtile.pipeline.build import build
    from smemtile.pipeline.fixes import variants

    if variant not in ("fixed", "baseline"):
        raise SpecError(f"unknown variant {variant!r}; choose fixed or baseline", key="variant")
    res = _kernel_spec(spec, arch)
    v = variants(res)
    cfg, base = v[variant], v["baseline"]
    built = build(cfg, baseline=base, compile=compile, origin=_origin(spec))
    gk = built.kernel
    doc = gk.to_dict(file=None)
    doc["variant"] = variant
    doc["checklist"] = [i.to_dict() for i in built.checklist]
    if diff:
        import difflib

        other = v["fixed"] if variant == "baseline" else base
        a, b = build(other, compile=False).kernel.source, gk.source
        doc["diff"] = "".join(
            difflib.unified_diff(
                a.splitlines(True), b.splitlines(True), "baseline" if variant == "fixed" else "fixed", variant
            )
        )
    return GenerateResult(normalise(doc), source=gk.source)


def verify(
    spec: SpecLike,
    *,
    compile_only: bool = False,
    device: int = 0,
    seed: int = 1234,
    variants: tuple[str, ...] = (),
    stages: tuple[int, ...] = (),
    ncu: bool = False,
) -> VerifyResult:
    """Compile, run, check and time a spec's kernel, baseline and fixed (``smemtile verify SPEC --json``); a spec
    without ``kernel:`` runs its accesses as microkernels. ``compile_only=True`` needs no GPU (NVRTC and ptxas
    numbers, the model's occupancy); otherwise NoDevice without one. A wrong result is ``correct is False``
    (the CLI exits 1), not an exception."""
    from smemtile.pipeline import verify as pipeline
    from smemtile.pipeline.fixes import fix_report
    from smemtile.pipeline.fixes import variants as family_variants

    names = ("baseline", "fixed")
    bad = [v for v in variants if v not in names]
    if bad:
        raise SpecError(f"unknown variant {bad[0]!r}; choose baseline or fixed", key="variants")
    res = load_spec(spec)
    if res.config is None:
        if stages:
            raise SpecError(
                "stages needs a kernel: section (a family with a STAGES parameter)", source=res.source
            )
        from smemtile.gpu.microkernel import verify_spec

        layouts = {"baseline": {}, "fixed": fix_report(res).layouts}
        doc = verify_spec(
            res.spec,
            {v: layouts[v] for v in (variants or names)},
            compile_only=compile_only,
            device=device,
            use_ncu=ncu,
        )
        return VerifyResult(normalise(doc))
    both = family_variants(res)
    cfgs = {v: both[v] for v in (variants or names)}
    cfgs.update(pipeline.stage_variants(both["fixed"], tuple(stages), res.source))
    if compile_only:
        doc = pipeline.compile_only(Path(res.source), cfgs)
    else:
        doc = pipeline.on_gpu(Path(res.source), cfgs, device, seed)
        if ncu:
            doc["ncu"] = pipeline.with_ncu(Path(res.source), cfgs, doc, device, None)
    return VerifyResult(normalise(doc))


# ---- tune -----------------------------------------------------------------------------------------------------
def tune(
    spec: SpecLike,
    *,
    top: int = 6,
    space: list[dict] | None = None,
    shapes: list[dict] | None = None,
    dry_run: bool = False,
    device: int = 0,
    seed: int = 1234,
    cache: str | os.PathLike | None = None,
    force: bool = False,
) -> TuneResult:
    """Time the tile model's top ``top`` configurations of a kernel spec on this machine's GPU (the local
    executor of ``smemtile tune``), cached and resumable; ``dry_run=True`` returns the plan without a GPU
    (``smemtile tune SPEC --dry-run --json``). ``space``: extra configurations (parameter mappings);
    ``shapes``: problems to sweep (mappings of problem keys). Without a GPU a real run raises NoDevice.
    Several GPUs or a Dask cluster: use ``smemtile tune --executor dask``. The winner is not written as a spec
    here: ``best["params"]`` holds its parameters."""
    from smemtile.pipeline.tune import plan_problems

    res = load_spec(spec)
    top = _int(top, "top", 0)
    source = res.source
    docs = [(source, copy.deepcopy(res.doc))]
    arch0 = str(res.doc.get("arch", "sm_90"))
    if dry_run:
        problems = plan_problems(docs, shapes, top=top, space=space, arch=arch0)
        out = [_problem_doc(p, arch0) for p in problems]
        doc = (
            {**out[0], "dry_run": True, "problems": out}
            if len(out) == 1
            else {"dry_run": True, "problems": out}
        )
        return TuneResult(normalise(doc))
    return TuneResult(normalise(_tune_on_gpu(docs, shapes, top, space, arch0, device, seed, cache, force)))


def _problem_doc(p: dict, arch: str) -> dict:
    return {
        "spec": p["spec"],
        "family": p["family"],
        "problem": p["problem"],
        "arch": arch,
        "candidates": [c.to_dict() for c in p["candidates"]],
    }


def _tune_on_gpu(docs, shapes, top, space, arch0, device, seed, cache_path, force) -> dict:
    """The CLI's local run (smemtile.cli.tune): start the executor (NoDevice here without a GPU), plan on the
    device's arch, time through the schedule and the cache, summarise each problem."""
    from smemtile.cache import open_cache
    from smemtile.pipeline.executors import make_executor
    from smemtile.pipeline.schedule import tune_problems
    from smemtile.pipeline.tune import plan_problems, summarize

    problems = plan_problems(docs, shapes, top=top, space=space, arch=arch0)  # bad input before any GPU work
    ex = make_executor("local", gpus="all", runner="smemtile.gpu.tune:GpuRunner", seed=seed, device=device)
    try:
        ex.start()
        arch = ex.slots()[0].info["arch"]
        if arch != arch0:
            problems = plan_problems(docs, shapes, top=top, space=space, arch=arch)
        cache = open_cache(cache_path, warn=lambda msg: None)
        result = tune_problems(problems, ex, cache, force=force)
        slots = ex.slots()
        out = []
        for p, rows in zip(problems, result["rows"], strict=True):
            d = _problem_doc(p, arch)
            d.update(
                device=slots[0].info["device"], rows=rows, summary=summarize(rows), cache=str(cache.path)
            )
            out.append(d)
        run = {k: result[k] for k in ("counts", "failures", "skipped", "events", "slots", "wall_s")}
        run["executor"] = ex.name
        doc = {
            "executor": ex.name,
            "devices": result["slots"],
            "cache": str(cache.path),
            "run": run,
            "problems": out,
        }
        if len(out) == 1:
            doc = {**out[0], "environment": slots[0].env, **doc}
        return doc
    finally:
        ex.close()


# ---- inspect: the user's own kernel -------------------------------------------------------------------------------
def inspect(
    kernel_file: str | os.PathLike,
    *,
    kernel: str | None = None,
    grid=(1, 1, 1),
    block=(32, 1, 1),
    smem: int | str = 0,
    args=None,
    defines=(),
    arch: str = "sm_90",
    mode: str = "auto",
    ncu: bool = False,
    emit_spec: str | os.PathLike | None = None,
    device: int = 0,
) -> InspectResult:
    """The user's own kernel (``.cu`` through NVRTC, or ``.ptx``) launched with ``grid`` / ``block`` / ``smem``
    and ``args`` (an ARGS.yaml path, YAML text or a list of mappings): per source line its shared-memory
    wavefronts against the ideal, the lanes and banks, and the fix (``smemtile inspect ... --json``).
    In a list, the caller's own objects may stand for arguments, in parameter order: a device array (torch,
    CuPy: ``__cuda_array_interface__`` or DLPack; its pointer is passed, nothing is copied), a numpy array
    (copied to the device and back after the launch, so it holds the kernel's results; the emulator only reads
    it) or a number for a scalar parameter; each is checked against the kernel's PTX parameter type.
    ``mode``: ``simulate`` (the CPU emulator of the sampled warps), ``gpu``, ``listing`` or ``auto`` (the GPU when
    there is one, else the listing with ``no_device`` set; the CLI then exits 3)."""
    from smemtile.model.sizes import parse_size
    from smemtile.pipeline.inspect import inspect as run

    res = run(
        kernel_file,
        kernel=kernel,
        grid=grid,
        block=block,
        smem=parse_size(smem, key="smem"),
        args=args,
        defines=defines,
        arch=arch,
        mode=mode,
        ncu=ncu,
        emit_spec=emit_spec,
        device=device,
    )
    return InspectResult(normalise(res.to_dict()), report=res)
