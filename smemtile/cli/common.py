"""Shared option decorators and output helpers for the thin CLI commands."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from typing import Any

import click

from smemtile.errors import SmemtileError, SpecError


def json_option(f: Callable) -> Callable:
    """``--json``: one JSON document on stdout and nothing else there."""
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout instead of tables.")(f)


def arch_option(default: str | None = "sm_90") -> Callable:
    def deco(f: Callable) -> Callable:
        return click.option(
            "--arch",
            default=default,
            show_default=bool(default),
            help="Target architecture, e.g. sm_80, sm_90 (see `smemtile archs`); `auto` reads the GPU.",
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


def console():
    """A rich console on stdout (imported lazily to keep start-up fast)."""
    from rich.console import Console

    return Console(highlight=False)


class SmemtileGroup(click.Group):
    """A click group that turns library errors into one line on stderr and the documented exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SmemtileError as e:
            click.echo(f"smemtile: error: {e}", err=True)
            ctx.exit(e.exit_code)
