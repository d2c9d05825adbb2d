"""A kernel family's search space for Kernel Tuner (``kernel_tuner.tune_kernel``), so its strategies, cache and
observers can run smemtile's kernels:

    import kernel_tuner, smemtile.kernel_tuner
    space = smemtile.kernel_tuner.export(FAMILY, {"rows": 8192, "cols": 8192}, dtype="f32", arch="sm_90")
    results, env = kernel_tuner.tune_kernel(**space)

A family exports its space by declaring ``kernel_tuner_space`` (smemtile.families.base.Family): the tune
parameters and the family parameter (or buffer padding) each one sets, the problem keys that are Kernel Tuner's
problem size and the tune parameters each grid axis divides by. ``exportable()`` lists the families that do.

The kernel source is the family's .cu through smemtile's codegen (``smemtile generate``'s body), made one
``extern "C"`` entry point Kernel Tuner can look up by name: the family's template kernel becomes a
``__device__`` function and a ``__global__`` wrapper instantiates it with the tuned parameters, which Kernel
Tuner defines as preprocessor macros (``#define block_size_x 64`` ...) before compiling; ``export`` checks that
no tune parameter collides with a name in the source.

``restrictions`` is a callable that asks the family's own contract (``smemtile.families.configure``), the same
rules ``generate`` and ``tune`` apply, so Kernel Tuner never compiles a configuration the family refuses.
``arguments`` are numpy arrays and scalars in the kernel's order (from the family's launch plan), ``answer`` the
family's reference for its output, so Kernel Tuner checks every configuration. ``lang`` is ``NVCUDA``
(cuda-python, which smemtile already needs).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from smemtile.errors import SpecError

KT_MISSING = "smemtile.kernel_tuner.tune needs Kernel Tuner: pip install 'smemtile[kernel_tuner]'"


def exportable() -> list[str]:
    """The families that declare a Kernel Tuner space."""
    from smemtile.families import FAMILIES

    return [n for n, f in FAMILIES.items() if f.kernel_tuner_space is not None]


def kernel_name(fam) -> str:
    return f"smemtile_{fam.name}_kt"


def _space(family):
    from smemtile.families import get_family

    fam = get_family(family)
    if fam.kernel_tuner_space is None:
        raise SpecError(
            f"{fam.name} declares no Kernel Tuner space; families with one: {', '.join(exportable())}",
            key="family",
        )
    return fam, fam.kernel_tuner_space


def _config(fam, problem: dict, arch: str, params: dict):
    """The family configuration for one point of the space (ContractViolation when the family refuses it)."""
    from smemtile.families import configure

    tune = fam.kernel_tuner_space["tune"]
    fam_params = {tune[k][0]: v for k, v in params.items() if not tune[k][0].startswith("pad:")}
    layouts = {tune[k][0][4:]: {"pad": int(v)} for k, v in params.items() if tune[k][0].startswith("pad:")}
    return configure(fam, {**fam_params, **problem}, layouts, arch)


def restriction(fam, problem: dict, arch: str):
    """The family's contract as a Kernel Tuner restriction: ``f(params) -> bool``."""
    from smemtile.families.base import ContractViolation

    tune = fam.kernel_tuner_space["tune"]

    def allowed(params: dict) -> bool:
        try:
            _config(fam, problem, arch, {k: params[k] for k in tune})
        except (ContractViolation, SpecError):
            return False
        return True

    return allowed


def _code_tokens(source: str) -> set[str]:
    """Identifiers of the code (comments removed): what a ``#define`` of the same name would rewrite."""
    code = re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.S)
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", code))


def _template(name: str) -> re.Pattern:
    return re.compile(
        r"template\s*<(?P<tparams>[^;{]*?)>\s*__global__\s+void\s+"
        r"(?P<lb>__launch_bounds__\((?:[^()]|\([^()]*\))*\))?"
        r"\s*(?://[^\n]*\n)?\s*" + re.escape(name) + r"\s*\((?P<args>[^)]*)\)\s*\{"
    )


def kernel_source(cfg) -> tuple[str, str]:
    """The family's generated body with its template kernel as a ``__device__`` function and an ``extern "C"``
    wrapper taking the tuned parameters as macros (fixed ones as the base configuration's values); and the
    wrapper's parameter list (``const float* __restrict__ in, ...``)."""
    from smemtile.codegen.render import body
    from smemtile.families import FAMILIES

    fam = FAMILIES[cfg.family]
    tune = fam.kernel_tuner_space["tune"]
    src = body(cfg)
    m = _template(fam.kernel).search(src)
    if m is None:
        raise SpecError(
            f"the {fam.name} template kernel was not found in the generated source", key="kernel_source"
        )
    tparams = [t.strip() for t in m.group("tparams").split(",")]
    names = [t.split("=")[0].split()[-1] for t in tparams]
    defaults = [t.split("=", 1)[1].strip() if "=" in t else None for t in tparams]
    expr = fam.name_expression(cfg)  # kernel<float, 64, 8, ...>: the base configuration's values, in order
    values = [v.strip() for v in expr[expr.index("<") + 1 : expr.rindex(">")].split(",")]
    if len(values) > len(names) or any(d is None for d in defaults[len(values) :]):
        raise SpecError(
            f"{expr} does not match the template's parameters ({', '.join(names)})", key="kernel_source"
        )
    values += defaults[len(values) :]  # parameters the expression leaves out take the template's defaults
    by_name = dict(zip(names, values, strict=True))
    for tuned, (param, _) in tune.items():
        by_name["PAD" if param.startswith("pad:") else param] = tuned
    head = (
        src[: m.start()] + f"template <{m.group('tparams')}>\n__device__ __forceinline__ void {fam.kernel}("
    )
    head += m.group("args") + ") {"
    src = head + src[m.end() :]
    src = re.sub(r"^template __global__ void " + re.escape(fam.kernel) + r"<[^\n]*;\n", "", src, flags=re.M)
    ctype = values[0]
    args = m.group("args").replace("const T*", f"const {ctype}*").replace("T*", f"{ctype}*")
    arg_names = [a.split()[-1].lstrip("*") for a in args.split(",")]
    targs = ", ".join(by_name[n] for n in names)
    wrapper = (
        f'\nextern "C" __global__ void __launch_bounds__(block_size_x * block_size_y)\n{kernel_name(fam)}'
        f"({args}) {{\n    {fam.kernel}<{targs}>({', '.join(arg_names)});\n}}\n"
    )
    return src + wrapper, args


def _numpy_type(dtype: str):
    from smemtile.model.dtypes import C_TYPES, DTYPES

    storage = DTYPES[dtype].storage_ctype  # bf16 / f16 travel as their 16-bit patterns
    return np.dtype(DTYPES[C_TYPES[storage][0]].numpy).type


def _arguments(fam, cfg, arrays: dict) -> list:
    """The main kernel's arguments in order, from the family's launch plan (the expressions ``generate``,
    ``verify`` and ``tune`` evaluate): the arrays by name for the pointers, ``np.int32`` scalars."""
    step = next(s for s in fam.launch(cfg).steps if s.main)
    call = next(c for c in fam.calls(cfg) if c.main)
    args: list = []
    for name, (value, ctype) in zip(call.args, step.args, strict=True):
        if "*" in ctype:
            args.append(arrays[name])
        elif ctype == "int":
            args.append(np.int32(value))
        else:
            raise SpecError(
                f"the {fam.name} kernel takes a {ctype} argument this export cannot pass", key="arguments"
            )
    return args


def export(family: str, problem: dict, *, dtype: str = "f32", arch: str = "sm_90", seed: int = 1234) -> dict:
    """The keyword arguments of ``kernel_tuner.tune_kernel`` for ``family`` on ``problem`` (the family's sizes
    by name, e.g. ``{"rows", "cols"}``): kernel_name, kernel_source, problem_size, arguments, tune_params,
    restrictions, grid_div_x / grid_div_y, block_size_names, answer, lang, compiler_options."""
    from smemtile.families import configure

    fam, space = _space(family)
    sizes = [pk.name for pk in fam.size_keys()]
    if not isinstance(problem, dict) or set(problem) != set(sizes):
        want = ", ".join(f"'{k}': ..." for k in sizes)
        raise SpecError(f"problem must be {{{want}}}, got {problem!r}", key="problem")
    dt = str(dtype).lower()
    choice = next((pk for pk in fam.problem_keys if pk.name == "dtype"), None)
    dtypes = choice.choices if choice is not None else ("f32",)
    if dt not in dtypes:
        raise SpecError(f"{fam.name} moves {', '.join(dtypes)}, not {dtype!r}", key="dtype")
    prob = {k: int(problem[k]) for k in sizes} | ({"dtype": dt} if choice is not None else {})
    base = configure(fam, prob, {}, arch)
    src, _ = kernel_source(base)
    clash = _code_tokens(src.split('extern "C" __global__')[0]) & (
        set(space["tune"]) | {"block_size_z", "grid_size_x", "grid_size_y", "grid_size_z", "kernel_tuner"}
    )
    if clash:
        raise SpecError(
            f"tune parameter names {sorted(clash)} collide with names in the kernel source", key="tune_params"
        )
    arrays = {k: np.asarray(v) for k, v in fam.make_inputs(base, np.random.default_rng(seed)).items()}
    out = fam.output_arg()
    arrays[out.name] = np.zeros(fam.array_shape(base, out), dtype=_numpy_type(dt))
    arguments = _arguments(fam, base, arrays)
    ref = np.ascontiguousarray(np.asarray(fam.reference(base, arrays)).astype(arrays[out.name].dtype))
    answer = [ref if a is arrays[out.name] else None for a in arguments]
    div = space["grid_div"]
    return {
        "kernel_name": kernel_name(fam),
        "kernel_source": src,
        "problem_size": tuple(int(prob[k]) for k in space["problem_size"]),
        "arguments": arguments,
        "tune_params": {k: list(v) for k, (_, v) in space["tune"].items()},
        "restrictions": restriction(fam, prob, arch),
        "grid_div_x": list(div[0]),
        "grid_div_y": list(div[1]) if len(div) > 1 else None,
        "block_size_names": ["block_size_x", "block_size_y", "block_size_z"],
        "answer": answer,
        "lang": "NVCUDA",
        "compiler_options": ["--std=c++17"],  # Kernel Tuner adds the device's --gpu-architecture
    }


def tune(family: str, problem: dict, *, dtype: str = "f32", arch: str = "sm_90", **kwargs: Any):
    """``kernel_tuner.tune_kernel(**export(...), **kwargs)`` (``strategy=``, ``cache=``, ``iterations=`` ...);
    ImportError with the install line when Kernel Tuner is missing."""
    try:
        import kernel_tuner
    except ImportError:
        raise ImportError(KT_MISSING) from None
    return kernel_tuner.tune_kernel(**{**export(family, problem, dtype=dtype, arch=arch), **kwargs})
