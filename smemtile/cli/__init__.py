"""The ``smemtile`` command line. Each command lives in its own module and stays thin."""

from __future__ import annotations

import errno
import importlib
import io
import os
import sys

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
    "samples": "samples",
    "report": "report",
    "inspect": "inspect",
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


@click.group("smemtile", cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="smemtile")
@click.option(
    "--debug",
    is_flag=True,
    help="On an error, show the Python traceback too (for bug reports; or set SMEMTILE_DEBUG=1).",
)
def main(debug: bool) -> None:
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
    """Console entry point (also ``python -m smemtile``).

    Like a Unix filter it ends quietly when the reader goes away (``smemtile ... | head``: SIGPIPE). Output
    that cannot be written (stdout closed, ``> /dev/full``) and text the output encoding cannot hold
    (``PYTHONIOENCODING=ascii``) end with one line on stderr and exit 1, never a traceback."""
    import signal

    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    _standard_streams()
    try:
        main(prog_name="smemtile")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Exception as e:  # outside a command (e.g. while listing commands for --help)
        from smemtile.cli.common import report_error

        code = report_error(e)
    try:
        if sys.stdout is not None:
            sys.stdout.flush()  # output still buffered (a short --json) fails here, not at interpreter exit
    except Exception as e:
        if code == 0:
            from smemtile.cli.common import report_error

            code = report_error(e) or 1
        _exit_now(code)
    sys.exit(code)


def _exit_now(code: int) -> None:
    """Exit without the interpreter's final flush of stdout, which would fail again with a traceback."""
    try:
        sys.stderr.flush()
    except Exception:
        pass
    os._exit(code)


class _ClosedOutput(io.RawIOBase):
    """What stdout writes to when the process was started with it closed (``smemtile ... >&-``)."""

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        raise OSError(errno.EBADF, "stdout is closed")


def _standard_streams() -> None:
    """fds 0-2 open (a closed one gets /dev/null, so no file we open can become stdout); a closed stdout raises
    on write; text the stream's encoding cannot hold is replaced (``?``), surrogates escaped, never an error."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)  # the lowest free fd: this one
    if sys.stdout is None:
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(_ClosedOutput()), encoding="utf-8")
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")
    for stream in (sys.stdout, sys.stderr):
        enc = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        try:
            stream.reconfigure(errors="backslashreplace" if enc == "utf8" else "replace")
        except (AttributeError, ValueError, OSError):
            pass
