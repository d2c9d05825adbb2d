"""What every kernel family promises: its parameters, constraints, shared memory, launch shape and reference.

A family is described by a :class:`Family` subclass (``sgemm.py``, ``transpose.py``, ``stencil2d.py``) and a
configuration of it by a :class:`KernelConfig`: template parameters, one :class:`TileLayout` per shared
buffer, the architecture and the problem size. ``generate``, ``verify``, ``tune`` and the benchmarks all go
through the same objects, so the numbers they print come from one formula.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from smemtile.errors import SpecError
from smemtile.model.arch import Arch

KERNELS_DIR_NAME = "kernels"
STATIC_SMEM_MAX = 48 * 1024  # ptxas refuses more static shared memory; above it the kernel goes dynamic


class ContractViolation(SpecError):
    """The configuration breaks a family's contract; refused before compiling (exit 2, one line)."""


@dataclass(frozen=True)
class TileLayout:
    """Padding and XOR swizzle of one shared buffer, as template arguments.

    offset(row, col) = swizzle(row * (cols + pad) + col), swizzle = CuTe ``Swizzle<B, M, S>`` over elements.
    Built from ``smemtile.model.layout.Layout`` (or anything with ``pad`` and ``swizzle``) by :meth:`of`.
    """

    pad: int = 0
    swz_b: int = 0
    swz_m: int = 0
    swz_s: int = 0

    @classmethod
    def of(cls, layout: Any) -> TileLayout:
        if layout is None:
            return cls()
        if isinstance(layout, TileLayout):
            return layout
        if isinstance(layout, dict):
            pad = int(layout.get("pad", 0) or 0)
            sw = layout.get("swizzle")
        else:
            pad = int(getattr(layout, "pad", 0) or 0)
            sw = getattr(layout, "swizzle", None)
        if sw is None:
            return cls(pad=pad)
        if isinstance(sw, (list, tuple)):
            b, m, s = (int(x) for x in sw)
        else:
            b, m, s = (int(getattr(sw, n, getattr(sw, n.lower(), 0))) for n in ("B", "M", "S"))
        return cls(pad=pad, swz_b=b, swz_m=m, swz_s=s)

    @property
    def swizzled(self) -> bool:
        return self.swz_b > 0

    def offsets(self, rows: np.ndarray, cols: np.ndarray, ncols: int) -> np.ndarray:
        """Element offsets of logical (row, col), exactly as ``SmemTile::offset`` in smem_layout.cuh."""
        x = np.asarray(rows, dtype=np.int64) * (ncols + self.pad) + np.asarray(cols, dtype=np.int64)
        if self.swz_b:
            x = x ^ ((x >> self.swz_s) & (((1 << self.swz_b) - 1) << self.swz_m))
        return x

    def describe(self) -> str:
        parts = [f"pad {self.pad}"] if self.pad else []
        if self.swizzled:
            parts.append(f"Swizzle<{self.swz_b},{self.swz_m},{self.swz_s}>")
        return " + ".join(parts) or "dense (no padding, no swizzle)"

    def to_dict(self) -> dict:
        return {"pad": self.pad, "swizzle": [self.swz_b, self.swz_m, self.swz_s] if self.swizzled else None}


@dataclass(frozen=True)
class Param:
    """A template parameter: name, default, allowed values and what it means."""

    name: str
    default: int
    allowed: tuple[int, ...] | None  # None: any value the constraints accept
    doc: str


@dataclass(frozen=True)
class Buffer:
    """A shared-memory buffer of a family, as the spec's ``buffers`` names it."""

    name: str
    dtype: str
    rows: int
    cols: int
    doc: str

    @property
    def elem_bytes(self) -> int:
        return {"f32": 4, "f16": 2, "bf16": 2, "u16": 2}.get(self.dtype, 4)


@dataclass(frozen=True)
class Access:
    """One shared-memory instruction class of warp-level accesses, as numpy (row, col) arrays.

    ``rows`` and ``cols`` are shaped [instructions, warps, 32 lanes]; ``inner_loop`` marks accesses of the hot loop.
    ``expr`` holds the same access in the spec's expression language (lane, warp, loop variables, constants).
    ``sources`` (cp.async only, same shape) are the global byte offsets each lane copies from at the contract's
    problem size (the write side of cp.async depends on which lanes share a 128-byte line); None = coalesced.
    """

    name: str
    buffer: str
    op: str  # load | store | cp.async
    width: int  # bytes per lane
    rows: np.ndarray
    cols: np.ndarray
    inner_loop: bool
    expr: dict = field(default_factory=dict)
    sources: np.ndarray | None = None


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem_bytes: int
    static_smem_bytes: int

    def to_dict(self) -> dict:
        return {
            "grid": list(self.grid),
            "block": list(self.block),
            "dynamic_smem_bytes": self.dynamic_smem_bytes,
            "static_smem_bytes": self.static_smem_bytes,
        }


@dataclass(frozen=True)
class KernelConfig:
    """One instantiation: family + template parameters + buffer layouts + architecture + problem size."""

    family: str
    params: dict[str, int]  # template parameters (complete, defaults filled in)
    layouts: dict[str, TileLayout]
    arch: Arch
    problem: dict[str, Any]
    notes: tuple[str, ...] = ()  # how the layouts were chosen (e.g. a recommendation that was not taken)
    defaulted: tuple[str, ...] = ()  # template parameters that took the contract's default (not user-set)

    def to_dict(self) -> dict:
        return {
            "notes": list(self.notes),
            "family": self.family,
            "params": dict(self.params),
            "layouts": {k: v.to_dict() for k, v in self.layouts.items()},
            "arch": self.arch.name,
            "problem": dict(self.problem),
        }


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class Family:
    """Base class of a kernel family contract. Subclasses fill in the class attributes and methods."""

    name: str = ""
    file: str = ""  # .cu file under smemtile/kernels
    kernel: str = ""  # template function name
    signature: tuple[str, ...] = ()  # kernel parameters as C++ declarations (T = the element type)
    params: tuple[Param, ...] = ()
    problem_keys: dict[str, Any] = {}  # problem parameter -> default
    test_sizes: tuple[dict, ...] = ()
    bench_sizes: tuple[dict, ...] = ()
    tolerance: float = 1e-5  # max relative error against the float64 reference

    # ---- to be provided by each family ------------------------------------------------------------------
    def buffers(self, cfg: KernelConfig) -> list[Buffer]:
        raise NotImplementedError

    def threads(self, p: dict[str, int]) -> int:
        raise NotImplementedError

    def violations(self, cfg: KernelConfig) -> list[str]:
        """Every broken constraint, each stated in words (empty when the configuration is valid)."""
        raise NotImplementedError

    def template_args(self, cfg: KernelConfig) -> list[str]:
        raise NotImplementedError

    def launch(self, cfg: KernelConfig) -> Launch:
        raise NotImplementedError

    def accesses(self, cfg: KernelConfig) -> list[Access]:
        raise NotImplementedError

    def make_inputs(self, problem: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def reference(self, problem: dict, inputs: dict[str, np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def flops_or_bytes(self, problem: dict) -> tuple[str, float]:
        """('tflops', flop count) or ('gbps', bytes moved) for one launch."""
        raise NotImplementedError

    # ---- shared behaviour ----------------------------------------------------------------------------
    def defaults(self) -> dict[str, int]:
        return {p.name: p.default for p in self.params}

    def smem_bytes(self, cfg: KernelConfig) -> int:
        """Shared memory per block: every buffer with its padding, times the pipeline stages."""
        total = 0
        for b in self.buffers(cfg):
            lay = cfg.layouts.get(b.name, TileLayout())
            total += b.rows * (b.cols + lay.pad) * b.elem_bytes
        return total * self.stages(cfg.params)

    def stages(self, p: dict[str, int]) -> int:
        return 1

    def name_expression(self, cfg: KernelConfig) -> str:
        return f"{self.kernel}<{', '.join(self.template_args(cfg))}>"

    def common_violations(self, cfg: KernelConfig) -> list[str]:
        """Layout and shared-memory limits every family shares."""
        out = []
        names = {b.name: b for b in self.buffers(cfg)}
        for bname, lay in cfg.layouts.items():
            if bname not in names:
                out.append(f"layout given for unknown buffer {bname!r}; {self.name} has {', '.join(names)}")
                continue
            b = names[bname]
            if lay.pad < 0:
                out.append(f"{bname}: padding cannot be negative ({lay.pad})")
            if lay.swizzled:
                if lay.swz_s < lay.swz_b:
                    out.append(
                        f"{bname}: Swizzle<{lay.swz_b},{lay.swz_m},{lay.swz_s}> needs S >= B (source and target bits overlap)"
                    )
                group = 1 << (lay.swz_m + lay.swz_b)
                if (b.rows * (b.cols + lay.pad)) % group:
                    out.append(
                        f"{bname}: Swizzle<{lay.swz_b},{lay.swz_m},{lay.swz_s}> permutes groups of {group} elements "
                        f"but the tile holds {b.rows * (b.cols + lay.pad)}"
                    )
        smem = self.smem_bytes(cfg)
        limit = cfg.arch.smem_optin_per_block
        if smem > limit:
            out.append(
                f"shared memory {smem} bytes per block exceeds the {cfg.arch.name} opt-in limit of {limit} bytes"
                f"{self.smem_hint(cfg)}"
            )
        return out

    def smem_hint(self, cfg: KernelConfig) -> str:
        return ""

    def elapsed_metric(self, problem: dict, seconds: float) -> tuple[str, float]:
        unit, amount = self.flops_or_bytes(problem)
        return unit, amount / seconds / (1e12 if unit == "tflops" else 1e9)
