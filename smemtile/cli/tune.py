"""``smemtile tune SPEC``: time the model's best configurations on the GPU, cached and resumable."""

from __future__ import annotations

from pathlib import Path

import click

from smemtile.cli.common import console, emit_json, json_option
from smemtile.errors import OutOfResources, SpecError
from smemtile.fileio import read_text, write_text_atomic
from smemtile.report.text import esc


@click.command(
    "tune",
    epilog="""\b
Examples:
  smemtile tune samples/sgemm_float4.yaml --top 6
  smemtile tune samples/transpose_32x32.yaml --top 4 --json
  smemtile tiles 4096 4096 4096 --top 12 --format yaml > space.yaml
  smemtile tune samples/sgemm_float4.yaml --top 3 --space space.yaml -o best.yaml
  smemtile tune samples/sgemm_float4.yaml --dry-run      # the plan and the cache, no GPU""",
)
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--top", "top", default="6", show_default=True, help="Time the model's top K configurations.")
@click.option("--space", "space", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Extra configurations: a YAML list of parameter mappings, or specs (smemtile tiles --format yaml).")  # fmt: skip
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the winner as a spec here (default: SPEC's name + .tuned.yaml in the current folder).")  # fmt: skip
@click.option("--cache", "cache_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Result cache (JSON lines; default ~/.cache/smemtile/tune.jsonl or $SMEMTILE_CACHE_DIR).")  # fmt: skip
@click.option("--force", is_flag=True, help="Measure again even when the cache has a result.")
@click.option("--dry-run", is_flag=True, help="Print the plan (candidates, model ranks) without a GPU.")
@click.option("--device", type=click.IntRange(0), default=0, show_default=True, help="CUDA device index.")
@click.option("--seed", type=int, default=1234, show_default=True, help="Seed of the random inputs.")
@json_option
def command(spec, top, space, out, cache_path, force, dry_run, device, seed, as_json) -> None:
    """Generate, compile, check and time SPEC's kernel in the model's top configurations on the GPU.

    The candidates are the tile model's top K for SPEC's problem (`smemtile tiles`), SPEC's own configuration
    and any --space. Each one is compiled for the device (NVRTC), checked against the float64 reference, then
    timed with CUDA events; a failing one is recorded as skipped with its reason and the sweep goes on.
    Results are cached on disk keyed by the kernel source, parameters, layouts, problem, device, driver and
    NVRTC versions, so an interrupted sweep resumes. The report ranks the measured configurations against the
    model (Spearman rank correlation, where the model's top-1 landed) and writes the winner as a spec.

    \b
    Exit codes: 0 a winner was found; 1 every configuration failed; 2 bad spec; 3 no CUDA GPU.
    """
    from smemtile.pipeline.tune import load_docs, plan, space_entries

    try:
        k = int(str(top))
    except ValueError:
        raise SpecError(f"expected a positive integer, got {top!r}", key="--top") from None
    if k < 0:
        raise SpecError(f"must not be negative, got {k}", key="--top")
    # fileio first: a regular file (never a FIFO or /dev/zero), at most 1 MiB, UTF-8; then the YAML parser
    read_text(spec, what="spec")
    if space:
        read_text(space, what="--space file", key="--space")
    docs = load_docs(spec)
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise SpecError("expected one spec document (a mapping)", source=str(spec))
    doc = docs[0]
    from smemtile.pipeline.specs import resolve

    resolve(doc, str(spec))  # validate the spec itself first: bad input is exit 2
    extra = space_entries(space) if space else None
    runner = None
    arch = None
    if not dry_run:
        from smemtile.gpu.tune import GpuRunner

        runner = GpuRunner(device, seed)  # NoDevice -> exit 3, one line
        arch = runner.arch.name
    family, problem, cands = plan(doc, str(spec), top=k, space=extra, arch=arch)
    doc_out = {"spec": str(spec), "family": family, "problem": problem, "arch": arch or doc.get("arch"),
               "candidates": [c.to_dict() for c in cands]}  # fmt: skip
    if dry_run:
        _dry_run(doc_out, cache_path, as_json)
        return
    from smemtile.cache import open_cache
    from smemtile.pipeline.tune import summarize, sweep

    cache = open_cache(cache_path, warn=lambda msg: click.echo(f"smemtile: warning: {msg}", err=True))
    cache_file = cache.path
    with _progress(len(cands), quiet=as_json) as tick:
        rows = sweep(doc, str(spec), family, cands, runner, cache, force=force, progress=tick)
    summary = summarize(rows)
    doc_out.update(device=runner.dev.to_dict(), environment=runner.env, cache=str(cache_file), rows=rows,
                   summary=summary)  # fmt: skip
    if summary["best"] is not None:
        doc_out["winner_spec"] = str(_write_winner(doc, spec, family, summary["best"], out))
    if as_json:
        emit_json(doc_out)
    else:
        from smemtile.cli.common import console
        from smemtile.report.tiles import render_tune

        console().print(render_tune(doc_out))
    if summary["best"] is None:
        raise OutOfResources(
            f"every one of the {len(rows)} configurations failed; first: {rows[0].get('reason')}"
        )


def _write_winner(doc: dict, spec: Path, family: str, best: dict, out: Path | None) -> Path:
    import yaml

    from smemtile.pipeline.tune import respec

    target = out or Path.cwd() / f"{spec.stem}.tuned.yaml"
    new = respec(doc, family, best["params"], best.get("layouts"), str(spec))
    unit = "TFLOP/s" if best.get("unit") == "tflops" else "GB/s"
    head = (f"# smemtile tune {spec}: winner {best['label']}, {best['time_ms']:.4f} ms median, "
            f"{best['value']:.1f} {unit}\n")  # fmt: skip
    text = head + yaml.safe_dump(new, sort_keys=False, default_flow_style=None, width=120)
    return write_text_atomic(target, text, key="-o", inputs=[spec])  # fileio: O_EXCL temp file, fsync, rename


def _dry_run(doc_out: dict, cache_path, as_json: bool) -> None:
    if as_json:
        emit_json({**doc_out, "dry_run": True})
        return
    con = console()
    problem = ", ".join(f"{k}={v}" for k, v in doc_out["problem"].items())
    con.print(f"[bold]smemtile tune --dry-run[/] {esc(doc_out['spec'])}: {esc(doc_out['family'])} "
              f"{esc(problem)} on {esc(doc_out['arch'])}")  # fmt: skip
    for i, c in enumerate(doc_out["candidates"], 1):
        pred = f"{c['predicted']:.1f}" if c["predicted"] is not None else "-"
        rank = c["model_rank"] if c["model_rank"] is not None else "-"
        con.print(f"  {i:>2}. {esc(c['label']):<34} \\[{esc(c['source'])}] model #{rank}, predicted {pred}")
    con.print("Run without --dry-run on a GPU to compile, check and time them.")


class _progress:
    """A rich progress bar with ETA on stderr (stdout stays clean for --json)."""

    def __init__(self, total: int, quiet: bool = False):
        self.total, self.quiet = total, quiet

    def __enter__(self):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          TextColumn("ETA"), TimeRemainingColumn(), console=console(stderr=True), transient=self.quiet)  # fmt: skip
        self.p.__enter__()
        self.task = self.p.add_task("tuning", total=self.total)
        return self._tick

    def _tick(self, row: dict) -> None:
        state = "cached" if row.get("cached") else row.get("status")
        self.p.update(self.task, advance=1, description=f"{esc(row['label'][:40])} {state}")

    def __exit__(self, *exc):
        return self.p.__exit__(*exc)
