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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from smemtile.api_results import (
    AnalyzeResult,
    FixResult,
    GenerateResult,
    InspectResult,
    OccupancyResult,
    ReportResult,
    TilesResult,
    TuneResult,
    VerifyResult,
    normalise,
)
from smemtile.errors import OutOfResources, SpecError
from smemtile.families.registry import NAMES

SpecLike = str | os.PathLike | dict

__all__ = [
    "analyze",
    "fix",
    "generate",
    "inspect",
    "load_spec",
    "occupancy",
    "report_page",
    "tiles",
    "tune",
    "verify",
]


# ---- specs: a path, a YAML string or a dict ----------------------------------------------------------------------
def _is_yaml_text(text: str) -> bool:
    """A string with a newline or a ``key: value`` colon is YAML text; anything else names a file."""
    return "\n" in text or (":" in text and not os.path.exists(text))


def load_spec(spec: SpecLike, *, arch: str | None = None, first: bool = False):
    """The resolved spec (``smemtile.pipeline.specs.Resolved``) for a path, a YAML string or a dict.

    A path is read exactly as the CLI reads it (``smemtile.fileio``: a regular file of at most 1 MiB, UTF-8;
    ``-`` is stdin); a YAML string or a dict is validated the same way and named ``<string>`` / ``<dict>`` in
    messages. ``arch`` overrides the spec's architecture (``smemtile generate --arch``). ``first=True``: a file
    holding a stream of specs (``smemtile tiles --format yaml``) resolves to its first one, and the result's
    ``documents`` says how many it held (``smemtile generate`` takes the first; otherwise a stream is refused).
    A resolved spec is returned as it is."""
    from smemtile.pipeline.specs import Resolved, load, resolve

    if isinstance(spec, Resolved):
        return spec
    if isinstance(spec, dict):
        return resolve(copy.deepcopy(spec), "<dict>", arch=arch)
    if isinstance(spec, os.PathLike):
        return load(Path(spec), arch=arch, first=first)
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
    return load(spec, arch=arch, first=first)


def _is_path(spec: Any) -> bool:
    return isinstance(spec, os.PathLike) or (isinstance(spec, str) and not _is_yaml_text(spec))


def _origin(spec: SpecLike) -> str:
    """The name ``generate`` writes into the .cu header (the CLI: the spec file's name)."""
    if _is_path(spec):
        return Path(spec).name
    if isinstance(spec, dict):
        return "<dict>"
    return "<string>" if isinstance(spec, str) else Path(getattr(spec, "source", "<spec>")).name


def _spec_path(spec: SpecLike, res) -> Path:
    """The spec's name in a document (``verify``'s ``spec``): its path as given (``-`` for stdin), else the
    resolved spec's source (``<string>``, ``<dict>``)."""
    return Path(spec) if _is_path(spec) else Path(res.source)


# ---- analyze, fix ---------------------------------------------------------------------------------------------
def analyze(spec: SpecLike, *, regs: int | None = None, compile: bool = True) -> AnalyzeResult:
    """The bank analysis of every access, the verified fixes, declarations, tile sizes, the cp.async pipeline,
    occupancy and the review checklist (``smemtile analyze SPEC --json``).

    ``regs``: registers per thread for the occupancy parts (default: ptxas' count for a kernel spec, else the
    spec's ``regs:``, else 64, stated as an assumption). ``compile=False``: no NVRTC (``--no-compile``)."""
    from smemtile.pipeline.analyze import analyze as run

    if regs is not None and not (isinstance(regs, int) and 1 <= regs <= 255):
        raise SpecError(f"registers per thread must be an integer 1..255, got {regs!r}", key="regs")
    res = load_spec(spec)
    rep = run(res, regs=regs, compile=compile)
    return AnalyzeResult(lambda: normalise(rep.to_dict()), report=rep, resolved=res)


def report_page(
    spec: SpecLike, output: str | os.PathLike, *, regs: int | None = None, compile: bool = True
) -> ReportResult:
    """The analysis as one self-contained HTML page written to ``output`` (``smemtile report SPEC -o FILE``; not
    named ``report``: that is the rendering package ``smemtile.report``):
    bank heatmaps before and after the fix, the layout grid, the occupancy curves, the tile ranking, the
    declarations and the checklist; inline SVG, nothing fetched. ``output`` must be a ``.html`` file that is not
    the spec (checked before any work); written atomically. ``regs``/``compile`` as :func:`analyze`."""
    from smemtile.pipeline.page import check_output, write_page

    output = Path(output)
    path = (
        Path(spec)
        if isinstance(spec, (str, os.PathLike)) and not (isinstance(spec, str) and _is_yaml_text(spec))
        else Path("-")
    )
    check_output(output, path)
    a = analyze(spec, regs=regs, compile=compile)
    done = write_page(a.report, a.resolved, output, path)
    return ReportResult(done, analysis=a)


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
    reads the GPU; an ``smemtile.model.arch.Arch`` is taken as it is. A block that does not fit is data:
    ``active_blocks == 0`` and ``reason`` say why (the CLI exits 1)."""
    from smemtile.gpu.device import resolve_arch
    from smemtile.model.arch import FEATURES, Arch
    from smemtile.model.occupancy import active_clusters
    from smemtile.model.occupancy import occupancy as run
    from smemtile.model.sizes import parse_size
    from smemtile.model.tiling_gpus import get_gpu

    a = arch if isinstance(arch, Arch) else resolve_arch(arch)
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
    cc = FEATURES["clusters"][0]  # the arch table's first architecture with clusters
    if size > 1 and tuple(a.cc) < cc:  # no answer for hardware without clusters
        raise SpecError(
            f"thread-block clusters need sm_{cc[0]}{cc[1]} or later; the target is {a.name}", key="cluster"
        )
    gpu = get_gpu(None, getattr(a, "base", a.name))
    n = _int(sms, "sms", 1) if sms is not None else gpu.sms
    clusters = {**active_clusters(r.active_blocks, size, n, gpu.key if sms is None else None), "sms": n}
    return OccupancyResult(normalise({**r.to_dict(), "clusters": clusters}), report=r, arch=a)


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
    triton: bool = False,
    **problem: int | str,
) -> TilesResult:
    """Ranked tile configurations with reasons, and the rejected ones with why (``smemtile tiles ... --json``).

    GEMM: ``tiles(M, N, K, dtype="f32"|"f16"|"bf16"|..., arch="sm_90")``. A family that ranks its own
    configurations (``tiles --family``): ``tiles(family=NAME, ...)`` with its sizes by the family's problem keys
    (or positionally), its dtype, and its model's options (``radius``). ``top`` / ``rejected``: how many of each
    the result holds (the CLI's --top, --rejected). ``vendor`` (``nvidia`` / ``amd``), ``gpu`` (the roofline's GPU
    row: ``h200``, ``a100``, ``mi300x``, ...) and ``sms`` (the SM / CU count; GEMM only) pick the hardware;
    ``arch="auto"`` reads this machine's GPU. ``triton=True`` (GEMM): the tensor-core tiles as Triton runs them,
    ranked with the Triton efficiency measured on the H200 (``smemtile tiles --format triton``; then
    ``triton_configs()`` is the ``triton.Config`` list)."""
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
    report = pt.recommend(*sizes, dtype, arch, vendor=vendor, gpu=gpu, sms=n_sms, triton=bool(triton))
    if not report.ranked:
        raise OutOfResources(
            f"no configuration fits {report.problem.arch}: {report.rejected[0].reason}"
            if report.rejected
            else "no candidates"
        )
    return TilesResult(
        lambda: normalise(_gemm_doc(report, top, rejected)), report=report, top=top, rejected=rejected
    )


def _gemm_doc(report, top: int, rejected: int) -> dict:
    from smemtile.pipeline import tiles as pt
    from smemtile.report import tiles as rt

    doc = pt.json_doc(report, top, rejected)
    hopper = rt.hopper_seam(report)  # sm_90 16-bit: the faster family is one target away (as the CLI says)
    if hopper is not None:
        doc["hopper"] = hopper
    return doc


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
    # a model option by its CLI spelling as a Python name (--head-dim: head_dim, --seq: seq) or by its own name
    # (seq_q)
    opts = FAMILIES[family].tile_model.options
    spelled = {o.option.lstrip("-"): o.name for o in opts}  # the CLI's own (head-dim)
    spelled |= {o.option.lstrip("-").replace("-", "_"): o.name for o in opts} | {o.name: o.name for o in opts}
    keys = {"R": radius}
    keys |= {spelled[k]: problem.pop(k) for k in list(problem) if k in spelled and k not in ints}
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
    rep = pt.family_tiles(family, sizes, dtype=dtype, keys=keys, arch=arch, gpu=gpu)
    if not rep.ranked:
        raise OutOfResources(
            f"no {family} configuration fits: {rep.rejected[0]['reason']}"
            if rep.rejected
            else "no candidates"
        )
    return TilesResult(
        lambda: normalise(pt.family_json_doc(rep, top, rejected)), report=rep, top=top, rejected=rejected
    )


def _this_gpu() -> tuple[str, int]:
    """``arch="auto"``: this machine's GPU, its arch and SM count (NoDevice without one)."""
    from smemtile.gpu.device import device_attributes

    attrs = device_attributes(0)
    return f"sm_{attrs['cc_major']}{attrs['cc_minor']}", attrs["sm_count"]


# ---- generate, verify -----------------------------------------------------------------------------------------
def _kernel_spec(res):
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
    name: str | None = None,
    origin: str | None = None,
    first: bool = False,
) -> GenerateResult:
    """The CUDA kernel of a kernel spec (``smemtile generate SPEC --json``): ``source`` is the standalone .cu
    (analysis header, the template, its instantiation, the host launch helper), ``to_dict()`` the launch
    description (kernel, name_expression, grid, block, dynamic_smem_bytes, params, checklist, ...).

    ``variant``: ``fixed`` (the fix search's layouts) or ``baseline`` (the spec's own); ``arch`` generates for
    another architecture; ``compile=False`` skips NVRTC (no ptxas numbers); ``diff`` adds a unified diff
    against the other variant (and ``diff_sources``, both variants' sources). ``name``: call the launch helper
    ``launch_NAME()`` (a C identifier; default the family's name; the device code is unchanged, so several
    generated files can share one translation unit). ``origin``: the spec's name in the .cu header (default:
    the file's name, ``<string>`` or ``<dict>``). ``first=True``: a file holding a stream of specs generates its
    first (``smemtile generate``); ``report`` is the build (kernel, checklist, compile note)."""
    from smemtile.pipeline.build import build
    from smemtile.pipeline.fixes import variants

    if variant not in ("fixed", "baseline"):
        raise SpecError(f"unknown variant {variant!r}; choose fixed or baseline", key="variant")
    res = _kernel_spec(load_spec(spec, arch=arch, first=first))
    v = variants(res)
    cfg, base = v[variant], v["baseline"]
    if name:  # refused before anything is compiled
        from smemtile.codegen.render import helper_name

        helper_name(cfg, name)
    other = v["fixed"] if variant == "baseline" else base
    built = _named(
        build(cfg, baseline=base, compile=compile, origin=_origin(spec) if origin is None else origin), name
    )
    gk = built.kernel
    doc = gk.to_dict(file=None)
    doc["variant"] = variant
    doc["checklist"] = [i.to_dict() for i in built.checklist]
    sources = None
    if diff:
        other_source = _named(build(other, compile=False), name).kernel.source
        doc["diff"] = _unified(other_source, gk.source, variant)

        def sources() -> dict:
            if variant == "fixed":
                return {"baseline": other_source, "fixed": gk.source}
            return {"baseline": _named(build(base, compile=False), name).kernel.source, "fixed": other_source}

    return GenerateResult(lambda: normalise(doc), source=gk.source, report=built, sources=sources)


def _named(built, name: str | None):
    """``built`` with its launch helper called launch_NAME() (the device code is unchanged) and the checklist
    evaluated on the renamed helper."""
    if not name:
        return built
    from dataclasses import replace

    from smemtile.codegen.checklist import evaluate

    gk = built.kernel.named(name)
    return replace(built, kernel=gk, checklist=evaluate(gk, ptx=getattr(built.compiled, "ptx", None) or None))


def _unified(a: str, b: str, variant: str) -> str:
    import difflib

    other = "baseline" if variant == "fixed" else "fixed"
    return "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), other, variant))


def verify(
    spec: SpecLike,
    *,
    compile_only: bool = False,
    device: int = 0,
    seed: int = 1234,
    variants: tuple[str, ...] = (),
    stages: tuple[int, ...] = (),
    ncu: bool = False,
    ncu_save: str | os.PathLike | None = None,
) -> VerifyResult:
    """Compile, run, check and time a spec's kernel, baseline and fixed (``smemtile verify SPEC --json``); a spec
    without ``kernel:`` runs its accesses as microkernels. ``compile_only=True`` needs no GPU (NVRTC and ptxas
    numbers, the model's occupancy; NoDevice when NVRTC cannot be loaded); otherwise NoDevice without one. A
    wrong result is ``correct is False`` (the CLI exits 1), not an exception. ``variants``: only these of
    ``baseline`` / ``fixed``; ``stages``: also the fixed layout with each of these stage counts; ``ncu``: also
    profile each variant under Nsight Compute (the ``ncu`` key; ignored with ``compile_only``), keeping its
    reports in the folder ``ncu_save``."""
    from smemtile.pipeline import verify as pipeline
    from smemtile.pipeline.fixes import fix_report
    from smemtile.pipeline.fixes import variants as family_variants

    names = ("baseline", "fixed")
    bad = [v for v in variants if v not in names]
    if bad:
        raise SpecError(f"unknown variant {bad[0]!r}; choose baseline or fixed", key="variants")
    res = load_spec(spec)
    path = _spec_path(spec, res)
    if compile_only:
        _require_nvrtc()
    if res.config is None:
        if stages:
            raise SpecError(
                "--stages needs a kernel: section (a family with a STAGES parameter)", source=str(path)
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
        return VerifyResult(lambda: normalise(doc), report=doc, microkernel=True)
    both = family_variants(res)
    cfgs = {v: both[v] for v in (variants or names)}
    cfgs.update(pipeline.stage_variants(both["fixed"], tuple(stages), str(path)))
    if compile_only:
        doc = pipeline.compile_only(path, cfgs)
    else:
        doc = pipeline.on_gpu(path, cfgs, device, seed)
        if ncu:
            save = None if ncu_save is None else Path(ncu_save)
            doc["ncu"] = pipeline.with_ncu(path, cfgs, doc, device, save)
    return VerifyResult(lambda: normalise(doc), report=doc)


def _require_nvrtc() -> None:
    """``compile_only`` is the compile: without NVRTC there is nothing to report, so NoDevice (exit 3)."""
    from smemtile.errors import NoDevice, SmemtileError
    from smemtile.gpu.nvrtc import nvrtc_version

    try:
        nvrtc_version()
    except NoDevice:
        raise
    except SmemtileError as e:
        raise NoDevice(f"NVRTC cannot be used ({e}); --compile-only needs it") from None
    except Exception as e:  # the bindings import but libnvrtc does not load
        raise NoDevice(
            f"NVRTC cannot be loaded ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
            "pip install nvidia-cuda-nvrtc"
        ) from None


# ---- tune -----------------------------------------------------------------------------------------------------
def tune(
    spec: SpecLike | list[SpecLike] | tuple[SpecLike, ...],
    *,
    top: int = 6,
    space: list[dict] | str | os.PathLike | None = None,
    shapes: list[dict] | str | os.PathLike | None = None,
    dry_run: bool = False,
    device: int = 0,
    seed: int = 1234,
    cache: str | os.PathLike | None = None,
    force: bool = False,
    executor: str = "local",
    gpus: str | int = "all",
    compile_workers: int | None = None,
    simulate: bool = False,
    out: str | os.PathLike | bool | None = None,
    progress: Callable[[dict], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> TuneResult:
    """Time the tile model's top ``top`` configurations of a kernel spec on GPUs, cached and resumable
    (``smemtile tune SPEC... --json``); ``dry_run=True`` returns the plan without a GPU (``--dry-run``).

    ``spec``: one spec or a list (each is one problem, as ``smemtile tune A.yaml B.yaml``); a path is read as the
    command reads it (one YAML mapping). ``space``: extra configurations, a list of parameter mappings or a
    file of them (or of specs: ``smemtile tiles --format yaml``); ``shapes``: problems to sweep, a list of
    mappings of problem keys or a file of them. ``cache``: the result cache (default ``smemtile tune``'s);
    ``force``: measure again. ``executor``: ``local`` (this process times on one GPU while CPU processes
    compile), ``dask`` (one worker per GPU) or ``dask://HOST:PORT``, over ``gpus`` GPUs (``all`` or a number)
    with ``compile_workers`` CPU processes; ``device``: the local executor's GPU; ``simulate=True``: simulated
    devices with made-up deterministic times (no GPU). Without a GPU a real run raises NoDevice.

    ``out``: also write each winner as a spec, to this file (one problem) or folder (several; one
    ``<spec>.<problem>.tuned.yaml`` each); ``True``: ``<spec>.tuned.yaml`` in the current folder (the command's
    default); None: not written (``best["params"]`` holds its parameters). ``progress`` is called once with
    ``{"total": candidates, "done": 0}`` before anything is compiled, then with a status snapshot (compiled,
    timed, cached, skipped, requeued, done, total, gpus, eta_s) as the run goes;
    ``warn`` with each warning about the cache (a line that could not be read). ``report`` is the document
    before normalising. A KeyboardInterrupt ends the executor's processes and workers before it propagates;
    every result measured so far is already in the cache."""
    from smemtile.pipeline.tune import plan_problems

    top = _int(top, "top", 0)
    specs = list(spec) if isinstance(spec, (list, tuple)) else [spec]
    if not specs:
        raise SpecError("give at least one spec", key="spec")
    docs = [_tune_doc(s) for s in specs]
    extra = _tune_entries(space, "--space")
    shape_list = _tune_entries(shapes, "--shapes")
    shapes_source = str(shapes) if _is_path(shapes) else "--shapes"
    arch0 = str(docs[0][1].get("arch", "sm_90"))

    def planned(arch: str) -> list[dict]:
        return plan_problems(docs, shape_list, top=top, space=extra, arch=arch, shapes_source=shapes_source)

    if dry_run:
        problems = planned(arch0)  # validates every spec and shape: bad input is SpecError
        out_docs = [_problem_doc(p, arch0) for p in problems]
        doc = (
            {**out_docs[0], "dry_run": True, "problems": out_docs}
            if len(out_docs) == 1
            else {"dry_run": True, "problems": out_docs}
        )
        return TuneResult(lambda: normalise(doc), report=doc)
    from smemtile.pipeline.executors import make_executor

    runner = "smemtile.gpu.tune:SimulatedRunner" if simulate else "smemtile.gpu.tune:GpuRunner"
    ex = make_executor(
        executor, gpus=gpus, runner=runner, seed=seed, device=device, compile_workers=compile_workers
    )
    inputs = [Path(p) for p in (space, shapes) if _is_path(p)]
    write = out is not None and out is not False
    target = Path(out) if write and out is not True else None
    interrupted = False
    try:
        doc = _tune_run(ex, planned, arch0, write, target, cache, force, inputs, progress, warn)
    except BaseException as e:
        interrupted = not isinstance(
            e, (Exception, SystemExit, GeneratorExit)
        )  # Ctrl-C, a signal's exception
        raise
    finally:
        ex.close()
        if interrupted:  # its compile processes and workers, the whole process tree
            try:
                getattr(ex, "terminate", ex.close)()
            except BaseException:
                pass
    return TuneResult(lambda: normalise(doc), report=doc)


def _tune_doc(spec: SpecLike) -> tuple[str, dict]:
    """(name, YAML document) of one spec to tune: a path is read as ``smemtile tune`` reads it (fileio first:
    a regular file or FIFO, at most 1 MiB, UTF-8; then the YAML parser), anything else through load_spec."""
    if _is_path(spec):
        from smemtile.fileio import read_text
        from smemtile.pipeline.tune import load_docs

        found = load_docs(spec, read_text(spec, what="spec"))
        if len(found) != 1 or not isinstance(found[0], dict):
            raise SpecError("expected one spec document (a mapping)", source=str(spec))
        return str(spec), found[0]
    res = load_spec(spec)
    return res.source, copy.deepcopy(res.doc)


def _tune_entries(entries, key: str) -> list[dict] | None:
    """``space`` / ``shapes``: a list as it is, or a file read as the command reads its --space / --shapes."""
    if entries is None or not _is_path(entries):
        return entries
    from smemtile.fileio import read_text
    from smemtile.pipeline import tune as pt

    parse = pt.space_entries if key == "--space" else pt.shape_entries
    return parse(entries, read_text(entries, what=f"{key} file", key=key))


def _problem_doc(p: dict, arch: str) -> dict:
    return {
        "spec": p["spec"],
        "family": p["family"],
        "problem": p["problem"],
        "arch": arch,
        "candidates": [c.to_dict() for c in p["candidates"]],
    }


def _tune_run(ex, planned, arch0, write, out, cache_path, force, inputs, progress, warn) -> dict:
    """Start the executor (processes, one CUDA context per GPU) in a thread while planning on the spec's arch,
    plan again on the device's arch if it differs, time through the schedule and the cache, summarise each
    problem, write the winners (``write``: to ``out``, or the default names)."""
    import threading

    from smemtile.cache import open_cache
    from smemtile.pipeline.schedule import tune_problems
    from smemtile.pipeline.tune import summarize

    started: dict = {}

    def start() -> None:
        try:
            ex.start()
        except BaseException as e:  # re-raised here: NoDevice, SpecError
            started["error"] = e

    t = threading.Thread(target=start, daemon=True)
    t.start()
    problems = planned(arch0)
    t.join()
    if "error" in started:
        raise started["error"]
    arch = ex.slots()[0].info["arch"]
    if arch != arch0:
        problems = planned(arch)
    cache = open_cache(cache_path, warn=warn or (lambda msg: None))
    slots = ex.slots()
    total = sum(len(p["candidates"]) for p in problems)
    tick = None
    if progress is not None:
        progress({"total": total, "done": 0})  # the start, before anything is compiled
        tick = lambda s: progress({**s, "total": total})  # noqa: E731
    result = tune_problems(problems, ex, cache, force=force, progress=tick)
    docs = []
    for p, rows in zip(problems, result["rows"], strict=True):
        d = _problem_doc(p, arch)
        d.update(device=slots[0].info["device"], rows=rows, summary=summarize(rows), cache=str(cache.path))
        docs.append(d)
    if write:
        targets = _winner_paths(docs, out)
        for d, p, target in zip(docs, problems, targets, strict=True):
            if d["summary"]["best"] is not None:
                d["winner_spec"] = str(_write_winner(d, p["doc"], target, [*inputs, cache.path]))
    run = {k: result[k] for k in ("counts", "failures", "skipped", "events", "slots", "wall_s")}
    run["executor"] = ex.name
    doc = {
        "executor": ex.name,
        "devices": result["slots"],
        "cache": str(cache.path),
        "run": run,
        "problems": docs,
    }
    if len(docs) == 1:  # one problem: its keys at the top as well (the single-spec document scripts read)
        doc = {**docs[0], "environment": slots[0].env, **doc}
    return doc


def _label(problem: dict) -> str:
    return "_".join(f"{k}{v}" for k, v in problem.items() if k not in ("alpha", "beta"))


def _winner_paths(docs: list[dict], out: Path | None) -> list[Path]:
    """One problem: ``out`` or ``<spec>.tuned.yaml`` here; several: ``<spec>.<problem>.tuned.yaml`` in ``out``."""
    if len(docs) == 1:
        return [out or Path.cwd() / f"{Path(docs[0]['spec']).stem}.tuned.yaml"]
    folder = out or Path.cwd()
    if folder.exists() and not folder.is_dir():
        raise SpecError("with several problems -o names a folder (one winner spec per problem)", key="-o")
    folder.mkdir(parents=True, exist_ok=True)
    paths, seen = [], set()
    for i, d in enumerate(docs):
        name = f"{Path(d['spec']).stem}.{_label(d['problem'])}.tuned.yaml"
        if name in seen:
            name = f"{Path(d['spec']).stem}.{i}.{_label(d['problem'])}.tuned.yaml"
        seen.add(name)
        paths.append(folder / name)
    return paths


def _write_winner(d: dict, doc: dict, target: Path, others=()) -> Path:
    import yaml

    from smemtile.fileio import printable, write_text_atomic
    from smemtile.pipeline.tune import respec

    best, spec = d["summary"]["best"], Path(d["spec"])
    new = respec(doc, d["family"], best["params"], best.get("layouts"), str(spec))
    unit = "TFLOP/s" if best.get("unit") == "tflops" else "GB/s"
    # printable: a newline (or any control character) in the file name would end the comment and add YAML
    head = (
        f"# smemtile tune {printable(spec)}: winner {printable(best['label'])}, {best['time_ms']:.4f} ms "
        f"median, {best['value']:.1f} {unit}\n"
    )
    text = head + yaml.safe_dump(new, sort_keys=False, default_flow_style=None, width=120)
    # fileio: O_EXCL temp file, fsync, rename; never the spec, --space, --shapes or the cache
    return write_text_atomic(target, text, key="-o", inputs=[spec, *others])


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
    blocks: int = 2,
    warps: int = 4,
    executions: int = 64,
    max_steps: int | None = None,
) -> InspectResult:
    """The user's own kernel (``.cu`` through NVRTC, or ``.ptx``) launched with ``grid`` / ``block`` / ``smem``
    and ``args`` (an ARGS.yaml path, YAML text or a list of mappings): per source line its shared-memory
    wavefronts against the ideal, the lanes and banks, and the fix (``smemtile inspect ... --json``).
    In a list, the caller's own objects may stand for arguments, in parameter order: a device array (torch,
    CuPy: ``__cuda_array_interface__`` or DLPack; its pointer is passed, nothing is copied), a numpy array
    (copied to the device and back after the launch, so it holds the kernel's results; the emulator only reads
    it) or a number for a scalar parameter; each is checked against the kernel's PTX parameter type.
    ``mode``: ``simulate`` (the CPU emulator of the sampled warps), ``gpu``, ``listing`` or ``auto`` (the GPU when
    there is one, else the listing with ``no_device`` set; the CLI then exits 3). ``emit_spec``: also write
    the recorded accesses as a spec file that ``analyze`` takes. The sample recorded: the first ``blocks``
    blocks, warps 0..``warps``-1 of each, the first ``executions`` executions of each instruction per warp;
    ``max_steps``: PTX instructions per warp before the emulator stops (default 2,000,000)."""
    from smemtile.model.sizes import parse_size
    from smemtile.pipeline.inspect import Sample
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
        sample=Sample(blocks, warps, executions),
        emit_spec=emit_spec,
        max_steps=max_steps,
        device=device,
    )
    return InspectResult(lambda: normalise(res.to_dict()), report=res)
