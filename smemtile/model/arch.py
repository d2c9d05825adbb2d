"""Architecture database: the per-SM and per-block limits the CUDA driver uses for occupancy.

Every constant names its source (``FIELD_SOURCES``, and ``Arch.sources`` for per-row notes):

- **Guide**: CUDA C++ Programming Guide, "Technical Specifications per Compute Capability".
- **Header**: ``cuda_occupancy.h`` from the CUDA 13.0 toolkit (``__CUDA_OCC_MAJOR__`` 12, minor 1), the
  calculator NVIDIA ships and whose results the driver reproduces. ``tests/test_arch.py`` checks every row
  against the header's own functions when the header and g++ are present.
- **H200**: ``cuDeviceGetAttribute`` on the H200 (2026-11-29, bench/results/occupancy_driver_h200.json) for the sm_90 row.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from smemtile.errors import SpecError
from smemtile.fileio import printable
from smemtile.model.dtypes import DTYPE_FEATURES  # noqa: F401  (the dtypes that need a feature: one table)

KB = 1024

GUIDE = "CUDA C++ Programming Guide, Technical Specifications per Compute Capability"
HEADER = "cuda_occupancy.h (CUDA 13.0)"

# Where each field's value comes from (for every row unless Arch.sources says more).
FIELD_SOURCES: dict[str, str] = {
    "max_threads_per_sm": f"{GUIDE} (maximum resident threads per SM)",
    "max_blocks_per_sm": f"{HEADER} cudaOccMaxBlocksPerMultiprocessor; {GUIDE}",
    "smem_per_sm": f"{GUIDE} (shared memory per SM); = the largest carveout in {HEADER}",
    "smem_optin_per_block": f"{GUIDE} (maximum shared memory per block, opt-in)",
    "smem_reserved_per_block": f"{GUIDE} (1 KB reserved per block from CC 8.0); {HEADER} cudaOccSMemPerBlock",
    "smem_alloc_unit": f"{HEADER} cudaOccSMemAllocationGranularity",
    "carveouts_kb": f"{HEADER} cudaOccAlignUpShmemSizeVoltaPlus",
    "regs_per_sm": f"{GUIDE} (32-bit registers per SM)",
    "regs_per_block": f"{GUIDE} (32-bit registers per thread block)",
    "max_regs_per_thread": f"{GUIDE} (255; ptxas never allocates more)",
    "reg_alloc_unit": f"{HEADER} cudaOccRegAllocationGranularity (registers per warp)",
    "sub_partitions": f"{HEADER} cudaOccSubPartitionsPerMultiprocessor",
    "barrier_factor": f"{HEADER} cudaOccMaxBlocksPerSMBlockBarrierLimit (applied from CC 9.0)",
    "max_threads_per_block": GUIDE,
    "warp_size": GUIDE,
    "smem_default_per_block": f"{GUIDE} (48 KB unless cudaFuncSetAttribute raises MaxDynamicSharedMemorySize)",
    "banks": f"{GUIDE} (shared memory: 32 banks of 4 bytes)",
    "bank_bytes": f"{GUIDE} (shared memory: 32 banks of 4 bytes)",
}


PTX = "PTX ISA 9.0 (CUDA 13.0), target requirements of each instruction"

# feature -> (first compute capability, required suffix or "", what it is). Source: PTX.
FEATURES: dict[str, tuple[tuple[int, int], str, str]] = {
    "ldmatrix": ((7, 5), "", "ldmatrix"),
    "cp.async": ((8, 0), "", "cp.async"),
    "stmatrix": ((9, 0), "", "stmatrix"),
    "bf16": ((8, 0), "", "bf16 (mma.sync .bf16 and bf16 arithmetic)"),
    "tf32": ((8, 0), "", "tf32 (mma.sync .tf32)"),
    "fp8": ((8, 9), "", "fp8 e4m3/e5m2 (mma.sync .e4m3/.e5m2 and cvt)"),
    "tma": ((9, 0), "", "TMA (cp.async.bulk.tensor)"),
    "wgmma": ((9, 0), "a", "wgmma.mma_async"),
    "clusters": ((9, 0), "", "thread-block clusters (cudaLaunchAttributeClusterDimension)"),
}
# FP32 FMA lanes per SM, by compute capability (CUDA C++ Programming Guide, arithmetic instruction throughput)
FP32_LANES_PER_SM: dict[tuple[int, int], int] = {
    (7, 0): 64,
    (7, 2): 64,
    (7, 5): 64,
    (8, 0): 64,
    (8, 6): 128,
    (8, 7): 128,
    (8, 9): 128,
    (9, 0): 128,
    (10, 0): 128,
    (12, 0): 128,
}

# Targets with a suffix that NVRTC 13.0 compiles for (each checked by compiling a kernel, 2026): "a" code runs
# on exactly that compute capability (wgmma, setmaxnreg: sm_90a), "f" on the family of one major version.
# Same resource limits as the base row.
SUFFIXES: dict[str, tuple[str, ...]] = {
    "sm_90": ("a",),
    "sm_100": ("a", "f"),
    "sm_103": ("a", "f"),
    "sm_120": ("a", "f"),
    "sm_121": ("a", "f"),
}


@dataclass(frozen=True)
class Arch:
    """Resource limits of one compute capability, as the occupancy calculation needs them."""

    name: str  # "sm_90"
    cc: tuple[int, int]
    max_threads_per_sm: int
    max_blocks_per_sm: int
    smem_per_sm: int  # bytes: the largest carveout
    smem_optin_per_block: int  # bytes: cudaDevAttrMaxSharedMemoryPerBlockOptin
    smem_reserved_per_block: int  # bytes the driver reserves for each resident block
    smem_alloc_unit: int  # shared-memory allocation granularity, bytes
    carveouts_kb: tuple[int, ...]  # shared-memory sizes the SM can be configured to, KB, ascending
    barrier_factor: int = 0  # barriers per SM = factor x max blocks per SM; 0 = not a limit (CC < 9.0)
    regs_per_sm: int = 65536
    regs_per_block: int = 65536
    max_regs_per_thread: int = 255
    reg_alloc_unit: int = 256  # registers are allocated per warp in units of this many
    sub_partitions: int = 4  # register file is split over the SM's 4 schedulers
    max_threads_per_block: int = 1024
    warp_size: int = 32
    smem_default_per_block: int = 48 * KB  # without cudaFuncSetAttribute(MaxDynamicSharedMemorySize)
    banks: int = 32
    bank_bytes: int = 4
    source: str = f"{GUIDE} and {HEADER}"
    sources: tuple[tuple[str, str], ...] = ()  # per-row notes: (field, source) overriding FIELD_SOURCES
    suffix: str = ""  # "a" (arch-specific: sm_90a, sm_100a) or "f" (family: sm_100f); kept in ``name``

    @property
    def base(self) -> str:
        """The table row this target belongs to (``sm_90a`` -> ``sm_90``): same resource limits."""
        return self.name[: len(self.name) - len(self.suffix)] if self.suffix else self.name

    def lacks(self, feature: str) -> str | None:
        """Why this target cannot run ``feature`` (a key of ``FEATURES``), or None when it can."""
        need, suffix, what = FEATURES[feature]
        if self.cc < need or (suffix and (self.cc != need or self.suffix != suffix)):
            first = f"sm_{need[0]}{need[1]}{suffix}"
            only = f"{first} (that architecture-specific target only)" if suffix else f"{first} or later"
            return f"{what} needs {only}; the target is {self.name}"
        return None

    @property
    def static_smem_max(self) -> int:
        """Bytes of statically declared ``__shared__`` ptxas accepts per kernel (``too much shared data`` above);
        the same 48 KiB a kernel may use dynamically without ``cudaFuncSetAttribute``."""
        return self.smem_default_per_block

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size

    @property
    def has_ldmatrix(self) -> bool:
        return self.cc >= (7, 5)

    @property
    def has_cp_async(self) -> bool:
        return self.cc >= (8, 0)

    @property
    def has_tma(self) -> bool:
        return self.cc >= (9, 0)

    @property
    def has_stmatrix(self) -> bool:
        return self.lacks("stmatrix") is None

    @property
    def has_wgmma(self) -> bool:
        return self.lacks("wgmma") is None

    @property
    def carveouts(self) -> tuple[int, ...]:
        """The configurable shared-memory sizes per SM, bytes, ascending."""
        return tuple(k * KB for k in self.carveouts_kb)

    def source_of(self, field: str) -> str:
        """Where this row's value of ``field`` comes from."""
        for f, s in self.sources:
            if f == field:
                return s
        return FIELD_SOURCES.get(field, self.source)

    def with_device_limits(self, **limits: int) -> Arch:
        """A copy with limits read from a device (``name`` keeps the arch, sources say "device")."""
        srcs = tuple((k, "cuDeviceGetAttribute on this device") for k in limits)
        return replace(self, **limits, sources=srcs + self.sources)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["cc"] = f"{self.cc[0]}.{self.cc[1]}"
        d["carveouts_kb"] = list(self.carveouts_kb)
        d.update(
            max_warps_per_sm=self.max_warps_per_sm,
            has_ldmatrix=self.has_ldmatrix,
            has_cp_async=self.has_cp_async,
            has_tma=self.has_tma,
            has_stmatrix=self.has_stmatrix,
            has_wgmma=self.has_wgmma,
            base=self.base,
        )
        d["sources"] = {f: self.source_of(f) for f in FIELD_SOURCES}
        return d


_C70 = (0, 8, 16, 32, 64, 96)
_C75 = (32, 64)
_C80 = (0, 8, 16, 32, 64, 100, 132, 164)
_C86 = (0, 8, 16, 32, 64, 100)
_C90 = (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)

_H200 = (
    "H200 cuDeviceGetAttribute, 2026-11-29 (bench/results/occupancy_driver_h200.json), agrees with the guide"
)
_SM90_MEASURED = tuple(
    (f, _H200)
    for f in (
        "max_threads_per_sm",
        "max_blocks_per_sm",
        "smem_per_sm",
        "smem_optin_per_block",
        "smem_reserved_per_block",
        "regs_per_sm",
        "regs_per_block",
    )
)

# Columns: name, cc, threads/SM, blocks/SM, smem/SM, opt-in/block, reserved/block, smem unit, carveouts,
# barrier factor. The barrier factor is 2 on 9.0 and 10.x (two barrier slots per block slot) and 1 on 12.x;
# with the one barrier an ordinary kernel uses it never lowers the block count, but the driver reports it as a
# co-limiter on 12.x when the blocks-per-SM limit binds.
ARCHS: dict[str, Arch] = {
    a.name: a
    for a in [
        Arch("sm_70", (7, 0), 2048, 32, 96 * KB, 96 * KB, 0, 256, _C70),
        Arch("sm_75", (7, 5), 1024, 16, 64 * KB, 64 * KB, 0, 256, _C75),
        Arch("sm_80", (8, 0), 2048, 32, 164 * KB, 163 * KB, 1 * KB, 128, _C80),
        Arch("sm_86", (8, 6), 1536, 16, 100 * KB, 99 * KB, 1 * KB, 128, _C86),
        Arch("sm_87", (8, 7), 1536, 16, 164 * KB, 163 * KB, 1 * KB, 128, _C80),
        Arch("sm_89", (8, 9), 1536, 24, 100 * KB, 99 * KB, 1 * KB, 128, _C86),
        Arch("sm_90", (9, 0), 2048, 32, 228 * KB, 227 * KB, 1 * KB, 128, _C90, 2, sources=_SM90_MEASURED),
        Arch("sm_100", (10, 0), 2048, 32, 228 * KB, 227 * KB, 1 * KB, 128, _C90, 2),
        Arch("sm_103", (10, 3), 2048, 32, 228 * KB, 227 * KB, 1 * KB, 128, _C90, 2),
        Arch("sm_120", (12, 0), 1536, 24, 100 * KB, 99 * KB, 1 * KB, 128, _C86, 1),
        Arch("sm_121", (12, 1), 1536, 24, 100 * KB, 99 * KB, 1 * KB, 128, _C86, 1),
    ]
}


def arch_for_cc(major: int, minor: int) -> Arch | None:
    """The table row for a compute capability, or None when it is not in the table."""
    for a in ARCHS.values():
        if a.cc == (major, minor):
            return a
    return None


def known_targets() -> list[str]:
    """Every name ``get_arch`` accepts in its canonical form: the table's rows and their suffixed targets."""
    return [*ARCHS, *(f"{b}{x}" for b, xs in SUFFIXES.items() for x in xs)]


def get_arch(name: str, *, key: str = "arch", source: str | None = None) -> Arch:
    """Look up an architecture by ``sm_XX`` (also accepts ``90``, ``9.0``, ``sm90``), or a suffixed target
    (``sm_90a``, ``sm_100f``: same limits, the suffix kept in ``name`` so that NVRTC targets it).

    ``auto`` is not resolved here (the model never touches a GPU): use ``smemtile.gpu.device.resolve_arch``.
    """
    text = str(name).strip().lower()
    if text.startswith("sm"):
        text = text[2:].lstrip("_")
    suffix = ""
    if text[-1:] in ("a", "f"):
        text, suffix = text[:-1], text[-1]
    if "." in text:
        major, _, minor = text.partition(".")
        text = major + minor
    cand = f"sm_{text}"
    if cand in ARCHS and not suffix:
        return ARCHS[cand]
    if cand in ARCHS and suffix in SUFFIXES.get(cand, ()):
        return replace(ARCHS[cand], name=cand + suffix, suffix=suffix)
    if cand in ARCHS:
        allowed = ", ".join(f"{cand}{x}" for x in SUFFIXES.get(cand, ())) or "none"
        raise SpecError(
            f"unknown architecture {printable(name)!r}: {cand} has no {suffix!r} target (its suffixed "
            f"targets: {allowed}); known: {', '.join(known_targets())} (or auto on a GPU)",
            key=key,
            source=source,
        )
    raise SpecError(
        f"unknown architecture {printable(name)!r}; known: {', '.join(known_targets())} (or auto on a GPU)",
        key=key,
        source=source,
    )
