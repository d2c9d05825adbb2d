"""The ``smemtile`` command line. Each command lives in its own module and stays thin."""

from __future__ import annotations

import importlib

import click

from smemtile import __version__
from smemtile.cli.common import SmemtileGroup

# command name -> module under smemtile.cli that defines a click command called ``command``.
_COMMANDS = {
    "analyze": "analyze",
    "occupancy": "occupancy",
    "archs": "archs",
    "tiles": "tiles",
    "generate": "generate",
    "verify": "verify",
    "tune": "tune",
    "measure": "measure",
}


class _LazyGroup(SmemtileGroup):
    """Imports a command's module only when it is used, so `smemtile analyze` never loads CUDA."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [n for n in _COMMANDS if self._load(n) is not None]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        return self._load(name)

    @staticmethod
    def _load(name: str) -> click.Command | None:
        mod = _COMMANDS.get(name)
        if mod is None:
            return None
        try:
            module = importlib.import_module(f"smemtile.cli.{mod}")
        except ModuleNotFoundError as e:
            if e.name == f"smemtile.cli.{mod}":
                return None  # command not built yet
            raise
        return module.command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="smemtile")
def main() -> None:
    """smemtile: shared-memory tiles as the hardware sees them.

    Describe a tile in YAML (see samples/) and ask for its bank conflicts, the cheapest fix,
    occupancy, tile shapes, or a generated CUDA kernel.

    \b
    Examples:
      smemtile analyze samples/gemm_a_column.yaml
      smemtile occupancy --arch sm_90 --threads 256 --regs 64 --smem-dynamic 48K
      smemtile archs
    """


def run() -> None:
    """Console entry point: like a Unix filter, end quietly when the reader goes away (`smemtile ... | head`)."""
    import signal

    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    main()
