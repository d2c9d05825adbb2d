"""A user's own host program around a generated ``.cu``: ``main()`` reads the inputs from files, calls the
generated ``launch_<family>()`` helper, and writes the output. Built with nvcc exactly as a user would build the
file ``smemtile generate -o`` wrote, so the GPU tests check the helper, not smemtile's Python launcher.

Arguments, one per helper parameter in order: an integer or float for scalars (leading dimensions included);
``in:PATH`` for an array the kernel reads (the raw bytes of the whole allocation, the array laid out in it with its
leading dimension and offset, poison elsewhere), ``out:PATH`` for an array it writes (an allocation of
``BYTES_<name>`` bytes poisoned with 0xFF first; the allocation is written back to PATH), ``inout:PATH`` for both.
``OFFSET_<name>`` (bytes) makes the pointer passed to the helper start that far into the allocation (a sub-view).
A helper with a workspace gets the program's own (poisoned) when the environment has WORKSPACE=1, else nullptr
(the helper allocates it). With DENSE=1 the program calls the dense overload (no leading dimensions): the
leading-dimension arguments are still given, and ignored.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from smemtile.families import FAMILIES, KernelConfig
from smemtile.families.base import NUMPY_DTYPES, array_layout


def harness_main(cfg: KernelConfig) -> str:
    fam = FAMILIES[cfg.family]
    lds = {a.ld for a in fam.host_args if a.array and a.ld}
    ctypes = fam.ctypes(cfg)
    lines = [
        "#include <cstdio>",
        "#include <cstdlib>",
        "#include <cstring>",
        "#include <vector>",
        "#include <cuda_runtime.h>",
        'static size_t file_bytes(const char* p) { FILE* f = fopen(p, "rb"); if (!f) { perror(p); exit(4); }',
        "  fseek(f, 0, SEEK_END); size_t n = ftell(f); fclose(f); return n; }",
        "int main(int argc, char** argv) {",
        f'  if (argc != {len(fam.host_args) + 1}) {{ fprintf(stderr, "expected {len(fam.host_args)} arguments\\n"); return 2; }}',
    ]
    call = []
    for i, a in enumerate(fam.host_args, 1):
        ctype = a.ctype.format(**ctypes)
        if not a.array:
            conv = "atoi" if a.ctype == "int" else "(float)atof"
            lines.append(f"  {ctype} {a.name} = {conv}(argv[{i}]);")
            call.append(a.name)
            continue
        lines += [
            f"  const char* spec_{a.name} = argv[{i}];",
            f"  const char* path_{a.name} = strchr(spec_{a.name}, ':') + 1;",
            f'  const bool read_{a.name} = strncmp(spec_{a.name}, "out:", 4) != 0;',
            f'  size_t n_{a.name} = read_{a.name} ? file_bytes(path_{a.name}) : (size_t)atoll(getenv("BYTES_{a.name}"));',
            f"  void* d_{a.name} = nullptr;",
            f"  if (cudaMalloc(&d_{a.name}, n_{a.name} ? n_{a.name} : 1) != cudaSuccess) return 5;",
            f'  if (read_{a.name}) {{ std::vector<char> h(n_{a.name}); FILE* f = fopen(path_{a.name}, "rb");',
            f"    if (fread(h.data(), 1, n_{a.name}, f) != n_{a.name}) return 6; fclose(f);",
            f"    cudaMemcpy(d_{a.name}, h.data(), n_{a.name}, cudaMemcpyHostToDevice); }}",
            f"  else cudaMemset(d_{a.name}, 0xFF, n_{a.name});",
        ]
        lines.append(
            f'  const size_t off_{a.name} = getenv("OFFSET_{a.name}") ? (size_t)atoll(getenv("OFFSET_{a.name}")) : 0;'
        )
        call.append(f"({ctype})((char*)d_{a.name} + off_{a.name})")
    if fam.workspaces(
        cfg
    ):  # WORKSPACE=1: the caller's own workspace (poisoned), else the helper allocates one
        ints = ", ".join(a.name for a in fam.host_args if a.ctype == "int")
        lines += [
            "  void* ws = nullptr; size_t ws_bytes = 0;",
            f'  if (getenv("WORKSPACE")) {{ ws_bytes = launch_{fam.name}_workspace_bytes({ints});',
            "    if (cudaMalloc(&ws, ws_bytes ? ws_bytes : 1) != cudaSuccess) return 5; cudaMemset(ws, 0xFF, ws_bytes); }",
        ]
        call += ["0", "ws", "ws_bytes"]
    dense = [c for c, a in zip(call, fam.host_args, strict=False) if a.name not in lds] + call[
        len(fam.host_args) :
    ]
    if (
        lds
    ):  # DENSE=1: the overload without leading dimensions (the arguments given for them are then ignored)
        lines += [
            f'  cudaError_t err = getenv("DENSE") ? launch_{fam.name}({", ".join(dense)})',
            f"                                  : launch_{fam.name}({', '.join(call)});",
        ]
    else:
        lines.append(f"  cudaError_t err = launch_{fam.name}({', '.join(call)});")
    lines += [
        "  if (err == cudaSuccess) err = cudaDeviceSynchronize();",
        '  if (err != cudaSuccess) { fprintf(stderr, "launch: %s\\n", cudaGetErrorString(err)); return 3; }',
    ]
    for a in fam.host_args:
        if a.role in ("out", "inout"):
            lines += [
                f"  {{ std::vector<char> h(n_{a.name}); cudaMemcpy(h.data(), d_{a.name}, n_{a.name}, cudaMemcpyDeviceToHost);",
                f'    FILE* f = fopen(path_{a.name}, "wb"); fwrite(h.data(), 1, n_{a.name}, f); fclose(f); }}',
            ]
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


def run_arguments(
    cfg: KernelConfig, inputs: dict[str, np.ndarray], work: Path, offsets: dict[str, int] | None = None
) -> tuple[list[str], dict, Path]:
    """(argv, environment, output path) for the harness, writing the input arrays into ``work`` laid out as the
    user has them: the problem's leading dimensions, and ``offsets`` (elements) into each allocation."""
    fam = FAMILIES[cfg.family]
    argv, env, out = [], {}, None
    ints = fam.problem_ints(cfg.problem)
    for a in fam.host_args:
        if not a.array:
            argv.append(str(ints[a.name] if a.name in ints else cfg.problem[a.name]))
            continue
        path = work / f"{a.name}.bin"
        dtype = np.dtype(NUMPY_DTYPES[fam.array_dtype(cfg, a)])
        lay = array_layout(fam, cfg, a, int((offsets or {}).get(a.name, 0)))
        env[f"OFFSET_{a.name}"] = str(lay.offset * dtype.itemsize)
        if a.role != "out" and fam.reads(cfg, a.name):
            lay.scatter(np.ascontiguousarray(inputs[a.name], dtype=dtype)).tofile(path)
            argv.append(f"{'inout' if a.role == 'inout' else 'in'}:{path}")
        else:
            env[f"BYTES_{a.name}"] = str(lay.elems * dtype.itemsize)
            argv.append(f"out:{path}")
        if a.name == fam.output_arg().name:
            out = path
    return argv, env, out


def read_output(
    cfg: KernelConfig, path: Path, offsets: dict[str, int] | None = None
) -> tuple[np.ndarray, bool]:
    """(the output array taken out of the user's layout, whether every byte outside it is still poison)."""
    fam = FAMILIES[cfg.family]
    a = fam.output_arg()
    lay = array_layout(fam, cfg, a, int((offsets or {}).get(a.name, 0)))
    flat = np.fromfile(path, dtype=np.dtype(NUMPY_DTYPES[fam.array_dtype(cfg, a)]))
    return np.ascontiguousarray(lay.view(flat)).reshape(fam.array_shape(cfg, a)), lay.outside_untouched(flat)
