"""The bank table of a configuration: the family's own accesses (its spec), analysed by the bank model.

The same :class:`~smemtile.model.analysis.AccessResult` objects ``analyze`` prints, summarised per access: the
worst instruction's wavefronts against its ideal (``degree = wavefronts / ideal``).
"""

from __future__ import annotations

from dataclasses import dataclass

from smemtile.families import FAMILIES, KernelConfig
from smemtile.model.analysis import AccessResult, analyze_spec


@dataclass(frozen=True)
class AccessBanks:
    name: str
    buffer: str
    op: str
    width: int
    role: str
    instructions: int
    wavefronts: int  # worst instruction
    ideal: int
    degree: float

    @property
    def inner_loop(self) -> bool:
        return self.role == "inner"

    def to_dict(self) -> dict:
        return {**self.__dict__, "inner_loop": self.inner_loop}


def access_results(cfg: KernelConfig) -> tuple[AccessResult, ...]:
    """Every access of the configuration's family spec, analysed (lane -> address -> bank)."""
    return analyze_spec(FAMILIES[cfg.family].spec(cfg))


def summarize(results: tuple[AccessResult, ...]) -> list[AccessBanks]:
    out = []
    for r in results:
        ratio = r.bank.wavefronts / r.bank.ideal_wavefronts
        k = int(ratio.argmax())
        out.append(
            AccessBanks(
                r.access.name,
                r.access.buffer,
                r.access.op,
                r.access.width,
                r.access.role,
                int(len(r.bank.wavefronts)),
                int(r.bank.wavefronts[k]),
                int(r.bank.ideal_wavefronts[k]),
                round(float(ratio[k]), 3),
            )
        )
    return out


def bank_table(cfg: KernelConfig) -> list[AccessBanks]:
    """Worst wavefronts per access over all its instructions and warps."""
    return summarize(access_results(cfg))
