"""Per-GPU peak numbers for the tile model's roofline, and the AMD targets' per-CU limits.

Every row names its source. Measured numbers beat datasheets: the H200 row's f32, tf32, f16 and bf16 rates and
its bandwidth were measured on this project's H200 (cuBLAS through torch, CUDA events, 2026-11-29); its fp8 and
int8 rates, and every other row, are vendor datasheet peaks (dense, no sparsity) and therefore optimistic by
10-30% for real kernels (``GpuPeak.source_of`` says which applies to a dtype). The tile model only ranks
configurations on one GPU, so a uniform optimism shifts every predicted TFLOP/s but not the order.

Devices are listed as the runtime exposes them: an MI250X is two GCDs, and ROCm (``rocm-smi``, ``torch.cuda``)
shows each GCD as its own device with 110 CUs, half the memory bandwidth and half the L2, so its row is one GCD.

``l2_gbps`` is an assumption everywhere (2.5x DRAM bandwidth; not measured here): it only matters for tiles so
small that L2 -> SM traffic, not DRAM, is the limit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from smemtile.errors import SpecError

MB = 1 << 20
DATASHEET = "vendor datasheet peak (dense), not measured here"
HW_MD = "measured on the H200 (torch/cuBLAS and a device copy, CUDA events, 2026-11-29; bench/NOTES.md)"


@dataclass(frozen=True)
class GpuPeak:
    """Roofline numbers of one GPU: compute per dtype (TFLOP/s), memory bandwidths (GB/s), SM/CU count."""

    key: str
    name: str
    arch: str  # sm_90, gfx942, ...
    vendor: str  # nvidia | amd
    sms: int  # SMs (NVIDIA) or CUs (AMD)
    clock_ghz: float
    tflops: dict  # dtype -> TFLOP/s: f32 is SIMT/vector FMA, the others tensor-core / matrix-core; fp8, i8
    dram_gbps: float
    l2_bytes: int
    source: str
    dtype_sources: dict = field(default_factory=dict)  # dtype -> source, where it differs from ``source``

    @property
    def l2_gbps(self) -> float:
        return 2.5 * self.dram_gbps

    def has(self, dtype: str) -> bool:
        """Whether the GPU's tensor / matrix cores (or FMA units for f32) run ``dtype`` (a row lists it)."""
        return _peak_key(dtype) in self.tflops

    def peak(self, dtype: str) -> float:
        """TFLOP/s (TOPS for i8) of ``dtype`` (dense); f8e4m3 and f8e5m2 share the ``fp8`` rate."""
        return float(self.tflops[_peak_key(dtype)])

    def source_of(self, dtype: str) -> str:
        return self.dtype_sources.get(_peak_key(dtype), self.source)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["l2_gbps"] = self.l2_gbps
        return d


def _peak_key(dtype: str) -> str:
    return "fp8" if dtype in ("f8e4m3", "f8e5m2") else dtype


def _g(key, name, arch, vendor, sms, clock, tflops, dram, l2_mb, source, dtype_sources=None) -> GpuPeak:
    return GpuPeak(
        key, name, arch, vendor, sms, clock, tflops, dram, int(l2_mb * MB), source, dtype_sources or {}
    )


LOW = DATASHEET + " (fp8 / int8: twice the f16 rate, the datasheet ratio; approximate)"


# fp8 and int8 appear only where the tensor / matrix cores run them: fp8 from sm_89 (NVIDIA) and gfx942 (AMD),
# int8 mma from sm_75 (NVIDIA) and every CDNA target here; V100 and T4 have no bf16 / tf32 tensor cores.
GPUS: dict[str, GpuPeak] = {
    g.key: g
    for g in [
        _g(
            "h200",
            "NVIDIA H200",
            "sm_90",
            "nvidia",
            132,
            1.98,
            {"f32": 50.5, "tf32": 370.0, "f16": 672.0, "bf16": 638.0, "fp8": 1979.0, "i8": 1979.0},
            4131.0,
            60,
            HW_MD,
            {"fp8": DATASHEET, "i8": DATASHEET},
        ),
        _g(
            "h100",
            "NVIDIA H100 SXM",
            "sm_90",
            "nvidia",
            132,
            1.98,
            {"f32": 67.0, "tf32": 495.0, "f16": 990.0, "bf16": 990.0, "fp8": 1979.0, "i8": 1979.0},
            3350.0,
            50,
            DATASHEET,
        ),
        _g(
            "b200",
            "NVIDIA B200",
            "sm_100",
            "nvidia",
            148,
            1.97,
            {"f32": 75.0, "tf32": 1100.0, "f16": 2250.0, "bf16": 2250.0, "fp8": 4500.0, "i8": 4500.0},
            8000.0,
            126,
            DATASHEET + " (approximate)",
        ),
        _g(
            "a100",
            "NVIDIA A100 SXM 80GB",
            "sm_80",
            "nvidia",
            108,
            1.41,
            {"f32": 19.5, "tf32": 156.0, "f16": 312.0, "bf16": 312.0, "i8": 624.0},
            2039.0,
            40,
            DATASHEET,
        ),
        _g(
            "orin",
            "NVIDIA Jetson AGX Orin",
            "sm_87",
            "nvidia",
            16,
            1.3,
            {"f32": 5.3, "tf32": 21.0, "f16": 42.0, "bf16": 42.0, "i8": 85.0},
            204.8,
            4,
            DATASHEET + " (approximate)",
        ),
        _g(
            "rtx3090",
            "NVIDIA GeForce RTX 3090",
            "sm_86",
            "nvidia",
            82,
            1.70,
            {"f32": 35.6, "tf32": 35.6, "f16": 71.0, "bf16": 71.0, "i8": 284.0},
            936.0,
            6,
            DATASHEET + " (fp32 accumulate)",
        ),
        _g(
            "rtx4090",
            "NVIDIA GeForce RTX 4090",
            "sm_89",
            "nvidia",
            128,
            2.52,
            {"f32": 82.6, "tf32": 82.6, "f16": 165.2, "bf16": 165.2, "fp8": 330.3, "i8": 660.6},
            1008.0,
            72,
            DATASHEET + " (fp32 accumulate)",
        ),
        _g(
            "rtx5090",
            "NVIDIA GeForce RTX 5090",
            "sm_120",
            "nvidia",
            170,
            2.41,
            {"f32": 104.8, "tf32": 104.8, "f16": 209.5, "bf16": 209.5, "fp8": 419.0, "i8": 838.0},
            1792.0,
            96,
            LOW,
        ),
        _g(
            "v100",
            "NVIDIA V100 SXM2",
            "sm_70",
            "nvidia",
            80,
            1.53,
            {"f32": 15.7, "f16": 125.0},
            900.0,
            6,
            DATASHEET,
        ),
        _g(
            "t4",
            "NVIDIA T4",
            "sm_75",
            "nvidia",
            40,
            1.59,
            {"f32": 8.1, "f16": 65.0, "i8": 130.0},
            320.0,
            4,
            DATASHEET,
        ),
        _g(
            "mi250x",
            "AMD Instinct MI250X (one GCD; ROCm shows each of its 2 GCDs as a device)",
            "gfx90a",
            "amd",
            110,
            1.70,
            {"f32": 47.9, "tf32": 47.9, "f16": 191.5, "bf16": 191.5, "i8": 191.5},
            1638.0,
            8,
            DATASHEET + " (the MI250X's, halved per GCD)",
        ),
        _g(
            "mi300x",
            "AMD Instinct MI300X",
            "gfx942",
            "amd",
            304,
            2.10,
            {"f32": 163.4, "tf32": 653.7, "f16": 1307.4, "bf16": 1307.4, "fp8": 2614.9, "i8": 2614.9},
            5300.0,
            32,
            DATASHEET,
        ),
        _g(
            "mi355x",
            "AMD Instinct MI355X",
            "gfx950",
            "amd",
            256,
            2.40,
            {"f32": 157.3, "tf32": 157.3, "f16": 2300.0, "bf16": 2300.0, "fp8": 4600.0, "i8": 4600.0},
            8000.0,
            32,
            LOW,
        ),
    ]
}

# The GPU a bare --arch means. sm_90 is the H200 this project measures on (H100-class: 132 SMs).
DEFAULT_GPU = {
    "sm_70": "v100",
    "sm_75": "t4",
    "sm_80": "a100",
    "sm_86": "rtx3090",
    "sm_87": "orin",
    "sm_89": "rtx4090",
    "sm_90": "h200",
    "sm_100": "b200",
    "sm_103": "b200",
    "sm_120": "rtx5090",
    "sm_121": "rtx5090",
    "gfx90a": "mi250x",
    "gfx942": "mi300x",
    "gfx950": "mi355x",
}


@dataclass(frozen=True)
class AmdArch:
    """Per-CU limits of an AMD CDNA target (wavefront 64), as the tile model's occupancy needs them.

    Source: AMD CDNA2/CDNA3/CDNA4 ISA guides and the ROCm "Optimizing Triton kernels" guide: 4 SIMDs per CU, at
    most 8 waves per SIMD, 512 VGPRs per lane per SIMD (arch VGPRs + AGPRs, allocated in granules of 8),
    at most 1024 threads per workgroup; LDS 64 KB per CU (160 KB on gfx950).
    """

    name: str
    lds_per_cu: int
    lds_per_block: int
    simds: int = 4
    max_waves_per_simd: int = 8
    vgprs_per_simd_lane: int = 512
    vgpr_granule: int = 8
    max_threads_per_block: int = 1024
    wave_size: int = 64

    def blocks_per_cu(self, waves: int, regs: int, lds: int) -> tuple[int, str]:
        """Resident workgroups per CU and the limiter (waves spread evenly over the SIMDs)."""
        per_wave = -(-regs // self.vgpr_granule) * self.vgpr_granule
        waves_by_regs = min(self.max_waves_per_simd, self.vgprs_per_simd_lane // max(per_wave, 1))
        limits = {
            "waves": self.simds * self.max_waves_per_simd // waves,
            "registers": self.simds * waves_by_regs // waves,
            "lds": self.lds_per_cu // lds if lds else 1 << 30,
        }
        limiter = min(limits, key=limits.get)
        return max(0, limits[limiter]), limiter

    def to_dict(self) -> dict:
        return asdict(self)


AMD_ARCHS = {
    a.name: a
    for a in (
        AmdArch("gfx90a", 64 * 1024, 64 * 1024),
        AmdArch("gfx942", 64 * 1024, 64 * 1024),
        AmdArch("gfx950", 160 * 1024, 160 * 1024),
    )
}


def vendor_of(arch: str) -> str:
    return "amd" if str(arch).lower().startswith("gfx") else "nvidia"


def get_gpu(name: str | None, arch: str, *, sms: int | None = None) -> GpuPeak:
    """The GPU row for ``--gpu NAME`` or the arch's default, with ``--sms`` overriding the SM/CU count."""
    from dataclasses import replace

    if name:
        key = str(name).strip().lower().replace(" ", "").replace("-", "")
        gpu = GPUS.get(key) or next(
            (g for g in GPUS.values() if key in g.name.lower().replace(" ", "")), None
        )
        if gpu is None:
            raise SpecError(f"unknown GPU {name!r}; known: {', '.join(GPUS)}", key="--gpu")
        if gpu.arch != arch and vendor_of(gpu.arch) != vendor_of(arch):
            raise SpecError(f"{gpu.name} is {gpu.arch}, not {arch}", key="--gpu")
    else:
        gpu = GPUS[DEFAULT_GPU[arch]]
    if sms is not None:
        if sms < 1:
            raise SpecError(f"must be a positive SM count, got {sms}", key="--sms")
        gpu = replace(gpu, sms=int(sms), source=gpu.source + f"; SM count overridden to {sms}")
    return gpu
