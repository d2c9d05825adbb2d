"""``smemtile tune SPEC...``: time the model's best configurations on one or many GPUs, cached and resumable."""

from __future__ import annotations

import os
from pathlib import Path

import click

from smemtile.cli.common import console, emit_json, json_option
from smemtile.errors import OutOfResources, SpecError
from smemtile.fileio import check_outputs, printable, write_text_atomic
from smemtile.report.text import esc


@click.command(
    "tune",
    short_help="Time the model's top configurations on GPUs.",
    epilog="""\b
Examples:
  smemtile tune samples/sgemm_float4.yaml --top 6
  smemtile tune samples/transpose_32x32.yaml --top 4 --json
  smemtile tiles 4096 4096 4096 --top 12 --format yaml > space.yaml
  smemtile tune samples/sgemm_float4.yaml --top 3 --space space.yaml -o best.yaml
  smemtile tune samples/sgemm_default.yaml --executor dask --gpus all      # one worker per GPU
  smemtile tune samples/sgemm_default.yaml --shapes shapes.yaml --executor dask://10.0.0.5:8786 -o tuned/
  smemtile tune samples/sgemm_float4.yaml --dry-run      # the plan and the cache, no GPU""",
)
@click.argument("specs", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--shapes",
    "shapes",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Problems to sweep: a YAML list of problem keys ([{M: 4096, N: 4096, K: 4096}, ...]) for every SPEC.",
)
@click.option(
    "--top",
    "top",
    type=click.IntRange(0),
    default=6,
    show_default=True,
    help="Time the model's top K configurations.",
)
@click.option(
    "--space",
    "space",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Extra configurations: a YAML list of parameter mappings, or specs (smemtile tiles --format yaml).",
)
@click.option(
    "--executor",
    default="local",
    show_default=True,
    metavar="local|dask|dask://HOST:PORT",
    help="local: this process times on one GPU while CPU processes compile; dask: a local Dask cluster with "
    "one worker per GPU; dask://HOST:PORT: the GPU workers of a running scheduler (pip install "
    "'smemtile[cluster]').",
)
@click.option(
    "--gpus", default="all", show_default=True, metavar="all|N", help="How many GPUs (GPU workers) to use."
)
@click.option(
    "--compile-workers",
    type=click.IntRange(1),
    default=None,
    help="CPU processes that prepare and compile (default: the CPU cores not given to a GPU, at most 32).",
)
@click.option(
    "-o",
    "--out",
    "out",
    type=click.Path(path_type=Path),
    default=None,
    help="Write the winner as a spec here (default: SPEC's name + .tuned.yaml in the current folder); "
    "with several problems a folder for one spec per problem.",
)
@click.option(
    "--cache",
    "cache_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Result cache (JSON lines; default ~/.cache/smemtile/tune.jsonl or $SMEMTILE_CACHE_DIR).",
)
@click.option("--force", is_flag=True, help="Measure again even when the cache has a result.")
@click.option("--dry-run", is_flag=True, help="Print the plan (candidates, model ranks) without a GPU.")
@click.option(
    "--device",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="CUDA device index (the local executor).",
)
@click.option("--seed", type=int, default=1234, show_default=True, help="Seed of the random inputs.")
@click.option(
    "--simulate",
    is_flag=True,
    help="Time nothing: each GPU worker is a simulated device with made-up deterministic times (tries "
    "a cluster's wiring without a GPU; cached under their own keys).",
)
@click.option(
    "--export",
    "export",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write one self-contained HTML page (FILE.html): the plan as a plot, and after a run predicted "
    "against measured with the rank correlation.",
)
@json_option
def command(
    specs,
    shapes,
    top,
    space,
    executor,
    gpus,
    compile_workers,
    out,
    cache_path,
    force,
    dry_run,
    device,
    seed,
    simulate,
    export,
    as_json,
) -> None:
    """Generate, compile, check and time each SPEC's kernel in the model's top configurations on the GPU.

    The candidates are the tile model's top K for each problem (`smemtile tiles`), the spec's own configuration
    and any --space; every SPEC and every --shapes entry is one problem. Candidates are prepared and compiled
    (NVRTC) on CPU processes while others are checked against the float64 reference and timed with CUDA events,
    one GPU worker per GPU. A failing one is recorded as skipped with its reason and the sweep goes on.
    Results stream into a cache keyed by the kernel source, parameters, layouts, problem, the device (name,
    UUID, clocks), driver and NVRTC versions, so an interrupted sweep resumes; a GPU worker that dies loses
    only the candidates it was timing, which are timed elsewhere. Each result records the host, device, SM clock
    and the spread of its runs; results from a throttled device are timed again, and the closest rivals of each
    winner are timed again on the winner's device. The report ranks the measured configurations against the
    model (Spearman rank correlation, where the model's top-1 landed) and writes each winner as a spec.

    \b
    Exit codes: 0 a winner for every problem; 1 every configuration of a problem
    failed; 2 bad input (or dask missing for --executor dask); 3 no CUDA GPU.
    """
    from smemtile import api
    from smemtile.pipeline.executors import parse_gpus

    try:
        k = int(str(top))
    except ValueError:
        raise SpecError(f"expected a positive integer, got {top!r}", key="--top") from None
    if k < 0:
        raise SpecError(f"must not be negative, got {k}", key="--top")
    parse_gpus(gpus)
    if executor != "local" and not executor.startswith("dask"):
        raise SpecError(f"expected local, dask or dask://HOST:PORT, got {executor!r}", key="--executor")
    # every file once (stdin can be read only once), and no output that is an input or another output
    dashes = [str(p) for p in (*specs, space, shapes) if p is not None and str(p) == "-"]
    if len(dashes) > 1:
        raise SpecError(
            "stdin (-) can be read once; give at most one of SPEC, --space, --shapes as -", key="SPEC"
        )
    if out is not None and str(out).strip() in ("", "-"):
        raise SpecError(
            f"{'an empty name' if not str(out).strip() else '-'}: tune prints its report on stdout; "
            "give -o a file (one problem) or a folder (several)",
            key="-o",
        )
    from smemtile.cache import default_cache_path

    inputs = {("SPEC" if i == 0 else f"SPEC {i + 1}"): p for i, p in enumerate(specs)}
    inputs |= {"--space": space, "--shapes": shapes}
    check_outputs({"--cache": cache_path or default_cache_path(), "-o": out}, inputs)
    if export is not None:
        from smemtile.pipeline.page import check_output

        for p in (*specs, space, shapes, cache_path, out):
            if p is not None:
                check_output(export, p, key="--export")
    read_inputs = [p for p in (space, shapes) if p is not None]
    options = dict(top=k, space=space, shapes=shapes)
    if dry_run:
        result = api.tune(list(specs), dry_run=True, **options)
        _dry_run(result, as_json, (export, [*specs, *read_inputs]))
        return
    bar = _progress(quiet=as_json)
    with _terminated(cache_path), bar:
        result = api.tune(
            list(specs),
            **options,
            cache=cache_path,
            force=force,
            executor=executor,
            gpus=gpus,
            compile_workers=compile_workers,
            device=device,
            seed=seed,
            simulate=simulate,
            out=out if out is not None else True,  # default: <spec>.tuned.yaml here
            progress=bar.tick,
            warn=lambda msg: click.echo(f"smemtile: warning: {msg}", err=True),
        )
    _report(result, specs, read_inputs, as_json, export)


def _report(result, specs, inputs, as_json: bool, export=None) -> None:
    """The run's page, then its document or tables; exit 1 when every configuration of a problem failed."""
    doc = result.report
    docs = doc["problems"]
    _export(doc, export, [*specs, *inputs, Path(doc["cache"])])
    if as_json:
        emit_json(result.to_dict())
    else:
        from smemtile.report.tiles import render_tune, render_tune_run

        con = console()
        for d in docs:
            con.print(render_tune(d))
        con.print(render_tune_run(doc["run"]))
    failed = [d for d in docs if d["summary"]["best"] is None]
    if failed:
        d = failed[0]
        first = d["rows"][0].get("reason") if d["rows"] else "no candidates"
        raise OutOfResources(
            f"{d['spec']} {_label(d['problem'])}: every one of the {len(d['rows'])} "
            f"configurations failed; first: {first}"
        )


def _label(problem: dict) -> str:
    return "_".join(f"{k}{v}" for k, v in problem.items() if k not in ("alpha", "beta"))


class _Terminated(BaseException):
    """SIGTERM (``kill PID``) as an exception: the ``finally`` blocks run and close the executor."""


class _terminated:
    """While tuning: SIGTERM and Ctrl-C end the run cleanly. The executor is closed (smemtile.api.tune ends its
    compile processes and workers, the whole process tree), every result measured so far is already in the cache
    (each is appended and fsynced when it is measured), and one line says so; exit 130 (Ctrl-C) or 143."""

    def __init__(self, cache_path):
        self.cache_path = cache_path

    def __enter__(self):
        import signal

        def on_term(signum, frame):
            raise _Terminated()

        try:
            self.old = signal.signal(signal.SIGTERM, on_term)
        except ValueError:  # not the main thread (an API caller): leave the signals alone
            self.old = None
        return self

    def __exit__(self, kind, exc, tb):
        import signal
        import sys

        if self.old is not None:
            signal.signal(signal.SIGTERM, self.old)
        if kind is None or not issubclass(kind, (KeyboardInterrupt, _Terminated)):
            return False  # (smemtile.api.tune has ended the executor's processes as the exception passed)
        from smemtile.cache import default_cache_path

        what = "interrupted (Ctrl-C)" if issubclass(kind, KeyboardInterrupt) else "terminated (SIGTERM)"
        where = printable(self.cache_path or default_cache_path())
        try:
            click.echo(
                f"smemtile: tune {what}; the results measured so far are in the cache {where} (run the "
                "same command again to resume)",
                err=True,
            )
        except Exception:
            pass
        code = 130 if issubclass(kind, KeyboardInterrupt) else 143
        if self.old is None:
            sys.exit(code)
        # the command's own process, stopped by a signal: every result is already fsynced and the executor's
        # processes are ended, so leave now. A normal exit would run concurrent.futures' atexit hook, which
        # can write to the wakeup pipe of the executor the signal tore down (a Traceback after the one line)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _export(doc: dict, path: Path | None, inputs) -> None:
    """``--export FILE.html``: the plan's or the run's page, written atomically."""
    if path is None:
        return
    from smemtile.report.pages_tune import tune_page

    write_text_atomic(path, tune_page(doc), key="--export", inputs=[p for p in inputs if str(p) != "-"])


def _dry_run(result, as_json: bool, export=(None, ())) -> None:
    out = result.report
    docs = out["problems"]
    _export(out, *export)
    if as_json:
        emit_json(result.to_dict())
        return
    con = console()
    for d in docs:
        problem = ", ".join(f"{k}={v}" for k, v in d["problem"].items())
        con.print(
            f"[bold]smemtile tune --dry-run[/] {esc(d['spec'])}: {esc(d['family'])} "
            f"{esc(problem)} on {esc(d['arch'])}"
        )
        for i, c in enumerate(d["candidates"], 1):
            pred = f"{c['predicted']:.1f}" if c["predicted"] is not None else "-"
            rank = c["model_rank"] if c["model_rank"] is not None else "-"
            con.print(
                f"  {i:>2}. {esc(c['label']):<34} \\[{esc(c['source'])}] model #{rank}, predicted {pred}"
            )
    con.print("Run without --dry-run on a GPU to compile, check and time them.")


class _progress:
    """A rich progress bar on stderr (stdout stays clean for --json): compiled / timed / cached counts across
    all workers and the ETA from the rate of timings so far. It starts at smemtile.api.tune's first call of
    ``tick`` (the number of candidates, before anything is compiled)."""

    def __init__(self, quiet: bool = False):
        self.quiet, self.p = quiet, None

    def __enter__(self):
        return self

    def tick(self, s: dict) -> None:
        if self.p is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.p = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA {task.fields[eta]}"),
                console=console(stderr=True),
                transient=self.quiet,
            )
            self.p.__enter__()
            self.task = self.p.add_task("tuning", total=s["total"], eta="-")
        if "compiled" not in s:  # the start: nothing compiled yet
            return
        eta = "-" if s["eta_s"] is None else f"{int(s['eta_s']) // 60}:{int(s['eta_s']) % 60:02d}"
        desc = (
            f"compiled {s['compiled']} · timed {s['timed']} · cached {s['cached']} · skipped {s['skipped']}"
            f"{' · requeued ' + str(s['requeued']) if s['requeued'] else ''} · {s['gpus']} GPU"
            f"{'s' if s['gpus'] != 1 else ''}"
        )
        self.p.update(self.task, completed=s["done"], description=desc, eta=eta)

    def __exit__(self, *exc):
        return None if self.p is None else self.p.__exit__(*exc)
