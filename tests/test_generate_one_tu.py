"""Several generated .cu files in one translation unit: every family's default configuration, a second
configuration of one family (launch helper renamed with --name) and the first configuration again under a third
name, all #included by one .cu whose host function calls every launcher; it compiles with nvcc (skipped without)
and, device code only, with NVRTC. Families come from the registry, none is named here. Both compiles are cached
by their full input (the generated files included)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest
from conftest import nvcc, nvcc_path

from smemtile.codegen.render import body, helper_name, instance_guard, kernel_guard, render
from smemtile.errors import SpecError
from smemtile.families import FAMILIES, configure

TU_ARCH = "sm_90a"  # every family's default target runs there (sm_90 code and the sm_90a-only kernels)


def _second(fam, base):
    """A configuration of ``fam`` with another instantiation than ``base`` (one template parameter changed)."""
    for p in fam.params:
        for v in p.allowed or ():
            if v == base.params.get(p.name):
                continue
            try:
                cfg = configure(fam.name, {p.name: v}, arch=base.arch)
            except SpecError:
                continue
            if fam.name_expression(cfg) != fam.name_expression(base):
                return cfg
    return None


def _units():
    """(generated kernel, helper name) of every file the translation unit includes."""
    units, pair = [], None
    for name, fam in FAMILIES.items():
        base = configure(name, {}, arch=fam.default_arch)
        units.append((render(base), None))
        if pair is None and (other := _second(fam, base)) is not None:
            pair = (base, other)
    assert pair, "no family has two instantiations to include together"
    base, other = pair
    units.append((render(other, name=f"{base.family}_second"), f"{base.family}_second"))
    units.append((render(base, name=f"{base.family}_again"), f"{base.family}_again"))  # same instantiation
    return units


def _caller(units) -> str:
    """A host function calling every launch helper with all its arguments, each a zero of the helper's own
    parameter type (it is compiled, not run)."""
    lines = ["#if !defined(__CUDACC_RTC__)", "int smemtile_call_every_helper() {", "    int failed = 0;"]
    for gk, _ in units:
        fam = FAMILIES[gk.config.family]
        types = fam.ctypes(gk.config)
        args = ", ".join(f"static_cast<{a.ctype.format(**types)}>(0)" for a in fam.host_args)
        lines.append(f"    failed += {gk.helper}({args}) != cudaSuccess;")
    return "\n".join([*lines, "    return failed;", "}", "#endif", ""])


def _files(units) -> dict[str, str]:
    return {f"gen{i}.cu": gk.source for i, (gk, _) in enumerate(units)}


def _translation_unit(units) -> str:
    """The .cu a user writes: an #include of each generated file, then code calling the helpers."""
    return "".join(f'#include "{f}"\n' for f in _files(units)) + "\n" + _caller(units)


def _include_dir(files: dict[str, str]) -> Path:
    """A folder holding ``files``, named by their hash: the nvcc cache (keyed on the text and arguments) sees a
    new folder whenever a generated file changes."""
    h = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]
    root = Path(os.environ.get("SMEMTILE_CACHE_DIR") or Path.home() / ".cache" / "smemtile") / "one_tu" / h
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        if not (root / name).exists() or (root / name).read_text() != text:
            (root / name).write_text(text)
    return root


def test_guards_and_names_in_the_generated_text():
    units = _units()
    seen_guards = set()
    for gk, name in units:
        fam = FAMILIES[gk.config.family]
        assert gk.helper == f"launch_{name or fam.name}" and gk.to_dict()["launch_helper"] == gk.helper
        assert f"inline cudaError_t {gk.helper}(" in gk.body and f"{gk.helper}() below" in gk.header
        guard, inst = kernel_guard(fam.name), instance_guard(gk.config)
        assert gk.body.startswith(f"#ifndef {guard}") and f"#endif  // {guard}" in gk.body
        assert re.search(rf"#ifndef {inst}\b.*\n#define {inst}\ntemplate __global__ void ", gk.body)
        seen_guards.add(inst)
        if name is None:  # the default keeps today's helper name
            assert f"launch_{fam.name}(" in gk.body
        else:
            assert not re.search(rf"\blaunch_{fam.name}\(", gk.snippet)
    assert len(seen_guards) == len(units) - 1  # the repeated configuration shares its instantiation guard


def test_renaming_keeps_the_device_code():
    fam = next(iter(FAMILIES.values()))
    cfg = configure(fam.name, {}, arch=fam.default_arch)
    plain, named = render(cfg), render(cfg).named("mine")
    assert named.helper == "launch_mine" and plain.named(None) is plain
    device = lambda text: text.split("#if !defined(__CUDACC_RTC__)")[0]  # noqa: E731
    assert device(named.body) == device(plain.body) == device(body(cfg))
    assert render(cfg, name="mine").source == named.source


@pytest.mark.parametrize("bad", ["1abc", "a-b", "a b", "x" * 65, "launch()"])
def test_a_name_that_is_no_c_identifier_is_refused(bad):
    cfg = configure(next(iter(FAMILIES)), {})
    with pytest.raises(SpecError, match=r"^--name: .* is not a C identifier; allowed: a letter or _"):
        helper_name(cfg, bad)


def test_the_translation_unit_builds_with_nvrtc():
    """Device code only (the helpers are nvcc-only): NVRTC resolves the #includes from the files given."""
    from smemtile.gpu.nvrtc import compile_cubin

    units = _units()
    exprs = sorted({gk.name_expression for gk, _ in units})
    res = compile_cubin(_translation_unit(units), exprs, TU_ARCH, headers=_files(units), filename="one_tu.cu")
    assert set(res.lowered) == set(exprs) and res.cubin[:4] == b"\x7fELF"
    assert len(set(res.lowered.values())) == len(exprs)


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_the_translation_unit_builds_with_nvcc():
    units = _units()
    out = nvcc(
        _translation_unit(units), ["-std=c++17", f"-arch={TU_ARCH}", f"-I{_include_dir(_files(units))}", "-c"]
    )
    assert out.returncode == 0, out.stderr[-4000:]
