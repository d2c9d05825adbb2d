"""The architecture table: every row against cuda_occupancy.h and the HARDWARE.md table."""

from __future__ import annotations

import pytest
from occupancy_shim import ask, available

from smemtile.errors import SpecError
from smemtile.model.arch import ARCHS, FIELD_SOURCES, KB, arch_for_cc, get_arch

needs_header = pytest.mark.skipif(not available(), reason="cuda_occupancy.h or g++ not available")

# shared/HARDWARE.md, "Architecture constants": threads/SM, blocks/SM, smem/SM KB, opt-in KB, reserved B, unit B.
HARDWARE_MD = {
    "sm_70": (2048, 32, 96, 96, 0, 256),
    "sm_75": (1024, 16, 64, 64, 0, 256),
    "sm_80": (2048, 32, 164, 163, 1024, 128),
    "sm_86": (1536, 16, 100, 99, 1024, 128),
    "sm_87": (1536, 16, 164, 163, 1024, 128),
    "sm_89": (1536, 24, 100, 99, 1024, 128),
    "sm_90": (2048, 32, 228, 227, 1024, 128),
    "sm_100": (2048, 32, 228, 227, 1024, 128),
    "sm_103": (2048, 32, 228, 227, 1024, 128),
    "sm_120": (1536, 24, 100, 99, 1024, 128),
    "sm_121": (1536, 24, 100, 99, 1024, 128),
}


def test_every_design_arch_is_in_the_table():
    assert list(ARCHS) == list(HARDWARE_MD)


@pytest.mark.parametrize("name", list(ARCHS))
def test_row_matches_hardware_md(name):
    a = ARCHS[name]
    threads, blocks, smem_kb, optin_kb, reserved, unit = HARDWARE_MD[name]
    assert (a.max_threads_per_sm, a.max_blocks_per_sm) == (threads, blocks)
    assert (a.smem_per_sm, a.smem_optin_per_block) == (smem_kb * KB, optin_kb * KB)
    assert (a.smem_reserved_per_block, a.smem_alloc_unit) == (reserved, unit)
    assert a.regs_per_sm == a.regs_per_block == 65536 and a.max_regs_per_thread == 255
    assert a.carveouts[-1] == a.smem_per_sm, "the largest carveout is the SM's shared memory"
    assert a.smem_optin_per_block + a.smem_reserved_per_block <= a.smem_per_sm


@needs_header
@pytest.mark.parametrize("name", list(ARCHS))
def test_row_matches_cuda_occupancy_h(name):
    a = ARCHS[name]
    status, blocks, smem_unit, reg_unit, reg_max, subp, bars, *aligned = ask([f"arch {a.cc[0]} {a.cc[1]}"])[0]
    assert status == 0, f"cuda_occupancy.h does not know {name}"
    assert blocks == a.max_blocks_per_sm
    assert smem_unit == a.smem_alloc_unit
    assert reg_unit == a.reg_alloc_unit
    assert reg_max >= a.max_regs_per_thread  # the header checks 256; ptxas never allocates more than 255
    assert subp == a.sub_partitions
    if a.cc >= (9, 0):  # the header applies the barrier limit from CC 9.0 only
        assert bars == a.barrier_factor
    else:
        assert a.barrier_factor == 0
    assert sorted({v for v in aligned if v >= 0}) == list(a.carveouts), "carveout sizes"
    # A preference above the largest carveout is rejected: the table's maximum is the header's.
    assert aligned[a.smem_per_sm // KB + 1] == -1


def test_every_field_has_a_source():
    for a in ARCHS.values():
        d = a.to_dict()
        assert set(FIELD_SOURCES) <= set(d["sources"])
        assert all(d["sources"].values())
    assert "H200" in ARCHS["sm_90"].source_of("smem_per_sm")


@pytest.mark.parametrize("text", ["sm_90", "90", "9.0", "sm90", " sm_90 "])
def test_get_arch_spellings(text):
    assert get_arch(text).name == "sm_90"


@pytest.mark.parametrize(
    "text", ["sm_90a", "SM_90a", "90a", "sm_100a", "sm_100f", "sm_103f", "sm_120a", "sm_121f"]
)
def test_suffixed_targets_keep_their_name_and_the_base_limits(text):
    a = get_arch(text)
    assert a.name == text.lower() if text.startswith(("sm", "SM")) else a.name == "sm_90a"
    assert a.suffix == a.name[-1] and a.base == a.name[:-1]
    base = ARCHS[a.base]
    assert (a.cc, a.smem_optin_per_block, a.max_threads_per_sm, a.regs_per_sm) == (
        base.cc,
        base.smem_optin_per_block,
        base.max_threads_per_sm,
        base.regs_per_sm,
    )


@pytest.mark.parametrize(
    "text", ["sm_89a", "sm_80a", "sm_90f", "sm_86f", "sm_90afafaf", "sm_9000", "sm_", "a"]
)
def test_unknown_suffix_is_refused_with_the_known_targets(text):
    with pytest.raises(SpecError) as e:
        get_arch(text)
    msg = str(e.value)
    assert "sm_90a" in msg and "sm_100f" in msg and "sm_121" in msg and e.value.exit_code == 2
    assert "\n" not in msg


# feature -> the first target that has it (and the last one before it that does not)
MATRIX = {
    "ldmatrix": ("sm_75", "sm_70"),
    "cp.async": ("sm_80", "sm_75"),
    "stmatrix": ("sm_90", "sm_89"),
    "bf16": ("sm_80", "sm_75"),
    "tf32": ("sm_80", "sm_75"),
    "fp8": ("sm_89", "sm_87"),
    "tma": ("sm_90", "sm_89"),
}


@pytest.mark.parametrize("feature", list(MATRIX))
def test_feature_matrix(feature):
    first, before = MATRIX[feature]
    assert get_arch(first).lacks(feature) is None
    assert get_arch("sm_121").lacks(feature) is None
    why = get_arch(before).lacks(feature)
    assert why is not None and first in why and before in why


def test_wgmma_only_on_sm_90a():
    assert get_arch("sm_90a").lacks("wgmma") is None and get_arch("sm_90a").has_wgmma
    for name in ("sm_90", "sm_100a", "sm_89", "sm_120a"):
        why = get_arch(name).lacks("wgmma")
        assert why is not None and "sm_90a" in why, name


def test_unknown_arch_lists_known_ones():
    with pytest.raises(SpecError) as e:
        get_arch("sm_61")
    assert "sm_70" in str(e.value) and "sm_121" in str(e.value) and e.value.exit_code == 2


def test_arch_for_cc():
    assert arch_for_cc(8, 6).name == "sm_86"
    assert arch_for_cc(6, 1) is None


def test_device_limits_override_and_say_so():
    a = ARCHS["sm_90"].with_device_limits(max_threads_per_sm=1024)
    assert a.max_threads_per_sm == 1024 and "device" in a.source_of("max_threads_per_sm")


# ---- the spec refuses what its arch lacks (one line, exit 2, naming the access or buffer) ---------------------------

SPEC = (
    "arch: {arch}\nthreads: 32\nbuffers: [{{name: S, dtype: {dtype}, shape: [16, 64]{layout}}}]\n"
    "accesses: [{{name: a, buffer: S, op: {op}, row: lane % 16, col: {col}}}]\n"
)
CASES = {  # (dtype, op, col, layout) -> the first arch that has it and the one before
    "ldmatrix": (("f16", "ldmatrix", "(lane // 16) * 8", ""), "sm_75", "sm_70", "access a of buffer S"),
    "cp.async": (("f32", "cp.async", "0", ""), "sm_80", "sm_75", "access a of buffer S"),
    "stmatrix": (("f16", "stmatrix", "(lane // 16) * 8", ""), "sm_90", "sm_89", "access a of buffer S"),
    "bf16": (("bf16", "load", "0", ""), "sm_80", "sm_75", "buffer S is bf16"),
    "tf32": (("tf32", "load", "0", ""), "sm_80", "sm_75", "buffer S is tf32"),
    "fp8 e4m3": (("f8e4m3", "load", "0", ""), "sm_89", "sm_87", "buffer S is f8e4m3"),
    "fp8 e5m2": (("f8e5m2", "load", "0", ""), "sm_89", "sm_87", "buffer S is f8e5m2"),
    "TMA": (("f16", "load", "0", ", layout: {tma_swizzle: 128B}"), "sm_90", "sm_89", "tma_swizzle"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_spec_validation_matrix(case, tmp_path):
    from conftest import run_cli

    from smemtile.model.spec import parse_spec

    (dtype, op, col, layout), first, before, names = CASES[case]
    text = SPEC.format(dtype=dtype, op=op, col=col, layout=layout, arch="ARCH")
    parse_spec(text.replace("ARCH", first))  # the first architecture that has it accepts it
    parse_spec(text.replace("ARCH", "sm_121"))
    with pytest.raises(SpecError) as e:
        parse_spec(text.replace("ARCH", before))
    msg = str(e.value)
    assert (
        f"needs {first} or later; the target is {before}" in msg and names in msg and e.value.exit_code == 2
    )
    f = tmp_path / "s.yaml"
    f.write_text(text.replace("ARCH", before))
    r = run_cli("analyze", str(f))
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr and f"the target is {before}" in r.stderr


def test_problem_dtype_is_checked_against_the_arch():
    from smemtile.model.spec import parse_spec

    text = (
        "arch: {arch}\nthreads: 32\nproblem: {{M: 64, N: 64, K: 64, dtype: bf16}}\nbuffers: [{{name: S, dtype: "
        "f16, shape: [64]}}]\naccesses: [{{name: a, buffer: S, index: lane}}]\n"
    )
    assert parse_spec(text.format(arch="sm_80")).problem == {"M": 64, "N": 64, "K": 64, "dtype": "bf16"}
    with pytest.raises(SpecError, match="problem.dtype: bf16 .* needs sm_80 or later; the target is sm_75"):
        parse_spec(text.format(arch="sm_75"))
