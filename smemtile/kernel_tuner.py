"""A kernel family's search space for Kernel Tuner (``kernel_tuner.tune_kernel``), so its strategies, cache and
observers can run smemtile's kernels:

    import kernel_tuner, smemtile.kernel_tuner
    space = smemtile.kernel_tuner.export("transpose", {"rows": 8192, "cols": 8192}, dtype="f32", arch="sm_90")
    results, env = kernel_tuner.tune_kernel(**space)

The kernel source is the family's .cu through smemtile's codegen (``smemtile generate``'s body), made one
``extern "C"`` entry point Kernel Tuner can look up by name: the family's template kernel becomes a
``__device__`` function and a ``__global__`` wrapper instantiates it with the tuned parameters, which Kernel
Tuner defines as preprocessor macros (``#define block_size_x 64`` ...) before compiling. The tuned names are
chosen so that no macro collides with a name in the source (checked by ``export``):

    tune parameter   family parameter   values
    block_size_x     TILE               32, 64, 128   (thread block x = TILE; Kernel Tuner's own name)
    block_size_y     BLOCK_ROWS         1 .. 32       (thread block y)
    smem_pad         layout pad         0, 1          (tile rows padded by 0 or 1 element)
    vec              VEC                0 (auto), 1, 2, 4, 8
    launch_order     GROUP              0 (column by column), 1 (row by row)

``restrictions`` is a callable that asks the family's own contract (``smemtile.families.configure``), the same
rules ``generate`` and ``tune`` apply, so Kernel Tuner never compiles a configuration the family refuses.
``arguments`` are numpy arrays (input, output) and the scalars in the kernel's order, ``answer`` the family's
reference (the transposed input), so Kernel Tuner checks every configuration. ``lang`` is ``NVCUDA``
(cuda-python, which smemtile already needs). Only the transpose family is exported; others raise SpecError.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from smemtile.errors import SpecError

KT_MISSING = "smemtile.kernel_tuner.tune needs Kernel Tuner: pip install 'smemtile[kernel_tuner]'"
KERNEL_NAME = "smemtile_transpose_kt"

# tune parameter -> (family parameter or "PAD" for the layout, values)
SPACE = {
    "block_size_x": ("TILE", (32, 64, 128)),
    "block_size_y": ("BLOCK_ROWS", (1, 2, 4, 8, 16, 32)),
    "smem_pad": ("PAD", (0, 1)),
    "vec": ("VEC", (0, 1, 2, 4, 8)),
    "launch_order": ("GROUP", (0, 1)),
}
_CTYPES = {
    "f32": ("float", np.float32),
    "f16": ("unsigned short", np.uint16),
    "bf16": ("unsigned short", np.uint16),
}
_TEMPLATE = re.compile(
    r"template\s*<(?P<tparams>[^;{]*?)>\s*__global__\s+void\s+(?P<lb>__launch_bounds__\((?:[^()]|\([^()]*\))*\))?"
    r"\s*(?://[^\n]*\n)?\s*transpose\s*\((?P<args>[^)]*)\)\s*\{"
)


def _config(problem: dict, dtype: str, arch: str, params: dict):
    """The family configuration for one point of the space (ContractViolation when the family refuses it)."""
    from smemtile.families import configure

    fam_params = {SPACE[k][0]: v for k, v in params.items() if SPACE[k][0] != "PAD"}
    layouts = {"tile": {"pad": int(params.get("smem_pad", 0))}}
    return configure("transpose", {**fam_params, **problem, "dtype": dtype}, layouts, arch)


def restriction(problem: dict, dtype: str, arch: str):
    """The family's contract as a Kernel Tuner restriction: ``f(params) -> bool``."""
    from smemtile.families.base import ContractViolation

    def allowed(params: dict) -> bool:
        try:
            _config(problem, dtype, arch, {k: params[k] for k in SPACE})
        except (ContractViolation, SpecError):
            return False
        return True

    return allowed


def _code_tokens(source: str) -> set[str]:
    """Identifiers of the code (comments removed): what a ``#define`` of the same name would rewrite."""
    code = re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.S)
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", code))


def kernel_source(cfg) -> tuple[str, str]:
    """The family's generated body with its template kernel as a ``__device__`` function and an ``extern "C"``
    wrapper taking the tuned parameters as macros (fixed ones as the base configuration's values); and the
    wrapper's parameter list (``const float* __restrict__ in, ...``)."""
    from smemtile.codegen.render import body
    from smemtile.families import FAMILIES

    fam = FAMILIES["transpose"]
    src = body(cfg)
    m = _TEMPLATE.search(src)
    if m is None:
        raise SpecError(
            "the transpose template kernel was not found in the generated source", key="kernel_source"
        )
    tparams = [t.strip() for t in m.group("tparams").split(",")]
    names = [t.split("=")[0].split()[-1] for t in tparams]
    defaults = [t.split("=", 1)[1].strip() if "=" in t else None for t in tparams]
    expr = fam.name_expression(cfg)  # transpose<float, 64, 8, ...>: the base configuration's values, in order
    values = [v.strip() for v in expr[expr.index("<") + 1 : expr.rindex(">")].split(",")]
    if len(values) > len(names) or any(d is None for d in defaults[len(values) :]):
        raise SpecError(
            f"{expr} does not match the template's parameters ({', '.join(names)})", key="kernel_source"
        )
    values += defaults[len(values) :]  # parameters the expression leaves out take the template's defaults
    by_name = dict(zip(names, values, strict=True))
    for tune, (param, _) in SPACE.items():
        by_name[param] = tune
    head = src[: m.start()] + f"template <{m.group('tparams')}>\n__device__ __forceinline__ void transpose("
    head += m.group("args") + ") {"
    src = head + src[m.end() :]
    src = re.sub(r"^template __global__ void transpose<[^\n]*;\n", "", src, flags=re.M)
    ctype = values[0]
    args = m.group("args").replace("const T*", f"const {ctype}*").replace("T*", f"{ctype}*")
    arg_names = [a.split()[-1].lstrip("*") for a in args.split(",")]
    targs = ", ".join(by_name[n] for n in names)
    wrapper = (
        f'\nextern "C" __global__ void __launch_bounds__(block_size_x * block_size_y)\n{KERNEL_NAME}({args}) '
        f"{{\n    transpose<{targs}>({', '.join(arg_names)});\n}}\n"
    )
    return src + wrapper, args


def _arguments(cfg, inp: np.ndarray, out: np.ndarray) -> list:
    """The main kernel's arguments in order, from the family's launch plan (the expressions ``generate``,
    ``verify`` and ``tune`` evaluate): the input and output arrays for the pointers, ``np.int32`` scalars."""
    from smemtile.families import FAMILIES

    step = next(s for s in FAMILIES["transpose"].launch(cfg).steps if s.main)
    args: list = []
    for value, ctype in step.args:
        if "*" in ctype:
            args.append(inp if str(ctype).startswith("const") else out)
        elif ctype == "int":
            args.append(np.int32(value))
        else:
            raise SpecError(
                f"the transpose kernel takes a {ctype} argument this export cannot pass", key="arguments"
            )
    return args


def export(family: str, problem: dict, *, dtype: str = "f32", arch: str = "sm_90", seed: int = 1234) -> dict:
    """The keyword arguments of ``kernel_tuner.tune_kernel`` for ``family`` on ``problem`` (``{"rows", "cols"}``
    for transpose): kernel_name, kernel_source, problem_size, arguments, tune_params, restrictions,
    grid_div_x / grid_div_y, block_size_names, answer, lang, compiler_options."""
    from smemtile.families import FAMILIES, configure

    if str(family).lower() != "transpose":
        raise SpecError(
            f"only the transpose family is exported to Kernel Tuner so far, not {family!r}", key="family"
        )
    dt = str(dtype).lower()
    if dt not in _CTYPES:
        raise SpecError(f"transpose moves {', '.join(_CTYPES)}, not {dtype!r}", key="dtype")
    if (
        not isinstance(problem, dict)
        or set(problem) - {"rows", "cols"}
        or not {"rows", "cols"} <= set(problem)
    ):
        raise SpecError(f"problem must be {{'rows': R, 'cols': C}}, got {problem!r}", key="problem")
    rows, cols = (int(problem[k]) for k in ("rows", "cols"))
    base = configure("transpose", {"rows": rows, "cols": cols, "dtype": dt}, {}, arch)
    src, _ = kernel_source(base)
    clash = _code_tokens(src.split('extern "C" __global__')[0]) & (
        set(SPACE) | {"block_size_z", "grid_size_x", "grid_size_y", "grid_size_z", "kernel_tuner"}
    )
    if clash:
        raise SpecError(
            f"tune parameter names {sorted(clash)} collide with names in the kernel source", key="tune_params"
        )
    rng = np.random.default_rng(seed)
    _, np_type = _CTYPES[dt]
    inp = FAMILIES["transpose"].make_inputs(base, rng)["in"]
    out = np.zeros((cols, rows), dtype=np_type)
    arguments = _arguments(base, inp, out)
    answer = [np.ascontiguousarray(inp.T) if a is out else None for a in arguments]
    return {
        "kernel_name": KERNEL_NAME,
        "kernel_source": src,
        "problem_size": (cols, rows),
        "arguments": arguments,
        "tune_params": {k: list(v) for k, (_, v) in SPACE.items()},
        "restrictions": restriction({"rows": rows, "cols": cols}, dt, arch),
        "grid_div_x": ["block_size_x"],  # grid = (ceil(cols / TILE), ceil(rows / TILE)): square tiles
        "grid_div_y": ["block_size_x"],
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
