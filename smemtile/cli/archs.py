"""``smemtile archs``: the architecture table and where every constant comes from."""

from __future__ import annotations

import click

from smemtile.cli.common import ARCH_TARGETS, Targets, console, emit_json, json_option


@click.command(
    "archs",
    short_help="The architecture table and its sources.",
    epilog="""\b
Examples:
  smemtile archs
  smemtile archs --arch sm_90 --json
  smemtile archs --arch auto      # the limits this machine's GPU reports""",
)
@click.option(
    "--arch",
    "only",
    type=Targets(ARCH_TARGETS, ("auto",)),
    help="Show one architecture: " + ", ".join(ARCH_TARGETS) + ", or auto to read the GPU's attributes.",
)
@json_option
def command(only: str | None, as_json: bool) -> None:
    """The per-architecture limits the occupancy model uses (sm_70 ... sm_121), with their sources.

    Threads, blocks, shared memory and registers per SM, the opt-in and reserved shared memory per block,
    the allocation unit and the carveout sizes the SM can be configured to.
    """
    from smemtile.model.arch import ARCHS

    if only is None:
        archs = list(ARCHS.values())
    else:
        from smemtile.gpu.device import resolve_arch

        archs = [resolve_arch(only)]
    if as_json:
        emit_json([a.to_dict() for a in archs])
    else:
        from smemtile.report.occupancy import render_archs

        console().print(render_archs(archs))
