"""Row pitches for the memory families (transpose, stencil2d): their kernels take ``ld_in`` / ``ld_out`` behind the
template parameter PITCH, whose value 0 (dense rows) compiles to the machine code their tile models were measured
and calibrated with. What is the same for both lives here once: the parameter, the choice, the launch rule."""

from __future__ import annotations

from smemtile.families.base import Family, KernelConfig, Param

PITCH_PARAM = Param(
    "PITCH",
    0,
    "row pitches: 1 = the kernel takes the user's ld_in / ld_out; 2 = dense rows only (the helper refuses other "
    "pitches; the kernel the tile model was measured with); 0 = 1 when the spec's kernel: gives a pitch that is "
    "not dense, else 2",
    (0, 1, 2),
)
PITCH_KEYS = ("ld_in", "ld_out")


class Pitched(Family):
    """A family whose kernel takes row pitches ``ld_in`` / ``ld_out`` when built with PITCH 1."""

    def pitch(self, cfg: KernelConfig) -> bool:
        """Whether the kernel is built with row pitches (template PITCH 1): PITCH 1 / 2 say so; 0 (auto) builds
        them in when the problem gives a pitch that is not dense (a dense kernel is the measured one)."""
        p = cfg.params["PITCH"]
        if p:
            return p == 1
        ints = self.problem_ints(cfg.problem)
        dense = self.problem_ints({k: v for k, v in cfg.problem.items() if k not in PITCH_KEYS})
        return any(k in cfg.problem and ints[k] != dense[k] for k in PITCH_KEYS)

    def pitch_args(self, cfg: KernelConfig) -> list[str]:
        """The template argument PITCH contributes: none for a dense kernel (the template's default)."""
        return ["1"] if self.pitch(cfg) else []

    def auto_values(self, cfg: KernelConfig) -> dict[str, int]:
        auto = {"PITCH": 1 if self.pitch(cfg) else 2} if not cfg.params["PITCH"] else {}
        return {**super().auto_values(cfg), **auto}

    def requires(self, cfg: KernelConfig) -> list[tuple[str, str]]:
        out = super().requires(cfg)
        if not self.pitch(cfg):
            d = self.dense_layout(cfg.problem)
            out.append(
                (
                    f"(ld_in == {d['ld_in']}) & (ld_out == {d['ld_out']})",
                    f"ld_in = {d['ld_in']} and ld_out = {d['ld_out']} (this kernel was generated for dense rows; "
                    "generate it with PITCH 1, or with ld_in / ld_out in the spec's kernel:, for pitched arrays)",
                )
            )
        return out
