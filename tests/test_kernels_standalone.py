"""Each family's kernel file (smemtile/kernels/<family>.cu, top-level kernels/ in a checkout) is real C++ that a
C++ user can include without Python: with only the shared header beside it, it compiles with nvcc (-c, the
family's architecture, an explicit instantiation of the family's default configuration) and through NVRTC (always:
a machine without nvcc still checks it). Every family of the registry, none named here; both compiles are cached
on disk by their full input (tests/conftest.nvcc, smemtile.gpu.nvrtc), so a warm run takes about a second."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import nvcc, nvcc_path

from smemtile.codegen.render import HEADER_FILE, header_text, instantiation
from smemtile.families import FAMILIES, configure
from smemtile.families.base import kernel_file

KERNELS_DIR = Path(str(kernel_file(HEADER_FILE))).parent
REPO_LINK = Path(__file__).resolve().parents[1] / "kernels"


def _default(name: str):
    fam = FAMILIES[name]
    return fam, configure(name, {}, arch=fam.default_arch)


def test_every_family_file_is_in_the_kernels_folder():
    on_disk = {p.name for p in KERNELS_DIR.glob("*.cu")}
    assert on_disk == {fam.file for fam in FAMILIES.values()}  # one .cu per family, no stray file
    assert (KERNELS_DIR / HEADER_FILE).is_file()
    for fam in FAMILIES.values():
        assert fam.source() == (KERNELS_DIR / fam.file).read_text()
    if REPO_LINK.exists():  # a checkout: the top-level folder is the package's (like samples/)
        assert REPO_LINK.resolve() == KERNELS_DIR.resolve()


def test_shared_header_is_include_guarded():
    text = header_text()
    assert re.search(r"^#ifndef SMEMTILE_SMEM_LAYOUT_CUH\n#define SMEMTILE_SMEM_LAYOUT_CUH$", text, re.M)
    assert text.rstrip().endswith("#endif  // SMEMTILE_SMEM_LAYOUT_CUH")


@pytest.mark.parametrize("name", list(FAMILIES))
def test_kernel_file_compiles_with_nvrtc(name):
    from smemtile.gpu.nvrtc import compile_cubin

    fam, cfg = _default(name)
    expr = fam.name_expression(cfg)
    res = compile_cubin(
        fam.source(), [expr], cfg.arch.name, headers={HEADER_FILE: header_text()}, filename=fam.file
    )
    assert res.cubin[:4] == b"\x7fELF" and res.lowered[expr]
    assert res.resources[expr].registers > 0


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
@pytest.mark.parametrize("name", list(FAMILIES))
def test_kernel_file_compiles_with_nvcc(name):
    """What a C++ user does: the file itself, the shared header on the include path, one instantiation."""
    fam, cfg = _default(name)
    include = f'#include "{fam.file}"\n'  # resolved in the kernels folder, as a user's code would
    source = include + instantiation(cfg) + "\n"
    out = nvcc(source, ["-std=c++17", f"-arch={cfg.arch.name}", f"-I{KERNELS_DIR}", "-c"] + _stamp(fam))
    assert out.returncode == 0, out.stderr


def _stamp(fam) -> list[str]:
    """The cache key of tests/conftest.nvcc covers the source text and the arguments, not the included files:
    a macro carrying the hash of the kernel file and the header makes an edit of either a cache miss."""
    import hashlib

    h = hashlib.sha256((fam.source() + header_text()).encode()).hexdigest()[:16]
    return [f"-DSMEMTILE_TEST_SOURCES={h}"]
