"""Shared option decorators and output helpers for the thin CLI commands."""

from __future__ import annotations

import errno
import json
import os
import re
import sys
import traceback
from collections.abc import Callable
from typing import Any

import click

from smemtile.errors import CompileError, SmemtileError, SpecError
from smemtile.families.registry import NAMES
from smemtile.model.dtypes import RANKED

# Fixed values of the options, spelled out so that `--help` lists them and shell completion offers them without
# importing the model at start-up; tests/test_cli_help.py checks each against the model's own table.
ARCH_TARGETS = (
    "sm_70",
    "sm_75",
    "sm_80",
    "sm_86",
    "sm_87",
    "sm_89",
    "sm_90",
    "sm_100",
    "sm_103",
    "sm_120",
    "sm_121",
    "sm_90a",
    "sm_100a",
    "sm_100f",
    "sm_103a",
    "sm_103f",
    "sm_120a",
    "sm_120f",
    "sm_121a",
    "sm_121f",
)  # smemtile.model.arch.known_targets()
AMD_TARGETS = ("gfx90a", "gfx942", "gfx950")  # smemtile.model.tiling_gpus.AMD_ARCHS
GEMM_DTYPES = RANKED  # the dtype table (smemtile.model.dtypes: pure, cheap to import)
FAMILY_NAMES = NAMES  # the registry (smemtile.families.registry: loads no family)


class Targets(click.Choice):
    """A choice that ``--help`` and shell completion list, which still takes the model's spellings of the same
    values (``90``, ``9.0``, ``SM_90``) and leaves checking the rest, with its message, to the model (so an
    unknown ``sm_61`` gets the model's line naming the known targets, exit 2)."""

    def __init__(self, choices, extra: tuple[str, ...] = ()) -> None:
        super().__init__([*choices, *extra], case_sensitive=False)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value).strip()
        return next((c for c in self.choices if str(c).lower() == text.lower()), text)

    def get_metavar(self, param: click.Parameter, *args: Any, **kwargs: Any) -> str:
        return "ARCH"  # short: the help text lists the values


def json_option(f: Callable) -> Callable:
    """``--json``: one JSON document on stdout and nothing else there."""
    return click.option(
        "--json", "as_json", is_flag=True, help="Print one JSON document on stdout instead of tables."
    )(f)


def arch_option(default: str | None = "sm_90") -> Callable:
    def deco(f: Callable) -> Callable:
        return click.option(
            "--arch",
            type=Targets(ARCH_TARGETS, ("auto",)),
            default=default,
            show_default=bool(default),
            help="Target architecture (see `smemtile archs`): "
            + ", ".join(ARCH_TARGETS)
            + "; `auto` reads the GPU.",
        )(f)

    return deco


_INT = re.compile(r"^\s*-?\d+\s*$")


def parse_int(text: object, key: str, lo: int | None = None) -> int:
    """A whole number given on the command line or in a CSV cell; SpecError naming ``key`` otherwise."""
    if not _INT.match(str(text)):
        raise SpecError(f"expected an integer, got {text!r}", key=key)
    n = int(str(text))
    if lo is not None and n < lo:
        raise SpecError(f"must be at least {lo}, got {n}", key=key)
    return n


def emit_json(doc: Any) -> None:
    """Write ``doc`` as JSON to stdout (numpy scalars and dataclasses with to_dict handled)."""

    def default(o: Any) -> Any:
        if hasattr(o, "to_dict"):
            return o.to_dict()
        if hasattr(o, "tolist"):
            return o.tolist()
        if hasattr(o, "item"):
            return o.item()
        raise TypeError(f"not JSON serialisable: {type(o).__name__}")

    sys.stdout.write(json.dumps(doc, indent=2, default=default))
    sys.stdout.write("\n")


def console(stderr: bool = False):
    """The rich console commands print through: width clamped, names never markup or control codes."""
    from smemtile.report.text import make_console

    return make_console(stderr=stderr)


# ---- errors: one line and the documented exit code, never a traceback (unless --debug) ------------------------

_OUTPUT_ERRNOS = {errno.ENOSPC, errno.EIO, errno.EBADF, errno.EPIPE, errno.EDQUOT, errno.EFBIG}


def debug_enabled(ctx: click.Context | None = None) -> bool:
    """``smemtile --debug ...`` or ``SMEMTILE_DEBUG=1``: show tracebacks for bug reports."""
    root = ctx.find_root() if ctx is not None else None
    if root is not None and root.params.get("debug"):
        return True
    return os.environ.get("SMEMTILE_DEBUG", "").strip().lower() not in ("", "0", "false", "no", "off")


def describe_error(e: BaseException) -> tuple[str, int]:
    """The one-line message and exit code for an exception that reached the command line."""
    if isinstance(e, SmemtileError):
        return str(e), e.exit_code
    if isinstance(e, RecursionError):
        return "the input is nested too deeply to process (Python's recursion limit); flatten it", 2
    if isinstance(e, MemoryError):
        return "the input needs more memory than this machine has; make it smaller", 2
    if isinstance(e, UnicodeDecodeError):
        return (
            f"the input is not UTF-8 text: byte 0x{e.object[e.start]:02x} at offset {e.start} ({e.reason})",
            2,
        )
    if isinstance(e, UnicodeEncodeError):
        return (
            f"cannot write {e.object[e.start]!r} in the output encoding {e.encoding}; "
            "set PYTHONIOENCODING=utf-8"
        ), 1
    if isinstance(e, OSError):
        reason = e.strerror.lower() if e.strerror else str(e)
        if e.filename is not None:
            return f"{e.filename}: {reason}", 2
        if e.errno in _OUTPUT_ERRNOS:
            return f"cannot write the output: {reason}", 1
        return reason, 1
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return (
        f"internal error: {type(e).__name__}{': ' + first if first else ''} (run with --debug for the "
        "traceback, and report it)",
        1,
    )


def error_line(message: str, multi_line: bool = False) -> str:
    """``smemtile: error: MESSAGE`` with every control character escaped; one line unless ``multi_line``."""
    from smemtile.fileio import printable

    if multi_line:
        return "smemtile: error: " + "\n".join(printable(ln) for ln in message.splitlines())
    return "smemtile: error: " + printable(message)


def report_error(e: BaseException, ctx: click.Context | None = None) -> int:
    """Print ``e`` as one line on stderr (the traceback first with --debug); the exit code to use."""
    message, code = describe_error(e)
    if debug_enabled(ctx):
        traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
    try:
        click.echo(error_line(message, multi_line=isinstance(e, CompileError)), err=True)
    except Exception:
        pass  # stderr itself is gone: the exit code still tells
    return code


# what each GPU command still does without a GPU: its one line says so (exit 3)
NO_GPU_HINTS = {
    "verify": "without a GPU, --compile-only builds it here (NVRTC: registers, spills, occupancy, checklist)",
    "tune": "without a GPU, --dry-run prints the plan here (the candidates and their model ranks)",
    "measure": "without a GPU, --predict-only gives the bank model's predictions here",
}


def _with_no_gpu_hint(e: BaseException, command: str | None) -> BaseException:
    """A NoDevice error of a GPU command, with what does run here appended (once)."""
    from smemtile.errors import NoDevice

    hint = NO_GPU_HINTS.get(command or "")
    if isinstance(e, NoDevice) and hint and hint not in str(e):
        return NoDevice(f"{e}; {hint}")
    return e


def _clamp_columns() -> None:
    """``COLUMNS`` beyond what a table can use (``COLUMNS=100000000``) would make every console that reads it,
    ours or not, pad lines of that width: clamp it once for the whole process."""
    from smemtile.report.text import MAX_WIDTH

    cols = os.environ.get("COLUMNS", "").strip()
    if cols.isdigit() and int(cols) > MAX_WIDTH:
        os.environ["COLUMNS"] = str(MAX_WIDTH)


class SmemtileGroup(click.Group):
    """A click group that turns every error into one line on stderr and the documented exit code."""

    def make_context(self, info_name, args, parent=None, **extra) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as e:  # the group's own options (``smemtile --foo``): one line as well
            click.echo(error_line(f"{e.format_message()} (see smemtile --help)"), err=True)
            sys.exit(e.exit_code)

    def invoke(self, ctx: click.Context) -> Any:
        _clamp_columns()
        try:
            return super().invoke(ctx)
        except click.UsageError as e:  # one line too, with where to read the usage
            where = e.ctx.command_path if e.ctx is not None else "smemtile"
            click.echo(error_line(f"{e.format_message()} (see {where} --help)"), err=True)
            ctx.exit(e.exit_code)
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise
        except BrokenPipeError:
            raise  # the reader left (`| head`): click ends quietly
        except Exception as e:
            ctx.exit(report_error(_with_no_gpu_hint(e, ctx.invoked_subcommand), ctx))
