"""The GPU's own limits (``--arch auto``), read from cuda.core's device properties (imported lazily).

The driver exposes the per-SM and per-block limits; the allocation granularities, carveout sizes and
sub-partitions are not attributes, so they come from the table row of the device's compute capability.
"""

from __future__ import annotations

from smemtile.errors import NoDevice, SpecError
from smemtile.model.arch import ARCHS, Arch, arch_for_cc, get_arch

# Arch field -> CUdevice_attribute name (without the CU_DEVICE_ATTRIBUTE_ prefix); cuda.core's DeviceProperties
# names each one in lower case (max_threads_per_multiprocessor, ...).
_ATTRIBUTES = {
    "max_threads_per_sm": "MAX_THREADS_PER_MULTIPROCESSOR",
    "max_blocks_per_sm": "MAX_BLOCKS_PER_MULTIPROCESSOR",
    "smem_per_sm": "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    "smem_optin_per_block": "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "smem_reserved_per_block": "RESERVED_SHARED_MEMORY_PER_BLOCK",
    "smem_default_per_block": "MAX_SHARED_MEMORY_PER_BLOCK",
    "regs_per_sm": "MAX_REGISTERS_PER_MULTIPROCESSOR",
    "regs_per_block": "MAX_REGISTERS_PER_BLOCK",
    "max_threads_per_block": "MAX_THREADS_PER_BLOCK",
    "warp_size": "WARP_SIZE",
}


def _core():
    try:
        import cuda.core as core
    except Exception as e:  # not installed, or a broken install
        raise NoDevice(
            f"CUDA Python (cuda.core) unavailable ({e.__class__.__name__}); pass --arch sm_XX"
        ) from None
    return core


def _failed(what: str, e: BaseException) -> NoDevice:
    if e.__class__.__name__ == "CUDAError":  # the driver answered with an error
        text = str(e).strip().splitlines()
        return NoDevice(
            f"{what} failed: {(text[0] if text else 'CUDAError').split(':')[0]}; pass --arch sm_XX"
        )
    return NoDevice(f"no CUDA driver ({e.__class__.__name__}); pass --arch sm_XX")


def device_attributes(device: int = 0) -> dict[str, int]:
    """Compute capability, SM count and the occupancy-relevant attributes of ``device``."""
    core = _core()
    try:
        count = len(core.Device.get_all_devices())
    except Exception as e:  # no driver library, or cuInit fails
        raise _failed("cuInit", e) from None
    if device >= count:
        raise NoDevice(f"no CUDA device {device} ({count} found); pass --arch sm_XX")
    try:
        props = core.Device(device).properties
    except Exception as e:
        raise _failed("cuDeviceGet", e) from None
    names = dict(
        _ATTRIBUTES,
        cc_major="COMPUTE_CAPABILITY_MAJOR",
        cc_minor="COMPUTE_CAPABILITY_MINOR",
        sm_count="MULTIPROCESSOR_COUNT",
    )
    attrs = {}
    for field, attr in names.items():
        try:
            attrs[field] = int(getattr(props, attr.lower()))
        except Exception as e:
            raise _failed(f"cuDeviceGetAttribute({attr})", e) from None
    return attrs


def device_arch(device: int = 0) -> Arch:
    """The table row of the device's compute capability with the limits the device reports."""
    attrs = device_attributes(device)
    base = arch_for_cc(attrs["cc_major"], attrs["cc_minor"])
    if base is None:
        known = ", ".join(ARCHS)
        raise SpecError(
            f"the GPU is compute capability {attrs['cc_major']}.{attrs['cc_minor']}, not in the table ({known})",
            key="arch",
        )
    return base.with_device_limits(**{k: attrs[k] for k in _ATTRIBUTES})


def resolve_arch(name: str, device: int = 0) -> Arch:
    """``auto`` reads the GPU (NoDevice, exit 3, without one); anything else is a table lookup."""
    if str(name).strip().lower() == "auto":
        return device_arch(device)
    return get_arch(name)
