"""A user's own host program around a generated ``.cu``: ``main()`` reads the inputs from files, calls the
generated ``launch_<family>()`` helper, and writes the output. Built with nvcc exactly as a user would build the
file ``smemtile generate -o`` wrote, so the GPU tests check the helper, not smemtile's Python launcher.

Arguments, one per helper parameter in order: an integer or float for scalars; ``in:PATH`` for an array the
kernel reads (raw bytes, the size the family's shape gives), ``out:PATH`` for an array it writes (poisoned with
0xFF bytes first; the result is written back to PATH), ``inout:PATH`` for both. A helper with a workspace gets
the program's own (poisoned) when the environment has WORKSPACE=1, else nullptr (the helper allocates it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from smemtile.families import FAMILIES, KernelConfig
from smemtile.families.base import NUMPY_DTYPES


def harness_main(cfg: KernelConfig) -> str:
    fam = FAMILIES[cfg.family]
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
        call.append(f"({ctype})d_{a.name}")
    if fam.workspaces(
        cfg
    ):  # WORKSPACE=1: the caller's own workspace (poisoned), else the helper allocates one
        ints = ", ".join(a.name for a in fam.host_args if a.ctype == "int")
        lines += [
            "  void* ws = nullptr; size_t ws_bytes = 0;",
            f'  if (getenv("WORKSPACE")) {{ ws_bytes = launch_{fam.name}_workspace_bytes({ints});',
            "    if (cudaMalloc(&ws, ws_bytes ? ws_bytes : 1) != cudaSuccess) return 5; cudaMemset(ws, 0xFF, ws_bytes); }",
        ]  # fmt: skip
        call += ["0", "ws", "ws_bytes"]
    lines += [
        f"  cudaError_t err = launch_{fam.name}({', '.join(call)});",
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
    cfg: KernelConfig, inputs: dict[str, np.ndarray], work: Path
) -> tuple[list[str], dict, Path]:
    """(argv, environment, output path) for the harness, writing the input arrays into ``work``."""
    fam = FAMILIES[cfg.family]
    argv, env, out = [], {}, None
    for a in fam.host_args:
        if not a.array:
            argv.append(str(cfg.problem[a.name]))
            continue
        path = work / f"{a.name}.bin"
        dtype = np.dtype(NUMPY_DTYPES[fam.array_dtype(cfg, a)])
        shape = fam.array_shape(cfg, a)
        if a.role != "out" and fam.reads(cfg, a.name):
            np.ascontiguousarray(inputs[a.name], dtype=dtype).tofile(path)
            argv.append(f"{'inout' if a.role == 'inout' else 'in'}:{path}")
        else:
            env[f"BYTES_{a.name}"] = str(int(np.prod(shape)) * dtype.itemsize)
            argv.append(f"out:{path}")
        if a.name == fam.output_arg().name:
            out = path
    return argv, env, out


def read_output(cfg: KernelConfig, path: Path) -> np.ndarray:
    fam = FAMILIES[cfg.family]
    a = fam.output_arg()
    return np.fromfile(path, dtype=np.dtype(NUMPY_DTYPES[fam.array_dtype(cfg, a)])).reshape(
        fam.array_shape(cfg, a)
    )
