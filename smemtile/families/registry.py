"""The family registry: one line per family (name -> module under ``smemtile.families``). Importing this module
loads no family, so the CLI can list the names cheaply; ``smemtile.families.FAMILIES`` loads them."""

from __future__ import annotations

REGISTRY: dict[str, str] = {
    "sgemm": "sgemm",
    "transpose": "transpose",
    "stencil2d": "stencil2d",
    "hgemm": "hgemm",
    "wgmma_gemm": "wgmma_gemm",
    "conv2d": "conv2d",
    "flash_attn": "flash_attn",
}

NAMES: tuple[str, ...] = tuple(REGISTRY)
