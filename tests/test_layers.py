"""The layers, as an import graph: model/ is pure, families/ use only the model, codegen/ renders from both,
gpu/ is the only place CUDA is imported (lazily) and never renders reports, pipeline/ composes, cli/ parses and
renders. Every import counts, including the lazy ones inside functions."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import smemtile

ROOT = Path(smemtile.__file__).parent
# small modules every layer may use
SHARED = {"errors", "fileio", "cache", "__init__", "__main__", "__version__"}
ALLOWED = {
    "model": {"model"},
    "families": {"model", "families"},
    "codegen": {"model", "families", "codegen"},
    "gpu": {"model", "families", "codegen", "gpu"},
    "report": {"model", "families", "codegen", "report"},
    "pipeline": {"model", "families", "codegen", "gpu", "report", "pipeline"},
    "cli": {"model", "families", "codegen", "gpu", "report", "pipeline", "cli", "api", "api_results"},
}


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    out = []
    pkg = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                mod = ".".join([*base, mod]) if mod else ".".join(base)
            out.append((node.lineno, mod))
            if mod == "smemtile":  # from smemtile import api: the module smemtile.api
                out += [(node.lineno, f"smemtile.{a.name}") for a in node.names]
    return out


def test_import_graph_follows_the_layers():
    bad = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        layer = rel.parts[0] if len(rel.parts) > 1 else None
        if layer is None:
            continue
        for line, mod in _imports(path):
            parts = mod.split(".")
            if parts[0] == "cuda" and layer != "gpu":
                bad.append(f"{rel}:{line} imports {mod} (CUDA only in gpu/)")
            if parts[0] != "smemtile" or len(parts) < 2 or parts[1] in SHARED:
                continue
            if parts[1] not in ALLOWED[layer]:
                bad.append(f"{rel}:{line} ({layer}) imports {mod}")
    assert not bad, "\n".join(bad)


def test_no_cuda_loaded_outside_gpu():
    """Importing every non-gpu module (and running analyze on a sample without compiling) loads no CUDA library;
    analyze's NVRTC compile of a kernel spec (its real registers) loads the compiler, never the driver."""
    code = (
        "import sys, smemtile.pipeline.specs, smemtile.pipeline.fixes, smemtile.pipeline.analyze, "
        "smemtile.codegen.render, smemtile.codegen.checklist, smemtile.families\n"
        "from smemtile.pipeline.analyze import analyze\n"
        "from smemtile.pipeline.specs import load\n"
        f"analyze(load({str(ROOT.parent / 'samples' / 'sgemm_default.yaml')!r}), compile=False)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] == 'cuda']\n"
        "assert not bad, bad\n"
        f"analyze(load({str(ROOT.parent / 'samples' / 'sgemm_default.yaml')!r}))\n"
        "assert not [ln for ln in open('/proc/self/maps') if 'libcuda.so' in ln], 'the CUDA driver was loaded'\n"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
