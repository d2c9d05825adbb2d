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


def get_arch(name: str, *, key: str = "arch", source: str | None = None) -> Arch:
    """Look up an architecture by ``sm_XX`` (also accepts ``90``, ``9.0``, ``sm90``, ``sm_90a``).

    ``auto`` is not resolved here (the model never touches a GPU): use ``smemtile.gpu.device.resolve_arch``.
    """
    text = str(name).strip().lower()
    if text.startswith("sm"):
        text = text[2:].lstrip("_")
    text = text.rstrip("af")  # sm_90a / sm_100f: same resource limits
    if "." in text:
        major, _, minor = text.partition(".")
        text = major + minor
    cand = f"sm_{text}"
    if cand in ARCHS:
        return ARCHS[cand]
    known = ", ".join(ARCHS)
    raise SpecError(
        f"unknown architecture {name!r}; known: {known} (or auto on a GPU)", key=key, source=source
    )
